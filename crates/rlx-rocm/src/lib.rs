//! rlx on AMD GPUs through HIP (ROCm): [`Device::Rocm`].
//!
//! **How it runs.** The runtime compiles a graph with [`compile_options`] (the CUDA
//! backend's) into a [`Program`]; [`RocmBackend`] loads it on [`HipGpu`], the HIP
//! implementation of the device contract [`rlx_cuda::device::Gpu`]. The executor above
//! that contract is the CUDA backend's, shared rather than copied: it generates the
//! program in the device's dialect ([`Dialect::Hip`] here — the same source as CUDA's
//! but for its first line), plans the arena, launches and BLAS routes, and marshals
//! arguments. Under it this crate supplies:
//! - the HIP runtime (`libamdhip64`, [`hip`], `dlopen`): device discovery, memory,
//!   `hipModuleLoadData` / `hipModuleLaunchKernel` on the null stream;
//! - hiprtc ([`hiprtc`]): the program compiled at run time for the device's `gfx`
//!   architecture (`gcnArchName`; `RLX_HIP_ARCH` overrides it);
//! - rocBLAS (`librocblas`, `dlopen`, when present) for GEMMs with cuBLAS's
//!   column-major semantics; without it the planner uses the generated tiled GEMM.
//!   rocBLAS has no fused epilogue and no scaled fp8 GEMM here, so bias/activation
//!   epilogues run as generated kernels and fp8 matmuls as generated or host kernels.
//!
//! Nothing is needed to build. [`RocmBackend::is_available`] is `true` only where the
//! HIP runtime and hiprtc load *and* report a device; otherwise [`unavailable_reason`]
//! names what is missing, and asking for the device is an error that says so — never a
//! silent CPU run.
//!
//! **What is tested where.** Without an AMD GPU (CI): every kernel kind compiles to
//! AMDGPU code objects with hiprtc ([`compile_program`], [`compile_generated`]), and the
//! HIP-dialect program runs through the shared executor on the host emulator
//! ([`compile_emulated`]: an emulated device that, like [`HipGpu`], generates HIP and has
//! no fused GEMM epilogue and no fp8 GEMM) against the oracle. The launches, copies and
//! rocBLAS calls of [`HipGpu`] itself run only on a machine with an AMD GPU; their tests
//! skip elsewhere, printing why.
//!
//! ```no_run
//! use rlx_ir::{Activation, DType, Graph, Op, Shape};
//! let mut g = Graph::new("relu");
//! let x = g.input("x", Shape::new(&[1024], DType::F32));
//! let y = g.add_op(Op::Activation(Activation::Relu), vec![x]).unwrap();
//! g.set_outputs(vec![y]);
//! let p = rlx_compile::compile(&g, &rlx_compile::CompileOptions::default()).unwrap();
//! let kernels = rlx_rocm::compile_program(&p, "gfx90a").unwrap();
//! assert_eq!(kernels.len(), p.kernels.len());
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod dl;
mod gpu;
pub mod hip;
pub mod hiprtc;
mod rocblas;

pub use gpu::HipGpu;
pub use rlx_compile::loops::{Dialect, LoopKernel, render_c};
use rlx_compile::loops::{LowerOptions, lower_kernel_with};
use rlx_compile::{CompileOptions, Program};
use rlx_cuda::emu::EmuGpu;
use rlx_ir::Graph;
use rlx_runtime::{Backend, Device, Executable, RuntimeError, RuntimeResult};
use std::sync::{Arc, OnceLock};

/// One compiled kernel: its lowered form, its HIP source and its code object.
#[derive(Debug, Clone)]
pub struct CompiledKernel {
    /// The lowered kernel (entry name, buffer slots, dynamic-dim parameters).
    pub kernel: LoopKernel,
    /// The HIP C++ source it was compiled from.
    pub source: String,
    /// The AMDGPU code object (an ELF image for `hipModuleLoadData`).
    pub code_object: Vec<u8>,
}

/// Lower, render and compile every kernel of `p` for `arch` (e.g. `gfx90a`), each as a
/// standalone loop-IR kernel, lowered as the device runs it (work-group trees finished
/// with 32-wide `__shfl_xor` shuffles).
///
/// Errors name the kernel: one the loop IR does not lower yet (attention, opaque ops,
/// integer arithmetic), or one hiprtc rejects (with its log), or hiprtc missing.
pub fn compile_program(p: &Program, arch: &str) -> Result<Vec<CompiledKernel>, String> {
    (0..p.kernels.len())
        .map(|k| {
            let opts = LowerOptions {
                shuffles: true,
                ..LowerOptions::default()
            };
            let kernel = lower_kernel_with(p, k, opts).map_err(|e| e.to_string())?;
            let source = render_c(&kernel, Dialect::Hip);
            let code_object = hiprtc::compile(&source, &format!("{}.hip", kernel.name), arch)
                .map_err(|e| format!("kernel {k} ({}): {e}", kernel.name))?;
            Ok(CompiledKernel {
                kernel,
                source,
                code_object,
            })
        })
        .collect()
}

