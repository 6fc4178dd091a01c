//! The number of worker threads compiled CPU programs use: rayon's global pool by
//! default, or a pool of this crate's own when a count is asked for
//! ([`set_num_threads`], or `RLX_NUM_THREADS` read once at the first use).

use rayon::{ThreadPool, ThreadPoolBuilder};
use std::sync::{Arc, OnceLock, RwLock};

/// The pool runs use: `None` for rayon's global pool.
type Slot = RwLock<Option<Arc<ThreadPool>>>;

fn slot() -> &'static Slot {
    static SLOT: OnceLock<Slot> = OnceLock::new();
    SLOT.get_or_init(|| RwLock::new(from_env()))
}

/// The pool `RLX_NUM_THREADS` asks for (unset, empty or `0`: the global pool).
fn from_env() -> Option<Arc<ThreadPool>> {
    let v = std::env::var("RLX_NUM_THREADS").ok()?;
    match v.trim().parse::<usize>() {
        Ok(0) => None,
        Ok(n) => build(n),
        Err(_) if v.trim().is_empty() => None,
        Err(_) => {
            tracing::warn!(
                target: "rlx::cpu",
                value = %v,
                "RLX_NUM_THREADS is not a thread count; using all cores"
            );
            None
        }
    }
}

/// A pool of `n` workers, or `None` when rayon's global pool already has `n` (runs
/// then use it directly, with no hand-off) or the OS refuses the threads (logged).
fn build(n: usize) -> Option<Arc<ThreadPool>> {
    let n = capped(n);
    if n == global_threads() {
        return None;
    }
    match ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("rlx-cpu-{i}"))
        .build()
    {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            tracing::warn!(
                target: "rlx::cpu",
                threads = n,
                error = %e,
                "cannot start the CPU worker threads; keeping the previous thread count"
            );
            None
        }
    }
}

/// The most workers a pool of this crate's own may have: 8 per core, at least 64. More
/// buys nothing for compute-bound kernels, and a count from a typo or a hostile
/// `RLX_NUM_THREADS` (a million) must not try to start that many OS threads.
pub fn max_num_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    cores.saturating_mul(8).max(64)
}

/// `n` clamped to [`max_num_threads`], with a warning when it was larger.
fn capped(n: usize) -> usize {
    let max = max_num_threads();
    if n > max {
        tracing::warn!(
            target: "rlx::cpu",
            asked = n,
            max,
            "thread count {n} is more than {max} (8 per core); using {max}"
        );
    }
    n.min(max)
}

/// The pool of this crate's own that runs should be installed in, if a thread count
/// was set (`None`: rayon's global pool, used as is).
pub(crate) fn run_pool() -> Option<Arc<ThreadPool>> {
    slot().read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Size of rayon's global pool (fixed once the pool exists).
fn global_threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        if rayon::current_thread_index().is_none() {
            rayon::current_num_threads()
        } else {
            // Inside some pool `current_num_threads` names that pool: ask from outside.
            std::thread::scope(|s| s.spawn(rayon::current_num_threads).join())
                .unwrap_or_else(|_| rayon::current_num_threads())
        }
    })
}

/// Set how many worker threads compiled CPU programs use, for runs started from now
/// on, process-wide (runs in flight finish on the threads they started with).
///
/// `0` means all cores (rayon's global pool, which honours `RAYON_NUM_THREADS`).
/// Any other `n` starts a pool of `n` workers of its own (the previous one is shut
/// down once its last run ends), unless the global pool has `n` workers already. Before the first call, the `RLX_NUM_THREADS`
/// environment variable (read once, at the first use) gives the count the same way.
/// Counts above [`max_num_threads`] are clamped to it (with a warning). If the OS
/// refuses to start the threads, a warning is logged (target `rlx::cpu`) and the
/// previous count stays.
///
/// Results do not depend on the thread count: work is split into chunks whose size
/// depends only on the shapes, and partial results are combined in a fixed order.
/// With a count of its own set, each run from a thread outside the pool is handed to
/// a worker of the pool and the caller waits for it: tens of microseconds per run at
/// worst, which shows only on programs that small.
///
/// ```
/// rlx_cpu::set_num_threads(2);
/// assert_eq!(rlx_cpu::num_threads(), 2);
/// rlx_cpu::set_num_threads(0); // back to all cores
/// ```
pub fn set_num_threads(n: usize) {
    let mut slot = slot().write().unwrap_or_else(|e| e.into_inner());
    if n == 0 {
        *slot = None;
        return;
    }
    let n = capped(n);
    if slot.as_ref().is_some_and(|p| p.current_num_threads() == n) {
        return;
    }
    if n == global_threads() {
        *slot = None;
    } else if let Some(p) = build(n) {
        *slot = Some(p);
    }
}

/// How many worker threads compiled CPU programs use: the count given to
/// [`set_num_threads`] (or `RLX_NUM_THREADS`), else the size of rayon's global pool
/// (all cores unless `RAYON_NUM_THREADS` says otherwise).
///
/// ```
/// assert!(rlx_cpu::num_threads() >= 1);
/// ```
pub fn num_threads() -> usize {
    match run_pool() {
        Some(p) => p.current_num_threads(),
        None => global_threads(),
    }
}

/// `f` run on a rayon pool of `threads` threads (tests that check results do not depend
/// on the thread count).
#[cfg(test)]
pub(crate) fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool")
        .install(f)
}

/// Whether two results hold the same bits element for element (tests that a thread
/// count, a loop order or a layout changes no bit).
#[cfg(test)]
pub(crate) fn same_bits(x: &[f32], y: &[f32]) -> bool {
    x.len() == y.len() && x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits())
}
