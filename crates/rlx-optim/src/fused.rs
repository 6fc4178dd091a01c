//! Update rules as data, for training steps compiled into one program.
//!
//! A compiled ("fused") training step evaluates forward, backward and the optimizer
//! update in one program. It needs two things from the optimizer, which
//! [`Optimizer::fused`](crate::Optimizer::fused) hands out together as a [`FusedUpdate`]:
//!
//! - the element-wise rule, as a [`FusedRule`]: which formula, which arithmetic, and
//!   every operand of this step (learning rate, decays, bias corrections) already
//!   computed exactly as the host `step` computes it — so the program takes them as
//!   runtime scalars and a schedule or the advancing step counter never recompiles it;
//! - its per-parameter state buffers, created zero-filled on first use like the host
//!   path does, which the program reads in place and whose new values are written back.
//!
//! With [parameter groups](crate::ParamGroup) the rule's operands differ per group: the
//! update hands out one rule per group ([`FusedUpdate::group_rule`]), all of the same
//! [structure](FusedRule::structure), and says which group each param falls in
//! ([`FusedUpdate::group_index`]); the program takes each group's operands as its own
//! runtime scalars.
//!
//! The caller still calls [`Optimizer::end_iteration`](crate::Optimizer::end_iteration)
//! once per step, so the step counter (and `state_dict`) advance exactly as on the host
//! path.

use crate::group::ParamGroups;
use crate::state::Slots;
use crate::{OptItem, Optimizer, OptimizerState, ParamGroup};

/// Operands of the Adam/AdamW rules for one step, as the host math uses them.
///
/// In the `f32` arithmetic every value is an `f32` held exactly in the `f64`; in the
/// `f64` arithmetic they are the `f64` values (hyperparameters widened to the decimal
/// they were written as). `bias_correction1 = 1 − β1^t`, `bias_correction2 = 1 − β2^t`
/// with `t = current_step() + 1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamCoeffs {
    /// Learning rate.
    pub lr: f64,
    /// β1.
    pub beta1: f64,
    /// `1 − β1` (computed in the rule's arithmetic).
    pub one_minus_beta1: f64,
    /// β2.
    pub beta2: f64,
    /// `1 − β2` (computed in the rule's arithmetic).
    pub one_minus_beta2: f64,
    /// `1 − β1^t`.
    pub bias_correction1: f64,
    /// `1 − β2^t`.
    pub bias_correction2: f64,
    /// Added to `√v̂`.
    pub eps: f64,
    /// Weight decay (L2-coupled for Adam, decoupled for AdamW).
    pub weight_decay: f64,
}

impl AdamCoeffs {
    /// `[lr, β1, 1−β1, β2, 1−β2, bc1, bc2, eps, wd]` as `f32` (exact for the `f32` math).
    pub(crate) fn as_f32(&self) -> [f32; 9] {
        [
            self.lr,
            self.beta1,
            self.one_minus_beta1,
            self.beta2,
            self.one_minus_beta2,
            self.bias_correction1,
            self.bias_correction2,
            self.eps,
            self.weight_decay,
        ]
        .map(|x| x as f32)
    }

    /// This step's per-parameter scalars `[step_size, inv_sqrt_bc2, decay]`:
    /// `lr / bc1`, `1 / √bc2` and `1 − lr·wd`, computed in the rule's arithmetic
    /// (`f32` values held exactly when `f32_math`). Folding the bias corrections into
    /// scalars leaves one division per element instead of three.
    pub fn step_scalars(&self, f32_math: bool) -> [f64; 3] {
        if f32_math {
            let [lr, .., bc1, bc2, _, wd] = self.as_f32();
            [lr / bc1, 1.0 / bc2.sqrt(), 1.0 - lr * wd].map(f64::from)
        } else {
            [
                self.lr / self.bias_correction1,
                1.0 / self.bias_correction2.sqrt(),
                1.0 - self.lr * self.weight_decay,
            ]
        }
    }
}

