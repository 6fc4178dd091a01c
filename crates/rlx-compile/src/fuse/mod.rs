//! `fuse`: group the nodes of a (simplified, decomposed) graph into kernels.
//!
//! Every node gets a class: leaf, view, elementwise, a *core* (reduction, row op,
//! contraction, attention) or opaque. Then, walking the graph backwards, each
//! elementwise node is either inlined into the kernels that consume it or
//! *materialized* into a buffer of its own kernel. It is materialized when it is a
//! graph output, when a consumer needs it in memory (contractions, attention, opaque
//! ops), or when it is not cheap and would otherwise be recomputed — because it flows
//! into several kernels or is broadcast into a bigger space. Views are never
//! materialized (they become index maps on loads) unless they are outputs. A core whose
//! value only flows, unbroadcast, into one elementwise kernel of its own shape is
//! absorbed into it: that kernel becomes the core plus an elementwise epilogue.
//!
//! With [`CompileOptions::multi_store`], a materialized elementwise output whose value
//! flows only into one other elementwise kernel of its own space, through same-space
//! elementwise nodes, is *merged* into that kernel: computed there and stored as one
//! more result, instead of being stored by a kernel of its own and loaded back. An
//! optimizer update (new moments, then the new param from them) becomes one pass over
//! its inputs, and the core producing the gradient can absorb the whole group.

mod bounds;
mod emit;
mod opaque_ops;
pub mod rowgroup;

pub use crate::program::sharing::{
    MAX_COUNTED_READERS, MAX_RECOMPUTE_DEPTH, OP_BYTES, ShareCost, SharedValue, Sharing,
};

use crate::CompileOptions;
use crate::program::{BufId, BufKind, Buffer, Program, RowOp};
use bounds::{Frontier, depth_cuts};
use rlx_ir::{
    Activation, BinaryOp, DType, Graph, IrResult, NodeId, Op, ReduceOp, Shape, norm_axis,
};

/// The longest chain of elementwise ops one kernel computes inline. A deeper chain
/// is cut: the op at this depth is materialized and the rest of the chain reads it.
/// Without a cap a million-op chain would become one kernel with a million-op
/// expression (megabytes of machine code for the CPU JIT, long compile times on GPU
/// compilers); with it, such a chain is a row of kernels of at most this depth, each
/// reading the previous one's result. Chains shorter than this are untouched.
pub const MAX_FUSED_DEPTH: usize = 4096;

/// How a node is executed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Class {
    /// An `Input`/`Param`: positional argument `i`.
    Arg(usize),
    /// A constant (one element: inlined as a literal; else a baked buffer).
    Const,
    /// A movement op folded into index maps (`StopGradient` is an empty view).
    View,
    /// A fusable elementwise op.
    Ew,
    /// An axis reduction (core).
    Reduce,
    /// A row op over the last axis (core).
    Row(RowOp),
    /// A matmul (core).
    Contract,
    /// Fused attention (core).
    Attention,
    /// Everything else: run whole on materialized operands.
    Opaque,
}

impl Class {
    fn is_core(&self) -> bool {
        matches!(
            self,
            Class::Reduce | Class::Row(_) | Class::Contract | Class::Attention
        )
    }

    /// Cores whose epilogue may store several results (the backends that enable
    /// `multi_store` run these epilogues over every store).
    fn multi_store_core(&self) -> bool {
        matches!(self, Class::Contract | Class::Reduce)
    }
}

/// Where the value of an inlined node flows: the distinct kernels (by root node) that
/// compute it, counted up to [`MAX_COUNTED_READERS`].
#[derive(Debug, Clone, PartialEq)]
enum Sinks {
    None,
    One(NodeId),
    /// 2 ..= MAX_COUNTED_READERS distinct kernels.
    Few(Vec<NodeId>),
    /// More than MAX_COUNTED_READERS.
    Many,
}

