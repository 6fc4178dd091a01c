//! [`Func`]: a traced function of named inputs and params — the unit that the
//! transforms (`grad`, `vmap`, `jvp`, `hvp`) act on and that runs compiled.

use crate::rng::SplitMix64;
use crate::scope::GraphScope;
use crate::tensor::Tensor;
use crate::{Error, Result};
use rlx_ir::{Dim, Graph};
#[cfg(feature = "eval")]
use std::sync::OnceLock;
use std::sync::{Arc, Mutex};

/// A function of named inputs and parameters, traced into a graph.
///
/// `Send + Sync`: move it into worker threads or share it; each thread compiles it once
/// into its own compile cache (use [`Func::jit`] to compile once for all threads).
///
/// ```
/// use rlx_tensor::{shape, Func};
/// let f = Func::new("affine", |s| {
///     let x = s.input("x", shape![?, 2]);
///     let w = s.param("w", shape![2, 1]);
///     x.matmul(&w)
/// })
/// .with_param("w", vec![1.0, 10.0]);
/// # #[cfg(feature = "eval")] {
/// assert_eq!(f.run(&[("x", &[1.0, 2.0, 3.0, 4.0])]), vec![vec![21.0, 43.0]]);
/// assert_eq!(f.run(&[("x", &[5.0, 6.0])]), vec![vec![65.0]]); // any batch size, one compile
/// # }
/// ```
#[derive(Clone)]
pub struct Func {
    graph: Graph,
    params: Vec<(String, Vec<f32>)>,
    #[cfg(feature = "eval")]
    prepared: Arc<OnceLock<crate::exec::PreparedGraph>>,
    /// Functions derived from this graph by transforms (memoized, shared by clones).
    derived: Arc<Mutex<Vec<(String, Func)>>>,
}

impl Func {
    /// Trace a single-output function.
    pub fn new(name: impl Into<String>, build: impl FnOnce(&mut GraphScope) -> Tensor) -> Func {
        Func::from_graph(crate::scope::graph(name, build))
    }

    /// Trace a multi-output function (outputs in the returned order). Panics when the
    /// closure returns no tensor (see [`Func::try_multi`]).
    #[track_caller]
    pub fn multi(
        name: impl Into<String>,
        build: impl FnOnce(&mut GraphScope) -> Vec<Tensor>,
    ) -> Func {
        Func::try_multi(name, build).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::multi`] returning an error when the closure returns no tensor.
    pub fn try_multi(
        name: impl Into<String>,
        build: impl FnOnce(&mut GraphScope) -> Vec<Tensor>,
    ) -> Result<Func> {
        let mut s = GraphScope::new(name);
        let outs = build(&mut s);
        let ids: Vec<_> = outs.iter().map(|t| s.own(t)).collect();
        s.set_outputs(ids);
        Func::try_from_graph(s.finish())
    }

    /// Wrap an existing graph; its outputs are the function's outputs. Panics when the
    /// graph has no outputs, declares a name starting with `__` (reserved for the
    /// runtime) or declares one name twice (see [`Func::try_from_graph`]).
    #[track_caller]
    pub fn from_graph(graph: Graph) -> Func {
        Func::try_from_graph(graph).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::from_graph`] returning an error instead of panicking.
    ///
    /// ```
    /// use rlx_tensor::{Func, GraphScope, shape};
    /// let mut s = GraphScope::new("no_out");
    /// let _ = s.input("x", shape![2]);
    /// let err = Func::try_from_graph(s.finish()).unwrap_err();
    /// assert!(err.to_string().contains("has no outputs"));
    /// ```
    pub fn try_from_graph(graph: Graph) -> Result<Func> {
        check_graph(&format!("Func `{}`", graph.name), &graph)?;
        Ok(Func::from_graph_unchecked(graph))
    }

