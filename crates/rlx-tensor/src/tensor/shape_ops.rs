//! Shape and view ops: reshape, transpose, narrow, select, broadcast, squeeze/unsqueeze,
//! split/chunk, tile, flip, roll, pad, gather.
//!
//! Each emits movement ops only (`Reshape`, `Transpose`, `Narrow`, `Expand`, `Concat`,
//! `Pad`, `Gather`), which the compiler turns into index maps rather than copies.
//! Every panicking method has a `try_` twin returning [`crate::Result`].

use super::Tensor;
use crate::concat::try_cat;
use crate::{Error, Result};
use rlx_ir::{DType, Dim, Op, Shape, TensorData};

/// The dims of `shape` as a reshape target: static sizes as they are, a dynamic dim as
/// `-1` (the IR's reshape keeps the one dynamic symbol there). `None` when two or more
/// dims are dynamic, which one `-1` cannot express.
fn reshape_target(dims: &[Dim]) -> Option<Vec<i64>> {
    if dims.iter().filter(|d| !d.is_static()).count() > 1 {
        return None;
    }
    Some(
        dims.iter()
            .map(|d| d.as_static().map_or(-1, |n| n as i64))
            .collect(),
    )
}

/// The static size of `axis`, or an error naming `op` and the reason.
fn static_axis(op: &str, shape: &Shape, axis: usize, why: &str) -> Result<usize> {
    if axis >= shape.rank() {
        return Err(axis_error(op, shape, axis));
    }
    shape.dim(axis).as_static().ok_or_else(|| {
        Error::shape(format!(
            "{op}: axis {axis} of {shape} is dynamic ({}); {why}",
            shape.dim(axis)
        ))
    })
}

fn axis_error(op: &str, shape: &Shape, axis: usize) -> Error {
    Error::shape(format!(
        "{op}: axis {axis} is out of range for {shape} (rank {}); valid axes are 0..{}",
        shape.rank(),
        shape.rank()
    ))
}

/// A target for [`Tensor::reshape_to`]: the new dims, with at most one `-1` to be inferred.
///
/// Implemented for arrays, slices, `Vec`s (owned or borrowed) of `i64`, `i32` (what
/// unsuffixed literals such as `[2, -1]` become), `isize` and `usize` — so
/// `t.reshape_to([2, -1])`, `t.reshape_to(vec![n, m])` with `usize` sizes and
/// `t.reshape_to(other.dims())` all work — and for `&[Dim]` (`shape.dims()`: a static dim is
/// its size, one dynamic dim becomes `-1`).
pub trait ReshapeTarget {
    /// The target as the IR's `i64` dims (`-1` = inferred), or an error naming `op`.
    fn reshape_dims(self, op: &str) -> Result<Vec<i64>>;
}

/// One entry of a reshape target as `i64`.
trait ReshapeDim: Copy + std::fmt::Debug {
    fn dim(self) -> Option<i64>;
}

macro_rules! reshape_target {
    ($($t:ty),*) => {$(
        impl ReshapeDim for $t {
            fn dim(self) -> Option<i64> {
                i64::try_from(self).ok()
            }
        }
        impl ReshapeTarget for &[$t] {
            fn reshape_dims(self, op: &str) -> Result<Vec<i64>> {
                dims_of(op, self)
            }
        }
        impl ReshapeTarget for &mut [$t] {
            fn reshape_dims(self, op: &str) -> Result<Vec<i64>> {
                dims_of(op, self)
            }
        }
        impl ReshapeTarget for Vec<$t> {
            fn reshape_dims(self, op: &str) -> Result<Vec<i64>> {
                dims_of(op, &self)
            }
        }
        impl ReshapeTarget for &Vec<$t> {
            fn reshape_dims(self, op: &str) -> Result<Vec<i64>> {
                dims_of(op, self)
            }
        }
        impl<const N: usize> ReshapeTarget for [$t; N] {
            fn reshape_dims(self, op: &str) -> Result<Vec<i64>> {
                dims_of(op, &self)
            }
        }
        impl<const N: usize> ReshapeTarget for &[$t; N] {
            fn reshape_dims(self, op: &str) -> Result<Vec<i64>> {
                dims_of(op, self)
            }
        }
    )*};
}
reshape_target!(i64, i32, isize, usize);

