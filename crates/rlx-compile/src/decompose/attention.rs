//! Attention in primitive ops, built once for every transform that needs it, from one
//! head-major forward pass ([`forward`]):
//!
//! - [`output`]: attention's value, the form forward mode differentiates (through
//!   its primitive ops: every tangent rule it meets is a shared one);
//! - [`grads`]: the backward pass: reverse mode's rule where the fused
//!   [`Op::AttentionVjp`] does not apply (a bias that wants its gradient, dynamic
//!   axes), and [`lower_vjp`], the lowering of that fused op for backends that do not
//!   keep it whole (which forward mode differentiates for second derivatives).
//!
//! In the layout `[B, H, S, D]` (q/k/v brought there by a transpose, rank 4, or by
//! splitting the hidden axis into heads, rank 3; grouped-query k/v heads repeated by a
//! gather): `s = scale·q·kᵀ`, optionally `s = c·tanh(s/c)` (softcap) and `s += bias`,
//! masked keys set to −∞, `p = softmax(s)` (a row with no allowed key is zero, as the
//! oracle defines it), `o = p·v` in q's layout. With `G` the output's cotangent:
//! `dV = pᵀ·G`, `dp = G·Vᵀ`, `ds = p ⊙ (dp − Σ dp⊙p)` (softmax's Jacobian; `dbias`),
//! through the softcap `ds ← ds·(1 − tanh²)`, `dQ = scale·ds·K`, `dK = scale·dsᵀ·Q`;
//! the gradients of a k/v head shared by several query heads are summed.
//!
//! With several dynamic axes a reshape cannot split or merge the head axis (the IR's
//! reshape infers one `-1`), so the heads are then cut and joined by narrows and
//! concats instead.

use crate::build::Build;
use crate::derivatives::nn::softmax_jacobian;
use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Dim, IrError, IrResult, MaskKind, NodeId, Op, TensorData,
};

/// The attributes shared by `Attention` and `AttentionVjp` (rlx-ir's accessor).
pub(crate) type Attrs = rlx_ir::AttentionAttrs;

/// The attributes of `op`, which must be `Attention` or `AttentionVjp`.
pub(crate) fn attrs_of(op: &Op) -> Attrs {
    op.attention_attrs()
        .unwrap_or_else(|| unreachable!("attention attributes of {}", op.name()))
}

/// Attention's operands: q, k, v and the mask or bias (when the mask kind takes one).
pub(crate) type Operands = (NodeId, NodeId, NodeId, Option<NodeId>);

/// The operands among the `inputs` of an `Attention` or `AttentionVjp` node.
pub(crate) fn operands(a: Attrs, inputs: &[NodeId]) -> Operands {
    let extra = a.has_extra_operand().then(|| inputs[3]);
    (inputs[0], inputs[1], inputs[2], extra)
}

/// Attention's forward pass in the head-major layout, up to the probabilities.
struct Forward {
    /// q, k and v as `[B, H, S, D]`, each k/v head repeated for the query heads it serves.
    q: NodeId,
    k: NodeId,
    v: NodeId,
    /// The score scale.
    scale: f64,
    /// The softcap's `tanh(s/c)`, if any (its derivative is built from it).
    tanh: Option<NodeId>,
    /// The probabilities `[B, H, Sq, Sk]`.
    p: NodeId,
    /// Query heads and k/v heads.
    h: usize,
    hk: usize,
}

