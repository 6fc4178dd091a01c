//! Forward mode of the non-linear reductions (`max`, `min`, `prod`) with the partials
//! of [`crate::derivatives`]; `argmax`/`argmin` output indices (zero tangent). The
//! linear reductions (`sum`, `mean`, `cumsum`) and data movement take the generic
//! rule of [`crate::derivatives::linear`].

use super::ForwardBuilder;
use crate::build::Build;
use crate::derivatives::prod::others_product;
use crate::derivatives::reduce::extremum_share;
use rlx_ir::{IrResult, Node, NodeId, Op, ReduceOp};

pub(super) fn rule(f: &mut ForwardBuilder, node: &Node) -> IrResult<Option<NodeId>> {
    let (op, axes, keep_dim) = match &node.op {
        Op::ArgMax { .. } | Op::ArgMin { .. } => return Ok(None),
        Op::Reduce { op, axes, keep_dim } => (*op, axes.clone(), *keep_dim),
        other => unreachable!(
            "reduce::rule got {} (linear ops take the generic rule)",
            other.name()
        ),
    };
    let Some(t) = f.operand_tangent(node, 0) else {
        return Ok(None);
    };
    let x = node.inputs[0];
    let e = &mut f.e;
    match op {
        ReduceOp::Max | ReduceOp::Min => {
            // The tangent at the extremal elements, averaged over ties (crate::kinks).
            // Without keep_dim the extremum is recomputed in keep-dim form rather than
            // reshaped (a reshape follows one dynamic axis only).
            let yk = if keep_dim {
                node.id
            } else {
                e.reduce(op, x, axes.clone(), true)?
            };
            let (hit, count) = extremum_share(e, x, yk, &axes, keep_dim)?;
            let picked = e.keep_where(hit, t)?;
            let num = e.sum(picked, axes, keep_dim)?;
            Ok(Some(e.div(num, count)?))
        }
        ReduceOp::Prod => {
            // Σᵢ tᵢ·Πⱼ≠ᵢ xⱼ with the partials built from prefix/suffix products, so the
            // rule is exact with zeros and when differentiated again.
            if axes.is_empty() {
                return Ok(Some(t));
            }
            let partial = others_product(e, x, &axes)?;
            let terms = e.mul(t, partial)?;
            Ok(Some(e.sum(terms, axes, keep_dim)?))
        }
        ReduceOp::Sum | ReduceOp::Mean => unreachable!("sum and mean take the linear rule"),
    }
}
