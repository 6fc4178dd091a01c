//! VJP rules of the reductions: `reduce` (sum, mean, max, min, prod) and `cumsum`.
//! (`argmax`/`argmin` output indices and pass no gradient.)

use super::builder::Bw;
use rlx_ir::{BinaryOp, CmpOp, IrResult, Node, NodeId, Op, ReduceOp, norm_axis};

pub(super) fn vjp(bw: &mut Bw, node: &Node, g: NodeId) -> IrResult<()> {
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
    bw: &mut Bw,
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
            // Every element equal to the extremum shares the gradient evenly.
            let yk = if keep_dim { y } else { bw.reshape_to(y, &kd)? };
            let hit = bw.cmp(CmpOp::Eq, x, yk)?;
            let hits = bw.cast(hit, dt)?;
            let n = bw.sum(hits, axes.to_vec(), true)?;
            let share = bw.div(gk, n)?;
            let full = bw.broadcast_like(share, x)?;
            bw.keep_where(hit, full)
        }
        ReduceOp::Prod => prod(bw, x, axes, gk),
    }
}

/// ∂(Π x)/∂x_j = Π_{i≠j} x_i, exact with zeros: with no zero in the group it is
/// `p / x_j`; with exactly one zero only that element gets the product of the
/// others; with two or more every partial is 0.
fn prod(bw: &mut Bw, x: NodeId, axes: &[usize], gk: NodeId) -> IrResult<NodeId> {
    let dt = bw.dtype(x);
    let is_zero = bw.cmp_scalar(CmpOp::Eq, x, 0.0)?;
    let zeros_f = bw.cast(is_zero, dt)?;
    let nz = bw.sum(zeros_f, axes.to_vec(), true)?;
    let one = bw.scalar(1.0, dt);
    let x_safe = bw.select(is_zero, one, x)?;
    let p = bw.reduce(ReduceOp::Prod, x_safe, axes.to_vec(), true)?;
    let no_zero = bw.cmp_scalar(CmpOp::Eq, nz, 0.0)?;
    let one_zero = bw.cmp_scalar(CmpOp::Eq, nz, 1.0)?;
    let others = bw.bin(BinaryOp::Div, p, x_safe)?;
    let at_nonzero = bw.keep_where(no_zero, others)?;
    let p_full = bw.broadcast_like(p, x)?;
    let at_zero = bw.keep_where(one_zero, p_full)?;
    let partial = bw.select(is_zero, at_zero, at_nonzero)?;
    bw.mul(partial, gk)
}
