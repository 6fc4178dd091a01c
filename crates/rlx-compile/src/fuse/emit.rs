//! Emission: turn the fusion plan into kernels (expressions, loads, stores).

use super::{Class, Plan};
use crate::program::{
    BufId, BufKind, Buffer, EOp, Expr, Kernel, KernelKind, Load, Scalar, Store, ViewStep,
};
use rlx_ir::{DType, Dim, IrResult, NodeId, Op, ReduceOp, TensorData};
use std::collections::HashMap;

/// Per-kernel state: its loads and the nodes fused into it.
struct KCtx {
    loads: Vec<Load>,
    load_memo: HashMap<Load, usize>,
    fused: Vec<NodeId>,
    core: Option<NodeId>,
    /// The kernel's root (nodes merged into it are computed here, not loaded).
    root: NodeId,
}

/// Per-expression state: the expression and its memo of emitted (node, view) pairs.
#[derive(Default)]
struct ECtx {
    expr: Expr,
    memo: HashMap<(NodeId, Vec<ViewStep>), u32>,
}

/// An elementwise node being emitted: the operands emitted so far (value, dtype).
struct EwFrame {
    n: NodeId,
    chain: Vec<ViewStep>,
    args: Vec<(u32, DType)>,
}

/// What starting to emit a node gives.
enum Entered {
    /// Its expression node (nothing left to emit for it).
    Value(u32),
    /// An elementwise node whose operands must be emitted first.
    Open(EwFrame),
}

pub(super) struct Emitter<'p, 'g> {
    plan: &'p Plan<'g>,
    pub(super) buffers: Vec<Buffer>,
    buf_of: Vec<Option<BufId>>,
    arg_buf: HashMap<usize, BufId>,
    const_buf: HashMap<NodeId, BufId>,
}

/// The view steps of movement node `n` (from its input's dims to its own).
fn steps_of(n: &rlx_ir::Node) -> Vec<ViewStep> {
    match &n.op {
        Op::Reshape { .. } => vec![ViewStep::Reshape(n.shape.dims().to_vec())],
        Op::Transpose { perm } => vec![ViewStep::Transpose(perm.clone())],
        Op::Narrow { axis, start, len } => vec![ViewStep::Narrow {
            axis: *axis,
            start: *start,
            len: *len,
        }],
        Op::Expand { .. } | Op::BroadcastLike => vec![ViewStep::Expand(n.shape.dims().to_vec())],
        Op::StopGradient => vec![],
        other => unreachable!("{} is not a view", other.name()),
    }
}

fn join(mut a: Vec<ViewStep>, b: &[ViewStep]) -> Vec<ViewStep> {
    a.extend_from_slice(b);
    a
}

impl<'p, 'g> Emitter<'p, 'g> {
    pub(super) fn new(
        plan: &'p Plan<'g>,
        buffers: Vec<Buffer>,
        buf_of: Vec<Option<BufId>>,
    ) -> Self {
        Emitter {
            plan,
            buffers,
            buf_of,
            arg_buf: HashMap::new(),
            const_buf: HashMap::new(),
        }
    }

    pub(super) fn output_buf(&self, o: NodeId) -> BufId {
        self.buf_of[o.index()].expect("outputs are materialized")
    }

