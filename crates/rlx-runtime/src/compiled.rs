//! `CompiledGraph`: an executable plus its argument roster and bound parameters.

use crate::backend::{Donation, Executable, HostOutput, arg_order, compile};
use crate::{Device, RuntimeError, RuntimeResult};
use rlx_ir::{Graph, Op, Shape, TensorData, TensorView};
use std::collections::HashMap;
use std::sync::Arc;

/// One argument slot of a compiled graph.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgSlot {
    /// The input or param name.
    pub name: String,
    /// Declared type (may have dynamic dims).
    pub shape: Shape,
    /// `Op::Param` (bindable once with [`CompiledGraph::set_param`]) vs `Op::Input`.
    pub is_param: bool,
}

/// A graph compiled for one device, with its parameter bindings.
///
/// # Running from several threads
///
/// `CompiledGraph` is `Send + Sync`, and every run method ([`CompiledGraph::run`],
/// [`CompiledGraph::run_host`], [`CompiledGraph::run_host_donating`]) takes `&self`:
/// share one compiled program as `Arc<CompiledGraph>` (or borrow it into scoped
/// threads) and run it from several threads at once. Runs do not observe each other:
/// each gets its own intermediate storage, and results equal those of the same runs
/// made one after another. Binding params ([`CompiledGraph::set_param`]) needs
/// `&mut self`, so it happens before sharing (or on a clone: cloning shares the
/// compiled code and copies only the bindings).
///
/// How much runs overlap depends on the backend: the CPU backend runs them truly
/// concurrently (each run takes its own arena from a pool, and their kernels share the
/// CPU worker threads); GPU backends serialize the parts that touch device state
/// behind an internal lock, as their executables document.
///
/// ```
/// fn assert_send_sync<T: Send + Sync>() {}
/// assert_send_sync::<rlx_runtime::CompiledGraph>();
/// assert_send_sync::<std::sync::Arc<rlx_runtime::CompiledGraph>>();
/// ```
#[derive(Clone)]
pub struct CompiledGraph {
    exec: Arc<dyn Executable>,
    device: Device,
    name: String,
    slots: Vec<ArgSlot>,
    /// The slots are exactly the lifted arguments `__arg0`, `__arg1`, … in order (a
    /// prepared graph of constants and computed values): [`CompiledGraph::run_lifted_into`]
    /// then takes its arguments by position.
    lifted_only: bool,
    outputs: Vec<Shape>,
    params: HashMap<String, TensorData>,
}

/// Compile-time proof that compiled programs can be shared across threads: a field
/// added later that is not `Send + Sync` breaks the build here, not in a user's code.
const _: () = {
    const fn assert_send_sync<T: Send + Sync + ?Sized>() {}
    assert_send_sync::<CompiledGraph>();
    assert_send_sync::<dyn Executable>();
    assert_send_sync::<Arc<dyn Executable>>();
};

impl std::fmt::Debug for CompiledGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledGraph")
            .field("name", &self.name)
            .field("device", &self.device)
            .field("slots", &self.slots)
            .field("outputs", &self.outputs)
            .finish()
    }
}

impl CompiledGraph {
    /// Verify and compile `graph` for `device`.
    pub fn new(device: Device, graph: &Graph) -> RuntimeResult<CompiledGraph> {
        // The whole compile: verification, the compiler's `compile` span (its phases
        // inside) and the backend's `backend_load` span.
        let _span = tracing::debug_span!(
            target: "rlx::compile",
            "backend_compile",
            graph = %graph.name,
            %device
        )
        .entered();
        let start = std::time::Instant::now();
        let exec = compile(device, graph)?;
        tracing::debug!(
            target: "rlx::compile",
            elapsed_us = start.elapsed().as_micros() as u64,
            "compiled `{}` for {device} in {:?}",
            graph.name,
            start.elapsed()
        );
        let slots = arg_order(graph)
            .into_iter()
            .map(|id| {
                let n = graph.node(id);
                let (name, is_param) = match &n.op {
                    Op::Input { name } => (name.clone(), false),
                    Op::Param { name } => (name.clone(), true),
                    _ => unreachable!(),
                };
                ArgSlot {
                    name,
                    shape: n.shape.clone(),
                    is_param,
                }
            })
            .collect::<Vec<ArgSlot>>();
        let lifted_only = slots
            .iter()
            .enumerate()
            .all(|(i, s)| !s.is_param && s.name == crate::lifted_arg_name(i));
        Ok(CompiledGraph {
            exec,
            device,
            name: graph.name.clone(),
            slots,
            lifted_only,
            outputs: graph
                .outputs
                .iter()
                .map(|&o| graph.shape(o).clone())
                .collect(),
            params: HashMap::new(),
        })
    }

