//! The backward-pass builder: appends nodes to the graph being differentiated and
//! accumulates cotangents.
//!
//! Every helper skips work it can prove is a no-op (a reshape to the same dims, a
//! multiply by one, a reduction over no axis), so the appended graph stays lean;
//! scalar constants are shared.

use super::flow;
use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Dim, Graph, IrError, IrResult, Node, NodeId, NodeOrigin,
    Op, ReduceOp, Shape, TensorData,
};
use std::collections::HashMap;

/// Whether values of `dt` carry gradients: real floats. (Complex values cannot be
/// accumulated by element-wise ops; differentiate the real block layout of `fft`.)
pub(crate) fn carries_gradient(dt: DType) -> bool {
    dt.is_float()
}

/// The state of one reverse sweep over a graph.
pub(crate) struct Bw<'g> {
    /// The graph being extended with backward nodes.
    pub(crate) g: &'g mut Graph,
    /// Per forward node: does it lie on a path from a `wrt` node to an output?
    active: Vec<bool>,
    /// Accumulated cotangent of every forward node that received one.
    ct: HashMap<NodeId, NodeId>,
    /// Shared rank-0 constants, by (bits of the f64 value, dtype).
    scalars: HashMap<(u64, DType), NodeId>,
    /// Origin stamped on appended nodes (the forward node being differentiated).
    pub(crate) origin: Option<NodeOrigin>,
}

