//! Parameter groups: every optimizer's grouped step against an f64 reference, group
//! resolution, validation, and the groups' part of `state_dict` / `load_state_dict`.

use super::*;
use crate::{Adam, AdamW, Lion, Muon, Optimizer, OptimizerState, Sgd};

/// Three params: `w` (2-D, the optimizer's own hyperparameters), `b` (1-D, in
/// `no_decay`) and `e` (2-D, in `emb`: lr × 0.25 and its own decay 0.3).
fn params() -> Vec<(&'static str, Vec<usize>, Vec<f32>)> {
    vec![
        ("w", vec![2, 2], vec![0.5, -1.0, 1.5, 2.0]),
        ("b", vec![2], vec![0.25, -0.75]),
        ("e", vec![1, 2], vec![1.0, -2.0]),
    ]
}

/// `emb` first: `e` is 2-D, so `no_decay` would not take it anyway; `b` falls through to
/// `no_decay`.
fn groups() -> [ParamGroup; 2] {
    [
        ParamGroup::new("emb", |name: &str, _: &[usize]| name == "e")
            .lr_scale(0.25)
            .weight_decay(0.3),
        ParamGroup::no_decay_below_rank(2),
    ]
}

/// `(lr_scale, weight decay)` each param gets, given the optimizer's own decay.
fn expected(name: &str, own_wd: f64) -> (f64, f64) {
    match name {
        "w" => (1.0, own_wd),
        "b" => (1.0, 0.0),
        "e" => (0.25, 0.3),
        _ => unreachable!(),
    }
}

/// The learning rate set before each step (as a schedule would).
const LRS: [f32; 3] = [0.1, 0.05, 0.08];

/// Gradient of element `i` of param `name` at step `k` (deterministic, no zeros).
fn grad(name: &str, k: usize, i: usize) -> f32 {
    let seed = name.as_bytes()[0] as usize;
    let x = ((seed * 7 + k * 13 + i * 5) % 17) as f32;
    (x - 8.5) / 4.0
}

/// Steps every param of [`params`] through `LRS.len()` iterations; the final values.
fn run(opt: &mut dyn Optimizer) -> Vec<Vec<f32>> {
    let mut ps = params();
    for (k, &lr) in LRS.iter().enumerate() {
        opt.set_lr(lr);
        for (name, shape, p) in ps.iter_mut() {
            let g: Vec<f32> = (0..p.len()).map(|i| grad(name, k, i)).collect();
            opt.step(name, shape, p, &g);
        }
        opt.end_iteration();
    }
    ps.into_iter().map(|(_, _, p)| p).collect()
}

/// Runs `reference(lr_scale, wd, p0, grads_per_step)` per element and compares with `run`.
fn check_against(
    what: &str,
    opt: &mut dyn Optimizer,
    own_wd: f64,
    tol: f64,
    reference: impl Fn(f64, f64, f64, &[f64]) -> f64,
) {
    let got = run(opt);
    for ((name, _, p0), got) in params().iter().zip(&got) {
        let (scale, wd) = expected(name, own_wd);
        for (i, (&p0, &got)) in p0.iter().zip(got).enumerate() {
            let grads: Vec<f64> = (0..LRS.len()).map(|k| grad(name, k, i) as f64).collect();
            let want = reference(scale, wd, p0 as f64, &grads);
            assert!(
                (got as f64 - want).abs() <= tol * want.abs().max(1.0),
                "{what}: {name}[{i}] = {got}, reference {want}"
            );
        }
    }
}

/// The learning rate of step `k` as the decimal it was written as.
fn lr64(k: usize) -> f64 {
    [0.1, 0.05, 0.08][k]
}

#[test]
fn sgd_groups_replace_the_l2_decay_and_scale_the_lr_like_the_f64_reference() {
    let (mu, own_wd) = (0.9, 0.1);
    for nesterov in [false, true] {
        let mut opt = Sgd::new(1.0)
            .with_momentum(mu as f32, nesterov)
            .with_weight_decay(own_wd as f32);
        for g in groups() {
            opt = opt.with_group(g);
        }
        check_against("sgd", &mut opt, own_wd, 1e-5, |s, wd, p0, grads| {
            let (mut p, mut v) = (p0, 0.0);
            for (k, &g) in grads.iter().enumerate() {
                let d = g + wd * p;
                v = mu * v + d;
                let u = if nesterov { d + mu * v } else { v };
                p -= lr64(k) * s * u;
            }
            p
        });
    }
}

