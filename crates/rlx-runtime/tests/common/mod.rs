//! A CPU backend whose executables return nothing: the cache and argument-check tests
//! exercise the runtime without running anything.

use rlx_compile::{CompileOptions, Program};
use rlx_ir::{TensorData, TensorView};
use rlx_runtime::{Backend, Device, Executable, RuntimeResult};
use std::sync::Arc;

/// Registers as the CPU backend; loads every program as [`NullExe`].
pub struct NullBackend;

/// A program that returns no outputs.
pub struct NullExe;

impl Executable for NullExe {
    fn run(&self, _: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        Ok(Vec::new())
    }
    fn explain(&self) -> String {
        "null".into()
    }
}

impl Backend for NullBackend {
    fn name(&self) -> &'static str {
        "test-null-cpu"
    }
    fn devices(&self) -> &[Device] {
        &[Device::Cpu]
    }
    fn is_available(&self, device: Device) -> bool {
        device == Device::Cpu
    }
    fn compile_options(&self, _: Device) -> CompileOptions {
        CompileOptions::default()
    }
    fn load(&self, _: Device, _: Program) -> RuntimeResult<Arc<dyn Executable>> {
        Ok(Arc::new(NullExe))
    }
}
