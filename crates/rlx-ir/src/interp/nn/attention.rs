//! Oracle semantics of [`Op::Attention`].
//!
//! Per batch `b`, query head `h` (using kv head `h / (H/Hk)`, grouped-query) and query
//! position `qi`:
//! 1. `s[ki] = scale · Σ_d q[b,qi,h,d]·k[b,ki,kh,d]` (`scale` defaults to `1/√head_dim`);
//! 2. with a softcap `c`: `s = c·tanh(s/c)`;
//! 3. with `MaskKind::Bias`: `s += bias[b,h,qi,ki]` (NumPy broadcasting: a bias of lower
//!    rank is right-aligned to `[B, H, Sq, Sk]`, and its size-1 axes repeat);
//! 4. the mask decides which keys are allowed: `Causal` `ki ≤ qi`, `SlidingWindow(w)`
//!    `qi − w ≤ ki ≤ qi`, `Custom` `mask[b, ki] ≥ 0.5`;
//! 5. `p` = softmax of `s` over the allowed keys (max-shifted, as [`super::softmax_row`]);
//! 6. `out[b,qi,h,:] = Σ_ki p[ki]·v[b,ki,kh,:]`; a row with no allowed key is all zeros.
//!
//! [`Op::AttentionVjp`] ([`eval_vjp`]) recomputes the same probabilities and returns
//! the gradients of q, k and v packed one after the other.
//!
//! Layouts `[B, S, H, D]` and `[B, S, H·D]` are the same bytes, so one flat indexing
//! `((b·S + s)·H + h)·D + d` serves both; the output keeps q's layout with `Dv` per head.

use super::{arity, err, softmax_row};
use crate::{IrResult, MaskKind, Op, TensorData};

/// `(batch, seq, heads)` of a q/k/v operand whose heads are `d` wide.
fn bsh(op: &Op, t: &TensorData, d: usize, what: &str) -> IrResult<(usize, usize, usize)> {
    match t.dims[..] {
        [b, s, h, dd] if dd == d => Ok((b, s, h)),
        [b, s, hidden] if d > 0 && hidden % d == 0 => Ok((b, s, hidden / d)),
        _ => Err(err(
            op,
            format!(
                "{what} has dims {:?}; it must be [B, S, H, {d}] or [B, S, H·{d}]",
                t.dims
            ),
        )),
    }
}

/// The checked operands and attributes of an attention (or its VJP) node.
struct Setup {
    b: usize,
    sq: usize,
    sk: usize,
    h: usize,
    hk: usize,
    d: usize,
    dv: usize,
    scale: f64,
    softcap: Option<f64>,
    mask: MaskKind,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    extra: Option<Vec<f64>>,
    bias_strides: Option<[usize; 4]>,
}

/// The attributes of `Attention` and `AttentionVjp` (the same fields).
type Attrs = (
    usize,
    usize,
    Option<usize>,
    MaskKind,
    Option<f32>,
    Option<f32>,
);

fn attrs(op: &Op) -> Attrs {
    let a = op
        .attention_attrs()
        .unwrap_or_else(|| unreachable!("attention attributes of {}", op.name()));
    (
        a.num_heads,
        a.head_dim,
        a.v_head_dim,
        a.mask_kind,
        a.score_scale,
        a.attn_logit_softcap,
    )
}

