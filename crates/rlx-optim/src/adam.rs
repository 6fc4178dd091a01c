//! Adam with L2-coupled weight decay.

use crate::group::{Overrides, ParamGroups, param_group_methods};
use crate::state::{Slots, iteration_and_state_methods};
use crate::{AdamCoeffs, FusedRule, FusedUpdate, Optimizer, check_grad_len, widen};

pub(crate) const MOMENT_PREFIXES: [&str; 2] = ["m", "v"];

/// Adam (Kingma & Ba) with L2-coupled weight decay.
///
/// Per element, with `t = current_step() + 1`:
/// ```text
/// g  = g + weight_decay·p              (L2 decay goes through the moments)
/// m  = β1·m + (1−β1)·g
/// v  = β2·v + (1−β2)·g²
/// m̂ = m / (1 − β1^t),  v̂ = v / (1 − β2^t)
/// p −= lr · m̂ / (√v̂ + eps)
/// ```
/// The step counter advances only in [`Optimizer::end_iteration`], so every param
/// stepped within one training iteration uses the same bias correction.
///
/// By default the arithmetic is done in `f64` (hyperparameters widened to the `f64`
/// nearest their decimal value, so `0.999` means 0.999) and the results are rounded to
/// `f32` once per element; `f32_math = true` does the same arithmetic in `f32`.
/// State (`m`, `v`) is stored in `f32` either way and exported as `"m/<param>"`,
/// `"v/<param>"`.
///
/// [Parameter groups](crate::ParamGroup) may replace `weight_decay` (still L2-coupled)
/// and scale `lr` per param.
///
/// ```
/// use rlx_optim::{Adam, Optimizer};
///
/// let mut opt = Adam::new(0.1);
/// let mut p = vec![1.0f32, 1.0];
/// // Bias correction makes the first step lr·g/(|g|+eps) ≈ lr·sign(g).
/// opt.step("p", &[2], &mut p, &[0.5, -3.0]);
/// opt.end_iteration();
/// assert!((p[0] - 0.9).abs() < 1e-6 && (p[1] - 1.1).abs() < 1e-6);
/// assert_eq!(opt.current_step(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct Adam {
    /// Learning rate.
    pub lr: f32,
    /// First-moment decay β1.
    pub beta1: f32,
    /// Second-moment decay β2.
    pub beta2: f32,
    /// Denominator stabilizer added to `√v̂`.
    pub eps: f32,
    /// L2 weight decay added to the gradient before the moments.
    pub weight_decay: f32,
    /// Compute in `f32` instead of `f64`.
    pub f32_math: bool,
    step: u64,
    moments: Slots<2>,
    groups: ParamGroups,
}

impl Adam {
    /// Adam with β = (0.9, 0.999), eps = 1e-8, no weight decay, f64 math.
    ///
    /// ```
    /// let o = rlx_optim::Adam::new(1e-3);
    /// assert_eq!((o.beta1, o.beta2, o.eps, o.weight_decay, o.f32_math), (0.9, 0.999, 1e-8, 0.0, false));
    /// ```
    pub fn new(lr: f32) -> Self {
        Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            f32_math: false,
            step: 0,
            moments: Slots::new(),
            groups: ParamGroups::default(),
        }
    }

    builder_setters! {
        /// Set the moment decays (β1, β2).
        with_betas(beta1: f32, beta2: f32);

        /// Set eps.
        with_eps(eps: f32);

        /// Set the L2 (gradient-coupled) weight decay.
        with_weight_decay(weight_decay: f32);

        /// Compute in `f32` (`true`) or `f64` (`false`, the default).
        with_f32_math(f32_math: bool);
    }

    /// Number of completed iterations; the next step's bias correction uses this + 1.
    pub fn current_step(&self) -> u64 {
        self.step
    }

    param_group_methods!(Adam);

    /// The operands of the next step for params with group overrides `o` (shared by the
    /// host `step` and the fused rule).
    fn coeffs(&self, o: Overrides) -> AdamCoeffs {
        adam_coeffs(
            self.f32_math,
            self.step + 1,
            [
                self.lr,
                self.beta1,
                self.beta2,
                self.eps,
                o.weight_decay_or(self.weight_decay),
            ],
            o.lr_scale,
        )
    }
}

