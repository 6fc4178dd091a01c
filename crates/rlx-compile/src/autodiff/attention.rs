//! VJP of [`Op::Attention`], built from primitives.
//!
//! The attention probabilities are not a graph value, so the backward pass
//! recomputes them in the head-major layout `[B, H, S, D]`:
//! `s = scale·q·kᵀ`, optionally `s = c·tanh(s/c)` (softcap) and `s += bias`, masked
//! keys set to −∞, `p = softmax(s)` (rows with no allowed key are zero, like the
//! oracle). Then with `G = gradient of the output`:
//! `dV = pᵀ·G`, `dp = G·Vᵀ`, `ds = p ⊙ (dp − Σ dp⊙p)` (= `dbias`),
//! through the softcap `ds ← ds·(1 − tanh²)`, `dQ = scale·ds·K`, `dK = scale·dsᵀ·Q`.
//! Grouped-query k/v heads are repeated for the forward and their gradients summed.

use super::builder::Bw;
use crate::build::Build;
use crate::jvp::attention::causal_keys;
use rlx_ir::{Activation, CmpOp, DType, Dim, IrError, IrResult, MaskKind, Node, NodeId, Op};

pub(super) fn vjp(bw: &mut Bw, node: &Node, g: NodeId) -> IrResult<()> {
    let Op::Attention {
        num_heads,
        head_dim,
        v_head_dim,
        mask_kind,
        score_scale,
        attn_logit_softcap,
    } = &node.op
    else {
        unreachable!("attention::vjp got {}", node.op.name())
    };
    let (q, k, v) = (node.inputs[0], node.inputs[1], node.inputs[2]);
    let (wq, wk, wv) = (bw.wants(node, 0), bw.wants(node, 1), bw.wants(node, 2));
    let wb = *mask_kind == MaskKind::Bias && bw.wants(node, 3);
    if !(wq || wk || wv || wb) {
        return Ok(());
    }
    let (h, d) = (*num_heads, *head_dim);
    let dv = v_head_dim.unwrap_or(d);
    let hk = kv_heads(bw, k, d)?;
    let group = h / hk;
    let qt = to_head_major(bw, q, h, d)?;
    let kt = kv_to_head_major(bw, k, hk, group, d)?;
    let vt = kv_to_head_major(bw, v, hk, group, dv)?;
    let scale = match score_scale {
        Some(s) => *s as f64,
        None => 1.0 / (d as f64).sqrt(),
    };
    // Recompute the scores and probabilities.
    let ktt = bw.t(kt)?;
    let s0 = bw.matmul(qt, ktt)?;
    let mut s = bw.scale(s0, scale)?;
    let mut capped = None;
    if let Some(c) = attn_logit_softcap {
        let c = *c as f64;
        let u = bw.scale(s, 1.0 / c)?;
        let th = bw.act(Activation::Tanh, u)?;
        s = bw.scale(th, c)?;
        capped = Some(th);
    }
    if *mask_kind == MaskKind::Bias {
        s = bw.add(s, node.inputs[3])?;
    }
    let allowed = allowed_keys(bw, *mask_kind, s, node.inputs.get(3).copied())?;
    let p = match allowed {
        Some(m) => {
            let ninf = bw.scalar_like(f64::NEG_INFINITY, s);
            let masked = bw.select(m, s, ninf)?;
            let p0 = bw.op(Op::Softmax { axis: -1 }, vec![masked])?;
            // A row with no allowed key is NaN here; the op defines it as zeros.
            if matches!(mask_kind, MaskKind::Custom | MaskKind::SlidingWindow(_)) {
                bw.keep_where(m, p0)?
            } else {
                p0
            }
        }
        None => bw.op(Op::Softmax { axis: -1 }, vec![s])?,
    };
    let gt = to_head_major(bw, g, h, dv)?;
    if wv {
        let pt = bw.t(p)?;
        let dvt = bw.matmul(pt, gt)?;
        let gv = kv_from_head_major(bw, dvt, v, hk, group)?;
        bw.give(v, gv)?;
    }
    if !(wq || wk || wb) {
        return Ok(());
    }
    let vtt = bw.t(vt)?;
    let dp = bw.matmul(gt, vtt)?;
    let dpp = bw.mul(dp, p)?;
    let last = bw.shape(dp).rank() - 1;
    let row = bw.sum(dpp, vec![last], true)?;
    let centered = bw.sub(dp, row)?;
    let mut ds = bw.mul(p, centered)?;
    if wb {
        bw.give(node.inputs[3], ds)?;
    }
    if let Some(th) = capped {
        let tt = bw.mul(th, th)?;
        let sech2 = bw.rsub_scalar(1.0, tt)?;
        ds = bw.mul(ds, sech2)?;
    }
    let ds = bw.scale(ds, scale)?;
    if wq {
        let dq = bw.matmul(ds, kt)?;
        let gq = from_head_major(bw, dq, q)?;
        bw.give(q, gq)?;
    }
    if wk {
        let dst = bw.t(ds)?;
        let dk = bw.matmul(dst, qt)?;
        let gk = kv_from_head_major(bw, dk, k, hk, group)?;
        bw.give(k, gk)?;
    }
    Ok(())
}