/// Adam/AdamW for one element with f32 storage of p, m and v; `decoupled` picks AdamW.
fn adam_reference(decoupled: bool, s: f64, wd: f64, p0: f64, grads: &[f64]) -> f64 {
    let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8f64);
    let (mut p, mut m, mut v) = (p0, 0.0f64, 0.0f64);
    for (k, &g) in grads.iter().enumerate() {
        let t = (k + 1) as f64;
        let lr = lr64(k) * s;
        let g = if decoupled { g } else { g + wd * p };
        m = (b1 * m + (1.0 - b1) * g) as f32 as f64;
        v = (b2 * v + (1.0 - b2) * g * g) as f32 as f64;
        let dir = (m / (1.0 - b1.powf(t))) / ((v / (1.0 - b2.powf(t))).sqrt() + eps);
        let decay = if decoupled { wd * p } else { 0.0 };
        p = (p - lr * (dir + decay)) as f32 as f64;
    }
    p
}

#[test]
fn adam_groups_replace_the_coupled_decay_and_scale_the_lr_like_the_f64_reference() {
    let own_wd = 0.2;
    for f32_math in [false, true] {
        let mut opt = Adam::new(1.0)
            .with_weight_decay(own_wd as f32)
            .with_f32_math(f32_math);
        for g in groups() {
            opt = opt.with_group(g);
        }
        let tol = if f32_math { 1e-5 } else { 1e-6 };
        check_against("adam", &mut opt, own_wd, tol, |s, wd, p0, g| {
            adam_reference(false, s, wd, p0, g)
        });
    }
}

#[test]
fn adamw_groups_replace_the_decoupled_decay_and_scale_the_lr_like_the_f64_reference() {
    let own_wd = 0.1;
    let make = |f32_math: bool, torch: bool| {
        let mut opt = if torch {
            AdamW::torch(1.0, (0.9, 0.999), own_wd)
        } else {
            AdamW::new(1.0)
                .with_weight_decay(own_wd as f32)
                .with_f32_math(f32_math)
        };
        for g in groups() {
            opt = opt.with_group(g);
        }
        opt
    };
    for (what, f32_math, torch, tol) in [
        ("adamw/f64", false, false, 1e-6),
        ("adamw/f32", true, false, 1e-5),
        ("adamw/torch", false, true, 1e-6),
    ] {
        check_against(
            what,
            &mut make(f32_math, torch),
            own_wd,
            tol,
            |s, wd, p0, g| adam_reference(true, s, wd, p0, g),
        );
    }
}

#[test]
fn lion_groups_replace_the_decoupled_decay_and_scale_the_lr_like_the_f64_reference() {
    let (b1, b2, own_wd) = (0.9f64, 0.99f64, 0.5);
    let mut opt = Lion::new(1.0).with_weight_decay(own_wd as f32);
    for g in groups() {
        opt = opt.with_group(g);
    }
    check_against("lion", &mut opt, own_wd, 1e-5, |s, wd, p0, grads| {
        let (mut p, mut m) = (p0, 0.0f64);
        for (k, &g) in grads.iter().enumerate() {
            let c = b1 * m + (1.0 - b1) * g;
            p -= lr64(k) * s * (c.signum() + wd * p);
            m = b2 * m + (1.0 - b2) * g;
        }
        p
    });
}

