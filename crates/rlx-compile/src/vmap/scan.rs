//! Batching of `scan`: the body is batched like any graph. The carry is batched when
//! the initial value is, or when the batched body makes the next carry depend on a
//! batched broadcast or slice (then the initial value is broadcast and the body
//! batched again). Batched slices `[B, L, …]` are fed as `[L, B, …]`, so each step
//! reads a batched slice; a saved trajectory `[L, B, …]` is returned as `[B, L, …]`.

use super::{BVal, Batcher, walk};
use crate::build::Build;
use rlx_ir::{Dim, Graph, IrResult, Node, Op};

pub(super) fn rule(bt: &mut Batcher, node: &Node, ins: &[BVal]) -> IrResult<BVal> {
    let Op::Scan {
        body,
        length,
        save_trajectory,
        num_bcast,
        num_xs,
        num_checkpoints,
    } = &node.op
    else {
        unreachable!("vmap scan::rule got {}", node.op.name())
    };
    let nb = *num_bcast as usize;
    let flags: Vec<bool> = ins.iter().map(|v| v.batched).collect();
    let mut carry = ins[0].batched;
    let new_body = loop {
        let (g, next_batched) =
            batch_body(bt.size, body, carry, &flags[1..1 + nb], &flags[1 + nb..])?;
        if next_batched && !carry {
            carry = true;
            continue;
        }
        break g;
    };
    let mut args = Vec::with_capacity(ins.len());
    args.push(if carry { bt.batch(ins[0])? } else { ins[0].id });
    args.extend(ins[1..1 + nb].iter().map(|v| v.id));
    for &v in &ins[1 + nb..] {
        args.push(if v.batched {
            bt.e.move_axis(v.id, 0, 1)?
        } else {
            v.id
        });
    }
    let op = Op::Scan {
        body: Box::new(new_body),
        length: *length,
        save_trajectory: *save_trajectory,
        num_bcast: *num_bcast,
        num_xs: *num_xs,
        num_checkpoints: *num_checkpoints,
    };
    let y = bt.e.op(op, args)?;
    if !carry {
        return Ok(BVal::plain(y));
    }
    if *save_trajectory {
        return Ok(BVal::batched(bt.e.move_axis(y, 1, 0)?));
    }
    Ok(BVal::batched(y))
}

/// The body batched with the given flags for `carry`, `bcast_i` and `x_i`; also
/// whether its output (the next carry) depends on a batched input.
fn batch_body(
    size: usize,
    body: &Graph,
    carry: bool,
    bcasts: &[bool],
    xs: &[bool],
) -> IrResult<(Graph, bool)> {
    let mut g = Graph::new(body.name.clone());
    let mut bt = Batcher::new(&mut g, size);
    let vals = walk(&mut bt, body, |bt, node| {
        let batched = match &node.op {
            Op::Input { name } if name == "carry" => carry,
            Op::Input { name } => {
                if let Some(i) = name
                    .strip_prefix("bcast_")
                    .and_then(|s| s.parse::<usize>().ok())
                {
                    bcasts.get(i).copied().unwrap_or(false)
                } else if let Some(i) = name
                    .strip_prefix("x_")
                    .and_then(|s| s.parse::<usize>().ok())
                {
                    xs.get(i).copied().unwrap_or(false)
                } else {
                    false
                }
            }
            _ => false,
        };
        let shape = if batched {
            let mut dims = vec![Dim::Static(size)];
            dims.extend_from_slice(node.shape.dims());
            node.shape.with_dims(dims)
        } else {
            node.shape.clone()
        };
        let id =
            bt.e.g
                .append_node(node.op.clone(), vec![], shape, node.name.clone());
        Ok(BVal { id, batched })
    })?;
    let out = vals[body.outputs[0].index()];
    let next = if carry { bt.batch(out)? } else { out.id };
    g.set_outputs(vec![next]);
    Ok((g, out.batched))
}
