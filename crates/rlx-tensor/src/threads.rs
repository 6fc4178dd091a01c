//! The CPU backend's thread count.
//!
//! Compiled CPU programs spread their kernels over a pool of worker threads: all cores
//! by default, or `n` after [`set_num_threads`]`(n)` (process-wide, for runs started
//! from then on; `0` goes back to all cores). The environment variable
//! `RLX_NUM_THREADS`, read once at the first CPU run, sets the count the same way.
//! Results are bit-identical for every thread count: work is split by shape, not by
//! thread.
//!
//! ```
//! rlx_tensor::set_num_threads(1); // run everything on one worker thread
//! assert_eq!(rlx_tensor::num_threads(), 1);
//! rlx_tensor::set_num_threads(0); // all cores again
//! assert!(rlx_tensor::num_threads() >= 1);
//! ```

/// Set how many worker threads compiled CPU programs use (`0`: all cores). See
/// [`rlx_cpu::set_num_threads`].
pub use rlx_cpu::set_num_threads;

/// How many worker threads compiled CPU programs use. See [`rlx_cpu::num_threads`].
pub use rlx_cpu::num_threads;
