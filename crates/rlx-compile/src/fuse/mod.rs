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

mod emit;

use crate::program::{BufId, BufKind, Buffer, Program, RowOp};
use rlx_ir::{
    Activation, BinaryOp, DType, Graph, IrResult, NodeId, Op, ReduceOp, Shape, norm_axis,
};

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
}

/// Where the value of an inlined node flows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sinks {
    None,
    One(NodeId),
    Many,
}

impl Sinks {
    fn add(&mut self, k: NodeId) {
        *self = match *self {
            Sinks::None => Sinks::One(k),
            Sinks::One(j) if j == k => Sinks::One(k),
            _ => Sinks::Many,
        }
    }
    fn merge(&mut self, o: Sinks) {
        match o {
            Sinks::None => {}
            Sinks::One(k) => self.add(k),
            Sinks::Many => *self = Sinks::Many,
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
        Op::Attention { .. } if keeps(&n.op) && dt == DType::F32 => Class::Attention,
        _ => Class::Opaque,
    }
}

/// Decide classes, materialization and absorption for every node of `g`.
pub(crate) fn analyze<'g>(
    g: &'g Graph,
    args: &[(String, Shape)],
    keep_whole: &[String],
    fuse: bool,
) -> Plan<'g> {
    let n = g.len();
    let class: Vec<Class> = g
        .nodes()
        .iter()
        .map(|x| classify(g, x, args, keep_whole))
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
    let dims = |id: NodeId| g.shape(id).dims();
    let mut mat = vec![false; n];
    let mut sinks = vec![Sinks::None; n];
    let mut need_buf = vec![false; n];
    let mut absorbed = vec![None; n];
    let mut absorbed_into: Vec<Option<NodeId>> = vec![None; n];
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
                    if mat[c.index()] {
                        s.add(c);
                    } else {
                        s.merge(sinks[c.index()]);
                    }
                    if class[c.index()] == Class::View {
                        needs |= need_buf[c.index()];
                        bcast |= matches!(cn.op, Op::Expand { .. } | Op::BroadcastLike);
                    } else if dims(c) != dims(id) {
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
                mat[k] = out_pos[k].is_some();
                need_buf[k] = needs;
                sinks[k] = if mat[k] { Sinks::One(id) } else { s };
            }
            Class::Ew => {
                let multi = matches!(s, Sinks::Many);
                mat[k] = !fuse
                    || needs
                    || out_pos[k].is_some()
                    || ((multi || bcast) && !cheap(&node.op));
                sinks[k] = if mat[k] { Sinks::One(id) } else { s };
            }
            c if c.is_core() => {
                let root = match s {
                    Sinks::One(r) if fuse && out_pos[k].is_none() && !needs => Some(r),
                    _ => None,
                };
                let ok = root.is_some_and(|r| {
                    class[r.index()] == Class::Ew
                        && mat[r.index()]
                        && absorbed[r.index()].is_none()
                        && dims(r) == dims(id)
                        && epilogue_path_ok(g, &class, &mat, &users, id, r)
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
            Class::Arg(_) | Class::Const => mat[k] = out_pos[k].is_some(),
            _ => unreachable!(),
        }
    }
    Plan {
        g,
        class,
        mat,
        absorbed,
        out_pos,
    }
}

/// Every path from core `c` to root `r` runs through unmaterialized elementwise nodes
/// of `c`'s dims (so the epilogue is evaluated once per element of the result).
fn epilogue_path_ok(
    g: &Graph,
    class: &[Class],
    mat: &[bool],
    users: &[Vec<NodeId>],
    c: NodeId,
    r: NodeId,
) -> bool {
    let want = g.shape(c).dims();
    let mut stack = vec![c];
    let mut seen = vec![false; g.len()];
    while let Some(x) = stack.pop() {
        for &u in &users[x.index()] {
            if seen[u.index()] {
                continue;
            }
            seen[u.index()] = true;
            if class[u.index()] != Class::Ew || g.shape(u).dims() != want {
                return false;
            }
            if u == r {
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
    keep_whole: &[String],
    fuse: bool,
) -> IrResult<Program> {
    let plan = analyze(g, args, keep_whole, fuse);
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
        if plan.mat[k] {
            kernels.push(em.kernel(node.id)?);
        }
    }
    let outputs = g.outputs.iter().map(|o| em.output_buf(*o)).collect();
    Ok(Program {
        name: g.name.clone(),
        buffers: em.buffers,
        kernels,
        args: args.to_vec(),
        outputs,
        liveness: Default::default(),
        graph_nodes: g.len(),
        naive_bytes: naive_bytes(g),
    })
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
