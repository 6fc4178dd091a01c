//! # rlx-wgpu — the wgpu backend
//!
//! Implements [`rlx_runtime::Backend`] for [`Device::Gpu`] (the best adapter of any
//! API), [`Device::Vulkan`], [`Device::Metal`], [`Device::DirectX`] and
//! [`Device::WebGpu`] (each the adapter of that API, where present). The runtime compiles
//! graphs with this backend's [`compile_options`] into the same kind of fused
//! [`rlx_compile::Program`] the CPU backend runs, and [`WgpuBackend`] loads it: each
//! kernel becomes one WGSL compute shader and one cached pipeline:
//! - elementwise kernels: one thread per element, views read through index maps, lowered
//!   once to the loop IR of `rlx_compile::loops` and rendered by its WGSL renderer (the
//!   scalar semantics the CUDA and HIP backends render too; so are the fused prologues
//!   and epilogues of the kernels below);
//! - reductions with their fused prologue and epilogue: a thread per output for short
//!   reductions, a workgroup with a fixed-order tree for long ones;
//! - softmax, log-softmax, layer norm and RMS norm: a workgroup per row;
//! - matmuls with their epilogue, lowered once too: a workgroup per 64×64 output tile
//!   (16×16 for skinny products), A and B slices staged in workgroup memory, a 4×4
//!   register block per invocation;
//! - attention, lowered once too: one thread per query row and head with an online
//!   softmax.
//! - concat, pad and cumsum, lowered once too: one thread per output element.
//! - `scaled_quant_scale` and `scaled_quantize` of f32 / f16 / bf16 data (every fp8 /
//!   fp6 / fp4 / custom format, per-tensor, MX E8M0 and NVFP4 scales): 32-bit integer
//!   code on the f32 bit patterns, bit for bit with the oracle. `scaled_matmul` with MX
//!   or NVFP4 block scales too: its products are exact, and the oracle's f64 sum
//!   (every partial sum rounded to 53 bits) is reproduced by a software f64 in 32-bit
//!   integers. With a per-tensor scale the f64 products themselves round (up to 62-bit
//!   exact products): that matmul runs on the host.
//!
//! Data lives in one arena buffer per run laid out by the program's memory plan (see
//! `exec`); dynamic dims, strides and offsets are uniforms, so a new batch size never
//! builds a new shader. Values are computed in f32 (f32/f16/bf16 data) or i32
//! (narrow integers and bool) with the oracle's per-node rounding.
//!
//! Kernels the GPU cannot run (f64/i64/u32 data, integer division and shifts, whose
//! errors need the host, opaque ops such as gather or FFT) fall back, one kernel
//! at a time, to the host: the shared host fallback ([`rlx_runtime::HostKernel`])
//! compiles each one per binding with the registered CPU backend (the oracle
//! interpreter evaluates it where none is registered): never a wrong answer.
//! [`Executable::explain`] lists where each kernel runs and why; with `RLX_LOG=1` each
//! fallback reason is also printed once to stderr.
//!
//! Adapter probing is live: [`WgpuBackend::is_available`] opens the adapter. A CPU
//! emulation (Mesa's lavapipe, `DeviceType::Cpu`) is available for tests but is not
//! hardware ([`Backend::is_hardware`]), so `fastest_device` never prefers it over
//! the CPU backend.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod context;
mod exec;
mod host;
mod layout;
mod wgsl;

use rlx_compile::{CompileOptions, Program};
use rlx_ir::Graph;
use rlx_runtime::{Backend, Device, Executable, RuntimeError, RuntimeResult, compile_program};
use std::sync::Arc;

/// High-level ops this backend runs whole (the compiler does not decompose them).
pub const KEPT_WHOLE: [&str; 5] = [
    "softmax",
    "log_softmax",
    "layer_norm",
    "rms_norm",
    "attention",
];

/// The devices this backend serves.
pub const DEVICES: [Device; 5] = [
    Device::Gpu,
    Device::Vulkan,
    Device::Metal,
    Device::DirectX,
    Device::WebGpu,
];

/// The compile options the wgpu backend uses. The attention backward is not kept whole:
/// `decompose` lowers it to batched matmuls, a softmax and reductions, which all run on
/// the adapter; for f16/bf16 in f32 ([`rlx_compile::decompose::ATTENTION_VJP_IN_F32`]),
/// each gradient rounded once (in the dtype itself, `p`, `dp` and `ds` would be rounded
/// on the way, far outside the documented bound).
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

