//! Attention's backward pass in primitive ops: the lowering of [`Op::AttentionVjp`]
//! for backends that do not keep it whole, and the reverse-mode rule's path when the
//! fused op does not apply (a bias that wants its gradient, dynamic sequence axes).
//!
//! The attention probabilities are not a graph value, so the backward pass
//! recomputes them in the head-major layout `[B, H, S, D]`:
//! `s = scale·q·kᵀ`, optionally `s = c·tanh(s/c)` (softcap) and `s += bias`, masked
//! keys set to −∞, `p = softmax(s)` (rows with no allowed key are zero, like the
//! oracle). Then with `G = gradient of the output`:
//! `dV = pᵀ·G`, `dp = G·Vᵀ`, `ds = p ⊙ (dp − Σ dp⊙p)` (= `dbias`),
//! through the softcap `ds ← ds·(1 − tanh²)`, `dQ = scale·ds·K`, `dK = scale·dsᵀ·Q`.
//! Grouped-query k/v heads are repeated for the forward and their gradients summed.

use crate::build::Build;
use crate::jvp::attention::causal_keys;
use rlx_ir::{Activation, CmpOp, DType, Dim, IrError, IrResult, MaskKind, NodeId, Op};

/// The attributes shared by `Attention` and `AttentionVjp` (rlx-ir's accessor).
pub(crate) type Attrs = rlx_ir::AttentionAttrs;

/// The attributes of `op`, which must be `Attention` or `AttentionVjp`.
pub(crate) fn attrs_of(op: &Op) -> Attrs {
    op.attention_attrs()
        .unwrap_or_else(|| unreachable!("attention attributes of {}", op.name()))
}

/// Which gradients to build.
#[derive(Clone, Copy)]
pub(crate) struct Want {
    pub(crate) q: bool,
    pub(crate) k: bool,
    pub(crate) v: bool,
    /// The additive bias (`MaskKind::Bias` only): `ds` at the scores' dims `[B, H, Sq, Sk]`.
    pub(crate) bias: bool,
}

/// The gradients asked for (in the layouts of q, k, v; the bias one unreduced).
#[derive(Default)]
pub(crate) struct Grads {
    pub(crate) q: Option<NodeId>,
    pub(crate) k: Option<NodeId>,
    pub(crate) v: Option<NodeId>,
    pub(crate) bias: Option<NodeId>,
}

/// Append the primitive backward pass of attention `a` over its operands `q, k, v` (+
/// `extra`, the mask or bias) for the output cotangent `g`.
pub(crate) fn grads<B: Build>(
    bw: &mut B,
    a: Attrs,
    (q, k, v, extra): (NodeId, NodeId, NodeId, Option<NodeId>),
    g: NodeId,
    want: Want,
) -> IrResult<Grads> {
    let mut out = Grads::default();
    let (wq, wk, wv) = (want.q, want.k, want.v);
    let wb = a.mask_kind == MaskKind::Bias && want.bias;
    if !(wq || wk || wv || wb) {
        return Ok(out);
    }
    let (h, d) = (a.num_heads, a.head_dim);
    let dv = a.v_head_dim.unwrap_or(d);
    let hk = kv_heads(bw, k, d)?;
    let group = h / hk;
    let qt = to_head_major(bw, q, h, d)?;
    let kt = kv_to_head_major(bw, k, hk, group, d)?;
    let vt = kv_to_head_major(bw, v, hk, group, dv)?;
    let scale = match a.score_scale {
        Some(s) => s as f64,
        None => 1.0 / (d as f64).sqrt(),
    };
    // Recompute the scores and probabilities.
    let ktt = bw.swap_last_axes(kt)?;
    let s0 = bw.matmul(qt, ktt)?;
    let mut s = bw.scale(s0, scale)?;
    let mut capped = None;
    if let Some(c) = a.attn_logit_softcap {
        let c = c as f64;
        let u = bw.scale(s, 1.0 / c)?;
        let th = bw.act(Activation::Tanh, u)?;
        s = bw.scale(th, c)?;
        capped = Some(th);
    }
    if a.mask_kind == MaskKind::Bias {
        s = bw.add(s, extra.expect("a bias operand"))?;
    }
    let allowed = allowed_keys(bw, a.mask_kind, s, extra)?;
    let p = match allowed {
        Some(m) => {
            let ninf = bw.scalar_like(f64::NEG_INFINITY, s);
            let masked = bw.select(m, s, ninf)?;
            let p0 = bw.op(Op::Softmax { axis: -1 }, vec![masked])?;
            // A row with no allowed key is NaN here; the op defines it as zeros.
            if matches!(a.mask_kind, MaskKind::Custom | MaskKind::SlidingWindow(_)) {
                bw.keep_where(m, p0)?
            } else {
                p0
            }
        }
        None => bw.op(Op::Softmax { axis: -1 }, vec![s])?,
    };
    let gt = to_head_major(bw, g, h, dv)?;
    if wv {
        let pt = bw.swap_last_axes(p)?;
        let dvt = bw.matmul(pt, gt)?;
        out.v = Some(kv_from_head_major(bw, dvt, v, hk, group)?);
    }
    if !(wq || wk || wb) {
        return Ok(out);
    }
    let vtt = bw.swap_last_axes(vt)?;
    let dp = bw.matmul(gt, vtt)?;
    let dpp = bw.mul(dp, p)?;
    let last = bw.shape(dp).rank() - 1;
    let row = bw.sum(dpp, vec![last], true)?;
    let centered = bw.sub(dp, row)?;
    let mut ds = bw.mul(p, centered)?;
    if wb {
        out.bias = Some(ds);
    }
    if let Some(th) = capped {
        let tt = bw.mul(th, th)?;
        let sech2 = bw.rsub_scalar(1.0, tt)?;
        ds = bw.mul(ds, sech2)?;
    }
    let ds = bw.scale(ds, scale)?;
    if wq {
        let dq = bw.matmul(ds, kt)?;
        out.q = Some(from_head_major(bw, dq, q)?);
    }
    if wk {
        let dst = bw.swap_last_axes(ds)?;
        let dk = bw.matmul(dst, qt)?;
        out.k = Some(kv_from_head_major(bw, dk, k, hk, group)?);
    }
    Ok(out)
}