#[test]
fn muon_groups_scale_the_lr_and_replace_the_decay_on_both_branches() {
    let (mu, own_wd) = (0.9f64, 0.2);
    let base = || {
        Muon::new(1.0)
            .with_momentum(mu as f32)
            .with_weight_decay(own_wd as f32)
    };
    let mut grouped = base();
    for g in groups() {
        grouped = grouped.with_group(g);
    }
    let got = run(&mut grouped);
    // `b` (1-D): Nesterov momentum SGD with no decay, against the f64 reference.
    let (_, _, b0) = &params()[1];
    for (i, &p0) in b0.iter().enumerate() {
        let (mut p, mut m) = (p0 as f64, 0.0);
        for (k, lr) in (0..LRS.len()).map(|k| (k, lr64(k))) {
            let g = grad("b", k, i) as f64;
            m = mu * m + g;
            p -= lr * (g + mu * m);
        }
        assert!(
            (got[1][i] as f64 - p).abs() < 1e-5,
            "b[{i}]: {} vs {p}",
            got[1][i]
        );
    }
    // The 2-D params: exactly an ungrouped Muon with the group's lr and decay.
    let mut own = base();
    let mut emb = base().with_weight_decay(0.3);
    let ps = params();
    let (mut w, mut e) = (ps[0].2.clone(), ps[2].2.clone());
    for (k, &lr) in LRS.iter().enumerate() {
        own.set_lr(lr);
        emb.set_lr(lr * 0.25);
        let gw: Vec<f32> = (0..4).map(|i| grad("w", k, i)).collect();
        let ge: Vec<f32> = (0..2).map(|i| grad("e", k, i)).collect();
        own.step("w", &[2, 2], &mut w, &gw);
        emb.step("e", &[1, 2], &mut e, &ge);
    }
    assert_eq!(got[0], w);
    assert_eq!(got[2], e);
    assert_ne!(got[0], params()[0].2, "w moved");
}

#[test]
fn an_optimizer_without_matching_groups_steps_exactly_as_before() {
    // A group that matches nothing must not perturb a single bit.
    let none = || ParamGroup::new("none", |_: &str, _: &[usize]| false).lr_scale(0.5);
    let pairs: Vec<(Box<dyn Optimizer>, Box<dyn Optimizer>)> = vec![
        (
            Box::new(Sgd::new(1.0).with_momentum(0.9, true)),
            Box::new(Sgd::new(1.0).with_momentum(0.9, true).with_group(none())),
        ),
        (
            Box::new(Adam::new(1.0)),
            Box::new(Adam::new(1.0).with_group(none())),
        ),
        (
            Box::new(AdamW::torch(1.0, (0.9, 0.95), 0.1)),
            Box::new(AdamW::torch(1.0, (0.9, 0.95), 0.1).with_group(none())),
        ),
        (
            Box::new(Lion::new(1.0)),
            Box::new(Lion::new(1.0).with_group(none())),
        ),
        (
            Box::new(Muon::new(1.0)),
            Box::new(Muon::new(1.0).with_group(none())),
        ),
    ];
    for (mut plain, mut grouped) in pairs {
        assert_eq!(run(plain.as_mut()), run(grouped.as_mut()));
        assert_eq!(
            plain.state_dict().unwrap().buffers,
            grouped.state_dict().unwrap().buffers
        );
    }
}

#[test]
fn groups_are_tried_in_order_and_the_first_match_wins() {
    let opt = AdamW::new(0.1)
        .with_group(
            ParamGroup::new("head", |n: &str, _: &[usize]| n.starts_with("head.")).lr_scale(0.5),
        )
        .with_group(ParamGroup::no_decay_below_rank(2));
    let name = |n: &str, s: &[usize]| opt.group_of(n, s).map(|g| g.name.as_str());
    assert_eq!(name("head.b", &[3]), Some("head"));
    assert_eq!(name("body.b", &[3]), Some("no_decay"));
    assert_eq!(name("body.w", &[3, 3]), None);
    let names: Vec<&str> = opt.param_groups().iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["head", "no_decay"]);
}

