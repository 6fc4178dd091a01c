//! bf16 GEMM on Intel AMX tiles (`tdpbf16ps`: a 16×16 f32 tile += a 16×32 bf16 tile times
//! a 32×16 bf16 tile, 16 384 flops per instruction), and the tile loop the int8 kernel
//! ([`super::int8`], `tdpbssd`: i32 += 16×64 i8 · 64×16 i8) shares.
//!
//! - **Availability** is decided at run time, once: CPUID leaf 7 must report AMX-TILE
//!   (EDX bit 24) and AMX-BF16 (EDX bit 22) or AMX-INT8 (bit 25), the OS must enable the tile state in XCR0
//!   (bits 17 and 18), and on Linux the process must be granted the XTILEDATA state
//!   through `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)` — without the grant the
//!   first tile instruction raises SIGILL. Other operating systems: not used.
//! - **Micro-kernel**: 2×2 tiles of C (a 32×32 f32 block in tmm0–3), two A tiles (tmm4–5,
//!   16 rows × 32 sums each) and two B tiles (tmm6–7, 16 sum pairs × 16 columns × 2), so
//!   each A and B tile load feeds two `tdpbf16ps`. Per chunk both B tiles are loaded
//!   first, then the first A tile feeds two products while the second loads (measured
//!   ~4% faster at 1024³ on one thread than alternating A and B loads). The whole sum loop runs inside one
//!   `asm!` block ([`tile_product`]), so tile contents never live across Rust code; only
//!   the tile configuration (palette 1, every tile 16 rows × 64 bytes) is loaded once per
//!   thread and block of work ([`load_config`]) and released after it ([`release`]).
//! - **Packing**: A's panel is `[16-row strip][32-sum chunk][16 rows][32 sums]` (one tile
//!   per 1 KiB, row stride 64 bytes); B's is the VNNI pair layout
//!   `[16-column strip][sum pair][16 columns][2]`, so chunk `c` of a strip is one tile.
//!
//! Numerics (Intel SDM, TDPBF16PS): products of bf16 pairs accumulated in f32 with
//! round-to-nearest-even; bf16 denormal inputs are treated as zero and f32 denormal
//! results flushed to zero (MXCSR is ignored). The order of the sum within one
//! instruction is the hardware's; across instructions it is fixed by the blocking.

use super::lowp_drive::{CTile, Kernel, Src};
use std::sync::OnceLock;

/// Whether AMX-BF16 tiles can be used by this process (detected and, on Linux, the
/// tile-data permission requested once).
pub fn available() -> bool {
    detected().0
}

/// Whether AMX-INT8 tiles (`tdpbssd`) can be used by this process.
pub fn int8_available() -> bool {
    detected().1
}

/// (AMX-BF16, AMX-INT8) usable, decided once per process.
fn detected() -> (bool, bool) {
    static OK: OnceLock<(bool, bool)> = OnceLock::new();
    *OK.get_or_init(detect)
}

#[cfg(target_os = "linux")]
fn detect() -> (bool, bool) {
    use std::arch::x86_64::{__cpuid_count, _xgetbv};
    let max_leaf = __cpuid_count(0, 0).eax;
    if max_leaf < 7 {
        return (false, false);
    }
    let l7 = __cpuid_count(7, 0);
    let amx_bf16 = l7.edx & (1 << 22) != 0;
    let amx_tile = l7.edx & (1 << 24) != 0;
    let amx_int8 = l7.edx & (1 << 25) != 0;
    let osxsave = __cpuid_count(1, 0).ecx & (1 << 27) != 0;
    if !(amx_tile && (amx_bf16 || amx_int8) && osxsave) {
        return (false, false);
    }
    // SAFETY: OSXSAVE is set, so XGETBV with ECX = 0 is enabled.
    let xcr0 = unsafe { _xgetbv(0) };
    if xcr0 & (0b11 << 17) != (0b11 << 17) || !request_tile_permission() {
        return (false, false);
    }
    (amx_bf16, amx_int8)
}

#[cfg(not(target_os = "linux"))]
fn detect() -> (bool, bool) {
    (false, false)
}

