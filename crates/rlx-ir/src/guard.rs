//! Run-time guards for dynamic dims.
//!
//! Shape inference checks every fixed-size request (a `narrow` of 5 rows, a reshape
//! count, a pad, a conv window) against the sizes it can see. When an operand has a
//! dynamic dim that check is deferred: `narrow(0, 0, 5)` of a `[?0, 3]` input is a
//! valid *trace*, but a run that binds `?0 = 2` asks for rows that do not exist.
//! [`DimGuards`] records, for every live node whose operands carry a dynamic dim, the
//! op and its operand types; [`DimGuards::check`] re-runs shape inference on the
//! operand types with the run-time sizes substituted and returns the op's own error
//! (which names the axis, the requested range and the size it got). Every backend and
//! the oracle interpreter call it once per distinct binding, before any kernel runs,
//! so no kernel ever indexes past a buffer because of a dynamic size.

use crate::{Graph, IrError, IrResult, NodeId, Op, Shape, infer_shape, shape::DimBinding};

/// One deferred check: `op` applied to operands of types `inputs` must infer `output`.
#[derive(Debug, Clone, PartialEq)]
struct DimGuard {
    node: NodeId,
    op: Op,
    inputs: Vec<Shape>,
    output: Shape,
}

/// The run-time checks of a graph's dynamic dims (empty for a static graph).
///
/// ```
/// use rlx_ir::{DimBinding, DimGuards, Dim, DType, Graph, Op, Shape};
/// let mut g = Graph::new("rows");
/// let x = g.input("x", Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(3)], DType::F32));
/// let y = g.add_op(Op::Narrow { axis: 0, start: 0, len: 5 }, vec![x]).unwrap();
/// g.set_outputs(vec![y]);
/// let guards = DimGuards::from_graph(&g);
/// let bound = |n| [(0u32, n)].into_iter().collect::<DimBinding>();
/// assert!(guards.check(&bound(8)).is_ok());
/// let err = guards.check(&bound(2)).unwrap_err();
/// assert!(err.to_string().contains("exceeds axis 0 of size 2"), "{err}");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DimGuards {
    guards: Vec<DimGuard>,
}

impl DimGuards {
    /// The guards of every node that the outputs depend on and whose operands have a
    /// dynamic dim. Element-wise ops are skipped: their symbolic inference is exact
    /// (equal symbols stay equal under any binding, a static 1 broadcasts either way).
    pub fn from_graph(graph: &Graph) -> DimGuards {
        let live = live_nodes(graph);
        let mut guards = Vec::new();
        for node in graph.nodes() {
            // A scan's body is a graph of its own, traced with symbolic dims: its own
            // guards are checked when the body runs (every backend runs it through
            // `interp::run`), and its type check cannot be replayed on bound sizes.
            let own_checks = matches!(node.op, Op::Scan { .. });
            if !live[node.id.index()] || node.op.is_leaf() || node.op.is_elementwise() || own_checks
            {
                continue;
            }
            let inputs: Vec<Shape> = node
                .inputs
                .iter()
                .map(|i| graph.node(*i).shape.clone())
                .collect();
            if inputs.iter().all(Shape::is_static) {
                continue;
            }
            guards.push(DimGuard {
                node: node.id,
                op: node.op.clone(),
                inputs,
                output: node.shape.clone(),
            });
        }
        DimGuards { guards }
    }

    /// Number of deferred checks.
    pub fn len(&self) -> usize {
        self.guards.len()
    }

