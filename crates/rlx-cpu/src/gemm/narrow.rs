//! Products with a narrow output, `n ≤ 16` columns (a classifier head: `[batch, hidden] ·
//! [hidden, classes]` and its weight gradient), on AVX-512. A general GEMM packs panels
//! for a wide output and runs at a fraction of its speed here (faer: ≈ 85 GFLOP/s on one
//! core at W6's `256×512·512×10`); these kernels keep the `n` output columns in registers:
//! - *dot form* (A's rows contiguous): per row, `n` 16-lane partial dot products against
//!   the packed columns of B, reduced at the end of the row;
//! - *outer form* (A's columns contiguous): per block of 16 rows, `n` accumulators updated
//!   with each column of A times a broadcast element of B.
//!
//! Every output element is one fixed sequence of operations (row blocks only decide who
//! computes it), so results do not depend on the thread count.

use rayon::prelude::*;

/// Strided operands of `C = α·A·B (+ C)`: pointers at element (0, 0), strides in
/// elements.
#[derive(Clone, Copy)]
pub(crate) struct Narrow<T> {
    pub(crate) a: *const T,
    pub(crate) a_strides: (isize, isize),
    pub(crate) b: *const T,
    pub(crate) b_strides: (isize, isize),
    pub(crate) c: *mut T,
    pub(crate) c_strides: (isize, isize),
    pub(crate) mnk: (usize, usize, usize),
    pub(crate) alpha: T,
    /// Add the product to C (β = 1) instead of overwriting it (β = 0).
    pub(crate) add: bool,
}

// SAFETY: a Narrow only carries the views of one product across the row blocks of
// `try_narrow_f32`: A and B are only read, and each block writes C's rows `lo..hi`,
// disjoint from every other block's (C's elements are pairwise distinct, which `sgemm`
// asserts); the views outlive the blocking parallel loop that uses them.
unsafe impl<T> Send for Narrow<T> {}
// SAFETY: as for Send: shared access only reads A and B and writes disjoint rows of C.
unsafe impl<T> Sync for Narrow<T> {}

/// The element types with narrow-output kernels (f64 has none: the general GEMM).
pub(crate) trait NarrowGemm: Sized {
    /// Compute the product if it is narrow and laid out for these kernels; `false`
    /// leaves it to the general GEMM.
    ///
    /// # Safety
    /// The views must be in bounds and C's elements distinct and not overlapping A or B
    /// (as `sgemm` checks).
    unsafe fn try_narrow(p: Narrow<Self>, threads: usize) -> bool;
}

impl NarrowGemm for f32 {
    /// # Safety
    /// As [`NarrowGemm::try_narrow`].
    unsafe fn try_narrow(p: Narrow<f32>, threads: usize) -> bool {
        // SAFETY: the caller upholds the trait method's contract, which is try_narrow_f32's.
        unsafe { try_narrow_f32(p, threads) }
    }
}

impl NarrowGemm for f64 {
    /// # Safety
    /// As [`NarrowGemm::try_narrow`] (nothing is accessed here).
    unsafe fn try_narrow(_: Narrow<f64>, _: usize) -> bool {
        false
    }
}

/// Rows per parallel block (a multiple of 16).
const BLOCK: usize = 64;

