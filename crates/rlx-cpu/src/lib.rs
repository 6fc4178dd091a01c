//! # rlx-cpu — the CPU backend
//!
//! Implements [`rlx_runtime::Backend`] for [`Device::Cpu`]. The runtime compiles graphs
//! with this backend's [`compile_options`] into a [`rlx_compile::Program`] (fused kernels
//! over one memory-planned arena), which [`CpuBackend`] loads and executes:
//! - elementwise kernels run tile by tile (intermediates in an L1-resident per-thread
//!   scratch, never in memory), with vectorizable loops per op and the vectorized
//!   transcendental functions of [`math`]; on x86-64 CPUs with AVX-512, a tile program
//!   of f32 loads, constants, `+ − · ÷ max min`, comparisons and selects, and `neg abs
//!   sqrt relu exp log tanh sigmoid gelu_approx`, f64 `+ − · ÷ sqrt` and f32↔f64 casts
//!   (elementwise kernels and matmul epilogues) is compiled to machine code that keeps
//!   every value in vector registers — one pass over the data instead of one per op —
//!   and gives the interpreter's bits exactly ([`set_jit`] switches it off, as does
//!   `RLX_JIT=0`);
//! - reductions fold their fused prologue tile by tile and apply their epilogue;
//! - softmax, log-softmax, layer norm and RMS norm run as row kernels, attention as a
//!   fused online-softmax kernel (all kept whole);
//! - matmuls go through [`gemm`] (on N threads: N single-threaded products over blocks
//!   of the output, side by side) with operands read in place through their views and
//!   the epilogue (bias, activation, residual) applied over the product;
//! - arguments handed over with `Executable::run_host_donating` become the storage of
//!   the outputs computed over them, where the program allows it (an optimizer's state
//!   buffers are then updated in place);
//! - f32 convolutions run as im2col + GEMM; `concat`, `pad` and `gather` as slab copies;
//! - every other op runs the oracle ([`rlx_ir::interp::eval_op`]) on its operands.
//!
//! `Executable::explain` lists the kernels, the IR ops fused into each, and the memory
//! plan (peak arena bytes vs. bytes if every intermediate were materialized).
//!
//! Work is split into fixed-size chunks spread over the cores with rayon, so results
//! are bit-identical from run to run and for any thread count ([`set_num_threads`],
//! `RLX_NUM_THREADS`). One compiled program may run from several threads at once:
//! each run takes its own arena from the program's pool.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod exec;
pub mod gemm;
mod jit;
mod threads;

pub use jit::{compiled_count as jit_compiled_count, set_enabled as set_jit};
pub use threads::{max_num_threads, num_threads, set_num_threads};
pub mod math;

use rlx_compile::{CompileOptions, Program};
use rlx_ir::Graph;
use rlx_runtime::{Backend, Device, Executable, RuntimeError, RuntimeResult, compile_program};
use std::sync::Arc;

/// High-level ops the CPU executes whole (the compiler does not decompose them), and
/// two requests: [`rlx_compile::decompose::ATTENTION_IN_F32`] runs f16/bf16 `attention`
/// through f32, since the fused attention kernel takes f32 operands only (without it the
/// op would run in the oracle interpreter, element by element in f64), and
/// [`rlx_compile::decompose::ATTENTION_VJP_WHOLE_IN_F32`] runs f16/bf16 `attention_vjp`
/// in the fused f32 backward kernel between casts (without it the op would be lowered to
/// matmuls, a softmax and reductions in the dtype, each step rounded).
pub const KEPT_WHOLE: [&str; 8] = [
    "softmax",
    "log_softmax",
    "layer_norm",
    "rms_norm",
    "attention",
    "attention_vjp",
    rlx_compile::decompose::ATTENTION_IN_F32,
    rlx_compile::decompose::ATTENTION_VJP_WHOLE_IN_F32,
];

/// The compile options the CPU backend uses. `RLX_CPU_ATTENTION_VJP=decomposed` leaves
/// the attention backward to `decompose` (batched matmuls and a softmax instead of the
/// fused kernel), for A/B measurements in one binary.
pub fn compile_options() -> CompileOptions {
    let decomposed_vjp = std::env::var("RLX_CPU_ATTENTION_VJP").is_ok_and(|v| v == "decomposed");
    CompileOptions {
        keep_whole: KEPT_WHOLE
            .iter()
            .filter(|k| !(decomposed_vjp && **k == "attention_vjp"))
            .map(|s| s.to_string())
            .collect(),
        multi_store: true,
        // `RLX_ROW_GROUPS=0` keeps a normalization backward's kernels apart (A/B).
        row_groups: std::env::var("RLX_ROW_GROUPS").map_or(true, |v| v != "0"),
        ..Default::default()
    }
}

/// The CPU backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn devices(&self) -> &[Device] {
        &[Device::Cpu]
    }

    fn is_available(&self, device: Device) -> bool {
        device == Device::Cpu
    }

    fn compile_options(&self, _: Device) -> CompileOptions {
        compile_options()
    }

    fn load(&self, device: Device, program: Program) -> RuntimeResult<Arc<dyn Executable>> {
        if device != Device::Cpu {
            return Err(RuntimeError::new(format!(
                "the CPU backend cannot run programs on {device}; load them for Device::Cpu"
            )));
        }
        Ok(Arc::new(exec::CpuExecutable::new(program)?))
    }
}

/// Compile `graph` with `opts` for the CPU (for tests and tools that want other
/// options than the backend's defaults): [`rlx_runtime::compile_program`], then the
/// backend's [`Backend::load`].
pub fn compile_with(graph: &Graph, opts: &CompileOptions) -> RuntimeResult<Arc<dyn Executable>> {
    CpuBackend.load(Device::Cpu, compile_program(graph, opts)?)
}
