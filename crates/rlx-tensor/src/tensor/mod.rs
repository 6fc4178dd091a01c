//! The symbolic [`Tensor`] handle: a shared graph plus a node id.
//!
//! Every op appends a node to the receiver's graph. Operands from other graphs
//! are *adopted*: their dependency cone is copied into the receiver's graph once
//! (memoized by source graph and node), so combining tensors freely is cheap and
//! a foreign node is never duplicated.

mod constructors;
mod convert;
mod elementwise;
mod nn;
mod ops;
pub(crate) mod pool;
mod quant;
mod reduce;
mod scalar;
mod shape_ops;

pub use ops::Scalar;
pub(crate) use scalar::BinaryRhs;
pub use shape_ops::ReshapeTarget;

use crate::{Error, Result};
use rlx_ir::{DType, Graph, NodeId, NodeOrigin, Op, Shape, TensorData};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

static NEXT_GRAPH_UID: AtomicU64 = AtomicU64::new(1);

/// Graph uids a thread takes from [`NEXT_GRAPH_UID`] at once.
const UID_BLOCK: u64 = 1024;

/// A graph uid no other graph of the process has had. Each thread takes a block of
/// [`UID_BLOCK`] uids from the shared counter and hands them out one by one: eager code
/// makes a graph per constant, and a locked add on a shared counter per graph cost more
/// than the rest of setting the graph up. Uids only need to be distinct (they key
/// adopted nodes and order the locks of two graphs), not increasing across threads.
pub(crate) fn next_graph_uid() -> u64 {
    thread_local! {
        /// `(next, end)` of this thread's block.
        static BLOCK: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
    }
    BLOCK
        .try_with(|b| {
            let (next, end) = b.get();
            if next < end {
                b.set((next + 1, end));
                next
            } else {
                let start = NEXT_GRAPH_UID.fetch_add(UID_BLOCK, Ordering::Relaxed);
                b.set((start + 1, start + UID_BLOCK));
                start
            }
        })
        // Thread teardown (the block is gone): one uid straight from the counter.
        .unwrap_or_else(|_| NEXT_GRAPH_UID.fetch_add(1, Ordering::Relaxed))
}

/// A map keyed by node ids and graph uids: touched on every op and every read, and keyed
/// only by ids the library assigns, so the fast hasher instead of SipHash.
pub(crate) type IdMap<K, V> = rlx_ir::FastHashMap<K, V>;

/// The mutable state behind a shared graph handle.
#[derive(Debug)]
pub(crate) struct GraphState {
    pub(crate) graph: Graph,
    /// (source graph uid, source node) → node in this graph.
    adopted: IdMap<(u64, NodeId), NodeId>,
    /// Values already computed for nodes of this graph; evaluation reads these
    /// instead of recomputing their history.
    pub(crate) realized: IdMap<NodeId, Arc<TensorData>>,
}

/// A graph shared by every tensor built on it.
///
/// The state sits behind a `Mutex` so that tensors are `Send + Sync` (they are handed to
/// worker threads and servers). Every access takes the lock for one short, non-reentrant
/// step: a caller never holds one cell's guard while calling a `Tensor` method that locks
/// the same cell (a `Mutex` is not reentrant), and code that holds two cells' guards at once
/// ([`Tensor::adopt`]) takes them in `uid` order so two threads adopting in opposite
/// directions cannot deadlock.
#[derive(Debug)]
pub(crate) struct GraphCell {
    pub(crate) uid: u64,
    state: Mutex<GraphState>,
}

impl GraphCell {
    pub(crate) fn new(graph: Graph) -> Arc<GraphCell> {
        GraphCell::from_state(GraphState {
            graph,
            adopted: IdMap::default(),
            realized: IdMap::default(),
        })
    }

    /// A cell holding `state`, with a new uid.
    fn from_state(state: GraphState) -> Arc<GraphCell> {
        Arc::new(GraphCell {
            uid: next_graph_uid(),
            state: Mutex::new(state),
        })
    }

    /// Lock the state for reading. A panic while the lock was held (an op's shape check
    /// panicking mid-build) leaves a graph that is still well formed — nodes are appended
    /// whole — so a poisoned lock is taken over rather than turned into a second panic.
    pub(crate) fn state(&self) -> MutexGuard<'_, GraphState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lock the state for appending nodes or recording values (same lock as [`GraphCell::state`];
    /// two names so that call sites say what they do).
    pub(crate) fn state_mut(&self) -> MutexGuard<'_, GraphState> {
        self.state()
    }
}

