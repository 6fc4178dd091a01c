//! Dense matrix multiplication `C = α·A·B + β·C` over strided views.
//!
//! Views carry a row and a column stride in elements, either of which may be negative, so
//! transposed, reversed or sliced operands cost nothing. On AVX-512 CPUs, large f32
//! products that read A transposed (on Intel also those of at least 384 columns, or a
//! multiple of 48, in any layout) run on rlx's own packed kernel (`f32_path.rs`,
//! `f32_avx512.rs`); everything else (and every product on other CPUs) on `faer`'s matmul
//! (cache-blocked, packed, with AVX2/AVX-512 micro-kernels chosen at run time), chosen
//! after measuring it against `gemm`, `matrixmultiply` and OpenBLAS on this project's
//! machines (numbers in `crates/rlx-bench/README.md`). On `threads > 1` the output is
//! split into one block of rows (or columns) per thread and each block is a
//! single-threaded faer product, run side by side: 465–508 GFLOP/s on two cores at W6's
//! shapes and 1024³, where faer's own parallel split reached 337–435.
//!
//! Semantics follow BLAS: `β = 0` overwrites `C` without reading it (NaN in `C` does not
//! propagate); `k = 0` or `α = 0` gives `C = β·C`. Results are deterministic for a given
//! shape and layout, and (tested for 1 and 2 threads) do not depend on the thread count.

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod bf16_avx512;
#[cfg(target_arch = "x86_64")]
mod f32_avx512;
mod f32_path;
pub mod int8;
#[cfg(target_arch = "x86_64")]
mod int8_pack;
#[cfg(target_arch = "x86_64")]
mod int8_vnni;
pub mod lowp;
#[cfg(target_arch = "x86_64")]
mod lowp_drive;
mod narrow;
#[cfg(target_arch = "x86_64")]
mod pieces;
#[cfg(target_arch = "x86_64")]
mod team;

/// The own f32 kernel over operands its packers decode (the scaled matmul's codes,
/// `exec/scaled/codes.rs`): the reader trait, the pair of readers, the entry and its
/// views.
#[cfg(target_arch = "x86_64")]
pub(crate) mod decoding {
    #[cfg(test)]
    pub(crate) use super::f32_avx512::F32;
    pub(crate) use super::f32_avx512::{Load, Pair, available, mask16, sgemm_decoding};
    pub(crate) use super::lowp_drive::{Dst, Src};
}

use crate::exec::par::SendPtr;
use f32_path::OwnGemm;
mod checks;
pub use checks::GemmError;
pub use f32_path::{F32Path, sgemm_with, try_sgemm_with};
use faer::linalg::matmul::matmul;
use faer::{Accum, Par};

/// A read-only strided matrix view: element `(i, j)` is
/// `data[offset + i·row_stride + j·col_stride]`.
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a, T> {
    /// The storage the view reads from.
    pub data: &'a [T],
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Distance in elements between consecutive rows (may be negative).
    pub row_stride: isize,
    /// Distance in elements between consecutive columns (may be negative).
    pub col_stride: isize,
    /// Index in `data` of element `(0, 0)`.
    pub offset: usize,
}

/// A mutable strided matrix view; the layout rules are those of [`MatRef`]. Distinct
/// elements must not share storage (no zero or overlapping strides).
#[derive(Debug)]
pub struct MatMut<'a, T> {
    /// The storage the view writes to.
    pub data: &'a mut [T],
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Distance in elements between consecutive rows (may be negative).
    pub row_stride: isize,
    /// Distance in elements between consecutive columns (may be negative).
    pub col_stride: isize,
    /// Index in `data` of element `(0, 0)`.
    pub offset: usize,
}

impl<'a, T> MatRef<'a, T> {
    /// A row-major `rows × cols` view of `data` (row stride `cols`, column stride 1).
    pub fn row_major(data: &'a [T], rows: usize, cols: usize) -> Self {
        MatRef {
            data,
            rows,
            cols,
            row_stride: cols as isize,
            col_stride: 1,
            offset: 0,
        }
    }

