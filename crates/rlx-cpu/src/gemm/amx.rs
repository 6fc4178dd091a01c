//! bf16 GEMM on Intel AMX tiles (`tdpbf16ps`: a 16×16 f32 tile += a 16×32 bf16 tile times
//! a 32×16 bf16 tile, 16 384 flops per instruction), and the tile loop the int8 kernel
//! (`int8.rs`, `tdpbssd`: i32 += 16×64 i8 · 64×16 i8) shares.
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
//!   A row-major A whose rows are whole cache lines is not packed at all: its tiles are
//!   loaded where they lie, with A's row stride ([`Kernel::a_in_place`]; 8–13% of a 1024³
//!   product on one thread, the packing it saves).
//! - **What a tile load costs** (measured 2026-12-03 on a 2-vCPU Sapphire Rapids-class VM,
//!   thread CPU time): a 16 × 64-byte `tileloadd` from L1 takes ~2.2 ns and a
//!   `tdpbf16ps` ~4.7 ns, so with every operand in L1 this 2 × 2 loop runs at ~2 850
//!   GFLOP/s against ~3 400 for the products alone; a load streamed from L2 takes ~5.7 ns.
//!   A tile whose rows do not start on a 64-byte boundary loads in ~14 ns (6×), and stores
//!   in ~11 ns instead of ~4: hence A is read in place only when its rows are whole lines,
//!   and the packing buffers are 64-byte aligned.
//! - **Blocking** ([`Kernel::blocking`]): row panels of A outer and B's column panels
//!   inner within a block ([`Blocking::rows_outer`]), B's tiles loaded with the streaming
//!   hint (`tileloaddt1`: each is read once per A panel), and, with A in place, 1024 sums
//!   per call, so a 1024-sum product keeps C in tiles from start to end and C's rows are
//!   prefetched for writing one per chunk inside the sum loop ([`tile_product`]) rather
//!   than 96 prefetches in a burst before it. At 1024³ on one thread with A in place this
//!   was ~5–10% faster than B's panels outer, 256 sums per call and the burst (best of
//!   alternating runs on a loaded machine); with A packed all orders measured alike.
//!   Packed A with at most 1024 sums runs calls of 512 sums instead
//!   ([`Blocking::kc_short`]): the call's 32 KiB A panel then stays in L1 across the row
//!   panel's calls, and only B's tiles come from L2 (14% faster at 1024³ on one thread).
//!   `RLX_AMX_BLOCKING` overrides the blocking for such measurements ([`tuning`]).
//!
//! Numerics (Intel SDM, TDPBF16PS): products of bf16 pairs accumulated in f32 with
//! round-to-nearest-even; bf16 denormal inputs are treated as zero and f32 denormal
//! results flushed to zero (MXCSR is ignored). The order of the sum within one
//! instruction is the hardware's; across instructions it is fixed by the sum steps: each
//! C element's tile accumulates its 32-sum chunks in order from k = 0 (partial sums are
//! stored and reloaded exactly between calls), so the loop order, the sums per call and
//! the load hints change no bit of the result.
//!
//! Tried without gain (issue #17, 2026-12-03, 1024³ bf16 on one thread of the 2-vCPU
//! Sapphire Rapids-class VM; variants alternated in one process, best of 3 per round,
//! medians of 7–11 rounds; the default read 1090–1270 GFLOP/s as the load changed):
//! - where the time goes: packing B 180–195 µs of a ~1.7 ms product (skipping it, for
//!   timing only: +11%; it is bound by reading B's source, and grouping 4–32 row pairs per
//!   walk or packing each panel just before its first use, 1105 against 1197, lost);
//!   packing A 120–130 µs, which reading it in place saves. A tile-loop microbenchmark (an
//!   A panel of 16 chunks in L1, B's 1 MiB streamed from L2 with the T1 hint) ran
//!   2150–2250 GFLOP/s with C stored to a contiguous buffer and 1700–1850 storing into a
//!   1024-column f32 C (PREFETCHW, PREFETCHT1 or no prefetch alike); a 32-chunk A panel
//!   (64 KiB, past L1) ~1430.
//! - PREFETCHT0 of the next chunk's B tiles (32 lines, 1 or 2 chunks ahead): 1081/1093
//!   against 1092 with A in place; 880 against 1064 with A packed (it evicts A's panel).
//!   Of in-place A's next chunk (32 rows): 1024/980 against 1085.
//! - Per chunk, loading A0 and B0 before the first product and B1 before the second
//!   (instead of both B tiles, then A0): 1047/1084 against 1061/1085.
//! - C: the final tiles through a 4 KiB scratch and copied (plain stores 1107, streaming
//!   1138, against 1218); a row panel's tiles written after the panel from the block
//!   buffer (plain 1041, streaming 1171, against 1234); no in-loop PREFETCHW 1083–1142
//!   against 1085–1123. C rows 4160 bytes apart instead of 4096 (not a choice we have, to
//!   size the 4 KiB-aliasing cost) gained 1–6%.
//! - Blocking: packed A at 128/256/512/1024 sums per call 886/971/1101/1022 against 1130;
//!   column panels outer with 256–1024 sums 853–1015 against 1159; `nc` 256 1185, 1024
//!   1100 against 1266 at 512; `mc` 64/256 1278/1282 (no change).
//! - Packing the next block of B's columns a pair of rows at a time between the current
//!   block's calls, into a second buffer, so that the core's loads and shuffles run while
//!   the tile unit works (2026-12-04, same VM, four alternated rounds of rlx-bench's W4):
//!   one thread 1113–1216 against 1243–1299 without it, two threads 1836–2019 against
//!   2125–2247; with `nc` 256 (both blocks in 1 MiB) 1098–1141 against 1187–1206. The
//!   tile loads are what this loop waits on, and the packing's reads and writes compete
//!   with them for L2.

