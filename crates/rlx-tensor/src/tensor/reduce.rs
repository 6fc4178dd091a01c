//! Reductions (`sum`, `mean`, `max`, …), statistics built from them (`var`,
//! `std`, `norm`, `logsumexp`), index reductions, running sums and softmax.

use super::Tensor;
use crate::{Error, Result};
use rlx_ir::op::{BinaryOp, ReduceOp};
use rlx_ir::{Activation, Op};

/// `Op::Reduce` methods with a `try_` twin.
macro_rules! reduce_methods {
    ($($(#[$doc:meta])* $name:ident, $try_name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                ///
                /// One `Op::Reduce` over `axes` (`[0]`, `[0, 1]`, `vec![..]`); the reduced axes
                /// are dropped, or kept with size 1 when `keep_dim`. An empty axis list is
                /// the identity. Panics on an out-of-range or repeated axis.
                #[track_caller]
                pub fn $name(&self, axes: impl Into<Vec<usize>>, keep_dim: bool) -> Tensor {
                    self.reduce(ReduceOp::$op, axes.into(), keep_dim)
                }

                #[doc = concat!("[`Tensor::", stringify!($name), "`] returning an error instead of panicking.")]
                #[track_caller]
                pub fn $try_name(&self, axes: impl Into<Vec<usize>>, keep_dim: bool) -> Result<Tensor> {
                    self.try_reduce(ReduceOp::$op, axes.into(), keep_dim)
                }
            )*
        }
    };
}

reduce_methods! {
    /// Sum over `axes`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
    /// assert_eq!(x.sum([1], false).dims(), vec![2]);
    /// assert_eq!(x.sum([1], true).dims(), vec![2, 1]);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(x.sum([0], false).to_vec(), vec![5.0, 7.0, 9.0]);
    /// ```
    sum, try_sum => Sum;
    /// Arithmetic mean over `axes` (integers truncate toward zero).
    mean, try_mean => Mean;
    /// Maximum over `axes`; a NaN in a group makes that result NaN.
    max, try_max => Max;
    /// Minimum over `axes`; a NaN in a group makes that result NaN.
    min, try_min => Min;
    /// Product over `axes`.
    prod, try_prod => Prod;
}

impl Tensor {
    #[track_caller]
    fn reduce(&self, op: ReduceOp, axes: Vec<usize>, keep_dim: bool) -> Tensor {
        self.apply(Op::Reduce { op, axes, keep_dim }, &[self])
    }

    #[track_caller]
    fn try_reduce(&self, op: ReduceOp, axes: Vec<usize>, keep_dim: bool) -> Result<Tensor> {
        self.try_apply(Op::Reduce { op, axes, keep_dim }, &[self])
    }

    /// Sum of every element, as a rank-0 tensor (a rank-0 input is returned unchanged).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let s = Tensor::ones([2, 3]).sum_all();
    /// assert_eq!(s.rank(), 0);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(s.item(), 6.0);
    /// ```
    #[track_caller]
    pub fn sum_all(&self) -> Tensor {
        self.reduce_all(ReduceOp::Sum)
    }

    /// Mean of every element, as a rank-0 tensor (a rank-0 input is returned unchanged).
    #[track_caller]
    pub fn mean_all(&self) -> Tensor {
        self.reduce_all(ReduceOp::Mean)
    }

    #[track_caller]
    fn reduce_all(&self, op: ReduceOp) -> Tensor {
        if self.rank() == 0 {
            return self.clone();
        }
        self.reduce(op, (0..self.rank()).collect(), false)
    }

    /// Population variance over `axes`: `mean((x − mean(x))²)` (divides by N).
    /// Panics on a bad axis; see [`Tensor::try_var`].
    #[track_caller]
    pub fn var(&self, axes: impl Into<Vec<usize>>, keep_dim: bool) -> Tensor {
        unwrap_or_panic(self.try_var(axes, keep_dim))
    }