    /// The transposed view (swaps the dimensions and the strides; no copy).
    pub fn t(self) -> Self {
        MatRef {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }
}

impl<'a, T> MatMut<'a, T> {
    /// A row-major `rows × cols` view of `data` (row stride `cols`, column stride 1).
    pub fn row_major(data: &'a mut [T], rows: usize, cols: usize) -> Self {
        MatMut {
            data,
            rows,
            cols,
            row_stride: cols as isize,
            col_stride: 1,
            offset: 0,
        }
    }
}

macro_rules! gemm_fn {
    ($name:ident, $t:ty) => {
        /// The GEMM on `path` (the checks and semantics of the public entry points;
        /// `op` names the entry point in errors).
        #[allow(clippy::too_many_arguments)]
        fn $name(
            op: &'static str,
            path: F32Path,
            alpha: $t,
            a: MatRef<'_, $t>,
            b: MatRef<'_, $t>,
            beta: $t,
            mut c: MatMut<'_, $t>,
            threads: usize,
        ) -> Result<(), GemmError> {
            checks::views(op, &a, &b, &c)?;
            let (m, n, k) = (c.rows, c.cols, a.cols);
            if m == 0 || n == 0 {
                return Ok(());
            }
            if k == 0 || alpha == 0.0 || beta != 1.0 && beta != 0.0 {
                scale(&mut c, beta);
                if k == 0 || alpha == 0.0 {
                    return Ok(());
                }
            }
            // SAFETY: the extent checks above keep every index of the three views inside
            // their slices, C's elements are pairwise distinct, and A/B cannot alias C
            // (shared vs. exclusive borrows).
            let cm = unsafe {
                faer::MatMut::from_raw_parts_mut(
                    c.data.as_mut_ptr().offset(c.offset as isize),
                    m,
                    n,
                    c.row_stride,
                    c.col_stride,
                )
            };
            // SAFETY: A's extent (checked above) lies inside `a.data`, so the offset
            // pointer and every element of the m×k view are in bounds; only read.
            let am = unsafe {
                faer::MatRef::from_raw_parts(
                    a.data.as_ptr().offset(a.offset as isize),
                    m,
                    k,
                    a.row_stride,
                    a.col_stride,
                )
            };
            // SAFETY: B's extent (checked above) lies inside `b.data`; only read.
            let bm = unsafe {
                faer::MatRef::from_raw_parts(
                    b.data.as_ptr().offset(b.offset as isize),
                    k,
                    n,
                    b.row_stride,
                    b.col_stride,
                )
            };
            let accum = if beta == 0.0 {
                Accum::Replace
            } else {
                Accum::Add
            };
            let narrow = narrow::Narrow {
                a: am.as_ptr(),
                a_strides: (a.row_stride, a.col_stride),
                b: bm.as_ptr(),
                b_strides: (b.row_stride, b.col_stride),
                c: cm.as_ptr_mut(),
                c_strides: (c.row_stride, c.col_stride),
                mnk: (m, n, k),
                alpha,
                add: beta != 0.0,
            };
            // SAFETY: the three views are in bounds of their slices (checked above), C's
            // elements are pairwise distinct (no_self_overlap) and C is an exclusive
            // borrow, so it overlaps neither A nor B: try_narrow's contract.
            let handled = unsafe { <$t as narrow::NarrowGemm>::try_narrow(narrow, threads) };
            if handled {
                return Ok(());
            }
            // Below ~2 Mflop per thread, waking workers costs more than it saves
            // (measured: 128³ takes 18 µs on one thread, 30 µs on two).
            let useful = (m * n * k / PAR_MNK_PER_THREAD).max(1);
            let threads = threads.min(useful);
            // SAFETY: as for try_narrow above.
            if unsafe { <$t as OwnGemm>::try_own(path, narrow, threads) } {
                return Ok(());
            }
            let Some(split) = Split::new(m, n, threads) else {
                matmul(cm, accum, am, bm, alpha, Par::Seq);
                return Ok(());
            };
            // One single-threaded product per block of C's rows (or columns), side by
            // side: on W6's and W4's shapes 465–495 GFLOP/s on two cores, where
            // faer's own two-thread split reaches 337–435 (`--example gemm_shapes`).
            // Each element's k sum runs in the same order either way (faer blocks k
            // the same for any slice of the output; `tests/gemm.rs` pins the bits).
            let (cp, ap, bp) = (
                SendPtr(cm.as_ptr_mut()),
                SendPtr(am.as_ptr() as *mut $t),
                SendPtr(bm.as_ptr() as *mut $t),
            );
            let (crs, ccs) = (cm.row_stride(), cm.col_stride());
            let (ars, acs) = (am.row_stride(), am.col_stride());
            let (brs, bcs) = (bm.row_stride(), bm.col_stride());
            let block = |part: usize| {
                let (lo, hi) = split.range(part);
                // SAFETY: the blocks are disjoint slices of C (rows or columns lo..hi),
                // inside the views checked above; A and B are only read.
                unsafe {
                    let (c, a, b) = if split.rows {
                        (
                            faer::MatMut::from_raw_parts_mut(
                                cp.get().offset(lo as isize * crs),
                                hi - lo,
                                n,
                                crs,
                                ccs,
                            ),
                            faer::MatRef::from_raw_parts(
                                ap.get().offset(lo as isize * ars),
                                hi - lo,
                                k,
                                ars,
                                acs,
                            ),
                            faer::MatRef::from_raw_parts(bp.get(), k, n, brs, bcs),
                        )
                    } else {
                        (
                            faer::MatMut::from_raw_parts_mut(
                                cp.get().offset(lo as isize * ccs),
                                m,
                                hi - lo,
                                crs,
                                ccs,
                            ),
                            faer::MatRef::from_raw_parts(ap.get(), m, k, ars, acs),
                            faer::MatRef::from_raw_parts(
                                bp.get().offset(lo as isize * bcs),
                                k,
                                hi - lo,
                                brs,
                                bcs,
                            ),
                        )
                    };
                    matmul(c, accum, a, b, alpha, Par::Seq);
                }
            };
            // The calling thread computes block 0 and wakes workers only for the rest (a
            // parallel iterator started outside the pool would wake one worker per block
            // and put the caller to sleep).
            rayon::in_place_scope(|s| {
                for part in 1..split.parts {
                    s.spawn(move |_| block(part));
                }
                block(0);
            });
            Ok(())
        }
    };
}

/// How a product is spread over threads: `parts` blocks of C's rows (or columns).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Split {
    rows: bool,
    parts: usize,
    len: usize,
    per: usize,
}

