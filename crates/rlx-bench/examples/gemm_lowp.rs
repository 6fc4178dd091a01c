//! Low-precision GEMM speed on this machine: f32 `sgemm` against every bf16 / f16 path of
//! `rlx_cpu::gemm::lowp` (AMX tiles, AVX512_BF16, f32 FMA over halves widened while
//! packing, and the old cast-to-f32 path) and every int8 path of `rlx_cpu::gemm::int8`,
//! square products at 256³, 1024³ and 2048³ on 1 and 2 threads, GFLOP/s (GOP/s) and ratios
//! printed in the same run. With `/tmp/peers/bin/python` (or `$RLX_PEER_PYTHON`) and
//! PyTorch, `torch.matmul` on bf16 tensors and `torch._int_mm` on int8 ones are timed right
//! after and the ratios rlx / torch printed.
//!
//! `cargo run --release -p rlx-bench --example gemm_lowp [-- sizes… [--only=amx,f32,…] [--threads=1]]`
//! (`--only` takes path names — `f32` is sgemm here, `cast` the old bf16 cast path, `graph`
//! the bf16 W4 graph through `rlx_tensor`, `i8` the int8 table — and
//! skips the other columns; `--no-torch` skips the peer; `--ta` / `--tb` make A / B
//! column-major, i.e. transposed views; `--align=BYTES` places the bf16 / f16 operands and
//! C that many bytes past a 64-byte boundary (default: where the allocator put them);
//! `--cpu-time`: see [`best`]).

#[path = "common/mod.rs"]
mod common;

use rlx_cpu::gemm::int8::{I8Path, gemm_i8_with};
use rlx_cpu::gemm::lowp::{HalfFloat, LowpPath, bf16, f16, gemm_half_with};
use rlx_cpu::gemm::{MatMut, MatRef, sgemm};
use rlx_tensor::{DType, Func, Shape};
use std::time::{Duration, Instant};

/// Best time of repeated runs (at least 3, and at least ~0.3 s of work in all). With
/// `--cpu-time`, the time is the calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), which
/// leaves out time the scheduler gave to other processes: for tuning single-threaded
/// kernels on a shared machine.
fn best(mut f: impl FnMut()) -> Duration {
    let cpu = std::env::args().any(|a| a == "--cpu-time");
    let oncpu = thread_cpu_time;
    f();
    let mut best = Duration::MAX;
    let start = Instant::now();
    let mut reps = 0;
    while reps < 3 || start.elapsed() < Duration::from_millis(300) {
        let (t, c) = (Instant::now(), oncpu());
        f();
        let took = match (cpu, c, oncpu()) {
            (true, Some(c0), Some(c1)) => c1 - c0,
            _ => t.elapsed(),
        };
        best = best.min(took);
        if std::env::var_os("RLX_BENCH_TRACE").is_some() {
            eprintln!(
                "wall {:?} cpu {:?}",
                t.elapsed(),
                oncpu().zip(c).map(|(a, b)| a - b)
            );
        }
        reps += 1;
    }
    best
}

/// This thread's CPU time (x86-64 Linux; `None` elsewhere).
fn thread_cpu_time() -> Option<Duration> {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let mut ts = [0i64; 2];
        let ret: i64;
        // SAFETY: clock_gettime(CLOCK_THREAD_CPUTIME_ID = 3, &ts) writes two i64 (a
        // timespec) into `ts`; the syscall clobbers only rcx and r11 besides rax.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") 228i64 => ret,
                in("rdi") 3i64,
                in("rsi") ts.as_mut_ptr(),
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            )
        };
        (ret == 0).then(|| Duration::new(ts[0] as u64, ts[1] as u32))
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        None
    }
}

fn gflops(n: usize, t: Duration) -> f64 {
    2.0 * (n as f64).powi(3) / t.as_secs_f64() / 1e9
}

