//! f16/bf16 attention backward of real gradient graphs on the adapter. Reverse mode gives
//! the fused `Op::AttentionVjp`; this backend does not keep it whole, so `decompose`
//! lowers it to batched matmuls, the masked softmax, the softmax Jacobian's row sums and
//! elementwise kernels, computed in f32 for f16/bf16
//! (`rlx_compile::decompose::ATTENTION_VJP_IN_F32` in `rlx_wgpu::compile_options`):
//! every kernel on the adapter, each gradient rounded to the dtype once.

use super::support;
use rlx_ir::{BinaryOp, DType, Graph, MaskKind, Op, ReduceOp, Shape, TensorData};
use rlx_runtime::{Device, Executable};
use rlx_testkit::{Rng, attention_grad_errors, op, random_data};

/// `sum(attention(q, k, v) · w)` over `[2, s, h, d]` operands (`hk` kv heads) of `dt`,
/// differentiated for q, k and v: the gradient graph and its arguments (q, k, v, w; w
/// the output's cotangent), all random in ±2.
fn backward_graph(
    dt: DType,
    mask: MaskKind,
    (h, hk): (usize, usize),
    s: usize,
    d: usize,
) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new(format!("attn_{dt}_{mask:?}_{s}_{d}").replace(['(', ')'], "_"));
    let mut rng = Rng::new((s * 131 + d) as u64);
    let mut ins = Vec::new();
    let mut args = Vec::new();
    for (name, heads) in [("q", h), ("k", hk), ("v", hk), ("w", h)] {
        let shape = Shape::new(&[2, s, heads, d], dt);
        args.push(random_data(&mut rng, &shape));
        ins.push(g.input(name, shape));
    }
    let attention = Op::Attention {
        num_heads: h,
        head_dim: d,
        v_head_dim: None,
        mask_kind: mask,
        score_scale: None,
        attn_logit_softcap: None,
    };
    let a = op(&mut g, attention, ins[..3].to_vec());
    let aw = op(&mut g, Op::Binary(BinaryOp::Mul), vec![a, ins[3]]);
    let all = Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![0, 1, 2, 3],
        keep_dim: false,
    };
    let loss = op(&mut g, all, vec![aw]);
    g.set_outputs(vec![loss]);
    let mut gg = rlx_compile::autodiff::grad_graph(&g, &ins[..3]).unwrap();
    gg.name = format!("{}_grad", g.name);
    assert!(
        gg.nodes()
            .iter()
            .any(|n| matches!(n.op, Op::AttentionVjp { .. })),
        "{}: reverse mode gives the fused attention backward",
        gg.name
    );
    (gg, args)
}

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
        for (mask, heads, s, d) in [
            (MaskKind::Causal, (2, 1), 21, 32),
            (MaskKind::Causal, (2, 2), 40, 64),
            (MaskKind::SlidingWindow(5), (2, 1), 17, 16),
        ] {
            let (g, args) = backward_graph(dt, mask, heads, s, d);
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
