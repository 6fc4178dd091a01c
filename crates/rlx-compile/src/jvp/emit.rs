//! A small node emitter shared by the forward-mode and batching transforms.
//!
//! It appends ops to a graph with inferred types, shares rank-0 constants, skips
//! no-op nodes (identity transposes, same-dims reshapes, casts to the same dtype) and
//! implements the shape plumbing both transforms need in a form that survives
//! dynamic dims: a reshape follows at most one dynamic axis (the IR's `-1`), so
//! inserting and removing size-1 axes falls back to `Expand` + `Transpose` and to a
//! reduction over the size-1 axis when a tensor has several dynamic axes.

use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Dim, Graph, IrError, IrResult, NodeId, Op, ReduceOp, Shape,
    TensorData,
};
use std::collections::HashMap;

/// Appends nodes to one graph.
pub(crate) struct Em<'g> {
    /// The graph being extended.
    pub(crate) g: &'g mut Graph,
    /// Shared rank-0 constants by (value bits, dtype).
    scalars: HashMap<(u64, DType), NodeId>,
    /// The transform's name for messages (`"jvp"`, `"vmap"`).
    pub(crate) what: &'static str,
}

/// `[2, ?0]`: dims without the dtype, for messages.
pub(crate) fn dims_str(dims: &[Dim]) -> String {
    let v: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", v.join(", "))
}