impl Sinks {
    fn add(&mut self, k: NodeId) {
        match self {
            Sinks::None => *self = Sinks::One(k),
            Sinks::One(j) if *j == k => {}
            Sinks::One(j) => *self = Sinks::Few(vec![*j, k]),
            Sinks::Few(v) if v.contains(&k) => {}
            Sinks::Few(v) if v.len() < MAX_COUNTED_READERS => v.push(k),
            Sinks::Few(_) => *self = Sinks::Many,
            Sinks::Many => {}
        }
    }
    fn merge(&mut self, o: &Sinks) {
        match o {
            Sinks::None => {}
            Sinks::One(k) => self.add(*k),
            Sinks::Few(v) => v.iter().for_each(|&k| self.add(k)),
            Sinks::Many => *self = Sinks::Many,
        }
    }
    /// Distinct kernels (`MAX_COUNTED_READERS + 1` stands for "more").
    fn count(&self) -> usize {
        match self {
            Sinks::None => 0,
            Sinks::One(_) => 1,
            Sinks::Few(v) => v.len(),
            Sinks::Many => MAX_COUNTED_READERS + 1,
        }
    }
}

/// The analysis result that emission reads.
pub(crate) struct Plan<'g> {
    pub(crate) g: &'g Graph,
    pub(crate) class: Vec<Class>,
    /// Has a buffer of its own (materialized elementwise/view roots, unabsorbed cores, opaque).
    pub(crate) mat: Vec<bool>,
    /// For an elementwise root: the core absorbed as its epilogue's input.
    pub(crate) absorbed: Vec<Option<NodeId>>,
    /// First graph output position of each node.
    pub(crate) out_pos: Vec<Option<usize>>,
    /// For a materialized elementwise node merged into another kernel: that kernel's
    /// root (which computes and stores it too).
    pub(crate) merged_into: Vec<Option<NodeId>>,
    /// For a kernel root: the nodes merged into it, in node order.
    pub(crate) members: Vec<Vec<NodeId>>,
    /// The decision about every elementwise value several kernels read.
    pub(crate) sharing: Vec<SharedValue>,
}

/// Whether elementwise `op` on these dtypes is handled by fused kernels (the rest runs
/// opaque, so the oracle reports its errors).
fn ew_supported(op: &Op, out: DType, ins: &[DType]) -> bool {
    if out.is_complex() || ins.iter().any(|d| d.is_complex()) {
        return false;
    }
    match op {
        Op::Activation(a) => out.is_float() || (out.is_int() && a.integer_closed()),
        Op::Cast { .. } | Op::Compare(_) | Op::Where => true,
        Op::RoundToFormat { .. } => out.is_float(),
        Op::Binary(b) => {
            if out.is_float() {
                !b.is_bitwise()
            } else if out.is_int() {
                *b != BinaryOp::Atan2
            } else {
                matches!(
                    b,
                    BinaryOp::BitAnd
                        | BinaryOp::BitOr
                        | BinaryOp::BitXor
                        | BinaryOp::Max
                        | BinaryOp::Min
                )
            }
        }
        _ => false,
    }
}

/// Elementwise ops cheap enough to recompute rather than store.
fn cheap(op: &Op) -> bool {
    match op {
        Op::Binary(b) => !matches!(b, BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Mod),
        Op::Compare(_) | Op::Where | Op::Cast { .. } => true,
        Op::Activation(a) => matches!(a, Activation::Neg | Activation::Abs | Activation::Relu),
        _ => false,
    }
}

