//! Batching rules of the windowed ops: the batch is folded into the channel axis
//! (convolutions become grouped convolutions with `B·groups` groups, so batched
//! weights work too), or into `N` when only `x` is batched and `N` is static.

use super::{BVal, Batcher, unroll};
use crate::build::Build;
use rlx_ir::{Dim, IrResult, Node, NodeId, Op, Shape};

pub(super) fn rule(
    bt: &mut Batcher,
    node: &Node,
    ins: &[BVal],
    _shapes: &[Shape],
) -> IrResult<BVal> {
    match &node.op {
        Op::Fft { .. } => Ok(BVal::batched(bt.e.op(node.op.clone(), vec![ins[0].id])?)),
        Op::Conv { .. } if ins[0].batched && ins[1..].iter().all(|v| !v.batched) => {
            // Only x: fold the batch into N when it is static.
            if let Some(xf) = bt.fold(ins[0].id)? {
                let mut args = vec![xf];
                args.extend(ins[1..].iter().map(|v| v.id));
                let y = bt.e.op(node.op.clone(), args)?;
                return Ok(BVal::batched(bt.unfold(y)?));
            }
            grouped(bt, node, ins)
        }
        Op::Conv { .. } | Op::ConvGradInput { .. } | Op::ConvGradWeight { .. } => {
            grouped(bt, node, ins)
        }
        Op::Pool { .. } | Op::PoolGrad { .. } => {
            // Pooling is per channel: fold the batch into C.
            let mut args = Vec::with_capacity(ins.len());
            for &v in ins {
                let x = bt.batch(v)?;
                match into_channels(bt, x)? {
                    Some(f) => args.push(f),
                    None => return unroll(bt, &node.op, ins),
                }
            }
            let y = bt.e.op(node.op.clone(), args)?;
            Ok(BVal::batched(out_of_channels(bt, y)?))
        }
        other => unreachable!("vmap conv::rule got {}", other.name()),
    }
}

/// `[B, N, C, s…] → [N, B·C, s…]`; `None` when C is dynamic or the reshape cannot
/// be expressed.
fn into_channels(bt: &mut Batcher, x: NodeId) -> IrResult<Option<NodeId>> {
    let t = bt.e.move_axis(x, 0, 1)?;
    let dims = bt.e.dims(t);
    let Some(c) = dims[2].as_static() else {
        return Ok(None);
    };
    let mut target = vec![dims[0], Dim::Static(bt.size * c)];
    target.extend_from_slice(&dims[3..]);
    if !bt.e.can_reshape(t, &target) {
        return Ok(None);
    }
    Ok(Some(bt.e.reshape_to(t, &target)?))
}

/// `[N, B·C, s…] → [B, N, C, s…]`.
fn out_of_channels(bt: &mut Batcher, y: NodeId) -> IrResult<NodeId> {
    let dims = bt.e.dims(y);
    let c = dims[1].as_static().expect("channels are static") / bt.size;
    let mut target = vec![dims[0], Dim::Static(bt.size), Dim::Static(c)];
    target.extend_from_slice(&dims[2..]);
    let r = bt.e.reshape_to(y, &target)?;
    bt.e.move_axis(r, 1, 0)
}

/// `[B, C_out, …] → [B·C_out, …]` (weights and bias).
fn merge_leading(bt: &mut Batcher, w: NodeId) -> IrResult<NodeId> {
    let dims = bt.e.dims(w);
    let c = dims[1].as_static().expect("weight channel axes are static");
    let mut target = vec![Dim::Static(bt.size * c)];
    target.extend_from_slice(&dims[2..]);
    bt.e.reshape_to(w, &target)
}

/// The grouped form: x `[N, B·C, s…]`, w `[B·C_out, C/g, k…]`, bias `[B·C_out]`,
/// grad_out `[N, B·C_out, o…]`, with `B·groups` groups — example `b` is the block
/// of groups `b·groups … (b+1)·groups − 1`.
fn grouped(bt: &mut Batcher, node: &Node, ins: &[BVal]) -> IrResult<BVal> {
    let x = bt.batch(ins[0])?;
    let Some(x) = into_channels(bt, x)? else {
        return unroll(bt, &node.op, ins);
    };
    let w = bt.batch(ins[1])?;
    let w = merge_leading(bt, w)?;
    let mut args = vec![x, w];
    if let Some(&third) = ins.get(2) {
        let t = bt.batch(third)?;
        if matches!(node.op, Op::Conv { .. }) {
            // The bias [B, C_out] → [B·C_out].
            let dims = bt.e.dims(t);
            let c = dims[1].as_static().expect("static bias");
            args.push(bt.e.reshape_to(t, &[Dim::Static(bt.size * c)])?);
        } else {
            match into_channels(bt, t)? {
                Some(g) => args.push(g),
                None => return unroll(bt, &node.op, ins),
            }
        }
    }
    // The same op with B times the groups.
    let mut op = node.op.clone();
    match &mut op {
        Op::Conv { groups, .. }
        | Op::ConvGradInput { groups, .. }
        | Op::ConvGradWeight { groups, .. } => *groups *= bt.size,
        other => unreachable!("grouped got {}", other.name()),
    }
    let y = bt.e.op(op, args)?;
    if matches!(node.op, Op::ConvGradWeight { .. }) {
        // [B·C_out, C/g, k…] → [B, C_out, C/g, k…].
        let dims = bt.e.dims(y);
        let c = dims[0].as_static().expect("static") / bt.size;
        let mut target = vec![Dim::Static(bt.size), Dim::Static(c)];
        target.extend_from_slice(&dims[1..]);
        return Ok(BVal::batched(bt.e.reshape_to(y, &target)?));
    }
    Ok(BVal::batched(out_of_channels(bt, y)?))
}
