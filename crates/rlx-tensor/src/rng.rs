//! The deterministic host-side RNG behind `Tensor::rand*`/`randn*` and `Func::init_randn`.
//!
//! SplitMix64 seeded with `seed XOR φ` (φ = 0x9E3779B97F4A7C15), so the same seed
//! gives the same numbers on every machine and backend.

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
}