/// Rows (or columns) per block at least; block edges are multiples of this too, so
/// the micro-kernels' register tiles stay full.
const SPLIT_GRAIN: usize = 16;

impl Split {
    /// The split of an `m × n` product over `threads` threads, along the longer side;
    /// `None` when one thread does it all.
    fn new(m: usize, n: usize, threads: usize) -> Option<Split> {
        let (rows, len) = if m >= n { (true, m) } else { (false, n) };
        let per = len.div_ceil(threads.max(1)).next_multiple_of(SPLIT_GRAIN);
        let parts = len.div_ceil(per);
        (parts > 1).then_some(Split {
            rows,
            parts,
            len,
            per,
        })
    }

    /// Rows (or columns) `lo..hi` of block `part`.
    fn range(&self, part: usize) -> (usize, usize) {
        let lo = part * self.per;
        (lo, (lo + self.per).min(self.len))
    }
}

/// Multiply-adds per worker thread below which extra threads are not used.
const PAR_MNK_PER_THREAD: usize = 1 << 21;

/// Storage index of element `(i, j)` of a view.
fn at(offset: usize, rs: isize, cs: isize, i: usize, j: usize) -> usize {
    (offset as isize + i as isize * rs + j as isize * cs) as usize
}

/// `C = beta·C`; `beta = 0` writes zeros without reading `C`.
fn scale<T: Copy + PartialEq + std::ops::Mul<Output = T> + Default>(
    c: &mut MatMut<'_, T>,
    beta: T,
) {
    let zero = T::default();
    for i in 0..c.rows {
        for j in 0..c.cols {
            let idx = at(c.offset, c.row_stride, c.col_stride, i, j);
            let v = &mut c.data[idx];
            *v = if beta == zero { zero } else { *v * beta };
        }
    }
}

gemm_fn!(sgemm_on, f32);
gemm_fn!(dgemm_on, f64);

/// `C = alpha·A·B + beta·C` in f32 with `A` m×k, `B` k×n, `C` m×n (any strides, so
/// transposes are free), on at most `threads` worker threads of the current rayon pool
/// (`1` = serial on the calling thread), on the kernel [`F32Path::default_path`] picks for
/// this CPU.
///
/// Panics (naming the shapes or the view) if the shapes do not chain, a view reaches
/// outside its slice, or `C`'s strides make two elements share storage; [`try_sgemm`]
/// returns those as a [`GemmError`] instead.
///
/// ```
/// use rlx_cpu::gemm::{MatMut, MatRef, sgemm};
///
/// let a = [1f32, 2.0, 3.0, 4.0]; // [[1, 2], [3, 4]]
/// let b = [5f32, 6.0, 7.0, 8.0]; // [[5, 6], [7, 8]]
/// let mut c = [0f32; 4];
/// let (am, bm) = (MatRef::row_major(&a, 2, 2), MatRef::row_major(&b, 2, 2));
/// sgemm(1.0, am, bm, 0.0, MatMut::row_major(&mut c, 2, 2), 1);
/// assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
/// ```
#[track_caller]
pub fn sgemm(
    alpha: f32,
    a: MatRef<'_, f32>,
    b: MatRef<'_, f32>,
    beta: f32,
    c: MatMut<'_, f32>,
    threads: usize,
) {
    checks::or_panic(try_sgemm(alpha, a, b, beta, c, threads));
}

/// [`sgemm`] returning a [`GemmError`] (and writing nothing) where it would panic.
pub fn try_sgemm(
    alpha: f32,
    a: MatRef<'_, f32>,
    b: MatRef<'_, f32>,
    beta: f32,
    c: MatMut<'_, f32>,
    threads: usize,
) -> Result<(), GemmError> {
    let path = F32Path::default_path();
    sgemm_on("sgemm", path, alpha, a, b, beta, c, threads)
}

/// `C = alpha·A·B + beta·C` in f64 (faer's kernels on every CPU); the views, threads and
/// panics are those of [`sgemm`] ([`try_dgemm`] returns the error instead).
#[track_caller]
pub fn dgemm(
    alpha: f64,
    a: MatRef<'_, f64>,
    b: MatRef<'_, f64>,
    beta: f64,
    c: MatMut<'_, f64>,
    threads: usize,
) {
    checks::or_panic(try_dgemm(alpha, a, b, beta, c, threads));
}

/// [`dgemm`] returning a [`GemmError`] (and writing nothing) where it would panic.
pub fn try_dgemm(
    alpha: f64,
    a: MatRef<'_, f64>,
    b: MatRef<'_, f64>,
    beta: f64,
    c: MatMut<'_, f64>,
    threads: usize,
) -> Result<(), GemmError> {
    dgemm_on("dgemm", F32Path::Faer, alpha, a, b, beta, c, threads)
}
