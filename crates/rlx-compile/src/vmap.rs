//! Batching (`vmap`) as a graph → graph transform.
//!
//! [`vmap`] rewrites a per-example graph into one that processes a whole batch: the
//! listed inputs gain a leading batch axis, and every node that depends on them is
//! rewritten by its op's batching rule (one module per op family) so that its value
//! carries the batch on axis 0. Nodes that do not depend on a batched input are
//! copied unchanged — unbatched subgraphs stay unbatched, params and constants are
//! shared — and outputs that do not depend on a batched input are broadcast to the
//! batch at the end. Dynamic dims of the original graph stay dynamic.
//!
//! How the rules batch (per-example semantics are preserved exactly):
//! - element-wise ops, matmul batch axes: the batch axis broadcasts like any other
//!   leading axis (unit axes are inserted after it where per-example ranks differ);
//! - axis-parametrized ops (reductions, softmax, cumsum, narrow, concat, pad,
//!   transpose, reshape, expand, argmax, gather/scatter along a table axis) shift
//!   their axes by one;
//! - gathers/scatters whose indices are batched fold the batch into the indexed axis
//!   (indices offset by `b·n`);
//! - attention and rope fold the batch into the op's own batch axis (into the heads
//!   when that axis is dynamic); convolutions and pooling fold it into the channels
//!   (grouped convolution with `B·groups` groups); fused layers, norms and splines
//!   with batched weights, and per-tensor quantization scales, are split into
//!   primitives that batch by their own rules;
//! - `scan` batches its body (the carry becomes batched when the body makes it so);
//! - where nothing better applies (batched codebook indices or codebooks, per-tensor
//!   quantization codes, scaled matmul, batched rope tables, or folds that a reshape
//!   with several dynamic axes cannot express) the op is *unrolled*: applied to
//!   each example (`narrow` + drop axis), the results concatenated along a new batch
//!   axis. Correct, but the graph grows with the batch size.

mod conv;
mod elementwise;
mod linalg;
mod movement;
mod nn;
mod scan;

use crate::build::{Build, Family, ancestors, family};
use crate::jvp::emit::Emitter;
use rlx_ir::{Dim, Graph, IrError, IrResult, Node, NodeId, Op, Shape};

/// A value of the batched graph: its node, and whether it carries the batch on axis 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BVal {
    pub(crate) id: NodeId,
    pub(crate) batched: bool,
}

impl BVal {
    pub(crate) fn plain(id: NodeId) -> BVal {
        BVal { id, batched: false }
    }

    pub(crate) fn batched(id: NodeId) -> BVal {
        BVal { id, batched: true }
    }
}

/// The state of one batching pass: the emitter on the batched graph and the batch size.
pub(crate) struct Batcher<'g> {
    pub(crate) e: Emitter<'g>,
    pub(crate) size: usize,
}

