//! JVP rules of data movement (linear: the op applied to the tangents), gathers and
//! scatters, and the reductions.

use super::Fwd;
use crate::autodiff::prod::others_product;
use crate::build::Build;
use crate::kinks;
use rlx_ir::{IrResult, Node, NodeId, Op, ReduceOp};

pub(super) fn rule(f: &mut Fwd, node: &Node) -> IrResult<Option<NodeId>> {
    match &node.op {
        Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Narrow { .. }
        | Op::Expand { .. }
        | Op::Cumsum { .. } => same_op(f, node),
        Op::Pad {
            axis,
            before,
            after,
            ..
        } => {
            // The fill value is a constant: its tangent is zero.
            let Some(t) = f.t(node, 0) else {
                return Ok(None);
            };
            let op = Op::Pad {
                axis: *axis,
                before: *before,
                after: *after,
                value: 0.0,
            };
            Ok(Some(f.e.op(op, vec![t])?))
        }
        Op::Concat { .. } => {
            let mut parts = Vec::with_capacity(node.inputs.len());
            for i in 0..node.inputs.len() {
                parts.push(f.t_or_zero(node, i)?);
            }
            Ok(Some(f.e.op(node.op.clone(), parts)?))
        }
        Op::BroadcastLike => {
            let Some(t) = f.t(node, 0) else {
                return Ok(None);
            };
            Ok(Some(f.e.op(Op::BroadcastLike, vec![t, node.inputs[1]])?))
        }
        Op::Gather { .. } => {
            let Some(t) = f.t(node, 0) else {
                return Ok(None);
            };
            Ok(Some(f.e.op(node.op.clone(), vec![t, node.inputs[1]])?))
        }
        Op::ScatterAdd { .. } => {
            if f.t(node, 0).is_none() && f.t(node, 2).is_none() {
                return Ok(None);
            }
            let tb = f.t_or_zero(node, 0)?;
            let tu = f.t_or_zero(node, 2)?;
            Ok(Some(f.e.op(node.op.clone(), vec![tb, node.inputs[1], tu])?))
        }
        Op::ArgMax { .. } | Op::ArgMin { .. } => Ok(None),
        Op::Reduce { op, axes, keep_dim } => reduce(f, node, *op, axes, *keep_dim),
        other => unreachable!("movement::rule got {}", other.name()),
    }
}

/// Linear ops with one operand: the op applied to the tangent.
fn same_op(f: &mut Fwd, node: &Node) -> IrResult<Option<NodeId>> {
    let Some(t) = f.t(node, 0) else {
        return Ok(None);
    };
    Ok(Some(f.e.op(node.op.clone(), vec![t])?))
}

fn reduce(
    f: &mut Fwd,
    node: &Node,
    op: ReduceOp,
    axes: &[usize],
    keep_dim: bool,
) -> IrResult<Option<NodeId>> {
    let Some(t) = f.t(node, 0) else {
        return Ok(None);
    };
    let x = node.inputs[0];
    let e = &mut f.e;
    let axes = axes.to_vec();
    match op {
        ReduceOp::Sum | ReduceOp::Mean => Ok(Some(e.op(node.op.clone(), vec![t])?)),
        ReduceOp::Max | ReduceOp::Min => {
            // The tangent at the extremal elements, averaged over ties (crate::kinks).
            let yk = if keep_dim {
                node.id
            } else {
                e.reduce(op, x, axes.clone(), true)?
            };
            let hit = kinks::extremum_hits(e, x, yk)?;
            let picked = e.keep_where(hit, t)?;
            let num = e.sum(picked, axes.clone(), keep_dim)?;
            let dt = e.dtype(x);
            let one = e.scalar(1.0, dt);
            let ones = e.keep_where(hit, one)?;
            let ones = e.broadcast_like(ones, x)?;
            let count = e.sum(ones, axes, keep_dim)?;
            Ok(Some(e.div(num, count)?))
        }
        ReduceOp::Prod => {
            // Σᵢ tᵢ·Πⱼ≠ᵢ xⱼ with the partials built from prefix/suffix products, so the
            // rule is exact with zeros and when differentiated again.
            if axes.is_empty() {
                return Ok(Some(t));
            }
            let partial = others_product(e, x, &axes)?;
            let terms = e.mul(t, partial)?;
            Ok(Some(e.sum(terms, axes, keep_dim)?))
        }
    }
}
