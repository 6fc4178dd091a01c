//! Quantization-aware training with the rounding *in the graph* (feature `optim`).
//!
//! [`Func::train_step_all_at_on_qat_format`] rewrites the loss graph once (memoized per
//! format on the `Func` lineage) so that every float param is read through
//! `Op::RoundToFormat`. The forward pass and the gradient then see the rounded params;
//! the rounding's gradient is the identity (straight-through), so the optimizer update
//! lands on the f32 master params. Unlike the host-closure variants
//! ([`Func::train_step_all_at_on_qat`]) the rounding runs inside the compiled program,
//! fused into the elementwise kernels that read the params.

use crate::eval::Device;
use crate::func::Func;
use crate::{Error, Result};
use rlx_ir::{Graph, NodeId, Op};
use rlx_optim::{LrSchedule, Optimizer};

/// `graph` with every float `Param` replaced, for all of its users (and the outputs), by
/// `RoundToFormat(param)`. Node order is kept; each rounding node follows its param.
pub(crate) fn round_params(
    graph: &Graph,
    exp_bits: u32,
    man_bits: u32,
    max_normal: f32,
) -> Result<Graph> {
    let mut out = Graph::new(graph.name.clone());
    let mut map: Vec<NodeId> = Vec::with_capacity(graph.len());
    let round = Op::RoundToFormat {
        exp_bits,
        man_bits,
        max_normal,
    };
    for node in graph.nodes() {
        let inputs: Vec<NodeId> = node.inputs.iter().map(|i| map[i.index()]).collect();
        let id = out.add_node(node.op.clone(), inputs, node.shape.clone());
        let copy = out.node_mut(id);
        copy.name = node.name.clone();
        copy.origin = node.origin;
        let id = match &node.op {
            Op::Param { name } if node.shape.dtype().is_float() => {
                out.add_op(round.clone(), vec![id]).map_err(|e| {
                    Error::new(format!(
                        "train_step_all_at_on_qat_format: cannot round param `{name}` ({}): {e}",
                        node.shape
                    ))
                })?
            }
            _ => id,
        };
        map.push(id);
    }
    out.set_outputs(graph.outputs.iter().map(|o| map[o.index()]).collect());
    Ok(out)
}

impl Func {
    /// Quantization-aware step with the rounding in the graph: every float param is
    /// rounded to the `(exp_bits, man_bits, max_normal)` float format (the rules of
    /// [`crate::lowp::quantize`]) inside the compiled program before use, the forward
    /// pass and the gradient see the rounded values, and the update (learning rate from
    /// `schedule` at `step`, global gradient clipping at `max_grad_norm` when `> 0`) is
    /// applied to the f32 masters. The rewritten graph is built once per format and
    /// shared by every `Func` this one's steps return.
    ///
    /// Same result as [`Func::train_step_all_at_on_qat`] with
    /// `|p| lowp::quantize_slice(p, exp_bits, man_bits, max_normal)`, up to the order
    /// of floating-point operations.
    ///
    /// ```
    /// use rlx_tensor::{shape, Device, Func, LrSchedule, Sgd};
    /// // minimise (w − 1.1)² with w read as nvf4 (grid … 1, 1.5 …)
    /// let f = Func::new("q", |s| {
    ///     let w = s.param("w", shape![1]);
    ///     let d = &w - 1.1;
    ///     (&d * &d).sum_all()
    /// })
    /// .with_param("w", vec![1.2]);
    /// let mut opt = Sgd::new(0.5);
    /// let sched = LrSchedule::Constant(0.5);
    /// let (g, loss) = f.train_step_all_at_on_qat_format(Device::Cpu, &mut opt, &sched, 0, 0.0, 2, 1, 6.0, &[]);
    /// // forward at round(1.2) = 1.0: loss (1 − 1.1)², gradient 2·(1 − 1.1) = −0.2
    /// assert!((loss[0] - 0.01).abs() < 1e-6);
    /// assert!((g.param_binding("w").unwrap()[0] - 1.3).abs() < 1e-6);
    /// ```
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub fn train_step_all_at_on_qat_format(
        &self,
        device: Device,
        opt: &mut dyn Optimizer,
        schedule: &LrSchedule,
        step: usize,
        max_grad_norm: f32,
        exp_bits: u32,
        man_bits: u32,
        max_normal: f32,
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        self.try_qat_format_parts(exp_bits, man_bits, max_normal)
            .and_then(|q| {
                let (stepped, loss) = q.train_step_all_at_on_clipped(
                    device,
                    opt,
                    schedule,
                    step,
                    max_grad_norm,
                    inputs,
                );
                Ok((self.take_params_from(&stepped)?, loss))
            })
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The memoized param-rounding rewrite of this function, with this function's
    /// params bound.
    fn try_qat_format_parts(&self, exp_bits: u32, man_bits: u32, max_normal: f32) -> Result<Func> {
        let key = format!(
            "qat_format:{exp_bits}:{man_bits}:{:08x}",
            max_normal.to_bits()
        );
        let mut q = self.derived(&key, || {
            Ok(Func::from_graph(round_params(
                self.graph(),
                exp_bits,
                man_bits,
                max_normal,
            )?))
        })?;
        for (name, data) in self.param_bindings() {
            q = q.try_with_param(name.as_str(), data.clone())?;
        }
        Ok(q)
    }

    /// This function with every param rebound to `other`'s binding of the same name.
    fn take_params_from(&self, other: &Func) -> Result<Func> {
        let mut next = self.clone();
        for (name, data) in other.param_bindings() {
            next = next.try_with_param(name.as_str(), data.clone())?;
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{DType, Shape};

    #[test]
    fn every_float_param_is_read_through_one_rounding_node() {
        let mut g = Graph::new("g");
        let x = g.input("x", Shape::new(&[2], DType::F32));
        let w = g.param("w", Shape::new(&[2], DType::F32));
        let k = g.param("k", Shape::new(&[2], DType::I32));
        let a = g
            .add_op(Op::Binary(rlx_ir::BinaryOp::Mul), vec![x, w])
            .unwrap();
        let b = g
            .add_op(Op::Binary(rlx_ir::BinaryOp::Add), vec![a, w])
            .unwrap();
        g.set_outputs(vec![b, w, k]);
        let r = round_params(&g, 4, 3, 448.0).unwrap();
        let rounds: Vec<_> = r
            .nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::RoundToFormat { .. }))
            .collect();
        assert_eq!(rounds.len(), 1, "one rounding for the float param only");
        let rw = rounds[0].id;
        assert_eq!(
            r.node(rounds[0].inputs[0]).op,
            Op::Param { name: "w".into() }
        );
        for n in r.nodes() {
            if matches!(n.op, Op::Binary(_)) {
                assert!(
                    n.inputs.contains(&rw)
                        || !n
                            .inputs
                            .iter()
                            .any(|i| r.node(*i).op == Op::Param { name: "w".into() }),
                    "no user reads the raw param"
                );
            }
        }
        assert_eq!(r.outputs[1], rw);
        assert_eq!(r.node(r.outputs[2]).op, Op::Param { name: "k".into() });
        r.verify().unwrap();
    }
}
