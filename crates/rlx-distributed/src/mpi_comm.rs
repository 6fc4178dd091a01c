//! [`Communicator`] over MPI (feature `mpi`), through the `mpi` crate.
//!
//! Every collective is issued nonblocking and polled against a deadline
//! ([`timeout_from_env`]): a peer that died or hangs cannot block this rank forever. A
//! collective that cannot be abandoned half done (MPI has no way to cancel one and its
//! buffers stay lent to MPI), so past the deadline this rank prints what it waited for and
//! ends the whole job with `MPI_Abort`. A panic anywhere in the process does the same
//! (the panic hook installed by [`MpiComm::init`]), so one failing rank never leaves the
//! others waiting in a collective.

use crate::comm::{Communicator, check_packed_args, check_root, timeout_from_env};
use crate::error::{DistError, Result};
use mpi::collective::SystemOperation;
use mpi::environment::{Threading, Universe};
use mpi::request::{Request, Scope, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, CommunicatorCollectives as _, Root as _};
use std::time::{Duration, Instant};

/// The exit code `MPI_Abort` is given when a rank panics or a collective times out.
const ABORT_CODE: i32 = 70;

/// The MPI world communicator. Create one per process with [`MpiComm::init`] (MPI can be
/// initialized once per process); dropping it finalizes MPI.
pub struct MpiComm {
    // Field order: `world` must be dropped before `universe` finalizes MPI.
    world: SimpleCommunicator,
    universe: Universe,
    rank: usize,
    size: usize,
    timeout: Duration,
}

impl std::fmt::Debug for MpiComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiComm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl MpiComm {
    /// Initializes MPI (threading level "funneled": only the thread that called `init`
    /// makes MPI calls; rlx's compute threads never do) and installs a panic hook that
    /// prints the rank and the panic message, then aborts every rank of the job.
    ///
    /// Errors: MPI already initialized in this process, or `RLX_DIST_TIMEOUT_S` invalid.
    pub fn init() -> Result<MpiComm> {
        let timeout = timeout_from_env()?;
        let (universe, _level) = mpi::initialize_with_threading(Threading::Funneled).ok_or_else(|| {
            DistError::new(
                "MpiComm::init: MPI is already initialized in this process; create one MpiComm per process and share it",
            )
        })?;
        let world = universe.world();
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        install_abort_on_panic(rank, size);
        Ok(MpiComm {
            world,
            universe,
            rank,
            size,
            timeout,
        })
    }

    /// How long a collective waits for the other ranks before ending the job.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The underlying world communicator (for MPI calls of your own).
    pub fn world(&self) -> &SimpleCommunicator {
        &self.world
    }

    /// The MPI universe (finalized when this communicator is dropped).
    pub fn universe(&self) -> &Universe {
        &self.universe
    }

    /// Ends every rank of the job after printing `message` with this rank's number.
    pub fn abort(&self, message: &str) -> ! {
        eprintln!(
            "rlx-distributed: rank {} of {}: {message}; aborting every rank (MPI_Abort)",
            self.rank, self.size
        );
        self.world.abort(ABORT_CODE)
    }