/// The options programs for [`Device::Rocm`] are compiled with (the shared executor's:
/// the CUDA backend's).
pub fn compile_options() -> CompileOptions {
    rlx_cuda::compile_options()
}

/// The HIP source the device runs for `graph`: the whole program as the executor
/// generates it (every kernel's entry points in one translation unit).
pub fn generated_source(graph: &Graph) -> RuntimeResult<String> {
    let program = rlx_runtime::compile_program(graph, &compile_options())?;
    Ok(rlx_cuda::codegen::generate_for(&program, Dialect::Hip)
        .map_err(RuntimeError::new)?
        .source)
}

/// [`generated_source`] compiled by hiprtc for `arch`: the code object the device would
/// load for `graph` (no GPU needed).
pub fn compile_generated(graph: &Graph, arch: &str) -> RuntimeResult<Vec<u8>> {
    let source = generated_source(graph)?;
    hiprtc::compile(&source, &format!("{}.hip", graph.name), arch).map_err(RuntimeError::new)
}

/// Why [`Device::Rocm`] cannot be used on this host, or `None` when it can: the HIP
/// runtime must load, hiprtc must load, and the runtime must report a device. Probed
/// once per process.
pub fn unavailable_reason() -> Option<String> {
    static PROBE: OnceLock<Option<String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let hip = match hip::runtime() {
                Ok(h) => h,
                Err(e) => return Some(e),
            };
            if let Err(e) = hiprtc::available() {
                return Some(e);
            }
            match hip.device_count() {
                Ok(0) => Some("the HIP runtime loads but reports no AMD GPU".into()),
                Ok(_) => None,
                // hipInit fails with hipErrorNoDevice where no GPU (or no amdgpu
                // kernel driver) is present.
                Err(e) => Some(format!("the HIP runtime loads but finds no AMD GPU ({e})")),
            }
        })
        .clone()
}

/// The process-wide HIP device 0 (opened on first use).
pub fn device() -> Result<Arc<HipGpu>, String> {
    static DEV: OnceLock<Result<Arc<HipGpu>, String>> = OnceLock::new();
    DEV.get_or_init(|| {
        if let Some(r) = unavailable_reason() {
            return Err(r);
        }
        HipGpu::new(0).map(Arc::new)
    })
    .clone()
}

/// The ROCm backend: [`Device::Rocm`] on [`HipGpu`] through the shared executor.
#[derive(Debug, Default, Clone, Copy)]
pub struct RocmBackend;

impl Backend for RocmBackend {
    fn name(&self) -> &'static str {
        "rocm"
    }

    fn devices(&self) -> &[Device] {
        &[Device::Rocm]
    }

    fn is_available(&self, device: Device) -> bool {
        device == Device::Rocm && unavailable_reason().is_none()
    }

    fn unavailable_reason(&self, device: Device) -> Option<String> {
        if device != Device::Rocm {
            return Some(format!(
                "the ROCm backend serves Device::Rocm, not {device}"
            ));
        }
        unavailable_reason()
    }

    fn compile_options(&self, _: Device) -> CompileOptions {
        compile_options()
    }

    fn load(&self, device: Device, program: Program) -> RuntimeResult<Arc<dyn Executable>> {
        if device != Device::Rocm {
            return Err(RuntimeError::new(format!(
                "the ROCm backend cannot run programs on {device}; load them for Device::Rocm"
            )));
        }
        let gpu =
            self::device().map_err(|e| RuntimeError::new(format!("ROCm is not available: {e}")))?;
        rlx_cuda::load_program(gpu, program)
    }
}

/// The host emulator as a HIP device (`Err` with the reason when no C++ compiler runs):
/// the executor generates HIP source for it and plans it as for [`HipGpu`] with rocBLAS
/// (BLAS GEMMs without fused epilogues, no fp8 GEMM).
pub fn emulator() -> Result<Arc<EmuGpu>, String> {
    static EMU: OnceLock<Result<Arc<EmuGpu>, String>> = OnceLock::new();
    EMU.get_or_init(|| {
        EmuGpu::new().map(|e| {
            Arc::new(
                e.with_dialect(Dialect::Hip)
                    .with_blas_epilogue(false)
                    .with_fp8(false),
            )
        })
    })
    .clone()
}

/// Compile `graph` for the HIP-dialect host [`emulator`] through the shared executor,
/// as [`RocmBackend`] would for a GPU (for tests without one).
pub fn compile_emulated(graph: &Graph) -> RuntimeResult<Arc<dyn Executable>> {
    let gpu = emulator().map_err(RuntimeError::new)?;
    let program = rlx_runtime::compile_program(graph, &compile_options())?;
    rlx_cuda::load_program(gpu, program)
}
