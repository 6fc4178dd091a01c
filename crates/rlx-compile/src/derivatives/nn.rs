//! The derivatives of the neural-network ops, built once for both modes.
//!
//! - Softmax and the normalizations have symmetric Jacobians (with respect to their
//!   input), so one function applies the Jacobian to a seed: the input's tangent in
//!   forward mode, the output's cotangent in reverse mode.
//! - The cross-entropy losses reduce the class axis: their partials are
//!   [`Partial`]s over `[.., C]`; forward mode sums the partial of the tangent over
//!   the class axis, reverse mode applies it to the cotangent broadcast along it.
//! - The spline activation is element-wise in its input: one slope for both modes.

use super::elementwise::{Partial, Step};
use crate::build::Build;
use rlx_ir::{Activation, CmpOp, DType, Dim, IrResult, NodeId, Op, TensorData};

/// Softmax's Jacobian along `axis`, `diag(y) − y·yᵀ` per row, applied to `s`:
/// `y ⊙ (s − Σ y⊙s)`. `y` is the softmax's output.
pub(crate) fn softmax_jacobian<B: Build>(
    b: &mut B,
    y: NodeId,
    s: NodeId,
    axis: usize,
) -> IrResult<NodeId> {
    let sy = b.mul(s, y)?;
    let sum = b.sum(sy, vec![axis], true)?;
    let d = b.sub(s, sum)?;
    b.mul(y, d)
}

/// The normalized value `n` and the reciprocal scale `r` of a normalization over the
/// last axis of `x`, recomputed from `x` (the op's output includes γ and β):
/// layer norm `n = (x − μ)·r`, `r = 1/√(var + ε)`; rms norm `n = x·r`,
/// `r = 1/√(mean x² + ε)`.
pub(crate) fn normalized<B: Build>(
    b: &mut B,
    x: NodeId,
    eps: f32,
    rms: bool,
) -> IrResult<(NodeId, NodeId)> {
    let last = b.rank(x) - 1;
    let centered = if rms {
        x
    } else {
        let mu = b.mean(x, vec![last], true)?;
        b.sub(x, mu)?
    };
    let sq = b.mul(centered, centered)?;
    let var = b.mean(sq, vec![last], true)?;
    let ve = b.add_scalar(var, eps as f64)?;
    let r = b.act(Activation::Rsqrt, ve)?;
    let n = b.mul(centered, r)?;
    Ok((n, r))
}

/// The Jacobian of the normalized value `n` (see [`normalized`]) with respect to `x`
/// applied to `s`; it is symmetric: layer norm `r·(s − n·mean(n⊙s) − mean s)`, rms
/// norm `r·(s − n·mean(n⊙s))`, over the last axis.
pub(crate) fn norm_jacobian<B: Build>(
    b: &mut B,
    n: NodeId,
    r: NodeId,
    s: NodeId,
    rms: bool,
) -> IrResult<NodeId> {
    let last = b.rank(n) - 1;
    let sn = b.mul(s, n)?;
    let m2 = b.mean(sn, vec![last], true)?;
    let proj = b.mul(n, m2)?;
    let mut inner = b.sub(s, proj)?;
    if !rms {
        let m1 = b.mean(s, vec![last], true)?;
        inner = b.sub(inner, m1)?;
    }
    b.mul(r, inner)
}

/// The partials of `softmax_cross_entropy(logits, targets)` (per row: log-sum-exp of
/// the logits minus `Σ targets ⊙ logits`) over the class axis:
/// `∂/∂logits = softmax(logits) − targets`, `∂/∂targets = −logits`.
pub(crate) fn cross_entropy<B: Build>(
    b: &mut B,
    logits: NodeId,
    targets: NodeId,
    [wl, wt]: [bool; 2],
) -> IrResult<[Option<Partial>; 2]> {
    let pl = if wl {
        let p = b.op(Op::Softmax { axis: -1 }, vec![logits])?;
        let tv = b.cast(targets, b.dtype(logits))?;
        let d = b.sub(p, tv)?;
        Some(Partial::times(d))
    } else {
        None
    };
    let pt = wt.then(|| Partial::of([Step::Mul(logits), Step::Neg]));
    Ok([pl, pt])
}

