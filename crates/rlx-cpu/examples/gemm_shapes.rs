//! f32 GEMM throughput of rlx's paths against MKL in one process: faer's path, the own
//! AVX-512 path (`RLX_GEMM_F32=avx512`), the default (`auto`) and, with `--mkl <lib>`,
//! MKL's Fortran `SGEMM` loaded at run time from a library that exports it (torch's
//! `libtorch_cpu.so` does; its thread count is set per call with
//! `MKL_Set_Num_Threads_Local`). Calls are interleaved (faer, own, auto, MKL, faer, …) so
//! that every library sees the same machine load; medians and bests of many calls, on 1
//! and 2 threads, single-thread rows timed by the thread's CPU time. Shapes: squares
//! 256³–2048³, W5/W6's MLP products and W11's transformer products (M = B·T = 1024
//! rows; forward `NN`, the input gradient `dY·Wᵀ` reads B transposed (`NT`), the weight
//! gradient `Xᵀ·dY` reads A transposed (`TN`)).
//!
//! `cargo run --release -p rlx-cpu --example gemm_shapes -- [--mkl /path/libtorch_cpu.so] [--only W11] [--threads 2]`
//! (set `OMP_WAIT_POLICY=PASSIVE` so MKL's idle OpenMP threads do not spin between its calls).
//! Two-thread MKL rows need both CPUs free: the own kernel's worker lingers up to 1 ms
//! after each of its products (`RLX_GEMM_F32_LINGER_US=0` turns that off), and on the
//! 2-vCPU Sapphire Rapids VM under load ~10 (2026-12-03) MKL's two-thread calls here
//! still mostly ran on one CPU (1024³ medians 110–180 GFLOP/s, bests 320–390), so
//! compare two-thread rows there against torch in its own process
//! (`crates/rlx-bench/peers/w4_torch.py`).
//! `RLX_GEMM_F32_PLAN=<12x32|8x48>,<kc>,<mc>,<nc>` runs the own kernel with another tile and
//! blocks than the ones chosen from the CPU's caches (one per process: compare plans by
//! alternating runs); `RLX_GEMM_F32_SHARE_B=1` makes its threads share one packing of B.
//! `paired` is the median over rounds of MKL's time over auto's in the same round (less
//! sensitive to load that changes during the run than the ratio of the medians).
//! `--batch N` runs each library N calls in a row per round instead of interleaving
//! single calls, after a pause of 30 ms, and takes the batch's median after its first
//! call: each library then runs with its worker threads awake, as in a loop of products
//! (leave `OMP_WAIT_POLICY` and `RLX_GEMM_F32_LINGER_US` unset so both keep their
//! threads spinning between calls, as they do by default), and the pause lets the
//! other's threads fall asleep before a batch starts. Interleaved single calls with both
//! libraries' threads sleeping between calls measure each call's wake-up as well.
//! `--cpu` times multi-thread rows by the process's CPU time (all threads' work, spinning
//! included) instead of wall time: on a machine whose cores are busy with other work,
//! wall time measures the scheduler.

use rlx_cpu::gemm::{F32Path, MatMut, MatRef, sgemm_with};
use std::time::Instant;

const CASES: &[(&str, usize, usize, usize, &str)] = &[
    ("sq256", 256, 256, 256, "NN"),
    ("sq512", 512, 512, 512, "NN"),
    ("sq1024", 1024, 1024, 1024, "NN"),
    ("sq2048", 2048, 2048, 2048, "NN"),
    ("W5 l1", 1024, 784, 512, "NN"),
    ("W5 l2", 1024, 512, 512, "NN"),
    ("W6 l1", 256, 784, 512, "NN"),
    ("W6 l2", 256, 512, 512, "NN"),
    ("W6 dW1", 784, 256, 512, "TN"),
    ("W6 dX2", 256, 512, 512, "NT"),
    ("W11 qkv", 1024, 256, 768, "NN"),
    ("W11 proj", 1024, 256, 256, "NN"),
    ("W11 fc", 1024, 256, 1024, "NN"),
    ("W11 fc2", 1024, 1024, 256, "NN"),
    ("W11 head", 1024, 256, 512, "NT"),
    ("W11 dXqkv", 1024, 768, 256, "NT"),
    ("W11 dXfc2", 1024, 256, 1024, "NT"),
    ("W11 dXhead", 1024, 512, 256, "NN"),
    ("W11 dWqkv", 256, 1024, 768, "TN"),
    ("W11 dWfc2", 1024, 1024, 256, "TN"),
    ("W11 dWhead", 512, 1024, 256, "TN"),
    // Small products of attention blocks (one per thread in a batch).
    ("small 64", 64, 64, 64, "TN"),
    ("mid TN1", 256, 64, 256, "TN"),
    ("mid TN2", 128, 512, 128, "TN"),
    ("mid TN3", 256, 256, 256, "TN"),
    ("small dK", 128, 128, 32, "TN"),
    ("small dQ", 128, 128, 32, "NN"),
    ("small S", 128, 32, 128, "NT"),
];