impl<'g> Bw<'g> {
    pub(crate) fn new(g: &'g mut Graph, active: Vec<bool>) -> Bw<'g> {
        Bw {
            g,
            active,
            ct: HashMap::new(),
            scalars: HashMap::new(),
            origin: None,
        }
    }

    // ------------------------------------------------------------ cotangents

    /// The accumulated cotangent of `id`, if any reached it.
    pub(crate) fn cotangent(&self, id: NodeId) -> Option<NodeId> {
        self.ct.get(&id).copied()
    }

    /// Whether `id` is a forward node on a path from a `wrt` node to an output
    /// whose dtype can carry a gradient.
    pub(crate) fn is_active(&self, id: NodeId) -> bool {
        self.active.get(id.index()).copied().unwrap_or(false)
            && carries_gradient(self.g.shape(id).dtype())
    }

    /// Whether input slot `i` of `node` should receive a gradient: it is active
    /// and the op passes gradients into that slot.
    pub(crate) fn wants(&self, node: &Node, i: usize) -> bool {
        self.is_active(node.inputs[i]) && flow::blocked(self.g, node, i).is_none()
    }

    /// Add `grad` to the cotangent of `target`: summed down to `target`'s dims when
    /// it is broadcast (NumPy rules), then cast to `target`'s dtype. Ignored when
    /// `target` is not active.
    pub(crate) fn give(&mut self, target: NodeId, grad: NodeId) -> IrResult<()> {
        if !self.is_active(target) {
            return Ok(());
        }
        let ts = self.g.shape(target).clone();
        let summed = self.sum_to(grad, ts.dims())?;
        let cast = self.cast(summed, ts.dtype())?;
        let total = match self.ct.get(&target) {
            Some(&prev) => self.add(prev, cast)?,
            None => cast,
        };
        self.ct.insert(target, total);
        Ok(())
    }

    // -------------------------------------------------------------- emission

    /// Append `op` on `inputs`, inferring its type.
    pub(crate) fn op(&mut self, op: Op, inputs: Vec<NodeId>) -> IrResult<NodeId> {
        let id = self.g.add_op(op, inputs)?;
        if let Some(o) = self.origin {
            self.g.set_origin(id, o);
        }
        Ok(id)
    }

    /// The result type of `id`.
    pub(crate) fn shape(&self, id: NodeId) -> Shape {
        self.g.shape(id).clone()
    }

    /// The dims of `id`.
    pub(crate) fn dims(&self, id: NodeId) -> Vec<Dim> {
        self.g.shape(id).dims().to_vec()
    }

    /// The dtype of `id`.
    pub(crate) fn dtype(&self, id: NodeId) -> DType {
        self.g.shape(id).dtype()
    }

    /// A shared rank-0 constant.
    pub(crate) fn scalar(&mut self, v: f64, dt: DType) -> NodeId {
        if let Some(&id) = self.scalars.get(&(v.to_bits(), dt)) {
            return id;
        }
        let data = TensorData::from_f64_as(dt, &[], &[v]);
        let id = self.constant(data);
        self.scalars.insert((v.to_bits(), dt), id);
        id
    }

    /// A constant node holding `data`.
    pub(crate) fn constant(&mut self, data: TensorData) -> NodeId {
        let shape = data.shape();
        self.g
            .add_node(Op::Constant { data: data.bytes }, vec![], shape)
    }

    /// A rank-0 constant with `id`'s dtype.
    pub(crate) fn scalar_like(&mut self, v: f64, id: NodeId) -> NodeId {
        let dt = self.dtype(id);
        self.scalar(v, dt)
    }

    pub(crate) fn bin(&mut self, b: BinaryOp, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.op(Op::Binary(b), vec![l, r])
    }

    pub(crate) fn add(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.bin(BinaryOp::Add, l, r)
    }

    pub(crate) fn sub(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        self.bin(BinaryOp::Sub, l, r)
    }

    /// `l · r`; no node when one side is all ones and the other already has the
    /// product's dims and dtype (the seed of a gradient is such a ones tensor, so
    /// the first rule applied to it would otherwise multiply by it).
    pub(crate) fn mul(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
        let (ls, rs) = (self.shape(l), self.shape(r));
        if ls.dtype() == rs.dtype() {
            if self.is_ones(l) && ls.broadcast_with(&rs).ok().as_ref() == Some(&rs) {
                return Ok(r);
            }
            if self.is_ones(r) && ls.broadcast_with(&rs).ok().as_ref() == Some(&ls) {
                return Ok(l);
            }
        }
        self.bin(BinaryOp::Mul, l, r)
    }

    /// Whether `id` is a constant of ones, possibly reshaped or broadcast.
    fn is_ones(&self, id: NodeId) -> bool {
        let n = self.g.node(id);
        match &n.op {
            Op::Constant { data } => {
                let Some(dims) = n.shape.static_dims() else {
                    return false;
                };
                let numel: usize = dims.iter().product();
                numel <= 64
                    && TensorData::new(n.shape.dtype(), &dims, data.clone())
                        .is_ok_and(|d| d.to_f64_vec().iter().all(|&v| v == 1.0))
            }
            Op::Reshape { .. } | Op::Expand { .. } | Op::BroadcastLike => self.is_ones(n.inputs[0]),
            _ => false,
        }
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

    /// `where(mask, 0, x)`.
    pub(crate) fn zero_where(&mut self, mask: NodeId, x: NodeId) -> IrResult<NodeId> {
        let z = self.scalar_like(0.0, x);
        self.select(mask, z, x)
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

    /// Permute axes (no node for the identity permutation).
    pub(crate) fn transpose(&mut self, x: NodeId, perm: Vec<usize>) -> IrResult<NodeId> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        self.op(Op::Transpose { perm }, vec![x])
    }

    /// Swap the last two axes.
    pub(crate) fn t(&mut self, x: NodeId) -> IrResult<NodeId> {
        let r = self.g.shape(x).rank();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        self.transpose(x, perm)
    }

    // ------------------------------------------------------- shape plumbing

    /// Reshape to `target` (no node when the dims already match). A dynamic axis
    /// becomes the reshape's `-1`, so at most one dynamic axis is supported.
    pub(crate) fn reshape_to(&mut self, x: NodeId, target: &[Dim]) -> IrResult<NodeId> {
        let from = self.shape(x);
        if from.dims() == target {
            return Ok(x);
        }
        let fail = || {
            IrError::new(
                "grad",
                format!(
                    "the backward pass needs to reshape {from} to {} but a reshape can infer only one dynamic axis; bind all but one dynamic size (or differentiate a graph with fewer dynamic axes)",
                    dims_str(target)
                ),
            )
        };
        if target.iter().filter(|d| !d.is_static()).count() > 1 {
            return self.restride_ones(x, target).unwrap_or_else(|| Err(fail()));
        }
        let new_shape = target
            .iter()
            .map(|d| match d {
                Dim::Static(n) => *n as i64,
                Dim::Dynamic(_) => -1,
            })
            .collect();
        let id = self
            .op(Op::Reshape { new_shape }, vec![x])
            .map_err(|_| fail())?;
        if self.g.shape(id).dims() != target {
            return Err(fail());
        }
        Ok(id)
    }

    /// A reshape that only drops and inserts size-1 axes, built without `Reshape` (which
    /// can follow one dynamic axis only): a sum over the dropped size-1 axes, then new
    /// leading size-1 axes (`Expand`) moved into place (`Transpose`). `None` when the
    /// reshape moves real axes.
    fn restride_ones(&mut self, x: NodeId, target: &[Dim]) -> Option<IrResult<NodeId>> {
        let from = self.dims(x);
        let real = |d: &[Dim]| -> Vec<Dim> {
            d.iter().copied().filter(|d| *d != Dim::Static(1)).collect()
        };
        if real(&from) != real(target) {
            return None;
        }
        let build = |bw: &mut Bw| -> IrResult<NodeId> {
            let ones: Vec<usize> = (0..from.len())
                .filter(|&i| from[i] == Dim::Static(1))
                .collect();
            let squeezed = bw.sum(x, ones, false)?;
            let inserted: Vec<usize> = (0..target.len())
                .filter(|&i| target[i] == Dim::Static(1))
                .collect();
            if inserted.is_empty() {
                return Ok(squeezed);
            }
            let k = inserted.len();
            let mut expand = vec![1i64; k];
            expand.extend(std::iter::repeat_n(-1, target.len() - k));
            let lead = bw.op(
                Op::Expand {
                    target_shape: expand,
                },
                vec![squeezed],
            )?;
            // Output axis i reads the next new axis (0..k) where the target has a 1,
            // else the next real axis (k..).
            let (mut next_one, mut next_real) = (0, k);
            let perm = (0..target.len())
                .map(|i| {
                    let src = if target[i] == Dim::Static(1) {
                        &mut next_one
                    } else {
                        &mut next_real
                    };
                    *src += 1;
                    *src - 1
                })
                .collect();
            bw.transpose(lead, perm)
        };
        Some(build(self))
    }

    /// Insert a size-1 axis at `axis` (`axis == rank` appends one).
    pub(crate) fn unsqueeze(&mut self, x: NodeId, axis: usize) -> IrResult<NodeId> {
        let mut dims = self.dims(x);
        dims.insert(axis, Dim::Static(1));
        self.reshape_to(x, &dims)
    }

    /// Append a trailing size-1 axis.
    pub(crate) fn unsqueeze_last(&mut self, x: NodeId) -> IrResult<NodeId> {
        let r = self.g.shape(x).rank();
        self.unsqueeze(x, r)
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

    /// A tensor of `like`'s dims filled with `v`, in dtype `dt`.
    pub(crate) fn fill_like(&mut self, v: f64, like: NodeId, dt: DType) -> IrResult<NodeId> {
        let s = self.scalar(v, dt);
        self.broadcast_like(s, like)
    }

    /// Sum `x` down to `target` dims: the adjoint of broadcasting `target` to `x`
    /// (leading axes dropped, stretched size-1 axes kept as size 1).
    pub(crate) fn sum_to(&mut self, x: NodeId, target: &[Dim]) -> IrResult<NodeId> {
        let xd = self.dims(x);
        if xd == target {
            return Ok(x);
        }
        let Some(lead) = xd.len().checked_sub(target.len()) else {
            return Err(IrError::new(
                "grad",
                format!(
                    "internal: a cotangent of dims {} cannot be summed to the larger {}",
                    dims_str(&xd),
                    dims_str(target)
                ),
            ));
        };
        let y = self.sum(x, (0..lead).collect(), false)?;
        let yd = self.dims(y);
        let ones: Vec<usize> = (0..target.len())
            .filter(|&i| target[i] == Dim::Static(1) && yd[i] != Dim::Static(1))
            .collect();
        let y = self.sum(y, ones, true)?;
        if self.g.shape(y).dims() != target {
            return Err(IrError::new(
                "grad",
                format!(
                    "internal: a cotangent of dims {} does not broadcast to the operand's {}",
                    dims_str(&xd),
                    dims_str(target)
                ),
            ));
        }
        Ok(y)
    }

    /// Dims of `x` with every axis in `axes` set to 1.
    pub(crate) fn keep_dims(&self, x: NodeId, axes: &[usize]) -> Vec<Dim> {
        self.dims(x)
            .into_iter()
            .enumerate()
            .map(|(i, d)| if axes.contains(&i) { Dim::Static(1) } else { d })
            .collect()
    }
}

/// `[2, ?0]`.
pub(crate) fn dims_str(dims: &[Dim]) -> String {
    let v: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", v.join(", "))
}