/// Length of `x`'s gradient in the packed `AttentionVjp` result, or `None` when a dim
/// of `x` is dynamic.
pub(crate) fn packed_len<B: Build>(bw: &B, x: NodeId) -> Option<usize> {
    bw.dims(x).iter().map(|d| d.as_static()).product()
}

/// The primitive form of `AttentionVjp` over `inputs` (`q, k, v, (mask | bias), g`):
/// the packed `[|dq| + |dk| + |dv|]` result and its three flat pieces.
pub(crate) fn lower_vjp<B: Build>(
    bw: &mut B,
    op: &Op,
    inputs: &[NodeId],
) -> IrResult<(NodeId, [NodeId; 3])> {
    let a = attrs_of(op);
    let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
    let extra = a.has_extra_operand().then(|| inputs[3]);
    let g = inputs[inputs.len() - 1];
    let all = Want {
        q: true,
        k: true,
        v: true,
        bias: false,
    };
    let gr = grads(bw, a, (q, k, v, extra), g, all)?;
    let mut parts = [q; 3];
    for (i, (x, gx)) in [(q, gr.q), (k, gr.k), (v, gr.v)].into_iter().enumerate() {
        let n = packed_len(bw, x).ok_or_else(|| {
            IrError::new(
                "attention_vjp",
                format!(
                    "operand {} is {}: every axis must be static",
                    ["q", "k", "v"][i],
                    bw.shape(x)
                ),
            )
        })?;
        let gx = gx.expect("every gradient was asked for");
        parts[i] = bw.reshape_to(gx, &[Dim::Static(n)])?;
    }
    let packed = bw.op(Op::Concat { axis: 0 }, parts.to_vec())?;
    Ok((packed, parts))
}

/// The gradients of q, k, v in their own layouts from a packed `AttentionVjp` result.
pub(crate) fn unpack<B: Build>(
    bw: &mut B,
    packed: NodeId,
    q: NodeId,
    k: NodeId,
    v: NodeId,
) -> IrResult<[NodeId; 3]> {
    let mut start = 0;
    let mut out = [packed; 3];
    for (i, x) in [q, k, v].into_iter().enumerate() {
        let len = packed_len(bw, x).expect("AttentionVjp has static operands");
        let piece = bw.op(
            Op::Narrow {
                axis: 0,
                start,
                len,
            },
            vec![packed],
        )?;
        let dims = bw.dims(x);
        out[i] = bw.reshape_to(piece, &dims)?;
        start += len;
    }
    Ok(out)
}

/// Number of k/v heads of `k` (`[B, S, Hk, D]` or `[B, S, Hk·D]`).
fn kv_heads<B: Build>(bw: &B, k: NodeId, d: usize) -> IrResult<usize> {
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
fn to_head_major<B: Build>(bw: &mut B, t: NodeId, heads: usize, dd: usize) -> IrResult<NodeId> {
    let td = bw.dims(t);
    let t4 = if td.len() == 3 {
        bw.reshape_to(t, &[td[0], td[1], Dim::Static(heads), Dim::Static(dd)])?
    } else {
        t
    };
    bw.transpose(t4, vec![0, 2, 1, 3])
}

/// k/v → `[B, H, Sk, D]`, repeating each of the `hk` heads `group` times (GQA).
fn kv_to_head_major<B: Build>(
    bw: &mut B,
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
fn from_head_major<B: Build>(bw: &mut B, t: NodeId, like: NodeId) -> IrResult<NodeId> {
    let bshd = bw.transpose(t, vec![0, 2, 1, 3])?;
    let ld = bw.dims(like);
    bw.reshape_to(bshd, &ld)
}

/// `[B, H, Sk, D]` → `like`'s layout, summing the `group` query heads that shared
/// each k/v head.
fn kv_from_head_major<B: Build>(
    bw: &mut B,
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
fn allowed_keys<B: Build>(
    bw: &mut B,
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
