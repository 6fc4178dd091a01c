//! The linear ops: which operands each is linear in, and their tangent, the op
//! itself applied to the tangents (JAX's "the JVP of a linear op is the op").
//!
//! Reverse mode needs the transpose of each of these ops instead; those are its VJP
//! rules (`autodiff::movement`, `autodiff::reduce`, `autodiff::linalg`,
//! `autodiff::conv`), one per op, with no other derivative rule beside them.

use crate::build::Build;
use rlx_ir::{IrResult, NodeId, Op, ReduceOp};

/// The operand slots an op is linear in; its other operands (indices, shapes, the
/// routing input of a pool gradient) are held fixed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Linearity {
    /// Linear in these slots jointly (`concat`, `scatter_add`'s base and updates, and
    /// every one-operand linear op): the tangent is the op applied to all their
    /// tangents at once, zeros standing in for the missing ones.
    Joint(Vec<usize>),
    /// Linear in each of these slots separately (`matmul`, convolution gradients: a
    /// product of operands): the tangent is the sum over the slots of the op with
    /// that one slot replaced by its tangent.
    Each(Vec<usize>),
}

/// How `op` (with `arity` operands) is linear, or `None` when it is not (or only
/// affinely, like `conv` with a bias and the fused linear layer, whose rules add
/// the constant term's tangent themselves).
pub(crate) fn linearity(op: &Op, arity: usize) -> Option<Linearity> {
    use Linearity::{Each, Joint};
    Some(match op {
        Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Narrow { .. }
        | Op::Expand { .. }
        // The fill value is a constant: `linear_part` zeroes it.
        | Op::Pad { .. }
        | Op::Cumsum { .. }
        | Op::Fft { .. }
        // Slot 1 only lends its shape (BroadcastLike) or positions (Gather).
        | Op::BroadcastLike
        | Op::Gather { .. }
        | Op::Reduce {
            op: ReduceOp::Sum | ReduceOp::Mean,
            ..
        }
        | Op::Pool {
            kind: ReduceOp::Sum | ReduceOp::Mean,
            ..
        } => Joint(vec![0]),
        // Linear in grad_out; x only routes (max) or lends its shape (mean, sum).
        Op::PoolGrad { .. } => Joint(vec![1]),
        Op::Concat { .. } => Joint((0..arity).collect()),
        Op::ScatterAdd { .. } => Joint(vec![0, 2]),
        Op::MatMul => Each(vec![0, 1]),
        Op::Conv { .. } if arity == 2 => Each(vec![0, 1]),
        // conv_grad_input(x, w, g) reads x only for its shape; conv_grad_weight(x, w, g)
        // reads w only for its shape.
        Op::ConvGradInput { .. } => Each(vec![1, 2]),
        Op::ConvGradWeight { .. } => Each(vec![0, 2]),
        // x · Wᵀ with W gathered from the codebook: bilinear in (x, codebook).
        Op::SynthMatMul { .. } => Each(vec![0, 2]),
        _ => return None,
    })
}

/// `op` without its constant term: a pad fills with 0 (its fill value is a constant
/// whose tangent is zero); every other linear op is its own linear part.
fn linear_part(op: &Op) -> Op {
    match op {
        Op::Pad {
            axis,
            before,
            after,
            ..
        } => Op::Pad {
            axis: *axis,
            before: *before,
            after: *after,
            value: 0.0,
        },
        op => op.clone(),
    }
}

/// The tangent of a linear `op` over `inputs`, for the operand tangents `tangents`
/// (`None`: zero): the op applied to them, as `how` says. `None` when no slot it is
/// linear in has a tangent.
pub(crate) fn tangent<B: Build>(
    b: &mut B,
    op: &Op,
    inputs: &[NodeId],
    tangents: &[Option<NodeId>],
    how: &Linearity,
) -> IrResult<Option<NodeId>> {
    let op = linear_part(op);
    match how {
        Linearity::Joint(slots) => {
            if slots.iter().all(|&i| tangents[i].is_none()) {
                return Ok(None);
            }
            let mut args = inputs.to_vec();
            for &i in slots {
                args[i] = match tangents[i] {
                    Some(t) => t,
                    None => b.zeros_like(inputs[i])?,
                };
            }
            Ok(Some(b.op(op, args)?))
        }
        Linearity::Each(slots) => {
            let mut terms = Vec::new();
            for &i in slots {
                if let Some(t) = tangents[i] {
                    let mut args = inputs.to_vec();
                    args[i] = t;
                    terms.push(b.op(op.clone(), args)?);
                }
            }
            b.sum_terms(terms)
        }
    }
}
