//! The sum loops of the own f32 kernel: one inline-assembly loop per full register tile
//! (12 × 32 and 8 × 48, see `plan.rs` for which CPU takes which) and a compiled loop for
//! the narrower last strip of a block.

use std::arch::x86_64::*;

/// `acc[r][v] += A[p][r] · B[p][16v..16v + 16]` for the `kc >= 1` sums of a 12-row A
/// panel and a 32-column B strip. Each sum is two vector loads of B and 24 FMAs whose A
/// operand is broadcast from memory (`{1to16}`): 26 instructions per sum where separate
/// broadcasts take 38 (the compiler does not fold a broadcast that feeds two FMAs), which
/// measured 5 % faster at W11's shapes, within 0–3 % of MKL on one thread.
///
/// # Safety
/// `a` must hold `kc · 12` f32 and `b` (64-byte aligned) `kc · 32`; `kc >= 1`; AVX-512 F
/// present.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn sums_12x32(
    kc: usize,
    a: *const f32,
    b: *const f32,
    acc: &mut [[__m512; 2]; 12],
) {
    debug_assert!(kc >= 1);
    // SAFETY: the loop reads kc·48 bytes of A's panel and kc·128 (aligned) of B's strip,
    // inside the panels (caller); it writes only the listed registers and no memory.
    unsafe {
        std::arch::asm!(
            "2:",
            "vmovaps {b0}, zmmword ptr [{bp}]",
            "vmovaps {b1}, zmmword ptr [{bp} + 64]",
            "vfmadd231ps {c00}, {b0}, dword ptr [{ap} + 0]{{1to16}}",
            "vfmadd231ps {c01}, {b1}, dword ptr [{ap} + 0]{{1to16}}",
            "vfmadd231ps {c10}, {b0}, dword ptr [{ap} + 4]{{1to16}}",
            "vfmadd231ps {c11}, {b1}, dword ptr [{ap} + 4]{{1to16}}",
            "vfmadd231ps {c20}, {b0}, dword ptr [{ap} + 8]{{1to16}}",
            "vfmadd231ps {c21}, {b1}, dword ptr [{ap} + 8]{{1to16}}",
            "vfmadd231ps {c30}, {b0}, dword ptr [{ap} + 12]{{1to16}}",
            "vfmadd231ps {c31}, {b1}, dword ptr [{ap} + 12]{{1to16}}",
            "vfmadd231ps {c40}, {b0}, dword ptr [{ap} + 16]{{1to16}}",
            "vfmadd231ps {c41}, {b1}, dword ptr [{ap} + 16]{{1to16}}",
            "vfmadd231ps {c50}, {b0}, dword ptr [{ap} + 20]{{1to16}}",
            "vfmadd231ps {c51}, {b1}, dword ptr [{ap} + 20]{{1to16}}",
            "vfmadd231ps {c60}, {b0}, dword ptr [{ap} + 24]{{1to16}}",
            "vfmadd231ps {c61}, {b1}, dword ptr [{ap} + 24]{{1to16}}",
            "vfmadd231ps {c70}, {b0}, dword ptr [{ap} + 28]{{1to16}}",
            "vfmadd231ps {c71}, {b1}, dword ptr [{ap} + 28]{{1to16}}",
            "vfmadd231ps {c80}, {b0}, dword ptr [{ap} + 32]{{1to16}}",
            "vfmadd231ps {c81}, {b1}, dword ptr [{ap} + 32]{{1to16}}",
            "vfmadd231ps {c90}, {b0}, dword ptr [{ap} + 36]{{1to16}}",
            "vfmadd231ps {c91}, {b1}, dword ptr [{ap} + 36]{{1to16}}",
            "vfmadd231ps {c100}, {b0}, dword ptr [{ap} + 40]{{1to16}}",
            "vfmadd231ps {c101}, {b1}, dword ptr [{ap} + 40]{{1to16}}",
            "vfmadd231ps {c110}, {b0}, dword ptr [{ap} + 44]{{1to16}}",
            "vfmadd231ps {c111}, {b1}, dword ptr [{ap} + 44]{{1to16}}",
            "add {ap}, 48",
            "add {bp}, 128",
            "dec {k}",
            "jnz 2b",
            ap = inout(reg) a => _,
            bp = inout(reg) b => _,
            k = inout(reg) kc => _,
            b0 = out(zmm_reg) _,
            b1 = out(zmm_reg) _,
            c00 = inout(zmm_reg) acc[0][0],
            c01 = inout(zmm_reg) acc[0][1],
            c10 = inout(zmm_reg) acc[1][0],
            c11 = inout(zmm_reg) acc[1][1],
            c20 = inout(zmm_reg) acc[2][0],
            c21 = inout(zmm_reg) acc[2][1],
            c30 = inout(zmm_reg) acc[3][0],
            c31 = inout(zmm_reg) acc[3][1],
            c40 = inout(zmm_reg) acc[4][0],
            c41 = inout(zmm_reg) acc[4][1],
            c50 = inout(zmm_reg) acc[5][0],
            c51 = inout(zmm_reg) acc[5][1],
            c60 = inout(zmm_reg) acc[6][0],
            c61 = inout(zmm_reg) acc[6][1],
            c70 = inout(zmm_reg) acc[7][0],
            c71 = inout(zmm_reg) acc[7][1],
            c80 = inout(zmm_reg) acc[8][0],
            c81 = inout(zmm_reg) acc[8][1],
            c90 = inout(zmm_reg) acc[9][0],
            c91 = inout(zmm_reg) acc[9][1],
            c100 = inout(zmm_reg) acc[10][0],
            c101 = inout(zmm_reg) acc[10][1],
            c110 = inout(zmm_reg) acc[11][0],
            c111 = inout(zmm_reg) acc[11][1],
            options(nostack, readonly),
        );
    }
}

