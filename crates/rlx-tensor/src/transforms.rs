//! Reverse-mode transforms (feature `autodiff`): [`Tensor::grad`] and the gradient
//! transforms of [`Func`] (`grad`, `value_and_grad`, `value_and_grad_all`, `grad_all`).
//!
//! Both append the backward pass to a copy of the graph with
//! [`rlx_compile::autodiff`]; the loss is seeded with ones, so a non-scalar loss is
//! differentiated as its sum. Dynamic dims survive: a gradient function of a
//! `shape![?, 4]` input runs on any batch size.

use crate::func::Func;
use crate::tensor::{GraphCell, Tensor};
use crate::{Error, Result};
use rlx_compile::autodiff;
use rlx_ir::{Graph, NodeId, Op};

impl Tensor {
    /// Gradients of this tensor (summed over its elements when it is not a scalar)
    /// with respect to each of `wrt`, in order.
    ///
    /// The `wrt` tensors may come from other graphs: they are adopted into this one,
    /// so a tensor this loss was computed from is found. The gradients live together
    /// on a brand-new graph (they share nothing with the inputs). Panics when no
    /// gradient reaches some `wrt` tensor, naming the op that stops it; see
    /// [`Tensor::try_grad`].
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    /// let b = Tensor::from_vec(vec![4.0, 5.0, 6.0], [3]);
    /// let loss = (&a * &b).sum([0], false);
    /// let g = loss.grad(&[&a, &b]);
    /// # #[cfg(feature = "eval")] {
    /// assert_eq!(g[0].to_vec(), b.to_vec());
    /// assert_eq!(g[1].to_vec(), a.to_vec());
    /// # }
    /// ```
    #[track_caller]
    pub fn grad(&self, wrt: &[&Tensor]) -> Vec<Tensor> {
        self.try_grad(wrt).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::grad`] returning an error instead of panicking.
    pub fn try_grad(&self, wrt: &[&Tensor]) -> Result<Vec<Tensor>> {
        let ids = wrt
            .iter()
            .map(|t| self.adopt(t))
            .collect::<Result<Vec<NodeId>>>()?;
        let (mut graph, realized) = {
            let st = self.cell.state();
            (st.graph.clone(), st.realized.clone())
        };
        let labels: Vec<String> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| tensor_label(&graph, id, i))
            .collect();
        let grads = autodiff::append_grad(&mut graph, self.id, &ids, Some(&labels))
            .map_err(|e| Error::from_ir_kind(e.kind, format!("Tensor::grad: {}", e.message)))?;
        graph.set_outputs(grads.clone());
        let cell = GraphCell::new(graph);
        // Forward values already computed stay computed in the new graph.
        cell.state_mut().realized = realized;
        Ok(grads
            .into_iter()
            .map(|id| Tensor::from_parts(cell.clone(), id))
            .collect())
    }
}

/// How a `wrt` tensor is named in messages: its input/param name, else its position.
fn tensor_label(g: &Graph, id: NodeId, i: usize) -> String {
    let n = g.node(id);
    match &n.op {
        Op::Input { name } | Op::Param { name } => format!("`{name}` (wrt[{i}])"),
        op => format!("wrt[{i}] (a {} {})", n.shape, op.name()),
    }
}

impl Func {
    /// The gradient function: outputs `[∂loss/∂wrt_i …]` where the loss is this
    /// function's first output (seeded with ones, so a non-scalar loss is summed).
    /// Names are resolved among the inputs and the params; bound params are kept.
    ///
    /// Panics with `Func: no input or param named …` for an unknown name, or when no
    /// gradient reaches a name (naming the op that stops it); see [`Func::try_grad`].
    ///
    /// ```
    /// use rlx_tensor::{shape, Func};
    /// let f = Func::new("sq", |s| {
    ///     let x = s.input("x", shape![?, 2]);
    ///     let w = s.param("w", shape![2]);
    ///     (&x * &w).sum_all()
    /// })
    /// .with_param("w", vec![3.0, 4.0]);
    /// let df = f.grad(&["x", "w"]);
    /// # #[cfg(feature = "eval")] {
    /// let out = df.run(&[("x", &[1.0, 2.0, 5.0, 6.0])]); // a batch of 2
    /// assert_eq!(out[0], vec![3.0, 4.0, 3.0, 4.0]);
    /// assert_eq!(out[1], vec![6.0, 8.0]);
    /// # }
    /// ```
    #[track_caller]
    pub fn grad(&self, wrt: &[&str]) -> Func {
        self.try_grad(wrt).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::grad`] returning an error instead of panicking.
    pub fn try_grad(&self, wrt: &[&str]) -> Result<Func> {
        self.gradient_func(wrt, false, "grad")
    }

    /// Like [`Func::grad`] with the loss kept as the first output: `[loss, grads…]`.
    #[track_caller]
    pub fn value_and_grad(&self, wrt: &[&str]) -> Func {
        self.try_value_and_grad(wrt)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::value_and_grad`] returning an error instead of panicking.
    pub fn try_value_and_grad(&self, wrt: &[&str]) -> Result<Func> {
        self.gradient_func(wrt, true, "value_and_grad")
    }

    /// [`Func::value_and_grad`] with respect to every param, in
    /// [`Func::param_names`] order.
    #[track_caller]
    pub fn value_and_grad_all(&self) -> Func {
        self.try_value_and_grad_all()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::value_and_grad_all`] returning an error instead of panicking.
    pub fn try_value_and_grad_all(&self) -> Result<Func> {
        let names = self.all_params("value_and_grad_all")?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        self.gradient_func(&refs, true, "value_and_grad_all")
    }

    /// [`Func::grad`] with respect to every param, in [`Func::param_names`] order.
    #[track_caller]
    pub fn grad_all(&self) -> Func {
        self.try_grad_all().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::grad_all`] returning an error instead of panicking.
    pub fn try_grad_all(&self) -> Result<Func> {
        let names = self.all_params("grad_all")?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        self.gradient_func(&refs, false, "grad_all")
    }

    fn all_params(&self, what: &str) -> Result<Vec<String>> {
        let names = self.param_names();
        if names.is_empty() {
            return Err(Error::new(format!(
                "Func `{}`: {what} differentiates with respect to every param, but the function declares none; declare params with GraphScope::param or name inputs with grad/value_and_grad",
                self.graph().name
            )));
        }
        Ok(names)
    }

    /// The node of input or param `name`.
    fn resolve_wrt(&self, name: &str) -> Result<NodeId> {
        let g = self.graph();
        g.input_id(name)
            .or_else(|| g.param_id(name))
            .ok_or_else(|| {
                Error::unknown_name(format!(
                    "Func: no input or param named `{name}` in `{}` (inputs: {:?}, params: {:?})",
                    g.name,
                    g.input_names(),
                    g.param_names()
                ))
            })
    }

    fn gradient_func(&self, wrt: &[&str], keep_loss: bool, what: &str) -> Result<Func> {
        let src = self.graph();
        let Some(&loss) = src.outputs.first() else {
            return Err(Error::new(format!(
                "Func `{}`: {what} needs an output (the first output is the loss), but the function has none",
                src.name
            )));
        };
        let ids = wrt
            .iter()
            .map(|n| self.resolve_wrt(n))
            .collect::<Result<Vec<NodeId>>>()?;
        let labels: Vec<String> = wrt.iter().map(|n| format!("`{n}`")).collect();
        let mut graph = src.clone();
        graph.name = format!("{}_{what}", src.name);
        let grads = autodiff::append_grad(&mut graph, loss, &ids, Some(&labels)).map_err(|e| {
            Error::from_ir_kind(
                e.kind,
                format!("Func `{}`: {what}: {}", src.name, e.message),
            )
        })?;
        let mut outs = if keep_loss { vec![loss] } else { Vec::new() };
        outs.extend(grads);
        graph.set_outputs(outs);
        Ok(self.with_graph(graph))
    }
}