/// [`NarrowGemm::try_narrow`] for f32.
///
/// # Safety
/// As [`NarrowGemm::try_narrow`]: every view in bounds for `mnk`, C's elements distinct and
/// overlapping neither A nor B.
unsafe fn try_narrow_f32(p: Narrow<f32>, threads: usize) -> bool {
    let (m, n, k) = p.mnk;
    if !(1..=16).contains(&n) || m < 16 || k < 16 || !avx512() {
        return false;
    }
    let dot = p.a_strides.1 == 1;
    if !dot && p.a_strides.0 != 1 {
        return false;
    }
    // B's columns packed contiguously for the dot form (n·k floats).
    let bt: Vec<f32> = if dot {
        let mut v = vec![0f32; n * k];
        for (j, col) in v.chunks_mut(k).enumerate() {
            for (kk, x) in col.iter_mut().enumerate() {
                // SAFETY: `kk < k` and `j < n`: element (kk, j) of B, in bounds by the caller's
                // contract.
                *x = unsafe {
                    *p.b.offset(kk as isize * p.b_strides.0 + j as isize * p.b_strides.1)
                };
            }
        }
        v
    } else {
        Vec::new()
    };
    let blocks = m.div_ceil(BLOCK);
    let run = |blk: usize| {
        let rows = (blk * BLOCK, ((blk + 1) * BLOCK).min(m));
        // SAFETY: avx512() was checked above, as dot_rows/outer_rows need; the block's rows
        // `lo..hi <= m` are in bounds, and the blocks write disjoint rows of C; `bt` holds
        // `n·k` packed floats.
        unsafe {
            if dot {
                dispatch_dot(&p, &bt, rows);
            } else {
                dispatch_outer(&p, rows);
            }
        }
    };
    if threads > 1 && blocks > 1 && m * n * k >= super::PAR_MNK_PER_THREAD {
        (0..blocks).into_par_iter().for_each(run);
    } else {
        (0..blocks).for_each(run);
    }
    true
}

fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Write `v` (already scaled by α) to C[i, j], adding C's value when `add`.
/// # Safety
/// `(i, j)` must be an element of C's view, written by no one else meanwhile.
#[inline(always)]
unsafe fn put(p: &Narrow<f32>, i: usize, j: usize, v: f32) {
    // SAFETY: the caller passes `i < m`, `j < n`, an element of C's checked view that only this
    // row block writes.
    unsafe {
        let c =
            p.c.offset(i as isize * p.c_strides.0 + j as isize * p.c_strides.1);
        *c = if p.add { *c + v } else { v };
    }
}

macro_rules! by_width {
    ($f:ident, $n:expr, $($arg:expr),*) => {
        match $n {
            1 => $f::<1>($($arg),*), 2 => $f::<2>($($arg),*), 3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*), 5 => $f::<5>($($arg),*), 6 => $f::<6>($($arg),*),
            7 => $f::<7>($($arg),*), 8 => $f::<8>($($arg),*), 9 => $f::<9>($($arg),*),
            10 => $f::<10>($($arg),*), 11 => $f::<11>($($arg),*), 12 => $f::<12>($($arg),*),
            13 => $f::<13>($($arg),*), 14 => $f::<14>($($arg),*), 15 => $f::<15>($($arg),*),
            _ => $f::<16>($($arg),*),
        }
    };
}

/// # Safety
/// As [`dot_rows`]: the CPU must have AVX-512F, `1 <= n <= 16`, A's rows contiguous, views
/// in bounds, rows `rows.0..rows.1` this caller's own.
#[cfg(target_arch = "x86_64")]
unsafe fn dispatch_dot(p: &Narrow<f32>, bt: &[f32], rows: (usize, usize)) {
    // SAFETY: the caller guarantees dot_rows's contract; `n = p.mnk.1` picks the matching
    // width.
    unsafe { by_width!(dot_rows, p.mnk.1, p, bt, rows) }
}

/// # Safety
/// As [`outer_rows`]: the CPU must have AVX-512F, `1 <= n <= 16`, A's columns contiguous,
/// views in bounds, rows `rows.0..rows.1` this caller's own.
#[cfg(target_arch = "x86_64")]
unsafe fn dispatch_outer(p: &Narrow<f32>, rows: (usize, usize)) {
    // SAFETY: the caller guarantees outer_rows's contract; `n = p.mnk.1` picks the matching
    // width.
    unsafe { by_width!(outer_rows, p.mnk.1, p, rows) }
}

/// # Safety
/// Never called: `avx512()` is false off x86-64.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn dispatch_dot(_: &Narrow<f32>, _: &[f32], _: (usize, usize)) {
    unreachable!("avx512() is false")
}

/// # Safety
/// Never called: `avx512()` is false off x86-64.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn dispatch_outer(_: &Narrow<f32>, _: (usize, usize)) {
    unreachable!("avx512() is false")
}

