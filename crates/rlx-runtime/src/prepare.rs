//! Turning a (shared, possibly large) graph into the exact program to compile:
//! the live cone of the requested outputs, with already-computed nodes and large
//! constants lifted into arguments, plus a structural cache key.

use crate::Device;
use rlx_ir::{Graph, NodeId, Op};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Constants with more elements than this are not part of the cache key (API.md,
/// Deliberate deviation 2): new data of the same shape hits the cache.
pub const LIFT_THRESHOLD_ELEMENTS: usize = 64;

/// Constants with at most this many elements (scalars) are baked into the program, where
/// the compiler folds them; larger ones are passed as arguments. Constants of up to
/// [`LIFT_THRESHOLD_ELEMENTS`] elements are still keyed by value (API.md §6.2: graphs
/// that differ only in such data miss), but the program compiled for them is reused
/// through [`Prepared::structure_key`] — eager code with new small data each call never
/// recompiles.
pub const BAKE_MAX_ELEMENTS: usize = 1;

/// Where a lifted argument's data comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifted {
    /// The payload of this `Op::Constant` node of the source graph.
    Constant(NodeId),
    /// The already-computed value of this node of the source graph.
    Realized(NodeId),
}

/// The program to compile for some outputs of a source graph.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The extracted graph (dense ids; lifted nodes are `Op::Input`s named `__argN`).
    pub graph: Graph,
    /// Cache key (API.md §6.2): device, graph name, ops, shapes, outputs, and the
    /// values of constants of up to [`LIFT_THRESHOLD_ELEMENTS`] elements.
    pub key: u64,
    /// The key without the values of lifted constants: graphs with equal structure keys
    /// compile to the same program (their lifted data are arguments).
    pub structure_key: u64,
    /// Lifted arguments, `(input name in `graph`, source)`.
    pub lifted: Vec<(String, Lifted)>,
    /// Hash of the lifted constants' payloads that belong to the key.
    keyed_payloads: u64,
}

impl Prepared {
    /// `(key, structure_key)` of the same program on another `device`.
    pub fn keys_on(&self, device: Device) -> (u64, u64) {
        let structure_key = graph_key(&self.graph, device);
        (combine(self.keyed_payloads, structure_key), structure_key)
    }
}

fn combine(keyed_payloads: u64, structure_key: u64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (keyed_payloads, structure_key).hash(&mut h);
    h.finish()
}

/// Extract the cone of `outputs` from `src`.
///
/// `is_realized(n)` says whether node `n` already has a value; such nodes (other than
/// the requested outputs themselves) become arguments instead of being recomputed.
pub fn prepare(
    src: &Graph,
    outputs: &[NodeId],
    is_realized: &dyn Fn(NodeId) -> bool,
    device: Device,
) -> Prepared {
    // A span only (no clock read): this runs on every evaluation, cache hits included.
    let _span =
        tracing::trace_span!(target: "rlx::compile", "prepare", graph = %src.name).entered();
    let out_set: Vec<NodeId> = outputs.to_vec();
    // live cone, cut at realized interior nodes
    let mut live = vec![false; src.len()];
    let mut cut = vec![false; src.len()];
    let mut stack: Vec<NodeId> = outputs.to_vec();
    while let Some(n) = stack.pop() {
        if live[n.index()] {
            continue;
        }
        live[n.index()] = true;
        if !out_set.contains(&n) && is_realized(n) {
            cut[n.index()] = true;
            continue;
        }
        stack.extend(src.node(n).inputs.iter().copied());
    }
    let mut g = Graph::new(src.name.clone());
    let mut map: HashMap<NodeId, NodeId> = HashMap::new();
    let mut lifted = Vec::new();
    // The payloads of lifted constants that still belong to the key (API.md §6.2).
    let mut keyed_payloads = std::collections::hash_map::DefaultHasher::new();
    for node in src.nodes() {
        if !live[node.id.index()] {
            continue;
        }
        let lifted_const = match &node.op {
            Op::Constant { data } => match node.shape.num_elements() {
                Some(n) if n > BAKE_MAX_ELEMENTS => {
                    if n <= LIFT_THRESHOLD_ELEMENTS {
                        (lifted.len(), data).hash(&mut keyed_payloads);
                    }
                    true
                }
                _ => false,
            },
            _ => false,
        };
        let new_id = if cut[node.id.index()] || lifted_const {
            let name = format!("__arg{}", lifted.len());
            lifted.push((
                name.clone(),
                if cut[node.id.index()] {
                    Lifted::Realized(node.id)
                } else {
                    Lifted::Constant(node.id)
                },
            ));
            g.input(name, node.shape.clone())
        } else {
            let inputs = node.inputs.iter().map(|i| map[i]).collect();
            let id = g.append_node(
                node.op.clone(),
                inputs,
                node.shape.clone(),
                node.name.clone(),
            );
            if let Some(o) = node.origin {
                g.set_origin(id, o);
            }
            id
        };
        map.insert(node.id, new_id);
    }
    g.set_outputs(outputs.iter().map(|o| map[o]).collect());
    let structure_key = graph_key(&g, device);
    let keyed_payloads = keyed_payloads.finish();
    Prepared {
        graph: g,
        key: combine(keyed_payloads, structure_key),
        structure_key,
        lifted,
        keyed_payloads,
    }
}

