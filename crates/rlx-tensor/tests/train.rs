//! Func::train_step and its family, every optimizer on regression and XOR, and checkpoints.
#![cfg(feature = "optim")]

use rlx_tensor::{Adam, AdamW, Device, Func, Lion, LrSchedule, Muon, Optimizer, Sgd, shape};

fn quadratic() -> Func {
    // (w - 3)² summed over two entries
    Func::new("quad", |s| {
        let w = s.param("w", shape![2]);
        let d = &w - 3.0;
        (&d * &d).sum_all()
    })
    .with_param("w", vec![0.0, 1.0])
}

#[test]
fn one_sgd_step_matches_the_hand_computed_update() {
    let mut opt = Sgd::new(0.25);
    let (f, loss) = quadratic().train_step(&mut opt, &["w"], &[]);
    assert_eq!(loss, vec![9.0 + 4.0]);
    // grad = 2(w - 3) = [-6, -4]; w -= 0.25·grad
    assert_eq!(f.param_binding("w"), Some(&[1.5f32, 2.0][..]));
}

#[test]
fn scheduled_steps_use_the_schedule_learning_rate() {
    let schedule = LrSchedule::Step {
        base: 0.5,
        step_size: 1,
        gamma: 0.5,
    };
    let mut opt = Sgd::new(123.0);
    let f = quadratic();
    let (f, _) = f.train_step_at(&mut opt, &schedule, 0, &["w"], &[]); // lr 0.5: w = 0 + 3 = 3, 1 + 2 = 3
    assert_eq!(f.param_binding("w"), Some(&[3.0f32, 3.0][..]));
    let (g, _) = quadratic().train_step_at(&mut opt, &schedule, 1, &["w"], &[]); // lr 0.25
    assert_eq!(g.param_binding("w"), Some(&[1.5f32, 2.0][..]));
}

#[test]
fn clipping_scales_the_global_gradient_norm() {
    let mut opt = Sgd::new(1.0);
    let schedule = LrSchedule::Constant(1.0);
    // grad = [-6, -4], norm √52; clip to 1 → step = grad/√52
    let (f, _) =
        quadratic().train_step_all_at_on_clipped(Device::Cpu, &mut opt, &schedule, 0, 1.0, &[]);
    let n = 52f32.sqrt();
    let w = f.param_binding("w").unwrap();
    assert!(
        (w[0] - 6.0 / n).abs() < 1e-6 && (w[1] - (1.0 + 4.0 / n)).abs() < 1e-6,
        "{w:?}"
    );
    // disabled when max ≤ 0
    let (f, _) =
        quadratic().train_step_all_at_on_clipped(Device::Cpu, &mut opt, &schedule, 0, 0.0, &[]);
    assert_eq!(f.param_binding("w"), Some(&[6.0f32, 5.0][..]));
}

#[test]
fn qat_computes_at_quantized_params_and_updates_the_masters() {
    let f = quadratic().with_param("w", vec![0.1, 1.1]);
    let mut opt = Sgd::new(0.5);
    let schedule = LrSchedule::Constant(0.5);
    // quantizer floors to integers: forward at [0, 1] → grad [-6, -4]
    let (g, loss) = f.train_step_all_at_on_qat(
        Device::Cpu,
        &mut opt,
        &schedule,
        0,
        0.0,
        |p| p.iter_mut().for_each(|v| *v = v.floor()),
        &[],
    );
    assert_eq!(loss, vec![13.0]);
    let w = g.param_binding("w").unwrap();
    assert!(
        (w[0] - 3.1).abs() < 1e-6 && (w[1] - 3.1).abs() < 1e-6,
        "{w:?}"
    );
}

#[test]
fn an_unbound_param_is_a_clear_error() {
    let f = Func::new("f", |s| s.param("w", shape![1]).sum_all());
    let mut opt = Sgd::new(0.1);
    let err = f
        .try_train_step(&mut opt, &["w"], &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("param `w` is not bound"), "{err}");
}

