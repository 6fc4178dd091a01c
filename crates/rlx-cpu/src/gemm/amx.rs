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

/// How the A tiles of [`tile_product`] lie in memory: 16 rows `ld` bytes apart, the next
/// chunk of sums `step` bytes further. Packed tiles are `{ ld: 64, step: 1024 }`; A read
/// in place from a row-major matrix is `{ ld: row stride, step: 64 }`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ATiles {
    pub(crate) ld: isize,
    pub(crate) step: isize,
}

impl ATiles {
    /// The packed layout (one 1 KiB tile per chunk).
    pub(crate) const PACKED: ATiles = ATiles { ld: 64, step: 1024 };
}

/// Which product [`tile_product`] computes, and how it loads B.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TileOp {
    /// int8 pairs summed into i32 (`tdpbssd`) instead of bf16 pairs into f32
    /// (`tdpbf16ps`).
    pub(crate) int8: bool,
    /// B's tiles loaded with the streaming hint (`tileloaddt1`).
    pub(crate) stream_b: bool,
}

/// The A and B tiles one [`tile_product`] sums over: `chunks` (at least 1) products of
/// the panel's two 16-row strips of A (`a`, laid out as `a_tiles` says) with its two
/// 16-column strips of B (`b`, each tile 1 KiB with 64-byte rows and the next chunk
/// 1 KiB further).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TileOperands {
    pub(crate) a: [*const u8; 2],
    pub(crate) b: [*const u8; 2],
    pub(crate) a_tiles: ATiles,
    pub(crate) chunks: usize,
}

/// The 32 × 32 C block (f32 or i32, four tiles) of one [`tile_product`]: the sum starts
/// from `cin` (or from zero when it is null) and is stored to `cout`, row strides in
/// bytes. The first `prefetch_rows` rows of `cout` are prefetched for writing during the
/// sum.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TileC {
    pub(crate) cin: *const u8,
    pub(crate) ld_in: isize,
    pub(crate) cout: *mut u8,
    pub(crate) ld_out: isize,
    pub(crate) prefetch_rows: usize,
}

impl TileC {
    /// The driver's C tile of 4-byte accumulators (f32 or i32), its strides in bytes.
    #[inline(always)]
    pub(crate) fn of<T>(c: &CTile<T>) -> TileC {
        const {
            assert!(
                size_of::<T>() == 4,
                "tile products accumulate 4-byte values"
            )
        };
        TileC {
            cin: c.inp as *const u8,
            ld_in: c.ld_in * 4,
            cout: c.out as *mut u8,
            ld_out: c.ld_out * 4,
            prefetch_rows: c.pf_rows,
        }
    }
}