fn classify(g: &Graph, n: &rlx_ir::Node, args: &[(String, Shape)], keep_whole: &[String]) -> Class {
    let dt = n.shape.dtype();
    let in_dt: Vec<DType> = n.inputs.iter().map(|&i| g.shape(i).dtype()).collect();
    let keeps = |op: &Op| keep_whole.iter().any(|k| *k == op.name());
    match &n.op {
        Op::Input { name } | Op::Param { name } => Class::Arg(
            args.iter()
                .position(|(a, _)| a == name)
                .expect("every input is an argument"),
        ),
        Op::Constant { .. } => Class::Const,
        Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Narrow { .. }
        | Op::Expand { .. }
        | Op::BroadcastLike
        | Op::StopGradient => Class::View,
        op if op.is_elementwise() && ew_supported(op, dt, &in_dt) => Class::Ew,
        Op::Reduce { op, axes, .. }
            if !axes.is_empty()
                && !dt.is_complex()
                && (dt != DType::Bool || matches!(op, ReduceOp::Max | ReduceOp::Min)) =>
        {
            Class::Reduce
        }
        // Real inputs only (shape inference rejects bool and complex); the result has the
        // input's dtype.
        Op::ArgMax { .. } | Op::ArgMin { .. } if dt.is_float() || dt.is_int() => Class::Reduce,
        Op::MatMul if !dt.is_complex() => Class::Contract,
        Op::Softmax { axis } | Op::LogSoftmax { axis }
            if keeps(&n.op)
                && norm_axis("softmax", *axis as i64, n.shape.rank()).ok()
                    == Some(n.shape.rank() - 1) =>
        {
            Class::Row(if matches!(n.op, Op::Softmax { .. }) {
                RowOp::Softmax
            } else {
                RowOp::LogSoftmax
            })
        }
        Op::LayerNorm { eps, .. } if keeps(&n.op) => Class::Row(RowOp::LayerNorm { eps: *eps }),
        Op::RmsNorm { eps, .. } if keeps(&n.op) => Class::Row(RowOp::RmsNorm { eps: *eps }),
        // The fused backward is a kernel of its own too (decompose lowered it otherwise).
        // Only f32 fuses: other dtypes stay opaque ops, without an epilogue. rlx-cuda
        // launches those through its loop lowering (the tensor-core tile lowering for
        // f16/bf16); the CPU's attention kernel takes f32 only, so the CPU asks decompose
        // for f16/bf16 attention and its backward in f32 (`ATTENTION_IN_F32`,
        // `ATTENTION_VJP_WHOLE_IN_F32`: casts around an f32 op that lands here) and runs
        // what stays opaque (f64 attention) in the oracle interpreter; an f64
        // `attention_vjp` is lowered by decompose.
        Op::Attention { .. } | Op::AttentionVjp { .. } if keeps(&n.op) && dt == DType::F32 => {
            Class::Attention
        }
        _ => Class::Opaque,
    }
}

/// Decide classes, materialization and absorption for every node of `g`.
pub(crate) fn analyze<'g>(
    g: &'g Graph,
    args: &[(String, Shape)],
    opts: &CompileOptions,
) -> Plan<'g> {
    let n = g.len();
    let class: Vec<Class> = g
        .nodes()
        .iter()
        .map(|x| classify(g, x, args, &opts.keep_whole))
        .collect();
    let mut users: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for node in g.nodes() {
        for &i in &node.inputs {
            if users[i.index()].last() != Some(&node.id) {
                users[i.index()].push(node.id);
            }
        }
    }
    let mut out_pos = vec![None; n];
    for (j, o) in g.outputs.iter().enumerate() {
        out_pos[o.index()].get_or_insert(j);
    }
    let mut cx = Cx {
        g,
        class: &class,
        cut: depth_cuts(g, &class),
        users: &users,
        out_pos: &out_pos,
        fuse: opts.fuse,
        multi_store: opts.fuse && opts.multi_store,
    };
    let mut st = cx.pass(&vec![None; n]);
    let (store, sharing) = cx.sharing(&st);
    for v in &sharing {
        tracing::debug!(
            target: "rlx::fusion",
            node = v.node.index(),
            op = %v.op,
            stored = v.sharing.stored(),
            "{v}"
        );
    }
    if store.iter().any(|&d| d) {
        for (c, d) in cx.cut.iter_mut().zip(&store) {
            *c |= *d;
        }
        st = cx.pass(&vec![None; n]);
    }
    if cx.multi_store {
        // Outputs that share work with another output kernel of their space are
        // computed by it too; the pass is redone so cores see the merged groups.
        let forced = cx.siblings(&st);
        if forced.iter().any(Option::is_some) {
            st = cx.pass(&forced);
        }
    }
    for m in st.members.iter_mut() {
        m.sort_unstable();
    }
    Plan {
        g,
        class,
        mat: st.mat,
        absorbed: st.absorbed,
        out_pos,
        merged_into: st.merged_into,
        members: st.members,
        sharing,
    }
}

