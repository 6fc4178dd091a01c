//! Reductions along axes: reduce, argmax/argmin, cumsum.

use super::{arity, err, norm_axis, require_real};
use crate::IrError;
use crate::op::ReduceOp;
use crate::{DType, Dim, IrResult, Op, Shape};

pub(super) fn infer(name: &str, op: &Op, inputs: &[&Shape]) -> IrResult<Shape> {
    match op {
        Op::Reduce { op, axes, keep_dim } => {
            arity(name, inputs, 1, "x")?;
            let x = inputs[0];
            if x.dtype().is_complex() {
                return Err(err(
                    name,
                    format!(
                        "complex input {x} is not supported; reduce the real block layout instead"
                    ),
                ));
            }
            if x.dtype() == DType::Bool && !matches!(op, ReduceOp::Max | ReduceOp::Min) {
                return Err(IrError::dtype(
                    name,
                    format!(
                        "{} of bool input {x} is not defined; cast to an integer or float type first (max/min act as any/all)",
                        op.name()
                    ),
                ));
            }
            reduce_shape(name, x, axes, *keep_dim)
        }
        Op::ArgMax { axis, keep_dim } | Op::ArgMin { axis, keep_dim } => {
            arity(name, inputs, 1, "x")?;
            let x = inputs[0];
            require_real(name, "x", x)?;
            if x.dims().get(*axis) == Some(&Dim::Static(0)) {
                return Err(err(
                    name,
                    format!(
                        "axis {axis} of {x} is empty: an empty axis has no extremum; narrow or pad it to at least one element"
                    ),
                ));
            }
            reduce_shape(name, x, &[*axis], *keep_dim)
        }
        Op::Cumsum { axis, .. } => {
            arity(name, inputs, 1, "x")?;
            let x = inputs[0];
            require_real(name, "x", x)?;
            norm_axis(name, *axis as i64, x.rank())?;
            Ok(x.clone())
        }
        _ => unreachable!("reduce::infer called with {}", op.name()),
    }
}

/// Drop (or, with `keep_dim`, set to 1) every listed axis; no axes is the identity.
fn reduce_shape(name: &str, x: &Shape, axes: &[usize], keep_dim: bool) -> IrResult<Shape> {
    let mut seen = vec![false; x.rank()];
    for &a in axes {
        if a >= x.rank() {
            return Err(err(
                name,
                format!(
                    "axis {a} is out of range for {x} (rank {r}); valid axes are 0..{r}",
                    r = x.rank()
                ),
            ));
        }
        if std::mem::replace(&mut seen[a], true) {
            return Err(err(
                name,
                format!("axis {a} is listed twice in {axes:?} for {x}; list each axis once"),
            ));
        }
    }
    let mut dims = Vec::with_capacity(x.rank());
    for (i, d) in x.dims().iter().enumerate() {
        if !seen[i] {
            dims.push(*d);
        } else if keep_dim {
            dims.push(Dim::Static(1));
        }
    }
    Ok(x.with_dims(dims))
}
