//! Lion: sign-of-interpolated-momentum updates.

use crate::group::{Overrides, ParamGroups, param_group_methods};
use crate::state::{Slots, iteration_and_state_methods};
use crate::{FusedRule, FusedUpdate, Optimizer, check_grad_len};

const PREFIXES: [&str; 1] = ["m"];

/// Lion ("EvoLved Sign Momentum", Chen et al. 2023), computed in `f32`.
///
/// Per element:
/// ```text
/// c  = β1·m + (1−β1)·g
/// p −= lr·(sign(c) + weight_decay·p)      sign(0) = 0
/// m  = β2·m + (1−β2)·g
/// ```
/// Every coordinate moves by exactly `lr` (plus decay) whatever the gradient's size, so
/// Lion usually wants a learning rate 3–10× smaller than AdamW's.
///
/// State: one momentum buffer per param, exported as `"m/<param>"`.
///
/// [Parameter groups](crate::ParamGroup) may replace `weight_decay` (still decoupled) and
/// scale `lr` per param.
///
/// ```
/// use rlx_optim::{Lion, Optimizer};
///
/// let mut opt = Lion::new(0.01);
/// let mut p = vec![1.0f32, 1.0, 1.0];
/// opt.step("p", &[3], &mut p, &[1e-6, -50.0, 0.0]);
/// assert_eq!(p, [0.99, 1.01, 1.0]);
/// ```
#[derive(Debug, Clone)]
pub struct Lion {
    /// Learning rate.
    pub lr: f32,
    /// Interpolation factor β1 for the update direction.
    pub beta1: f32,
    /// Momentum decay β2.
    pub beta2: f32,
    /// Decoupled weight decay (`p −= lr·weight_decay·p`).
    pub weight_decay: f32,
    step: u64,
    momentum: Slots<1>,
    groups: ParamGroups,
}

/// Sign with `sign(±0) = 0` (unlike `f32::signum`) and NaN passed through.
fn sign(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x * 0.0
    }
}

impl Lion {
    /// Lion with β = (0.9, 0.99) and no weight decay.
    ///
    /// ```
    /// let o = rlx_optim::Lion::new(1e-4);
    /// assert_eq!((o.lr, o.beta1, o.beta2, o.weight_decay), (1e-4, 0.9, 0.99, 0.0));
    /// ```
    pub fn new(lr: f32) -> Self {
        Lion {
            lr,
            beta1: 0.9,
            beta2: 0.99,
            weight_decay: 0.0,
            step: 0,
            momentum: Slots::new(),
            groups: ParamGroups::default(),
        }
    }

    builder_setters! {
        /// Set (β1, β2).
        with_betas(beta1: f32, beta2: f32);

        /// Set the decoupled weight decay.
        with_weight_decay(weight_decay: f32);
    }

    /// Number of completed iterations (`end_iteration` calls).
    pub fn current_step(&self) -> u64 {
        self.step
    }

    param_group_methods!(Lion);

    /// The operands of one step for params with group overrides `o`, shared by the host
    /// `step` and the fused rule.
    fn rule(&self, o: Overrides) -> FusedRule {
        FusedRule::Lion {
            lr: self.lr * o.lr_scale,
            beta1: self.beta1,
            one_minus_beta1: 1.0 - self.beta1,
            beta2: self.beta2,
            one_minus_beta2: 1.0 - self.beta2,
            weight_decay: o.weight_decay_or(self.weight_decay),
        }
    }
}

impl Optimizer for Lion {
    fn step(&mut self, name: &str, shape: &[usize], param: &mut [f32], grad: &[f32]) {
        check_grad_len("Lion", name, param.len(), grad.len());
        let FusedRule::Lion {
            lr,
            beta1: b1,
            one_minus_beta1: c1,
            beta2: b2,
            one_minus_beta2: c2,
            weight_decay: wd,
        } = self.rule(self.groups.resolve(name, shape))
        else {
            unreachable!()
        };
        let [m] = self.momentum.get_or_zero("Lion", name, param.len());
        for ((p, &g), m) in param.iter_mut().zip(grad).zip(m.iter_mut()) {
            let c = b1 * *m + c1 * g;
            *p -= lr * (sign(c) + wd * *p);
            *m = b2 * *m + c2 * g;
        }
        self.groups.note(name, shape);
    }

