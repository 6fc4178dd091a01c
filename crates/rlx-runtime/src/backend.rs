//! The `Backend` trait every execution backend implements, and the registry.

use crate::{Device, RuntimeError, RuntimeResult};
use rlx_compile::{CompileOptions, Program};
use rlx_ir::{Graph, NodeId, Op, TensorData, TensorView};
use std::sync::{Arc, RwLock};

/// A compiled graph, ready to run on its device.
///
/// Arguments are positional, in the order of [`arg_order`]: every `Op::Input` and
/// `Op::Param` node of the compiled graph, in node order. Results come back in the
/// order of the graph's outputs.
///
/// Executables are `Send + Sync` and every run method takes `&self`: an implementation
/// must allow several threads to run the same executable at once, each run seeing only
/// its own arguments and returning what it would return alone (per-run storage such as
/// an arena comes from a pool, or device state sits behind an internal lock; the
/// implementation's rustdoc says which).
pub trait Executable: Send + Sync {
    /// Run once. Dynamic dims are bound from the argument dims.
    fn run(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>>;

    /// Run once for a host caller that wants f32 results as `Vec<f32>`: a backend that
    /// can write f32 outputs straight into such vectors returns [`HostOutput::F32`] and
    /// saves the caller a full copy of every result (on bandwidth-bound work that copy
    /// costs as much as the kernel). The default runs [`Executable::run`].
    fn run_host(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<HostOutput>> {
        Ok(self.run(args)?.into_iter().map(HostOutput::Data).collect())
    }

    /// [`Executable::run_host`] writing the results into `out` (cleared first): a
    /// caller that keeps `out` between runs (an eager read per call) allocates no
    /// result list per run. A backend may reuse the allocations of the results `out`
    /// still holds (the CPU backend writes the first result's dims into the last kept
    /// result's dims vector), so a caller can hand a consumed result's parts back in it.
    /// On error `out` is left empty. The default runs [`Executable::run_host`].
    fn run_host_into(
        &self,
        args: &[TensorView<'_>],
        out: &mut Vec<HostOutput>,
    ) -> RuntimeResult<()> {
        out.clear();
        out.extend(self.run_host(args)?);
        Ok(())
    }

    /// [`Executable::run_host`] with some f32 arguments *donated*: where the program
    /// allows it, output `d.output` is written over argument `d.arg`'s storage and
    /// returned in it (no allocation, and the old and new values share their cache
    /// lines, as an optimizer step updating its state buffers in place wants).
    ///
    /// `args[d.arg]` gives the donated argument's dims and dtype (f32); its bytes are
    /// ignored and may be empty — the values are read from `d.data`. On success, each
    /// `d.data` is either left as it was (the backend did not write over it) or taken
    /// (left empty) because its storage now holds the output. On error every `d.data`
    /// is back in place, its values unspecified if kernels had started. The default
    /// runs [`Executable::run_host`] with the donated values as ordinary arguments.
    fn run_host_donating(
        &self,
        args: &[TensorView<'_>],
        donations: &mut [Donation<'_>],
    ) -> RuntimeResult<Vec<HostOutput>> {
        let args = donated_views(args, donations)?;
        self.run_host(&args)
    }

    /// A human-readable account of what the compiler did (kernels, fusion, memory plan).
    fn explain(&self) -> String;

    /// The per-kernel timings of the runs so far, when `RLX_PROFILE=1` had the backend
    /// collect them (`None` otherwise, and from backends that do not time kernels).
    fn profile(&self) -> Option<crate::Profile> {
        None
    }
}

/// An f32 argument whose storage is handed to [`Executable::run_host_donating`].
#[derive(Debug)]
pub struct Donation<'a> {
    /// Position of the argument.
    pub arg: usize,
    /// The graph output that may be written over it.
    pub output: usize,
    /// The argument's values.
    pub data: &'a mut Vec<f32>,
}

/// Check donations against the arguments: errors name an argument donated twice (or
/// two donations into one output), out of range, not f32, or whose values have the
/// wrong length.
pub fn check_donations(args: &[TensorView<'_>], donations: &[Donation<'_>]) -> RuntimeResult<()> {
    for (i, d) in donations.iter().enumerate() {
        let Some(v) = args.get(d.arg) else {
            return Err(RuntimeError::new(format!(
                "donated argument {} does not exist (the graph takes {})",
                d.arg,
                args.len()
            )));
        };
        let n: usize = v.dims.iter().product();
        if v.dtype != rlx_ir::DType::F32 || d.data.len() != n {
            let error = if v.dtype != rlx_ir::DType::F32 {
                RuntimeError::dtype
            } else {
                RuntimeError::shape
            };
            return Err(error(format!(
                "donated argument {} is declared {:?} {} but {} f32 values were donated; donate f32 data of the declared size",
                d.arg,
                v.dims,
                v.dtype,
                d.data.len()
            )));
        }
        if donations[..i]
            .iter()
            .any(|e| e.arg == d.arg || e.output == d.output)
        {
            return Err(RuntimeError::new(format!(
                "argument {} or output {} is donated twice; donate each argument once, into one output",
                d.arg, d.output
            )));
        }
    }
    Ok(())
}

/// `args` with each donated argument's view pointing at its donated values (checked
/// by [`check_donations`]).
pub fn donated_views<'a>(
    args: &[TensorView<'a>],
    donations: &'a [Donation<'_>],
) -> RuntimeResult<Vec<TensorView<'a>>> {
    check_donations(args, donations)?;
    let mut out = args.to_vec();
    for d in donations {
        out[d.arg].bytes = f32_bytes(d.data);
    }
    Ok(out)
}

fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: the bytes are those of the live, initialized slice `v` (u8 has alignment
    // 1 and every bit pattern is a valid u8), `size_of_val(v)` long, and the result
    // borrows `v` for its lifetime, so nothing writes them while it lives.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// One result of [`Executable::run_host`].
///
/// `#[non_exhaustive]`: more host forms (half precision, say) may be added.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HostOutput {
    /// An f32 result, already in host form; its dims are the second field.
    F32(Vec<f32>, Vec<usize>),
    /// Any other result.
    Data(TensorData),
}

impl HostOutput {
    /// The values as f32 (no copy for [`HostOutput::F32`]; other dtypes convert).
    pub fn into_f32_vec(self) -> Vec<f32> {
        match self {
            HostOutput::F32(v, _) => v,
            HostOutput::Data(d) => d.to_f32_vec(),
        }
    }

    /// The result as [`TensorData`] (copies the bytes of an f32 result).
    pub fn into_data(self) -> TensorData {
        match self {
            HostOutput::F32(v, dims) => TensorData::from_f32(&dims, &v),
            HostOutput::Data(d) => d,
        }
    }
}

/// An execution backend: turns compiled [`Program`]s into executables for the devices it
/// serves.
///
/// # The contract between compiler and backend
///
/// The compiler and a backend meet at one type, [`Program`]. A backend says what it
/// wants compiled for a device ([`Backend::compile_options`]: the high-level ops it has
/// whole kernels for, so `decompose` leaves them, and the fusion forms it runs) and
/// receives the program the runtime compiled with exactly those options
/// ([`Backend::load`]). Everything before that belongs to the runtime: it verifies the
/// graph (a malformed graph is an error naming it, and no backend sees it) and runs
/// [`rlx_compile::compile`]. Every way of compiling a graph goes through that one path
/// ([`compile_program`] then [`Backend::load`]): [`compile`] and
/// [`crate::CompiledGraph::new`] for the registered backend of a device,
/// [`crate::HostKernel`] for the CPU backend, and [`Backend::compile`] for a backend in
/// hand. A backend never compiles a graph itself; a backend crate's helpers that take
/// other options (a test's `CompileOptions`, say) compile with [`compile_program`] and
/// hand the program to the same loading code.
///
/// ```
/// use rlx_compile::{CompileOptions, Program};
/// use rlx_ir::{DType, Graph, Op, Shape, TensorData, TensorView};
/// use rlx_runtime::{Backend, Device, Executable, RuntimeError, RuntimeResult};
/// use std::sync::Arc;
///
/// /// A backend that lists the kernels it was given instead of running them.
/// struct Lister;
/// struct Listing(Program);
///
/// impl Executable for Listing {
///     fn run(&self, _: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
///         Err(RuntimeError::new("a listing does not run"))
///     }
///     fn explain(&self) -> String {
///         let labels: Vec<String> = self.0.kernels.iter().map(|k| k.label()).collect();
///         labels.join(", ")
///     }
/// }
///
/// impl Backend for Lister {
///     fn name(&self) -> &'static str {
///         "lister"
///     }
///     fn devices(&self) -> &[Device] {
///         &[Device::Cpu]
///     }
///     fn is_available(&self, device: Device) -> bool {
///         device == Device::Cpu
///     }
///     // It has a whole softmax kernel: the compiler leaves softmax undecomposed.
///     fn compile_options(&self, _: Device) -> CompileOptions {
///         CompileOptions {
///             keep_whole: vec!["softmax".into()],
///             ..Default::default()
///         }
///     }
///     fn load(&self, _: Device, program: Program) -> RuntimeResult<Arc<dyn Executable>> {
///         Ok(Arc::new(Listing(program)))
///     }
/// }
///
/// let mut g = Graph::new("probs");
/// let x = g.input("x", Shape::new(&[4, 8], DType::F32));
/// let p = g.add_op(Op::Softmax { axis: 1 }, vec![x]).unwrap();
/// g.set_outputs(vec![p]);
/// assert_eq!(Lister.compile(Device::Cpu, &g).unwrap().explain(), "softmax");
/// ```
pub trait Backend: Send + Sync {
    /// Short name (`"cpu"`, `"wgpu"`).
    fn name(&self) -> &'static str;

    /// Devices this backend can serve (when available).
    fn devices(&self) -> &[Device];

    /// Whether `device` can be used right now on this host (a live probe where relevant).
    fn is_available(&self, device: Device) -> bool;

    /// Why `device` is not available on this host (a library that does not load, no
    /// device found), for the error [`unavailable`] gives; `None` when it is, or when
    /// the backend cannot say.
    fn unavailable_reason(&self, device: Device) -> Option<String> {
        let _ = device;
        None
    }

    /// Whether `device` is real hardware worth preferring over the CPU (a software
    /// emulation such as a CPU Vulkan driver answers `false`).
    fn is_hardware(&self, device: Device) -> bool {
        let _ = device;
        true
    }

    /// Whether this backend can run every op of `graph`. A question about the graph,
    /// not a program: [`fastest_device_for`] asks it of each candidate device before
    /// anything is compiled.
    fn supports(&self, graph: &Graph) -> bool {
        let _ = graph;
        true
    }

    /// The options [`rlx_compile::compile`] runs with for `device`: the high-level ops
    /// this backend executes whole ([`CompileOptions::keep_whole`]) and the fusion
    /// forms its kernels honour. Every program [`Backend::load`] receives from the
    /// runtime was compiled with these options.
    fn compile_options(&self, device: Device) -> CompileOptions;

    /// Make `program` runnable on `device`: generate and build its kernels, plan its
    /// memory, and return the executable. `program` was compiled from a verified graph
    /// with `self.compile_options(device)` (or, through a backend crate's own helpers,
    /// with options that crate chose); its arguments are the graph's in [`arg_order`].
    fn load(&self, device: Device, program: Program) -> RuntimeResult<Arc<dyn Executable>>;

    /// Verify `graph`, compile it with [`Backend::compile_options`] and [`Backend::load`]
    /// the program: the runtime's one compile path ([`compile_program`]) for a backend
    /// in hand. Implementations leave this method as it is.
    fn compile(&self, device: Device, graph: &Graph) -> RuntimeResult<Arc<dyn Executable>> {
        compile_through(self, device, graph)
    }
}

/// Verify `graph` and compile it with `options` into the [`Program`] a backend loads.
/// A malformed graph is an error naming the graph and what is wrong with it; no
/// compiler pass sees it.
///
/// Backend crates call this for their helpers that compile with options of their own
/// choosing (a test's, a tool's), then load the program as [`Backend::load`] does.
pub fn compile_program(graph: &Graph, options: &CompileOptions) -> RuntimeResult<Program> {
    verify(graph)?;
    Ok(rlx_compile::compile(graph, options)?)
}

/// `graph.verify()`, its error naming the graph.
fn verify(graph: &Graph) -> RuntimeResult<()> {
    graph
        .verify()
        .map_err(|e| RuntimeError::new(format!("graph `{}` is malformed: {e}", graph.name)))
}

/// The one compile path: [`compile_program`] with the backend's options for `device`,
/// then [`Backend::load`] (timed as a `backend_load` debug span of target
/// `rlx::compile`, next to the compiler's own `compile` span). The graph is verified
/// before the backend is asked anything.
pub(crate) fn compile_through<B: Backend + ?Sized>(
    backend: &B,
    device: Device,
    graph: &Graph,
) -> RuntimeResult<Arc<dyn Executable>> {
    verify(graph)?;
    let program = rlx_compile::compile(graph, &backend.compile_options(device))?;
    let _span = tracing::debug_span!(
        target: "rlx::compile",
        "backend_load",
        backend = backend.name(),
        graph = %graph.name,
        %device,
        kernels = program.kernels.len()
    )
    .entered();
    backend.load(device, program)
}

/// The leaf nodes that receive arguments, in argument order.
pub fn arg_order(graph: &Graph) -> Vec<NodeId> {
    graph
        .nodes()
        .iter()
        .filter(|n| matches!(n.op, Op::Input { .. } | Op::Param { .. }))
        .map(|n| n.id)
        .collect()
}

static REGISTRY: RwLock<Vec<Arc<dyn Backend>>> = RwLock::new(Vec::new());

/// Register a backend (a backend with the same name is replaced).
pub fn register_backend(backend: Arc<dyn Backend>) {
    let mut reg = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    reg.retain(|b| b.name() != backend.name());
    reg.push(backend);
}

/// Every registered backend.
pub fn registered_backends() -> Vec<Arc<dyn Backend>> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The registered backend serving `device`, if it is available.
pub fn backend_for(device: Device) -> Option<Arc<dyn Backend>> {
    registered_backends()
        .into_iter()
        .find(|b| b.devices().contains(&device) && b.is_available(device))
}

/// True when a registered backend can run on `device` on this host.
pub fn is_available(device: Device) -> bool {
    backend_for(device).is_some()
}

/// Every available device, in [`Device::all`] order.
pub fn available_devices() -> Vec<Device> {
    Device::all()
        .iter()
        .copied()
        .filter(|&d| is_available(d))
        .collect()
}

/// The highest-priority available hardware device (CPU when nothing else is).
pub fn fastest_device() -> Device {
    for &d in Device::priority_order() {
        if let Some(b) = backend_for(d)
            && (d == Device::Cpu || b.is_hardware(d))
        {
            return d;
        }
    }
    Device::Cpu
}

/// The device to run `graph` on: `RLX_FORCE_DEVICE` when set (and available), else the
/// highest-priority available hardware device whose backend supports every op of the graph.
/// Graphs with fewer than 2¹⁶ elements of work stay on the CPU, where launch latency
/// dominates.
pub fn fastest_device_for(graph: &Graph) -> Device {
    // Runs on every evaluation: the variable is read once per process (a `getenv` scans
    // the whole environment, ~400 instructions per call), and the size walk stops as
    // soon as the graph is big enough to consider another device.
    if let Some(d) = forced_device()
        && is_available(d)
    {
        return d;
    }
    const SMALL: usize = 1 << 16;
    let mut work = 0usize;
    let big = graph.nodes().iter().any(|n| {
        // `num_elements` inline (a call per node was a third of this walk); a dynamic
        // shape counts nothing, as `num_elements().unwrap_or(0)` would.
        let mut elements = 1usize;
        for d in n.shape.dims() {
            match d {
                rlx_ir::Dim::Static(s) => elements = elements.saturating_mul(*s),
                rlx_ir::Dim::Dynamic(_) => {
                    elements = 0;
                    break;
                }
            }
        }
        work = work.saturating_add(elements);
        work >= SMALL
    });
    if !big {
        return Device::Cpu;
    }
    for &d in Device::priority_order() {
        if let Some(b) = backend_for(d)
            && (d == Device::Cpu || b.is_hardware(d))
            && b.supports(graph)
        {
            return d;
        }
    }
    Device::Cpu
}

/// The device `RLX_FORCE_DEVICE` names, read and parsed once per process (`None` when it
/// is unset or names no device).
fn forced_device() -> Option<Device> {
    static FORCED: std::sync::OnceLock<Option<Device>> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| {
        std::env::var_os("RLX_FORCE_DEVICE")?
            .to_str()?
            .parse::<Device>()
            .ok()
    })
}

/// Compile `graph` for `device` through the registered backend: [`compile_program`] with
/// the backend's [`Backend::compile_options`], then [`Backend::load`].
pub fn compile(device: Device, graph: &Graph) -> RuntimeResult<Arc<dyn Executable>> {
    let backend = backend_for(device).ok_or_else(|| unavailable(device))?;
    compile_through(backend.as_ref(), device, graph)
}

/// The error for a device nobody can serve.
pub fn unavailable(device: Device) -> RuntimeError {
    let avail: Vec<&str> = available_devices().iter().map(|d| d.name()).collect();
    let what = match device.support() {
        crate::Support::Runs => "is not available in this build or on this host",
        crate::Support::CompileTested => "cannot run graphs yet",
        _ => "is not supported by rlx",
    };
    // A registered backend's own diagnosis (the library or device it did not find).
    let found = registered_backends()
        .iter()
        .filter(|b| b.devices().contains(&device))
        .find_map(|b| b.unavailable_reason(device))
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    RuntimeError::device_unavailable(format!(
        "device {device} {what}{found}: {}; available here: {}",
        device.how_to_enable(),
        avail.join(", ")
    ))
}
