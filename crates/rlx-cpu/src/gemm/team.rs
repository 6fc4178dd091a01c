//! The threads of one product: the calling thread and the pool workers that join it take
//! the product's pieces one at a time from a shared counter, and the calling thread never
//! waits for a worker that has not started. Both GEMM drivers run their pieces this way:
//! the own f32 driver (`f32_avx512.rs`) and the half-precision / int8 one
//! (`lowp_drive.rs`).
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
//! A worker that has run its pieces then lingers for the next product (the handoff
//! below) instead of going back to rayon's idle loop at once: rayon puts an idle worker
//! to sleep within tens of microseconds, and the next product's call then waits for the
//! kernel (on a VM, the hypervisor) to wake it. Products called back to back — a
//! benchmark loop, the matmuls of a training step — find the lingering worker and hand
//! it the team through [`HOT`] without a rayon job, as OpenMP's spinning threads serve
//! MKL. While it waits, the worker runs whatever rayon work is pending
//! (`rayon::yield_now`), so parallel operations between two products keep both threads.
//! `RLX_GEMM_F32_LINGER_US` sets how long it waits for either driver's next product
//! (microseconds, read once per process; default [`LINGER_US`], `0` turns lingering off;
//! the name predates the low-precision driver's use).
//!
//! Which thread computes a piece changes no result: each piece is a fixed range of C's
//! rows or columns whose sums run in the same order on any thread.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

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