/// One sum of the 8 × 48 tile as assembly text: B's three vectors loaded from the given
/// byte offsets of `{bp}`, then for each of the eight rows A's value broadcast from its
/// byte offset of `{ap}` (alternating `{t0}` / `{t1}` so consecutive broadcasts overlap)
/// and three FMAs into that row's accumulators.
macro_rules! sum_8x48 {
    (@rows $b0:literal, $b1:literal, $b2:literal; $($row:literal $t:literal $a:literal),*) => {
        concat!(
            "vmovaps {b0}, zmmword ptr [{bp} + ", $b0, "]\n",
            "vmovaps {b1}, zmmword ptr [{bp} + ", $b1, "]\n",
            "vmovaps {b2}, zmmword ptr [{bp} + ", $b2, "]\n",
            $(
                "vbroadcastss {t", $t, "}, dword ptr [{ap} + ", $a, "]\n",
                "vfmadd231ps {c", $row, "0}, {t", $t, "}, {b0}\n",
                "vfmadd231ps {c", $row, "1}, {t", $t, "}, {b1}\n",
                "vfmadd231ps {c", $row, "2}, {t", $t, "}, {b2}\n",
            )*
        )
    };
    ($b0:literal, $b1:literal, $b2:literal; $a0:literal, $a1:literal, $a2:literal, $a3:literal,
     $a4:literal, $a5:literal, $a6:literal, $a7:literal) => {
        sum_8x48!(@rows $b0, $b1, $b2; 0 0 $a0, 1 1 $a1, 2 0 $a2, 3 1 $a3, 4 0 $a4, 5 1 $a5, 6 0 $a6,
            7 1 $a7)
    };
}

/// Bytes ahead of the current sum at which the 8 × 48 loop prefetches A's panel (16 sums).
const A_PREFETCH: usize = 512;

/// Lines of `next` the 8 × 48 and 8 × 32 loops ask for, into L2, for `kc` sums: one
/// per two sums (one per iteration of the loops, none for an odd last sum).
pub(super) fn next_lines(kc: usize) -> usize {
    kc / 2
}

