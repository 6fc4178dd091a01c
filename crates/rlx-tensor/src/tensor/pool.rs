//! Reuse of the graph cells of dropped tensors.
//!
//! Eager code builds a fresh one-constant graph per `Tensor::from_vec` and drops it a
//! few microseconds later; allocating and freeing the cell, its graph name and its maps
//! each time was a third of the memory-management work of a small eager read. When the
//! last tensor of a graph is dropped, its cell (emptied) goes into a small per-thread
//! pool, and the next constructor takes it from there.
//!
//! A reused cell must be indistinguishable from a new one: its graph is emptied, its
//! maps are cleared, and it gets a new `uid` — other graphs remember adopted nodes by
//! `(source uid, node id)`, so a reused uid would make them return the old cell's nodes
//! for the new cell's.

use super::{GraphCell, GraphState, IdMap, next_graph_uid};
use rlx_ir::{DType, Graph, Node, NodeId, Op, TensorData};
use std::cell::RefCell;
use std::sync::Arc;

/// Cells kept per thread (eager code needs one per live operand).
pub(crate) const POOL_CELLS: usize = 8;

/// A graph with more nodes than this is not kept (its storage would stay allocated).
const KEEP_NODES: usize = 64;

/// Maps with room for more entries than this are not kept.
const KEEP_ENTRIES: usize = 64;

/// Spare buffers of each kind kept per thread (input lists, constant payloads, values).
const POOL_BUFFERS: usize = 16;

/// A constant payload or value buffer larger than this is freed, not kept (the pools
/// serve small eager expressions; a large tensor's storage goes back to the allocator).
const KEEP_BYTES: usize = 4096;

/// An input list with room for more operands than this is freed, not kept.
const KEEP_INPUTS: usize = 16;

thread_local! {
    static SPARE: RefCell<Vec<Arc<GraphCell>>> = const { RefCell::new(Vec::new()) };
    /// Node input lists of dropped graphs (emptied), for the next ops' operand lists.
    static SPARE_INPUTS: RefCell<Vec<Vec<NodeId>>> = const { RefCell::new(Vec::new()) };
    /// Constant payloads of dropped graphs (emptied), for the next constants.
    static SPARE_BYTES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    /// Computed values of dropped graphs that nothing else holds, for the next reads.
    static SPARE_VALUES: RefCell<Vec<Arc<TensorData>>> = const { RefCell::new(Vec::new()) };
}

/// Push `item` onto this thread's pool `pool` when it has room (else it is dropped;
/// also during thread teardown, when the pool is gone).
fn keep<T: 'static>(pool: &'static std::thread::LocalKey<RefCell<Vec<T>>>, item: T) {
    let _ = pool.try_with(|p| {
        if let Ok(mut p) = p.try_borrow_mut()
            && p.len() < POOL_BUFFERS
        {
            p.push(item);
        }
    });
}

/// Pop an item from this thread's pool `pool`, if it holds one.
fn take<T: 'static>(pool: &'static std::thread::LocalKey<RefCell<Vec<T>>>) -> Option<T> {
    pool.try_with(|p| p.try_borrow_mut().ok().and_then(|mut p| p.pop()))
        .ok()
        .flatten()
}

/// Keep the storage of a node of a dropped graph: its input list and constant payload.
fn keep_node(n: &mut Node) {
    let cap = n.inputs.capacity();
    if cap > 0 && cap <= KEEP_INPUTS {
        let mut inputs = std::mem::take(&mut n.inputs);
        inputs.clear();
        keep(&SPARE_INPUTS, inputs);
    }
    if let Op::Constant { data } = &mut n.op
        && data.capacity() > 0
        && data.capacity() <= KEEP_BYTES
    {
        let mut data = std::mem::take(data);
        data.clear();
        keep(&SPARE_BYTES, data);
    }
}

/// An empty operand list with room for `n` ids (a spare one when this thread has it).
pub(super) fn inputs_with_capacity(n: usize) -> Vec<NodeId> {
    let mut v = take(&SPARE_INPUTS).unwrap_or_default();
    v.reserve(n);
    v
}

