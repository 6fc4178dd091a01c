//! VJP rules of the neural-network ops: norms, softmax and log-softmax, the two
//! cross-entropy losses, rotary embeddings and the RBF spline activation.

use super::builder::ReverseBuilder;
use crate::build::Build;
use crate::derivatives::elementwise::Applier;
use crate::derivatives::nn::{
    cross_entropy, cross_entropy_with_labels, norm_jacobian, normalized, softmax_jacobian,
    spline_basis, spline_slope,
};
use rlx_ir::{
    Activation, DType, Dim, IrError, IrResult, Node, NodeId, Op, RopeStyle, TensorData, norm_axis,
};

pub(super) fn vjp(rb: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    let x = node.inputs[0];
    let rank = rb.shape(x).rank();
    match &node.op {
        Op::LayerNorm { eps, .. } => norm(rb, node, *eps, false, g),
        Op::RmsNorm { eps, .. } => norm(rb, node, *eps, true, g),
        Op::Softmax { axis } => {
            if rb.wants(node, 0) {
                let ax = norm_axis("softmax", *axis as i64, rank)?;
                let gx = softmax_jacobian(rb, node.id, g, ax)?;
                rb.give(x, gx)?;
            }
            Ok(())
        }
        Op::LogSoftmax { axis } => {
            if rb.wants(node, 0) {
                // g − softmax ⊙ Σ g, softmax = exp(y)
                let ax = norm_axis("log_softmax", *axis as i64, rank)?;
                let s = rb.sum(g, vec![ax], true)?;
                let p = rb.act(Activation::Exp, node.id)?;
                let ps = rb.mul(p, s)?;
                let gx = rb.sub(g, ps)?;
                rb.give(x, gx)?;
            }
            Ok(())
        }
        Op::SoftmaxCrossEntropy => {
            // The partials are over the class axis: apply them to the cotangent
            // broadcast along it.
            let t = node.inputs[1];
            let want = [rb.wants(node, 0), rb.wants(node, 1)];
            let parts = cross_entropy(rb, x, t, want)?;
            let gk = rb.unsqueeze_last(g)?;
            let mut applier = Applier::default();
            for (input, part) in [x, t].into_iter().zip(parts) {
                if let Some(p) = part {
                    let gi = applier.apply(rb, &p, gk)?;
                    rb.give(input, gi)?;
                }
            }
            Ok(())
        }
        Op::SoftmaxCrossEntropyWithLogits => {
            if rb.wants(node, 0) {
                let p = cross_entropy_with_labels(rb, x, node.inputs[1])?;
                let gk = rb.unsqueeze_last(g)?;
                let gl = Applier::default().apply(rb, &p, gk)?;
                rb.give(x, gl)?;
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
            if rb.wants(node, 0) {
                let nsin = rb.neg(sin)?;
                let gx = rb.op(
                    Op::Rope {
                        head_dim: *head_dim,
                        n_rot: *n_rot,
                        style: *style,
                    },
                    vec![g, cos, nsin],
                )?;
                rb.give(x, gx)?;
            }
            if rb.wants(node, 1) || rb.wants(node, 2) {
                rope_tables(rb, node, *head_dim, *n_rot, *style, g)?;
            }
            Ok(())
        }
        Op::SplineActivation {
            num_basis,
            grid_min,
            grid_max,
        } => spline(rb, node, *num_basis as usize, *grid_min, *grid_max, g),
        other => unreachable!("nn::vjp got {}", other.name()),
    }
}

/// LayerNorm `y = x̂·γ + β`, `x̂ = (x − μ)/√(σ² + ε)`, or RmsNorm `x̂ = x/√(mean x² + ε)`,
/// over the last axis. With `h = g·γ`:
/// layer norm `gx = r·(h − mean h − x̂·mean(h⊙x̂))`, rms norm `gx = r·(h − x̂·mean(h⊙x̂))`,
/// `gγ = Σ g⊙x̂`, `gβ = Σ g` (sums over every axis that γ/β broadcast along).
fn norm(rb: &mut ReverseBuilder, node: &Node, eps: f32, rms: bool, g: NodeId) -> IrResult<()> {
    let (x, gamma, beta) = (node.inputs[0], node.inputs[1], node.inputs[2]);
    let (wx, wg, wb) = (rb.wants(node, 0), rb.wants(node, 1), rb.wants(node, 2));
    if wb {
        rb.give(beta, g)?;
    }
    if !wx && !wg {
        return Ok(());
    }
    let (xhat, r) = normalized(rb, x, eps, rms)?;
    if wg {
        let gxh = rb.mul(g, xhat)?;
        rb.give(gamma, gxh)?;
    }
    if wx {
        let gam = rb.cast(gamma, rb.dtype(x))?;
        let h = rb.mul(g, gam)?;
        let gx = norm_jacobian(rb, xhat, r, h, rms)?;
        rb.give(x, gx)?;
    }
    Ok(())
}

/// `y[.., c] = Σ_b w[c, b]·e_b`, `e_b = exp(−z_b²)`, `z_b = (x − g_b)/h`:
/// `∂y/∂x = Σ_b w[c, b]·e_b·(−2 z_b/h)`, `∂y/∂w[c, b] = e_b`.
fn spline(
    rb: &mut ReverseBuilder,
    node: &Node,
    nb: usize,
    grid_min: f32,
    grid_max: f32,
    g: NodeId,
) -> IrResult<()> {
    let (x, coeff) = (node.inputs[0], node.inputs[1]);
    let (wx, wc) = (rb.wants(node, 0), rb.wants(node, 1));
    if !wx && !wc {
        return Ok(());
    }
    let basis = spline_basis(rb, x, nb, grid_min, grid_max)?;
    if wx {
        let d = spline_slope(rb, coeff, basis)?;
        let gx = rb.mul(g, d)?;
        rb.give(x, gx)?;
    }
    if wc {
        let gk = rb.unsqueeze_last(g)?;
        let ge = rb.mul(gk, basis.0)?;
        rb.give(coeff, ge)?;
    }
    Ok(())
}

/// Gradients of rope's cos/sin tables. With the rotated pair `(a, b)` of x and the
/// pair `(ga, gb)` of the cotangent: `∂/∂cos = ga·a + gb·b`, `∂/∂sin = gb·a − ga·b`,
/// summed over batch and heads into `[S, n_rot/2]`, then zero-padded to the table's
/// layout (rows × row width, or the flat `S·n_rot/2` prefix of a rank-1 table).
fn rope_tables(
    rb: &mut ReverseBuilder,
    node: &Node,
    head_dim: usize,
    n_rot: usize,
    style: RopeStyle,
    g: NodeId,
) -> IrResult<()> {
    let (x, cos, sin) = (node.inputs[0], node.inputs[1], node.inputs[2]);
    let xd = rb.dims(x);
    let half = n_rot / 2;
    let four = |rb: &mut ReverseBuilder, t: NodeId| -> IrResult<NodeId> {
        if xd.len() == 4 {
            return Ok(t);
        }
        let heads = xd[2].as_static().map(|h| h / head_dim).ok_or_else(|| {
            IrError::new(
                "rope",
                format!(
                    "the gradient of the cos/sin tables needs a static hidden size, but x is {}",
                    rb.shape(x)
                ),
            )
        })?;
        rb.reshape_to(
            t,
            &[xd[0], xd[1], Dim::Static(heads), Dim::Static(head_dim)],
        )
    };
    let (x4, g4) = (four(rb, x)?, four(rb, g)?);
    // The two members of every rotated pair, as [B, S, H, half].
    let pair = |rb: &mut ReverseBuilder, t: NodeId, second: bool| -> IrResult<NodeId> {
        match style {
            RopeStyle::NeoX => rb.op(
                Op::Narrow {
                    axis: 3,
                    start: if second { half } else { 0 },
                    len: half,
                },
                vec![t],
            ),
            RopeStyle::GptJ => {
                let idx: Vec<i64> = (0..half as i64).map(|i| 2 * i + second as i64).collect();
                let idx = rb.constant(TensorData::from_i64_as(DType::I64, &[half], &idx));
                rb.op(Op::Gather { axis: 3 }, vec![t, idx])
            }
        }
    };
    let (a, b) = (pair(rb, x4, false)?, pair(rb, x4, true)?);
    let (ga, gb) = (pair(rb, g4, false)?, pair(rb, g4, true)?);
    if rb.wants(node, 1) {
        let p = rb.mul(ga, a)?;
        let q = rb.mul(gb, b)?;
        let s = rb.add(p, q)?;
        let per_pos = rb.sum(s, vec![0, 2], false)?;
        let gc = into_table(rb, per_pos, cos, half)?;
        rb.give(cos, gc)?;
    }
    if rb.wants(node, 2) {
        let p = rb.mul(gb, a)?;
        let q = rb.mul(ga, b)?;
        let s = rb.sub(p, q)?;
        let per_pos = rb.sum(s, vec![0, 2], false)?;
        let gs = into_table(rb, per_pos, sin, half)?;
        rb.give(sin, gs)?;
    }
    Ok(())
}

/// Lay a `[S, half]` gradient out like `table` (zeros where the rope reads nothing).
fn into_table(rb: &mut ReverseBuilder, t: NodeId, table: NodeId, half: usize) -> IrResult<NodeId> {
    let td = rb.dims(table);
    let sd = rb.dims(t);
    let pad = |rb: &mut ReverseBuilder,
               t: NodeId,
               axis: usize,
               have: Dim,
               want: Dim|
     -> IrResult<NodeId> {
        if have == want {
            return Ok(t);
        }
        match (have, want) {
            (Dim::Static(h), Dim::Static(w)) if w >= h => rb.op(
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
                    rb.shape(table),
                    sd[0]
                ),
            )),
        }
    };
    if td.len() == 2 {
        let cols = pad(rb, t, 1, Dim::Static(half), td[1])?;
        pad(rb, cols, 0, sd[0], td[0])
    } else {
        let Some(s) = sd[0].as_static() else {
            return Err(IrError::new(
                "rope",
                format!(
                    "the gradient of the rank-1 table {} needs a static sequence length, got {}",
                    rb.shape(table),
                    sd[0]
                ),
            ));
        };
        let flat = rb.reshape_to(t, &[Dim::Static(s * half)])?;
        pad(rb, flat, 0, Dim::Static(s * half), td[0])
    }
}
