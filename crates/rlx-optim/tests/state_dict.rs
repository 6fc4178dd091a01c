//! Saving an optimizer's state mid-run, loading it into a fresh optimizer and continuing
//! must reproduce an uninterrupted run bit for bit — for every optimizer in the crate.

mod common;

use common::{
    LeastSquares, MakeOptimizer, Problem, Xor, all_optimizers, bits, state_bits, train_step,
};
use rlx_optim::{Adam, AdamW, Lion, LrSchedule, Muon, Optimizer, OptimizerState, Sgd};

/// Runs `k` steps, snapshots, restores into a fresh optimizer and runs `rest` more;
/// compares params and state with `k + rest` uninterrupted steps.
fn check_resume(name: &str, make: MakeOptimizer, problem: &dyn Problem, k: usize, rest: usize) {
    let schedule = LrSchedule::WarmupCosine {
        base: 0.05,
        min: 0.001,
        warmup: 2,
        total: 10,
    };
    let run = |opt: &mut dyn Optimizer,
               params: &mut Vec<common::Param>,
               steps: std::ops::Range<usize>| {
        for step in steps {
            opt.set_lr(schedule.lr_at(step));
            train_step(opt, problem, params);
        }
    };

    let mut straight = make();
    let mut straight_params = problem.init();
    run(straight.as_mut(), &mut straight_params, 0..k + rest);

    let mut first = make();
    let mut params = problem.init();
    run(first.as_mut(), &mut params, 0..k);
    let saved = first
        .state_dict()
        .unwrap_or_else(|| panic!("{name}: no state_dict"));
    assert_eq!(
        saved.step, k as u64,
        "{name}: step counts end_iteration calls"
    );
    if k > 0 && name != "sgd" {
        assert!(
            !saved.buffers.is_empty(),
            "{name}: state should have buffers"
        );
    }
    drop(first);

    let mut resumed = make();
    assert!(
        resumed.load_state_dict(&saved),
        "{name}: own state must load"
    );
    assert_eq!(
        state_bits(&resumed.state_dict().unwrap()),
        state_bits(&saved),
        "{name}: state changed by load"
    );
    run(resumed.as_mut(), &mut params, k..k + rest);

    assert_eq!(
        bits(&params),
        bits(&straight_params),
        "{name}: params diverged after resume"
    );
    assert_eq!(
        state_bits(&resumed.state_dict().unwrap()),
        state_bits(&straight.state_dict().unwrap()),
        "{name}: state diverged after resume"
    );
}

#[test]
fn every_optimizer_resumes_bit_identically_on_least_squares() {
    let problem = LeastSquares::new(9, 16, 4, 3);
    for (name, make) in all_optimizers() {
        check_resume(name, make, &problem, 3, 4);
    }
}

#[test]
fn every_optimizer_resumes_bit_identically_on_the_xor_mlp() {
    let problem = Xor { seed: 4 };
    for (name, make) in all_optimizers() {
        check_resume(name, make, &problem, 5, 5);
    }
}

#[test]
fn resuming_from_step_zero_state_equals_a_fresh_start() {
    let problem = LeastSquares::new(2, 8, 3, 2);
    for (name, make) in all_optimizers() {
        check_resume(name, make, &problem, 0, 3);
    }
}

#[test]
fn buffer_names_follow_the_documented_scheme() {
    let problem = LeastSquares::new(1, 8, 3, 2);
    let cases: Vec<(Box<dyn Optimizer>, &[&str])> = vec![
        (Box::new(Sgd::new(0.1)), &[]),
        (
            Box::new(Sgd::new(0.1).with_momentum(0.9, true)),
            &["v/b", "v/w"],
        ),
        (Box::new(Adam::new(0.1)), &["m/b", "v/b", "m/w", "v/w"]),
        (Box::new(AdamW::new(0.1)), &["m/b", "v/b", "m/w", "v/w"]),
        (Box::new(Lion::new(0.1)), &["m/b", "m/w"]),
        (Box::new(Muon::new(0.1)), &["m/b", "m/w"]),
    ];
    for (mut opt, want) in cases {
        let mut params = problem.init();
        train_step(opt.as_mut(), &problem, &mut params);
        let state = opt.state_dict().unwrap();
        let names: Vec<&str> = state.buffers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, want);
        assert_eq!(state.step, 1);
        for (n, v) in &state.buffers {
            let len = if n.ends_with("/w") { 6 } else { 2 };
            assert_eq!(v.len(), len, "{n}");
        }
    }
}

#[test]
fn foreign_or_malformed_state_is_rejected_and_leaves_the_optimizer_unchanged() {
    let problem = LeastSquares::new(1, 8, 3, 2);
    let snapshot = |make: fn() -> Box<dyn Optimizer>| {
        let mut opt = make();
        let mut params = problem.init();
        train_step(opt.as_mut(), &problem, &mut params);
        opt.state_dict().unwrap()
    };
    let adam_state = snapshot(|| Box::new(Adam::new(0.1)));
    let lion_state = snapshot(|| Box::new(Lion::new(0.1)));
    let sgd_state = snapshot(|| Box::new(Sgd::new(0.1).with_momentum(0.9, false)));
    let mut missing_v = adam_state.clone();
    missing_v.buffers.retain(|(n, _)| n != "v/w");
    let mut ragged = adam_state.clone();
    ragged.buffers[0].1.push(0.0);
    let mut no_prefix = lion_state.clone();
    no_prefix.buffers[0].0 = "momentum_b".into();

    let cases: Vec<(Box<dyn Optimizer>, Vec<&OptimizerState>)> = vec![
        (
            Box::new(Sgd::new(0.1).with_momentum(0.9, false)),
            vec![&adam_state, &lion_state],
        ),
        (
            Box::new(Adam::new(0.1)),
            vec![&lion_state, &sgd_state, &missing_v, &ragged],
        ),
        (
            Box::new(AdamW::new(0.1)),
            vec![&lion_state, &sgd_state, &missing_v, &ragged],
        ),
        (
            Box::new(Lion::new(0.1)),
            vec![&adam_state, &sgd_state, &no_prefix],
        ),
        (
            Box::new(Muon::new(0.1)),
            vec![&adam_state, &sgd_state, &no_prefix],
        ),
    ];
    for (mut opt, bad_states) in cases {
        let mut params = problem.init();
        for _ in 0..2 {
            train_step(opt.as_mut(), &problem, &mut params);
        }
        let before = opt.state_dict().unwrap();
        for bad in bad_states {
            assert!(!opt.load_state_dict(bad), "accepted {bad:?}");
            assert_eq!(opt.state_dict().unwrap(), before);
        }
    }
}

#[test]
fn loading_replaces_all_existing_state() {
    // A fresh optimizer's (empty) state wipes the accumulated momentum and step.
    let problem = LeastSquares::new(1, 8, 3, 2);
    let mut opt = Adam::new(0.1);
    let mut params = problem.init();
    train_step(&mut opt, &problem, &mut params);
    assert!(opt.load_state_dict(&OptimizerState::default()));
    assert_eq!(opt.current_step(), 0);
    assert_eq!(opt.state_dict().unwrap(), OptimizerState::default());
}
