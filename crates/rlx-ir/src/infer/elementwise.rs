//! Element-wise ops: activations, casts, binary ops, comparisons, `where`.

use super::{arity, err, require_float, require_same_dtype};
use crate::IrError;
use crate::{Activation, BinaryOp, CmpOp, DType, IrResult, Op, Shape};

pub(super) fn infer(name: &str, op: &Op, inputs: &[&Shape]) -> IrResult<Shape> {
    match op {
        Op::Activation(a) => {
            arity(name, inputs, 1, "x")?;
            check_activation_dtype(name, *a, inputs[0])?;
            Ok(inputs[0].clone())
        }
        Op::Cast { to } => {
            arity(name, inputs, 1, "x")?;
            Ok(inputs[0].with_dtype(*to))
        }
        Op::StopGradient => {
            arity(name, inputs, 1, "x")?;
            Ok(inputs[0].clone())
        }
        Op::RoundToFormat {
            exp_bits,
            man_bits,
            max_normal,
        } => {
            arity(name, inputs, 1, "x")?;
            let x = inputs[0];
            require_float(name, "x", x)?;
            if *exp_bits == 0 || *exp_bits > 8 || *man_bits > 23 {
                return Err(err(
                    name,
                    format!(
                        "a format with {exp_bits} exponent and {man_bits} mantissa bits (input {x}) is outside f32's range; use 1..=8 exponent and 0..=23 mantissa bits"
                    ),
                ));
            }
            if !(max_normal.is_finite() && *max_normal > 0.0) {
                return Err(err(
                    name,
                    format!(
                        "max_normal must be a positive finite number (the saturation bound), got {max_normal} for input {x}"
                    ),
                ));
            }
            Ok(x.clone())
        }
        Op::Binary(b) => {
            arity(name, inputs, 2, "lhs, rhs")?;
            binary(name, *b, inputs[0], inputs[1])
        }
        Op::Compare(c) => {
            arity(name, inputs, 2, "lhs, rhs")?;
            let (l, r) = (inputs[0], inputs[1]);
            let ordered = !matches!(c, CmpOp::Eq | CmpOp::Ne);
            if ordered && (l.dtype().is_complex() || r.dtype().is_complex()) {
                return Err(err(
                    name,
                    format!(
                        "complex numbers have no order ({l} vs {r}); compare magnitudes or real parts instead"
                    ),
                ));
            }
            Ok(broadcast(name, l, r)?.with_dtype(DType::Bool))
        }
        Op::Where => {
            arity(name, inputs, 3, "mask, on_true, on_false")?;
            let (m, t, f) = (inputs[0], inputs[1], inputs[2]);
            if m.dtype().is_complex() {
                return Err(err(
                    name,
                    format!(
                        "the mask {m} must be bool (or a real number type where non-zero selects on_true); build it with a comparison such as .gt(0.0)"
                    ),
                ));
            }
            require_same_dtype(name, ("on_true", t), ("on_false", f))?;
            let branches = broadcast(name, t, f)?;
            let all = branches.broadcast_with(m).map_err(|_| {
                err(
                    name,
                    format!(
                        "the mask {m} does not broadcast with the branches (on_true {t}, on_false {f}, together {branches}); every axis must match or be 1"
                    ),
                )
            })?;
            Ok(all)
        }
        _ => unreachable!("elementwise::infer called with {}", op.name()),
    }
}

/// Reject dtypes on which an activation leaves its domain (bool, complex, and
/// integers for the non-integer-closed activations).
pub(super) fn check_activation_dtype(name: &str, a: Activation, x: &Shape) -> IrResult<()> {
    let dt = x.dtype();
    if dt == DType::Bool || dt.is_complex() || (dt.is_int() && !a.integer_closed()) {
        return Err(IrError::dtype(
            name,
            format!(
                "{} is not defined for dtype {dt} (input {x}); cast to a float type first with .cast(DType::F32)",
                a.name()
            ),
        ));
    }
    Ok(())
}

fn binary(name: &str, b: BinaryOp, l: &Shape, r: &Shape) -> IrResult<Shape> {
    let (dl, dr) = (l.dtype(), r.dtype());
    if dl.is_complex() || dr.is_complex() {
        return Err(err(
            name,
            format!(
                "complex operands ({l}, {r}) are not supported by element-wise ops; use the real block layout of fft instead"
            ),
        ));
    }
    if b.is_bitwise() {
        let shift = matches!(b, BinaryOp::Shl | BinaryOp::Shr);
        let ok = |d: DType| d.is_int() || (d == DType::Bool && !shift);
        if !ok(dl) || !ok(dr) {
            let need = if shift { "integer" } else { "integer or bool" };
            return Err(IrError::dtype(
                name,
                format!(
                    "needs {need} operands, got {l} and {r}; cast both with .cast(DType::I32) first"
                ),
            ));
        }
    } else if dl == DType::Bool && !matches!(b, BinaryOp::Max | BinaryOp::Min) {
        return Err(IrError::dtype(
            name,
            format!(
                "arithmetic on a bool left operand ({l} with {r}); cast it to f32 or an integer type first"
            ),
        ));
    }
    if b == BinaryOp::Atan2 && !dl.is_float() {
        require_float(name, "the left operand of atan2", l)?;
    }
    broadcast(name, l, r)
}

/// NumPy broadcasting of two operands; the result dtype is the left operand's.
pub(super) fn broadcast(name: &str, l: &Shape, r: &Shape) -> IrResult<Shape> {
    l.broadcast_with(r).map_err(|msg| {
        err(
            name,
            format!("{msg}; reshape or broadcast_to one operand so every axis matches or is 1"),
        )
    })
}