/// The per-element update of a built-in optimizer, with this step's operands.
///
/// Each variant's doc gives the formula the compiled program must evaluate, in the
/// operation order of the optimizer's host `step` (so results agree to rounding, and
/// exactly where no operation is contracted or reordered). `p` is the parameter, `g` its
/// gradient; state buffers are listed in [`FusedUpdate::state_kinds`] order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FusedRule {
    /// [`Sgd`](crate::Sgd), in `f32`: `d = g + wd·p`; without momentum `p' = p − lr·d`;
    /// with momentum (state `v`) `v' = μ·v + d`, `p' = p − lr·u` where
    /// `u = nesterov ? d + μ·v' : v'`.
    Sgd {
        /// Learning rate.
        lr: f32,
        /// μ; `0` means no momentum and no state.
        momentum: f32,
        /// Nesterov look-ahead.
        nesterov: bool,
        /// L2 decay `wd`.
        weight_decay: f32,
    },
    /// [`Adam`](crate::Adam) (state `m`, `v`): `g₂ = g + wd·p`,
    /// `m' = β1·m + (1−β1)·g₂`, `v' = β2·v + ((1−β2)·g₂)·g₂`,
    /// `p' = p − (step_size·m') / (√v'·inv_sqrt_bc2 + eps)` with the scalars of
    /// [`AdamCoeffs::step_scalars`] (= `p − lr·m̂/(√v̂ + eps)`); in `f32`, or in `f64` on
    /// widened `p, g, m, v` with one rounding to `f32` per result.
    Adam {
        /// Evaluate in `f32` (else `f64`).
        f32_math: bool,
        /// This step's operands.
        c: AdamCoeffs,
    },
    /// [`AdamW`](crate::AdamW) without `torch_math` (state `m`, `v`):
    /// `m' = β1·m + (1−β1)·g`, `v' = β2·v + ((1−β2)·g)·g`,
    /// `p' = p·decay − (step_size·m') / (√v'·inv_sqrt_bc2 + eps)` with the scalars of
    /// [`AdamCoeffs::step_scalars`] (= `p − lr·(m̂/(√v̂ + eps) + wd·p)`); `f32` or `f64`
    /// as for Adam.
    AdamW {
        /// Evaluate in `f32` (else `f64`).
        f32_math: bool,
        /// This step's operands.
        c: AdamCoeffs,
    },
    /// [`AdamW`](crate::AdamW) with `torch_math`, in `f64` (state `m`, `v`):
    /// `p₁ = p·decay`; `m' = m + w·(g − m)` when `|w| < 0.5`, else
    /// `m' = g − (g − m)·(1 − w)`; `v' = v·β2 + ((1−β2)·g)·g`;
    /// `p' = p₁ + (neg_step_size·m') / (√v'/bc2_sqrt + eps)`.
    AdamWTorch {
        /// `1 − lr·wd`.
        decay: f64,
        /// The lerp weight `w = 1 − β1`.
        lerp_weight: f64,
        /// `1 − w`.
        one_minus_lerp_weight: f64,
        /// β2.
        beta2: f64,
        /// `1 − β2`.
        one_minus_beta2: f64,
        /// `√(1 − β2^t)`.
        bias_correction2_sqrt: f64,
        /// Added to the denominator.
        eps: f64,
        /// `−lr / (1 − β1^t)`.
        neg_step_size: f64,
    },
    /// [`Lion`](crate::Lion), in `f32` (state `m`): `c = β1·m + (1−β1)·g`,
    /// `p' = p − lr·(sign(c) + wd·p)` with `sign(±0) = 0` and NaN passed through,
    /// `m' = β2·m + (1−β2)·g`.
    Lion {
        /// Learning rate.
        lr: f32,
        /// β1.
        beta1: f32,
        /// `1 − β1`.
        one_minus_beta1: f32,
        /// β2.
        beta2: f32,
        /// `1 − β2`.
        one_minus_beta2: f32,
        /// Decoupled decay `wd`.
        weight_decay: f32,
    },
}

