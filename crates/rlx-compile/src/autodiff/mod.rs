//! Reverse-mode automatic differentiation: vector-Jacobian products as graph → graph
//! transforms.
//!
//! [`append_vjp`] appends the backward pass to the graph itself: one reverse sweep in
//! topological order over the nodes that lie between the requested `wrt` nodes and
//! the outputs, each op contributing its VJP rule (modules per op family), with
//! contributions to a node summed by `Add` and broadcast operands summed back to
//! their own dims. The backward nodes read the forward values they need (no
//! recomputation except inside fused ops whose intermediates are not graph values:
//! norms, attention, `linear` with an activation that needs its input).
//!
//! The result is an ordinary graph, so it composes: differentiate it again for
//! second-order derivatives, and the compiler fuses and memory-plans it like any other.
//!
//! Conventions worth knowing:
//! - The derivative rules shared with forward mode (`jvp`) live in
//!   `crate::derivatives`: element-wise partials, softmax/norm Jacobians, reduction
//!   partials. This module applies them to cotangents and holds the transpose rules
//!   of the linear ops (whose forward-mode rule is the op itself).
//! - At non-differentiable points every piecewise op takes the derivative tabled in
//!   [`crate::kinks`], through the shared rules, so `jvp(f)(x)·v == ⟨grad f(x), v⟩`
//!   holds there too.
//! - `maximum`/`minimum` and the `max`/`min` reductions split the gradient evenly
//!   between tied operands/elements (so `clamp` at exactly its bound passes 1/2).
//! - `round` and `round_to_format` are straight-through (identity gradient);
//!   `floor`, `ceil` and `sign` are not differentiable; `stop_gradient` blocks.
//! - `scaled_matmul` is straight-through: the gradient of `x` in
//!   `scaled_matmul(quantize(x), quantize(w))` is the float gradient of
//!   `x · dequantize(w)ᵀ` (the quantizer is treated as the identity, the scales as constants).
//! - `scan` is differentiated by unrolling its steps into the backward graph.
//! - Max `pool2d_grad` is differentiable in `grad_out` (so max pooling has second
//!   derivatives); its routing input `x` is piecewise constant and gets none.
//! - `prod`'s partials `Π_{i≠j} x_i` are prefix × suffix products, so they are exact
//!   with zeros and stay exact when differentiated again (along an axis of dynamic
//!   extent the second derivative at zeros is not: see the `prod` module).
//! - Attention's custom mask only selects keys and gets no gradient (rope's cos/sin
//!   tables and attention's additive bias do get theirs).
//! - Dynamic dims survive: reductions broadcast back with [`Op::BroadcastLike`], and
//!   size-1 axes are dropped/inserted without a reshape. A real reshape in the
//!   backward pass (of a `Reshape` forward op, or attention's `[B, S, H·D]` head
//!   split) can follow only one dynamic axis.
//! - Complex values carry no gradient: differentiate the real block layout of `fft`.
//!
//! ```
//! use rlx_compile::autodiff::grad_graph;
//! use rlx_ir::{interp, BinaryOp, DType, Graph, Op, ReduceOp, Shape, TensorData};
//! // loss = sum(x * x); d loss / dx = 2x
//! let mut g = Graph::new("sq");
//! let x = g.input("x", Shape::new(&[3], DType::F64));
//! let xx = g.add_op(Op::Binary(BinaryOp::Mul), vec![x, x]).unwrap();
//! let loss = g.add_op(Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keep_dim: false }, vec![xx]).unwrap();
//! g.set_outputs(vec![loss]);
//! let dg = grad_graph(&g, &[x]).unwrap();
//! let out = interp::run(&dg, &[("x", TensorData::from_f64(&[3], &[1.0, 2.0, 3.0]))]).unwrap();
//! assert_eq!(out[0].to_f64_vec(), vec![2.0, 4.0, 6.0]);
//! ```

mod attention;
mod builder;
mod conv;
mod elementwise;
mod flow;
mod linalg;
mod movement;
mod nn;
mod reduce;
mod scan;

