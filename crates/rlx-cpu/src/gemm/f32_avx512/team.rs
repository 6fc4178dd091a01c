//! The threads of one product: the calling thread and the pool workers that join it take
//! the product's pieces one at a time from a shared counter, and the calling thread never
//! waits for a worker that has not started.
//!
//! A pool worker asleep when a product starts wakes late: on the 2-vCPU Sapphire Rapids
//! VM (KVM) the worker's first piece of a 1024³ product started a median 80 µs after the
//! call and, while other processes ran, up to 3.7 ms after; the calling thread spent
//! another 30 µs in rayon's scope before its own piece. With one piece per thread handed
//! out up front, the caller then finished its half and slept until the late worker had
//! run the other half (a 256³ product is about 100 µs per half). Here pieces are
//! claimed from a counter: the caller starts at once and goes on with the pieces no one
//! has taken, a worker that arrives takes from the rest, and a worker that arrives
//! after the caller has closed the team does nothing. The caller returns once every
//! worker that joined has finished its piece, which never needs a thread that has not
//! run yet to be scheduled. Measured there on two threads (wall time, the benchmark at
//! raised priority, pieces of `MC` rows, per-round pairs of old and new in one process):
//! 256³ 1.46×, 512³ 1.12×, 1024³ 1.04–1.05×, W11's products 1.00–1.25×, 2048³ 0.98×.
//!
//! Which thread computes a piece changes no result: each piece is a fixed range of C's
//! rows or columns whose sums run in the same order on any thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Set in [`Team::state`] once the caller has taken the last piece: no worker joins after.
const CLOSED: u32 = 1 << 31;

/// The shared state of one product's threads.
struct Team {
    /// The next unclaimed piece.
    next: AtomicUsize,
    /// Workers inside the product (low bits) and [`CLOSED`].
    state: AtomicU32,
}

/// A piece runner that may cross into a worker: the caller's closure with its lifetime
/// erased. It is called only by a worker that joined the team, and the caller keeps the
/// closure alive until every joined worker has left ([`Closer`]).
#[derive(Clone, Copy)]
struct Runner(*const (dyn Fn(usize) + Sync));

// SAFETY: the closure is `Sync` and outlives every call made through the pointer (see
// `Runner`).
unsafe impl Send for Runner {}

/// Closes the team and waits for the workers inside it when dropped (also on unwinding,
/// so a panic in the caller's pieces cannot free what a worker still reads).
struct Closer<'a>(&'a Team);

impl Drop for Closer<'_> {
    fn drop(&mut self) {
        self.0.state.fetch_or(CLOSED, Ordering::AcqRel);
        let mut spins = 0u32;
        while self.0.state.load(Ordering::Acquire) & !CLOSED != 0 {
            spins += 1;
            if spins < 1 << 12 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl Team {
    /// Claim and run pieces until none is left.
    fn work(&self, pieces: usize, run: &(dyn Fn(usize) + Sync)) {
        loop {
            let p = self.next.fetch_add(1, Ordering::Relaxed);
            if p >= pieces {
                return;
            }
            run(p);
        }
    }
}

/// Run `run(0..pieces)` on the calling thread and up to `helpers` workers of the current
/// rayon pool, each piece once; returns when every piece has run.
pub(super) fn run_pieces(pieces: usize, helpers: usize, run: &(dyn Fn(usize) + Sync)) {
    if pieces <= 1 || helpers == 0 {
        (0..pieces).for_each(run);
        return;
    }
    let team = Arc::new(Team {
        next: AtomicUsize::new(0),
        state: AtomicU32::new(0),
    });
    // SAFETY: the lifetime is erased only for the pointer's type; `Closer` below keeps
    // `run` borrowed until every worker that could call it has left.
    let runner = Runner(unsafe {
        std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync)>(
            run,
        )
    });
    for _ in 0..helpers.min(pieces - 1) {
        let team = Arc::clone(&team);
        rayon::spawn(move || {
            let runner = runner;
            if team.state.fetch_add(1, Ordering::AcqRel) & CLOSED != 0 {
                // The caller has finished: `run` may be gone, so it is not touched. The
                // count is given back, as the caller may still be waiting for a worker
                // that joined earlier.
                team.state.fetch_sub(1, Ordering::Release);
                return;
            }
            /// Leaves the team when the worker's pieces are done (or unwinding).
            struct Leave<'a>(&'a Team);
            impl Drop for Leave<'_> {
                fn drop(&mut self) {
                    self.0.state.fetch_sub(1, Ordering::Release);
                }
            }
            let _leave = Leave(&team);
            // SAFETY: this worker joined before the team closed, so the caller's `Closer`
            // waits for `_leave` before `run` goes out of scope.
            team.work(pieces, unsafe { &*runner.0 });
        });
    }
    let _closer = Closer(&team);
    team.work(pieces, run);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_piece_runs_once_with_and_without_helpers() {
        for helpers in 0..4 {
            for pieces in [0, 1, 2, 3, 7, 64] {
                let hits: Vec<AtomicU64> = (0..pieces).map(|_| AtomicU64::new(0)).collect();
                run_pieces(pieces, helpers, &|p| {
                    hits[p].fetch_add(1, Ordering::Relaxed);
                });
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "{pieces} pieces, {helpers} helpers: {hits:?}"
                );
            }
        }
    }

    #[test]
    fn a_worker_arriving_after_the_close_does_not_keep_the_caller_waiting() {
        // More helpers than pool workers and pieces that take a little while: workers
        // that join run pieces while the caller waits for them, and the jobs left over
        // start after the team has closed, sometimes while the caller still waits for
        // a worker that joined earlier. Such a late job must leave the count as it found
        // it, or the caller waits forever.
        let workers = rayon::current_num_threads();
        for round in 0..2000 {
            let hits: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
            run_pieces(4, workers + 2, &|p| {
                let spin = (round * 7 + p * 13) % 50;
                for _ in 0..spin * 20 {
                    std::hint::spin_loop();
                }
                hits[p].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "{hits:?}"
            );
        }
    }

    #[test]
    fn caller_runs_every_piece_itself_while_the_workers_are_busy() {
        // Every worker of the global pool spins until the pieces are done: a caller that
        // waited for a worker to start would never return.
        let workers = rayon::current_num_threads();
        let (started, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicU32::new(0)));
        for _ in 0..workers {
            let (s, g) = (Arc::clone(&started), Arc::clone(&gate));
            rayon::spawn(move || {
                s.fetch_add(1, Ordering::AcqRel);
                while g.load(Ordering::Acquire) == 0 {
                    std::thread::yield_now();
                }
            });
        }
        while started.load(Ordering::Acquire) < workers {
            std::thread::yield_now();
        }
        let me = std::thread::current().id();
        let on_caller: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
        run_pieces(8, workers, &|p| {
            if std::thread::current().id() == me {
                on_caller[p].fetch_add(1, Ordering::Relaxed);
            }
        });
        gate.store(1, Ordering::Release);
        assert!(
            on_caller.iter().all(|h| h.load(Ordering::Relaxed) == 1),
            "{on_caller:?}"
        );
    }
}
