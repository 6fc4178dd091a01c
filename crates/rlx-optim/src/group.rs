//! Parameter groups: per-parameter weight decay and learning-rate multipliers, shared by
//! every optimizer in this crate.
//!
//! Each optimizer keeps a [`ParamGroups`] field. A param's group is decided by the
//! groups' predicates on the param's name and static shape, every time it is stepped
//! (so a group added later applies from the next step on); the first matching group (in
//! the order added) wins and unmatched params use the optimizer's own hyperparameters.
//! The optimizer also remembers the shape each param was last stepped with, so that its
//! `state_dict` can record every param's resolved group and `load_state_dict` can check
//! it (see [`ParamGroupRecord`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// The predicate of a [`ParamGroup`]: `(param name, static shape) → member?`.
///
/// Shared (`Arc`) and `Send + Sync`, so optimizers holding groups stay `Clone`, `Send` and
/// `Sync`.
pub type GroupPredicate = Arc<dyn Fn(&str, &[usize]) -> bool + Send + Sync>;

/// A named rule that picks params by name and shape and overrides, for them, the
/// optimizer's weight decay and/or scales its learning rate.
///
/// Add groups with `with_group` (or `try_add_group`) on any optimizer of this crate
/// ([`Sgd`](crate::Sgd), [`Adam`](crate::Adam), [`AdamW`](crate::AdamW),
/// [`Lion`](crate::Lion), [`Muon`](crate::Muon)). For each param the groups are tried in
/// the order they were added and the **first match wins**; a param no group matches uses
/// the optimizer's own hyperparameters. For the params of a group:
///
/// - `weight_decay: Some(wd)` replaces the optimizer's `weight_decay` (applied the way
///   that optimizer applies decay: L2-coupled into the gradient for `Sgd` and `Adam`,
///   decoupled for `AdamW`, `Lion` and `Muon`); `None` keeps the optimizer's;
/// - `lr_scale` multiplies the effective learning rate — the one in force for the step,
///   after `set_lr` / schedules — (`1.0`, the default, keeps it; `0.0` freezes the params).
///   The `f32` optimizers multiply in `f32`; the `f64` paths of `Adam`/`AdamW` multiply
///   the widened values in `f64`.
///
/// Both the host `step` and the compiled training step (`Func::train_step` with a fused
/// update) apply groups, with identical results.
///
/// A group is validated when it is added: its name must be non-empty and unique within
/// the optimizer, and `weight_decay` / `lr_scale` must be finite and `≥ 0`.
///
/// ```
/// use rlx_optim::{AdamW, Optimizer, ParamGroup};
///
/// // nanoGPT: weight decay 0.1 on the 2-D weights only; the embedding trains 10× slower.
/// let mut opt = AdamW::torch(3e-4, (0.9, 0.95), 0.1)
///     .with_group(ParamGroup::new("no_decay", |_name: &str, shape: &[usize]| shape.len() < 2).weight_decay(0.0))
///     .with_group(ParamGroup::new("embedding", |name: &str, _: &[usize]| name == "wte").lr_scale(0.1));
/// assert_eq!(opt.group_of("ln.gain", &[4]).unwrap().name, "no_decay");
/// assert_eq!(opt.group_of("wte", &[10, 4]).unwrap().lr_scale, 0.1);
/// assert!(opt.group_of("attn.w", &[4, 4]).is_none()); // the optimizer's own settings
///
/// // With a zero gradient AdamW only decays: p·(1 − lr·wd) for the weight, nothing for
/// // the gain, and lr·0.1 for the embedding.
/// let (mut w, mut gain, mut wte) = (vec![1.0f32; 16], vec![1.0f32; 4], vec![1.0f32; 40]);
/// opt.step("attn.w", &[4, 4], &mut w, &[0.0; 16]);
/// opt.step("ln.gain", &[4], &mut gain, &[0.0; 4]);
/// opt.step("wte", &[10, 4], &mut wte, &[0.0; 40]);
/// assert_eq!(w[0], (1.0 - 3e-4 * 0.1f64) as f32);
/// assert_eq!(gain[0], 1.0);
/// assert_eq!(wte[0], (1.0 - 3e-4 * 0.1 * 0.1f64) as f32);
/// ```
#[derive(Clone)]
pub struct ParamGroup {
    /// The group's name: unique within an optimizer; saved in its state.
    pub name: String,
    /// Replaces the optimizer's weight decay for the group's params (`None`: keep it).
    pub weight_decay: Option<f32>,
    /// Multiplies the optimizer's learning rate for the group's params (default 1.0).
    pub lr_scale: f32,
    predicate: GroupPredicate,
}

