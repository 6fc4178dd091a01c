//! Diagnostics through `tracing`: [`init_logging`], `RLX_LOG`, and the table of every
//! `RLX_*` environment variable (on [`init_logging`], so it shows in the crate docs).

use std::sync::Once;
use tracing_subscriber::EnvFilter;

#[cfg(feature = "eval")]
pub use rlx_runtime::{KernelProfile, Profile};

#[cfg(feature = "eval")]
impl crate::Tensor {
    /// The per-kernel timings (`RLX_PROFILE=1`) of the compiled program that computes
    /// this tensor on its default device, over its runs so far in this thread: kernel,
    /// kind, fused ops, calls and seconds, slowest first — the table `explain()` ends
    /// with, as data. `None` without `RLX_PROFILE=1` or before the first run (backends
    /// other than the CPU do not time kernels).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = (Tensor::ones([1000]) * 2.0).exp();
    /// x.to_vec();
    /// if let Some(p) = x.profile() {
    ///     // Only when the process runs with RLX_PROFILE=1.
    ///     assert!(p.runs >= 1 && !p.kernels.is_empty());
    /// }
    /// ```
    pub fn profile(&self) -> Option<Profile> {
        self.compiled_for_default_device()
            .ok()
            .and_then(|c| c.borrow().profile())
    }
}

/// A filter given to [`init_logging`] (or in `RLX_LOG`) that is not valid
/// [`EnvFilter`] syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFilterError {
    /// The filter as given.
    pub filter: String,
    /// What the parser said.
    pub reason: String,
}

impl std::fmt::Display for LogFilterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "log filter `{}` is not valid: {} (expected a level such as `debug` or \
             directives such as `rlx::fusion=debug,rlx::jit=debug`)",
            self.filter, self.reason
        )
    }
}

impl std::error::Error for LogFilterError {}

/// Parse `filter` as `RLX_LOG` takes it: `1` means `info`, anything else is
/// [`EnvFilter`] syntax.
fn parse_filter(filter: &str) -> Result<EnvFilter, LogFilterError> {
    let spec = match filter.trim() {
        "1" | "true" | "on" => "info",
        s => s,
    };
    EnvFilter::builder()
        .parse(spec)
        .map_err(|e| LogFilterError {
            filter: filter.to_string(),
            reason: e.to_string(),
        })
}

