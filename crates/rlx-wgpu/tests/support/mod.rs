//! Shared helpers of the wgpu tests: the adapter probe (tests skip with a printed
//! reason where no adapter exists) and the comparison against the oracle
//! ([`rlx_testkit`]) that also rejects unplanned host fallbacks.

#![allow(dead_code)]

use rlx_ir::{Graph, TensorData};
use rlx_runtime::{Backend, Device};
use rlx_wgpu::WgpuBackend;

/// Whether a wgpu adapter is present; prints why not (once per test) when absent.
pub fn gpu_or_skip(test: &str) -> bool {
    if WgpuBackend.is_available(Device::Gpu) {
        return true;
    }
    let why = rlx_wgpu::adapter_info(Device::Gpu)
        .err()
        .unwrap_or_default();
    // Straight to the stderr handle: the test harness captures `eprintln!`, and the
    // reason must show in a normal `cargo test` run.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipping {test}: no wgpu adapter ({why}); `apt-get install -y libvulkan1 mesa-vulkan-drivers` gives a software Vulkan driver"
    );
    false
}

/// Compile `g` for the GPU device, run it and compare with the oracle. Returns the
/// per-kernel placement (`true` = ran on the GPU).
pub fn check(g: &Graph, args: &[TensorData]) -> Vec<bool> {
    register_cpu();
    let (exe, placement) = rlx_wgpu::compile_with_placement(Device::Gpu, g)
        .unwrap_or_else(|e| panic!("compile failed: {e}\n{g}"));
    rlx_testkit::check_executable(g, args, "wgpu", exe.as_ref());
    let bad = unexpected_fallbacks(&exe.explain());
    assert!(
        bad.is_empty(),
        "kernels fell back to the host for unplanned reasons: {bad:?}\n{g}\n{}",
        exe.explain()
    );
    // The shared host fallback runs on the registered CPU backend, not the oracle.
    let explain = exe.explain();
    for l in explain.lines().filter(|l| l.contains("CPU fallback (")) {
        assert!(
            l.ends_with(", run by cpu") || g.nodes().iter().any(|n| !n.shape.is_static()),
            "a host kernel not run by the CPU backend: {l}\n{explain}"
        );
    }
    placement
}

/// Register the CPU backend, so host kernels take the shared host fallback's CPU path
/// (the one users get) rather than the oracle.
pub fn register_cpu() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| rlx_runtime::register_backend(std::sync::Arc::new(rlx_cpu::CpuBackend)));
}

/// Fallback reasons that are by design: data without a WGSL type (f64, i64 and u32
/// values, named by the loop IR's WGSL renderer or by the hand-written kernels), ops
/// without a kernel yet (or not lowered to the loop IR yet), and cases whose errors the
/// CPU reports (integer division and shifts: WGSL has no error channel here).
const PLANNED: [&str; 7] = [
    "has no WGSL compute type",
    "which WGSL does not have",
    "has no WGSL kernel yet",
    "is not lowered to the loop IR yet",
    "has no error channel",
    "over an empty axis",
    "(the CPU reports it)",
];

/// The fallback reasons in `explain` output that are not planned ones.
pub fn unexpected_fallbacks(explain: &str) -> Vec<String> {
    explain
        .lines()
        .filter_map(|l| l.split_once("CPU fallback (").map(|(_, r)| r.to_string()))
        .filter(|r| !PLANNED.iter().any(|p| r.contains(p)))
        .collect()
}
