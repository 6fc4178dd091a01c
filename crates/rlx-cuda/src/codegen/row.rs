//! Row ops over the last axis (softmax, log-softmax, layer norm, RMS norm): lowered once
//! to the loop IR (`rlx_compile::loops`, shared with the WGSL and HIP backends) and
//! rendered into this backend's parameter-block convention.
//!
//! Short static rows run one thread per row; long or dynamic rows one block per row of
//! the lowering's size, whose threads take strided columns and combine each statistic
//! (max, sums) in a fixed shared-memory tree (finished with warp shuffles below 32
//! threads, [`super::CodegenOptions::shuffles`]), so results are bit-identical from run
//! to run. The prologue is re-evaluated in each pass rather than stored.

use super::KGen;
use rlx_compile::loops::{lower_kernel_with, render_c_loop};
use rlx_compile::program::KernelKind;
use rlx_ir::Dim;

/// The entry point of a row kernel.
#[derive(Debug, Clone)]
pub(crate) struct RowCode {
    pub entry: String,
    /// Dims of the rows (the op's space without its last axis).
    pub rows: Vec<Dim>,
    /// Threads per block of a block-per-row kernel (launched with exactly this many);
    /// `None`: one thread per row.
    pub group: Option<u32>,
}

impl KGen<'_> {
    pub(crate) fn gen_row(&mut self) -> Result<RowCode, String> {
        let KernelKind::Row { op, space, .. } = &self.k.kind else {
            unreachable!()
        };
        if space.is_empty() {
            return Err(format!("{} of a scalar", op.name()));
        }
        let lk = lower_kernel_with(self.p, self.kid, self.lower).map_err(|e| e.to_string())?;
        let host = self.loop_host(&lk, "v");
        let body = host.with(|e| render_c_loop(&lk, e));
        let entry = format!("k{}", self.kid);
        self.entries
            .push_str(&format!("{} {{\n{body}}}\n", self.entry_header(&entry)));
        Ok(RowCode {
            entry,
            rows: space[..space.len() - 1].to_vec(),
            group: lk.group,
        })
    }
}
