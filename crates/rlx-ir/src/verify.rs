//! The graph verifier: every malformed graph becomes a clear error.

use crate::{Graph, IrError, IrResult, Op, Shape, infer_shape};
use std::collections::HashMap;

impl Graph {
    /// Check the whole graph:
    /// - node ids are dense insertion indices and operands precede their users;
    /// - leaves (`Input`, `Param`, `Constant`) have no operands;
    /// - every op's claimed result type is what [`crate::infer_shape`] gives;
    /// - constants have a static shape and a payload of exactly its byte size;
    /// - input and param names are unique (across both kinds, since both are
    ///   bound by name);
    /// - scan bodies verify, and every output id is a node.
    ///
    /// ```
    /// use rlx_ir::{DType, Graph, Op, Shape};
    /// let mut g = Graph::new("bad");
    /// let a = g.input("a", Shape::new(&[2], DType::F32));
    /// // a node that claims the wrong result type
    /// let b = g.add_node(Op::StopGradient, vec![a], Shape::new(&[3], DType::F32));
    /// g.set_outputs(vec![b]);
    /// assert!(g.verify().unwrap_err().to_string().contains("stop_gradient"));
    /// ```
    pub fn verify(&self) -> IrResult<()> {
        // name → ("input" | "param") of the first leaf that took it
        let mut names: HashMap<&str, &str> = HashMap::new();
        for (idx, n) in self.nodes().iter().enumerate() {
            if n.id.index() != idx {
                return Err(IrError::graph(
                    "verify",
                    format!(
                        "the node at position {idx} of graph `{}` has id {}; ids must be dense insertion indices (build nodes with Graph::add_node)",
                        self.name, n.id
                    ),
                ));
            }
            for &i in &n.inputs {
                if i.index() >= idx {
                    return Err(IrError::graph(
                        n.op.name(),
                        format!(
                            "operand {i} does not precede its user {} in graph `{}`; nodes must be added after their operands (topological order)",
                            n.id, self.name
                        ),
                    )
                    .at(n.id));
                }
            }
            if n.op.is_leaf() && !n.inputs.is_empty() {
                return Err(IrError::graph(
                    n.op.name(),
                    format!(
                        "a leaf node takes no operands, but {} lists [{}]; build leaves with Graph::input, Graph::param or Graph::add_node(op, vec![], shape)",
                        n.id,
                        n.inputs.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
                    ),
                )
                .at(n.id));
            }
            match &n.op {
                Op::Input { name } | Op::Param { name } => {
                    let kind = if matches!(n.op, Op::Input { .. }) {
                        "input"
                    } else {
                        "param"
                    };
                    if let Some(prev) = names.insert(name.as_str(), kind) {
                        return Err(IrError::graph(
                            kind,
                            format!(
                                "the name `{name}` is used by an earlier {prev} too; input and param names must be unique because data is bound by name"
                            ),
                        )
                        .at(n.id));
                    }
                }
                Op::Constant { data } => check_constant(data, &n.shape).map_err(|e| e.at(n.id))?,
                op => {
                    if let Op::Scan { body, .. } = op {
                        body.verify().map_err(|e| {
                            IrError::of_kind(e.kind, "scan", format!("body `{}`: {e}", body.name))
                                .at(n.id)
                        })?;
                    }
                    let shapes: Vec<&Shape> = n.inputs.iter().map(|&i| self.shape(i)).collect();
                    let inferred = infer_shape(op, &shapes).map_err(|e| e.at(n.id))?;
                    if inferred != n.shape {
                        let given: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
                        return Err(IrError::graph(
                            op.name(),
                            format!(
                                "node {} claims result type {} but its operands [{}] give {inferred}; build it with Graph::add_op to infer the type",
                                n.id,
                                n.shape,
                                given.join("; ")
                            ),
                        )
                        .at(n.id));
                    }
                }
            }
        }
        for &o in &self.outputs {
            if o.index() >= self.len() {
                return Err(IrError::graph(
                    "verify",
                    format!(
                        "output {o} is not a node of graph `{}` ({} nodes); set_outputs must name ids from this graph",
                        self.name,
                        self.len()
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn check_constant(data: &[u8], shape: &Shape) -> IrResult<()> {
    let Some(bytes) = shape.size_bytes() else {
        return Err(IrError::graph(
            "constant",
            format!("constants must have a static shape, got {shape}; give every dim a size"),
        ));
    };
    if bytes != data.len() {
        return Err(IrError::graph(
            "constant",
            format!(
                "the payload has {} bytes but {shape} needs {bytes} ({} elements × {} bytes); fix the data or the shape",
                data.len(),
                shape.num_elements().unwrap_or(0),
                shape.dtype().size_bytes()
            ),
        ));
    }
    Ok(())
}