/// `acc[r][v] += A[p][r] · B[p][16v..16v + 16]` for the `kc >= 1` sums of an 8-row A
/// panel and a 48-column B strip. Each sum is three vector loads of B, eight broadcasts of
/// A (a broadcast from memory is a load, no shuffle) and 24 FMAs: 11 loads where the
/// 12 × 32 tile issues 26, which keeps the loads off the FMAs' critical resources on
/// Intel cores (236 GFLOP/s on one Sapphire Rapids core with both panels in L1, the
/// 12 × 32 loop 196–216).
///
/// Each iteration also asks for one line at `next` into L2, `next` advancing a line per
/// iteration ([`next_lines`]): the caller points it at the B strip that follows, so that
/// strip is in L2 when its first panel runs, or at `a` (lines being read anyway).
///
/// # Safety
/// `a` must hold `kc · 8` f32 and `b` (64-byte aligned) `kc · 48`; `kc >= 1`; AVX-512 F
/// present. `next` is only prefetched (any address).
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn sums_8x48(
    kc: usize,
    a: *const f32,
    b: *const f32,
    acc: &mut [[__m512; 3]; 8],
    next: *const f32,
) {
    debug_assert!(kc >= 1);
    // SAFETY: the loop reads kc·32 bytes of A's panel and kc·192 (aligned) of B's strip,
    // inside the panels (caller); it writes only the listed registers and no memory.
    unsafe {
        std::arch::asm!(
            // Two sums per iteration, then the odd one. Each iteration asks for the line of
            // A's panel `A_PREFETCH` bytes ahead into L1: the panel streams from L2 while
            // B's strip stays in L1.
            "mov {n2}, {k}",
            "shr {n2}, 1",
            "jz 3f",
            "2:",
            sum_8x48!(0, 64, 128; 0, 4, 8, 12, 16, 20, 24, 28),
            sum_8x48!(192, 256, 320; 32, 36, 40, 44, 48, 52, 56, 60),
            "prefetcht0 byte ptr [{ap} + {pf}]",
            "prefetcht1 byte ptr [{nx}]",
            "add {nx}, 64",
            "add {ap}, 64",
            "add {bp}, 384",
            "dec {n2}",
            "jnz 2b",
            "3:",
            "test {k}, 1",
            "jz 4f",
            sum_8x48!(0, 64, 128; 0, 4, 8, 12, 16, 20, 24, 28),
            "4:",
            pf = const A_PREFETCH,
            n2 = out(reg) _,
            nx = inout(reg) next => _,
            ap = inout(reg) a => _,
            bp = inout(reg) b => _,
            k = in(reg) kc,
            b0 = out(zmm_reg) _,
            b1 = out(zmm_reg) _,
            b2 = out(zmm_reg) _,
            t0 = out(zmm_reg) _,
            t1 = out(zmm_reg) _,
            c00 = inout(zmm_reg) acc[0][0],
            c01 = inout(zmm_reg) acc[0][1],
            c02 = inout(zmm_reg) acc[0][2],
            c10 = inout(zmm_reg) acc[1][0],
            c11 = inout(zmm_reg) acc[1][1],
            c12 = inout(zmm_reg) acc[1][2],
            c20 = inout(zmm_reg) acc[2][0],
            c21 = inout(zmm_reg) acc[2][1],
            c22 = inout(zmm_reg) acc[2][2],
            c30 = inout(zmm_reg) acc[3][0],
            c31 = inout(zmm_reg) acc[3][1],
            c32 = inout(zmm_reg) acc[3][2],
            c40 = inout(zmm_reg) acc[4][0],
            c41 = inout(zmm_reg) acc[4][1],
            c42 = inout(zmm_reg) acc[4][2],
            c50 = inout(zmm_reg) acc[5][0],
            c51 = inout(zmm_reg) acc[5][1],
            c52 = inout(zmm_reg) acc[5][2],
            c60 = inout(zmm_reg) acc[6][0],
            c61 = inout(zmm_reg) acc[6][1],
            c62 = inout(zmm_reg) acc[6][2],
            c70 = inout(zmm_reg) acc[7][0],
            c71 = inout(zmm_reg) acc[7][1],
            c72 = inout(zmm_reg) acc[7][2],
            options(nostack, readonly),
        );
    }
}

