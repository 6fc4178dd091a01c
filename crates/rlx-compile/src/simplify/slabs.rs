//! Sums of zero-padded slabs become one concatenation.
//!
//! The gradient of `narrow` is a zero `pad`, so splitting a fused projection
//! (`q, k, v = qkv.narrow(..)` three times) makes its backward
//! `pad(dq) + pad(dk) + pad(dv)`: three padded copies of the full tensor, mostly
//! zeros, and a three-way add over them. When the slabs are adjacent along one axis
//! the sum is their concatenation, written once:
//!
//! ```text
//! pad(a, before s, after n−s−|a|) + pad(b, before s+|a|, …)  →  pad(concat(a, b), before s, …)
//! pad(concat(parts), 0, 0)                                  →  concat(parts)
//! ```
//!
//! The rewrite is exact except for the sign of a zero: `−0 + 0` is `+0` in the sum
//! but `−0` in the concatenation.

use super::intern;
use rlx_ir::{Dim, Graph, NodeId, Op, Shape};
use std::collections::HashMap;

/// A value that is zero outside one run of adjacent slabs along `axis`.
struct Slabs {
    axis: usize,
    /// Start of the run along the axis.
    start: usize,
    /// The slabs in axis order (each one node).
    parts: Vec<NodeId>,
    /// Total length of the parts along the axis.
    len: usize,
}

/// `x` as a run of slabs, if it is a zero pad (of a concatenation along the same axis
/// or of one node) or a concatenation.
fn slabs_of(g: &Graph, x: NodeId) -> Option<Slabs> {
    let n = g.node(x);
    match &n.op {
        &Op::Pad {
            axis,
            before,
            value: 0.0,
            ..
        } => {
            let inner = n.inputs[0];
            let len = g.shape(inner).dims()[axis].as_static()?;
            let parts = match &g.node(inner).op {
                Op::Concat { axis: a } if *a == axis => g.node(inner).inputs.clone(),
                _ => vec![inner],
            };
            Some(Slabs {
                axis,
                start: before,
                parts,
                len,
            })
        }
        Op::Concat { axis } => Some(Slabs {
            axis: *axis,
            start: 0,
            parts: n.inputs.clone(),
            len: g.shape(x).dims()[*axis].as_static()?,
        }),
        _ => None,
    }
}

/// For `Add(l, r)` of type `shape` whose operands are adjacent zero-padded slabs along
/// one static axis: the op and inputs of the equivalent pad (or concat), adding the
/// concatenation it pads to `g`.
pub(super) fn merge_padded_add(
    g: &mut Graph,
    cse: &mut HashMap<u64, Vec<NodeId>>,
    op: &Op,
    inputs: &[NodeId],
    shape: &Shape,
) -> Option<(Op, Vec<NodeId>)> {
    if !matches!(op, Op::Binary(rlx_ir::BinaryOp::Add)) || !shape.dtype().is_float() {
        return None;
    }
    if inputs.iter().any(|&i| g.shape(i) != shape) {
        return None;
    }
    let (a, b) = (slabs_of(g, inputs[0])?, slabs_of(g, inputs[1])?);
    if a.axis != b.axis {
        return None;
    }
    let axis = a.axis;
    let total = shape.dims()[axis].as_static()?;
    let (first, second) = if a.start <= b.start { (a, b) } else { (b, a) };
    if first.start + first.len != second.start {
        // Overlapping (the sum adds) or apart (a gap of zeros between them).
        return None;
    }
    let len = first.len + second.len;
    let mut parts = first.parts;
    parts.extend(second.parts);
    let (before, after) = (first.start, total - first.start - len);
    if before == 0 && after == 0 {
        return Some((Op::Concat { axis }, parts));
    }
    let mut dims = shape.dims().to_vec();
    dims[axis] = Dim::Static(len);
    let concat = intern(
        g,
        cse,
        Op::Concat { axis },
        parts,
        Shape::from_dims(&dims, shape.dtype()),
        None,
    );
    Some((
        Op::Pad {
            axis,
            before,
            after,
            value: 0.0,
        },
        vec![concat],
    ))
}
