//! `simplify`: dead-code elimination, common-subexpression elimination, folding of
//! small constants and algebraic identities. Graph → graph; the result computes the
//! same outputs (bit for bit, including signed zeros and NaN propagation).

mod identities;
mod slabs;

use crate::rebuild::Rebuild;
use rlx_ir::{Graph, NodeId, Op, Shape, TensorData, interp};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Constants with at most this many elements are folded and keyed by value.
pub const FOLD_LIMIT: usize = 64;

/// Simplify `g`: keep only what the outputs need, merge identical nodes, fold
/// small constant subexpressions and apply identities (`x·1`, `x−0`, `−(−x)`,
/// reshape∘reshape, transpose∘transpose, no-op casts/views, `stop_gradient`).
///
/// Inputs and params that no output depends on are dropped.
pub fn simplify(g: &Graph) -> Graph {
    let live = live_nodes(g);
    let mut rb = Rebuild::new(g);
    let mut cse: HashMap<u64, Vec<NodeId>> = HashMap::new();
    for node in g.nodes() {
        if !live[node.id.index()] {
            continue;
        }
        let inputs: Vec<NodeId> = node.inputs.iter().map(|&i| rb.map(i)).collect();
        // Identities that forward an existing node.
        if let Some(same) = identities::forward(&rb.g, &node.op, &inputs, &node.shape) {
            rb.set(node.id, same);
            continue;
        }
        let (op, inputs) =
            match slabs::merge_padded_add(&mut rb.g, &mut cse, &node.op, &inputs, &node.shape) {
                Some(merged) => merged,
                None => identities::rewrite(&rb.g, node.op.clone(), inputs),
            };
        if let Some(same) = identities::forward(&rb.g, &op, &inputs, &node.shape) {
            rb.set(node.id, same);
            continue;
        }
        if let Some(folded) = fold(&rb.g, &op, &inputs, &node.shape) {
            let id = intern(
                &mut rb.g,
                &mut cse,
                Op::Constant { data: folded },
                vec![],
                node.shape.clone(),
                None,
            );
            rb.set(node.id, id);
            continue;
        }
        let id = intern(
            &mut rb.g,
            &mut cse,
            op,
            inputs,
            node.shape.clone(),
            node.name.clone(),
        );
        if let Some(o) = node.origin {
            rb.g.set_origin(id, o);
        }
        rb.set(node.id, id);
    }
    dce(rb.finish())
}

/// Drop the nodes no output depends on (rewrites above can orphan nodes).
fn dce(g: Graph) -> Graph {
    let live = live_nodes(&g);
    if live.iter().all(|&l| l) {
        return g;
    }
    let mut rb = Rebuild::new(&g);
    for node in g.nodes() {
        if live[node.id.index()] {
            let inputs = node.inputs.iter().map(|&i| rb.map(i)).collect();
            let id = rb.g.append_node(
                node.op.clone(),
                inputs,
                node.shape.clone(),
                node.name.clone(),
            );
            if let Some(o) = node.origin {
                rb.g.set_origin(id, o);
            }
            rb.set(node.id, id);
        }
    }
    rb.finish()
}

/// Which nodes the outputs depend on.
pub(crate) fn live_nodes(g: &Graph) -> Vec<bool> {
    g.live_nodes()
}

/// Add `op(inputs)` unless an identical node exists (leaf inputs/params are unique by
/// name already; `Scan` bodies are never merged).
fn intern(
    g: &mut Graph,
    cse: &mut HashMap<u64, Vec<NodeId>>,
    op: Op,
    inputs: Vec<NodeId>,
    shape: Shape,
    name: Option<String>,
) -> NodeId {
    if matches!(op, Op::Scan { .. }) {
        return g.append_node(op, inputs, shape, name);
    }
    let key = op_key(&op, &inputs, &shape);
    if let Some(cands) = cse.get(&key) {
        for &c in cands {
            let n = g.node(c);
            if n.op == op && n.inputs == inputs && n.shape == shape {
                return c;
            }
        }
    }
    let id = g.append_node(op, inputs, shape, name);
    cse.entry(key).or_default().push(id);
    id
}

/// A structural hash of a node (constant payloads by value).
pub(crate) fn op_key(op: &Op, inputs: &[NodeId], shape: &Shape) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    // The common elementwise ops hash their fields directly (formatting every node's
    // op dominated simplifying a long chain); the rest hash their debug form.
    match op {
        Op::Constant { data } => {
            0u8.hash(&mut h);
            data.hash(&mut h);
        }
        Op::Activation(a) => (2u8, a).hash(&mut h),
        Op::Binary(b) => (3u8, b).hash(&mut h),
        Op::Compare(c) => (4u8, c).hash(&mut h),
        Op::Cast { to } => (5u8, to).hash(&mut h),
        Op::Where => 6u8.hash(&mut h),
        op => {
            1u8.hash(&mut h);
            format!("{op:?}").hash(&mut h);
        }
    }
    inputs.hash(&mut h);
    shape.hash(&mut h);
    h.finish()
}

/// The payload of `op(inputs)` when every input is a small constant and the op is a
/// pure elementwise, movement or reduction op with a small static result.
fn fold(g: &Graph, op: &Op, inputs: &[NodeId], shape: &Shape) -> Option<Vec<u8>> {
    if inputs.is_empty()
        || !(op.is_elementwise() || op.is_movement() || matches!(op, Op::Reduce { .. }))
    {
        return None;
    }
    let n = shape.num_elements()?;
    if n > FOLD_LIMIT || shape.dtype().is_complex() {
        return None;
    }
    let mut datas = Vec::with_capacity(inputs.len());
    for &i in inputs {
        let node = g.node(i);
        let Op::Constant { data } = &node.op else {
            return None;
        };
        let dims = node.shape.static_dims()?;
        if dims.iter().product::<usize>() > FOLD_LIMIT {
            return None;
        }
        datas.push(TensorData::new(node.shape.dtype(), &dims, data.clone()).ok()?);
    }
    let refs: Vec<&TensorData> = datas.iter().collect();
    // An error (say an integer division by zero) is left for run time to report.
    interp::eval_op(op, &refs, shape).ok().map(|d| d.bytes)
}

#[cfg(test)]
mod tests;
