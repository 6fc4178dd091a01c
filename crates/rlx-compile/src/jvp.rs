//! Forward-mode automatic differentiation: Jacobian-vector products as graph → graph
//! transforms.
//!
//! [`append_jvp`] appends the tangent computation to the graph itself: one forward
//! sweep in topological order over the nodes that lie between the seeded nodes and
//! the requested outputs, each op contributing its JVP rule (one module per op
//! family). A tangent always has its primal's dims and dtype; a missing tangent
//! means zero, so unrelated subgraphs cost nothing. The result is an ordinary graph:
//! differentiate it again (in either mode), batch it with [`crate::vmap`], compile it.
//!
//! The rules shared with the reverse mode ([`crate::autodiff`]) live in
//! `crate::derivatives`: a linear op's tangent is the op applied to the tangents
//! (one generic rule), element-wise ops sum their operands' partials applied to the
//! tangents, and softmax, the norms and the reductions apply the same Jacobians as
//! reverse mode. Conventions (the same in both modes, so that `jvp(f)·v` equals
//! `⟨grad f, v⟩`):
//! - only real floats (and complex, for `fft`) carry tangents; integer and bool
//!   values, comparisons, `argmax`/`argmin`, `floor`/`ceil`/`sign`, casts to
//!   integers, `stop_gradient`, quantization codes and scales give zero tangents;
//! - `maximum`/`minimum` and the `max`/`min` reductions split the tangent evenly
//!   between tied operands/elements;
//! - `round` and `round_to_format` are straight-through (the tangent passes);
//! - `scaled_matmul` is straight-through: the tangent of the float operand `x` of
//!   `scaled_quantize(x, s)` flows as if the quantizer were the identity and the
//!   scales constants;
//! - the custom attention mask only selects keys (zero tangent); everything else
//!   that is mathematically differentiable is differentiated exactly, including
//!   rope's cos/sin tables and the attention bias;
//! - ops without a compact rule (attention, max pooling, the spline's input) are
//!   differentiated through a decomposition into primitive ops, and `scan` by
//!   carrying `[value, tangent]` stacked in one carry through a differentiated body.

pub(crate) mod emit;

pub(crate) mod conv;
mod elementwise;
pub(crate) mod linalg;
mod nn;
mod reduce;
mod scan;

use crate::build::{Build, Family, between, check_ids, family};
use crate::derivatives::linear::{self, linearity};
use emit::Emitter;
use rlx_ir::{DType, Graph, IrError, IrResult, Node, NodeId, Op};
use std::collections::HashMap;

/// Whether values of `dt` carry tangents (real floats, and complex for `fft`).
pub(crate) fn carries_tangent(dt: DType) -> bool {
    dt.is_float() || dt.is_complex()
}

/// The state of one forward sweep: the emitter and the tangent of every node that has one.
pub(crate) struct ForwardBuilder<'g> {
    pub(crate) e: Emitter<'g>,
    tangents: HashMap<NodeId, NodeId>,
}