/// The partial of `softmax_cross_entropy_with_logits(logits, labels)` (per row:
/// log-sum-exp of the logits minus the logit of the label) in the logits over the
/// class axis: `softmax(logits) − onehot(labels)`.
pub(crate) fn cross_entropy_with_labels<B: Build>(
    b: &mut B,
    logits: NodeId,
    labels: NodeId,
) -> IrResult<Partial> {
    let p = b.op(Op::Softmax { axis: -1 }, vec![logits])?;
    let classes = class_iota(b, logits)?;
    let lk = b.unsqueeze_last(labels)?;
    let hit = b.cmp(CmpOp::Eq, classes, lk)?;
    let onehot = b.cast(hit, b.dtype(logits))?;
    let d = b.sub(p, onehot)?;
    Ok(Partial::times(d))
}

/// The class positions `0..C` of `[.., C]` logits, broadcastable against them: a
/// constant for a static class axis, else an exclusive cumsum of ones.
fn class_iota<B: Build>(b: &mut B, logits: NodeId) -> IrResult<NodeId> {
    let dims = b.dims(logits);
    let last = dims.len() - 1;
    match dims[last] {
        Dim::Static(c) => {
            let v: Vec<i64> = (0..c as i64).collect();
            Ok(b.constant(TensorData::from_i64_as(DType::I64, &[c], &v)))
        }
        Dim::Dynamic(_) => {
            let dt = b.dtype(logits);
            let ones = b.fill_like(1.0, logits, dt)?;
            b.op(
                Op::Cumsum {
                    axis: last as i32,
                    exclusive: true,
                },
                vec![ones],
            )
        }
    }
}

/// The radial basis of the spline activation at `x`: `e_b = exp(−z_b²)` with
/// `z_b = (x − g_b)/h` on the grid `g_b` of `nb` points over `[lo, hi]`, as
/// `[.., C, nb]`; returns `(e, z, h)`.
pub(crate) fn spline_basis<B: Build>(
    b: &mut B,
    x: NodeId,
    nb: usize,
    lo: f32,
    hi: f32,
) -> IrResult<(NodeId, NodeId, f64)> {
    let dt = b.dtype(x);
    let (lo, hi) = (lo as f64, hi as f64);
    let h = (hi - lo) / (nb - 1) as f64;
    let grid: Vec<f64> = (0..nb).map(|i| lo + i as f64 * h).collect();
    let grid = b.constant(TensorData::from_f64_as(dt, &[nb], &grid));
    let xe = b.unsqueeze_last(x)?;
    let diff = b.sub(xe, grid)?;
    let z = b.scale(diff, 1.0 / h)?;
    let zz = b.mul(z, z)?;
    let nzz = b.neg(zz)?;
    let e = b.act(Activation::Exp, nzz)?;
    Ok((e, z, h))
}

/// The slope of `y[.., c] = Σ_b coeff[c, b]·e_b` in `x[.., c]` (element-wise):
/// `Σ_b coeff[c, b]·e_b·(−2 z_b/h)`, from [`spline_basis`]' `(e, z, h)`.
pub(crate) fn spline_slope<B: Build>(
    b: &mut B,
    coeff: NodeId,
    (e, z, h): (NodeId, NodeId, f64),
) -> IrResult<NodeId> {
    let w = b.cast(coeff, b.dtype(e))?;
    let we = b.mul(w, e)?;
    let wez = b.mul(we, z)?;
    let last = b.rank(wez) - 1;
    let s = b.sum(wez, vec![last], false)?;
    b.scale(s, -2.0 / h)
}
