//! Scalar operands of binary methods (`x.maximum(0.0)`, `x.gt(&y)`).

use super::Tensor;
use crate::{Error, Result};
use rlx_ir::{DType, Shape, TensorData};

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
    /// Panics with [`BinaryRhs::try_into_tensor`]'s message.
    #[track_caller]
    pub(crate) fn into_tensor(self, recv: &Tensor) -> Tensor {
        self.try_into_tensor(recv).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The operand as a tensor, or an error when an integer scalar does not fit the
    /// integer dtype it takes next to `recv` (a float tensor takes it rounded to its
    /// dtype, as every float operation does).
    pub(crate) fn try_into_tensor(self, recv: &Tensor) -> Result<Tensor> {
        Ok(match self {
            BinaryRhs::Tensor(t) => t.clone(),
            BinaryRhs::Bool(b) => recv.scalar_const(b as u8 as f64, DType::Bool),
            BinaryRhs::Int(v) => {
                let dtype = scalar_dtype(recv.dtype());
                if !dtype.is_int() {
                    return Ok(recv.scalar_const(v as f64, dtype));
                }
                let (lo, hi) = int_range(dtype);
                if (v as i128) < lo || (v as i128) > hi {
                    return Err(Error::dtype(format!(
                        "scalar operand {v} does not fit the {dtype} of the tensor it meets ({} {dtype}; range {lo}..={hi}); cast the tensor to a wider integer dtype first",
                        recv.shape()
                    )));
                }
                let data = TensorData::from_i64_as(dtype, &[], &[v]).bytes;
                recv.constant_in_graph(Shape::scalar(dtype), data)
            }
            BinaryRhs::Float(v) => recv.scalar_const(v, scalar_dtype(recv.dtype())),
        })
    }
}

/// The values an integer dtype holds.
fn int_range(dtype: DType) -> (i128, i128) {
    match dtype {
        DType::I8 => (i8::MIN as i128, i8::MAX as i128),
        DType::U8 => (0, u8::MAX as i128),
        DType::I16 => (i16::MIN as i128, i16::MAX as i128),
        DType::I32 => (i32::MIN as i128, i32::MAX as i128),
        DType::U32 => (0, u32::MAX as i128),
        _ => (i64::MIN as i128, i64::MAX as i128),
    }
}