use crate::build::{Build, Family, ancestors, between, check_ids, family};
use builder::ReverseBuilder;
use flow::carries_gradient;
use rlx_ir::{Graph, IrError, IrResult, Node, NodeId, Op, TensorData};

/// Append the vector-Jacobian product of `outputs` (seeded with `cotangents`, one per
/// output, each of its output's type) with respect to `wrt` to `g`.
///
/// Returns the gradient node of each `wrt` entry, in order, or `None` where no
/// gradient reaches it (it does not influence the outputs, or only through
/// non-differentiable ops — [`no_gradient_error`] says which). Repeated outputs and
/// repeated `wrt` entries are fine.
///
/// Errors when the ids are not nodes of `g`, a cotangent does not match its output,
/// or a backward node cannot be built (e.g. a reshape over two dynamic axes).
pub fn append_vjp(
    g: &mut Graph,
    outputs: &[NodeId],
    cotangents: &[NodeId],
    wrt: &[NodeId],
) -> IrResult<Vec<Option<NodeId>>> {
    if outputs.len() != cotangents.len() {
        return Err(IrError::new(
            "grad",
            format!(
                "got {} outputs but {} cotangents; pass one cotangent per output",
                outputs.len(),
                cotangents.len()
            ),
        ));
    }
    check_ids(
        g,
        outputs.iter().chain(cotangents).chain(wrt).copied(),
        "grad",
    )?;
    for (&o, &c) in outputs.iter().zip(cotangents) {
        let (os, cs) = (g.shape(o), g.shape(c));
        if os.dims() != cs.dims() {
            return Err(IrError::new(
                "grad",
                format!(
                    "the cotangent {c} is {cs} but output {o} is {os}; a cotangent must have its output's dims"
                ),
            ));
        }
    }
    let n0 = g.len();
    let active = between(g, n0, wrt.iter().copied(), outputs);
    let mut rb = ReverseBuilder::new(g, active);
    for (&o, &c) in outputs.iter().zip(cotangents) {
        rb.give(o, c)?;
    }
    for idx in (0..n0).rev() {
        let id = NodeId(idx as u32);
        let Some(ct) = rb.cotangent(id) else {
            continue;
        };
        let node = rb.g.node(id).clone();
        if node.op.is_leaf() {
            continue;
        }
        rb.origin = node.origin;
        vjp_rule(&mut rb, &node, ct).map_err(|e| {
            let at = node
                .origin
                .map(|o| format!(" (built at {o})"))
                .unwrap_or_default();
            // Nested failures (scan bodies) already say where they happened.
            if e.message.starts_with("differentiating ") {
                return e;
            }
            let inner = if e.op == "grad" {
                e.message.clone()
            } else {
                format!("{}: {}", e.op, e.message)
            };
            IrError::new(
                "grad",
                format!("differentiating {} node {id}{at}: {inner}", node.op.name()),
            )
        })?;
    }
    Ok(wrt.iter().map(|&w| rb.cotangent(w)).collect())
}

/// Dispatch to the VJP rule of `node`'s op family; `g` is its cotangent.
fn vjp_rule(rb: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    match family(&node.op) {
        Family::Leaf => Ok(()),
        Family::Elementwise => elementwise::vjp(rb, node, g),
        Family::Linalg => linalg::vjp(rb, node, g),
        Family::Nn => nn::vjp(rb, node, g),
        Family::Attention => attention::vjp(rb, node, g),
        Family::Movement => movement::vjp(rb, node, g),
        Family::Reduce => reduce::vjp(rb, node, g),
        Family::Conv => conv::vjp(rb, node, g),
        Family::Scan => scan::vjp(rb, node, g),
    }
}