/// Ask Linux for the XTILEDATA state component (dynamic since Linux 5.16) and confirm it
/// was granted. Process-wide and idempotent.
#[cfg(target_os = "linux")]
fn request_tile_permission() -> bool {
    const ARCH_GET_XCOMP_PERM: libc::c_long = 0x1022;
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with these codes only reads its integer argument (REQ) or
    // writes one u64 through the pointer we pass (GET); the u64 lives on this stack frame.
    unsafe {
        if libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) != 0
        {
            return false;
        }
        let mut mask: u64 = 0;
        if libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_GET_XCOMP_PERM,
            &mut mask as *mut u64,
        ) != 0
        {
            return false;
        }
        mask & (1 << XFEATURE_XTILEDATA) != 0
    }
}

/// The 64-byte tile configuration (palette 1): tiles 0–7 all 16 rows × 64 bytes.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    _reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

static CONFIG: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    _reserved: [0; 14],
    colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// The 2 × 2-tile product shared by the bf16 (`tdpbf16ps`) and int8 (`tdpbssd`) kernels:
/// C (32 × 32 f32 or i32, four tiles) starts from `cin` (or zero when it is null), gains
/// `chunks` products of A tiles (`a[0]`, `a[1]`: the panel's two 16-row strips) and B
/// tiles (`a[2]`, `a[3]`: its two 16-column strips), each tile 1 KiB with 64-byte rows and
/// the next chunk 1 KiB further, and is stored to `cout`. Row strides in bytes.
///
/// # Safety
/// This thread's tile configuration must be loaded ([`Kernel::begin`] of an AMX kernel);
/// `chunks >= 1`; the four panels must hold `chunks` tiles each from their pointers;
/// `cin` (unless null) must be readable and `cout` writable as 32 rows of 128 bytes with
/// their (positive) row strides. The tile registers are used only inside this call.
pub(crate) unsafe fn tile_product(
    int8: bool,
    chunks: usize,
    [a0, a1, b0, b1]: [*const u8; 4],
    (cin, ld_in): (*const u8, isize),
    (cout, ld_out): (*mut u8, isize),
) {
    macro_rules! product {
        ($dot:literal) => {
            std::arch::asm!(
                "test {cin}, {cin}",
                "jz 2f",
                // {s} = the lower 16 rows of the input tile.
                "mov {s}, {ldin}",
                "shl {s}, 4",
                "add {s}, {cin}",
                "tileloadd tmm0, [{cin} + {ldin}*1]",
                "tileloadd tmm1, [{cin} + {ldin}*1 + 64]",
                "tileloadd tmm2, [{s} + {ldin}*1]",
                "tileloadd tmm3, [{s} + {ldin}*1 + 64]",
                "jmp 3f",
                "2:",
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "3:",
                "mov {s}, 64",
                "4:",
                "tileloadd tmm6, [{b0} + {s}*1]",
                "tileloadd tmm7, [{b1} + {s}*1]",
                "tileloadd tmm4, [{a0} + {s}*1]",
                concat!($dot, " tmm0, tmm4, tmm6"),
                concat!($dot, " tmm1, tmm4, tmm7"),
                "tileloadd tmm5, [{a1} + {s}*1]",
                concat!($dot, " tmm2, tmm5, tmm6"),
                concat!($dot, " tmm3, tmm5, tmm7"),
                "add {a0}, 1024",
                "add {a1}, 1024",
                "add {b0}, 1024",
                "add {b1}, 1024",
                "dec {n}",
                "jnz 4b",
                // {s} = the lower 16 rows of the output tile.
                "mov {s}, {ldout}",
                "shl {s}, 4",
                "add {s}, {cout}",
                "tilestored [{cout} + {ldout}*1], tmm0",
                "tilestored [{cout} + {ldout}*1 + 64], tmm1",
                "tilestored [{s} + {ldout}*1], tmm2",
                "tilestored [{s} + {ldout}*1 + 64], tmm3",
                cin = in(reg) cin,
                ldin = in(reg) ld_in,
                cout = in(reg) cout,
                ldout = in(reg) ld_out,
                a0 = inout(reg) a0 => _,
                a1 = inout(reg) a1 => _,
                b0 = inout(reg) b0 => _,
                b1 = inout(reg) b1 => _,
                n = inout(reg) chunks => _,
                s = out(reg) _,
                options(nostack),
            )
        };
    }
    // SAFETY: the caller's contract covers every address the loop forms; the loop counter
    // starts at chunks >= 1 and is decremented to zero.
    unsafe {
        if int8 {
            product!("tdpbssd")
        } else {
            product!("tdpbf16ps")
        }
    }
}

