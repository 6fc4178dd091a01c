//! Neural-network ops: norms, softmax, losses, attention, rope, splines.

use super::{arity, dims_str, err, norm_axis, require_float, require_real};
use crate::IrError;
use crate::op::MaskKind;
use crate::{Dim, IrResult, Op, Shape};

pub(super) fn infer(name: &str, op: &Op, inputs: &[&Shape]) -> IrResult<Shape> {
    match op {
        Op::LayerNorm { axis, .. } | Op::RmsNorm { axis, .. } => {
            arity(name, inputs, 3, "x, gamma, beta")?;
            norm_shape(name, *axis, inputs)
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            arity(name, inputs, 1, "x")?;
            require_float(name, "x", inputs[0])?;
            norm_axis(name, *axis as i64, inputs[0].rank())?;
            Ok(inputs[0].clone())
        }
        Op::SoftmaxCrossEntropy => {
            arity(name, inputs, 2, "logits [N, C], targets [N, C]")?;
            let (l, t) = (inputs[0], inputs[1]);
            require_float(name, "logits", l)?;
            if l.rank() < 1 || l.dims() != t.dims() {
                return Err(err(
                    name,
                    format!(
                        "logits {l} and dense targets {t} must have the same shape [N, C]; for class indices use softmax_cross_entropy_with_logits"
                    ),
                ));
            }
            require_float(name, "targets", t)?;
            Ok(l.with_dims(l.dims()[..l.rank() - 1].to_vec()))
        }
        Op::SoftmaxCrossEntropyWithLogits => {
            arity(name, inputs, 2, "logits [N, C], labels [N]")?;
            let (l, y) = (inputs[0], inputs[1]);
            require_float(name, "logits", l)?;
            if l.rank() < 1 || y.dims() != &l.dims()[..l.rank() - 1] {
                let want = if l.rank() >= 1 {
                    dims_str(&l.dims()[..l.rank() - 1])
                } else {
                    "[..]".into()
                };
                return Err(err(
                    name,
                    format!(
                        "labels {y} must be {want}: the logits' shape {l} without the class axis (one class index per row)"
                    ),
                ));
            }
            require_real(name, "labels", y)?;
            Ok(l.with_dims(l.dims()[..l.rank() - 1].to_vec()))
        }
        Op::SplineActivation {
            num_basis,
            grid_min,
            grid_max,
        } => {
            arity(name, inputs, 2, "x, coeff [C, num_basis]")?;
            let (x, c) = (inputs[0], inputs[1]);
            require_float(name, "x", x)?;
            if *num_basis < 2 || grid_max.partial_cmp(grid_min) != Some(std::cmp::Ordering::Greater)
            {
                return Err(err(
                    name,
                    format!(
                        "needs num_basis ≥ 2 and grid_max > grid_min, got {num_basis} basis functions on [{grid_min}, {grid_max}] (x is {x})"
                    ),
                ));
            }
            if x.rank() < 1 || c.dims() != [x.dim(x.rank() - 1), Dim::Static(*num_basis as usize)] {
                let ch = x.dims().last().map(|d| d.to_string()).unwrap_or("C".into());
                return Err(err(
                    name,
                    format!(
                        "coefficients must be [channels, num_basis] = [{ch}, {num_basis}] for x {x} (channels = its last axis), got {c}"
                    ),
                ));
            }
            require_float(name, "coefficients", c)?;
            Ok(x.clone())
        }
        Op::Attention { .. } => {
            let spec = op.attention_attrs().expect("attention attributes");
            attention_shape(name, inputs, &spec)
        }
        Op::AttentionVjp { .. } => {
            let spec = op.attention_attrs().expect("attention attributes");
            attention_vjp_shape(name, inputs, &spec)
        }
        Op::Rope {
            head_dim, n_rot, ..
        } => {
            arity(name, inputs, 3, "x, cos, sin")?;
            rope_shape(name, inputs, *head_dim, *n_rot)
        }
        _ => unreachable!("nn::infer called with {}", op.name()),
    }
}