/// Fortran `SGEMM(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)`.
type Sgemm = unsafe extern "C" fn(
    *const u8,
    *const u8,
    *const i32,
    *const i32,
    *const i32,
    *const f32,
    *const f32,
    *const i32,
    *const f32,
    *const i32,
    *const f32,
    *mut f32,
    *const i32,
);
/// `MKL_Set_Num_Threads_Local(n)`.
type SetThreads = unsafe extern "C" fn(i32) -> i32;

/// MKL's entry points from the library at `path`.
fn load_mkl(path: &str) -> (Sgemm, SetThreads) {
    let name = std::ffi::CString::new(path).expect("library path");
    // SAFETY: dlopen/dlsym with NUL-terminated strings; the symbols are transmuted to the
    // signatures MKL documents for them.
    unsafe {
        let h = libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
        assert!(!h.is_null(), "dlopen {path} failed");
        let s = libc::dlsym(h, c"SGEMM".as_ptr());
        let t = libc::dlsym(h, c"MKL_Set_Num_Threads_Local".as_ptr());
        assert!(
            !s.is_null() && !t.is_null(),
            "{path} exports no SGEMM / MKL_Set_Num_Threads_Local"
        );
        (
            std::mem::transmute::<*mut libc::c_void, Sgemm>(s),
            std::mem::transmute::<*mut libc::c_void, SetThreads>(t),
        )
    }
}

