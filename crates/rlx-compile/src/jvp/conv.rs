//! JVP rules of the windowed ops that are not linear: a convolution with a bias
//! (bilinear in input and weight, plus the bias's tangent) and max pooling, which
//! routes each window's tangent from its maximum and is differentiated through a
//! decomposition that gathers the windows explicitly. Convolutions without a bias,
//! their gradient ops, sum/mean pooling, pool gradients and the FFT are linear (in
//! each operand) and take the generic rule of [`crate::derivatives::linear`].

use super::ForwardBuilder;
use crate::build::Build;
use crate::derivatives::linear::{self, Linearity::Each};
use crate::derivatives::pool::max_pool_decomposed;
use rlx_ir::{IrResult, Node, NodeId, Op, ReduceOp};

pub(super) fn rule(f: &mut ForwardBuilder, node: &Node) -> IrResult<Option<NodeId>> {
    match &node.op {
        Op::Conv { .. } => {
            // Bilinear in (x, w) as a bias-free convolution; the bias adds its tangent
            // along the channel axis ([C_out] → [C_out, 1, …] → the output's dims).
            let (tx, tw, tb) = (
                f.operand_tangent(node, 0),
                f.operand_tangent(node, 1),
                f.operand_tangent(node, 2),
            );
            let e = &mut f.e;
            let xw = linear::tangent(e, &node.op, &node.inputs[..2], &[tx, tw], &Each(vec![0, 1]))?;
            let mut terms: Vec<NodeId> = xw.into_iter().collect();
            if let Some(tb) = tb {
                let mut col = tb;
                for _ in 2..e.rank(node.id) {
                    let r = e.rank(col);
                    col = e.unsqueeze(col, r)?;
                }
                terms.push(e.broadcast_like(col, node.id)?);
            }
            e.sum_terms(terms)
        }
        Op::Pool {
            kind,
            kernel_size,
            stride,
            padding,
        } => {
            if f.operand_tangent(node, 0).is_none() {
                return Ok(None);
            }
            debug_assert_eq!(
                *kind,
                ReduceOp::Max,
                "sum and mean pooling take the linear rule"
            );
            let x = node.inputs[0];
            let (k, s, p) = (kernel_size.clone(), stride.clone(), padding.clone());
            f.through(|e| max_pool_decomposed(e, x, &k, &s, &p))
        }
        other => unreachable!("conv::rule got {}", other.name()),
    }
}