/// Check the forward operands `inputs` (`q, k, v` and the mask or bias) of `op`.
fn setup(op: &Op, inputs: &[&TensorData]) -> IrResult<Setup> {
    let (num_heads, head_dim, v_head_dim, mask_kind, score_scale, attn_logit_softcap) = attrs(op);
    let extra = matches!(mask_kind, MaskKind::Custom | MaskKind::Bias);
    let (h, d) = (num_heads, head_dim);
    let dv = v_head_dim.unwrap_or(d);
    let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
    let (b, sq, qh) = bsh(op, q, d, "q")?;
    let (kb, sk, hk) = bsh(op, k, d, "k")?;
    let (vb, vs, vh) = bsh(op, v, dv, "v")?;
    if qh != h || hk != vh || hk == 0 || h % hk != 0 {
        return Err(err(
            op,
            format!(
                "q has {qh} heads (num_heads {h}), k {hk} and v {vh}: q must have num_heads heads and k/v an equal head count dividing it"
            ),
        ));
    }
    if kb != b
        || vb != b
        || vs != sk
        || q.dims.len() != k.dims.len()
        || k.dims.len() != v.dims.len()
    {
        return Err(err(
            op,
            format!(
                "q {:?}, k {:?}, v {:?} must share the layout and batch size, and k/v the sequence length",
                q.dims, k.dims, v.dims
            ),
        ));
    }
    let scale = match score_scale {
        Some(s) => s as f64,
        None => 1.0 / (d as f64).sqrt(),
    };
    let softcap = match attn_logit_softcap {
        None => None,
        Some(c) if c.is_finite() && c > 0.0 => Some(c as f64),
        Some(c) => {
            return Err(err(
                op,
                format!("attn_logit_softcap must be finite and > 0, got {c}"),
            ));
        }
    };
    // The extra operand: a [B, Sk] key mask or a bias broadcastable to [B, H, Sq, Sk].
    let extra_vals = if extra {
        Some(inputs[3].to_f64_vec())
    } else {
        None
    };
    let bias_strides = if mask_kind == MaskKind::Bias {
        Some(bias_strides(op, &inputs[3].dims, [b, h, sq, sk])?)
    } else {
        None
    };
    if mask_kind == MaskKind::Custom && inputs[3].dims != [b, sk] {
        return Err(err(
            op,
            format!(
                "custom mask must be [batch, key_len] = [{b}, {sk}], got {:?}",
                inputs[3].dims
            ),
        ));
    }
    Ok(Setup {
        b,
        sq,
        sk,
        h,
        hk,
        d,
        dv,
        scale,
        softcap,
        mask: mask_kind,
        q: q.to_f64_vec(),
        k: k.to_f64_vec(),
        v: v.to_f64_vec(),
        extra: extra_vals,
        bias_strides,
    })
}

/// The probabilities of query `qi` of batch `bi`, head `hi` over the keys it may
/// attend: `(key, p, tanh(raw/c))` (the tanh is 0 without a softcap). Steps 1–5 of
/// the module doc.
fn probs(st: &Setup, bi: usize, hi: usize, qi: usize) -> Vec<(usize, f64, f64)> {
    let kh = hi / (st.h / st.hk);
    let (d, sk) = (st.d, st.sk);
    let q_at = ((bi * st.sq + qi) * st.h + hi) * d;
    let mut scores = Vec::new();
    let mut keys = Vec::new();
    for ki in 0..sk {
        let allowed = match st.mask {
            MaskKind::None | MaskKind::Bias => true,
            MaskKind::Causal => ki <= qi,
            MaskKind::SlidingWindow(w) => ki <= qi && qi - ki <= w,
            MaskKind::Custom => st.extra.as_ref().unwrap()[bi * sk + ki] >= 0.5,
        };
        if !allowed {
            continue;
        }
        let k_at = ((bi * sk + ki) * st.hk + kh) * d;
        let dot: f64 = (0..d).map(|j| st.q[q_at + j] * st.k[k_at + j]).sum();
        let mut s = st.scale * dot;
        let mut th = 0.0;
        if let Some(c) = st.softcap {
            th = (s / c).tanh();
            s = c * th;
        }
        if let Some(bs) = &st.bias_strides {
            let at = bi * bs[0] + hi * bs[1] + qi * bs[2] + ki * bs[3];
            s += st.extra.as_ref().unwrap()[at];
        }
        scores.push(s);
        keys.push((ki, th));
    }
    // No allowed key: the row stays empty (zero output) rather than 0/0.
    let p = softmax_row(&scores);
    keys.iter()
        .zip(p)
        .map(|(&(ki, th), pk)| (ki, pk, th))
        .collect()
}

pub(super) fn eval(op: &Op, inputs: &[&TensorData]) -> IrResult<Vec<f64>> {
    let (.., mask_kind, _, _) = attrs(op);
    let extra = matches!(mask_kind, MaskKind::Custom | MaskKind::Bias);
    arity(op, inputs, if extra { 4 } else { 3 })?;
    let st = setup(op, inputs)?;
    let (b, sq, sk, h, hk, dv) = (st.b, st.sq, st.sk, st.h, st.hk, st.dv);
    let mut out = vec![0.0; b * sq * h * dv];
    for bi in 0..b {
        for hi in 0..h {
            let kh = hi / (h / hk);
            for qi in 0..sq {
                let o_at = ((bi * sq + qi) * h + hi) * dv;
                for (ki, pk, _) in probs(&st, bi, hi, qi) {
                    let v_at = ((bi * sk + ki) * hk + kh) * dv;
                    for j in 0..dv {
                        out[o_at + j] += pk * st.v[v_at + j];
                    }
                }
            }
        }
    }
    Ok(out)
}