/// Number of k/v heads of `k` (`[B, S, Hk, D]` or `[B, S, Hk·D]`).
fn kv_heads(bw: &Bw, k: NodeId, d: usize) -> IrResult<usize> {
    let kd = bw.dims(k);
    let heads = if kd.len() == 4 {
        kd[2].as_static()
    } else {
        kd[2].as_static().map(|hid| hid / d)
    };
    heads.ok_or_else(|| {
        IrError::new(
            "attention",
            format!(
                "the backward pass needs a static head axis, but k is {}; make the hidden size static",
                bw.shape(k)
            ),
        )
    })
}

/// `[B, S, H, D]` or `[B, S, H·D]` → `[B, H, S, D]`.
fn to_head_major(bw: &mut Bw, t: NodeId, heads: usize, dd: usize) -> IrResult<NodeId> {
    let td = bw.dims(t);
    let t4 = if td.len() == 3 {
        bw.reshape_to(t, &[td[0], td[1], Dim::Static(heads), Dim::Static(dd)])?
    } else {
        t
    };
    bw.transpose(t4, vec![0, 2, 1, 3])
}

/// k/v → `[B, H, Sk, D]`, repeating each of the `hk` heads `group` times (GQA).
fn kv_to_head_major(
    bw: &mut Bw,
    t: NodeId,
    hk: usize,
    group: usize,
    dd: usize,
) -> IrResult<NodeId> {
    if group == 1 {
        return to_head_major(bw, t, hk, dd);
    }
    let td = bw.dims(t);
    let split = bw.reshape_to(
        t,
        &[
            td[0],
            td[1],
            Dim::Static(hk),
            Dim::Static(1),
            Dim::Static(dd),
        ],
    )?;
    let keep = |d: Dim| d.as_static().map_or(-1, |n| n as i64);
    let target = vec![keep(td[0]), keep(td[1]), hk as i64, group as i64, dd as i64];
    let rep = bw.op(
        Op::Expand {
            target_shape: target,
        },
        vec![split],
    )?;
    let full = bw.reshape_to(
        rep,
        &[td[0], td[1], Dim::Static(hk * group), Dim::Static(dd)],
    )?;
    bw.transpose(full, vec![0, 2, 1, 3])
}

/// `[B, H, S, D]` → the layout (and dims) of `like`.
fn from_head_major(bw: &mut Bw, t: NodeId, like: NodeId) -> IrResult<NodeId> {
    let bshd = bw.transpose(t, vec![0, 2, 1, 3])?;
    let ld = bw.dims(like);
    bw.reshape_to(bshd, &ld)
}

/// `[B, H, Sk, D]` → `like`'s layout, summing the `group` query heads that shared
/// each k/v head.
fn kv_from_head_major(
    bw: &mut Bw,
    t: NodeId,
    like: NodeId,
    hk: usize,
    group: usize,
) -> IrResult<NodeId> {
    if group == 1 {
        return from_head_major(bw, t, like);
    }
    let bshd = bw.transpose(t, vec![0, 2, 1, 3])?;
    let sd = bw.dims(bshd);
    let split = bw.reshape_to(
        bshd,
        &[sd[0], sd[1], Dim::Static(hk), Dim::Static(group), sd[3]],
    )?;
    let summed = bw.sum(split, vec![3], false)?;
    let ld = bw.dims(like);
    bw.reshape_to(summed, &ld)
}

/// Which keys each query may attend, as a bool tensor broadcastable to the scores
/// `[B, H, Sq, Sk]`; `None` when every key is allowed.
fn allowed_keys(
    bw: &mut Bw,
    kind: MaskKind,
    scores: NodeId,
    extra: Option<NodeId>,
) -> IrResult<Option<NodeId>> {
    let window = match kind {
        MaskKind::None | MaskKind::Bias => return Ok(None),
        MaskKind::Custom => {
            // mask[b, ki] ≥ 0.5 attends; bool masks read as 0/1.
            let m = extra.expect("a custom mask operand");
            let ok = if bw.dtype(m) == DType::Bool {
                m
            } else {
                let half = bw.scalar(0.5, DType::F64);
                bw.cmp(CmpOp::Ge, m, half)?
            };
            let md = bw.dims(m);
            let ok4 = bw.reshape_to(ok, &[md[0], Dim::Static(1), Dim::Static(1), md[1]])?;
            return Ok(Some(ok4));
        }
        MaskKind::Causal => None,
        MaskKind::SlidingWindow(w) => Some(w),
    };
    let dt = bw.dtype(scores);
    causal_keys(bw, scores, window, dt)
}