/// The wgpu backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct WgpuBackend;

/// A description of the adapter `device` maps to (`"llvmpipe (Vulkan, Cpu)"`), or why
/// there is none.
pub fn adapter_info(device: Device) -> Result<String, String> {
    context::gpu(device).map(|g| g.describe())
}

impl Backend for WgpuBackend {
    fn name(&self) -> &'static str {
        "wgpu"
    }

    fn devices(&self) -> &[Device] {
        &DEVICES
    }

    fn is_available(&self, device: Device) -> bool {
        DEVICES.contains(&device) && context::gpu(device).is_ok()
    }

    fn is_hardware(&self, device: Device) -> bool {
        context::gpu(device).is_ok_and(|g| g.is_hardware())
    }

    fn compile_options(&self, _: Device) -> CompileOptions {
        compile_options()
    }

    fn load(&self, device: Device, program: Program) -> RuntimeResult<Arc<dyn Executable>> {
        Ok(Arc::new(load_exec(device, program)?))
    }
}

/// The executable of `program` on `device`'s adapter.
fn load_exec(device: Device, program: Program) -> RuntimeResult<exec::WgpuExecutable> {
    let gpu = open_gpu(device)?;
    exec::WgpuExecutable::new(gpu, program)
}

fn open_gpu(device: Device) -> RuntimeResult<Arc<context::Gpu>> {
    context::gpu(device).map_err(|e| {
        RuntimeError::new(format!(
            "device {device} is not available: {e}; pick Device::Cpu or install a driver"
        ))
    })
}

/// The fixed subgroup size reductions and row ops on `device` finish their work-group
/// trees with (`subgroupShuffleXor`), or `None`: the adapter has no `SUBGROUP` feature,
/// its subgroup size is not fixed (`subgroup_min_size != subgroup_max_size`), there is
/// no adapter, or `RLX_WGPU_SUBGROUPS=0` turned shuffles off when the device opened.
pub fn subgroup_size(device: Device) -> Option<u32> {
    context::gpu(device).ok().and_then(|g| g.subgroup_size)
}

/// [`compile_with_placement`] with subgroup shuffles on (`true`: where
/// [`subgroup_size`] has a size) or off (`false`: shared-memory trees only), whatever
/// the device's default: for comparing the two paths in one process.
pub fn compile_with_subgroups(
    device: Device,
    graph: &Graph,
    subgroups: bool,
) -> RuntimeResult<(Arc<dyn Executable>, Vec<bool>)> {
    let gpu = open_gpu(device)?;
    let size = if subgroups { gpu.subgroup_size } else { None };
    let program = compile_program(graph, &compile_options())?;
    let exe = exec::WgpuExecutable::with_subgroups(gpu, program, size)?;
    let placement = exe.placement();
    Ok((Arc::new(exe), placement))
}

/// Compile `graph` for `device` and report, per kernel, whether it runs on the GPU
/// (`true`) or falls back to the host (for tests that check the GPU really ran).
pub fn compile_with_placement(
    device: Device,
    graph: &Graph,
) -> RuntimeResult<(Arc<dyn Executable>, Vec<bool>)> {
    let exe = load_exec(device, compile_program(graph, &compile_options())?)?;
    let placement = exe.placement();
    Ok((Arc::new(exe), placement))
}

/// The WGSL this backend generates for each kernel of `graph` (compiled with
/// [`compile_options`]), without an adapter; `Err` says why a kernel runs on the host.
/// For checking shaders offline (e.g. translating them to MSL with naga).
pub fn generated_wgsl(graph: &Graph) -> RuntimeResult<Vec<Result<String, String>>> {
    generated_wgsl_with_subgroups(graph, None)
}

/// [`generated_wgsl`] for a device whose subgroups all have `subgroup` lanes (as
/// [`subgroup_size`] reports): reductions and row ops then finish their work-group trees
/// with `subgroupShuffleXor`. `None`: shared-memory trees, as [`generated_wgsl`].
pub fn generated_wgsl_with_subgroups(
    graph: &Graph,
    subgroup: Option<u32>,
) -> RuntimeResult<Vec<Result<String, String>>> {
    exec::wgsl_sources(&compile_program(graph, &compile_options())?, subgroup)
}
