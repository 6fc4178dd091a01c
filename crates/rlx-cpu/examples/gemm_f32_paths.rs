//! f32 GEMM throughput of faer's path against the own AVX-512 path
//! ([`rlx_cpu::gemm::F32Path`]) in one process, calls interleaved (faer, own, faer, own,
//! …) so that both see the same machine load, medians of many calls, on 1 and 2 threads.
//! Shapes: squares 256³–2048³, W5/W6's MLP products, W11's transformer products (forward,
//! input gradient `dY·Wᵀ`, weight gradient `Xᵀ·dY`) and attention-style batches of 64
//! small products run one per thread as the contraction executor runs them. Layouts: `NN`
//! both row-major, `NT` B read transposed, `TN` A read transposed.
//!
//! `cargo run --release -p rlx-cpu --example gemm_f32_paths [-- --quick] [--cpu-time] [--only W11]`
//! (`--cpu-time`: single-thread rows timed by the thread's CPU time, not wall time.)
//! (`crates/rlx-bench/peers/w4_torch.py --gemm-shapes` prints torch's rates for the same rows.)

use rlx_cpu::gemm::{F32Path, MatMut, MatRef, sgemm_with};
use std::time::Instant;

/// One row of the table: `batch` products of `m × k · k × n` in layout `lay`.
struct Case {
    name: &'static str,
    m: usize,
    k: usize,
    n: usize,
    lay: &'static str,
    batch: usize,
}

const fn case(name: &'static str, m: usize, k: usize, n: usize, lay: &'static str) -> Case {
    Case {
        name,
        m,
        k,
        n,
        lay,
        batch: 1,
    }
}

const CASES: &[Case] = &[
    case("sq256", 256, 256, 256, "NN"),
    case("sq512", 512, 512, 512, "NN"),
    case("sq1024", 1024, 1024, 1024, "NN"),
    case("sq2048", 2048, 2048, 2048, "NN"),
    case("W5 l1", 1024, 784, 512, "NN"),
    case("W5 l2", 1024, 512, 512, "NN"),
    case("W6 l1", 256, 784, 512, "NN"),
    case("W6 l2", 256, 512, 512, "NN"),
    case("W6 dW1", 784, 256, 512, "TN"),
    case("W6 dX2", 256, 512, 512, "NT"),
    case("W11 qkv", 1024, 256, 768, "NN"),
    case("W11 proj", 1024, 256, 256, "NN"),
    case("W11 fc", 1024, 256, 1024, "NN"),
    case("W11 fc2", 1024, 1024, 256, "NN"),
    case("W11 head", 1024, 256, 512, "NT"),
    case("W11 dXqkv", 1024, 768, 256, "NT"),
    case("W11 dXfc2", 1024, 256, 1024, "NT"),
    case("W11 dWqkv", 256, 1024, 768, "TN"),
    case("W11 dWfc2", 1024, 1024, 256, "TN"),
    Case {
        name: "att qk 64x",
        m: 128,
        k: 32,
        n: 128,
        lay: "NT",
        batch: 64,
    },
    Case {
        name: "att pv 64x",
        m: 128,
        k: 128,
        n: 32,
        lay: "NN",
        batch: 64,
    },
];

/// Operands of one case (each batch its own A, B, C) and a way to run them.
struct Bufs {
    a: Vec<Vec<f32>>,
    b: Vec<Vec<f32>>,
    c: Vec<Vec<f32>>,
}

fn views<'a>(
    cs: &Case,
    a: &'a [f32],
    b: &'a [f32],
    c: &'a mut [f32],
) -> (MatRef<'a, f32>, MatRef<'a, f32>, MatMut<'a, f32>) {
    let (m, k, n) = (cs.m, cs.k, cs.n);
    let av = if cs.lay.starts_with('T') {
        MatRef::row_major(a, k, m).t()
    } else {
        MatRef::row_major(a, m, k)
    };
    let bv = if cs.lay.ends_with('T') {
        MatRef::row_major(b, n, k).t()
    } else {
        MatRef::row_major(b, k, n)
    };
    (av, bv, MatMut::row_major(c, m, n))
}