fn norm_shape(name: &str, axis: i32, inputs: &[&Shape]) -> IrResult<Shape> {
    let x = inputs[0];
    require_float(name, "x", x)?;
    let ax = norm_axis(name, axis as i64, x.rank())?;
    if ax + 1 != x.rank() {
        return Err(err(
            name,
            format!(
                "only the last axis can be normalized (asked for axis {axis} of {x}); transpose that axis to the end first"
            ),
        ));
    }
    let c = x.dim(ax);
    for (what, p) in [("gamma", inputs[1]), ("beta", inputs[2])] {
        let ok = p.rank() == 0 || (p.rank() == 1 && (p.dim(0) == c || p.dim(0) == Dim::Static(1)));
        if !ok {
            return Err(err(
                name,
                format!(
                    "{what} must have shape [{c}] (the normalized axis of {x}), [1] or [], got {p}"
                ),
            ));
        }
        require_float(name, what, p)?;
    }
    Ok(x.clone())
}

/// The attributes attention's shape rules read.
type AttentionSpec = crate::op::AttentionAttrs;

/// Heads of a q/k/v operand: axis 2 of `[B, S, H, D]` (whose last axis must be `d`),
/// or `hidden / d` of `[B, S, H·d]`. `None` when the head axis is dynamic.
fn heads_of(name: &str, s: &Shape, d: usize, what: &str) -> IrResult<Option<usize>> {
    if s.rank() == 4 {
        if s.dim(3) != Dim::Static(d) {
            return Err(err(
                name,
                format!("{what} is {s} but its last axis must be the head dim {d}"),
            ));
        }
        return Ok(s.dim(2).as_static());
    }
    match s.dim(2).as_static() {
        Some(h) if h % d == 0 => Ok(Some(h / d)),
        Some(h) => Err(err(
            name,
            format!(
                "{what} is {s} but its hidden size {h} is not a multiple of the head dim {d}; pass the right head_dim or use the [B, S, H, D] layout"
            ),
        )),
        None => Ok(None),
    }
}

