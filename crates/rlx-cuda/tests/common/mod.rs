//! The CUDA backend's side of the differential tests: the targeted [`cases`] shared by
//! the emulator and GPU tests, and the oracle comparison ([`rlx_testkit`]) labelled
//! for CUDA. The random graphs and the generator come from [`rlx_testkit`] directly.

#![allow(dead_code)]

pub mod attention_backward;
pub mod cases;
pub mod shuffle;
pub mod split;
pub mod tensor_cores;

use rlx_ir::{Graph, TensorData};
use rlx_runtime::{Executable, RuntimeResult};
use std::sync::Arc;

/// Compile `g` with `compile`, run it, and require agreement with the oracle (or that
/// both fail).
pub fn check(
    g: &Graph,
    args: &[TensorData],
    compile: &dyn Fn(&Graph) -> RuntimeResult<Arc<dyn Executable>>,
) {
    register_cpu();
    rlx_testkit::check(g, args, "cuda", compile);
}

/// Register the CPU backend, so host-run ops take the shared host fallback's CPU path
/// (the one users get) rather than the oracle.
pub fn register_cpu() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| rlx_runtime::register_backend(Arc::new(rlx_cpu::CpuBackend)));
}
