//! Learning-rate schedules.

use std::f64::consts::PI;

use crate::widen;

/// A learning rate as a function of the (0-based) training step.
///
/// `Func::train_step_at(opt, &schedule, step, …)` calls `opt.set_lr(schedule.lr_at(step))`
/// before stepping. Formulas are evaluated in `f64` (with `base`, `min` and `gamma` taken
/// at their decimal value, so `1e-3 · 1/100` gives exactly `1e-5f32`) and rounded to
/// `f32` once.
///
/// ```
/// use rlx_optim::LrSchedule;
///
/// let s = LrSchedule::WarmupCosine { base: 1e-3, min: 1e-5, warmup: 100, total: 1000 };
/// assert_eq!(s.lr_at(0), 1e-5);          // 1e-3 · 1/100
/// assert_eq!(s.lr_at(99), 1e-3);         // warmup ends at full rate
/// assert_eq!(s.lr_at(100), 1e-3);        // cosine starts at base
/// assert_eq!(s.lr_at(1000), 1e-5);       // and ends at min
/// assert_eq!(s.lr_at(5000), 1e-5);
/// ```
///
/// `#[non_exhaustive]`: more schedules may be added; match it with a wildcard arm.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum LrSchedule {
    /// The same rate at every step.
    Constant(f32),
    /// `base · gamma^(step / step_size)` (integer division); `step_size == 0` keeps `base`.
    Step {
        /// Rate for the first `step_size` steps.
        base: f32,
        /// Steps between decays.
        step_size: usize,
        /// Multiplicative decay per `step_size` steps.
        gamma: f32,
    },
    /// Cosine from `base` at step 0 to `min` at step `total`, then `min`;
    /// `min + (base − min)·½·(1 + cos(π·min(step, total)/total))`. `total == 0` gives `min`.
    Cosine {
        /// Rate at step 0.
        base: f32,
        /// Rate from step `total` on.
        min: f32,
        /// Length of the cosine.
        total: usize,
    },
    /// Linear warmup `base·(step + 1)/warmup` for `step < warmup`, then `base`.
    Warmup {
        /// Rate after warmup.
        base: f32,
        /// Number of warmup steps.
        warmup: usize,
    },
    /// Linear warmup as in [`LrSchedule::Warmup`], then [`LrSchedule::Cosine`] from `base`
    /// to `min` over the remaining `total − warmup` steps (saturating at 0, which gives
    /// `min` right after warmup).
    WarmupCosine {
        /// Peak rate (end of warmup, start of the cosine).
        base: f32,
        /// Final rate.
        min: f32,
        /// Number of warmup steps.
        warmup: usize,
        /// Total schedule length including warmup.
        total: usize,
    },
}

impl LrSchedule {
    /// The learning rate at 0-based `step`.
    ///
    /// ```
    /// use rlx_optim::LrSchedule;
    ///
    /// let s = LrSchedule::Step { base: 0.1, step_size: 10, gamma: 0.5 };
    /// assert_eq!([s.lr_at(0), s.lr_at(9), s.lr_at(10), s.lr_at(25)], [0.1, 0.1, 0.05, 0.025]);
    /// assert_eq!(LrSchedule::Constant(0.3).lr_at(7), 0.3);
    /// ```
    pub fn lr_at(&self, step: usize) -> f32 {
        match *self {
            LrSchedule::Constant(lr) => lr,
            LrSchedule::Step {
                base,
                step_size,
                gamma,
            } => {
                if step_size == 0 {
                    return base;
                }
                let decays = (step / step_size) as f64;
                (widen(base) * widen(gamma).powf(decays)) as f32
            }
            LrSchedule::Cosine { base, min, total } => cosine(base, min, total, step),
            LrSchedule::Warmup { base, warmup } => {
                if step < warmup {
                    warmup_ramp(base, warmup, step)
                } else {
                    base
                }
            }
            LrSchedule::WarmupCosine {
                base,
                min,
                warmup,
                total,
            } => {
                if step < warmup {
                    warmup_ramp(base, warmup, step)
                } else {
                    cosine(base, min, total.saturating_sub(warmup), step - warmup)
                }
            }
        }
    }
}

/// `base·(step + 1)/warmup`, for `step < warmup`.
fn warmup_ramp(base: f32, warmup: usize, step: usize) -> f32 {
    (widen(base) * (step as f64 + 1.0) / warmup as f64) as f32
}

