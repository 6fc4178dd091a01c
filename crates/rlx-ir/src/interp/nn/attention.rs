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

pub(super) fn eval(op: &Op, inputs: &[&TensorData]) -> IrResult<Vec<f64>> {
    let Op::Attention {
        num_heads,
        head_dim,
        v_head_dim,
        mask_kind,
        score_scale,
        attn_logit_softcap,
    } = op
    else {
        unreachable!("attention::eval is only called for Op::Attention")
    };
    let extra = matches!(mask_kind, MaskKind::Custom | MaskKind::Bias);
    arity(op, inputs, if extra { 4 } else { 3 })?;
    let (h, d) = (*num_heads, *head_dim);
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
    let group = h / hk;
    let scale = match score_scale {
        Some(s) => *s as f64,
        None => 1.0 / (d as f64).sqrt(),
    };
    let softcap = match attn_logit_softcap {
        None => None,
        Some(c) if c.is_finite() && *c > 0.0 => Some(*c as f64),
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
    let bias_strides = if *mask_kind == MaskKind::Bias {
        Some(bias_strides(op, &inputs[3].dims, [b, h, sq, sk])?)
    } else {
        None
    };
    if *mask_kind == MaskKind::Custom && inputs[3].dims != [b, sk] {
        return Err(err(
            op,
            format!(
                "custom mask must be [batch, key_len] = [{b}, {sk}], got {:?}",
                inputs[3].dims
            ),
        ));
    }
    let (qv, kv, vv) = (q.to_f64_vec(), k.to_f64_vec(), v.to_f64_vec());
    let mut out = vec![0.0; b * sq * h * dv];
    for bi in 0..b {
        for hi in 0..h {
            let kh = hi / group;
            for qi in 0..sq {
                let q_at = ((bi * sq + qi) * h + hi) * d;
                let mut scores = Vec::new();
                let mut keys = Vec::new();
                for ki in 0..sk {
                    let allowed = match mask_kind {
                        MaskKind::None | MaskKind::Bias => true,
                        MaskKind::Causal => ki <= qi,
                        MaskKind::SlidingWindow(w) => ki <= qi && qi - ki <= *w,
                        MaskKind::Custom => extra_vals.as_ref().unwrap()[bi * sk + ki] >= 0.5,
                    };
                    if !allowed {
                        continue;
                    }
                    let k_at = ((bi * sk + ki) * hk + kh) * d;
                    let dot: f64 = (0..d).map(|j| qv[q_at + j] * kv[k_at + j]).sum();
                    let mut s = scale * dot;
                    if let Some(c) = softcap {
                        s = c * (s / c).tanh();
                    }
                    if let Some(st) = &bias_strides {
                        let at = bi * st[0] + hi * st[1] + qi * st[2] + ki * st[3];
                        s += extra_vals.as_ref().unwrap()[at];
                    }
                    scores.push(s);
                    keys.push(ki);
                }
                // No allowed key: the row stays zero rather than 0/0.
                let p = softmax_row(&scores);
                let o_at = ((bi * sq + qi) * h + hi) * dv;
                for (pk, &ki) in p.iter().zip(&keys) {
                    let v_at = ((bi * sk + ki) * hk + kh) * dv;
                    for j in 0..dv {
                        out[o_at + j] += pk * vv[v_at + j];
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
