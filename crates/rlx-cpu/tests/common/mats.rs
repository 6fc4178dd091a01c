//! What the GEMM test binaries (`gemm`, `gemm_bf16`, `gemm_int8`) share: a seeded
//! generator, the strided layouts a view can express, a matrix that keeps its exact values
//! beside its strided storage, and the exact reference product. One copy, so that a fix to
//! a layout or to the reference reaches every element type's tests.

use rlx_cpu::gemm::lowp::{HalfFloat, bf16, f16};
use rlx_cpu::gemm::{MatMut, MatRef};

/// A 64-bit linear congruential generator: cheap, and a seed gives the same data on every
/// machine (the tests' failure messages name sizes and layouts, the seed fixes the values).
pub struct Lcg(pub u64);

impl Lcg {
    fn step(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0
    }

    /// Uniform in [-1, 1), from the state's top 53 bits.
    pub fn uniform(&mut self) -> f64 {
        ((self.step() >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }

    /// Uniform over all 256 i8 values (the state's top byte).
    pub fn next_i8(&mut self) -> i8 {
        (self.step() >> 56) as u8 as i8
    }
}

/// How a view lays out its matrix inside a storage slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    RowMajor,
    ColMajor,
    /// Row-major with 3 extra elements per row and an offset of 5.
    Padded,
    /// Rows stored last-to-first (negative row stride).
    RowsReversed,
    /// Row-major storage read from its end: both strides negative, columns contiguous.
    RowMajorReversed,
    /// Column-major storage read from its end: both strides negative, rows contiguous.
    ColMajorReversed,
}

/// The layouts the f32/f64 tests rotate through.
pub const LAYOUTS_5: [Layout; 5] = [
    Layout::RowMajor,
    Layout::ColMajor,
    Layout::Padded,
    Layout::RowsReversed,
    Layout::ColMajorReversed,
];

/// The layouts the half-precision and int8 tests rotate through.
pub const LAYOUTS_4: [Layout; 4] = [
    Layout::RowMajor,
    Layout::ColMajor,
    Layout::Padded,
    Layout::RowMajorReversed,
];

impl Layout {
    /// (storage length, row stride, col stride, offset) of an r×c matrix.
    pub fn place(self, r: usize, c: usize) -> (usize, isize, isize, usize) {
        let (ri, ci) = (r as isize, c as isize);
        match self {
            Layout::RowMajor => (r * c, ci, 1, 0),
            Layout::ColMajor => (r * c, 1, ri, 0),
            Layout::Padded => (5 + r * (c + 3), ci + 3, 1, 5),
            Layout::RowsReversed => (r * c, -ci, 1, (r.max(1) - 1) * c),
            Layout::RowMajorReversed => (r * c, -ci, -1, (r * c).max(1) - 1),
            Layout::ColMajorReversed => (r * c, -1, -ri, (r * c).max(1) - 1),
        }
    }
}

/// An element type under test: how the generator draws one, its exact value, and what fills
/// the storage slots no element of the view maps to.
pub trait Elem: Copy {
    /// f32/f64: 1e6, far above any product of draws in [-1, 1), so a kernel reading a gap
    /// shows in its result; bf16, f16 and i8: zero, as those tests have always used.
    const GAP: Self;
    /// One draw: `Lcg::uniform` rounded to the type, or `Lcg::next_i8`.
    fn draw(rng: &mut Lcg) -> Self;
    /// The exact value.
    fn to_f64(self) -> f64;
}

impl Elem for f32 {
    const GAP: f32 = 1.0e6;
    fn draw(rng: &mut Lcg) -> f32 {
        rng.uniform() as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Elem for f64 {
    const GAP: f64 = 1.0e6;
    fn draw(rng: &mut Lcg) -> f64 {
        rng.uniform()
    }
    fn to_f64(self) -> f64 {
        self
    }
}

impl Elem for bf16 {
    const GAP: bf16 = bf16::ZERO;
    fn draw(rng: &mut Lcg) -> bf16 {
        bf16::from_f32_rne(rng.uniform() as f32)
    }
    fn to_f64(self) -> f64 {
        self.to_f32_exact() as f64
    }
}

impl Elem for f16 {
    const GAP: f16 = f16::ZERO;
    fn draw(rng: &mut Lcg) -> f16 {
        f16::from_f32_rne(rng.uniform() as f32)
    }
    fn to_f64(self) -> f64 {
        self.to_f32_exact() as f64
    }
}

impl Elem for i8 {
    const GAP: i8 = 0;
    fn draw(rng: &mut Lcg) -> i8 {
        rng.next_i8()
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

/// A matrix's exact values (row-major, for the reference) and its strided storage.
#[derive(Clone)]
pub struct Mat<T> {
    pub vals: Vec<f64>,
    pub store: Vec<T>,
    pub r: usize,
    pub c: usize,
    pub rs: isize,
    pub cs: isize,
    pub off: usize,
}

impl<T: Elem> Mat<T> {
    /// An r×c matrix in layout `l` with elements drawn from `rng` in row-major order.
    pub fn random(rng: &mut Lcg, r: usize, c: usize, l: Layout) -> Mat<T> {
        Mat::from_fn(r, c, l, || T::draw(rng))
    }

    /// An r×c matrix in layout `l` with elements `value()` in row-major order; the gaps
    /// hold `T::GAP`, and the storage has at least one slot so an empty view has one to
    /// point its offset at.
    pub fn from_fn(r: usize, c: usize, l: Layout, mut value: impl FnMut() -> T) -> Mat<T> {
        let (len, rs, cs, off) = l.place(r, c);
        let mut m = Mat {
            vals: vec![0.0; r * c],
            store: vec![T::GAP; len.max(1)],
            r,
            c,
            rs,
            cs,
            off,
        };
        for i in 0..r {
            for j in 0..c {
                m.set(i, j, value());
            }
        }
        m
    }

    /// A row-major r×c matrix over `store` (a product's output, to check like an input).
    pub fn from_row_major(store: Vec<T>, r: usize, c: usize) -> Mat<T> {
        assert_eq!(
            store.len(),
            r * c,
            "from_row_major: {r}x{c} needs {} values",
            r * c
        );
        Mat {
            vals: store.iter().map(|v| v.to_f64()).collect(),
            store,
            r,
            c,
            rs: c as isize,
            cs: 1,
            off: 0,
        }
    }

    /// Element (i, j) becomes `v`, in the storage and in the exact values.
    pub fn set(&mut self, i: usize, j: usize, v: T) {
        let at = self.index(i, j);
        self.store[at] = v;
        self.vals[i * self.c + j] = v.to_f64();
    }

    /// Element (i, j) as the storage holds it now.
    pub fn get(&self, i: usize, j: usize) -> T {
        self.store[self.index(i, j)]
    }
}

impl<T> Mat<T> {
    /// The storage index of element (i, j).
    pub fn index(&self, i: usize, j: usize) -> usize {
        (self.off as isize + i as isize * self.rs + j as isize * self.cs) as usize
    }

    pub fn view(&self) -> MatRef<'_, T> {
        MatRef {
            data: &self.store,
            rows: self.r,
            cols: self.c,
            row_stride: self.rs,
            col_stride: self.cs,
            offset: self.off,
        }
    }

    pub fn view_mut(&mut self) -> MatMut<'_, T> {
        MatMut {
            data: &mut self.store,
            rows: self.r,
            cols: self.c,
            row_stride: self.rs,
            col_stride: self.cs,
            offset: self.off,
        }
    }
}

/// `A·B` from the exact values, each element summed over k in order in f64, and
/// `Σₖ|aᵢₖ·bₖⱼ|` (the scale of a floating-point sum's error), both row-major m×n.
/// Exact for integer inputs while every partial sum stays below 2⁵³.
pub fn reference<T>(a: &Mat<T>, b: &Mat<T>) -> (Vec<f64>, Vec<f64>) {
    assert_eq!(
        a.c, b.r,
        "reference: A is {}x{}, B is {}x{}",
        a.r, a.c, b.r, b.c
    );
    let (m, k, n) = (a.r, a.c, b.c);
    let mut exact = vec![0.0; m * n];
    let mut abs = vec![0.0; m * n];
    // Row by row of B (contiguous), adding each term to the whole row of C: every element
    // still sums t = 0, 1, …, k−1 in order, and B is read once per row of A instead of
    // once per element down its columns (a 140 000 × 34 B fell out of cache).
    for i in 0..m {
        let exact_row = &mut exact[i * n..(i + 1) * n];
        let abs_row = &mut abs[i * n..(i + 1) * n];
        for t in 0..k {
            let x = a.vals[i * k + t];
            let b_row = &b.vals[t * n..(t + 1) * n];
            for ((e, s), &y) in exact_row.iter_mut().zip(abs_row.iter_mut()).zip(b_row) {
                let p = x * y;
                *e += p;
                *s += p.abs();
            }
        }
    }
    (exact, abs)
}
