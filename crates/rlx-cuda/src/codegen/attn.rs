//! Fused attention, lowered once to the loop IR (`rlx_compile::loops`, shared with the
//! WGSL and HIP backends) and rendered into this backend's parameter-block convention:
//! a block of [`ATTENTION_QUERIES`] threads per (batch, head, block of queries), one
//! thread per query, key and value tiles staged in shared memory and an online softmax
//! per query (running maximum, rescaled sum and output accumulator), so the score
//! matrix never exists in memory. Causal and sliding-window masks skip the key tiles
//! outside the block's window; grouped-query heads read kv head `h / (H / Hk)`.
//! Semantics (and the fused multiply-adds of the dot products and sums) are the
//! lowering's, bit for bit the loop IR's reference interpreter.
//!
//! The fuser fuses only f32 attention (the CPU runs f16/bf16 attention as an opaque op
//! through its own kernel); this backend launches an opaque `Op::Attention` through the
//! same entry (no epilogue). Heads up to [`MAX_HEAD`] wide are lowered (wider than the
//! 256 the loop IR keeps by default: the query row and accumulators spill from registers
//! to local memory, correct but slower); an opaque attention with wider heads runs on the
//! host (`explain` names it), a fused (f32) one is refused at compile time.
//!
//! f16/bf16 attention that the tile lowering takes (unmasked or causal, no softcap,
//! head widths multiples of 16) also carries a tensor-core body: the same entry, the same
//! 32-thread blocks, lowered with `LowerOptions::tile_warps = 1` (one warp per 16
//! queries, `Q·Kᵀ` and `P·V` as `wmma` tile products, probabilities rounded to the
//! dtype), selected at compile time on sm_80+ (`__CUDA_ARCH__ >= 800`, where bf16 `wmma`
//! exists) and by the host emulator; older devices compile the scalar body. Its results
//! agree with the oracle within the tile lowering's tolerance, not bit for bit with the
//! scalar body.

use super::KGen;
use rlx_compile::loops::{
    ATTENTION_QUERIES, Dialect, LowerOptions, Stmt, lower_kernel_with, render_c_loop,
};
use rlx_compile::program::{Kernel, KernelKind};
use rlx_ir::{Dim, Op};

/// The widest heads this backend's attention entries take (the loop IR's
/// `LowerOptions::max_head`): four times WGSL's 256, so the K/V tiles (at least one key of
/// both heads) stay within 16 KiB of f32 shared memory.
pub const MAX_HEAD: usize = 1024;

/// The loop IR options of an attention entry (`tile_warps` 1: the tensor-core body).
pub(crate) fn options(tile_warps: u32) -> LowerOptions {
    LowerOptions {
        tile_warps,
        max_head: MAX_HEAD,
        ..LowerOptions::default()
    }
}

/// The entry point of an attention kernel and its launch geometry.
#[derive(Debug, Clone)]
pub(crate) struct AttnCode {
    pub entry: String,
    /// Query length and batch, and the number of heads: the kernel runs
    /// `batch · heads · ⌈sq / group⌉` blocks (a grid-stride loop, any grid is correct).
    pub sq: Dim,
    pub batch: Dim,
    pub heads: usize,
    /// Threads per block (launched with exactly this many).
    pub group: u32,
    /// The entry has a tensor-core body (taken on sm_80+ and by the emulator).
    pub tensor_cores: bool,
}

/// The attention op and its operand loads of kernel `k`: a fused attention kernel (f32,
/// with an epilogue) or an opaque `Op::Attention` (f16/bf16 and f64, which the fuser
/// leaves whole; the CPU runs those through its own attention).
pub(crate) fn parts(k: &Kernel) -> Option<(&Op, &[usize])> {
    match &k.kind {
        KernelKind::Attention { op, inputs, .. } => Some((op, inputs)),
        KernelKind::Opaque {
            op: op @ Op::Attention { .. },
            inputs,
            ..
        } => Some((op, inputs)),
        _ => None,
    }
}

impl KGen<'_> {
    /// The attention entry of this kernel, from its scalar lowering `lk` (and, for
    /// f16/bf16 the tile lowering takes, the tensor-core body beside it).
    pub(crate) fn gen_attention(
        &mut self,
        lk: &rlx_compile::loops::LoopKernel,
    ) -> Result<AttnCode, String> {
        let Some((Op::Attention { num_heads, .. }, inputs)) = parts(self.k) else {
            unreachable!("an attention kernel")
        };
        let qd = self.view_dims(inputs[0]);
        if qd.len() < 2 {
            return Err(format!(
                "attention q has rank {}; it must be [B, S, H, D] or [B, S, H·D]",
                qd.len()
            ));
        }
        let group = lk.group.ok_or("attention lowered without work-groups")?;
        debug_assert_eq!(group, ATTENTION_QUERIES);
        let host = self.loop_host(lk, "v");
        let mut body = host.with(|e| render_c_loop(lk, e));
        let tensor_cores = match self.tensor_core_body(group)? {
            Some(tc) => {
                body = format!("#if {TENSOR_CORES}\n{tc}#else\n{body}#endif\n");
                true
            }
            None => false,
        };
        let entry = format!("k{}", self.kid);
        self.entries
            .push_str(&format!("{} {{\n{body}}}\n", self.entry_header(&entry)));
        Ok(AttnCode {
            entry,
            sq: qd[1],
            batch: qd[0],
            heads: *num_heads,
            group,
            tensor_cores,
        })
    }
}

/// The preprocessor condition under which an attention entry runs its tensor-core body.
pub(crate) const TENSOR_CORES: &str =
    "defined(RLX_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)";

impl KGen<'_> {
    /// The attention kernel lowered through tile products, rendered, when the tile
    /// lowering takes it and it runs in blocks of `group` threads like the scalar body.
    fn tensor_core_body(&mut self, group: u32) -> Result<Option<String>, String> {
        if self.dialect != Dialect::Cuda {
            return Ok(None);
        }
        let lk = lower_kernel_with(self.p, self.kid, options(1)).map_err(|e| e.to_string())?;
        fn tiled(body: &[Stmt]) -> bool {
            body.iter().any(|s| match s {
                Stmt::TileMma(_) => true,
                Stmt::Loop { body, .. } | Stmt::If { body, .. } => tiled(body),
                _ => false,
            })
        }
        if !tiled(&lk.body) || lk.group != Some(group) {
            return Ok(None);
        }
        let host = self.loop_host(&lk, "t");
        Ok(Some(host.with(|e| render_c_loop(&lk, e))))
    }
}