/// One sum of the 8 × 48 tile reading A from its rows in place: as [`sum_8x48`], row `r`'s
/// value broadcast from `[{a0|a3|a6} + {l}·(r mod 3) + off]` (rows 0–2 from `{a0}`, 3–5 from
/// `{a3}`, 6–7 from `{a6}`, three rows apart).
macro_rules! sum_8x48_rows {
    ($b0:literal, $b1:literal, $b2:literal; $off:literal) => {
        concat!(
            "vmovaps {b0}, zmmword ptr [{bp} + ",
            $b0,
            "]\n",
            "vmovaps {b1}, zmmword ptr [{bp} + ",
            $b1,
            "]\n",
            "vmovaps {b2}, zmmword ptr [{bp} + ",
            $b2,
            "]\n",
            "vbroadcastss {t0}, dword ptr [{a0} + ",
            $off,
            "]\n",
            "vfmadd231ps {c00}, {t0}, {b0}\n",
            "vfmadd231ps {c01}, {t0}, {b1}\n",
            "vfmadd231ps {c02}, {t0}, {b2}\n",
            "vbroadcastss {t1}, dword ptr [{a0} + {l} + ",
            $off,
            "]\n",
            "vfmadd231ps {c10}, {t1}, {b0}\n",
            "vfmadd231ps {c11}, {t1}, {b1}\n",
            "vfmadd231ps {c12}, {t1}, {b2}\n",
            "vbroadcastss {t0}, dword ptr [{a0} + 2*{l} + ",
            $off,
            "]\n",
            "vfmadd231ps {c20}, {t0}, {b0}\n",
            "vfmadd231ps {c21}, {t0}, {b1}\n",
            "vfmadd231ps {c22}, {t0}, {b2}\n",
            "vbroadcastss {t1}, dword ptr [{a3} + ",
            $off,
            "]\n",
            "vfmadd231ps {c30}, {t1}, {b0}\n",
            "vfmadd231ps {c31}, {t1}, {b1}\n",
            "vfmadd231ps {c32}, {t1}, {b2}\n",
            "vbroadcastss {t0}, dword ptr [{a3} + {l} + ",
            $off,
            "]\n",
            "vfmadd231ps {c40}, {t0}, {b0}\n",
            "vfmadd231ps {c41}, {t0}, {b1}\n",
            "vfmadd231ps {c42}, {t0}, {b2}\n",
            "vbroadcastss {t1}, dword ptr [{a3} + 2*{l} + ",
            $off,
            "]\n",
            "vfmadd231ps {c50}, {t1}, {b0}\n",
            "vfmadd231ps {c51}, {t1}, {b1}\n",
            "vfmadd231ps {c52}, {t1}, {b2}\n",
            "vbroadcastss {t0}, dword ptr [{a6} + ",
            $off,
            "]\n",
            "vfmadd231ps {c60}, {t0}, {b0}\n",
            "vfmadd231ps {c61}, {t0}, {b1}\n",
            "vfmadd231ps {c62}, {t0}, {b2}\n",
            "vbroadcastss {t1}, dword ptr [{a6} + {l} + ",
            $off,
            "]\n",
            "vfmadd231ps {c70}, {t1}, {b0}\n",
            "vfmadd231ps {c71}, {t1}, {b1}\n",
            "vfmadd231ps {c72}, {t1}, {b2}\n",
        )
    };
}

