//! Optimizer steps from gradients computed elsewhere (feature `optim`): the building block
//! of data-parallel training, where each process computes gradients on its shard and the
//! averaged gradients drive one identical update everywhere.
//!
//! [`Func::try_loss_and_grads`] runs the memoized value-and-gradient program of
//! [`Func::train_step`] without updating anything. [`Func::try_apply_grads`] applies one
//! optimizer step from gradients the caller passes in, through the same machinery as
//! `train_step`: it trains a small derived function whose loss is `Σ_p sum(p ⊙ g_p)` with
//! every `g_p` a runtime input, so the gradient the step sees for `p` is `g_p` itself
//! (the backward of that loss multiplies `g_p` by the seed 1.0, which is exact). An
//! optimizer with a fused rule therefore updates the params in one compiled program
//! (params, state and gradients in, new params and state out), the same update program
//! shape `train_step` compiles, and any other optimizer takes the host `step_batch` path;
//! parameter groups, schedules and the optimizer's state behave exactly as in
//! `train_step`. The derived function is built once per `Func` lineage and `wrt` list.

use crate::eval::Device;
use crate::func::Func;
use crate::{Error, Result};
use rlx_ir::{BinaryOp, Graph, Op, ReduceOp};
use rlx_optim::Optimizer;

/// Prefix of the gradient inputs of the derived update function. Names starting with
/// `__` are reserved (users cannot declare them), so these never collide with a param.
const GRAD_PREFIX: &str = "__grad.";

