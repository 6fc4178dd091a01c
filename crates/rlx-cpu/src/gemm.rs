//! Dense matrix multiplication `C = α·A·B + β·C` over strided views.
//!
//! Views carry a row and a column stride in elements (either may be negative or zero-free
//! permuted), so transposes and reversed axes cost nothing.

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

/// A mutable strided matrix view; the layout rules are those of [`MatRef`].
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

fn at(offset: usize, rs: isize, cs: isize, i: usize, j: usize) -> usize {
    (offset as isize + i as isize * rs + j as isize * cs) as usize
}

macro_rules! naive {
    ($name:ident, $t:ty) => {
        /// `C = alpha·A·B + beta·C` with `A` m×k, `B` k×n, `C` m×n, at most `threads` worker threads.
        pub fn $name(alpha: $t, a: MatRef<'_, $t>, b: MatRef<'_, $t>, beta: $t, c: MatMut<'_, $t>, threads: usize) {
            let _ = threads;
            assert!(
                a.cols == b.rows && a.rows == c.rows && b.cols == c.cols,
                concat!(stringify!($name), ": shapes do not chain: A is {}x{}, B is {}x{}, C is {}x{}; need A m×k, B k×n, C m×n"),
                a.rows, a.cols, b.rows, b.cols, c.rows, c.cols
            );
            for i in 0..c.rows {
                for j in 0..c.cols {
                    let mut s: $t = 0.0;
                    for p in 0..a.cols {
                        s += a.data[at(a.offset, a.row_stride, a.col_stride, i, p)]
                            * b.data[at(b.offset, b.row_stride, b.col_stride, p, j)];
                    }
                    let ci = at(c.offset, c.row_stride, c.col_stride, i, j);
                    c.data[ci] = if beta == 0.0 { alpha * s } else { alpha * s + beta * c.data[ci] };
                }
            }
        }
    };
}
naive!(sgemm, f32);
naive!(dgemm, f64);