/// [`sums_8x48`] with A's eight rows read where they are stored, `lda` f32 apart, each
/// sum the next element of every row (a row-major A needs no packing: its rows are the
/// panel's sums in order, so the bits are those of the packed loop). There is no
/// prefetch of A: the hardware prefetchers follow the eight rows (a line of each per 16
/// sums); `next` is asked into L2 as in [`sums_8x48`].
///
/// # Safety
/// `a` must be readable for rows `0..8` of `kc` f32 each, `lda` f32 apart; `b` (64-byte
/// aligned) holds `kc · 48`; `kc >= 1`; AVX-512 F present. `next` is only prefetched.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn sums_8x48_rows(
    kc: usize,
    (a, lda): (*const f32, usize),
    b: *const f32,
    acc: &mut [[__m512; 3]; 8],
    next: *const f32,
) {
    debug_assert!(kc >= 1);
    // SAFETY: the loop reads kc f32 of each of A's eight rows and kc·192 (aligned) bytes
    // of B's strip, inside the operands (caller); it writes only the listed registers.
    unsafe {
        std::arch::asm!(
            "mov {n2}, {k}",
            "shr {n2}, 1",
            "jz 3f",
            "2:",
            sum_8x48_rows!(0, 64, 128; 0),
            sum_8x48_rows!(192, 256, 320; 4),
            "prefetcht1 byte ptr [{nx}]",
            "add {nx}, 64",
            "add {a0}, 8",
            "add {a3}, 8",
            "add {a6}, 8",
            "add {bp}, 384",
            "dec {n2}",
            "jnz 2b",
            "3:",
            "test {k}, 1",
            "jz 4f",
            sum_8x48_rows!(0, 64, 128; 0),
            "4:",
            n2 = out(reg) _,
            nx = inout(reg) next => _,
            a0 = inout(reg) a => _,
            a3 = inout(reg) a.wrapping_add(3 * lda) => _,
            a6 = inout(reg) a.wrapping_add(6 * lda) => _,
            l = in(reg) lda * size_of::<f32>(),
            bp = inout(reg) b => _,
            k = in(reg) kc,
            b0 = out(zmm_reg) _,
            b1 = out(zmm_reg) _,
            b2 = out(zmm_reg) _,
            t0 = out(zmm_reg) _,
            t1 = out(zmm_reg) _,
            c00 = inout(zmm_reg) acc[0][0],
            c01 = inout(zmm_reg) acc[0][1],
            c02 = inout(zmm_reg) acc[0][2],
            c10 = inout(zmm_reg) acc[1][0],
            c11 = inout(zmm_reg) acc[1][1],
            c12 = inout(zmm_reg) acc[1][2],
            c20 = inout(zmm_reg) acc[2][0],
            c21 = inout(zmm_reg) acc[2][1],
            c22 = inout(zmm_reg) acc[2][2],
            c30 = inout(zmm_reg) acc[3][0],
            c31 = inout(zmm_reg) acc[3][1],
            c32 = inout(zmm_reg) acc[3][2],
            c40 = inout(zmm_reg) acc[4][0],
            c41 = inout(zmm_reg) acc[4][1],
            c42 = inout(zmm_reg) acc[4][2],
            c50 = inout(zmm_reg) acc[5][0],
            c51 = inout(zmm_reg) acc[5][1],
            c52 = inout(zmm_reg) acc[5][2],
            c60 = inout(zmm_reg) acc[6][0],
            c61 = inout(zmm_reg) acc[6][1],
            c62 = inout(zmm_reg) acc[6][2],
            c70 = inout(zmm_reg) acc[7][0],
            c71 = inout(zmm_reg) acc[7][1],
            c72 = inout(zmm_reg) acc[7][2],
            options(nostack, readonly),
        );
    }
}

