//! Optimizers and learning-rate schedules for rlx training steps.
//!
//! `Func::train_step` (in `rlx_tensor`, feature `optim`) computes the loss and the
//! gradients of the trained parameters, packs one [`OptItem`] per parameter and hands
//! them to an `&mut dyn` [`Optimizer`]: first [`Optimizer::step_batch`], then
//! [`Optimizer::end_iteration`] once per training step. The `_at` variants call
//! [`Optimizer::set_lr`] with [`LrSchedule::lr_at`] before that.
//!
//! This crate is plain Rust on host `f32` slices; it depends on nothing else in rlx.
//!
//! | optimizer | update (per element, `g` = gradient, `p` = parameter) |
//! |-----------|--------------------------------------------------------|
//! | [`Sgd`]   | `d = g + wd·p`; `v = μv + d`; `p −= lr·(nesterov ? d + μv : v)` |
//! | [`Adam`]  | L2-coupled decay `g += wd·p`, bias-corrected moments |
//! | [`AdamW`] | decoupled decay `p −= lr·(m̂/(√v̂+eps) + wd·p)` |
//! | [`Lion`]  | `p −= lr·(sign(β1·m + (1−β1)·g) + wd·p)` |
//! | [`Muon`]  | Newton–Schulz-orthogonalized momentum for 2-D params |
//!
//! Every optimizer takes parameter groups ([`ParamGroup`], added with `with_group`): a
//! per-parameter weight-decay override and learning-rate multiplier chosen by a predicate
//! on the parameter's name and shape — e.g. no weight decay on biases and norm gains.
//!
//! Optimizer state is keyed by parameter name and created lazily (zero-filled) the first
//! time a name is stepped. Every optimizer in this crate exports and restores all of its
//! state through [`Optimizer::state_dict`] / [`Optimizer::load_state_dict`], so a run that
//! is saved, reloaded into a fresh optimizer and continued is bit-identical to an
//! uninterrupted one.
//!
//! ```
//! use rlx_optim::{Adam, LrSchedule, Optimizer};
//!
//! // Minimize f(w) = ½‖w − target‖² with Adam and a warmup schedule.
//! let target = [3.0f32, -2.0];
//! let mut w = vec![0.0f32; 2];
//! let mut opt = Adam::new(0.1);
//! let schedule = LrSchedule::Warmup { base: 0.1, warmup: 10 };
//! for step in 0..500 {
//!     opt.set_lr(schedule.lr_at(step));
//!     let grad: Vec<f32> = w.iter().zip(&target).map(|(w, t)| w - t).collect();
//!     opt.step("w", &[2], &mut w, &grad);
//!     opt.end_iteration();
//! }
//! assert!((w[0] - 3.0).abs() < 1e-2 && (w[1] + 2.0).abs() < 1e-2);
//! ```

#![warn(missing_docs)]

