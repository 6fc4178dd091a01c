//! Element-wise methods: unary activations, binary arithmetic with scalar
//! promotion, comparisons, selection, casts.
//!
//! Every method appends exactly the IR the contract names (one
//! `Op::Activation` per unary method, one `Op::Binary` per binary method, …);
//! fusion happens later, at compile time.

use super::{BinaryRhs, Tensor};
use crate::{Error, Result};
use rlx_ir::op::{Activation, BinaryOp, CmpOp};
use rlx_ir::{DType, Op, Shape, TensorData};

/// Unary methods, each one `Op::Activation(variant)`.
macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $variant:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                ///
                /// Same shape and dtype as the input. Panics when the dtype has no such
                /// function (bool, complex, or integers for non-integer functions); see
                /// [`Tensor::try_activation`].
                #[track_caller]
                pub fn $name(&self) -> Tensor {
                    self.activation(Activation::$variant)
                }
            )*
        }
    };
}

unary_methods! {
    /// Rectified linear unit, `max(x, 0)`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let y = Tensor::from_vec(vec![-1.0, 2.0], [2]).relu();
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(y.to_vec(), vec![0.0, 2.0]);
    /// ```
    relu => Relu;
    /// Exact GELU, `x · Φ(x)` with the Gaussian CDF.
    gelu => Gelu;
    /// Tanh-form GELU, `0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³)))`.
    gelu_approx => GeluApprox;
    /// SiLU / swish, `x · sigmoid(x)`.
    silu => Silu;
    /// Hyperbolic tangent.
    tanh => Tanh;
    /// `eˣ`.
    exp => Exp;
    /// Square root.
    sqrt => Sqrt;
    /// Logistic sigmoid, `1 / (1 + e⁻ˣ)`.
    sigmoid => Sigmoid;
    /// Natural logarithm.
    log => Log;
    /// Reciprocal square root, `1 / √x`.
    rsqrt => Rsqrt;
    /// Absolute value.
    abs => Abs;
    /// Sine (radians).
    sin => Sin;
    /// Cosine (radians).
    cos => Cos;
    /// Tangent (radians).
    tan => Tan;
    /// Arctangent.
    atan => Atan;
    /// Round half to even (`2.5 → 2`); its gradient passes straight through.
    round => Round;
    /// Reciprocal, `1 / x`.
    recip => Recip;
    /// Largest integer `≤ x`.
    floor => Floor;
    /// Smallest integer `≥ x`.
    ceil => Ceil;
    /// `-1`, `0` or `1` by the sign of `x`.
    sign => Sign;
    /// `ln(1 + eˣ)`.
    softplus => Softplus;
    /// ELU with α = 1: `x` for `x > 0`, else `eˣ − 1`.
    elu => Elu;
    /// The error function.
    erf => Erf;
    /// Hard swish, `x · relu6(x + 3) / 6`.
    hard_swish => HardSwish;
    /// Hard sigmoid, `relu6(x + 3) / 6`.
    hard_sigmoid => HardSigmoid;
    /// Mish, `x · tanh(softplus(x))`.
    mish => Mish;
    /// Softsign, `x / (1 + |x|)`.
    softsign => Softsign;
    /// `ln(sigmoid(x))`, computed without overflow.
    log_sigmoid => LogSigmoid;
}

/// Binary methods with a scalar-able right-hand side and a `try_` twin.
macro_rules! binary_methods {
    ($($(#[$doc:meta])* $name:ident, $try_name:ident => $op:expr;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                ///
                /// `rhs` is a tensor or a scalar (promoted per the crate's scalar rule); the
                /// shapes broadcast NumPy-style and the result has `self`'s dtype. Panics
                /// when the shapes do not broadcast.
                #[track_caller]
                pub fn $name<'r>(&self, rhs: impl Into<BinaryRhs<'r>>) -> Tensor {
                    self.binary($op, rhs.into())
                }

                #[doc = concat!("[`Tensor::", stringify!($name), "`] returning an error instead of panicking.")]
                #[track_caller]
                pub fn $try_name<'r>(&self, rhs: impl Into<BinaryRhs<'r>>) -> Result<Tensor> {
                    self.try_binary($op, rhs.into())
                }
            )*
        }
    };
}

