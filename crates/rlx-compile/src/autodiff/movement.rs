//! VJP rules of the movement ops: each is the adjoint data movement (reshape back,
//! inverse transpose, pad ↔ narrow, split a concat, sum a broadcast, scatter-add a
//! gather).

use super::builder::ReverseBuilder;
use crate::build::Build;
use crate::build::dims_str;
use rlx_ir::{DType, Dim, IrError, IrResult, Node, NodeId, Op, TensorData};

pub(super) fn vjp(rb: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    let x = node.inputs[0];
    match &node.op {
        Op::Reshape { .. } => {
            if rb.wants(node, 0) {
                let xd = rb.dims(x);
                let gx = rb.reshape_to(g, &xd)?;
                rb.give(x, gx)?;
            }
            Ok(())
        }
        Op::Transpose { perm } => {
            if rb.wants(node, 0) {
                let mut inv = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inv[p] = i;
                }
                let gx = rb.transpose(g, inv)?;
                rb.give(x, gx)?;
            }
            Ok(())
        }
        Op::Narrow { axis, start, len } => {
            if rb.wants(node, 0) {
                let gx = unnarrow(rb, x, g, *axis, *start, *len)?;
                rb.give(x, gx)?;
            }
            Ok(())
        }
        Op::Pad {
            axis,
            before,
            after,
            ..
        } => {
            if rb.wants(node, 0) {
                let gx = match rb.dims(x)[*axis] {
                    Dim::Static(n) => rb.op(
                        Op::Narrow {
                            axis: *axis,
                            start: *before,
                            len: n,
                        },
                        vec![g],
                    )?,
                    // Shape inference only pads a dynamic axis by nothing.
                    Dim::Dynamic(_) => {
                        debug_assert_eq!(before + after, 0);
                        g
                    }
                };
                rb.give(x, gx)?;
            }
            Ok(())
        }
        Op::Concat { axis } => concat(rb, node, *axis, g),
        // Broadcasts: `give` sums the cotangent back down to the operand's dims.
        Op::Expand { .. } | Op::BroadcastLike => {
            if rb.wants(node, 0) {
                rb.give(x, g)?;
            }
            Ok(())
        }
        Op::Gather { axis } => {
            if rb.wants(node, 0) {
                let dt = rb.dtype(x);
                let zeros = rb.fill_like(0.0, x, dt)?;
                let gx = rb.op(
                    Op::ScatterAdd { axis: *axis },
                    vec![zeros, node.inputs[1], g],
                )?;
                rb.give(x, gx)?;
            }
            Ok(())
        }
        Op::ScatterAdd { axis } => {
            if rb.wants(node, 0) {
                rb.give(x, g)?;
            }
            if rb.wants(node, 2) {
                let gu = rb.op(Op::Gather { axis: *axis }, vec![g, node.inputs[1]])?;
                rb.give(node.inputs[2], gu)?;
            }
            Ok(())
        }
        other => unreachable!("movement::vjp got {}", other.name()),
    }
}

/// The adjoint of `narrow(x, axis, start, len)`: `g` placed back at `start` with
/// zeros around it. A pad when the axis is static; a scatter-add into zeros when it
/// is dynamic (a pad's size must be static).
fn unnarrow(
    rb: &mut ReverseBuilder,
    x: NodeId,
    g: NodeId,
    axis: usize,
    start: usize,
    len: usize,
) -> IrResult<NodeId> {
    match rb.dims(x)[axis] {
        Dim::Static(n) => {
            if n == len {
                return Ok(g);
            }
            rb.op(
                Op::Pad {
                    axis,
                    before: start,
                    after: n - start - len,
                    value: 0.0,
                },
                vec![g],
            )
        }
        Dim::Dynamic(_) => {
            let dt = rb.dtype(x);
            let zeros = rb.fill_like(0.0, x, dt)?;
            let idx: Vec<i64> = (start as i64..(start + len) as i64).collect();
            let idx = rb.constant(TensorData::from_i64_as(DType::I64, &[len], &idx));
            rb.op(Op::ScatterAdd { axis }, vec![zeros, idx, g])
        }
    }
}

/// Each operand of a concat gets its slab of the cotangent.
fn concat(rb: &mut ReverseBuilder, node: &Node, axis: usize, g: NodeId) -> IrResult<()> {
    let sizes: Vec<Dim> = node.inputs.iter().map(|&i| rb.dims(i)[axis]).collect();
    let all_static = sizes.iter().all(|d| d.is_static());
    let mut offset = 0;
    for (k, (&inp, &size)) in node.inputs.iter().zip(&sizes).enumerate() {
        let want = rb.wants(node, k);
        match size {
            Dim::Static(n) if all_static => {
                if want {
                    let slab = if n == sizes.iter().map(|d| d.unwrap_static()).sum::<usize>() {
                        g
                    } else {
                        rb.op(
                            Op::Narrow {
                                axis,
                                start: offset,
                                len: n,
                            },
                            vec![g],
                        )?
                    };
                    rb.give(inp, slab)?;
                }
                offset += n;
            }
            // Shape inference allows a dynamic concat axis only when every other
            // piece is empty, so the dynamic piece is the whole cotangent.
            Dim::Dynamic(_) if sizes.iter().filter(|d| **d != Dim::Static(0)).count() == 1 => {
                if want {
                    rb.give(inp, g)?;
                }
            }
            Dim::Static(0) => {}
            _ => {
                return Err(IrError::new(
                    "concat",
                    format!(
                        "cannot split the cotangent of a concat along axis {axis} with sizes {}; make the concat axis static",
                        dims_str(&sizes)
                    ),
                ));
            }
        }
    }
    Ok(())
}
