//! Machine-limit probes: STREAM triad bandwidth and f32 FMA peak, the bounds W1 and W4
//! are reported against.

use crate::timing::{Plan, Timing, time};
use rayon::prelude::*;

/// Elements per triad array: 64 MiB of f32.
pub const TRIAD_N: usize = 16 * 1024 * 1024;

/// Elements per array of the in-cache triad: 1 MiB of f32, the size of one `[1024, 256]`
/// activation of W11 (the per-op microbenchmarks' working sets are a few such arrays).
pub const TRIAD_CACHE_N: usize = 256 * 1024;

/// STREAM triad `a[i] = b[i] + s·c[i]` over 64 MiB arrays on `threads` threads; returns the
/// timing and GB/s counting 3 arrays moved (STREAM's convention, write-allocate not counted).
pub fn triad(plan: Plan, threads: usize) -> (Timing, f64) {
    triad_n(plan, threads, TRIAD_N)
}

/// [`triad`] over arrays of `n` f32 (chunks of 64K elements, or `n / threads` when smaller,
/// so that every thread has work).
pub fn triad_n(plan: Plan, threads: usize, n: usize) -> (Timing, f64) {
    assert!(n > 1001, "triad_n: n = {n} is below the checked index 1001");
    let mut a = vec![0f32; n];
    let b: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let c: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let chunk = (1 << 16).min(n.div_ceil(threads));
    let s = 3.0f32;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool");
    let t = pool.install(|| {
        time(plan, || {
            // Chunks of 64K elements: large enough to stream, enough of them to balance.
            a.par_chunks_mut(chunk)
                .zip(b.par_chunks(chunk))
                .zip(c.par_chunks(chunk))
                .for_each(|((a, b), c)| {
                    for i in 0..a.len() {
                        a[i] = b[i] + s * c[i];
                    }
                });
        })
    });
    assert_eq!(
        a[1001],
        1.0 + 3.0 * (1001 % 7) as f32,
        "triad computed a wrong value"
    );
    let gbps = 3.0 * (n * 4) as f64 / t.median_s / 1e9;
    (t, gbps)
}

/// W1's memory traffic without its arithmetic: `o[i] = (a[i] + b[i])·c[i] − 0.5` as a
/// plain loop over 64 MiB arrays on `threads` threads (3 reads and 1 write per element,
/// ordinary stores); returns the timing and GB/s counting the 4 arrays, as W1 is counted.
/// What a hand-written loop of W1's access pattern gets from this machine right now.
pub fn w1_pattern(plan: Plan, threads: usize) -> (Timing, f64) {
    let mut o = vec![0f32; TRIAD_N];
    let a: Vec<f32> = (0..TRIAD_N).map(|i| (i % 1000) as f32).collect();
    let b: Vec<f32> = (0..TRIAD_N).map(|i| (i % 7) as f32).collect();
    let c: Vec<f32> = (0..TRIAD_N).map(|i| (i % 5) as f32).collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool");
    let ch = 1 << 16;
    let t = pool.install(|| {
        time(plan, || {
            o.par_chunks_mut(ch)
                .zip(a.par_chunks(ch))
                .zip(b.par_chunks(ch))
                .zip(c.par_chunks(ch))
                .for_each(|(((o, a), b), c)| {
                    for i in 0..o.len() {
                        o[i] = (a[i] + b[i]) * c[i] - 0.5;
                    }
                });
        })
    });
    // a = 1001 mod 1000 = 1, b = 1001 mod 7 = 0, c = 1001 mod 5 = 1
    assert_eq!(o[1001], 0.5, "the W1-pattern probe computed a wrong value");
    let gbps = 4.0 * (TRIAD_N * 4) as f64 / t.median_s / 1e9;
    (t, gbps)
}

/// Independent FMA chains per thread: enough to cover latency × throughput of the FMA units.
const CHAINS: usize = 16;
/// FMA iterations per chain per call.
const ITERS: usize = 1 << 20;

