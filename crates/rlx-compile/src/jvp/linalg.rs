//! JVP rules of the contractions that are not linear: the fused linear layer (affine,
//! with an activation), dense solve and the (straight-through) scaled matmul. The
//! bilinear `matmul` and codebook matmul take the generic rule of
//! [`crate::derivatives::linear`].

use super::ForwardBuilder;
use crate::build::Build;
use crate::derivatives::elementwise::{Applier, activation_partial, needs_input};
use crate::derivatives::scaled::{dequantize, ste_source};
use rlx_ir::{DType, IrResult, Node, NodeId, Op, ScaleLayout, ScaledFormat};

pub(super) fn rule(f: &mut ForwardBuilder, node: &Node) -> IrResult<Option<NodeId>> {
    match &node.op {
        Op::FusedMatMulBiasAct { activation } => {
            let (x, w, bias) = (node.inputs[0], node.inputs[1], node.inputs[2]);
            let lin = Op::FusedMatMulBiasAct { activation: None };
            let mut terms = Vec::new();
            if f.operand_tangent(node, 0).is_some() || f.operand_tangent(node, 1).is_some() {
                let zero_bias = f.e.zeros_like(bias)?;
                if let Some(tx) = f.operand_tangent(node, 0) {
                    terms.push(f.e.op(lin.clone(), vec![tx, w, zero_bias])?);
                }
                if let Some(tw) = f.operand_tangent(node, 1) {
                    terms.push(f.e.op(lin.clone(), vec![x, tw, zero_bias])?);
                }
            }
            if let Some(tb) = f.operand_tangent(node, 2) {
                terms.push(f.e.broadcast_like(tb, node.id)?);
            }
            let Some(tz) = f.e.sum_terms(terms)? else {
                return Ok(None);
            };
            match activation {
                None => Ok(Some(tz)),
                Some(a) => {
                    // The pre-activation is not a graph value: recompute it only when
                    // the activation's derivative needs it.
                    let z = if needs_input(*a) {
                        Some(f.e.op(lin, vec![x, w, bias])?)
                    } else {
                        None
                    };
                    match activation_partial(&mut f.e, *a, z, node.id)? {
                        Some(p) => Ok(Some(Applier::default().apply(&mut f.e, &p, tz)?)),
                        None => Ok(None),
                    }
                }
            }
        }
        Op::DenseSolve => solve(f, node),
        Op::ScaledMatMul {
            lhs_format,
            rhs_format,
            scale_layout,
            has_bias,
        } => scaled(
            f,
            node,
            [*lhs_format, *rhs_format],
            *scale_layout,
            *has_bias,
        ),
        // Codes (u8) and scales: constants under the straight-through estimator.
        Op::ScaledQuantize { .. } | Op::ScaledQuantScale { .. } => Ok(None),
        other => unreachable!("linalg::rule got {}", other.name()),
    }
}

/// `x = A⁻¹b` → `tx = A⁻¹(tb − tA·x)`.
fn solve(f: &mut ForwardBuilder, node: &Node) -> IrResult<Option<NodeId>> {
    let (a, x) = (node.inputs[0], node.id);
    let (ta, tb) = (f.operand_tangent(node, 0), f.operand_tangent(node, 1));
    let e = &mut f.e;
    let vector = e.rank(node.inputs[1]) + 1 == e.rank(a);
    let ta_x = match ta {
        None => None,
        Some(ta) if vector => {
            let col = e.unsqueeze(x, e.rank(x))?;
            let prod = e.matmul(ta, col)?;
            let r = e.rank(prod);
            Some(e.squeeze(prod, r - 1)?)
        }
        Some(ta) => Some(e.matmul(ta, x)?),
    };
    let rhs = match (tb, ta_x) {
        (Some(tb), Some(p)) => e.sub(tb, p)?,
        (Some(tb), None) => tb,
        (None, Some(p)) => e.neg(p)?,
        (None, None) => return Ok(None),
    };
    Ok(Some(e.op(Op::DenseSolve, vec![a, rhs])?))
}

/// Straight-through `scaled_matmul(lq, rq, ls, rs[, bias])` = `deq(lq)·deq(rq)ᵀ + bias`:
/// when `lq = scaled_quantize(x, ls)` the tangent of `x` flows as if the quantizer
/// were the identity (and likewise for the rhs); the scales are constants.
fn scaled(
    f: &mut ForwardBuilder,
    node: &Node,
    formats: [ScaledFormat; 2],
    layout: ScaleLayout,
    has_bias: bool,
) -> IrResult<Option<NodeId>> {
    let (lq, rq, ls, rs) = (
        node.inputs[0],
        node.inputs[1],
        node.inputs[2],
        node.inputs[3],
    );
    let ste =
        |f: &ForwardBuilder, codes: NodeId| ste_source(f.e.g, codes).and_then(|x| f.tangent(x));
    let (tl, tr) = (ste(f, lq), ste(f, rq));
    let mut terms = Vec::new();
    if let Some(tl) = tl {
        let r = dequantize(&mut f.e, rq, rs, formats[1], layout)?;
        let tl = f.e.cast(tl, DType::F32)?;
        let rt = f.e.swap_last_axes(r)?;
        terms.push(f.e.matmul(tl, rt)?);
    }
    if let Some(tr) = tr {
        let l = dequantize(&mut f.e, lq, ls, formats[0], layout)?;
        let tr = f.e.cast(tr, DType::F32)?;
        let trt = f.e.swap_last_axes(tr)?;
        terms.push(f.e.matmul(l, trt)?);
    }
    if has_bias && let Some(tb) = f.operand_tangent(node, 4) {
        terms.push(f.e.broadcast_like(tb, node.id)?);
    }
    f.e.sum_terms(terms)
}
