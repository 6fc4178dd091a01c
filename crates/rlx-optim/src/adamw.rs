//! AdamW: Adam with decoupled weight decay, with an optional PyTorch-order f64 path.

use crate::adam::{MOMENT_PREFIXES, adam_coeffs, adam_coeffs64, moments32, moments64};
use crate::group::{Overrides, ParamGroups, param_group_methods};
use crate::state::{Slots, iteration_and_state_methods};
use crate::{FusedRule, FusedUpdate, Optimizer, check_grad_len, widen};

/// AdamW (Loshchilov & Hutter): Adam with weight decay decoupled from the moments.
///
/// Per element, with `t = current_step() + 1`:
/// ```text
/// m  = β1·m + (1−β1)·g
/// v  = β2·v + (1−β2)·g²
/// m̂ = m / (1 − β1^t),  v̂ = v / (1 − β2^t)
/// p  = p − lr·(m̂/(√v̂ + eps) + weight_decay·p)
/// ```
/// The step counter advances only in [`Optimizer::end_iteration`]. Note the default
/// `weight_decay` is **0.01** (PyTorch's AdamW default), unlike [`Adam`](crate::Adam).
///
/// What the math flags change (the formula is the same; only rounding differs):
/// - default: the formula above evaluated in `f64`, rounded to `f32` once per result;
/// - `f32_math`: the formula above evaluated in `f32`;
/// - `torch_math` (wins over `f32_math`): in `f64`, in the operation order of PyTorch's
///   single-tensor AdamW — `p *= 1 − lr·wd`; `m += (1−β1)·(g − m)` (a lerp); `v = v·β2 +
///   (1−β2)·g·g`; `denom = √v/√(1−β2^t) + eps`; `p += (−lr/(1−β1^t))·m/denom` — so results
///   match a float64 PyTorch run up to the `f32` storage of params and moments.
///
/// The `f64` paths read hyperparameters from `lr_f64` / `torch_hp` (set by
/// [`AdamW::torch`] and [`AdamW::set_lr_f64`]) while those still round to the `f32`
/// fields; otherwise (or when unset) from the `f32` fields, widened to the `f64` nearest
/// their decimal value. So assigning a new value to a public `f32` field always takes
/// effect. `eps` is always read from the `f32` field that way (`1e-8` means 1e-8).
///
/// State (`m`, `v`, stored in `f32`) is exported as `"m/<param>"`, `"v/<param>"`.
///
/// [Parameter groups](crate::ParamGroup) may replace `weight_decay` (still decoupled) and
/// scale the learning rate per param — the `nanoGPT` setup is
/// `AdamW::torch(lr, betas, 0.1).with_group(ParamGroup::no_decay_below_rank(2))`. A group's
/// decay override is used in `f64` as the decimal it was written as; its `lr_scale`
/// multiplies `lr` in the path's arithmetic.
///
/// ```
/// use rlx_optim::{AdamW, Optimizer};
///
/// let mut opt = AdamW::new(0.1).with_weight_decay(0.5);
/// let mut p = vec![2.0f32];
/// // First step: m̂/(√v̂+eps) ≈ sign(g) = 1, decay 0.5·2 = 1 → p = 2 − 0.1·(1 + 1).
/// opt.step("p", &[1], &mut p, &[0.25]);
/// opt.end_iteration();
/// assert!((p[0] - 1.8).abs() < 1e-6);
///
/// let torch = AdamW::torch(1e-3, (0.9, 0.999), 0.01);
/// assert!(torch.torch_math && torch.lr_f64 == Some(1e-3));
/// ```
#[derive(Debug, Clone)]
pub struct AdamW {
    /// Learning rate.
    pub lr: f32,
    /// First-moment decay β1.
    pub beta1: f32,
    /// Second-moment decay β2.
    pub beta2: f32,
    /// Denominator stabilizer added to `√v̂`.
    pub eps: f32,
    /// Decoupled weight decay (`p −= lr·weight_decay·p`), default 0.01.
    pub weight_decay: f32,
    /// Compute in `f32` instead of `f64` (ignored when `torch_math` is set).
    pub f32_math: bool,
    /// Compute in `f64` in PyTorch's operation order.
    pub torch_math: bool,
    /// Exact `f64` learning rate for the `f64` paths (used while `lr_f64 as f32 == lr`).
    pub lr_f64: Option<f64>,
    /// Exact `f64` `(β1, β2, weight_decay)` for the `f64` paths (each used while it
    /// rounds to the matching `f32` field).
    pub torch_hp: Option<(f64, f64, f64)>,
    step: u64,
    moments: Slots<2>,
    groups: ParamGroups,
}