binary_methods! {
    /// Element-wise maximum (`BinaryOp::Max`).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let y = Tensor::from_vec(vec![-1.0, 2.0], [2]).maximum(0.5);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(y.to_vec(), vec![0.5, 2.0]);
    /// ```
    maximum, try_maximum => BinaryOp::Max;
    /// Element-wise minimum (`BinaryOp::Min`).
    minimum, try_minimum => BinaryOp::Min;
    /// Four-quadrant arctangent of `self / rhs` (`BinaryOp::Atan2`; `self` must be a float).
    atan2, try_atan2 => BinaryOp::Atan2;
    /// C `fmod`: the remainder has the sign of `self` (`BinaryOp::Mod`).
    rem, try_rem => BinaryOp::Mod;
    /// `self` raised to `rhs` (`BinaryOp::Pow`).
    pow, try_pow => BinaryOp::Pow;
}

/// `Result` twins of the arithmetic operators (`+ - * /` panic with the same message).
macro_rules! try_arith_methods {
    ($($(#[$doc:meta])* $try_name:ident => $op:expr;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                ///
                /// `rhs` is a tensor or a scalar; the shapes broadcast NumPy-style and the
                /// result has `self`'s dtype. Errors (naming the op, both shapes and the fix)
                /// when the shapes do not broadcast.
                #[track_caller]
                pub fn $try_name<'r>(&self, rhs: impl Into<BinaryRhs<'r>>) -> Result<Tensor> {
                    self.try_binary($op, rhs.into())
                }
            )*
        }
    };
}

try_arith_methods! {
    /// `self + rhs` returning an error instead of panicking.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let a = Tensor::ones([2, 3]);
    /// let err = a.try_add(&Tensor::ones([4])).unwrap_err();
    /// assert!(err.to_string().contains("cannot broadcast"));
    /// ```
    try_add => BinaryOp::Add;
    /// `self - rhs` returning an error instead of panicking.
    try_sub => BinaryOp::Sub;
    /// `self * rhs` returning an error instead of panicking.
    try_mul => BinaryOp::Mul;
    /// `self / rhs` returning an error instead of panicking.
    try_div => BinaryOp::Div;
}

/// Comparisons: `Op::Compare`, `Bool` result, broadcast shape.
macro_rules! compare_methods {
    ($($(#[$doc:meta])* $name:ident, $try_name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                ///
                /// `rhs` is a tensor or a scalar; the result is `Bool` with the broadcast
                /// shape. Panics when the shapes do not broadcast.
                #[track_caller]
                pub fn $name<'r>(&self, rhs: impl Into<BinaryRhs<'r>>) -> Tensor {
                    let rhs = rhs.into().into_tensor(self);
                    self.apply(Op::Compare(CmpOp::$op), &[self, &rhs])
                }

                #[doc = concat!("[`Tensor::", stringify!($name), "`] returning an error instead of panicking.")]
                #[track_caller]
                pub fn $try_name<'r>(&self, rhs: impl Into<BinaryRhs<'r>>) -> Result<Tensor> {
                    let rhs = rhs.into().try_into_tensor(self)?;
                    self.try_apply(Op::Compare(CmpOp::$op), &[self, &rhs])
                }
            )*
        }
    };
}

compare_methods! {
    /// `self == rhs` element-wise.
    eq, try_eq => Eq;
    /// `self != rhs` element-wise.
    ne, try_ne => Ne;
    /// `self < rhs` element-wise.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let m = Tensor::from_vec(vec![-1.0, 2.0], [2]).lt(0.0);
    /// assert_eq!(m.dtype(), rlx_tensor::DType::Bool);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(m.to_vec_bool(), vec![true, false]);
    /// ```
    lt, try_lt => Lt;
    /// `self <= rhs` element-wise.
    le, try_le => Le;
    /// `self > rhs` element-wise.
    gt, try_gt => Gt;
    /// `self >= rhs` element-wise.
    ge, try_ge => Ge;
}