/// Adam/AdamW operands for step `t` from `[lr, β1, β2, eps, wd]` and a group's
/// learning-rate multiplier: in `f32` arithmetic (values kept exactly in the `f64`
/// fields; `lr·lr_scale` rounded to `f32`) or widened to `f64` (the product in `f64`).
pub(crate) fn adam_coeffs(f32_math: bool, t: u64, hp: [f32; 5], lr_scale: f32) -> AdamCoeffs {
    let [lr, b1, b2, eps, wd] = hp;
    if f32_math {
        AdamCoeffs {
            lr: (lr * lr_scale) as f64,
            beta1: b1 as f64,
            one_minus_beta1: (1.0 - b1) as f64,
            beta2: b2 as f64,
            one_minus_beta2: (1.0 - b2) as f64,
            bias_correction1: (1.0 - b1.powf(t as f32)) as f64,
            bias_correction2: (1.0 - b2.powf(t as f32)) as f64,
            eps: eps as f64,
            weight_decay: wd as f64,
        }
    } else {
        let lr = widen(lr) * widen(lr_scale);
        adam_coeffs64(t, [lr, widen(b1), widen(b2), widen(eps), widen(wd)])
    }
}

/// Adam/AdamW operands for step `t` in `f64` from `[lr, β1, β2, eps, wd]`.
pub(crate) fn adam_coeffs64(t: u64, hp: [f64; 5]) -> AdamCoeffs {
    let [lr, b1, b2, eps, wd] = hp;
    AdamCoeffs {
        lr,
        beta1: b1,
        one_minus_beta1: 1.0 - b1,
        beta2: b2,
        one_minus_beta2: 1.0 - b2,
        bias_correction1: 1.0 - b1.powf(t as f64),
        bias_correction2: 1.0 - b2.powf(t as f64),
        eps,
        weight_decay: wd,
    }
}

/// One element's moment update in `f32` math (Adam and AdamW): `m` and `v` move
/// towards `g` (for Adam already carrying the L2 decay) with the decays
/// `k = [β1, 1−β1, β2, 1−β2]`.
#[inline]
pub(crate) fn moments32(k: [f32; 4], m: &mut f32, v: &mut f32, g: f32) {
    let [b1, c1, b2, c2] = k;
    *m = b1 * *m + c1 * g;
    *v = b2 * *v + c2 * g * g;
}

/// One element's moment update in `f64` math (Adam and AdamW): from the stored `m`,
/// `v` and the gradient `g`, the new `[m, v]` before rounding back to `f32`.
#[inline]
pub(crate) fn moments64(c: &AdamCoeffs, m: f32, v: f32, g: f64) -> [f64; 2] {
    let m64 = c.beta1 * m as f64 + c.one_minus_beta1 * g;
    let v64 = c.beta2 * v as f64 + c.one_minus_beta2 * g * g;
    [m64, v64]
}

impl Optimizer for Adam {
    fn step(&mut self, name: &str, shape: &[usize], param: &mut [f32], grad: &[f32]) {
        check_grad_len("Adam", name, param.len(), grad.len());
        let f32_math = self.f32_math;
        let c = self.coeffs(self.groups.resolve(name, shape));
        let [m, v] = self.moments.get_or_zero("Adam", name, param.len());
        let elems = param
            .iter_mut()
            .zip(grad)
            .zip(m.iter_mut())
            .zip(v.iter_mut());
        let [step, inv_sqrt_bc2, _] = c.step_scalars(f32_math);
        if f32_math {
            let [_, b1, c1, b2, c2, _, _, eps, wd] = c.as_f32();
            let (step, inv_sqrt_bc2) = (step as f32, inv_sqrt_bc2 as f32);
            for (((p, &g), m), v) in elems {
                let g = g + wd * *p;
                moments32([b1, c1, b2, c2], m, v, g);
                *p -= (step * *m) / (v.sqrt() * inv_sqrt_bc2 + eps);
            }
        } else {
            for (((p, &g), m), v) in elems {
                let p64 = *p as f64;
                let g = g as f64 + c.weight_decay * p64;
                let [m64, v64] = moments64(&c, *m, *v, g);
                *p = (p64 - (step * m64) / (v64.sqrt() * inv_sqrt_bc2 + c.eps)) as f32;
                *m = m64 as f32;
                *v = v64 as f32;
            }
        }
        self.groups.note(name, shape);
    }

    fn set_lr(&mut self, lr: f32) {
        self.lr = lr;
    }

