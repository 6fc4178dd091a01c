//! bf16 and f16 attention gradients on the CPU: `decompose` rewrites a half-precision
//! `attention_vjp` as casts around the fused f32 backward (`ATTENTION_VJP_WHOLE_IN_F32`,
//! in the CPU's options), so dq, dk and dv are computed in f32 from exact copies of the
//! operands and rounded once, like the oracle's (f64 work, one rounding). Before it the
//! op was lowered to matmuls, a softmax and reductions in the dtype itself, each step
//! rounded; the tests measure both against the oracle.

use super::common::{Rng, random_data};
use super::lowp::{Lowp, Tally, compare};
use rlx_compile::autodiff::grad_graph;
use rlx_compile::decompose::ATTENTION_VJP_WHOLE_IN_F32;
use rlx_compile::program::KernelKind;
use rlx_compile::{CompileOptions, compile};
use rlx_cpu::{compile_options, compile_with};
use rlx_ir::{BinaryOp, DType, Graph, MaskKind, NodeId, Op, ReduceOp, Shape, TensorData};

/// The problem's inputs (`Lowp::inputs`) and then the output weights `w` of `c`, all in
/// `c.dt`, with random data pushed to `args`.
fn operands(c: Lowp, g: &mut Graph, rng: &mut Rng, args: &mut Vec<TensorData>) -> Vec<NodeId> {
    let mut ins = c.inputs(g, rng, args);
    let s = Shape::new(&[c.b, c.s, c.h, c.d], c.dt);
    args.push(random_data(rng, &s));
    ins.push(g.input("w", s));
    ins
}

/// The gradient graph of `loss = Σ w ⊙ attention(q, k, v)` over q, k, v (its outputs are
/// dq, dk, dv, narrowed out of one `attention_vjp` in `c.dt`), and its inputs.
fn grad_of_attention(c: Lowp, seed: u64) -> (Graph, Vec<TensorData>) {
    let mut rng = Rng::new(seed);
    let mut g = Graph::new("attention_grad_lowp");
    let mut args = Vec::new();
    let mut ins = operands(c, &mut g, &mut rng, &mut args);
    let w = ins.pop().expect("the weights come last");
    let a = g.add_op(c.op(false), ins.clone()).unwrap();
    let aw = g.add_op(Op::Binary(BinaryOp::Mul), vec![a, w]).unwrap();
    let sum = Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![0, 1, 2, 3],
        keep_dim: false,
    };
    let loss = g.add_op(sum, vec![aw]).unwrap();
    g.set_outputs(vec![loss]);
    (grad_graph(&g, &ins[..3]).unwrap(), args)
}

/// The CPU's options without `ATTENTION_VJP_WHOLE_IN_F32`: the lowering in the dtype.
fn lowered_in_dtype() -> CompileOptions {
    let mut o = compile_options();
    o.keep_whole.retain(|k| k != ATTENTION_VJP_WHOLE_IN_F32);
    o
}

fn run(g: &Graph, args: &[TensorData], opts: &CompileOptions) -> Vec<TensorData> {
    let exe = compile_with(g, opts).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap()
}

/// The largest `|got − want|` over `want`'s largest magnitude (the gradient's scale).
fn scaled_error(got: &TensorData, want: &TensorData) -> f64 {
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let err = (g.iter().zip(&w)).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    err / scale
}

#[test]
fn bf16_and_f16_attention_gradients_are_within_one_ulp_of_the_oracle_and_beat_the_lowering() {
    let mut report = Vec::new();
    for dt in [DType::BF16, DType::F16] {
        let new = |h, hk, d, mask| Lowp::new(dt, h, hk, d, mask);
        // Grouped-query heads, head dims that are not multiples of 16 (20, 12, 7, 24).
        let cases = [
            new(4, 2, 20, MaskKind::Causal),
            new(4, 1, 12, MaskKind::None),
            new(2, 2, 7, MaskKind::SlidingWindow(9)),
            new(4, 2, 16, MaskKind::Bias),
            new(4, 2, 20, MaskKind::Custom),
            new(2, 1, 24, MaskKind::Custom),
            Lowp {
                softcap: Some(5.0),
                ..new(4, 2, 20, MaskKind::Causal)
            },
            Lowp {
                s: 130,
                ..new(8, 8, 32, MaskKind::Causal)
            },
        ];
        let mut sum = Tally::default();
        let (mut worst_new, mut worst_old) = (0.0f64, 0.0f64);
        for (i, c) in cases.into_iter().enumerate() {
            let (g, args) = grad_of_attention(c, 60 + i as u64);
            let want = rlx_testkit::oracle(&g, &args).unwrap();
            let got = run(&g, &args, &compile_options());
            let old = run(&g, &args, &lowered_in_dtype());
            assert_eq!((got.len(), old.len(), want.len()), (3, 3, 3), "{c:?}");
            for (j, name) in ["dq", "dk", "dv"].iter().enumerate() {
                sum += compare(&got[j], &want[j], &format!("{name} of {c:?}"));
                let (e_new, e_old) = (
                    scaled_error(&got[j], &want[j]),
                    scaled_error(&old[j], &want[j]),
                );
                assert!(
                    e_new <= e_old,
                    "{name} of {c:?}: through f32 {e_new:e} of the scale, lowered {e_old:e}"
                );
                worst_new = worst_new.max(e_new);
                worst_old = worst_old.max(e_old);
            }
        }
        assert!(
            sum.one_ulp * 100 < sum.elements,
            "{dt:?}: {} of {} one ulp off",
            sum.one_ulp,
            sum.elements
        );
        report.push(format!(
            "{dt:?}: {} of {} elements 1 ulp off, {} below the floor differ; worst error \
             over the gradient's scale: through f32 {worst_new:.2e}, lowered in {dt:?} \
             {worst_old:.2e}",
            sum.one_ulp, sum.elements, sum.small_differ
        ));
    }
    eprintln!(
        "attention gradients vs the f64 oracle: {}",
        report.join("; ")
    );
}