impl fmt::Debug for ParamGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParamGroup")
            .field("name", &self.name)
            .field("weight_decay", &self.weight_decay)
            .field("lr_scale", &self.lr_scale)
            .finish_non_exhaustive()
    }
}

impl ParamGroup {
    /// A group called `name` holding the params for which `predicate(name, shape)` is true,
    /// with no overrides yet (add them with [`weight_decay`](Self::weight_decay) and
    /// [`lr_scale`](Self::lr_scale)).
    ///
    /// ```
    /// use rlx_optim::ParamGroup;
    ///
    /// let g = ParamGroup::new("heads", |name: &str, _: &[usize]| name.starts_with("head."));
    /// assert!(g.matches("head.w", &[4, 2]) && !g.matches("body.w", &[4, 2]));
    /// assert_eq!((g.weight_decay, g.lr_scale), (None, 1.0));
    /// ```
    pub fn new(
        name: impl Into<String>,
        predicate: impl Fn(&str, &[usize]) -> bool + Send + Sync + 'static,
    ) -> Self {
        ParamGroup {
            name: name.into(),
            weight_decay: None,
            lr_scale: 1.0,
            predicate: Arc::new(predicate),
        }
    }

    /// Use weight decay `weight_decay` for this group's params instead of the optimizer's.
    /// Checked when the group is added (finite, `≥ 0`).
    pub fn weight_decay(mut self, weight_decay: f32) -> Self {
        self.weight_decay = Some(weight_decay);
        self
    }

    /// Multiply the learning rate by `lr_scale` for this group's params. Checked when the
    /// group is added (finite, `≥ 0`).
    pub fn lr_scale(mut self, lr_scale: f32) -> Self {
        self.lr_scale = lr_scale;
        self
    }

    /// The usual "no decay on biases and norm gains" group: named `"no_decay"`, holding
    /// every param of rank below `rank`, with weight decay 0.
    ///
    /// ```
    /// use rlx_optim::{ParamGroup, Sgd};
    ///
    /// let g = ParamGroup::no_decay_below_rank(2);
    /// assert_eq!((g.name.as_str(), g.weight_decay), ("no_decay", Some(0.0)));
    /// assert!(g.matches("b", &[8]) && g.matches("scale", &[]) && !g.matches("w", &[8, 8]));
    /// let opt = Sgd::new(0.1).with_weight_decay(0.01).with_group(g);
    /// assert_eq!(opt.param_groups().len(), 1);
    /// ```
    pub fn no_decay_below_rank(rank: usize) -> Self {
        ParamGroup::new("no_decay", move |_: &str, shape: &[usize]| {
            shape.len() < rank
        })
        .weight_decay(0.0)
    }

    /// Whether the param `name` of static `shape` belongs to this group (by its predicate
    /// alone; in an optimizer an earlier matching group takes the param first).
    pub fn matches(&self, name: &str, shape: &[usize]) -> bool {
        (self.predicate)(name, shape)
    }

    /// The overrides this group applies.
    pub(crate) fn overrides(&self) -> Overrides {
        Overrides {
            weight_decay: self.weight_decay,
            lr_scale: self.lr_scale,
        }
    }

    /// `weight_decay 0.1, lr_scale 1` — for messages.
    fn describe_overrides(weight_decay: Option<f32>, lr_scale: f32) -> String {
        let wd = weight_decay.map_or("the optimizer's".to_string(), |w| w.to_string());
        format!("weight_decay {wd}, lr_scale {lr_scale}")
    }
}

/// What a param's group changes, as the update math reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Overrides {
    /// Replaces the optimizer's weight decay when set.
    pub weight_decay: Option<f32>,
    /// Multiplies the learning rate.
    pub lr_scale: f32,
}

impl Overrides {
    /// No group: the optimizer's own hyperparameters.
    pub const NONE: Overrides = Overrides {
        weight_decay: None,
        lr_scale: 1.0,
    };

    /// The weight decay in force: the override, else the optimizer's `own`.
    pub fn weight_decay_or(self, own: f32) -> f32 {
        self.weight_decay.unwrap_or(own)
    }
}

