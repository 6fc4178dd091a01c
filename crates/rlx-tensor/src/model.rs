//! [`Model`]: a compiled graph plus its parameter roster, with strict by-name binding.

use crate::eval::{Device, fastest_device_for};
use crate::exec::{PreparedGraph, What, run_f32_host, typed_from_f32};
use crate::{Error, Result};
use rlx_ir::{DimBinding, Graph};
use rlx_runtime::CompiledGraph;
use std::collections::HashSet;

/// A compiled, runnable model with by-name weight binding.
///
/// `Send + Sync`: a model can be moved into a worker thread or shared by reference
/// (running needs `&mut`, as binding does; for concurrent runs of one program use
/// [`Func::jit`](crate::Func::jit), whose [`Jitted`](crate::Jitted) runs through `&self`).
///
/// Binding is strict: a name the graph does not declare, or data of the wrong
/// length, is an error that lists the declared names.
///
/// ```
/// use rlx_tensor::{graph, shape, Model};
/// let g = graph("scale", |s| {
///     let x = s.input("x", shape![3]);
///     let w = s.param("w", shape![3]);
///     &x * &w
/// });
/// let mut m = Model::new(g);
/// m.set("w", &[1.0, 2.0, 3.0]);
/// assert_eq!(m.run(&[("x", &[1.0, 1.0, 1.0])]), vec![vec![1.0, 2.0, 3.0]]);
/// assert!(m.try_set("W", &[0.0; 3]).unwrap_err().to_string().contains("declared params"));
/// ```
pub struct Model {
    compiled: CompiledGraph,
    prepared: PreparedGraph,
    declared: HashSet<String>,
    name: String,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Model({:?} on {}, params {:?})",
            self.name,
            self.compiled.device(),
            self.declared
        )
    }
}

impl Model {
    /// Compile `graph` for the fastest device for it. Panics when it does not compile.
    #[track_caller]
    pub fn new(graph: Graph) -> Model {
        let device = fastest_device_for(&graph);
        Model::on(graph, device)
    }

    /// Compile `graph` for `device` now (not through the cache). Panics when it does not compile.
    #[track_caller]
    pub fn on(graph: Graph, device: Device) -> Model {
        Model::try_on(graph, device).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Model::on`] returning an error.
    pub fn try_on(graph: Graph, device: Device) -> Result<Model> {
        crate::func::check_graph(&format!("Model `{}`", graph.name), &graph)?;
        crate::eval::ensure_backends();
        let prepared = PreparedGraph::new(&graph);
        let compiled = CompiledGraph::new(device, &prepared.prepared.graph).map_err(Error::from)?;
        Ok(Model {
            compiled,
            prepared,
            declared: graph.param_names().into_iter().map(String::from).collect(),
            name: graph.name.clone(),
        })
    }

    /// Declared param names (unordered).
    pub fn param_names(&self) -> impl Iterator<Item = &str> {
        self.declared.iter().map(String::as_str)
    }

    /// Declared params not yet bound.
    pub fn unbound(&self) -> Vec<&str> {
        self.declared
            .iter()
            .filter(|n| !self.compiled.is_param_bound(n))
            .map(String::as_str)
            .collect()
    }

    /// Bind param `name`. Panics on an undeclared name or a wrong length.
    #[track_caller]
    pub fn set(&mut self, name: &str, data: &[f32]) -> &mut Model {
        if let Err(e) = self.try_set(name, data) {
            panic!("{e}");
        }
        self
    }

    /// [`Model::set`] returning an error.
    pub fn try_set(&mut self, name: &str, data: &[f32]) -> Result<&mut Model> {
        let what = format!("Model `{}`", self.name);
        let Some(slot) = self
            .compiled
            .slots()
            .iter()
            .find(|s| s.is_param && s.name == name)
            .cloned()
        else {
            let mut declared: Vec<&str> = self.declared.iter().map(String::as_str).collect();
            declared.sort_unstable();
            return Err(Error::unknown_name(format!(
                "{what}: no param named `{name}` (declared params: {declared:?})"
            )));
        };
        let Some(t) = typed_from_f32(what.as_str().into(), &slot, data, &mut DimBinding::new())?
        else {
            return Err(Error::shape(format!(
                "{what}: param `{name}` has several dynamic dims; it cannot be bound from a flat slice"
            )));
        };
        self.compiled.set_param(name, t).map_err(Error::from)?;
        Ok(self)
    }

    /// Bind several params. Lenient about what is left out: params not named keep their
    /// binding (or stay unbound — see [`Model::unbound`]), so a model can be loaded in
    /// parts; use [`Model::load_exact`] to require every declared param. Strict about
    /// what is given: every name must be declared, given once, with the right number of
    /// values — otherwise nothing is bound and the panic lists every bad entry.
    #[track_caller]
    pub fn load<'a, I: IntoIterator<Item = (&'a str, &'a [f32])>>(
        &mut self,
        weights: I,
    ) -> &mut Model {
        if let Err(e) = self.try_load(weights) {
            panic!("{e}");
        }
        self
    }

    /// [`Model::load`] returning an error (and binding nothing) instead of panicking.
    pub fn try_load<'a, I: IntoIterator<Item = (&'a str, &'a [f32])>>(
        &mut self,
        weights: I,
    ) -> Result<&mut Model> {
        self.load_checked(weights.into_iter().collect(), false)
    }

    /// [`Model::load`] that also requires every declared param to be given: a weight set
    /// that lacks one is an error listing every missing name (nothing is bound).
    ///
    /// ```
    /// use rlx_tensor::{graph, shape, Model};
    /// let mut m = Model::new(graph("affine", |s| {
    ///     let x = s.input("x", shape![2]);
    ///     &(&x * &s.param("a", shape![2])) + &s.param("b", shape![2])
    /// }));
    /// let err = m.try_load_exact([("a", &[1.0f32, 2.0][..])]).unwrap_err();
    /// assert!(err.to_string().contains("missing params `b`"));
    /// m.load_exact([("a", &[1.0f32, 2.0][..]), ("b", &[0.5, 0.5][..])]);
    /// assert_eq!(m.run(&[("x", &[1.0, 1.0])]), vec![vec![1.5, 2.5]]);
    /// ```
    #[track_caller]
    pub fn load_exact<'a, I: IntoIterator<Item = (&'a str, &'a [f32])>>(
        &mut self,
        weights: I,
    ) -> &mut Model {
        if let Err(e) = self.try_load_exact(weights) {
            panic!("{e}");
        }
        self
    }