fn regression() -> (Func, Vec<f32>, Vec<f32>) {
    // y = x·[2, -1] + 0.5 on 16 points
    let xs: Vec<f32> = (0..32).map(|i| ((i * 7 % 11) as f32 - 5.0) / 5.0).collect();
    let ys: Vec<f32> = xs.chunks(2).map(|p| 2.0 * p[0] - p[1] + 0.5).collect();
    let f = Func::new("linreg", |s| {
        let x = s.input("x", shape![?, 2]);
        let y = s.input("y", shape![?]);
        let w = s.param("w", shape![2, 1]);
        let b = s.param("b", shape![1]);
        let pred = (&x.matmul(&w) + &b).reshape([-1]);
        let d = &pred - &y;
        (&d * &d).mean_all()
    })
    .with_param("w", vec![0.0, 0.0])
    .with_param("b", vec![0.0]);
    (f, xs, ys)
}

fn xor() -> (Func, Vec<f32>, Vec<f32>) {
    let xs = vec![0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0];
    let ys = vec![0.0, 1.0, 1.0, 0.0];
    let f = Func::new("xor", |s| {
        let x = s.input("x", shape![4, 2]);
        let y = s.input("y", shape![4]);
        let w1 = s.param("w1", shape![8, 2]);
        let b1 = s.param("b1", shape![8]);
        let w2 = s.param("w2", shape![1, 8]);
        let b2 = s.param("b2", shape![1]);
        let h = x.linear(&w1, &b1).tanh();
        let p = h.linear(&w2, &b2).sigmoid().reshape([-1]);
        let d = &p - &y;
        (&d * &d).mean_all()
    })
    .init_randn(3, 1.0);
    (f, xs, ys)
}

fn train(
    mut f: Func,
    opt: &mut dyn Optimizer,
    steps: usize,
    inputs: &[(&str, &[f32])],
) -> (f32, f32) {
    let first = f.run(inputs)[0][0];
    let mut last = first;
    for _ in 0..steps {
        let (next, loss) = f.train_step_all(opt, inputs);
        f = next;
        last = loss[0];
    }
    (first, last)
}

#[test]
fn every_optimizer_fits_a_linear_regression() {
    let opts: Vec<(&str, Box<dyn Optimizer>)> = vec![
        ("sgd", Box::new(Sgd::new(0.1))),
        (
            "sgd+nesterov",
            Box::new(Sgd::new(0.05).with_momentum(0.9, true)),
        ),
        ("adam", Box::new(Adam::new(0.05))),
        ("adamw", Box::new(AdamW::new(0.05).with_weight_decay(0.0))),
        ("lion", Box::new(Lion::new(0.01))),
        ("muon", Box::new(Muon::new(0.02))),
    ];
    for (name, mut opt) in opts {
        let (f, xs, ys) = regression();
        let (first, last) = train(f, opt.as_mut(), 300, &[("x", &xs), ("y", &ys)]);
        assert!(
            last < first * 0.01 && last < 0.02,
            "{name}: loss {first} → {last}"
        );
    }
}

#[test]
fn every_optimizer_learns_xor() {
    let opts: Vec<(&str, Box<dyn Optimizer>, usize)> = vec![
        (
            "sgd",
            Box::new(Sgd::new(0.5).with_momentum(0.9, false)),
            400,
        ),
        ("adam", Box::new(Adam::new(0.05)), 300),
        ("adamw", Box::new(AdamW::new(0.05)), 300),
        ("lion", Box::new(Lion::new(0.01)), 300),
        ("muon", Box::new(Muon::new(0.05)), 300),
    ];
    for (name, mut opt, steps) in opts {
        let (f, xs, ys) = xor();
        let (first, last) = train(f, opt.as_mut(), steps, &[("x", &xs), ("y", &ys)]);
        assert!(last < 0.02, "{name}: xor loss {first} → {last}");
    }
}

