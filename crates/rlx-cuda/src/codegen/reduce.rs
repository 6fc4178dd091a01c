//! Reductions: lowered once to the loop IR (`rlx_compile::loops`, shared with the WGSL
//! and HIP backends) and rendered into this backend's parameter-block convention.
//!
//! The lowering picks the kernel's shape once per program: one thread per output for
//! short reductions and for column reductions with many outputs (grid-stride, like an
//! elementwise kernel), or one block per output of a fixed size whose threads fold
//! strided positions and combine them through shared memory in a fixed tree order. The
//! order depends only on the program, never on the device, so results are bit-identical
//! from run to run and across backends that run the same lowering.

use super::KGen;
use rlx_compile::loops::{lower_kernel, render_c_loop};
use rlx_compile::program::KernelKind;
use rlx_ir::{Dim, ReduceOp};

/// The entry point of a reduction and what the launcher decides from.
#[derive(Debug, Clone)]
pub(crate) struct ReduceCode {
    pub entry: String,
    /// Dims of the result.
    pub out: Vec<Dim>,
    /// Dims of the reduced axes.
    pub reduced: Vec<Dim>,
    /// Threads per block of a block-per-output kernel (it must be launched with exactly
    /// this many); `None`: one thread per output.
    pub group: Option<u32>,
    pub op: ReduceOp,
    /// The reduced values are integers (an integer mean of nothing has no value).
    pub int_values: bool,
}

impl KGen<'_> {
    pub(crate) fn gen_reduce(&mut self) -> Result<ReduceCode, String> {
        let KernelKind::Reduce {
            op,
            in_space,
            axes,
            prologue,
            input,
            out_space,
            ..
        } = &self.k.kind
        else {
            unreachable!()
        };
        let lk = lower_kernel(self.p, self.kid).map_err(|e| e.to_string())?;
        let host = self.loop_host(&lk, "v");
        let body = host.with(|e| render_c_loop(&lk, e));
        let entry = format!("k{}", self.kid);
        self.entries
            .push_str(&format!("{} {{\n{body}}}\n", self.entry_header(&entry)));
        let in_dt = prologue.nodes[*input as usize].dtype;
        Ok(ReduceCode {
            entry,
            out: out_space.clone(),
            reduced: axes.iter().map(|&a| in_space[a]).collect(),
            group: lk.group,
            op: *op,
            int_values: in_dt.is_int(),
        })
    }
}
