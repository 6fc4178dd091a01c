//! The tile layer under the AMX kernels: the tile configuration every thread loads,
//! the operand and C-tile descriptions, and the one `asm!` loop ([`tile_product`]) that
//! runs a 2 × 2 block of C tiles over a run of 32-sum (bf16) or 64-sum (int8) chunks.
//! The bf16 kernel (`amx.rs`) and the int8 kernel (`int8.rs`) both drive it.

use crate::gemm::lowp_drive::CTile;

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
/// This thread's tile configuration must be loaded ([`Kernel::begin`](crate::gemm::lowp_drive::Kernel::begin) of an AMX kernel);
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
/// AMX must be available and permitted ([`available`](super::available) or [`int8_available`](super::int8_available)).
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