impl FusedRule {
    /// What changes the compiled program's structure (the formula, the arithmetic, which
    /// optional terms exist) and nothing that is a runtime operand: two rules with equal
    /// structure run on the same compiled program.
    ///
    /// ```
    /// use rlx_optim::{AdamW, Optimizer};
    ///
    /// let mut a = AdamW::new(1e-3);
    /// let mut b = AdamW::new(5e-2).with_betas(0.8, 0.9);
    /// let ka = a.fused().unwrap().rule.structure();
    /// assert_eq!(ka, b.fused().unwrap().rule.structure());
    /// assert_ne!(ka, a.with_f32_math(true).fused().unwrap().rule.structure());
    /// ```
    pub fn structure(&self) -> String {
        match self {
            FusedRule::Sgd {
                momentum, nesterov, ..
            } => match (*momentum != 0.0, nesterov) {
                (false, _) => "sgd".into(),
                (true, false) => "sgd+momentum".into(),
                (true, true) => "sgd+nesterov".into(),
            },
            FusedRule::Adam { f32_math, .. } => format!("adam/{}", math(*f32_math)),
            FusedRule::AdamW { f32_math, .. } => format!("adamw/{}", math(*f32_math)),
            FusedRule::AdamWTorch { lerp_weight, .. } => {
                format!("adamw/torch/{}", lerp_branch(*lerp_weight))
            }
            FusedRule::Lion { .. } => "lion".into(),
        }
    }
}

fn math(f32_math: bool) -> &'static str {
    if f32_math { "f32" } else { "f64" }
}

/// Which of PyTorch's two lerp forms a weight selects (the program bakes the choice).
pub(crate) fn lerp_branch(weight: f64) -> &'static str {
    if weight.abs() < 0.5 {
        "lerp-lo"
    } else {
        "lerp-hi"
    }
}

/// Per-parameter state storage as the fused path sees it (object safe over `Slots<K>`).
pub(crate) trait StateStore {
    fn get_or_zero_dyn(&mut self, optimizer: &str, name: &str, len: usize) -> &mut [Vec<f32>];
    fn get_dyn(&self, name: &str) -> Option<&[Vec<f32>]>;
    fn set_dyn(&mut self, name: &str, bufs: Vec<Vec<f32>>);
}

impl<const K: usize> StateStore for Slots<K> {
    fn get_or_zero_dyn(&mut self, optimizer: &str, name: &str, len: usize) -> &mut [Vec<f32>] {
        self.get_or_zero(optimizer, name, len)
    }

    fn get_dyn(&self, name: &str) -> Option<&[Vec<f32>]> {
        self.get(name).map(|s| s.as_slice())
    }

    fn set_dyn(&mut self, name: &str, bufs: Vec<Vec<f32>>) {
        let slots: [Vec<f32>; K] = bufs
            .try_into()
            .unwrap_or_else(|b: Vec<_>| panic!("{K} state buffers expected, got {}", b.len()));
        self.set(name, slots);
    }
}

