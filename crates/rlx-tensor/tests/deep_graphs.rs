//! Graphs far deeper than any thread's stack is tall: tracing, compiling, running,
//! differentiating, transforming and dropping them must not recurse once per node.
//! Every test runs on a thread with a 256 KiB stack (a recursive walk overflows it
//! within a few thousand nodes) and checks its values against plain loops.
#![cfg(all(feature = "autodiff", feature = "eval"))]

use rlx_tensor::{Func, Tensor, shape};

/// Run `f` on a thread with a 256 KiB stack.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("the deep-graph thread panicked (an overflow aborts the process instead)")
}

fn close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: {g} vs {w}"
        );
    }
}

const START: [f32; 8] = [0.5, -2.0, 3.0, 0.0, -0.25, 1.5, -7.0, 0.1];

/// `steps` rounds of `x = tanh(x + 0.1)` (two ops each) as a traced chain.
fn tanh_chain(x: &Tensor, steps: usize) -> Tensor {
    let mut x = x.clone();
    for _ in 0..steps {
        x = (&x + 0.1).tanh();
    }
    x
}

/// The same rounds in f64.
fn tanh_chain_ref(steps: usize) -> Vec<f64> {
    START
        .iter()
        .map(|&v| {
            let mut r = v as f64;
            for _ in 0..steps {
                r = (r + 0.1).tanh();
            }
            r
        })
        .collect()
}

#[test]
fn a_million_op_chain_traces_compiles_runs_and_drops_on_a_small_stack() {
    const OPS: usize = 1_000_000;
    on_small_stack(|| {
        let x = Tensor::from_vec(START.to_vec(), [START.len()]);
        let y = tanh_chain(&x, OPS / 2);
        let got = y.to_vec();
        // The map is a contraction, so f32 rounding does not accumulate.
        close(&got, &tanh_chain_ref(OPS / 2), 1e-5);
        drop(y);
        drop(x);
    });
}

#[test]
fn a_chain_too_deep_for_one_kernel_is_split_and_stays_exact() {
    // Just past the fuser's depth cap, on data long enough to run in several tiles.
    let steps = rlx_compile::fuse::MAX_FUSED_DEPTH / 2 + 3;
    let n = 5000;
    let start: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let got = on_small_stack(move || {
        let x = Tensor::from_vec(start, [n]);
        tanh_chain(&x, steps).to_vec()
    });
    let want: Vec<f64> = (0..n)
        .map(|i| {
            let mut r = ((i as f32 * 0.37).sin() * 3.0) as f64;
            for _ in 0..steps {
                r = (r + 0.1).tanh();
            }
            r
        })
        .collect();
    close(&got, &want, 1e-5);
}

/// `steps` rounds of `x = x + 1e-4·tanh(x)` (three ops each), traced.
fn drift_chain(x: &Tensor, steps: usize) -> Tensor {
    let mut x = x.clone();
    for _ in 0..steps {
        x = &x + &(x.tanh() * 1e-4);
    }
    x
}

/// Per start value: the chain's value and its derivative `Π (1 + 1e-4·(1 − tanh²x))`,
/// with the forward values rounded to f32 as the traced chain computes them.
fn drift_chain_ref(start: &[f32], steps: usize) -> (Vec<f64>, Vec<f64>) {
    start
        .iter()
        .map(|&v| {
            let (mut x, mut d) = (v, 1.0f64);
            for _ in 0..steps {
                let t = (x as f64).tanh();
                d *= 1.0 + 1e-4 * (1.0 - t * t);
                x += (t * 1e-4) as f32;
            }
            (x as f64, d)
        })
        .unzip()
}

#[test]
fn grad_of_a_hundred_thousand_op_chain_matches_the_hand_derived_product() {
    // `x = -(x·a) + b`, three ops a round: the gradient is `(−a)^rounds`, and the
    // backward pass is a 100,000-op chain of its own.
    const OPS: usize = 100_002;
    const A: f64 = 1.0 + 1e-5;
    let rounds = OPS / 3;
    let (got_y, got_g) = on_small_stack(move || {
        let x = Tensor::from_vec(START.to_vec(), [START.len()]);
        let mut y = x.clone();
        for _ in 0..rounds {
            y = -(&y * A) + 0.001;
        }
        let g = y.sum_all().grad(&[&x]).remove(0);
        (y.to_vec(), g.to_vec())
    });
    let want_y: Vec<f64> = START
        .iter()
        .map(|&v| {
            let mut r = v;
            for _ in 0..rounds {
                r = -(r * A as f32) + 0.001;
            }
            r as f64
        })
        .collect();
    close(&got_y, &want_y, 1e-4);
    let d = (-(A as f32 as f64)).powi(rounds as i32);
    close(&got_g, &[d; START.len()], 1e-4);
}

/// A `Func` of one input `x` of 8 elements: the drift chain, summed.
fn drift_func(steps: usize) -> Func {
    Func::new("deep", move |s| {
        let x = s.input("x", shape![START.len()]);
        drift_chain(&x, steps).sum_all()
    })
}

#[test]
fn deep_func_grad_jvp_and_vmap_run_on_a_small_stack() {
    // 9,000 ops: past the fuser's depth cap, so the forward values the derivatives read
    // cross kernels.
    const STEPS: usize = 3_000;
    let (grad, jvp, vmap) = on_small_stack(|| {
        let f = drift_func(STEPS);
        let grad = f.grad(&["x"]).run(&[("x", &START)]).remove(0);
        let tangent = [1.0f32, 0.5, -1.0, 2.0, 0.0, 1.0, -0.5, 0.25];
        let jvp = f.jvp(&["x"]).run(&[("x", &START), ("tangent_x", &tangent)]);
        let batch: Vec<f32> = START.iter().chain(START.iter().rev()).copied().collect();
        let vmap = f.vmap(&["x"], 2).run(&[("x", &batch)]).remove(0);
        (grad, jvp, vmap)
    });
    let (ys, ds) = drift_chain_ref(&START, STEPS);
    close(&grad, &ds, 1e-4);
    let sum: f64 = ys.iter().sum();
    close(&jvp[0], &[sum], 1e-5);
    let tangent = [1.0f64, 0.5, -1.0, 2.0, 0.0, 1.0, -0.5, 0.25];
    let dir: f64 = ds.iter().zip(&tangent).map(|(d, t)| d * t).sum();
    close(&jvp[1], &[dir], 1e-4);
    // Both examples hold the same values (reversed), so both sums are `sum`.
    close(&vmap, &[sum, sum], 1e-5);
}

#[test]
fn a_deep_history_is_adopted_verified_printed_and_explained_on_a_small_stack() {
    const STEPS: usize = 50_000;
    let (got, verified, lines, explained) = on_small_stack(|| {
        let x = Tensor::from_vec(START.to_vec(), [START.len()]);
        let y = tanh_chain(&x, STEPS);
        // A tensor of another graph: combining copies y's 100,000-op history into it.
        let other = Tensor::from_vec(vec![1.0; START.len()], [START.len()]);
        let z = &other + &y;
        assert!(!z.shares_graph(&y));
        let g = z.to_graph();
        let verified = g.verify().is_ok();
        let lines = g.to_string().lines().count();
        let _ = format!("{g:?}");
        let explained = z.explain();
        (z.to_vec(), verified, lines, explained)
    });
    let want: Vec<f64> = tanh_chain_ref(STEPS).iter().map(|v| v + 1.0).collect();
    close(&got, &want, 1e-5);
    assert!(verified);
    assert!(lines > 2 * STEPS, "{lines} lines");
    assert!(explained.contains("kernel"), "{explained}");
}
