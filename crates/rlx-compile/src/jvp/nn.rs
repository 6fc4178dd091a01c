//! JVP rules of the neural-network ops: softmax, norms, losses, rope, the spline
//! activation, and attention (through its decomposition).

use super::ForwardBuilder;
use super::attention;
use crate::build::Build;
use rlx_ir::{Activation, CmpOp, IrResult, Node, NodeId, Op, TensorData, norm_axis};

pub(super) fn rule(f: &mut ForwardBuilder, node: &Node) -> IrResult<Option<NodeId>> {
    let x = node.inputs[0];
    match &node.op {
        Op::Softmax { axis } => {
            // y ⊙ (t − Σ y⊙t).
            let Some(t) = f.t(node, 0) else {
                return Ok(None);
            };
            let ax = norm_axis("softmax", *axis as i64, node.shape.rank())?;
            let e = &mut f.e;
            let yt = e.mul(node.id, t)?;
            let s = e.sum(yt, vec![ax], true)?;
            let d = e.sub(t, s)?;
            Ok(Some(e.mul(node.id, d)?))
        }
        Op::LogSoftmax { axis } => {
            // t − Σ softmax⊙t, softmax = e^y.
            let Some(t) = f.t(node, 0) else {
                return Ok(None);
            };
            let ax = norm_axis("log_softmax", *axis as i64, node.shape.rank())?;
            let e = &mut f.e;
            let p = e.act(Activation::Exp, node.id)?;
            let pt = e.mul(p, t)?;
            let s = e.sum(pt, vec![ax], true)?;
            Ok(Some(e.sub(t, s)?))
        }
        Op::LayerNorm { eps, .. } | Op::RmsNorm { eps, .. } => {
            norm(f, node, *eps, matches!(node.op, Op::RmsNorm { .. }))
        }
        Op::SoftmaxCrossEntropy => {
            // lse(l) − Σ t·l → Σ (softmax(l) − t)·tl − Σ tt·l.
            let targets = node.inputs[1];
            let (tl, tt) = (f.t(node, 0), f.t(node, 1));
            let e = &mut f.e;
            let r = e.rank(x);
            let mut terms = Vec::new();
            if let Some(tl) = tl {
                let p = e.op(Op::Softmax { axis: -1 }, vec![x])?;
                let tg = e.cast(targets, e.dtype(x))?;
                let d = e.sub(p, tg)?;
                let dt = e.mul(d, tl)?;
                terms.push(e.sum(dt, vec![r - 1], false)?);
            }
            if let Some(tt) = tt {
                let tt = e.cast(tt, e.dtype(x))?;
                let prod = e.mul(x, tt)?;
                let s = e.sum(prod, vec![r - 1], false)?;
                terms.push(e.neg(s)?);
            }
            e.sum_terms(terms)
        }
        Op::SoftmaxCrossEntropyWithLogits => {
            // lse(l) − l[label] → Σ (softmax(l) − onehot(label))·tl.
            let Some(tl) = f.t(node, 0) else {
                return Ok(None);
            };
            let labels = node.inputs[1];
            let e = &mut f.e;
            let r = e.rank(x);
            let p = e.op(Op::Softmax { axis: -1 }, vec![x])?;
            let iota = e.iota_last(x, e.dtype(x))?;
            let lab = e.cast(labels, e.dtype(x))?;
            let lab = e.unsqueeze(lab, r - 1)?;
            let hot = e.cmp(CmpOp::Eq, iota, lab)?;
            let one = e.scalar_like(1.0, x);
            let onehot = e.keep_where(hot, one)?;
            let d = e.sub(p, onehot)?;
            let dt = e.mul(d, tl)?;
            Ok(Some(e.sum(dt, vec![r - 1], false)?))
        }
        Op::Rope { .. } => {
            // Linear in x for fixed tables, and in the tables for fixed x except for the
            // dims ≥ n_rot, which pass x through: rope(x, tc, ts) − rope(x, 0, 0).
            let (cos, sin) = (node.inputs[1], node.inputs[2]);
            let (tx, tc, ts) = (f.t(node, 0), f.t(node, 1), f.t(node, 2));
            let e = &mut f.e;
            let mut terms = Vec::new();
            if let Some(tx) = tx {
                terms.push(e.op(node.op.clone(), vec![tx, cos, sin])?);
            }
            if tc.is_some() || ts.is_some() {
                let zc = e.zeros_like(cos)?;
                let zs = e.zeros_like(sin)?;
                let tc = tc.unwrap_or(zc);
                let ts = ts.unwrap_or(zs);
                let with = e.op(node.op.clone(), vec![x, tc, ts])?;
                let pass = e.op(node.op.clone(), vec![x, zc, zs])?;
                terms.push(e.sub(with, pass)?);
            }
            e.sum_terms(terms)
        }
        Op::SplineActivation {
            num_basis,
            grid_min,
            grid_max,
        } => spline(f, node, *num_basis as usize, *grid_min, *grid_max),
        Op::Attention { .. } => attention::rule(f, node),
        Op::AttentionVjp { .. } => {
            // Through the primitive form (the lowering `decompose` uses).
            let (op, inputs) = (node.op.clone(), node.inputs.clone());
            f.through(|e| Ok(crate::decompose::attention::lower_vjp(e, &op, &inputs)?.0))
        }
        other => unreachable!("nn::rule got {}", other.name()),
    }
}