/// One sum of the 8 × 32 tile reading A from its rows in place: as `sum_8x32!`, row `r`'s
/// value broadcast from `[{a0|a3|a6} + {l}·(r mod 3) + off]` (rows 0–2 from `{a0}`, 3–5 from
/// `{a3}`, 6–7 from `{a6}`, three rows apart).
macro_rules! sum_8x32_rows {
    ($b0:literal, $b1:literal; $off:literal) => {
        concat!(
            "vmovaps {b0}, zmmword ptr [{bp} + ",
            $b0,
            "]\n",
            "vmovaps {b1}, zmmword ptr [{bp} + ",
            $b1,
            "]\n",
            "vbroadcastss {t0}, dword ptr [{a0} + ",
            $off,
            "]\n",
            "vfmadd231ps {c00}, {t0}, {b0}\n",
            "vfmadd231ps {c01}, {t0}, {b1}\n",
            "vbroadcastss {t1}, dword ptr [{a0} + {l} + ",
            $off,
            "]\n",
            "vfmadd231ps {c10}, {t1}, {b0}\n",
            "vfmadd231ps {c11}, {t1}, {b1}\n",
            "vbroadcastss {t0}, dword ptr [{a0} + 2*{l} + ",
            $off,
            "]\n",
            "vfmadd231ps {c20}, {t0}, {b0}\n",
            "vfmadd231ps {c21}, {t0}, {b1}\n",
            "vbroadcastss {t1}, dword ptr [{a3} + ",
            $off,
            "]\n",
            "vfmadd231ps {c30}, {t1}, {b0}\n",
            "vfmadd231ps {c31}, {t1}, {b1}\n",
            "vbroadcastss {t0}, dword ptr [{a3} + {l} + ",
            $off,
            "]\n",
            "vfmadd231ps {c40}, {t0}, {b0}\n",
            "vfmadd231ps {c41}, {t0}, {b1}\n",
            "vbroadcastss {t1}, dword ptr [{a3} + 2*{l} + ",
            $off,
            "]\n",
            "vfmadd231ps {c50}, {t1}, {b0}\n",
            "vfmadd231ps {c51}, {t1}, {b1}\n",
            "vbroadcastss {t0}, dword ptr [{a6} + ",
            $off,
            "]\n",
            "vfmadd231ps {c60}, {t0}, {b0}\n",
            "vfmadd231ps {c61}, {t0}, {b1}\n",
            "vbroadcastss {t1}, dword ptr [{a6} + {l} + ",
            $off,
            "]\n",
            "vfmadd231ps {c70}, {t1}, {b0}\n",
            "vfmadd231ps {c71}, {t1}, {b1}\n",
        )
    };
}

