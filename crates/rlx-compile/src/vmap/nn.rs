//! Batching rules of the neural-network ops.

use super::{BVal, Batcher, unroll, via_decomposition};
use crate::build::Build;
use rlx_ir::{Activation, Dim, IrResult, MaskKind, Node, NodeId, Op, Shape, TensorData};

pub(super) fn rule(
    bt: &mut Batcher,
    node: &Node,
    ins: &[BVal],
    shapes: &[Shape],
) -> IrResult<BVal> {
    match &node.op {
        Op::Softmax { axis } => {
            let op = Op::Softmax { axis: shift(*axis) };
            Ok(BVal::batched(bt.e.op(op, vec![ins[0].id])?))
        }
        Op::LogSoftmax { axis } => {
            let op = Op::LogSoftmax { axis: shift(*axis) };
            Ok(BVal::batched(bt.e.op(op, vec![ins[0].id])?))
        }
        Op::LayerNorm { eps, .. } | Op::RmsNorm { eps, .. } => {
            let rms = matches!(node.op, Op::RmsNorm { .. });
            let eps = *eps;
            // The normalized axis is the last one (shape inference insists).
            let make = move |axis| {
                if rms {
                    Op::RmsNorm { axis, eps }
                } else {
                    Op::LayerNorm { axis, eps }
                }
            };
            if !ins[1].batched && !ins[2].batched {
                let x = bt.batch(ins[0])?;
                return Ok(BVal::batched(
                    bt.e.op(make(-1), vec![x, ins[1].id, ins[2].id])?,
                ));
            }
            // Batched γ/β: normalize with unit γ and zero β, then scale and shift.
            via_decomposition(bt, ins, shapes, |e, a| {
                let one = e.scalar_like(1.0, a[0]);
                let zero = e.scalar_like(0.0, a[0]);
                let n = e.op(make(-1), vec![a[0], one, zero])?;
                let g = e.cast(a[1], e.dtype(a[0]))?;
                let b = e.cast(a[2], e.dtype(a[0]))?;
                let y = e.mul(n, g)?;
                e.add(y, b)
            })
        }
        Op::SoftmaxCrossEntropy | Op::SoftmaxCrossEntropyWithLogits => {
            // Row-wise over the last axis; the operands' leading dims must match.
            let l = bt.batch(ins[0])?;
            let t = bt.batch(ins[1])?;
            Ok(BVal::batched(bt.e.op(node.op.clone(), vec![l, t])?))
        }
        Op::SplineActivation { .. } if !ins[1].batched => Ok(BVal::batched(
            bt.e.op(node.op.clone(), vec![ins[0].id, ins[1].id])?,
        )),
        Op::SplineActivation {
            num_basis,
            grid_min,
            grid_max,
        } => {
            // Batched coefficients: Σ_b coeff[c, b]·exp(−((x − g_b)/h)²) from primitives.
            let nb = *num_basis as usize;
            let (lo, hi) = (*grid_min as f64, *grid_max as f64);
            via_decomposition(bt, ins, shapes, |e, a| {
                let (x, coeff) = (a[0], a[1]);
                let dt = e.dtype(x);
                let h = (hi - lo) / (nb - 1) as f64;
                let grid: Vec<f64> = (0..nb).map(|b| lo + b as f64 * h).collect();
                let grid = e.constant(TensorData::from_f64_as(dt, &[nb], &grid));
                let r = e.rank(x);
                let xu = e.unsqueeze(x, r)?;
                let diff = e.sub(xu, grid)?;
                let hs = e.scalar(h, dt);
                let z = e.div(diff, hs)?;
                let z2 = e.square(z)?;
                let nz2 = e.neg(z2)?;
                let basis = e.act(Activation::Exp, nz2)?;
                let c = e.cast(coeff, dt)?;
                let w = e.mul(basis, c)?;
                e.sum(w, vec![r], false)
            })
        }
        Op::Rope { .. } => {
            // Fold the batch into x's batch axis; the tables are per position.
            if !ins[1].batched && !ins[2].batched {
                let x = bt.batch(ins[0])?;
                if let Some(xf) = bt.fold(x)? {
                    let y = bt.e.op(node.op.clone(), vec![xf, ins[1].id, ins[2].id])?;
                    return Ok(BVal::batched(bt.unfold(y)?));
                }
                // A dynamic batch axis: the rotation is the same for every head, so the
                // batch can join the heads instead.
                if let Some(xf) = fold_heads(bt, x)? {
                    let y = bt.e.op(node.op.clone(), vec![xf, ins[1].id, ins[2].id])?;
                    return Ok(BVal::batched(unfold_heads(bt, y)?));
                }
            }
            unroll(bt, &node.op, ins)
        }
        Op::Attention { mask_kind, .. } => attention(bt, node, ins, *mask_kind),
        // The packed result has no batch axis to fold into: one op per example.
        Op::AttentionVjp { .. } => unroll(bt, &node.op, ins),
        other => unreachable!("vmap nn::rule got {}", other.name()),
    }
}