fn cosine(base: f32, min: f32, total: usize, step: usize) -> f32 {
    if total == 0 {
        return min;
    }
    let progress = step.min(total) as f64 / total as f64;
    let (base, min) = (widen(base), widen(min));
    (min + (base - min) * 0.5 * (1.0 + (PI * progress).cos())) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f32, want: f64) {
        assert!(
            (got as f64 - want).abs() <= 1e-7 * want.abs().max(1e-3),
            "got {got}, want {want}"
        );
    }

    #[test]
    fn constant_is_constant() {
        for step in [0, 1, 1000, usize::MAX] {
            assert_eq!(LrSchedule::Constant(0.25).lr_at(step), 0.25);
        }
    }

    #[test]
    fn step_decays_by_gamma_every_step_size_steps() {
        let s = LrSchedule::Step {
            base: 0.8,
            step_size: 3,
            gamma: 0.5,
        };
        for (step, want) in [
            (0, 0.8),
            (2, 0.8),
            (3, 0.4),
            (5, 0.4),
            (6, 0.2),
            (9, 0.1),
            (10, 0.1),
        ] {
            close(s.lr_at(step), want);
        }
        // γ = 0.1 after 4 decays: 0.8·1e-4, against the f64 formula.
        let s = LrSchedule::Step {
            base: 0.8,
            step_size: 2,
            gamma: 0.1,
        };
        close(s.lr_at(9), 0.8 * 0.1f64.powi(4));
        assert_eq!(s.lr_at(9), 8e-5);
    }

    #[test]
    fn step_with_zero_step_size_never_decays() {
        let s = LrSchedule::Step {
            base: 0.8,
            step_size: 0,
            gamma: 0.5,
        };
        assert_eq!([s.lr_at(0), s.lr_at(1), s.lr_at(1_000_000)], [0.8; 3]);
    }

    #[test]
    fn cosine_follows_half_cosine_then_holds_min() {
        let s = LrSchedule::Cosine {
            base: 1.0,
            min: 0.1,
            total: 8,
        };
        close(s.lr_at(0), 1.0);
        close(s.lr_at(4), 0.55); // cos(π/2) = 0: midpoint
        close(s.lr_at(2), 0.1 + 0.9 * 0.5 * (1.0 + (PI / 4.0).cos()));
        close(s.lr_at(6), 0.1 + 0.9 * 0.5 * (1.0 + (3.0 * PI / 4.0).cos()));
        close(s.lr_at(8), 0.1);
        close(s.lr_at(9), 0.1);
        close(s.lr_at(usize::MAX), 0.1);
        // Monotone non-increasing over the cosine.
        let lrs: Vec<f32> = (0..=8).map(|k| s.lr_at(k)).collect();
        assert!(lrs.windows(2).all(|w| w[1] <= w[0]), "{lrs:?}");
    }

    #[test]
    fn cosine_with_zero_total_is_min() {
        let s = LrSchedule::Cosine {
            base: 1.0,
            min: 0.2,
            total: 0,
        };
        assert_eq!([s.lr_at(0), s.lr_at(5)], [0.2, 0.2]);
    }

    #[test]
    fn warmup_ramps_linearly_to_base() {
        let s = LrSchedule::Warmup {
            base: 0.4,
            warmup: 4,
        };
        for (step, want) in [(0, 0.1), (1, 0.2), (2, 0.3), (3, 0.4), (4, 0.4), (100, 0.4)] {
            close(s.lr_at(step), want);
        }
        let none = LrSchedule::Warmup {
            base: 0.4,
            warmup: 0,
        };
        assert_eq!(none.lr_at(0), 0.4);
    }

    #[test]
    fn warmup_cosine_joins_warmup_and_cosine() {
        let s = LrSchedule::WarmupCosine {
            base: 1.0,
            min: 0.0,
            warmup: 2,
            total: 6,
        };
        close(s.lr_at(0), 0.5);
        close(s.lr_at(1), 1.0);
        close(s.lr_at(2), 1.0); // cosine step 0 of 4
        close(s.lr_at(3), 0.5 * (1.0 + (PI / 4.0).cos()));
        close(s.lr_at(4), 0.5);
        close(s.lr_at(6), 0.0);
        close(s.lr_at(60), 0.0);
        // No warmup: plain cosine.
        let c = LrSchedule::WarmupCosine {
            base: 1.0,
            min: 0.1,
            warmup: 0,
            total: 8,
        };
        let plain = LrSchedule::Cosine {
            base: 1.0,
            min: 0.1,
            total: 8,
        };
        for k in 0..12 {
            assert_eq!(c.lr_at(k), plain.lr_at(k));
        }
    }

    #[test]
    fn warmup_cosine_with_total_not_past_warmup_drops_to_min_after_warmup() {
        for total in [0, 2, 3] {
            let s = LrSchedule::WarmupCosine {
                base: 1.0,
                min: 0.25,
                warmup: 3,
                total,
            };
            close(s.lr_at(0), 1.0 / 3.0);
            close(s.lr_at(2), 1.0);
            close(s.lr_at(3), 0.25);
            close(s.lr_at(10), 0.25);
        }
    }

    #[test]
    fn schedules_are_copy_and_comparable() {
        let a = LrSchedule::Warmup {
            base: 0.1,
            warmup: 3,
        };
        let b = a;
        assert_eq!(a, b);
        assert_ne!(a, LrSchedule::Constant(0.1));
        assert!(format!("{a:?}").contains("Warmup"));
    }
}
