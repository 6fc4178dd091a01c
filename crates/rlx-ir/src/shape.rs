//! Dimensions and shapes, static and dynamic.

use crate::DType;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt;

/// One dimension: a concrete size, or a symbol bound at run time.
///
/// Every `Dim::Dynamic(s)` with the same `s` in one graph is the same size.
///
/// ```
/// use rlx_ir::Dim;
/// assert_eq!(Dim::from(3).to_string(), "3");
/// assert_eq!(Dim::Dynamic(0).to_string(), "?0");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dim {
    Static(usize),
    Dynamic(u32),
}

impl Dim {
    /// The static size; panics on a dynamic dim.
    #[track_caller]
    pub fn unwrap_static(self) -> usize {
        match self {
            Dim::Static(n) => n,
            Dim::Dynamic(s) => {
                panic!("Dim::unwrap_static: dimension is dynamic (?{s}); bind it to a size first")
            }
        }
    }

    /// The static size, or `None` for a dynamic dim.
    pub fn as_static(self) -> Option<usize> {
        match self {
            Dim::Static(n) => Some(n),
            Dim::Dynamic(_) => None,
        }
    }

    /// True for `Dim::Static`.
    pub fn is_static(self) -> bool {
        matches!(self, Dim::Static(_))
    }

    /// The size under `binding` (static dims are returned as is).
    pub fn resolve(self, binding: &DimBinding) -> Option<usize> {
        match self {
            Dim::Static(n) => Some(n),
            Dim::Dynamic(s) => binding.get(s),
        }
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Self {
        Dim::Static(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Dynamic(s) => write!(f, "?{s}"),
        }
    }
}

/// The largest byte size one tensor may have: `isize::MAX`, the most any Rust
/// allocation can hold. Shapes beyond it are rejected with an error when they are
/// built ([`Shape::check_size`]).
pub const MAX_TENSOR_BYTES: usize = isize::MAX as usize;

/// Element count of `dims`, or `None` when the product overflows `usize`.
///
/// ```
/// assert_eq!(rlx_ir::checked_elements(&[2, 3]), Some(6));
/// assert_eq!(rlx_ir::checked_elements(&[1 << 32, 1 << 32]), None);
/// ```
pub fn checked_elements(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n))
}

/// Byte size of `dims` elements of `dtype`, or `None` when it exceeds
/// [`MAX_TENSOR_BYTES`].
pub fn checked_bytes(dims: impl IntoIterator<Item = usize>, dtype: DType) -> Option<usize> {
    let n = dims
        .into_iter()
        .try_fold(1usize, |acc, n| acc.checked_mul(n))?;
    n.checked_mul(dtype.size_bytes())
        .filter(|&b| b <= MAX_TENSOR_BYTES)
}

/// Concrete sizes for dynamic dimension symbols.
///
/// ```
/// use rlx_ir::{DimBinding, Dim, DType, Shape};
/// let mut b = DimBinding::new();
/// b.set(0, 8);
/// let s = Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(4)], DType::F32);
/// assert_eq!(s.bind(&b).dims(), &[Dim::Static(8), Dim::Static(4)]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DimBinding {
    sizes: HashMap<u32, usize>,
}

impl DimBinding {
    /// An empty binding.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bind symbol `sym` to `size` (overwrites).
    pub fn set(&mut self, sym: u32, size: usize) {
        self.sizes.insert(sym, size);
    }

    /// The size bound to `sym`.
    pub fn get(&self, sym: u32) -> Option<usize> {
        self.sizes.get(&sym).copied()
    }

    /// True when no symbol is bound.
    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// `(symbol, size)` pairs sorted by symbol (a stable order for hashing).
    pub fn sorted(&self) -> Vec<(u32, usize)> {
        let mut v: Vec<_> = self.sizes.iter().map(|(k, v)| (*k, *v)).collect();
        v.sort_unstable();
        v
    }
}

/// `?0 = 2, ?1 = 7` (sorted by symbol), or `no dynamic dims bound`.
impl fmt::Display for DimBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs = self.sorted();
        if pairs.is_empty() {
            return f.write_str("no dynamic dims bound");
        }
        for (i, (s, n)) in pairs.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "?{s} = {n}")?;
        }
        Ok(())
    }
}

