//! The CPU backend's side of the differential tests: the shared generator and oracle
//! comparison ([`rlx_testkit`]) bound to [`CpuBackend`].

#![allow(dead_code)]

pub mod mats;

use rlx_cpu::CpuBackend;
use rlx_ir::{Graph, TensorData};
use rlx_runtime::{Backend, Device};

#[allow(unused_imports)] // each test binary uses its own subset
pub use rlx_testkit::{
    Rng, build_attention_graph, build_conv_graph, build_random_graph, random_data,
};

/// Run `g` compiled for the CPU and through the oracle; they must agree (or both fail).
pub fn check_against_oracle(g: &Graph, args: &[TensorData]) {
    rlx_testkit::check(g, args, "compiled", |g| CpuBackend.compile(Device::Cpu, g));
}

/// Print compiled and oracle values (for replaying a failing seed).
pub fn print_both(g: &Graph, args: &[TensorData]) {
    let exe = CpuBackend
        .compile(Device::Cpu, g)
        .unwrap_or_else(|e| panic!("compile failed: {e}\n{g}"));
    rlx_testkit::print_both(g, args, exe.as_ref());
}