/// A symbolic tensor: a node in a traced graph.
///
/// Cloning is a reference-count bump. Tensors are `Send + Sync`: clones of one tensor can be
/// used from several threads at once (each op takes the graph's lock briefly). Nothing is computed until a result is read
/// (with the `eval` feature: `to_vec`, `item`, `realize`, …); then the whole
/// expression is compiled and run.
///
/// ```
/// use rlx_tensor::Tensor;
/// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
/// let b = Tensor::ones([3]);
/// let c = (&a + &b).relu();      // graphs merge; nothing runs yet
/// assert_eq!(c.dims(), vec![3]);
/// ```
#[derive(Clone)]
pub struct Tensor {
    /// Dropped by hand (`impl Drop for Tensor`): the last handle
    /// to a small graph gives its cell back to a per-thread pool for the next tensor.
    pub(crate) cell: ManuallyDrop<Arc<GraphCell>>,
    pub(crate) id: NodeId,
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: `cell` is taken exactly once, here, and never used again.
        let cell = unsafe { ManuallyDrop::take(&mut self.cell) };
        pool::recycle(cell);
    }
}

impl From<Tensor> for NodeId {
    fn from(t: Tensor) -> NodeId {
        t.id
    }
}

impl From<&Tensor> for NodeId {
    fn from(t: &Tensor) -> NodeId {
        t.id
    }
}

impl Tensor {
    /// Wrap node `id` of a shared graph.
    pub(crate) fn from_parts(cell: Arc<GraphCell>, id: NodeId) -> Tensor {
        Tensor {
            cell: ManuallyDrop::new(cell),
            id,
        }
    }

    /// Another handle to this tensor's graph cell.
    pub(crate) fn share_cell(&self) -> Arc<GraphCell> {
        Arc::clone(&self.cell)
    }

    /// A tensor holding one constant in a fresh graph named `"rlx"` (a pooled cell
    /// when this thread has one: see `pool`).
    pub(crate) fn new_constant(shape: Shape, data: Vec<u8>) -> Tensor {
        let (cell, id) = pool::fresh_cell_with("rlx", |st| {
            st.graph.add_node(Op::Constant { data }, vec![], shape)
        });
        Tensor::from_parts(cell, id)
    }

    /// The node id in its graph.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Result type (dims + dtype).
    pub fn shape(&self) -> Shape {
        self.cell.state().graph.shape(self.id).clone()
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.cell.state().graph.shape(self.id).dtype()
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.cell.state().graph.shape(self.id).rank()
    }

    /// Static sizes. Panics on a dynamic axis (see [`Tensor::shape`]).
    #[track_caller]
    pub fn dims(&self) -> Vec<usize> {
        let s = self.shape();
        match s.static_dims() {
            Some(d) => d,
            None => {
                panic!("Tensor::dims: {s} has a dynamic axis; use .shape() to inspect dynamic dims")
            }
        }
    }

    /// Element count. Panics on a dynamic axis.
    #[track_caller]
    pub fn numel(&self) -> usize {
        self.dims().iter().product()
    }

    /// True when every axis is static.
    pub fn is_static_shape(&self) -> bool {
        self.cell.state().graph.shape(self.id).is_static()
    }

