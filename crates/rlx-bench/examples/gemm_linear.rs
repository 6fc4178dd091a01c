//! bf16 Linear layers as a Llama prefill runs them: `y = x · Wᵀ` with `x` a prompt's
//! activations (`m × k`, row-major) and `W` the weight (`n × k`, row-major, read through
//! its transpose), on rlx's default bf16 path (AMX where present), and PyTorch's
//! `F.linear` on the same shapes right after, in GFLOP/s, on 1 and 2 threads.
//!
//! `cargo run --release -p rlx-bench --example gemm_linear [-- MxNxK… [--threads=1] [--hot] [--no-torch]]`
//! (default shapes: W12's q, k/v, gate/up and down projections at a 128-token prompt).
//! Each call gets the next of enough weight copies to fill 64 MiB, so the weight comes
//! from outside the core's caches as in a prefill (`--hot`: one weight, cache-resident).

#[path = "common/mod.rs"]
mod common;

use rlx_cpu::gemm::MatMut;
use rlx_cpu::gemm::MatRef;
use rlx_cpu::gemm::lowp::{LowpPath, bf16, gemm_half};
use std::time::{Duration, Instant};

/// Best wall time of repeated runs (at least 15, and at least ~0.5 s in all).
fn best(mut f: impl FnMut()) -> Duration {
    f();
    let mut best = Duration::MAX;
    let start = Instant::now();
    let mut reps = 0;
    while reps < 15 || start.elapsed() < Duration::from_millis(500) {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
        reps += 1;
    }
    best
}

/// How many copies of a weight to rotate through so that each call finds it outside the
/// core's caches (as a prefill does: every layer's weight is used once per prompt): 64 MiB
/// of weights in all, or 1 copy with `--hot`.
fn copies(n: usize, k: usize) -> usize {
    if std::env::args().any(|a| a == "--hot") {
        1
    } else {
        ((64 << 20) / (2 * n * k)).max(2)
    }
}

fn bf16_data(n: usize, seed: u64) -> Vec<bf16> {
    common::data(n, seed)
        .into_iter()
        .map(bf16::from_f32)
        .collect()
}

/// GFLOP/s of `x · Wᵀ` on rlx's default bf16 path.
fn time_rlx((m, n, k): (usize, usize, usize), threads: usize) -> f64 {
    let x = bf16_data(m * k, 1);
    let ws: Vec<Vec<bf16>> = (0..copies(n, k))
        .map(|i| bf16_data(n * k, 2 + i as u64))
        .collect();
    let mut y = vec![0f32; m * n];
    let mut turn = 0;
    let t = best(|| {
        turn = (turn + 1) % ws.len();
        gemm_half(
            MatRef::row_major(&x, m, k),
            MatRef::row_major(&ws[turn], n, k).t(),
            MatMut::row_major(&mut y, m, n),
            false,
            threads,
        );
    });
    2.0 * (m * n * k) as f64 / t.as_secs_f64() / 1e9
}

/// `F.linear` GFLOP/s per (shape, threads), if PyTorch runs here.
fn torch(shapes: &[(usize, usize, usize)], threads: &[usize]) -> Option<Vec<f64>> {
    let hot = if std::env::args().any(|a| a == "--hot") {
        1
    } else {
        0
    };
    let script = format!(
        r#"
import time, torch
for th in {threads:?}:
    torch.set_num_threads(th)
    for (m, n, k) in {shapes:?}:
        x = torch.rand(m, k).sub(0.5).to(torch.bfloat16)
        ws = [torch.rand(n, k).sub(0.5).to(torch.bfloat16) for _ in range({hot} or max(2, (64 << 20) // (2 * n * k)))]
        turn = [0]
        def f():
            turn[0] = (turn[0] + 1) % len(ws)
            torch.nn.functional.linear(x, ws[turn[0]])
        f()
        best, reps, t0 = 1e9, 0, time.perf_counter()
        while reps < 15 or time.perf_counter() - t0 < 0.6:
            t = time.perf_counter(); f(); best = min(best, time.perf_counter() - t); reps += 1
        print(2 * m * n * k / best / 1e9, flush=True)
"#
    );
    let stdout = common::run_python(&script)?;
    Some(
        stdout
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect(),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut shapes: Vec<(usize, usize, usize)> = args
        .iter()
        .filter_map(|a| {
            let v: Vec<usize> = a
                .split('x')
                .map(|d| d.parse().ok())
                .collect::<Option<_>>()?;
            (v.len() == 3).then(|| (v[0], v[1], v[2]))
        })
        .collect();
    if shapes.is_empty() {
        shapes = vec![
            (128, 768, 768),
            (128, 256, 768),
            (128, 2048, 768),
            (128, 768, 2048),
        ];
    }
    let threads: Vec<usize> = match args.iter().find_map(|a| a.strip_prefix("--threads=")) {
        Some(t) => vec![t.parse().expect("--threads=N")],
        None => vec![1, 2],
    };
    let cpu = common::cpu_name();
    println!("CPU: {cpu}");
    println!("bf16 path: {}", LowpPath::default_for::<bf16>().name());
    let mut rows = Vec::new();
    for &th in &threads {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(th)
            .build()
            .expect("thread pool");
        for &s in &shapes {
            rows.push((s, th, pool.install(|| time_rlx(s, th))));
        }
    }
    let peer = if args.iter().any(|a| a == "--no-torch") {
        None
    } else {
        torch(&shapes, &threads)
    };
    println!(
        "\n{:>16} {:>3} | {:>8} {:>8} | {:>9}",
        "m x n x k", "thr", "rlx", "torch", "rlx/torch"
    );
    for (i, ((m, n, k), th, ours)) in rows.into_iter().enumerate() {
        let t = peer
            .as_ref()
            .and_then(|p| p.get(i).copied())
            .unwrap_or(f64::NAN);
        println!(
            "{:>16} {th:>3} | {ours:>8.0} {t:>8.0} | {:>8.2}x",
            format!("{m}x{n}x{k}"),
            ours / t
        );
    }
    println!("(GFLOP/s, best of repeated runs; y = x · Wᵀ, bf16 operands, f32 result)");
}