impl FromIterator<(u32, usize)> for DimBinding {
    fn from_iter<I: IntoIterator<Item = (u32, usize)>>(iter: I) -> Self {
        DimBinding {
            sizes: iter.into_iter().collect(),
        }
    }
}

/// A tensor type: ordered dimensions plus element type.
///
/// ```
/// use rlx_ir::{DType, Shape};
/// let s = Shape::new(&[2, 3], DType::F32);
/// assert_eq!(s.num_elements(), Some(6));
/// assert_eq!(s.size_bytes(), Some(24));
/// assert_eq!(s.to_string(), "[2, 3] f32");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shape {
    dims: DimList,
    dtype: DType,
}

/// Dims held in place up to this rank (every shape of a small eager expression: its
/// nodes, cache keys and results then allocate nothing for their dims).
const INLINE_DIMS: usize = 4;

/// The dims of a shape: in place up to [`INLINE_DIMS`], on the heap beyond. `SmallVec`
/// compares, hashes and `Debug`-prints as the slice, as the `Vec` it replaces did.
type DimList = SmallVec<[Dim; INLINE_DIMS]>;

impl Shape {
    /// A static shape.
    pub fn new(dims: &[usize], dtype: DType) -> Shape {
        Shape {
            dims: dims.iter().map(|&d| Dim::Static(d)).collect(),
            dtype,
        }
    }

    /// A shape from (possibly dynamic) dims.
    pub fn from_dims(dims: &[Dim], dtype: DType) -> Shape {
        Shape {
            dims: DimList::from_slice(dims),
            dtype,
        }
    }

    /// Rank-0 shape.
    pub fn scalar(dtype: DType) -> Shape {
        Shape {
            dims: DimList::from_slice(&[]),
            dtype,
        }
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The dims.
    pub fn dims(&self) -> &[Dim] {
        &self.dims
    }

    /// Dim `i`; panics when out of range.
    #[track_caller]
    pub fn dim(&self, i: usize) -> Dim {
        match self.dims.get(i) {
            Some(d) => *d,
            None => panic!(
                "Shape::dim: axis {i} out of range for rank-{} shape {self}",
                self.rank()
            ),
        }
    }

    /// Static sizes, or `None` if any dim is dynamic.
    pub fn static_dims(&self) -> Option<Vec<usize>> {
        self.dims.iter().map(|d| d.as_static()).collect()
    }

    /// Element count, or `None` if any dim is dynamic.
    ///
    /// Saturates at `usize::MAX` instead of wrapping (a shape that large never passes
    /// [`Shape::check_size`], which every graph node's type does).
    pub fn num_elements(&self) -> Option<usize> {
        self.dims.iter().try_fold(1usize, |acc, d| {
            d.as_static().map(|n| acc.saturating_mul(n))
        })
    }

    /// Byte size, or `None` if any dim is dynamic (saturating like
    /// [`Shape::num_elements`]).
    pub fn size_bytes(&self) -> Option<usize> {
        self.num_elements()
            .map(|n| n.saturating_mul(self.dtype.size_bytes()))
    }

    /// Checks that the static part of this shape addresses at most
    /// [`MAX_TENSOR_BYTES`] bytes (for a dynamic shape: its static dims alone), so
    /// element counts, byte sizes and strides derived from it never overflow. The
    /// error names the shape and the byte count.
    ///
    /// ```
    /// use rlx_ir::{DType, Shape};
    /// assert!(Shape::new(&[1 << 20, 1 << 10], DType::F32).check_size().is_ok());
    /// let e = Shape::new(&[1 << 32, 1 << 32], DType::F32).check_size().unwrap_err();
    /// assert!(e.contains("[4294967296, 4294967296] f32"), "{e}");
    /// ```
    pub fn check_size(&self) -> Result<(), String> {
        let statics = self.dims.iter().filter_map(|d| d.as_static());
        checked_bytes(statics, self.dtype).map(|_| ()).ok_or_else(|| {
            format!(
                "shape {self} is too large: its byte size exceeds {MAX_TENSOR_BYTES} bytes (isize::MAX), more than any allocation can hold"
            )
        })
    }

    /// True when every dim is static.
    pub fn is_static(&self) -> bool {
        self.dims.iter().all(|d| d.is_static())
    }

    /// Copy with dim `axis` replaced.
    #[track_caller]
    pub fn with_dim(&self, axis: usize, dim: Dim) -> Shape {
        assert!(
            axis < self.rank(),
            "Shape::with_dim: axis {axis} out of range for {self}"
        );
        let mut s = self.clone();
        s.dims[axis] = dim;
        s
    }

    /// Copy with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> Shape {
        Shape {
            dims: self.dims.clone(),
            dtype,
        }
    }