/// Hyperparameters resolved for one step in `f64`.
struct Hp64 {
    lr: f64,
    b1: f64,
    b2: f64,
    eps: f64,
    wd: f64,
}

/// The exact value while it still rounds to the public `f32` field, else the field.
fn pick(exact: Option<f64>, field: f32) -> f64 {
    match exact {
        Some(x) if x as f32 == field => x,
        _ => widen(field),
    }
}

/// Linear interpolation in PyTorch's two-branch form (exact at both ends);
/// `one_minus_weight` is `1 − weight`.
fn torch_lerp(start: f64, end: f64, weight: f64, one_minus_weight: f64) -> f64 {
    if weight.abs() < 0.5 {
        start + weight * (end - start)
    } else {
        end - (end - start) * one_minus_weight
    }
}

impl AdamW {
    /// AdamW with β = (0.9, 0.999), eps = 1e-8, weight decay 0.01, f64 math.
    ///
    /// ```
    /// let o = rlx_optim::AdamW::new(1e-3);
    /// assert_eq!((o.beta1, o.beta2, o.eps, o.weight_decay), (0.9, 0.999, 1e-8, 0.01));
    /// assert!(!o.f32_math && !o.torch_math && o.lr_f64.is_none() && o.torch_hp.is_none());
    /// ```
    pub fn new(lr: f32) -> Self {
        AdamW {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            f32_math: false,
            torch_math: false,
            lr_f64: None,
            torch_hp: None,
            step: 0,
            moments: Slots::new(),
            groups: ParamGroups::default(),
        }
    }

    /// PyTorch-matching AdamW: `torch_math` on, eps 1e-8, and the hyperparameters kept
    /// exactly in `f64` (`lr_f64`, `torch_hp`) besides their `f32` fields.
    ///
    /// ```
    /// let o = rlx_optim::AdamW::torch(3e-4, (0.9, 0.95), 0.1);
    /// assert_eq!(o.torch_hp, Some((0.9, 0.95, 0.1)));
    /// assert_eq!((o.lr, o.beta2, o.weight_decay), (3e-4, 0.95, 0.1));
    /// ```
    pub fn torch(lr: f64, betas: (f64, f64), weight_decay: f64) -> Self {
        AdamW {
            lr: lr as f32,
            beta1: betas.0 as f32,
            beta2: betas.1 as f32,
            weight_decay: weight_decay as f32,
            torch_math: true,
            lr_f64: Some(lr),
            torch_hp: Some((betas.0, betas.1, weight_decay)),
            ..AdamW::new(lr as f32)
        }
    }

    builder_setters! {
        /// Set the moment decays (β1, β2).
        with_betas(beta1: f32, beta2: f32);

        /// Set the decoupled weight decay.
        with_weight_decay(weight_decay: f32);

        /// Set eps.
        with_eps(eps: f32);

        /// Compute in `f32` (`true`) or `f64` (`false`, the default).
        with_f32_math(f32_math: bool);

        /// Compute in `f64` in PyTorch's operation order.
        with_torch_math(torch_math: bool);
    }

    /// Set the learning rate exactly in `f64` (the `f32` field gets the rounded value).
    pub fn set_lr_f64(&mut self, lr: f64) {
        self.lr = lr as f32;
        self.lr_f64 = Some(lr);
    }

    /// Number of completed iterations; the next step's bias correction uses this + 1.
    pub fn current_step(&self) -> u64 {
        self.step
    }

    param_group_methods!(AdamW);

    /// The `f64` hyperparameters, with group overrides `o` applied.
    fn hp64(&self, o: Overrides) -> Hp64 {
        let (b1, b2, wd) = match self.torch_hp {
            Some((b1, b2, wd)) => (Some(b1), Some(b2), Some(wd)),
            None => (None, None, None),
        };
        Hp64 {
            lr: pick(self.lr_f64, self.lr) * widen(o.lr_scale),
            b1: pick(b1, self.beta1),
            b2: pick(b2, self.beta2),
            eps: widen(self.eps),
            wd: o
                .weight_decay
                .map_or_else(|| pick(wd, self.weight_decay), widen),
        }
    }

