//! VJP rules of the neural-network ops: norms, softmax and log-softmax, the two
//! cross-entropy losses, rotary embeddings and the RBF spline activation.

use super::builder::Bw;
use rlx_ir::{Activation, CmpOp, DType, Dim, IrResult, Node, NodeId, Op, TensorData, norm_axis};

pub(super) fn vjp(bw: &mut Bw, node: &Node, g: NodeId) -> IrResult<()> {
    let x = node.inputs[0];
    let rank = bw.shape(x).rank();
    match &node.op {
        Op::LayerNorm { eps, .. } => norm(bw, node, *eps, false, g),
        Op::RmsNorm { eps, .. } => norm(bw, node, *eps, true, g),
        Op::Softmax { axis } => {
            if bw.wants(node, 0) {
                // y ⊙ (g − Σ g⊙y)
                let ax = norm_axis("softmax", *axis as i64, rank)?;
                let gy = bw.mul(g, node.id)?;
                let s = bw.sum(gy, vec![ax], true)?;
                let d = bw.sub(g, s)?;
                let gx = bw.mul(node.id, d)?;
                bw.give(x, gx)?;
            }
            Ok(())
        }
        Op::LogSoftmax { axis } => {
            if bw.wants(node, 0) {
                // g − softmax ⊙ Σ g, softmax = exp(y)
                let ax = norm_axis("log_softmax", *axis as i64, rank)?;
                let s = bw.sum(g, vec![ax], true)?;
                let p = bw.act(Activation::Exp, node.id)?;
                let ps = bw.mul(p, s)?;
                let gx = bw.sub(g, ps)?;
                bw.give(x, gx)?;
            }
            Ok(())
        }
        Op::SoftmaxCrossEntropy => {
            // loss = logsumexp(l) − Σ t⊙l: ∂/∂l = softmax(l) − t, ∂/∂t = −l.
            let t = node.inputs[1];
            let gk = bw.unsqueeze_last(g)?;
            if bw.wants(node, 0) {
                let p = bw.op(Op::Softmax { axis: -1 }, vec![x])?;
                let tv = bw.cast(t, bw.dtype(x))?;
                let d = bw.sub(p, tv)?;
                let gl = bw.mul(gk, d)?;
                bw.give(x, gl)?;
            }
            if bw.wants(node, 1) {
                let gl = bw.mul(gk, x)?;
                let gt = bw.neg(gl)?;
                bw.give(t, gt)?;
            }
            Ok(())
        }
        Op::SoftmaxCrossEntropyWithLogits => {
            // loss = logsumexp(l) − l[label]: ∂/∂l = softmax(l) − onehot(label).
            if bw.wants(node, 0) {
                let labels = node.inputs[1];
                let gk = bw.unsqueeze_last(g)?;
                let p = bw.op(Op::Softmax { axis: -1 }, vec![x])?;
                let classes = class_iota(bw, x)?;
                let lk = bw.unsqueeze_last(labels)?;
                let hit = bw.cmp(CmpOp::Eq, classes, lk)?;
                let onehot = bw.cast(hit, bw.dtype(x))?;
                let d = bw.sub(p, onehot)?;
                let gl = bw.mul(gk, d)?;
                bw.give(x, gl)?;
            }
            Ok(())
        }
        Op::Rope {
            head_dim,
            n_rot,
            style,
        } => {
            // Each pair is rotated by R(θ); the adjoint is R(−θ): the same rope with −sin.
            if bw.wants(node, 0) {
                let (cos, sin) = (node.inputs[1], node.inputs[2]);
                let nsin = bw.neg(sin)?;
                let gx = bw.op(
                    Op::Rope {
                        head_dim: *head_dim,
                        n_rot: *n_rot,
                        style: *style,
                    },
                    vec![g, cos, nsin],
                )?;
                bw.give(x, gx)?;
            }
            Ok(())
        }
        Op::SplineActivation {
            num_basis,
            grid_min,
            grid_max,
        } => spline(bw, node, *num_basis as usize, *grid_min, *grid_max, g),
        other => unreachable!("nn::vjp got {}", other.name()),
    }
}

/// The class positions `0..C` of `[.., C]` logits, broadcastable against them: a
/// constant for a static class axis, else an exclusive cumsum of ones.
fn class_iota(bw: &mut Bw, logits: NodeId) -> IrResult<NodeId> {
    let dims = bw.dims(logits);
    let last = dims.len() - 1;
    match dims[last] {
        Dim::Static(c) => {
            let v: Vec<i64> = (0..c as i64).collect();
            Ok(bw.constant(TensorData::from_i64_as(DType::I64, &[c], &v)))
        }
        Dim::Dynamic(_) => {
            let dt = bw.dtype(logits);
            let ones = bw.fill_like(1.0, logits, dt)?;
            bw.op(
                Op::Cumsum {
                    axis: last as i32,
                    exclusive: true,
                },
                vec![ones],
            )
        }
    }
}