/// An optimizer's update rule for this step plus access to its state buffers, for a
/// training step compiled into one program. Returned by
/// [`Optimizer::fused`](crate::Optimizer::fused); borrows the optimizer mutably.
///
/// ```
/// use rlx_optim::{Adam, FusedRule, Optimizer};
///
/// let mut opt = Adam::new(0.1);
/// let mut fu = opt.fused().unwrap();
/// assert_eq!(fu.state_kinds(), ["m", "v"]);
/// let FusedRule::Adam { f32_math: false, c } = fu.rule else { unreachable!() };
/// assert!((c.bias_correction1 - 0.1).abs() < 1e-15); // 1 − 0.9¹
/// // State is created zero-filled on first use, exactly as the host `step` would.
/// fu.state_mut("w", 3)[1][2] = 0.5;
/// assert_eq!(fu.state("w").unwrap()[1], [0.0, 0.0, 0.5]);
/// assert_eq!(opt.state_dict().unwrap().buffer("v/w"), Some(&[0.0f32, 0.0, 0.5][..]));
/// ```
///
/// With parameter groups, each param's operands come from its group:
///
/// ```
/// use rlx_optim::{FusedRule, Lion, Optimizer, ParamGroup};
///
/// let mut opt = Lion::new(0.1)
///     .with_weight_decay(0.5)
///     .with_group(ParamGroup::no_decay_below_rank(2).lr_scale(0.5));
/// let fu = opt.fused().unwrap();
/// assert_eq!(fu.group_index("w", &[2, 2]), None);
/// assert_eq!(fu.group_index("b", &[2]), Some(0));
/// let FusedRule::Lion { lr, weight_decay, .. } = *fu.rule_for("b", &[2]) else { unreachable!() };
/// assert_eq!((lr, weight_decay), (0.05, 0.0));
/// assert_eq!(fu.rule_for("w", &[2, 2]), &fu.rule); // no group: the optimizer's own rule
/// ```
pub struct FusedUpdate<'a> {
    /// The element-wise rule with this step's operands for params in no group (the
    /// optimizer's own hyperparameters); see [`rule_for`](Self::rule_for) for any param.
    pub rule: FusedRule,
    /// `group_rules[i]`: the rule for params of group `i`.
    group_rules: Vec<FusedRule>,
    optimizer: &'static str,
    kinds: &'static [&'static str],
    store: &'a mut dyn StateStore,
    groups: &'a mut ParamGroups,
}

impl std::fmt::Debug for FusedUpdate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FusedUpdate")
            .field("optimizer", &self.optimizer)
            .field("rule", &self.rule)
            .field("param_groups", &self.groups.list())
            .field("group_rules", &self.group_rules)
            .field("state_kinds", &self.kinds)
            .finish()
    }
}

