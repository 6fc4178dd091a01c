//! What the graph transforms share: [`Build`], the node-building helpers of the
//! reverse-mode builder (`autodiff::builder::ReverseBuilder`) and of the forward-mode/batching
//! emitter (`jvp::emit::Emitter`), the op-family classification their rule dispatch
//! follows, and the activity analysis and id checks at their entry points.
//!
//! Every helper skips work it can prove is a no-op (a cast to the same dtype, an
//! identity transpose, a reduction over no axis, a scale by one), so the appended
//! graph stays lean; rank-0 constants are shared per (value, dtype).

use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Dim, Graph, IrError, IrResult, NodeId, Op, ReduceOp, Shape,
    TensorData,
};
use std::collections::HashMap;

/// `[2, ?0]`: dims without the dtype, for messages.
pub(crate) fn dims_str(dims: &[Dim]) -> String {
    let v: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", v.join(", "))
}

/// A node builder appending to one graph. Implementors supply graph access, the
/// scalar cache, node emission and the reshapes (whose fallbacks for several dynamic
/// axes differ per transform); the arithmetic and shape helpers are provided.
pub(crate) trait Build {
    /// The graph being extended.
    fn graph(&self) -> &Graph;
    /// The graph being extended, mutably.
    fn graph_mut(&mut self) -> &mut Graph;
    /// Shared rank-0 constants by (bits of the f64 value, dtype).
    fn scalar_cache(&mut self) -> &mut HashMap<(u64, DType), NodeId>;
    /// Append `op` on `inputs`, inferring its type.
    fn op(&mut self, op: Op, inputs: Vec<NodeId>) -> IrResult<NodeId>;
    /// Reshape to `target` (no node when the dims already match).
    fn reshape_to(&mut self, x: NodeId, target: &[Dim]) -> IrResult<NodeId>;
    /// Insert a size-1 axis at `axis` (`axis == rank` appends one).
    fn unsqueeze(&mut self, x: NodeId, axis: usize) -> IrResult<NodeId>;

    // ------------------------------------------------------------------ basics

    /// The result type of `id`.
    fn shape(&self, id: NodeId) -> Shape {
        self.graph().shape(id).clone()
    }

    /// The dims of `id`.
    fn dims(&self, id: NodeId) -> Vec<Dim> {
        self.graph().shape(id).dims().to_vec()
    }

    /// The rank of `id`.
    fn rank(&self, id: NodeId) -> usize {
        self.graph().shape(id).rank()
    }

    /// The dtype of `id`.
    fn dtype(&self, id: NodeId) -> DType {
        self.graph().shape(id).dtype()
    }

    /// A constant node holding `data`.
    fn constant(&mut self, data: TensorData) -> NodeId {
        let shape = data.shape();
        self.graph_mut()
            .add_node(Op::Constant { data: data.bytes }, vec![], shape)
    }

    /// A shared rank-0 constant `v` of dtype `dt` (complex: `v + 0i`).
    fn scalar(&mut self, v: f64, dt: DType) -> NodeId {
        if let Some(&id) = self.scalar_cache().get(&(v.to_bits(), dt)) {
            return id;
        }
        let data = if dt.is_complex() {
            TensorData::from_f64_as(dt, &[], &[v, 0.0])
        } else {
            TensorData::from_f64_as(dt, &[], &[v])
        };
        let id = self.constant(data);
        self.scalar_cache().insert((v.to_bits(), dt), id);
        id
    }

    /// A rank-0 constant with `like`'s dtype.
    fn scalar_like(&mut self, v: f64, like: NodeId) -> NodeId {
        let dt = self.dtype(like);
        self.scalar(v, dt)
    }

    // ------------------------------------------------------------- arithmetic

    /// `l <b> r`.
    fn bin(&mut self, b: BinaryOp, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.op(Op::Binary(b), vec![l, r])
    }

    /// `l + r`.
    fn add(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.bin(BinaryOp::Add, l, r)
    }

    /// `l − r`.
    fn sub(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.bin(BinaryOp::Sub, l, r)
    }

