//! Forward-mode and batching transforms of [`Func`] (feature `autodiff`):
//! [`Func::vmap`], [`Func::jvp`] and [`Func::hvp`].
//!
//! Each returns a new `Func` over an ordinary graph built by
//! [`rlx_compile::vmap`] / [`rlx_compile::jvp`], keeping the bound params, so the
//! transforms compose with each other and with the gradient transforms in any order
//! (`f.grad(..).vmap(..)`, `f.vmap(..).grad(..)`, `f.grad(..).jvp(..)`, …) and the
//! result compiles once (`.jit()`) like any other function. Dynamic dims survive.

use crate::func::Func;
use crate::{Error, Result};
use rlx_compile::{jvp, vmap};
use rlx_ir::{Graph, NodeId, Op};

impl Func {
    /// The batched function: every input named in `batched` gains a leading axis of
    /// `batch_size`; the other inputs and all params are shared by every example; every
    /// output gains the leading batch axis (outputs that do not depend on a batched
    /// input are broadcast to it). Output `b` equals this function on example `b`.
    ///
    /// Panics when a name is not an input of the function (params cannot be batched),
    /// is listed twice, or `batch_size` is 0; see [`Func::try_vmap`].
    ///
    /// ```
    /// use rlx_tensor::{shape, Func};
    /// let f = Func::new("f", |s| {
    ///     let x = s.input("x", shape![3]);
    ///     (&x * &x).sum([0], false)
    /// });
    /// let batched_grad = f.grad(&["x"]).vmap(&["x"], 4);
    /// # #[cfg(feature = "eval")] {
    /// let xs: Vec<f32> = (0..12).map(|i| i as f32).collect();
    /// let compiled = batched_grad.jit();
    /// let out = compiled.run(&[("x", &xs)]);
    /// assert_eq!(out[0], xs.iter().map(|x| 2.0 * x).collect::<Vec<f32>>());
    /// # }
    /// ```
    #[track_caller]
    pub fn vmap(&self, batched: &[&str], batch_size: usize) -> Func {
        self.try_vmap(batched, batch_size)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::vmap`] returning an error instead of panicking.
    pub fn try_vmap(&self, batched: &[&str], batch_size: usize) -> Result<Func> {
        let g = self.graph();
        let ids = batched
            .iter()
            .map(|name| match g.input_id(name) {
                Some(id) => Ok(id),
                None if g.param_id(name).is_some() => Err(Error::new(format!(
                    "Func `{}`: vmap: `{name}` is a param; params are shared by every example, only inputs can be batched (inputs: {:?})",
                    g.name,
                    g.input_names()
                ))),
                None => Err(Error::unknown_name(format!(
                    "Func `{}`: vmap: no input named `{name}` (inputs: {:?})",
                    g.name,
                    g.input_names()
                ))),
            })
            .collect::<Result<Vec<NodeId>>>()?;
        let mut out = vmap::vmap(g, &ids, batch_size)
            .map_err(|e| Error::from(e).context(format_args!("Func `{}`", g.name)))?;
        out.name = format!("{}_vmap", g.name);
        Ok(self.with_graph(out))
    }

    /// The Jacobian-vector-product function: for every name in `tangent_for` (an
    /// input or a param) a new input `tangent_<name>` of the same shape carries the
    /// direction; the outputs are `[primals…, tangents…]` — every output of this
    /// function, then its directional derivative (zeros where none reaches it).
    ///
    /// Panics with `Func: no input or param named …` for an unknown name; see
    /// [`Func::try_jvp`].
    ///
    /// ```
    /// use rlx_tensor::{shape, Func};
    /// let f = Func::new("cube", |s| {
    ///     let x = s.input("x", shape![2]);
    ///     &(&x * &x) * &x
    /// });
    /// let df = f.jvp(&["x"]);
    /// # #[cfg(feature = "eval")] {
    /// let out = df.run(&[("x", &[1.0, 2.0]), ("tangent_x", &[1.0, 0.5])]);
    /// assert_eq!(out[0], vec![1.0, 8.0]); // x³
    /// assert_eq!(out[1], vec![3.0, 6.0]); // 3x²·t
    /// # }
    /// ```
    #[track_caller]
    pub fn jvp(&self, tangent_for: &[&str]) -> Func {
        self.try_jvp(tangent_for).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::jvp`] returning an error instead of panicking.
    pub fn try_jvp(&self, tangent_for: &[&str]) -> Result<Func> {
        let g = self.graph();
        let ids = resolve(g, tangent_for)?;
        let mut out = jvp::jvp_graph(g, &ids)
            .map_err(|e| Error::from(e).context(format_args!("Func `{}`", g.name)))?;
        out.name = format!("{}_jvp", g.name);
        Ok(self.with_graph(out))
    }

    /// The Hessian-vector-product function of the loss (the first output), by forward
    /// mode over reverse mode: inputs `tangent_<name>` carry the direction `v`; the
    /// outputs are `[loss, grads…, ⟨grad, v⟩, H·v…]` (one gradient and one `H·v` block
    /// per name in `wrt`).
    ///
    /// Panics for an unknown name or when no gradient reaches a name; see
    /// [`Func::try_hvp`].
    ///
    /// ```
    /// use rlx_tensor::{shape, Func};
    /// // f(x) = Σ x³: grad 3x², H = diag(6x)
    /// let f = Func::new("f", |s| {
    ///     let x = s.input("x", shape![2]);
    ///     (&(&x * &x) * &x).sum_all()
    /// });
    /// let h = f.hvp(&["x"]);
    /// # #[cfg(feature = "eval")] {
    /// let out = h.run(&[("x", &[1.0, 2.0]), ("tangent_x", &[1.0, 1.0])]);
    /// assert_eq!(out[0], vec![9.0]);
    /// assert_eq!(out[1], vec![3.0, 12.0]);
    /// assert_eq!(out[2], vec![15.0]);
    /// assert_eq!(out[3], vec![6.0, 12.0]);
    /// # }
    /// ```
    #[track_caller]
    pub fn hvp(&self, wrt: &[&str]) -> Func {
        self.try_hvp(wrt).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::hvp`] returning an error instead of panicking.
    pub fn try_hvp(&self, wrt: &[&str]) -> Result<Func> {
        let vg = self.try_value_and_grad(wrt)?;
        let ids = resolve(vg.graph(), wrt)?;
        let mut out = jvp::jvp_graph(vg.graph(), &ids).map_err(|e| {
            Error::from(e).context(format_args!("Func `{}`: hvp", self.graph().name))
        })?;
        out.name = format!("{}_hvp", self.graph().name);
        Ok(self.with_graph(out))
    }
}

/// The input or param node of every name.
fn resolve(g: &Graph, names: &[&str]) -> Result<Vec<NodeId>> {
    names
        .iter()
        .map(|name| {
            let id = g.input_id(name).or_else(|| g.param_id(name));
            match id.map(|id| (id, &g.node(id).op)) {
                Some((id, Op::Input { .. } | Op::Param { .. })) => Ok(id),
                _ => Err(Error::unknown_name(format!(
                    "Func: no input or param named `{name}` in `{}` (inputs: {:?}, params: {:?})",
                    g.name,
                    g.input_names(),
                    g.param_names()
                ))),
            }
        })
        .collect()
}
