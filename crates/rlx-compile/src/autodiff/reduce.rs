//! VJP rules of the reductions: `reduce` (sum, mean, max, min, prod) and `cumsum`.
//! (`argmax`/`argmin` output indices and pass no gradient.)

use super::builder::ReverseBuilder;
use crate::build::Build;
use crate::derivatives::prod::others_product;
use crate::derivatives::reduce::extremum_share;
use rlx_ir::{IrResult, Node, NodeId, Op, ReduceOp, norm_axis};

pub(super) fn vjp(rb: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    if !rb.wants(node, 0) {
        return Ok(());
    }
    let x = node.inputs[0];
    match &node.op {
        Op::Reduce { op, axes, keep_dim } => {
            let gx = reduce(rb, x, node.id, *op, axes, *keep_dim, g)?;
            rb.give(x, gx)
        }
        Op::Cumsum { axis, exclusive } => {
            // Inclusive: ∂L/∂x_j = Σ_{i ≥ j} g_i = total − exclusive_cumsum(g)_j;
            // exclusive: Σ_{i > j} g_i = total − inclusive_cumsum(g)_j.
            let ax = norm_axis("cumsum", *axis as i64, rb.shape(x).rank())?;
            let total = rb.sum(g, vec![ax], true)?;
            let run = rb.op(
                Op::Cumsum {
                    axis: ax as i32,
                    exclusive: !exclusive,
                },
                vec![g],
            )?;
            let gx = rb.sub(total, run)?;
            rb.give(x, gx)
        }
        Op::ArgMax { .. } | Op::ArgMin { .. } => Ok(()),
        other => unreachable!("reduce::vjp got {}", other.name()),
    }
}

fn reduce(
    rb: &mut ReverseBuilder,
    x: NodeId,
    y: NodeId,
    op: ReduceOp,
    axes: &[usize],
    keep_dim: bool,
    g: NodeId,
) -> IrResult<NodeId> {
    if axes.is_empty() {
        return Ok(g);
    }
    // Everything below works on the keep_dim form, which broadcasts against x.
    let kd = rb.keep_dims(x, axes);
    let gk = if keep_dim { g } else { rb.reshape_to(g, &kd)? };
    let dt = rb.dtype(x);
    match op {
        ReduceOp::Sum => rb.broadcast_like(gk, x),
        ReduceOp::Mean => {
            let xd = rb.dims(x);
            let count: Option<usize> = axes.iter().map(|&a| xd[a].as_static()).product();
            let share = match count {
                Some(n) => rb.scale(gk, 1.0 / n as f64)?,
                // A dynamic group size: count it at run time.
                None => {
                    let ones = rb.fill_like(1.0, x, dt)?;
                    let n = rb.sum(ones, axes.to_vec(), true)?;
                    rb.div(gk, n)?
                }
            };
            rb.broadcast_like(share, x)
        }
        ReduceOp::Max | ReduceOp::Min => {
            // Every element equal to the extremum shares the gradient evenly (crate::kinks).
            let yk = if keep_dim { y } else { rb.reshape_to(y, &kd)? };
            let (hit, n) = extremum_share(rb, x, yk, axes, true)?;
            let share = rb.div(gk, n)?;
            let full = rb.broadcast_like(share, x)?;
            rb.keep_where(hit, full)
        }
        ReduceOp::Prod => prod(rb, x, axes, gk),
    }
}

/// `g · ∂(Π x)/∂x_j = g · Π_{i≠j} x_i`, as an expression in x that stays exact
/// when differentiated again, zeros included (see [`super::prod`]).
fn prod(rb: &mut ReverseBuilder, x: NodeId, axes: &[usize], gk: NodeId) -> IrResult<NodeId> {
    let partial = others_product(rb, x, axes)?;
    let gx = rb.mul(partial, gk)?;
    rb.broadcast_like(gx, x)
}