    fn set_lr(&mut self, lr: f32) {
        self.lr = lr;
    }

    iteration_and_state_methods!("Lion", momentum, PREFIXES);

    fn fused(&mut self) -> Option<FusedUpdate<'_>> {
        let rules = self.groups.per_group(|o| self.rule(o));
        Some(FusedUpdate::new(
            "Lion",
            rules,
            &PREFIXES,
            &mut self.momentum,
            &mut self.groups,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_builders_and_set_lr() {
        let mut o = Lion::new(0.1).with_betas(0.5, 0.6).with_weight_decay(0.2);
        assert_eq!(
            (o.lr, o.beta1, o.beta2, o.weight_decay),
            (0.1, 0.5, 0.6, 0.2)
        );
        o.set_lr(0.3);
        assert_eq!(o.lr, 0.3);
    }

    #[test]
    fn sign_is_zero_at_zero_and_propagates_nan() {
        assert_eq!(sign(3.0), 1.0);
        assert_eq!(sign(-1e-30), -1.0);
        assert_eq!(sign(0.0), 0.0);
        assert_eq!(sign(-0.0), 0.0);
        assert!(sign(f32::NAN).is_nan());
    }

    #[test]
    fn three_steps_match_hand_computed_values() {
        // lr 0.1, β 0.9/0.99, p = 1, g = 1, −0.5, −0.05:
        // 1: c = 0.1 > 0 → p = 0.9;              m = 0.01
        // 2: c = 0.009 − 0.05 < 0 → p = 1.0;      m = 0.0099 − 0.005 = 0.0049
        // 3: c = 0.00441 − 0.005 < 0 → p = 1.1;   m = 0.004851 − 0.0005 = 0.004351
        let mut o = Lion::new(0.1);
        let mut p = [1.0f32];
        let mut seen = vec![];
        for g in [1.0f32, -0.5, -0.05] {
            o.step("p", &[1], &mut p, &[g]);
            o.end_iteration();
            seen.push(p[0]);
        }
        for (got, want) in seen.iter().zip([0.9, 1.0, 1.1]) {
            assert!((got - want).abs() < 1e-6, "{seen:?}");
        }
        let m = o.state_dict().unwrap().buffer("m/p").unwrap()[0];
        assert!((m - 0.004351).abs() < 1e-8, "{m}");
    }

    #[test]
    fn update_magnitude_ignores_gradient_scale() {
        for scale in [1e-8f32, 1.0, 1e8] {
            let mut o = Lion::new(0.5);
            let mut p = [0.0f32, 0.0];
            o.step("p", &[2], &mut p, &[scale, -scale]);
            assert_eq!(p, [-0.5, 0.5], "scale {scale}");
        }
    }

    #[test]
    fn weight_decay_is_decoupled_and_scaled_by_lr() {
        // g = 0 → sign term 0, so p = 2 − 0.1·0.5·2 = 1.9.
        let mut o = Lion::new(0.1).with_weight_decay(0.5);
        let mut p = [2.0f32];
        o.step("p", &[1], &mut p, &[0.0]);
        assert!((p[0] - 1.9).abs() < 1e-6, "{p:?}");
        // With a gradient: 2 − 0.1·(1 + 1) = 1.8.
        let mut p = [2.0f32];
        Lion::new(0.1)
            .with_weight_decay(0.5)
            .step("p", &[1], &mut p, &[3.0]);
        assert!((p[0] - 1.8).abs() < 1e-6, "{p:?}");
    }

    #[test]
    fn momentum_can_override_the_current_gradient_sign() {
        // β1 = 0.9: after m = 1 (β2 = 0 copies g), a gradient of −0.5 gives
        // c = 0.9 − 0.05 > 0, so the step still goes down.
        let mut o = Lion::new(1.0).with_betas(0.9, 0.0);
        let mut p = [0.0f32];
        o.step("p", &[1], &mut p, &[1.0]);
        o.step("p", &[1], &mut p, &[-0.5]);
        assert_eq!(p, [-2.0]);
    }

    #[test]
    #[should_panic(expected = "Lion::step: grad for param `w` has 2 values but the param has 3")]
    fn mismatched_grad_length_panics() {
        Lion::new(0.1).step("w", &[3], &mut [0.0; 3], &[1.0, 2.0]);
    }
}