/// The structural key of `graph` on `device` (outputs included).
pub fn graph_key(graph: &Graph, device: Device) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    device.hash(&mut h);
    hash_graph(graph, &mut h);
    h.finish()
}

fn hash_graph(graph: &Graph, h: &mut impl Hasher) {
    graph.name.hash(h);
    let mut buf = String::new();
    for n in graph.nodes() {
        n.id.hash(h);
        match &n.op {
            Op::Constant { data } => {
                0u8.hash(h);
                data.hash(h);
            }
            Op::Scan {
                body,
                length,
                save_trajectory,
                num_bcast,
                num_xs,
                num_checkpoints,
            } => {
                1u8.hash(h);
                hash_graph(body, h);
                (length, save_trajectory, num_bcast, num_xs, num_checkpoints).hash(h);
            }
            op => {
                use std::fmt::Write;
                buf.clear();
                let _ = write!(buf, "{op:?}");
                buf.hash(h);
            }
        }
        n.inputs.hash(h);
        n.shape.hash(h);
    }
    graph.outputs.hash(h);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{Activation, BinaryOp, DType, Shape, TensorData};

    fn constant(g: &mut Graph, vals: &[f32]) -> NodeId {
        let d = TensorData::from_f32(&[vals.len()], vals);
        let shape = d.shape();
        g.add_node(Op::Constant { data: d.bytes }, vec![], shape)
    }

    #[test]
    fn dead_nodes_do_not_change_the_key() {
        let mut g = Graph::new("g");
        let a = g.input("a", Shape::new(&[3], DType::F32));
        let r = g.add_op(Op::Activation(Activation::Relu), vec![a]).unwrap();
        let k1 = prepare(&g, &[r], &|_| false, Device::Cpu).key;
        g.add_op(Op::Activation(Activation::Exp), vec![a]).unwrap();
        let k2 = prepare(&g, &[r], &|_| false, Device::Cpu).key;
        assert_eq!(k1, k2);
        assert_ne!(k1, prepare(&g, &[r], &|_| false, Device::Cuda).key);
    }

    #[test]
    fn large_constants_are_lifted_and_small_ones_are_keyed_by_value() {
        let mk = |v: f32, n: usize| {
            let mut g = Graph::new("g");
            let c = constant(&mut g, &vec![v; n]);
            let r = g.add_op(Op::Activation(Activation::Relu), vec![c]).unwrap();
            prepare(&g, &[r], &|_| false, Device::Cpu)
        };
        assert_eq!(mk(1.0, 100).key, mk(2.0, 100).key);
        assert_eq!(
            mk(1.0, 100).lifted,
            vec![("__arg0".to_string(), Lifted::Constant(NodeId(0)))]
        );
        assert_ne!(mk(1.0, 3).key, mk(2.0, 3).key);
        assert_eq!(
            mk(1.0, 3).structure_key,
            mk(2.0, 3).structure_key,
            "small data is keyed by value but compiles to one program"
        );
        assert_eq!(mk(1.0, 3).lifted.len(), 1);
        assert_ne!(mk(1.0, 1).key, mk(2.0, 1).key);
        assert_ne!(mk(1.0, 1).structure_key, mk(2.0, 1).structure_key);
        assert!(mk(1.0, 1).lifted.is_empty(), "scalars are baked");
        assert_ne!(mk(1.0, 3).key, mk(1.0, 4).key);
        assert_ne!(mk(1.0, 3).structure_key, mk(1.0, 4).structure_key);
        let p = mk(1.0, 3);
        assert_eq!(p.keys_on(Device::Cpu), (p.key, p.structure_key));
        assert_ne!(
            p.keys_on(Device::Cuda).0,
            mk(2.0, 3).keys_on(Device::Cuda).0
        );
    }

    #[test]
    fn realized_interior_nodes_are_cut_but_outputs_are_not() {
        let mut g = Graph::new("g");
        let a = g.input("a", Shape::new(&[3], DType::F32));
        let r = g.add_op(Op::Activation(Activation::Relu), vec![a]).unwrap();
        let s = g.add_op(Op::Binary(BinaryOp::Add), vec![r, r]).unwrap();
        let p = prepare(&g, &[s], &|n| n == r, Device::Cpu);
        assert_eq!(p.graph.len(), 2);
        assert_eq!(p.lifted, vec![("__arg0".to_string(), Lifted::Realized(r))]);
        let q = prepare(&g, &[r], &|n| n == r, Device::Cpu);
        assert_eq!(q.graph.len(), 2, "the output itself is never cut");
    }
}