/// Join `team` (unless it has closed) and run pieces through `runner` until none is left.
fn join(team: &Team, runner: Runner, pieces: usize) {
    if team.state.fetch_add(1, Ordering::AcqRel) & CLOSED != 0 {
        // The caller has finished: `run` may be gone, so it is not touched. The count is
        // given back, as the caller may still be waiting for a worker that joined earlier.
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
    let _leave = Leave(team);
    // SAFETY: this worker joined before the team closed, so the caller's `Closer` waits
    // for `_leave` before `run` goes out of scope.
    team.work(pieces, unsafe { &*runner.0 });
}

/// How long a worker lingers for the next product by default, in microseconds: an f32
/// product of 2²⁴ multiply-adds takes about 80 µs on two Sapphire Rapids cores, so a millisecond covers the gaps between the
/// products of a step while costing at most that much spinning after the last one.
pub(super) const LINGER_US: u64 = 1000;

/// The lingering window (`RLX_GEMM_F32_LINGER_US`, else [`LINGER_US`]).
fn linger_window() -> Duration {
    static US: OnceLock<u64> = OnceLock::new();
    Duration::from_micros(*US.get_or_init(|| {
        let Ok(v) = std::env::var("RLX_GEMM_F32_LINGER_US") else {
            return LINGER_US;
        };
        v.trim().parse().unwrap_or_else(|_| {
            tracing::warn!(
                target: "rlx::gemm",
                "RLX_GEMM_F32_LINGER_US={v} is not a number of microseconds; using {LINGER_US}"
            );
            LINGER_US
        })
    }))
}

/// [`HOT`]: no worker lingers.
const IDLE: u8 = 0;
/// [`HOT`]: a worker lingers and no product has claimed it.
const WAITING: u8 = 1;
/// [`HOT`]: a product has claimed the lingering worker and left its team in [`POST`].
const POSTED: u8 = 2;

/// The handoff to the lingering worker (at most one per process): a caller that finds
/// it `WAITING` puts its team in [`POST`] and moves it to `POSTED`; the worker takes the
/// post and sets it back to `IDLE`, or moves `WAITING` to `IDLE` when its window ends.
/// The two compare-exchanges make the claim and the leaving exclusive, so a claimed
/// worker always takes the post.
static HOT: AtomicU8 = AtomicU8::new(IDLE);

/// The team handed to the lingering worker.
static POST: Mutex<Option<Post>> = Mutex::new(None);

/// A team handed over through [`POST`].
struct Post {
    team: Arc<Team>,
    runner: Runner,
    pieces: usize,
}

thread_local! {
    /// Whether this thread is the lingering worker (a product it starts from rayon work
    /// run while lingering must not hand its team to itself).
    static LINGERING: Cell<bool> = const { Cell::new(false) };
}

/// Wait up to the window for a product to hand this worker its team, running pending
/// rayon work meanwhile; after each handed-over product the window starts again. Returns
/// at once if another worker lingers already.
fn linger() {
    let window = linger_window();
    // Inside a program run the other workers are kept warm between kernels already;
    // lingering there would hold the run's end (see `exec::par::in_program`).
    if window.is_zero()
        || crate::exec::par::in_program()
        || HOT
            .compare_exchange(IDLE, WAITING, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    /// Clears the thread's lingering mark (also on unwinding from rayon work).
    struct Unmark;
    impl Drop for Unmark {
        fn drop(&mut self) {
            LINGERING.with(|l| l.set(false));
        }
    }
    LINGERING.with(|l| l.set(true));
    let _unmark = Unmark;
    let mut deadline = Instant::now() + window;
    loop {
        if HOT.load(Ordering::Acquire) == POSTED {
            let post = POST
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .expect("a product claimed the lingering worker without a post");
            HOT.store(IDLE, Ordering::Release);
            join(&post.team, post.runner, post.pieces);
            drop(post);
            if HOT
                .compare_exchange(IDLE, WAITING, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                return;
            }
            deadline = Instant::now() + window;
            continue;
        }
        for _ in 0..32 {
            std::hint::spin_loop();
        }
        // Pending work of the pool (the jobs of a parallel operation between two
        // products) runs here rather than waiting for a sleeping worker.
        let _ = rayon::yield_now();
        if Instant::now() >= deadline
            && HOT
                .compare_exchange(WAITING, IDLE, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
    }
}

/// Hand `team` to the lingering worker if one waits; `true` if it took the claim.
fn hand_to_lingering(team: &Arc<Team>, runner: Runner, pieces: usize) -> bool {
    if HOT.load(Ordering::Relaxed) != WAITING || LINGERING.with(Cell::get) {
        return false;
    }
    let mut slot = POST.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_some() {
        // Another product's post the worker has not taken yet.
        return false;
    }
    *slot = Some(Post {
        team: Arc::clone(team),
        runner,
        pieces,
    });
    if HOT
        .compare_exchange(WAITING, POSTED, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        return true;
    }
    *slot = None;
    false
}

/// Run `run(0..pieces)` on the calling thread and up to `helpers` workers of the current
/// rayon pool (the lingering worker first), each piece once; returns when every piece
/// has run.
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
    let mut spawn = helpers.min(pieces - 1);
    if hand_to_lingering(&team, runner, pieces) {
        spawn -= 1;
    }
    for _ in 0..spawn {
        let team = Arc::clone(&team);
        rayon::spawn(move || {
            join(&team, runner, pieces);
            drop(team);
            linger();
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
    fn products_handed_to_the_lingering_worker_run_every_piece_once() {
        // Products back to back from one thread (the lingering worker takes each team
        // through the handoff), from several threads at once (they race for the one
        // lingering worker; the losers spawn rayon jobs) and from inside rayon work (which
        // the lingering worker runs while it waits, and whose products must not be handed
        // to itself): every piece of every product runs exactly once and no caller hangs.
        let check = |round: usize| {
            let pieces = 2 + round % 7;
            let hits: Vec<AtomicU64> = (0..pieces).map(|_| AtomicU64::new(0)).collect();
            run_pieces(pieces, 1 + round % 3, &|p| {
                for _ in 0..(round * 5 + p * 11) % 40 * 10 {
                    std::hint::spin_loop();
                }
                hits[p].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "round {round}: {hits:?}"
            );
        };
        (0..500).for_each(check);
        std::thread::scope(|s| {
            for t in 0..3 {
                s.spawn(move || (0..300).for_each(|r| check(r * 3 + t)));
            }
            s.spawn(|| {
                use rayon::prelude::*;
                (0..300).into_par_iter().for_each(check);
            });
        });
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