/// One param's resolved group as saved in [`OptimizerState::param_groups`](crate::OptimizerState::param_groups).
///
/// `group` is the name of the group the param belongs to (`None`: no group, the
/// optimizer's own hyperparameters, and then `weight_decay` is `None` and `lr_scale` 1),
/// `weight_decay` / `lr_scale` that group's overrides, and `shape` the static shape the
/// param was last stepped with — the groups' predicates need it.
///
/// Loading a state re-resolves every recorded param against the loading optimizer's
/// groups (at the recorded name and shape) and rejects the state, with a message naming
/// the param and both groups, unless each lands in a group of the same name with the same
/// overrides. Like the optimizer's own hyperparameters (`lr`, `weight_decay`, …), which the
/// state does not hold, the groups are configuration: build the loading optimizer with the
/// groups the state was saved with. To load the buffers under different groups on
/// purpose, clear `param_groups` first — a state without records (as from before groups
/// existed) loads without this check.
///
/// ```
/// use rlx_optim::{AdamW, Optimizer, ParamGroup};
///
/// let mut opt = AdamW::new(0.1).with_group(ParamGroup::no_decay_below_rank(2));
/// opt.step("b", &[2], &mut [1.0, 1.0], &[0.5, 0.5]);
/// opt.step("w", &[1, 2], &mut [1.0, 1.0], &[0.5, 0.5]);
/// opt.end_iteration();
/// let state = opt.state_dict().unwrap();
/// let b = state.param_group("b").unwrap();
/// assert_eq!((b.group.as_deref(), b.weight_decay, &b.shape[..]), (Some("no_decay"), Some(0.0), &[2][..]));
/// assert_eq!(state.param_group("w").unwrap().group, None);
///
/// // Without the group, the saved per-param behaviour cannot be restored: rejected.
/// let err = AdamW::new(0.1).try_load_state_dict(&state).unwrap_err();
/// assert!(err.contains("param `b` (shape [2]) was saved in group `no_decay`"), "{err}");
/// assert!(AdamW::new(0.1).with_group(ParamGroup::no_decay_below_rank(2)).load_state_dict(&state));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ParamGroupRecord {
    /// The param's name.
    pub param: String,
    /// The static shape the param was last stepped with.
    pub shape: Vec<usize>,
    /// Its group's name, `None` when no group matched.
    pub group: Option<String>,
    /// The group's weight-decay override.
    pub weight_decay: Option<f32>,
    /// The group's learning-rate multiplier (1 without a group).
    pub lr_scale: f32,
}

impl ParamGroupRecord {
    /// `group `no_decay` (weight_decay 0, lr_scale 1)` or `no group (…)` — for messages.
    fn describe(&self) -> String {
        match &self.group {
            Some(g) => format!(
                "group `{g}` ({})",
                ParamGroup::describe_overrides(self.weight_decay, self.lr_scale)
            ),
            None => "no group (the optimizer's own hyperparameters)".into(),
        }
    }
}

/// An optimizer's groups plus the shape each param it stepped was last stepped with.
#[derive(Clone, Default)]
pub(crate) struct ParamGroups {
    groups: Vec<ParamGroup>,
    shapes: BTreeMap<String, Vec<usize>>,
}

impl fmt::Debug for ParamGroups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.groups).finish()
    }
}

impl ParamGroups {
    /// Add `group` after checking it (non-empty unique name, finite `≥ 0` overrides).
    pub(crate) fn add(&mut self, optimizer: &str, group: ParamGroup) -> Result<(), String> {
        let what = format!("{optimizer}::with_group");
        let name = &group.name;
        if name.is_empty() {
            return Err(format!(
                "{what}: a param group needs a non-empty name (it names the group in messages \
                 and in saved optimizer state)"
            ));
        }
        if self.groups.iter().any(|g| g.name == *name) {
            let names: Vec<&str> = self.groups.iter().map(|g| g.name.as_str()).collect();
            return Err(format!(
                "{what}: this optimizer already has a group named `{name}` (groups: {names:?}); \
                 give every group its own name"
            ));
        }
        if let Some(wd) = group.weight_decay
            && !(wd.is_finite() && wd >= 0.0)
        {
            return Err(format!(
                "{what}: group `{name}` has weight_decay {wd}; a weight decay must be finite \
                 and ≥ 0 (0 turns decay off for the group's params)"
            ));
        }
        let s = group.lr_scale;
        if !(s.is_finite() && s >= 0.0) {
            return Err(format!(
                "{what}: group `{name}` has lr_scale {s}; a learning-rate multiplier must be \
                 finite and ≥ 0 (1 keeps the optimizer's lr, 0 freezes the group's params)"
            ));
        }
        self.groups.push(group);
        Ok(())
    }

