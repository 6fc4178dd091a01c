//! Batching rules of data movement, gathers/scatters and the reductions: mostly
//! the same op with every axis shifted past the batch axis.

use super::{BVal, Batcher, unroll};
use crate::build::Build;
use rlx_ir::{CmpOp, DType, Dim, IrResult, Node, NodeId, Op, Shape, TensorData};

pub(super) fn rule(
    bt: &mut Batcher,
    node: &Node,
    ins: &[BVal],
    shapes: &[Shape],
) -> IrResult<BVal> {
    let x = ins[0];
    let one = |bt: &mut Batcher, op: Op| -> IrResult<BVal> {
        Ok(BVal::batched(bt.e.op(op, vec![x.id])?))
    };
    match &node.op {
        Op::Reshape { new_shape } => {
            let mut s = vec![bt.size as i64];
            s.extend_from_slice(new_shape);
            one(bt, Op::Reshape { new_shape: s })
        }
        Op::Transpose { perm } => {
            let mut p = vec![0];
            p.extend(perm.iter().map(|a| a + 1));
            one(bt, Op::Transpose { perm: p })
        }
        Op::Narrow { axis, start, len } => one(
            bt,
            Op::Narrow {
                axis: axis + 1,
                start: *start,
                len: *len,
            },
        ),
        Op::Pad {
            axis,
            before,
            after,
            value,
        } => one(
            bt,
            Op::Pad {
                axis: axis + 1,
                before: *before,
                after: *after,
                value: *value,
            },
        ),
        Op::Cumsum { axis, exclusive } => one(
            bt,
            Op::Cumsum {
                axis: if *axis >= 0 { axis + 1 } else { *axis },
                exclusive: *exclusive,
            },
        ),
        Op::Reduce { op, axes, keep_dim } => one(
            bt,
            Op::Reduce {
                op: *op,
                axes: axes.iter().map(|a| a + 1).collect(),
                keep_dim: *keep_dim,
            },
        ),
        Op::ArgMax { axis, keep_dim } => one(
            bt,
            Op::ArgMax {
                axis: axis + 1,
                keep_dim: *keep_dim,
            },
        ),
        Op::ArgMin { axis, keep_dim } => one(
            bt,
            Op::ArgMin {
                axis: axis + 1,
                keep_dim: *keep_dim,
            },
        ),
        Op::Concat { axis } => {
            let mut parts = Vec::with_capacity(ins.len());
            for &v in ins {
                parts.push(bt.batch(v)?);
            }
            Ok(BVal::batched(
                bt.e.op(Op::Concat { axis: axis + 1 }, parts)?,
            ))
        }
        Op::Expand { target_shape } => {
            // Give x the target's per-example rank (unit axes after the batch), then
            // expand with the batch axis kept.
            let xa = bt.align(x, target_shape.len())?;
            let mut t = vec![-1];
            t.extend_from_slice(target_shape);
            Ok(BVal::batched(
                bt.e.op(Op::Expand { target_shape: t }, vec![xa])?,
            ))
        }
        Op::BroadcastLike => {
            let like = ins[1];
            let rank = bt.ex_rank(like);
            let xa = bt.align(x, rank)?;
            let like = bt.batch(like)?;
            Ok(BVal::batched(bt.e.op(Op::BroadcastLike, vec![xa, like])?))
        }
        Op::Gather { axis } => gather(bt, node, ins, *axis),
        Op::ScatterAdd { axis } => scatter_add(bt, node, ins, shapes, *axis),
        other => unreachable!("vmap movement::rule got {}", other.name()),
    }
}

/// `table[..a] ++ idx ++ table[a+1..]` per example.
fn gather(bt: &mut Batcher, node: &Node, ins: &[BVal], axis: usize) -> IrResult<BVal> {
    let (table, idx) = (ins[0], ins[1]);
    if !idx.batched {
        // Gather along the shifted axis of the batched table.
        let y =
            bt.e.op(Op::Gather { axis: axis + 1 }, vec![table.id, idx.id])?;
        return Ok(BVal::batched(y));
    }
    if !table.batched {
        // The batch axis of the indices lands at `axis`; move it to the front.
        let y = bt.e.op(Op::Gather { axis }, vec![table.id, idx.id])?;
        return Ok(BVal::batched(bt.e.move_axis(y, axis, 0)?));
    }
    // Both batched: fold the batch into the indexed axis and offset the indices.
    let Some((flat, n)) = fold_axis(bt, table.id, axis)? else {
        return unroll(bt, &node.op, ins);
    };
    let off = offset_indices(bt, idx.id, n)?;
    let y = bt.e.op(Op::Gather { axis: 0 }, vec![flat, off])?;
    // [B, idx…, table[..a], table[a+1..]] → [B, table[..a], idx…, table[a+1..]].
    let ni = bt.ex_rank(idx);
    let r = bt.e.rank(y);
    let mut perm = vec![0];
    perm.extend(1 + ni..1 + ni + axis);
    perm.extend(1..1 + ni);
    perm.extend(1 + ni + axis..r);
    Ok(BVal::batched(bt.e.transpose(y, perm)?))
}

