//! The CUDA backend's side of the differential tests: the targeted [`cases`] shared by
//! the emulator and GPU tests, and the oracle comparison ([`rlx_testkit`]) labelled
//! for CUDA. The random graphs and the generator come from [`rlx_testkit`] directly.

#![allow(dead_code)]

pub mod cases;

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
    rlx_testkit::check(g, args, "cuda", compile);
}