impl Func {
    /// The loss (`outputs[0]`) and the gradients of it with respect to the params `wrt`
    /// (one `Vec` per name, in `wrt` order) at the bound params, on the default device;
    /// nothing is updated. Uses the same memoized, compiled value-and-gradient program as
    /// [`Func::train_step`].
    ///
    /// ```
    /// use rlx_tensor::{shape, Func};
    /// let f = Func::new("quad", |s| {
    ///     let w = s.param("w", shape![2]);
    ///     let d = &w - 3.0;
    ///     (&d * &d).sum_all()
    /// })
    /// .with_param("w", vec![0.0, 1.0]);
    /// let (loss, grads) = f.try_loss_and_grads(&["w"], &[]).unwrap();
    /// assert_eq!(loss, vec![13.0]);
    /// assert_eq!(grads, vec![vec![-6.0, -4.0]]);
    /// ```
    pub fn try_loss_and_grads(
        &self,
        wrt: &[&str],
        inputs: &[(&str, &[f32])],
    ) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        self.loss_and_grads_impl(None, wrt, inputs)
    }

    /// [`Func::try_loss_and_grads`] on an explicit device.
    pub fn try_loss_and_grads_on(
        &self,
        device: Device,
        wrt: &[&str],
        inputs: &[(&str, &[f32])],
    ) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        self.loss_and_grads_impl(Some(device), wrt, inputs)
    }

    fn loss_and_grads_impl(
        &self,
        device: Option<Device>,
        wrt: &[&str],
        inputs: &[(&str, &[f32])],
    ) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        for &name in wrt {
            if self.param_binding(name).is_none() {
                return Err(Error::unknown_name(format!(
                    "loss_and_grads: `{name}` is not a bound param of Func `{}`; bind it with .with_param, .init_params or .init_randn (declared params: {:?})",
                    self.graph().name,
                    self.param_names()
                )));
            }
        }
        let vg = self.value_and_grad_for(wrt)?;
        let device = device.unwrap_or_else(|| crate::eval::fastest_device_for(vg.graph()));
        let mut outs = vg.try_run_with_params_on(device, self.param_bindings(), inputs)?;
        if outs.len() != wrt.len() + 1 {
            return Err(Error::new(format!(
                "loss_and_grads: Func `{}`: the value-and-gradient program returned {} outputs for {} params",
                self.graph().name,
                outs.len(),
                wrt.len()
            )));
        }
        let loss = outs.remove(0);
        Ok((loss, outs))
    }

    /// One optimizer step on the params `wrt` from the gradients `grads` (one slice per
    /// name, in `wrt` order, each as long as the param's bound data); returns this `Func`
    /// with the updated params. The update is the one [`Func::train_step`] would make
    /// had its backward produced `grads` (fused compiled update when the optimizer has
    /// one, host `step_batch` otherwise), including `opt.end_iteration()`.
    ///
    /// Errors, before anything changes: a name in `wrt` that is not a bound param, a
    /// gradient count or length that does not match, or optimizer state of another size.
    ///
    /// ```
    /// use rlx_tensor::{shape, Func, Sgd};
    /// let f = Func::new("quad", |s| {
    ///     let w = s.param("w", shape![2]);
    ///     (&w * &w).sum_all()
    /// })
    /// .with_param("w", vec![1.0, 2.0]);
    /// let mut opt = Sgd::new(0.5);
    /// let next = f.try_apply_grads(&mut opt, &["w"], &[&[2.0, -4.0]]).unwrap();
    /// assert_eq!(next.param_binding("w"), Some(&[0.0f32, 4.0][..]));
    /// ```
    pub fn try_apply_grads(
        &self,
        opt: &mut dyn Optimizer,
        wrt: &[&str],
        grads: &[&[f32]],
    ) -> Result<Func> {
        let fname = &self.graph().name;
        if grads.len() != wrt.len() {
            return Err(Error::new(format!(
                "apply_grads: Func `{fname}`: {} gradients for {} params {wrt:?}; pass one gradient per name in wrt, in the same order",
                grads.len(),
                wrt.len()
            )));
        }
        for (i, (&name, g)) in wrt.iter().zip(grads).enumerate() {
            if wrt[..i].contains(&name) {
                return Err(Error::new(format!(
                    "apply_grads: `{name}` is listed twice in wrt; list every param to update once"
                )));
            }
            let Some(data) = self.param_binding(name) else {
                return Err(Error::unknown_name(format!(
                    "apply_grads: `{name}` is not a bound param of Func `{fname}` (declared params: {:?})",
                    self.param_names()
                )));
            };
            if data.len() != g.len() {
                return Err(Error::shape(format!(
                    "apply_grads: Func `{fname}`: the gradient of `{name}` has {} values but the param has {}",
                    g.len(),
                    data.len()
                )));
            }
        }
        let key = format!("apply_grads:{}", wrt.join("\u{1f}"));
        let mut update = self.derived(&key, || self.apply_grads_func(wrt))?;
        for &name in wrt {
            let data = self.param_binding(name).expect("checked bound above");
            update = update.try_with_param(name, data.to_vec())?;
        }
        let names: Vec<String> = wrt.iter().map(|n| format!("{GRAD_PREFIX}{n}")).collect();
        let inputs: Vec<(&str, &[f32])> = names
            .iter()
            .map(String::as_str)
            .zip(grads.iter().copied())
            .collect();
        let (stepped, _) = update
            .try_train_step(opt, wrt, &inputs)
            .map_err(|e| e.context(format!("apply_grads on Func `{fname}`")))?;
        let updates = wrt
            .iter()
            .map(|&n| {
                let data = stepped
                    .param_binding(n)
                    .expect("the update keeps every param bound");
                (n, data.to_vec())
            })
            .collect();
        Ok(self.with_updated_params(updates))
    }

    /// The derived function whose gradient with respect to each param of `wrt` is the
    /// runtime input `__grad.<name>`: loss `Σ_p sum(p ⊙ g_p)`, params declared with this
    /// function's shapes.
    fn apply_grads_func(&self, wrt: &[&str]) -> Result<Func> {
        let src = self.graph();
        let mut g = Graph::new(format!("{}_apply_grads", src.name));
        let mut loss = None;
        for &name in wrt {
            let id = src.param_id(name).ok_or_else(|| {
                Error::unknown_name(format!(
                    "apply_grads: Func `{}` has no param named `{name}`",
                    src.name
                ))
            })?;
            let shape = src.shape(id).clone();
            let rank = shape.rank();
            let p = g.param(name, shape.clone());
            let grad = g.input(format!("{GRAD_PREFIX}{name}"), shape);
            let ctx =
                |e: rlx_ir::IrError| Error::from(e).context(format!("apply_grads: param `{name}`"));
            let prod = g
                .add_op(Op::Binary(BinaryOp::Mul), vec![p, grad])
                .map_err(ctx)?;
            let part = if rank == 0 {
                prod
            } else {
                g.add_op(
                    Op::Reduce {
                        op: ReduceOp::Sum,
                        axes: (0..rank).collect(),
                        keep_dim: false,
                    },
                    vec![prod],
                )
                .map_err(ctx)?
            };
            loss = Some(match loss {
                None => part,
                Some(l) => g
                    .add_op(Op::Binary(BinaryOp::Add), vec![l, part])
                    .map_err(ctx)?,
            });
        }
        let loss = loss.ok_or_else(|| {
            Error::new("apply_grads: wrt is empty; name at least one param to update")
        })?;
        g.set_outputs(vec![loss]);
        Ok(Func::from_graph_unchecked(g))
    }
}
