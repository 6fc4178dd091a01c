//! The graph verifier: every malformed graph becomes a clear error.

use crate::{Graph, IrError, IrResult, Op, Shape, infer_shape};
use std::collections::HashSet;

impl Graph {
    /// Check the whole graph: operands precede their users, every op's result type is
    /// what shape inference says, constant payloads match their shapes, input and param
    /// names are unique, and every output exists.
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
        let mut inputs_seen = HashSet::new();
        let mut params_seen = HashSet::new();
        for (idx, n) in self.nodes().iter().enumerate() {
            if n.id.index() != idx {
                return Err(IrError::new(
                    "verify",
                    format!("node at position {idx} has id {}", n.id),
                ));
            }
            for &i in &n.inputs {
                if i.index() >= idx {
                    return Err(IrError::new(
                        n.op.name(),
                        format!("operand {i} does not precede its user {} (graphs are topologically ordered)", n.id),
                    )
                    .at(n.id));
                }
            }
            match &n.op {
                Op::Input { name } => {
                    if !inputs_seen.insert(name.clone()) {
                        return Err(IrError::new(
                            "input",
                            format!("two inputs are named `{name}`; names must be unique"),
                        )
                        .at(n.id));
                    }
                }
                Op::Param { name } => {
                    if !params_seen.insert(name.clone()) {
                        return Err(IrError::new(
                            "param",
                            format!("two params are named `{name}`; names must be unique"),
                        )
                        .at(n.id));
                    }
                }
                Op::Constant { data } => {
                    if let Some(bytes) = n.shape.size_bytes() {
                        if bytes != data.len() {
                            return Err(IrError::new(
                                "constant",
                                format!(
                                    "payload has {} bytes but {} needs {bytes}",
                                    data.len(),
                                    n.shape
                                ),
                            )
                            .at(n.id));
                        }
                    } else {
                        return Err(IrError::new(
                            "constant",
                            format!("constants must have a static shape, got {}", n.shape),
                        )
                        .at(n.id));
                    }
                }
                op => {
                    if let Op::Scan { body, .. } = op {
                        body.verify()
                            .map_err(|e| IrError::new("scan", format!("body: {e}")).at(n.id))?;
                    }
                    let shapes: Vec<&Shape> = n.inputs.iter().map(|&i| self.shape(i)).collect();
                    let inferred = infer_shape(op, &shapes).map_err(|e| e.at(n.id))?;
                    if inferred != n.shape {
                        return Err(IrError::new(
                            op.name(),
                            format!(
                                "node claims result type {} but its operands give {inferred}",
                                n.shape
                            ),
                        )
                        .at(n.id));
                    }
                }
            }
        }
        for &o in &self.outputs {
            if o.index() >= self.len() {
                return Err(IrError::new(
                    "verify",
                    format!("output {o} is not a node ({} nodes)", self.len()),
                ));
            }
        }
        Ok(())
    }
}