    /// [`Tensor::var`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_var(&self, axes: impl Into<Vec<usize>>, keep_dim: bool) -> Result<Tensor> {
        let axes = axes.into();
        self.check_axes("var", &axes)?;
        let mu = self.try_reduce(ReduceOp::Mean, axes.clone(), true)?;
        let d = self.try_binary(BinaryOp::Sub, (&mu).into())?;
        let sq = d.try_binary(BinaryOp::Mul, (&d).into())?;
        sq.try_reduce(ReduceOp::Mean, axes, keep_dim)
    }

    /// Population standard deviation over `axes`: `sqrt(var)`.
    #[track_caller]
    pub fn std(&self, axes: impl Into<Vec<usize>>, keep_dim: bool) -> Tensor {
        unwrap_or_panic(self.try_std(axes, keep_dim))
    }

    /// [`Tensor::std`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_std(&self, axes: impl Into<Vec<usize>>, keep_dim: bool) -> Result<Tensor> {
        let axes = axes.into();
        self.check_axes("std", &axes)?;
        self.try_var(axes, keep_dim)?
            .try_activation(Activation::Sqrt)
    }

    /// Euclidean norm over `axes`: `sqrt(sum(x²))`.
    #[track_caller]
    pub fn norm(&self, axes: impl Into<Vec<usize>>, keep_dim: bool) -> Tensor {
        unwrap_or_panic(self.try_norm(axes, keep_dim))
    }

    /// [`Tensor::norm`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_norm(&self, axes: impl Into<Vec<usize>>, keep_dim: bool) -> Result<Tensor> {
        let axes = axes.into();
        self.check_axes("norm", &axes)?;
        self.try_binary(BinaryOp::Mul, self.into())?
            .try_reduce(ReduceOp::Sum, axes, keep_dim)?
            .try_activation(Activation::Sqrt)
    }

    /// `ln Σ exp(x)` along `axis`, computed stably: the row maximum is
    /// subtracted before `exp` and added back after `ln`, so large inputs do not
    /// overflow. A row of only `−∞` gives `−∞`; a row with `+∞` gives `+∞`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let y = Tensor::from_vec(vec![1000.0, 1000.0], [2]).logsumexp(0, false);
    /// # #[cfg(feature = "eval")]
    /// assert!((y.item() - (1000.0 + 2f32.ln())).abs() < 1e-3);
    /// ```
    #[track_caller]
    pub fn logsumexp(&self, axis: usize, keep_dim: bool) -> Tensor {
        unwrap_or_panic(self.try_logsumexp(axis, keep_dim))
    }

    /// [`Tensor::logsumexp`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_logsumexp(&self, axis: usize, keep_dim: bool) -> Result<Tensor> {
        self.check_axes("logsumexp", &[axis])?;
        let m = self.try_reduce(ReduceOp::Max, vec![axis], true)?;
        // Shift by the maximum only where it is finite: with an all −∞ row (or a
        // +∞ entry) x − m would be ∞ − ∞ = NaN, while shifting by 0 gives the
        // correct −∞ (or +∞). The shift carries no gradient.
        let finite = m.try_activation(Activation::Abs)?.try_lt(f64::INFINITY)?;
        let shift = finite.try_where(&m, 0.0)?.stop_gradient();
        let e = self
            .try_binary(BinaryOp::Sub, (&shift).into())?
            .try_activation(Activation::Exp)?;
        let lse = e
            .try_reduce(ReduceOp::Sum, vec![axis], keep_dim)?
            .try_activation(Activation::Log)?;
        // Summing the size-1 axis drops it without a reshape (works on dynamic dims).
        let shift = if keep_dim {
            shift
        } else {
            shift.try_reduce(ReduceOp::Sum, vec![axis], false)?
        };
        lse.try_binary(BinaryOp::Add, (&shift).into())
    }

    /// Index of the first maximum along `axis` (`Op::ArgMax`). The indices are
    /// encoded in the input's dtype (F32 for an F32 input); read them with
    /// `to_vec_i64()`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let i = Tensor::from_vec(vec![1.0, 5.0, 2.0, 7.0, 0.0, 3.0], [2, 3]).argmax(1, false);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(i.to_vec_i64(), vec![1, 0]);
    /// ```
    #[track_caller]
    pub fn argmax(&self, axis: usize, keep_dim: bool) -> Tensor {
        self.apply(Op::ArgMax { axis, keep_dim }, &[self])
    }

    /// [`Tensor::argmax`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_argmax(&self, axis: usize, keep_dim: bool) -> Result<Tensor> {
        self.try_apply(Op::ArgMax { axis, keep_dim }, &[self])
    }

    /// Index of the first minimum along `axis` (`Op::ArgMin`), encoded like [`Tensor::argmax`].
    #[track_caller]
    pub fn argmin(&self, axis: usize, keep_dim: bool) -> Tensor {
        self.apply(Op::ArgMin { axis, keep_dim }, &[self])
    }

    /// [`Tensor::argmin`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_argmin(&self, axis: usize, keep_dim: bool) -> Result<Tensor> {
        self.try_apply(Op::ArgMin { axis, keep_dim }, &[self])
    }

    /// Running sum along `axis` (negative counts from the end; `Op::Cumsum`).
    /// With `exclusive`, element `i` sums the elements before `i` (so the first is 0).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    /// # #[cfg(feature = "eval")] {
    /// assert_eq!(x.cumsum(0, false).to_vec(), vec![1.0, 3.0, 6.0]);
    /// assert_eq!(x.cumsum(-1, true).to_vec(), vec![0.0, 1.0, 3.0]);
    /// # }
    /// ```
    #[track_caller]
    pub fn cumsum(&self, axis: i32, exclusive: bool) -> Tensor {
        self.apply(Op::Cumsum { axis, exclusive }, &[self])
    }

    /// [`Tensor::cumsum`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_cumsum(&self, axis: i32, exclusive: bool) -> Result<Tensor> {
        self.try_apply(Op::Cumsum { axis, exclusive }, &[self])
    }

    /// Softmax along `axis` (negative counts from the end; `Op::Softmax`).
    /// A row containing NaN or `+∞`, or only `−∞`, becomes all NaN.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let p = Tensor::from_vec(vec![0.0, 0.0], [1, 2]).softmax(-1);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(p.to_vec(), vec![0.5, 0.5]);
    /// ```
    #[track_caller]
    pub fn softmax(&self, axis: i32) -> Tensor {
        self.apply(Op::Softmax { axis }, &[self])
    }

    /// [`Tensor::softmax`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_softmax(&self, axis: i32) -> Result<Tensor> {
        self.try_apply(Op::Softmax { axis }, &[self])
    }

    /// `ln(softmax(x))` along `axis`, computed stably in one `Op::LogSoftmax`.
    #[track_caller]
    pub fn log_softmax(&self, axis: i32) -> Tensor {
        self.apply(Op::LogSoftmax { axis }, &[self])
    }

    /// [`Tensor::log_softmax`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_log_softmax(&self, axis: i32) -> Result<Tensor> {
        self.try_apply(Op::LogSoftmax { axis }, &[self])
    }

    /// Reject out-of-range or repeated axes up front, so a composite op (`var`,
    /// `norm`, …) names itself rather than the primitive it is built from.
    fn check_axes(&self, op: &str, axes: &[usize]) -> Result<()> {
        let shape = self.shape();
        let rank = shape.rank();
        for (i, &a) in axes.iter().enumerate() {
            if a >= rank {
                return Err(Error::shape(format!(
                    "{op}: axis {a} is out of range for {shape} (rank {rank}); valid axes are 0..{rank}"
                )));
            }
            if axes[..i].contains(&a) {
                return Err(Error::shape(format!(
                    "{op}: axis {a} is listed twice in {axes:?} for {shape}; list each axis once"
                )));
            }
        }
        Ok(())
    }
}

#[track_caller]
fn unwrap_or_panic(r: Result<Tensor>) -> Tensor {
    match r {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}
