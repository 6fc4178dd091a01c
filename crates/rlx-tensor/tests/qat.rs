//! Fake quantization in the graph: `round_to_format` fuses into elementwise kernels,
//! and `Func::train_step_all_at_on_qat_format` (rounding in the graph) trains like the
//! host-closure QAT step with `lowp::quantize_slice`.
#![cfg(feature = "optim")]

use rlx_tensor::lowp::{self, F8E4M3, FloatFormat, Nvf4};
use rlx_tensor::{Adam, Device, Func, LrSchedule, Sgd, Tensor, shape};

#[test]
fn round_to_format_sits_inside_an_elementwise_kernel() {
    let x = Tensor::randn([64, 32], 1);
    let y = (&x * 1.5).fake_quant::<F8E4M3>().exp() + 1.0;
    let e = y.explain();
    let line = e
        .lines()
        .find(|l| l.contains("round_to_format"))
        .unwrap_or_else(|| panic!("no kernel fuses round_to_format:\n{e}"));
    assert!(line.contains("elementwise"), "{e}");
    for op in ["mul", "exp", "add"] {
        assert!(
            line.contains(op),
            "`{op}` is not fused with the rounding:\n{e}"
        );
    }
    assert!(e.contains("1 kernel(s)"), "{e}");
    // And the fused result is the rounding's.
    let xs = x.to_vec();
    let want: Vec<f32> = xs
        .iter()
        .map(|&v| F8E4M3::quantize(v * 1.5).exp() + 1.0)
        .collect();
    let got = y.to_vec();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 2e-6 * w.abs(), "{g} vs {w}");
    }
}

#[test]
fn round_to_format_gradient_is_straight_through() {
    let f = Func::new("ste", |s| {
        let w = s.param("w", shape![3]);
        (w.fake_quant::<Nvf4>() * 2.0).sum_all()
    })
    .with_param("w", vec![0.3, 1.2, 5.1]);
    let g = f.grad(&["w"]);
    assert_eq!(g.run(&[])[0], vec![2.0, 2.0, 2.0]);
}

/// A two-layer MLP with a squared-error loss on a fixed batch.
fn mlp() -> Func {
    Func::new("mlp", |s| {
        let x = s.input("x", shape![8, 4]);
        let y = s.input("y", shape![8, 2]);
        let w1 = s.param("w1", shape![4, 16]);
        let b1 = s.param("b1", shape![16]);
        let w2 = s.param("w2", shape![16, 2]);
        let h = (x.matmul(&w1) + &b1).tanh();
        let d = h.matmul(&w2) - &y;
        (&d * &d).mean_all()
    })
    .init_randn(3, 0.5)
}

fn batch() -> (Vec<f32>, Vec<f32>) {
    let x: Vec<f32> = (0..32).map(|i| ((i * 7 % 11) as f32 - 5.0) / 5.0).collect();
    let y: Vec<f32> = (0..16).map(|i| ((i * 3 % 5) as f32 - 2.0) / 2.0).collect();
    (x, y)
}

#[test]
fn in_graph_qat_matches_the_host_quantizer_step_for_step() {
    let (x, y) = (batch().0, batch().1);
    let inputs: [(&str, &[f32]); 2] = [("x", &x), ("y", &y)];
    let sched = LrSchedule::Constant(0.05);
    for (e, m, max) in [(4, 3, 448.0), (2, 1, 6.0), (8, 7, 3.3895314e38)] {
        let (mut a, mut b) = (mlp(), mlp());
        let (mut oa, mut ob) = (Adam::new(0.05), Adam::new(0.05));
        for step in 0..6 {
            let (na, la) = a.train_step_all_at_on_qat_format(
                Device::Cpu,
                &mut oa,
                &sched,
                step,
                1.0,
                e,
                m,
                max,
                &inputs,
            );
            let (nb, lb) = b.train_step_all_at_on_qat(
                Device::Cpu,
                &mut ob,
                &sched,
                step,
                1.0,
                |p| lowp::quantize_slice(p, e, m, max),
                &inputs,
            );
            let tol = 1e-5 * (1.0 + lb[0].abs());
            assert!(
                (la[0] - lb[0]).abs() <= tol,
                "({e},{m}) step {step}: loss {} vs {}",
                la[0],
                lb[0]
            );
            for name in na.param_names() {
                let (pa, pb) = (
                    na.param_binding(&name).unwrap(),
                    nb.param_binding(&name).unwrap(),
                );
                for (u, v) in pa.iter().zip(pb) {
                    assert!(
                        (u - v).abs() <= 1e-5 * (1.0 + v.abs()),
                        "({e},{m}) step {step} {name}: {u} vs {v}"
                    );
                }
            }
            (a, b) = (na, nb);
        }
    }
}

#[test]
fn forward_sees_rounded_params_and_updates_reach_the_f32_masters() {
    let (x, y) = (batch().0, batch().1);
    let inputs: [(&str, &[f32]); 2] = [("x", &x), ("y", &y)];
    let f = mlp();
    // The loss of the QAT step is the plain loss at the rounded params.
    let mut rounded = f.clone();
    for name in f.param_names() {
        let mut p = f.param_binding(&name).unwrap().to_vec();
        lowp::quantize_slice(&mut p, 2, 1, 6.0);
        rounded = rounded.with_param(name, p);
    }
    let want = rounded.run(&inputs)[0][0];
    let mut opt = Sgd::new(1e-3);
    let (g, loss) = f.train_step_all_at_on_qat_format(
        Device::Cpu,
        &mut opt,
        &LrSchedule::Constant(1e-3),
        0,
        0.0,
        2,
        1,
        6.0,
        &inputs,
    );
    assert!(
        (loss[0] - want).abs() <= 1e-6 * want.abs(),
        "{} vs {want}",
        loss[0]
    );
    // A small step moves the masters off the nvf4 grid (they are not re-rounded).
    let w = g.param_binding("w1").unwrap();
    let off_grid = w.iter().filter(|&&v| Nvf4::quantize(v) != v).count();
    assert!(
        off_grid > w.len() / 2,
        "{off_grid}/{} masters off the grid",
        w.len()
    );
    let moved = w
        .iter()
        .zip(f.param_binding("w1").unwrap())
        .filter(|(a, b)| a != b)
        .count();
    assert!(moved > 0);
}

#[test]
fn the_rewritten_graph_is_built_once_per_format() {
    let (x, y) = (batch().0, batch().1);
    let inputs: [(&str, &[f32]); 2] = [("x", &x), ("y", &y)];
    let sched = LrSchedule::Constant(0.01);
    let mut f = mlp();
    let mut opt = Sgd::new(0.01);
    // Warm up (compiles), then further steps must be cache hits.
    (f, _) = f.train_step_all_at_on_qat_format(
        Device::Cpu,
        &mut opt,
        &sched,
        0,
        0.0,
        4,
        3,
        448.0,
        &inputs,
    );
    let (_, before) = rlx_tensor::cache_stats();
    for step in 1..4 {
        (f, _) = f.train_step_all_at_on_qat_format(
            Device::Cpu,
            &mut opt,
            &sched,
            step,
            0.0,
            4,
            3,
            448.0,
            &inputs,
        );
    }
    let (_, after) = rlx_tensor::cache_stats();
    assert_eq!(
        after, before,
        "later steps recompiled: {before} → {after} cache misses"
    );
}
