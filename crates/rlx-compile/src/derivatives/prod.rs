//! The partial derivatives of a product reduction, `∂(Π x)/∂x_j = Π_{i≠j} x_i`, as
//! an expression in `x` that is exact at every order, zeros included.
//!
//! Dividing the product by `x_j` fails at zeros, and selecting between
//! "no zero / one zero / more" cases gives the right values but constant pieces
//! whose derivatives are wrong (the partial at a non-zero element next to one zero
//! is 0, yet it grows with that zero). So the partials are built from exclusive
//! prefix and suffix products, `Π_{i<j} x_i · Π_{i>j} x_i`, computed by doubling
//! (`⌈log₂ n⌉` shifted multiplies per direction): only multiplications of `x`, so
//! differentiating them again (either mode) is exact too. A group spanning several
//! axes factors axis by axis: with `v_m = Π` of `x` over the group's later axes,
//! `Π_{i≠j} x_i = Π_m (Π_{i_m ≠ j_m} v_m)`.
//!
//! An axis of dynamic extent cannot be shifted by static pads, so there the exclusive
//! product falls back to the value-exact case split (exact first derivative, exact
//! second derivative away from zeros).

use crate::build::Build;
use rlx_ir::{BinaryOp, CmpOp, IrResult, NodeId, Op, ReduceOp};

/// `Π_{i≠j} x_i` over the reduction group of every element `j` of `x` (the group
/// spans `axes`, which must be non-empty). The result broadcasts against `x`; it is
/// a rank-0 one when every axis of the group has size 1 (empty products).
pub(crate) fn others_product<E: Build>(e: &mut E, x: NodeId, axes: &[usize]) -> IrResult<NodeId> {
    let mut axes = axes.to_vec();
    axes.sort_unstable();
    axes.dedup();
    let dt = e.graph().shape(x).dtype();
    let mut partial: Option<NodeId> = None;
    for (m, &ax) in axes.iter().enumerate() {
        let later = axes[m + 1..].to_vec();
        let v = if later.is_empty() {
            x
        } else {
            e.op(
                Op::Reduce {
                    op: ReduceOp::Prod,
                    axes: later,
                    keep_dim: true,
                },
                vec![x],
            )?
        };
        let Some(ex) = exclusive_along(e, v, ax)? else {
            continue;
        };
        partial = Some(match partial {
            None => ex,
            Some(p) => mul(e, p, ex)?,
        });
    }
    Ok(match partial {
        Some(p) => p,
        None => e.scalar(1.0, dt),
    })
}

fn mul<E: Build>(e: &mut E, l: NodeId, r: NodeId) -> IrResult<NodeId> {
    e.op(Op::Binary(BinaryOp::Mul), vec![l, r])
}

/// `Π_{i≠j} v_i` along `ax` (other axes elementwise), `v`'s shape; `None` for an axis
/// of size 1 (the empty product, 1).
fn exclusive_along<E: Build>(e: &mut E, v: NodeId, ax: usize) -> IrResult<Option<NodeId>> {
    let Some(n) = e.graph().shape(v).dim(ax).as_static() else {
        return dynamic_exclusive(e, v, ax).map(Some);
    };
    if n <= 1 {
        return Ok(None);
    }
    let mut sides = [v; 2];
    for (side, toward_end) in sides.iter_mut().zip([true, false]) {
        // Exclusive: shift by one first, then an inclusive scan by doubling.
        let mut y = shift(e, v, ax, n, 1, toward_end)?;
        let mut s = 1;
        while s < n - 1 {
            let sh = shift(e, y, ax, n, s, toward_end)?;
            y = mul(e, y, sh)?;
            s *= 2;
        }
        *side = y;
    }
    mul(e, sides[0], sides[1]).map(Some)
}

/// `y` moved `s` places along `ax` (of static extent `n > s`) toward the end
/// (`out[i] = y[i − s]`) or toward the start (`out[i] = y[i + s]`), filled with 1.
fn shift<E: Build>(
    e: &mut E,
    y: NodeId,
    ax: usize,
    n: usize,
    s: usize,
    toward_end: bool,
) -> IrResult<NodeId> {
    let pad = Op::Pad {
        axis: ax,
        before: if toward_end { s } else { 0 },
        after: if toward_end { 0 } else { s },
        value: 1.0,
    };
    if toward_end {
        let p = e.op(pad, vec![y])?;
        e.op(
            Op::Narrow {
                axis: ax,
                start: 0,
                len: n,
            },
            vec![p],
        )
    } else {
        let k = e.op(
            Op::Narrow {
                axis: ax,
                start: s,
                len: n - s,
            },
            vec![y],
        )?;
        e.op(pad, vec![k])
    }
}

/// The exclusive product along a dynamic axis by cases on the number of zeros `z`
/// in the group: `p / v_j` when `z = 0`; at the zero `p` when `z = 1`; else 0 —
/// with `p` the product of the non-zero elements.
fn dynamic_exclusive<E: Build>(e: &mut E, v: NodeId, ax: usize) -> IrResult<NodeId> {
    let dt = e.graph().shape(v).dtype();
    let (zero, one) = (e.scalar(0.0, dt), e.scalar(1.0, dt));
    let is_zero = e.op(Op::Compare(CmpOp::Eq), vec![v, zero])?;
    let zeros = e.op(Op::Where, vec![is_zero, one, zero])?;
    let nz = e.op(
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![ax],
            keep_dim: true,
        },
        vec![zeros],
    )?;
    let v_safe = e.op(Op::Where, vec![is_zero, one, v])?;
    let p = e.op(
        Op::Reduce {
            op: ReduceOp::Prod,
            axes: vec![ax],
            keep_dim: true,
        },
        vec![v_safe],
    )?;
    let no_zero = e.op(Op::Compare(CmpOp::Eq), vec![nz, zero])?;
    let one_zero = e.op(Op::Compare(CmpOp::Eq), vec![nz, one])?;
    let others = e.op(Op::Binary(BinaryOp::Div), vec![p, v_safe])?;
    let at_nonzero = e.op(Op::Where, vec![no_zero, others, zero])?;
    let at_zero = e.op(Op::Where, vec![one_zero, p, zero])?;
    e.op(Op::Where, vec![is_zero, at_zero, at_nonzero])
}