fn run(cs: &Case, bufs: &mut Bufs, path: F32Path, threads: usize) {
    if cs.batch == 1 {
        let (a, b, c) = views(cs, &bufs.a[0], &bufs.b[0], &mut bufs.c[0]);
        sgemm_with(path, 1.0, a, b, 0.0, c, threads);
        return;
    }
    // Many small products: one thread each, side by side (the contraction executor's
    // split for a batch of small matmuls).
    use rayon::prelude::*;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    pool.install(|| {
        bufs.c
            .par_iter_mut()
            .zip(bufs.a.par_iter().zip(bufs.b.par_iter()))
            .for_each(|(c, (a, b))| {
                let (a, b, c) = views(cs, a, b, c);
                sgemm_with(path, 1.0, a, b, 0.0, c, 1);
            });
    });
}

/// CPU time of the calling thread, in seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let cpu_time = args.iter().any(|a| a == "--cpu-time");
    // `--only <text>`: just the cases whose name contains it.
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1));
    let own = F32Path::Avx512;
    if !own.available() {
        println!("this CPU has no AVX-512 F/BW: only faer's path exists here; nothing to compare");
        return;
    }
    println!(
        "f32 GEMM GFLOP/s of interleaved calls: median (faer, own AVX-512, own/faer) | best\n\
         {:<12} {:>16} {:>4} {:>9} {:>9} {:>6} | {:>9} {:>9} {:>6}",
        "case", "m×k×n", "thr", "faer", "own", "ratio", "faer", "own", "ratio"
    );
    for cs in CASES {
        if only.is_some_and(|o| !cs.name.contains(o.as_str())) {
            continue;
        }
        let (m, k, n) = (cs.m, cs.k, cs.n);
        let mut seed = 1u32;
        let mut fill = |len: usize| -> Vec<f32> {
            (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
                })
                .collect()
        };
        let mut bufs = Bufs {
            a: (0..cs.batch).map(|_| fill(m * k)).collect(),
            b: (0..cs.batch).map(|_| fill(k * n)).collect(),
            c: (0..cs.batch).map(|_| vec![0f32; m * n]).collect(),
        };
        let flops = 2.0 * (m * n * k * cs.batch) as f64;
        // About 0.15 s (quick: 0.04 s) of work per path at 100 GFLOP/s, 9..201 samples.
        let budget = if quick { 4e9 } else { 1.5e10 };
        let reps = ((budget / flops) as usize).clamp(9, 201);
        for threads in [1, 2] {
            let mut t = [Vec::new(), Vec::new()];
            for path in [F32Path::Faer, own] {
                run(cs, &mut bufs, path, threads); // warm-up (packing buffers, pages)
            }
            for _ in 0..reps {
                for (i, path) in [F32Path::Faer, own].into_iter().enumerate() {
                    // One serial product runs on this thread: its CPU time leaves out the
                    // time other processes held the core (`--cpu-time`).
                    let thread_cpu = cpu_time && threads == 1 && cs.batch == 1;
                    let (s, c0) = (Instant::now(), thread_cpu_s());
                    run(cs, &mut bufs, path, threads);
                    t[i].push(if thread_cpu {
                        thread_cpu_s() - c0
                    } else {
                        s.elapsed().as_secs_f64()
                    });
                }
            }
            // Median, and best (the least disturbed call on a shared machine).
            let g = t.map(|mut v| {
                let med = flops / median(&mut v) / 1e9;
                (med, flops / v[0] / 1e9)
            });
            println!(
                "{:<12} {:>16} {:>4} {:>9.1} {:>9.1} {:>6.2} | {:>9.1} {:>9.1} {:>6.2}",
                cs.name,
                format!("{m}×{k}×{n} {}", cs.lay),
                threads,
                g[0].0,
                g[1].0,
                g[1].0 / g[0].0,
                g[0].1,
                g[1].1,
                g[1].1 / g[0].1
            );
        }
    }
}
