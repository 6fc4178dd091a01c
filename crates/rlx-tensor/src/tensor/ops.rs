//! `std::ops` operators: `+ - * /` between tensors and scalars, and unary `-`.
//!
//! Each operator appends one `Op::Binary` (or one `Op::Activation(Neg)`); a
//! scalar operand becomes exactly one rank-0 `Op::Constant` in the tensor's
//! graph, promoted per the crate's scalar rule (the tensor's dtype when it is an
//! integer type, else F32). Mismatched shapes panic with the shape-inference
//! message; the `try_add`/`try_sub`/`try_mul`/`try_div` methods return it instead.

use super::{BinaryRhs, Tensor};
use rlx_ir::Op;
use rlx_ir::op::{Activation, BinaryOp};
use std::ops::{Add, Div, Mul, Neg, Sub};

/// A host scalar usable as an operand of `+ - * /` next to a tensor: `f64`, `f32`, `i32`.
///
/// The operators take any `S: Scalar` (one generic impl rather than one impl per
/// type), so an unsuffixed literal needs no annotation: `(&x * 2.0).relu()` compiles
/// (the literal falls back to `f64`), as does `&x + 1`.
pub trait Scalar: Copy + sealed::Sealed {
    #[doc(hidden)]
    fn into_rhs(self) -> BinaryRhs<'static>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f64 {}
    impl Sealed for f32 {}
    impl Sealed for i32 {}
}

impl Scalar for f64 {
    fn into_rhs(self) -> BinaryRhs<'static> {
        BinaryRhs::Float(self)
    }
}
impl Scalar for f32 {
    fn into_rhs(self) -> BinaryRhs<'static> {
        BinaryRhs::Float(self as f64)
    }
}
impl Scalar for i32 {
    fn into_rhs(self) -> BinaryRhs<'static> {
        BinaryRhs::Int(self as i64)
    }
}

/// The impls of one operator with a tensor on the left, plus the 3 scalar-on-left impls.
macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:expr) => {
        binary_operator!(@lhs $trait, $method, $op, &Tensor);
        binary_operator!(@lhs $trait, $method, $op, Tensor);
        binary_operator!(@scalar_lhs $trait, $method, $op, f64, Float, f64);
        binary_operator!(@scalar_lhs $trait, $method, $op, f32, Float, f64);
        binary_operator!(@scalar_lhs $trait, $method, $op, i32, Int, i64);
    };
    (@lhs $trait:ident, $method:ident, $op:expr, $lhs:ty) => {
        impl $trait<&Tensor> for $lhs {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                self.binary($op, BinaryRhs::Tensor(rhs))
            }
        }
        impl $trait<Tensor> for $lhs {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                self.binary($op, BinaryRhs::Tensor(&rhs))
            }
        }
        impl<S: Scalar> $trait<S> for $lhs {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: S) -> Tensor {
                self.binary($op, rhs.into_rhs())
            }
        }
    };
    (@scalar_lhs $trait:ident, $method:ident, $op:expr, $scalar:ty, $variant:ident, $wide:ty) => {
        impl $trait<&Tensor> for $scalar {
            type Output = Tensor;
            /// `Binary(scalar, tensor)`: the scalar is promoted with the tensor's dtype hint.
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                let lhs = BinaryRhs::$variant(self as $wide).into_tensor(rhs);
                lhs.apply(Op::Binary($op), &[&lhs, rhs])
            }
        }
    };
}

binary_operator!(Add, add, BinaryOp::Add);
binary_operator!(Sub, sub, BinaryOp::Sub);
binary_operator!(Mul, mul, BinaryOp::Mul);
binary_operator!(Div, div, BinaryOp::Div);

impl Neg for &Tensor {
    type Output = Tensor;
    /// One `Op::Activation(Activation::Neg)`.
    #[track_caller]
    fn neg(self) -> Tensor {
        self.apply(Op::Activation(Activation::Neg), &[self])
    }
}

impl Neg for Tensor {
    type Output = Tensor;
    /// One `Op::Activation(Activation::Neg)`.
    #[track_caller]
    fn neg(self) -> Tensor {
        self.apply(Op::Activation(Activation::Neg), &[&self])
    }
}