    fn node(&self, n: NodeId) -> &'g rlx_ir::Node {
        self.plan.g.node(n)
    }

    fn dims(&self, n: NodeId) -> &'g [Dim] {
        self.plan.g.shape(n).dims()
    }

    /// The buffer of a leaf (argument or multi-element constant), created on first use.
    fn leaf_buf(&mut self, n: NodeId) -> BufId {
        let node = self.node(n);
        match &self.plan.class[n.index()] {
            Class::Arg(i) => *self.arg_buf.entry(*i).or_insert_with(|| {
                self.buffers.push(Buffer {
                    kind: BufKind::Arg(*i),
                    shape: node.shape.clone(),
                    node: n,
                });
                self.buffers.len() - 1
            }),
            Class::Const => *self.const_buf.entry(n).or_insert_with(|| {
                let Op::Constant { data } = &node.op else {
                    unreachable!()
                };
                self.buffers.push(Buffer {
                    kind: BufKind::Const(data.clone()),
                    shape: node.shape.clone(),
                    node: n,
                });
                self.buffers.len() - 1
            }),
            c => unreachable!("{c:?} is not a leaf"),
        }
    }

    fn load(&self, kc: &mut KCtx, buf: BufId, steps: Vec<ViewStep>) -> usize {
        let l = Load { buf, steps };
        if let Some(&i) = kc.load_memo.get(&l) {
            return i;
        }
        kc.loads.push(l.clone());
        kc.load_memo.insert(l, kc.loads.len() - 1);
        kc.loads.len() - 1
    }

    /// A load of node `n` seen through `chain` (walking views back to a buffer).
    fn load_of(&mut self, mut n: NodeId, mut chain: Vec<ViewStep>, kc: &mut KCtx) -> usize {
        loop {
            if let Some(b) = self.buf_of[n.index()] {
                return self.load(kc, b, chain);
            }
            match &self.plan.class[n.index()] {
                Class::Arg(_) | Class::Const => {
                    let b = self.leaf_buf(n);
                    return self.load(kc, b, chain);
                }
                Class::View => {
                    let node = self.node(n);
                    chain = join(steps_of(node), &chain);
                    kc.fused.push(n);
                    n = node.inputs[0];
                }
                c => unreachable!("operand {n} ({c:?}) of a whole-op kernel was not materialized"),
            }
        }
    }

    /// Emit the value of `n` seen through `chain` into `ec`.
    ///
    /// Iterative (an explicit stack of elementwise nodes whose operands are being
    /// emitted), so a fused chain of any length needs no call stack in proportion to
    /// it. Expression nodes are pushed in the order a depth-first walk of the operands,
    /// left to right, reaches them.
    fn emit(
        &mut self,
        n: NodeId,
        chain: Vec<ViewStep>,
        kc: &mut KCtx,
        ec: &mut ECtx,
        is_root: bool,
    ) -> u32 {
        let mut stack: Vec<EwFrame> = Vec::new();
        let mut step = self.enter(n, chain, kc, ec, is_root);
        loop {
            match step {
                Entered::Open(f) => stack.push(f),
                Entered::Value(v) => {
                    let Some(top) = stack.last_mut() else {
                        return v;
                    };
                    let i = self.node(top.n).inputs[top.args.len()];
                    top.args.push((v, self.plan.g.shape(i).dtype()));
                }
            }
            let top = stack.last().expect("a frame was just pushed or fed");
            let inputs = &self.node(top.n).inputs;
            step = if top.args.len() < inputs.len() {
                let (n, i) = (top.n, inputs[top.args.len()]);
                let pre = if self.dims(i) != self.dims(n) {
                    vec![ViewStep::Expand(self.dims(n).to_vec())]
                } else {
                    vec![]
                };
                let chain = join(pre, &top.chain);
                self.enter(i, chain, kc, ec, false)
            } else {
                let f = stack.pop().expect("checked above");
                Entered::Value(self.finish_ew(f, ec))
            };
        }
    }

    /// Start emitting `n` seen through `chain`: a value when it needs no operands
    /// emitted (a load, a literal, the absorbed core, a memoized node), else the frame
    /// of the elementwise node whose operands come next. Views are walked through.
    fn enter(
        &mut self,
        mut n: NodeId,
        mut chain: Vec<ViewStep>,
        kc: &mut KCtx,
        ec: &mut ECtx,
        mut is_root: bool,
    ) -> Entered {
        loop {
            if !is_root && let Some(b) = self.buf_of[n.index()] {
                if self.plan.merged_into[n.index()] == Some(kc.root) {
                    // A result this kernel stores too: emitted earlier (members go in
                    // node order), and only ever read through same-space elementwise nodes.
                    return Entered::Value(
                        *ec.memo
                            .get(&(n, chain))
                            .expect("a merged result is emitted before its readers, without views"),
                    );
                }
                let dt = self.buffers[b].shape.dtype();
                let l = self.load(kc, b, chain);
                return Entered::Value(ec.expr.push(EOp::Load(l), vec![], dt));
            }
            let node = self.node(n);
            let dt = node.shape.dtype();
            let v = match &self.plan.class[n.index()] {
                Class::Arg(_) => {
                    let b = self.leaf_buf(n);
                    let l = self.load(kc, b, chain);
                    ec.expr.push(EOp::Load(l), vec![], dt)
                }
                Class::Const => {
                    if node.shape.num_elements() == Some(1) {
                        let Op::Constant { data } = &node.op else {
                            unreachable!()
                        };
                        let d = TensorData::new(dt, &[1], data.clone())
                            .expect("constant payload fits its shape");
                        let s = if dt.is_float() {
                            Scalar::F(d.to_f64_vec()[0])
                        } else {
                            Scalar::I(d.to_i64_vec()[0])
                        };
                        ec.expr.push(EOp::Const(s), vec![], dt)
                    } else {
                        let b = self.leaf_buf(n);
                        let l = self.load(kc, b, chain);
                        ec.expr.push(EOp::Load(l), vec![], dt)
                    }
                }
                Class::View => {
                    kc.fused.push(n);
                    chain = join(steps_of(node), &chain);
                    n = node.inputs[0];
                    is_root = false;
                    continue;
                }
                Class::Ew => {
                    let key = (n, chain);
                    if let Some(&v) = ec.memo.get(&key) {
                        return Entered::Value(v);
                    }
                    kc.fused.push(n);
                    return Entered::Open(EwFrame {
                        n,
                        chain: key.1,
                        args: Vec::with_capacity(node.inputs.len()),
                    });
                }
                c if c.is_core() && kc.core == Some(n) => {
                    debug_assert!(chain.is_empty(), "an absorbed core is read without views");
                    ec.expr.push(EOp::Core, vec![], dt)
                }
                c => unreachable!("node {n} ({c:?}) has no buffer and cannot be inlined"),
            };
            return Entered::Value(v);
        }
    }

    /// Push elementwise node `f.n` over its emitted operands `f.args` (with the casts
    /// its op implies) and memoize it.
    fn finish_ew(&self, f: EwFrame, ec: &mut ECtx) -> u32 {
        let node = self.node(f.n);
        let dt = node.shape.dtype();
        let args = f.args;
        let cast = |ec: &mut ECtx, (v, from): (u32, DType), to: DType| {
            if from == to {
                v
            } else {
                ec.expr.push(EOp::Cast, vec![v], to)
            }
        };
        let v = match &node.op {
            Op::Activation(a) => ec.expr.push(EOp::Unary(*a), vec![args[0].0], dt),
            Op::Cast { .. } => cast(ec, args[0], dt),
            Op::Binary(b) => {
                let l = cast(ec, args[0], dt);
                let r = cast(ec, args[1], dt);
                ec.expr.push(EOp::Binary(*b), vec![l, r], dt)
            }
            Op::Compare(c) => ec
                .expr
                .push(EOp::Compare(*c), vec![args[0].0, args[1].0], dt),
            Op::Where => {
                let m = cast(ec, args[0], DType::Bool);
                let t = cast(ec, args[1], dt);
                let f = cast(ec, args[2], dt);
                ec.expr.push(EOp::Where, vec![m, t, f], dt)
            }
            Op::RoundToFormat {
                exp_bits,
                man_bits,
                max_normal,
            } => ec.expr.push(
                EOp::RoundToFormat {
                    exp_bits: *exp_bits,
                    man_bits: *man_bits,
                    max_normal: *max_normal,
                },
                vec![args[0].0],
                dt,
            ),
            other => unreachable!("{} is not a fused elementwise op", other.name()),
        };
        ec.memo.insert((f.n, f.chain), v);
        v
    }

    /// The kernel whose root is `root`.
    pub(super) fn kernel(&mut self, root: NodeId) -> IrResult<Kernel> {
        let plan = self.plan;
        let node = self.node(root);
        let buf = self.buf_of[root.index()].expect("kernel roots have buffers");
        let mut kc = KCtx {
            loads: Vec::new(),
            load_memo: HashMap::new(),
            fused: Vec::new(),
            core: plan.absorbed[root.index()],
            root,
        };
        let class = plan.class[root.index()].clone();
        let kind = match class {
            Class::Opaque => {
                kc.fused.push(root);
                let inputs = node
                    .inputs
                    .iter()
                    .map(|&i| self.load_of(i, vec![], &mut kc))
                    .collect();
                KernelKind::Opaque {
                    op: node.op.clone(),
                    inputs,
                    out: node.shape.clone(),
                }
            }
            c if c.is_core() => {
                let mut ep = Expr::default();
                ep.push(EOp::Core, vec![], node.shape.dtype());
                self.core_kind(root, &mut kc, ep)
            }
            _ => {
                let mut ec = ECtx::default();
                // Results merged into this kernel first (in node order), then the root.
                let mut stores = Vec::new();
                for &m in &plan.members[root.index()] {
                    let v = self.emit(m, vec![], &mut kc, &mut ec, true);
                    let buf = self.buf_of[m.index()].expect("merged results have buffers");
                    stores.push(Store { value: v, buf });
                }
                let v = self.emit(root, vec![], &mut kc, &mut ec, true);
                stores.push(Store { value: v, buf });
                let kind = match kc.core {
                    Some(c) => self.core_kind(c, &mut kc, ec.expr),
                    None => KernelKind::Elementwise {
                        space: self.dims(root).to_vec(),
                        expr: ec.expr,
                    },
                };
                return Ok(self.finish(kind, kc, stores));
            }
        };
        let stores = vec![Store { value: 0, buf }];
        Ok(self.finish(kind, kc, stores))
    }

    fn finish(&self, kind: KernelKind, mut kc: KCtx, stores: Vec<Store>) -> Kernel {
        kc.fused.sort();
        kc.fused.dedup();
        let fused_names = kc.fused.iter().map(|&n| self.node(n).op.name()).collect();
        Kernel {
            kind,
            loads: kc.loads,
            stores,
            fused: kc.fused,
            fused_names,
        }
    }

    /// The kind of core kernel `c` with `epilogue` over its result.
    fn core_kind(&mut self, c: NodeId, kc: &mut KCtx, epilogue: Expr) -> KernelKind {
        let node = self.node(c);
        kc.fused.push(c);
        let dt = node.shape.dtype();
        match (&self.plan.class[c.index()], &node.op) {
            (Class::Reduce, op) => {
                let (rop, arg, mut axes, keep_dim) = match op {
                    Op::Reduce { op, axes, keep_dim } => (*op, false, axes.clone(), *keep_dim),
                    Op::ArgMax { axis, keep_dim } => (ReduceOp::Max, true, vec![*axis], *keep_dim),
                    Op::ArgMin { axis, keep_dim } => (ReduceOp::Min, true, vec![*axis], *keep_dim),
                    other => unreachable!("{} is not a reduction", other.name()),
                };
                let mut pe = ECtx::default();
                let input = self.emit(node.inputs[0], vec![], kc, &mut pe, false);
                axes.sort_unstable();
                axes.dedup();
                KernelKind::Reduce {
                    op: rop,
                    arg,
                    in_space: self.dims(node.inputs[0]).to_vec(),
                    axes,
                    keep_dim,
                    prologue: pe.expr,
                    input,
                    out_space: node.shape.dims().to_vec(),
                    dtype: dt,
                    epilogue,
                }
            }
            (Class::Row(op), _) => {
                let mut pe = ECtx::default();
                let input = self.emit(node.inputs[0], vec![], kc, &mut pe, false);
                let space = node.shape.dims().to_vec();
                let params = if node.inputs.len() == 3 {
                    let c_dim = vec![*space.last().expect("row ops have an axis")];
                    let mut param = |i: NodeId, this: &mut Self| {
                        let chain = if this.dims(i) != c_dim.as_slice() {
                            vec![ViewStep::Expand(c_dim.clone())]
                        } else {
                            vec![]
                        };
                        this.load_of(i, chain, kc)
                    };
                    let g = param(node.inputs[1], self);
                    let b = param(node.inputs[2], self);
                    Some((g, b))
                } else {
                    None
                };
                KernelKind::Row {
                    op: *op,
                    space,
                    prologue: pe.expr,
                    input,
                    params,
                    dtype: dt,
                    epilogue,
                }
            }
            (Class::Contract, _) => {
                let a = self.load_of(node.inputs[0], vec![], kc);
                let b = self.load_of(node.inputs[1], vec![], kc);
                KernelKind::Contraction {
                    a,
                    b,
                    out_space: node.shape.dims().to_vec(),
                    dtype: dt,
                    epilogue,
                }
            }
            (Class::Attention, op) => {
                let inputs = node
                    .inputs
                    .iter()
                    .map(|&i| self.load_of(i, vec![], kc))
                    .collect();
                KernelKind::Attention {
                    op: op.clone(),
                    inputs,
                    out_space: node.shape.dims().to_vec(),
                    dtype: dt,
                    epilogue,
                }
            }
            (c, op) => unreachable!("{} ({c:?}) is not a core", op.name()),
        }
    }
}