/// f32 FMA throughput of a plain loop (16 independent vector accumulators) on `threads`
/// threads, using the widest vectors the CPU has (AVX-512, else AVX2+FMA, else scalar).
/// Returns the timing and GFLOP/s (2 flops per lane per FMA).
pub fn fma_peak(plan: Plan, threads: usize) -> (Timing, f64, &'static str) {
    let (lanes, isa): (usize, &'static str) = kernel_kind();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool");
    let t = pool.install(|| {
        time(plan, || {
            (0..threads)
                .into_par_iter()
                .map(|i| fma_kernel(1.0 + i as f32 * 1e-7))
                .sum::<f32>()
        })
    });
    let flops = (threads * CHAINS * ITERS * lanes * 2) as f64;
    let gflops = flops / t.median_s / 1e9;
    (t, gflops, isa)
}

fn kernel_kind() -> (usize, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            return (16, "avx512");
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return (8, "avx2+fma");
        }
    }
    (1, "scalar")
}

fn fma_kernel(seed: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: fma_avx512 (and reduce512) need only AVX-512F, just detected.
            return unsafe { fma_avx512(seed) };
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: fma_avx2 (and reduce256) need AVX2 and FMA, both just detected.
            return unsafe { fma_avx2(seed) };
        }
    }
    let mut acc = [seed; CHAINS];
    for _ in 0..ITERS {
        for a in acc.iter_mut() {
            *a = a.mul_add(0.999_999, 1e-7);
        }
    }
    acc.iter().sum()
}

/// One FMA step on each of 16 named accumulators (named so that they live in registers;
/// an array of vectors may be kept in memory, turning the probe into a store-forwarding test).
macro_rules! fma_chains {
    ($fma:ident, $init:expr, $mul:expr, $add:expr, $body:ident) => {{
        let (mut a0, mut a1, mut a2, mut a3, mut a4, mut a5, mut a6, mut a7) =
            ($init, $init, $init, $init, $init, $init, $init, $init);
        let (mut a8, mut a9, mut a10, mut a11, mut a12, mut a13, mut a14, mut a15) =
            ($init, $init, $init, $init, $init, $init, $init, $init);
        for _ in 0..ITERS {
            a0 = $fma(a0, $mul, $add);
            a1 = $fma(a1, $mul, $add);
            a2 = $fma(a2, $mul, $add);
            a3 = $fma(a3, $mul, $add);
            a4 = $fma(a4, $mul, $add);
            a5 = $fma(a5, $mul, $add);
            a6 = $fma(a6, $mul, $add);
            a7 = $fma(a7, $mul, $add);
            a8 = $fma(a8, $mul, $add);
            a9 = $fma(a9, $mul, $add);
            a10 = $fma(a10, $mul, $add);
            a11 = $fma(a11, $mul, $add);
            a12 = $fma(a12, $mul, $add);
            a13 = $fma(a13, $mul, $add);
            a14 = $fma(a14, $mul, $add);
            a15 = $fma(a15, $mul, $add);
        }
        let mut total = 0f32;
        for v in [
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15,
        ] {
            total += $body(v);
        }
        total
    }};
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fma_avx512(seed: f32) -> f32 {
    use std::arch::x86_64::*;
    let (mul, add) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    fma_chains!(_mm512_fmadd_ps, _mm512_set1_ps(seed), mul, add, reduce512)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn reduce512(a: std::arch::x86_64::__m512) -> f32 {
    std::arch::x86_64::_mm512_reduce_add_ps(a)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_avx2(seed: f32) -> f32 {
    use std::arch::x86_64::*;
    let (mul, add) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    fma_chains!(_mm256_fmadd_ps, _mm256_set1_ps(seed), mul, add, reduce256)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn reduce256(a: std::arch::x86_64::__m256) -> f32 {
    let mut lanes = [0f32; 8];
    // SAFETY: the unaligned store writes 8 f32 (32 bytes) into `lanes`, a local array of
    // exactly 8 f32; AVX is enabled for this function.
    unsafe { std::arch::x86_64::_mm256_storeu_ps(lanes.as_mut_ptr(), a) };
    lanes.iter().sum()
}
