//! Scalar operands of binary methods (`x.maximum(0.0)`, `x.gt(&y)`).

use super::Tensor;
use rlx_ir::DType;

/// A binary method's right-hand side: a tensor or a scalar to promote.
#[derive(Debug, Clone, Copy)]
pub enum BinaryRhs<'r> {
    Tensor(&'r Tensor),
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl<'r> From<&'r Tensor> for BinaryRhs<'r> {
    fn from(t: &'r Tensor) -> Self {
        BinaryRhs::Tensor(t)
    }
}
impl From<bool> for BinaryRhs<'_> {
    fn from(v: bool) -> Self {
        BinaryRhs::Bool(v)
    }
}
impl From<i32> for BinaryRhs<'_> {
    fn from(v: i32) -> Self {
        BinaryRhs::Int(v as i64)
    }
}
impl From<i64> for BinaryRhs<'_> {
    fn from(v: i64) -> Self {
        BinaryRhs::Int(v)
    }
}
impl From<f32> for BinaryRhs<'_> {
    fn from(v: f32) -> Self {
        BinaryRhs::Float(v as f64)
    }
}
impl From<f64> for BinaryRhs<'_> {
    fn from(v: f64) -> Self {
        BinaryRhs::Float(v)
    }
}

/// The dtype a scalar takes next to a tensor of dtype `hint`: the tensor's own
/// dtype when it is an integer type, otherwise f32 (API.md §2.4).
pub(crate) fn scalar_dtype(hint: DType) -> DType {
    if hint.is_int() { hint } else { DType::F32 }
}

impl BinaryRhs<'_> {
    /// The operand as a tensor: scalars become one rank-0 constant in `recv`'s graph.
    #[track_caller]
    pub(crate) fn into_tensor(self, recv: &Tensor) -> Tensor {
        match self {
            BinaryRhs::Tensor(t) => t.clone(),
            BinaryRhs::Bool(b) => recv.scalar_const(b as u8 as f64, DType::Bool),
            BinaryRhs::Int(v) => {
                assert!(
                    v.unsigned_abs() <= 1u64 << 53,
                    "scalar operand {v} is larger than 2^53 in magnitude and cannot be represented exactly; use a tensor instead"
                );
                recv.scalar_const(v as f64, scalar_dtype(recv.dtype()))
            }
            BinaryRhs::Float(v) => recv.scalar_const(v, scalar_dtype(recv.dtype())),
        }
    }
}