/// Dot form over rows `lo..hi`: `acc[j]` holds 16 partial sums of row i · column j.
/// # Safety
/// The CPU must have AVX-512F; `N` must be C's column count; A's rows must be contiguous
/// (`a_strides.1 == 1`); `bt` must hold B's `N` columns packed (`N·k` floats); rows
/// `lo..hi` of the views must be in bounds and written by no one else.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot_rows<const N: usize>(p: &Narrow<f32>, bt: &[f32], (lo, hi): (usize, usize)) {
    use std::arch::x86_64::*;
    let k = p.mnk.2;
    let tail = k % 16;
    let mask: __mmask16 = ((1u32 << tail) - 1) as __mmask16;
    for i in lo..hi {
        // SAFETY: row `i < m` of A has `k` contiguous floats (a_strides.1 == 1); full loads
        // read `kk + 16 <= k` and the tail is masked to `k % 16` lanes (masked-off lanes are
        // not accessed), likewise in `bt`'s column `j` (`k` floats at `j·k`); `put` writes
        // element `(i, j)`, `j < N = n`, of this block's rows; avx512f enabled here.
        unsafe {
            let row = p.a.offset(i as isize * p.a_strides.0);
            let mut acc = [_mm512_setzero_ps(); N];
            let mut kk = 0;
            while kk + 16 <= k {
                let av = _mm512_loadu_ps(row.add(kk));
                for (j, acc) in acc.iter_mut().enumerate() {
                    let bv = _mm512_loadu_ps(bt.as_ptr().add(j * k + kk));
                    *acc = _mm512_fmadd_ps(av, bv, *acc);
                }
                kk += 16;
            }
            if tail != 0 {
                let av = _mm512_maskz_loadu_ps(mask, row.add(kk));
                for (j, acc) in acc.iter_mut().enumerate() {
                    let bv = _mm512_maskz_loadu_ps(mask, bt.as_ptr().add(j * k + kk));
                    *acc = _mm512_fmadd_ps(av, bv, *acc);
                }
            }
            for (j, acc) in acc.iter().enumerate() {
                put(p, i, j, p.alpha * _mm512_reduce_add_ps(*acc));
            }
        }
    }
}

/// Outer form over rows `lo..hi` in blocks of 16: `acc[j]` holds C[i..i+16, j].
/// # Safety
/// The CPU must have AVX-512F; `N` must be C's column count; A's columns must be contiguous
/// (`a_strides.0 == 1`); rows `lo..hi` of the views must be in bounds and written by no one
/// else.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn outer_rows<const N: usize>(p: &Narrow<f32>, (lo, hi): (usize, usize)) {
    use std::arch::x86_64::*;
    let k = p.mnk.2;
    let (brs, bcs) = p.b_strides;
    let mut i = lo;
    while i < hi {
        let len = (hi - i).min(16);
        let mask: __mmask16 = ((1u32 << len) - 1) as __mmask16;
        // SAFETY: A's column `kk < k` holds rows `i..i + len` contiguously (a_strides.0 == 1)
        // and the load is masked to `len <= 16` lanes; B's element `(kk, j)` with `j < N = n`
        // is in bounds; `out` is a local 16-float array; `put` writes rows `i..i + len` of this
        // block; avx512f enabled here.
        unsafe {
            let mut acc = [_mm512_setzero_ps(); N];
            for kk in 0..k {
                let col = p.a.offset(i as isize + kk as isize * p.a_strides.1);
                let av = _mm512_maskz_loadu_ps(mask, col);
                let brow = p.b.offset(kk as isize * brs);
                for (j, acc) in acc.iter_mut().enumerate() {
                    let bv = _mm512_set1_ps(*brow.offset(j as isize * bcs));
                    *acc = _mm512_fmadd_ps(av, bv, *acc);
                }
            }
            let mut out = [0f32; 16];
            for (j, acc) in acc.iter().enumerate() {
                _mm512_storeu_ps(
                    out.as_mut_ptr(),
                    _mm512_mul_ps(_mm512_set1_ps(p.alpha), *acc),
                );
                for (r, &v) in out[..len].iter().enumerate() {
                    put(p, i + r, j, v);
                }
            }
        }
        i += len;
    }
}