#[test]
fn invalid_groups_are_rejected_with_the_reason_and_nothing_is_added() {
    let any = |name: &str| ParamGroup::new(name, |_: &str, _: &[usize]| true);
    let mut opt = Lion::new(0.1).with_group(any("a"));
    let cases = [
        (any("neg").lr_scale(-0.5), "group `neg` has lr_scale -0.5"),
        (any("nan_lr").lr_scale(f32::NAN), "lr_scale NaN"),
        (any("inf_lr").lr_scale(f32::INFINITY), "lr_scale inf"),
        (
            any("nan_wd").weight_decay(f32::NAN),
            "group `nan_wd` has weight_decay NaN",
        ),
        (any("neg_wd").weight_decay(-0.1), "weight_decay -0.1"),
        (any(""), "needs a non-empty name"),
        (any("a"), "already has a group named `a`"),
    ];
    for (group, want) in cases {
        let err = opt.try_add_group(group).unwrap_err();
        assert!(err.starts_with("Lion::with_group: "), "{err}");
        assert!(err.contains(want), "{want}: {err}");
    }
    assert_eq!(opt.param_groups().len(), 1);
    // Zero is a valid multiplier (frozen params) and a valid decay.
    opt.try_add_group(any("frozen").lr_scale(0.0).weight_decay(0.0))
        .unwrap();
    let mut p = [1.0f32];
    let mut frozen = Lion::new(0.1).with_group(any("frozen").lr_scale(0.0));
    frozen.step("p", &[1], &mut p, &[1.0]);
    assert_eq!(p, [1.0]);
}

#[test]
#[should_panic(expected = "Adam::with_group: this optimizer already has a group named `no_decay`")]
fn with_group_panics_on_a_duplicate_name() {
    let _ = Adam::new(0.1)
        .with_group(ParamGroup::no_decay_below_rank(2))
        .with_group(ParamGroup::no_decay_below_rank(1));
}

#[test]
#[should_panic(expected = "Muon::with_group: group `g` has weight_decay NaN")]
fn with_group_panics_on_a_nan_decay() {
    let _ = Muon::new(0.1)
        .with_group(ParamGroup::new("g", |_: &str, _: &[usize]| true).weight_decay(f32::NAN));
}