/// LayerNorm `y = x̂·γ + β`, `x̂ = (x − μ)/√(σ² + ε)`, or RmsNorm `x̂ = x/√(mean x² + ε)`,
/// over the last axis. With `h = g·γ`:
/// layer norm `gx = r·(h − mean h − x̂·mean(h⊙x̂))`, rms norm `gx = r·(h − x̂·mean(h⊙x̂))`,
/// `gγ = Σ g⊙x̂`, `gβ = Σ g` (sums over every axis that γ/β broadcast along).
fn norm(bw: &mut Bw, node: &Node, eps: f32, rms: bool, g: NodeId) -> IrResult<()> {
    let (x, gamma, beta) = (node.inputs[0], node.inputs[1], node.inputs[2]);
    let (wx, wg, wb) = (bw.wants(node, 0), bw.wants(node, 1), bw.wants(node, 2));
    if wb {
        bw.give(beta, g)?;
    }
    if !wx && !wg {
        return Ok(());
    }
    let ax = bw.shape(x).rank() - 1;
    let centered = if rms {
        x
    } else {
        let mu = bw.mean(x, vec![ax], true)?;
        bw.sub(x, mu)?
    };
    let sq = bw.mul(centered, centered)?;
    let var = bw.mean(sq, vec![ax], true)?;
    let ve = bw.add_scalar(var, eps as f64)?;
    let r = bw.act(Activation::Rsqrt, ve)?;
    let xhat = bw.mul(centered, r)?;
    if wg {
        let gxh = bw.mul(g, xhat)?;
        bw.give(gamma, gxh)?;
    }
    if wx {
        let gam = bw.cast(gamma, bw.dtype(x))?;
        let h = bw.mul(g, gam)?;
        let hx = bw.mul(h, xhat)?;
        let m2 = bw.mean(hx, vec![ax], true)?;
        let proj = bw.mul(xhat, m2)?;
        let mut inner = bw.sub(h, proj)?;
        if !rms {
            let m1 = bw.mean(h, vec![ax], true)?;
            inner = bw.sub(inner, m1)?;
        }
        let gx = bw.mul(r, inner)?;
        bw.give(x, gx)?;
    }
    Ok(())
}

/// `y[.., c] = Σ_b w[c, b]·e_b`, `e_b = exp(−z_b²)`, `z_b = (x − g_b)/h`:
/// `∂y/∂x = Σ_b w[c, b]·e_b·(−2 z_b/h)`, `∂y/∂w[c, b] = e_b`.
fn spline(
    bw: &mut Bw,
    node: &Node,
    nb: usize,
    grid_min: f32,
    grid_max: f32,
    g: NodeId,
) -> IrResult<()> {
    let (x, coeff) = (node.inputs[0], node.inputs[1]);
    let (wx, wc) = (bw.wants(node, 0), bw.wants(node, 1));
    if !wx && !wc {
        return Ok(());
    }
    let dt = bw.dtype(x);
    let (lo, hi) = (grid_min as f64, grid_max as f64);
    let h = (hi - lo) / (nb - 1) as f64;
    let grid: Vec<f64> = (0..nb).map(|b| lo + b as f64 * h).collect();
    let grid = bw.constant(TensorData::from_f64_as(dt, &[nb], &grid));
    let xe = bw.unsqueeze_last(x)?;
    let diff = bw.sub(xe, grid)?;
    let z = bw.scale(diff, 1.0 / h)?;
    let zz = bw.mul(z, z)?;
    let nzz = bw.neg(zz)?;
    let e = bw.act(Activation::Exp, nzz)?;
    if wx {
        let w = bw.cast(coeff, dt)?;
        let we = bw.mul(w, e)?;
        let wez = bw.mul(we, z)?;
        let last = bw.shape(wez).rank() - 1;
        let s = bw.sum(wez, vec![last], false)?;
        let d = bw.scale(s, -2.0 / h)?;
        let gx = bw.mul(g, d)?;
        bw.give(x, gx)?;
    }
    if wc {
        let gk = bw.unsqueeze_last(g)?;
        let ge = bw.mul(gk, e)?;
        bw.give(coeff, ge)?;
    }
    Ok(())
}