/// The 2 × 2-tile product shared by the bf16 (`tdpbf16ps`) and int8 (`tdpbssd`) kernels:
/// C (32 × 32 f32 or i32, four tiles) starts from `c.cin` (or zero when it is null),
/// gains the `tiles.chunks` products of `tiles`' A and B strips, and is stored to
/// `c.cout`. With `op.stream_b`, B's tiles are loaded with the streaming hint
/// (`tileloaddt1`). With `c.prefetch_rows > 0`, the first `prefetch_rows` (at most
/// `chunks`) rows of `cout` are prefetched for writing (PREFETCHW of the row's first,
/// second and last byte's lines), one row per chunk: spread over the sum loop the
/// prefetches overlap the tile products, while 96 of them in a burst before the call
/// stalled on the line fill buffers (10% of a 1024³ product on one thread).
///
/// # Safety
/// This thread's tile configuration must be loaded ([`Kernel::begin`] of an AMX kernel);
/// `tiles.chunks >= 1`; the four strips must hold `chunks` tiles each from their
/// pointers; `c.cin` (unless null) must be readable and `c.cout` writable as 32 rows of
/// 128 bytes with their (positive) row strides; `c.prefetch_rows <= 32`. The tile
/// registers are used only inside this call.
pub(crate) unsafe fn tile_product(op: TileOp, tiles: TileOperands, c: TileC) {
    let TileOp { int8, stream_b } = op;
    let TileOperands {
        a: [a0, a1],
        b: [b0, b1],
        a_tiles,
        chunks,
    } = tiles;
    // C's pointers and strides are read from memory at the start and the end of the asm
    // block, so the sum loop has registers for the prefetch walk.
    let io: [usize; 4] = [
        c.cin as usize,
        c.ld_in as usize,
        c.cout as usize,
        c.ld_out as usize,
    ];
    let pf_rows = c.prefetch_rows.min(chunks).min(32);
    macro_rules! product {
        ($dot:literal, $load_b:literal) => {
            std::arch::asm!(
                "mov {t}, [{io}]",
                "test {t}, {t}",
                "jz 2f",
                "mov {s}, [{io} + 8]",
                "tileloadd tmm0, [{t} + {s}*1]",
                "tileloadd tmm1, [{t} + {s}*1 + 64]",
                // {t} = the lower 16 rows of the input tile.
                "shl {s}, 4",
                "add {t}, {s}",
                "mov {s}, [{io} + 8]",
                "tileloadd tmm2, [{t} + {s}*1]",
                "tileloadd tmm3, [{t} + {s}*1 + 64]",
                "jmp 3f",
                "2:",
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "3:",
                "mov {s}, 64",
                "mov {pf}, [{io} + 16]",
                "4:",
                concat!($load_b, " tmm6, [{b0} + {s}*1]"),
                concat!($load_b, " tmm7, [{b1} + {s}*1]"),
                "tileloadd tmm4, [{a0} + {lda}*1]",
                concat!($dot, " tmm0, tmm4, tmm6"),
                concat!($dot, " tmm1, tmm4, tmm7"),
                "tileloadd tmm5, [{a1} + {lda}*1]",
                concat!($dot, " tmm2, tmm5, tmm6"),
                concat!($dot, " tmm3, tmm5, tmm7"),
                "test {pfn}, {pfn}",
                "jz 5f",
                "prefetchw [{pf}]",
                "prefetchw [{pf} + 64]",
                "prefetchw [{pf} + 127]",
                "add {pf}, [{io} + 24]",
                "dec {pfn}",
                "5:",
                "add {a0}, {astep}",
                "add {a1}, {astep}",
                "add {b0}, 1024",
                "add {b1}, 1024",
                "dec {n}",
                "jnz 4b",
                // {a0} = the output tile, {s} its row stride, {a1} its lower 16 rows.
                "mov {a0}, [{io} + 16]",
                "mov {s}, [{io} + 24]",
                "mov {a1}, {s}",
                "shl {a1}, 4",
                "add {a1}, {a0}",
                "tilestored [{a0} + {s}*1], tmm0",
                "tilestored [{a0} + {s}*1 + 64], tmm1",
                "tilestored [{a1} + {s}*1], tmm2",
                "tilestored [{a1} + {s}*1 + 64], tmm3",
                io = in(reg) io.as_ptr(),
                a0 = inout(reg) a0 => _,
                a1 = inout(reg) a1 => _,
                b0 = inout(reg) b0 => _,
                b1 = inout(reg) b1 => _,
                n = inout(reg) chunks => _,
                lda = in(reg) a_tiles.ld,
                astep = in(reg) a_tiles.step,
                pfn = inout(reg) pf_rows => _,
                pf = out(reg) _,
                s = out(reg) _,
                t = out(reg) _,
                options(nostack),
            )
        };
    }
    // SAFETY: the caller's contract covers every address the loop forms (prefetches never
    // fault); the loop counter starts at chunks >= 1 and is decremented to zero; `io`
    // lives until the asm block ends.
    unsafe {
        match (int8, stream_b) {
            (true, false) => product!("tdpbssd", "tileloadd"),
            (true, true) => product!("tdpbssd", "tileloaddt1"),
            (false, false) => product!("tdpbf16ps", "tileloadd"),
            (false, true) => product!("tdpbf16ps", "tileloaddt1"),
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
mod tests {
    use super::*;
    use crate::gemm::lowp::{LowpPath, bf16, gemm_half_with};
    use crate::gemm::{MatMut, MatRef};

    /// `vals` copied so that element 0 sits `shift` elements past a 64-byte boundary:
    /// (storage, index of element 0).
    fn placed(vals: &[bf16], shift: usize) -> (Vec<bf16>, usize) {
        let mut store = vec![bf16::ZERO; vals.len() + 64];
        let skip = ((store.as_ptr() as usize).next_multiple_of(64) - store.as_ptr() as usize) / 2;
        let at = skip + shift;
        store[at..at + vals.len()].copy_from_slice(vals);
        (store, at)
    }

    fn values(len: usize, seed: u64) -> Vec<bf16> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                bf16::from_f32((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
            })
            .collect()
    }

    #[test]
    fn a_read_in_place_gives_the_packed_bits_and_the_f64_product() {
        if !available() {
            println!("skipped: this CPU or OS has no usable AMX-BF16 tiles");
            return;
        }
        // K past one micro-kernel step (256) and past one super-block (2048), M with and
        // without a partial row panel, N = 1 and odd; accumulate or overwrite; 1 and 2
        // threads (a thread's block of rows may be read in place while another's is packed).
        let cases = [
            (32, 32, 1),
            (64, 96, 33),
            (70, 288, 40),
            (96, 1056, 64),
            (32, 2112, 17),
        ];
        for (i, &(m, k, n)) in cases.iter().enumerate() {
            let (av, bv) = (values(m * k, 7 + i as u64), values(k * n, 99 + i as u64));
            let c0: Vec<f32> = (0..m * n).map(|x| (x % 7) as f32 - 3.0).collect();
            for (accumulate, threads) in [(false, 1), (true, 1), (false, 2)] {
                let run = |shift: usize| {
                    let (store, at) = placed(&av, shift);
                    let a = MatRef {
                        offset: at,
                        ..MatRef::row_major(&store, m, k)
                    };
                    if shift == 0 && m.is_multiple_of(32) {
                        let src = Src {
                            ptr: store[at..].as_ptr() as *const u16,
                            rs: k as isize,
                            cs: 1,
                        };
                        let amx = Amx {
                            in_place: true,
                            ..Amx::new().expect("AMX checked")
                        };
                        assert!(amx.a_in_place(src, m, k), "{m}x{k}: in place expected");
                    }
                    let mut c = c0.clone();
                    gemm_half_with(
                        LowpPath::Amx,
                        a,
                        MatRef::row_major(&bv, k, n),
                        MatMut::row_major(&mut c, m, n),
                        accumulate,
                        threads,
                    );
                    c
                };
                // One element off the line boundary: the same product from packed A.
                let (direct, packed) = (run(0), run(1));
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&direct), bits(&packed), "{m}x{k}x{n} acc {accumulate}");
                for r in 0..m {
                    for j in 0..n {
                        let (mut exact, mut mag) = (0f64, 0f64);
                        for p in 0..k {
                            let t = av[r * k + p].to_f64() * bv[p * n + j].to_f64();
                            exact += t;
                            mag += t.abs();
                        }
                        if accumulate {
                            exact += c0[r * n + j] as f64;
                            mag += c0[r * n + j].abs() as f64;
                        }
                        let got = direct[r * n + j] as f64;
                        let tol = (k + 2) as f64 * 2f64.powi(-24) * mag;
                        assert!(
                            (got - exact).abs() <= tol,
                            "{m}x{k}x{n} ({r}, {j}): {got} vs {exact} (tol {tol:e})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_is_packed_when_misaligned_transposed_4k_aliased_or_ragged() {
        let store = vec![0u16; 64 * 4096 + 64];
        let skip = ((store.as_ptr() as usize).next_multiple_of(64) - store.as_ptr() as usize) / 2;
        let src = |off: usize, rs: isize, cs: isize| Src {
            ptr: store[skip + off..].as_ptr(),
            rs,
            cs,
        };
        let amx = Amx {
            blocking: tuning().0,
            in_place: true,
            stream_b: false,
        };
        assert!(amx.a_in_place(src(0, 96, 1), 64, 96));
        assert!(
            !amx.a_in_place(src(1, 96, 1), 64, 96),
            "rows off the line boundary"
        );
        assert!(!amx.a_in_place(src(0, 1, 96), 64, 96), "column-major A");
        assert!(
            !amx.a_in_place(src(0, 2048, 1), 64, 96),
            "rows 4 KiB apart alias in L1"
        );
        assert!(
            !amx.a_in_place(src(0, 96, 1), 48, 96),
            "a partial row panel"
        );
        assert!(
            !amx.a_in_place(src(0, 100, 1), 64, 100),
            "a partial sum chunk"
        );
    }

    /// `C (+)= A·B` through the driver with one AMX kernel variant; A is `m × k` (row-major
    /// or, with `ta`, the transpose of a `k × m` row-major store), B `k × n` row-major, C
    /// `m × n` with row stride `ldc` starting `c_at` elements into `c`.
    fn run_variant(
        kern: &Amx,
        (av, ta): (&[bf16], bool),
        bv: &[bf16],
        (m, n, k): (usize, usize, usize),
        (c, c_at, ldc): (&mut [f32], usize, usize),
        accumulate: bool,
    ) {
        let a = Src {
            ptr: av.as_ptr() as *const u16,
            rs: if ta { 1 } else { k as isize },
            cs: if ta { m as isize } else { 1 },
        };
        let b = Src {
            ptr: bv.as_ptr() as *const u16,
            rs: n as isize,
            cs: 1,
        };
        assert!(c.len() >= c_at + (m - 1) * ldc + n);
        let dst = crate::gemm::lowp_drive::Dst {
            ptr: c[c_at..].as_mut_ptr(),
            rs: ldc as isize,
            cs: 1,
        };
        // SAFETY: A holds m·k, B k·n elements; C's m rows of n elements from c_at with row
        // stride ldc >= n are inside `c` (asserted) and distinct; AMX is available (caller).
        unsafe { crate::gemm::lowp_drive::drive(kern, a, b, dst, (m, n, k), accumulate) }
    }

    #[test]
    fn every_blocking_loop_order_and_load_hint_gives_the_same_bits() {
        if !available() {
            println!("skipped: this CPU or OS has no usable AMX-BF16 tiles");
            return;
        }
        let base = Amx::new().expect("AMX checked");
        let mut kernels = Vec::new();
        for rows_outer in [false, true] {
            for (kc, kc_in_place) in [(2048, 1024), (256, 256), (64, 32)] {
                for (in_place, stream_b) in [(true, false), (false, true), (true, true)] {
                    kernels.push(Amx {
                        blocking: Blocking {
                            kc,
                            kc_in_place,
                            kc_short: kc_in_place,
                            mc: 64,
                            nc: 96,
                            rows_outer,
                        },
                        in_place,
                        stream_b,
                    });
                }
            }
        }
        kernels.push(base);
        // Tails in every dimension, M = 1, N = 1, K = 1, K past a super-block (2048) and
        // sums that are not a multiple of the 32-sum tile; A row-major (read in place when
        // its rows are whole lines) or transposed; C with a row stride of its own, 64-byte
        // aligned or one element off (tile stores and the in-loop prefetch then split lines).
        let cases = [
            (1, 1, 1),
            (1, 40, 64),
            (33, 1, 96),
            (64, 96, 64),
            (70, 130, 33),
            (96, 64, 1056),
            (32, 200, 2080),
            (128, 192, 256),
        ];
        for (i, &(m, n, k)) in cases.iter().enumerate() {
            let (av, bv) = (values(m * k, 3 + i as u64), values(k * n, 50 + i as u64));
            let ldc = n + 5;
            for (ta, accumulate, shift) in [(false, false, 0), (true, true, 1), (false, true, 1)] {
                let len = m * ldc + 64;
                let c0: Vec<f32> = (0..len).map(|x| (x % 5) as f32 - 2.0).collect();
                let (cstore, c_at) = {
                    let mut v = c0.clone();
                    let skip =
                        ((v.as_ptr() as usize).next_multiple_of(64) - v.as_ptr() as usize) / 4;
                    v.truncate(len);
                    (v, skip + shift)
                };
                let (astore, a_at) = placed(&av, 0);
                let a = &astore[a_at..a_at + m * k];
                let mut first: Option<Vec<u32>> = None;
                for kern in &kernels {
                    let mut c = cstore.clone();
                    run_variant(
                        kern,
                        (a, ta),
                        &bv,
                        (m, n, k),
                        (&mut c, c_at, ldc),
                        accumulate,
                    );
                    let bits: Vec<u32> = c.iter().map(|x| x.to_bits()).collect();
                    match &first {
                        None => {
                            // The first variant against the f64 product.
                            for r in 0..m {
                                for j in 0..n {
                                    let (mut exact, mut mag) = (0f64, 0f64);
                                    for p in 0..k {
                                        let x = if ta { a[p * m + r] } else { a[r * k + p] };
                                        let t = x.to_f64() * bv[p * n + j].to_f64();
                                        exact += t;
                                        mag += t.abs();
                                    }
                                    let at = c_at + r * ldc + j;
                                    if accumulate {
                                        exact += cstore[at] as f64;
                                        mag += cstore[at].abs() as f64;
                                    }
                                    let got = c[at] as f64;
                                    let tol = (k + 2) as f64 * 2f64.powi(-24) * mag;
                                    assert!(
                                        (got - exact).abs() <= tol,
                                        "{m}x{k}x{n} ({r}, {j}): {got} vs {exact}"
                                    );
                                }
                            }
                            // Elements outside C's view are untouched.
                            for (x, (&got, &was)) in c.iter().zip(&cstore).enumerate() {
                                let inside =
                                    x >= c_at && (x - c_at) / ldc < m && (x - c_at) % ldc < n;
                                if !inside {
                                    assert_eq!(got.to_bits(), was.to_bits(), "{m}x{k}x{n}: {x}");
                                }
                            }
                            first = Some(bits);
                        }
                        Some(want) => assert!(
                            want == &bits,
                            "{m}x{k}x{n} ta {ta} acc {accumulate}: {:?} differs",
                            kern.blocking
                        ),
                    }
                }
            }
        }
    }
}