fn attention_shape(name: &str, inputs: &[&Shape], spec: &AttentionSpec) -> IrResult<Shape> {
    let (num_heads, head_dim) = (spec.num_heads, spec.head_dim);
    let (needed, list) = match spec.mask_kind {
        MaskKind::Custom => (4, "q, k, v, mask"),
        MaskKind::Bias => (4, "q, k, v, bias"),
        _ => (3, "q, k, v"),
    };
    if inputs.len() != needed {
        let got: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
        return Err(err(
            name,
            format!(
                "with mask {:?} takes {needed} inputs ({list}), got {}: [{}]",
                spec.mask_kind,
                inputs.len(),
                got.join("; ")
            ),
        ));
    }
    let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
    let dv = spec.v_head_dim.unwrap_or(head_dim);
    if num_heads == 0 || head_dim == 0 || dv == 0 {
        return Err(err(
            name,
            format!(
                "num_heads ({num_heads}), head_dim ({head_dim}) and v_head_dim ({dv}) must all be ≥ 1 (q is {q})"
            ),
        ));
    }
    if let Some(s) = spec.score_scale
        && !s.is_finite()
    {
        return Err(err(
            name,
            format!("score_scale must be finite, got {s}; use None for 1/√head_dim"),
        ));
    }
    if let Some(c) = spec.attn_logit_softcap
        && !(c.is_finite() && c > 0.0)
    {
        return Err(err(
            name,
            format!("attn_logit_softcap must be positive and finite, got {c}; use None for no cap"),
        ));
    }
    if q.rank() != k.rank() || q.rank() != v.rank() || !(q.rank() == 3 || q.rank() == 4) {
        return Err(err(
            name,
            format!("q, k, v must all be [B, S, H, D] or all [B, S, H·D]; got q {q}, k {k}, v {v}"),
        ));
    }
    require_float(name, "q", q)?;
    if q.dtype() != k.dtype() || q.dtype() != v.dtype() {
        return Err(IrError::dtype(
            name,
            format!("q {q}, k {k}, v {v} must share one float dtype; cast them to match"),
        ));
    }
    let qh = heads_of(name, q, head_dim, "q")?;
    let kh = heads_of(name, k, head_dim, "k")?;
    let vh = heads_of(name, v, dv, "v")?;
    if let Some(h) = qh.filter(|&h| h != num_heads) {
        return Err(err(
            name,
            format!("q {q} has {h} heads but num_heads is {num_heads}"),
        ));
    }
    // Grouped-query attention: k/v may have fewer heads, as long as they divide num_heads.
    for (what, h, s) in [("k", kh, k), ("v", vh, v)] {
        if let Some(h) = h.filter(|&h| h == 0 || num_heads % h != 0) {
            return Err(err(
                name,
                format!(
                    "{what} {s} has {h} heads, which must divide num_heads ({num_heads}) for grouped-query attention"
                ),
            ));
        }
    }
    if let (Some(a), Some(b)) = (kh, vh)
        && a != b
    {
        return Err(err(
            name,
            format!("k {k} has {a} heads but v {v} has {b}; they must be equal"),
        ));
    }
    if q.dim(0) != k.dim(0) || k.dim(0) != v.dim(0) {
        return Err(err(
            name,
            format!("batch sizes (axis 0) differ: q {q}, k {k}, v {v}"),
        ));
    }
    if k.dim(1) != v.dim(1) {
        return Err(err(
            name,
            format!("k {k} and v {v} must have the same sequence length (axis 1)"),
        ));
    }
    match spec.mask_kind {
        MaskKind::Custom => {
            let m = inputs[3];
            if m.dims() != [q.dim(0), k.dim(1)] {
                return Err(err(
                    name,
                    format!(
                        "the custom mask must be [batch, key_len] = [{}, {}] for q {q} and k {k}, got {m}",
                        q.dim(0),
                        k.dim(1)
                    ),
                ));
            }
            // Bool masks read as 0/1, which is what `≥ 0.5 attends` means.
            if m.dtype().is_complex() {
                return Err(IrError::dtype(
                    name,
                    format!(
                        "the custom mask {m} must be bool or real (≥ 0.5 attends); cast it with .cast(DType::F32)"
                    ),
                ));
            }
        }
        MaskKind::Bias => {
            let b = inputs[3];
            let full = Shape::from_dims(
                &[q.dim(0), Dim::Static(num_heads), q.dim(1), k.dim(1)],
                q.dtype(),
            );
            let fits = b.rank() <= 4
                && full
                    .broadcast_with(b)
                    .is_ok_and(|s| s.dims() == full.dims());
            if !fits {
                return Err(err(
                    name,
                    format!(
                        "the bias must broadcast to [B, H, Sq, Sk] = {} (each axis equal or 1), got {b}",
                        dims_str(full.dims())
                    ),
                ));
            }
            require_float(name, "the bias", b)?;
        }
        _ => {}
    }
    // The output has q's layout with v's head dim.
    if dv == head_dim {
        return Ok(q.clone());
    }
    let mut dims = q.dims().to_vec();
    if q.rank() == 4 {
        dims[3] = Dim::Static(dv);
    } else {
        dims[2] = Dim::Static(num_heads * dv);
    }
    Ok(q.with_dims(dims))
}

