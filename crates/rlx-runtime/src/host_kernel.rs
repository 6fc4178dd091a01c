//! The one host fallback of the GPU backends: a kernel they cannot run, compiled once per
//! binding of the dynamic dims into a standalone graph
//! ([`rlx_compile::program::host_graph`]) and run on host buffers by the registered CPU
//! backend.

use crate::backend::compile_through;
use crate::{Backend, Device, Executable, RuntimeError, RuntimeResult, backend_for};
use rlx_compile::program::host_graph::{KernelGraph, input_name, kernel_graph};
use rlx_compile::program::{BufId, Kernel, Program};
use rlx_ir::{DimBinding, Graph, Op, TensorData, TensorView, interp};
use std::sync::Arc;

/// What runs a [`HostKernel`].
#[derive(Debug, Clone, PartialEq)]
pub enum HostEngine {
    /// The registered backend of this name (`"cpu"`), through its compiled executable.
    Backend(&'static str),
    /// The oracle interpreter ([`rlx_ir::interp`]), op by op: no CPU backend is
    /// registered (a GPU crate's own build without `rlx-cpu`), or it could not compile
    /// the kernel's graph (the reason is the field).
    Oracle(String),
}

impl std::fmt::Display for HostEngine {
    /// The backend's name, or `oracle`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostEngine::Backend(n) => f.write_str(n),
            HostEngine::Oracle(_) => f.write_str("oracle"),
        }
    }
}

/// One kernel of a [`Program`], bound to concrete dims, runnable on the host.
///
/// Built once per binding ([`HostKernel::new`]): the kernel becomes a static graph
/// whose inputs are the whole buffers it reads ([`HostKernel::inputs`], dense, in
/// buffer layout) and whose outputs are the buffers it writes ([`HostKernel::outputs`]),
/// compiled by the CPU backend registered with [`crate::register_backend`]. Without a
/// registered CPU backend the graph is evaluated by the oracle interpreter instead —
/// exact and slow; [`HostKernel::engine`] says which. `Send + Sync`: runs share the
/// executable, which allows concurrent runs.
pub struct HostKernel {
    kg: KernelGraph,
    exe: Option<Arc<dyn Executable>>,
    engine: HostEngine,
}

impl std::fmt::Debug for HostKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostKernel")
            .field("graph", &self.kg.graph.name)
            .field("inputs", &self.kg.inputs)
            .field("outputs", &self.kg.outputs)
            .field("engine", &self.engine)
            .finish()
    }
}

impl HostKernel {
    /// Kernel `k` of `p` under `binding` (every dynamic dim the kernel touches must be
    /// bound), compiled for the registered CPU backend when there is one.
    pub fn new(p: &Program, k: &Kernel, binding: &DimBinding) -> RuntimeResult<HostKernel> {
        HostKernel::with_backend(p, k, binding, backend_for(Device::Cpu).as_deref())
    }

    /// [`HostKernel::new`] compiled by `backend` for [`Device::Cpu`] (`None`: the oracle
    /// evaluates it), whatever the registry holds.
    pub fn with_backend(
        p: &Program,
        k: &Kernel,
        binding: &DimBinding,
        backend: Option<&dyn Backend>,
    ) -> RuntimeResult<HostKernel> {
        let kg = kernel_graph(p, k, binding)?;
        kg.graph.verify().map_err(|e| {
            RuntimeError::new(format!(
                "the host graph of kernel {} of `{}` is malformed: {e}",
                k.label(),
                p.name
            ))
        })?;
        let (exe, engine) = match backend {
            Some(b) => match compile_through(b, Device::Cpu, &kg.graph) {
                Ok(e) => (Some(e), HostEngine::Backend(b.name())),
                Err(e) => {
                    let why = format!("the {} backend could not compile it: {e}", b.name());
                    tracing::debug!(target: "rlx::host", "`{}` runs on the oracle: {why}", kg.graph.name);
                    (None, HostEngine::Oracle(why))
                }
            },
            None => (
                None,
                HostEngine::Oracle("no CPU backend is registered".into()),
            ),
        };
        Ok(HostKernel { kg, exe, engine })
    }

    /// The buffers to pass to [`HostKernel::run`], in order (whole, dense values).
    pub fn inputs(&self) -> &[BufId] {
        &self.kg.inputs
    }

    /// The buffers [`HostKernel::run`] returns the values of, in order.
    pub fn outputs(&self) -> &[BufId] {
        &self.kg.outputs
    }

    /// What runs the kernel.
    pub fn engine(&self) -> &HostEngine {
        &self.engine
    }

    /// The kernel's standalone graph.
    pub fn graph(&self) -> &Graph {
        &self.kg.graph
    }