/// [`sums_8x32`] with A's eight rows read where they are stored, `lda` f32 apart, each
/// sum the next element of every row (a row-major A needs no packing: its rows are the
/// panel's sums in order, so the bits are those of the packed loop).
///
/// # Safety
/// `a` must be readable for rows `0..8` of `kc` f32 each, `lda` f32 apart; `b` (64-byte
/// aligned) holds `kc · ldb`, `ldb >= 32` a multiple of 16; `kc >= 1`; AVX-512 F
/// present. `next` is only prefetched.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn sums_8x32_rows(
    kc: usize,
    (a, lda): (*const f32, usize),
    (b, ldb): (*const f32, usize),
    acc: &mut [[__m512; 2]; 8],
    next: *const f32,
) {
    debug_assert!(kc >= 1 && ldb >= 32 && ldb.is_multiple_of(16));
    // SAFETY: the loop reads kc f32 of each of A's eight rows and the first 128 (aligned) bytes
    // of each of B's kc sums, inside the operands (caller); it writes only the listed registers.
    unsafe {
        std::arch::asm!(
            "mov {n2}, {k}",
            "shr {n2}, 1",
            "jz 3f",
            "2:",
            sum_8x32_rows!(0, 64; 0),
            "add {bp}, {ldb}",
            sum_8x32_rows!(0, 64; 4),
            "prefetcht1 byte ptr [{nx}]",
            "add {nx}, 64",
            "add {a0}, 8",
            "add {a3}, 8",
            "add {a6}, 8",
            "add {bp}, {ldb}",
            "dec {n2}",
            "jnz 2b",
            "3:",
            "test {k}, 1",
            "jz 4f",
            sum_8x32_rows!(0, 64; 0),
            "4:",
            n2 = out(reg) _,
            nx = inout(reg) next => _,
            a0 = inout(reg) a => _,
            a3 = inout(reg) a.wrapping_add(3 * lda) => _,
            a6 = inout(reg) a.wrapping_add(6 * lda) => _,
            l = in(reg) lda * size_of::<f32>(),
            bp = inout(reg) b => _,
            ldb = in(reg) ldb * size_of::<f32>(),
            k = in(reg) kc,
            b0 = out(zmm_reg) _,
            b1 = out(zmm_reg) _,
            t0 = out(zmm_reg) _,
            t1 = out(zmm_reg) _,
            c00 = inout(zmm_reg) acc[0][0],
            c01 = inout(zmm_reg) acc[0][1],
            c10 = inout(zmm_reg) acc[1][0],
            c11 = inout(zmm_reg) acc[1][1],
            c20 = inout(zmm_reg) acc[2][0],
            c21 = inout(zmm_reg) acc[2][1],
            c30 = inout(zmm_reg) acc[3][0],
            c31 = inout(zmm_reg) acc[3][1],
            c40 = inout(zmm_reg) acc[4][0],
            c41 = inout(zmm_reg) acc[4][1],
            c50 = inout(zmm_reg) acc[5][0],
            c51 = inout(zmm_reg) acc[5][1],
            c60 = inout(zmm_reg) acc[6][0],
            c61 = inout(zmm_reg) acc[6][1],
            c70 = inout(zmm_reg) acc[7][0],
            c71 = inout(zmm_reg) acc[7][1],
            options(nostack, readonly),
        );
    }
}

/// One sum of the 8 × 32 tile as assembly text, as [`sum_8x48`] with two vectors of B.
macro_rules! sum_8x32 {
    (@rows $b0:literal, $b1:literal; $($row:literal $t:literal $a:literal),*) => {
        concat!(
            "vmovaps {b0}, zmmword ptr [{bp} + ", $b0, "]\n",
            "vmovaps {b1}, zmmword ptr [{bp} + ", $b1, "]\n",
            $(
                "vbroadcastss {t", $t, "}, dword ptr [{ap} + ", $a, "]\n",
                "vfmadd231ps {c", $row, "0}, {t", $t, "}, {b0}\n",
                "vfmadd231ps {c", $row, "1}, {t", $t, "}, {b1}\n",
            )*
        )
    };
    ($b0:literal, $b1:literal; $a0:literal, $a1:literal, $a2:literal, $a3:literal,
     $a4:literal, $a5:literal, $a6:literal, $a7:literal) => {
        sum_8x32!(@rows $b0, $b1; 0 0 $a0, 1 1 $a1, 2 0 $a2, 3 1 $a3, 4 0 $a4, 5 1 $a5, 6 0 $a6,
            7 1 $a7)
    };
}

