//! Turning a (shared, possibly large) graph into the exact program to compile:
//! the live cone of the requested outputs, with already-computed nodes and large
//! constants lifted into arguments, plus a structural cache key.

mod key;

use crate::Device;
use key::{
    KeyHasher, combine, hash_bytes, hash_graph, hash_input_op, hash_node, hash_op, hash_outputs,
};
use rlx_ir::{Graph, NodeId, Op};
use std::borrow::Cow;
use std::cell::RefCell;
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

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

/// The name of lifted argument `i` in a prepared graph (`__arg{i}`), without allocating
/// for the first 64.
///
/// ```
/// assert_eq!(rlx_runtime::lifted_arg_name(3), "__arg3");
/// assert_eq!(rlx_runtime::lifted_arg_name(100), "__arg100");
/// ```
pub fn lifted_arg_name(i: usize) -> Cow<'static, str> {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    let names = NAMES.get_or_init(|| (0..64).map(|i| format!("__arg{i}")).collect());
    match names.get(i) {
        Some(n) => Cow::Borrowed(n.as_str()),
        None => Cow::Owned(format!("__arg{i}")),
    }
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

/// The cache keys and lifted arguments of the program [`prepare`] would extract,
/// computed without building it: the per-evaluation work of a cache hit. Argument `i`
/// of the program is named [`lifted_arg_name`]`(i)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedKeys {
    /// Equal to [`Prepared::key`].
    pub key: u64,
    /// Equal to [`Prepared::structure_key`].
    pub structure_key: u64,
    /// The sources of the lifted arguments, in argument order.
    pub lifted: Vec<Lifted>,
}

/// Per-thread buffers of the cone walk, reused across evaluations (no allocation per
/// call once they have grown to the graph size).
#[derive(Default)]
struct Scratch {
    /// Per source node: [`DEAD`], [`LIVE`] or [`CUT`].
    state: Vec<u8>,
    /// Per live source node: its id in the extracted graph.
    map: Vec<u32>,
    stack: Vec<NodeId>,
}

const DEAD: u8 = 0;
const LIVE: u8 = 1;
const CUT: u8 = 2;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Run `f` with this thread's scratch buffers (fresh ones if they are in use: an
/// `is_realized` callback that prepares another graph).
fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => f(&mut s),
        Err(_) => f(&mut Scratch::default()),
    })
}

impl Scratch {
    /// Mark the live cone of `outputs`, cut at realized interior nodes.
    fn walk(&mut self, src: &Graph, outputs: &[NodeId], is_realized: &dyn Fn(NodeId) -> bool) {
        self.state.clear();
        self.state.resize(src.len(), DEAD);
        self.map.clear();
        self.map.resize(src.len(), u32::MAX);
        self.stack.clear();
        self.stack.extend_from_slice(outputs);
        while let Some(n) = self.stack.pop() {
            if self.state[n.index()] != DEAD {
                continue;
            }
            if !outputs.contains(&n) && is_realized(n) {
                self.state[n.index()] = CUT;
                continue;
            }
            self.state[n.index()] = LIVE;
            self.stack.extend(src.node(n).inputs.iter().copied());
        }
    }
}

/// How a live node enters the extracted program.
enum Role<'a> {
    /// Copied with its op.
    Kept,
    /// Lifted into an argument; `Some(payload)` when the payload belongs to the key.
    Lifted(Lifted, Option<&'a [u8]>),
}

fn role(node: &rlx_ir::Node, state: u8) -> Role<'_> {
    if state == CUT {
        return Role::Lifted(Lifted::Realized(node.id), None);
    }
    if let Op::Constant { data } = &node.op
        && let Some(n) = node.shape.num_elements()
        && n > BAKE_MAX_ELEMENTS
    {
        let keyed = (n <= LIFT_THRESHOLD_ELEMENTS).then_some(data.as_slice());
        return Role::Lifted(Lifted::Constant(node.id), keyed);
    }
    Role::Kept
}

/// The keys of the cone of `outputs` in `src` (see [`prepare`], which returns the same
/// keys with the extracted graph). Hashes the source nodes in place, remapping ids as
/// extraction would: nothing is cloned, formatted or (after the first call on a
/// thread) allocated except the lifted list.
pub fn prepare_keys(
    src: &Graph,
    outputs: &[NodeId],
    is_realized: &dyn Fn(NodeId) -> bool,
    device: Device,
) -> PreparedKeys {
    let mut lifted = Vec::new();
    let (key, structure_key) = prepare_keys_into(src, outputs, is_realized, device, &mut lifted);
    PreparedKeys {
        key,
        structure_key,
        lifted,
    }
}

