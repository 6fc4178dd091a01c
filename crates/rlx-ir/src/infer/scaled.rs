//! Low-precision scaled GEMM: scale computation, quantization, and the matmul.

use super::{arity, err, require_float};
use crate::{DType, Dim, IrResult, Op, ScaleLayout, ScaledFormat, Shape};

pub(super) fn infer(name: &str, op: &Op, inputs: &[&Shape]) -> IrResult<Shape> {
    match op {
        Op::ScaledQuantScale {
            format,
            scale_layout,
        } => {
            arity(name, inputs, 1, "x")?;
            let x = inputs[0];
            require_float(name, "x", x)?;
            check_format(name, *format)?;
            scale_shape(name, x, *scale_layout)
        }
        Op::ScaledQuantize {
            format,
            scale_layout,
        } => {
            arity(name, inputs, 2, "x, scales")?;
            let (x, s) = (inputs[0], inputs[1]);
            require_float(name, "x", x)?;
            check_format(name, *format)?;
            let expected = scale_shape(name, x, *scale_layout)?;
            if s != &expected {
                return Err(err(
                    name,
                    format!(
                        "scales must be {expected} for x {x} with layout {scale_layout:?}, got {s}; compute them with scaled_quant_scale"
                    ),
                ));
            }
            Ok(x.with_dtype(DType::U8))
        }
        Op::ScaledMatMul {
            lhs_format,
            rhs_format,
            scale_layout,
            has_bias,
        } => {
            let list = if *has_bias {
                "lhs codes, rhs codes, lhs scales, rhs scales, bias"
            } else {
                "lhs codes, rhs codes, lhs scales, rhs scales"
            };
            arity(name, inputs, if *has_bias { 5 } else { 4 }, list)?;
            check_format(name, *lhs_format)?;
            check_format(name, *rhs_format)?;
            let (lq, rq, ls, rs) = (inputs[0], inputs[1], inputs[2], inputs[3]);
            if lq.rank() != 2
                || rq.rank() != 2
                || lq.dtype() != DType::U8
                || rq.dtype() != DType::U8
            {
                return Err(err(
                    name,
                    format!(
                        "operands must be u8 codes [m, k] and [n, k] (K-last), got {lq} and {rq}; produce them with scaled_quantize"
                    ),
                ));
            }
            if lq.dim(1) != rq.dim(1) {
                return Err(err(
                    name,
                    format!(
                        "inner dimensions differ: lhs {lq} vs rhs {rq}; both are K-last ([m, k] and [n, k]), so their last axes must match"
                    ),
                ));
            }
            for (what, q, s) in [("lhs", lq, ls), ("rhs", rq, rs)] {
                let expected = scale_shape(name, q, *scale_layout)?;
                if s != &expected {
                    return Err(err(
                        name,
                        format!(
                            "{what} scales must be {expected} for codes {q} with layout {scale_layout:?}, got {s}"
                        ),
                    ));
                }
            }
            if *has_bias {
                let b = inputs[4];
                if b.rank() != 1 || b.dim(0) != rq.dim(0) {
                    return Err(err(
                        name,
                        format!(
                            "bias must be [n] = [{}] (axis 0 of the rhs codes {rq}), got {b}",
                            rq.dim(0)
                        ),
                    ));
                }
                require_float(name, "bias", b)?;
            }
            Ok(Shape::from_dims(&[lq.dim(0), rq.dim(0)], DType::F32))
        }
        _ => unreachable!("scaled::infer called with {}", op.name()),
    }
}

/// A custom format must fit a byte and have an exponent (see [`ScaledFormat::Custom`]).
fn check_format(name: &str, f: ScaledFormat) -> IrResult<()> {
    if let ScaledFormat::Custom {
        exp_bits,
        mant_bits,
        ..
    } = f
        && (exp_bits == 0 || 1 + exp_bits as u32 + mant_bits as u32 > 8)
    {
        return Err(err(
            name,
            format!(
                "custom format with {exp_bits} exponent and {mant_bits} mantissa bits is not a ≤ 8-bit float: need exp_bits ≥ 1 and 1 + exp_bits + mant_bits ≤ 8"
            ),
        ));
    }
    Ok(())
}

/// The scales of `x` under `layout`: per-tensor → `f32 [1]`; block/group layouts →
/// `u8 [.., K/block]` (one code per `block` consecutive elements of the last axis).
fn scale_shape(name: &str, x: &Shape, layout: ScaleLayout) -> IrResult<Shape> {
    if x.rank() == 0 {
        return Err(err(
            name,
            format!("needs at least one axis (the K axis), got the scalar {x}"),
        ));
    }
    let block = match layout {
        ScaleLayout::PerTensor => return Ok(Shape::new(&[1], DType::F32)),
        ScaleLayout::BlockMxE8M0 { block } => block as usize,
        ScaleLayout::Nvfp4 { group } => group as usize,
    };
    if block == 0 {
        return Err(err(
            name,
            format!(
                "scale layout {layout:?} has block size 0; use a block of at least 1 (32 for MX, 16 for NVFP4)"
            ),
        ));
    }
    let k = x.dim(x.rank() - 1);
    match k.as_static() {
        Some(k) if k % block == 0 => {
            let mut dims = x.dims().to_vec();
            *dims.last_mut().expect("rank ≥ 1") = Dim::Static(k / block);
            Ok(Shape::from_dims(&dims, DType::U8))
        }
        _ => Err(err(
            name,
            format!(
                "the last (K) axis of {x} is {k}, but layout {layout:?} needs it static and a multiple of the block {block}; pad K to a multiple of {block}"
            ),
        )),
    }
}
