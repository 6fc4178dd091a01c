//! W10: `vmap(grad(f))` with `f(x) = Σ x·x·sin x`, `x: [1024]`, batch 256.
//!
//! Builds the batched gradient function once, compiles it once (`jit`), checks one
//! result against the analytic derivative `2x·sin x + x²·cos x`, warms up, then
//! prints the median wall time per call. `RLX_BENCH_ITERS` sets the number of timed
//! calls (default 30).
//!
//! ```text
//! cargo run --release -p rlx-tensor --features autodiff,eval --example bench_w10
//! ```

use rlx_tensor::{Func, shape};
use std::time::{Duration, Instant};

const N: usize = 1024;
const BATCH: usize = 256;

fn main() {
    let f = Func::new("w10", |s| {
        let x = s.input("x", shape![N]);
        (&(&x * &x) * &x.sin()).sum_all()
    });
    let t0 = Instant::now();
    let batched = f.grad(&["x"]).vmap(&["x"], BATCH);
    let build = t0.elapsed();
    let t1 = Instant::now();
    let compiled = batched.jit();
    let compile = t1.elapsed();

    let xs: Vec<f32> = (0..N * BATCH)
        .map(|i| ((i as f32) * 0.001).sin() * 3.0)
        .collect();
    let out = compiled.run(&[("x", &xs)]);
    let max_err = out[0]
        .iter()
        .zip(&xs)
        .map(|(g, x)| (g - (2.0 * x * x.sin() + x * x * x.cos())).abs() / (1.0 + g.abs()))
        .fold(0.0f32, f32::max);
    assert!(max_err < 1e-4, "wrong gradient: relative error {max_err}");

    for _ in 0..3 {
        std::hint::black_box(compiled.run(&[("x", &xs)]));
    }
    let iters: usize = std::env::var("RLX_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let mut times: Vec<Duration> = (0..iters.max(1))
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(compiled.run(&[("x", &xs)]));
            t.elapsed()
        })
        .collect();
    times.sort();
    let median = times[times.len() / 2];
    let per_elem = median.as_secs_f64() * 1e9 / (N * BATCH) as f64;
    println!(
        "W10 vmap(grad(sum(x*x*sin x))) x:[{N}] batch {BATCH}: median {:.3} ms/call over {} calls ({per_elem:.2} ns/element; transform {:.1} ms, compile {:.1} ms, max rel err {max_err:.1e})",
        median.as_secs_f64() * 1e3,
        times.len(),
        build.as_secs_f64() * 1e3,
        compile.as_secs_f64() * 1e3,
    );
}
