//! Attention as primitive ops, and its JVP through that decomposition.
//!
//! `softmax(mask(softcap(scale·Q·Kᵀ) + bias))·V` per batch and head, in the
//! `[B, H, S, D]` layout: q/k/v are brought there by a transpose (rank 4) or by
//! splitting the hidden axis into heads (rank 3), grouped-query k/v heads are
//! repeated with a gather, masks become a bool tensor that broadcasts against the
//! scores, and the result goes back to q's layout. A row with no allowed key is
//! zero, exactly as the oracle defines it.

use super::ForwardBuilder;
use super::emit::Emitter;
use crate::build::Build;
use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Dim, IrResult, MaskKind, Node, NodeId, Op, TensorData,
};

pub(super) fn rule(f: &mut ForwardBuilder, node: &Node) -> IrResult<Option<NodeId>> {
    let op = node.op.clone();
    let inputs = node.inputs.clone();
    f.through(|e| decompose(e, &op, &inputs))
}

/// Append the primitive-op form of `Op::Attention` applied to `inputs`; returns the
/// node holding the same value as the attention node would.
pub(crate) fn decompose(e: &mut Emitter, op: &Op, inputs: &[NodeId]) -> IrResult<NodeId> {
    let Op::Attention {
        num_heads,
        head_dim,
        v_head_dim,
        mask_kind,
        score_scale,
        attn_logit_softcap,
    } = op
    else {
        unreachable!("attention::decompose got {}", op.name())
    };
    let (h, d) = (*num_heads, *head_dim);
    let dv = v_head_dim.unwrap_or(d);
    let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
    let dt = e.dtype(q);
    let rank = e.rank(q);
    let hk = heads(e, k, d)?;
    let qh = to_bhsd(e, q, h, d)?;
    let mut kh = to_bhsd(e, k, hk, d)?;
    let mut vh = to_bhsd(e, v, hk, dv)?;
    if hk != h {
        // Grouped-query attention: query head i reads kv head i / (h / hk).
        let group = h / hk;
        let idx: Vec<i64> = (0..h).map(|i| (i / group) as i64).collect();
        let idx = e.constant(TensorData::from_i64(&[h], &idx));
        kh = e.op(Op::Gather { axis: 1 }, vec![kh, idx])?;
        vh = e.op(Op::Gather { axis: 1 }, vec![vh, idx])?;
    }
    let kt = e.swap_last_axes(kh)?;
    let s = e.matmul(qh, kt)?;
    let scale = score_scale.map_or(1.0 / (d as f64).sqrt(), |s| s as f64);
    let mut s = e.scale(s, scale)?;
    if let Some(c) = attn_logit_softcap {
        let c = *c as f64;
        let inner = e.scale(s, 1.0 / c)?;
        let th = e.act(Activation::Tanh, inner)?;
        s = e.scale(th, c)?;
    }
    if *mask_kind == MaskKind::Bias {
        let bias = e.cast(inputs[3], dt)?;
        s = e.add(s, bias)?;
    }
    let allowed = allowed_keys(e, *mask_kind, s, inputs.get(3).copied())?;
    let p = match allowed {
        None => e.op(Op::Softmax { axis: -1 }, vec![s])?,
        Some(m) => {
            let ninf = e.scalar(f64::NEG_INFINITY, dt);
            let masked = e.select(m, s, ninf)?;
            let p = e.op(Op::Softmax { axis: -1 }, vec![masked])?;
            // A row without any allowed key is NaN after the softmax; it must be zero.
            e.keep_where(m, p)?
        }
    };
    let o = e.matmul(p, vh)?;
    from_bhsd(e, o, rank, h, dv)
}

/// Heads of a k/v operand whose heads are `d` wide.
fn heads(e: &Emitter, x: NodeId, d: usize) -> IrResult<usize> {
    let s = e.shape(x);
    let n = if s.rank() == 4 {
        s.dim(2).as_static()
    } else {
        s.dim(2).as_static().map(|w| w / d)
    };
    n.ok_or_else(|| {
        e.err(format!(
            "attention operand {s} has a dynamic head axis; the head count must be static"
        ))
    })
}

