//! Forward mode of the element-wise ops (activations, casts, binary arithmetic,
//! `where`, straight-through rounding): the sum of each operand's partial from
//! [`crate::derivatives::elementwise`] applied to its tangent.

use super::ForwardBuilder;
use crate::build::Build;
use crate::derivatives::elementwise::{Applier, partials};
use rlx_ir::{IrResult, Node, NodeId};

pub(super) fn rule(f: &mut ForwardBuilder, node: &Node) -> IrResult<Option<NodeId>> {
    let tangents: Vec<Option<NodeId>> = (0..node.inputs.len())
        .map(|i| f.operand_tangent(node, i))
        .collect();
    let want: Vec<bool> = tangents.iter().map(Option::is_some).collect();
    let e = &mut f.e;
    let parts = partials(e, &node.op, &node.inputs, node.id, &want)?;
    let dt = node.shape.dtype();
    let mut applier = Applier::default();
    let mut terms = Vec::new();
    for (t, part) in tangents.into_iter().zip(&parts) {
        if let (Some(t), Some(p)) = (t, part) {
            // A rhs of another dtype is converted to the result's before computing.
            let t = e.cast(t, dt)?;
            terms.push(applier.apply(e, p, t)?);
        }
    }
    e.sum_terms(terms)
}
