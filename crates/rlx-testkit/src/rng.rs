//! A seeded generator and random argument data.

use rlx_ir::{DType, Shape, TensorData};

/// xorshift64*: a tiny deterministic generator, so a failing case replays from its
/// seed alone (no dependency on a random-number crate's stream staying stable).
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, zero included).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1)
    }

    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.uniform() > 1.0 - p
    }

    /// A value in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// One of `xs`, uniformly (`xs` must not be empty).
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// Random data for `shape`: floats in `[-2, 2]`, integers in `[-20, 20]` (`[0, 40]`
/// for unsigned types), bools half true. The shape must be static.
pub fn random_data(rng: &mut Rng, shape: &Shape) -> TensorData {
    let dims = shape
        .static_dims()
        .unwrap_or_else(|| panic!("random_data needs static dims, got {shape:?}"));
    let n: usize = dims.iter().product();
    let dt = shape.dtype();
    if dt.is_float() {
        let v: Vec<f64> = (0..n).map(|_| rng.uniform() * 4.0 - 2.0).collect();
        TensorData::from_f64_as(dt, &dims, &v)
    } else if dt == DType::Bool {
        let v: Vec<bool> = (0..n).map(|_| rng.chance(0.5)).collect();
        TensorData::from_bool(&dims, &v)
    } else {
        let lo: i64 = if dt.is_unsigned() { 0 } else { -20 };
        let v: Vec<i64> = (0..n).map(|_| lo + rng.below(41) as i64).collect();
        TensorData::from_i64_as(dt, &dims, &v)
    }
}

/// `n` deterministic f32 values in `[-scale, scale]` that are not monotone (a stride
/// through 101 residues), for hand-written cases that need spread but no generator.
pub fn seq(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 % 101) as f32 / 50.0 - 1.0) * scale)
        .collect()
}