    /// The groups, in the order added.
    pub(crate) fn list(&self) -> &[ParamGroup] {
        &self.groups
    }

    /// The index of the first group that holds param `name` of `shape`.
    pub(crate) fn index_of(&self, name: &str, shape: &[usize]) -> Option<usize> {
        self.groups.iter().position(|g| g.matches(name, shape))
    }

    /// The first group that holds param `name` of `shape`.
    pub(crate) fn group_of(&self, name: &str, shape: &[usize]) -> Option<&ParamGroup> {
        self.index_of(name, shape).map(|i| &self.groups[i])
    }

    /// The overrides for param `name` of `shape` (none when no group holds it).
    pub(crate) fn resolve(&self, name: &str, shape: &[usize]) -> Overrides {
        self.group_of(name, shape)
            .map_or(Overrides::NONE, ParamGroup::overrides)
    }

    /// `f` applied to the overrides of "no group" and then of every group, in order: the
    /// per-group rules a compiled update needs.
    pub(crate) fn per_group<R>(&self, f: impl Fn(Overrides) -> R) -> Vec<R> {
        std::iter::once(Overrides::NONE)
            .chain(self.groups.iter().map(ParamGroup::overrides))
            .map(f)
            .collect()
    }

    /// Remember that param `name` was stepped with `shape`.
    pub(crate) fn note(&mut self, name: &str, shape: &[usize]) {
        match self.shapes.get_mut(name) {
            Some(s) if s == shape => {}
            Some(s) => *s = shape.to_vec(),
            None => {
                self.shapes.insert(name.to_string(), shape.to_vec());
            }
        }
    }

    /// The lr multiplier of param `name`'s group at the shape it was last stepped (or
    /// loaded) with; 1 for a param not seen yet, whose shape the predicates need.
    pub(crate) fn lr_scale_of(&self, name: &str) -> f32 {
        self.shapes
            .get(name)
            .map_or(1.0, |shape| self.resolve(name, shape).lr_scale)
    }

    /// Forget every param's shape (the optimizer's state is being reset).
    pub(crate) fn forget_params(&mut self) {
        self.shapes.clear();
    }

    /// Every seen param's resolved group, in ascending name order; empty when the
    /// optimizer has no groups (every param then uses its own hyperparameters, and states
    /// saved before groups existed stay equal to new ones).
    pub(crate) fn export(&self) -> Vec<ParamGroupRecord> {
        if self.groups.is_empty() {
            return Vec::new();
        }
        self.shapes
            .iter()
            .map(|(param, shape)| {
                let g = self.group_of(param, shape);
                ParamGroupRecord {
                    param: param.clone(),
                    shape: shape.clone(),
                    group: g.map(|g| g.name.clone()),
                    weight_decay: g.and_then(|g| g.weight_decay),
                    lr_scale: g.map_or(1.0, |g| g.lr_scale),
                }
            })
            .collect()
    }

    /// Check saved records against these groups; the param shapes to adopt on success.
    pub(crate) fn check_import(
        &self,
        optimizer: &str,
        records: &[ParamGroupRecord],
    ) -> Result<BTreeMap<String, Vec<usize>>, String> {
        let what = format!("{optimizer}::load_state_dict");
        let mut shapes = BTreeMap::new();
        for r in records {
            if shapes.insert(r.param.clone(), r.shape.clone()).is_some() {
                return Err(format!(
                    "{what}: the state records param `{}`'s group twice; each param has one \
                     record",
                    r.param
                ));
            }
            if r.group.is_none() && (r.weight_decay.is_some() || r.lr_scale != 1.0) {
                return Err(format!(
                    "{what}: the record of param `{}` names no group but carries overrides \
                     ({}); a param outside every group has none (weight_decay None, \
                     lr_scale 1) — the state was edited or built wrongly",
                    r.param,
                    ParamGroup::describe_overrides(r.weight_decay, r.lr_scale)
                ));
            }
            let now = self.group_of(&r.param, &r.shape);
            let same = match (&r.group, now) {
                (None, None) => true,
                (Some(saved), Some(g)) => {
                    *saved == g.name && r.weight_decay == g.weight_decay && r.lr_scale == g.lr_scale
                }
                _ => false,
            };
            if !same {
                let here = match now {
                    Some(g) => format!(
                        "group `{}` ({})",
                        g.name,
                        ParamGroup::describe_overrides(g.weight_decay, g.lr_scale)
                    ),
                    None => "no group (the optimizer's own hyperparameters)".into(),
                };
                return Err(format!(
                    "{what}: param `{}` (shape {:?}) was saved in {} but this optimizer puts it \
                     in {here}; build the optimizer with the param groups the state was saved \
                     with (same names, predicates and overrides), or clear the state's \
                     `param_groups` to load its buffers under this optimizer's groups",
                    r.param,
                    r.shape,
                    r.describe()
                ));
            }
        }
        Ok(shapes)
    }