/// What one analysis pass reads.
struct Cx<'a> {
    g: &'a Graph,
    class: &'a [Class],
    /// Elementwise nodes stored to keep kernels within [`MAX_FUSED_DEPTH`] and
    /// recomputed chains within [`MAX_RECOMPUTE_DEPTH`].
    cut: Vec<bool>,
    users: &'a [Vec<NodeId>],
    out_pos: &'a [Option<usize>],
    fuse: bool,
    multi_store: bool,
}

/// What one analysis pass decides.
struct PassState {
    mat: Vec<bool>,
    /// Inlined elementwise nodes whose value flows into several kernels (each
    /// recomputes it).
    shared: Vec<bool>,
    /// Per elementwise node: the distinct kernels its value flows into (before it is
    /// decided whether it gets its own).
    readers: Vec<usize>,
    /// Elementwise nodes stored only because they are not cheap to recompute in the
    /// several kernels (or the bigger broadcast space) that read them.
    expensive: Vec<bool>,
    absorbed: Vec<Option<NodeId>>,
    merged_into: Vec<Option<NodeId>>,
    members: Vec<Vec<NodeId>>,
}

impl Cx<'_> {
    fn dims(&self, id: NodeId) -> &[rlx_ir::Dim] {
        self.g.shape(id).dims()
    }

    /// One backward walk over the graph. `forced[k] = Some(r)`: output `k` is stored by
    /// `r`'s kernel (sibling groups; `r` has the highest id of its group).
    fn pass(&self, forced: &[Option<NodeId>]) -> PassState {
        let (g, class, users) = (self.g, self.class, self.users);
        let (fuse, multi_store) = (self.fuse, self.multi_store);
        let n = g.len();
        let is_forced_root = {
            let mut v = vec![false; n];
            for r in forced.iter().flatten() {
                v[r.index()] = true;
            }
            v
        };
        let mut mat = vec![false; n];
        let mut sinks = vec![Sinks::None; n];
        let mut need_buf = vec![false; n];
        let mut absorbed = vec![None; n];
        let mut absorbed_into: Vec<Option<NodeId>> = vec![None; n];
        let mut merged_into: Vec<Option<NodeId>> = vec![None; n];
        let mut members: Vec<Vec<NodeId>> = vec![Vec::new(); n];
        let mut readers = vec![0usize; n];
        let mut expensive = vec![false; n];
        for node in g.nodes().iter().rev() {
            let id = node.id;
            let k = id.index();
            let mut s = Sinks::None;
            let mut needs = false;
            let mut bcast = false;
            for &c in &users[k] {
                let cn = g.node(c);
                match &class[c.index()] {
                    Class::Ew | Class::View => {
                        // A materialized user's sink is its kernel (itself, or the kernel
                        // it is merged into); an inlined one's are where it flows.
                        s.merge(&sinks[c.index()]);
                        if class[c.index()] == Class::View {
                            needs |= need_buf[c.index()];
                            bcast |= matches!(cn.op, Op::Expand { .. } | Op::BroadcastLike);
                        } else if self.dims(c) != self.dims(id) {
                            bcast = true;
                        }
                    }
                    Class::Reduce | Class::Row(_)
                        if cn.inputs[0] == id && !cn.inputs[1..].contains(&id) =>
                    {
                        s.add(absorbed_into[c.index()].unwrap_or(c));
                    }
                    _ => needs = true,
                }
            }
            match &class[k] {
                Class::View => {
                    // A view is only stored when it is an output; a consumer that needs
                    // memory makes its producer materialize instead.
                    mat[k] = self.out_pos[k].is_some();
                    need_buf[k] = needs;
                    sinks[k] = if mat[k] { Sinks::One(id) } else { s };
                }
                Class::Ew => {
                    let multi = s.count() > 1;
                    readers[k] = s.count();
                    let forced_mat = !fuse || needs || self.out_pos[k].is_some() || self.cut[k];
                    expensive[k] = !forced_mat && (multi || bcast) && !cheap(&node.op);
                    mat[k] = forced_mat || expensive[k];
                    let merge = match (forced[k], &s) {
                        (Some(r), _) => Some(r),
                        _ if is_forced_root[k] => None,
                        (None, &Sinks::One(r))
                            if multi_store && mat[k] && !needs && !bcast && !self.cut[k] =>
                        {
                            let ok = class[r.index()] == Class::Ew
                                && mat[r.index()]
                                && self.dims(r) == self.dims(id)
                                && absorbed[r.index()]
                                    .is_none_or(|c: NodeId| class[c.index()].multi_store_core())
                                && epilogue_path_ok(g, class, &mat, users, &merged_into, id, r);
                            ok.then_some(r)
                        }
                        _ => None,
                    };
                    sinks[k] = if mat[k] { Sinks::One(id) } else { s };
                    if let Some(r) = merge {
                        merged_into[k] = Some(r);
                        members[r.index()].push(id);
                        sinks[k] = Sinks::One(r);
                    }
                }
                c if c.is_core() => {
                    let root = match s {
                        Sinks::One(r) if fuse && self.out_pos[k].is_none() && !needs => Some(r),
                        _ => None,
                    };
                    let ok = root.is_some_and(|r| {
                        class[r.index()] == Class::Ew
                            && mat[r.index()]
                            && absorbed[r.index()].is_none()
                            && (members[r.index()].is_empty() || c.multi_store_core())
                            && self.dims(r) == self.dims(id)
                            && epilogue_path_ok(g, class, &mat, users, &merged_into, id, r)
                    });
                    if ok {
                        let r = root.unwrap();
                        absorbed[r.index()] = Some(id);
                        absorbed_into[k] = Some(r);
                    } else {
                        mat[k] = true;
                    }
                }
                Class::Opaque => mat[k] = true,
                Class::Arg(_) | Class::Const => mat[k] = self.out_pos[k].is_some(),
                _ => unreachable!(),
            }
        }
        PassState {
            shared: (0..n)
                .map(|k| class[k] == Class::Ew && !mat[k] && sinks[k].count() > 1)
                .collect(),
            readers,
            expensive,
            mat,
            absorbed,
            merged_into,
            members,
        }
    }

    /// Decide, greedily in node order, which values that `st` recomputes in several
    /// kernels are stored instead: those the cost rule ([`ShareCost`]) says are cheaper
    /// to read back, and those dragging a chain of more than [`MAX_RECOMPUTE_DEPTH`]
    /// inlined ops along. A stored value ends the chains and frontiers through it, so
    /// later values are judged with it as one buffer. Also returns the report of every
    /// decision about a value several kernels read.
    fn sharing(&self, st: &PassState) -> (Vec<bool>, Vec<SharedValue>) {
        let (g, class) = (self.g, self.class);
        let n = g.len();
        let mut store = vec![false; n];
        let mut report = Vec::new();
        // Inlined elementwise ops on the longest chain ending at each node.
        let mut depth = vec![0usize; n];
        // The buffers each inlined value's expression loads.
        let mut frontier: Vec<Frontier> = vec![Frontier::Itself; n];
        for node in g.nodes() {
            let k = node.id.index();
            if st.mat[k] {
                if st.expensive[k] {
                    report.push(SharedValue {
                        node: node.id,
                        op: node.op.name(),
                        sharing: Sharing::StoredExpensive {
                            readers: st.readers[k].max(1),
                        },
                    });
                }
                continue;
            }
            match class[k] {
                Class::View => {
                    depth[k] = depth[node.inputs[0].index()];
                    frontier[k] = frontier[node.inputs[0].index()].clone();
                }
                Class::Const if g.shape(node.id).num_elements() == Some(1) => {
                    frontier[k] = Frontier::Set(Vec::new());
                }
                Class::Ew => {
                    let d = 1 + node
                        .inputs
                        .iter()
                        .map(|i| depth[i.index()])
                        .max()
                        .unwrap_or(0);
                    let mut f = Frontier::Set(Vec::new());
                    for &i in &node.inputs {
                        f.union(&frontier[i.index()], i.index());
                    }
                    frontier[k] = f;
                    depth[k] = d;
                    if !st.shared[k] {
                        continue;
                    }
                    let readers = st.readers[k];
                    let sharing = if d > MAX_RECOMPUTE_DEPTH {
                        Sharing::StoredDeepChain { readers }
                    } else {
                        let c = ShareCost {
                            readers,
                            frontier_bytes: self.frontier_bytes(&frontier[k], node.id),
                            value_bytes: node.shape.dtype().size_bytes(),
                            ops: d,
                        };
                        // Masks stay inline: a comparison is one instruction that fuses
                        // into the select reading it, and backends keep masks in
                        // registers (the CPU JIT compiles no load of a stored mask).
                        if c.should_store() && node.shape.dtype() != DType::Bool {
                            Sharing::StoredByCost(c)
                        } else {
                            Sharing::Recomputed(c)
                        }
                    };
                    if sharing.stored() {
                        store[k] = true;
                        depth[k] = 0;
                        frontier[k] = Frontier::Itself;
                    }
                    report.push(SharedValue {
                        node: node.id,
                        op: node.op.name(),
                        sharing,
                    });
                }
                _ => {}
            }
        }
        (store, report)
    }

    /// Bytes per element of `v` that loading `f` costs: a buffer at least as big as
    /// `v` is read element for element; a smaller one is broadcast and stays in cache.
    fn frontier_bytes(&self, f: &Frontier, v: NodeId) -> f64 {
        let ids = match f {
            Frontier::Wide => return f64::INFINITY,
            Frontier::Itself => return self.g.shape(v).dtype().size_bytes() as f64,
            Frontier::Set(ids) => ids,
        };
        let vs = self.g.shape(v);
        ids.iter()
            .map(|&i| {
                let s = &self.g.nodes()[i as usize].shape;
                let full = match (s.num_elements(), vs.num_elements()) {
                    (Some(a), Some(b)) => a >= b,
                    _ => s.dims() == vs.dims(),
                };
                if full {
                    s.dtype().size_bytes() as f64
                } else {
                    0.0
                }
            })
            .sum()
    }

    /// Sibling groups of elementwise kernels: kernels of one space that read a common
    /// value of that space (an inlined elementwise node, a core, a buffer, an argument)
    /// without views. Each group is stored by its member of highest id; every other
    /// member must have no reader (so computing it later is safe). At most one kernel
    /// of a group may have absorbed a core (a group has one core; joining two would
    /// store one of the products instead of fusing it). Returns, per node, the kernel
    /// that stores it.
    fn siblings(&self, st: &PassState) -> Vec<Option<NodeId>> {
        let (g, class) = (self.g, self.class);
        let n = g.len();
        let root_ok = |r: usize| {
            st.mat[r]
                && class[r] == Class::Ew
                && st.merged_into[r].is_none()
                && st.absorbed[r].is_none_or(|c| class[c.index()].multi_store_core())
        };
        // Union-find over kernel roots, joined through the values they read.
        let mut parent: Vec<usize> = (0..n).collect();
        fn find(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                p[x] = p[p[x]];
                x = p[x];
            }
            x
        }
        let mut owner: Vec<Option<usize>> = vec![None; n];
        // Per union-find root: whether its set has a kernel with an absorbed core.
        let mut has_core: Vec<bool> = (0..n).map(|r| st.absorbed[r].is_some()).collect();
        for r in (0..n).filter(|&r| root_ok(r)) {
            let rid = g.nodes()[r].id;
            let want = self.dims(rid);
            let mut stack: Vec<NodeId> = vec![rid];
            stack.extend(st.members[r].iter().copied());
            let mut seen = std::collections::HashSet::new();
            while let Some(x) = stack.pop() {
                for &i in &g.node(x).inputs {
                    if !seen.insert(i) || self.dims(i) != want {
                        continue;
                    }
                    let ii = i.index();
                    let inlined_ew = class[ii] == Class::Ew && !st.mat[ii];
                    let shared = inlined_ew
                        || st.mat[ii]
                        || class[ii].is_core()
                        || matches!(class[ii], Class::Arg(_));
                    if !shared {
                        continue;
                    }
                    match owner[ii] {
                        None => owner[ii] = Some(r),
                        Some(o) => {
                            let (a, b) = (find(&mut parent, o), find(&mut parent, r));
                            if a != b && !(has_core[a] && has_core[b]) {
                                parent[a] = b;
                                has_core[b] |= has_core[a];
                            }
                        }
                    }
                    if inlined_ew {
                        stack.push(i);
                    }
                }
            }
        }
        let mut groups: std::collections::HashMap<usize, Vec<usize>> = Default::default();
        for r in (0..n).filter(|&r| root_ok(r)) {
            let top = find(&mut parent, r);
            groups.entry(top).or_default().push(r);
        }
        let mut forced = vec![None; n];
        for (_, mut grp) in groups {
            grp.sort_unstable();
            let root = *grp.last().expect("groups are non-empty");
            let rid = g.nodes()[root].id;
            for &m in &grp[..grp.len() - 1] {
                // A member with readers keeps its own kernel (they may run before the root).
                if self.users[m].is_empty() {
                    forced[m] = Some(rid);
                }
            }
        }
        forced
    }
}

