//! Oracle semantics of the neural-network ops: softmax and log-softmax, layer and
//! RMS norm, attention, rotary embeddings, the two cross-entropy losses, and the
//! Gaussian-RBF spline activation.
//!
//! Every op decodes its operands to `f64`, computes there with the literal formula
//! written next to it, and rounds once to the node's dtype on store.

mod attention;

use crate::{IrError, IrResult, Op, RopeStyle, Shape, TensorData, norm_axis};

pub(super) fn eval(op: &Op, inputs: &[&TensorData], out: &Shape) -> IrResult<TensorData> {
    let dims = out
        .static_dims()
        .ok_or_else(|| err(op, format!("result type {out} is not concrete")))?;
    let vals = match op {
        Op::Softmax { axis } => {
            arity(op, inputs, 1)?;
            along_axis(op, inputs[0], *axis, softmax_row)?
        }
        Op::LogSoftmax { axis } => {
            arity(op, inputs, 1)?;
            along_axis(op, inputs[0], *axis, log_softmax_row)?
        }
        Op::LayerNorm { axis, eps } => {
            arity(op, inputs, 3)?;
            normalize(op, inputs, *axis, *eps, false)?
        }
        Op::RmsNorm { axis, eps } => {
            arity(op, inputs, 3)?;
            normalize(op, inputs, *axis, *eps, true)?
        }
        Op::Attention { .. } => attention::eval(op, inputs)?,
        Op::AttentionVjp { .. } => attention::eval_vjp(op, inputs)?,
        Op::Rope {
            head_dim,
            n_rot,
            style,
        } => {
            arity(op, inputs, 3)?;
            rope(op, inputs, *head_dim, *n_rot, *style)?
        }
        Op::SoftmaxCrossEntropy => {
            arity(op, inputs, 2)?;
            cross_entropy_dense(op, inputs[0], inputs[1])?
        }
        Op::SoftmaxCrossEntropyWithLogits => {
            arity(op, inputs, 2)?;
            cross_entropy_labels(op, inputs[0], inputs[1])?
        }
        Op::SplineActivation {
            num_basis,
            grid_min,
            grid_max,
        } => {
            arity(op, inputs, 2)?;
            spline(op, inputs[0], inputs[1], *num_basis, *grid_min, *grid_max)?
        }
        other => {
            return Err(err(
                other,
                "is not an nn op; the interpreter routed it to the wrong module".to_string(),
            ));
        }
    };
    // Every nn op has a real float result (shape inference requires it).
    let n: usize = dims.iter().product();
    if vals.len() != n || out.dtype().is_complex() {
        return Err(err(
            op,
            format!(
                "computed {} values but the result type {out} holds {n}; the operand dims disagree with the inferred type",
                vals.len()
            ),
        ));
    }
    Ok(TensorData::from_f64_as(out.dtype(), &dims, &vals))
}

pub(super) fn err(op: &Op, message: String) -> IrError {
    IrError::new(op.name(), message)
}

pub(super) fn arity(op: &Op, inputs: &[&TensorData], n: usize) -> IrResult<()> {
    if inputs.len() != n {
        return Err(err(op, format!("takes {n} operands, got {}", inputs.len())));
    }
    Ok(())
}

/// The maximum of `row`, `NaN` if any entry is `NaN`, `−∞` for an empty row.
///
/// (`f64::max` would silently skip a `NaN`; the oracle lets it propagate.)
pub(super) fn nan_max(row: &[f64]) -> f64 {
    row.iter().fold(f64::NEG_INFINITY, |m, &v| {
        if m.is_nan() || v.is_nan() {
            f64::NAN
        } else {
            m.max(v)
        }
    })
}

/// `softmax(x)_j = e_j / Σ e` with `m = max(x)`, `e = exp(x − m)`.
///
/// Taken literally, a row holding a `NaN` or a `+∞`, or only `−∞`, is all `NaN`
/// (`∞ − ∞` and `−∞ − (−∞)` are `NaN`), exactly as PyTorch behaves.
pub(super) fn softmax_row(row: &[f64]) -> Vec<f64> {
    let m = nan_max(row);
    let e: Vec<f64> = row.iter().map(|&x| (x - m).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|&v| v / sum).collect()
}

/// `log_softmax(x)_j = x_j − m − ln Σ exp(x − m)`; the same `NaN` rows as [`softmax_row`].
fn log_softmax_row(row: &[f64]) -> Vec<f64> {
    let m = nan_max(row);
    let lse = row.iter().map(|&x| (x - m).exp()).sum::<f64>().ln();
    row.iter().map(|&x| x - m - lse).collect()
}

/// `logsumexp(x) = m + ln Σ exp(x − m)` with `m = max(x)`.
fn logsumexp(row: &[f64]) -> f64 {
    let m = nan_max(row);
    m + row.iter().map(|&x| (x - m).exp()).sum::<f64>().ln()
}

