//! f16/bf16 attention backward of real gradient graphs on the adapter. Reverse mode gives
//! the fused `Op::AttentionVjp`; this backend does not keep it whole, so `decompose`
//! lowers it to batched matmuls, the masked softmax, the softmax Jacobian's row sums and
//! elementwise kernels, computed in f32 for f16/bf16
//! (`rlx_compile::decompose::ATTENTION_VJP_IN_F32` in `rlx_wgpu::compile_options`):
//! every kernel on the adapter, each gradient rounded to the dtype once.

use super::support;
use rlx_ir::{BinaryOp, DType, Graph, MaskKind, Op, ReduceOp, Shape, TensorData, interp};
use rlx_runtime::{Device, Executable};
use rlx_testkit::{Rng, op, random_data};

/// The documented bound of the f32 lowering against the oracle (f64, rounded once): one
/// unit in the last place of the dtype at the oracle's value (the final rounding, half
/// an ulp, plus the f32 work's error pushing a value across a rounding boundary) plus
/// 2⁻¹⁴ of the gradient's largest magnitude (f32 sums of up to Sk products whose terms
/// cancel in `ds = p ⊙ (dp − Σ dp⊙p)`). The bound rlx-cuda's emulated test uses.
fn tolerance(dt: DType, w: f64, scale: f64) -> f64 {
    let ulp = if dt == DType::F16 {
        2f64.powi(-10)
    } else {
        2f64.powi(-7)
    };
    ulp * w.abs() + 2f64.powi(-14) * scale
}

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
/// relative to [`tolerance`] (≤ 1 passes), and the largest absolute error.
fn errors(g: &Graph, args: &[TensorData], exe: &dyn Executable) -> (f64, f64) {
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
        assert_eq!(x.dtype, dt, "{}: a gradient's dtype", g.name);
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
/// real gradient graphs runs on the adapter (no kernel on the host but grouped-query
/// attention's head copies) and matches the
/// oracle within [`tolerance`]; the CPU backend's lowering in the dtype itself is
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