/// How to name node `id` in messages: `` `x` `` for inputs and params, else `node %5 (exp)`.
pub fn describe_node(g: &Graph, id: NodeId) -> String {
    let n = g.node(id);
    match &n.op {
        Op::Input { name } | Op::Param { name } => format!("`{name}`"),
        op => match &n.name {
            Some(name) => format!("`{name}` ({})", op.name()),
            None => format!("node {id} ({})", op.name()),
        },
    }
}

/// The error for a `wrt` node that [`append_vjp`] returned `None` for: says whether
/// the outputs do not depend on it at all, or names the non-differentiable op that
/// stops the gradient (`"argmax is not differentiable (its output is an index); no
/// gradient reaches `x`"`). `label` names `wrt` (see [`describe_node`]).
pub fn no_gradient_error(g: &Graph, outputs: &[NodeId], wrt: NodeId, label: &str) -> IrError {
    let n = g.len();
    let ws = g.shape(wrt);
    if !carries_gradient(ws.dtype()) {
        return IrError::new(
            "grad",
            format!(
                "cannot differentiate with respect to {label}: it is {ws}, and only float tensors have gradients; cast it to a float type before using it"
            ),
        );
    }
    let to = ancestors(g, n, outputs);
    if !to[wrt.index()] {
        return IrError::new(
            "grad",
            format!(
                "no gradient reaches {label}: the output does not depend on it; differentiate with respect to a tensor the loss is computed from"
            ),
        );
    }
    // Nodes downstream of `wrt` (where a blocked edge must start).
    let mut from = vec![false; n];
    from[wrt.index()] = true;
    for node in g.nodes() {
        if node.inputs.iter().any(|i| from[i.index()]) {
            from[node.id.index()] = true;
        }
    }
    // Walk back from the outputs along edges that carry gradients; the first edge
    // into `wrt`'s cone that does not is the culprit.
    let mut reach = vec![false; n];
    for o in outputs {
        reach[o.index()] = carries_gradient(g.shape(*o).dtype());
    }
    let mut culprit = None;
    for node in g.nodes().iter().rev() {
        if !reach[node.id.index()] || node.op.is_leaf() {
            continue;
        }
        if let Op::ScaledMatMul { .. } = node.op {
            for &codes in &node.inputs[..2] {
                if let Some(src) = crate::derivatives::scaled::ste_source(g, codes)
                    && carries_gradient(g.shape(src).dtype())
                {
                    reach[src.index()] = true;
                }
            }
        }
        for (i, &inp) in node.inputs.iter().enumerate() {
            if !from[inp.index()] {
                continue;
            }
            match flow::blocked(g, node, i) {
                None => reach[inp.index()] = true,
                Some(why) => {
                    culprit.get_or_insert(why);
                }
            }
        }
    }
    let why = culprit.unwrap_or_else(|| {
        "internal: every path to it is differentiable but no rule produced a gradient".into()
    });
    IrError::new("grad", format!("{why}; no gradient reaches {label}"))
}

/// A node of `like`'s type filled with ones: a constant when the dims are static,
/// else a broadcast of a scalar one (so dynamic dims survive).
pub fn ones_like(g: &mut Graph, like: NodeId) -> IrResult<NodeId> {
    let s = g.shape(like).clone();
    if let Some(dims) = s.static_dims() {
        let n: usize = dims.iter().product();
        let data = TensorData::from_f64_as(s.dtype(), &dims, &vec![1.0; n]);
        // Small seeds are plain constants; large ones broadcast a scalar (no big payload).
        if n <= 64 {
            return Ok(g.add_node(Op::Constant { data: data.bytes }, vec![], s));
        }
    }
    let one = TensorData::from_f64_as(s.dtype(), &[], &[1.0]);
    let c = g.add_node(
        Op::Constant {
            data: one.bytes.clone(),
        },
        vec![],
        one.shape(),
    );
    let mut rb = ReverseBuilder::new(g, Vec::new());
    rb.broadcast_like(c, like)
}