    iteration_and_state_methods!("Adam", moments, MOMENT_PREFIXES);

    fn fused(&mut self) -> Option<FusedUpdate<'_>> {
        let rules = self.groups.per_group(|o| FusedRule::Adam {
            f32_math: self.f32_math,
            c: self.coeffs(o),
        });
        Some(FusedUpdate::new(
            "Adam",
            rules,
            &MOMENT_PREFIXES,
            &mut self.moments,
            &mut self.groups,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OptimizerState;

    /// f64 reference of the documented rule for a single element; `iters[k]` lists the
    /// gradients stepped during iteration k (all share that iteration's t).
    fn reference(lr: f64, b1: f64, b2: f64, eps: f64, wd: f64, p0: f64, iters: &[&[f64]]) -> f64 {
        let (mut p, mut m, mut v) = (p0, 0.0f64, 0.0f64);
        for (k, grads) in iters.iter().enumerate() {
            let t = (k + 1) as f64;
            for &g in grads.iter() {
                let g = g + wd * p;
                m = (b1 * m + (1.0 - b1) * g) as f32 as f64;
                v = (b2 * v + (1.0 - b2) * g * g) as f32 as f64;
                let m_hat = m / (1.0 - b1.powf(t));
                let v_hat = v / (1.0 - b2.powf(t));
                p = (p - lr * m_hat / (v_hat.sqrt() + eps)) as f32 as f64;
            }
        }
        p
    }

    #[test]
    fn defaults_builders_and_set_lr() {
        let o = Adam::new(0.01)
            .with_betas(0.8, 0.9)
            .with_eps(1e-6)
            .with_weight_decay(0.1)
            .with_f32_math(true);
        assert_eq!(
            (o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.f32_math),
            (0.01, 0.8, 0.9, 1e-6, 0.1, true)
        );
        let mut o = Adam::new(0.01);
        o.set_lr(0.5);
        assert_eq!((o.lr, o.current_step()), (0.5, 0));
    }

    #[test]
    fn two_iterations_match_hand_computed_values() {
        // p = 1, lr = 0.1, g = 0.5 then −0.25 (β 0.9/0.999, eps 1e-8).
        // t=1: m = 0.05, v = 0.00025, m̂ = 0.5, v̂ = 0.25 → p = 1 − 0.1·0.5/0.5 = 0.9.
        // t=2: m = 0.045 − 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225,
        //      m̂ = 0.02/0.19, v̂ = 0.00031225/0.001999 → p = 0.9 − 0.1·m̂/√v̂ ≈ 0.873366.
        let mut opt = Adam::new(0.1);
        let mut p = [1.0f32];
        opt.step("p", &[1], &mut p, &[0.5]);
        opt.end_iteration();
        assert!((p[0] - 0.9).abs() < 1e-6, "{p:?}");
        opt.step("p", &[1], &mut p, &[-0.25]);
        opt.end_iteration();
        let want = 0.9 - 0.1 * (0.02 / 0.19) / (0.00031225f64 / 0.001999).sqrt();
        assert!((p[0] as f64 - want).abs() < 1e-6, "{} vs {want}", p[0]);
        assert!((want - 0.873366).abs() < 1e-6);
    }

    #[test]
    fn three_iterations_match_f64_reference_with_l2_decay() {
        let mut opt = Adam::new(0.05).with_betas(0.8, 0.95).with_weight_decay(0.2);
        let mut p = [1.5f32];
        for g in [0.3f32, -1.2, 0.7] {
            opt.step("p", &[1], &mut p, &[g]);
            opt.end_iteration();
        }
        let want = reference(0.05, 0.8, 0.95, 1e-8, 0.2, 1.5, &[&[0.3], &[-1.2], &[0.7]]);
        assert!((p[0] as f64 - want).abs() < 1e-6, "{} vs {want}", p[0]);
    }

    #[test]
    fn l2_decay_moves_a_zero_gradient_param_through_the_moments() {
        // g = 0 but wd·p = 0.1·2 = 0.2 enters the moments: first step ≈ lr·sign(0.2).
        let mut opt = Adam::new(0.01).with_weight_decay(0.1);
        let mut p = [2.0f32];
        opt.step("p", &[1], &mut p, &[0.0]);
        assert!((p[0] - 1.99).abs() < 1e-6, "{p:?}");
        let s = opt.state_dict().unwrap();
        assert!((s.buffer("m/p").unwrap()[0] - 0.02).abs() < 1e-7);
    }

    #[test]
    fn bias_correction_advances_only_in_end_iteration() {
        // Two steps inside one iteration both use t = 1; the next iteration uses t = 2.
        let mut opt = Adam::new(0.1);
        let mut p = [1.0f32];
        opt.step("p", &[1], &mut p, &[0.5]);
        opt.step("p", &[1], &mut p, &[0.5]);
        assert_eq!(opt.current_step(), 0);
        opt.end_iteration();
        opt.step("p", &[1], &mut p, &[-1.0]);
        opt.end_iteration();
        assert_eq!(opt.current_step(), 2);
        let want = reference(0.1, 0.9, 0.999, 1e-8, 0.0, 1.0, &[&[0.5, 0.5], &[-1.0]]);
        assert!((p[0] as f64 - want).abs() < 1e-6, "{} vs {want}", p[0]);
        // The second t=1 step: m = 0.095, v = 0.00049975 → m̂/√v̂ = (0.095/0.1)/√(0.00049975/0.001)
        let second = 1.0 - 0.1 - 0.1 * 0.95 / (0.0004997500f64 / 0.001).sqrt();
        let mut q = [1.0f32];
        let mut fresh = Adam::new(0.1);
        fresh.step("q", &[1], &mut q, &[0.5]);
        fresh.step("q", &[1], &mut q, &[0.5]);
        assert!((q[0] as f64 - second).abs() < 1e-6, "{} vs {second}", q[0]);
    }

    #[test]
    fn params_in_one_iteration_share_the_step_counter_and_keep_separate_moments() {
        let mut opt = Adam::new(0.1);
        let (mut a, mut b) = ([1.0f32], [1.0f32]);
        for _ in 0..3 {
            opt.step("a", &[1], &mut a, &[0.5]);
            opt.step("b", &[1], &mut b, &[0.5]);
            opt.end_iteration();
        }
        assert_eq!(a, b);
        let want = reference(0.1, 0.9, 0.999, 1e-8, 0.0, 1.0, &[&[0.5], &[0.5], &[0.5]]);
        assert!((a[0] as f64 - want).abs() < 1e-6);
    }

    #[test]
    fn f32_math_agrees_with_f64_math_within_tolerance() {
        let mut seed = 0x9e37_79b9u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed as f32 / u32::MAX as f32 * 2.0 - 1.0
        };
        let mut p64 = vec![0.0f32; 16];
        for x in p64.iter_mut() {
            *x = next();
        }
        let mut p32 = p64.clone();
        let mut o64 = Adam::new(1e-2).with_weight_decay(0.01);
        let mut o32 = o64.clone().with_f32_math(true);
        for _ in 0..100 {
            let g: Vec<f32> = (0..16).map(|_| next()).collect();
            o64.step("w", &[16], &mut p64, &g);
            o32.step("w", &[16], &mut p32, &g);
            o64.end_iteration();
            o32.end_iteration();
        }
        let max_diff = p64
            .iter()
            .zip(&p32)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(max_diff < 1e-4, "f32 vs f64 paths differ by {max_diff}");
    }

    #[test]
    fn state_dict_round_trips_and_rejects_incomplete_state() {
        let mut opt = Adam::new(0.1);
        let mut p = [1.0f32, -1.0];
        opt.step("w", &[2], &mut p, &[0.5, 0.25]);
        opt.end_iteration();
        let s = opt.state_dict().unwrap();
        assert_eq!(s.step, 1);
        assert_eq!(s.buffer("m/w").unwrap(), [0.05, 0.025]);
        let missing_v = OptimizerState {
            step: 4,
            buffers: vec![("m/w".into(), vec![1.0, 1.0])],
            ..Default::default()
        };
        assert!(!opt.load_state_dict(&missing_v));
        assert_eq!(opt.state_dict().unwrap(), s);
        let mut fresh = Adam::new(0.1);
        assert!(fresh.load_state_dict(&s));
        assert_eq!(fresh.current_step(), 1);
        assert_eq!(fresh.state_dict().unwrap(), s);
    }

    #[test]
    #[should_panic(expected = "Adam::step: grad for param `w` has 3 values but the param has 2")]
    fn mismatched_grad_length_panics() {
        Adam::new(0.1).step("w", &[2], &mut [0.0, 0.0], &[1.0, 2.0, 3.0]);
    }
}
