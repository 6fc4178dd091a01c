//! What every GEMM entry point checks before it touches memory, and the error that
//! names what failed: the shapes chain (A m×k, B k×n, C m×n), each view stays inside its
//! slice, C's strides give distinct elements distinct storage, and a requested kernel
//! path exists on this CPU. The `try_` entry points return the error; the others panic
//! with its message.

use super::{MatMut, MatRef};
use std::fmt;

/// Why a GEMM entry point refused its operands. Its message names the entry point, the
/// offending view or path with its sizes, and the fix.
///
/// ```
/// use rlx_cpu::gemm::{GemmError, MatMut, MatRef, try_sgemm};
///
/// let (a, b) = ([1f32; 6], [1f32; 4]);
/// let mut c = [0f32; 4];
/// // A is 2×3 but B is 2×2: the inner dimensions differ.
/// let err = try_sgemm(
///     1.0,
///     MatRef::row_major(&a, 2, 3),
///     MatRef::row_major(&b, 2, 2),
///     0.0,
///     MatMut::row_major(&mut c, 2, 2),
///     1,
/// )
/// .unwrap_err();
/// assert!(matches!(err, GemmError::ShapesDoNotChain { .. }));
/// assert!(err.to_string().contains("A is 2x3, B is 2x2"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GemmError {
    /// A is not `m×k`, B `k×n` and C `m×n` for one `(m, n, k)`.
    ShapesDoNotChain {
        /// The entry point.
        op: &'static str,
        /// A's rows and columns.
        a: (usize, usize),
        /// B's rows and columns.
        b: (usize, usize),
        /// C's rows and columns.
        c: (usize, usize),
    },
    /// A view reaches storage indices outside its slice.
    OutOfBounds {
        /// The entry point.
        op: &'static str,
        /// `"A"`, `"B"` or `"C"`.
        view: &'static str,
        /// The view's rows and columns.
        dims: (usize, usize),
        /// The view's row and column strides.
        strides: (isize, isize),
        /// The view's offset.
        offset: usize,
        /// The lowest and highest storage index the view touches (saturated to the i64
        /// range for strides that large).
        reach: (i64, i64),
        /// The slice's length.
        len: usize,
    },
    /// C's strides map two of its elements to the same storage index.
    OverlappingOutput {
        /// The entry point.
        op: &'static str,
        /// C's rows and columns.
        dims: (usize, usize),
        /// C's row and column strides.
        strides: (isize, isize),
    },
    /// The kernel path asked for does not run on this CPU (or for these operands).
    PathUnavailable {
        /// The entry point.
        op: &'static str,
        /// The path's name (`amx`, `avx512`, …).
        path: &'static str,
        /// The operands' element type.
        operands: &'static str,
        /// What the path needs.
        needs: &'static str,
        /// How to choose a path that runs.
        fix: &'static str,
    },
}

impl fmt::Display for GemmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GemmError::ShapesDoNotChain { op, a, b, c } => write!(
                f,
                "{op}: shapes do not chain: A is {}x{}, B is {}x{}, C is {}x{}; need A m×k, \
                 B k×n, C m×n",
                a.0, a.1, b.0, b.1, c.0, c.1
            ),
            GemmError::OutOfBounds {
                op,
                view,
                dims,
                strides,
                offset,
                reach,
                len,
            } => write!(
                f,
                "{op}: view {view} ({}x{}, strides ({}, {}), offset {offset}) reaches storage \
                 indices {}..={} but its slice has {len} elements; fix the offset/strides or \
                 pass a larger slice",
                dims.0, dims.1, strides.0, strides.1, reach.0, reach.1
            ),
            GemmError::OverlappingOutput { op, dims, strides } => write!(
                f,
                "{op}: output view C ({}x{}, strides ({}, {})) maps distinct elements to the \
                 same storage; give C non-overlapping strides (e.g. row-major: ({}, 1))",
                dims.0, dims.1, strides.0, strides.1, dims.1
            ),
            GemmError::PathUnavailable {
                op,
                path,
                operands,
                needs,
                fix,
            } => write!(
                f,
                "{op}: the {path} path cannot multiply {operands} operands on this CPU \
                 ({needs}); {fix}"
            ),
        }
    }
}

impl std::error::Error for GemmError {}

/// `[lowest, highest]` storage index a view touches, or `None` if it is empty.
fn extent(rows: usize, cols: usize, rs: isize, cs: isize, offset: usize) -> Option<(i128, i128)> {
    if rows == 0 || cols == 0 {
        return None;
    }
    let r = (rows as i128 - 1) * rs as i128;
    let c = (cols as i128 - 1) * cs as i128;
    let o = offset as i128;
    Some((o + r.min(0) + c.min(0), o + r.max(0) + c.max(0)))
}

/// Whether the `dims` view with these strides and offset stays inside a slice of `len`.
fn in_bounds(
    op: &'static str,
    view: &'static str,
    dims: (usize, usize),
    strides: (isize, isize),
    offset: usize,
    len: usize,
) -> Result<(), GemmError> {
    match extent(dims.0, dims.1, strides.0, strides.1, offset) {
        Some((lo, hi)) if lo < 0 || hi >= len as i128 => Err(GemmError::OutOfBounds {
            op,
            view,
            dims,
            strides,
            offset,
            reach: (saturate(lo), saturate(hi)),
            len,
        }),
        _ => Ok(()),
    }
}

/// `x` clamped into the i64 range.
fn saturate(x: i128) -> i64 {
    x.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// Whether distinct elements of a `rows × cols` view with these strides have distinct indices.
fn no_self_overlap(rows: usize, cols: usize, rs: isize, cs: isize) -> bool {
    // Only axes longer than 1 matter; the one with the smaller stride must step by at least
    // 1, the other past the whole extent of the first.
    let (r, c) = (rs.unsigned_abs() as u128, cs.unsigned_abs() as u128);
    match (rows > 1, cols > 1) {
        (false, false) => true,
        (true, false) => r >= 1,
        (false, true) => c >= 1,
        (true, true) if r <= c => r >= 1 && c >= rows as u128 * r,
        (true, true) => c >= 1 && r >= cols as u128 * c,
    }
}

/// The checks of every GEMM entry point (see the module docs), the first failure named.
pub(super) fn views<A, B, C>(
    op: &'static str,
    a: &MatRef<'_, A>,
    b: &MatRef<'_, B>,
    c: &MatMut<'_, C>,
) -> Result<(), GemmError> {
    if a.cols != b.rows || a.rows != c.rows || b.cols != c.cols {
        return Err(GemmError::ShapesDoNotChain {
            op,
            a: (a.rows, a.cols),
            b: (b.rows, b.cols),
            c: (c.rows, c.cols),
        });
    }
    let (ad, ast) = ((a.rows, a.cols), (a.row_stride, a.col_stride));
    let (bd, bst) = ((b.rows, b.cols), (b.row_stride, b.col_stride));
    let (cd, cst) = ((c.rows, c.cols), (c.row_stride, c.col_stride));
    in_bounds(op, "A", ad, ast, a.offset, a.data.len())?;
    in_bounds(op, "B", bd, bst, b.offset, b.data.len())?;
    in_bounds(op, "C", cd, cst, c.offset, c.data.len())?;
    if !no_self_overlap(c.rows, c.cols, c.row_stride, c.col_stride) {
        return Err(GemmError::OverlappingOutput {
            op,
            dims: cd,
            strides: cst,
        });
    }
    Ok(())
}

/// Panics with the error's message (the panicking entry points' behaviour).
#[track_caller]
pub(super) fn or_panic(r: Result<(), GemmError>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}