fn time_half<T: HalfFloat>(path: LowpPath, n: usize, threads: usize) -> Option<f64> {
    if !path.available::<T>()
        || !wanted(if path == LowpPath::CastF32 {
            "cast"
        } else {
            path.name()
        })
    {
        return None;
    }
    let (a, a0) = placed(
        common::data(n * n, 1)
            .into_iter()
            .map(T::from_f32_rne)
            .collect(),
    );
    let (b, b0) = placed(
        common::data(n * n, 2)
            .into_iter()
            .map(T::from_f32_rne)
            .collect(),
    );
    let (mut c, c0) = placed(vec![0f32; n * n]);
    let t = best(|| {
        gemm_half_with(
            path,
            MatRef {
                offset: a0,
                ..operand(&a, n, "--ta")
            },
            MatRef {
                offset: b0,
                ..operand(&b, n, "--tb")
            },
            MatMut {
                offset: c0,
                ..MatMut::row_major(&mut c, n, n)
            },
            false,
            threads,
        )
    });
    Some(gflops(n, t))
}

/// `v` as allocated, or, with `--align=BYTES`, copied so that element 0 lies `BYTES` past a
/// 64-byte boundary (AMX tile loads of rows that are not whole cache lines run at a
/// fraction of the speed, so where an operand lies matters): (storage, index of element 0).
fn placed<T: Copy>(v: Vec<T>) -> (Vec<T>, usize) {
    let Some(shift) = std::env::args().find_map(|a| {
        a.strip_prefix("--align=")
            .and_then(|x| x.parse::<usize>().ok())
    }) else {
        return (v, 0);
    };
    let size = size_of::<T>();
    let Some(&fill) = v.first() else {
        return (v, 0);
    };
    let mut store = vec![fill; v.len() + 128 / size];
    let base = store.as_ptr() as usize;
    // Under 128 bytes past `base`, a multiple of the element size.
    let at = (base.next_multiple_of(64) - base + shift % 64) / size;
    store[at..at + v.len()].copy_from_slice(&v);
    (store, at)
}

/// An `n × n` operand over `data`: row-major, or the transpose of the row-major matrix
/// (column-major storage) when `flag` is on the command line.
fn operand<'a, T>(data: &'a [T], n: usize, flag: &str) -> MatRef<'a, T> {
    let m = MatRef::row_major(data, n, n);
    if std::env::args().any(|a| a == flag) {
        m.t()
    } else {
        m
    }
}

/// W4 in bf16 through the public API (as `rlx-bench` runs it): f32 inputs cast to bf16 in
/// the graph, `a @ b` in bf16, read back; on the rlx thread pool (`threads` is the pool the
/// caller installed). GFLOP/s of the whole call, casts and read-back included.
fn time_graph(n: usize) -> Option<f64> {
    if !wanted("graph") {
        return None;
    }
    let f = Func::new("w4_bf16", |s| {
        let a = s
            .input("a", Shape::new(&[n, n], DType::F32))
            .cast(DType::BF16);
        let b = s
            .input("b", Shape::new(&[n, n], DType::F32))
            .cast(DType::BF16);
        a.matmul(&b)
    })
    .jit();
    let (a, b) = (common::data(n * n, 1), common::data(n * n, 2));
    let t = best(|| {
        std::hint::black_box(f.run(&[("a", &a), ("b", &b)]));
    });
    Some(gflops(n, t))
}

/// Whether the `--only` list (if any) names this column.
fn wanted(name: &str) -> bool {
    let only: Vec<String> = std::env::args()
        .filter_map(|a| a.strip_prefix("--only=").map(|s| s.to_string()))
        .collect();
    only.is_empty() || only.iter().any(|l| l.split(',').any(|x| x == name))
}

fn time_i8(path: I8Path, n: usize, threads: usize) -> Option<f64> {
    if !path.available() || (path == I8Path::Portable && n > 1024) {
        return None;
    }
    let to_i8 = |v: Vec<f32>| -> Vec<i8> { v.into_iter().map(|x| (x * 127.0) as i8).collect() };
    let (a, b) = (to_i8(common::data(n * n, 1)), to_i8(common::data(n * n, 2)));
    let mut c = vec![0i32; n * n];
    let t = best(|| {
        gemm_i8_with(
            path,
            operand(&a, n, "--ta"),
            operand(&b, n, "--tb"),
            MatMut::row_major(&mut c, n, n),
            false,
            threads,
        )
    });
    Some(gflops(n, t))
}