fn dims_of<T: ReshapeDim>(op: &str, dims: &[T]) -> Result<Vec<i64>> {
    dims.iter()
        .map(|&d| {
            d.dim().ok_or_else(|| {
                Error::shape(format!(
                    "{op}: the size {d:?} in the target {dims:?} does not fit in i64; use sizes below 2^63"
                ))
            })
        })
        .collect()
}

impl ReshapeTarget for &[Dim] {
    fn reshape_dims(self, op: &str) -> Result<Vec<i64>> {
        reshape_target(self).ok_or_else(|| {
            Error::shape(format!(
                "{op}: the target {self:?} has more than one dynamic dim, which one -1 cannot express; make all but one static"
            ))
        })
    }
}

impl ReshapeTarget for &Vec<Dim> {
    fn reshape_dims(self, op: &str) -> Result<Vec<i64>> {
        self.as_slice().reshape_dims(op)
    }
}

impl ReshapeTarget for Vec<Dim> {
    fn reshape_dims(self, op: &str) -> Result<Vec<i64>> {
        self.as_slice().reshape_dims(op)
    }
}

impl Tensor {
    /// Row-major reshape to `new_shape`; one entry may be `-1` (inferred). Emits
    /// `Op::Reshape`. Panics when the element counts differ (see [`Tensor::try_reshape`]).
    ///
    /// The signature is the published one (`impl Into<Vec<i64>>`); to pass `usize` sizes
    /// or another shape's dims without `as i64`, use [`Tensor::reshape_to`].
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::arange(6).reshape([2, -1]);
    /// assert_eq!(x.dims(), vec![2, 3]);
    /// assert_eq!(x.reshape(vec![6i64]).dims(), vec![6]);
    /// assert_eq!(Tensor::ones([1, 1]).reshape([]).dims(), Vec::<usize>::new());
    /// ```
    #[track_caller]
    pub fn reshape(&self, new_shape: impl Into<Vec<i64>>) -> Tensor {
        self.try_reshape(new_shape)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::reshape`] returning an error instead of panicking.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let err = Tensor::zeros([2, 3]).try_reshape([4, 2]).unwrap_err();
    /// assert!(err.to_string().contains("cannot reshape [2, 3] f32 (6 elements)"));
    /// ```
    #[track_caller]
    pub fn try_reshape(&self, new_shape: impl Into<Vec<i64>>) -> Result<Tensor> {
        self.try_apply(
            Op::Reshape {
                new_shape: new_shape.into(),
            },
            &[self],
        )
    }

    /// [`Tensor::reshape`] with the target in any common form (see [`ReshapeTarget`]):
    /// `usize` sizes, `i64`/`i32` sizes with one `-1`, an array, slice or `Vec`, or another
    /// shape's dims.
    ///
    /// `reshape` itself keeps the published `impl Into<Vec<i64>>` bound (generic code that
    /// forwards such a value, and `reshape([])`, must keep compiling); Rust cannot accept
    /// both that bound and `usize` arrays in one parameter.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::arange(6);
    /// let (rows, cols): (usize, usize) = (3, 2);
    /// assert_eq!(x.reshape_to([rows, cols]).dims(), vec![3, 2]);
    /// assert_eq!(x.reshape_to([2, -1]).dims(), vec![2, 3]);
    /// let y = Tensor::zeros([3, 2]);
    /// assert_eq!(x.reshape_to(y.dims()).dims(), vec![3, 2]);
    /// assert_eq!(x.reshape_to(y.shape().dims()).dims(), vec![3, 2]);
    /// ```
    #[track_caller]
    pub fn reshape_to(&self, new_shape: impl ReshapeTarget) -> Tensor {
        self.try_reshape_to(new_shape)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::reshape_to`] returning an error instead of panicking.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let err = Tensor::zeros([2, 3]).try_reshape_to([4usize, 2]).unwrap_err();
    /// assert!(err.to_string().contains("cannot reshape [2, 3] f32 (6 elements)"));
    /// ```
    #[track_caller]
    pub fn try_reshape_to(&self, new_shape: impl ReshapeTarget) -> Result<Tensor> {
        let new_shape = new_shape.reshape_dims("reshape")?;
        self.try_apply(Op::Reshape { new_shape }, &[self])
    }

    /// Permute axes: output axis `i` is input axis `perm[i]`. Emits `Op::Transpose`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// assert_eq!(Tensor::zeros([2, 3, 4]).transpose([2, 0, 1]).dims(), vec![4, 2, 3]);
    /// ```
    #[track_caller]
    pub fn transpose(&self, perm: impl Into<Vec<usize>>) -> Tensor {
        self.try_transpose(perm).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::transpose`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_transpose(&self, perm: impl Into<Vec<usize>>) -> Result<Tensor> {
        self.try_apply(Op::Transpose { perm: perm.into() }, &[self])
    }

    /// Swap the last two axes (rank ≥ 2).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// assert_eq!(Tensor::zeros([5, 2, 3]).t().dims(), vec![5, 3, 2]);
    /// ```
    #[track_caller]
    pub fn t(&self) -> Tensor {
        self.try_t().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::t`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_t(&self) -> Result<Tensor> {
        let r = self.rank();
        if r < 2 {
            return Err(Error::shape(format!(
                "t: swaps the last two axes, but {} has rank {r}; use .unsqueeze(0) to make a vector a [1, n] row first",
                self.shape()
            )));
        }
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        self.try_transpose(perm)
    }

    /// Elements `start..start + len` of `axis`. Emits `Op::Narrow` (a view).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::arange(10).narrow(0, 2, 3);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(x.to_vec(), vec![2.0, 3.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn narrow(&self, axis: usize, start: usize, len: usize) -> Tensor {
        self.try_narrow(axis, start, len)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::narrow`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_narrow(&self, axis: usize, start: usize, len: usize) -> Result<Tensor> {
        self.try_apply(Op::Narrow { axis, start, len }, &[self])
    }

    /// Index one position of `axis` and drop that axis (`narrow(axis, i, 1)` then a
    /// squeeze). A negative `index` counts from the end and needs a static axis.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let row = Tensor::arange(6).reshape([2, 3]).select(0, -1);
    /// assert_eq!(row.dims(), vec![3]);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(row.to_vec(), vec![3.0, 4.0, 5.0]);
    /// ```
    #[track_caller]
    pub fn select(&self, axis: usize, index: i64) -> Tensor {
        self.try_select(axis, index)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::select`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_select(&self, axis: usize, index: i64) -> Result<Tensor> {
        let shape = self.shape();
        if axis >= shape.rank() {
            return Err(axis_error("select", &shape, axis));
        }
        let size = shape.dim(axis).as_static();
        let resolved = match (index < 0, size) {
            (false, _) => index,
            (true, Some(n)) => index + n as i64,
            (true, None) => {
                return Err(Error::shape(format!(
                    "select: index {index} counts from the end of axis {axis} of {shape}, which is dynamic; use a non-negative index"
                )));
            }
        };
        if resolved < 0 || size.is_some_and(|n| resolved >= n as i64) {
            let n = size.unwrap_or(0);
            return Err(Error::shape(format!(
                "select: index {index} is out of range for axis {axis} of {shape}; valid indices are -{n}..{n}"
            )));
        }
        self.try_narrow(axis, resolved as usize, 1)?
            .try_squeeze(axis)
    }

    /// Broadcast to `shape` (NumPy rules: size-1 axes stretch, new axes are added in
    /// front; `-1` keeps the input's dim). Emits `Op::Expand`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0], [2, 1]).broadcast_to([3, 2, 4]);
    /// assert_eq!(x.dims(), vec![3, 2, 4]);
    /// ```
    #[track_caller]
    pub fn broadcast_to(&self, shape: impl Into<Vec<i64>>) -> Tensor {
        self.try_broadcast_to(shape)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::broadcast_to`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_broadcast_to(&self, shape: impl Into<Vec<i64>>) -> Result<Tensor> {
        self.try_apply(
            Op::Expand {
                target_shape: shape.into(),
            },
            &[self],
        )
    }

    /// Flatten to one axis (`reshape([-1])`).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// assert_eq!(Tensor::zeros([2, 3, 4]).flatten().dims(), vec![24]);
    /// ```
    #[track_caller]
    pub fn flatten(&self) -> Tensor {
        self.try_flatten().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::flatten`] returning an error (a dynamic tensor flattens only when its
    /// other axes are all size 1).
    #[track_caller]
    pub fn try_flatten(&self) -> Result<Tensor> {
        self.try_reshape([-1])
    }

    /// Insert a size-1 axis at `axis` (`0..=rank`). Emits a `Reshape` (a dynamic dim
    /// becomes `-1`).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// assert_eq!(Tensor::zeros([2, 3]).unsqueeze(1).dims(), vec![2, 1, 3]);
    /// ```
    #[track_caller]
    pub fn unsqueeze(&self, axis: usize) -> Tensor {
        self.try_unsqueeze(axis).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::unsqueeze`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_unsqueeze(&self, axis: usize) -> Result<Tensor> {
        let shape = self.shape();
        let r = shape.rank();
        if axis > r {
            return Err(Error::shape(format!(
                "unsqueeze: axis {axis} is out of range for {shape}; a new axis goes at 0..={r}"
            )));
        }
        let mut dims = shape.dims().to_vec();
        dims.insert(axis, Dim::Static(1));
        if let Some(target) = reshape_target(&dims) {
            return self.try_reshape(target);
        }
        // Several dynamic dims: add a leading size-1 axis with Expand (which keeps
        // every dim as a symbol), then move it into place.
        let mut keep = vec![1i64];
        keep.extend(std::iter::repeat_n(-1, r));
        let lifted = self.try_broadcast_to(keep)?;
        let mut perm: Vec<usize> = (1..=r).collect();
        perm.insert(axis, 0);
        lifted.try_transpose(perm)
    }

    /// Drop the size-1 axis `axis`. Emits a `Reshape` (a dynamic dim becomes `-1`).
    /// Panics unless that axis has size 1.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// assert_eq!(Tensor::zeros([2, 1, 3]).squeeze(1).dims(), vec![2, 3]);
    /// ```
    #[track_caller]
    pub fn squeeze(&self, axis: usize) -> Tensor {
        self.try_squeeze(axis).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::squeeze`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_squeeze(&self, axis: usize) -> Result<Tensor> {
        let shape = self.shape();
        if axis >= shape.rank() {
            return Err(axis_error("squeeze", &shape, axis));
        }
        if shape.dim(axis) != Dim::Static(1) {
            return Err(Error::shape(format!(
                "squeeze: axis {axis} of {shape} has size {}, not 1; only size-1 axes can be dropped (use narrow or select to pick one element)",
                shape.dim(axis)
            )));
        }
        let mut dims = shape.dims().to_vec();
        dims.remove(axis);
        if let Some(target) = reshape_target(&dims) {
            return self.try_reshape(target);
        }
        // Several dynamic dims: a gather at the rank-0 index 0 removes exactly that axis.
        let zero = self.constant_in_graph(
            Shape::scalar(DType::I64),
            TensorData::from_i64(&[], &[0]).bytes,
        );
        self.try_gather(&zero, axis)
    }

    /// Drop every static size-1 axis (dynamic axes are kept). Emits one `Reshape`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// assert_eq!(Tensor::zeros([1, 3, 1, 2]).squeeze_all().dims(), vec![3, 2]);
    /// ```
    #[track_caller]
    pub fn squeeze_all(&self) -> Tensor {
        self.try_squeeze_all().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::squeeze_all`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_squeeze_all(&self) -> Result<Tensor> {
        let shape = self.shape();
        let kept: Vec<Dim> = shape
            .dims()
            .iter()
            .copied()
            .filter(|d| *d != Dim::Static(1))
            .collect();
        if let Some(target) = reshape_target(&kept) {
            return self.try_reshape(target);
        }
        let mut out = self.clone();
        for axis in (0..shape.rank()).rev() {
            if shape.dim(axis) == Dim::Static(1) {
                out = out.try_squeeze(axis)?;
            }
        }
        Ok(out)
    }

    /// Split `axis` into consecutive pieces of the given sizes (one `Narrow` each).
    /// On a static axis the sizes must add up to its length.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let parts = Tensor::zeros([5, 2]).split(0, &[2, 3]);
    /// assert_eq!(parts[1].dims(), vec![3, 2]);
    /// ```
    #[track_caller]
    pub fn split(&self, axis: usize, sizes: &[usize]) -> Vec<Tensor> {
        self.try_split(axis, sizes)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::split`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_split(&self, axis: usize, sizes: &[usize]) -> Result<Vec<Tensor>> {
        let shape = self.shape();
        if axis >= shape.rank() {
            return Err(axis_error("split", &shape, axis));
        }
        let Some(total) = sizes.iter().try_fold(0usize, |acc, &n| acc.checked_add(n)) else {
            return Err(Error::shape(format!(
                "split: sizes {sizes:?} add up to more than usize holds (axis {axis} of {shape}); make them add up to the axis length"
            )));
        };
        if let Some(n) = shape.dim(axis).as_static()
            && total != n
        {
            return Err(Error::shape(format!(
                "split: sizes {sizes:?} add up to {total} but axis {axis} of {shape} has {n} elements; make them add up to {n}"
            )));
        }
        let mut start = 0;
        let mut parts = Vec::new();
        reserve_or_err("split", &mut parts, sizes.len())?;
        for &len in sizes {
            parts.push(self.try_narrow(axis, start, len)?);
            start += len;
        }
        Ok(parts)
    }

    /// Split a static `axis` into `n` nearly equal pieces; the first `len % n` pieces get
    /// one extra element.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let c = Tensor::zeros([7]).chunk(0, 3);
    /// let sizes: Vec<usize> = c.iter().map(|t| t.dims()[0]).collect();
    /// assert_eq!(sizes, vec![3, 2, 2]);
    /// ```
    #[track_caller]
    pub fn chunk(&self, axis: usize, n: usize) -> Vec<Tensor> {
        self.try_chunk(axis, n).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::chunk`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_chunk(&self, axis: usize, n: usize) -> Result<Vec<Tensor>> {
        let shape = self.shape();
        let len = static_axis(
            "chunk",
            &shape,
            axis,
            "chunking needs its length; use split with explicit sizes",
        )?;
        if n == 0 {
            return Err(Error::new(format!(
                "chunk: cannot split axis {axis} of {shape} into 0 chunks; ask for at least 1"
            )));
        }
        let (base, extra) = (len / n, len % n);
        let mut sizes: Vec<usize> = Vec::new();
        reserve_or_err("chunk", &mut sizes, n)?;
        sizes.extend((0..n).map(|i| base + usize::from(i < extra)));
        self.try_split(axis, &sizes)
    }

    /// Repeat the tensor `reps` times along `axis` (a `Concat` of copies).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0], [2]).tile(0, 3);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(x.to_vec(), vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn tile(&self, axis: usize, reps: usize) -> Tensor {
        self.try_tile(axis, reps).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::tile`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_tile(&self, axis: usize, reps: usize) -> Result<Tensor> {
        let shape = self.shape();
        if axis >= shape.rank() {
            return Err(axis_error("tile", &shape, axis));
        }
        if reps == 0 {
            return Err(Error::shape(format!(
                "tile: reps must be at least 1 (tiling axis {axis} of {shape}); use narrow(axis, 0, 0) for an empty tensor"
            )));
        }
        // A static axis: the result's size is checked before anything is allocated.
        if let Some(n) = shape.dim(axis).as_static() {
            let out = n
                .checked_mul(reps)
                .map(|m| shape.with_dim(axis, Dim::Static(m)));
            if out.is_none_or(|s| s.check_size().is_err()) {
                return Err(Error::shape(format!(
                    "tile: {reps} copies of axis {axis} of {shape} are too large: the result would exceed {} bytes; use fewer reps",
                    rlx_ir::MAX_TENSOR_BYTES
                )));
            }
        }
        // One concat operand per copy (a broadcast view merged into the axis would read
        // through an index table per element, far slower); the room for them is asked
        // of the allocator first.
        let mut copies = Vec::new();
        reserve_or_err("tile", &mut copies, reps)?;
        copies.resize(reps, self);
        try_cat(&copies, axis)
    }

    /// Reverse the order of elements along a static `axis` (a `Gather` with a reversed
    /// i64 index vector built in this tensor's graph).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::arange(3).flip(0);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(x.to_vec(), vec![2.0, 1.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn flip(&self, axis: usize) -> Tensor {
        self.try_flip(axis).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::flip`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_flip(&self, axis: usize) -> Result<Tensor> {
        let n = static_axis(
            "flip",
            &self.shape(),
            axis,
            "flipping needs a static length",
        )?;
        let rev: Vec<i64> = (0..n as i64).rev().collect();
        let idx = self.constant_in_graph(
            Shape::new(&[n], DType::I64),
            TensorData::from_i64(&[n], &rev).bytes,
        );
        self.try_gather(&idx, axis)
    }

    /// Rotate elements along a static `axis` by `shift` positions toward the end
    /// (NumPy `roll`): `out[i] = x[(i − shift) mod n]`. A `Concat` of the tail and the head.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::arange(5).roll(0, 2);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(x.to_vec(), vec![3.0, 4.0, 0.0, 1.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn roll(&self, axis: usize, shift: usize) -> Tensor {
        self.try_roll(axis, shift).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::roll`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_roll(&self, axis: usize, shift: usize) -> Result<Tensor> {
        let n = static_axis("roll", &self.shape(), axis, "rolling needs a static length")?;
        let s = if n == 0 { 0 } else { shift % n };
        if s == 0 {
            return Ok(self.clone());
        }
        let tail = self.try_narrow(axis, n - s, s)?;
        let head = self.try_narrow(axis, 0, n - s)?;
        try_cat(&[&tail, &head], axis)
    }

    /// Pad `axis` with `before` and `after` copies of `value` (in this tensor's dtype).
    /// Emits one `Op::Pad` in this tensor's graph.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0], [2]).pad(0, 1, 2, 9.0);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(x.to_vec(), vec![9.0, 1.0, 2.0, 9.0, 9.0]);
    /// ```
    #[track_caller]
    pub fn pad(&self, axis: usize, before: usize, after: usize, value: f32) -> Tensor {
        self.try_pad(axis, before, after, value)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::pad`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_pad(&self, axis: usize, before: usize, after: usize, value: f32) -> Result<Tensor> {
        self.try_apply(
            Op::Pad {
                axis,
                before,
                after,
                value: value as f64,
            },
            &[self],
        )
    }

    /// Pick entries of `axis` by `indices` (integer, or integer-valued float; negative
    /// counts from the end). Output shape = `self[..axis] ++ indices.shape ++
    /// self[axis+1..]`. Emits `Op::Gather`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let table = Tensor::arange(6).reshape([3, 2]);
    /// let rows = table.gather(&Tensor::index_vec([2, 0]), 0);
    /// assert_eq!(rows.dims(), vec![2, 2]);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(rows.to_vec(), vec![4.0, 5.0, 0.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn gather(&self, indices: &Tensor, axis: usize) -> Tensor {
        self.try_gather(indices, axis)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::gather`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_gather(&self, indices: &Tensor, axis: usize) -> Result<Tensor> {
        self.try_apply(Op::Gather { axis }, &[self, indices])
    }

    /// [`Tensor::gather`] with the arguments in the other order (PyTorch's `index_select`).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let t = Tensor::arange(6).reshape([2, 3]);
    /// assert_eq!(t.index_select(1, &Tensor::index_vec([2])).dims(), vec![2, 1]);
    /// ```
    #[track_caller]
    pub fn index_select(&self, axis: usize, indices: &Tensor) -> Tensor {
        self.try_gather(indices, axis)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::index_select`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_index_select(&self, axis: usize, indices: &Tensor) -> Result<Tensor> {
        self.try_gather(indices, axis)
    }
}

/// Reserve room for `n` more items of a result sized by user input, or an error
/// naming the op and the count when the allocator refuses (never an abort).
fn reserve_or_err<T>(op: &str, v: &mut Vec<T>, n: usize) -> Result<()> {
    v.try_reserve_exact(n).map_err(|_| {
        Error::out_of_memory(format!(
            "{op}: out of memory: cannot allocate room for {n} pieces; ask for fewer"
        ))
    })
}