    /// The CPU executable's account of the compiled graph, or a line naming the oracle.
    pub fn explain(&self) -> String {
        match (&self.exe, &self.engine) {
            (Some(e), _) => e.explain(),
            (None, HostEngine::Oracle(why)) => {
                format!("`{}` on the oracle interpreter: {why}", self.kg.graph.name)
            }
            (None, HostEngine::Backend(_)) => unreachable!("a backend engine has an executable"),
        }
    }

    /// Run on `args` (the values of [`HostKernel::inputs`], in order); returns the values
    /// of [`HostKernel::outputs`], in their buffers' dims and dtypes.
    pub fn run(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        let want = self
            .kg
            .graph
            .nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::Input { .. }));
        let mut n = 0usize;
        for (node, (a, &b)) in want.zip(args.iter().zip(&self.kg.inputs)) {
            n += 1;
            if node.shape.static_dims().as_deref() != Some(a.dims) || node.shape.dtype() != a.dtype
            {
                return Err(RuntimeError::shape(format!(
                    "`{}`: buffer {b} is {} but {:?} {} was passed; pass the buffer's whole value",
                    self.kg.graph.name, node.shape, a.dims, a.dtype
                )));
            }
        }
        if n != self.kg.inputs.len() || args.len() != n {
            return Err(RuntimeError::new(format!(
                "`{}` reads buffers {:?} but {} values were passed",
                self.kg.graph.name,
                self.kg.inputs,
                args.len()
            )));
        }
        match &self.exe {
            Some(e) => e.run(args),
            None => {
                let owned: Vec<TensorData> = args.iter().map(|a| a.to_owned()).collect();
                let names: Vec<String> = self.kg.inputs.iter().map(|&b| input_name(b)).collect();
                let named: Vec<(&str, &TensorData)> =
                    names.iter().map(|s| s.as_str()).zip(&owned).collect();
                Ok(interp::run_refs(&self.kg.graph, &named)?)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_compile::{CompileOptions, compile};
    use rlx_ir::{Activation, BinaryOp, DType, Dim, Shape};

    /// `relu(transpose(x)) + b` over a dynamic row count: one elementwise kernel with a
    /// transposed and a broadcast load.
    fn program() -> Program {
        let mut g = Graph::new("t");
        let x = g.input(
            "x",
            Shape::from_dims(&[Dim::Static(3), Dim::Dynamic(0)], DType::F32),
        );
        let b = g.input("b", Shape::new(&[3], DType::F32));
        let t = g
            .add_op(Op::Transpose { perm: vec![1, 0] }, vec![x])
            .unwrap();
        let r = g.add_op(Op::Activation(Activation::Relu), vec![t]).unwrap();
        let y = g.add_op(Op::Binary(BinaryOp::Add), vec![r, b]).unwrap();
        g.set_outputs(vec![y]);
        compile(&g, &CompileOptions::default()).unwrap()
    }

    // This crate's tests register no backend: `new` falls back to the oracle.
    #[test]
    fn without_a_registered_cpu_backend_the_oracle_runs_the_kernel() {
        let p = program();
        assert_eq!(p.kernels.len(), 1);
        let binding: DimBinding = [(0, 2)].into_iter().collect();
        let hk = HostKernel::new(&p, &p.kernels[0], &binding).unwrap();
        assert!(matches!(hk.engine(), HostEngine::Oracle(w) if w.contains("no CPU backend")));
        assert!(hk.explain().contains("oracle"), "{}", hk.explain());
        assert_eq!(hk.outputs(), p.outputs.as_slice());
        let x = TensorData::from_f32(&[3, 2], &[1.0, -2.0, 3.0, 4.0, -5.0, 6.0]);
        let b = TensorData::from_f32(&[3], &[10.0, 20.0, 30.0]);
        let out = hk.run(&[x.view(), b.view()]).unwrap();
        // transpose → [[1, 3, -5], [-2, 4, 6]], relu, + b.
        assert_eq!(
            out[0].to_f32_vec(),
            [11.0, 23.0, 30.0, 10.0, 24.0, 36.0],
            "{}",
            hk.graph()
        );
        assert_eq!(out[0].dims, [2, 3]);
        // A binding the kernel was not built for is an error naming the buffer.
        let x3 = TensorData::from_f32(&[3, 3], &[0.0; 9]);
        let e = hk.run(&[x3.view(), b.view()]).unwrap_err();
        assert!(e.message().contains("pass the buffer's whole value"), "{e}");
    }

    #[test]
    fn an_unbound_dynamic_dim_is_an_error_naming_the_kernel() {
        let p = program();
        let e = HostKernel::new(&p, &p.kernels[0], &DimBinding::new()).unwrap_err();
        assert!(e.message().contains("elementwise"), "{e}");
        assert!(e.message().contains("does not bind"), "{e}");
    }
}
