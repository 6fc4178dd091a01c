//! Timing in the conventions of `shared/bench/peers.py`: warm-up calls, then `repeats`
//! repeats of `inner` calls each (`inner` chosen so that one repeat lasts ≥ 50 ms), and
//! the median per-call time. A call slower than [`SLOW_CALL_S`] is timed once only, so that
//! a slow backend still finishes the run (the record says so).

use std::time::Instant;

/// A call at least this slow is measured once (no warm-up, no repeats).
pub const SLOW_CALL_S: f64 = 5.0;

/// Repetition settings.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Untimed calls before measuring.
    pub warmup: usize,
    /// Timed repeats; the median is reported.
    pub repeats: usize,
}

/// Per-call times of one measurement.
#[derive(Debug, Clone)]
pub struct Timing {
    /// Median seconds per call.
    pub median_s: f64,
    /// Fastest repeat.
    pub min_s: f64,
    /// Slowest repeat.
    pub max_s: f64,
    /// Number of repeats behind the median.
    pub repeats: usize,
    /// Calls per repeat.
    pub inner: usize,
}

impl Timing {
    /// A placeholder timing (no measurement).
    pub fn zero() -> Timing {
        Timing {
            median_s: 0.0,
            min_s: 0.0,
            max_s: 0.0,
            repeats: 0,
            inner: 0,
        }
    }
}

/// Median per-call seconds of `f` under `plan`.
pub fn time<R>(plan: Plan, mut f: impl FnMut() -> R) -> Timing {
    let t0 = Instant::now();
    std::hint::black_box(f());
    let first = t0.elapsed().as_secs_f64();
    if first >= SLOW_CALL_S {
        return Timing {
            median_s: first,
            min_s: first,
            max_s: first,
            repeats: 1,
            inner: 1,
        };
    }
    for _ in 0..plan.warmup {
        std::hint::black_box(f());
    }
    let t0 = Instant::now();
    std::hint::black_box(f());
    let single = t0.elapsed().as_secs_f64();
    let inner = if single >= 0.05 {
        1
    } else {
        ((0.05 / single.max(1e-7)) as usize).clamp(1, 20_000)
    };
    let mut times: Vec<f64> = (0..plan.repeats.max(1))
        .map(|_| {
            let t = Instant::now();
            for _ in 0..inner {
                std::hint::black_box(f());
            }
            t.elapsed().as_secs_f64() / inner as f64
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    Timing {
        median_s: times[times.len() / 2],
        min_s: times[0],
        max_s: times[times.len() - 1],
        repeats: times.len(),
        inner,
    }
}

/// Median of a list of durations in seconds (for measurements that are not a closure call).
pub fn median(mut v: Vec<f64>) -> Timing {
    v.sort_by(|a, b| a.total_cmp(b));
    Timing {
        median_s: v[v.len() / 2],
        min_s: v[0],
        max_s: v[v.len() - 1],
        repeats: v.len(),
        inner: 1,
    }
}