/// The compiled gradient program of bf16/f16 attention runs one fused f32 backward kernel
/// and no half-precision matmul; without the entry it is the lowering's matmuls.
#[test]
fn half_attention_gradients_compile_to_one_f32_backward_kernel_and_no_half_matmul() {
    let half_matmuls = |p: &rlx_compile::Program, dt: DType| {
        (p.kernels.iter())
            .filter(|k| matches!(&k.kind, KernelKind::Contraction { dtype, .. } if *dtype == dt))
            .count()
    };
    for dt in [DType::BF16, DType::F16] {
        for mask in [MaskKind::Causal, MaskKind::Bias, MaskKind::Custom] {
            let (g, _) = grad_of_attention(Lowp::new(dt, 4, 2, 20, mask), 1);
            let p = compile(&g, &compile_options()).unwrap();
            let fused: Vec<(String, DType)> = (p.kernels.iter())
                .filter_map(|k| match &k.kind {
                    KernelKind::Attention { op, dtype, .. } => Some((op.name(), *dtype)),
                    _ => None,
                })
                .collect();
            assert_eq!(
                fused,
                [("attention_vjp".to_string(), DType::F32)],
                "{dt:?} {mask:?}"
            );
            let opaque = (p.kernels.iter())
                .filter(|k| matches!(k.kind, KernelKind::Opaque { .. }))
                .count();
            assert_eq!(opaque, 0, "{dt:?} {mask:?}");
            assert_eq!(half_matmuls(&p, dt), 0, "{dt:?} {mask:?}");
            let old = compile(&g, &lowered_in_dtype()).unwrap();
            assert!(half_matmuls(&old, dt) >= 4, "{dt:?} {mask:?}: the lowering");
        }
    }
}

/// A bf16 `attention_vjp` at a W11-like size (B=4, S=256, H=8, D=32, causal) lowered in
/// bf16 (without `ATTENTION_VJP_WHOLE_IN_F32`) and through the fused f32 kernel, in one
/// process: `RLX_NUM_THREADS=1 cargo test --release -p rlx-cpu --test attention_fast --
/// --ignored --nocapture time_bf16_attention_vjp`.
#[test]
#[ignore]
fn time_bf16_attention_vjp_lowered_against_f32() {
    let c = Lowp {
        b: 4,
        s: 256,
        ..Lowp::new(DType::BF16, 8, 8, 32, MaskKind::Causal)
    };
    let mut rng = Rng::new(1);
    let mut g = Graph::new("attention_vjp_bf16");
    let mut args = Vec::new();
    let ins = operands(c, &mut g, &mut rng, &mut args);
    let y = g.add_op(c.op(true), ins).unwrap();
    g.set_outputs(vec![y]);
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let fast = compile_with(&g, &compile_options()).unwrap();
    let slow = compile_with(&g, &lowered_in_dtype()).unwrap();
    let time = |exe: &dyn rlx_runtime::Executable, n: usize| {
        let mut t = Vec::new();
        for _ in 0..n {
            let s = std::time::Instant::now();
            std::hint::black_box(exe.run(&views).unwrap());
            t.push(s.elapsed().as_secs_f64() * 1e3);
        }
        t
    };
    time(fast.as_ref(), 2);
    time(slow.as_ref(), 2);
    // Alternate the two so both see the same machine load.
    let (mut f, mut s) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        f.extend(time(fast.as_ref(), 10));
        s.extend(time(slow.as_ref(), 10));
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[0], v[v.len() / 2])
    };
    let ((fmin, fmed), (smin, smed)) = (stats(&mut f), stats(&mut s));
    eprintln!(
        "bf16 attention_vjp B=4 S=256 H=8 D=32 causal, {} threads: lowered in bf16 min \
         {smin:.2} ms median {smed:.2} ms; fused f32 kernel min {fmin:.2} ms median \
         {fmed:.2} ms ({:.2}x by min)",
        rlx_cpu::num_threads(),
        smin / fmin
    );
}
