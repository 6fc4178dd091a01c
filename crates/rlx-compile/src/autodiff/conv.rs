//! VJP rules of the windowed ops (convolution, pooling, and their gradient ops, so
//! that second derivatives work) and of the FFT.

use super::builder::ReverseBuilder;
use crate::build::Build;
use crate::derivatives::pool::max_pool_pick;
use rlx_ir::{Dim, FftNorm, IrError, IrResult, Node, NodeId, Op, ReduceOp};

pub(super) fn vjp(rb: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    match &node.op {
        Op::Conv { .. } => {
            let (x, w) = (node.inputs[0], node.inputs[1]);
            let geo = node.op.conv_attrs().expect("a convolution op");
            if rb.wants(node, 0) {
                let gx = rb.op(geo.grad_input(), vec![x, w, g])?;
                rb.give(x, gx)?;
            }
            if rb.wants(node, 1) {
                let gw = rb.op(geo.grad_weight(), vec![x, w, g])?;
                rb.give(w, gw)?;
            }
            if node.inputs.len() == 3 && rb.wants(node, 2) {
                // bias [C_out] is added along axis 1 of [N, C_out, spatial…].
                let r = rb.shape(g).rank();
                let axes = std::iter::once(0).chain(2..r).collect();
                let gb = rb.sum(g, axes, false)?;
                rb.give(node.inputs[2], gb)?;
            }
            Ok(())
        }
        // dx = conv_grad_input(x, w, gy) is bilinear in (w, gy):
        // <u, dx> = <gy, conv(u, w)>, so ∂/∂gy = conv(u, w), ∂/∂w = conv_grad_weight(u, w, gy).
        Op::ConvGradInput { .. } => {
            let (w, gy) = (node.inputs[1], node.inputs[2]);
            let geo = node.op.conv_attrs().expect("a convolution op");
            if rb.wants(node, 2) {
                let ggy = rb.op(geo.conv(), vec![g, w])?;
                rb.give(gy, ggy)?;
            }
            if rb.wants(node, 1) {
                let gw = rb.op(geo.grad_weight(), vec![g, w, gy])?;
                rb.give(w, gw)?;
            }
            Ok(())
        }
        // dw = conv_grad_weight(x, w, gy): <u, dw> = <gy, conv(x, u)>, so
        // ∂/∂gy = conv(x, u), ∂/∂x = conv_grad_input(x, u, gy).
        Op::ConvGradWeight { .. } => {
            let (x, gy) = (node.inputs[0], node.inputs[2]);
            let geo = node.op.conv_attrs().expect("a convolution op");
            if rb.wants(node, 2) {
                let ggy = rb.op(geo.conv(), vec![x, g])?;
                rb.give(gy, ggy)?;
            }
            if rb.wants(node, 0) {
                let gx = rb.op(geo.grad_input(), vec![x, g, gy])?;
                rb.give(x, gx)?;
            }
            Ok(())
        }
        Op::Pool {
            kind,
            kernel_size,
            stride,
            padding,
        } => {
            let x = node.inputs[0];
            if rb.wants(node, 0) {
                let gx = rb.op(
                    Op::PoolGrad {
                        kind: *kind,
                        kernel_size: kernel_size.clone(),
                        stride: stride.clone(),
                        padding: padding.clone(),
                    },
                    vec![x, g],
                )?;
                rb.give(x, gx)?;
            }
            Ok(())
        }
        // Mean/sum pool_grad spreads gy over each window: its adjoint gathers each
        // window back, which is the same pool of u. Max pool_grad routes gy to each
        // window's first maximum: its adjoint reads u there. (Its x only routes:
        // blocked in `flow`.)
        Op::PoolGrad {
            kind: ReduceOp::Max,
            kernel_size,
            stride,
            padding,
        } => {
            if rb.wants(node, 1) {
                let ggy = max_pool_pick(rb, node.inputs[0], Some(g), kernel_size, stride, padding)?;
                rb.give(node.inputs[1], ggy)?;
            }
            Ok(())
        }
        Op::PoolGrad {
            kind,
            kernel_size,
            stride,
            padding,
        } => {
            if matches!(kind, ReduceOp::Mean | ReduceOp::Sum) && rb.wants(node, 1) {
                let ggy = rb.op(
                    Op::Pool {
                        kind: *kind,
                        kernel_size: kernel_size.clone(),
                        stride: stride.clone(),
                        padding: padding.clone(),
                    },
                    vec![g],
                )?;
                rb.give(node.inputs[1], ggy)?;
            }
            Ok(())
        }
        Op::Fft {
            inverse,
            norm,
            algo,
        } => {
            let x = node.inputs[0];
            if rb.wants(node, 0) {
                let gx = fft_adjoint(rb, x, g, *inverse, *norm, *algo)?;
                rb.give(x, gx)?;
            }
            Ok(())
        }
        other => unreachable!("conv::vjp got {}", other.name()),
    }
}

/// The FFT is linear with matrix `s·F` (forward, `F_jk = e^{−2πi jk/N}`) or `s·F̄`
/// (inverse); under the real inner product its adjoint is `s·F̄` resp. `s·F`: the
/// transform in the other direction with the same scale `s`, also in the real block
/// layout `[re…, im…]` (whose dot product is that real inner product).
fn fft_adjoint(
    rb: &mut ReverseBuilder,
    x: NodeId,
    g: NodeId,
    inverse: bool,
    norm: FftNorm,
    algo: rlx_ir::FftAlgo,
) -> IrResult<NodeId> {
    let flip = |norm| Op::Fft {
        inverse: !inverse,
        norm,
        algo,
    };
    match (norm, inverse) {
        // Same scale both ways: the flipped transform is the adjoint as is.
        (FftNorm::Backward, _) | (FftNorm::Ortho, _) => rb.op(flip(norm), vec![g]),
        // Forward norm, inverse direction: unscaled.
        (FftNorm::Forward, true) => rb.op(flip(FftNorm::Backward), vec![g]),
        // Forward norm, forward direction: scaled by 1/N.
        (FftNorm::Forward, false) => {
            let s = rb.shape(x);
            let last = s.dim(s.rank() - 1);
            let n = match last {
                Dim::Static(m) => m / 2,
                Dim::Dynamic(_) => {
                    return Err(IrError::new(
                        "fft",
                        format!(
                            "the adjoint of a forward-normalized fft needs a static transform length, but x is {s}"
                        ),
                    ));
                }
            };
            let t = rb.op(flip(FftNorm::Backward), vec![g])?;
            rb.scale(t, 1.0 / n as f64)
        }
    }
}
