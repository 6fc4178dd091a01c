//! Parameter groups through `Func::train_step`: the compiled (fused) update and the host
//! `step_batch` apply each param's group identically, both equal a hand-written reference
//! loop, and a grouped optimizer's state survives save → load.
#![cfg(feature = "optim")]

use rlx_tensor::{Adam, AdamW, Func, Lion, LrSchedule, Optimizer, ParamGroup, Sgd, Unfused, shape};

/// A 3-5-1 tanh MLP on 8 fixed rows, mean squared error.
fn mlp() -> (Func, Vec<f32>, Vec<f32>) {
    let f = Func::new("mlp", |s| {
        let x = s.input("x", shape![8, 3]);
        let y = s.input("y", shape![8, 1]);
        let w1 = s.param("w1", shape![3, 5]);
        let b1 = s.param("b1", shape![5]);
        let w2 = s.param("w2", shape![5, 1]);
        let b2 = s.param("b2", shape![1]);
        let h = (&x.matmul(&w1) + &b1).tanh();
        let d = &(&h.matmul(&w2) + &b2) - &y;
        (&d * &d).mean_all()
    })
    .init_randn(5, 0.7);
    let xs: Vec<f32> = (0..24).map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0).collect();
    let ys: Vec<f32> = (0..8).map(|i| ((i * 3 % 5) as f32 - 2.0) / 2.0).collect();
    (f, xs, ys)
}

/// `head` (the output layer `w2`, `b2`: lr × 0.5, decay 0.3) before `no_decay` (`b1`).
fn groups() -> [ParamGroup; 2] {
    [
        ParamGroup::new("head", |name: &str, _: &[usize]| name.ends_with('2'))
            .lr_scale(0.5)
            .weight_decay(0.3),
        ParamGroup::no_decay_below_rank(2),
    ]
}

/// `(lr_scale, weight decay)` of each MLP param under [`groups`].
fn expected(name: &str, own_wd: f64) -> (f64, f64) {
    match name {
        "w2" | "b2" => (0.5, 0.3),
        "b1" => (1.0, 0.0),
        _ => (1.0, own_wd),
    }
}

/// An optimizer that can be cloned into a host-path twin.
trait OptClone: Optimizer {
    fn host_twin(&self) -> Box<dyn Optimizer>;
    fn as_opt(&mut self) -> &mut dyn Optimizer;
}

impl<O: Optimizer + Clone + 'static> OptClone for O {
    fn host_twin(&self) -> Box<dyn Optimizer> {
        Box::new(Unfused(self.clone()))
    }
    fn as_opt(&mut self) -> &mut dyn Optimizer {
        self
    }
}

/// Every optimizer with a fused rule, each with [`groups`].
fn grouped() -> Vec<(&'static str, Box<dyn OptClone>)> {
    let [head, no_decay] = groups();
    let (h, n) = (head.clone(), no_decay.clone());
    let sgd = Sgd::new(0.05)
        .with_momentum(0.9, true)
        .with_weight_decay(0.05);
    let adam = Adam::new(0.05).with_weight_decay(0.1);
    let adamw = AdamW::new(0.05).with_weight_decay(0.1);
    let adamw32 = AdamW::new(0.05).with_f32_math(true);
    let torch = AdamW::torch(0.05, (0.9, 0.95), 0.1);
    let lion = Lion::new(0.01).with_weight_decay(0.2);
    vec![
        (
            "sgd",
            Box::new(sgd.with_group(h.clone()).with_group(n.clone())),
        ),
        (
            "adam",
            Box::new(adam.with_group(h.clone()).with_group(n.clone())),
        ),
        (
            "adamw",
            Box::new(adamw.with_group(h.clone()).with_group(n.clone())),
        ),
        (
            "adamw/f32",
            Box::new(adamw32.with_group(h.clone()).with_group(n.clone())),
        ),
        (
            "adamw/torch",
            Box::new(torch.with_group(h.clone()).with_group(n.clone())),
        ),
        ("lion", Box::new(lion.with_group(head).with_group(no_decay))),
    ]
}

/// Largest `|a − b| / max(1, |b|)`.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
        .fold(0.0, f32::max)
}

fn assert_params_close(what: &str, a: &Func, b: &Func, tol: f32) {
    for name in a.param_names() {
        let d = rel_diff(
            a.param_binding(&name).unwrap(),
            b.param_binding(&name).unwrap(),
        );
        assert!(d <= tol, "{what}: param {name} differs by {d}");
    }
}

