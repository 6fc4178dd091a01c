//! The transport between ranks.

use crate::error::{DistError, Result};
use std::time::Duration;

/// Collective operations among a fixed group of processes (ranks `0..size()`).
///
/// Every rank must call the same collectives in the same order with the same buffer
/// lengths (the usual MPI contract); [`DataParallel`](crate::DataParallel) guarantees that
/// for its own calls. Implementations that can wait on a dead or stuck peer bound the
/// wait (see [`timeout_from_env`]) and end the whole job with a message naming the rank
/// and the operation rather than hang.
pub trait Communicator {
    /// This process's rank, `0..size()`.
    fn rank(&self) -> usize;

    /// The number of ranks.
    fn size(&self) -> usize;

    /// Element-wise sum of `buf` over all ranks, written back into `buf` on every rank.
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()>;

    /// Sums several buffers across ranks: `out[i]` becomes the element-wise sum over
    /// ranks of what `pack(i, ..)` writes into a buffer of `lens[i]` values. The default
    /// packs and reduces one buffer after the other; implementations with nonblocking
    /// collectives start the reduction of buffer `i` before packing buffer `i + 1`, so
    /// packing overlaps communication.
    fn all_reduce_sum_packed(
        &self,
        lens: &[usize],
        pack: &mut dyn FnMut(usize, &mut [f32]),
        out: &mut [Vec<f32>],
    ) -> Result<()> {
        check_packed_args(lens, out)?;
        for (i, (&len, buf)) in lens.iter().zip(out.iter_mut()).enumerate() {
            buf.clear();
            buf.resize(len, 0.0);
            pack(i, buf);
            self.all_reduce_sum(buf)?;
        }
        Ok(())
    }

    /// Element-wise mean of `buf` over all ranks (the sum divided by `size()`).
    fn all_reduce_mean(&self, buf: &mut [f32]) -> Result<()> {
        self.all_reduce_sum(buf)?;
        let n = self.size() as f32;
        buf.iter_mut().for_each(|v| *v /= n);
        Ok(())
    }

    /// Copies `root`'s `buf` into `buf` on every rank (all ranks pass the same length).
    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<()>;

    /// Copies `root`'s bytes to every rank; the other ranks' `buf` may have any length
    /// and is replaced.
    fn broadcast_bytes(&self, buf: &mut Vec<u8>, root: usize) -> Result<()>;

    /// Every rank's `mine`, indexed by rank (the lengths may differ).
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()>;
}

/// `Err` unless `lens` and `out` have the same length (the contract of
/// [`Communicator::all_reduce_sum_packed`]).
pub(crate) fn check_packed_args(lens: &[usize], out: &[Vec<f32>]) -> Result<()> {
    if lens.len() != out.len() {
        return Err(DistError::new(format!(
            "all_reduce_sum_packed: {} buffer lengths but {} output buffers; pass one output per length",
            lens.len(),
            out.len()
        )));
    }
    Ok(())
}

/// The communicator of a single process: rank 0 of 1. Every collective returns its
/// input unchanged, so code written against [`Communicator`] runs without MPI.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SingleProcess;

impl Communicator for SingleProcess {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn all_reduce_sum(&self, _buf: &mut [f32]) -> Result<()> {
        Ok(())
    }

    fn broadcast(&self, _buf: &mut [f32], root: usize) -> Result<()> {
        check_root(root, 1, "broadcast")
    }

    fn broadcast_bytes(&self, _buf: &mut Vec<u8>, root: usize) -> Result<()> {
        check_root(root, 1, "broadcast_bytes")
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![mine.to_vec()])
    }

    fn barrier(&self) -> Result<()> {
        Ok(())
    }
}

/// `Err` naming `op` unless `root < size`.
pub(crate) fn check_root(root: usize, size: usize, op: &str) -> Result<()> {
    if root >= size {
        return Err(DistError::new(format!(
            "{op}: root rank {root} does not exist; the job has {size} rank(s) (0..{size})"
        )));
    }
    Ok(())
}