    /// Copy with other dims and the same dtype.
    pub fn with_dims(&self, dims: Vec<Dim>) -> Shape {
        Shape {
            dims: DimList::from_vec(dims),
            dtype: self.dtype,
        }
    }

    /// NumPy broadcasting of the dims; the dtype is `self`'s.
    ///
    /// A size-1 dim stretches; equal dims (static or the same symbol) match;
    /// anything else is an error naming both shapes.
    pub fn broadcast_with(&self, other: &Shape) -> Result<Shape, String> {
        let rank = self.rank().max(other.rank());
        let mut dims = DimList::from_slice(&[]);
        for i in 0..rank {
            let a = axis_from_right(&self.dims, rank, i);
            let b = axis_from_right(&other.dims, rank, i);
            let d = match (a, b) {
                (x, y) if x == y => x,
                (Dim::Static(1), y) => y,
                (x, Dim::Static(1)) => x,
                _ => {
                    return Err(format!(
                        "cannot broadcast {self} with {other}: axis {i} has {a} vs {b} (sizes must match or one must be 1)"
                    ));
                }
            };
            dims.push(d);
        }
        Ok(Shape {
            dims,
            dtype: self.dtype,
        })
    }

    /// The dynamic symbols used, in first-seen order, without repeats.
    pub fn dynamic_symbols(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for d in self.dims.iter() {
            if let Dim::Dynamic(s) = d
                && !out.contains(s)
            {
                out.push(*s);
            }
        }
        out
    }

    /// Replace every bound dynamic dim by its size (unbound ones stay dynamic).
    pub fn bind(&self, binding: &DimBinding) -> Shape {
        Shape {
            dims: self
                .dims
                .iter()
                .map(|d| match d.resolve(binding) {
                    Some(n) => Dim::Static(n),
                    None => *d,
                })
                .collect(),
            dtype: self.dtype,
        }
    }

    /// Concrete sizes under `binding`, or `None` if a symbol is unbound.
    pub fn concrete(&self, binding: &DimBinding) -> Option<Vec<usize>> {
        self.dims.iter().map(|d| d.resolve(binding)).collect()
    }
}

/// Dim of `dims` aligned to a broadcast of rank `rank`, counting axis `i` from the left
/// of the broadcast result (missing leading axes are 1).
fn axis_from_right(dims: &[Dim], rank: usize, i: usize) -> Dim {
    let offset = rank - dims.len();
    if i < offset {
        Dim::Static(1)
    } else {
        dims[i - offset]
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "] {}", self.dtype)
    }
}