    /// The rule and operands of the next step for params with group overrides `o` (shared
    /// by the host `step` and `fused`).
    fn rule(&self, o: Overrides) -> FusedRule {
        let t = self.step + 1;
        if self.torch_math {
            let Hp64 {
                lr,
                b1,
                b2,
                eps,
                wd,
            } = self.hp64(o);
            let lerp_weight = 1.0 - b1;
            FusedRule::AdamWTorch {
                decay: 1.0 - lr * wd,
                lerp_weight,
                one_minus_lerp_weight: 1.0 - lerp_weight,
                beta2: b2,
                one_minus_beta2: 1.0 - b2,
                bias_correction2_sqrt: (1.0 - b2.powf(t as f64)).sqrt(),
                eps,
                neg_step_size: -(lr / (1.0 - b1.powf(t as f64))),
            }
        } else if self.f32_math {
            FusedRule::AdamW {
                f32_math: true,
                c: adam_coeffs(
                    true,
                    t,
                    [
                        self.lr,
                        self.beta1,
                        self.beta2,
                        self.eps,
                        o.weight_decay_or(self.weight_decay),
                    ],
                    o.lr_scale,
                ),
            }
        } else {
            let Hp64 {
                lr,
                b1,
                b2,
                eps,
                wd,
            } = self.hp64(o);
            FusedRule::AdamW {
                f32_math: false,
                c: adam_coeffs64(t, [lr, b1, b2, eps, wd]),
            }
        }
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, name: &str, shape: &[usize], param: &mut [f32], grad: &[f32]) {
        check_grad_len("AdamW", name, param.len(), grad.len());
        let rule = self.rule(self.groups.resolve(name, shape));
        let [m, v] = self.moments.get_or_zero("AdamW", name, param.len());
        let elems = param
            .iter_mut()
            .zip(grad)
            .zip(m.iter_mut())
            .zip(v.iter_mut());
        match rule {
            FusedRule::AdamWTorch {
                decay,
                lerp_weight,
                one_minus_lerp_weight,
                beta2,
                one_minus_beta2,
                bias_correction2_sqrt,
                eps,
                neg_step_size,
            } => {
                for (((p, &g), m), v) in elems {
                    let g = g as f64;
                    let p64 = *p as f64 * decay;
                    let m64 = torch_lerp(*m as f64, g, lerp_weight, one_minus_lerp_weight);
                    let v64 = *v as f64 * beta2 + one_minus_beta2 * g * g;
                    let denom = v64.sqrt() / bias_correction2_sqrt + eps;
                    *p = (p64 + neg_step_size * m64 / denom) as f32;
                    *m = m64 as f32;
                    *v = v64 as f32;
                }
            }
            FusedRule::AdamW { f32_math: true, c } => {
                let [_, b1, c1, b2, c2, _, _, eps, _] = c.as_f32();
                let [step, inv_sqrt_bc2, decay] = c.step_scalars(true).map(|x| x as f32);
                for (((p, &g), m), v) in elems {
                    moments32([b1, c1, b2, c2], m, v, g);
                    *p = *p * decay - (step * *m) / (v.sqrt() * inv_sqrt_bc2 + eps);
                }
            }
            FusedRule::AdamW { c, .. } => {
                let [step, inv_sqrt_bc2, decay] = c.step_scalars(false);
                for (((p, &g), m), v) in elems {
                    let (g, p64) = (g as f64, *p as f64);
                    let [m64, v64] = moments64(&c, *m, *v, g);
                    *p = (p64 * decay - (step * m64) / (v64.sqrt() * inv_sqrt_bc2 + c.eps)) as f32;
                    *m = m64 as f32;
                    *v = v64 as f32;
                }
            }
            _ => unreachable!("AdamW::rule gives an AdamW rule"),
        }
        self.groups.note(name, shape);
    }

    /// Sets `lr`; `lr_f64` then no longer matches and is ignored until `set_lr_f64`.
    fn set_lr(&mut self, lr: f32) {
        self.lr = lr;
        self.lr_f64 = None;
    }

    iteration_and_state_methods!("AdamW", moments, MOMENT_PREFIXES);

