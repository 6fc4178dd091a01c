//! The deterministic host-side RNG behind `Tensor::rand*`/`randn*`, `Func::init_randn`
//! and [`crate::init`].
//!
//! SplitMix64 seeded with `seed XOR φ` (φ = 0x9E3779B97F4A7C15), so the same seed
//! gives the same numbers on every machine and backend. The published draws
//! (`uniform_f32`, `normal_f32`, `uniform_f64`, `normal_f64`) are pinned by the API
//! contract and must never change; everything added on top only composes them.

use std::ops::Range;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// A SplitMix64 stream.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64 {
            state: seed ^ GOLDEN,
        }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) from the top 24 bits.
    pub(crate) fn uniform_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in [0, 1) from the top 53 bits.
    pub(crate) fn uniform_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// N(0, 1) by the cosine branch of Box–Muller over two f32 uniforms.
    pub(crate) fn normal_f32(&mut self) -> f32 {
        let u1 = self.uniform_f32().max(f32::MIN_POSITIVE);
        let u2 = self.uniform_f32();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }

    /// N(0, 1) by the cosine branch of Box–Muller over two f64 uniforms.
    pub(crate) fn normal_f64(&mut self) -> f64 {
        let u1 = self.uniform_f64().max(f64::MIN_POSITIVE);
        let u2 = self.uniform_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// A seeded, deterministic host random-number generator (SplitMix64).
///
/// It is the same stream `Tensor::rand`/`Tensor::randn` draw from: `Rng::new(s).uniform()`
/// repeated gives the values of `Tensor::rand([n], s)`, and `normal()` those of
/// `Tensor::randn([n], s)`. Use it for host-side work around a model: shuffling a data
/// set, drawing mini-batches, initializing weights (see [`crate::init`]).
///
/// ```
/// use rlx_tensor::init::Rng;
/// let mut rng = Rng::new(42);
/// let u = rng.uniform();
/// assert!((0.0..1.0).contains(&u));
/// let k = rng.gen_range(10..20);
/// assert!((10..20).contains(&k));
/// let p = rng.permutation(5);
/// let mut sorted = p.clone();
/// sorted.sort();
/// assert_eq!(sorted, vec![0, 1, 2, 3, 4]);
/// // Same seed, same numbers.
/// assert_eq!(Rng::new(42).uniform(), u);
/// ```
#[derive(Debug, Clone)]
pub struct Rng {
    inner: SplitMix64,
}

impl Rng {
    /// A stream from `seed` (state `seed XOR 0x9E3779B97F4A7C15`).
    pub fn new(seed: u64) -> Rng {
        Rng {
            inner: SplitMix64::new(seed),
        }
    }

    /// The next raw 64-bit output.
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// let mut a = Rng::new(1);
    /// assert_ne!(a.next_u64(), a.next_u64());
    /// ```
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// Uniform f32 in `[0, 1)` (24 random bits: every value is a multiple of 2⁻²⁴).
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// assert!((0.0..1.0).contains(&Rng::new(3).uniform()));
    /// ```
    pub fn uniform(&mut self) -> f32 {
        self.inner.uniform_f32()
    }

    /// Uniform f64 in `[0, 1)` (53 random bits).
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// assert!((0.0..1.0).contains(&Rng::new(3).uniform_f64()));
    /// ```
    pub fn uniform_f64(&mut self) -> f64 {
        self.inner.uniform_f64()
    }

    /// Uniform f32 in `[lo, hi)`.
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// let v = Rng::new(3).uniform_in(-2.0, 2.0);
    /// assert!((-2.0..2.0).contains(&v));
    /// ```
    pub fn uniform_in(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.uniform()
    }

    /// A standard normal f32 (Box–Muller over two 24-bit uniforms, as `Tensor::randn`).
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// assert!(Rng::new(3).normal().is_finite());
    /// ```
    pub fn normal(&mut self) -> f32 {
        self.inner.normal_f32()
    }

    /// A standard normal f64 (Box–Muller over two 53-bit uniforms, as `Func::init_randn`).
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// assert!(Rng::new(3).normal_f64().is_finite());
    /// ```
    pub fn normal_f64(&mut self) -> f64 {
        self.inner.normal_f64()
    }

    /// An integer drawn uniformly from the half-open `range`, without modulo bias.
    /// Panics when the range is empty.
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// let mut rng = Rng::new(9);
    /// assert!((0..3).contains(&rng.gen_range(0..3)));
    /// assert_eq!(rng.gen_range(7..8), 7);
    /// ```
    #[track_caller]
    pub fn gen_range(&mut self, range: Range<usize>) -> usize {
        assert!(
            range.start < range.end,
            "Rng::gen_range: the range {range:?} is empty; pass start..end with start < end"
        );
        range.start + self.below((range.end - range.start) as u64) as usize
    }

    /// Uniform in `0..n` (n ≥ 1) by rejection: draws landing in the incomplete last block
    /// of `u64` values are redrawn so every outcome has the same probability.
    fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - (u64::MAX % n + 1) % n;
        loop {
            let x = self.next_u64();
            if x <= zone {
                return x % n;
            }
        }
    }

    /// Shuffle `items` in place (Fisher–Yates: every order equally likely).
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// let mut v = vec![1, 2, 3, 4];
    /// Rng::new(5).shuffle(&mut v);
    /// v.sort();
    /// assert_eq!(v, vec![1, 2, 3, 4]);
    /// ```
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    /// A random permutation of `0..n`.
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// assert_eq!(Rng::new(1).permutation(3).len(), 3);
    /// ```
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        self.shuffle(&mut p);
        p
    }

    /// One epoch of shuffled mini-batches over `n` examples: a fresh permutation of `0..n`
    /// cut into chunks of `batch_size` indices (the last one shorter when `batch_size`
    /// does not divide `n`; see [`Batches::drop_last`]). Panics when `batch_size` is 0.
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// let mut rng = Rng::new(7);
    /// let batches: Vec<Vec<usize>> = rng.batches(10, 4).collect();
    /// assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 4, 2]);
    /// let mut all: Vec<usize> = batches.concat();
    /// all.sort();
    /// assert_eq!(all, (0..10).collect::<Vec<_>>());
    /// ```
    #[track_caller]
    pub fn batches(&mut self, n: usize, batch_size: usize) -> Batches {
        assert!(
            batch_size > 0,
            "Rng::batches: batch_size must be at least 1 (got 0 for {n} examples)"
        );
        Batches {
            order: self.permutation(n),
            batch_size,
            next: 0,
            drop_last: false,
        }
    }

    /// An independent stream derived from this one (for handing to a worker or a
    /// parameter without disturbing this stream's later draws beyond one step).
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// let mut a = Rng::new(1);
    /// let mut b = a.fork();
    /// assert_ne!(a.next_u64(), b.next_u64());
    /// ```
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