/// An empty byte buffer for a constant payload: a spare one when this thread has it
/// (the caller reserves what it needs, fallibly).
pub(super) fn spare_bytes() -> Vec<u8> {
    take(&SPARE_BYTES).unwrap_or_default()
}

/// A copy of a constant payload (in a spare buffer when this thread has one).
pub(super) fn copy_bytes(data: &[u8]) -> Vec<u8> {
    let mut v = spare_bytes();
    v.extend_from_slice(data);
    v
}

/// A value holding a copy of the f32 `values` with `dims`, in a spare allocation when
/// this thread has one (a read stores its result this way and hands the caller the
/// vector the backend wrote).
pub(crate) fn f32_value(dims: &[usize], values: &[f32]) -> Arc<TensorData> {
    let Some(mut v) = take(&SPARE_VALUES) else {
        return Arc::new(TensorData::from_f32(dims, values));
    };
    let d = Arc::get_mut(&mut v).expect("pooled values are unique");
    d.dtype = DType::F32;
    d.dims.clear();
    d.dims.extend_from_slice(dims);
    d.bytes.clear();
    extend_f32_bytes(&mut d.bytes, values);
    v
}

/// Append the little-endian bytes of `values` to `out` (one copy of the whole slice on
/// little-endian targets).
pub(super) fn extend_f32_bytes(out: &mut Vec<u8>, values: &[f32]) {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: an f32 has no padding and every byte of it is initialized, and u8 has
        // alignment 1, so the slice's memory read as bytes is valid for its byte size;
        // on a little-endian target these are exactly the `to_le_bytes` of each element.
        let raw = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        out.extend_from_slice(raw);
    }
    #[cfg(not(target_endian = "little"))]
    for x in values {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// `data` as a shared value, in a spare allocation when this thread has one.
pub(crate) fn value(data: TensorData) -> Arc<TensorData> {
    let Some(mut v) = take(&SPARE_VALUES) else {
        return Arc::new(data);
    };
    *Arc::get_mut(&mut v).expect("pooled values are unique") = data;
    v
}

/// Keep `v` for a later read when nothing else holds it and its storage is small.
fn keep_value(mut v: Arc<TensorData>) {
    if let Some(d) = Arc::get_mut(&mut v)
        && d.bytes.capacity() <= KEEP_BYTES
    {
        keep(&SPARE_VALUES, v);
    }
}

/// Take `cell` into this thread's pool when it is the last handle to its graph (else,
/// or when the pool is full, it is simply dropped).
pub(super) fn recycle(mut cell: Arc<GraphCell>) {
    // A plain load first: a shared cell (the usual drop) pays no read-modify-write.
    if Arc::strong_count(&cell) != 1 {
        return;
    }
    let Some(c) = Arc::get_mut(&mut cell) else {
        return;
    };
    // A poisoned lock: a panic interrupted a step on this graph; do not reuse it.
    let Ok(st) = c.state.get_mut() else {
        return;
    };
    if st.graph.len() > KEEP_NODES
        || st.adopted.capacity() > KEEP_ENTRIES
        || st.realized.capacity() > KEEP_ENTRIES
    {
        return;
    }
    // Empty it now: the payloads and values it holds are freed as they were before; the
    // node list keeps its storage for the next graph built in this cell.
    st.graph.clear_with(keep_node);
    st.adopted.clear();
    st.realized.drain().for_each(|(_, v)| keep_value(v));
    // Thread teardown (the pool already gone) or a full pool: the cell is dropped.
    let _ = SPARE.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut()
            && s.len() < POOL_CELLS
        {
            s.push(cell);
        }
    });
}