/// [`prepare_keys`] writing the lifted arguments into `lifted` (cleared first) and
/// returning `(key, structure_key)`: a caller that keeps `lifted` between evaluations
/// allocates nothing per call.
pub fn prepare_keys_into(
    src: &Graph,
    outputs: &[NodeId],
    is_realized: &dyn Fn(NodeId) -> bool,
    device: Device,
    lifted: &mut Vec<Lifted>,
) -> (u64, u64) {
    lifted.clear();
    with_scratch(|s| {
        s.walk(src, outputs, is_realized);
        let mut h = KeyHasher::default();
        device.hash(&mut h);
        hash_bytes(src.name.as_bytes(), &mut h);
        let mut payloads = KeyHasher::default();
        let mut next = 0u32;
        for node in src.nodes() {
            let state = s.state[node.id.index()];
            if state == DEAD {
                continue;
            }
            match role(node, state) {
                Role::Lifted(from, keyed) => {
                    if let Some(data) = keyed {
                        payloads.write_usize(lifted.len());
                        hash_bytes(data, &mut payloads);
                    }
                    let name = lifted_arg_name(lifted.len());
                    hash_node(
                        &mut h,
                        next,
                        |h| hash_input_op(&name, h),
                        std::iter::empty(),
                        &node.shape,
                    );
                    lifted.push(from);
                }
                Role::Kept => {
                    let map = &s.map;
                    hash_node(
                        &mut h,
                        next,
                        |h| hash_op(&node.op, h),
                        node.inputs.iter().map(|i| map[i.index()]),
                        &node.shape,
                    );
                }
            }
            s.map[node.id.index()] = next;
            next += 1;
        }
        hash_outputs(outputs.iter().map(|o| s.map[o.index()]), &mut h);
        let structure_key = h.finish();
        (combine(payloads.finish(), structure_key), structure_key)
    })
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
    // A span only (no clock read).
    let _span =
        tracing::trace_span!(target: "rlx::compile", "prepare", graph = %src.name).entered();
    with_scratch(|s| {
        s.walk(src, outputs, is_realized);
        let mut g = Graph::new(src.name.clone());
        let mut lifted = Vec::new();
        // The payloads of lifted constants that still belong to the key (API.md §6.2).
        let mut payloads = KeyHasher::default();
        for node in src.nodes() {
            let state = s.state[node.id.index()];
            if state == DEAD {
                continue;
            }
            let new_id = match role(node, state) {
                Role::Lifted(from, keyed) => {
                    if let Some(data) = keyed {
                        payloads.write_usize(lifted.len());
                        hash_bytes(data, &mut payloads);
                    }
                    let name = lifted_arg_name(lifted.len()).into_owned();
                    lifted.push((name.clone(), from));
                    g.input(name, node.shape.clone())
                }
                Role::Kept => {
                    let inputs = node
                        .inputs
                        .iter()
                        .map(|i| NodeId(s.map[i.index()]))
                        .collect();
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
                }
            };
            s.map[node.id.index()] = new_id.0;
        }
        g.set_outputs(outputs.iter().map(|o| NodeId(s.map[o.index()])).collect());
        let structure_key = graph_key(&g, device);
        let keyed_payloads = payloads.finish();
        Prepared {
            graph: g,
            key: combine(keyed_payloads, structure_key),
            structure_key,
            lifted,
            keyed_payloads,
        }
    })
}

