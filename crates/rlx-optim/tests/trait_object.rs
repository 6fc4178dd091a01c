//! The optimizers as `Func::train_step` sees them: `&mut dyn Optimizer`, boxed, sent to
//! other threads, with schedules applied through `set_lr`.

mod common;

use common::{LeastSquares, Problem, train_step};
use rlx_optim::{Adam, AdamW, Lion, LrSchedule, Muon, OptItem, Optimizer, Sgd};

#[test]
fn concrete_optimizers_coerce_to_dyn_optimizer() {
    fn takes_dyn(opt: &mut dyn Optimizer) -> f32 {
        let mut p = [1.0f32];
        opt.step("p", &[1], &mut p, &[1.0]);
        opt.end_iteration();
        p[0]
    }
    assert!(takes_dyn(&mut Sgd::new(0.1)) < 1.0);
    assert!(takes_dyn(&mut Adam::new(0.1)) < 1.0);
    assert!(takes_dyn(&mut AdamW::new(0.1)) < 1.0);
    assert!(takes_dyn(&mut Lion::new(0.1)) < 1.0);
    assert!(takes_dyn(&mut Muon::new(0.1)) < 1.0);
}

#[test]
fn set_lr_through_the_trait_changes_the_step_size() {
    // After set_lr(0) nothing moves (every rule scales its whole update by lr).
    let optimizers: Vec<Box<dyn Optimizer>> = vec![
        Box::new(Sgd::new(0.1).with_weight_decay(0.1)),
        Box::new(Adam::new(0.1)),
        Box::new(AdamW::new(0.1)),
        Box::new(AdamW::torch(0.1, (0.9, 0.999), 0.1)),
        Box::new(Lion::new(0.1).with_weight_decay(0.1)),
        Box::new(Muon::new(0.1).with_weight_decay(0.1)),
    ];
    for mut opt in optimizers {
        opt.set_lr(0.0);
        let mut w = vec![1.0f32, 2.0, 3.0, 4.0];
        opt.step("w", &[2, 2], &mut w, &[0.5, -0.5, 1.0, 2.0]);
        assert_eq!(w, [1.0, 2.0, 3.0, 4.0]);
        opt.set_lr(0.01);
        opt.step("w", &[2, 2], &mut w, &[0.5, -0.5, 1.0, 2.0]);
        assert_ne!(w, [1.0, 2.0, 3.0, 4.0]);
    }
}

#[test]
fn set_lr_matches_assigning_the_field() {
    let mut a = Adam::new(0.1);
    a.set_lr(0.02);
    assert_eq!(a.lr, 0.02);
    let mut s = Sgd::new(0.1);
    s.set_lr(0.02);
    assert_eq!(s.lr, 0.02);
    let mut l = Lion::new(0.1);
    l.set_lr(0.02);
    assert_eq!(l.lr, 0.02);
    let mut m = Muon::new(0.1);
    m.set_lr(0.02);
    assert_eq!(m.lr, 0.02);
    let mut w = AdamW::torch(0.1, (0.9, 0.999), 0.0);
    w.set_lr(0.02);
    assert_eq!((w.lr, w.lr_f64), (0.02, None));
}

#[test]
fn step_batch_equals_stepping_each_item_in_order() {
    let problem = LeastSquares::new(4, 8, 3, 2);
    let makers: Vec<fn() -> Box<dyn Optimizer>> = vec![
        || Box::new(Sgd::new(0.1).with_momentum(0.9, true)),
        || Box::new(Adam::new(0.1)),
        || Box::new(AdamW::new(0.1)),
        || Box::new(Lion::new(0.1)),
        || Box::new(Muon::new(0.1)),
    ];
    for make in makers {
        let (mut batched, mut single) = (make(), make());
        let (mut pb, mut ps) = (problem.init(), problem.init());
        for _ in 0..3 {
            train_step(batched.as_mut(), &problem, &mut pb);
            let (_, grads) = problem.loss_and_grads(&ps);
            for (p, g) in ps.iter_mut().zip(&grads) {
                let g: Vec<f32> = g.iter().map(|&v| v as f32).collect();
                single.step(p.name, &p.shape, &mut p.data, &g);
            }
            single.end_iteration();
        }
        assert_eq!(pb, ps);
    }
}

#[test]
fn optimizers_are_send_sync_clone_and_debug() {
    fn check<T: Optimizer + Send + Sync + Clone + std::fmt::Debug + 'static>(opt: T) {
        let handle = std::thread::spawn(move || {
            let mut opt = opt;
            let mut p = [1.0f32, 1.0];
            opt.step("p", &[2], &mut p, &[1.0, -1.0]);
            opt.end_iteration();
            (format!("{opt:?}"), opt.clone().state_dict())
        });
        let (debug, state) = handle.join().unwrap();
        assert!(!debug.is_empty());
        assert_eq!(state.unwrap().step, 1);
    }
    check(Sgd::new(0.1));
    check(Adam::new(0.1));
    check(AdamW::new(0.1));
    check(Lion::new(0.1));
    check(Muon::new(0.1));
}

#[test]
fn clones_carry_independent_state() {
    let mut a = Adam::new(0.1);
    let mut p = [1.0f32];
    a.step("p", &[1], &mut p, &[1.0]);
    a.end_iteration();
    let b = a.clone();
    a.step("p", &[1], &mut p, &[1.0]);
    a.end_iteration();
    assert_eq!((a.current_step(), b.current_step()), (2, 1));
    assert_ne!(a.state_dict(), b.state_dict());
}

#[test]
fn schedule_driven_training_uses_the_scheduled_rate() {
    // Plain SGD on f(p) = p²/2 (g = p): p ← p·(1 − lr_k), so the result is ∏(1 − lr_k).
    let schedule = LrSchedule::Step {
        base: 0.5,
        step_size: 2,
        gamma: 0.5,
    };
    let mut opt = Sgd::new(123.0);
    let mut p = [1.0f32];
    let mut want = 1.0f64;
    for step in 0..6 {
        opt.set_lr(schedule.lr_at(step));
        let g = [p[0]];
        let mut items = [OptItem {
            name: "p",
            shape: &[],
            param: &mut p,
            grad: &g,
        }];
        opt.step_batch(&mut items);
        opt.end_iteration();
        want *= 1.0 - [0.5, 0.5, 0.25, 0.25, 0.125, 0.125][step];
    }
    assert!((p[0] as f64 - want).abs() < 1e-7, "{} vs {want}", p[0]);
}