    fn fused(&mut self) -> Option<FusedUpdate<'_>> {
        let rules = self.groups.per_group(|o| self.rule(o));
        Some(FusedUpdate::new(
            "AdamW",
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

    /// f64 reference of the decoupled rule for one element, moments stored as f32.
    fn reference(lr: f64, b1: f64, b2: f64, wd: f64, p0: f64, grads: &[f64]) -> f64 {
        let (mut p, mut m, mut v) = (p0, 0.0f64, 0.0f64);
        for (k, &g) in grads.iter().enumerate() {
            let t = (k + 1) as f64;
            m = (b1 * m + (1.0 - b1) * g) as f32 as f64;
            v = (b2 * v + (1.0 - b2) * g * g) as f32 as f64;
            let (m_hat, v_hat) = (m / (1.0 - b1.powf(t)), v / (1.0 - b2.powf(t)));
            p = (p - lr * (m_hat / (v_hat.sqrt() + 1e-8) + wd * p)) as f32 as f64;
        }
        p
    }

    /// PyTorch's single-tensor AdamW order for a vector, written out independently.
    fn torch_reference(
        lr: f64,
        b1: f64,
        b2: f64,
        wd: f64,
        p0: &[f32],
        grads: &[Vec<f32>],
    ) -> Vec<f32> {
        let mut p = p0.to_vec();
        let mut m = vec![0.0f32; p.len()];
        let mut v = vec![0.0f32; p.len()];
        for (k, g) in grads.iter().enumerate() {
            let step = (k + 1) as f64;
            let bias_correction1 = 1.0 - b1.powf(step);
            let bias_correction2 = 1.0 - b2.powf(step);
            for i in 0..p.len() {
                let gi = g[i] as f64;
                let pi = p[i] as f64 * (1.0 - lr * wd);
                let w = 1.0 - b1;
                let mi = if w < 0.5 {
                    m[i] as f64 + w * (gi - m[i] as f64)
                } else {
                    gi - (gi - m[i] as f64) * (1.0 - w)
                };
                let vi = v[i] as f64 * b2 + (1.0 - b2) * gi * gi;
                let denom = vi.sqrt() / bias_correction2.sqrt() + 1e-8;
                p[i] = (pi + (-(lr / bias_correction1)) * mi / denom) as f32;
                m[i] = mi as f32;
                v[i] = vi as f32;
            }
        }
        p
    }

    fn run(opt: &mut AdamW, p0: &[f32], grads: &[Vec<f32>]) -> Vec<f32> {
        let mut p = p0.to_vec();
        for g in grads {
            opt.step("p", &[p0.len()], &mut p, g);
            opt.end_iteration();
        }
        p
    }

    #[test]
    fn defaults_builders_torch_ctor_and_lr_setters() {
        let o = AdamW::new(0.01)
            .with_betas(0.8, 0.9)
            .with_eps(1e-6)
            .with_weight_decay(0.1)
            .with_f32_math(true)
            .with_torch_math(true);
        assert_eq!(
            (
                o.lr,
                o.beta1,
                o.beta2,
                o.eps,
                o.weight_decay,
                o.f32_math,
                o.torch_math
            ),
            (0.01, 0.8, 0.9, 1e-6, 0.1, true, true)
        );
        let mut t = AdamW::torch(1e-3, (0.9, 0.999), 0.05);
        assert_eq!((t.eps, t.f32_math, t.torch_math), (1e-8, false, true));
        assert_eq!(
            (t.lr, t.lr_f64, t.torch_hp),
            (1e-3, Some(1e-3), Some((0.9, 0.999, 0.05)))
        );
        t.set_lr_f64(0.1);
        assert_eq!((t.lr, t.lr_f64), (0.1f32, Some(0.1)));
        t.set_lr(0.2);
        assert_eq!((t.lr, t.lr_f64), (0.2, None));
        assert_eq!(t.hp64(Overrides::NONE).lr, 0.2f64);
    }

    #[test]
    fn three_iterations_match_hand_computed_decoupled_decay() {
        // lr 0.1, wd 0.5, p = 2, g = 0.25 → t=1: m̂/√v̂ = 1, p = 2 − 0.1·(1 + 1) = 1.8.
        let mut opt = AdamW::new(0.1).with_weight_decay(0.5);
        let mut p = [2.0f32];
        opt.step("p", &[1], &mut p, &[0.25]);
        opt.end_iteration();
        assert!((p[0] - 1.8).abs() < 1e-6, "{p:?}");
        for g in [-0.5f32, 1.0] {
            opt.step("p", &[1], &mut p, &[g]);
            opt.end_iteration();
        }
        let want = reference(0.1, 0.9, 0.999, 0.5, 2.0, &[0.25, -0.5, 1.0]);
        assert!((p[0] as f64 - want).abs() < 1e-6, "{} vs {want}", p[0]);
    }

    #[test]
    fn decoupled_decay_differs_from_adam_l2_decay() {
        // With g = 0, AdamW only decays: p·(1 − lr·wd) = 2·(1 − 0.01·0.1); the moments stay 0.
        let mut w = AdamW::new(0.01).with_weight_decay(0.1);
        let mut p = [2.0f32];
        w.step("p", &[1], &mut p, &[0.0]);
        assert!((p[0] - 1.998).abs() < 1e-6, "{p:?}");
        assert_eq!(w.state_dict().unwrap().buffer("m/p").unwrap(), [0.0]);
        // Adam pushes wd·p through the moments, so its first step is a full lr·sign step.
        let mut a = crate::Adam::new(0.01).with_weight_decay(0.1);
        let mut q = [2.0f32];
        a.step("p", &[1], &mut q, &[0.0]);
        assert!((q[0] - 1.99).abs() < 1e-6, "{q:?}");
    }

    #[test]
    fn torch_math_follows_pytorch_order_bit_for_bit() {
        let p0 = [0.5f32, -1.25, 3.0, 0.0];
        let grads: Vec<Vec<f32>> = vec![
            vec![0.1, -0.2, 0.3, 1e-3],
            vec![-0.4, 0.05, 0.25, -2.0],
            vec![0.7, 0.7, -0.01, 0.5],
        ];
        let got = run(&mut AdamW::torch(1e-2, (0.9, 0.999), 0.1), &p0, &grads);
        let want = torch_reference(1e-2, 0.9, 0.999, 0.1, &p0, &grads);
        assert_eq!(got, want);
        // β1 ≤ 0.5 exercises the other lerp branch.
        let got = run(&mut AdamW::torch(1e-2, (0.3, 0.9), 0.0), &p0, &grads);
        assert_eq!(got, torch_reference(1e-2, 0.3, 0.9, 0.0, &p0, &grads));
        // Same rule as the default f64 path, only a different rounding order.
        let default = run(&mut AdamW::new(1e-2).with_weight_decay(0.1), &p0, &grads);
        let torch = run(
            &mut AdamW::new(1e-2)
                .with_weight_decay(0.1)
                .with_torch_math(true),
            &p0,
            &grads,
        );
        for (a, b) in default.iter().zip(&torch) {
            assert!((a - b).abs() < 1e-6, "{default:?} vs {torch:?}");
        }
    }

    #[test]
    fn exact_f64_hyperparameters_apply_until_the_f32_field_changes() {
        let mut o = AdamW::torch(0.1f64 + 1e-12, (0.9, 0.999), 0.0);
        assert_eq!(o.hp64(Overrides::NONE).lr, 0.1 + 1e-12);
        o.beta1 = 0.5;
        let hp = o.hp64(Overrides::NONE);
        assert_eq!((hp.b1, hp.b2), (0.5, 0.999));
        o.lr = 0.25;
        assert_eq!(o.hp64(Overrides::NONE).lr, 0.25);
    }

    #[test]
    fn f32_math_agrees_with_f64_math_within_tolerance() {
        let p0: Vec<f32> = (0..8).map(|i| (i as f32 * 0.37).sin()).collect();
        let grads: Vec<Vec<f32>> = (0..60)
            .map(|k| (0..8).map(|i| ((k * 8 + i) as f32 * 0.91).cos()).collect())
            .collect();
        let a = run(&mut AdamW::new(1e-2), &p0, &grads);
        let b = run(&mut AdamW::new(1e-2).with_f32_math(true), &p0, &grads);
        let max_diff = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(max_diff < 1e-4, "{max_diff}");
    }

    #[test]
    fn torch_math_wins_over_f32_math() {
        let p0 = [1.0f32, -2.0];
        let grads = vec![vec![0.3f32, 0.1], vec![-0.2, 0.4]];
        let both = run(
            &mut AdamW::torch(1e-2, (0.9, 0.999), 0.01).with_f32_math(true),
            &p0,
            &grads,
        );
        assert_eq!(
            both,
            run(&mut AdamW::torch(1e-2, (0.9, 0.999), 0.01), &p0, &grads)
        );
    }

    #[test]
    #[should_panic(expected = "AdamW::step: grad for param `b` has 0 values but the param has 1")]
    fn mismatched_grad_length_panics() {
        AdamW::new(0.1).step("b", &[1], &mut [0.0], &[]);
    }
}