impl Tensor {
    /// Apply one unary function (`Op::Activation(a)`). The named methods
    /// ([`Tensor::relu`], [`Tensor::exp`], …) call this. Panics on an unsupported dtype.
    #[track_caller]
    pub fn activation(&self, a: Activation) -> Tensor {
        self.apply(Op::Activation(a), &[self])
    }

    /// [`Tensor::activation`] returning an error (e.g. `exp` of an integer tensor)
    /// instead of panicking; the `Result` twin of every unary method.
    #[track_caller]
    pub fn try_activation(&self, a: Activation) -> Result<Tensor> {
        self.try_apply(Op::Activation(a), &[self])
    }

    /// `self op rhs` with scalar promotion; panics with the shape-inference message.
    #[track_caller]
    pub(crate) fn binary(&self, op: BinaryOp, rhs: BinaryRhs<'_>) -> Tensor {
        let rhs = rhs.into_tensor(self);
        self.apply(Op::Binary(op), &[self, &rhs])
    }

    /// [`Tensor::binary`] returning the error.
    #[track_caller]
    pub(crate) fn try_binary(&self, op: BinaryOp, rhs: BinaryRhs<'_>) -> Result<Tensor> {
        let rhs = rhs.try_into_tensor(self)?;
        self.try_apply(Op::Binary(op), &[self, &rhs])
    }

    /// `self` raised to a scalar power (one `Binary(Pow)` with a rank-0 constant).
    #[track_caller]
    pub fn pow_scalar(&self, exp: f64) -> Tensor {
        self.binary(BinaryOp::Pow, BinaryRhs::Float(exp))
    }

    /// Limit every element to `[min, max]`: exactly one `Binary(Max)` then one
    /// `Binary(Min)`. A NaN element stays NaN.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let y = Tensor::from_vec(vec![-2.0, 0.5, 3.0], [3]).clamp(-1.0, 1.0);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(y.to_vec(), vec![-1.0, 0.5, 1.0]);
    /// ```
    #[track_caller]
    pub fn clamp(&self, min: f64, max: f64) -> Tensor {
        self.clamp_min(min).clamp_max(max)
    }

    /// `max(self, min)` element-wise (one `Binary(Max)`).
    #[track_caller]
    pub fn clamp_min(&self, min: f64) -> Tensor {
        self.binary(BinaryOp::Max, BinaryRhs::Float(min))
    }

    /// `min(self, max)` element-wise (one `Binary(Min)`).
    #[track_caller]
    pub fn clamp_max(&self, max: f64) -> Tensor {
        self.binary(BinaryOp::Min, BinaryRhs::Float(max))
    }

    /// Identity whose gradient is zero (`Op::StopGradient`).
    #[track_caller]
    pub fn stop_gradient(&self) -> Tensor {
        self.apply(Op::StopGradient, &[self])
    }

    /// Convert the element type (`Op::Cast`); float → int truncates toward zero,
    /// saturating, NaN → 0.
    ///
    /// ```
    /// use rlx_tensor::{DType, Tensor};
    /// let y = Tensor::from_vec(vec![1.7, -1.7], [2]).cast(DType::I32);
    /// assert_eq!(y.dtype(), DType::I32);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(y.to_vec_i64(), vec![1, -1]);
    /// ```
    #[track_caller]
    pub fn cast(&self, to: DType) -> Tensor {
        self.apply(Op::Cast { to }, &[self])
    }