/// LayerNorm `x̂·γ + β` with `x̂ = (x − μ)·r`, `r = 1/√(var + eps)`:
/// `dx̂ = r·(u − x̂·mean(x̂·u))` with `u = tx − mean(tx)`.
/// RmsNorm `n·γ + β` with `n = x·r`, `r = 1/√(mean(x²) + eps)`:
/// `dn = r·(tx − n·mean(n·tx))`.
/// Both: `ty = γ·dn + n·tγ + tβ`.
fn norm(f: &mut ForwardBuilder, node: &Node, eps: f32, rms: bool) -> IrResult<Option<NodeId>> {
    let (x, gamma) = (node.inputs[0], node.inputs[1]);
    let (tx, tg, tb) = (f.t(node, 0), f.t(node, 1), f.t(node, 2));
    let e = &mut f.e;
    let last = e.rank(x) - 1;
    // The normalized value n and the reciprocal scale r, recomputed from x.
    let centered = if rms {
        x
    } else {
        let mu = e.mean(x, vec![last], true)?;
        e.sub(x, mu)?
    };
    let sq = e.square(centered)?;
    let var = e.mean(sq, vec![last], true)?;
    let var = e.add_scalar(var, eps as f64)?;
    let r = e.act(Activation::Rsqrt, var)?;
    let n = e.mul(centered, r)?;
    let mut terms = Vec::new();
    if let Some(tx) = tx {
        let u = if rms {
            tx
        } else {
            let m = e.mean(tx, vec![last], true)?;
            e.sub(tx, m)?
        };
        let nu = e.mul(n, u)?;
        let m = e.mean(nu, vec![last], true)?;
        let nm = e.mul(n, m)?;
        let d = e.sub(u, nm)?;
        let dn = e.mul(r, d)?;
        let g = e.cast(gamma, e.dtype(x))?;
        terms.push(e.mul(dn, g)?);
    }
    if let Some(tg) = tg {
        let tg = e.cast(tg, e.dtype(x))?;
        terms.push(e.mul(n, tg)?);
    }
    if let Some(tb) = tb {
        let tb = e.cast(tb, e.dtype(x))?;
        terms.push(e.broadcast_like(tb, node.id)?);
    }
    e.sum_terms(terms)
}

/// `y[.., c] = Σ_b coeff[c, b]·exp(−z_b²)`, `z_b = (x − g_b)/h`: linear in the
/// coefficients (the op itself on their tangent) and, for `x`,
/// `dy/dx = Σ_b coeff[c, b]·exp(−z_b²)·(−2 z_b / h)` built from primitives.
fn spline(
    f: &mut ForwardBuilder,
    node: &Node,
    nb: usize,
    lo: f32,
    hi: f32,
) -> IrResult<Option<NodeId>> {
    let (x, coeff) = (node.inputs[0], node.inputs[1]);
    let (tx, tc) = (f.t(node, 0), f.t(node, 1));
    let e = &mut f.e;
    let mut terms = Vec::new();
    if let Some(tc) = tc {
        terms.push(e.op(node.op.clone(), vec![x, tc])?);
    }
    if let Some(tx) = tx {
        let dt = e.dtype(x);
        let (lo, hi) = (lo as f64, hi as f64);
        let h = (hi - lo) / (nb - 1) as f64;
        let grid: Vec<f64> = (0..nb).map(|b| lo + b as f64 * h).collect();
        let grid = e.constant(TensorData::from_f64_as(dt, &[nb], &grid));
        let r = e.rank(x);
        let xu = e.unsqueeze(x, r)?;
        let diff = e.sub(xu, grid)?;
        let z = e.scale(diff, 1.0 / h)?;
        let z2 = e.square(z)?;
        let nz2 = e.neg(z2)?;
        let basis = e.act(Activation::Exp, nz2)?;
        let slope = e.scale(z, -2.0 / h)?;
        let db = e.mul(basis, slope)?;
        let c = e.cast(coeff, dt)?;
        let w = e.mul(db, c)?;
        let d = e.sum(w, vec![r], false)?;
        terms.push(e.mul(d, tx)?);
    }
    e.sum_terms(terms)
}