    /// `l · r`.
    fn mul(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.bin(BinaryOp::Mul, l, r)
    }

    /// `l / r`.
    fn div(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.bin(BinaryOp::Div, l, r)
    }

    /// `x · v` (no node when `v` is 1).
    fn scale(&mut self, x: NodeId, v: f64) -> IrResult<NodeId> {
        if v == 1.0 {
            return Ok(x);
        }
        let c = self.scalar_like(v, x);
        self.mul(x, c)
    }

    /// `x + v` (no node when `v` is 0).
    fn add_scalar(&mut self, x: NodeId, v: f64) -> IrResult<NodeId> {
        if v == 0.0 {
            return Ok(x);
        }
        let c = self.scalar_like(v, x);
        self.add(x, c)
    }

    /// `v − x`.
    fn rsub_scalar(&mut self, v: f64, x: NodeId) -> IrResult<NodeId> {
        let c = self.scalar_like(v, x);
        self.sub(c, x)
    }

    /// `a(x)`.
    fn act(&mut self, a: Activation, x: NodeId) -> IrResult<NodeId> {
        self.op(Op::Activation(a), vec![x])
    }

    /// `−x`.
    fn neg(&mut self, x: NodeId) -> IrResult<NodeId> {
        self.act(Activation::Neg, x)
    }

    /// `x · x`.
    fn square(&mut self, x: NodeId) -> IrResult<NodeId> {
        self.mul(x, x)
    }

    /// `l <c> r`.
    fn cmp(&mut self, c: CmpOp, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.op(Op::Compare(c), vec![l, r])
    }

    /// `x <c> v` against a scalar of `x`'s dtype.
    fn cmp_scalar(&mut self, c: CmpOp, x: NodeId, v: f64) -> IrResult<NodeId> {
        let s = self.scalar_like(v, x);
        self.cmp(c, x, s)
    }

    /// `where(mask, t, f)`.
    fn select(&mut self, mask: NodeId, t: NodeId, f: NodeId) -> IrResult<NodeId> {
        self.op(Op::Where, vec![mask, t, f])
    }

    /// `where(mask, x, 0)`.
    fn keep_where(&mut self, mask: NodeId, x: NodeId) -> IrResult<NodeId> {
        let z = self.scalar_like(0.0, x);
        self.select(mask, x, z)
    }

    /// `where(mask, 0, x)`.
    fn zero_where(&mut self, mask: NodeId, x: NodeId) -> IrResult<NodeId> {
        let z = self.scalar_like(0.0, x);
        self.select(mask, z, x)
    }

    /// `x` converted to `dt` (no node when it already is).
    fn cast(&mut self, x: NodeId, dt: DType) -> IrResult<NodeId> {
        if self.dtype(x) == dt {
            return Ok(x);
        }
        self.op(Op::Cast { to: dt }, vec![x])
    }

    /// A reduction (no node for an empty axis list).
    fn reduce(
        &mut self,
        op: ReduceOp,
        x: NodeId,
        axes: Vec<usize>,
        keep_dim: bool,
    ) -> IrResult<NodeId> {
        if axes.is_empty() {
            return Ok(x);
        }
        self.op(Op::Reduce { op, axes, keep_dim }, vec![x])
    }

    /// Sum over `axes` (no node for an empty axis list).
    fn sum(&mut self, x: NodeId, axes: Vec<usize>, keep: bool) -> IrResult<NodeId> {
        self.reduce(ReduceOp::Sum, x, axes, keep)
    }

    /// Mean over `axes` (no node for an empty axis list).
    fn mean(&mut self, x: NodeId, axes: Vec<usize>, keep: bool) -> IrResult<NodeId> {
        self.reduce(ReduceOp::Mean, x, axes, keep)
    }

    /// `a @ b`.
    fn matmul(&mut self, a: NodeId, b: NodeId) -> IrResult<NodeId> {
        self.op(Op::MatMul, vec![a, b])
    }

