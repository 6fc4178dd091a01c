//! Multi-axis slicing: [`SliceAxis`], [`SliceSpec`], the helpers [`ax`], [`ix`], [`rg`],
//! [`tail`], and the [`s!`](crate::s) macro.
//!
//! A slice lowers to one `Op::Narrow` per sliced axis — a view, never a copy once compiled.

use crate::tensor::Tensor;
use crate::{Dim, Error, Result};

/// What to keep of one axis.
///
/// Negative positions count from the end of the axis (`-1` is the last element);
/// they need a static axis size to resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceAxis {
    /// The whole axis.
    All,
    /// One position; the axis stays, with size 1 (use [`Tensor::select`] to drop it).
    Index(i64),
    /// The half-open range `start..end`.
    Range { start: i64, end: i64 },
    /// `start..` through the end of the axis.
    From(i64),
}

/// Keep the full axis.
///
/// ```
/// use rlx_tensor::{ax, SliceAxis};
/// assert_eq!(ax(), SliceAxis::All);
/// ```
pub fn ax() -> SliceAxis {
    SliceAxis::All
}

/// Single index (negative counts from the end). Keeps the axis as size 1 — use
/// [`Tensor::select`] to drop it.
///
/// ```
/// use rlx_tensor::{ix, SliceAxis};
/// assert_eq!(ix(-1), SliceAxis::Index(-1));
/// ```
pub fn ix(i: i64) -> SliceAxis {
    SliceAxis::Index(i)
}

/// Half-open range `start..end` (either bound may be negative). The resolved range
/// must be non-empty.
///
/// ```
/// use rlx_tensor::{rg, SliceAxis};
/// assert_eq!(rg(1, -1), SliceAxis::Range { start: 1, end: -1 });
/// ```
pub fn rg(start: i64, end: i64) -> SliceAxis {
    SliceAxis::Range { start, end }
}

/// `start..` through the end of a static axis (negative start allowed).
///
/// ```
/// use rlx_tensor::{tail, SliceAxis};
/// assert_eq!(tail(-2), SliceAxis::From(-2));
/// ```
pub fn tail(start: i64) -> SliceAxis {
    SliceAxis::From(start)
}

/// Positions as `i64`; a `usize` past `i64::MAX` saturates, which the range check then
/// reports as out of range.
trait Position: Copy {
    fn pos(self) -> i64;
}

macro_rules! position {
    ($($t:ty),*) => {$(
        impl Position for $t {
            fn pos(self) -> i64 {
                i64::try_from(self).unwrap_or(i64::MAX)
            }
        }
    )*};
}
position!(i32, i64, isize, usize);

/// The exclusive end of an inclusive range ending at `end`: `..=-1` reaches the end of the
/// axis, which no exclusive negative end can say, so it becomes `start..`.
fn inclusive(start: i64, end: i64) -> SliceAxis {
    if end == -1 {
        SliceAxis::From(start)
    } else {
        SliceAxis::Range {
            start,
            end: end.saturating_add(1),
        }
    }
}

// Rust ranges and integers as slice entries, so `s![0..2, .., -1]` reads like NumPy's
// `x[0:2, :, -1:]`-with-kept-axis. Implemented for i32 (the type unsuffixed literals fall
// back to), i64, isize and usize.
macro_rules! slice_axis_from {
    ($($t:ty),*) => {$(
        /// An integer: [`SliceAxis::Index`] (the axis stays, with size 1).
        impl From<$t> for SliceAxis {
            fn from(i: $t) -> SliceAxis {
                SliceAxis::Index(i.pos())
            }
        }
        /// `start..end`: [`SliceAxis::Range`].
        impl From<std::ops::Range<$t>> for SliceAxis {
            fn from(r: std::ops::Range<$t>) -> SliceAxis {
                SliceAxis::Range { start: r.start.pos(), end: r.end.pos() }
            }
        }
        /// `start..`: [`SliceAxis::From`].
        impl From<std::ops::RangeFrom<$t>> for SliceAxis {
            fn from(r: std::ops::RangeFrom<$t>) -> SliceAxis {
                SliceAxis::From(r.start.pos())
            }
        }
        /// `..end`: [`SliceAxis::Range`] from 0.
        impl From<std::ops::RangeTo<$t>> for SliceAxis {
            fn from(r: std::ops::RangeTo<$t>) -> SliceAxis {
                SliceAxis::Range { start: 0, end: r.end.pos() }
            }
        }
        /// `start..=end` (`..=-1` reaches the last element).
        impl From<std::ops::RangeInclusive<$t>> for SliceAxis {
            fn from(r: std::ops::RangeInclusive<$t>) -> SliceAxis {
                inclusive(r.start().pos(), r.end().pos())
            }
        }
        /// `..=end` (`..=-1` is the whole axis).
        impl From<std::ops::RangeToInclusive<$t>> for SliceAxis {
            fn from(r: std::ops::RangeToInclusive<$t>) -> SliceAxis {
                inclusive(0, r.end.pos())
            }
        }
    )*};
}
slice_axis_from!(i32, i64, isize, usize);

