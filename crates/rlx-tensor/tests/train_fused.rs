//! The compiled training step (forward + backward + optimizer update in one program)
//! against the host path (`Unfused` forces `step_batch` on the host): params, loss and
//! optimizer state agree over several steps for every optimizer with a fused rule, with
//! schedules, clipping, QAT and checkpoints; custom optimizers and Muon stay on the host.
#![cfg(feature = "optim")]

use rlx_optim::OptimizerState;
use rlx_tensor::{
    Adam, AdamW, Device, Func, Lion, LrSchedule, Muon, Optimizer, Sgd, Unfused, shape,
};

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
    .init_randn(11, 0.7);
    let xs: Vec<f32> = (0..24).map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0).collect();
    let ys: Vec<f32> = (0..8).map(|i| ((i * 3 % 5) as f32 - 2.0) / 2.0).collect();
    (f, xs, ys)
}

/// Every optimizer configuration with a fused rule (all math flags and branches).
fn fusable() -> Vec<(&'static str, Box<dyn OptClone>)> {
    vec![
        ("sgd", Box::new(Sgd::new(0.1))),
        ("sgd+wd", Box::new(Sgd::new(0.1).with_weight_decay(0.05))),
        (
            "sgd+momentum",
            Box::new(Sgd::new(0.05).with_momentum(0.9, false)),
        ),
        (
            "sgd+nesterov+wd",
            Box::new(
                Sgd::new(0.05)
                    .with_momentum(0.8, true)
                    .with_weight_decay(0.01),
            ),
        ),
        ("adam", Box::new(Adam::new(0.05))),
        (
            "adam+l2/f32",
            Box::new(Adam::new(0.05).with_weight_decay(0.1).with_f32_math(true)),
        ),
        ("adamw", Box::new(AdamW::new(0.05).with_weight_decay(0.1))),
        ("adamw/f32", Box::new(AdamW::new(0.05).with_f32_math(true))),
        (
            "adamw/torch",
            Box::new(AdamW::torch(0.05, (0.9, 0.999), 0.1)),
        ),
        (
            "adamw/torch lerp-hi",
            Box::new(AdamW::torch(0.05, (0.3, 0.99), 0.1)),
        ),
        ("lion", Box::new(Lion::new(0.01).with_weight_decay(0.2))),
    ]
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

/// Largest `|a − b| / max(1, |b|)` over two equally long slices.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
        .fold(0.0, f32::max)
}

/// Params, loss history and optimizer state of two runs agree within `tol`.
fn assert_runs_agree(
    what: &str,
    (fa, la, oa): (&Func, &[f32], &dyn Optimizer),
    (fb, lb, ob): (&Func, &[f32], &dyn Optimizer),
    tol: f32,
) {
    assert!(rel_diff(la, lb) <= tol, "{what}: losses {la:?} vs {lb:?}");
    for name in fa.param_names() {
        let (a, b) = (
            fa.param_binding(&name).unwrap(),
            fb.param_binding(&name).unwrap(),
        );
        let d = rel_diff(a, b);
        assert!(d <= tol, "{what}: param {name} differs by {d}");
    }
    let (sa, sb) = (oa.state_dict().unwrap(), ob.state_dict().unwrap());
    assert_eq!(sa.step, sb.step, "{what}: step counters");
    let names = |s: &OptimizerState| s.buffers.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&sa), names(&sb), "{what}: state buffer names");
    for ((n, a), (_, b)) in sa.buffers.iter().zip(&sb.buffers) {
        let d = rel_diff(a, b);
        assert!(d <= tol, "{what}: state {n} differs by {d}");
    }
}

/// A trained function and its loss history.
type Run = (Func, Vec<f32>);
/// The host-path run and the optimizer twin it used.
type HostRun = (Func, Vec<f32>, Box<dyn Optimizer>);

/// `steps` fused steps with `opt` and the same on the host path with its twin (returned).
fn fused_and_host(
    opt: &mut dyn OptClone,
    steps: usize,
    step: impl Fn(&Func, &mut dyn Optimizer, usize) -> (Func, Vec<f32>),
) -> (Run, HostRun) {
    let (f0, _, _) = mlp();
    let mut host = opt.host_twin();
    let (mut f, mut g) = (f0.clone(), f0);
    let (mut lf, mut lg) = (vec![], vec![]);
    rlx_tensor::clear_cache();
    for k in 0..steps {
        let (nf, l) = step(&f, opt.as_opt(), k);
        f = nf;
        lf.push(l[0]);
        if k == 0 {
            // The step compiled the fused program (not the value-and-grad one).
            let miss = rlx_tensor::cache_last_miss().unwrap();
            assert!(miss.contains("_fused_step"), "{miss}");
        }
        let (ng, l) = step(&g, host.as_mut(), k);
        g = ng;
        lg.push(l[0]);
    }
    ((f, lf), (g, lg, host))
}