    /// True when nothing is deferred to run time.
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// Check every guard under `binding`. The error is the op's shape-inference error
    /// for the run-time sizes, prefixed with the binding that caused it. A guard whose
    /// symbols `binding` leaves unbound is skipped (running such a program fails on
    /// the unbound symbol itself).
    pub fn check(&self, binding: &DimBinding) -> IrResult<()> {
        for g in &self.guards {
            let bound: Vec<Shape> = g.inputs.iter().map(|s| s.bind(binding)).collect();
            if !bound.iter().all(Shape::is_static) {
                continue;
            }
            let refs: Vec<&Shape> = bound.iter().collect();
            let traced = || {
                g.inputs
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            match infer_shape(&g.op, &refs) {
                Err(e) => {
                    return Err(IrError::new(
                        e.op,
                        format!(
                            "at run time, with {}: {} (the op was traced on {}; pass data whose dynamic dims are large enough, or narrow a static axis)",
                            binding,
                            e.message,
                            traced()
                        ),
                    )
                    .at(g.node));
                }
                Ok(s) if s.dims() != g.output.bind(binding).dims() => {
                    return Err(IrError::new(
                        g.op.name(),
                        format!(
                            "at run time, with {}: the result would be {s} but the program was compiled for {} (operands traced as {}); bind the dynamic dims consistently",
                            binding,
                            g.output.bind(binding),
                            traced()
                        ),
                    )
                    .at(g.node));
                }
                Ok(_) => {}
            }
        }
        Ok(())
    }
}

impl Graph {
    /// Per node: whether the outputs depend on it (one reverse pass over the nodes,
    /// which are in topological order).
    pub fn live_nodes(&self) -> Vec<bool> {
        live_nodes(self)
    }
}

/// Which nodes the outputs depend on (nodes are in topological order).
pub(crate) fn live_nodes(graph: &Graph) -> Vec<bool> {
    let mut live = vec![false; graph.len()];
    for o in &graph.outputs {
        live[o.index()] = true;
    }
    for node in graph.nodes().iter().rev() {
        if live[node.id.index()] {
            for i in &node.inputs {
                live[i.index()] = true;
            }
        }
    }
    live
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Dim};

    fn narrow(g: &mut Graph, x: NodeId, start: usize, len: usize) -> NodeId {
        g.add_op(
            Op::Narrow {
                axis: 0,
                start,
                len,
            },
            vec![x],
        )
        .unwrap()
    }

    fn bound(pairs: &[(u32, usize)]) -> DimBinding {
        pairs.iter().copied().collect()
    }

    fn dynamic_rows(cols: usize) -> (Graph, NodeId) {
        let mut g = Graph::new("t");
        let x = g.input(
            "x",
            Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(cols)], DType::F32),
        );
        (g, x)
    }

    #[test]
    fn narrow_past_a_dynamic_axis_is_rejected_with_the_range_and_the_size() {
        let (mut g, x) = dynamic_rows(3);
        let y = narrow(&mut g, x, 1, 4);
        g.set_outputs(vec![y]);
        let guards = DimGuards::from_graph(&g);
        assert_eq!(guards.len(), 1);
        assert!(guards.check(&bound(&[(0, 5)])).is_ok());
        let e = guards.check(&bound(&[(0, 4)])).unwrap_err();
        assert_eq!(e.op, "narrow");
        assert_eq!(e.node, Some(y));
        for part in [
            "?0 = 4",
            "start 1 + len 4",
            "axis 0 of size 4",
            "[?0, 3] f32",
        ] {
            assert!(e.message.contains(part), "missing {part:?} in {e}");
        }
    }

    #[test]
    fn dead_nodes_and_static_operands_get_no_guard() {
        let (mut g, x) = dynamic_rows(3);
        let dead = narrow(&mut g, x, 0, 9);
        let s = g.input("s", Shape::new(&[4, 3], DType::F32));
        let live = narrow(&mut g, s, 0, 2);
        let relu = g
            .add_op(Op::Activation(crate::Activation::Relu), vec![x])
            .unwrap();
        g.set_outputs(vec![live, relu]);
        assert!(dead.index() < g.len());
        let guards = DimGuards::from_graph(&g);
        assert!(guards.is_empty(), "{guards:?}");
        assert!(guards.check(&bound(&[(0, 1)])).is_ok());
    }

    #[test]
    fn unbound_symbols_are_left_to_the_binding_error() {
        let (mut g, x) = dynamic_rows(2);
        let y = narrow(&mut g, x, 0, 3);
        g.set_outputs(vec![y]);
        assert!(DimGuards::from_graph(&g).check(&DimBinding::new()).is_ok());
    }
}