    /// [`Model::load_exact`] returning an error instead of panicking.
    pub fn try_load_exact<'a, I: IntoIterator<Item = (&'a str, &'a [f32])>>(
        &mut self,
        weights: I,
    ) -> Result<&mut Model> {
        self.load_checked(weights.into_iter().collect(), true)
    }

    /// Check every weight (and, when `exact`, that none is missing), then bind them all;
    /// on any problem bind nothing and list every problem.
    fn load_checked(&mut self, weights: Vec<(&str, &[f32])>, exact: bool) -> Result<&mut Model> {
        let what = format!("Model `{}`", self.name);
        let mut declared: Vec<&str> = self.declared.iter().map(String::as_str).collect();
        declared.sort_unstable();
        let (mut unknown, mut twice, mut misfit) = (Vec::new(), Vec::new(), Vec::new());
        for (i, &(name, data)) in weights.iter().enumerate() {
            if weights[..i].iter().any(|(n, _)| *n == name) {
                if !twice.contains(&name) {
                    twice.push(name);
                }
                continue;
            }
            let Some(slot) = self
                .compiled
                .slots()
                .iter()
                .find(|s| s.is_param && s.name == name)
            else {
                unknown.push(name);
                continue;
            };
            match typed_from_f32(what.as_str().into(), slot, data, &mut DimBinding::new()) {
                Ok(Some(_)) => {}
                Ok(None) => misfit.push(format!(
                    "`{name}` has several dynamic dims and cannot be bound from a flat slice"
                )),
                Err(e) => misfit.push(
                    e.message()
                        .trim_start_matches(&format!("{what}: "))
                        .to_string(),
                ),
            }
        }
        let missing: Vec<&str> = if exact {
            declared
                .iter()
                .copied()
                .filter(|d| !weights.iter().any(|(n, _)| n == d))
                .collect()
        } else {
            Vec::new()
        };
        let ticks = |v: &[&str]| {
            v.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut problems = Vec::new();
        if !unknown.is_empty() {
            problems.push(format!(
                "no params named {} (declared params: {declared:?}); check the spelling",
                ticks(&unknown)
            ));
        }
        if !twice.is_empty() {
            problems.push(format!(
                "{} given twice; give every param once",
                ticks(&twice)
            ));
        }
        problems.extend(misfit);
        if !missing.is_empty() {
            problems.push(format!(
                "missing params {} (load_exact binds every declared param; use load to bind a subset)",
                ticks(&missing)
            ));
        }
        if !problems.is_empty() {
            return Err(Error::new(format!(
                "{what}: cannot load the weights, nothing was bound: {}",
                problems.join("; ")
            )));
        }
        for (name, data) in weights {
            self.try_set(name, data)?;
        }
        Ok(self)
    }

    /// Run; one `Vec` per output. Panics on bad input or unbound params.
    #[track_caller]
    pub fn run(&mut self, inputs: &[(&str, &[f32])]) -> Vec<Vec<f32>> {
        self.try_run(inputs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Model::run`] returning an error.
    pub fn try_run(&mut self, inputs: &[(&str, &[f32])]) -> Result<Vec<Vec<f32>>> {
        run_f32_host(
            What::Named("Model", &self.name),
            &self.compiled,
            &self.prepared,
            &[],
            inputs,
        )
    }

    /// The device it runs on.
    pub fn device(&self) -> Device {
        self.compiled.device()
    }

    /// The per-kernel timings of this model's runs so far (`RLX_PROFILE=1`), slowest
    /// kernel first; `None` without `RLX_PROFILE=1`, before the first run, or on a backend
    /// that does not time kernels. See [`Tensor::profile`](crate::Tensor::profile).
    ///
    /// ```
    /// use rlx_tensor::{graph, shape, Model};
    /// let mut m = Model::new(graph("double", |s| &s.input("x", shape![4]) * 2.0));
    /// m.run(&[("x", &[1.0, 2.0, 3.0, 4.0])]);
    /// if let Some(p) = m.profile() {
    ///     // Only when the process runs with RLX_PROFILE=1.
    ///     assert_eq!(p.runs, 1);
    /// }
    /// ```
    pub fn profile(&self) -> Option<crate::Profile> {
        self.compiled.profile()
    }

    /// The compiled program's report: kernels, fused ops, memory plan, and with
    /// `RLX_PROFILE=1` the per-kernel times.
    pub fn explain(&self) -> String {
        self.compiled.explain()
    }
}