    /// Polls `requests` until all completed; past the deadline, aborts the job naming `op`.
    fn wait_all<'a, D: ?Sized, S: Scope<'a>>(
        &self,
        op: &str,
        mut requests: Vec<Request<'a, D, S>>,
    ) {
        let start = Instant::now();
        let mut spins = 0u32;
        while !requests.is_empty() {
            let mut pending = Vec::with_capacity(requests.len());
            for r in requests {
                if let Err(r) = r.test() {
                    pending.push(r);
                }
            }
            requests = pending;
            if requests.is_empty() {
                break;
            }
            if start.elapsed() > self.timeout {
                self.abort(&format!(
                    "{op} did not complete within {:.1} s (RLX_DIST_TIMEOUT_S): another rank is dead, stuck or not calling the same collective",
                    self.timeout.as_secs_f64()
                ));
            }
            // Spin briefly (MPI progresses inside `test`), then back off so a rank that
            // waits for a slower one leaves the core to it.
            spins += 1;
            if spins < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn all_gather_u64(&self, op: &str, mine: u64) -> Vec<u64> {
        let mut all = vec![0u64; self.size];
        mpi::request::scope(|scope| {
            let r = self
                .world
                .immediate_all_gather_into(scope, &mine, &mut all[..]);
            self.wait_all(op, vec![r]);
        });
        all
    }
}

/// Prints the rank and the panic, then `MPI_Abort`s the job: without it a panicking rank
/// would leave the others blocked in their next collective until the deadline.
fn install_abort_on_panic(rank: usize, size: usize) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        eprintln!(
            "rlx-distributed: rank {rank} of {size} panicked: {info}; aborting every rank (MPI_Abort)"
        );
        // SAFETY: MPI is initialized (the hook is installed after initialization) and
        // MPI_Abort may be called from any thread; it does not return on success.
        unsafe {
            mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, ABORT_CODE);
        }
        std::process::abort();
    }));
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        let send = buf.to_vec();
        mpi::request::scope(|scope| {
            let r =
                self.world
                    .immediate_all_reduce_into(scope, &send[..], buf, SystemOperation::sum());
            self.wait_all(&format!("all-reduce of {} values", send.len()), vec![r]);
        });
        Ok(())
    }

    fn all_reduce_sum_packed(
        &self,
        lens: &[usize],
        pack: &mut dyn FnMut(usize, &mut [f32]),
        out: &mut [Vec<f32>],
    ) -> Result<()> {
        check_packed_args(lens, out)?;
        let mut sends: Vec<Vec<f32>> = lens.iter().map(|&n| vec![0.0; n]).collect();
        for (o, &n) in out.iter_mut().zip(lens) {
            o.clear();
            o.resize(n, 0.0);
        }
        let total: usize = lens.iter().sum();
        mpi::request::scope(|scope| {
            // Start bucket i's reduction before packing bucket i + 1.
            let mut requests = Vec::with_capacity(lens.len());
            for (i, (send, recv)) in sends.iter_mut().zip(out.iter_mut()).enumerate() {
                pack(i, send);
                let send: &[f32] = send;
                requests.push(self.world.immediate_all_reduce_into(
                    scope,
                    send,
                    &mut recv[..],
                    SystemOperation::sum(),
                ));
            }
            let op = format!(
                "all-reduce of {} gradient bucket(s) ({total} values)",
                lens.len()
            );
            self.wait_all(&op, requests);
        });
        Ok(())
    }

    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<()> {
        check_root(root, self.size, "broadcast")?;
        let n = buf.len();
        mpi::request::scope(|scope| {
            let r = self
                .world
                .process_at_rank(root as i32)
                .immediate_broadcast_into(scope, buf);
            self.wait_all(
                &format!("broadcast of {n} values from rank {root}"),
                vec![r],
            );
        });
        Ok(())
    }

    fn broadcast_bytes(&self, buf: &mut Vec<u8>, root: usize) -> Result<()> {
        check_root(root, self.size, "broadcast_bytes")?;
        let mut len = buf.len() as u64;
        let op = format!("broadcast of a byte string from rank {root}");
        mpi::request::scope(|scope| {
            let r = self
                .world
                .process_at_rank(root as i32)
                .immediate_broadcast_into(scope, &mut len);
            self.wait_all(&op, vec![r]);
        });
        buf.resize(len as usize, 0);
        if buf.is_empty() {
            // An empty Vec<u8>'s dangling pointer is 0x1, which is MPI_IN_PLACE to
            // OpenMPI (rejected by MPI_Ibcast); there is nothing to send anyway.
            return Ok(());
        }
        mpi::request::scope(|scope| {
            let r = self
                .world
                .process_at_rank(root as i32)
                .immediate_broadcast_into(scope, &mut buf[..]);
            self.wait_all(&op, vec![r]);
        });
        Ok(())
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let op = "all-gather of the ranks' byte strings";
        let lens = self.all_gather_u64(op, mine.len() as u64);
        // Fixed-size blocks of the longest length (every rank computes the same one).
        let block = lens.iter().copied().max().unwrap_or(0) as usize;
        if block == 0 {
            // Nothing to send (and an empty buffer's pointer could read as MPI_IN_PLACE).
            return Ok(vec![Vec::new(); self.size]);
        }
        let mut send = mine.to_vec();
        send.resize(block, 0);
        let mut all = vec![0u8; block * self.size];
        mpi::request::scope(|scope| {
            let r = self
                .world
                .immediate_all_gather_into(scope, &send[..], &mut all[..]);
            self.wait_all(op, vec![r]);
        });
        Ok(lens
            .iter()
            .enumerate()
            .map(|(r, &n)| all[r * block..r * block + n as usize].to_vec())
            .collect())
    }

    fn barrier(&self) -> Result<()> {
        let r: Request<'static, (), StaticScope> = self.world.immediate_barrier();
        self.wait_all("barrier", vec![r]);
        Ok(())
    }
}