#[test]
fn fused_steps_match_the_host_optimizer_for_every_fused_rule() {
    let (_, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    for (name, mut opt) in fusable() {
        let ((f, lf), (g, lg, host)) =
            fused_and_host(opt.as_mut(), 6, |f, o, _| f.train_step_all(o, &inputs));
        assert!(lf[5] < lf[0], "{name}: loss did not fall: {lf:?}");
        assert_runs_agree(
            name,
            (&f, &lf, opt.as_opt()),
            (&g, &lg, host.as_ref()),
            2e-5,
        );
        assert_eq!(opt.state_dict().unwrap().step, 6, "{name}");
    }
}

#[test]
fn adam_f64_fused_step_equals_the_host_step_to_the_last_bit_on_a_quadratic() {
    // No matmul, no reduction order to differ: the gradient 2(w − 3) is exact, so the
    // only arithmetic is the update, evaluated in the host's operation order in f64.
    let f0 = Func::new("quad", |s| {
        let w = s.param("w", shape![4]);
        let d = &w - 3.0;
        (&d * &d).sum_all()
    })
    .with_param("w", vec![0.0, 1.0, -2.5, 7.25]);
    for mut opt in [
        Box::new(Adam::new(0.1).with_weight_decay(0.01)) as Box<dyn OptClone>,
        Box::new(AdamW::new(0.1)),
        Box::new(AdamW::torch(0.1, (0.9, 0.999), 0.01)),
    ] {
        let mut host = opt.host_twin();
        let (mut f, mut g) = (f0.clone(), f0.clone());
        for _ in 0..5 {
            f = f.train_step(opt.as_opt(), &["w"], &[]).0;
            g = g.train_step(host.as_mut(), &["w"], &[]).0;
        }
        assert_eq!(f.param_binding("w"), g.param_binding("w"));
        assert_eq!(opt.state_dict(), host.state_dict());
    }
}

#[test]
fn the_fused_path_compiles_one_program_and_schedules_never_recompile_it() {
    let (f0, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    let schedule = LrSchedule::WarmupCosine {
        base: 0.05,
        min: 0.001,
        warmup: 2,
        total: 8,
    };
    rlx_tensor::clear_cache();
    let mut opt = AdamW::new(1.0);
    let mut host = Unfused(AdamW::new(1.0));
    let (mut f, mut g) = (f0.clone(), f0);
    let (mut lf, mut lg) = (vec![], vec![]);
    for step in 0..8 {
        let (nf, l) = f.train_step_all_at(&mut opt, &schedule, step, &inputs);
        f = nf;
        lf.push(l[0]);
        if step == 0 {
            let miss = rlx_tensor::cache_last_miss().unwrap();
            assert!(miss.contains("_fused_step"), "{miss}");
            assert_eq!(
                rlx_tensor::cache_stats().1,
                1,
                "one compile for the first step"
            );
        }
    }
    assert_eq!(
        rlx_tensor::cache_stats().1,
        1,
        "lr and bias corrections are runtime operands"
    );
    for step in 0..8 {
        let (ng, l) = g.train_step_all_at(&mut host, &schedule, step, &inputs);
        g = ng;
        lg.push(l[0]);
    }
    assert!(
        rlx_tensor::cache_last_miss()
            .unwrap()
            .contains("_value_and_grad")
    );
    assert_eq!(opt.lr, schedule.lr_at(7));
    assert_runs_agree("schedule", (&f, &lf, &opt), (&g, &lg, &host), 2e-5);
}

#[test]
fn clipping_in_the_program_matches_the_host_rule_when_active_and_inactive() {
    let (_, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    let schedule = LrSchedule::Constant(0.05);
    // The first gradient's norm is about 1: 0.05 clips every step, 1e3 never does.
    for bound in [0.05f32, 1e3] {
        for (name, mut opt) in fusable() {
            let ((f, lf), (g, lg, host)) = fused_and_host(opt.as_mut(), 4, |f, o, k| {
                f.train_step_all_at_on_clipped(Device::Cpu, o, &schedule, k, bound, &inputs)
            });
            let what = format!("{name}, clip {bound}");
            assert_runs_agree(
                &what,
                (&f, &lf, opt.as_opt()),
                (&g, &lg, host.as_ref()),
                2e-5,
            );
        }
    }
}

#[test]
fn in_program_clipping_scales_to_the_bound_exactly_like_the_hand_rule() {
    // grad = [−6, −4] (norm √52); SGD lr 1 with bound 1 moves w by grad/√52.
    let f = Func::new("quad", |s| {
        let w = s.param("w", shape![2]);
        let d = &w - 3.0;
        (&d * &d).sum_all()
    })
    .with_param("w", vec![0.0, 1.0]);
    let schedule = LrSchedule::Constant(1.0);
    let mut opt = Sgd::new(1.0);
    let (g, _) = f.train_step_all_at_on_clipped(Device::Cpu, &mut opt, &schedule, 0, 1.0, &[]);
    let scale = (1.0f64 / 52f64.sqrt()) as f32;
    assert_eq!(
        g.param_binding("w"),
        Some(&[0.0 + 6.0 * scale, 1.0 + 4.0 * scale][..])
    );
    // A non-finite norm is left alone (the host rule): w = ∞ gives an ∞ gradient.
    let f = f.with_param("w", vec![f32::INFINITY, 1.0]);
    let (g, _) = f.train_step_all_at_on_clipped(Device::Cpu, &mut opt, &schedule, 0, 1.0, &[]);
    assert_eq!(g.param_binding("w").unwrap()[1], 5.0);
}

#[test]
fn qat_steps_run_forward_at_quantized_params_and_update_the_masters_like_the_host() {
    let (_, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    let schedule = LrSchedule::Constant(0.02);
    let quant = |d: &mut [f32]| d.iter_mut().for_each(|v| *v = (*v * 8.0).round() / 8.0);
    for (name, mut opt) in fusable() {
        let ((f, lf), (g, lg, host)) = fused_and_host(opt.as_mut(), 4, |f, o, k| {
            f.train_step_all_at_on_qat(Device::Cpu, o, &schedule, k, 0.5, quant, &inputs)
        });
        let what = format!("{name}, qat");
        assert_runs_agree(
            &what,
            (&f, &lf, opt.as_opt()),
            (&g, &lg, host.as_ref()),
            2e-5,
        );
        // Masters moved off the quantization grid: the update went to the f32 copies.
        let w1 = f.param_binding("w1").unwrap();
        assert!(
            w1.iter().any(|v| (v * 8.0).fract() != 0.0),
            "{name}: {w1:?}"
        );
    }
}

#[test]
fn fused_state_dict_equals_the_host_one_and_a_resumed_fused_run_is_bit_identical() {
    let (f0, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    for (name, mut opt) in fusable() {
        let ((f, lf), (g, lg, host)) =
            fused_and_host(opt.as_mut(), 3, |f, o, _| f.train_step_all(o, &inputs));
        assert_runs_agree(
            name,
            (&f, &lf, opt.as_opt()),
            (&g, &lg, host.as_ref()),
            2e-5,
        );
        let path = std::env::temp_dir().join(format!(
            "rlx_fused_resume_{}_{}.safetensors",
            std::process::id(),
            name.replace(['/', ' ', '+'], "_")
        ));
        f.save_checkpoint(&path, Some(opt.as_opt())).unwrap();
        let saved = opt.state_dict().unwrap();
        // Uninterrupted: three more fused steps.
        let mut a = f.clone();
        for _ in 0..3 {
            a = a.train_step_all(opt.as_opt(), &inputs).0;
        }
        // Resumed: a fresh optimizer of the same kind loaded from the file.
        let mut fresh: Box<dyn OptClone> =
            fusable().into_iter().find(|(n, _)| n == &name).unwrap().1;
        let mut b = f0.load_checkpoint(&path, Some(fresh.as_opt())).unwrap();
        assert_eq!(fresh.state_dict().unwrap(), saved, "{name}");
        for _ in 0..3 {
            b = b.train_step_all(fresh.as_opt(), &inputs).0;
        }
        for p in a.param_names() {
            assert_eq!(a.param_binding(&p), b.param_binding(&p), "{name}: {p}");
        }
        assert_eq!(opt.state_dict(), fresh.state_dict(), "{name}");
        std::fs::remove_file(&path).ok();
    }
}

#[test]
fn custom_optimizers_and_muon_take_the_host_path() {
    /// Sign descent, a user optimizer: only `step` is implemented.
    struct SignDescent(f32);
    impl Optimizer for SignDescent {
        fn step(&mut self, _: &str, _: &[usize], param: &mut [f32], grad: &[f32]) {
            for (p, g) in param.iter_mut().zip(grad) {
                *p -= self.0 * g.signum();
            }
        }
    }
    let f = Func::new("quad", |s| {
        let w = s.param("w", shape![2]);
        let d = &w - 3.0;
        (&d * &d).sum_all()
    })
    .with_param("w", vec![0.0, 5.0]);
    rlx_tensor::clear_cache();
    let (g, _) = f.train_step_all(&mut SignDescent(0.5), &[]);
    assert_eq!(g.param_binding("w"), Some(&[0.5f32, 4.5][..]));
    let miss = rlx_tensor::cache_last_miss().unwrap();
    assert!(
        miss.contains("_value_and_grad") && !miss.contains("fused"),
        "{miss}"
    );

    let (f, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    let (mut a, mut b) = (f.clone(), f);
    let (mut muon, mut twin) = (Muon::new(0.02), Unfused(Muon::new(0.02)));
    for _ in 0..3 {
        a = a.train_step_all(&mut muon, &inputs).0;
        b = b.train_step_all(&mut twin, &inputs).0;
    }
    for p in a.param_names() {
        assert_eq!(a.param_binding(&p), b.param_binding(&p), "muon {p}");
    }
    assert_eq!(muon.current_step(), 3);
}

#[test]
fn a_failed_fused_step_leaves_the_optimizer_untouched() {
    let (f, xs, _) = mlp();
    let mut opt = Adam::new(0.1);
    let err = f
        .try_train_step(&mut opt, &["w1", "b1"], &[("x", &xs)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing input `y`"), "{err}");
    assert_eq!(opt.current_step(), 0);
    assert!(opt.state_dict().unwrap().buffers.is_empty());
    // Training a subset of the params fuses too; the others stay as bound.
    let (_, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    let (g, _) = f.train_step(&mut opt, &["w2", "b2"], &inputs);
    assert_eq!(g.param_binding("w1"), f.param_binding("w1"));
    assert_ne!(g.param_binding("w2"), f.param_binding("w2"));
    let names: Vec<String> = opt
        .state_dict()
        .unwrap()
        .buffers
        .into_iter()
        .map(|b| b.0)
        .collect();
    assert_eq!(names, ["m/b2", "v/b2", "m/w2", "v/w2"]);
}

#[test]
fn fused_steps_update_donated_state_in_place_and_a_failed_step_keeps_it() {
    let (f, xs, ys) = mlp();
    let inputs: [(&str, &[f32]); 2] = [("x", &xs), ("y", &ys)];
    let mut opt = AdamW::new(0.05);
    let (f, _) = f.train_step_all(&mut opt, &inputs);
    let state_ptr = |opt: &mut AdamW| {
        let fu = opt.fused().unwrap();
        let bufs = fu.state("w1").unwrap();
        (bufs[0].as_ptr() as usize, bufs[1].as_ptr() as usize)
    };
    let before = state_ptr(&mut opt);
    let (f, _) = f.train_step_all(&mut opt, &inputs);
    // w1's moments are updated by the epilogue of w1's gradient product, which reads
    // each old moment at the index it stores the new one: the program writes them over
    // the donated buffers.
    assert_eq!(
        state_ptr(&mut opt),
        before,
        "m and v of w1 updated in place"
    );
    let saved = opt.state_dict().unwrap();
    let all = ["w1", "b1", "w2", "b2"];
    let err = f
        .try_train_step(&mut opt, &all, &[("x", &xs)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing input `y`"), "{err}");
    assert_eq!(
        opt.state_dict().unwrap(),
        saved,
        "the failed step left the state as it was"
    );
    // And the run continues exactly like a host run from the same point.
    let mut host = Unfused(AdamW::new(0.05));
    assert!(host.load_state_dict(&saved));
    let (a, _) = f.train_step_all(&mut opt, &inputs);
    let (b, _) = f.train_step_all(&mut host, &inputs);
    for p in all {
        let d = rel_diff(a.param_binding(p).unwrap(), b.param_binding(p).unwrap());
        assert!(d < 1e-6, "{p}: fused and host differ by {d}");
    }
}
