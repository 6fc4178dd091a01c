//! JVP rules of the neural-network ops: softmax, norms, losses, rope, the spline
//! activation, and attention (through its decomposition).

use super::ForwardBuilder;
use crate::build::Build;
use crate::decompose::attention::{attrs_of, lower_vjp, operands, output};
use crate::derivatives::elementwise::Applier;
use crate::derivatives::nn::{
    cross_entropy, cross_entropy_with_labels, norm_jacobian, normalized, softmax_jacobian,
    spline_basis, spline_slope,
};
use rlx_ir::{Activation, IrResult, Node, NodeId, Op, norm_axis};

pub(super) fn rule(f: &mut ForwardBuilder, node: &Node) -> IrResult<Option<NodeId>> {
    let x = node.inputs[0];
    match &node.op {
        Op::Softmax { axis } => {
            let Some(t) = f.operand_tangent(node, 0) else {
                return Ok(None);
            };
            let ax = norm_axis("softmax", *axis as i64, node.shape.rank())?;
            Ok(Some(softmax_jacobian(&mut f.e, node.id, t, ax)?))
        }
        Op::LogSoftmax { axis } => {
            // t − Σ softmax⊙t, softmax = e^y.
            let Some(t) = f.operand_tangent(node, 0) else {
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
        // The partials are over the class axis: sum them, applied to the tangents,
        // along it.
        Op::SoftmaxCrossEntropy => {
            let targets = node.inputs[1];
            let (tl, tt) = (f.operand_tangent(node, 0), f.operand_tangent(node, 1));
            let e = &mut f.e;
            let parts = cross_entropy(e, x, targets, [tl.is_some(), tt.is_some()])?;
            let dt = e.dtype(x);
            let last = e.rank(x) - 1;
            let mut applier = Applier::default();
            let mut terms = Vec::new();
            for (t, part) in [tl, tt].into_iter().zip(parts) {
                if let (Some(t), Some(p)) = (t, part) {
                    let t = e.cast(t, dt)?;
                    let d = applier.apply(e, &p, t)?;
                    terms.push(e.sum(d, vec![last], false)?);
                }
            }
            e.sum_terms(terms)
        }
        Op::SoftmaxCrossEntropyWithLogits => {
            let Some(tl) = f.operand_tangent(node, 0) else {
                return Ok(None);
            };
            let e = &mut f.e;
            let p = cross_entropy_with_labels(e, x, node.inputs[1])?;
            let d = Applier::default().apply(e, &p, tl)?;
            let last = e.rank(x) - 1;
            Ok(Some(e.sum(d, vec![last], false)?))
        }
        Op::Rope { .. } => {
            // Linear in x for fixed tables, and in the tables for fixed x except for the
            // dims ≥ n_rot, which pass x through: rope(x, tc, ts) − rope(x, 0, 0).
            let (cos, sin) = (node.inputs[1], node.inputs[2]);
            let (tx, tc, ts) = (
                f.operand_tangent(node, 0),
                f.operand_tangent(node, 1),
                f.operand_tangent(node, 2),
            );
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
        Op::Attention { .. } | Op::AttentionVjp { .. } => {
            // Through the primitive form shared with reverse mode and `decompose`:
            // attention's value, or the backward pass the fused op lowers to.
            let (op, inputs) = (node.op.clone(), node.inputs.clone());
            let a = attrs_of(&op);
            f.through(|e| match op {
                Op::Attention { .. } => output(e, a, operands(a, &inputs)),
                _ => Ok(lower_vjp(e, &op, &inputs)?.0),
            })
        }
        other => unreachable!("nn::rule got {}", other.name()),
    }
}

/// LayerNorm / RmsNorm `n·γ + β` with the normalized value `n` of
/// [`crate::derivatives::nn::normalized`]: `ty = γ·J(tx) + n·tγ + tβ`, `J` the
/// (symmetric) Jacobian of `n`, shared with reverse mode.
fn norm(f: &mut ForwardBuilder, node: &Node, eps: f32, rms: bool) -> IrResult<Option<NodeId>> {
    let (x, gamma) = (node.inputs[0], node.inputs[1]);
    let (tx, tg, tb) = (
        f.operand_tangent(node, 0),
        f.operand_tangent(node, 1),
        f.operand_tangent(node, 2),
    );
    let e = &mut f.e;
    let (n, r) = normalized(e, x, eps, rms)?;
    let mut terms = Vec::new();
    if let Some(tx) = tx {
        let dn = norm_jacobian(e, n, r, tx, rms)?;
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
/// coefficients (the op itself on their tangent) and element-wise in `x`, with the
/// slope of [`crate::derivatives::nn::spline_slope`].
fn spline(
    f: &mut ForwardBuilder,
    node: &Node,
    nb: usize,
    lo: f32,
    hi: f32,
) -> IrResult<Option<NodeId>> {
    let (x, coeff) = (node.inputs[0], node.inputs[1]);
    let (tx, tc) = (f.operand_tangent(node, 0), f.operand_tangent(node, 1));
    let e = &mut f.e;
    let mut terms = Vec::new();
    if let Some(tc) = tc {
        terms.push(e.op(node.op.clone(), vec![x, tc])?);
    }
    if let Some(tx) = tx {
        let basis = spline_basis(e, x, nb, lo, hi)?;
        let d = spline_slope(e, coeff, basis)?;
        terms.push(e.mul(d, tx)?);
    }
    e.sum_terms(terms)
}