#[test]
fn fused_and_host_paths_apply_the_groups_identically_for_every_fused_optimizer() {
    let (f0, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    let schedule = LrSchedule::WarmupCosine {
        base: 1.0,
        min: 0.1,
        warmup: 2,
        total: 6,
    };
    for (name, mut opt) in grouped() {
        let mut host = opt.host_twin();
        let (mut f, mut g) = (f0.clone(), f0.clone());
        rlx_tensor::clear_cache();
        for k in 0..6 {
            let (nf, lf) = f.train_step_all_at(opt.as_opt(), &schedule, k, &inputs);
            if k == 0 {
                let miss = rlx_tensor::cache_last_miss().unwrap();
                assert!(miss.contains("_fused_step"), "{name}: {miss}");
            }
            let (ng, lg) = g.train_step_all_at(host.as_mut(), &schedule, k, &inputs);
            assert!(rel_diff(&lf, &lg) <= 2e-5, "{name}: loss {lf:?} vs {lg:?}");
            (f, g) = (nf, ng);
        }
        assert_params_close(name, &f, &g, 2e-5);
        let (sa, sb) = (opt.state_dict().unwrap(), host.state_dict().unwrap());
        assert_eq!(sa.param_groups, sb.param_groups, "{name}: recorded groups");
        assert_eq!(sa.param_groups.len(), 4, "{name}: every param is recorded");
        for ((n, a), (_, b)) in sa.buffers.iter().zip(&sb.buffers) {
            assert!(rel_diff(a, b) <= 2e-5, "{name}: state {n}");
        }
    }
}

#[test]
fn grouped_adamw_train_steps_equal_a_hand_written_reference_loop() {
    let (f0, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    let wrt = ["w1", "b1", "w2", "b2"];
    let (lr, b1, b2, eps, own_wd) = (0.05f64, 0.9f64, 0.999f64, 1e-8f64, 0.1f64);
    let [head, no_decay] = groups();
    let mut fused = AdamW::new(lr as f32)
        .with_weight_decay(own_wd as f32)
        .with_group(head)
        .with_group(no_decay);
    let mut host = Unfused(fused.clone());

    // The reference: gradients from `value_and_grad`, the documented AdamW update with
    // each param's (lr_scale, decay), p/m/v stored as f32.
    let mut r = f0.clone();
    let mut moments: Vec<(Vec<f64>, Vec<f64>)> = wrt
        .iter()
        .map(|n| {
            let len = f0.param_binding(n).unwrap().len();
            (vec![0.0; len], vec![0.0; len])
        })
        .collect();
    let (mut f, mut g) = (f0.clone(), f0.clone());
    for k in 0..5 {
        let outs = r.value_and_grad(&wrt).run(&inputs);
        let t = (k + 1) as f64;
        for (i, name) in wrt.iter().enumerate() {
            let (s, wd) = expected(name, own_wd);
            let (m, v) = &mut moments[i];
            let p: Vec<f32> = r
                .param_binding(name)
                .unwrap()
                .iter()
                .zip(&outs[1 + i])
                .enumerate()
                .map(|(j, (&p, &gr))| {
                    let (p, gr) = (p as f64, gr as f64);
                    m[j] = (b1 * m[j] + (1.0 - b1) * gr) as f32 as f64;
                    v[j] = (b2 * v[j] + (1.0 - b2) * gr * gr) as f32 as f64;
                    let dir =
                        (m[j] / (1.0 - b1.powf(t))) / ((v[j] / (1.0 - b2.powf(t))).sqrt() + eps);
                    (p - lr * s * (dir + wd * p)) as f32
                })
                .collect();
            r = r.with_param(*name, p);
        }
        f = f.train_step(&mut fused, &wrt, &inputs).0;
        g = g.train_step(&mut host, &wrt, &inputs).0;
    }
    assert_params_close("fused vs reference", &f, &r, 2e-5);
    assert_params_close("host vs reference", &g, &r, 2e-5);
    // The groups really acted: without them the run differs.
    let mut plain = AdamW::new(lr as f32).with_weight_decay(own_wd as f32);
    let mut p = f0.clone();
    for _ in 0..5 {
        p = p.train_step(&mut plain, &wrt, &inputs).0;
    }
    let d = rel_diff(
        p.param_binding("w2").unwrap(),
        r.param_binding("w2").unwrap(),
    );
    assert!(d > 1e-3, "groups changed nothing ({d})");
}

#[test]
fn scheduled_sgd_steps_scale_the_scheduled_lr_per_group_exactly_on_both_paths() {
    // loss = Σ(w − 3)² + Σ(b − 1)²: grads 2(w − 3), 2(b − 1). Schedule lr 0.25 then 0.125;
    // `b` is in a group with lr × 0.5 and decay 0.5 (L2: d = g + 0.5·b).
    let f0 = Func::new("quad", |s| {
        let w = s.param("w", shape![2, 1]);
        let b = s.param("b", shape![2]);
        let dw = &w - 3.0;
        let db = &b - 1.0;
        &(&dw * &dw).sum_all() + &(&db * &db).sum_all()
    })
    .with_param("w", vec![0.0, 1.0])
    .with_param("b", vec![2.0, 5.0]);
    let schedule = LrSchedule::Step {
        base: 0.25,
        step_size: 1,
        gamma: 0.5,
    };
    let opt = Sgd::new(9.0).with_group(
        ParamGroup::new("bias", |_: &str, shape: &[usize]| shape.len() == 1)
            .lr_scale(0.5)
            .weight_decay(0.5),
    );
    // w: 0 → 0 + 0.25·6 = 1.5 → 1.5 + 0.125·3 = 1.875; 1 → 1 + 0.25·4 = 2 → 2 + 0.125·2 = 2.25.
    // b: 2 → 2 − 0.125·(2 + 1) = 1.625 → 1.625 − 0.0625·(1.25 + 0.8125) = 1.49609375;
    //    5 → 5 − 0.125·(8 + 2.5) = 3.6875 → 3.6875 − 0.0625·(5.375 + 1.84375) = 3.236328125.
    let want_w = [1.875f32, 2.25];
    let want_b = [383.0f32 / 256.0, 1657.0 / 512.0]; // 1.49609375, 3.236328125 (exact)
    let mut fused = opt.clone();
    let mut host = Unfused(opt);
    for o in [&mut fused as &mut dyn Optimizer, &mut host] {
        let mut f = f0.clone();
        for k in 0..2 {
            f = f.train_step_all_at(o, &schedule, k, &[]).0;
        }
        assert_eq!(f.param_binding("w"), Some(&want_w[..]));
        assert_eq!(f.param_binding("b"), Some(&want_b[..]));
    }
}

#[test]
fn a_group_with_lr_scale_zero_freezes_its_params_bit_for_bit_in_the_compiled_step() {
    let (f0, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    let frozen = || ParamGroup::new("frozen", |name: &str, _: &[usize]| name == "w1").lr_scale(0.0);
    // AdamW's decoupled decay is scaled by the lr too, so frozen means untouched.
    let mut opt = AdamW::new(0.05).with_group(frozen());
    let mut f = f0.clone();
    for _ in 0..3 {
        f = f.train_step_all(&mut opt, &inputs).0;
    }
    assert_eq!(f.param_binding("w1"), f0.param_binding("w1"));
    assert_ne!(f.param_binding("w2"), f0.param_binding("w2"));
}

#[test]
fn the_compiled_program_follows_the_param_groups_of_each_optimizer() {
    // One Func lineage stepped first without groups, then with them: the grouped step must
    // not reuse the ungrouped program (whose every param reads the shared operands).
    let (f0, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    let mut plain = Lion::new(0.01);
    let f1 = f0.train_step_all(&mut plain, &inputs).0;
    let [head, no_decay] = groups();
    let mut with = Lion::new(0.01)
        .with_weight_decay(0.2)
        .with_group(head)
        .with_group(no_decay);
    let mut host = Unfused(with.clone());
    let a = f1.train_step_all(&mut with, &inputs).0;
    let b = f1.train_step_all(&mut host, &inputs).0;
    assert_params_close("grouped after ungrouped", &a, &b, 1e-6);
    let s = f1.explain_train_step(&mut with, &["w1", "b1", "w2", "b2"]);
    assert!(s.contains("fused_step"), "{s}");
}

#[test]
fn a_grouped_fused_run_saved_and_loaded_continues_exactly() {
    let (f0, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    for (name, mut opt) in grouped() {
        let mut f = f0.clone();
        for _ in 0..2 {
            f = f.train_step_all(opt.as_opt(), &inputs).0;
        }
        let saved = opt.state_dict().unwrap();
        let rec: Vec<(&str, Option<&str>)> = saved
            .param_groups
            .iter()
            .map(|r| (r.param.as_str(), r.group.as_deref()))
            .collect();
        assert_eq!(
            rec,
            [
                ("b1", Some("no_decay")),
                ("b2", Some("head")),
                ("w1", None),
                ("w2", Some("head"))
            ],
            "{name}"
        );
        let mut fresh = grouped().into_iter().find(|(n, _)| *n == name).unwrap().1;
        fresh.try_load_state_dict(&saved).unwrap();
        let a = f.train_step_all(opt.as_opt(), &inputs).0;
        let b = f.train_step_all(fresh.as_opt(), &inputs).0;
        for p in a.param_names() {
            assert_eq!(a.param_binding(&p), b.param_binding(&p), "{name}: {p}");
        }
        assert_eq!(opt.state_dict(), fresh.state_dict(), "{name}");
        // An optimizer without the groups refuses the state, naming a param and its group.
        let mut bare: Box<dyn Optimizer> = match name {
            "sgd" => Box::new(Sgd::new(0.05).with_momentum(0.9, true)),
            "adam" => Box::new(Adam::new(0.05)),
            "lion" => Box::new(Lion::new(0.01)),
            _ => Box::new(AdamW::new(0.05)),
        };
        let err = bare.try_load_state_dict(&saved).unwrap_err();
        assert!(
            err.contains("param `b1` (shape [5]) was saved in group `no_decay`"),
            "{name}: {err}"
        );
    }
}
