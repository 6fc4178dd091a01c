//! # rlx-cuda — the CUDA backend
//!
//! Implements [`rlx_runtime::Backend`] for [`Device::Cuda`]. The runtime compiles graphs
//! with this backend's [`compile_options`] into the same backend-neutral
//! [`rlx_compile::Program`] the CPU runs; [`CudaBackend`] loads it: this crate turns it
//! into CUDA C ([`codegen`]), compiles that once per program with NVRTC for the
//! device's compute capability ([`nvrtc`], cached), and runs it over one device
//! allocation per executable:
//! - elementwise kernels with views as index maps, reductions with fused prologue and
//!   epilogue (deterministic block trees, optional split with an ordered combine),
//!   softmax / log-softmax / layer norm / RMS norm as row kernels, and a flash-style
//!   attention kernel (f16/bf16 through `wmma` tensor-core tile products on sm_80+);
//! - matmuls on cuBLAS (f32, f64, f16 and bf16 on tensor cores) with cuBLASLt fusing
//!   bias + ReLU/GELU epilogues, other epilogues as generated kernels; scaled fp8
//!   matmuls on cuBLASLt where the GPU has fp8 tensor cores;
//! - dynamic dims are kernel arguments: a program compiles once for every binding.
//!
//! Nothing links against CUDA: the driver, NVRTC, cuBLAS and cuBLASLt are opened at run
//! time ([`loader`]), so the crate builds and its tests run on machines without a
//! toolkit or a GPU; [`CudaBackend::is_available`] answers `false` there. Generated code
//! is tested without a GPU in two ways: NVRTC compiles it to PTX (needs only the NVRTC
//! library, e.g. the `nvidia-cuda-nvrtc-cu12` wheel), and the host emulator ([`emu`])
//! runs it against the oracle.
//!
//! The executor ([`load_program`], [`compile_on`]) is written against [`device::Gpu`],
//! not against CUDA: it generates the program in the device's dialect and plans it with
//! the device's BLAS routes, and `rlx-rocm` runs AMD GPUs through it with a HIP
//! implementation of that trait (hiprtc, the HIP runtime, rocBLAS).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod codegen;
mod cublas;
mod cuda;
pub mod device;
pub mod emu;
mod exec;
pub mod loader;
pub mod nvrtc;

use rlx_compile::{CompileOptions, Program};
use rlx_ir::Graph;
use rlx_runtime::{Backend, Device, Executable, RuntimeError, RuntimeResult, compile_program};
use std::sync::{Arc, OnceLock};

pub use cuda::CudaGpu;

/// High-level ops the CUDA backend executes whole (the compiler does not decompose them).
pub const KEPT_WHOLE: [&str; 5] = [
    "softmax",
    "log_softmax",
    "layer_norm",
    "rms_norm",
    "attention",
];

/// The compile options the CUDA backend uses. The attention backward is not kept whole:
/// `decompose` lowers it to batched matmuls, a softmax and reductions, which all run on
/// the device; for f16/bf16 in f32 ([`rlx_compile::decompose::ATTENTION_VJP_IN_F32`]),
/// each gradient rounded once.
pub fn compile_options() -> CompileOptions {
    let in_f32 = rlx_compile::decompose::ATTENTION_VJP_IN_F32;
    CompileOptions {
        keep_whole: KEPT_WHOLE
            .iter()
            .chain([&in_f32])
            .map(|s| s.to_string())
            .collect(),
        ..Default::default()
    }
}

/// Why CUDA cannot be used on this host, or `None` when it can: checks that the driver
/// and NVRTC libraries can be opened *before* anything touches them, then that a device
/// answers. Probed once per process.
pub fn unavailable_reason() -> Option<String> {
    static PROBE: OnceLock<Option<String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            if !loader::driver_present() {
                return Some(format!(
                    "the CUDA driver library (libcuda.so.1) cannot be opened ({})",
                    loader::describe()
                ));
            }
            if !loader::nvrtc_present() {
                return Some(format!("NVRTC cannot be opened ({})", loader::describe()));
            }
            if let Err(e) = cudarc::driver::result::init() {
                return Some(format!("cuInit failed: {e:?}"));
            }
            match cudarc::driver::result::device::get_count() {
                Ok(n) if n > 0 => None,
                Ok(_) => Some("the CUDA driver reports no device".into()),
                Err(e) => Some(format!("cuDeviceGetCount failed: {e:?}")),
            }
        })
        .clone()
}