/// `base` plus `upd` scattered at `idx` along `axis`, per example.
fn scatter_add(
    bt: &mut Batcher,
    node: &Node,
    ins: &[BVal],
    shapes: &[Shape],
    axis: usize,
) -> IrResult<BVal> {
    let (base, idx, upd) = (ins[0], ins[1], ins[2]);
    if !idx.batched {
        let b = bt.batch(base)?;
        let u = bt.batch(upd)?;
        let y =
            bt.e.op(Op::ScatterAdd { axis: axis + 1 }, vec![b, idx.id, u])?;
        return Ok(BVal::batched(y));
    }
    let b = bt.batch(base)?;
    let Some((flat, n)) = fold_axis(bt, b, axis)? else {
        return unroll(bt, &node.op, ins);
    };
    let off = offset_indices(bt, idx.id, n)?;
    // updates [B, base[..a], idx…, base[a+1..]] → [B, idx…, base[..a], base[a+1..]].
    let u = bt.batch(upd)?;
    let ni = shapes[1].rank();
    let r = bt.e.rank(u);
    let mut perm = vec![0];
    perm.extend(1 + axis..1 + axis + ni);
    perm.extend(1..1 + axis);
    perm.extend(1 + axis + ni..r);
    let u = bt.e.transpose(u, perm)?;
    let y = bt.e.op(Op::ScatterAdd { axis: 0 }, vec![flat, off, u])?;
    // [B·n, rest…] → [B, n, rest…] → n back to its place.
    let dims = bt.e.dims(y);
    let mut target = vec![Dim::Static(bt.size), Dim::Static(n)];
    target.extend_from_slice(&dims[1..]);
    let y = bt.e.reshape_to(y, &target)?;
    Ok(BVal::batched(bt.e.move_axis(y, 1, axis + 1)?))
}

/// `[B, …, n (at 1 + axis), …] → [B·n, rest…]` with the indexed axis moved next to
/// the batch; `None` when `n` is dynamic or a reshape cannot express the merge.
fn fold_axis(bt: &mut Batcher, x: NodeId, axis: usize) -> IrResult<Option<(NodeId, usize)>> {
    let Some(n) = bt.e.dims(x)[axis + 1].as_static() else {
        return Ok(None);
    };
    let moved = bt.e.move_axis(x, axis + 1, 1)?;
    let dims = bt.e.dims(moved);
    let mut target = vec![Dim::Static(bt.size * n)];
    target.extend_from_slice(&dims[2..]);
    if !bt.e.can_reshape(moved, &target) {
        return Ok(None);
    }
    Ok(Some((bt.e.reshape_to(moved, &target)?, n)))
}

/// Batched indices `[B, …]` into an axis of size `n` made into indices of the
/// folded `[B·n]` axis: negative indices wrapped, then `b·n` added for example `b`.
/// (An out-of-range index reads a neighbouring example instead of failing.)
fn offset_indices(bt: &mut Batcher, idx: NodeId, n: usize) -> IrResult<NodeId> {
    let i = bt.e.cast(idx, DType::I64)?;
    let neg = bt.e.cmp_scalar(CmpOp::Lt, i, 0.0)?;
    let wrapped = bt.e.add_scalar(i, n as f64)?;
    let i = bt.e.select(neg, wrapped, i)?;
    let r = bt.e.rank(i);
    let mut dims = vec![bt.size];
    dims.extend(std::iter::repeat_n(1, r - 1));
    let offs: Vec<i64> = (0..bt.size).map(|b| (b * n) as i64).collect();
    let offs = bt.e.constant(TensorData::from_i64(&dims, &offs));
    bt.e.add(i, offs)
}