    /// Sum of the present terms; `None` when there is none.
    fn sum_terms(&mut self, terms: Vec<NodeId>) -> IrResult<Option<NodeId>> {
        let mut acc: Option<NodeId> = None;
        for t in terms {
            acc = Some(match acc {
                None => t,
                Some(a) => self.add(a, t)?,
            });
        }
        Ok(acc)
    }

    // ---------------------------------------------------------- shape plumbing

    /// Permute axes (no node for the identity permutation).
    fn transpose(&mut self, x: NodeId, perm: Vec<usize>) -> IrResult<NodeId> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        self.op(Op::Transpose { perm }, vec![x])
    }

    /// Swap the last two axes.
    fn swap_last_axes(&mut self, x: NodeId) -> IrResult<NodeId> {
        let r = self.rank(x);
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        self.transpose(x, perm)
    }

    /// Move axis `from` to position `to`, keeping the order of the others.
    fn move_axis(&mut self, x: NodeId, from: usize, to: usize) -> IrResult<NodeId> {
        let r = self.rank(x);
        let mut perm: Vec<usize> = (0..r).filter(|&a| a != from).collect();
        perm.insert(to, from);
        self.transpose(x, perm)
    }

    /// Append a trailing size-1 axis.
    fn unsqueeze_last(&mut self, x: NodeId) -> IrResult<NodeId> {
        let r = self.rank(x);
        self.unsqueeze(x, r)
    }

    /// Dims of `x` with every axis in `axes` set to 1.
    fn keep_dims(&self, x: NodeId, axes: &[usize]) -> Vec<Dim> {
        self.dims(x)
            .into_iter()
            .enumerate()
            .map(|(i, d)| if axes.contains(&i) { Dim::Static(1) } else { d })
            .collect()
    }

    /// Broadcast `x` to the dims of `like` (NumPy rules, values of `like` unused):
    /// an `Expand` when every target dim is static or already present in `x`, else a
    /// `BroadcastLike`, which follows dynamic dims.
    fn broadcast_like(&mut self, x: NodeId, like: NodeId) -> IrResult<NodeId> {
        let (xs, ls) = (self.shape(x), self.shape(like));
        if xs.dims() == ls.dims() {
            return Ok(x);
        }
        let off = ls.rank().saturating_sub(xs.rank());
        let mut target = Vec::with_capacity(ls.rank());
        let mut expandable = xs.rank() <= ls.rank();
        for (i, d) in ls.dims().iter().enumerate() {
            match d {
                Dim::Static(n) => target.push(*n as i64),
                Dim::Dynamic(_) if i >= off && xs.dims().get(i - off) == Some(d) => target.push(-1),
                Dim::Dynamic(_) => expandable = false,
            }
        }
        if expandable {
            self.op(
                Op::Expand {
                    target_shape: target,
                },
                vec![x],
            )
        } else {
            self.op(Op::BroadcastLike, vec![x, like])
        }
    }

    /// Zeros of `like`'s type.
    fn zeros_like(&mut self, like: NodeId) -> IrResult<NodeId> {
        let z = self.scalar_like(0.0, like);
        self.broadcast_like(z, like)
    }

    /// A tensor of `like`'s dims filled with `v`, in dtype `dt`.
    fn fill_like(&mut self, v: f64, like: NodeId, dt: DType) -> IrResult<NodeId> {
        let s = self.scalar(v, dt);
        self.broadcast_like(s, like)
    }

    /// Concatenate along `axis` (no node for a single piece).
    fn concat(&mut self, pieces: Vec<NodeId>, axis: usize) -> IrResult<NodeId> {
        if pieces.len() == 1 {
            return Ok(pieces[0]);
        }
        self.op(Op::Concat { axis }, pieces)
    }
}