#[test]
fn a_resumed_run_continues_bit_identically() {
    let (f0, xs, ys) = xor();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    let mut opt = AdamW::new(0.03);
    let mut f = f0.clone();
    for _ in 0..5 {
        f = f.train_step_all(&mut opt, &inputs).0;
    }
    let path = std::env::temp_dir().join(format!("rlx_resume_{}.safetensors", std::process::id()));
    f.save_checkpoint(&path, Some(&opt)).unwrap();
    let mut uninterrupted = (f.clone(), opt.clone());
    for _ in 0..5 {
        uninterrupted.0 = uninterrupted
            .0
            .train_step_all(&mut uninterrupted.1, &inputs)
            .0;
    }
    let mut opt2 = AdamW::new(0.03);
    let mut g = f0.load_checkpoint(&path, Some(&mut opt2)).unwrap();
    for _ in 0..5 {
        g = g.train_step_all(&mut opt2, &inputs).0;
    }
    for name in g.param_names() {
        assert_eq!(
            g.param_binding(&name),
            uninterrupted.0.param_binding(&name),
            "{name}"
        );
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn checkpoint_loading_is_strict() {
    let (f, _, _) = xor();
    let path = std::env::temp_dir().join(format!("rlx_strict_{}.safetensors", std::process::id()));
    f.save_checkpoint(&path, None).unwrap();
    let other = Func::new("other", |s| s.param("w1", shape![3]).sum_all());
    let err = other.load_checkpoint(&path, None).unwrap_err().to_string();
    assert!(
        err.contains("w1") || err.contains("no param named"),
        "{err}"
    );
    let mut opt = Adam::new(0.1);
    let err = f
        .load_checkpoint(&path, Some(&mut opt))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no optimizer state"), "{err}");
    std::fs::write(&path, b"not a checkpoint").unwrap();
    assert!(
        f.load_checkpoint(&path, None)
            .unwrap_err()
            .to_string()
            .contains("not a valid safetensors")
    );
    std::fs::remove_file(&path).ok();
}

/// `Func::try_loss_and_grads` and `Func::try_apply_grads` (src/train_grads.rs): a step
/// split into "compute gradients" and "apply gradients" equals one `train_step`.
mod external_grads {
    use rlx_tensor::{Adam, AdamW, Func, Lion, Muon, Optimizer, Sgd, shape};

    fn mlp() -> (Func, Vec<f32>, Vec<f32>) {
        let f = Func::new("mlp", |s| {
            let x = s.input("x", shape![?, 3]);
            let y = s.input("y", shape![?, 2]);
            let w1 = s.param("w1", shape![3, 4]);
            let b1 = s.param("b1", shape![4]);
            let w2 = s.param("w2", shape![4, 2]);
            let h = (&x.matmul(&w1) + &b1).tanh();
            let d = &h.matmul(&w2) - &y;
            (&d * &d).mean_all()
        })
        .init_randn(11, 0.5);
        let x: Vec<f32> = (0..15).map(|i| ((i * 7 % 11) as f32 - 5.0) / 5.0).collect();
        let y: Vec<f32> = (0..10).map(|i| ((i * 3 % 7) as f32 - 3.0) / 3.0).collect();
        (f, x, y)
    }

    #[test]
    fn loss_and_grads_equal_the_value_and_grad_outputs() {
        let (f, x, y) = mlp();
        let inputs: [(&str, &[f32]); 2] = [("x", &x), ("y", &y)];
        let (loss, grads) = f.try_loss_and_grads(&["w1", "w2"], &inputs).unwrap();
        let reference = f.value_and_grad(&["w1", "w2"]).run(&inputs);
        assert_eq!(loss, reference[0]);
        assert_eq!(grads, reference[1..].to_vec());
        assert_eq!(grads[0].len(), 12);
        assert_eq!(grads[1].len(), 8);
    }

    /// Ten steps of "grads, then apply" against ten `train_step`s with a fresh optimizer
    /// of the same kind: equal params (the update programs are the same arithmetic).
    fn split_step_matches_train_step(mut a: Box<dyn Optimizer>, mut b: Box<dyn Optimizer>) {
        let (f, x, y) = mlp();
        let inputs: [(&str, &[f32]); 2] = [("x", &x), ("y", &y)];
        let wrt = ["w1", "b1", "w2"];
        let (mut whole, mut split) = (f.clone(), f);
        for step in 0..10 {
            let (next, loss_whole) = whole.train_step(&mut *a, &wrt, &inputs);
            whole = next;
            let (loss_split, grads) = split.try_loss_and_grads(&wrt, &inputs).unwrap();
            let refs: Vec<&[f32]> = grads.iter().map(Vec::as_slice).collect();
            split = split.try_apply_grads(&mut *b, &wrt, &refs).unwrap();
            assert_eq!(loss_whole, loss_split, "loss at step {step}");
        }
        for name in wrt {
            let (p, q) = (
                whole.param_binding(name).unwrap(),
                split.param_binding(name).unwrap(),
            );
            for (i, (u, v)) in p.iter().zip(q).enumerate() {
                let tol = 1e-6 * u.abs().max(1.0);
                assert!(
                    (u - v).abs() <= tol,
                    "`{name}`[{i}]: train_step {u} vs apply_grads {v}"
                );
            }
        }
    }

    #[test]
    fn applying_the_computed_grads_equals_train_step_for_every_optimizer() {
        split_step_matches_train_step(Box::new(Sgd::new(0.1)), Box::new(Sgd::new(0.1)));
        let sgdm = || Box::new(Sgd::new(0.05).with_momentum(0.9, true));
        split_step_matches_train_step(sgdm(), sgdm());
        split_step_matches_train_step(Box::new(Adam::new(0.01)), Box::new(Adam::new(0.01)));
        split_step_matches_train_step(Box::new(AdamW::new(0.01)), Box::new(AdamW::new(0.01)));
        split_step_matches_train_step(Box::new(Lion::new(0.001)), Box::new(Lion::new(0.001)));
        // Muon has no fused rule: the host step_batch path.
        split_step_matches_train_step(Box::new(Muon::new(0.01)), Box::new(Muon::new(0.01)));
    }

    #[test]
    fn applying_given_grads_is_the_hand_computed_sgd_update() {
        let (f, _, _) = mlp();
        let b1 = f.param_binding("b1").unwrap().to_vec();
        let g = [1.0f32, -2.0, 0.5, 0.0];
        let next = f
            .try_apply_grads(&mut Sgd::new(0.25), &["b1"], &[&g])
            .unwrap();
        let want: Vec<f32> = b1.iter().zip(g).map(|(p, g)| p - 0.25 * g).collect();
        assert_eq!(next.param_binding("b1").unwrap(), &want[..]);
        // untouched params keep their values
        assert_eq!(next.param_binding("w1"), f.param_binding("w1"));
    }

    #[test]
    fn wrong_gradient_lengths_counts_and_names_are_errors_naming_the_param() {
        let (f, _, _) = mlp();
        let mut opt = Sgd::new(0.1);
        let e = f
            .try_apply_grads(&mut opt, &["b1"], &[&[1.0; 3]])
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("gradient of `b1` has 3 values but the param has 4"),
            "{e}"
        );
        let e = f
            .try_apply_grads(&mut opt, &["b1", "w2"], &[&[1.0; 4]])
            .unwrap_err();
        assert!(e.to_string().contains("1 gradients for 2 params"), "{e}");
        let e = f
            .try_apply_grads(&mut opt, &["nope"], &[&[1.0]])
            .unwrap_err();
        assert!(e.to_string().contains("`nope` is not a bound param"), "{e}");
        let e = f.try_loss_and_grads(&["nope"], &[]).unwrap_err();
        assert!(e.to_string().contains("`nope` is not a bound param"), "{e}");
    }
}
