//! Stochastic gradient descent with optional (Nesterov) momentum and L2 weight decay.

use crate::group::{Overrides, ParamGroups, param_group_methods};
use crate::state::{Slots, iteration_and_state_methods};
use crate::{FusedRule, FusedUpdate, Optimizer, check_grad_len};

const PREFIXES: [&str; 1] = ["v"];

/// SGD with optional momentum, Nesterov momentum and L2 weight decay (computed in `f32`).
///
/// Per element, with `d = g + weight_decay·p`:
/// - `momentum == 0`: `p −= lr·d` (no state is kept);
/// - otherwise `v = momentum·v + d` and `p −= lr·v`, or `p −= lr·(d + momentum·v)` with
///   `nesterov`. The velocity `v` starts at zero, so the first step uses `v = d`.
///
/// State: one velocity buffer per param, exported as `"v/<param>"`.
///
/// [Parameter groups](crate::ParamGroup) may replace `weight_decay` (still L2, added to
/// the gradient) and scale `lr` per param.
///
/// ```
/// use rlx_optim::{Optimizer, Sgd};
///
/// let mut opt = Sgd::new(0.1).with_momentum(0.9, false);
/// let mut p = vec![1.0f32];
/// opt.step("p", &[1], &mut p, &[1.0]); // v = 1,   p = 1 − 0.1·1
/// opt.step("p", &[1], &mut p, &[1.0]); // v = 1.9, p = 0.9 − 0.1·1.9
/// assert!((p[0] - 0.71).abs() < 1e-6);
/// ```
#[derive(Debug, Clone)]
pub struct Sgd {
    /// Learning rate.
    pub lr: f32,
    /// Momentum factor μ (0 disables momentum).
    pub momentum: f32,
    /// Use Nesterov momentum (`d + μv` instead of `v`).
    pub nesterov: bool,
    /// L2 weight decay added to the gradient: `d = g + weight_decay·p`.
    pub weight_decay: f32,
    step: u64,
    velocity: Slots<1>,
    groups: ParamGroups,
}

impl Sgd {
    /// Plain SGD: no momentum, no weight decay.
    ///
    /// ```
    /// let opt = rlx_optim::Sgd::new(0.05);
    /// assert_eq!((opt.lr, opt.momentum, opt.nesterov, opt.weight_decay), (0.05, 0.0, false, 0.0));
    /// ```
    pub fn new(lr: f32) -> Self {
        Sgd {
            lr,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
            step: 0,
            velocity: Slots::new(),
            groups: ParamGroups::default(),
        }
    }

    builder_setters! {
        /// Set the momentum factor and whether to use Nesterov momentum.
        with_momentum(momentum: f32, nesterov: bool);

        /// Set the L2 weight decay.
        with_weight_decay(weight_decay: f32);
    }

    /// Number of completed iterations (`end_iteration` calls).
    pub fn current_step(&self) -> u64 {
        self.step
    }

    param_group_methods!(Sgd);

    /// The operands of one step for params with group overrides `o` (shared by the host
    /// `step` and the fused rule).
    fn rule(&self, o: Overrides) -> FusedRule {
        FusedRule::Sgd {
            lr: self.lr * o.lr_scale,
            momentum: self.momentum,
            nesterov: self.nesterov,
            weight_decay: o.weight_decay_or(self.weight_decay),
        }
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, name: &str, shape: &[usize], param: &mut [f32], grad: &[f32]) {
        check_grad_len("Sgd", name, param.len(), grad.len());
        let FusedRule::Sgd {
            lr,
            momentum: mu,
            nesterov,
            weight_decay: wd,
        } = self.rule(self.groups.resolve(name, shape))
        else {
            unreachable!("Sgd::rule gives an Sgd rule")
        };
        if mu == 0.0 {
            for (p, &g) in param.iter_mut().zip(grad) {
                let d = g + wd * *p;
                *p -= lr * d;
            }
        } else {
            let [v] = self.velocity.get_or_zero("Sgd", name, param.len());
            for ((p, &g), v) in param.iter_mut().zip(grad).zip(v.iter_mut()) {
                let d = g + wd * *p;
                *v = mu * *v + d;
                let u = if nesterov { d + mu * *v } else { *v };
                *p -= lr * u;
            }
        }
        self.groups.note(name, shape);
    }

    fn set_lr(&mut self, lr: f32) {
        self.lr = lr;
    }

    iteration_and_state_methods!("Sgd", velocity, PREFIXES);

