//! # rlx-cpu — the CPU backend
//!
//! Implements [`rlx_runtime::Backend`] for [`Device::Cpu`].
//!
//! Status: this backend currently executes the verified graph through the oracle
//! interpreter ([`rlx_ir::interp`]), op by op. The compiled path (fusion, memory
//! planning, tiled SIMD kernels) replaces the executor behind the same trait.

pub mod gemm;
pub mod math;

use rlx_ir::{Graph, Op, TensorData, TensorView, interp};
use rlx_runtime::{Backend, Device, Executable, RuntimeError, RuntimeResult, arg_order};
use std::sync::Arc;

/// The CPU backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn devices(&self) -> &[Device] {
        &[Device::Cpu]
    }

    fn is_available(&self, device: Device) -> bool {
        device == Device::Cpu
    }

    fn compile(&self, device: Device, graph: &Graph) -> RuntimeResult<Arc<dyn Executable>> {
        if device != Device::Cpu {
            return Err(RuntimeError::new(format!(
                "the CPU backend cannot compile for {device}"
            )));
        }
        let names = arg_order(graph)
            .into_iter()
            .map(|id| match &graph.node(id).op {
                Op::Input { name } | Op::Param { name } => name.clone(),
                _ => unreachable!(),
            })
            .collect();
        Ok(Arc::new(InterpExecutable {
            graph: graph.clone(),
            names,
        }))
    }
}

/// A graph executed op by op by the oracle interpreter.
struct InterpExecutable {
    graph: Graph,
    names: Vec<String>,
}

impl Executable for InterpExecutable {
    fn run(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        if args.len() != self.names.len() {
            return Err(RuntimeError::new(format!(
                "graph `{}` takes {} arguments ({:?}), got {}",
                self.graph.name,
                self.names.len(),
                self.names,
                args.len()
            )));
        }
        let owned: Vec<TensorData> = args.iter().map(|a| a.to_owned()).collect();
        let named: Vec<(&str, &TensorData)> = self
            .names
            .iter()
            .map(|s| s.as_str())
            .zip(owned.iter())
            .collect();
        Ok(interp::run_refs(&self.graph, &named)?)
    }

    fn explain(&self) -> String {
        format!(
            "CPU (oracle interpreter): graph `{}`, {} nodes executed one by one, no fusion, every intermediate materialized\n{}",
            self.graph.name,
            self.graph.len(),
            self.graph
        )
    }
}
