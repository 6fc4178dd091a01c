//! Data-parallel training for rlx across processes and machines.
//!
//! Every process (a *rank*) holds the whole model and trains on its own shard of each
//! global batch: it computes the loss and gradients of its shard, the gradients are
//! summed across ranks and divided by the number of ranks, and every rank applies the
//! same optimizer step to the same params, so the ranks stay identical. With equal
//! shards of a loss that averages over the batch, that is the step one process would
//! take on the whole batch.
//!
//! * [`Communicator`] is the transport: rank, size, all-reduce, broadcast, all-gather,
//!   barrier. [`SingleProcess`] is the one-rank no-op implementation; `MpiComm` (feature
//!   `mpi`, OpenMPI or any MPI through the `mpi` crate) runs across processes and
//!   machines; `NcclComm` (feature `nccl`) reduces on CUDA devices through NCCL, loaded at
//!   run time, with MPI for start-up.
//! * [`DataParallel`] is the training loop's side: it checks at start that every rank
//!   built the same params (names and shapes), copies rank 0's params to every rank,
//!   all-reduces gradients in buckets ([`BucketPlan`]), steps the optimizer and writes
//!   checkpoints from rank 0.
//!
//! ```
//! use rlx_distributed::{DataParallel, SingleProcess};
//! use rlx_tensor::{shape, Func, Sgd};
//! let f = Func::new("quad", |s| {
//!     let w = s.param("w", shape![2]);
//!     let d = &w - 3.0;
//!     (&d * &d).sum_all()
//! })
//! .with_param("w", vec![0.0, 1.0]);
//! let (dp, f) = DataParallel::new(SingleProcess, &f).unwrap();
//! let (f, loss) = dp.step(&f, &mut Sgd::new(0.25), &[]).unwrap();
//! assert_eq!(loss, 13.0);
//! assert_eq!(f.param_binding("w"), Some(&[1.5f32, 2.0][..]));
//! ```
//!
//! Run a program under MPI with `mpirun -np 2 <program>` (as root add
//! `--allow-run-as-root`; with more ranks than cores add `--oversubscribe`).

mod bucket;
mod comm;
mod error;
#[cfg(feature = "mpi")]
mod mpi_comm;
#[cfg(feature = "nccl")]
mod nccl_comm;
mod trainer;

pub use bucket::{Bucket, BucketPlan, DEFAULT_BUCKET_BYTES, Piece};
pub use comm::{Communicator, SingleProcess, timeout_from_env};
pub use error::{DistError, Result};
#[cfg(feature = "mpi")]
pub use mpi_comm::MpiComm;
#[cfg(feature = "nccl")]
pub use nccl_comm::NcclComm;
pub use trainer::{DataParallel, shard_range};