    fn fused(&mut self) -> Option<FusedUpdate<'_>> {
        let rules = self.groups.per_group(|o| self.rule(o));
        // Like `step`: no velocity exists (or is created) without momentum.
        let kinds: &'static [&'static str] = if self.momentum == 0.0 { &[] } else { &PREFIXES };
        Some(FusedUpdate::new(
            "Sgd",
            rules,
            kinds,
            &mut self.velocity,
            &mut self.groups,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OptimizerState;

    /// f64 reference of the documented update, one element.
    fn reference(lr: f64, mu: f64, nesterov: bool, wd: f64, p0: f64, grads: &[f64]) -> Vec<f64> {
        let (mut p, mut v) = (p0, 0.0);
        let mut out = vec![];
        for &g in grads {
            let d = g + wd * p;
            if mu == 0.0 {
                p -= lr * d;
            } else {
                v = mu * v + d;
                p -= lr * if nesterov { d + mu * v } else { v };
            }
            out.push(p);
        }
        out
    }

    fn run(opt: &mut Sgd, p0: f32, grads: &[f32]) -> Vec<f32> {
        let mut p = [p0];
        grads
            .iter()
            .map(|&g| {
                opt.step("p", &[1], &mut p, &[g]);
                opt.end_iteration();
                p[0]
            })
            .collect()
    }

    #[test]
    fn defaults_and_builders_set_the_public_fields() {
        let o = Sgd::new(0.3)
            .with_momentum(0.8, true)
            .with_weight_decay(0.01);
        assert_eq!(
            (o.lr, o.momentum, o.nesterov, o.weight_decay),
            (0.3, 0.8, true, 0.01)
        );
        let mut o = Sgd::new(0.3);
        o.set_lr(0.7);
        assert_eq!(o.lr, 0.7);
    }

    #[test]
    fn plain_sgd_matches_hand_computed_steps() {
        // p = 1, lr = 0.1, g = 2 then −1: p = 0.8, then 0.9.
        let got = run(&mut Sgd::new(0.1), 1.0, &[2.0, -1.0]);
        assert!(
            (got[0] - 0.8).abs() < 1e-7 && (got[1] - 0.9).abs() < 1e-7,
            "{got:?}"
        );
        assert!(Sgd::new(0.1).state_dict().unwrap().buffers.is_empty());
    }

    #[test]
    fn heavy_ball_momentum_matches_hand_computed_steps() {
        // lr 0.1, μ 0.9, g = 1,1,1: v = 1, 1.9, 2.71 → p = 0.9, 0.71, 0.439.
        let got = run(
            &mut Sgd::new(0.1).with_momentum(0.9, false),
            1.0,
            &[1.0, 1.0, 1.0],
        );
        for (g, want) in got.iter().zip([0.9, 0.71, 0.439]) {
            assert!((g - want).abs() < 1e-6, "{got:?}");
        }
    }

    #[test]
    fn nesterov_looks_ahead_and_differs_from_plain_momentum() {
        // lr 0.1, μ 0.9, g = 1,1: v = 1 → u = 1 + 0.9 = 1.9 → p = 0.81;
        // v = 1.9 → u = 1 + 1.71 = 2.71 → p = 0.81 − 0.271 = 0.539.
        let nes = run(
            &mut Sgd::new(0.1).with_momentum(0.9, true),
            1.0,
            &[1.0, 1.0],
        );
        assert!(
            (nes[0] - 0.81).abs() < 1e-6 && (nes[1] - 0.539).abs() < 1e-6,
            "{nes:?}"
        );
        let plain = run(
            &mut Sgd::new(0.1).with_momentum(0.9, false),
            1.0,
            &[1.0, 1.0],
        );
        assert!((plain[1] - nes[1]).abs() > 0.1);
    }

    #[test]
    fn weight_decay_is_added_to_the_gradient_before_momentum() {
        let grads = [0.5f32, -0.25, 1.5];
        for (mu, nesterov) in [(0.0, false), (0.9, false), (0.5, true)] {
            let mut opt = Sgd::new(0.2)
                .with_momentum(mu, nesterov)
                .with_weight_decay(0.1);
            let got = run(&mut opt, 2.0, &grads);
            let g64: Vec<f64> = grads.iter().map(|&g| g as f64).collect();
            let want = reference(0.2, mu as f64, nesterov, 0.1, 2.0, &g64);
            for (g, w) in got.iter().zip(&want) {
                assert!((*g as f64 - w).abs() < 1e-6, "μ={mu}: {got:?} vs {want:?}");
            }
        }
        // Decay alone shrinks p toward zero by lr·wd·p: 2 − 0.2·0.1·2 = 1.96.
        let got = run(&mut Sgd::new(0.2).with_weight_decay(0.1), 2.0, &[0.0]);
        assert!((got[0] - 1.96).abs() < 1e-6);
    }

    #[test]
    fn state_dict_exports_velocity_and_step_and_rejects_foreign_buffers() {
        let mut opt = Sgd::new(0.1).with_momentum(0.9, false);
        let mut p = [1.0f32, 2.0];
        opt.step("w", &[2], &mut p, &[1.0, -2.0]);
        opt.end_iteration();
        let s = opt.state_dict().unwrap();
        assert_eq!(s.step, 1);
        assert_eq!(s.buffers, vec![("v/w".to_string(), vec![1.0, -2.0])]);
        let bad = OptimizerState {
            step: 9,
            buffers: vec![("m/w".into(), vec![0.0, 0.0])],
            ..Default::default()
        };
        assert!(!opt.load_state_dict(&bad));
        assert_eq!(
            opt.state_dict().unwrap(),
            s,
            "failed load must not change state"
        );
    }

    #[test]
    #[should_panic(expected = "Sgd::step: grad for param `w` has 1 values but the param has 2")]
    fn mismatched_grad_length_panics() {
        Sgd::new(0.1).step("w", &[2], &mut [0.0, 0.0], &[1.0]);
    }
}
