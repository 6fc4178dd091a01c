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

/// The 10 impls of one operator with a tensor on the left, plus the 3 scalar-on-left impls.
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
        impl $trait<f64> for $lhs {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: f64) -> Tensor {
                self.binary($op, BinaryRhs::Float(rhs))
            }
        }
        impl $trait<f32> for $lhs {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: f32) -> Tensor {
                self.binary($op, BinaryRhs::Float(rhs as f64))
            }
        }
        impl $trait<i32> for $lhs {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: i32) -> Tensor {
                self.binary($op, BinaryRhs::Int(rhs as i64))
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
