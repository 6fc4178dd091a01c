//! [`Communicator`] over NCCL on CUDA devices (feature `nccl`).
//!
//! The CUDA driver and `libnccl.so` are loaded at run time (cudarc's dynamic loading), so
//! this builds on machines without CUDA; [`NcclComm::available`] says whether they can be
//! used here. MPI carries the start-up: rank 0 creates the NCCL unique id and broadcasts
//! it, and the byte-string collectives and the barrier stay on MPI. The f32 reductions
//! and broadcasts run on the device: host buffers are copied to the rank's device, reduced
//! by NCCL on the communicator's stream, and copied back. Completion is polled through a
//! CUDA event against the same deadline as MPI's collectives (`RLX_DIST_TIMEOUT_S`); past
//! it the job is aborted through MPI.

use crate::comm::{Communicator, check_root};
use crate::error::{DistError, Result};
use crate::mpi_comm::MpiComm;
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::{Comm, Id, ReduceOp};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// NCCL over the ranks of an MPI job, one CUDA device per rank.
pub struct NcclComm {
    // Field order: the NCCL communicator goes before the stream and MPI it was built on.
    comm: Comm,
    stream: Arc<CudaStream>,
    device: usize,
    mpi: MpiComm,
}

impl std::fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclComm")
            .field("rank", &self.mpi.rank())
            .field("size", &self.mpi.size())
            .field("device", &self.device)
            .finish()
    }
}

fn driver_err(what: &str, e: impl std::fmt::Debug) -> DistError {
    DistError::new(format!("NcclComm: {what} failed: {e:?}"))
}

impl NcclComm {
    /// `Ok(number of CUDA devices)` when the CUDA driver and `libnccl.so` load and at
    /// least one device exists; otherwise `Err` with the reason (what is missing and how
    /// to provide it).
    pub fn available() -> std::result::Result<usize, String> {
        // SAFETY: these only try to open the shared libraries.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(
                "the CUDA driver library (libcuda.so) was not found; install the NVIDIA driver"
                    .into(),
            );
        }
        if !unsafe { cudarc::nccl::sys::is_culib_present() } {
            return Err("libnccl.so was not found; install NCCL (e.g. apt-get install libnccl2) or add its directory to LD_LIBRARY_PATH".into());
        }
        match CudaContext::device_count() {
            Ok(n) if n > 0 => Ok(n as usize),
            Ok(_) => Err("the CUDA driver reports no device".into()),
            Err(e) => Err(format!("the CUDA driver cannot count devices: {e:?}")),
        }
    }

    /// Builds the NCCL communicator over the ranks of `mpi`, rank `r` on CUDA device
    /// `device.unwrap_or(r % device count)`. Collective over `mpi`: every rank checks
    /// [`NcclComm::available`] and all fail together (naming the ranks and reasons) when
    /// any rank cannot use NCCL.
    pub fn init(mpi: MpiComm, device: Option<usize>) -> Result<NcclComm> {
        let here = NcclComm::available();
        let status = match &here {
            Ok(_) => Vec::new(),
            Err(reason) => reason.clone().into_bytes(),
        };
        let all = mpi.all_gather_bytes(&status)?;
        let missing: Vec<String> = all
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_empty())
            .map(|(r, s)| format!("rank {r}: {}", String::from_utf8_lossy(s)))
            .collect();
        if !missing.is_empty() {
            return Err(DistError::new(format!(
                "NcclComm::init: NCCL is unavailable ({}); use MpiComm instead on machines without CUDA",
                missing.join("; ")
            )));
        }
        let count = here.expect("checked above");
        let device = device.unwrap_or(mpi.rank() % count);
        let ctx =
            CudaContext::new(device).map_err(|e| driver_err("creating the CUDA context", e))?;
        let stream = ctx.default_stream();
        let mut id_bytes = Vec::new();
        if mpi.rank() == 0 {
            let id = Id::new().map_err(|e| driver_err("ncclGetUniqueId", e))?;
            id_bytes = id.internal().iter().map(|&c| c as u8).collect();
        }
        mpi.broadcast_bytes(&mut id_bytes, 0)?;
        let mut internal = [0 as std::ffi::c_char; 128];
        if id_bytes.len() != internal.len() {
            return Err(DistError::new(format!(
                "NcclComm::init: rank {} received an NCCL id of {} bytes, expected 128",
                mpi.rank(),
                id_bytes.len()
            )));
        }
        for (d, s) in internal.iter_mut().zip(&id_bytes) {
            *d = *s as std::ffi::c_char;
        }
        let comm = Comm::from_rank(stream.clone(), mpi.rank(), mpi.size(), Id::uninit(internal))
            .map_err(|e| driver_err("ncclCommInitRank", e))?;
        Ok(NcclComm {
            comm,
            stream,
            device,
            mpi,
        })
    }

    /// The CUDA device this rank reduces on.
    pub fn device(&self) -> usize {
        self.device
    }

    /// The MPI communicator used for start-up and the byte-string collectives.
    pub fn mpi(&self) -> &MpiComm {
        &self.mpi
    }

    /// Waits for the work queued on the stream so far, bounded by the MPI timeout.
    fn finish(&self, op: &str) -> Result<()> {
        let event = self
            .stream
            .record_event(None)
            .map_err(|e| driver_err("recording a CUDA event", e))?;
        let start = Instant::now();
        while !event.try_is_complete().map_err(|e| driver_err(op, e))? {
            if start.elapsed() > self.mpi.timeout() {
                self.mpi.abort(&format!(
                    "NCCL {op} did not complete within {:.1} s (RLX_DIST_TIMEOUT_S)",
                    self.mpi.timeout().as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        Ok(())
    }
}

impl Communicator for NcclComm {
    fn rank(&self) -> usize {
        self.mpi.rank()
    }

    fn size(&self) -> usize {
        self.mpi.size()
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let mut dev = self
            .stream
            .clone_htod(&*buf)
            .map_err(|e| driver_err("copying to the device", e))?;
        self.comm
            .all_reduce_in_place(&mut dev, &ReduceOp::Sum)
            .map_err(|e| driver_err("ncclAllReduce", e))?;
        self.stream
            .memcpy_dtoh(&dev, buf)
            .map_err(|e| driver_err("copying to the host", e))?;
        self.finish("all-reduce")
    }

    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<()> {
        check_root(root, self.size(), "broadcast")?;
        if buf.is_empty() {
            return Ok(());
        }
        let mut dev = self
            .stream
            .clone_htod(&*buf)
            .map_err(|e| driver_err("copying to the device", e))?;
        self.comm
            .broadcast_in_place(&mut dev, root as i32)
            .map_err(|e| driver_err("ncclBroadcast", e))?;
        self.stream
            .memcpy_dtoh(&dev, buf)
            .map_err(|e| driver_err("copying to the host", e))?;
        self.finish("broadcast")
    }

    fn broadcast_bytes(&self, buf: &mut Vec<u8>, root: usize) -> Result<()> {
        self.mpi.broadcast_bytes(buf, root)
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.mpi.all_gather_bytes(mine)
    }

    fn barrier(&self) -> Result<()> {
        self.mpi.barrier()
    }
}