/// `[|q| + |k| + |v|]` for `[q, k, v, (mask | bias), g]`: the forward operands must make
/// a valid attention, `g` must have its output's type, and every axis must be static
/// (the packed length is a number).
fn attention_vjp_shape(name: &str, inputs: &[&Shape], spec: &AttentionSpec) -> IrResult<Shape> {
    let (needed, list) = match spec.mask_kind {
        MaskKind::Custom => (5, "q, k, v, mask, g"),
        MaskKind::Bias => (5, "q, k, v, bias, g"),
        _ => (4, "q, k, v, g"),
    };
    if inputs.len() != needed {
        let got: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
        return Err(err(
            name,
            format!(
                "with mask {:?} takes {needed} inputs ({list}; g is the cotangent of the attention output), got {}: [{}]",
                spec.mask_kind,
                inputs.len(),
                got.join("; ")
            ),
        ));
    }
    let out = attention_shape(name, &inputs[..needed - 1], spec)?;
    let g = inputs[needed - 1];
    if g.dims() != out.dims() || g.dtype() != out.dtype() {
        return Err(err(
            name,
            format!(
                "the cotangent g is {g} but the attention output is {out}; pass the gradient of the attention result"
            ),
        ));
    }
    let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
    let mut row = 0usize;
    for (what, s) in [("q", q), ("k", k), ("v", v)] {
        let per: Option<usize> = s.dims().iter().map(|d| d.as_static()).product();
        match per {
            Some(n) => row += n,
            None => {
                return Err(err(
                    name,
                    format!(
                        "{what} is {s}: every axis must be static to pack the gradients; differentiate through the primitive form instead"
                    ),
                ));
            }
        }
    }
    Ok(Shape::from_dims(&[Dim::Static(row)], q.dtype()))
}

fn rope_shape(name: &str, inputs: &[&Shape], head_dim: usize, n_rot: usize) -> IrResult<Shape> {
    let x = inputs[0];
    require_float(name, "x", x)?;
    if n_rot > head_dim || !n_rot.is_multiple_of(2) || n_rot == 0 {
        return Err(err(
            name,
            format!("n_rot ({n_rot}) must be even, non-zero and ≤ head_dim ({head_dim}); x is {x}"),
        ));
    }
    match x.rank() {
        3 => {
            if let Some(h) = x.dim(2).as_static()
                && h % head_dim != 0
            {
                return Err(err(
                    name,
                    format!("hidden size {h} of x {x} is not a multiple of head_dim {head_dim}"),
                ));
            }
        }
        4 => {
            if x.dim(3) != Dim::Static(head_dim) {
                return Err(err(
                    name,
                    format!("the last axis of x {x} must equal head_dim {head_dim}"),
                ));
            }
        }
        _ => {
            return Err(err(
                name,
                format!("x must be [B, S, hidden] or [B, S, H, head_dim], got {x}"),
            ));
        }
    }
    let (cos, sin) = (inputs[1], inputs[2]);
    if cos.dims() != sin.dims() {
        return Err(err(
            name,
            format!("the cos table {cos} and the sin table {sin} must have the same shape"),
        ));
    }
    let half = n_rot / 2;
    let seq = x.dim(1).as_static();
    for (what, t) in [("cos", cos), ("sin", sin)] {
        require_float(name, &format!("the {what} table"), t)?;
        match t.rank() {
            1 => {
                if let (Some(len), Some(s)) = (t.dim(0).as_static(), seq)
                    && len < s * half
                {
                    return Err(err(
                        name,
                        format!(
                            "the {what} table {t} is too short for x {x}: a rank-1 table needs seq_len·n_rot/2 = {s}·{half} = {} entries",
                            s * half
                        ),
                    ));
                }
            }
            2 => {
                if let Some(w) = t.dim(1).as_static().filter(|&w| w < half) {
                    return Err(err(
                        name,
                        format!(
                            "the {what} table {t} has rows of {w} values but needs at least n_rot/2 = {half}"
                        ),
                    ));
                }
                if let (Some(rows), Some(s)) = (t.dim(0).as_static(), seq)
                    && rows < s
                {
                    return Err(err(
                        name,
                        format!(
                            "the {what} table {t} has {rows} rows but x {x} has {s} positions; it needs one row per position"
                        ),
                    ));
                }
            }
            _ => {
                return Err(err(
                    name,
                    format!(
                        "the {what} table must be rank 1 [S·n_rot/2] or rank 2 [S, ≥ n_rot/2], got {t}"
                    ),
                ));
            }
        }
    }
    Ok(x.clone())
}