/// Install a global `tracing` subscriber that writes the events passing `filter` to
/// stderr (the same as setting `RLX_LOG=<filter>`).
///
/// Returns `Ok(true)` when it was installed, `Ok(false)` when a global subscriber was
/// already set (that one keeps receiving rlx's events; `filter` is not applied), and an
/// error naming the filter when it does not parse.
///
/// ```
/// // Fusion decisions and JIT fallbacks, nothing else (`false`: a global subscriber
/// // was set before, and it receives them instead).
/// let _installed: bool = rlx_tensor::init_logging("rlx::fusion=debug,rlx::jit=debug").unwrap();
/// let err = rlx_tensor::init_logging("rlx::fusion=loud").unwrap_err();
/// assert!(err.to_string().contains("rlx::fusion=loud"));
/// ```
///
/// # Tracing targets
///
/// The compiler and the backends report what they do as [`tracing`] spans and events;
/// any subscriber the application installs receives them. The targets:
///
/// | target | level | what |
/// |---|---|---|
/// | `rlx::compile` | debug | a span per compile and per compiler phase (simplify, decompose, fuse, schedule, memplan), each phase's duration (`elapsed_us`), kernel and buffer counts |
/// | `rlx::fusion` | debug | each recompute-or-store decision for a value several kernels read, with its cost |
/// | `rlx::jit` | debug | a CPU tile program that stays interpreted, and why |
/// | `rlx::cache` | debug | compile-cache misses (and why) and evictions |
/// | `rlx::wgpu` | info, debug | a wgpu kernel that runs on the host instead (info); the WGSL of a shader the device rejects (debug) |
/// | `rlx::device` | debug | a graph that does not run on the device asked for, and why |
/// | `rlx::gemm`, `rlx::cpu`, `rlx::cache` | warn | an environment variable's value that cannot be used |
///
/// Without a subscriber of its own, an application sets `RLX_LOG` to a filter in
/// [`EnvFilter`](tracing_subscriber::EnvFilter) syntax (`RLX_LOG=debug`,
/// `RLX_LOG=rlx::fusion=debug,rlx::jit=debug`); the first evaluation then installs a
/// stderr subscriber with that filter, unless a global subscriber is already set.
///
/// # Environment variables
///
/// Every variable rlx reads, in one place. All are read once per process.
///
/// | variable | crate | effect |
/// |---|---|---|
/// | `RLX_LOG=<filter>` | rlx-tensor | install a stderr `tracing` subscriber with this filter at the first evaluation (`1` means `info`; `0` or empty: none) |
/// | `RLX_PROFILE=1` | rlx-cpu | time every kernel of every compiled CPU program: `explain()` then ends with the per-kernel table, and each program prints it to stderr when dropped |
/// | `RLX_FORCE_DEVICE=<device>` | rlx-runtime | run every graph on this device when it is available (`cpu`, `gpu`, `cuda`, …) |
/// | `RLX_CACHE_CAPACITY=<n>` | rlx-runtime | programs each thread's compile cache keeps (least recently used evicted beyond) |
/// | `RLX_NUM_THREADS=<n>` | rlx-cpu | CPU worker threads (unset or `0`: all cores) |
/// | `RLX_JIT=0` | rlx-cpu | interpret elementwise tile programs instead of compiling them to AVX-512 machine code (same bits, slower) |
/// | `RLX_JIT_DUMP=<dir>` | rlx-cpu | write each JIT-compiled tile program's machine code to `<dir>/rlx-jit-<n>.bin` |
/// | `RLX_JIT_PREFETCH=<bytes>` | rlx-cpu | prefetch distance of the JIT's loops (default 2048; `0` turns prefetching off) |
/// | `RLX_GEMM_BF16`, `RLX_GEMM_F16` = `amx` / `avx512bf16` / `avx512f32` / `f32` | rlx-cpu | the half-precision GEMM path (default: the fastest available) |
/// | `RLX_GEMM_I8` = `amx` / `avx512vnni` / `avx512` / `portable` | rlx-cpu | the int8 GEMM path (default: the fastest available) |
/// | `RLX_SCALED_INT=0` | rlx-cpu | keeps fp4 / fp6-E2M3 scaled matmuls off the integer dot-product unit (AVX512_VNNI) |
/// | `RLX_SCALED_PACKED_CODES=0` | rlx-cpu | scaled matmuls decode their operands into bf16 / f32 panels before the GEMM instead of inside the own f32 kernel's packers (for A/B runs) |
/// | `RLX_ROW_PROGRAMS=0` | rlx-cpu | row groups (norm backwards) run stage by stage over tiles instead of as per-row programs (for A/B runs) |
/// | `RLX_NO_MALLOC_TUNING` | rlx-cpu | leave glibc's malloc thresholds alone |
/// | `RLX_CUDA_LIB_DIR=<dirs>` | rlx-cuda | directories searched first for the CUDA libraries (a path list) |
/// | `RLX_NVRTC_LIB=<path>` | rlx-cuda | the NVRTC library (a file or its directory) |
/// | `RLX_PYTHON_PATH=<dirs>` | rlx-cuda | Python site directories searched for NVIDIA wheels (as `PYTHONPATH`) |
/// | `RLX_CUDA_TF32=1` | rlx-cuda | let cuBLAS use TF32 tensor cores for f32 contractions |
/// | `RLX_CUDA_NO_BLAS=1` | rlx-cuda | generated kernels instead of cuBLAS for contractions |
/// | `RLX_CUDA_SPLIT_MIN=<n>` | rlx-cuda | shortest reduced extent split across blocks when the outputs are too few to fill the GPU (default 8192; also HIP) |
/// | `RLX_CUDA_EMU_DIR=<dir>` | rlx-cuda | cache directory of the host emulator's compiled kernels (tests) |
///
/// Test suites also read `RLX_DIFF_SEED` (differential suites), `RLX_FUZZ_SEED`,
/// `RLX_FUZZ_CASES`, `RLX_FUZZ_CASE`, `RLX_FUZZ_KNOWN` (the fuzz suite), `RLX_SEED`,
/// `RLX_LARGE`, `RLX_WGPU_CASES` and `RLX_GPU_CASES`; their tests document them.
pub fn init_logging(filter: &str) -> Result<bool, LogFilterError> {
    let filter = parse_filter(filter)?;
    Ok(tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init()
        .is_ok())
}