fn time_f32(n: usize, threads: usize) -> f64 {
    if !wanted("f32") {
        return f64::NAN;
    }
    let a = common::data(n * n, 1);
    let b = common::data(n * n, 2);
    let mut c = vec![0f32; n * n];
    let t = best(|| {
        sgemm(
            1.0,
            operand(&a, n, "--ta"),
            operand(&b, n, "--tb"),
            0.0,
            MatMut::row_major(&mut c, n, n),
            threads,
        )
    });
    gflops(n, t)
}

/// torch.matmul GFLOP/s on bf16 `n×n` tensors per (size, threads), if PyTorch runs here.
/// The torch expression timed per kind: bf16 `torch.matmul`, or int8 `torch._int_mm`
/// (i8 × i8 → i32).
fn torch_expr(int8: bool) -> (&'static str, &'static str) {
    if int8 {
        (
            "torch.randint(-128, 128, (n, n), dtype=torch.int8)",
            "torch._int_mm(a, b)",
        )
    } else {
        (
            "torch.rand(n, n).sub(0.5).to(torch.bfloat16)",
            "torch.matmul(a, b)",
        )
    }
}

/// GFLOP/s (GOP/s for int8) of PyTorch on `n×n` products per (size, threads), if it runs.
fn torch_peer(
    int8: bool,
    sizes: &[usize],
    threads: &[usize],
) -> Option<Vec<((usize, usize), f64)>> {
    let (make, op) = torch_expr(int8);
    let script = format!(
        r#"
import time, torch
for th in {threads:?}:
    torch.set_num_threads(th)
    for n in {sizes:?}:
        a = {make}
        b = {make}
        {op}
        best, reps, t0 = 1e9, 0, time.perf_counter()
        while reps < 3 or time.perf_counter() - t0 < 0.3:
            t = time.perf_counter(); {op}; best = min(best, time.perf_counter() - t); reps += 1
        print(n, th, 2 * n ** 3 / best / 1e9, flush=True)
"#
    );
    let stdout = common::run_python(&script)?;
    let rows = stdout
        .lines()
        .filter_map(|l| {
            let v: Vec<&str> = l.split_whitespace().collect();
            Some((
                (v.first()?.parse().ok()?, v.get(1)?.parse().ok()?),
                v.get(2)?.parse().ok()?,
            ))
        })
        .collect();
    Some(rows)
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![256, 1024, 2048]
    } else {
        sizes
    };
    let threads: Vec<usize> = std::env::args()
        .filter_map(|a| a.strip_prefix("--threads=").and_then(|s| s.parse().ok()))
        .collect();
    let threads = if threads.is_empty() {
        vec![1, 2]
    } else {
        threads
    };
    let cpu = common::cpu_name();
    println!("CPU: {cpu}");
    let avail: Vec<&str> = LowpPath::ALL
        .iter()
        .filter(|p| p.available::<bf16>())
        .map(|p| p.name())
        .collect();
    println!(
        "bf16 paths available: {avail:?}; default bf16 {}, f16 {}",
        LowpPath::default_for::<bf16>().name(),
        LowpPath::default_for::<f16>().name()
    );
    let bf_paths = [
        LowpPath::Amx,
        LowpPath::Avx512Bf16,
        LowpPath::Avx512F32,
        LowpPath::CastF32,
    ];
    let f16_paths = [LowpPath::Avx512F32, LowpPath::CastF32];
    let mut best_bf16 = std::collections::HashMap::new();
    let mut f32_seen = std::collections::HashMap::new();
    println!(
        "\n{:>6} {:>3} | {:>8} | {:>8} {:>8} {:>8} {:>8} {:>8} | {:>8} {:>8} | {:>7} {:>7}",
        "n",
        "thr",
        "f32",
        "bf16:amx",
        "avx512bf",
        "bf:wide",
        "bf:cast",
        "bf:graph",
        "f16:wide",
        "f16:cast",
        "best/f32",
        "best/cast"
    );
    for &th in &threads {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(th)
            .build()
            .expect("thread pool");
        for &n in &sizes {
            pool.install(|| {
                let f = time_f32(n, th);
                let bf: Vec<Option<f64>> =
                    bf_paths.iter().map(|&p| time_half::<bf16>(p, n, th)).collect();
                let graph = time_graph(n);
                let hf: Vec<Option<f64>> =
                    f16_paths.iter().map(|&p| time_half::<f16>(p, n, th)).collect();
                let cell = |v: Option<f64>| v.map_or("-".to_string(), |g| format!("{g:.0}"));
                let top = bf.iter().flatten().cloned().fold(0.0, f64::max);
                let cast = bf[3].unwrap_or(f64::NAN);
                best_bf16.insert((n, th), top);
                f32_seen.insert((n, th), f);
                println!(
                    "{n:>6} {th:>3} | {f:>8.0} | {:>8} {:>8} {:>8} {:>8} {:>8} | {:>8} {:>8} | {:>6.2}x {:>6.2}x",
                    cell(bf[0]),
                    cell(bf[1]),
                    cell(bf[2]),
                    cell(bf[3]),
                    cell(graph),
                    cell(hf[0]),
                    cell(hf[1]),
                    top / f,
                    top / cast
                );
            });
        }
    }
    println!(
        "(GFLOP/s, best of repeated runs; bf:wide/f16:wide = widened to f32 while packing; \
         bf:graph = W4 bf16 through rlx_tensor, casts of the f32 inputs included)"
    );
    let peer = !std::env::args().any(|a| a == "--no-torch");
    if let Some(rows) = peer.then(|| torch_peer(false, &sizes, &threads)).flatten() {
        println!(
            "\n{:>6} {:>3} | {:>10} {:>10} | {:>8}",
            "n", "thr", "torch bf16", "rlx bf16", "rlx/torch"
        );
        for ((n, th), g) in rows {
            let ours = best_bf16.get(&(n, th)).copied().unwrap_or(f64::NAN);
            println!(
                "{n:>6} {th:>3} | {g:>10.0} {ours:>10.0} | {:>7.2}x",
                ours / g
            );
        }
    }
    if !wanted("i8") {
        return;
    }
    println!(
        "\n{:>6} {:>3} | {:>8} {:>8} {:>8} {:>8} | {:>8}",
        "n", "thr", "i8:amx", "i8:vnni", "i8:madd", "i8:loops", "best/f32"
    );
    let mut best_i8 = std::collections::HashMap::new();
    for &th in &threads {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(th)
            .build()
            .expect("thread pool");
        for &n in &sizes {
            pool.install(|| {
                let g: Vec<Option<f64>> = I8Path::ALL.iter().map(|&p| time_i8(p, n, th)).collect();
                let cell = |v: Option<f64>| v.map_or("-".to_string(), |g| format!("{g:.0}"));
                let top = g.iter().flatten().cloned().fold(0.0, f64::max);
                best_i8.insert((n, th), top);
                let f = f32_seen.get(&(n, th)).copied().unwrap_or(f64::NAN);
                println!(
                    "{n:>6} {th:>3} | {:>8} {:>8} {:>8} {:>8} | {:>7.2}x",
                    cell(g[0]),
                    cell(g[1]),
                    cell(g[2]),
                    cell(g[3]),
                    top / f
                );
            });
        }
    }
    println!(
        "(GOP/s, i8 · i8 → i32; vnni = vpdpbusd, madd = vpmaddwd over i16; loops only up to 1024; best/f32 against this run's sgemm)"
    );
    if let Some(rows) = peer.then(|| torch_peer(true, &sizes, &threads)).flatten() {
        println!(
            "\n{:>6} {:>3} | {:>10} {:>10} | {:>8}",
            "n", "thr", "torch i8", "rlx i8", "rlx/torch"
        );
        for ((n, th), g) in rows {
            let ours = best_i8.get(&(n, th)).copied().unwrap_or(f64::NAN);
            println!(
                "{n:>6} {th:>3} | {g:>10.0} {ours:>10.0} | {:>7.2}x",
                ours / g
            );
        }
    }
}