/// The structural key of `graph` on `device` (outputs included).
pub fn graph_key(graph: &Graph, device: Device) -> u64 {
    let mut h = KeyHasher::default();
    device.hash(&mut h);
    hash_graph(graph, &mut h);
    h.finish()
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

    /// Keys from `prepare_keys` (hashed in place) agree with `prepare` (hashed from the
    /// extracted graph), including lifted constants, baked scalars and realized cuts.
    #[test]
    fn keys_hashed_in_place_equal_the_keys_of_the_extracted_graph() {
        let mut g = Graph::new("g");
        let a = g.input("a", Shape::new(&[3], DType::F32));
        let big = constant(&mut g, &[0.5; 100]);
        let small = constant(&mut g, &[1.0, 2.0, 3.0]);
        let scalar = constant(&mut g, &[4.0]);
        let r = g.add_op(Op::Activation(Activation::Relu), vec![a]).unwrap();
        let s = g.add_op(Op::Binary(BinaryOp::Add), vec![r, small]).unwrap();
        let t = g
            .add_op(Op::Binary(BinaryOp::Mul), vec![s, scalar])
            .unwrap();
        let flat = g
            .add_op(
                Op::Reduce {
                    op: rlx_ir::ReduceOp::Sum,
                    axes: vec![0],
                    keep_dim: true,
                },
                vec![big],
            )
            .unwrap();
        let u = g.add_op(Op::Binary(BinaryOp::Add), vec![t, flat]).unwrap();
        for realized in [None, Some(r), Some(s)] {
            for device in [Device::Cpu, Device::Cuda] {
                let is_realized = |n: NodeId| Some(n) == realized;
                let p = prepare(&g, &[u], &is_realized, device);
                let k = prepare_keys(&g, &[u], &is_realized, device);
                assert_eq!((k.key, k.structure_key), (p.key, p.structure_key));
                assert_eq!(p.structure_key, graph_key(&p.graph, device));
                let names: Vec<String> = (0..k.lifted.len())
                    .map(|i| lifted_arg_name(i).into_owned())
                    .collect();
                let lifted: Vec<(String, Lifted)> = names.into_iter().zip(k.lifted).collect();
                assert_eq!(lifted, p.lifted);
            }
        }
    }

    /// Ops are hashed by their attributes: graphs that differ in one attribute (an
    /// integer, a float, the sign of a zero, a list) get different keys.
    #[test]
    fn graphs_differing_only_in_one_op_attribute_get_different_keys() {
        let key_of = |op: Op| {
            let mut g = Graph::new("g");
            let a = g.input("a", Shape::new(&[2, 4], DType::F32));
            let r = g.add_op(op, vec![a]).unwrap();
            let k = prepare_keys(&g, &[r], &|_| false, Device::Cpu);
            assert_eq!(k.key, prepare(&g, &[r], &|_| false, Device::Cpu).key);
            k.key
        };
        let pad = |value: f64| Op::Pad {
            axis: 1,
            before: 1,
            after: 0,
            value,
        };
        assert_ne!(
            key_of(Op::Softmax { axis: 0 }),
            key_of(Op::Softmax { axis: 1 })
        );
        assert_ne!(
            key_of(Op::Softmax { axis: 1 }),
            key_of(Op::LogSoftmax { axis: 1 })
        );
        assert_ne!(key_of(pad(0.0)), key_of(pad(1.0)));
        assert_ne!(key_of(pad(0.0)), key_of(pad(-0.0)));
        assert_eq!(key_of(pad(2.5)), key_of(pad(2.5)));
        let reduce = |axes: Vec<usize>, keep_dim| Op::Reduce {
            op: rlx_ir::ReduceOp::Sum,
            axes,
            keep_dim,
        };
        assert_ne!(
            key_of(reduce(vec![0], false)),
            key_of(reduce(vec![1], false))
        );
        assert_ne!(
            key_of(reduce(vec![1], false)),
            key_of(reduce(vec![1], true))
        );
        assert_ne!(
            key_of(reduce(vec![0], false)),
            key_of(reduce(vec![0, 1], false))
        );
        let round = |max_normal| Op::RoundToFormat {
            exp_bits: 4,
            man_bits: 3,
            max_normal,
        };
        assert_ne!(key_of(round(448.0)), key_of(round(240.0)));
        assert_ne!(
            key_of(Op::Reshape { new_shape: vec![8] }),
            key_of(Op::Reshape {
                new_shape: vec![-1]
            })
        );
        assert_ne!(
            key_of(Op::Activation(Activation::Relu)),
            key_of(Op::Activation(Activation::Exp))
        );
        assert_ne!(
            key_of(Op::Cast { to: DType::F64 }),
            key_of(Op::Cast { to: DType::I32 })
        );
    }

    /// Input names are part of the key (two graphs reading different inputs are
    /// different programs), and so is the graph name.
    #[test]
    fn input_names_and_graph_names_are_keyed() {
        let key_of = |graph: &str, input: &str| {
            let mut g = Graph::new(graph);
            let a = g.input(input, Shape::new(&[3], DType::F32));
            let r = g.add_op(Op::Activation(Activation::Relu), vec![a]).unwrap();
            prepare_keys(&g, &[r], &|_| false, Device::Cpu).key
        };
        assert_ne!(key_of("g", "x"), key_of("g", "y"));
        assert_ne!(key_of("g", "x"), key_of("h", "x"));
        assert_eq!(key_of("g", "x"), key_of("g", "x"));
    }
}
