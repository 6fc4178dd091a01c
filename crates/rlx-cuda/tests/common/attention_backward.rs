//! f16/bf16 attention backward of real programs. Reverse mode gives the fused
//! `Op::AttentionVjp`; this backend does not keep it whole, so `decompose` lowers it to
//! batched matmuls (cuBLAS), the masked softmax (a row kernel), the softmax Jacobian's
//! row sums (a reduction) and elementwise kernels, computed in f32 for f16/bf16
//! (`rlx_compile::decompose::ATTENTION_VJP_IN_F32`): every kernel on the device, each
//! gradient rounded to the dtype once.

use super::attention_graph::{attention_graph, backward_graph};
use super::cases::Target;
use rlx_ir::{DType, Graph, MaskKind, TensorData, interp};
use rlx_runtime::{Backend, Device, Executable};
use std::sync::Arc;

/// The documented bound of the f32 lowering against the oracle (f64, rounded once): one
/// unit in the last place of the dtype at the oracle's value (the final rounding, half
/// an ulp, plus the f32 work's error pushing a value across a rounding boundary) plus
/// 2⁻¹⁴ of the gradient's largest magnitude (f32 sums of up to Sk products whose terms
/// cancel in `ds = p ⊙ (dp − Σ dp⊙p)`).
pub fn tolerance(dt: DType, w: f64, scale: f64) -> f64 {
    let ulp = if dt == DType::F16 {
        2f64.powi(-10)
    } else {
        2f64.powi(-7)
    };
    ulp * w.abs() + 2f64.powi(-14) * scale
}

/// The largest error of `exe` against the oracle over the gradients of `g`, relative to
/// [`tolerance`] (≤ 1 passes), and the largest absolute error.
fn errors(g: &Graph, args: &[TensorData], exe: &Arc<dyn Executable>) -> (f64, f64) {
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = exe
        .run(&views)
        .unwrap_or_else(|e| panic!("{}: {e}", g.name));
    let named: Vec<(&str, TensorData)> = ["q", "k", "v", "w"]
        .into_iter()
        .zip(args.iter().cloned())
        .collect();
    let want = interp::run(g, &named).unwrap();
    assert_eq!(got.len(), 3, "{}: three gradients", g.name);
    let (mut rel, mut abs) = (0.0f64, 0.0f64);
    for (x, w) in got.iter().zip(&want) {
        let dt = w.dtype;
        let (x, w) = (x.to_f64_vec(), w.to_f64_vec());
        assert_eq!(x.len(), w.len(), "{}", g.name);
        let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(
            scale > 0.1,
            "{}: a gradient of all zeros proves nothing",
            g.name
        );
        for (a, b) in x.iter().zip(&w) {
            assert!(a.is_finite(), "{}: a non-finite gradient", g.name);
            rel = rel.max((a - b).abs() / tolerance(dt, *b, scale));
            abs = abs.max((a - b).abs());
        }
    }
    (rel, abs)
}

/// f16/bf16 causal (and grouped-query, sliding-window) attention backward compiled from
/// real gradient graphs runs on the device (the plan names no host step) and matches the
/// oracle within [`tolerance`]; the same graphs with the backward in the dtype itself
/// (the CPU's lowering, when `cpu` is given) are reported for comparison.
pub fn f16_and_bf16_attention_backward_runs_on_the_device(t: &Target, cpu: bool) {
    for dt in [DType::F16, DType::BF16] {
        for (mask, heads, s, d) in [
            (MaskKind::Causal, (2, 1), 21, 32),
            (MaskKind::Causal, (2, 2), 40, 64),
            (MaskKind::SlidingWindow(5), (2, 1), 17, 16),
        ] {
            let (g, args) = backward_graph(dt, mask, heads, s, d);
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
        let (g, args) = attention_graph(dt, MaskKind::Causal, true, (2, 1), 9, d);
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