/// [`Op::AttentionVjp`]: with `p` the probabilities of a query row (as the forward)
/// and `g` the output cotangent,
/// `dv[k] += p[k]·g`, `dp[k] = g·v[k]`, `ds[k] = p[k]·(dp[k] − Σ_j p[j]·dp[j])`,
/// through a softcap `ds[k] ·= 1 − tanh²(raw[k]/c)`, then
/// `dq += scale·ds[k]·k[k]` and `dk[k] += scale·ds[k]·q`. Grouped-query k/v heads sum
/// the contributions of their query heads. Packed as all of dq, then dk, then dv.
pub(super) fn eval_vjp(op: &Op, inputs: &[&TensorData]) -> IrResult<Vec<f64>> {
    let (.., mask_kind, _, _) = attrs(op);
    let extra = matches!(mask_kind, MaskKind::Custom | MaskKind::Bias);
    arity(op, inputs, if extra { 5 } else { 4 })?;
    let st = setup(op, inputs)?;
    let (b, sq, sk, h, hk, d, dv) = (st.b, st.sq, st.sk, st.h, st.hk, st.d, st.dv);
    let g = inputs[inputs.len() - 1];
    if g.dims.iter().product::<usize>() != b * sq * h * dv || g.dims[..2] != [b, sq] {
        return Err(err(
            op,
            format!(
                "the cotangent g has dims {:?}; it must have the attention output's dims (q's layout with {dv} per head)",
                g.dims
            ),
        ));
    }
    let gv = g.to_f64_vec();
    // dq at q's flat index, dk after all of dq, dv after all of dk.
    let (nq, nk) = (b * sq * h * d, b * sk * hk * d);
    let mut out = vec![0.0; nq + nk + b * sk * hk * dv];
    for bi in 0..b {
        for hi in 0..h {
            let kh = hi / (h / hk);
            for qi in 0..sq {
                let row_p = probs(&st, bi, hi, qi);
                let g_at = ((bi * sq + qi) * h + hi) * dv;
                let q_at = ((bi * sq + qi) * h + hi) * d;
                let dp: Vec<f64> = row_p
                    .iter()
                    .map(|&(ki, _, _)| {
                        let v_at = ((bi * sk + ki) * hk + kh) * dv;
                        (0..dv).map(|j| gv[g_at + j] * st.v[v_at + j]).sum()
                    })
                    .collect();
                let centre: f64 = row_p.iter().zip(&dp).map(|(r, x)| r.1 * x).sum();
                for (&(ki, pk, th), &dpk) in row_p.iter().zip(&dp) {
                    let mut ds = pk * (dpk - centre);
                    if st.softcap.is_some() {
                        ds *= 1.0 - th * th;
                    }
                    let ds = st.scale * ds;
                    let k_at = ((bi * sk + ki) * hk + kh) * d;
                    let dq_at = q_at;
                    let dk_at = nq + k_at;
                    for j in 0..d {
                        out[dq_at + j] += ds * st.k[k_at + j];
                        out[dk_at + j] += ds * st.q[q_at + j];
                    }
                    let dv_at = nq + nk + ((bi * sk + ki) * hk + kh) * dv;
                    for j in 0..dv {
                        out[dv_at + j] += pk * gv[g_at + j];
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Row-major strides of a bias broadcast to `full`, 0 on its size-1 (or missing leading) axes.
fn bias_strides(op: &Op, given: &[usize], full: [usize; 4]) -> IrResult<[usize; 4]> {
    let ok = given.len() <= 4
        && given
            .iter()
            .rev()
            .zip(full.iter().rev())
            .all(|(&a, &f)| a == f || a == 1);
    if !ok {
        return Err(err(
            op,
            format!("bias must broadcast to [B, H, Sq, Sk] = {full:?}, got {given:?}"),
        ));
    }
    // Right-align: missing leading axes behave as size 1.
    let mut dims = [1; 4];
    dims[4 - given.len()..].copy_from_slice(given);
    let mut strides = [0; 4];
    let mut acc = 1;
    for i in (0..4).rev() {
        strides[i] = if dims[i] == 1 { 0 } else { acc };
        acc *= dims[i];
    }
    Ok(strides)
}
