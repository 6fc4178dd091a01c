//! Work splitting: fixed, size-determined chunks (so results never depend on the
//! thread count or timing) spread over the rayon pool.

use rayon::prelude::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Run `f(i)` for every chunk `i < n`, in parallel when there is more than one; the
/// first error (by chunk order among the failing ones seen) is returned.
pub(crate) fn par_for(
    n: usize,
    f: impl Fn(usize) -> Result<(), String> + Sync + Send,
) -> Result<(), String> {
    if n <= 1 {
        return if n == 1 { f(0) } else { Ok(()) };
    }
    (0..n).into_par_iter().try_for_each(f)
}

thread_local! {
    /// Whether this thread runs a program's kernels or is kept warm for them
    /// ([`in_program`]).
    static IN_PROGRAM: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is inside a program run: running its kernels one after another,
/// or kept warm for their chunks ([`keep_warm`]). A worker that finishes a GEMM's pieces
/// there must not linger for the next product (`gemm` `team`): the kept-warm worker
/// already spins, and a linger nested in it (or in the running thread, which may pick
/// up a product's stale helper job while it waits) would hold the program's end for the
/// whole lingering window (a 4 ms MLP training step took 0.8 ms longer, 2026-12-03).
pub(crate) fn in_program() -> bool {
    IN_PROGRAM.with(Cell::get)
}

/// Run `f` marked as inside a program run ([`in_program`]), restoring the mark after
/// (also when unwinding).
pub(crate) fn as_program<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_PROGRAM.with(|m| m.set(self.0));
        }
    }
    let _restore = Restore(IN_PROGRAM.with(|m| m.replace(true)));
    f()
}

/// How long a kept-warm worker spins with nothing to run before it returns to rayon
/// (and sleeps like any idle worker until the next kernel's chunks wake it).
const KEEP_WARM_IDLE: std::time::Duration = std::time::Duration::from_micros(200);

/// Run pending pool work (this program's kernel chunks) until `done`, spinning while
/// there is none: a worker kept this way picks up each kernel's chunks at once.
///
/// It also returns after [`KEEP_WARM_IDLE`] without work. rayon may start this job on
/// a worker nested inside a wait of another job, such as a chunk of the program's first
/// kernel that the worker stole before it took its keep-warm job; then the program
/// cannot end (and set `done`) until this returns and the chunk below it finishes. A
/// `done`-only loop hung the W4 benchmark that way (2026-12-03: one worker spinning
/// here on top of a stolen `quant_scale_into` chunk, the program's thread asleep in
/// the chunk's join).
pub(crate) fn keep_warm(done: &AtomicBool) {
    as_program(|| {
        let mut idle_since: Option<std::time::Instant> = None;
        while !done.load(Ordering::Acquire) {
            match rayon::yield_now() {
                Some(rayon::Yield::Executed) => idle_since = None,
                _ => {
                    let since = *idle_since.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() >= KEEP_WARM_IDLE {
                        return;
                    }
                    std::hint::spin_loop();
                }
            }
        }
    })
}

/// Sets the flag when dropped (also when unwinding, so no worker spins forever).
pub(crate) struct SetOnDrop<'a>(pub(crate) &'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Number of chunks of about `per` units for `total` units (at least 1).
pub(crate) fn chunks(total: usize, per: usize) -> usize {
    total.div_ceil(per.max(1)).max(1)
}

/// A raw pointer that may cross threads: kernels (and the blocks of a GEMM) write
/// disjoint parts of a buffer, or only read it.
pub(crate) struct SendPtr<T = u8>(pub(crate) *mut T);
// SAFETY: a SendPtr only carries a buffer pointer into the chunks of one blocking
// parallel loop (par_for / rayon for_each) that ends before the buffer does; every use
// site either only reads through it or writes ranges disjoint from every other chunk's
// (documented at each dereference), so no data race can arise from moving it.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as for Send: shared copies are used only for reads or disjoint writes.
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the whole `Sync` wrapper).
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

/// Buffer base pointers shared by the chunks of a kernel.
#[derive(Clone, Copy)]
pub(crate) struct Bases<'a>(pub(crate) &'a [*mut u8]);
// SAFETY: the pointers are the buffers of one program run, alive for the borrow `'a`
// (the run's arena, arguments and outputs outlive every kernel); the kernels' chunks
// read inputs and write disjoint ranges of their outputs, so sending the list to pool
// threads creates no data race.
unsafe impl Send for Bases<'_> {}
// SAFETY: as for Send: concurrent chunks read shared inputs and write disjoint ranges.
unsafe impl Sync for Bases<'_> {}

impl<'a> Bases<'a> {
    /// The pointers (a method, so closures capture the whole `Sync` wrapper).
    pub(crate) fn get(self) -> &'a [*mut u8] {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_run_is_marked_on_its_thread_and_the_mark_is_restored_even_on_panic() {
        assert!(!in_program());
        as_program(|| {
            assert!(in_program());
            as_program(|| assert!(in_program()));
            // The inner run ended: the outer one is still marked.
            assert!(in_program());
        });
        assert!(!in_program());
        let r = std::panic::catch_unwind(|| as_program(|| panic!("a kernel failed")));
        assert!(r.is_err());
        assert!(!in_program(), "the mark outlived a panicking run");
        // Kept warm until done: marked while serving, unmarked after.
        let done = AtomicBool::new(true);
        keep_warm(&done);
        assert!(!in_program());
    }

    /// A kept-warm worker with nothing to run gives its thread back even though the
    /// program has not ended: the frame below it may be one the program waits for (a
    /// stolen chunk of its kernel), and spinning until `done` would then never end.
    #[test]
    fn a_kept_warm_worker_returns_when_idle_even_before_the_program_is_done() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            let done = AtomicBool::new(false);
            // A join whose second half keeps warm on top of the first's frame: the
            // shape of the hang (the first half only ends once keep_warm returns).
            pool.install(|| rayon::join(|| keep_warm(&done), || keep_warm(&done)));
            tx.send(in_program()).unwrap();
        });
        let marked = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("keep_warm spun for 30 s with no work and `done` never set");
        assert!(!marked, "the program mark outlived keep_warm");
    }
}