/// Apply `f` to every 1-D row along `axis` (negative counts from the end).
fn along_axis(op: &Op, x: &TensorData, axis: i32, f: fn(&[f64]) -> Vec<f64>) -> IrResult<Vec<f64>> {
    let ax = norm_axis(&op.name(), axis as i64, x.dims.len())?;
    let n = x.dims[ax];
    let outer: usize = x.dims[..ax].iter().product();
    let inner: usize = x.dims[ax + 1..].iter().product();
    let v = x.to_f64_vec();
    let mut out = vec![0.0; v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * n + j) * inner + i;
            let row: Vec<f64> = (0..n).map(|j| v[at(j)]).collect();
            for (j, r) in f(&row).into_iter().enumerate() {
                out[at(j)] = r;
            }
        }
    }
    Ok(out)
}

/// Per-channel parameter (`γ` or `β`) of a norm: `[C]`, or `[1]`/rank-0 broadcast.
fn channel_param(op: &Op, what: &str, p: &TensorData, c: usize) -> IrResult<Vec<f64>> {
    let v = p.to_f64_vec();
    match v.len() {
        1 => Ok(vec![v[0]; c]),
        n if n == c => Ok(v),
        _ => Err(err(
            op,
            format!(
                "{what} has dims {:?} but the normalized axis has {c} channels; give it [{c}], [1] or a scalar",
                p.dims
            ),
        )),
    }
}

/// LayerNorm `(x − mean)/√(var + eps)·γ + β` (population variance) or RmsNorm
/// `x/√(mean(x²) + eps)·γ + β`, over the last axis. `eps` is the op's `f32` value, widened exactly.
fn normalize(
    op: &Op,
    inputs: &[&TensorData],
    axis: i32,
    eps: f32,
    rms: bool,
) -> IrResult<Vec<f64>> {
    let x = inputs[0];
    let rank = x.dims.len();
    let ax = norm_axis(&op.name(), axis as i64, rank)?;
    if ax + 1 != rank {
        return Err(err(
            op,
            format!(
                "only the last axis can be normalized (axis {axis} of dims {:?}); transpose first",
                x.dims
            ),
        ));
    }
    let c = x.dims[ax];
    let gamma = channel_param(op, "gamma", inputs[1], c)?;
    let beta = channel_param(op, "beta", inputs[2], c)?;
    let eps = eps as f64;
    let v = x.to_f64_vec();
    let mut out = Vec::with_capacity(v.len());
    if c == 0 {
        return Ok(out);
    }
    let n = c as f64;
    for row in v.chunks_exact(c) {
        if rms {
            let ms = row.iter().map(|&a| a * a).sum::<f64>() / n;
            let d = (ms + eps).sqrt();
            for (j, &a) in row.iter().enumerate() {
                out.push(a / d * gamma[j] + beta[j]);
            }
        } else {
            let mean = row.iter().sum::<f64>() / n;
            let var = row.iter().map(|&a| (a - mean) * (a - mean)).sum::<f64>() / n;
            let d = (var + eps).sqrt();
            for (j, &a) in row.iter().enumerate() {
                out.push((a - mean) / d * gamma[j] + beta[j]);
            }
        }
    }
    Ok(out)
}

/// Rotary position embedding.
///
/// For position `s`, head `h` and pair `i < half = n_rot/2` with table values
/// `c = cos(s, i)`, `t = sin(s, i)`, the pair `(a, b)` becomes `(a·c − b·t, b·c + a·t)`;
/// NeoX pairs dims `(i, i + half)`, GptJ `(2i, 2i + 1)`; dims `≥ n_rot` pass through.
/// A rank-1 table is read at `s·half + i`, a rank-2 table `[rows, w]` at `s·w + i`.
fn rope(
    op: &Op,
    inputs: &[&TensorData],
    head_dim: usize,
    n_rot: usize,
    style: RopeStyle,
) -> IrResult<Vec<f64>> {
    let x = inputs[0];
    if n_rot == 0 || !n_rot.is_multiple_of(2) || n_rot > head_dim {
        return Err(err(
            op,
            format!("n_rot ({n_rot}) must be even, non-zero and ≤ head_dim ({head_dim})"),
        ));
    }
    let (batch, seq, heads) = match x.dims[..] {
        [b, s, hidden] if hidden % head_dim == 0 => (b, s, hidden / head_dim),
        [b, s, h, d] if d == head_dim => (b, s, h),
        _ => {
            return Err(err(
                op,
                format!(
                    "x must be [B, S, H·{head_dim}] or [B, S, H, {head_dim}], got dims {:?}",
                    x.dims
                ),
            ));
        }
    };
    let half = n_rot / 2;
    let table = |what: &str, t: &TensorData| -> IrResult<(Vec<f64>, usize)> {
        let stride = match t.dims[..] {
            [len] if len >= seq * half => half,
            [rows, w] if rows >= seq && w >= half => w,
            _ => {
                return Err(err(
                    op,
                    format!(
                        "{what} table has dims {:?}; for seq_len {seq} and n_rot {n_rot} it must be rank 1 with ≥ {} entries or rank 2 [≥ {seq}, ≥ {half}]",
                        t.dims,
                        seq * half
                    ),
                ));
            }
        };
        Ok((t.to_f64_vec(), stride))
    };
    let (cos, cos_stride) = table("cos", inputs[1])?;
    let (sin, sin_stride) = table("sin", inputs[2])?;
    let mut out = x.to_f64_vec();
    for b in 0..batch {
        for s in 0..seq {
            for h in 0..heads {
                let base = ((b * seq + s) * heads + h) * head_dim;
                for i in 0..half {
                    let c = cos[s * cos_stride + i];
                    let t = sin[s * sin_stride + i];
                    let (ia, ib) = match style {
                        RopeStyle::NeoX => (base + i, base + i + half),
                        RopeStyle::GptJ => (base + 2 * i, base + 2 * i + 1),
                    };
                    let (a, bv) = (out[ia], out[ib]);
                    out[ia] = a * c - bv * t;
                    out[ib] = bv * c + a * t;
                }
            }
        }
    }
    Ok(out)
}