/// Applies `RLX_LOG` once per process; called when the backends are registered (before
/// the first compile or device query), so a program that never evaluates anything
/// installs nothing.
#[cfg_attr(not(feature = "eval"), allow(dead_code))]
pub(crate) fn init_from_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Some(v) = std::env::var_os("RLX_LOG") else {
            return;
        };
        let v = v.to_string_lossy();
        if v.is_empty() || v == "0" {
            return;
        }
        if let Err(e) = init_logging(&v) {
            // No subscriber exists to report this to.
            eprintln!("rlx: RLX_LOG: {e}; logging stays off");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// A `MakeWriter` collecting everything the subscriber writes.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }

    /// Runs `f` with a subscriber filtered as `RLX_LOG=<filter>` would be, returning
    /// what it logged.
    fn captured(filter: &str, f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let sub = tracing_subscriber::fmt()
            .with_env_filter(parse_filter(filter).unwrap())
            .with_writer(buf.clone())
            .with_ansi(false)
            .finish();
        // tracing-core caches each callsite's interest process-wide, and while a single
        // scoped dispatcher is registered it computes that interest from the *current
        // thread's* dispatcher alone: another test thread (no subscriber) that first hits
        // a callsite during this capture caches "never" for everyone, and its events miss
        // this filter (seen in CI: rlx::compile's phase events absent). A second
        // registered dispatcher, live for the whole capture, makes every interest be
        // computed over all live dispatchers, this one included.
        let second = tracing::Dispatch::new(tracing_subscriber::registry());
        tracing::subscriber::with_default(sub, || {
            // Callsites cached while only one dispatcher was registered get their
            // interest recomputed with this one live.
            tracing::callsite::rebuild_interest_cache();
            f()
        });
        drop(second);
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn bad_filters_are_rejected_with_the_filter_named() {
        let e = parse_filter("rlx::fusion=loud").unwrap_err();
        assert_eq!(e.filter, "rlx::fusion=loud");
        assert!(e.to_string().contains("rlx::fusion=loud"), "{e}");
        assert!(parse_filter("1").is_ok());
        assert!(parse_filter("rlx::compile=debug,rlx::jit=trace").is_ok());
    }

    /// A real compile (through `to_vec`) of a value two reductions read, under the
    /// filter `rlx::fusion=debug,rlx::compile=debug`.
    #[cfg(feature = "eval")]
    #[test]
    fn a_compile_reports_its_phases_and_fusion_decisions() {
        use crate::Tensor;
        let run = || {
            let a = Tensor::from_vec(
                (0..96).map(|i| i as f32 - 40.0).collect::<Vec<_>>(),
                [8, 12],
            );
            let b = Tensor::ones([8, 12]);
            let s = (&a + &b).relu();
            // Two kernels (reductions over different axes) read `s`.
            let rows = s.sum([1], false).sum_all();
            let cols = s.max([0], false).sum_all();
            (rows + cols).to_vec()
        };
        let mut out = Vec::new();
        let log = captured("rlx::fusion=debug,rlx::compile=debug", || out = run());
        // relu(i - 39) over i in 0..96 is 0..=56: sum 1596; column maxima (last row)
        // are relu(84 + c - 39) = 45..=56: sum 606.
        assert_eq!(out, vec![1596.0 + 606.0]);
        for phase in ["simplify", "decompose", "fuse", "schedule", "memplan"] {
            assert!(
                log.contains(&format!("phase=\"{phase}\"")),
                "no {phase} event in:\n{log}"
            );
        }
        assert!(log.contains("elapsed_us="), "no durations in:\n{log}");
        assert!(log.contains("rlx::fusion"), "no fusion decision in:\n{log}");
        // The same compile (the cache emptied) under a filter that excludes both
        // targets logs neither.
        crate::clear_cache();
        let quiet = captured("rlx::jit=debug", || {
            run();
        });
        assert!(
            !quiet.contains("rlx::compile") && !quiet.contains("rlx::fusion"),
            "{quiet}"
        );
    }

    /// A tile program with an op the JIT does not compile (`sin`) runs interpreted and
    /// says why under `rlx::jit=debug` (where the JIT exists: AVX-512F and FMA).
    #[cfg(all(feature = "eval", target_arch = "x86_64"))]
    #[test]
    fn an_interpreted_tile_program_reports_why() {
        use crate::Tensor;
        let jit = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("fma")
            && std::env::var_os("RLX_JIT").is_none_or(|v| v != "0");
        let xs: Vec<f32> = (0..50).map(|i| i as f32 * 0.1).collect();
        let y = Tensor::from_vec(xs.clone(), [50]).sin() * 2.0;
        let mut out = Vec::new();
        let log = captured("rlx::jit=debug", || out = y.to_vec());
        for (o, x) in out.iter().zip(&xs) {
            assert!(
                (*o as f64 - 2.0 * (*x as f64).sin()).abs() < 1e-5,
                "{o} vs {x}"
            );
        }
        if jit {
            assert!(
                log.contains("falls back to the interpreter") && log.contains("sin"),
                "no JIT fallback event in:\n{log}"
            );
        }
    }
}