impl<'g> Em<'g> {
    pub(crate) fn new(g: &'g mut Graph, what: &'static str) -> Em<'g> {
        Em {
            g,
            scalars: HashMap::new(),
            what,
        }
    }

    /// An error of this transform.
    pub(crate) fn err(&self, msg: impl Into<String>) -> IrError {
        IrError::new(self.what, msg)
    }

    // ------------------------------------------------------------------ basics

    /// Append `op` on `inputs`, inferring its type.
    pub(crate) fn op(&mut self, op: Op, inputs: Vec<NodeId>) -> IrResult<NodeId> {
        self.g.add_op(op, inputs)
    }

    pub(crate) fn shape(&self, id: NodeId) -> Shape {
        self.g.shape(id).clone()
    }

    pub(crate) fn dims(&self, id: NodeId) -> Vec<Dim> {
        self.g.shape(id).dims().to_vec()
    }

    pub(crate) fn rank(&self, id: NodeId) -> usize {
        self.g.shape(id).rank()
    }

    pub(crate) fn dtype(&self, id: NodeId) -> DType {
        self.g.shape(id).dtype()
    }

    /// A constant node holding `data`.
    pub(crate) fn constant(&mut self, data: TensorData) -> NodeId {
        let shape = data.shape();
        self.g
            .add_node(Op::Constant { data: data.bytes }, vec![], shape)
    }

    /// A shared rank-0 constant `v` of dtype `dt` (complex: `v + 0i`).
    pub(crate) fn scalar(&mut self, v: f64, dt: DType) -> NodeId {
        if let Some(&id) = self.scalars.get(&(v.to_bits(), dt)) {
            return id;
        }
        let data = if dt.is_complex() {
            TensorData::from_f64_as(dt, &[], &[v, 0.0])
        } else {
            TensorData::from_f64_as(dt, &[], &[v])
        };
        let id = self.constant(data);
        self.scalars.insert((v.to_bits(), dt), id);
        id
    }

    /// A rank-0 constant with `like`'s dtype.
    pub(crate) fn scalar_like(&mut self, v: f64, like: NodeId) -> NodeId {
        let dt = self.dtype(like);
        self.scalar(v, dt)
    }

    // ------------------------------------------------------------- arithmetic

    pub(crate) fn bin(&mut self, b: BinaryOp, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.op(Op::Binary(b), vec![l, r])
    }

    pub(crate) fn add(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.bin(BinaryOp::Add, l, r)
    }

    pub(crate) fn sub(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.bin(BinaryOp::Sub, l, r)
    }

    pub(crate) fn mul(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.bin(BinaryOp::Mul, l, r)
    }

    pub(crate) fn div(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.bin(BinaryOp::Div, l, r)
    }

    /// `x · v` (no node when `v` is 1).
    pub(crate) fn scale(&mut self, x: NodeId, v: f64) -> IrResult<NodeId> {
        if v == 1.0 {
            return Ok(x);
        }
        let c = self.scalar_like(v, x);
        self.mul(x, c)
    }

    /// `x + v` (no node when `v` is 0).
    pub(crate) fn add_scalar(&mut self, x: NodeId, v: f64) -> IrResult<NodeId> {
        if v == 0.0 {
            return Ok(x);
        }
        let c = self.scalar_like(v, x);
        self.add(x, c)
    }

    /// `v − x`.
    pub(crate) fn rsub_scalar(&mut self, v: f64, x: NodeId) -> IrResult<NodeId> {
        let c = self.scalar_like(v, x);
        self.sub(c, x)
    }

    pub(crate) fn act(&mut self, a: Activation, x: NodeId) -> IrResult<NodeId> {
        self.op(Op::Activation(a), vec![x])
    }

    pub(crate) fn neg(&mut self, x: NodeId) -> IrResult<NodeId> {
        self.act(Activation::Neg, x)
    }

    pub(crate) fn square(&mut self, x: NodeId) -> IrResult<NodeId> {
        self.mul(x, x)
    }

    pub(crate) fn cmp(&mut self, c: CmpOp, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.op(Op::Compare(c), vec![l, r])
    }

    /// `x <c> v` against a scalar of `x`'s dtype.
    pub(crate) fn cmp_scalar(&mut self, c: CmpOp, x: NodeId, v: f64) -> IrResult<NodeId> {
        let s = self.scalar_like(v, x);
        self.cmp(c, x, s)
    }

    /// `where(mask, t, f)`.
    pub(crate) fn select(&mut self, mask: NodeId, t: NodeId, f: NodeId) -> IrResult<NodeId> {
        self.op(Op::Where, vec![mask, t, f])
    }

    /// `where(mask, x, 0)`.
    pub(crate) fn keep_where(&mut self, mask: NodeId, x: NodeId) -> IrResult<NodeId> {
        let z = self.scalar_like(0.0, x);
        self.select(mask, x, z)
    }

    /// `x` converted to `dt` (no node when it already is).
    pub(crate) fn cast(&mut self, x: NodeId, dt: DType) -> IrResult<NodeId> {
        if self.dtype(x) == dt {
            return Ok(x);
        }
        self.op(Op::Cast { to: dt }, vec![x])
    }

    /// A reduction (no node for an empty axis list).
    pub(crate) fn reduce(
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

    pub(crate) fn sum(&mut self, x: NodeId, axes: Vec<usize>, keep: bool) -> IrResult<NodeId> {
        self.reduce(ReduceOp::Sum, x, axes, keep)
    }

    pub(crate) fn mean(&mut self, x: NodeId, axes: Vec<usize>, keep: bool) -> IrResult<NodeId> {
        self.reduce(ReduceOp::Mean, x, axes, keep)
    }

    pub(crate) fn matmul(&mut self, a: NodeId, b: NodeId) -> IrResult<NodeId> {
        self.op(Op::MatMul, vec![a, b])
    }

    /// Sum of the present terms; `None` when there is none.
    pub(crate) fn sum_terms(&mut self, terms: Vec<NodeId>) -> IrResult<Option<NodeId>> {
        let mut acc: Option<NodeId> = None;
        for t in terms {
            acc = Some(match acc {
                None => t,
                Some(a) => self.add(a, t)?,
            });
        }
        Ok(acc)
    }

    // ------------------------------------------------------------ shape plumbing

    /// Permute axes (no node for the identity permutation).
    pub(crate) fn transpose(&mut self, x: NodeId, perm: Vec<usize>) -> IrResult<NodeId> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        self.op(Op::Transpose { perm }, vec![x])
    }

    /// Swap the last two axes.
    pub(crate) fn t(&mut self, x: NodeId) -> IrResult<NodeId> {
        let r = self.rank(x);
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        self.transpose(x, perm)
    }

    /// Move axis `from` to position `to`, keeping the order of the others.
    pub(crate) fn move_axis(&mut self, x: NodeId, from: usize, to: usize) -> IrResult<NodeId> {
        let r = self.rank(x);
        let mut perm: Vec<usize> = (0..r).filter(|&a| a != from).collect();
        perm.insert(to, from);
        self.transpose(x, perm)
    }

    /// Whether `reshape_to(x, target)` can be expressed: the IR's reshape infers one
    /// dynamic axis (`-1`) and needs the static sizes to multiply to the same product.
    pub(crate) fn can_reshape(&self, x: NodeId, target: &[Dim]) -> bool {
        let from = self.dims(x);
        let dyn_from: Vec<Dim> = from.iter().copied().filter(|d| !d.is_static()).collect();
        let dyn_to: Vec<Dim> = target.iter().copied().filter(|d| !d.is_static()).collect();
        let prod = |d: &[Dim]| -> usize { d.iter().filter_map(|d| d.as_static()).product() };
        if from == target {
            return true;
        }
        match (dyn_from.len(), dyn_to.len()) {
            (0, 0) => prod(&from) == prod(target),
            (1, 1) => dyn_from == dyn_to && prod(&from) == prod(target),
            _ => false,
        }
    }

    /// Reshape to `target` (no node when the dims already match). A dynamic axis
    /// becomes the reshape's `-1`, so at most one dynamic axis is supported.
    pub(crate) fn reshape_to(&mut self, x: NodeId, target: &[Dim]) -> IrResult<NodeId> {
        let from = self.shape(x);
        if from.dims() == target {
            return Ok(x);
        }
        if !self.can_reshape(x, target) {
            return Err(self.err(format!(
                "needs to reshape {from} to {}, but a reshape can follow only one dynamic axis (the -1); bind all but one dynamic size first",
                dims_str(target)
            )));
        }
        let new_shape = target
            .iter()
            .map(|d| match d {
                Dim::Static(n) => *n as i64,
                Dim::Dynamic(_) => -1,
            })
            .collect();
        self.op(Op::Reshape { new_shape }, vec![x])
    }

    /// Insert a size-1 axis at `axis` (`axis == rank` appends one). Works for any
    /// number of dynamic axes: a reshape when it can, else `Expand` (which adds a
    /// leading axis) plus a transpose.
    pub(crate) fn unsqueeze(&mut self, x: NodeId, axis: usize) -> IrResult<NodeId> {
        let mut dims = self.dims(x);
        dims.insert(axis, Dim::Static(1));
        if self.can_reshape(x, &dims) {
            return self.reshape_to(x, &dims);
        }
        let lead = self.expand_leading(x, Dim::Static(1))?;
        self.move_axis(lead, 0, axis)
    }

    /// Remove the size-1 axis `axis`. Works for any number of dynamic axes: a
    /// reshape when it can, else a reduction over that one-element axis.
    pub(crate) fn squeeze(&mut self, x: NodeId, axis: usize) -> IrResult<NodeId> {
        let mut dims = self.dims(x);
        if dims.get(axis) != Some(&Dim::Static(1)) {
            return Err(self.err(format!(
                "internal: squeezing axis {axis} of {}, which is not of size 1",
                self.shape(x)
            )));
        }
        dims.remove(axis);
        if self.can_reshape(x, &dims) {
            return self.reshape_to(x, &dims);
        }
        let dt = self.dtype(x);
        if dt.is_complex() {
            return Err(self.err(format!(
                "cannot drop axis {axis} of the complex {} with several dynamic axes; bind all but one dynamic size first",
                self.shape(x)
            )));
        }
        // A reduction over one element is exact; bool has no sum but max is `any`.
        let kind = if dt == DType::Bool {
            ReduceOp::Max
        } else {
            ReduceOp::Sum
        };
        self.reduce(kind, x, vec![axis], false)
    }

    /// Add a leading axis of size `n` (a broadcast; `Expand` keeps every existing
    /// dim, dynamic ones included).
    pub(crate) fn expand_leading(&mut self, x: NodeId, n: Dim) -> IrResult<NodeId> {
        let Dim::Static(n) = n else {
            return Err(self.err(format!(
                "internal: a leading broadcast axis must be static, got {n}"
            )));
        };
        let mut target = vec![n as i64];
        target.extend(std::iter::repeat_n(-1, self.rank(x)));
        self.op(
            Op::Expand {
                target_shape: target,
            },
            vec![x],
        )
    }

    /// Broadcast `x` to the dims of `like` (NumPy rules, values of `like` unused):
    /// an `Expand` when every target dim is static or already present in `x`, else a
    /// `BroadcastLike`, which follows dynamic dims.
    pub(crate) fn broadcast_like(&mut self, x: NodeId, like: NodeId) -> IrResult<NodeId> {
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
    pub(crate) fn zeros_like(&mut self, like: NodeId) -> IrResult<NodeId> {
        let z = self.scalar_like(0.0, like);
        self.broadcast_like(z, like)
    }

    /// A tensor of `like`'s dims filled with `v`, in dtype `dt`.
    pub(crate) fn fill_like(&mut self, v: f64, like: NodeId, dt: DType) -> IrResult<NodeId> {
        let s = self.scalar(v, dt);
        self.broadcast_like(s, like)
    }

    /// `x` made to have exactly `like`'s dims and dtype: cast, then broadcast
    /// (used to give every tangent its primal's type).
    pub(crate) fn fit(&mut self, x: NodeId, like: NodeId) -> IrResult<NodeId> {
        let dt = self.dtype(like);
        let c = self.cast(x, dt)?;
        self.broadcast_like(c, like)
    }

    /// Positions `0, 1, …, n−1` along the last axis of `like`, as `like`'s dtype (a
    /// cumulative sum of ones, so a dynamic last axis works).
    pub(crate) fn iota_last(&mut self, like: NodeId, dt: DType) -> IrResult<NodeId> {
        let ones = self.fill_like(1.0, like, dt)?;
        self.op(
            Op::Cumsum {
                axis: -1,
                exclusive: true,
            },
            vec![ones],
        )
    }

    /// Narrow then drop axis `axis` at index `i` (one slice of a batch).
    pub(crate) fn take_index(&mut self, x: NodeId, axis: usize, i: usize) -> IrResult<NodeId> {
        let n = self.op(
            Op::Narrow {
                axis,
                start: i,
                len: 1,
            },
            vec![x],
        )?;
        self.squeeze(n, axis)
    }

    /// Concatenate along `axis` (no node for a single piece).
    pub(crate) fn concat(&mut self, pieces: Vec<NodeId>, axis: usize) -> IrResult<NodeId> {
        if pieces.len() == 1 {
            return Ok(pieces[0]);
        }
        self.op(Op::Concat { axis }, pieces)
    }
}