/// Every path from `c` (a core, or a node to merge) to kernel root `r` runs through
/// elementwise nodes of `c`'s dims that are unmaterialized or already merged into `r`
/// (so `c` is evaluated once per element of `r`'s space, and read without a view).
fn epilogue_path_ok(
    g: &Graph,
    class: &[Class],
    mat: &[bool],
    users: &[Vec<NodeId>],
    merged_into: &[Option<NodeId>],
    c: NodeId,
    r: NodeId,
) -> bool {
    let want = g.shape(c).dims();
    let mut stack = vec![c];
    // A set, not a per-node table: this runs once per core and per merge candidate,
    // and a table the size of the graph each time would make the pass quadratic.
    let mut seen = std::collections::HashSet::new();
    while let Some(x) = stack.pop() {
        for &u in &users[x.index()] {
            if !seen.insert(u) {
                continue;
            }
            if class[u.index()] != Class::Ew || g.shape(u).dims() != want {
                return false;
            }
            if u == r || merged_into[u.index()] == Some(r) {
                // The root, or a member whose own paths to the root were checked.
                continue;
            }
            if mat[u.index()] {
                return false;
            }
            stack.push(u);
        }
    }
    true
}

/// Build the kernels and buffers of `g` (liveness is filled in by `memplan`).
pub(crate) fn fuse(
    g: &Graph,
    args: &[(String, Shape)],
    opts: &CompileOptions,
) -> IrResult<Program> {
    let plan = analyze(g, args, opts);
    let mut buffers: Vec<Buffer> = Vec::new();
    let mut buf_of: Vec<Option<BufId>> = vec![None; g.len()];
    // Buffers of materialized nodes, in node order.
    for node in g.nodes() {
        let k = node.id.index();
        if !plan.mat[k] {
            continue;
        }
        let kind = match plan.out_pos[k] {
            Some(j) => BufKind::Output(j),
            None => BufKind::Temp,
        };
        buf_of[k] = Some(buffers.len());
        buffers.push(Buffer {
            kind,
            shape: node.shape.clone(),
            node: node.id,
        });
    }
    let mut em = emit::Emitter::new(&plan, buffers, buf_of);
    let mut kernels = Vec::new();
    for node in g.nodes() {
        let k = node.id.index();
        if plan.mat[k] && plan.merged_into[k].is_none() {
            kernels.push(em.kernel(node.id)?);
        }
    }
    let outputs = g.outputs.iter().map(|o| em.output_buf(*o)).collect();
    let mut p = Program {
        name: g.name.clone(),
        buffers: em.buffers,
        kernels,
        args: args.to_vec(),
        outputs,
        liveness: Default::default(),
        graph_nodes: g.len(),
        naive_bytes: naive_bytes(g),
        guards: Default::default(),
        sharing: plan.sharing.clone(),
    };
    if opts.fuse && opts.row_groups {
        rowgroup::row_groups(&mut p);
    }
    Ok(p)
}

/// Bytes of every non-leaf node's value (what an unfused executor would hold).
fn naive_bytes(g: &Graph) -> Option<usize> {
    let mut total = 0;
    for n in g.nodes() {
        if !n.op.is_leaf() {
            total += n.shape.size_bytes()?;
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests;