/// A cell holding an empty graph named `name` (from this thread's pool when it has one),
/// with `f` applied to its state before it is shared: one uniqueness check per
/// constructor (each `Arc::get_mut` is a locked compare-exchange),
/// and none for a new cell, whose state is filled before it goes into its `Arc`.
pub(super) fn fresh_cell_with<R>(
    name: &str,
    f: impl FnOnce(&mut GraphState) -> R,
) -> (Arc<GraphCell>, R) {
    let spare = SPARE
        .try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop()))
        .ok()
        .flatten();
    let Some(mut cell) = spare else {
        let mut st = GraphState {
            graph: Graph::new(name),
            adopted: IdMap::default(),
            realized: IdMap::default(),
        };
        let r = f(&mut st);
        return (GraphCell::from_state(st), r);
    };
    let c = Arc::get_mut(&mut cell).expect("pooled cells are unique");
    c.uid = next_graph_uid();
    let st = c.state.get_mut().expect("pooled cells are not poisoned");
    if st.graph.name != name {
        st.graph.name.clear();
        st.graph.name.push_str(name);
    }
    let r = f(st);
    (cell, r)
}

/// How many cells this thread's pool holds (for tests).
#[cfg(test)]
pub(crate) fn pooled() -> usize {
    SPARE.with(|s| s.borrow().len())
}

#[cfg(test)]
mod tests {
    use super::pooled;
    use crate::Tensor;
    use rlx_ir::Op;
    use std::sync::Arc;

    /// The f32 payload of `t`'s graph node `i` (a constant).
    fn payload(t: &Tensor, i: usize) -> Vec<f32> {
        let g = t.to_graph();
        match &g.nodes()[i].op {
            Op::Constant { data } => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect(),
            op => panic!("node {i} is {op:?}, not a constant"),
        }
    }

    /// The last handle's drop pools the cell; the next constructor takes that very cell
    /// (same allocation), with a new uid, one node and empty maps.
    #[test]
    fn the_last_drop_pools_the_cell_and_the_next_constructor_gets_it_empty() {
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
        let y = x.relu();
        let (ptr, uid) = (Arc::as_ptr(&x.cell), x.cell.uid);
        let before = pooled();
        drop(x);
        assert_eq!(pooled(), before, "y still uses the graph");
        drop(y);
        assert_eq!(pooled(), before + 1);
        let z = Tensor::from_vec(vec![7.0, 8.0], [2]);
        assert_eq!(pooled(), before);
        assert_eq!(Arc::as_ptr(&z.cell), ptr, "the pooled cell was reused");
        assert_ne!(z.cell.uid, uid, "a reused cell gets a new uid");
        let g = z.to_graph();
        assert_eq!((g.name.as_str(), g.len()), ("rlx", 1));
        assert_eq!(payload(&z, 0), vec![7.0, 8.0]);
        let st = z.cell.state();
        assert!(st.adopted.is_empty() && st.realized.is_empty());
    }

    /// A cell reused after a graph of several nodes (its node storage kept) holds
    /// exactly what a new cell would: no stale node or output, the same printed graph
    /// as the same expression on a fresh cell, and its own data.
    #[test]
    fn a_cell_reused_after_a_larger_graph_holds_only_the_new_nodes() {
        let x = Tensor::from_vec(vec![1.0, 2.0], [2]);
        let y = (&x * &x).relu().exp();
        let ptr = Arc::as_ptr(&x.cell);
        drop((x, y));
        let z = Tensor::from_vec(vec![3.0, -4.0], [2]);
        assert_eq!(Arc::as_ptr(&z.cell), ptr, "the test needs the cell reused");
        let w = z.relu();
        // Empty the pool so that the same expression gets a cell of its own.
        let _hold: Vec<Tensor> = (0..super::POOL_CELLS)
            .map(|_| Tensor::from_vec(vec![0.0], [1]))
            .collect();
        assert_eq!(pooled(), 0);
        let fresh = Tensor::from_vec(vec![3.0, -4.0], [2]).relu();
        let (g, f) = (w.to_graph(), fresh.to_graph());
        assert_eq!(g.len(), 2);
        assert_eq!(g.to_string(), f.to_string());
        assert_eq!(g.outputs, f.outputs);
        assert_eq!(payload(&w, 0), vec![3.0, -4.0]);
        #[cfg(feature = "eval")]
        assert_eq!(w.to_vec(), vec![3.0, 0.0]);
    }

