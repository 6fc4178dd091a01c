//! JVP of `scan`: the carry and its tangent travel together, stacked along a new
//! leading axis of size 2, through a body that computes both.
//!
//! The new body reads `carry` (`[2, …]`: value, tangent), the original broadcasts and
//! slices, and one extra broadcast / slice input per operand that has a tangent
//! (`bcast_{nb+j}`, `x_{nx+j}`); it runs the original body on the value and
//! [`super::append_jvp`] of it on the tangent, and stacks the two results again.
//! With `save_trajectory` the tangent trajectory is the second row of every step.

use super::emit::Emitter;
use super::{ForwardBuilder, append_jvp, carries_tangent};
use crate::build::Build;
use rlx_ir::{Graph, IrResult, Node, NodeId, Op};

pub(super) fn rule(f: &mut ForwardBuilder, node: &Node) -> IrResult<Option<NodeId>> {
    let Op::Scan {
        body,
        length,
        save_trajectory,
        num_bcast,
        num_xs,
        num_checkpoints,
    } = &node.op
    else {
        unreachable!("scan::rule got {}", node.op.name())
    };
    let (nb, nx) = (*num_bcast as usize, *num_xs as usize);
    let init = node.inputs[0];
    let bcasts = &node.inputs[1..1 + nb];
    let xs = &node.inputs[1 + nb..];
    if !carries_tangent(f.e.dtype(init)) {
        return Ok(None);
    }
    // Which broadcasts and slices feed a tangent (by position).
    let tb: Vec<(usize, NodeId)> = (0..nb)
        .filter_map(|i| f.tangent(bcasts[i]).map(|t| (i, t)))
        .collect();
    let tx: Vec<(usize, NodeId)> = (0..nx)
        .filter_map(|i| f.tangent(xs[i]).map(|t| (i, t)))
        .collect();
    let new_body = tangent_body(body, nb, nx, &tb, &tx)?;

    let t_init = match f.tangent(init) {
        Some(t) => t,
        None => f.e.zeros_like(init)?,
    };
    let e = &mut f.e;
    let stacked = stack2(e, init, t_init)?;
    let mut inputs = vec![stacked];
    inputs.extend_from_slice(bcasts);
    inputs.extend(tb.iter().map(|(_, t)| *t));
    inputs.extend_from_slice(xs);
    inputs.extend(tx.iter().map(|(_, t)| *t));
    let out = e.op(
        Op::Scan {
            body: Box::new(new_body),
            length: *length,
            save_trajectory: *save_trajectory,
            num_bcast: (nb + tb.len()) as u32,
            num_xs: (nx + tx.len()) as u32,
            num_checkpoints: *num_checkpoints,
        },
        inputs,
    )?;
    // The tangent is row 1 of the stacked carry (of every step, with a trajectory).
    let axis = if *save_trajectory { 1 } else { 0 };
    Ok(Some(e.take_index(out, axis, 1)?))
}

/// `[a, b]` stacked along a new leading axis.
fn stack2(e: &mut Emitter, a: NodeId, b: NodeId) -> IrResult<NodeId> {
    let a = e.unsqueeze(a, 0)?;
    let b = e.unsqueeze(b, 0)?;
    e.concat(vec![a, b], 0)
}

/// The body of the tangent scan (see the module docs).
fn tangent_body(
    body: &Graph,
    nb: usize,
    nx: usize,
    tb: &[(usize, NodeId)],
    tx: &[(usize, NodeId)],
) -> IrResult<Graph> {
    let out = body.outputs[0];
    let carry_shape = body.shape(out).clone();
    let mut g = Graph::new(format!("{}_jvp", body.name));
    let mut stacked_dims = vec![rlx_ir::Dim::Static(2)];
    stacked_dims.extend_from_slice(carry_shape.dims());
    let carry = g.input("carry", carry_shape.with_dims(stacked_dims));
    let (c, tc) = {
        let mut e = Emitter::new(&mut g, "jvp");
        (e.take_index(carry, 0, 0)?, e.take_index(carry, 0, 1)?)
    };
    // Copy the body, reading the value half of the stacked carry for `carry`.
    let mut map: Vec<NodeId> = Vec::with_capacity(body.len());
    let mut bcast_ids = vec![None; nb];
    let mut x_ids = vec![None; nx];
    for n in body.nodes() {
        let id = match &n.op {
            Op::Input { name } if name == "carry" => c,
            Op::Input { name } => {
                let id = g.input(name.clone(), n.shape.clone());
                if let Some(i) = index_of(name, "bcast_").filter(|&i| i < nb) {
                    bcast_ids[i] = Some(id);
                }
                if let Some(i) = index_of(name, "x_").filter(|&i| i < nx) {
                    x_ids[i] = Some(id);
                }
                id
            }
            op => {
                let inputs = n.inputs.iter().map(|i| map[i.index()]).collect();
                g.append_node(op.clone(), inputs, n.shape.clone(), n.name.clone())
            }
        };
        map.push(id);
    }
    let mut seeds = vec![(c, tc)];
    for (j, &(i, _)) in tb.iter().enumerate() {
        let primal = bcast_ids[i];
        let shape = match primal {
            Some(p) => g.shape(p).clone(),
            None => continue,
        };
        let t = g.input(format!("bcast_{}", nb + j), shape);
        seeds.push((primal.expect("checked"), t));
    }
    for (j, &(i, _)) in tx.iter().enumerate() {
        let primal = x_ids[i];
        let shape = match primal {
            Some(p) => g.shape(p).clone(),
            None => continue,
        };
        let t = g.input(format!("x_{}", nx + j), shape);
        seeds.push((primal.expect("checked"), t));
    }
    let value = map[out.index()];
    let t = append_jvp(&mut g, &seeds, &[value])?[0];
    let mut e = Emitter::new(&mut g, "jvp");
    let t = match t {
        Some(t) => t,
        None => e.zeros_like(value)?,
    };
    let next = stack2(&mut e, value, t)?;
    g.set_outputs(vec![next]);
    Ok(g)
}

/// `i` when `name` is `prefix` followed by the canonical decimal `i`.
fn index_of(name: &str, prefix: &str) -> Option<usize> {
    let rest = name.strip_prefix(prefix)?;
    let canonical = !rest.is_empty()
        && rest.bytes().all(|c| c.is_ascii_digit())
        && (rest == "0" || !rest.starts_with('0'));
    canonical.then(|| rest.parse().ok()).flatten()
}