/// Append attention's scores and probabilities for the operands `ops`.
fn forward<B: Build>(b: &mut B, a: Attrs, ops: Operands) -> IrResult<Forward> {
    let (q, k, v, extra) = ops;
    let (h, d) = (a.num_heads, a.head_dim);
    let dv = a.v_head_dim.unwrap_or(d);
    let hk = kv_heads(b, k, d)?;
    let qh = to_head_major(b, q, h, d)?;
    let mut kh = to_head_major(b, k, hk, d)?;
    let mut vh = to_head_major(b, v, hk, dv)?;
    if hk != h {
        // Grouped-query attention: query head i reads k/v head i / (h / hk).
        let group = h / hk;
        let idx: Vec<i64> = (0..h).map(|i| (i / group) as i64).collect();
        let idx = b.constant(TensorData::from_i64(&[h], &idx));
        kh = b.op(Op::Gather { axis: 1 }, vec![kh, idx])?;
        vh = b.op(Op::Gather { axis: 1 }, vec![vh, idx])?;
    }
    let kt = b.swap_last_axes(kh)?;
    let s0 = b.matmul(qh, kt)?;
    let scale = a.score_scale.map_or(1.0 / (d as f64).sqrt(), |s| s as f64);
    let mut s = b.scale(s0, scale)?;
    let mut tanh = None;
    if let Some(c) = a.attn_logit_softcap {
        let c = c as f64;
        let u = b.scale(s, 1.0 / c)?;
        let th = b.act(Activation::Tanh, u)?;
        s = b.scale(th, c)?;
        tanh = Some(th);
    }
    if a.mask_kind == MaskKind::Bias {
        let dt = b.dtype(s);
        let bias = b.cast(extra.expect("a bias operand"), dt)?;
        s = b.add(s, bias)?;
    }
    let p = match allowed_keys(b, a.mask_kind, s, extra)? {
        None => b.op(Op::Softmax { axis: -1 }, vec![s])?,
        Some(m) => {
            let ninf = b.scalar_like(f64::NEG_INFINITY, s);
            let masked = b.select(m, s, ninf)?;
            let p = b.op(Op::Softmax { axis: -1 }, vec![masked])?;
            // A row with no allowed key is NaN after the softmax; the op defines it as
            // zeros. A causal row always allows its first key.
            if a.mask_kind == MaskKind::Causal {
                p
            } else {
                b.keep_where(m, p)?
            }
        }
    };
    Ok(Forward {
        q: qh,
        k: kh,
        v: vh,
        scale,
        tanh,
        p,
        h,
        hk,
    })
}