/// A non-negative axis moves one to the right; a negative one counts from the end.
fn shift(axis: i32) -> i32 {
    if axis >= 0 { axis + 1 } else { axis }
}

/// Fold the batch into attention's own batch axis: `[B, b, S, …] → [B·b, S, …]` for
/// q, k, v, the custom mask (`[B, b, Sk]`) and a bias that varies per example.
fn attention(bt: &mut Batcher, node: &Node, ins: &[BVal], kind: MaskKind) -> IrResult<BVal> {
    let mut args = Vec::with_capacity(ins.len());
    for &v in &ins[..3] {
        let x = bt.batch(v)?;
        match bt.fold(x)? {
            Some(f) => args.push(f),
            None => return attention_over_heads(bt, node, ins),
        }
    }
    let b = bt.e.dims(args[0])[0].as_static().expect("folded") / bt.size;
    match kind {
        MaskKind::Custom => {
            let m = bt.batch(ins[3])?;
            match bt.fold(m)? {
                Some(f) => args.push(f),
                None => return unroll(bt, &node.op, ins),
            }
        }
        MaskKind::Bias => {
            let v = ins[3];
            let dims = bt.ex_dims(v);
            let shared = !v.batched && (dims.len() < 4 || dims[0] == Dim::Static(1));
            if shared {
                // Broadcasts over the folded batch axis as it is.
                args.push(v.id);
            } else {
                // [B, (b|1), h, sq, sk] with every per-example axis present.
                let mut x = bt.batch(v)?;
                for _ in dims.len()..4 {
                    x = bt.e.unsqueeze(x, 1)?;
                }
                if bt.e.dims(x)[1] != Dim::Static(b) {
                    let target = vec![-1, b as i64, -1, -1, -1];
                    x = bt.e.op(
                        Op::Expand {
                            target_shape: target,
                        },
                        vec![x],
                    )?;
                }
                match bt.fold(x)? {
                    Some(f) => args.push(f),
                    None => return unroll(bt, &node.op, ins),
                }
            }
        }
        _ => {}
    }
    let y = bt.e.op(node.op.clone(), args)?;
    Ok(BVal::batched(bt.unfold(y)?))
}

/// Attention whose own batch axis is dynamic: fold the vmap batch into the heads,
/// `[B, b, S, H, D] → [b, S, B·H, D]` (or `[B, b, S, H·D] → [b, S, B·H·D]`) with
/// `B·num_heads` heads. Grouped-query pairing survives (query head `β·H + i` reads kv
/// head `β·Hk + i/(H/Hk)`), and position masks do not look at heads. Key masks and
/// biases are per batch row, not per head: those cases are unrolled.
fn attention_over_heads(bt: &mut Batcher, node: &Node, ins: &[BVal]) -> IrResult<BVal> {
    let Op::Attention {
        num_heads,
        head_dim,
        v_head_dim,
        mask_kind,
        score_scale,
        attn_logit_softcap,
    } = node.op.clone()
    else {
        unreachable!("attention_over_heads got {}", node.op.name())
    };
    if matches!(mask_kind, MaskKind::Custom | MaskKind::Bias) {
        return unroll(bt, &node.op, ins);
    }
    let mut args = Vec::with_capacity(3);
    for &v in &ins[..3] {
        let x = bt.batch(v)?;
        match fold_heads(bt, x)? {
            Some(f) => args.push(f),
            None => return unroll(bt, &node.op, ins),
        }
    }
    let op = Op::Attention {
        num_heads: num_heads * bt.size,
        head_dim,
        v_head_dim,
        mask_kind,
        score_scale,
        attn_logit_softcap,
    };
    let y = bt.e.op(op, args)?;
    Ok(BVal::batched(unfold_heads(bt, y)?))
}

/// `[B, b, S, r, …] → [b, S, B·r, …]` (the batch joins axis `r`, the heads or the
/// hidden axis); `None` when `r` is dynamic or a reshape cannot express it.
fn fold_heads(bt: &mut Batcher, x: NodeId) -> IrResult<Option<NodeId>> {
    let t = bt.e.move_axis(x, 0, 2)?;
    let dims = bt.e.dims(t);
    let Some(r) = dims[3].as_static() else {
        return Ok(None);
    };
    let mut target = vec![dims[0], dims[1], Dim::Static(bt.size * r)];
    target.extend_from_slice(&dims[4..]);
    if !bt.e.can_reshape(t, &target) {
        return Ok(None);
    }
    Ok(Some(bt.e.reshape_to(t, &target)?))
}

/// Undo [`fold_heads`]: `[b, S, B·r, …] → [B, b, S, r, …]`.
fn unfold_heads(bt: &mut Batcher, y: NodeId) -> IrResult<NodeId> {
    let dims = bt.e.dims(y);
    let r = dims[2].as_static().expect("folded axes are static") / bt.size;
    let mut target = vec![dims[0], dims[1], Dim::Static(bt.size), Dim::Static(r)];
    target.extend_from_slice(&dims[3..]);
    let t = bt.e.reshape_to(y, &target)?;
    bt.e.move_axis(t, 2, 0)
}