/// Load the tile configuration on this thread.
///
/// # Safety
/// AMX must be available and permitted ([`available`] or [`int8_available`]).
pub(crate) unsafe fn load_config() {
    // SAFETY: the caller guarantees the tile state is enabled and permitted; CONFIG is a
    // valid 64-byte palette-1 config.
    unsafe {
        std::arch::asm!("ldtilecfg [{0}]", in(reg) &CONFIG as *const TileConfig, options(nostack, readonly))
    };
}

/// Return the tiles to their initial state on this thread.
///
/// # Safety
/// As [`load_config`].
pub(crate) unsafe fn release() {
    // SAFETY: tile instructions are permitted (caller); TILERELEASE touches no memory.
    unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
}

/// The AMX-BF16 micro-kernel (construct only when [`available`]).
pub(crate) struct Amx(());

impl Amx {
    /// The kernel, if this process may use AMX tiles.
    pub(crate) fn new() -> Option<Amx> {
        available().then_some(Amx(()))
    }
}

/// Sums per tile (32 bf16 = 64 bytes per tile row).
const CHUNK: usize = 32;

/// Pack rows `0..mb`, sums `0..kb` of `a` as `[16-row strip][32-sum chunk][16][32]` over
/// `mb` rounded up to 32 rows and `kpad` sums (zeros past `mb` and `kb`). A row-major
/// chunk row is one masked 64-byte load (the mask zero-fills the sum tail); a full tile of
/// a column-major A (a transposed activation, as in a weight gradient) is transposed in
/// registers.
///
/// # Safety
/// The `mb × kb` block of `a` must be readable; the CPU must have AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack_a_tiles(a: Src, mb: usize, kb: usize, kpad: usize, dst: &mut [u16]) {
    use std::arch::x86_64::*;
    let chunks = kpad / CHUNK;
    let rows = mb.next_multiple_of(32);
    assert!(dst.len() >= rows * kpad, "AMX pack_a: buffer too small");
    for s in 0..rows / 16 {
        for c in 0..chunks {
            let tile = &mut dst[(s * chunks + c) * 512..(s * chunks + c + 1) * 512];
            let (i0, k0) = (16 * s, c * CHUNK);
            if a.rs == 1 && a.cs != 1 && i0 + 16 <= mb && k0 + CHUNK <= kb {
                // SAFETY: rows i0..i0+16 <= mb, sums k0..k0+32 <= kb are inside the block,
                // and each sum's 16 rows are contiguous (unit row stride); the tile holds
                // 512 u16.
                unsafe { transpose_tile(a.at(i0, k0), tile) };
                continue;
            }
            for (r, row) in tile.chunks_exact_mut(CHUNK).enumerate() {
                let i = i0 + r;
                let len = if i < mb {
                    CHUNK.min(kb.saturating_sub(k0))
                } else {
                    0
                };
                if len == 0 {
                    row.fill(0);
                } else if a.cs == 1 {
                    let mask = if len == CHUNK {
                        u32::MAX
                    } else {
                        (1u32 << len) - 1
                    };
                    // SAFETY: row i < mb, sums k0..k0 + len <= kb are contiguous elements of
                    // the block; the masked load reads only those; `row` has 32 u16.
                    unsafe {
                        let v = _mm512_maskz_loadu_epi16(mask, a.at(i, k0).ptr as *const i16);
                        _mm512_storeu_si512(row.as_mut_ptr() as *mut __m512i, v);
                    }
                } else {
                    for (t, v) in row.iter_mut().enumerate() {
                        *v = if t < len {
                            // SAFETY: (i, k0 + t) is inside the mb × kb block when t < len.
                            unsafe { a.get(i, k0 + t) }
                        } else {
                            0
                        };
                    }
                }
            }
        }
    }
}