/// Rows of the class axis: `(row count, class count)` of `[.., C]` logits.
fn class_rows(op: &Op, logits: &TensorData) -> IrResult<(usize, usize)> {
    let Some(&c) = logits.dims.last() else {
        return Err(err(
            op,
            "logits must have a class axis [.., C], got a scalar".to_string(),
        ));
    };
    Ok((logits.numel() / c.max(1), c))
}

/// Per row `logsumexp(l) − Σ_c t_c·l_c` (exactly this formula, for any targets).
fn cross_entropy_dense(op: &Op, logits: &TensorData, targets: &TensorData) -> IrResult<Vec<f64>> {
    if logits.dims != targets.dims {
        return Err(err(
            op,
            format!(
                "logits {:?} and dense targets {:?} must have the same dims",
                logits.dims, targets.dims
            ),
        ));
    }
    let (rows, c) = class_rows(op, logits)?;
    let (l, t) = (logits.to_f64_vec(), targets.to_f64_vec());
    Ok((0..rows)
        .map(|r| {
            let row = &l[r * c..(r + 1) * c];
            let dot: f64 = row
                .iter()
                .zip(&t[r * c..(r + 1) * c])
                .map(|(a, b)| a * b)
                .sum();
            logsumexp(row) - dot
        })
        .collect())
}

/// Per row `logsumexp(l) − l[label]`; labels are class indices stored as numbers.
fn cross_entropy_labels(op: &Op, logits: &TensorData, labels: &TensorData) -> IrResult<Vec<f64>> {
    let (rows, c) = class_rows(op, logits)?;
    let y = labels.to_f64_vec();
    if y.len() != rows {
        return Err(err(
            op,
            format!(
                "labels {:?} must hold one class index per row of logits {:?}",
                labels.dims, logits.dims
            ),
        ));
    }
    let l = logits.to_f64_vec();
    let mut out = Vec::with_capacity(rows);
    for (r, &label) in y.iter().enumerate() {
        if !(label.fract() == 0.0 && label >= 0.0 && label < c as f64) {
            return Err(err(
                op,
                format!(
                    "label {label} of row {r} is not a class index in 0..{c}; labels must be whole numbers below the class count"
                ),
            ));
        }
        let row = &l[r * c..(r + 1) * c];
        out.push(logsumexp(row) - row[label as usize]);
    }
    Ok(out)
}

/// `y[.., c] = Σ_b coeff[c, b]·exp(−((x − g_b)/h)²)` with `h = (max − min)/(num_basis − 1)`
/// and grid points `g_b = min + b·h` (grid bounds are the op's `f32` values, widened exactly).
fn spline(
    op: &Op,
    x: &TensorData,
    coeff: &TensorData,
    num_basis: u32,
    grid_min: f32,
    grid_max: f32,
) -> IrResult<Vec<f64>> {
    let nb = num_basis as usize;
    let c = x.dims.last().copied().unwrap_or(0);
    if nb < 2 || coeff.dims != [c, nb] {
        return Err(err(
            op,
            format!(
                "needs num_basis ≥ 2 and coefficients [{c}, {nb}] for x {:?}, got num_basis {nb} and coefficients {:?}",
                x.dims, coeff.dims
            ),
        ));
    }
    let (lo, hi) = (grid_min as f64, grid_max as f64);
    let h = (hi - lo) / (nb - 1) as f64;
    let w = coeff.to_f64_vec();
    let v = x.to_f64_vec();
    Ok(v.iter()
        .enumerate()
        .map(|(i, &xv)| {
            let ch = i % c;
            (0..nb)
                .map(|b| {
                    let g = lo + b as f64 * h;
                    let z = (xv - g) / h;
                    w[ch * nb + b] * (-z * z).exp()
                })
                .sum()
        })
        .collect())
}