/// Builder methods `pub fn name(mut self, field: T, …) -> Self` that set the fields of
/// the same names and return `self`; each keeps the doc comment written above it.
/// Defined before the modules so that every optimizer can use it.
macro_rules! builder_setters {
    ($($(#[$attr:meta])* $name:ident($($field:ident: $ty:ty),+);)+) => {
        $(
            $(#[$attr])*
            pub fn $name(mut self, $($field: $ty),+) -> Self {
                $(self.$field = $field;)+
                self
            }
        )+
    };
}

mod adam;
mod adamw;
mod fused;
mod group;
mod lion;
mod muon;
mod schedule;
mod sgd;
mod state;

pub use adam::Adam;
pub use adamw::AdamW;
pub use fused::{AdamCoeffs, FusedRule, FusedUpdate, Unfused};
pub use group::{GroupPredicate, ParamGroup, ParamGroupRecord};
pub use lion::Lion;
pub use muon::Muon;
pub use schedule::LrSchedule;
pub use sgd::Sgd;

/// One parameter update request: the parameter's name, its static shape, its values
/// (updated in place) and its gradient (same element count).
///
/// `Func::train_step` builds one item per trained parameter and passes the whole list to
/// [`Optimizer::step_batch`].
///
/// ```
/// use rlx_optim::{OptItem, Optimizer, Sgd};
///
/// let (mut w, mut b) = (vec![1.0f32, 2.0], vec![0.5f32]);
/// let (gw, gb) = ([1.0f32, -1.0], [2.0f32]);
/// let mut items = vec![
///     OptItem { name: "w", shape: &[2], param: &mut w, grad: &gw },
///     OptItem { name: "b", shape: &[1], param: &mut b, grad: &gb },
/// ];
/// let opt: &mut dyn Optimizer = &mut Sgd::new(0.5);
/// opt.step_batch(&mut items);
/// opt.end_iteration();
/// assert_eq!(w, [0.5, 2.5]);
/// assert_eq!(b, [-0.5]);
/// ```
#[derive(Debug)]
pub struct OptItem<'a> {
    /// Parameter name; optimizer state is keyed by it.
    pub name: &'a str,
    /// Static shape of the parameter (row-major). [`Muon`] and the parameter groups'
    /// predicates ([`ParamGroup`]) look at it.
    pub shape: &'a [usize],
    /// Parameter values, updated in place.
    pub param: &'a mut [f32],
    /// Gradient of the loss with respect to `param`; must have the same length.
    pub grad: &'a [f32],
}

/// A snapshot of an optimizer's state: its iteration counter, every state buffer and — for
/// an optimizer with parameter groups — the group each param resolves to.
///
/// Buffers are named `"<kind>/<param name>"`; the kinds are
///
/// | optimizer | buffers |
/// |-----------|---------|
/// | [`Sgd`]   | `v/<param>` — momentum (velocity); none when `momentum == 0` |
/// | [`Adam`], [`AdamW`] | `m/<param>` — first moment, `v/<param>` — second moment |
/// | [`Lion`]  | `m/<param>` — momentum |
/// | [`Muon`]  | `m/<param>` — momentum |
///
/// Buffers are listed grouped by parameter, parameters in ascending name order, so the
/// snapshot of a given state is always the same value. `step` counts completed
/// [`Optimizer::end_iteration`] calls (Adam and AdamW use it for bias correction).
/// The prefix is split off at the first `/`, so parameter names may contain `/`.
///
/// `param_groups` records, for an optimizer with at least one [`ParamGroup`], every param it
/// has stepped with its shape and resolved group (see [`ParamGroupRecord`]); loading checks
/// them against the loading optimizer's groups. It is empty for an optimizer without
/// groups. Like PyTorch's `param_groups`, it is what makes a restored optimizer treat each
/// param as before; unlike PyTorch, the hyperparameters themselves are not restored from
/// it — a mismatch is an error instead.
///
/// ```
/// use rlx_optim::{Adam, Optimizer};
///
/// let mut opt = Adam::new(0.01);
/// let mut w = vec![1.0f32, 2.0];
/// opt.step("w", &[2], &mut w, &[0.5, 0.5]);
/// opt.end_iteration();
/// let state = opt.state_dict().unwrap();
/// assert_eq!(state.step, 1);
/// let names: Vec<&str> = state.buffers.iter().map(|(n, _)| n.as_str()).collect();
/// assert_eq!(names, ["m/w", "v/w"]);
///
/// let mut resumed = Adam::new(0.01);
/// assert!(resumed.load_state_dict(&state));
/// assert_eq!(resumed.state_dict().unwrap(), state);
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OptimizerState {
    /// Number of completed iterations (`end_iteration` calls).
    pub step: u64,
    /// `(buffer name, values)` pairs, named `"<kind>/<param name>"`.
    pub buffers: Vec<(String, Vec<f32>)>,
    /// Each stepped param's resolved group, in ascending param-name order; empty for an
    /// optimizer without groups (and accepted empty by every optimizer).
    pub param_groups: Vec<ParamGroupRecord>,
}

impl OptimizerState {
    /// The values of the buffer called `name` (for example `"m/w"`), if present.
    ///
    /// ```
    /// use rlx_optim::OptimizerState;
    ///
    /// let s = OptimizerState {
    ///     step: 2,
    ///     buffers: vec![("v/w".into(), vec![1.0, 2.0])],
    ///     ..Default::default()
    /// };
    /// assert_eq!(s.buffer("v/w"), Some(&[1.0f32, 2.0][..]));
    /// assert_eq!(s.buffer("m/w"), None);
    /// ```
    pub fn buffer(&self, name: &str) -> Option<&[f32]> {
        self.buffers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// The saved group record of param `param`, if the state has one.
    pub fn param_group(&self, param: &str) -> Option<&ParamGroupRecord> {
        self.param_groups.iter().find(|r| r.param == param)
    }
}

/// A parameter-update rule used by `Func::train_step`.
///
/// Object safe: training code takes `&mut dyn Optimizer`, so `&mut Sgd`, `&mut Adam`, …
/// (and user types) coerce. Only [`step`](Optimizer::step) is required.
///
/// Per training step the caller makes one [`step_batch`](Optimizer::step_batch) call
/// (or one [`step`](Optimizer::step) per parameter) followed by one
/// [`end_iteration`](Optimizer::end_iteration); iteration-level state such as Adam's
/// bias-correction counter advances only in `end_iteration`, so all parameters of one
/// step see the same counter.
///
/// ```
/// use rlx_optim::Optimizer;
///
/// /// Plain gradient descent, the smallest possible optimizer.
/// struct Descent(f32);
/// impl Optimizer for Descent {
///     fn step(&mut self, _name: &str, _shape: &[usize], param: &mut [f32], grad: &[f32]) {
///         for (p, g) in param.iter_mut().zip(grad) {
///             *p -= self.0 * g;
///         }
///     }
///     fn set_lr(&mut self, lr: f32) {
///         self.0 = lr;
///     }
/// }
///
/// let opt: &mut dyn Optimizer = &mut Descent(0.1);
/// let mut p = [1.0f32];
/// opt.step("p", &[1], &mut p, &[2.0]);
/// assert!((p[0] - 0.8).abs() < 1e-7);
/// assert!(opt.state_dict().is_none());
/// ```
pub trait Optimizer {
    /// Update `param` in place from `grad` (same length). `shape` is the parameter's
    /// static shape; `name` keys the optimizer's per-parameter state.
    fn step(&mut self, name: &str, shape: &[usize], param: &mut [f32], grad: &[f32]);

    /// Update every item; the default steps each item in order.
    fn step_batch(&mut self, items: &mut [OptItem<'_>]) {
        for item in items.iter_mut() {
            self.step(item.name, item.shape, item.param, item.grad);
        }
    }

    /// Mark the end of one training iteration (advances step counters). Default: no-op.
    fn end_iteration(&mut self) {}

    /// Set the learning rate (schedules call this before each step). Default: no-op;
    /// every optimizer in this crate overrides it.
    fn set_lr(&mut self, lr: f32) {
        let _ = lr;
    }

    /// Per-parameter learning-rate multiplier. Default: 1.0 for every parameter.
    ///
    /// The optimizers of this crate report the `lr_scale` of the [`ParamGroup`] that `name`
    /// falls in at the shape it was last stepped (or loaded) with, and 1.0 for a param
    /// they have not seen: group predicates need the shape, which only a step tells. (Use
    /// the optimizers' `group_of(name, shape)` to ask with a shape.) The multiplier is
    /// applied inside their updates; callers must not scale the learning rate again.
    fn lr_scale(&self, name: &str) -> f32 {
        let _ = name;
        1.0
    }

    /// Snapshot of the full optimizer state, or `None` if the optimizer cannot export it.
    fn state_dict(&self) -> Option<OptimizerState> {
        None
    }

    /// Replace the optimizer's state with `state`. Returns `false` (and leaves the
    /// optimizer unchanged) when `state` does not fit this optimizer or loading is not
    /// supported; [`try_load_state_dict`](Optimizer::try_load_state_dict) says why.
    fn load_state_dict(&mut self, state: &OptimizerState) -> bool {
        let _ = state;
        false
    }

    /// [`load_state_dict`](Optimizer::load_state_dict) with the reason when `state` does not
    /// fit: a buffer of a kind this optimizer does not keep, a param missing one of its
    /// buffers, or a param whose saved [`ParamGroup`] differs from the one it falls in
    /// here. The default wraps `load_state_dict` (with a generic reason); every optimizer
    /// in this crate implements it.
    ///
    /// ```
    /// use rlx_optim::{Adam, Lion, Optimizer};
    ///
    /// let mut lion = Lion::new(0.1);
    /// lion.step("w", &[1], &mut [0.0], &[1.0]);
    /// let err = Adam::new(0.1).try_load_state_dict(&lion.state_dict().unwrap()).unwrap_err();
    /// assert!(err.contains("param `w` lacks its `v/` buffer"), "{err}");
    /// ```
    fn try_load_state_dict(&mut self, state: &OptimizerState) -> Result<(), String> {
        if self.load_state_dict(state) {
            Ok(())
        } else {
            Err("this optimizer cannot load the state (load_state_dict returned false)".into())
        }
    }

    /// This step's update rule as data plus access to the state buffers, for training
    /// steps compiled into one program (forward, backward and update together; see
    /// [`FusedUpdate`]). `None` — the default, so every user optimizer keeps working —
    /// means "run my [`step_batch`](Optimizer::step_batch) on the host".
    ///
    /// Called after [`set_lr`](Optimizer::set_lr) and before
    /// [`end_iteration`](Optimizer::end_iteration), once per training step; the operands
    /// in the rule are those the host `step` would use now. [`Sgd`], [`Adam`], [`AdamW`]
    /// and [`Lion`] return a rule; [`Muon`] (Newton–Schulz on whole matrices) does not.
    fn fused(&mut self) -> Option<FusedUpdate<'_>> {
        None
    }

    /// How many values each state buffer this optimizer keeps for param `name` holds, or
    /// `None` when it keeps none for that name (or does not say — the default).
    ///
    /// Training steps check it before stepping (see [`check_state_len`]): one optimizer
    /// reused for a model whose param of the same name has another size is then an error
    /// naming both sizes, not a panic inside [`step`](Optimizer::step).
    fn state_len(&self, name: &str) -> Option<usize> {
        let _ = name;
        None
    }

    /// Drop every per-parameter state buffer and reset the iteration counter, as if the
    /// optimizer had just been built (hyperparameters and the learning rate are kept), so
    /// it can train another model. Returns `false` when the optimizer cannot (the
    /// default); every optimizer in this crate can.
    ///
    /// ```
    /// use rlx_optim::{Adam, Optimizer};
    ///
    /// let mut opt = Adam::new(0.1);
    /// opt.step("w", &[2], &mut [1.0, 2.0], &[0.5, 0.5]);
    /// opt.end_iteration();
    /// assert_eq!(opt.state_len("w"), Some(2));
    /// assert!(opt.reset_state());
    /// assert_eq!((opt.state_len("w"), opt.current_step()), (None, 0));
    /// opt.step("w", &[3], &mut [1.0, 2.0, 3.0], &[0.5; 3]); // a new size is fine now
    /// ```
    fn reset_state(&mut self) -> bool {
        false
    }
}

/// The message for a param of `param_len` values whose name already has optimizer state
/// of `state_len` values: what happened and the two ways out.
pub fn state_size_mismatch(name: &str, state_len: usize, param_len: usize) -> String {
    format!(
        "param `{name}` has {param_len} values but the optimizer holds state of {state_len} \
         values for that name (left by stepping another param called `{name}`); an \
         optimizer's state belongs to the params it stepped: create a fresh optimizer for \
         these params, or call `reset_state()` on it to drop the old state"
    )
}

/// `Err` with [`state_size_mismatch`]'s message when `opt` holds state for `name` whose
/// size is not `param_len` (checked through [`Optimizer::state_len`]).
///
/// ```
/// use rlx_optim::{Lion, Optimizer, check_state_len};
///
/// let mut opt = Lion::new(0.1);
/// opt.step("w", &[2], &mut [0.0, 0.0], &[1.0, 1.0]);
/// assert!(check_state_len(&opt, "w", 2).is_ok());
/// assert!(check_state_len(&opt, "b", 7).is_ok()); // no state yet: any size
/// let err = check_state_len(&opt, "w", 3).unwrap_err();
/// assert!(err.contains("has 3 values but the optimizer holds state of 2 values"));
/// ```
pub fn check_state_len<O: Optimizer + ?Sized>(
    opt: &O,
    name: &str,
    param_len: usize,
) -> Result<(), String> {
    match opt.state_len(name) {
        Some(have) if have != param_len => Err(state_size_mismatch(name, have, param_len)),
        _ => Ok(()),
    }
}

/// Panics unless `grad` and `param` have the same element count.
#[track_caller]
pub(crate) fn check_grad_len(optimizer: &str, name: &str, param_len: usize, grad_len: usize) {
    assert!(
        param_len == grad_len,
        "{optimizer}::step: grad for param `{name}` has {grad_len} values but the param has \
         {param_len}; pass the gradient of this exact param (same element count)"
    );
}

/// Widens an `f32` hyperparameter to the `f64` closest to its shortest decimal form, so
/// `0.999f32` becomes `0.999` rather than `0.9990000128746033`. The f64 math paths use
/// this so that a hyperparameter written as a decimal literal means that decimal.
pub(crate) fn widen(x: f32) -> f64 {
    // `Display` for f32 prints the shortest string that round-trips to the same f32.
    x.to_string().parse::<f64>().unwrap_or(x as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widen_recovers_decimal_literals_and_keeps_specials() {
        assert_eq!(widen(0.999), 0.999f64);
        assert_eq!(widen(1e-8), 1e-8f64);
        assert_eq!(widen(0.9), 0.9f64);
        assert_eq!(widen(3.0), 3.0f64);
        assert_eq!(widen(-0.25), -0.25f64);
        assert_eq!(widen(f32::INFINITY), f64::INFINITY);
        assert!(widen(f32::NAN).is_nan());
        // Widening never moves a value off its f32: narrowing back gives the same bits.
        for x in [1e-3f32, 3e-4, 0.95, 1.0 / 3.0, 7.654321e-12, f32::MAX] {
            assert_eq!(widen(x) as f32, x);
        }
    }

    #[test]
    #[should_panic(expected = "grad for param `w` has 3 values but the param has 4")]
    fn grad_length_mismatch_names_param_and_both_lengths() {
        check_grad_len("Sgd", "w", 4, 3);
    }

    #[test]
    fn every_optimizer_reports_its_state_length_and_resets_to_fresh() {
        let mut all: Vec<(&str, Box<dyn Optimizer>)> = vec![
            (
                "sgd+momentum",
                Box::new(Sgd::new(0.1).with_momentum(0.9, true)),
            ),
            ("adam", Box::new(Adam::new(0.1))),
            ("adamw", Box::new(AdamW::new(0.1))),
            ("lion", Box::new(Lion::new(0.1))),
            ("muon", Box::new(Muon::new(0.1))),
            ("unfused adam", Box::new(Unfused(Adam::new(0.1)))),
        ];
        for (what, opt) in all.iter_mut() {
            assert_eq!(opt.state_len("w"), None, "{what}");
            opt.step("w", &[2], &mut [1.0, 2.0], &[0.5, -0.5]);
            opt.end_iteration();
            assert_eq!(opt.state_len("w"), Some(2), "{what}");
            assert_eq!(opt.state_len("b"), None, "{what}");
            assert_eq!(
                check_state_len(opt.as_ref(), "w", 3).unwrap_err(),
                state_size_mismatch("w", 2, 3),
                "{what}"
            );
            assert!(opt.reset_state(), "{what}");
            let fresh = opt.state_dict().unwrap();
            assert_eq!((fresh.step, fresh.buffers.len()), (0, 0), "{what}");
            // After the reset the name may be stepped at another size.
            let mut p = [1.0f32, 2.0, 3.0];
            opt.step("w", &[3], &mut p, &[0.5, -0.5, 0.25]);
            assert_eq!(opt.state_len("w"), Some(3), "{what}");
        }
        // Plain SGD keeps no state at all.
        let mut sgd = Sgd::new(0.1);
        sgd.step("w", &[1], &mut [1.0], &[1.0]);
        assert_eq!(sgd.state_len("w"), None);
    }

    #[test]
    fn the_state_size_message_names_the_param_both_sizes_and_the_fixes() {
        let m = state_size_mismatch("layer.w", 6, 4);
        for part in [
            "param `layer.w` has 4 values",
            "state of 6 values",
            "fresh optimizer",
            "reset_state()",
        ] {
            assert!(m.contains(part), "{part}: {m}");
        }
    }

    #[test]
    fn default_trait_methods_step_in_order_and_report_no_state() {
        struct Recorder(Vec<String>);
        impl Optimizer for Recorder {
            fn step(&mut self, name: &str, shape: &[usize], param: &mut [f32], grad: &[f32]) {
                self.0.push(format!("{name}{shape:?}"));
                param[0] += grad[0];
            }
        }
        let mut r = Recorder(Vec::new());
        let (mut a, mut b) = ([1.0f32], [2.0f32]);
        let mut items = [
            OptItem {
                name: "a",
                shape: &[1],
                param: &mut a,
                grad: &[10.0],
            },
            OptItem {
                name: "b",
                shape: &[1, 1],
                param: &mut b,
                grad: &[20.0],
            },
        ];
        let dynopt: &mut dyn Optimizer = &mut r;
        dynopt.step_batch(&mut items);
        dynopt.end_iteration();
        dynopt.set_lr(5.0);
        assert_eq!(dynopt.lr_scale("a"), 1.0);
        assert!(dynopt.state_dict().is_none());
        assert!(!dynopt.load_state_dict(&OptimizerState::default()));
        assert_eq!(dynopt.state_len("a"), None);
        assert!(!dynopt.reset_state());
        assert_eq!((a, b), ([11.0], [22.0]));
        assert_eq!(r.0, ["a[1]", "b[1, 1]"]);
    }
}
