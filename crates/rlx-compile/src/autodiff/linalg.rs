//! VJP rules of the contractions: matmul, the fused linear layer, dense solve, the
//! codebook matmul and the (straight-through) scaled low-precision matmul.

use super::builder::ReverseBuilder;
use super::flow;
use crate::build::Build;
use crate::derivatives::elementwise::{Applier, activation_partial, needs_input};
use crate::jvp::linalg::dequantize;
use rlx_ir::{Dim, IrResult, Node, NodeId, Op, ScaleLayout, ScaledFormat, SynthKind};

pub(super) fn vjp(bw: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    match &node.op {
        Op::MatMul => {
            // [.., M, K] × [.., K, N]: ga = g·bᵀ, gb = aᵀ·g (broadcast batch axes are
            // summed back by `give`).
            let (a, b) = (node.inputs[0], node.inputs[1]);
            if bw.wants(node, 0) {
                let bt = bw.t(b)?;
                let ga = bw.matmul(g, bt)?;
                bw.give(a, ga)?;
            }
            if bw.wants(node, 1) {
                let gb = match weight_grad_flat(bw, a, b, g)? {
                    Some(gb) => gb,
                    None => {
                        let at = bw.t(a)?;
                        bw.matmul(at, g)?
                    }
                };
                bw.give(b, gb)?;
            }
            Ok(())
        }
        Op::FusedMatMulBiasAct { activation } => linear(bw, node, *activation, g),
        Op::DenseSolve => solve(bw, node, g),
        Op::SynthMatMul {
            kind: SynthKind::Codebook { entry_dim, .. },
        } => synth(bw, node, *entry_dim as usize, g),
        Op::ScaledMatMul {
            lhs_format,
            rhs_format,
            scale_layout,
            has_bias,
        } => scaled(
            bw,
            node,
            [*lhs_format, *rhs_format],
            *scale_layout,
            *has_bias,
            g,
        ),
        // Codes and scales: no gradient (scaled_matmul routes around them).
        Op::ScaledQuantize { .. } | Op::ScaledQuantScale { .. } => Ok(()),
        other => unreachable!("linalg::vjp got {}", other.name()),
    }
}

/// The gradient of a matrix `b: [K, N]` shared by every batch of `a: [.., M, K]`, as
/// one product over all rows: `reshape(a, [R, K])ᵀ · reshape(g, [R, N])` with `R` the
/// rows of all batches. Batched (`aᵀ·g` per batch, then summed by `give`) it would
/// materialize one `[K, N]` product per batch and reduce them — for a transformer's
/// `[B, T, d]` activations, `B` times the weight's bytes and `B` small products instead
/// of one. `None` unless `b` is 2-D, `a` has batch axes, and their sizes are static.
fn weight_grad_flat(
    bw: &mut ReverseBuilder,
    a: NodeId,
    b: NodeId,
    g: NodeId,
) -> IrResult<Option<NodeId>> {
    let (da, db) = (bw.dims(a), bw.dims(b));
    if db.len() != 2 || da.len() < 3 {
        return Ok(None);
    }
    let Some(sa) = da
        .iter()
        .map(|d| d.as_static())
        .collect::<Option<Vec<usize>>>()
    else {
        return Ok(None);
    };
    let Some(n) = db[1].as_static() else {
        return Ok(None);
    };
    let k = sa[sa.len() - 1];
    let rows: usize = sa[..sa.len() - 1].iter().product();
    let a2 = bw.reshape_to(a, &[Dim::Static(rows), Dim::Static(k)])?;
    let g2 = bw.reshape_to(g, &[Dim::Static(rows), Dim::Static(n)])?;
    let at = bw.t(a2)?;
    Ok(Some(bw.matmul(at, g2)?))
}

/// `y = act(x·w + bias)` with `x: [.., K]`, `w: [K, N]`, `bias: [N]`.
fn linear(
    bw: &mut ReverseBuilder,
    node: &Node,
    activation: Option<rlx_ir::Activation>,
    g: NodeId,
) -> IrResult<()> {
    let (x, w, bias) = (node.inputs[0], node.inputs[1], node.inputs[2]);
    let (wx, ww, wb) = (bw.wants(node, 0), bw.wants(node, 1), bw.wants(node, 2));
    if !wx && !ww && !wb {
        return Ok(());
    }
    // The pre-activation z is not a graph value: recompute it only when the
    // activation's derivative needs it.
    let gz = match activation {
        None => g,
        Some(a) => {
            let z = if needs_input(a) {
                Some(bw.op(
                    Op::FusedMatMulBiasAct { activation: None },
                    vec![x, w, bias],
                )?)
            } else {
                None
            };
            match activation_partial(bw, a, z, node.id)? {
                Some(p) => Applier::default().apply(bw, &p, g)?,
                None => unreachable!("flow::blocked stops gradients at {}", a.name()),
            }
        }
    };
    let xr = bw.shape(x).rank();
    if wx {
        let wt = bw.t(w)?;
        let gx = if xr >= 2 {
            bw.matmul(gz, wt)?
        } else {
            let g2 = bw.unsqueeze(gz, 0)?;
            let m = bw.matmul(g2, wt)?;
            let xd = bw.dims(x);
            bw.reshape_to(m, &xd)?
        };
        bw.give(x, gx)?;
    }
    if ww {
        let gw = if let Some(gw) = weight_grad_flat(bw, x, w, gz)? {
            gw
        } else if xr >= 2 {
            // [.., K, M] × [.., M, N]; leading axes are summed by `give`.
            let xt = bw.t(x)?;
            bw.matmul(xt, gz)?
        } else {
            let xc = bw.unsqueeze_last(x)?;
            bw.mul(xc, gz)?
        };
        bw.give(w, gw)?;
    }
    if wb {
        bw.give(bias, gz)?;
    }
    Ok(())
}

