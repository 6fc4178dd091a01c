//! f16/bf16 attention backward of real gradient graphs on the adapter. Reverse mode gives
//! the fused `Op::AttentionVjp`; this backend does not keep it whole, so `decompose`
//! lowers it to batched matmuls, the masked softmax, the softmax Jacobian's row sums and
//! elementwise kernels, computed in f32 for f16/bf16
//! (`rlx_compile::decompose::ATTENTION_VJP_IN_F32` in `rlx_wgpu::compile_options`):
//! every kernel on the adapter, each gradient rounded to the dtype once.

use super::support;
use rlx_ir::{DType, Graph, TensorData};
use rlx_runtime::{Device, Executable};
use rlx_testkit::{ATTENTION_BACKWARD_CASES, attention_backward_case, attention_grad_errors};

/// The largest error of `exe` against the oracle over the three gradients of `g`,
/// relative to the documented bound ([`rlx_testkit::attention_grad_tolerance`]; ≤ 1 passes), and the
/// largest absolute error.
fn errors(g: &Graph, args: &[TensorData], exe: &dyn Executable) -> (f64, f64) {
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = exe
        .run(&views)
        .unwrap_or_else(|e| panic!("{}: {e}", g.name));
    attention_grad_errors(g, args, &got)
}

/// f16/bf16 causal (and grouped-query, sliding-window) attention backward compiled from
/// real gradient graphs runs on the adapter (no kernel on the host but grouped-query
/// attention's head copies) and matches the
/// oracle within [`rlx_testkit::attention_grad_tolerance`]; the CPU backend's lowering in the dtype itself is
/// printed for comparison.
#[test]
fn f16_and_bf16_attention_backward_runs_on_the_gpu_in_f32() {
    if !support::gpu_or_skip("attention backward") {
        return;
    }
    support::register_cpu();
    for dt in [DType::F16, DType::BF16] {
        for (mask, heads, s, d) in ATTENTION_BACKWARD_CASES {
            let (g, args) = attention_backward_case(dt, mask, heads, s, d);
            let (exe, placement) = rlx_wgpu::compile_with_placement(Device::Gpu, &g)
                .unwrap_or_else(|e| panic!("{}: {e}", g.name));
            let plan = exe.explain();
            // Grouped-query attention repeats k and v's heads with a gather over an i64
            // index constant, which has no WGSL type: those copies run on the host (and
            // only those); every arithmetic kernel runs on the adapter.
            let host: Vec<&str> = plan
                .lines()
                .filter(|l| l.contains("CPU fallback ("))
                .collect();
            let gqa_copies = heads.0 != heads.1
                && host
                    .iter()
                    .all(|l| l.contains("(opaque(gather))") && l.contains("dtype i64"));
            assert!(
                host.is_empty() || gqa_copies,
                "{}: a kernel ran on the host\n{plan}",
                g.name
            );
            assert_eq!(
                placement.iter().filter(|&&p| !p).count(),
                host.len(),
                "{}: explain names every host kernel\n{plan}",
                g.name
            );
            let (rel, abs) = errors(&g, &args, exe.as_ref());
            let cpu = rlx_runtime::Backend::compile(&rlx_cpu::CpuBackend, Device::Cpu, &g)
                .unwrap_or_else(|e| panic!("{}: {e}", g.name));
            let (r, a) = errors(&g, &args, cpu.as_ref());
            println!(
                "{}: {rel:.2} of the bound, abs {abs:.3e}; in {dt} (CPU) {r:.2}, abs {a:.3e}",
                g.name
            );
            assert!(rel <= 1.0, "{}: {rel} of the tolerance\n{plan}", g.name);
        }
    }
}
