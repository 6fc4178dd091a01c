//! Elementwise throughput from cache-resident to DRAM sizes: W1's chain
//! `exp(relu((a + b)·c − 0.5))` and an AdamW-shaped update (4 inputs, 3 outputs, 14 ops).
//! Where the time per element stays flat as the data leaves the caches, the kernels are
//! compute-bound; where it rises, memory-bound.
//!
//! `cargo run --release -p rlx-bench --example ew_sizes [-- <elements>]`

use rlx_tensor::{DType, Func, Jitted, Shape};
use std::time::Instant;

/// Best seconds per call of `call` over 5 rounds of about 64M elements each.
fn per_call(n: usize, call: impl Fn()) -> f64 {
    let reps = ((1usize << 26) / n).max(3);
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                call();
            }
            t.elapsed().as_secs_f64() / reps as f64
        })
        .fold(f64::MAX, f64::min)
}

fn report(what: &str, n: usize, secs: f64, bytes_per_elem: f64) {
    println!(
        "{what:<6} n={n:>9}  {:8.3} ms  {:.3} ns/elem  {:6.1} GB/s",
        secs * 1e3,
        secs * 1e9 / n as f64,
        bytes_per_elem * n as f64 / secs / 1e9
    );
}

fn w1(n: usize) -> Jitted {
    Func::new("w1", |s| {
        let sh = Shape::new(&[n], DType::F32);
        let a = s.input("a", sh.clone());
        let b = s.input("b", sh.clone());
        let c = s.input("c", sh);
        (&(&(&a + &b) * &c) - 0.5f32).relu().exp()
    })
    .jit()
}

fn adamw(n: usize) -> Jitted {
    Func::multi("adamw", |s| {
        let sh = Shape::new(&[n], DType::F32);
        let p = s.input("p", sh.clone());
        let g = s.input("g", sh.clone());
        let m = s.input("m", sh.clone());
        let v = s.input("v", sh);
        let m2 = &(&m * 0.9f32) + &(&g * 0.1f32);
        let v2 = &(&v * 0.999f32) + &(&(&g * 0.001f32) * &g);
        let denom = &(&v2.sqrt() * 1.2f32) + 1e-8f32;
        let p2 = &(&p * 0.99999f32) - &(&(&m2 * 1e-3f32) / &denom);
        vec![p2, m2, v2]
    })
    .jit()
}

fn main() {
    let sizes: Vec<usize> = match std::env::args().nth(1) {
        Some(v) => vec![v.parse().expect("an element count")],
        None => vec![1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24],
    };
    for &n in &sizes {
        let data = |k: f32| -> Vec<f32> { (0..n).map(|i| ((i % 13) as f32 + k) * 0.01).collect() };
        let (a, b, c, d) = (data(1.0), data(2.0), data(3.0), data(4.0));
        let f = w1(n);
        let t = per_call(n, || {
            std::hint::black_box(f.run(&[("a", &a), ("b", &b), ("c", &c)]));
        });
        report("w1", n, t, 16.0);
        let f = adamw(n);
        let t = per_call(n, || {
            std::hint::black_box(f.run(&[("p", &a), ("g", &b), ("m", &c), ("v", &d)]));
        });
        report("adamw", n, t, 28.0);
    }
}