/// The process-wide CUDA device 0 (opened on first use).
pub fn device() -> Result<Arc<CudaGpu>, String> {
    static DEV: OnceLock<Result<Arc<CudaGpu>, String>> = OnceLock::new();
    DEV.get_or_init(|| {
        if let Some(r) = unavailable_reason() {
            return Err(r);
        }
        CudaGpu::new(0).map(Arc::new)
    })
    .clone()
}

/// The CUDA backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct CudaBackend;

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn devices(&self) -> &[Device] {
        &[Device::Cuda]
    }

    fn is_available(&self, device: Device) -> bool {
        device == Device::Cuda && unavailable_reason().is_none()
    }

    fn unavailable_reason(&self, device: Device) -> Option<String> {
        if device != Device::Cuda {
            return Some(format!(
                "the CUDA backend serves Device::Cuda, not {device}"
            ));
        }
        unavailable_reason()
    }

    fn compile_options(&self, _: Device) -> CompileOptions {
        compile_options()
    }

    fn load(&self, device: Device, program: Program) -> RuntimeResult<Arc<dyn Executable>> {
        if device != Device::Cuda {
            return Err(RuntimeError::new(format!(
                "the CUDA backend cannot run programs on {device}; load them for Device::Cuda"
            )));
        }
        let gpu = device_or_err()?;
        let tuning = exec::tuning_for(gpu.as_ref());
        load_on(gpu, program, tuning)
    }
}

/// The executable of `program` on `gpu`, planned with `tuning`.
fn load_on(
    gpu: Arc<dyn device::Gpu>,
    program: Program,
    tuning: exec::plan::Tuning,
) -> RuntimeResult<Arc<dyn Executable>> {
    let e = exec::GpuExecutable::new(program, gpu, tuning).map_err(RuntimeError::new)?;
    Ok(Arc::new(e))
}

fn device_or_err() -> RuntimeResult<Arc<dyn device::Gpu>> {
    device()
        .map(|d| d as Arc<dyn device::Gpu>)
        .map_err(|e| RuntimeError::new(format!("CUDA is not available: {e}")))
}

/// Load a compiled `program` on `gpu` (any [`device::Gpu`]: the CUDA driver, the HIP
/// runtime of `rlx-rocm`, the emulator) with the device's routes: the executor every
/// C++-dialect GPU shares. `RLX_CUDA_NO_BLAS=1` turns the BLAS routes off.
pub fn load_program(
    gpu: Arc<dyn device::Gpu>,
    program: Program,
) -> RuntimeResult<Arc<dyn Executable>> {
    let tuning = exec::tuning_for(gpu.as_ref());
    load_on(gpu, program, tuning)
}

/// Compile `graph` with `opts` for `gpu` (any [`device::Gpu`], e.g. the emulator):
/// [`rlx_runtime::compile_program`], then the loading [`CudaBackend`] does.
pub fn compile_on(
    gpu: Arc<dyn device::Gpu>,
    graph: &Graph,
    opts: &CompileOptions,
) -> RuntimeResult<Arc<dyn Executable>> {
    let program = compile_program(graph, opts)?;
    let tuning = exec::tuning_for(gpu.as_ref());
    load_on(gpu, program, tuning)
}

/// The CUDA C generated for `graph` with the backend's compile options.
pub fn generated_source(graph: &Graph) -> RuntimeResult<String> {
    let program = compile_program(graph, &compile_options())?;
    Ok(codegen::generate(&program)
        .map_err(RuntimeError::new)?
        .source)
}