/// The rule family of an op: the transforms keep one rule module per family, so
/// each dispatches on this instead of listing every op again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// Inputs, params and constants: nothing to derive.
    Leaf,
    /// Activations, casts, binaries, compares, `where`.
    Elementwise,
    /// Matmuls, solves and the scaled (quantized) matmul family.
    Linalg,
    /// Normalizations, softmaxes, cross-entropy, rope, spline activations.
    Nn,
    /// Fused attention.
    Attention,
    /// Reshapes, transposes, slices, concatenation, broadcasts, pads, gathers, scatters.
    Movement,
    /// Reductions, arg-reductions, cumulative sums.
    Reduce,
    /// Convolutions, pooling (and their gradients), FFTs.
    Conv,
    /// `Scan`: the body is transformed recursively.
    Scan,
}

/// The rule family of `op` (exhaustive, so a new op must be placed here).
pub(crate) fn family(op: &Op) -> Family {
    match op {
        Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } => Family::Leaf,
        Op::Activation(_)
        | Op::Cast { .. }
        | Op::StopGradient
        | Op::RoundToFormat { .. }
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Where => Family::Elementwise,
        Op::MatMul
        | Op::FusedMatMulBiasAct { .. }
        | Op::DenseSolve
        | Op::SynthMatMul { .. }
        | Op::ScaledMatMul { .. }
        | Op::ScaledQuantize { .. }
        | Op::ScaledQuantScale { .. } => Family::Linalg,
        Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::SoftmaxCrossEntropy
        | Op::SoftmaxCrossEntropyWithLogits
        | Op::Rope { .. }
        | Op::SplineActivation { .. } => Family::Nn,
        Op::Attention { .. } | Op::AttentionVjp { .. } => Family::Attention,
        Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Narrow { .. }
        | Op::Concat { .. }
        | Op::Expand { .. }
        | Op::BroadcastLike
        | Op::Pad { .. }
        | Op::Gather { .. }
        | Op::ScatterAdd { .. } => Family::Movement,
        Op::Reduce { .. } | Op::ArgMax { .. } | Op::ArgMin { .. } | Op::Cumsum { .. } => {
            Family::Reduce
        }
        Op::Conv { .. }
        | Op::ConvGradInput { .. }
        | Op::ConvGradWeight { .. }
        | Op::Pool { .. }
        | Op::PoolGrad { .. }
        | Op::Fft { .. } => Family::Conv,
        Op::Scan { .. } => Family::Scan,
    }
}

/// An error of transform `what` when any of `ids` is not a node of `g`.
pub(crate) fn check_ids(
    g: &Graph,
    ids: impl IntoIterator<Item = NodeId>,
    what: &str,
) -> IrResult<()> {
    for id in ids {
        if g.get(id).is_none() {
            return Err(IrError::new(
                what,
                format!(
                    "{id} is not a node of graph `{}` ({} nodes)",
                    g.name,
                    g.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Per node below `n0`: does it lie on a path from one of `sources` to one of
/// `sinks` (both ends included)? Ids at or past `n0` are ignored.
pub(crate) fn between(
    g: &Graph,
    n0: usize,
    sources: impl IntoIterator<Item = NodeId>,
    sinks: &[NodeId],
) -> Vec<bool> {
    let nodes = &g.nodes()[..n0];
    let mut from = vec![false; n0];
    for s in sources {
        if s.index() < n0 {
            from[s.index()] = true;
        }
    }
    for n in nodes {
        if !from[n.id.index()] && n.inputs.iter().any(|i| from[i.index()]) {
            from[n.id.index()] = true;
        }
    }
    let to = ancestors(g, n0, sinks);
    from.iter().zip(&to).map(|(a, b)| *a && *b).collect()
}

/// Per node below `n0`: is it one of `outputs` or one of their ancestors? Ids at or
/// past `n0` are ignored.
pub(crate) fn ancestors(g: &Graph, n0: usize, outputs: &[NodeId]) -> Vec<bool> {
    let mut to = vec![false; n0];
    for o in outputs {
        if o.index() < n0 {
            to[o.index()] = true;
        }
    }
    for n in g.nodes()[..n0].iter().rev() {
        if to[n.id.index()] {
            for i in &n.inputs {
                to[i.index()] = true;
            }
        }
    }
    to
}