/// Append attention's value for the operands `ops`: `p·v` in q's layout (v's head
/// width); the primitive form forward mode differentiates.
pub(crate) fn output<B: Build>(b: &mut B, a: Attrs, ops: Operands) -> IrResult<NodeId> {
    let f = forward(b, a, ops)?;
    let o = b.matmul(f.p, f.v)?;
    let rank = b.rank(ops.0);
    from_head_major(b, o, rank, f.h, a.v_head_dim.unwrap_or(a.head_dim))
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

/// Append the primitive backward pass of attention `a` over the operands `ops` for the
/// output cotangent `g`.
pub(crate) fn grads<B: Build>(
    bw: &mut B,
    a: Attrs,
    ops: Operands,
    g: NodeId,
    want: Want,
) -> IrResult<Grads> {
    let mut out = Grads::default();
    let wb = a.mask_kind == MaskKind::Bias && want.bias;
    if !(want.q || want.k || want.v || wb) {
        return Ok(out);
    }
    let (q, k, v, _) = ops;
    let (d, dv) = (a.head_dim, a.v_head_dim.unwrap_or(a.head_dim));
    let f = forward(bw, a, ops)?;
    let gt = to_head_major(bw, g, f.h, dv)?;
    if want.v {
        let pt = bw.swap_last_axes(f.p)?;
        let dvt = bw.matmul(pt, gt)?;
        let rank = bw.rank(v);
        out.v = Some(kv_from_head_major(bw, &f, dvt, rank, dv)?);
    }
    if !(want.q || want.k || wb) {
        return Ok(out);
    }
    let vt = bw.swap_last_axes(f.v)?;
    let dp = bw.matmul(gt, vt)?;
    let mut ds = softmax_jacobian(bw, f.p, dp, 3)?;
    if wb {
        out.bias = Some(ds);
    }
    if let Some(th) = f.tanh {
        let tt = bw.mul(th, th)?;
        let sech2 = bw.rsub_scalar(1.0, tt)?;
        ds = bw.mul(ds, sech2)?;
    }
    let ds = bw.scale(ds, f.scale)?;
    if want.q {
        let dq = bw.matmul(ds, f.k)?;
        let rank = bw.rank(q);
        out.q = Some(from_head_major(bw, dq, rank, f.h, d)?);
    }
    if want.k {
        let dst = bw.swap_last_axes(ds)?;
        let dk = bw.matmul(dst, f.q)?;
        let rank = bw.rank(k);
        out.k = Some(kv_from_head_major(bw, &f, dk, rank, d)?);
    }
    Ok(out)
}

/// Length of `x`'s gradient in the packed `AttentionVjp` result, or `None` when a dim
/// of `x` is dynamic.
pub(crate) fn packed_len<B: Build>(bw: &B, x: NodeId) -> Option<usize> {
    bw.dims(x).iter().map(|d| d.as_static()).product()
}

/// The primitive form of `AttentionVjp` over `inputs` (`q, k, v, (mask | bias), g`):
/// the packed `[|dq| + |dk| + |dv|]` result and its three flat pieces, in the operands'
/// dtype.
pub(crate) fn lower_vjp<B: Build>(
    bw: &mut B,
    op: &Op,
    inputs: &[NodeId],
) -> IrResult<(NodeId, [NodeId; 3])> {
    lower_vjp_with(bw, op, inputs, false)
}

/// [`lower_vjp`], optionally computed in f32. With `widen`, q,
/// k, v, a bias and g are cast to f32 first and the gradients cast back: every
/// intermediate (probabilities, `dp`, the softmax Jacobian's row sums, `ds`) is then
/// kept in f32 and each gradient is rounded to the operands' dtype once, as the oracle
/// rounds its f64 result, instead of rounding `p`, `dp` and `ds` to f16/bf16 on the way
/// (`ds = p ⊙ (dp − Σ dp⊙p)` cancels).
pub(crate) fn lower_vjp_with<B: Build>(
    bw: &mut B,
    op: &Op,
    inputs: &[NodeId],
    widen: bool,
) -> IrResult<(NodeId, [NodeId; 3])> {
    let a = attrs_of(op);
    let dt = bw.dtype(inputs[0]);
    let mut wide = inputs.to_vec();
    if widen {
        for (i, x) in wide.iter_mut().enumerate() {
            // A custom mask keeps its dtype (it is compared, not computed with).
            let is_mask = i == 3 && a.mask_kind == MaskKind::Custom;
            if !is_mask && bw.dtype(*x) != DType::F32 {
                *x = bw.cast(*x, DType::F32)?;
            }
        }
    }
    let inputs = &wide[..];
    let ops = operands(a, inputs);
    let g = inputs[inputs.len() - 1];
    let all = Want {
        q: true,
        k: true,
        v: true,
        bias: false,
    };
    let gr = grads(bw, a, ops, g, all)?;
    let (q, k, v, _) = ops;
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
        let mut gx = gx.expect("every gradient was asked for");
        if widen && dt != DType::F32 {
            gx = bw.cast(gx, dt)?;
        }
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
fn kv_heads<B: Build>(b: &B, k: NodeId, d: usize) -> IrResult<usize> {
    let s = b.shape(k);
    let hid = s.dim(2).as_static();
    let heads = if s.rank() == 4 {
        hid
    } else {
        hid.map(|w| w / d)
    };
    heads.ok_or_else(|| {
        IrError::new(
            "attention",
            format!(
                "the primitive form of attention needs a static head axis, but k is {s}; make the hidden size static"
            ),
        )
    })
}

/// Whether a reshape between `dims` and a head split or merge of them can be built:
/// the IR's reshape infers at most one dynamic axis (its `-1`).
fn one_dynamic(dims: &[Dim]) -> bool {
    dims.iter().filter(|d| !d.is_static()).count() <= 1
}

/// `[B, S, H, X]` or `[B, S, H·X]` → `[B, H, S, X]`.
fn to_head_major<B: Build>(b: &mut B, x: NodeId, h: usize, width: usize) -> IrResult<NodeId> {
    let dims = b.dims(x);
    let bshx = if dims.len() == 4 {
        x
    } else if one_dynamic(&dims) {
        b.reshape_to(x, &[dims[0], dims[1], Dim::Static(h), Dim::Static(width)])?
    } else {
        // Several dynamic axes: cut the hidden axis into heads one by one.
        let mut pieces = Vec::with_capacity(h);
        for i in 0..h {
            let narrow = Op::Narrow {
                axis: 2,
                start: i * width,
                len: width,
            };
            let n = b.op(narrow, vec![x])?;
            pieces.push(b.unsqueeze(n, 1)?);
        }
        return b.concat(pieces, 1);
    };
    b.transpose(bshx, vec![0, 2, 1, 3])
}

/// `[B, H, S, X]` → `[B, S, H, X]` (`rank` 4) or `[B, S, H·X]` (`rank` 3).
fn from_head_major<B: Build>(
    b: &mut B,
    t: NodeId,
    rank: usize,
    h: usize,
    width: usize,
) -> IrResult<NodeId> {
    let bshx = b.transpose(t, vec![0, 2, 1, 3])?;
    let dims = b.dims(bshx);
    if rank == 4 {
        return Ok(bshx);
    }
    if one_dynamic(&dims) {
        return b.reshape_to(bshx, &[dims[0], dims[1], Dim::Static(h * width)]);
    }
    // Several dynamic axes: join the heads one by one along the hidden axis (a sum
    // over the one-element head axis drops it exactly).
    let mut pieces = Vec::with_capacity(h);
    for i in 0..h {
        let narrow = Op::Narrow {
            axis: 1,
            start: i,
            len: 1,
        };
        let n = b.op(narrow, vec![t])?;
        pieces.push(b.sum(n, vec![1], false)?);
    }
    b.concat(pieces, 2)
}

/// The gradient of a k/v operand (of rank `rank`, heads `width` wide) from its
/// head-major gradient `t` (`[B, H, Sk, X]`, one head per query head): the query heads
/// that shared a k/v head (the transpose of [`forward`]'s gather) are summed.
fn kv_from_head_major<B: Build>(
    b: &mut B,
    f: &Forward,
    t: NodeId,
    rank: usize,
    width: usize,
) -> IrResult<NodeId> {
    let (hk, group) = (f.hk, f.h / f.hk);
    let dims = b.dims(t);
    let summed = if group == 1 {
        t
    } else if one_dynamic(&dims) {
        let split = [
            dims[0],
            Dim::Static(hk),
            Dim::Static(group),
            dims[2],
            dims[3],
        ];
        let split = b.reshape_to(t, &split)?;
        b.sum(split, vec![2], false)?
    } else {
        let mut pieces = Vec::with_capacity(hk);
        for m in 0..hk {
            let narrow = Op::Narrow {
                axis: 1,
                start: m * group,
                len: group,
            };
            let n = b.op(narrow, vec![t])?;
            pieces.push(b.sum(n, vec![1], true)?);
        }
        b.concat(pieces, 1)?
    };
    from_head_major(b, summed, rank, hk, width)
}

/// Which keys each query may attend, as a bool tensor broadcastable to the scores `s`
/// (`[B, H, Sq, Sk]`); `None` when every key may.
fn allowed_keys<B: Build>(
    b: &mut B,
    kind: MaskKind,
    s: NodeId,
    extra: Option<NodeId>,
) -> IrResult<Option<NodeId>> {
    let window = match kind {
        MaskKind::None | MaskKind::Bias => return Ok(None),
        MaskKind::Custom => {
            // mask[b, ki] ≥ 0.5 attends (a bool mask reads as 0/1): [B, Sk] → [B, 1, 1, Sk].
            let m = extra.expect("a custom mask operand");
            let ok = if b.dtype(m) == DType::Bool {
                m
            } else {
                let m = b.cast(m, DType::F64)?;
                b.cmp_scalar(CmpOp::Ge, m, 0.5)?
            };
            let ok = b.unsqueeze(ok, 1)?;
            return Ok(Some(b.unsqueeze(ok, 1)?));
        }
        MaskKind::Causal => None,
        MaskKind::SlidingWindow(w) => Some(w),
    };
    causal_keys(b, s, window)
}

/// The causal (`ki ≤ qi`) or sliding-window (also `qi − ki ≤ w`) key mask for the
/// scores `s` (`[B, H, Sq, Sk]`): a `[Sq, Sk]` constant when both lengths are static,
/// else positions counted by exclusive cumulative sums of ones (in f32: exact up to
/// 2²⁴ positions, whatever the scores' dtype).
fn causal_keys<B: Build>(b: &mut B, s: NodeId, window: Option<usize>) -> IrResult<Option<NodeId>> {
    let dims = b.dims(s);
    if let (Some(sq), Some(sk)) = (dims[2].as_static(), dims[3].as_static()) {
        let vals: Vec<bool> = (0..sq * sk)
            .map(|i| {
                let (qi, ki) = (i / sk, i % sk);
                ki <= qi && window.is_none_or(|w| qi - ki <= w)
            })
            .collect();
        return Ok(Some(b.constant(TensorData::from_bool(&[sq, sk], &vals))));
    }
    let ones = b.fill_like(1.0, s, DType::F32)?;
    let cumsum = |axis| Op::Cumsum {
        axis,
        exclusive: true,
    };
    let qpos = b.op(cumsum(-2), vec![ones])?;
    let kpos = b.op(cumsum(-1), vec![ones])?;
    let causal = b.cmp(CmpOp::Le, kpos, qpos)?;
    let Some(w) = window else {
        return Ok(Some(causal));
    };
    let back = b.sub(qpos, kpos)?;
    let near = b.cmp_scalar(CmpOp::Le, back, w as f64)?;
    Ok(Some(b.bin(BinaryOp::BitAnd, causal, near)?))
}