/// `..`: [`SliceAxis::All`].
impl From<std::ops::RangeFull> for SliceAxis {
    fn from(_: std::ops::RangeFull) -> SliceAxis {
        SliceAxis::All
    }
}

/// A multi-axis slice: one [`SliceAxis`] per leading axis of the tensor (axes past the
/// end of the list are kept whole). Build it with [`s!`](crate::s) and apply it with
/// [`Tensor::slice`].
///
/// ```
/// use rlx_tensor::{ax, rg, s, Tensor};
/// let x = Tensor::zeros([4, 6]);
/// let y = x.slice(s![ax(), rg(1, -1)]);
/// assert_eq!(y.dims(), vec![4, 4]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceSpec {
    axes: Vec<SliceAxis>,
}

impl SliceSpec {
    /// A slice with one entry per leading axis.
    pub fn new(axes: Vec<SliceAxis>) -> SliceSpec {
        SliceSpec { axes }
    }

    /// The per-axis entries.
    pub fn axes(&self) -> &[SliceAxis] {
        &self.axes
    }

    /// Apply to `t`: one `Op::Narrow` per entry that is not [`SliceAxis::All`].
    /// Panics when the spec has more entries than `t` has axes, or a position is out of
    /// range (see [`SliceSpec::try_apply`]).
    #[track_caller]
    pub fn apply(&self, t: &Tensor) -> Tensor {
        self.try_apply(t).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`SliceSpec::apply`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_apply(&self, t: &Tensor) -> Result<Tensor> {
        let shape = t.shape();
        if self.axes.len() > shape.rank() {
            return Err(Error::shape(format!(
                "slice: {} axis entries for the rank-{} tensor {shape}; give at most one entry per axis",
                self.axes.len(),
                shape.rank()
            )));
        }
        let mut out = t.clone();
        for (axis, entry) in self.axes.iter().enumerate() {
            if let Some((start, len)) = resolve(*entry, axis, shape.dim(axis), &shape)? {
                out = out.try_narrow(axis, start, len)?;
            }
        }
        Ok(out)
    }
}

/// `(start, len)` of `entry` on an axis of size `dim`, or `None` for the whole axis.
fn resolve(
    entry: SliceAxis,
    axis: usize,
    dim: Dim,
    shape: &rlx_ir::Shape,
) -> Result<Option<(usize, usize)>> {
    // Positions are resolved in i128 so that no i64 input (i64::MAX, i64::MIN) can
    // overflow on the way to the range check.
    let pos = |v: i64| -> Result<i128> {
        if v >= 0 {
            return Ok(v as i128);
        }
        match dim {
            Dim::Static(n) => Ok(n as i128 + v as i128),
            Dim::Dynamic(_) => Err(Error::shape(format!(
                "slice: {entry:?} on axis {axis} of {shape} counts from the end of a dynamic axis ({dim}); use non-negative positions there"
            ))),
        }
    };
    let size = dim.as_static().map(|n| n as i128);
    let (start, end) = match entry {
        SliceAxis::All => return Ok(None),
        SliceAxis::Index(i) => {
            let s = pos(i)?;
            (s, s + 1)
        }
        SliceAxis::Range { start, end } => (pos(start)?, pos(end)?),
        SliceAxis::From(start) => {
            let Some(n) = size else {
                return Err(Error::shape(format!(
                    "slice: {entry:?} on axis {axis} of {shape} needs the end of the axis, which is dynamic ({dim}); use rg(start, end) with an explicit end"
                )));
            };
            (pos(start)?, n)
        }
    };
    // On a dynamic axis the end is checked when the size is bound at run time; here it
    // only has to be a position a tensor can have.
    let in_range = start >= 0 && end <= size.unwrap_or(isize::MAX as i128);
    if !in_range {
        let n = size.map_or(dim.to_string(), |n| n.to_string());
        return Err(Error::shape(format!(
            "slice: {entry:?} on axis {axis} of {shape} resolves to {start}..{end}, outside 0..{n}; keep positions within -{n}..{n}"
        )));
    }
    if end <= start {
        return Err(Error::shape(format!(
            "slice: {entry:?} on axis {axis} of {shape} resolves to the empty range {start}..{end}; the end must come after the start"
        )));
    }
    Ok(Some((start as usize, (end - start) as usize)))
}

impl Tensor {
    /// Slice several axes at once (see [`SliceSpec`]); lowers to one `Op::Narrow` per
    /// sliced axis. Panics on an out-of-range or empty range.
    ///
    /// ```
    /// use rlx_tensor::{ax, ix, rg, s, tail, Tensor};
    /// let x = Tensor::arange(24).reshape([2, 3, 4]);
    /// assert_eq!(x.slice(s![ix(-1), rg(0, 2), tail(1)]).dims(), vec![1, 2, 3]);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(x.slice(s![ax(), ix(0), rg(-2, 4)]).to_vec(), vec![2.0, 3.0, 14.0, 15.0]);
    /// ```
    #[track_caller]
    pub fn slice(&self, spec: SliceSpec) -> Tensor {
        spec.apply(self)
    }