use super::lowp_drive::{Blocking, CTile, Kernel, Src};
use std::sync::OnceLock;

mod tile;

pub(crate) use tile::{ATiles, TileC, TileOp, TileOperands, load_config, release, tile_product};

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

/// The AMX-BF16 micro-kernel (construct only when [`available`]).
pub(crate) struct Amx {
    blocking: Blocking,
    /// Whether A may be read in place ([`Kernel::a_in_place`]).
    in_place: bool,
    /// Load B's tiles with the streaming hint (`tileloaddt1`) when the driver walks row
    /// panels outer ([`CTile::b_streamed`]): each B tile is then read once per A panel
    /// while A's panel should stay in L1 (measured 6% faster at 1024³ on one thread with A
    /// in place; no change with A packed).
    stream_b: bool,
}

impl Amx {
    /// The kernel, if this process may use AMX tiles.
    pub(crate) fn new() -> Option<Amx> {
        available().then(|| {
            let (blocking, in_place, stream_b) = *tuning();
            Amx {
                blocking,
                in_place,
                stream_b,
            }
        })
    }

    /// [`tile_product`] of the bf16 strips `a` and `b` (`chunks` tiles each, A laid out as
    /// `a_tiles` says) into `c`, B's tiles streamed when this kernel allows it and the
    /// driver's loop order reads each of them once ([`CTile::b_streamed`]).
    ///
    /// # Safety
    /// As [`tile_product`].
    #[inline(always)]
    unsafe fn bf16_product(
        &self,
        a: [*const u16; 2],
        b: [*const u16; 2],
        a_tiles: ATiles,
        chunks: usize,
        c: &CTile,
    ) {
        let op = TileOp {
            int8: false,
            stream_b: self.stream_b && c.b_streamed,
        };
        let tiles = TileOperands {
            a: [a[0] as *const u8, a[1] as *const u8],
            b: [b[0] as *const u8, b[1] as *const u8],
            a_tiles,
            chunks,
        };
        // SAFETY: forwarded contract.
        unsafe { tile_product(op, tiles, TileC::of(c)) }
    }
}