    /// [`Tensor::cast`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_cast(&self, to: DType) -> Result<Tensor> {
        self.try_apply(Op::Cast { to }, &[self])
    }

    /// Select element-wise: `self` is the mask (bool, or numbers where non-zero
    /// selects `on_true`). One `Op::Where` with inputs `[mask, on_true, on_false]`.
    ///
    /// A scalar branch takes the other branch's dtype (F32 when both are scalars,
    /// Bool when both are bools); the result shape is the broadcast of all three.
    /// Panics when the branches differ in dtype or the shapes do not broadcast.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![-1.0, 2.0], [2]);
    /// let y = x.gt(0.0).where_(&x, 0.0);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(y.to_vec(), vec![0.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn where_<'a, 'b>(
        &self,
        on_true: impl Into<BinaryRhs<'a>>,
        on_false: impl Into<BinaryRhs<'b>>,
    ) -> Tensor {
        match self.try_where(on_true, on_false) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    /// [`Tensor::where_`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_where<'a, 'b>(
        &self,
        on_true: impl Into<BinaryRhs<'a>>,
        on_false: impl Into<BinaryRhs<'b>>,
    ) -> Result<Tensor> {
        let (t, f) = (on_true.into(), on_false.into());
        let t_dtype = branch_dtype(t, f);
        let f_dtype = branch_dtype(f, t);
        let t = self.branch_tensor(t, t_dtype)?;
        let f = self.branch_tensor(f, f_dtype)?;
        self.try_apply(Op::Where, &[self, &t, &f])
    }

    /// A `where_` branch as a tensor; a scalar becomes a rank-0 constant of
    /// `dtype` in `self`'s graph.
    fn branch_tensor(&self, b: BinaryRhs<'_>, dtype: DType) -> Result<Tensor> {
        let v = match b {
            BinaryRhs::Tensor(t) => return Ok(t.clone()),
            BinaryRhs::Bool(v) => v as u8 as f64,
            BinaryRhs::Int(v) => {
                if v.unsigned_abs() > 1u64 << 53 {
                    return Err(Error::new(format!(
                        "where: scalar branch {v} is larger than 2^53 in magnitude and cannot be represented exactly; pass a tensor instead"
                    )));
                }
                v as f64
            }
            BinaryRhs::Float(v) => v,
        };
        // Built here rather than with `scalar_const` so a complex branch gets its
        // (re, im) pair.
        Ok(self.constant_in_graph(Shape::scalar(dtype), filled(dtype, &[], v).bytes))
    }

    /// Replace the elements of `self` where `mask` is true by `value`.
    ///
    /// Emits a fill constant with `self`'s dims and dtype and one `Op::Where`
    /// (`mask.where_(fill, self)`); the result lives in `mask`'s graph, adopting
    /// `self` when the graphs differ. Panics when the shapes do not broadcast.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    /// let y = x.masked_fill(&x.gt(1.5), -1.0);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(y.to_vec(), vec![1.0, -1.0, -1.0]);
    /// ```
    #[track_caller]
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Tensor {
        match self.try_masked_fill(mask, value) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    /// [`Tensor::masked_fill`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor> {
        let dtype = self.dtype();
        // A full fill of `self`'s dims (as the reference builds it); with a dynamic
        // axis, or dims too large to fill up front (a lazily broadcast tensor may have
        // more elements than memory holds), a rank-0 fill broadcasts to the same result.
        let fill = match self.shape().static_dims() {
            Some(dims) if rlx_ir::checked_elements(&dims).is_some_and(|n| n <= FULL_FILL_MAX) => {
                Tensor::from_data(filled(dtype, &dims, value))
            }
            _ => Tensor::new_constant(Shape::scalar(dtype), filled(dtype, &[], value).bytes),
        };
        mask.try_apply(Op::Where, &[mask, &fill, self])
    }
}

/// Largest element count `masked_fill` builds a full-size fill constant for.
const FULL_FILL_MAX: usize = 1 << 20;

/// `dims` of `dtype` all equal to `value` (for a complex dtype, `value + 0i`).
fn filled(dtype: DType, dims: &[usize], value: f64) -> TensorData {
    let n: usize = dims.iter().product();
    let values = if dtype.is_complex() {
        [value, 0.0].repeat(n)
    } else {
        vec![value; n]
    };
    TensorData::from_f64_as(dtype, dims, &values)
}

/// The dtype of `where_` branch `b` given the other branch.
fn branch_dtype(b: BinaryRhs<'_>, other: BinaryRhs<'_>) -> DType {
    match (b, other) {
        (BinaryRhs::Tensor(t), _) => t.dtype(),
        (_, BinaryRhs::Tensor(o)) => o.dtype(),
        (BinaryRhs::Bool(_), BinaryRhs::Bool(_)) => DType::Bool,
        _ => DType::F32,
    }
}
