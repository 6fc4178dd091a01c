//! One shader per kernel kind: elementwise kernels, reductions, row ops, contractions and
//! attention lowered whole to the loop IR (`lowered.rs`; a reduction runs one thread per
//! output when short, one workgroup with a fixed-order tree per output when long; a row
//! op one thread or workgroup per row; a contraction one workgroup per output tile with
//! A and B slices in workgroup memory and a register block per invocation; attention one
//! thread per query row and head with an online softmax; concat, pad and cumsum one
//! thread per output element). Other opaque ops run on the host.
//! Every reduction order is fixed, so results are bit-identical from run to run.

use super::{Env, Gen, Shader, cls};
use rlx_compile::program::Kernel;
use rlx_compile::program::{KernelKind, Program};
use rlx_ir::Op;

/// Generate the shader for kernel `k` (reductions and row ops finishing with shuffles of
/// `subgroup` lanes when given), or say why the GPU does not run it.
pub(crate) fn generate(
    p: &Program,
    k: &Kernel,
    fixed: Option<&Env<'_>>,
    subgroup: Option<u32>,
) -> Result<Shader, String> {
    for s in &k.stores {
        cls(p.buffers[s.buf].shape.dtype())?;
    }
    for l in &k.loads {
        cls(p.buffers[l.buf].shape.dtype())?;
    }
    let g = Gen::new(p, k, fixed, subgroup);
    match &k.kind {
        // Lowered to the loop IR and rendered whole (`lowered.rs`); what the renderer
        // refuses (f64, i64/u32, integer `/`, `%` and shifts that can raise) runs on the host.
        // A reduction's integer mean (an exact sum wider than i32) runs on the host too.
        // A contraction runs a workgroup per output tile (A and B slices staged in
        // workgroup memory, a register block per invocation); attention a workgroup per
        // block of queries (key/value tiles in workgroup memory, an online softmax).
        KernelKind::Elementwise { .. }
        | KernelKind::Reduce { .. }
        | KernelKind::Row { .. }
        | KernelKind::Contraction { .. }
        | KernelKind::Attention { .. } => g.lowered(),
        // Concat, pad, cumsum, attention, convolution, pooling and the scaled ops are
        // lowered (an invocation per output element; the scaled quantizers of f32 / f16 /
        // bf16 data in 32-bit integers, bit for bit with the oracle, and so is the
        // block-scaled matmul, through a software f64; the per-tensor scaled matmul's
        // f64 fold is refused by the renderer and runs on the host, as does anything on
        // f64 data); other opaque ops run on the host (gather,
        // scatter-add and cross-entropy lower too, but raise errors the WGSL kernels
        // have no channel for).
        KernelKind::Opaque { op, .. } => match op {
            Op::Concat { .. }
            | Op::Pad { .. }
            | Op::Cumsum { .. }
            | Op::Attention { .. }
            | Op::Conv { .. }
            | Op::Pool { .. }
            | Op::ScaledQuantScale { .. }
            | Op::ScaledQuantize { .. }
            | Op::ScaledMatMul { .. } => g.lowered(),
            other => Err(format!(
                "{} has no WGSL kernel yet; it runs whole on the CPU",
                other.name()
            )),
        },
        KernelKind::RowGroup { .. } => Err(
            "row_group kernels are not lowered to WGSL (compile with row_groups off, as \
             rlx_wgpu::compile_options does)"
                .to_string(),
        ),
    }
}
