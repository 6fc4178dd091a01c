//! Which operand slots gradients flow into, and in words why not where they do not.
//!
//! The reverse sweep asks [`blocked`] before building a gradient for a slot, and the
//! "no gradient reaches `x`" diagnosis walks the same edges, so the error always
//! names the op that actually stopped the gradient.

use rlx_ir::{Activation, DType, Graph, MaskKind, Node, Op, ReduceOp};

/// Whether values of `dt` carry gradients: real floats. (Complex values cannot be
/// accumulated by element-wise ops; differentiate the real block layout of `fft`.)
pub(crate) fn carries_gradient(dt: DType) -> bool {
    dt.is_float()
}

/// `None` when a gradient flows from `node` into its operand slot `i`; otherwise
/// the reason, as a clause naming the op (`"argmax is not differentiable (its
/// output is an index)"`).
pub(crate) fn blocked(g: &Graph, node: &Node, i: usize) -> Option<String> {
    let input = g.node(node.inputs[i]);
    if !carries_gradient(input.shape.dtype()) {
        return Some(non_float(input));
    }
    let name = node.op.name();
    let shape_only = || Some(format!("{name} reads only the shape of operand {i}"));
    match &node.op {
        Op::Activation(a @ (Activation::Floor | Activation::Ceil | Activation::Sign)) => Some(
            format!(
                "{} is not differentiable (it is piecewise constant: its derivative is zero wherever it exists)",
                a.name()
            ),
        ),
        Op::FusedMatMulBiasAct {
            activation: Some(a @ (Activation::Floor | Activation::Ceil | Activation::Sign)),
        } => Some(format!(
            "linear with activation {} is not differentiable (the activation is piecewise constant)",
            a.name()
        )),
        Op::StopGradient => Some("stop_gradient blocks gradients by design".into()),
        Op::ArgMax { .. } | Op::ArgMin { .. } => Some(format!(
            "{name} is not differentiable (its output is an index)"
        )),
        Op::Compare(_) => Some(format!(
            "{name} is not differentiable (its output is a bool)"
        )),
        Op::Where if i == 0 => Some("the mask of where is not differentiable (it only selects)".into()),
        Op::Gather { .. } | Op::ScatterAdd { .. } if i == 1 => Some(format!(
            "the indices of {name} are not differentiable (they are positions)"
        )),
        Op::SynthMatMul { .. } if i == 1 => Some(
            "the codebook indices of synth_matmul are not differentiable (they are positions)"
                .into(),
        ),
        Op::SoftmaxCrossEntropyWithLogits if i == 1 => Some(
            "the labels of softmax_cross_entropy_with_logits are not differentiable (they are class indices)"
                .into(),
        ),
        Op::Attention {
            mask_kind: MaskKind::Custom,
            ..
        } if i == 3 => Some("the custom attention mask is not differentiable (it only selects keys)".into()),
        Op::ScaledQuantScale { .. } => Some(
            "scaled_quant_scale is not differentiable (scales are constants under the straight-through estimator)"
                .into(),
        ),
        Op::ScaledMatMul { .. } if i < 4 => Some(
            "scaled_matmul reads quantized codes and scales; its straight-through gradient reaches only the float operands of the scaled_quantize nodes that feed it"
                .into(),
        ),
        Op::ConvGradInput { .. } if i == 0 => shape_only(),
        Op::ConvGradWeight { .. } if i == 1 => shape_only(),
        Op::BroadcastLike if i == 1 => shape_only(),
        Op::PoolGrad {
            kind: ReduceOp::Max,
            ..
        } if i == 0 => Some(
            "max pool2d_grad is not differentiable in x (the routing to the window maximum is piecewise constant)".into(),
        ),
        Op::PoolGrad { .. } if i == 0 => shape_only(),
        _ => None,
    }
}

/// Why a non-float value carries no gradient, naming the op that made it.
fn non_float(n: &Node) -> String {
    let dt = n.shape.dtype();
    if dt.is_complex() {
        return format!(
            "{} outputs complex {dt}, which carries no gradient (use the real block layout [.., 2N] of fft instead)",
            n.op.name()
        );
    }
    match &n.op {
        Op::Input { name } | Op::Param { name } => {
            format!("`{name}` is {dt}, which carries no gradient")
        }
        Op::Constant { .. } => format!("a {dt} constant carries no gradient"),
        Op::Cast { to } => format!(
            "cast to {to} is not differentiable (its output is {})",
            if *to == rlx_ir::DType::Bool {
                "a bool"
            } else {
                "an integer"
            }
        ),
        Op::Compare(_) => format!(
            "{} is not differentiable (its output is a bool)",
            n.op.name()
        ),
        Op::ScaledQuantize { .. } => {
            "scaled_quantize is not differentiable (its output is integer codes)".into()
        }
        op => format!("{} is not differentiable (its output is {dt})", op.name()),
    }
}