/// The blocking of [`Amx`]: the measured defaults, or `RLX_AMX_BLOCKING` (a measurement
/// switch for A/B runs in one process: comma-separated `kc=`, `kci=` (KC with A in
/// place), `kcs=` (KC over packed A for super-blocks of at most 1024 sums), `mc=`, `nc=`, `rows=0|1` (row panels outer), `inplace=0|1`, `t1=0|1` (B tiles
/// loaded with the streaming hint); values that break the driver's rules are ignored), read
/// once per process.
fn tuning() -> &'static (Blocking, bool, bool) {
    static T: OnceLock<(Blocking, bool, bool)> = OnceLock::new();
    T.get_or_init(|| {
        let mut b = Blocking {
            kc: <Amx as Kernel>::KC,
            kc_in_place: <Amx as Kernel>::KC_IN_PLACE,
            kc_short: <Amx as Kernel>::KC_SHORT,
            mc: <Amx as Kernel>::MC,
            nc: <Amx as Kernel>::NC,
            rows_outer: ROWS_OUTER,
        };
        let mut in_place = IN_PLACE;
        let mut stream_b = None;
        let spec = std::env::var("RLX_AMX_BLOCKING").unwrap_or_default();
        for item in spec.split(',') {
            let Some((key, v)) = item.split_once('=') else {
                continue;
            };
            let Ok(v) = v.trim().parse::<usize>() else {
                continue;
            };
            let ks = <Amx as Kernel>::KS;
            let sums = v > 0 && v.is_multiple_of(CHUNK) && ks.is_multiple_of(v);
            match key.trim() {
                "kc" if sums => b.kc = v,
                "kci" if sums => b.kc_in_place = v,
                "kcs" if sums => b.kc_short = v,
                "mc" if v > 0 && v.is_multiple_of(32) => b.mc = v,
                "nc" if v > 0 && v.is_multiple_of(32) => b.nc = v,
                "rows" => b.rows_outer = v != 0,
                "inplace" => in_place = v != 0,
                "t1" => stream_b = Some(v != 0),
                _ => {}
            }
        }
        (b, in_place, stream_b.unwrap_or(b.rows_outer))
    })
}

/// Default loop order of [`Amx`] (see [`Blocking::rows_outer`]).
const ROWS_OUTER: bool = true;
/// Whether [`Amx`] reads suitable A in place by default.
const IN_PLACE: bool = true;

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
    // Measured on a 2-core Sapphire Rapids VM (thread CPU time, best of runs, 1024³–2048³):
    // with A packed, one micro-kernel call per 2048 sums beat 256, 512 and 1024 by 3–5%
    // (fewer C tile round trips); with A read in place, 256 sums beat 2048 by 3–5% (the
    // call's 16 KiB B panel stays in L1 for the 4 A panels of a block). 128-row A blocks
    // beat 64 and 256.
    const KC: usize = 2048;
    const KC_IN_PLACE: usize = 1024;
    // Up to 1024 sums over packed A, calls of 512 sums: the call's 32 KiB A panel then
    // stays in L1 while the row panel's 16 B panels stream past (tile loads from L2 had
    // bounded the 2048-sum call). 1024³, one thread, A packed (malloc placement), medians
    // of 6-8 alternated runs on the 2-vCPU SPR VM: 1157 GFLOP/s against 1013 at 2048 sums
    // (256: 1039, 1024: 1046). At 2048³ (2048-sum super-blocks) 2048 stays faster
    // (~780 against ~710), so longer super-blocks keep KC.
    const KC_SHORT: usize = 512;
    const PREFETCHES_C: bool = true;
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
        unsafe { self.bf16_product([a, a1], [b, b1], ATiles::PACKED, chunks, &c) }
    }

    fn blocking(&self) -> Blocking {
        self.blocking
    }

    fn a_in_place(&self, a: Src, mb: usize, kb: usize) -> bool {
        let row_bytes = a.rs.unsigned_abs() * 2;
        // Tile rows must be whole cache lines (64-byte aligned rows): a row split over two
        // lines doubles the lines each tile load touches. Rows 4 KiB apart (or a multiple)
        // alias in L1: their tile loads ran 13% slower than packed tiles, so such A is packed.
        self.in_place
            && a.cs == 1
            && a.rs > 0
            && mb.is_multiple_of(Self::MR)
            && kb.is_multiple_of(CHUNK)
            && (a.ptr as usize).is_multiple_of(64)
            && row_bytes.is_multiple_of(64)
            && !row_bytes.is_multiple_of(4096)
    }

    unsafe fn micro_in_place(
        &self,
        (k0, kb, kpad): (usize, usize, usize),
        a: Src,
        b: *const u16,
        c: CTile,
    ) {
        // SAFETY: the block holds the panel's 32 rows (a_in_place: whole row panels), so
        // row 16 is inside A; B as in `micro`.
        let (a0, a1, b0, b1) = unsafe {
            let b0 = b.add(k0 * 16);
            (a.ptr, a.at(16, 0).ptr, b0, b0.add(16 * kpad))
        };
        // SAFETY: A's 32 rows × kb sums from `a` are inside the block (caller), read as
        // tiles of 16 rows `rs` elements apart, the next chunk 32 elements further; the
        // rest as in `micro`.
        unsafe {
            let a_tiles = ATiles {
                ld: a.rs * 2,
                step: 64,
            };
            self.bf16_product([a0, a1], [b0, b1], a_tiles, kb / CHUNK, &c)
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

#[cfg(test)]
mod tests;
