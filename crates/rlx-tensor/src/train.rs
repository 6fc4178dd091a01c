//! One-call training steps on [`Func`] (feature `optim`).
//!
//! Every variant runs the value-and-gradient function of the loss (`outputs[0]`) with
//! respect to the chosen params, hands `(name, shape, param, grad)` items to the
//! optimizer, and returns a copy of the `Func` with the updated params plus the loss.
//! The value-and-gradient graph is derived once per `Func` lineage and compiled once.
//!
//! An optimizer with a fused rule ([`Optimizer::fused`]) takes the compiled path (see
//! `train_fused`); others get `step_batch` on the host. Both give every param the same
//! update, including its [`ParamGroup`](rlx_optim::ParamGroup) overrides: the host path
//! passes each param's static shape (a single dynamic axis resolved from the bound data)
//! to `step`, and the compiled path resolves groups at that same shape.

use crate::eval::Device;
use crate::func::Func;
use crate::{Error, Result};
use rlx_optim::{OptItem, Optimizer};

pub use rlx_optim::LrSchedule;

impl Func {
    /// Run `f` with every param name (`param_names()` order) as `&[&str]`.
    fn with_all_params<R>(&self, f: impl FnOnce(&[&str]) -> R) -> R {
        let names = self.param_names();
        let wrt: Vec<&str> = names.iter().map(String::as_str).collect();
        f(&wrt)
    }

    /// The memoized value-and-grad function for `wrt` (no params bound: they come from `self`).
    pub(crate) fn value_and_grad_for(&self, wrt: &[&str]) -> Result<Func> {
        let key = format!("value_and_grad:{}", wrt.join("\u{1f}"));
        self.derived(&key, || self.try_value_and_grad(wrt))
    }