impl<'a> FusedUpdate<'a> {
    /// `rules[0]` is the rule for params in no group, `rules[1 + i]` the one for group
    /// `i` of `groups` (see [`ParamGroups::per_group`]).
    pub(crate) fn new(
        optimizer: &'static str,
        rules: Vec<FusedRule>,
        kinds: &'static [&'static str],
        store: &'a mut dyn StateStore,
        groups: &'a mut ParamGroups,
    ) -> FusedUpdate<'a> {
        let mut rules = rules.into_iter();
        let rule = rules.next().expect("a rule for params in no group");
        let group_rules: Vec<FusedRule> = rules.collect();
        assert_eq!(group_rules.len(), groups.list().len(), "one rule per group");
        debug_assert!(
            group_rules
                .iter()
                .all(|r| r.structure() == rule.structure()),
            "groups change operands, never the rule's structure"
        );
        FusedUpdate {
            rule,
            group_rules,
            optimizer,
            kinds,
            store,
            groups,
        }
    }

    /// The optimizer's parameter groups, in the order they are tried.
    pub fn param_groups(&self) -> &[ParamGroup] {
        self.groups.list()
    }

    /// The index (into [`param_groups`](Self::param_groups)) of the group param `name` of
    /// static `shape` falls in, or `None` when it uses the optimizer's own
    /// hyperparameters — as the host `step` decides it.
    pub fn group_index(&self, name: &str, shape: &[usize]) -> Option<usize> {
        self.groups.index_of(name, shape)
    }

    /// The rule (this step's operands) for the params of group `group` (an index from
    /// [`group_index`](Self::group_index)); `None` gives [`rule`](Self::rule). Every
    /// group's rule has the same [`structure`](FusedRule::structure) as `rule`: groups
    /// change operands (learning rate, decay), never the formula.
    ///
    /// Panics when `group` is not an index into [`param_groups`](Self::param_groups).
    #[track_caller]
    pub fn group_rule(&self, group: Option<usize>) -> &FusedRule {
        match group {
            None => &self.rule,
            Some(i) => self.group_rules.get(i).unwrap_or_else(|| {
                panic!(
                    "FusedUpdate::group_rule: group index {i} but {} has {} param groups",
                    self.optimizer,
                    self.group_rules.len()
                )
            }),
        }
    }

    /// The rule for param `name` of static `shape`: its group's, or
    /// [`rule`](Self::rule) when it is in no group.
    pub fn rule_for(&self, name: &str, shape: &[usize]) -> &FusedRule {
        self.group_rule(self.group_index(name, shape))
    }

    /// Tell the optimizer that param `name` of static `shape` was updated by this step, as
    /// its host `step` notes by itself: its `state_dict` then records the param's group
    /// (and [`Optimizer::lr_scale`](crate::Optimizer::lr_scale) knows it). A compiled step
    /// calls it for every param once the step has succeeded.
    pub fn note_param(&mut self, name: &str, shape: &[usize]) {
        self.groups.note(name, shape);
    }

    /// The optimizer's name (`"Adam"`, …), for messages.
    pub fn optimizer(&self) -> &'static str {
        self.optimizer
    }

    /// The state buffers each parameter has, in the order [`FusedUpdate::state_mut`]
    /// returns them; they are the `state_dict` prefixes (`"m"`, `"v"`). Empty for SGD
    /// without momentum.
    pub fn state_kinds(&self) -> &'static [&'static str] {
        self.kinds
    }

    /// The state buffers of param `name` (one per [`state_kinds`](Self::state_kinds)
    /// entry), created zero-filled with `len` values on first use.
    ///
    /// Panics when `name` already has state of another length (as the host `step` does).
    #[track_caller]
    pub fn state_mut(&mut self, name: &str, len: usize) -> &mut [Vec<f32>] {
        if self.kinds.is_empty() {
            return &mut [];
        }
        self.store.get_or_zero_dyn(self.optimizer, name, len)
    }

    /// Replace the state buffers of param `name` (one per
    /// [`state_kinds`](Self::state_kinds) entry, in that order): a step that moved them
    /// out — e.g. lent to a compiled update that writes the new values over the old —
    /// puts the new ones back with this.
    ///
    /// Panics when `bufs` does not hold one buffer per state kind, or the buffers differ
    /// in length.
    #[track_caller]
    pub fn set_state(&mut self, name: &str, bufs: Vec<Vec<f32>>) {
        if self.kinds.is_empty() {
            assert!(bufs.is_empty(), "this optimizer keeps no state");
            return;
        }
        assert!(
            bufs.len() == self.kinds.len() && bufs.iter().all(|b| b.len() == bufs[0].len()),
            "set_state(`{name}`): expected {} buffers of one length ({:?}), got lengths {:?}",
            self.kinds.len(),
            self.kinds,
            bufs.iter().map(Vec::len).collect::<Vec<_>>()
        );
        self.store.set_dyn(name, bufs);
    }

    /// The state buffers of param `name`, if it has any yet.
    pub fn state(&self, name: &str) -> Option<&[Vec<f32>]> {
        if self.kinds.is_empty() {
            return Some(&[]);
        }
        self.store.get_dyn(name)
    }
}

/// Wraps an optimizer so training steps use its host `step_batch` instead of a compiled
/// update: every method delegates except [`Optimizer::fused`], which returns `None`.
///
/// Useful to compare the two paths, or to keep a custom `step_batch` override in charge.
///
/// ```
/// use rlx_optim::{Adam, Optimizer, Unfused};
///
/// let mut host = Unfused(Adam::new(0.1));
/// assert!(host.fused().is_none());
/// let mut p = [1.0f32];
/// host.step("p", &[1], &mut p, &[0.5]);
/// host.end_iteration();
/// assert_eq!(host.0.current_step(), 1);
/// assert!((p[0] - 0.9).abs() < 1e-6);
/// ```
#[derive(Debug, Clone)]
pub struct Unfused<O>(pub O);

