//! `rlx_tensor::init`: initializer statistics and bounds computed by hand, rule
//! selection, determinism, and the host RNG's shuffling and batching.

use rlx_tensor::init::{self, Init, Nonlinearity, Rng};
use rlx_tensor::{Func, Tensor, graph, shape};

/// Mean and (population) standard deviation in f64.
fn moments(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

fn min_max(v: &[f32]) -> (f32, f32) {
    v.iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

#[test]
fn normal_has_the_requested_mean_and_std() {
    let v = init::normal(3.0, 0.5).sample(&[200, 100], &mut Rng::new(1));
    let (m, s) = moments(&v);
    // 20 000 samples: the mean's standard error is 0.5/141 ≈ 0.0035.
    assert!((m - 3.0).abs() < 0.02, "mean {m}");
    assert!((s - 0.5).abs() < 0.01, "std {s}");
}

#[test]
fn uniform_stays_in_bounds_with_mean_and_std_of_the_interval() {
    let v = init::uniform(-2.0, 6.0).sample(&[20_000], &mut Rng::new(2));
    let (lo, hi) = min_max(&v);
    assert!(lo >= -2.0 && hi < 6.0, "{lo}..{hi}");
    assert!(lo < -1.99 && hi > 5.99, "covers the interval: {lo}..{hi}");
    let (m, s) = moments(&v);
    // U(a, b): mean (a+b)/2 = 2, std (b-a)/√12 = 2.3094.
    assert!((m - 2.0).abs() < 0.05, "mean {m}");
    assert!((s - 8.0 / 12f64.sqrt()).abs() < 0.03, "std {s}");
}

#[test]
fn truncated_normal_stays_within_its_bounds_and_matches_the_truncated_std() {
    let v = init::truncated_normal(1.0, -1.0, 1.0).sample(&[20_000], &mut Rng::new(3));
    let (lo, hi) = min_max(&v);
    assert!(lo >= -1.0 && hi <= 1.0, "{lo}..{hi}");
    let (m, s) = moments(&v);
    // N(0,1) truncated to [-1, 1]: variance 1 - 2·φ(1)/(Φ(1)-Φ(-1)) = 1 - 2·0.241971/0.682689
    // = 0.291125, std 0.539560.
    assert!(m.abs() < 0.02, "mean {m}");
    assert!((s - 0.539560).abs() < 0.01, "std {s}");
}

#[test]
#[should_panic(expected = "init::truncated_normal")]
fn truncated_normal_with_an_empty_interval_panics_with_its_arguments() {
    init::truncated_normal(1.0, 2.0, 1.0).sample(&[3], &mut Rng::new(0));
}

#[test]
#[should_panic(expected = "init::uniform(lo 1, hi 0)")]
fn uniform_with_reversed_bounds_panics_with_its_arguments() {
    init::uniform(1.0, 0.0).sample(&[3], &mut Rng::new(0));
}

#[test]
#[should_panic(expected = "init::uniform")]
fn uniform_with_an_infinite_bound_panics() {
    init::uniform(0.0, f32::INFINITY).sample(&[3], &mut Rng::new(0));
}

#[test]
#[should_panic(expected = "init::normal(mean 0, std -1)")]
fn normal_with_a_negative_std_panics_with_its_arguments() {
    init::normal(0.0, -1.0).sample(&[3], &mut Rng::new(0));
}

#[test]
#[should_panic(expected = "init::normal")]
fn normal_with_a_nan_std_panics() {
    init::normal(0.0, f32::NAN).sample(&[3], &mut Rng::new(0));
}

#[test]
fn fans_follow_the_pytorch_convention() {
    assert_eq!(init::fans(&[300, 100]), (100, 300));
    // conv kernel [out 8, in 4, 3, 3]: receptive field 9.
    assert_eq!(init::fans(&[8, 4, 3, 3]), (36, 72));
    assert_eq!(init::fans(&[7]), (7, 7));
    assert_eq!(init::fans(&[]), (1, 1));
}

#[test]
fn xavier_uniform_bound_and_std_for_a_300_by_100_weight() {
    // bound = √(6 / (100 + 300)) = 0.122474; std of U(-b, b) = b/√3 = 0.070711.
    let v = init::xavier_uniform().sample(&[300, 100], &mut Rng::new(4));
    let bound = 0.122_474_49f32;
    let (lo, hi) = min_max(&v);
    assert!(lo >= -bound && hi <= bound, "{lo}..{hi}");
    assert!(hi > 0.99 * bound && lo < -0.99 * bound);
    let (_, s) = moments(&v);
    assert!((s - 0.070711).abs() < 0.001, "std {s}");
}

#[test]
fn xavier_normal_std_for_a_conv_kernel_and_gain() {
    // [16, 8, 3, 3]: fan_in 72, fan_out 144; std = g·√(2/216) = 2·0.096225 = 0.19245.
    let v = init::xavier_normal()
        .gain(2.0)
        .sample(&[16, 8, 3, 3], &mut Rng::new(5));
    let (m, s) = moments(&v);
    assert!(m.abs() < 0.02, "mean {m}");
    assert!((s - 0.19245).abs() < 0.01, "std {s}");
}

#[test]
fn kaiming_uniform_bound_uses_fan_in_and_relu_gain() {
    // [64, 150]: fan_in 150, bound = √2·√(3/150) = √(6/150) = 0.2.
    let v = init::kaiming_uniform().sample(&[64, 150], &mut Rng::new(6));
    let (lo, hi) = min_max(&v);
    assert!(lo >= -0.2 && hi <= 0.2, "{lo}..{hi}");
    assert!(hi > 0.198 && lo < -0.198);
    // fan_out mode: fan 64, bound √(6/64) = 0.306186.
    let v = init::kaiming_uniform()
        .fan_out()
        .sample(&[64, 150], &mut Rng::new(6));
    let (lo, hi) = min_max(&v);
    assert!(lo >= -0.306_19 && hi <= 0.306_19 && hi > 0.30, "{lo}..{hi}");
}

#[test]
fn kaiming_normal_std_with_tanh_and_leaky_relu_gains() {
    // [50, 400]: fan_in 400; tanh gain 5/3 → std 5/3/20 = 0.083333.
    let v = init::kaiming_normal()
        .nonlinearity(Nonlinearity::Tanh)
        .sample(&[50, 400], &mut Rng::new(7));
    let (_, s) = moments(&v);
    assert!((s - 0.083333).abs() < 0.002, "std {s}");
    // leaky relu 0.2: gain √(2/1.04) = 1.386750 → std 0.069338.
    let v = init::kaiming_normal()
        .nonlinearity(Nonlinearity::LeakyRelu(0.2))
        .sample(&[50, 400], &mut Rng::new(7));
    let (_, s) = moments(&v);
    assert!((s - 0.069338).abs() < 0.002, "std {s}");
}

#[test]
fn constants_fill_exactly() {
    let mut r = Rng::new(0);
    assert_eq!(init::zeros().sample(&[2, 3], &mut r), vec![0.0; 6]);
    assert_eq!(init::ones().sample(&[4], &mut r), vec![1.0; 4]);
    assert_eq!(init::constant(-0.5).sample(&[1, 1], &mut r), vec![-0.5]);
    assert!(init::normal(0.0, 1.0).sample(&[0, 5], &mut r).is_empty());
}

#[test]
fn the_first_matching_rule_wins_and_the_default_covers_the_rest() {
    let rules = Init::new(9)
        .rule(|_, s| s.len() < 2, init::zeros())
        .rule(|n, _| n.ends_with("weight"), init::xavier_uniform())
        .rule(|n, _| n.contains("norm"), init::ones())
        .default(init::constant(0.25));
    assert_eq!(rules.initializer_for("norm.bias", &[4]), init::zeros());
    assert_eq!(
        rules.initializer_for("norm.weight", &[4, 4]),
        init::xavier_uniform()
    );
    assert_eq!(rules.initializer_for("norm.scale", &[4, 4]), init::ones());
    assert_eq!(rules.sample("emb", &[2, 2]), vec![0.25; 4]);
}

#[test]
fn a_params_values_depend_only_on_seed_name_and_shape() {
    let a = Init::new(1).default(init::normal(0.0, 1.0));
    let b = Init::new(1)
        .rule(|n, _| n == "other", init::zeros())
        .default(init::normal(0.0, 1.0));
    assert_eq!(a.sample("w", &[3, 3]), b.sample("w", &[3, 3]));
    assert_ne!(a.sample("w", &[3, 3]), a.sample("v", &[3, 3]));
    assert_ne!(a.sample("w", &[3, 3]), Init::new(2).sample("w", &[3, 3]));
}

#[test]
fn init_plugs_into_func_init_params_and_graph_weights() {
    let f = Func::new("mlp", |s| {
        let x = s.input("x", shape![?, 4]);
        let w = s.param("fc.weight", shape![6, 4]);
        let b = s.param("fc.bias", shape![6]);
        x.linear(&w, &b)
    });
    let rules = Init::new(0)
        .rule(|_, s| s.len() < 2, init::zeros())
        .default(init::kaiming_uniform());
    let f = f.init_params(rules.to_fn());
    assert_eq!(f.param_binding("fc.bias").unwrap(), &[0.0; 6]);
    let w = f.param_binding("fc.weight").unwrap();
    assert_eq!(w.len(), 24);
    assert!(w.iter().all(|v| v.abs() <= (6.0f32 / 4.0).sqrt()));
    assert_eq!(w, rules.sample("fc.weight", &[6, 4]).as_slice());

    let g = graph("g", |s| {
        (s.param("a", shape![2, 3]) + s.param("b", shape![3])).sum_all()
    });
    let weights = rules.weights(&g);
    let names: Vec<&str> = weights.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec!["a", "b"]);
    assert_eq!(weights[1].1, vec![0.0; 3]);
    assert_eq!(weights[0].1, rules.sample("a", &[2, 3]));
}

#[test]
fn rng_matches_the_tensor_constructors_stream() {
    let mut r = Rng::new(77);
    let host: Vec<f32> = (0..5).map(|_| r.uniform()).collect();
    let t = Tensor::rand([5], 77);
    #[cfg(feature = "eval")]
    assert_eq!(t.to_vec(), host);
    let _ = (t, host);
}

#[test]
fn rng_is_deterministic_per_seed_and_differs_across_seeds() {
    let draw = |seed| {
        let mut r = Rng::new(seed);
        (0..8).map(|_| r.next_u64()).collect::<Vec<_>>()
    };
    assert_eq!(draw(5), draw(5));
    assert_ne!(draw(5), draw(6));
}

#[test]
fn rng_normal_and_uniform_moments() {
    let mut r = Rng::new(8);
    let n: Vec<f32> = (0..20_000).map(|_| r.normal()).collect();
    let (m, s) = moments(&n);
    assert!(m.abs() < 0.03 && (s - 1.0).abs() < 0.02, "{m} {s}");
    let u: Vec<f32> = (0..20_000).map(|_| r.uniform_in(1.0, 3.0)).collect();
    let (m, _) = moments(&u);
    assert!((m - 2.0).abs() < 0.02, "{m}");
}

#[test]
fn gen_range_covers_the_range_evenly() {
    let mut r = Rng::new(10);
    let mut counts = [0usize; 5];
    for _ in 0..10_000 {
        let k = r.gen_range(3..8);
        counts[k - 3] += 1;
    }
    // Expect 2000 each; 5 sigma ≈ 200.
    assert!(
        counts.iter().all(|&c| (1800..2200).contains(&c)),
        "{counts:?}"
    );
}

#[test]
#[should_panic(expected = "Rng::gen_range")]
fn gen_range_on_an_empty_range_panics() {
    Rng::new(0).gen_range(4..4);
}

#[test]
fn shuffle_is_a_permutation_and_moves_elements() {
    let mut r = Rng::new(11);
    let mut v: Vec<u32> = (0..100).collect();
    r.shuffle(&mut v);
    assert_ne!(v, (0..100).collect::<Vec<_>>());
    let mut sorted = v.clone();
    sorted.sort();
    assert_eq!(sorted, (0..100).collect::<Vec<_>>());
    // Every position is equally likely for element 0 over many shuffles of 4.
    let mut first = [0usize; 4];
    for _ in 0..4000 {
        let p = r.permutation(4);
        first[p.iter().position(|&x| x == 0).unwrap()] += 1;
    }
    assert!(first.iter().all(|&c| (850..1150).contains(&c)), "{first:?}");
}

#[test]
fn batches_cover_every_index_once_per_epoch() {
    let mut r = Rng::new(12);
    let epoch1: Vec<Vec<usize>> = r.batches(10, 3).collect();
    assert_eq!(
        epoch1.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![3, 3, 3, 1]
    );
    let mut all = epoch1.concat();
    all.sort();
    assert_eq!(all, (0..10).collect::<Vec<_>>());
    // A new epoch is a new order; drop_last drops the short tail.
    let epoch2 = r.batches(10, 3).drop_last();
    assert_eq!(epoch2.len(), 3);
    assert_ne!(epoch2.order(), epoch1.concat().as_slice());
    assert_eq!(r.batches(0, 4).count(), 0);
}
