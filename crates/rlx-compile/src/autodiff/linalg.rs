//! VJP rules of the contractions: matmul, the fused linear layer, dense solve, the
//! codebook matmul and the (straight-through) scaled low-precision matmul.

use super::builder::ReverseBuilder;
use crate::build::Build;
use crate::derivatives::elementwise::{Applier, activation_partial, needs_input};
use crate::derivatives::scaled::{dequantize, ste_source};
use rlx_ir::{Dim, IrResult, Node, NodeId, Op, ScaleLayout, ScaledFormat, SynthKind};

pub(super) fn vjp(rb: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    match &node.op {
        Op::MatMul => {
            // [.., M, K] × [.., K, N]: ga = g·bᵀ, gb = aᵀ·g (broadcast batch axes are
            // summed back by `give`).
            let (a, b) = (node.inputs[0], node.inputs[1]);
            if rb.wants(node, 0) {
                let bt = rb.swap_last_axes(b)?;
                let ga = rb.matmul(g, bt)?;
                rb.give(a, ga)?;
            }
            if rb.wants(node, 1) {
                let gb = match weight_grad_flat(rb, a, b, g)? {
                    Some(gb) => gb,
                    None => {
                        let at = rb.swap_last_axes(a)?;
                        rb.matmul(at, g)?
                    }
                };
                rb.give(b, gb)?;
            }
            Ok(())
        }
        Op::FusedMatMulBiasAct { activation } => linear(rb, node, *activation, g),
        Op::DenseSolve => solve(rb, node, g),
        Op::SynthMatMul {
            kind: SynthKind::Codebook { entry_dim, .. },
        } => synth(rb, node, *entry_dim as usize, g),
        Op::ScaledMatMul {
            lhs_format,
            rhs_format,
            scale_layout,
            has_bias,
        } => scaled(
            rb,
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
    rb: &mut ReverseBuilder,
    a: NodeId,
    b: NodeId,
    g: NodeId,
) -> IrResult<Option<NodeId>> {
    let (da, db) = (rb.dims(a), rb.dims(b));
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
    let a2 = rb.reshape_to(a, &[Dim::Static(rows), Dim::Static(k)])?;
    let g2 = rb.reshape_to(g, &[Dim::Static(rows), Dim::Static(n)])?;
    let at = rb.swap_last_axes(a2)?;
    Ok(Some(rb.matmul(at, g2)?))
}

/// `y = act(x·w + bias)` with `x: [.., K]`, `w: [K, N]`, `bias: [N]`.
fn linear(
    rb: &mut ReverseBuilder,
    node: &Node,
    activation: Option<rlx_ir::Activation>,
    g: NodeId,
) -> IrResult<()> {
    let (x, w, bias) = (node.inputs[0], node.inputs[1], node.inputs[2]);
    let (wx, ww, wb) = (rb.wants(node, 0), rb.wants(node, 1), rb.wants(node, 2));
    if !wx && !ww && !wb {
        return Ok(());
    }
    // The pre-activation z is not a graph value: recompute it only when the
    // activation's derivative needs it.
    let gz = match activation {
        None => g,
        Some(a) => {
            let z = if needs_input(a) {
                Some(rb.op(
                    Op::FusedMatMulBiasAct { activation: None },
                    vec![x, w, bias],
                )?)
            } else {
                None
            };
            match activation_partial(rb, a, z, node.id)? {
                Some(p) => Applier::default().apply(rb, &p, g)?,
                None => unreachable!("flow::blocked stops gradients at {}", a.name()),
            }
        }
    };
    let xr = rb.shape(x).rank();
    if wx {
        let wt = rb.swap_last_axes(w)?;
        let gx = if xr >= 2 {
            rb.matmul(gz, wt)?
        } else {
            let g2 = rb.unsqueeze(gz, 0)?;
            let m = rb.matmul(g2, wt)?;
            let xd = rb.dims(x);
            rb.reshape_to(m, &xd)?
        };
        rb.give(x, gx)?;
    }
    if ww {
        let gw = if let Some(gw) = weight_grad_flat(rb, x, w, gz)? {
            gw
        } else if xr >= 2 {
            // [.., K, M] × [.., M, N]; leading axes are summed by `give`.
            let xt = rb.swap_last_axes(x)?;
            rb.matmul(xt, gz)?
        } else {
            let xc = rb.unsqueeze_last(x)?;
            rb.mul(xc, gz)?
        };
        rb.give(w, gw)?;
    }
    if wb {
        rb.give(bias, gz)?;
    }
    Ok(())
}

/// `x = a⁻¹·b`: `gb = a⁻ᵀ·g`, `ga = −gb·xᵀ` (an outer product for a vector `b`).
fn solve(rb: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    let (a, b, x) = (node.inputs[0], node.inputs[1], node.id);
    let (wa, wb) = (rb.wants(node, 0), rb.wants(node, 1));
    if !wa && !wb {
        return Ok(());
    }
    let at = rb.swap_last_axes(a)?;
    let gb = rb.op(Op::DenseSolve, vec![at, g])?;
    if wb {
        rb.give(b, gb)?;
    }
    if wa {
        let vector = rb.shape(b).rank() + 1 == rb.shape(a).rank();
        let outer = if vector {
            let r = rb.shape(x).rank();
            let gc = rb.unsqueeze(gb, r)?;
            let xr = rb.unsqueeze(x, r - 1)?;
            rb.mul(gc, xr)?
        } else {
            let xt = rb.swap_last_axes(x)?;
            rb.matmul(gb, xt)?
        };
        let ga = rb.neg(outer)?;
        rb.give(a, ga)?;
    }
    Ok(())
}

/// `y = x·Wᵀ` with `W[j, c·ed + e] = codebook[indices[j, c], e]`.
fn synth(rb: &mut ReverseBuilder, node: &Node, ed: usize, g: NodeId) -> IrResult<()> {
    let (x, idx, cb) = (node.inputs[0], node.inputs[1], node.inputs[2]);
    let (wx, wc) = (rb.wants(node, 0), rb.wants(node, 2));
    if !wx && !wc {
        return Ok(());
    }
    let id = rb.dims(idx);
    let (n, chunks) = (id[0], id[1]);
    let k = rb.dims(x).last().copied().expect("rank ≥ 1");
    let xr = rb.shape(x).rank();
    if wx {
        // W = reshape(gather(codebook, indices), [n, k]).
        let rows = rb.op(Op::Gather { axis: 0 }, vec![cb, idx])?;
        let w = rb.reshape_to(rows, &[n, k])?;
        let w = rb.cast(w, rb.dtype(x))?;
        let gx = if xr >= 2 {
            rb.matmul(g, w)?
        } else {
            let g2 = rb.unsqueeze(g, 0)?;
            let m = rb.matmul(g2, w)?;
            rb.reshape_to(m, &[k])?
        };
        rb.give(x, gx)?;
    }
    if wc {
        // gW[j, t] = Σ g[.., j]·x[.., t], then scatter the [n, chunks, ed] slabs back
        // onto the codebook rows they were gathered from.
        let gw = if xr >= 2 {
            let gt = rb.swap_last_axes(g)?;
            let m = rb.matmul(gt, x)?;
            rb.sum_to(m, &[n, k])?
        } else {
            let gc = rb.unsqueeze_last(g)?;
            rb.mul(gc, x)?
        };
        let slabs = rb.reshape_to(gw, &[n, chunks, Dim::Static(ed)])?;
        let dt = rb.dtype(cb);
        let zeros = rb.fill_like(0.0, cb, dt)?;
        let slabs = rb.cast(slabs, dt)?;
        let gcb = rb.op(Op::ScatterAdd { axis: 0 }, vec![zeros, idx, slabs])?;
        rb.give(cb, gcb)?;
    }
    Ok(())
}

/// Straight-through `scaled_matmul(lq, rq, ls, rs[, bias])` = `deq(lq)·deq(rq)ᵀ + bias`:
/// the quantizers are treated as the identity, so the float operand `x` of
/// `lq = scaled_quantize(x, ls)` gets `g·deq(rq)` and the rhs operand `gᵀ·deq(lq)`.
fn scaled(
    rb: &mut ReverseBuilder,
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
    let src_l = ste_source(rb.g, lq).filter(|&s| rb.is_active(s));
    let src_r = ste_source(rb.g, rq).filter(|&s| rb.is_active(s));
    if let Some(xl) = src_l {
        let r = dequantize(rb, rq, rs, formats[1], layout)?;
        let gl = rb.matmul(g, r)?;
        rb.give(xl, gl)?;
    }
    if let Some(xr) = src_r {
        let l = dequantize(rb, lq, ls, formats[0], layout)?;
        let gt = rb.swap_last_axes(g)?;
        let gr = rb.matmul(gt, l)?;
        rb.give(xr, gr)?;
    }
    if has_bias && rb.wants(node, 4) {
        rb.give(node.inputs[4], g)?;
    }
    Ok(())
}
