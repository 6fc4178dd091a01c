//! Reverse mode of the element-wise ops (activations, casts, binary arithmetic,
//! `where`, straight-through rounding): each operand's partial from
//! [`crate::derivatives::elementwise`], applied to the cotangent.

use super::builder::ReverseBuilder;
use crate::derivatives::elementwise::{Applier, partials};
use rlx_ir::{IrResult, Node, NodeId};

pub(super) fn vjp(rb: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    let want: Vec<bool> = (0..node.inputs.len()).map(|i| rb.wants(node, i)).collect();
    if !want.contains(&true) {
        return Ok(());
    }
    let parts = partials(rb, &node.op, &node.inputs, node.id, &want)?;
    let mut applier = Applier::default();
    for (&input, part) in node.inputs.iter().zip(&parts) {
        if let Some(p) = part {
            let gi = applier.apply(rb, p, g)?;
            rb.give(input, gi)?;
        }
    }
    Ok(())
}