/// `x = a⁻¹·b`: `gb = a⁻ᵀ·g`, `ga = −gb·xᵀ` (an outer product for a vector `b`).
fn solve(bw: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    let (a, b, x) = (node.inputs[0], node.inputs[1], node.id);
    let (wa, wb) = (bw.wants(node, 0), bw.wants(node, 1));
    if !wa && !wb {
        return Ok(());
    }
    let at = bw.t(a)?;
    let gb = bw.op(Op::DenseSolve, vec![at, g])?;
    if wb {
        bw.give(b, gb)?;
    }
    if wa {
        let vector = bw.shape(b).rank() + 1 == bw.shape(a).rank();
        let outer = if vector {
            let r = bw.shape(x).rank();
            let gc = bw.unsqueeze(gb, r)?;
            let xr = bw.unsqueeze(x, r - 1)?;
            bw.mul(gc, xr)?
        } else {
            let xt = bw.t(x)?;
            bw.matmul(gb, xt)?
        };
        let ga = bw.neg(outer)?;
        bw.give(a, ga)?;
    }
    Ok(())
}

/// `y = x·Wᵀ` with `W[j, c·ed + e] = codebook[indices[j, c], e]`.
fn synth(bw: &mut ReverseBuilder, node: &Node, ed: usize, g: NodeId) -> IrResult<()> {
    let (x, idx, cb) = (node.inputs[0], node.inputs[1], node.inputs[2]);
    let (wx, wc) = (bw.wants(node, 0), bw.wants(node, 2));
    if !wx && !wc {
        return Ok(());
    }
    let id = bw.dims(idx);
    let (n, chunks) = (id[0], id[1]);
    let k = bw.dims(x).last().copied().expect("rank ≥ 1");
    let xr = bw.shape(x).rank();
    if wx {
        // W = reshape(gather(codebook, indices), [n, k]).
        let rows = bw.op(Op::Gather { axis: 0 }, vec![cb, idx])?;
        let w = bw.reshape_to(rows, &[n, k])?;
        let w = bw.cast(w, bw.dtype(x))?;
        let gx = if xr >= 2 {
            bw.matmul(g, w)?
        } else {
            let g2 = bw.unsqueeze(g, 0)?;
            let m = bw.matmul(g2, w)?;
            bw.reshape_to(m, &[k])?
        };
        bw.give(x, gx)?;
    }
    if wc {
        // gW[j, t] = Σ g[.., j]·x[.., t], then scatter the [n, chunks, ed] slabs back
        // onto the codebook rows they were gathered from.
        let gw = if xr >= 2 {
            let gt = bw.t(g)?;
            let m = bw.matmul(gt, x)?;
            bw.sum_to(m, &[n, k])?
        } else {
            let gc = bw.unsqueeze_last(g)?;
            bw.mul(gc, x)?
        };
        let slabs = bw.reshape_to(gw, &[n, chunks, Dim::Static(ed)])?;
        let dt = bw.dtype(cb);
        let zeros = bw.fill_like(0.0, cb, dt)?;
        let slabs = bw.cast(slabs, dt)?;
        let gcb = bw.op(Op::ScatterAdd { axis: 0 }, vec![zeros, idx, slabs])?;
        bw.give(cb, gcb)?;
    }
    Ok(())
}

/// Straight-through `scaled_matmul(lq, rq, ls, rs[, bias])` = `deq(lq)·deq(rq)ᵀ + bias`:
/// the quantizers are treated as the identity, so the float operand `x` of
/// `lq = scaled_quantize(x, ls)` gets `g·deq(rq)` and the rhs operand `gᵀ·deq(lq)`.
fn scaled(
    bw: &mut ReverseBuilder,
    node: &Node,
    formats: [ScaledFormat; 2],
    layout: ScaleLayout,
    has_bias: bool,
    g: NodeId,
) -> IrResult<()> {
    let (lq, rq, ls, rs) = (
        node.inputs[0],
        node.inputs[1],
        node.inputs[2],
        node.inputs[3],
    );
    let src_l = flow::ste_source(bw.g, lq).filter(|&s| bw.is_active(s));
    let src_r = flow::ste_source(bw.g, rq).filter(|&s| bw.is_active(s));
    if let Some(xl) = src_l {
        let r = dequantize(bw, rq, rs, formats[1], layout)?;
        let gl = bw.matmul(g, r)?;
        bw.give(xl, gl)?;
    }
    if let Some(xr) = src_r {
        let l = dequantize(bw, lq, ls, formats[0], layout)?;
        let gt = bw.t(g)?;
        let gr = bw.matmul(gt, l)?;
        bw.give(xr, gr)?;
    }
    if has_bias && bw.wants(node, 4) {
        bw.give(node.inputs[4], g)?;
    }
    Ok(())
}
