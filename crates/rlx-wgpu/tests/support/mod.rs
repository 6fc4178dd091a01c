//! Shared helpers of the wgpu tests: the adapter probe (tests skip with a printed
//! reason where no adapter exists) and the comparison against the oracle with the
//! CPU differential suite's per-dtype tolerances.

#![allow(dead_code)]

use rlx_ir::{Graph, Op, TensorData, interp};
use rlx_runtime::{Backend, Device, Executable, arg_order};
use rlx_wgpu::WgpuBackend;
use std::sync::Arc;

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

/// Names of the graph's arguments in argument order.
pub fn arg_names(g: &Graph) -> Vec<String> {
    arg_order(g)
        .into_iter()
        .map(|id| match &g.node(id).op {
            Op::Input { name } | Op::Param { name } => name.clone(),
            _ => unreachable!(),
        })
        .collect()
}

/// Relative tolerance per dtype (the CPU differential suite's values).
pub fn tolerance(dt: rlx_ir::DType) -> f64 {
    use rlx_ir::DType;
    match dt {
        DType::F64 => 1e-9,
        DType::F32 => 2e-4,
        DType::F16 => 2e-2,
        DType::BF16 => 8e-2,
        _ => 0.0,
    }
}

/// Compile `g` for the GPU device, run it and compare with the oracle. Returns the
/// per-kernel placement (`true` = ran on the GPU).
pub fn check(g: &Graph, args: &[TensorData]) -> Vec<bool> {
    let names = arg_names(g);
    let named: Vec<(&str, &TensorData)> = names.iter().map(|s| s.as_str()).zip(args).collect();
    let want = interp::run_refs(g, &named);
    let (exe, placement) = rlx_wgpu::compile_with_placement(Device::Gpu, g)
        .unwrap_or_else(|e| panic!("compile failed: {e}\n{g}"));
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = exe.run(&views);
    compare(g, &exe, want, got);
    let bad = unexpected_fallbacks(&exe.explain());
    assert!(
        bad.is_empty(),
        "kernels fell back to the host for unplanned reasons: {bad:?}\n{g}\n{}",
        exe.explain()
    );
    placement
}

/// Fallback reasons that are by design: data without a WGSL type, ops without a
/// kernel yet, and cases whose errors the CPU reports.
const PLANNED: [&str; 9] = [
    "has no WGSL compute type",
    "has no WGSL kernel yet",
    "runs on the CPU (its error cases are reported there)",
    "integer mean runs on the CPU",
    "needs exact f64 values",
    "of integers is an error the CPU reports",
    "over an empty axis",
    "round_to_format runs on the CPU",
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

/// Compare results with the oracle's (both may fail).
pub fn compare(
    g: &Graph,
    exe: &Arc<dyn Executable>,
    want: rlx_ir::IrResult<Vec<TensorData>>,
    got: rlx_runtime::RuntimeResult<Vec<TensorData>>,
) {
    let (want, got) = match (want, got) {
        (Ok(w), Ok(g2)) => (w, g2),
        (Err(_), Err(_)) => return,
        (w, g2) => panic!(
            "oracle {:?} but wgpu {:?}\n{g}\n{}",
            w.map(|_| "ok"),
            g2.map(|_| "ok"),
            exe.explain()
        ),
    };
    let graph_tol = g
        .nodes()
        .iter()
        .filter(|n| n.shape.dtype().is_float())
        .map(|n| tolerance(n.shape.dtype()))
        .fold(0.0f64, f64::max);
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a.dims, b.dims, "output {k} dims\n{g}");
        assert_eq!(a.dtype, b.dtype, "output {k} dtype\n{g}");
        let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
        if !b.dtype.is_float() && graph_tol > 0.0 {
            // Integers derived from float math may flip where a float lands on a
            // boundary: all but a few elements must agree exactly.
            let bad = x
                .iter()
                .zip(&y)
                .filter(|(p, q)| p != q && !(p.is_nan() && q.is_nan()))
                .count();
            assert!(
                bad * 20 <= x.len().max(1),
                "output {k}: {bad} of {} elements differ\n{g}\n{}",
                x.len(),
                exe.explain()
            );
            continue;
        }
        let tol = tolerance(b.dtype).max(graph_tol);
        let scale = y
            .iter()
            .filter(|v| v.is_finite())
            .fold(1.0f64, |m, v| m.max(v.abs()));
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            let ok = p == q
                || (p.is_nan() && q.is_nan())
                || (p - q).abs() <= tol * (q.abs() + scale)
                || (tol > 0.0 && (p - q).abs() <= tol * 1e-3);
            assert!(
                ok,
                "output {k} element {i}: wgpu {p} vs oracle {q} (tol {tol})\n{g}\n{}",
                exe.explain()
            );
        }
    }
}
