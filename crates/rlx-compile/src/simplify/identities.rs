//! Algebraic identities. Each holds bit for bit under IEEE semantics: `x + 0` is only
//! an identity for integers (`−0 + 0 = +0`), while `x − 0`, `x + (−0)`, `x·1` and
//! `x/1` hold for every value including NaN and signed zeros.

use rlx_ir::{Activation, BinaryOp, Graph, NodeId, Op, Shape, TensorData};

/// The value of a one-element constant node.
fn scalar_of(g: &Graph, id: NodeId) -> Option<(f64, bool)> {
    let n = g.node(id);
    let Op::Constant { data } = &n.op else {
        return None;
    };
    if n.shape.num_elements()? != 1 || n.shape.dtype().is_complex() {
        return None;
    }
    let d = TensorData::new(n.shape.dtype(), &n.shape.static_dims()?, data.clone()).ok()?;
    let v = d.to_f64_vec()[0];
    let neg_zero = v == 0.0 && v.is_sign_negative();
    Some((v, neg_zero))
}

/// An existing node that `op(inputs)` (of type `shape`) always equals, if any.
pub(super) fn forward(g: &Graph, op: &Op, inputs: &[NodeId], shape: &Shape) -> Option<NodeId> {
    let same = |i: NodeId| g.shape(i) == shape;
    match op {
        Op::StopGradient => Some(inputs[0]),
        Op::Cast { .. }
        | Op::Reshape { .. }
        | Op::Expand { .. }
        | Op::BroadcastLike
        | Op::Narrow { .. }
        | Op::Reduce { .. }
            if same(inputs[0]) && reduce_is_noop(op, g.shape(inputs[0])) =>
        {
            Some(inputs[0])
        }
        Op::Transpose { perm } if perm.iter().enumerate().all(|(i, &p)| i == p) => Some(inputs[0]),
        Op::Activation(Activation::Neg) => {
            let x = g.node(inputs[0]);
            match x.op {
                Op::Activation(Activation::Neg) => Some(x.inputs[0]),
                _ => None,
            }
        }
        Op::Binary(b) => {
            let (l, r) = (inputs[0], inputs[1]);
            let int = shape.dtype().is_int();
            let rv = scalar_of(g, r);
            let lv = scalar_of(g, l);
            match b {
                BinaryOp::Mul if same(l) && rv.is_some_and(|v| v.0 == 1.0) => Some(l),
                BinaryOp::Mul if same(r) && lv.is_some_and(|v| v.0 == 1.0) => Some(r),
                BinaryOp::Div if same(l) && rv.is_some_and(|v| v.0 == 1.0) => Some(l),
                BinaryOp::Sub if same(l) && rv.is_some_and(|v| v.0 == 0.0 && (int || !v.1)) => {
                    Some(l)
                }
                BinaryOp::Add if same(l) && rv.is_some_and(|v| v.0 == 0.0 && (int || v.1)) => {
                    Some(l)
                }
                BinaryOp::Add if same(r) && lv.is_some_and(|v| v.0 == 0.0 && (int || v.1)) => {
                    Some(r)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// `Reduce` with no axes is the identity; other ops listed in [`forward`] are
/// identities whenever the shape is unchanged.
fn reduce_is_noop(op: &Op, _in_shape: &Shape) -> bool {
    match op {
        Op::Reduce { axes, .. } => axes.is_empty(),
        _ => true,
    }
}

/// Collapse chains: reshape∘reshape → reshape, transpose∘transpose → one transpose.
pub(super) fn rewrite(g: &Graph, op: Op, inputs: Vec<NodeId>) -> (Op, Vec<NodeId>) {
    match op {
        Op::Reshape { .. } => {
            let x = g.node(inputs[0]);
            if matches!(x.op, Op::Reshape { .. }) {
                return (op, vec![x.inputs[0]]);
            }
            (op, inputs)
        }
        Op::Transpose { perm } => {
            let x = g.node(inputs[0]);
            if let Op::Transpose { perm: inner } = &x.op {
                let composed: Vec<usize> = perm.iter().map(|&p| inner[p]).collect();
                return (Op::Transpose { perm: composed }, vec![x.inputs[0]]);
            }
            (Op::Transpose { perm }, inputs)
        }
        op => (op, inputs),
    }
}
