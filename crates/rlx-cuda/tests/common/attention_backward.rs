//! f16/bf16 attention backward of real programs. Reverse mode gives the fused
//! `Op::AttentionVjp`; this backend does not keep it whole, so `decompose` lowers it to
//! batched matmuls (cuBLAS), the masked softmax (a row kernel), the softmax Jacobian's
//! row sums (a reduction) and elementwise kernels, computed in f32 for f16/bf16
//! (`rlx_compile::decompose::ATTENTION_VJP_IN_F32`): every kernel on the device, each
//! gradient rounded to the dtype once.

use super::cases::Target;
use rlx_ir::{DType, Graph, MaskKind, TensorData, interp};
use rlx_runtime::{Backend, Device, Executable};
use rlx_testkit::{
    ATTENTION_BACKWARD_CASES, attention_backward_case, attention_case, attention_grad_errors,
};
use std::sync::Arc;

/// The largest error of `exe` against the oracle over the gradients of `g`, relative to
/// the documented bound ([`rlx_testkit::attention_grad_tolerance`]; ≤ 1 passes), and the largest
/// absolute error.
fn errors(g: &Graph, args: &[TensorData], exe: &Arc<dyn Executable>) -> (f64, f64) {
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = exe
        .run(&views)
        .unwrap_or_else(|e| panic!("{}: {e}", g.name));
    attention_grad_errors(g, args, &got)
}

/// f16/bf16 causal (and grouped-query, sliding-window) attention backward compiled from
/// real gradient graphs runs on the device (the plan names no host step) and matches the
/// oracle within [`rlx_testkit::attention_grad_tolerance`]; the same graphs with the backward in the dtype itself
/// (the CPU's lowering, when `cpu` is given) are reported for comparison.
pub fn f16_and_bf16_attention_backward_runs_on_the_device(t: &Target, cpu: bool) {
    for dt in [DType::F16, DType::BF16] {
        for (mask, heads, s, d) in ATTENTION_BACKWARD_CASES {
            let (g, args) = attention_backward_case(dt, mask, heads, s, d);
            let exe = t.compile(&g).unwrap_or_else(|e| panic!("{}: {e}", g.name));
            let plan = exe.explain();
            assert!(
                !plan.contains("host("),
                "{}: ran on the host\n{plan}",
                g.name
            );
            let (rel, abs) = errors(&g, &args, &exe);
            let narrow = if cpu {
                let exe = rlx_cpu::CpuBackend.compile(Device::Cpu, &g).unwrap();
                let (r, a) = errors(&g, &args, &exe);
                format!("; in {dt} (CPU) {r:.2} of the bound, abs {a:.3e}")
            } else {
                String::new()
            };
            println!("{}: {rel:.2} of the bound, abs {abs:.3e}{narrow}", g.name);
            assert!(rel <= 1.0, "{}: {rel} of the tolerance\n{plan}", g.name);
        }
    }
}

/// Attention forward with heads wider than the loop IR's default 256: up to
/// `rlx_cuda`'s attention limit (1024) the scalar lowering runs on the device (f16
/// opaque and f32 fused, which was refused before), within the scalar lowering's bound
/// (f32 work rounded once: [`super::tensor_cores::tolerance`]); wider f16 heads run on
/// the host, and the plan says so.
pub fn wide_heads_run_on_the_device_up_to_1024(t: &Target) {
    for (dt, d, host) in [
        (DType::F16, 320, false),
        (DType::F32, 320, false),
        (DType::BF16, 1024, false),
        (DType::F16, 1040, true),
    ] {
        let (g, args) = attention_case(dt, MaskKind::Causal, true, (2, 1), 9, d);
        let exe = t.compile(&g).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        let plan = exe.explain();
        assert_eq!(
            plan.contains("host(attention)"),
            host,
            "{}: on the host expected {host}\n{plan}",
            g.name
        );
        assert!(!plan.contains("[tensor cores"), "{}\n{plan}", g.name);
        let views: Vec<_> = args.iter().map(|a| a.view()).collect();
        let got = exe.run(&views).unwrap()[0].to_f64_vec();
        let named: Vec<(&str, TensorData)> =
            ["q", "k", "v"].into_iter().zip(args.clone()).collect();
        let want = interp::run(&g, &named).unwrap()[0].to_f64_vec();
        for (i, (x, w)) in got.iter().zip(&want).enumerate() {
            let tol = match dt {
                DType::F32 => 1e-5 * (1.0 + w.abs()),
                _ => super::tensor_cores::tolerance(dt, *w),
            };
            assert!(
                (x - w).abs() <= tol,
                "{}: element {i}: device {x}, oracle {w}",
                g.name
            );
        }
    }
}