impl<'g> Batcher<'g> {
    pub(crate) fn new(g: &'g mut Graph, size: usize) -> Batcher<'g> {
        Batcher {
            e: Emitter::new(g, "vmap"),
            size,
        }
    }

    /// `v` with the batch axis materialized (a broadcast when it has none).
    pub(crate) fn batch(&mut self, v: BVal) -> IrResult<NodeId> {
        if v.batched {
            Ok(v.id)
        } else {
            self.e.expand_leading(v.id, Dim::Static(self.size))
        }
    }

    /// The rank of `v` without its batch axis.
    pub(crate) fn ex_rank(&self, v: BVal) -> usize {
        self.e.rank(v.id) - v.batched as usize
    }

    /// The dims of `v` without its batch axis.
    pub(crate) fn ex_dims(&self, v: BVal) -> Vec<Dim> {
        self.e.dims(v.id)[v.batched as usize..].to_vec()
    }

    /// For broadcasting against per-example rank `rank`: a batched value gets unit
    /// axes after its batch axis until its per-example rank is `rank` (right-aligned
    /// broadcasting then lines the batch axes up); an unbatched one is unchanged.
    pub(crate) fn align(&mut self, v: BVal, rank: usize) -> IrResult<NodeId> {
        let mut id = v.id;
        if v.batched {
            for _ in self.ex_rank(v)..rank {
                id = self.e.unsqueeze(id, 1)?;
            }
        }
        Ok(id)
    }

    /// Merge the batch axis (0) into axis 1: `[B, n, …] → [B·n, …]`, when a reshape
    /// can express it.
    pub(crate) fn fold(&mut self, x: NodeId) -> IrResult<Option<NodeId>> {
        let dims = self.e.dims(x);
        let Some(n) = dims[1].as_static() else {
            return Ok(None);
        };
        let mut target = vec![Dim::Static(self.size * n)];
        target.extend_from_slice(&dims[2..]);
        if !self.e.can_reshape(x, &target) {
            return Ok(None);
        }
        Ok(Some(self.e.reshape_to(x, &target)?))
    }

    /// Undo [`Batcher::fold`]: `[B·n, …] → [B, n, …]`.
    pub(crate) fn unfold(&mut self, x: NodeId) -> IrResult<NodeId> {
        let dims = self.e.dims(x);
        let n = dims[0].as_static().expect("folded axes are static") / self.size;
        let mut target = vec![Dim::Static(self.size), Dim::Static(n)];
        target.extend_from_slice(&dims[1..]);
        self.e.reshape_to(x, &target)
    }
}

/// Batch `graph`: every `Op::Input` in `batched` gains a leading axis of
/// `batch_size`; params, constants and the other inputs are shared by every
/// example; every output gains the leading batch axis (outputs that do not depend on
/// a batched input are broadcast). Output `b` of the result equals the original
/// graph's output on example `b`.
///
/// Errors when an entry is not an `Op::Input` of `graph` or is listed twice, when
/// `batch_size` is 0, or when a rule cannot be built (the message names the op).
///
/// ```
/// use rlx_compile::vmap::vmap;
/// use rlx_ir::{interp, DType, Graph, Op, ReduceOp, Shape, TensorData};
/// // f(x) = sum(x), x: [3]
/// let mut g = Graph::new("sum");
/// let x = g.input("x", Shape::new(&[3], DType::F32));
/// let s = g.add_op(Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keep_dim: false }, vec![x]).unwrap();
/// g.set_outputs(vec![s]);
/// let vg = vmap(&g, &[x], 2).unwrap();
/// let xs = TensorData::from_f32(&[2, 3], &[1.0, 2.0, 3.0, 10.0, 20.0, 30.0]);
/// assert_eq!(interp::run(&vg, &[("x", xs)]).unwrap()[0].to_f32_vec(), vec![6.0, 60.0]);
/// ```
pub fn vmap(graph: &Graph, batched: &[NodeId], batch_size: usize) -> IrResult<Graph> {
    if batch_size == 0 {
        return Err(IrError::new(
            "vmap",
            "batch_size must be at least 1 (an empty batch has no examples to map over)",
        ));
    }
    for (k, &id) in batched.iter().enumerate() {
        match graph.get(id).map(|n| &n.op) {
            Some(Op::Input { .. }) => {}
            Some(op) => {
                return Err(IrError::new(
                    "vmap",
                    format!(
                        "only inputs can be batched, but node {id} of graph `{}` is a {} node; params and constants are shared by every example",
                        graph.name,
                        op.name()
                    ),
                ));
            }
            None => {
                return Err(IrError::new(
                    "vmap",
                    format!("{id} is not a node of graph `{}`", graph.name),
                ));
            }
        }
        if batched[..k].contains(&id) {
            return Err(IrError::new(
                "vmap",
                format!("input {id} is listed twice in the batched inputs"),
            ));
        }
    }
    let mut dst = Graph::new(graph.name.clone());
    let mut bt = Batcher::new(&mut dst, batch_size);
    let vals = walk(&mut bt, graph, |bt, node| {
        let batch = batched.contains(&node.id);
        let shape = if batch {
            let mut dims = vec![Dim::Static(batch_size)];
            dims.extend_from_slice(node.shape.dims());
            node.shape.with_dims(dims)
        } else {
            node.shape.clone()
        };
        let id =
            bt.e.g
                .append_node(node.op.clone(), vec![], shape, node.name.clone());
        Ok(BVal { id, batched: batch })
    })?;
    let mut outs = Vec::with_capacity(graph.outputs.len());
    for o in &graph.outputs {
        outs.push(bt.batch(vals[o.index()])?);
    }
    dst.set_outputs(outs);
    Ok(dst)
}

/// Batch every node of `src` into the batcher's graph in topological order; `leaf`
/// supplies the value of each leaf node. Returns the value of every node of `src`.
///
/// Only the nodes the outputs depend on are batched (plus every leaf, so inputs and
/// params keep their names); a dead node gets a placeholder that nothing reads.
pub(crate) fn walk(
    bt: &mut Batcher,
    src: &Graph,
    mut leaf: impl FnMut(&mut Batcher, &Node) -> IrResult<BVal>,
) -> IrResult<Vec<BVal>> {
    let live = ancestors(src, src.len(), &src.outputs);
    let mut vals: Vec<BVal> = Vec::with_capacity(src.len());
    for node in src.nodes() {
        let v = if node.op.is_leaf() {
            leaf(bt, node)?
        } else if !live[node.id.index()] {
            BVal::plain(NodeId(u32::MAX))
        } else {
            let ins: Vec<BVal> = node.inputs.iter().map(|i| vals[i.index()]).collect();
            if ins.iter().all(|v| !v.batched) {
                let ids = ins.iter().map(|v| v.id).collect();
                BVal::plain(bt.e.g.append_node(
                    node.op.clone(),
                    ids,
                    node.shape.clone(),
                    node.name.clone(),
                ))
            } else {
                let shapes: Vec<Shape> =
                    node.inputs.iter().map(|&i| src.shape(i).clone()).collect();
                let at = node
                    .origin
                    .map(|o| format!(" (built at {o})"))
                    .unwrap_or_default();
                rule(bt, node, &ins, &shapes).map_err(|e| {
                    let what = if e.op == "vmap" {
                        e.message
                    } else {
                        e.to_string()
                    };
                    IrError::new(
                        "vmap",
                        format!("batching {} node {}{at}: {what}", node.op.name(), node.id),
                    )
                })?
            }
        };
        vals.push(v);
    }
    Ok(vals)
}

/// Dispatch to the batching rule of `node`'s op family. `ins` are the batched
/// operands (at least one carries the batch), `shapes` their per-example types.
fn rule(bt: &mut Batcher, node: &Node, ins: &[BVal], shapes: &[Shape]) -> IrResult<BVal> {
    match family(&node.op) {
        Family::Leaf => unreachable!("leaves are bound by walk"),
        Family::Elementwise => elementwise::rule(bt, node, ins),
        Family::Linalg => linalg::rule(bt, node, ins, shapes),
        Family::Nn | Family::Attention => nn::rule(bt, node, ins, shapes),
        Family::Movement | Family::Reduce => movement::rule(bt, node, ins, shapes),
        Family::Conv => conv::rule(bt, node, ins, shapes),
        Family::Scan => scan::rule(bt, node, ins),
    }
}

/// The fallback: apply `op` to each example separately (the batched operands
/// narrowed to example `b`, the others shared) and concatenate the results along a
/// new leading axis. Always correct; the graph grows linearly with the batch size.
pub(crate) fn unroll(bt: &mut Batcher, op: &Op, ins: &[BVal]) -> IrResult<BVal> {
    let mut pieces = Vec::with_capacity(bt.size);
    for b in 0..bt.size {
        let mut args = Vec::with_capacity(ins.len());
        for v in ins {
            args.push(if v.batched {
                bt.e.take_index(v.id, 0, b)?
            } else {
                v.id
            });
        }
        let y = bt.e.op(op.clone(), args)?;
        pieces.push(bt.e.expand_leading(y, Dim::Static(1))?);
    }
    Ok(BVal::batched(bt.e.concat(pieces, 0)?))
}

/// Batch a per-example decomposition of an op: `build` constructs, in a scratch
/// graph whose inputs `arg0, arg1, …` have the per-example `shapes`, primitive ops
/// computing the op's value; that graph is then batched with the operands `ins`.
pub(crate) fn via_decomposition(
    bt: &mut Batcher,
    ins: &[BVal],
    shapes: &[Shape],
    build: impl FnOnce(&mut Emitter, &[NodeId]) -> IrResult<NodeId>,
) -> IrResult<BVal> {
    let mut sub = Graph::new("decomposed");
    let ids: Vec<NodeId> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| sub.input(format!("arg{i}"), s.clone()))
        .collect();
    let out = build(&mut Emitter::new(&mut sub, "vmap"), &ids)?;
    sub.set_outputs(vec![out]);
    let vals = walk(bt, &sub, |bt, node| match &node.op {
        Op::Input { .. } => Ok(ins[node.id.index()]),
        op => Ok(BVal::plain(bt.e.g.append_node(
            op.clone(),
            vec![],
            node.shape.clone(),
            None,
        ))),
    })?;
    Ok(vals[out.index()])
}