/// One A tile from a column-major source: `tile[r][t] = a(r, t)` for 16 rows × 32 sums.
/// Sum pairs are interleaved into 32-bit words (lane r of word vector q holds
/// `a(r, 2q), a(r, 2q + 1)`), then the 16 × 16 word matrix is transposed (unpack 32, unpack
/// 64, two 128-bit lane shuffles).
///
/// # Safety
/// `a` must be readable over 16 rows × 32 sums with unit row stride; AVX-512 F/BW present.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn transpose_tile(a: Src, tile: &mut [u16]) {
    use std::arch::x86_64::*;
    assert!(tile.len() >= 512);
    // SAFETY: INTERLEAVE holds 32 u16; each sum's 16 rows are contiguous (caller).
    unsafe {
        let idx = _mm512_loadu_si512(super::bf16_avx512::INTERLEAVE.as_ptr() as *const __m512i);
        let mut v = [_mm512_setzero_si512(); 16];
        for (q, vq) in v.iter_mut().enumerate() {
            let lo = _mm256_loadu_si256(a.at(0, 2 * q).ptr as *const __m256i);
            let hi = _mm256_loadu_si256(a.at(0, 2 * q + 1).ptr as *const __m256i);
            *vq = _mm512_permutex2var_epi16(
                _mm512_castsi256_si512(lo),
                idx,
                _mm512_castsi256_si512(hi),
            );
        }
        let mut t = [_mm512_setzero_si512(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
        }
        for i in 0..4 {
            v[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
            v[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
            v[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
            v[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
        }
        for g in 0..2 {
            for x in 0..4 {
                let (p, q) = (v[8 * g + x], v[8 * g + 4 + x]);
                t[8 * g + x] = _mm512_shuffle_i32x4::<0x88>(p, q);
                t[8 * g + 4 + x] = _mm512_shuffle_i32x4::<0xdd>(p, q);
            }
        }
        let out = tile.as_mut_ptr() as *mut __m512i;
        for x in 0..8 {
            _mm512_storeu_si512(out.add(x), _mm512_shuffle_i32x4::<0x88>(t[x], t[8 + x]));
            _mm512_storeu_si512(out.add(8 + x), _mm512_shuffle_i32x4::<0xdd>(t[x], t[8 + x]));
        }
    }
}

impl Kernel for Amx {
    type E = u16;
    type P = u16;
    type C = f32;
    const MR: usize = 32;
    const NR: usize = 32;
    const KU: usize = CHUNK;
    // Measured on a 2-core Sapphire Rapids VM (gemm_lowp --cpu-time, 512³–2048³): one
    // micro-kernel call per 2048 sums beat 512 and 1024 (fewer C tile round trips),
    // 128-row A blocks beat 64 and 256.
    const KC: usize = 2048;
    const KS: usize = 2048;
    const MC: usize = 128;
    const NC: usize = 512;

    unsafe fn pack_a(&self, a: Src, mb: usize, kb: usize, kpad: usize, dst: &mut [u16]) {
        // SAFETY: forwarded contract; the AMX kernel exists only on CPUs with AVX-512 BW.
        unsafe { pack_a_tiles(a, mb, kb, kpad, dst) }
    }

    unsafe fn pack_b(&self, b: Src, kb: usize, nb: usize, kpad: usize, dst: &mut [u16]) {
        // SAFETY: forwarded contract (the kb × nb block of b is readable).
        unsafe { super::bf16_avx512::pack_b_pairs::<16>(b, kb, nb, kpad, Self::NR, dst) }
    }

    unsafe fn micro(
        &self,
        (k0, kb, kpad): (usize, usize, usize),
        a: *const u16,
        b: *const u16,
        c: CTile,
    ) {
        let chunks = kb / CHUNK;
        // Chunk k0/32 of the first strip of each panel: A's tiles are 512 elements apart
        // within a strip, B's 16 pairs (512 elements) too. The second strip is 16 rows (A)
        // or 16 columns (B) further: kpad · 16 elements.
        // SAFETY: each panel holds 32 · kpad elements and k0 + kb <= kpad (caller), so all
        // four starting points and the `chunks` tiles after each are inside it.
        let (a, b, a1, b1) = unsafe {
            let (a0, b0) = (a.add(k0 * 16), b.add(k0 * 16));
            (a0, b0, a0.add(16 * kpad), b0.add(16 * kpad))
        };
        // SAFETY: forwarded contract (see tile_product): the panels hold `chunks` tiles per
        // strip from these starting points; C tiles as the caller guarantees.
        unsafe {
            tile_product(
                false,
                chunks,
                [
                    a as *const u8,
                    a1 as *const u8,
                    b as *const u8,
                    b1 as *const u8,
                ],
                (c.inp as *const u8, c.ld_in * 4),
                (c.out as *mut u8, c.ld_out * 4),
            )
        }
    }

    fn begin(&self) {
        // SAFETY: `available()` held when this kernel was built (Amx::new).
        unsafe { load_config() }
    }

    fn end(&self) {
        // SAFETY: as in begin.
        unsafe { release() }
    }
}