    /// Wrap a graph built by this crate (transforms, the fused training step — which
    /// declares `__opt.*` inputs of its own — and memo markers) without the user checks.
    pub(crate) fn from_graph_unchecked(graph: Graph) -> Func {
        Func {
            graph,
            params: Vec::new(),
            #[cfg(feature = "eval")]
            prepared: Arc::new(OnceLock::new()),
            derived: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Bind a parameter's data (rebinding overwrites). Panics when the graph declares no
    /// such param or the length does not match its static shape.
    #[track_caller]
    pub fn with_param(self, name: impl Into<String>, data: impl Into<Vec<f32>>) -> Func {
        self.try_with_param(name, data)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Func::with_param`] returning an error.
    pub fn try_with_param(
        mut self,
        name: impl Into<String>,
        data: impl Into<Vec<f32>>,
    ) -> Result<Func> {
        let (name, data) = (name.into(), data.into());
        let Some(id) = self.graph.param_id(&name) else {
            return Err(Error::unknown_name(format!(
                "Func `{}`: no param named `{name}` (declared params: {:?})",
                self.graph.name,
                self.param_names()
            )));
        };
        let shape = self.graph.shape(id);
        if let Some(n) = shape.num_elements()
            && n != data.len()
        {
            return Err(Error::shape(format!(
                "Func `{}`: param `{name}` is declared {shape} ({n} values) but got {} values",
                self.graph.name,
                data.len()
            )));
        }
        match self.params.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = data,
            None => self.params.push((name, data)),
        }
        Ok(self)
    }

    /// The traced graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Number of outputs.
    pub fn output_count(&self) -> usize {
        self.graph.outputs.len()
    }

    /// The data bound to param `name`.
    pub fn param_binding(&self, name: &str) -> Option<&[f32]> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.as_slice())
    }

    /// Every bound `(name, data)` pair, in binding order.
    pub fn param_bindings(&self) -> &[(String, Vec<f32>)] {
        &self.params
    }

    /// Every `Op::Param` name, in node order.
    pub fn param_names(&self) -> Vec<String> {
        self.graph
            .param_names()
            .into_iter()
            .map(String::from)
            .collect()
    }

    /// Every `Op::Input` name, in node order.
    pub fn input_names(&self) -> Vec<String> {
        self.graph
            .input_names()
            .into_iter()
            .map(String::from)
            .collect()
    }

    /// Static dims of param `name` (a dynamic axis reads as 0).
    pub fn param_shape_of(&self, name: &str) -> Option<Vec<usize>> {
        let id = self.graph.param_id(name)?;
        Some(
            self.graph
                .shape(id)
                .dims()
                .iter()
                .map(|d| match d {
                    Dim::Static(n) => *n,
                    Dim::Dynamic(_) => 0,
                })
                .collect(),
        )
    }

    /// Bind every param from `init(name, dims)`, called once per param in `param_names` order.
    #[track_caller]
    pub fn init_params(self, mut init: impl FnMut(&str, &[usize]) -> Vec<f32>) -> Func {
        let mut f = self;
        for name in f.param_names() {
            let dims = f.param_shape_of(&name).expect("declared");
            let data = init(&name, &dims);
            f = f.with_param(name, data);
        }
        f
    }

    /// Bind every param to N(0, stddev²) draws from one deterministic stream
    /// (SplitMix64, 53-bit uniforms, Box–Muller), params in `param_names` order.
    pub fn init_randn(self, seed: u64, stddev: f32) -> Func {
        let mut rng = SplitMix64::new(seed);
        self.init_params(|_, dims| {
            let n: usize = dims.iter().map(|&d| d.max(1)).product();
            (0..n)
                .map(|_| (rng.normal_f64() * stddev as f64) as f32)
                .collect()
        })
    }

    /// The function derived from this one under `key` (built once by `make`, then shared
    /// by every clone of this Func). Derived functions carry no params of their own.
    #[allow(dead_code)]
    pub(crate) fn derived(&self, key: &str, make: impl FnOnce() -> Result<Func>) -> Result<Func> {
        if let Some((_, f)) = self
            .derived
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(k, _)| k == key)
        {
            return Ok(f.clone());
        }
        let mut f = make()?;
        f.params.clear();
        self.derived
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key.to_string(), f.clone()));
        Ok(f)
    }

    /// This Func with the bindings named in `updates` replaced by the given data (moved
    /// in, not copied; binding order kept) and the others cloned — what `clone` followed
    /// by `with_param` per update gives, without copying the replaced data first. Used by
    /// the training steps; every update must name a bound param of the right length.
    #[cfg(feature = "optim")]
    pub(crate) fn with_updated_params(&self, mut updates: Vec<(&str, Vec<f32>)>) -> Func {
        let params = self
            .params
            .iter()
            .map(|(n, d)| match updates.iter().position(|(u, _)| u == n) {
                Some(i) => (n.clone(), updates.swap_remove(i).1),
                None => (n.clone(), d.clone()),
            })
            .collect();
        debug_assert!(updates.is_empty(), "updates of unbound params");
        Func {
            graph: self.graph.clone(),
            params,
            #[cfg(feature = "eval")]
            prepared: self.prepared.clone(),
            derived: self.derived.clone(),
        }
    }

    /// A Func over `graph` keeping these bound params (used by the transforms).
    #[cfg(feature = "autodiff")]
    pub(crate) fn with_graph(&self, graph: Graph) -> Func {
        let mut f = Func::from_graph_unchecked(graph);
        f.params = self
            .params
            .iter()
            .filter(|(n, _)| f.graph.param_id(n).is_some())
            .cloned()
            .collect();
        f
    }
}

/// `Err` when `name` cannot name an input or param (`kind`): names starting with `__`
/// are reserved, because the runtime passes lifted constants as inputs `__arg0`,
/// `__arg1`, … and the compiled training step adds inputs `__opt.*`; a user name there
/// would be taken for (or collide with) one of them only when the graph runs.
pub(crate) fn check_declared_name(kind: &str, name: &str) -> std::result::Result<(), String> {
    if !name.starts_with("__") {
        return Ok(());
    }
    let suggestion = name.trim_start_matches('_');
    let suggestion = if suggestion.is_empty() {
        "x"
    } else {
        suggestion
    };
    Err(format!(
        "{kind} `{name}` uses a reserved name: names starting with `__` are reserved for the \
         runtime's own inputs (lifted constants are passed as `__arg0`, `__arg1`, …, compiled \
         training steps add `__opt.*`); rename it, e.g. `{suggestion}`"
    ))
}

/// The checks [`Func::try_from_graph`] (and `Model::try_on`) make on a user's graph: at
/// least one output, no reserved names, no name declared twice (an input and a param
/// sharing a name count: both bind by name). `what` names the graph in messages.
pub(crate) fn check_graph(what: &str, graph: &Graph) -> Result<()> {
    if graph.outputs.is_empty() {
        return Err(Error::new(format!(
            "{what} has no outputs, so running it could only fail; return at least one \
             tensor from the closure (Func::multi), or call set_outputs on the graph before \
             building from it"
        )));
    }
    let mut seen: Vec<(&str, rlx_ir::NodeId)> = Vec::new();
    for node in graph.nodes() {
        let (kind, decl) = match &node.op {
            rlx_ir::Op::Input { name } => ("input", name),
            rlx_ir::Op::Param { name } => ("param", name),
            _ => continue,
        };
        check_declared_name(kind, decl).map_err(|e| Error::new(format!("{what}: {e}")))?;
        if let Some((_, first)) = seen.iter().find(|(n, _)| n == decl) {
            return Err(Error::new(format!(
                "{what}: `{decl}` is declared twice (nodes {first} and {}); inputs and \
                 params are bound by name, so every one needs a unique name",
                node.id
            )));
        }
        seen.push((decl, node.id));
    }
    Ok(())
}

#[cfg(feature = "eval")]
mod run {
    use super::*;
    use crate::eval::Device;
    use crate::exec::{PreparedGraph, What, run_f32_host, run_host_data, run_typed};
    use crate::host_data::HostData;
    use rlx_ir::TensorData;

    impl Func {
        pub(crate) fn prepared(&self) -> &PreparedGraph {
            self.prepared
                .get_or_init(|| PreparedGraph::new(&self.graph))
        }

        fn what(&self) -> What<'_> {
            What::Named("Func", &self.graph.name)
        }

        /// Run on the fastest device for this graph; one `Vec` per output.
        /// Panics on an unknown input name, a name given twice, a wrong element count, or a
        /// missing input (see [`Func::try_run`]).
        ///
        /// Every name [`Func::input_names`] lists is accepted, including inputs no output
        /// reads (a gradient that is constant in `x` still takes `x`); their data is
        /// ignored. Names the graph does not declare are errors.
        #[track_caller]
        pub fn run(&self, inputs: &[(&str, &[f32])]) -> Vec<Vec<f32>> {
            self.try_run(inputs).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Func::run`] returning an error.
        pub fn try_run(&self, inputs: &[(&str, &[f32])]) -> Result<Vec<Vec<f32>>> {
            self.try_run_on(crate::eval::fastest_device_for(&self.graph), inputs)
        }

        /// Run on `device`.
        #[track_caller]
        pub fn run_on(&self, device: Device, inputs: &[(&str, &[f32])]) -> Vec<Vec<f32>> {
            self.try_run_on(device, inputs)
                .unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Func::run_on`] returning an error.
        pub fn try_run_on(
            &self,
            device: Device,
            inputs: &[(&str, &[f32])],
        ) -> Result<Vec<Vec<f32>>> {
            let p = self.prepared();
            let compiled = p.compiled(device)?;
            run_f32_host(self.what(), &compiled.borrow(), p, &self.params, inputs)
        }

        /// Run on `device` with an explicit param list instead of the bound params.
        #[allow(dead_code)]
        pub(crate) fn try_run_with_params_on(
            &self,
            device: Device,
            params: &[(String, Vec<f32>)],
            inputs: &[(&str, &[f32])],
        ) -> Result<Vec<Vec<f32>>> {
            let p = self.prepared();
            let compiled = p.compiled(device)?;
            run_f32_host(self.what(), &compiled.borrow(), p, params, inputs)
        }

        /// Run with typed data (explicit dims and dtypes), returning typed outputs.
        pub fn run_data(&self, inputs: &[(&str, TensorData)]) -> Result<Vec<TensorData>> {
            let device = crate::eval::fastest_device_for(&self.graph);
            let p = self.prepared();
            let compiled = p.compiled(device)?;
            run_typed(self.what(), &compiled.borrow(), p, &self.params, inputs)
        }

        /// Run on the fastest device with typed flat host slices (dims from the declared
        /// shapes), returning every output in its own dtype. Panics on bad input (see
        /// [`Func::try_run_host`]).
        ///
        /// ```
        /// use rlx_tensor::{DType, Dim, Func, HostData, TensorDataExt};
        /// let f = Func::new("scale", |s| {
        ///     let x = s.input_dyn("x", &[Dim::Dynamic(0)], DType::F64);
        ///     &x * 2.0
        /// });
        /// let xs = vec![1.5f64, -4.0];
        /// let out = f.run_host(&[("x", HostData::from(&xs))]);
        /// assert_eq!(out[0].to_vec_of::<f64>(), vec![3.0, -8.0]);
        /// ```
        #[track_caller]
        pub fn run_host(&self, inputs: &[(&str, HostData<'_>)]) -> Vec<TensorData> {
            self.try_run_host(inputs).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Func::run_host`] returning an error: an unknown input name, a name given
        /// twice, data whose dtype is not the declared one (no silent conversion; the
        /// message names the input, both dtypes and the fix), a wrong element count, or
        /// a missing input.
        ///
        /// ```
        /// use rlx_tensor::{DType, Func, HostData, shape};
        /// let f = Func::new("ids", |s| s.input("ids", shape![I64; 2]) + 1.0);
        /// let wrong = [1.0f32, 2.0];
        /// let err = f.try_run_host(&[("ids", HostData::from(&wrong))]).unwrap_err();
        /// assert!(err.to_string().contains("declared"), "{err}");
        /// let ids = [1i64, 2];
        /// assert_eq!(f.try_run_host(&[("ids", (&ids).into())]).unwrap()[0].to_i64_vec(), vec![2, 3]);
        /// ```
        pub fn try_run_host(&self, inputs: &[(&str, HostData<'_>)]) -> Result<Vec<TensorData>> {
            let device = crate::eval::fastest_device_for(&self.graph);
            let p = self.prepared();
            let compiled = p.compiled(device)?;
            run_host_data(self.what(), &compiled.borrow(), p, &self.params, inputs)
        }

        /// Compile once for the fastest device; the returned handle runs without cache lookups.
        #[track_caller]
        pub fn jit(&self) -> Jitted {
            self.jit_on(crate::eval::fastest_device_for(&self.graph))
        }

        /// Compile once for `device`.
        #[track_caller]
        pub fn jit_on(&self, device: Device) -> Jitted {
            self.try_jit_on(device).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Func::jit_on`] returning an error.
        pub fn try_jit_on(&self, device: Device) -> Result<Jitted> {
            let p = self.prepared();
            let compiled = p.compiled(device)?;
            Ok(Jitted {
                compiled: crate::exec::shared(&compiled),
                prepared: self.prepared.clone(),
                params: Arc::new(self.params.clone()),
                name: self.graph.name.clone(),
            })
        }

        /// What the compiler does for this function on its default device.
        pub fn explain(&self) -> String {
            let device = crate::eval::fastest_device_for(&self.graph);
            match self.prepared().compiled(device) {
                Ok(c) => c.borrow().explain(),
                Err(e) => format!("cannot compile: {e}"),
            }
        }
    }

    /// A compiled [`Func`]: runs without cache lookups. Clones share the compiled artifact.
    ///
    /// `Send + Sync`: one `Jitted` (or its clones) can be run from several threads at
    /// once; each run binds its own inputs and gets its own results, equal to those of
    /// the same runs made one after another.
    #[derive(Clone)]
    pub struct Jitted {
        compiled: Arc<rlx_runtime::CompiledGraph>,
        prepared: Arc<OnceLock<PreparedGraph>>,
        params: Arc<Vec<(String, Vec<f32>)>>,
        name: String,
    }

    impl std::fmt::Debug for Jitted {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Jitted({:?} on {})", self.name, self.compiled.device())
        }
    }

    impl Jitted {
        /// Run; one `Vec` per output. Panics on bad input (see [`Jitted::try_run`]).
        /// Declared inputs that no output reads are accepted and ignored, as in
        /// [`Func::run`].
        #[track_caller]
        pub fn run(&self, inputs: &[(&str, &[f32])]) -> Vec<Vec<f32>> {
            self.try_run(inputs).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Jitted::run`] returning an error.
        pub fn try_run(&self, inputs: &[(&str, &[f32])]) -> Result<Vec<Vec<f32>>> {
            let p = self.prepared.get().expect("prepared before jit");
            run_f32_host(
                What::Named("Jitted", &self.name),
                &self.compiled,
                p,
                &self.params,
                inputs,
            )
        }

        /// Run with typed flat host slices, returning every output in its own dtype
        /// (see [`Func::run_host`]). Panics on bad input (see [`Jitted::try_run_host`]).
        ///
        /// ```
        /// use rlx_tensor::{DType, Func, HostData, shape};
        /// let j = Func::new("bump", |s| s.input("n", shape![I32; 3]) + 1.0).jit();
        /// let out = j.run_host(&[("n", HostData::from(&[1i32, 2, 3]))]);
        /// assert_eq!(out[0].to_i64_vec(), vec![2, 3, 4]);
        /// ```
        #[track_caller]
        pub fn run_host(&self, inputs: &[(&str, HostData<'_>)]) -> Vec<TensorData> {
            self.try_run_host(inputs).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Jitted::run_host`] returning an error (the cases of [`Func::try_run_host`]).
        pub fn try_run_host(&self, inputs: &[(&str, HostData<'_>)]) -> Result<Vec<TensorData>> {
            let p = self.prepared.get().expect("prepared before jit");
            run_host_data(
                What::Named("Jitted", &self.name),
                &self.compiled,
                p,
                &self.params,
                inputs,
            )
        }

        /// The device it runs on.
        pub fn device(&self) -> Device {
            self.compiled.device()
        }

        /// What the compiler did.
        pub fn explain(&self) -> String {
            self.compiled.explain()
        }
    }
}

#[cfg(feature = "eval")]
pub use run::Jitted;

// Everything a user hands to worker threads or shares in a server is `Send + Sync`; a
// field added later that is not breaks the build here rather than in a user's code.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Func>();
    assert_send_sync::<Graph>();
    assert_send_sync::<Tensor>();
    assert_send_sync::<GraphScope>();
};

#[cfg(feature = "eval")]
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Jitted>();
    assert_send_sync::<crate::Model>();
    assert_send_sync::<crate::Device>();
    assert_send_sync::<crate::HostData<'static>>();
};
