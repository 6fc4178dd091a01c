//! Workload sizes and deterministic inputs (standard normal from SplitMix64 + Box–Muller;
//! the same distributions as `shared/bench/peers.py`, not the same numbers).

/// W1: elements per operand.
pub const N_EW: usize = 16 * 1024 * 1024;
/// W2: softmax rows × columns.
pub const SM: (usize, usize) = (4096, 4096);
/// W3: layer-norm rows × columns.
pub const LN: (usize, usize) = (8192, 1024);
/// W3: epsilon.
pub const LN_EPS: f32 = 1e-5;
/// W4: square matmul sizes.
pub const MM_SIZES: [usize; 2] = [1024, 2048];
/// W4: the size that also runs in bf16 and as an MX fp8 scaled matmul.
pub const W4_LOWP: usize = 1024;
/// W5/W6: MLP layer widths.
pub const MLP: [usize; 4] = [784, 512, 512, 10];
/// W5 batch.
pub const W5_BATCH: usize = 1024;
/// W6 batch.
pub const W6_BATCH: usize = 256;
/// W7: batch, heads, sequence, head dim.
pub const ATT: (usize, usize, usize, usize) = (4, 8, 512, 64);
/// W10: batch × vector length.
pub const W10: (usize, usize) = (256, 1024);

/// Flops of one MLP forward row.
pub fn mlp_flops_per_row() -> usize {
    2 * MLP.windows(2).map(|w| w[0] * w[1]).sum::<usize>()
}

/// A deterministic stream of standard-normal `f32`.
pub struct Normal {
    state: u64,
    spare: Option<f64>,
}

impl Normal {
    /// A stream for `seed`.
    pub fn new(seed: u64) -> Normal {
        Normal {
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
            spare: None,
        }
    }

    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// The next sample.
    pub fn sample(&mut self) -> f32 {
        if let Some(s) = self.spare.take() {
            return s as f32;
        }
        let (u, v) = (self.uniform(), self.uniform());
        let r = (-2.0 * u.ln()).sqrt();
        let t = std::f64::consts::TAU * v;
        self.spare = Some(r * t.sin());
        (r * t.cos()) as f32
    }

    /// `n` samples scaled by `scale`.
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.sample() * scale).collect()
    }
}

/// MLP parameters `[w1, b1, w2, b2, w3, b3]`, weights `[in, out]` scaled by 1/√in.
pub fn mlp_params(seed: u64) -> Vec<Vec<f32>> {
    let mut r = Normal::new(seed);
    let mut ps = Vec::new();
    for w in MLP.windows(2) {
        ps.push(r.vec(w[0] * w[1], 1.0 / (w[0] as f32).sqrt()));
        ps.push(r.vec(w[1], 0.01));
    }
    ps
}

/// MLP inputs `[batch, 784]` and class labels in `0..10` (as f32).
pub fn mlp_inputs(batch: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut r = Normal::new(seed);
    let x = r.vec(batch * MLP[0], 1.0);
    let y = (0..batch).map(|i| ((i * 7 + 3) % MLP[3]) as f32).collect();
    (x, y)
}

/// Largest |a − b| / max(1, |b|) over two slices (a result check, printed with each record).
pub fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(
        a.len(),
        b.len(),
        "result length {} vs reference length {}",
        a.len(),
        b.len()
    );
    a.iter()
        .zip(b)
        .map(|(&x, &y)| ((x - y).abs() as f64) / (y.abs() as f64).max(1.0))
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_stream_is_deterministic_with_unit_moments() {
        let a = Normal::new(7).vec(200_000, 1.0);
        assert_eq!(a[..5], Normal::new(7).vec(5, 1.0)[..]);
        let mean = a.iter().map(|&v| v as f64).sum::<f64>() / a.len() as f64;
        let var = a.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / a.len() as f64;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "mean {mean}, var {var}"
        );
    }

    #[test]
    fn mlp_flops_count_both_multiply_and_add() {
        assert_eq!(mlp_flops_per_row(), 2 * (784 * 512 + 512 * 512 + 512 * 10));
    }

    #[test]
    fn rel_err_scales_by_the_reference_above_one() {
        assert_eq!(rel_err(&[1.0, 10.5], &[0.5, 10.0]), 0.5);
        assert_eq!(rel_err(&[0.25], &[0.0]), 0.25);
    }
}