/// Routing knobs for [`compile_routed`]: which library routes the planner may take.
#[derive(Debug, Clone, Copy)]
pub struct Routing {
    /// Route BLAS-able matmuls to cuBLAS/cuBLASLt instead of the generic kernel.
    pub blas: bool,
    /// Route per-tensor fp8 scaled matmuls to cuBLASLt (where the device can).
    pub fp8: bool,
    /// Split reductions whose reduced extent is at least this long across blocks when
    /// their outputs are too few to fill the device (`RLX_CUDA_SPLIT_MIN` for the other
    /// entry points; default 8192). `usize::MAX` never splits.
    pub split_min: usize,
    /// Finish reduction and row-op trees with warp shuffles (the same results bit for
    /// bit; default: on unless `RLX_CUDA_SHUFFLES=0`).
    pub shuffles: bool,
}

impl Default for Routing {
    fn default() -> Self {
        Routing {
            blas: true,
            fp8: true,
            split_min: exec::plan::SPLIT_MIN,
            shuffles: exec::shuffles_from_env(),
        }
    }
}

/// Compile `graph` for `gpu` with explicit routing (routes the device lacks stay off).
pub fn compile_routed(
    gpu: Arc<dyn device::Gpu>,
    graph: &Graph,
    r: Routing,
) -> RuntimeResult<Arc<dyn Executable>> {
    let program = compile_program(graph, &compile_options())?;
    let tuning = exec::plan::Tuning {
        sm_count: device::Gpu::sm_count(gpu.as_ref()),
        split_min: r.split_min,
        blas: r.blas && device::Gpu::has_blas(gpu.as_ref()),
        fp8: r.fp8 && device::Gpu::has_fp8(gpu.as_ref()),
        epilogue: r.blas && device::Gpu::has_blas_epilogue(gpu.as_ref()),
        shuffles: r.shuffles,
    };
    load_on(gpu, program, tuning)
}

/// The shared host emulator (`Err` with the reason when no C++ compiler runs).
pub fn emulator() -> Result<Arc<emu::EmuGpu>, String> {
    static EMU: OnceLock<Result<Arc<emu::EmuGpu>, String>> = OnceLock::new();
    EMU.get_or_init(|| emu::EmuGpu::new().map(Arc::new)).clone()
}

/// Compile `graph` for the host emulator with the backend's options (for testing the
/// generated code and the executor without a GPU).
pub fn compile_emulated(graph: &Graph) -> RuntimeResult<Arc<dyn Executable>> {
    compile_emulated_with(graph, Routing::default())
}

/// [`compile_emulated`] with explicit routing.
pub fn compile_emulated_with(graph: &Graph, r: Routing) -> RuntimeResult<Arc<dyn Executable>> {
    let gpu = emulator().map_err(RuntimeError::new)?;
    compile_routed(gpu, graph, r)
}

/// A program compiled for the CUDA device with device-side timing, for benchmarks.
pub struct Profiled {
    exe: exec::GpuExecutable,
}

impl Profiled {
    /// Compile `graph` for the process's CUDA device.
    pub fn new(graph: &Graph) -> RuntimeResult<Profiled> {
        Profiled::on(device_or_err()?, graph)
    }

    /// Compile `graph` for `gpu` (e.g. the emulator, to check a benchmark's plumbing).
    pub fn on(gpu: Arc<dyn device::Gpu>, graph: &Graph) -> RuntimeResult<Profiled> {
        let program = compile_program(graph, &compile_options())?;
        let tuning = exec::tuning_for(gpu.as_ref());
        let exe = exec::GpuExecutable::new(program, gpu, tuning).map_err(RuntimeError::new)?;
        Ok(Profiled { exe })
    }

    /// The executable (a run copies arguments in and results out).
    pub fn executable(&self) -> &dyn Executable {
        &self.exe
    }

    /// Seconds per run of the kernels alone: arguments uploaded once, `iters` runs back
    /// to back, timed to the final synchronize.
    pub fn time_kernels(
        &self,
        args: &[rlx_ir::TensorView<'_>],
        iters: usize,
    ) -> RuntimeResult<f64> {
        self.exe
            .time_kernels(args, iters)
            .map_err(RuntimeError::new)
    }
}