    /// Adopt the param shapes of a loaded state.
    pub(crate) fn set_shapes(&mut self, shapes: BTreeMap<String, Vec<usize>>) {
        self.shapes = shapes;
    }
}

/// The inherent group methods of an optimizer type `$ty` whose struct has a
/// `groups: ParamGroups` field: `with_group`, `try_add_group`, `param_groups`, `group_of`.
/// One implementation (in [`ParamGroups`]) behind five thin copies, so users call them
/// without importing a trait.
macro_rules! param_group_methods {
    ($ty:ident) => {
        #[doc = concat!(
            "Add a parameter group (see [`ParamGroup`](crate::ParamGroup)): the params its \
             predicate picks — unless an earlier group took them — use its weight-decay \
             override and learning-rate multiplier.\n\n",
            "Panics with the reason when the group is invalid (empty or duplicate name, \
             `weight_decay` or `lr_scale` negative or not finite); \
             [`try_add_group`](Self::try_add_group) returns it instead.\n\n",
            "```\n",
            "use rlx_optim::{", stringify!($ty), ", ParamGroup};\n\n",
            "let opt = ", stringify!($ty), "::new(0.1)\n",
            "    .with_group(ParamGroup::no_decay_below_rank(2))\n",
            "    .with_group(ParamGroup::new(\"head\", |name: &str, _: &[usize]| name.starts_with(\"head.\")).lr_scale(0.5));\n",
            "assert_eq!(opt.group_of(\"head.b\", &[3]).unwrap().name, \"no_decay\"); // first match wins\n",
            "assert_eq!(opt.group_of(\"head.w\", &[3, 3]).unwrap().lr_scale, 0.5);\n",
            "assert!(opt.group_of(\"body.w\", &[3, 3]).is_none());\n",
            "```"
        )]
        #[track_caller]
        pub fn with_group(mut self, group: $crate::ParamGroup) -> Self {
            if let Err(e) = self.try_add_group(group) {
                panic!("{e}");
            }
            self
        }

        #[doc = concat!(
            "[`with_group`](Self::with_group) in place, returning an error (and adding \
             nothing) when the group is invalid.\n\n",
            "```\n",
            "use rlx_optim::{", stringify!($ty), ", ParamGroup};\n\n",
            "let mut opt = ", stringify!($ty), "::new(0.1);\n",
            "assert!(opt.try_add_group(ParamGroup::no_decay_below_rank(2)).is_ok());\n",
            "let err = opt.try_add_group(ParamGroup::no_decay_below_rank(1)).unwrap_err();\n",
            "assert!(err.contains(\"already has a group named `no_decay`\"));\n",
            "let err = opt.try_add_group(ParamGroup::new(\"slow\", |_: &str, _: &[usize]| true).lr_scale(-1.0)).unwrap_err();\n",
            "assert!(err.contains(\"lr_scale -1\"));\n",
            "assert_eq!(opt.param_groups().len(), 1);\n",
            "```"
        )]
        pub fn try_add_group(&mut self, group: $crate::ParamGroup) -> Result<(), String> {
            self.groups.add(stringify!($ty), group)
        }

        /// The parameter groups, in the order added (the order they are tried in).
        pub fn param_groups(&self) -> &[$crate::ParamGroup] {
            self.groups.list()
        }

        /// The group param `name` of static `shape` belongs to: the first group whose
        /// predicate holds, or `None` (the optimizer's own hyperparameters).
        pub fn group_of(&self, name: &str, shape: &[usize]) -> Option<&$crate::ParamGroup> {
            self.groups.group_of(name, shape)
        }
    };
}
pub(crate) use param_group_methods;

#[cfg(test)]
mod tests;