impl From<&Shape> for Shape {
    fn from(s: &Shape) -> Shape {
        s.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_stretches_size_one_and_prepends_axes() {
        let a = Shape::new(&[4, 1, 3], DType::F32);
        let b = Shape::new(&[5, 1], DType::F32);
        assert_eq!(
            a.broadcast_with(&b).unwrap(),
            Shape::new(&[4, 5, 3], DType::F32)
        );
        let s = Shape::scalar(DType::F32);
        assert_eq!(a.broadcast_with(&s).unwrap(), a);
    }

    #[test]
    fn broadcast_keeps_dynamic_dims_and_rejects_mismatch() {
        let a = Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(3)], DType::F32);
        let b = Shape::new(&[1, 3], DType::F32);
        assert_eq!(a.broadcast_with(&b).unwrap(), a);
        let c = Shape::new(&[2, 4], DType::F32);
        let err = a.broadcast_with(&c).unwrap_err();
        assert!(
            err.contains("[?0, 3] f32") && err.contains("[2, 4] f32"),
            "{err}"
        );
    }

    #[test]
    fn counts_and_binding() {
        let s = Shape::from_dims(
            &[Dim::Dynamic(1), Dim::Static(2), Dim::Dynamic(1)],
            DType::F16,
        );
        assert_eq!(s.num_elements(), None);
        assert_eq!(s.dynamic_symbols(), vec![1]);
        let b: DimBinding = [(1, 5)].into_iter().collect();
        assert_eq!(s.concrete(&b), Some(vec![5, 2, 5]));
        assert_eq!(s.bind(&b).size_bytes(), Some(100));
        assert_eq!(Shape::scalar(DType::F32).num_elements(), Some(1));
    }

    #[test]
    fn display_and_copies_keep_dims_and_dtype_apart() {
        assert_eq!(Shape::scalar(DType::Bool).to_string(), "[] bool");
        let s = Shape::from_dims(&[Dim::Static(2), Dim::Dynamic(0)], DType::F32);
        assert_eq!(s.to_string(), "[2, ?0] f32");
        assert_eq!(s.static_dims(), None);
        assert!(!s.is_static());
        assert_eq!(s.with_dtype(DType::I8).to_string(), "[2, ?0] i8");
        assert_eq!(
            s.with_dim(1, Dim::Static(5)).static_dims(),
            Some(vec![2, 5])
        );
        assert_eq!(s.with_dims(vec![]).to_string(), "[] f32");
        let b: DimBinding = [(0, 3)].into_iter().collect();
        assert_eq!(s.concrete(&b), Some(vec![2, 3]));
        assert_eq!(s.concrete(&DimBinding::new()), None);
        assert_eq!(s.bind(&DimBinding::new()), s);
    }

    #[test]
    #[should_panic(expected = "axis 2 out of range for rank-2 shape [2, 3] f32")]
    fn dim_out_of_range_names_the_shape() {
        Shape::new(&[2, 3], DType::F32).dim(2);
    }

    #[test]
    #[should_panic(expected = "dynamic")]
    fn unwrap_static_panics_on_dynamic() {
        Dim::Dynamic(3).unwrap_static();
    }

    /// Shapes of every rank around the in-place limit are equal, hash alike and print
    /// alike however they were built (in place or on the heap, by `new`, `from_dims`,
    /// `with_dims`, `with_dim`, `bind`, broadcasting), and their `Debug` is the one the
    /// `Vec` of dims gave.
    #[test]
    fn shapes_below_and_above_the_in_place_rank_behave_as_one_type() {
        use std::hash::{BuildHasher, RandomState};
        let rs = RandomState::new();
        for rank in 0..=INLINE_DIMS + 3 {
            let sizes: Vec<usize> = (0..rank).map(|i| i + 2).collect();
            let dims: Vec<Dim> = sizes.iter().map(|&n| Dim::Static(n)).collect();
            let a = Shape::new(&sizes, DType::F32);
            let b = Shape::from_dims(&dims, DType::F32);
            let c = Shape::scalar(DType::F32).with_dims(dims.clone());
            let mut binding = DimBinding::new();
            binding.set(7, 2);
            let d = if rank == 0 {
                a.clone()
            } else {
                a.with_dim(0, Dim::Dynamic(7)).bind(&binding)
            };
            let e = Shape::scalar(DType::F32).broadcast_with(&a).unwrap();
            let f = a.broadcast_with(&Shape::scalar(DType::F64)).unwrap();
            for s in [&b, &c, &d, &e, &f] {
                assert_eq!(s, &a, "rank {rank}");
                assert_eq!(rs.hash_one(s), rs.hash_one(&a), "rank {rank}");
                assert_eq!((s.dims(), s.rank()), (&dims[..], rank));
                assert_eq!(s.to_string(), a.to_string());
            }
            assert_eq!(
                format!("{a:?}"),
                format!("Shape {{ dims: {dims:?}, dtype: F32 }}")
            );
            assert_ne!(a, Shape::new(&sizes, DType::F64));
            if rank > 0 {
                assert_ne!(a, a.with_dim(rank - 1, Dim::Static(99)), "rank {rank}");
                assert_ne!(a, Shape::new(&sizes[1..], DType::F32), "rank {rank}");
            }
        }
    }
}
