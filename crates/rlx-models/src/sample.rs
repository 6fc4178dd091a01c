//! Choosing the next token from logits: greedy, or sampled with temperature, top-k and
//! top-p from a seeded generator.

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Softmax temperature; `0` (or less) means greedy: the highest logit (the first one
    /// on ties, as `torch.argmax`).
    pub temperature: f32,
    /// Keep only the `k` highest logits (`0`: all).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probabilities sum to at least `top_p`
    /// (`1.0`: all).
    pub top_p: f32,
    /// Seed of the generator.
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling::greedy()
    }
}

impl Sampling {
    /// Always the most likely token.
    pub fn greedy() -> Sampling {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }

    /// Whether this picks the argmax.
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }
}

/// A seeded token sampler (SplitMix64 → 53-bit uniforms).
#[derive(Debug, Clone)]
pub struct Sampler {
    cfg: Sampling,
    state: u64,
}

/// The index of the largest value (the first on ties; NaNs never win).
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] || logits[best].is_nan() && !x.is_nan() {
            best = i;
        }
    }
    best
}

impl Sampler {
    /// A sampler for `cfg`.
    pub fn new(cfg: Sampling) -> Sampler {
        Sampler {
            cfg,
            state: cfg.seed ^ 0x9E37_79B9_7F4A_7C15,
        }
    }

    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next token for `logits` (one value per vocabulary entry).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.cfg.is_greedy() || logits.len() <= 1 {
            return argmax(logits) as u32;
        }
        // Candidates by descending logit (ties by index, so the order is deterministic).
        let mut order: Vec<usize> = (0..logits.len()).filter(|&i| !logits[i].is_nan()).collect();
        if order.is_empty() {
            return 0;
        }
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        if self.cfg.top_k > 0 {
            order.truncate(self.cfg.top_k);
        }
        let t = self.cfg.temperature as f64;
        let top = logits[order[0]] as f64;
        let mut probs: Vec<f64> = order
            .iter()
            .map(|&i| ((logits[i] as f64 - top) / t).exp())
            .collect();
        let sum: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= sum);
        if self.cfg.top_p < 1.0 {
            // The smallest prefix whose mass reaches top_p (always at least one token).
            let mut acc = 0.0;
            let mut keep = probs.len();
            for (i, p) in probs.iter().enumerate() {
                acc += p;
                if acc >= self.cfg.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
            order.truncate(keep);
            let s: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|p| *p /= s);
        }
        let u = self.uniform();
        let mut acc = 0.0;
        for (p, &i) in probs.iter().zip(&order) {
            acc += p;
            if u < acc {
                return i as u32;
            }
        }
        *order.last().expect("non-empty") as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum() {
        let mut s = Sampler::new(Sampling::greedy());
        assert_eq!(s.sample(&[0.0, 3.0, 1.0, 3.0]), 1);
        assert_eq!(argmax(&[f32::NAN, -1.0]), 1);
    }

    #[test]
    fn top_k_one_and_tiny_top_p_are_greedy() {
        let logits = [0.5, 2.0, 1.9, -1.0];
        let cfg = Sampling {
            temperature: 1.0,
            top_k: 1,
            top_p: 1.0,
            seed: 7,
        };
        assert_eq!(Sampler::new(cfg).sample(&logits), 1);
        let cfg = Sampling {
            top_k: 0,
            top_p: 1e-6,
            ..cfg
        };
        let mut s = Sampler::new(cfg);
        assert!((0..50).all(|_| s.sample(&logits) == 1));
    }

    #[test]
    fn sampling_follows_the_softmax_and_is_reproducible_for_a_seed() {
        // p = softmax([ln 1, ln 3]) = [0.25, 0.75].
        let logits = [0.0, 3f32.ln()];
        let cfg = Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 42,
        };
        let draws: Vec<u32> = {
            let mut s = Sampler::new(cfg);
            (0..20_000).map(|_| s.sample(&logits)).collect()
        };
        let ones = draws.iter().filter(|&&t| t == 1).count() as f64 / draws.len() as f64;
        assert!((ones - 0.75).abs() < 0.015, "{ones}");
        let mut again = Sampler::new(cfg);
        assert!(draws.iter().all(|&t| again.sample(&logits) == t));
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_the_mass() {
        // p ≈ [0.665, 0.245, 0.090]: top_p 0.8 keeps the first two only.
        let logits = [2.0, 1.0, 0.0];
        let mut s = Sampler::new(Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.8,
            seed: 1,
        });
        let draws: Vec<u32> = (0..5000).map(|_| s.sample(&logits)).collect();
        assert!(!draws.contains(&2));
        let zeros = draws.iter().filter(|&&t| t == 0).count() as f64 / 5000.0;
        assert!((zeros - 0.665 / 0.910).abs() < 0.03, "{zeros}");
    }
}