/// Row-major `C = A·B` through column-major `SGEMM` (as `Cᵀ = Bᵀ·Aᵀ`).
#[allow(clippy::too_many_arguments)]
fn mkl_call(
    f: Sgemm,
    lay: &str,
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
) {
    let (ta, lda) = if lay.starts_with('T') {
        (b'T', m)
    } else {
        (b'N', k)
    };
    let (tb, ldb) = if lay.ends_with('T') {
        (b'T', k)
    } else {
        (b'N', n)
    };
    let d = |x: usize| x as i32;
    // SAFETY: the buffers hold the m×k, k×n and m×n matrices the leading dimensions
    // describe.
    unsafe {
        f(
            &tb,
            &ta,
            &d(n),
            &d(m),
            &d(k),
            &1.0,
            b.as_ptr(),
            &d(ldb),
            a.as_ptr(),
            &d(lda),
            &0.0,
            c.as_mut_ptr(),
            &d(n),
        )
    };
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

/// CPU time of the whole process (all threads), in seconds.
fn process_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let only = arg("--only");
    let cpu = args.iter().any(|a| a == "--cpu");
    let batch: usize = arg("--batch").map_or(0, |b| b.parse().expect("--batch N"));
    let mkl = arg("--mkl").map(|p| load_mkl(p));
    let thread_counts: Vec<usize> = match arg("--threads") {
        Some(t) => vec![t.parse().expect("--threads N")],
        None => vec![1, 2],
    };
    let mut paths = vec![F32Path::Faer];
    if F32Path::Avx512.available() {
        paths.extend([F32Path::Avx512, F32Path::Auto]);
    }
    let mut head = format!("{:<11} {:>15} {:>3}", "case", "m×k×n", "thr");
    for p in &paths {
        head += &format!(" {:>11}", p.name());
    }
    if mkl.is_some() {
        head += &format!(" {:>11} {:>9} {:>6}", "mkl", "auto/mkl", "paired");
    }
    println!("f32 GEMM GFLOP/s, median/best of interleaved calls\n{head}");
    for &(name, m, k, n, lay) in CASES {
        if only.is_some_and(|o| !name.contains(o.as_str())) {
            continue;
        }
        let mut seed = 1u32;
        let mut fill = |len: usize| -> Vec<f32> {
            (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
                })
                .collect()
        };
        let (a, b) = (fill(m * k), fill(k * n));
        let mut c = vec![0f32; m * n];
        let av = if lay.starts_with('T') {
            MatRef::row_major(&a, k, m).t()
        } else {
            MatRef::row_major(&a, m, k)
        };
        let bv = if lay.ends_with('T') {
            MatRef::row_major(&b, n, k).t()
        } else {
            MatRef::row_major(&b, k, n)
        };
        let flops = 2.0 * (m * n * k) as f64;
        let reps = ((6e9 / flops) as usize).clamp(9, 201);
        for &threads in &thread_counts {
            let runs = paths.len() + mkl.is_some() as usize;
            let mut t = vec![Vec::new(); runs];
            if let Some((_, set)) = mkl {
                // SAFETY: MKL's documented thread-count call.
                unsafe { set(threads as i32) };
            }
            let call = |i: usize, c: &mut [f32]| {
                let (s, c0, p0) = (Instant::now(), thread_cpu_s(), process_cpu_s());
                match paths.get(i) {
                    Some(&p) => {
                        let cv = MatMut::row_major(c, m, n);
                        sgemm_with(p, 1.0, av, bv, 0.0, cv, threads)
                    }
                    None => mkl_call(mkl.expect("mkl").0, lay, m, k, n, &a, &b, c),
                }
                if threads == 1 {
                    thread_cpu_s() - c0
                } else if cpu {
                    process_cpu_s() - p0
                } else {
                    s.elapsed().as_secs_f64()
                }
            };
            if batch > 0 {
                // Each round gives every library `batch` calls in a row after a pause
                // that outlasts the other's spinning threads; the round's value is the
                // median of the batch after its first call (which wakes the threads).
                for _ in 0..reps.div_ceil(batch).max(5) {
                    for (i, slot) in t.iter_mut().enumerate() {
                        std::thread::sleep(std::time::Duration::from_millis(30));
                        let mut v: Vec<f64> = (0..=batch).map(|_| call(i, &mut c)).collect();
                        v.remove(0);
                        v.sort_by(f64::total_cmp);
                        slot.push(v[v.len() / 2]);
                    }
                }
            } else {
                for rep in 0..reps + 2 {
                    for (i, slot) in t.iter_mut().enumerate() {
                        let dt = call(i, &mut c);
                        // The first two rounds warm the packing buffers and pages.
                        if rep >= 2 {
                            slot.push(dt);
                        }
                    }
                }
            }
            let mut line = format!(
                "{name:<11} {:>15} {threads:>3}",
                format!("{m}×{k}×{n} {lay}")
            );
            // auto against MKL round by round (adjacent calls see the same machine
            // load), median over the rounds.
            let paired = mkl.is_some().then(|| {
                let (auto, mkl) = (&t[paths.len() - 1], &t[paths.len()]);
                let mut r: Vec<f64> = auto.iter().zip(mkl).map(|(x, y)| y / x).collect();
                r.sort_by(f64::total_cmp);
                r[r.len() / 2]
            });
            let mut med = Vec::new();
            for v in &mut t {
                v.sort_by(f64::total_cmp);
                med.push(flops / v[v.len() / 2] / 1e9);
                line += &format!(" {:>5.0}/{:<5.0}", med[med.len() - 1], flops / v[0] / 1e9);
            }
            if mkl.is_some() {
                line += &format!(" {:>9.2}", med[paths.len() - 1] / med[paths.len()]);
            }
            if let Some(p) = paired {
                line += &format!(" {p:>6.2}");
            }
            println!("{line}");
        }
    }
}
