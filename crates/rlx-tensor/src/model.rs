//! [`Model`]: a compiled graph plus its parameter roster, with strict by-name binding.

use crate::eval::{Device, fastest_device_for};
use crate::exec::{PreparedGraph, run_f32_host, typed_from_f32};
use crate::{Error, Result};
use rlx_ir::{DimBinding, Graph};
use rlx_runtime::CompiledGraph;
use std::collections::HashSet;

/// A compiled, runnable model with by-name weight binding.
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
        crate::eval::ensure_backends();
        let prepared = PreparedGraph::new(&graph);
        let compiled = CompiledGraph::new(device, &prepared.prepared.graph)
            .map_err(|e| Error::new(e.to_string()))?;
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
            return Err(Error::new(format!(
                "{what}: no param named `{name}` (declared params: {declared:?})"
            )));
        };
        let Some(t) = typed_from_f32(&what, &slot, data, &mut DimBinding::new())? else {
            return Err(Error::new(format!(
                "{what}: param `{name}` has several dynamic dims; it cannot be bound from a flat slice"
            )));
        };
        self.compiled
            .set_param(name, t)
            .map_err(|e| Error::new(e.to_string()))?;
        Ok(self)
    }

    /// Bind several params; stops at (and panics on) the first bad one.
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

    /// [`Model::load`] returning an error.
    pub fn try_load<'a, I: IntoIterator<Item = (&'a str, &'a [f32])>>(
        &mut self,
        weights: I,
    ) -> Result<&mut Model> {
        for (n, d) in weights {
            self.try_set(n, d)?;
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
            &format!("Model `{}`", self.name),
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
}