/// `[B, S, H, D]` or `[B, S, H·D]` → `[B, H, S, D]`.
fn to_bhsd(e: &mut Emitter, x: NodeId, h: usize, d: usize) -> IrResult<NodeId> {
    if e.rank(x) == 3 {
        let dims = e.dims(x);
        let split = [dims[0], dims[1], Dim::Static(h), Dim::Static(d)];
        if e.can_reshape(x, &split) {
            let r = e.reshape_to(x, &split)?;
            return e.transpose(r, vec![0, 2, 1, 3]);
        }
        // Several dynamic axes: cut the hidden axis into heads one by one.
        let mut pieces = Vec::with_capacity(h);
        for i in 0..h {
            let n = e.op(
                Op::Narrow {
                    axis: 2,
                    start: i * d,
                    len: d,
                },
                vec![x],
            )?;
            pieces.push(e.unsqueeze(n, 1)?);
        }
        return e.concat(pieces, 1);
    }
    e.transpose(x, vec![0, 2, 1, 3])
}

/// `[B, H, S, Dv]` → q's layout: `[B, S, H, Dv]` (rank 4) or `[B, S, H·Dv]` (rank 3).
fn from_bhsd(e: &mut Emitter, o: NodeId, rank: usize, h: usize, dv: usize) -> IrResult<NodeId> {
    let t = e.transpose(o, vec![0, 2, 1, 3])?;
    if rank == 4 {
        return Ok(t);
    }
    let dims = e.dims(t);
    let merged = [dims[0], dims[1], Dim::Static(h * dv)];
    if e.can_reshape(t, &merged) {
        return e.reshape_to(t, &merged);
    }
    let mut pieces = Vec::with_capacity(h);
    for i in 0..h {
        pieces.push(e.take_index(o, 1, i)?);
    }
    e.concat(pieces, 2)
}

/// A bool tensor broadcasting against the scores `s` (`[B, H, Sq, Sk]`) that is true
/// where a key may be attended; `None` when every key may.
fn allowed_keys(
    e: &mut Emitter,
    kind: MaskKind,
    s: NodeId,
    extra: Option<NodeId>,
) -> IrResult<Option<NodeId>> {
    let window = match kind {
        MaskKind::None | MaskKind::Bias => return Ok(None),
        MaskKind::Custom => {
            // [B, Sk] → [B, 1, 1, Sk], attended where ≥ 0.5.
            let m = extra.expect("a custom mask operand");
            let m = e.cast(m, DType::F64)?;
            let ok = e.cmp_scalar(CmpOp::Ge, m, 0.5)?;
            let ok = e.unsqueeze(ok, 1)?;
            return Ok(Some(e.unsqueeze(ok, 1)?));
        }
        MaskKind::Causal => None,
        MaskKind::SlidingWindow(w) => Some(w),
    };
    causal_keys(e, s, window, DType::F32)
}

/// The causal (`ki ≤ qi`) or sliding-window (also `qi − ki ≤ w`) key mask for the
/// scores `s` (`[B, H, Sq, Sk]`): a `[Sq, Sk]` constant when both lengths are static,
/// else positions counted by exclusive cumulative sums of ones in dtype `pos_dt`.
/// Shared by the forward mode and the reverse mode (`autodiff::attention`).
pub(crate) fn causal_keys<B: Build>(
    e: &mut B,
    s: NodeId,
    window: Option<usize>,
    pos_dt: DType,
) -> IrResult<Option<NodeId>> {
    let dims = e.dims(s);
    let (sq, sk) = (dims[2], dims[3]);
    if let (Some(sq), Some(sk)) = (sq.as_static(), sk.as_static()) {
        let vals: Vec<bool> = (0..sq * sk)
            .map(|i| {
                let (qi, ki) = (i / sk, i % sk);
                ki <= qi && window.is_none_or(|w| qi - ki <= w)
            })
            .collect();
        return Ok(Some(e.constant(TensorData::from_bool(&[sq, sk], &vals))));
    }
    // Dynamic lengths: positions from cumulative sums of ones shaped like the scores.
    let ones = e.fill_like(1.0, s, pos_dt)?;
    let qpos = e.op(
        Op::Cumsum {
            axis: -2,
            exclusive: true,
        },
        vec![ones],
    )?;
    let kpos = e.op(
        Op::Cumsum {
            axis: -1,
            exclusive: true,
        },
        vec![ones],
    )?;
    let causal = e.cmp(CmpOp::Le, kpos, qpos)?;
    match window {
        None => Ok(Some(causal)),
        Some(w) => {
            let back = e.sub(qpos, kpos)?;
            let near = e.cmp_scalar(CmpOp::Le, back, w as f64)?;
            Ok(Some(e.bin(BinaryOp::BitAnd, causal, near)?))
        }
    }
}