#[test]
fn debug_prints_group_names_and_overrides_and_clones_share_the_groups() {
    let opt = Sgd::new(0.1).with_group(ParamGroup::no_decay_below_rank(2).lr_scale(2.0));
    let dbg = format!("{opt:?}");
    assert!(
        dbg.contains(r#"groups: [ParamGroup { name: "no_decay", weight_decay: Some(0.0), lr_scale: 2.0, .. }]"#),
        "{dbg}"
    );
    let copy = opt.clone();
    assert!(copy.group_of("b", &[4]).is_some() && copy.group_of("w", &[4, 4]).is_none());
    fn send_sync<T: Send + Sync + Clone>() {}
    send_sync::<Sgd>();
    send_sync::<Adam>();
    send_sync::<AdamW>();
    send_sync::<Lion>();
    send_sync::<Muon>();
    send_sync::<ParamGroup>();
}

#[test]
fn a_group_added_after_stepping_applies_from_the_next_step() {
    let mut opt = Sgd::new(0.5);
    let mut p = [1.0f32];
    opt.step("p", &[1], &mut p, &[1.0]);
    assert_eq!(p, [0.5]);
    opt.try_add_group(ParamGroup::new("slow", |_: &str, _: &[usize]| true).lr_scale(0.5))
        .unwrap();
    opt.step("p", &[1], &mut p, &[1.0]);
    assert_eq!(p, [0.25]);
}

#[test]
fn the_lr_scale_trait_method_reports_the_group_of_a_stepped_param() {
    let mut opt = Adam::new(0.1)
        .with_group(ParamGroup::new("slow", |_: &str, s: &[usize]| s.len() == 1).lr_scale(0.1));
    let dynopt: &mut dyn Optimizer = &mut opt;
    // Not stepped yet: the shape the predicate needs is unknown.
    assert_eq!(dynopt.lr_scale("b"), 1.0);
    dynopt.step("b", &[2], &mut [0.0, 0.0], &[1.0, 1.0]);
    dynopt.step("w", &[1, 2], &mut [0.0, 0.0], &[1.0, 1.0]);
    assert_eq!((dynopt.lr_scale("b"), dynopt.lr_scale("w")), (0.1, 1.0));
    assert!(dynopt.reset_state());
    assert_eq!(dynopt.lr_scale("b"), 1.0, "reset forgets the params");
}

#[test]
fn the_fused_update_hands_out_each_groups_rule_and_notes_params() {
    let mut opt = Sgd::new(0.5)
        .with_weight_decay(0.1)
        .with_group(ParamGroup::no_decay_below_rank(2).lr_scale(0.5));
    let mut fu = opt.fused().unwrap();
    assert_eq!(fu.param_groups().len(), 1);
    assert_eq!(fu.group_index("b", &[3]), Some(0));
    let sgd = |lr, weight_decay| crate::FusedRule::Sgd {
        lr,
        momentum: 0.0,
        nesterov: false,
        weight_decay,
    };
    assert_eq!(fu.rule, sgd(0.5, 0.1));
    assert_eq!(*fu.rule_for("b", &[3]), sgd(0.25, 0.0));
    assert_eq!(fu.group_rule(None), &fu.rule);
    fu.note_param("b", &[3]);
    let state = opt.state_dict().unwrap();
    assert_eq!(
        state.param_group("b").unwrap().group.as_deref(),
        Some("no_decay")
    );
    assert_eq!(opt.lr_scale("b"), 0.5);
}

#[test]
#[should_panic(expected = "FusedUpdate::group_rule: group index 3 but Lion has 1 param groups")]
fn an_out_of_range_group_index_panics_with_the_count() {
    let mut opt = Lion::new(0.1).with_group(ParamGroup::no_decay_below_rank(2));
    let fu = opt.fused().unwrap();
    let _ = fu.group_rule(Some(3));
}

/// Builds a fresh optimizer.
type Make = fn() -> Box<dyn Optimizer>;

/// Every optimizer kind, built with [`groups`].
fn grouped_optimizers() -> Vec<(&'static str, Make)> {
    vec![
        ("sgd", || {
            let o = Sgd::new(0.1)
                .with_momentum(0.9, false)
                .with_weight_decay(0.1);
            Box::new(groups().into_iter().fold(o, Sgd::with_group))
        }),
        ("sgd/plain", || {
            let o = Sgd::new(0.1).with_weight_decay(0.1);
            Box::new(groups().into_iter().fold(o, Sgd::with_group))
        }),
        ("adam", || {
            let o = Adam::new(0.1).with_weight_decay(0.1);
            Box::new(groups().into_iter().fold(o, Adam::with_group))
        }),
        ("adamw", || {
            let o = AdamW::torch(0.1, (0.9, 0.95), 0.1);
            Box::new(groups().into_iter().fold(o, AdamW::with_group))
        }),
        ("lion", || {
            let o = Lion::new(0.1).with_weight_decay(0.1);
            Box::new(groups().into_iter().fold(o, Lion::with_group))
        }),
        ("muon", || {
            let o = Muon::new(0.1).with_weight_decay(0.1);
            Box::new(groups().into_iter().fold(o, Muon::with_group))
        }),
    ]
}

/// One iteration over [`params`] at step `k`.
fn step_all(opt: &mut dyn Optimizer, ps: &mut [(&'static str, Vec<usize>, Vec<f32>)], k: usize) {
    for (name, shape, p) in ps.iter_mut() {
        let g: Vec<f32> = (0..p.len()).map(|i| grad(name, k, i)).collect();
        opt.step(name, shape, p, &g);
    }
    opt.end_iteration();
}

#[test]
fn save_then_load_into_an_equally_grouped_optimizer_gives_the_same_next_step() {
    for (what, make) in grouped_optimizers() {
        let mut first = make();
        let mut ps = params();
        for k in 0..2 {
            step_all(first.as_mut(), &mut ps, k);
        }
        let saved = first.state_dict().unwrap();
        let rec: Vec<(&str, Option<&str>)> = saved
            .param_groups
            .iter()
            .map(|r| (r.param.as_str(), r.group.as_deref()))
            .collect();
        assert_eq!(
            rec,
            [("b", Some("no_decay")), ("e", Some("emb")), ("w", None)],
            "{what}"
        );
        let e = saved.param_group("e").unwrap();
        assert_eq!(
            (&e.shape[..], e.weight_decay, e.lr_scale),
            (&[1, 2][..], Some(0.3), 0.25)
        );

        let mut resumed = make();
        resumed.try_load_state_dict(&saved).unwrap();
        assert_eq!(
            resumed.state_dict().unwrap(),
            saved,
            "{what}: load → state_dict round trip"
        );
        assert_eq!(
            resumed.lr_scale("e"),
            0.25,
            "{what}: shapes restored with the records"
        );
        let mut qs = ps.clone();
        step_all(first.as_mut(), &mut ps, 2);
        step_all(resumed.as_mut(), &mut qs, 2);
        assert_eq!(ps, qs, "{what}: next step after load");
        assert_eq!(first.state_dict(), resumed.state_dict(), "{what}");
    }
}

#[test]
fn loading_a_state_whose_groups_do_not_match_is_an_error_naming_the_param_and_both_groups() {
    let mut src = AdamW::new(0.1).with_weight_decay(0.1);
    for g in groups() {
        src = src.with_group(g);
    }
    let mut ps = params();
    step_all(&mut src, &mut ps, 0);
    let saved = src.state_dict().unwrap();

    let check = |mut opt: AdamW, state: &OptimizerState, want: &[&str]| {
        let mut warm = params();
        step_all(&mut opt, &mut warm, 0);
        let before = opt.state_dict();
        let err = opt.try_load_state_dict(state).unwrap_err();
        assert!(err.starts_with("AdamW::load_state_dict: "), "{err}");
        for w in want {
            assert!(err.contains(w), "{w}: {err}");
        }
        assert!(!opt.load_state_dict(state));
        assert_eq!(opt.state_dict(), before, "a rejected load changes nothing");
    };
    let no_decay = ParamGroup::no_decay_below_rank(2);
    let emb = || ParamGroup::new("emb", |name: &str, _: &[usize]| name == "e");
    // No groups at all: `b` was in `no_decay`.
    check(
        AdamW::new(0.1),
        &saved,
        &[
            "param `b` (shape [2]) was saved in group `no_decay` (weight_decay 0, lr_scale 1)",
            "puts it in no group",
            "clear the state's `param_groups`",
        ],
    );
    // Same names, another override.
    check(
        AdamW::new(0.1)
            .with_group(emb().lr_scale(0.5).weight_decay(0.3))
            .with_group(no_decay.clone()),
        &saved,
        &[
            "param `e` (shape [1, 2]) was saved in group `emb` (weight_decay 0.3, lr_scale 0.25)",
            "puts it in group `emb` (weight_decay 0.3, lr_scale 0.5)",
        ],
    );
    // A predicate that takes `w` too.
    check(
        AdamW::new(0.1)
            .with_group(emb().lr_scale(0.25).weight_decay(0.3))
            .with_group(ParamGroup::no_decay_below_rank(3)),
        &saved,
        &[
            "param `w` (shape [2, 2]) was saved in no group",
            "puts it in group `no_decay` (weight_decay 0, lr_scale 1)",
        ],
    );
    // Malformed records, loaded into an optimizer with the right groups.
    let matching = || {
        let mut o = AdamW::new(0.1);
        for g in groups() {
            o = o.with_group(g);
        }
        o
    };
    matching().try_load_state_dict(&saved).unwrap();
    let mut twice = saved.clone();
    twice.param_groups.push(saved.param_groups[0].clone());
    check(matching(), &twice, &["records param `b`'s group twice"]);
    let mut odd = saved.clone();
    odd.param_groups.retain(|r| r.group.is_none());
    odd.param_groups[0].lr_scale = 2.0;
    check(
        matching(),
        &odd,
        &[
            "record of param `w` names no group but carries overrides (weight_decay the optimizer's, lr_scale 2)",
        ],
    );

    // A state without records loads into any groups (states from before groups existed).
    let mut bare = saved.clone();
    bare.param_groups.clear();
    let mut plain = AdamW::new(0.1);
    plain.try_load_state_dict(&bare).unwrap();
    assert!(
        plain.state_dict().unwrap().param_groups.is_empty(),
        "no groups: no records"
    );
}

#[test]
fn a_state_of_another_optimizer_kind_is_rejected_with_the_buffer_problem() {
    let mut lion = Lion::new(0.1);
    lion.step("w", &[2], &mut [1.0, 2.0], &[0.5, 0.5]);
    let err = Sgd::new(0.1)
        .with_momentum(0.9, false)
        .try_load_state_dict(&lion.state_dict().unwrap())
        .unwrap_err();
    assert!(err.starts_with("Sgd::load_state_dict: the state does not fit: buffer `m/w` is not one this optimizer keeps"), "{err}");
    assert!(err.contains("load a state saved by a Sgd"), "{err}");
}
