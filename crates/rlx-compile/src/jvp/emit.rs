//! A small node emitter shared by the forward-mode and batching transforms.
//!
//! It appends ops to a graph with inferred types, shares rank-0 constants, skips
//! no-op nodes (identity transposes, same-dims reshapes, casts to the same dtype) and
//! implements the shape plumbing both transforms need in a form that survives
//! dynamic dims: a reshape follows at most one dynamic axis (the IR's `-1`), so
//! inserting and removing size-1 axes falls back to `Expand` + `Transpose` and to a
//! reduction over the size-1 axis when a tensor has several dynamic axes.

use crate::build::Build;
use crate::build::dims_str;
use rlx_ir::{DType, Dim, Graph, IrError, IrResult, NodeId, Op, ReduceOp};
use std::collections::HashMap;

/// Appends nodes to one graph.
pub(crate) struct Emitter<'g> {
    /// The graph being extended.
    pub(crate) g: &'g mut Graph,
    /// Shared rank-0 constants by (value bits, dtype).
    scalars: HashMap<(u64, DType), NodeId>,
    /// The transform's name for messages (`"jvp"`, `"vmap"`).
    pub(crate) what: &'static str,
}

impl<'g> Emitter<'g> {
    pub(crate) fn new(g: &'g mut Graph, what: &'static str) -> Emitter<'g> {
        Emitter {
            g,
            scalars: HashMap::new(),
            what,
        }
    }

    /// An error of this transform.
    pub(crate) fn err(&self, msg: impl Into<String>) -> IrError {
        IrError::new(self.what, msg)
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

    /// `x` made to have exactly `like`'s dims and dtype: cast, then broadcast
    /// (used to give every tangent its primal's type).
    pub(crate) fn fit(&mut self, x: NodeId, like: NodeId) -> IrResult<NodeId> {
        let dt = self.dtype(like);
        let c = self.cast(x, dt)?;
        self.broadcast_like(c, like)
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
}

impl Build for Emitter<'_> {
    fn graph(&self) -> &Graph {
        self.g
    }

    fn graph_mut(&mut self) -> &mut Graph {
        self.g
    }

    fn scalar_cache(&mut self) -> &mut HashMap<(u64, DType), NodeId> {
        &mut self.scalars
    }

    fn op(&mut self, op: Op, inputs: Vec<NodeId>) -> IrResult<NodeId> {
        self.g.add_op(op, inputs)
    }

    /// Reshape to `target` (no node when the dims already match). A dynamic axis
    /// becomes the reshape's `-1`, so at most one dynamic axis is supported.
    fn reshape_to(&mut self, x: NodeId, target: &[Dim]) -> IrResult<NodeId> {
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
    fn unsqueeze(&mut self, x: NodeId, axis: usize) -> IrResult<NodeId> {
        let mut dims = self.dims(x);
        dims.insert(axis, Dim::Static(1));
        if self.can_reshape(x, &dims) {
            return self.reshape_to(x, &dims);
        }
        let lead = self.expand_leading(x, Dim::Static(1))?;
        self.move_axis(lead, 0, axis)
    }
}
