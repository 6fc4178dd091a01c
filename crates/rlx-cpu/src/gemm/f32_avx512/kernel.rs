//! One micro-kernel call of the own f32 kernel: the sums of an A panel (packed, or read
//! in place) against a B strip in registers, through the assembly loop of `micro.rs` the
//! tile and layout select, then the C tile written over or added to.

use super::mask16;
use super::micro as sums;
use std::arch::x86_64::*;

/// The part of C one micro-kernel call writes: `rows × cols` elements from `ptr`, rows
/// `ldc` elements apart and columns contiguous, added to (`add`) or written over.
#[derive(Clone, Copy)]
pub(super) struct CTile {
    pub(super) ptr: *mut f32,
    pub(super) ldc: isize,
    pub(super) add: bool,
    pub(super) rows: usize,
    pub(super) cols: usize,
}

/// `C[rows × cols] (+)= A panel · B strip` over `kc` sums for an `MR × 16·NV` tile whose
/// `rows <= MR` rows and `cols <= 16·NV` columns lie inside C (`out`): added to C when
/// `out.add` (C is not read otherwise, so a NaN in an overwritten C does not leak). B's
/// sums are `ldb` f32 apart. A strip narrower than the tile runs only the vectors it
/// stores. The 8 × 48 and 8 × 32 loops ask for [`sums::next_lines`] lines from `next`
/// on into L2 (see [`prefetch_slice`](super::prefetch_slice)); pass `a` when there is nothing to fetch. With
/// `lda > 0`, `a` is A's first row of the tile in place (rows `lda` f32 apart, see
/// [`IN_PLACE_LDA`](super::IN_PLACE_LDA)), else a packed panel.
///
/// # Safety
/// `a` holds `kc · MR` packed f32 (`lda == 0`) or, only for `MR == 8` and `cols > 16`,
/// `MR` rows of `kc` f32 `lda` apart; `b` (64-byte aligned) `kc · ldb` packed f32, `ldb`
/// a multiple of 16 with `cols <= ldb <= 16·NV`; `out` addresses a writable (and, with `add`,
/// readable) `rows × cols` tile; `1 <= rows <= MR`, `1 <= cols <= 16·NV`; AVX-512 F
/// present.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn micro<const MR: usize, const NV: usize, const ROWS: bool>(
    kc: usize,
    (a, lda, next): (*const f32, usize, *const f32),
    (b, ldb): (*const f32, usize),
    out: CTile,
) {
    let CTile {
        ptr: c,
        ldc,
        rows,
        cols,
        ..
    } = out;
    // Ask for the C tile's lines before the sums, into L2 only. Measured on two threads at
    // W11's shapes (12 × 32 tile): 8–10 % faster than the same prefetches into L1 spread
    // over the last sums (the lines, a row of C apart, compete for a few L1 sets and fill
    // buffers with B's strip), and within 3 % of a run that does not write C at all.
    for r in 0..rows {
        // SAFETY: row r < rows of the tile (caller); prefetches never fault.
        unsafe {
            let cr = c.offset(r as isize * ldc);
            for off in (0..cols).step_by(16) {
                _mm_prefetch::<_MM_HINT_T1>(cr.add(off) as *const i8);
            }
            _mm_prefetch::<_MM_HINT_T1>(cr.add(cols - 1) as *const i8);
        }
    }
    let nv = cols.div_ceil(16);
    // SAFETY: forwarded contract; `nv <= NV` vectors of each sum are read.
    unsafe {
        match nv {
            _ if nv == NV && ldb == 16 * NV => {
                tile::<MR, NV, ROWS>(kc, (a, lda, next), (b, ldb), out)
            }
            1 => tile::<MR, 1, ROWS>(kc, (a, lda, next), (b, ldb), out),
            2 => tile::<MR, 2, ROWS>(kc, (a, lda, next), (b, ldb), out),
            _ => unreachable!("a strip of {cols} columns in a tile of {ldb}"),
        }
    }
}

/// The sums and the C update of [`micro()`] for the first `NVE` vectors of each sum: an
/// assembly loop for the full 12 × 32 and 8 × 48 tiles and for 8 × 32 (the 8-row loops
/// with A packed or in place), the compiled loop otherwise.
///
/// # Safety
/// As [`micro()`], with `out.cols <= 16·NVE <= ldb`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn tile<const MR: usize, const NVE: usize, const ROWS: bool>(
    kc: usize,
    (a, lda, next): (*const f32, usize, *const f32),
    (b, ldb): (*const f32, usize),
    out: CTile,
) {
    let CTile {
        ptr: c,
        ldc,
        add,
        rows,
        cols,
    } = out;
    let mut acc = [[_mm512_setzero_ps(); NVE]; MR];
    let accp = acc.as_mut_ptr() as *mut __m512;
    // SAFETY: the panels hold kc >= 1 sums of MR and ldb f32 (caller: k > 0); the casts
    // reinterpret `acc` as the array type it is when the dimensions match; AVX-512 F
    // present.
    unsafe {
        if MR == 12 && NVE == 2 && ldb == 32 {
            sums::sums_12x32(kc, a, b, &mut *(accp as *mut [[__m512; 2]; 12]));
        } else if MR == 8 && NVE == 2 && ROWS && lda > 0 {
            let acc = &mut *(accp as *mut [[__m512; 2]; 8]);
            sums::sums_8x32_rows(kc, (a, lda), (b, ldb), acc, next);
        } else if MR == 8 && NVE == 2 {
            sums::sums_8x32(kc, a, b, ldb, &mut *(accp as *mut [[__m512; 2]; 8]), next);
        } else if MR == 8 && NVE == 3 && ldb == 48 && ROWS && lda > 0 {
            sums::sums_8x48_rows(kc, (a, lda), b, &mut *(accp as *mut [[__m512; 3]; 8]), next);
        } else if MR == 8 && NVE == 3 && ldb == 48 {
            sums::sums_8x48(kc, a, b, &mut *(accp as *mut [[__m512; 3]; 8]), next);
        } else {
            debug_assert_eq!(lda, 0, "A read in place on a {MR} x {NVE} tile");
            sums::sums_edge::<MR, NVE>(kc, a, b, ldb, &mut acc);
        }
    }
    for (r, row) in acc.iter().enumerate().take(rows) {
        for (v, x) in row.iter().enumerate() {
            let mask = mask16(cols.saturating_sub(16 * v));
            // SAFETY: the lanes of `mask` are columns 16v.. < cols of row r < rows, inside
            // the tile (caller); masked-off lanes are not accessed.
            unsafe {
                let cp = c.offset(r as isize * ldc).add(16 * v);
                let y = if add {
                    _mm512_add_ps(_mm512_maskz_loadu_ps(mask, cp), *x)
                } else {
                    *x
                };
                _mm512_mask_storeu_ps(cp, mask, y);
            }
        }
    }
}