impl<O: Optimizer> Optimizer for Unfused<O> {
    fn step(&mut self, name: &str, shape: &[usize], param: &mut [f32], grad: &[f32]) {
        self.0.step(name, shape, param, grad)
    }
    fn step_batch(&mut self, items: &mut [OptItem<'_>]) {
        self.0.step_batch(items)
    }
    fn end_iteration(&mut self) {
        self.0.end_iteration()
    }
    fn set_lr(&mut self, lr: f32) {
        self.0.set_lr(lr)
    }
    fn lr_scale(&self, name: &str) -> f32 {
        self.0.lr_scale(name)
    }
    fn state_dict(&self) -> Option<OptimizerState> {
        self.0.state_dict()
    }
    fn load_state_dict(&mut self, state: &OptimizerState) -> bool {
        self.0.load_state_dict(state)
    }
    fn try_load_state_dict(&mut self, state: &OptimizerState) -> Result<(), String> {
        self.0.try_load_state_dict(state)
    }
    fn state_len(&self, name: &str) -> Option<usize> {
        self.0.state_len(name)
    }
    fn reset_state(&mut self) -> bool {
        self.0.reset_state()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Adam, AdamW, Lion, Muon, Sgd};

    #[test]
    fn structure_ignores_operands_and_tracks_formula_and_arithmetic() {
        let s = |o: &mut dyn Optimizer| o.fused().unwrap().rule.structure();
        assert_eq!(s(&mut Sgd::new(0.1)), "sgd");
        assert_eq!(
            s(&mut Sgd::new(0.1).with_momentum(0.9, false)),
            "sgd+momentum"
        );
        assert_eq!(
            s(&mut Sgd::new(0.1).with_momentum(0.9, true)),
            "sgd+nesterov"
        );
        assert_eq!(s(&mut Adam::new(0.1)), "adam/f64");
        assert_eq!(s(&mut Adam::new(0.2).with_f32_math(true)), "adam/f32");
        assert_eq!(s(&mut AdamW::new(0.1).with_weight_decay(0.3)), "adamw/f64");
        assert_eq!(
            s(&mut AdamW::torch(1e-3, (0.9, 0.999), 0.0)),
            "adamw/torch/lerp-lo"
        );
        assert_eq!(
            s(&mut AdamW::torch(1e-3, (0.2, 0.999), 0.0)),
            "adamw/torch/lerp-hi"
        );
        assert_eq!(s(&mut Lion::new(0.1).with_betas(0.5, 0.5)), "lion");
    }

    #[test]
    fn muon_and_user_optimizers_have_no_fused_rule() {
        assert!(Muon::new(0.02).fused().is_none());
        struct Plain;
        impl Optimizer for Plain {
            fn step(&mut self, _: &str, _: &[usize], _: &mut [f32], _: &[f32]) {}
        }
        assert!(Plain.fused().is_none());
    }

    #[test]
    fn plain_sgd_has_no_state_and_creates_none() {
        let mut opt = Sgd::new(0.1);
        let mut fu = opt.fused().unwrap();
        assert!(fu.state_kinds().is_empty());
        assert!(fu.state_mut("w", 4).is_empty());
        assert_eq!(fu.state("w").map(<[_]>::len), Some(0));
        assert!(opt.state_dict().unwrap().buffers.is_empty());
    }

    #[test]
    #[should_panic(expected = "param `w` has 3 values but the optimizer holds state of 2 values")]
    fn state_of_another_length_panics_like_the_host_step() {
        let mut opt = Lion::new(0.1);
        opt.step("w", &[2], &mut [0.0, 0.0], &[1.0, 1.0]);
        opt.fused().unwrap().state_mut("w", 3);
    }
}