/// The mini-batches of one shuffled epoch, from [`Rng::batches`]: each item is the
/// example indices of one batch.
#[derive(Debug, Clone)]
pub struct Batches {
    order: Vec<usize>,
    batch_size: usize,
    next: usize,
    drop_last: bool,
}

impl Batches {
    /// Skip a final batch shorter than the batch size (useful when a graph has a fixed
    /// batch dimension).
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// assert_eq!(Rng::new(7).batches(10, 4).drop_last().count(), 2);
    /// ```
    pub fn drop_last(mut self) -> Batches {
        self.drop_last = true;
        self
    }

    /// The epoch's whole index order.
    ///
    /// ```
    /// use rlx_tensor::init::Rng;
    /// assert_eq!(Rng::new(7).batches(10, 4).order().len(), 10);
    /// ```
    pub fn order(&self) -> &[usize] {
        &self.order
    }
}

impl Iterator for Batches {
    type Item = Vec<usize>;

    fn next(&mut self) -> Option<Vec<usize>> {
        let rest = self.order.len() - self.next;
        if rest == 0 || (self.drop_last && rest < self.batch_size) {
            return None;
        }
        let end = self.next + rest.min(self.batch_size);
        let batch = self.order[self.next..end].to_vec();
        self.next = end;
        Some(batch)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let rest = self.order.len() - self.next;
        let n = if self.drop_last {
            rest / self.batch_size
        } else {
            rest.div_ceil(self.batch_size)
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for Batches {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_draw_of_seed_zero_is_the_splitmix_reference_value() {
        // SplitMix64 from state 0 after one increment: the published first output.
        let mut r = SplitMix64 { state: 0 };
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn uniforms_are_in_range_and_normals_have_unit_moments() {
        let mut r = SplitMix64::new(7);
        let n = 20_000;
        let (mut s, mut s2) = (0.0f64, 0.0f64);
        for _ in 0..n {
            let u = r.uniform_f32();
            assert!((0.0..1.0).contains(&u));
            let z = r.normal_f32() as f64;
            s += z;
            s2 += z * z;
        }
        let mean = s / n as f64;
        let var = s2 / n as f64 - mean * mean;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "mean {mean} var {var}"
        );
    }

    #[test]
    fn public_rng_is_the_same_stream_as_the_private_one() {
        let (mut a, mut b) = (Rng::new(11), SplitMix64::new(11));
        for _ in 0..10 {
            assert_eq!(a.uniform().to_bits(), b.uniform_f32().to_bits());
            assert_eq!(a.normal().to_bits(), b.normal_f32().to_bits());
            assert_eq!(a.normal_f64().to_bits(), b.normal_f64().to_bits());
        }
    }

    #[test]
    fn below_never_returns_n_and_hits_every_value() {
        let mut r = Rng::new(3);
        let mut seen = [0usize; 7];
        for _ in 0..7000 {
            seen[r.below(7) as usize] += 1;
        }
        // Each bucket expects 1000; 5 sigma is about 150.
        assert!(seen.iter().all(|&c| (850..1150).contains(&c)), "{seen:?}");
    }
}