/// `acc[r][v] += A[p][r] · B[p][16v..16v + 16]` for the `kc >= 1` sums of an 8-row A
/// panel and the first 32 columns of a B strip whose sums are `ldb` f32 apart: the
/// narrower last strips of a block on the 8 × 48 plan (at 1024 columns, 20 strips of 48
/// and two of 32; at 512, one in 16). Each sum is two vector loads of B, eight
/// broadcasts of A and 16 FMAs, so the loads stay below two a cycle and the FMA ports
/// busy; the compiled loop it replaced ran these strips at about two thirds of the full
/// tile's rate.
///
/// `next` is prefetched into L2 as in [`sums_8x48`].
///
/// # Safety
/// `a` must hold `kc · 8` f32 and `b` (64-byte aligned, `ldb` a multiple of 16 and at
/// least 32) `kc · ldb`; `kc >= 1`; AVX-512 F present. `next` is only prefetched.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn sums_8x32(
    kc: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    acc: &mut [[__m512; 2]; 8],
    next: *const f32,
) {
    debug_assert!(kc >= 1 && ldb >= 32 && ldb.is_multiple_of(16));
    // SAFETY: the loop reads kc·32 bytes of A's panel and the first 128 (aligned) bytes
    // of each of B's kc sums, inside the panels (caller); it writes only the listed
    // registers and no memory.
    unsafe {
        std::arch::asm!(
            // Two sums per iteration, then the odd one; A's panel is prefetched as in
            // `sums_8x48`.
            "mov {n2}, {k}",
            "shr {n2}, 1",
            "jz 3f",
            "2:",
            sum_8x32!(0, 64; 0, 4, 8, 12, 16, 20, 24, 28),
            "add {bp}, {ldb}",
            sum_8x32!(0, 64; 32, 36, 40, 44, 48, 52, 56, 60),
            "prefetcht0 byte ptr [{ap} + {pf}]",
            "prefetcht1 byte ptr [{nx}]",
            "add {nx}, 64",
            "add {ap}, 64",
            "add {bp}, {ldb}",
            "dec {n2}",
            "jnz 2b",
            "3:",
            "test {k}, 1",
            "jz 4f",
            sum_8x32!(0, 64; 0, 4, 8, 12, 16, 20, 24, 28),
            "4:",
            pf = const A_PREFETCH,
            n2 = out(reg) _,
            nx = inout(reg) next => _,
            ap = inout(reg) a => _,
            bp = inout(reg) b => _,
            ldb = in(reg) ldb * size_of::<f32>(),
            k = in(reg) kc,
            b0 = out(zmm_reg) _,
            b1 = out(zmm_reg) _,
            t0 = out(zmm_reg) _,
            t1 = out(zmm_reg) _,
            c00 = inout(zmm_reg) acc[0][0],
            c01 = inout(zmm_reg) acc[0][1],
            c10 = inout(zmm_reg) acc[1][0],
            c11 = inout(zmm_reg) acc[1][1],
            c20 = inout(zmm_reg) acc[2][0],
            c21 = inout(zmm_reg) acc[2][1],
            c30 = inout(zmm_reg) acc[3][0],
            c31 = inout(zmm_reg) acc[3][1],
            c40 = inout(zmm_reg) acc[4][0],
            c41 = inout(zmm_reg) acc[4][1],
            c50 = inout(zmm_reg) acc[5][0],
            c51 = inout(zmm_reg) acc[5][1],
            c60 = inout(zmm_reg) acc[6][0],
            c61 = inout(zmm_reg) acc[6][1],
            c70 = inout(zmm_reg) acc[7][0],
            c71 = inout(zmm_reg) acc[7][1],
            options(nostack, readonly),
        );
    }
}

/// `acc[r][v] += A[p][r] · B[p][16v..16v + 16]` for `v < NVE`: the first `NVE` vectors of
/// each sum of a B strip whose sums are `ldb` f32 apart, for the last strip of a block
/// when it is narrower than the full tile (the full tile would multiply zero columns).
///
/// # Safety
/// `a` must hold `kc · MR` f32 and `b` (64-byte aligned, `ldb` a multiple of 16) `kc · ldb`
/// with `16·NVE <= ldb`; AVX-512 F present.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn sums_edge<const MR: usize, const NVE: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    acc: &mut [[__m512; NVE]; MR],
) {
    for p in 0..kc {
        // SAFETY: sum p < kc of both panels (caller); B's vectors are aligned.
        unsafe {
            let bp = b.add(p * ldb);
            let mut bv = [_mm512_setzero_ps(); NVE];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = _mm512_load_ps(bp.add(16 * v));
            }
            let ap = a.add(p * MR);
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add(r));
                for (x, &bx) in row.iter_mut().zip(&bv) {
                    *x = _mm512_fmadd_ps(av, bx, *x);
                }
            }
        }
    }
}
