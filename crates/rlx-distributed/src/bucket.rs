//! Grouping gradients into buckets for the all-reduce.
//!
//! One collective per param pays the per-message latency once per param (a transformer
//! has hundreds); one collective for everything needs a second copy of every gradient and
//! cannot start until the last gradient is packed. Buckets of a bounded size sit between
//! the two: gradients are packed, in the order the compiled value-and-gradient program
//! returns them (the `wrt` order), into flat buffers of at most `bucket_bytes`, and each
//! buffer is reduced with one collective while the next one is packed.

use crate::error::{DistError, Result};

/// The default bucket size: 4 MiB of f32 gradients (1,048,576 values). Large enough that
/// per-message latency is small against the transfer, small enough that the first
/// reduction starts early and the packed copies stay small.
pub const DEFAULT_BUCKET_BYTES: usize = 4 << 20;

/// A contiguous run of one param's gradient inside a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Index of the param (its position in the `wrt` list).
    pub param: usize,
    /// First gradient element of the run.
    pub start: usize,
    /// Number of elements.
    pub len: usize,
}

/// One bucket: the pieces packed into one flat buffer, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bucket {
    /// The pieces, in buffer order.
    pub pieces: Vec<Piece>,
}

impl Bucket {
    /// The number of f32 values in the bucket.
    pub fn len(&self) -> usize {
        self.pieces.iter().map(|p| p.len).sum()
    }

    /// Whether the bucket holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How the gradients of a list of params are cut into buckets: params in order, each
/// bucket filled up to the size limit; a gradient larger than the remaining room is split
/// across buckets, so no bucket exceeds the limit and every bucket but the last is full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketPlan {
    buckets: Vec<Bucket>,
    sizes: Vec<usize>,
}

impl BucketPlan {
    /// The plan for gradients of `sizes[i]` f32 values each, in buckets of at most
    /// `bucket_bytes` bytes (rounded down to whole f32 values; at least one value).
    pub fn new(sizes: &[usize], bucket_bytes: usize) -> Result<BucketPlan> {
        let cap = bucket_bytes / std::mem::size_of::<f32>();
        if cap == 0 {
            return Err(DistError::new(format!(
                "BucketPlan: a bucket of {bucket_bytes} bytes cannot hold one f32 gradient value; use at least 4 bytes (the default is {DEFAULT_BUCKET_BYTES})"
            )));
        }
        let mut buckets = Vec::new();
        let mut current = Bucket::default();
        let mut room = cap;
        for (param, &size) in sizes.iter().enumerate() {
            let mut start = 0;
            while start < size {
                let len = (size - start).min(room);
                current.pieces.push(Piece { param, start, len });
                start += len;
                room -= len;
                if room == 0 {
                    buckets.push(std::mem::take(&mut current));
                    room = cap;
                }
            }
        }
        if !current.is_empty() {
            buckets.push(current);
        }
        Ok(BucketPlan {
            buckets,
            sizes: sizes.to_vec(),
        })
    }

    /// The buckets, in reduction order.
    pub fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    /// The gradient sizes the plan was made for.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// The number of values in each bucket.
    pub fn lens(&self) -> Vec<usize> {
        self.buckets.iter().map(Bucket::len).collect()
    }

    /// Copies the gradients covered by bucket `i` into `buf` (`lens()[i]` values).
    pub fn pack(&self, i: usize, grads: &[Vec<f32>], buf: &mut [f32]) {
        let mut at = 0;
        for p in &self.buckets[i].pieces {
            buf[at..at + p.len].copy_from_slice(&grads[p.param][p.start..p.start + p.len]);
            at += p.len;
        }
    }

    /// Copies bucket `i`'s values from `buf` back into the gradients, divided by
    /// `divisor` (the number of ranks, to turn a sum into a mean; 1 copies).
    pub fn unpack(&self, i: usize, buf: &[f32], divisor: f32, grads: &mut [Vec<f32>]) {
        let mut at = 0;
        for p in &self.buckets[i].pieces {
            let dst = &mut grads[p.param][p.start..p.start + p.len];
            for (d, s) in dst.iter_mut().zip(&buf[at..at + p.len]) {
                *d = s / divisor;
            }
            at += p.len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(param: usize, start: usize, len: usize) -> Piece {
        Piece { param, start, len }
    }

    #[test]
    fn small_params_share_a_bucket_and_a_large_one_is_split_at_the_limit() {
        // 4 values per bucket: [3] + 1 of [6]; 4 of [6]; 1 of [6] + [2]
        let plan = BucketPlan::new(&[3, 6, 2], 16).unwrap();
        let b: Vec<Vec<Piece>> = plan.buckets().iter().map(|b| b.pieces.clone()).collect();
        assert_eq!(
            b,
            vec![
                vec![piece(0, 0, 3), piece(1, 0, 1)],
                vec![piece(1, 1, 4)],
                vec![piece(1, 5, 1), piece(2, 0, 2)],
            ]
        );
        assert_eq!(plan.lens(), vec![4, 4, 3]);
    }

    #[test]
    fn one_big_bucket_holds_everything_in_order() {
        let plan = BucketPlan::new(&[3, 6, 2], DEFAULT_BUCKET_BYTES).unwrap();
        assert_eq!(plan.buckets().len(), 1);
        assert_eq!(
            plan.buckets()[0].pieces,
            vec![piece(0, 0, 3), piece(1, 0, 6), piece(2, 0, 2)]
        );
    }

    #[test]
    fn empty_gradients_make_no_pieces() {
        let plan = BucketPlan::new(&[0, 2, 0], 8).unwrap();
        assert_eq!(plan.buckets().len(), 1);
        assert_eq!(plan.buckets()[0].pieces, vec![piece(1, 0, 2)]);
        assert!(BucketPlan::new(&[], 8).unwrap().buckets().is_empty());
    }

    #[test]
    fn a_bucket_smaller_than_one_value_is_an_error() {
        let e = BucketPlan::new(&[1], 3).unwrap_err();
        assert!(e.message().contains("3 bytes cannot hold one f32"), "{e}");
    }

    #[test]
    fn pack_then_unpack_round_trips_every_value_with_the_divisor() {
        let grads: Vec<Vec<f32>> = vec![
            (0..5).map(|i| i as f32).collect(),
            (0..7).map(|i| 10.0 + i as f32).collect(),
            vec![100.0],
        ];
        let plan = BucketPlan::new(&[5, 7, 1], 12).unwrap();
        let mut out: Vec<Vec<f32>> = grads.iter().map(|g| vec![0.0; g.len()]).collect();
        let mut seen = Vec::new();
        for (i, len) in plan.lens().into_iter().enumerate() {
            let mut buf = vec![f32::NAN; len];
            plan.pack(i, &grads, &mut buf);
            seen.extend_from_slice(&buf);
            plan.unpack(i, &buf, 2.0, &mut out);
        }
        // buckets concatenated are the gradients in order
        let flat: Vec<f32> = grads.iter().flatten().copied().collect();
        assert_eq!(seen, flat);
        for (o, g) in out.iter().zip(&grads) {
            let half: Vec<f32> = g.iter().map(|v| v * 0.5).collect();
            assert_eq!(o, &half);
        }
    }
}