/// Append the gradient of `loss` (seeded with ones, so a non-scalar loss
/// differentiates its sum) with respect to every `wrt` node; errors with
/// [`no_gradient_error`] when a gradient does not reach one. `labels` name the
/// `wrt` entries in messages (default: [`describe_node`]).
pub fn append_grad(
    g: &mut Graph,
    loss: NodeId,
    wrt: &[NodeId],
    labels: Option<&[String]>,
) -> IrResult<Vec<NodeId>> {
    if g.get(loss).is_none() {
        return Err(IrError::new(
            "grad",
            format!("the loss {loss} is not a node of graph `{}`", g.name),
        ));
    }
    let ls = g.shape(loss).clone();
    if !ls.dtype().is_float() {
        return Err(IrError::new(
            "grad",
            format!(
                "the loss must be a float tensor, got {ls}; cast it with .cast(DType::F32) first"
            ),
        ));
    }
    let seed = ones_like(g, loss)?;
    let grads = append_vjp(g, &[loss], &[seed], wrt)?;
    grads
        .iter()
        .enumerate()
        .map(|(i, gr)| match gr {
            Some(id) => Ok(*id),
            None => {
                let label = labels
                    .and_then(|l| l.get(i).cloned())
                    .unwrap_or_else(|| describe_node(g, wrt[i]));
                Err(no_gradient_error(g, &[loss], wrt[i], &label))
            }
        })
        .collect()
}

/// The gradient function of `graph`: its first output is the loss (seeded with
/// ones); the result's outputs are `[∂loss/∂wrt_i …]`, in `wrt` order.
pub fn grad_graph(graph: &Graph, wrt: &[NodeId]) -> IrResult<Graph> {
    build_grad(graph, wrt, false)
}

/// Like [`grad_graph`] with the loss kept as the first output: `[loss, grads…]`.
pub fn value_and_grad_graph(graph: &Graph, wrt: &[NodeId]) -> IrResult<Graph> {
    build_grad(graph, wrt, true)
}

fn build_grad(graph: &Graph, wrt: &[NodeId], keep_loss: bool) -> IrResult<Graph> {
    let Some(&loss) = graph.outputs.first() else {
        return Err(IrError::new(
            "grad",
            format!(
                "graph `{}` has no output; its first output is the loss to differentiate",
                graph.name
            ),
        ));
    };
    let mut g = graph.clone();
    let grads = append_grad(&mut g, loss, wrt, None)?;
    let mut outs = if keep_loss { vec![loss] } else { Vec::new() };
    outs.extend(grads);
    g.set_outputs(outs);
    Ok(g)
}

/// The vector-Jacobian-product function of `graph`: one new input per output —
/// `d_output` for a single output, `d_output_0`, `d_output_1`, … otherwise — holds
/// its cotangent; the outputs are the gradients with respect to `wrt` (zeros where
/// none reaches a `wrt` node).
pub fn vjp_graph(graph: &Graph, wrt: &[NodeId]) -> IrResult<Graph> {
    let mut g = graph.clone();
    let outputs = g.outputs.clone();
    let cts: Vec<NodeId> = outputs
        .iter()
        .enumerate()
        .map(|(i, &o)| {
            let name = if outputs.len() == 1 {
                "d_output".to_string()
            } else {
                format!("d_output_{i}")
            };
            let s = g.shape(o).clone();
            g.input(name, s)
        })
        .collect();
    let grads = append_vjp(&mut g, &outputs, &cts, wrt)?;
    let mut outs = Vec::with_capacity(wrt.len());
    for (gr, &w) in grads.into_iter().zip(wrt) {
        outs.push(match gr {
            Some(id) => id,
            None => {
                let dt = g.shape(w).dtype();
                let zero = TensorData::from_f64_as(dt, &[], &[0.0]);
                let c = g.add_node(
                    Op::Constant {
                        data: zero.bytes.clone(),
                    },
                    vec![],
                    zero.shape(),
                );
                let mut rb = ReverseBuilder::new(&mut g, Vec::new());
                rb.broadcast_like(c, w)?
            }
        });
    }
    g.set_outputs(outs);
    Ok(g)
}