    /// The name of the graph it was compiled from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device it runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Argument slots in argument order.
    pub fn slots(&self) -> &[ArgSlot] {
        &self.slots
    }

    /// Declared result types.
    pub fn output_shapes(&self) -> &[Shape] {
        &self.outputs
    }

    /// Bind a parameter (kept across runs). Errors name the param and list the declared ones.
    pub fn set_param(&mut self, name: &str, data: TensorData) -> RuntimeResult<()> {
        let Some(slot) = self.slots.iter().find(|s| s.is_param && s.name == name) else {
            let declared: Vec<&str> = self
                .slots
                .iter()
                .filter(|s| s.is_param)
                .map(|s| s.name.as_str())
                .collect();
            return Err(RuntimeError::unknown_name(format!(
                "graph `{}` declares no param `{name}` (declared params: {declared:?})",
                self.name
            )));
        };
        check_arg(slot, &data.view(), &self.name)?;
        self.params.insert(name.to_string(), data);
        Ok(())
    }

    /// Whether param `name` has been bound.
    pub fn is_param_bound(&self, name: &str) -> bool {
        self.params.contains_key(name)
    }

    /// Run with `inputs` by name (params may be given here too, overriding bound ones).
    pub fn run(&self, inputs: &[(&str, TensorView<'_>)]) -> RuntimeResult<Vec<TensorData>> {
        self.with_args(inputs, |args| self.exec.run(args))
    }

    /// [`CompiledGraph::run`] for a host caller that reads f32 results as `Vec<f32>`
    /// (see [`Executable::run_host`]: no copy of f32 results on backends that support it).
    pub fn run_host(&self, inputs: &[(&str, TensorView<'_>)]) -> RuntimeResult<Vec<HostOutput>> {
        self.with_args(inputs, |args| self.exec.run_host(args))
    }

    /// [`CompiledGraph::run_host`] writing the results into `out` (cleared first; see
    /// [`Executable::run_host_into`]): a caller that keeps `out` between runs allocates
    /// no result list per run, and the backend may reuse what its kept results hold.
    /// On error `out` is left empty.
    pub fn run_host_into(
        &self,
        inputs: &[(&str, TensorView<'_>)],
        out: &mut Vec<HostOutput>,
    ) -> RuntimeResult<()> {
        // The backend clears `out` itself, after taking what it reuses from it.
        let r = self.with_args(inputs, |args| self.exec.run_host_into(args, out));
        if r.is_err() {
            out.clear();
        }
        r
    }

    /// [`CompiledGraph::run_host_into`] with argument `i` given as `args[i]` for the
    /// argument named [`crate::lifted_arg_name`]`(i)` (how [`crate::prepare`] names the
    /// lifted constants and computed values an eager read passes): no names to build or
    /// match per run. A graph with other arguments (inputs or params of its own), or a
    /// wrong count, gets the error [`CompiledGraph::run_host_into`] gives for the same
    /// arguments by those names.
    pub fn run_lifted_into(
        &self,
        args: &[TensorView<'_>],
        out: &mut Vec<HostOutput>,
    ) -> RuntimeResult<()> {
        let r = self.with_lifted(
            args,
            &mut *out,
            |out, args| self.exec.run_host_into(args, out),
            |out, named| self.run_host_into(named, out),
        );
        if r.is_err() {
            out.clear();
        }
        r
    }

    /// [`CompiledGraph::run`] with the arguments by position, as
    /// [`CompiledGraph::run_lifted_into`] takes them.
    pub fn run_lifted(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        self.with_lifted(
            args,
            (),
            |(), args| self.exec.run(args),
            |(), named| self.run(named),
        )
    }

    /// `positional(cx, args)` after the argument checks when the slots are the lifted
    /// arguments and `args` has one per slot; otherwise `named(cx, …)` with the lifted
    /// names (which then reports what does not fit).
    fn with_lifted<'a, C, R>(
        &self,
        args: &[TensorView<'a>],
        cx: C,
        positional: impl FnOnce(C, &[TensorView<'a>]) -> RuntimeResult<R>,
        named: impl FnOnce(C, &[(&str, TensorView<'a>)]) -> RuntimeResult<R>,
    ) -> RuntimeResult<R> {
        if !self.lifted_only || args.len() != self.slots.len() {
            let names: Vec<_> = (0..args.len()).map(crate::lifted_arg_name).collect();
            let pairs: Vec<(&str, TensorView<'a>)> = names
                .iter()
                .map(|n| n.as_ref())
                .zip(args.iter().copied())
                .collect();
            return named(cx, &pairs);
        }
        for (slot, v) in self.slots.iter().zip(args) {
            check_arg(slot, v, &self.name)?;
        }
        positional(cx, args)
    }

    /// [`CompiledGraph::run_host`] with some f32 inputs donated by name: `(name, values,
    /// output)` lets the backend write graph output `output` over `values` (see
    /// [`Executable::run_host_donating`]: on success `values` is either untouched or
    /// taken, its storage now holding the output). Donated names must not also appear
    /// in `inputs`, and their declared type must be static.
    pub fn run_host_donating(
        &self,
        inputs: &[(&str, TensorView<'_>)],
        donated: &mut [(&str, &mut Vec<f32>, usize)],
    ) -> RuntimeResult<Vec<HostOutput>> {
        let mut dims: Vec<Vec<usize>> = Vec::with_capacity(donated.len());
        for (name, _, output) in donated.iter() {
            if *output >= self.outputs.len() {
                return Err(RuntimeError::new(format!(
                    "graph `{}`: `{name}` is donated into output {output}, but the graph has {} output(s)",
                    self.name,
                    self.outputs.len()
                )));
            }
            let slot = self.slots.iter().find(|s| s.name == *name);
            let static_dims = slot.and_then(|s| s.shape.static_dims());
            let Some(d) = static_dims else {
                return Err(RuntimeError::new(format!(
                    "graph `{}`: donated `{name}` is not an argument of static type; donate only declared inputs with static dims",
                    self.name
                )));
            };
            if inputs.iter().any(|(n, _)| n == name) {
                return Err(RuntimeError::new(format!(
                    "graph `{}`: `{name}` is both passed and donated; pass it once",
                    self.name
                )));
            }
            dims.push(d);
        }
        // Placeholders (dims and dtype only): the values travel in the donations.
        let mut named: Vec<(&str, TensorView<'_>)> = inputs.to_vec();
        for ((name, _, _), d) in donated.iter().zip(&dims) {
            named.push((
                name,
                TensorView {
                    dtype: rlx_ir::DType::F32,
                    dims: d,
                    bytes: &[],
                },
            ));
        }
        let args = self.args(&named)?;
        let mut donations: Vec<Donation<'_>> = donated
            .iter_mut()
            .map(|(name, data, output)| Donation {
                arg: self
                    .slots
                    .iter()
                    .position(|s| s.name == *name)
                    .expect("checked"),
                output: *output,
                data,
            })
            .collect();
        self.exec.run_host_donating(&args, &mut donations)
    }

    /// Call `f` with the positional arguments for `inputs` (see [`CompiledGraph::args`]):
    /// on the stack when every slot is given in slot order and there are at most
    /// [`INLINE_ARGS`] of them (a run of a small program then allocates nothing here).
    fn with_args<'a, R>(
        &'a self,
        inputs: &[(&str, TensorView<'a>)],
        f: impl FnOnce(&[TensorView<'a>]) -> RuntimeResult<R>,
    ) -> RuntimeResult<R> {
        if inputs.len() <= INLINE_ARGS && self.in_slot_order(inputs) {
            let mut args = [EMPTY_VIEW; INLINE_ARGS];
            for ((a, (_, v)), slot) in args.iter_mut().zip(inputs).zip(&self.slots) {
                check_arg(slot, v, &self.name)?;
                *a = *v;
            }
            return f(&args[..inputs.len()]);
        }
        f(&self.args(inputs)?)
    }

    /// Whether `inputs` name every slot, in slot order.
    fn in_slot_order(&self, inputs: &[(&str, TensorView<'_>)]) -> bool {
        inputs.len() == self.slots.len()
            && inputs
                .iter()
                .zip(&self.slots)
                .all(|((n, _), s)| *n == s.name)
    }

    /// The positional arguments for `inputs` by name, bound params filling the rest.
    fn args<'a>(&'a self, inputs: &[(&str, TensorView<'a>)]) -> RuntimeResult<Vec<TensorView<'a>>> {
        // Fast path: every slot given, in slot order (how prepared graphs and eager
        // reads pass their arguments) — no name search per slot.
        if self.in_slot_order(inputs) {
            let mut args = Vec::with_capacity(inputs.len());
            for ((_, v), slot) in inputs.iter().zip(&self.slots) {
                check_arg(slot, v, &self.name)?;
                args.push(*v);
            }
            return Ok(args);
        }
        for (n, _) in inputs {
            if !self.slots.iter().any(|s| s.name == *n) {
                let names: Vec<&str> = self.slots.iter().map(|s| s.name.as_str()).collect();
                return Err(RuntimeError::unknown_name(format!(
                    "graph `{}` has no input or param named `{n}` (it has: {names:?})",
                    self.name
                )));
            }
        }
        let mut args = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            let view = match inputs.iter().find(|(n, _)| *n == slot.name) {
                Some((_, v)) => *v,
                None => match self.params.get(&slot.name) {
                    Some(d) => d.view(),
                    None => {
                        return Err(RuntimeError::new(format!(
                            "graph `{}`: no data for {} `{}` of type {}; pass it in the inputs{}",
                            self.name,
                            if slot.is_param { "param" } else { "input" },
                            slot.name,
                            slot.shape,
                            if slot.is_param {
                                " or bind it first"
                            } else {
                                ""
                            }
                        )));
                    }
                },
            };
            check_arg(slot, &view, &self.name)?;
            args.push(view);
        }
        Ok(args)
    }

    /// What the compiler did for this graph.
    pub fn explain(&self) -> String {
        self.exec.explain()
    }

    /// The per-kernel timings of the runs so far (`RLX_PROFILE=1`; see
    /// [`Executable::profile`]).
    pub fn profile(&self) -> Option<crate::Profile> {
        self.exec.profile()
    }
}

/// Arguments passed on the stack by [`CompiledGraph::with_args`].
const INLINE_ARGS: usize = 8;

/// Filler for the unused entries of an argument array.
const EMPTY_VIEW: TensorView<'static> = TensorView {
    dtype: rlx_ir::DType::F32,
    dims: &[],
    bytes: &[],
};

fn check_arg(slot: &ArgSlot, v: &TensorView<'_>, graph: &str) -> RuntimeResult<()> {
    let ok_rank = v.dims.len() == slot.shape.rank();
    let ok_dims = ok_rank
        && slot
            .shape
            .dims()
            .iter()
            .zip(v.dims)
            .all(|(d, &n)| d.as_static().is_none_or(|s| s == n));
    if !ok_dims || v.dtype != slot.shape.dtype() {
        // A wrong element type is a dtype error even when the dims are wrong too.
        let error = if v.dtype != slot.shape.dtype() {
            RuntimeError::dtype
        } else {
            RuntimeError::shape
        };
        return Err(error(format!(
            "graph `{graph}`: `{}` is declared {} but got {:?} {}; pass data of the declared type",
            slot.name, slot.shape, v.dims, v.dtype
        )));
    }
    Ok(())
}