impl<'g> ForwardBuilder<'g> {
    pub(crate) fn new(g: &'g mut Graph) -> ForwardBuilder<'g> {
        ForwardBuilder {
            e: Emitter::new(g, "jvp"),
            tangents: HashMap::new(),
        }
    }

    /// The tangent of `id`, if it has one (else it is zero).
    pub(crate) fn tangent(&self, id: NodeId) -> Option<NodeId> {
        self.tangents.get(&id).copied()
    }

    /// The tangent of input slot `i` of `node`.
    pub(crate) fn operand_tangent(&self, node: &Node, i: usize) -> Option<NodeId> {
        node.inputs.get(i).and_then(|&id| self.tangent(id))
    }

    /// Set the tangent of `id` (cast and broadcast to `id`'s type).
    pub(crate) fn seed(&mut self, id: NodeId, tangent: NodeId) -> IrResult<()> {
        let t = self.e.fit(tangent, id)?;
        self.tangents.insert(id, t);
        Ok(())
    }

    /// Compute and record the tangent of node `id` from its operands' tangents.
    pub(crate) fn visit(&mut self, id: NodeId) -> IrResult<()> {
        let node = self.e.g.node(id).clone();
        if node.op.is_leaf()
            || !carries_tangent(node.shape.dtype())
            || node.inputs.iter().all(|i| self.tangent(*i).is_none())
        {
            return Ok(());
        }
        let t = rule(self, &node).map_err(|e| {
            let at = node
                .origin
                .map(|o| format!(" (built at {o})"))
                .unwrap_or_default();
            if e.op == "jvp" {
                IrError::new(
                    "jvp",
                    format!(
                        "differentiating {} node {id}{at}: {}",
                        node.op.name(),
                        e.message
                    ),
                )
            } else {
                IrError::new(
                    "jvp",
                    format!("differentiating {} node {id}{at}: {e}", node.op.name()),
                )
            }
        })?;
        if let Some(t) = t {
            self.seed(id, t)?;
        }
        Ok(())
    }

    /// Differentiate through a decomposition: `build` appends primitive nodes that
    /// compute the same value from nodes that already exist; they are visited in order
    /// and the tangent of the node `build` returns is the result.
    pub(crate) fn through(
        &mut self,
        build: impl FnOnce(&mut Emitter) -> IrResult<NodeId>,
    ) -> IrResult<Option<NodeId>> {
        let start = self.e.g.len();
        let out = build(&mut self.e)?;
        for idx in start..self.e.g.len() {
            self.visit(NodeId(idx as u32))?;
        }
        Ok(self.tangent(out))
    }
}

/// The tangent of `node`: the op applied to the tangents for a linear op
/// ([`crate::derivatives::linear`]), else its op family's JVP rule. `Ok(None)` is a
/// zero tangent.
fn rule(f: &mut ForwardBuilder, node: &Node) -> IrResult<Option<NodeId>> {
    if let Some(how) = linearity(&node.op, node.inputs.len()) {
        let tangents: Vec<Option<NodeId>> = (0..node.inputs.len())
            .map(|i| f.operand_tangent(node, i))
            .collect();
        return linear::tangent(&mut f.e, &node.op, &node.inputs, &tangents, &how);
    }
    match family(&node.op) {
        Family::Leaf => Ok(None),
        Family::Elementwise => elementwise::rule(f, node),
        Family::Linalg => linalg::rule(f, node),
        Family::Nn | Family::Attention => nn::rule(f, node),
        Family::Movement | Family::Reduce => reduce::rule(f, node),
        Family::Conv => conv::rule(f, node),
        Family::Scan => scan::rule(f, node),
    }
}

/// Append the Jacobian-vector product to `g`: `seeds` pairs a node with its tangent
/// (a node of `g` with the same dims; it is cast to the node's dtype); the result
/// holds, per entry of `outputs`, the tangent node of that output, or `None` where
/// the tangent is zero (no seeded node reaches it through differentiable ops).
///
/// Only nodes between the seeds and `outputs` are differentiated. Errors when an
/// id is not a node of `g`, a seed's dims differ from its node's, or a rule cannot
/// be built (the message names the op and node).
///
/// ```
/// use rlx_compile::jvp::append_jvp;
/// use rlx_ir::{interp, Activation, DType, Graph, Op, Shape, TensorData};
/// let mut g = Graph::new("sin");
/// let x = g.input("x", Shape::new(&[2], DType::F64));
/// let y = g.add_op(Op::Activation(Activation::Sin), vec![x]).unwrap();
/// let tx = g.input("tangent_x", Shape::new(&[2], DType::F64));
/// let ty = append_jvp(&mut g, &[(x, tx)], &[y]).unwrap()[0].unwrap();
/// g.set_outputs(vec![ty]);
/// let out = interp::run(&g, &[
///     ("x", TensorData::from_f64(&[2], &[0.0, std::f64::consts::PI])),
///     ("tangent_x", TensorData::from_f64(&[2], &[2.0, 1.0])),
/// ]).unwrap();
/// assert_eq!(out[0].to_f64_vec(), vec![2.0, -1.0]); // cos(x)·t
/// ```
pub fn append_jvp(
    g: &mut Graph,
    seeds: &[(NodeId, NodeId)],
    outputs: &[NodeId],
) -> IrResult<Vec<Option<NodeId>>> {
    check_ids(
        g,
        seeds
            .iter()
            .flat_map(|&(a, b)| [a, b])
            .chain(outputs.iter().copied()),
        "jvp",
    )?;
    for &(p, t) in seeds {
        let (ps, ts) = (g.shape(p), g.shape(t));
        if ps.dims() != ts.dims() {
            return Err(IrError::new(
                "jvp",
                format!(
                    "the tangent {t} is {ts} but its primal {p} is {ps}; a tangent must have its primal's dims"
                ),
            ));
        }
    }
    let n0 = g.len();
    let active = between(g, n0, seeds.iter().map(|&(p, _)| p), outputs);
    let mut f = ForwardBuilder::new(g);
    for &(p, t) in seeds {
        if carries_tangent(f.e.dtype(p)) {
            f.seed(p, t)?;
        }
    }
    for (idx, &on) in active.iter().enumerate() {
        if on {
            f.visit(NodeId(idx as u32))?;
        }
    }
    Ok(outputs.iter().map(|&o| f.tangent(o)).collect())
}

/// The name of the tangent input for the input or param `name`.
pub fn tangent_name(name: &str) -> String {
    format!("tangent_{name}")
}

/// The JVP function of `graph` (API.md §4.1 `Func::jvp`): for every node in
/// `tangent_for` (an `Op::Input` or `Op::Param`) a new input `tangent_<name>` of the
/// same type is added; the outputs are `[primals…, tangents…]` — every original
/// output, then its tangent (zeros of its type where no tangent reaches it).
///
/// Errors when an entry is not an input or param, or is listed twice.
pub fn jvp_graph(graph: &Graph, tangent_for: &[NodeId]) -> IrResult<Graph> {
    let mut g = graph.clone();
    let mut seeds = Vec::with_capacity(tangent_for.len());
    for &id in tangent_for {
        let Some(node) = graph.get(id) else {
            return Err(IrError::new(
                "jvp",
                format!("{id} is not a node of graph `{}`", graph.name),
            ));
        };
        let name = match &node.op {
            Op::Input { name } | Op::Param { name } => name.clone(),
            op => {
                return Err(IrError::new(
                    "jvp",
                    format!(
                        "tangents are fed to inputs and params, but node {id} is a {} node; pass the id of an Op::Input or Op::Param",
                        op.name()
                    ),
                ));
            }
        };
        let tname = tangent_name(&name);
        if g.input_id(&tname).is_some() || g.param_id(&tname).is_some() {
            return Err(IrError::new(
                "jvp",
                format!(
                    "cannot add the tangent input `{tname}` for `{name}`: graph `{}` already has an input or param of that name (is `{name}` listed twice?)",
                    graph.name
                ),
            ));
        }
        let t = g.input(tname, node.shape.clone());
        seeds.push((id, t));
    }
    let outputs = graph.outputs.clone();
    let tangents = append_jvp(&mut g, &seeds, &outputs)?;
    let mut outs = outputs.clone();
    for (t, &o) in tangents.into_iter().zip(&outputs) {
        outs.push(match t {
            Some(t) => t,
            None => Emitter::new(&mut g, "jvp").zeros_like(o)?,
        });
    }
    g.set_outputs(outs);
    Ok(g)
}