    /// One optimizer step on params `wrt`; returns the updated `Func` and the loss (`outputs[0]`).
    ///
    /// ```
    /// use rlx_tensor::{shape, Func, Sgd};
    /// // minimise (w - 3)²
    /// let f = Func::new("quad", |s| {
    ///     let w = s.param("w", shape![1]);
    ///     let d = &w - 3.0;
    ///     (&d * &d).sum_all()
    /// })
    /// .with_param("w", vec![0.0]);
    /// let mut opt = Sgd::new(0.25);
    /// let (f, loss0) = f.train_step(&mut opt, &["w"], &[]);
    /// assert_eq!(loss0, vec![9.0]);
    /// assert_eq!(f.param_binding("w"), Some(&[1.5f32][..]));
    /// ```
    #[track_caller]
    pub fn train_step(
        &self,
        opt: &mut dyn Optimizer,
        wrt: &[&str],
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        self.try_train_step_impl(None, opt, None, 0, 0.0, None, wrt, inputs)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::train_step`] returning an error instead of panicking. Everything about the
    /// call is checked before anything runs or changes: every name in `wrt` must be a
    /// distinct, bound param, and when `opt` already keeps state for a name (it trained
    /// another function before) that state must have the param's size — otherwise the
    /// error names the param and both sizes and says to use a fresh optimizer or call
    /// `opt.reset_state()`; `opt` is left as it was.
    ///
    /// ```
    /// use rlx_tensor::{shape, Adam, Func, Optimizer};
    /// let sized = |n: usize| {
    ///     Func::new("f", |s| s.param("w", shape![n]).sum_all()).with_param("w", vec![0.0; n])
    /// };
    /// let mut opt = Adam::new(0.1);
    /// let _ = sized(2).train_step(&mut opt, &["w"], &[]);
    /// let err = sized(3).try_train_step(&mut opt, &["w"], &[]).unwrap_err();
    /// assert!(err.to_string().contains("has 3 values but the optimizer holds state of 2 values"));
    /// assert!(opt.reset_state());
    /// assert!(sized(3).try_train_step(&mut opt, &["w"], &[]).is_ok());
    /// ```
    pub fn try_train_step(
        &self,
        opt: &mut dyn Optimizer,
        wrt: &[&str],
        inputs: &[(&str, &[f32])],
    ) -> Result<(Func, Vec<f32>)> {
        self.try_train_step_impl(None, opt, None, 0, 0.0, None, wrt, inputs)
    }

    /// [`Func::train_step`] with the learning rate of `schedule` at `step`.
    #[track_caller]
    pub fn train_step_at(
        &self,
        opt: &mut dyn Optimizer,
        schedule: &LrSchedule,
        step: usize,
        wrt: &[&str],
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        self.try_train_step_impl(None, opt, Some(schedule), step, 0.0, None, wrt, inputs)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::train_step`] on an explicit device.
    #[track_caller]
    pub fn train_step_on(
        &self,
        device: Device,
        opt: &mut dyn Optimizer,
        wrt: &[&str],
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        self.try_train_step_impl(Some(device), opt, None, 0, 0.0, None, wrt, inputs)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Scheduled step on an explicit device.
    #[track_caller]
    pub fn train_step_at_on(
        &self,
        device: Device,
        opt: &mut dyn Optimizer,
        schedule: &LrSchedule,
        step: usize,
        wrt: &[&str],
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        self.try_train_step_impl(
            Some(device),
            opt,
            Some(schedule),
            step,
            0.0,
            None,
            wrt,
            inputs,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Step on every param (`param_names()` order).
    #[track_caller]
    pub fn train_step_all(
        &self,
        opt: &mut dyn Optimizer,
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        self.with_all_params(|wrt| self.train_step(opt, wrt, inputs))
    }

    /// Scheduled step on every param.
    #[track_caller]
    pub fn train_step_all_at(
        &self,
        opt: &mut dyn Optimizer,
        schedule: &LrSchedule,
        step: usize,
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        self.with_all_params(|wrt| self.train_step_at(opt, schedule, step, wrt, inputs))
    }

    /// Step on every param on an explicit device.
    #[track_caller]
    pub fn train_step_all_on(
        &self,
        device: Device,
        opt: &mut dyn Optimizer,
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        self.with_all_params(|wrt| self.train_step_on(device, opt, wrt, inputs))
    }

    /// Scheduled step on every param on an explicit device.
    #[track_caller]
    pub fn train_step_all_at_on(
        &self,
        device: Device,
        opt: &mut dyn Optimizer,
        schedule: &LrSchedule,
        step: usize,
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        self.with_all_params(|wrt| self.train_step_at_on(device, opt, schedule, step, wrt, inputs))
    }

    /// Scheduled step on every param with global L2 gradient clipping: when the norm of
    /// all gradients (f64 accumulation) is finite and above `max_grad_norm`, every
    /// gradient is scaled by `max_grad_norm / norm`. `max_grad_norm ≤ 0` disables clipping.
    #[track_caller]
    pub fn train_step_all_at_on_clipped(
        &self,
        device: Device,
        opt: &mut dyn Optimizer,
        schedule: &LrSchedule,
        step: usize,
        max_grad_norm: f32,
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        self.with_all_params(|wrt| {
            self.try_train_step_impl(
                Some(device),
                opt,
                Some(schedule),
                step,
                max_grad_norm,
                None,
                wrt,
                inputs,
            )
            .unwrap_or_else(|e| panic!("{e}"))
        })
    }

    /// Quantization-aware step: forward and gradient are computed at `quant`-ized copies
    /// of the params, the update is applied to the f32 masters (straight-through).
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub fn train_step_all_at_on_qat(
        &self,
        device: Device,
        opt: &mut dyn Optimizer,
        schedule: &LrSchedule,
        step: usize,
        max_grad_norm: f32,
        quant: impl Fn(&mut [f32]),
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        let q = move |_: &str, _: &[usize], data: &mut [f32]| quant(data);
        self.train_step_all_at_on_qat_with(device, opt, schedule, step, max_grad_norm, q, inputs)
    }

    /// [`Func::train_step_all_at_on_qat`] with a quantizer that sees each param's name and shape.
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub fn train_step_all_at_on_qat_with(
        &self,
        device: Device,
        opt: &mut dyn Optimizer,
        schedule: &LrSchedule,
        step: usize,
        max_grad_norm: f32,
        quant: impl Fn(&str, &[usize], &mut [f32]),
        inputs: &[(&str, &[f32])],
    ) -> (Func, Vec<f32>) {
        self.with_all_params(|wrt| {
            self.try_train_step_impl(
                Some(device),
                opt,
                Some(schedule),
                step,
                max_grad_norm,
                Some(&quant),
                wrt,
                inputs,
            )
            .unwrap_or_else(|e| panic!("{e}"))
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn try_train_step_impl(
        &self,
        device: Option<Device>,
        opt: &mut dyn Optimizer,
        schedule: Option<&LrSchedule>,
        step: usize,
        max_grad_norm: f32,
        quant: Option<crate::train_fused::Quant<'_>>,
        wrt: &[&str],
        inputs: &[(&str, &[f32])],
    ) -> Result<(Func, Vec<f32>)> {
        self.check_trainable(&*opt, wrt)?;
        if let Some(s) = schedule {
            opt.set_lr(s.lr_at(step));
        }
        if let Some(done) = self.try_fused_step(device, opt, max_grad_norm, quant, wrt, inputs)? {
            return Ok(done);
        }
        let mut masters: Vec<Vec<f32>> = Vec::with_capacity(wrt.len());
        let mut shapes: Vec<Vec<usize>> = Vec::with_capacity(wrt.len());
        for name in wrt {
            let data = self
                .param_binding(name)
                .ok_or_else(|| unbound(self, name))?;
            shapes.push(self.item_shape(name, data.len()));
            masters.push(data.to_vec());
        }
        let vg = self.value_and_grad_for(wrt)?;
        // forward/backward at (possibly quantized) params
        let mut run_params = self.param_bindings().to_vec();
        if let Some(q) = quant {
            for (name, data) in run_params.iter_mut() {
                if let Some(i) = wrt.iter().position(|w| w == name) {
                    q(name, &shapes[i], data);
                }
            }
        }
        let device = device.unwrap_or_else(|| crate::eval::fastest_device_for(vg.graph()));
        let mut outs = vg.try_run_with_params_on(device, &run_params, inputs)?;
        let loss = outs.remove(0);
        let mut grads = outs;
        if max_grad_norm > 0.0 {
            let norm = grads
                .iter()
                .flat_map(|g| g.iter())
                .map(|&v| (v as f64) * (v as f64))
                .sum::<f64>()
                .sqrt();
            if norm.is_finite() && norm > max_grad_norm as f64 {
                let scale = (max_grad_norm as f64 / norm) as f32;
                grads
                    .iter_mut()
                    .flat_map(|g| g.iter_mut())
                    .for_each(|v| *v *= scale);
            }
        }
        {
            let mut items: Vec<OptItem<'_>> = masters
                .iter_mut()
                .zip(&grads)
                .zip(wrt.iter().zip(&shapes))
                .map(|((param, grad), (name, shape))| OptItem {
                    name,
                    shape,
                    param,
                    grad,
                })
                .collect();
            opt.step_batch(&mut items);
        }
        opt.end_iteration();
        let next = self.with_updated_params(wrt.iter().copied().zip(masters).collect());
        Ok((next, loss))
    }
}

impl Func {
    /// `Err` unless every name in `wrt` is a distinct, bound param of this function whose
    /// size matches the state `opt` already keeps for that name — checked before anything
    /// runs or changes, so a bad call leaves the optimizer as it was.
    fn check_trainable(&self, opt: &dyn Optimizer, wrt: &[&str]) -> Result<()> {
        let g = self.graph();
        for (i, &name) in wrt.iter().enumerate() {
            if wrt[..i].contains(&name) {
                return Err(Error::new(format!(
                    "train_step: `{name}` is listed twice in wrt; list every param to train once"
                )));
            }
            if g.param_id(name).is_none() {
                let what = if g.input_id(name).is_some() {
                    format!("`{name}` is an input of Func `{}`, not a param", g.name)
                } else {
                    format!("Func `{}` has no param named `{name}`", g.name)
                };
                return Err(Error::unknown_name(format!(
                    "train_step: {what}; wrt names the params to update (declared params: {:?})",
                    self.param_names()
                )));
            }
            let data = self
                .param_binding(name)
                .ok_or_else(|| unbound(self, name))?;
            rlx_optim::check_state_len(opt, name, data.len())
                .map_err(|e| Error::new(format!("train_step: Func `{}`: {e}", g.name)))?;
        }
        Ok(())
    }

    /// The shape handed to the optimizer for param `name` bound to `len` values: its
    /// static dims, with a single dynamic axis resolved from `len`; `[len]` when the
    /// declared dims cannot describe the data (so shape-aware optimizers such as Muon
    /// always get a shape whose product is the element count).
    fn item_shape(&self, name: &str, len: usize) -> Vec<usize> {
        let Some(id) = self.graph().param_id(name) else {
            return vec![len];
        };
        let dims = self.graph().shape(id).dims();
        let fixed: usize = dims
            .iter()
            .filter_map(|d| match d {
                rlx_ir::Dim::Static(n) => Some(*n),
                rlx_ir::Dim::Dynamic(_) => None,
            })
            .product();
        let dynamic = dims.iter().filter(|d| !d.is_static()).count();
        let shape: Vec<usize> = match dynamic {
            0 => dims.iter().map(|d| d.unwrap_static()).collect(),
            1 if fixed > 0 && len.is_multiple_of(fixed) => dims
                .iter()
                .map(|d| match d {
                    rlx_ir::Dim::Static(n) => *n,
                    rlx_ir::Dim::Dynamic(_) => len / fixed,
                })
                .collect(),
            _ => return vec![len],
        };
        if shape.iter().try_fold(1usize, |p, &d| p.checked_mul(d)) == Some(len) {
            shape
        } else {
            vec![len]
        }
    }
}

fn unbound(f: &Func, name: &str) -> Error {
    Error::new(format!(
        "train_step: param `{name}` is not bound; bind it with .with_param(\"{name}\", data), .init_params(..) or .init_randn(..) (declared params: {:?})",
        f.param_names()
    ))
}
