//! The backward-pass builder: appends nodes to the graph being differentiated and
//! accumulates cotangents.
//!
//! The node-building helpers come from [`Build`]; `ReverseBuilder` adds origin stamping, a
//! multiply that skips all-ones factors, and reshapes that fall back to sums and
//! expands when several axes are dynamic.

use super::flow;
use super::flow::carries_gradient;
use crate::build::Build;
use crate::build::dims_str;
use rlx_ir::{
    BinaryOp, DType, Dim, Graph, IrError, IrResult, Node, NodeId, NodeOrigin, Op, ReduceOp,
    TensorData,
};
use std::collections::HashMap;

/// The state of one reverse sweep over a graph.
pub(crate) struct ReverseBuilder<'g> {
    /// The graph being extended with backward nodes.
    pub(crate) g: &'g mut Graph,
    /// Per forward node: does it lie on a path from a `wrt` node to an output?
    active: Vec<bool>,
    /// Accumulated cotangent of every forward node that received one.
    cotangents: HashMap<NodeId, NodeId>,
    /// Shared rank-0 constants, by (bits of the f64 value, dtype).
    scalars: HashMap<(u64, DType), NodeId>,
    /// Origin stamped on appended nodes (the forward node being differentiated).
    pub(crate) origin: Option<NodeOrigin>,
}

impl<'g> ReverseBuilder<'g> {
    pub(crate) fn new(g: &'g mut Graph, active: Vec<bool>) -> ReverseBuilder<'g> {
        ReverseBuilder {
            g,
            active,
            cotangents: HashMap::new(),
            scalars: HashMap::new(),
            origin: None,
        }
    }

    // ------------------------------------------------------------ cotangents

    /// The accumulated cotangent of `id`, if any reached it.
    pub(crate) fn cotangent(&self, id: NodeId) -> Option<NodeId> {
        self.cotangents.get(&id).copied()
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
        let total = match self.cotangents.get(&target) {
            Some(&prev) => self.add(prev, cast)?,
            None => cast,
        };
        self.cotangents.insert(target, total);
        Ok(())
    }
}

impl Build for ReverseBuilder<'_> {
    fn graph(&self) -> &Graph {
        self.g
    }

    fn graph_mut(&mut self) -> &mut Graph {
        self.g
    }

    fn scalar_cache(&mut self) -> &mut HashMap<(u64, DType), NodeId> {
        &mut self.scalars
    }

    /// Append `op` on `inputs`, inferring its type and stamping [`ReverseBuilder::origin`].
    fn op(&mut self, op: Op, inputs: Vec<NodeId>) -> IrResult<NodeId> {
        let id = self.g.add_op(op, inputs)?;
        if let Some(o) = self.origin {
            self.g.set_origin(id, o);
        }
        Ok(id)
    }

    /// `l · r`; no node when one side is all ones and the other already has the
    /// product's dims and dtype (the seed of a gradient is such a ones tensor, so
    /// the first rule applied to it would otherwise multiply by it).
    fn mul(&mut self, l: NodeId, r: NodeId) -> IrResult<NodeId> {
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

    /// Reshape to `target` (no node when the dims already match). A dynamic axis
    /// becomes the reshape's `-1`, so at most one dynamic axis is supported.
    fn reshape_to(&mut self, x: NodeId, target: &[Dim]) -> IrResult<NodeId> {
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

    /// Insert a size-1 axis at `axis` (`axis == rank` appends one).
    fn unsqueeze(&mut self, x: NodeId, axis: usize) -> IrResult<NodeId> {
        let mut dims = self.dims(x);
        dims.insert(axis, Dim::Static(1));
        self.reshape_to(x, &dims)
    }
}

impl ReverseBuilder<'_> {
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
        let build = |rb: &mut ReverseBuilder| -> IrResult<NodeId> {
            let ones: Vec<usize> = (0..from.len())
                .filter(|&i| from[i] == Dim::Static(1))
                .collect();
            // A reduction over one element is exact; bool has no sum but max is `any`.
            let kind = if rb.dtype(x) == DType::Bool {
                ReduceOp::Max
            } else {
                ReduceOp::Sum
            };
            let squeezed = rb.reduce(kind, x, ones, false)?;
            let inserted: Vec<usize> = (0..target.len())
                .filter(|&i| target[i] == Dim::Static(1))
                .collect();
            if inserted.is_empty() {
                return Ok(squeezed);
            }
            let k = inserted.len();
            let mut expand = vec![1i64; k];
            expand.extend(std::iter::repeat_n(-1, target.len() - k));
            let lead = rb.op(
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
            rb.transpose(lead, perm)
        };
        Some(build(self))
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
}