    /// [`Tensor::slice`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_slice(&self, spec: SliceSpec) -> Result<Tensor> {
        spec.try_apply(self)
    }
}

/// Build a [`SliceSpec`] from one entry per leading axis. Each entry is anything that
/// converts into a [`SliceAxis`]:
///
/// | entry | meaning |
/// |---|---|
/// | `..` or `ax()` | the whole axis |
/// | `a..b` or `rg(a, b)` | positions `a` up to (not including) `b` |
/// | `a..` or `tail(a)` | `a` through the end |
/// | `..b` | `0..b` |
/// | `a..=b`, `..=b` | through `b` inclusive (`..=-1` reaches the last element) |
/// | `i` or `ix(i)` | position `i`; the axis stays with size 1 (use [`Tensor::select`] to drop it) |
/// | any [`SliceAxis`] | itself |
///
/// Integers may be `i32` (unsuffixed literals), `i64`, `isize` or `usize`; negative
/// positions count from the end of the axis, as in NumPy (`s![1..-1]` drops the first
/// and last entries; the macro silences clippy's `reversed_empty_ranges` for its
/// entries, since such a range is not empty once resolved). An empty `s![]` keeps
/// everything; a trailing comma is allowed. Empty or out-of-range entries are errors
/// when the slice is applied.
///
/// ```
/// use rlx_tensor::{ax, rg, s, SliceAxis, Tensor};
/// let spec = s![ax(), rg(0, 64),];
/// assert_eq!(spec.axes(), &[SliceAxis::All, SliceAxis::Range { start: 0, end: 64 }]);
/// assert!(s![].axes().is_empty());
/// assert_eq!(s![0..2, .., -1], s![rg(0, 2), ax(), -1i64]);
///
/// let x = Tensor::arange(24).reshape([2, 3, 4]);
/// assert_eq!(x.slice(s![1.., ..2, ..=2]).dims(), vec![1, 2, 3]);
/// # #[cfg(feature = "eval")]
/// assert_eq!(x.slice(s![0, -1, 1..-1]).to_vec(), vec![9.0, 10.0]);
/// ```
#[macro_export]
macro_rules! s {
    () => {
        $crate::SliceSpec::new(::std::vec::Vec::new())
    };
    ($($axis:expr),+ $(,)?) => {
        $crate::SliceSpec::new(::std::vec![$({
            // `1..-1` is NumPy's "drop the first and last": an empty range to Rust, not
            // to a slice, so clippy's reversed-range lint does not apply here.
            #[allow(clippy::reversed_empty_ranges)]
            let axis = $axis;
            <$crate::SliceAxis as ::std::convert::From<_>>::from(axis)
        }),+])
    };
}
