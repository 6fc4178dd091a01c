//! VJP of [`Op::Scan`] by unrolling.
//!
//! The steps are inlined into the graph (the body's nodes copied once per step, the
//! per-step slices of `xs` taken with a gather), and the unrolled chain is
//! differentiated by a nested [`super::append_vjp`]; the gradients of the per-step
//! slices are stacked back into the gradient of `xs`. The backward graph grows with
//! the scan length — correctness first; a reverse scan would keep it constant.

use super::builder::ReverseBuilder;
use crate::build::Build;
use rlx_ir::{DType, Graph, IrError, IrResult, Node, NodeId, Op};

pub(super) fn vjp(rb: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    let Op::Scan {
        body,
        length,
        save_trajectory,
        num_bcast,
        ..
    } = &node.op
    else {
        unreachable!("scan::vjp got {}", node.op.name())
    };
    let want: Vec<bool> = (0..node.inputs.len()).map(|i| rb.wants(node, i)).collect();
    if !want.iter().any(|w| *w) {
        return Ok(());
    }
    let nb = *num_bcast as usize;
    // Identity proxies cut the nested sweep at the scan's operands, so a path from
    // one operand to another (say a bcast computed from init) is not counted here
    // and again by the enclosing sweep.
    let mut proxy = Vec::with_capacity(node.inputs.len());
    for &i in &node.inputs {
        let dt = rb.dtype(i);
        proxy.push(rb.op(Op::Cast { to: dt }, vec![i])?);
    }
    let (init, bcasts, xs) = (proxy[0], &proxy[1..1 + nb], &proxy[1 + nb..]);
    let mut carry = init;
    let mut slices: Vec<Vec<NodeId>> = Vec::with_capacity(*length as usize);
    let mut steps = Vec::new();
    for t in 0..*length as usize {
        let idx = rb.scalar(t as f64, DType::I64);
        let mut step_x = Vec::with_capacity(xs.len());
        for &x in xs {
            step_x.push(rb.op(Op::Gather { axis: 0 }, vec![x, idx])?);
        }
        carry = inline(rb, body, carry, bcasts, &step_x)?;
        if *save_trajectory {
            steps.push(rb.unsqueeze(carry, 0)?);
        }
        slices.push(step_x);
    }
    let out = match (*save_trajectory, steps.len()) {
        (false, _) => carry,
        // An empty trajectory depends on nothing.
        (true, 0) => return Ok(()),
        (true, 1) => steps[0],
        (true, _) => rb.op(Op::Concat { axis: 0 }, steps)?,
    };
    let mut wrt = Vec::new();
    for (i, &p) in proxy[..1 + nb].iter().enumerate() {
        if want[i] {
            wrt.push(p);
        }
    }
    for (j, _) in xs.iter().enumerate() {
        if want[1 + nb + j] {
            wrt.extend(slices.iter().map(|s| s[j]));
        }
    }
    let grads = super::append_vjp(rb.g, &[out], &[g], &wrt)?;
    let mut grads = grads.into_iter();
    for (i, &inp) in node.inputs[..1 + nb].iter().enumerate() {
        if want[i]
            && let Some(gi) = grads.next().flatten()
        {
            rb.give(inp, gi)?;
        }
    }
    for (j, &xs_in) in node.inputs[1 + nb..].iter().enumerate() {
        if !want[1 + nb + j] {
            continue;
        }
        let per_step: Vec<Option<NodeId>> =
            (0..slices.len()).map(|_| grads.next().flatten()).collect();
        if per_step.iter().all(|s| s.is_none()) {
            continue;
        }
        let mut rows = Vec::with_capacity(per_step.len());
        for (t, s) in per_step.into_iter().enumerate() {
            let gs = match s {
                Some(gs) => gs,
                None => {
                    let dt = rb.dtype(xs_in);
                    rb.fill_like(0.0, slices[t][j], dt)?
                }
            };
            rows.push(rb.unsqueeze(gs, 0)?);
        }
        let gx = if rows.len() == 1 {
            rows[0]
        } else {
            rb.op(Op::Concat { axis: 0 }, rows)?
        };
        rb.give(xs_in, gx)?;
    }
    Ok(())
}

/// Copy the nodes of `body` that its output needs into the graph, binding `carry`,
/// `bcast_i` and `x_i`; returns the copy of the output.
fn inline(
    rb: &mut ReverseBuilder,
    body: &Graph,
    carry: NodeId,
    bcasts: &[NodeId],
    xs: &[NodeId],
) -> IrResult<NodeId> {
    let out = body.outputs[0];
    let mut live = vec![false; body.len()];
    live[out.index()] = true;
    for n in body.nodes().iter().rev() {
        if live[n.id.index()] {
            for i in &n.inputs {
                live[i.index()] = true;
            }
        }
    }
    let mut map: Vec<Option<NodeId>> = vec![None; body.len()];
    for n in body.nodes() {
        if !live[n.id.index()] {
            continue;
        }
        let id = match &n.op {
            Op::Input { name } => bind(name, carry, bcasts, xs).ok_or_else(|| {
                IrError::new(
                    "scan",
                    format!(
                        "the body `{}` reads `{name}`, which the scan does not bind",
                        body.name
                    ),
                )
            })?,
            op => {
                let inputs = n
                    .inputs
                    .iter()
                    .map(|i| map[i.index()].expect("operands precede users"))
                    .collect();
                let id = rb.g.add_node(op.clone(), inputs, n.shape.clone());
                if let Some(o) = n.origin {
                    rb.g.set_origin(id, o);
                }
                id
            }
        };
        map[n.id.index()] = Some(id);
    }
    Ok(map[out.index()].expect("the output is live"))
}

fn bind(name: &str, carry: NodeId, bcasts: &[NodeId], xs: &[NodeId]) -> Option<NodeId> {
    if name == "carry" {
        return Some(carry);
    }
    if let Some(i) = name.strip_prefix("bcast_") {
        return bcasts.get(i.parse::<usize>().ok()?).copied();
    }
    if let Some(i) = name.strip_prefix("x_") {
        return xs.get(i.parse::<usize>().ok()?).copied();
    }
    None
}