    /// True when both tensors live in the same graph.
    pub fn shares_graph(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.cell, &other.cell)
    }

    /// Bytes of constant payload held by the backing graph (views add nothing).
    pub fn storage_bytes(&self) -> usize {
        self.cell
            .state()
            .graph
            .nodes()
            .iter()
            .map(|n| match &n.op {
                Op::Constant { data } => data.len(),
                _ => 0,
            })
            .sum()
    }

    /// A copy of the backing graph with this tensor as its only output.
    pub fn to_graph(&self) -> Graph {
        let mut g = self.cell.state().graph.clone();
        g.set_outputs(vec![self.id]);
        g
    }

    /// The id of `other`'s node inside this tensor's graph, copying its history in
    /// (once) when it lives elsewhere.
    pub(crate) fn adopt(&self, other: &Tensor) -> Result<NodeId> {
        if Arc::ptr_eq(&self.cell, &other.cell) {
            return Ok(other.id);
        }
        // Lock in uid order: another thread may be adopting in the other direction.
        let (src, mut dst) = if other.cell.uid < self.cell.uid {
            let src = other.cell.state();
            (src, self.cell.state_mut())
        } else {
            let dst = self.cell.state_mut();
            (other.cell.state(), dst)
        };
        adopt_into(&mut dst, other.cell.uid, &src, other.id)
    }

    /// Append `op` applied to `inputs` (adopted into this tensor's graph).
    #[track_caller]
    pub(crate) fn try_apply(&self, op: Op, inputs: &[&Tensor]) -> Result<Tensor> {
        let origin = NodeOrigin::caller();
        let mut ids = pool::inputs_with_capacity(inputs.len());
        for t in inputs {
            ids.push(self.adopt(t)?);
        }
        let mut st = self.cell.state_mut();
        let id = st
            .graph
            .add_op(op, ids)
            .map_err(|e| Error::from_ir_kind(e.kind, format!("{e} (at {origin})")))?;
        st.graph.set_origin(id, origin);
        drop(st);
        Ok(Tensor::from_parts(self.share_cell(), id))
    }

    /// [`Tensor::try_apply`] that panics with the error's message.
    #[track_caller]
    pub(crate) fn apply(&self, op: Op, inputs: &[&Tensor]) -> Tensor {
        match self.try_apply(op, inputs) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    /// A rank-0 constant of `dtype` in this tensor's graph.
    pub(crate) fn scalar_const(&self, value: f64, dtype: DType) -> Tensor {
        let data = TensorData::from_f64_as(dtype, &[], &[value]).bytes;
        self.constant_in_graph(Shape::scalar(dtype), data)
    }

    /// A constant node with the given payload in this tensor's graph.
    pub(crate) fn constant_in_graph(&self, shape: Shape, data: Vec<u8>) -> Tensor {
        let id = self
            .cell
            .state_mut()
            .graph
            .add_node(Op::Constant { data }, vec![], shape);
        Tensor::from_parts(self.share_cell(), id)
    }
}

/// Copy the dependency cone of `root` from `src` into `dst` (memoized), returning its new id.
fn adopt_into(
    dst: &mut GraphState,
    src_uid: u64,
    src: &GraphState,
    root: NodeId,
) -> Result<NodeId> {
    if let Some(&id) = dst.adopted.get(&(src_uid, root)) {
        return Ok(id);
    }
    // A leaf (the usual operand in eager code: a fresh constant) needs no walk.
    if src.graph.node(root).inputs.is_empty() {
        return copy_node(dst, src_uid, src, root);
    }
    // Iterative post-order walk: copy operands before users.
    let mut stack = vec![(root, false)];
    while let Some((n, expanded)) = stack.pop() {
        if dst.adopted.contains_key(&(src_uid, n)) {
            continue;
        }
        if !expanded {
            stack.push((n, true));
            for &i in src.graph.node(n).inputs.iter().rev() {
                if !dst.adopted.contains_key(&(src_uid, i)) {
                    stack.push((i, false));
                }
            }
            continue;
        }
        copy_node(dst, src_uid, src, n)?;
    }
    Ok(dst.adopted[&(src_uid, root)])
}

/// Copy node `n` of `src` into `dst` (its inputs already adopted), with its origin and
/// value, and record the mapping.
fn copy_node(dst: &mut GraphState, src_uid: u64, src: &GraphState, n: NodeId) -> Result<NodeId> {
    let node = src.graph.node(n);
    let mut inputs = Vec::new();
    if !node.inputs.is_empty() {
        inputs = pool::inputs_with_capacity(node.inputs.len());
        inputs.extend(node.inputs.iter().map(|i| dst.adopted[&(src_uid, *i)]));
    }
    let new_id = match &node.op {
        Op::Input { name } | Op::Param { name } => {
            let existing = match &node.op {
                Op::Input { .. } => dst.graph.input_id(name),
                _ => dst.graph.param_id(name),
            };
            match existing {
                Some(e) if dst.graph.shape(e) == &node.shape => e,
                Some(e) => {
                    return Err(Error::new(format!(
                        "cannot combine tensors from graphs that both declare {} `{name}` with different types ({} vs {}); rename one",
                        node.op.name(),
                        dst.graph.shape(e),
                        node.shape
                    )));
                }
                None => dst.graph.append_node(
                    node.op.clone(),
                    vec![],
                    node.shape.clone(),
                    node.name.clone(),
                ),
            }
        }
        op => {
            // A constant's payload goes into a spare buffer (eager code adopts one
            // fresh constant per binary op).
            let op = match op {
                Op::Constant { data } => Op::Constant {
                    data: pool::copy_bytes(data),
                },
                op => op.clone(),
            };
            dst.graph
                .append_node(op, inputs, node.shape.clone(), node.name.clone())
        }
    };
    if let Some(o) = node.origin {
        dst.graph.set_origin(new_id, o);
    }
    if let Some(v) = src.realized.get(&n) {
        dst.realized.insert(new_id, v.clone());
    }
    dst.adopted.insert((src_uid, n), new_id);
    Ok(new_id)
}
