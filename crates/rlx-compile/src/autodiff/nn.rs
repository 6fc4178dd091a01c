//! VJP rules of the neural-network ops: norms, softmax and log-softmax, the two
//! cross-entropy losses, rotary embeddings and the RBF spline activation.

use super::builder::ReverseBuilder;
use crate::build::Build;
use rlx_ir::{
    Activation, CmpOp, DType, Dim, IrError, IrResult, Node, NodeId, Op, RopeStyle, TensorData,
    norm_axis,
};

pub(super) fn vjp(bw: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
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
            let (cos, sin) = (node.inputs[1], node.inputs[2]);
            // Each pair is rotated by R(θ); the adjoint is R(−θ): the same rope with −sin.
            if bw.wants(node, 0) {
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
            if bw.wants(node, 1) || bw.wants(node, 2) {
                rope_tables(bw, node, *head_dim, *n_rot, *style, g)?;
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
fn class_iota(bw: &mut ReverseBuilder, logits: NodeId) -> IrResult<NodeId> {
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
fn norm(bw: &mut ReverseBuilder, node: &Node, eps: f32, rms: bool, g: NodeId) -> IrResult<()> {
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
    bw: &mut ReverseBuilder,
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

/// Gradients of rope's cos/sin tables. With the rotated pair `(a, b)` of x and the
/// pair `(ga, gb)` of the cotangent: `∂/∂cos = ga·a + gb·b`, `∂/∂sin = gb·a − ga·b`,
/// summed over batch and heads into `[S, n_rot/2]`, then zero-padded to the table's
/// layout (rows × row width, or the flat `S·n_rot/2` prefix of a rank-1 table).
fn rope_tables(
    bw: &mut ReverseBuilder,
    node: &Node,
    head_dim: usize,
    n_rot: usize,
    style: RopeStyle,
    g: NodeId,
) -> IrResult<()> {
    let (x, cos, sin) = (node.inputs[0], node.inputs[1], node.inputs[2]);
    let xd = bw.dims(x);
    let half = n_rot / 2;
    let four = |bw: &mut ReverseBuilder, t: NodeId| -> IrResult<NodeId> {
        if xd.len() == 4 {
            return Ok(t);
        }
        let heads = xd[2].as_static().map(|h| h / head_dim).ok_or_else(|| {
            IrError::new(
                "rope",
                format!(
                    "the gradient of the cos/sin tables needs a static hidden size, but x is {}",
                    bw.shape(x)
                ),
            )
        })?;
        bw.reshape_to(
            t,
            &[xd[0], xd[1], Dim::Static(heads), Dim::Static(head_dim)],
        )
    };
    let (x4, g4) = (four(bw, x)?, four(bw, g)?);
    // The two members of every rotated pair, as [B, S, H, half].
    let pair = |bw: &mut ReverseBuilder, t: NodeId, second: bool| -> IrResult<NodeId> {
        match style {
            RopeStyle::NeoX => bw.op(
                Op::Narrow {
                    axis: 3,
                    start: if second { half } else { 0 },
                    len: half,
                },
                vec![t],
            ),
            RopeStyle::GptJ => {
                let idx: Vec<i64> = (0..half as i64).map(|i| 2 * i + second as i64).collect();
                let idx = bw.constant(TensorData::from_i64_as(DType::I64, &[half], &idx));
                bw.op(Op::Gather { axis: 3 }, vec![t, idx])
            }
        }
    };
    let (a, b) = (pair(bw, x4, false)?, pair(bw, x4, true)?);
    let (ga, gb) = (pair(bw, g4, false)?, pair(bw, g4, true)?);
    if bw.wants(node, 1) {
        let p = bw.mul(ga, a)?;
        let q = bw.mul(gb, b)?;
        let s = bw.add(p, q)?;
        let per_pos = bw.sum(s, vec![0, 2], false)?;
        let gc = into_table(bw, per_pos, cos, half)?;
        bw.give(cos, gc)?;
    }
    if bw.wants(node, 2) {
        let p = bw.mul(gb, a)?;
        let q = bw.mul(ga, b)?;
        let s = bw.sub(p, q)?;
        let per_pos = bw.sum(s, vec![0, 2], false)?;
        let gs = into_table(bw, per_pos, sin, half)?;
        bw.give(sin, gs)?;
    }
    Ok(())
}

/// Lay a `[S, half]` gradient out like `table` (zeros where the rope reads nothing).
fn into_table(bw: &mut ReverseBuilder, t: NodeId, table: NodeId, half: usize) -> IrResult<NodeId> {
    let td = bw.dims(table);
    let sd = bw.dims(t);
    let pad = |bw: &mut ReverseBuilder,
               t: NodeId,
               axis: usize,
               have: Dim,
               want: Dim|
     -> IrResult<NodeId> {
        if have == want {
            return Ok(t);
        }
        match (have, want) {
            (Dim::Static(h), Dim::Static(w)) if w >= h => bw.op(
                Op::Pad {
                    axis,
                    before: 0,
                    after: w - h,
                    value: 0.0,
                },
                vec![t],
            ),
            _ => Err(IrError::new(
                "rope",
                format!(
                    "the gradient of the table {} needs static sizes to lay out a [{}, {half}] gradient",
                    bw.shape(table),
                    sd[0]
                ),
            )),
        }
    };
    if td.len() == 2 {
        let cols = pad(bw, t, 1, Dim::Static(half), td[1])?;
        pad(bw, cols, 0, sd[0], td[0])
    } else {
        let Some(s) = sd[0].as_static() else {
            return Err(IrError::new(
                "rope",
                format!(
                    "the gradient of the rank-1 table {} needs a static sequence length, got {}",
                    bw.shape(table),
                    sd[0]
                ),
            ));
        };
        let flat = bw.reshape_to(t, &[Dim::Static(s * half)])?;
        pad(bw, flat, 0, Dim::Static(s * half), td[0])
    }
}
