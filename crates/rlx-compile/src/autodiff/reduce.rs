//! VJP rules of the reductions: `reduce` (sum, mean, max, min, prod) and `cumsum`.
//! (`argmax`/`argmin` output indices and pass no gradient.)

use super::builder::ReverseBuilder;
use crate::build::Build;
use crate::derivatives::prod::others_product;
use crate::derivatives::reduce::extremum_share;
use rlx_ir::{IrResult, Node, NodeId, Op, ReduceOp, norm_axis};

pub(super) fn vjp(bw: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    if !bw.wants(node, 0) {
        return Ok(());
    }
    let x = node.inputs[0];
    match &node.op {
        Op::Reduce { op, axes, keep_dim } => {
            let gx = reduce(bw, x, node.id, *op, axes, *keep_dim, g)?;
            bw.give(x, gx)
        }
        Op::Cumsum { axis, exclusive } => {
            // Inclusive: ∂L/∂x_j = Σ_{i ≥ j} g_i = total − exclusive_cumsum(g)_j;
            // exclusive: Σ_{i > j} g_i = total − inclusive_cumsum(g)_j.
            let ax = norm_axis("cumsum", *axis as i64, bw.shape(x).rank())?;
            let total = bw.sum(g, vec![ax], true)?;
            let run = bw.op(
                Op::Cumsum {
                    axis: ax as i32,
                    exclusive: !exclusive,
                },
                vec![g],
            )?;
            let gx = bw.sub(total, run)?;
            bw.give(x, gx)
        }
        Op::ArgMax { .. } | Op::ArgMin { .. } => Ok(()),
        other => unreachable!("reduce::vjp got {}", other.name()),
    }
}

fn reduce(
    bw: &mut ReverseBuilder,
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
    let kd = bw.keep_dims(x, axes);
    let gk = if keep_dim { g } else { bw.reshape_to(g, &kd)? };
    let dt = bw.dtype(x);
    match op {
        ReduceOp::Sum => bw.broadcast_like(gk, x),
        ReduceOp::Mean => {
            let xd = bw.dims(x);
            let count: Option<usize> = axes.iter().map(|&a| xd[a].as_static()).product();
            let share = match count {
                Some(n) => bw.scale(gk, 1.0 / n as f64)?,
                // A dynamic group size: count it at run time.
                None => {
                    let ones = bw.fill_like(1.0, x, dt)?;
                    let n = bw.sum(ones, axes.to_vec(), true)?;
                    bw.div(gk, n)?
                }
            };
            bw.broadcast_like(share, x)
        }
        ReduceOp::Max | ReduceOp::Min => {
            // Every element equal to the extremum shares the gradient evenly (crate::kinks).
            let yk = if keep_dim { y } else { bw.reshape_to(y, &kd)? };
            let (hit, n) = extremum_share(bw, x, yk, axes, true)?;
            let share = bw.div(gk, n)?;
            let full = bw.broadcast_like(share, x)?;
            bw.keep_where(hit, full)
        }
        ReduceOp::Prod => prod(bw, x, axes, gk),
    }
}

/// `g · ∂(Π x)/∂x_j = g · Π_{i≠j} x_i`, as an expression in x that stays exact
/// when differentiated again, zeros included (see [`super::prod`]).
fn prod(bw: &mut ReverseBuilder, x: NodeId, axes: &[usize], gk: NodeId) -> IrResult<NodeId> {
    let partial = others_product(bw, x, axes)?;
    let gx = bw.mul(partial, gk)?;
    bw.broadcast_like(gx, x)
}