/// The environment variable bounding how long a collective may wait for the other ranks.
pub(crate) const TIMEOUT_VAR: &str = "RLX_DIST_TIMEOUT_S";

/// The default bound when [`TIMEOUT_VAR`] is unset: long enough for a slow step of a
/// large model on a loaded machine, short enough that a job with a dead rank ends.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a collective may wait for the other ranks: `RLX_DIST_TIMEOUT_S` seconds (a
/// positive number, fractions allowed), 300 s when unset. A wait that runs past it ends
/// the job with an error naming the rank and the operation.
pub fn timeout_from_env() -> Result<Duration> {
    match std::env::var(TIMEOUT_VAR) {
        Err(std::env::VarError::NotPresent) => parse_timeout(None),
        Err(e) => Err(DistError::new(format!("{TIMEOUT_VAR}: {e}"))),
        Ok(text) => parse_timeout(Some(&text)),
    }
}

/// The timeout for a value of [`TIMEOUT_VAR`] (`None`: unset).
fn parse_timeout(text: Option<&str>) -> Result<Duration> {
    let Some(text) = text else {
        return Ok(DEFAULT_TIMEOUT);
    };
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(DistError::new(format!(
            "{TIMEOUT_VAR}={text:?} is not a positive number of seconds; set it to e.g. 60, or unset it for the default of {} s",
            DEFAULT_TIMEOUT.as_secs()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_process_is_rank_0_of_1_and_leaves_buffers_unchanged() {
        let c = SingleProcess;
        assert_eq!((c.rank(), c.size()), (0, 1));
        let mut v = vec![1.5f32, -2.0];
        c.all_reduce_sum(&mut v).unwrap();
        assert_eq!(v, [1.5, -2.0]);
        c.all_reduce_mean(&mut v).unwrap();
        assert_eq!(v, [1.5, -2.0]);
        c.broadcast(&mut v, 0).unwrap();
        assert_eq!(v, [1.5, -2.0]);
        let mut b = vec![7u8, 8];
        c.broadcast_bytes(&mut b, 0).unwrap();
        assert_eq!(b, [7, 8]);
        assert_eq!(c.all_gather_bytes(&[1, 2, 3]).unwrap(), vec![vec![1, 2, 3]]);
        c.barrier().unwrap();
    }

    #[test]
    fn single_process_rejects_a_root_other_than_0() {
        let e = SingleProcess.broadcast(&mut [0.0], 1).unwrap_err();
        assert!(
            e.message()
                .contains("root rank 1 does not exist; the job has 1 rank"),
            "{e}"
        );
    }

    #[test]
    fn packed_reduce_fills_each_buffer_from_pack() {
        let mut out = vec![Vec::new(), Vec::new()];
        let mut pack = |i: usize, b: &mut [f32]| b.iter_mut().for_each(|v| *v = i as f32 + 1.0);
        SingleProcess
            .all_reduce_sum_packed(&[3, 1], &mut pack, &mut out)
            .unwrap();
        assert_eq!(out, vec![vec![1.0; 3], vec![2.0]]);
        let e = SingleProcess
            .all_reduce_sum_packed(&[3], &mut pack, &mut out)
            .unwrap_err();
        assert!(
            e.message()
                .contains("1 buffer lengths but 2 output buffers"),
            "{e}"
        );
    }

    #[test]
    fn the_timeout_is_300_s_unless_set_to_a_positive_number_of_seconds() {
        assert_eq!(parse_timeout(None).unwrap(), Duration::from_secs(300));
        assert_eq!(
            parse_timeout(Some(" 2.5 ")).unwrap(),
            Duration::from_millis(2500)
        );
        for bad in ["0", "-3", "abc", "", "inf", "NaN", "1e300"] {
            let e = parse_timeout(Some(bad)).unwrap_err();
            assert!(
                e.message().contains("is not a positive number of seconds"),
                "{bad}: {e}"
            );
        }
    }
}