    /// Another graph that adopted a node of a pooled cell remembers it by (uid, node):
    /// the cell's next tensor has the same node id, so only the new uid keeps the
    /// memo from handing out the old constant for the new one.
    #[test]
    fn adopting_from_a_reused_cell_copies_the_new_data_not_the_memoized_old_node() {
        let keep = Tensor::from_vec(vec![10.0, 20.0, 30.0], [3]);
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
        let ptr = Arc::as_ptr(&x.cell);
        let first = &keep + &x;
        drop(x);
        let z = Tensor::from_vec(vec![-4.0, -5.0, -6.0], [3]);
        assert_eq!(Arc::as_ptr(&z.cell), ptr, "the test needs the cell reused");
        let second = &keep + &z;
        assert_eq!(keep.to_graph().len(), 5, "keep, x, first, z, second");
        assert_eq!(payload(&second, 1), vec![1.0, 2.0, 3.0]);
        assert_eq!(payload(&second, 3), vec![-4.0, -5.0, -6.0]);
        assert_eq!(second.to_graph().node(second.id).inputs[1].0, 3);
        #[cfg(feature = "eval")]
        {
            assert_eq!(first.to_vec(), vec![11.0, 22.0, 33.0]);
            assert_eq!(second.to_vec(), vec![6.0, 15.0, 24.0]);
        }
        drop(first);
    }

    /// A value computed on a graph is gone when its cell is reused: the new tensor is
    /// not realized and reads its own data.
    #[cfg(feature = "eval")]
    #[test]
    fn a_reused_cell_carries_no_computed_value_of_its_old_graph() {
        let x = Tensor::from_vec(vec![1.0, -2.0], [2]);
        let r = x.relu();
        assert_eq!(r.to_vec(), vec![1.0, 0.0]);
        let ptr = Arc::as_ptr(&x.cell);
        drop((x, r));
        let z = Tensor::from_vec(vec![-3.0, 4.0], [2]);
        assert_eq!(Arc::as_ptr(&z.cell), ptr);
        let rz = z.relu();
        assert!(!rz.is_realized() && !z.is_realized());
        assert_eq!(rz.to_vec(), vec![0.0, 4.0]);
        assert_eq!(z.to_vec(), vec![-3.0, 4.0]);
    }

    /// Large graphs are not kept, and the pool holds at most `POOL_CELLS` cells.
    #[test]
    fn large_graphs_are_dropped_and_the_pool_is_bounded() {
        let before = pooled();
        let mut t = Tensor::from_vec(vec![1.0], [1]);
        for _ in 0..100 {
            t = t.relu();
        }
        drop(t);
        assert_eq!(pooled(), before, "a 101-node graph is not pooled");
        let many: Vec<Tensor> = (0..3 * super::POOL_CELLS)
            .map(|i| Tensor::from_vec(vec![i as f32], [1]))
            .collect();
        drop(many);
        assert_eq!(pooled(), super::POOL_CELLS);
    }

    /// Tensors made on one thread and dropped on another fill the dropping thread's
    /// pool; tensors built from those cells hold their own data.
    #[test]
    fn cells_dropped_on_another_thread_serve_that_thread() {
        let made = std::thread::spawn(|| {
            (0..4)
                .map(|i| Tensor::from_vec(vec![i as f32; 2], [2]))
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        let before = pooled();
        drop(made);
        assert_eq!(pooled(), (before + 4).min(super::POOL_CELLS));
        let a = Tensor::from_vec(vec![5.0, 6.0], [2]);
        let b = Tensor::from_vec(vec![7.0, 8.0], [2]);
        let s = &a + &b;
        assert_eq!(payload(&s, 0), vec![5.0, 6.0]);
        assert_eq!(payload(&s, 1), vec![7.0, 8.0]);
        #[cfg(feature = "eval")]
        assert_eq!(s.to_vec(), vec![12.0, 14.0]);
    }
}
