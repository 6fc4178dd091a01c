//! Reductions: lowered once to the loop IR (`rlx_compile::loops`, shared with the WGSL
//! and HIP backends) and rendered into this backend's parameter-block convention.
//!
//! The lowering picks the kernel's shape once per program: one thread per output for
//! short reductions and for column reductions with many outputs (grid-stride, like an
//! elementwise kernel), or one block per output of a fixed size whose threads fold
//! strided positions and combine them through shared memory in a fixed tree order. The
//! order depends only on the program, never on the device, so results are bit-identical
//! from run to run and across backends that run the same lowering.
//!
//! A reduction that may be long ([`SPLIT_FLOOR`] positions or a dynamic extent) also
//! carries a split form ([`SplitCode`], `rlx_compile::loops::lower_split_reduction`): a
//! block per (output, part) folding one contiguous chunk into a scratch buffer, then a
//! thread per output folding its parts in part order. The launcher picks it when the
//! outputs are too few to fill the device (see `exec::plan`); its part count is fixed
//! here from the program alone, so the split result does not depend on the device
//! either — only on whether the launcher split (a different, equally fixed, order).

use super::meta::Ptr;
use super::{KGen, LoopHost};
use rlx_compile::loops::{
    LoopKernel, lower_kernel_with, lower_split_reduction_with, render_c_loop,
};
use rlx_compile::program::KernelKind;
use rlx_ir::{DType, Dim, ReduceOp};

/// Static reduced extents shorter than this carry no split form: one block of 256
/// threads folds them in at most 16 steps each, and a second launch would cost more.
pub(crate) const SPLIT_FLOOR: usize = 4096;

/// Positions per part of a static split (16 per thread of a 256-thread block).
const PER_PART: usize = 4096;

/// The most parts a split uses (and the count for a dynamic extent): enough blocks to
/// fill a large device with one output, few enough that the combine stays short.
const MAX_PARTS: u32 = 256;

/// Static output counts above this carry no split form: that many blocks fill any
/// device already.
const MAX_SPLIT_OUTPUTS: usize = 1024;

/// The scratch slot (of this kernel's parameter block) holding a split's partials.
pub(crate) const SPLIT_SCRATCH: usize = 0;

/// The split form of a reduction (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct SplitCode {
    /// A block of [`SplitCode::group`] threads per (output, part): writes the partials.
    pub part_entry: String,
    /// A thread per output: folds the partials in part order and stores the result.
    pub combine_entry: String,
    /// Parts per output (fixed per program).
    pub parts: u32,
    /// Threads per block of the part kernel (launch with exactly this many).
    pub group: u32,
    /// Threads per block of the combine kernel, when it is block-shaped (`None`: one
    /// thread per output, grid-stride).
    pub combine_group: Option<u32>,
    /// Bytes of one partial in the scratch slot.
    pub partial_bytes: usize,
}

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
    /// The split form, when the reduction may be long enough to want one.
    pub split: Option<SplitCode>,
}

impl ReduceCode {
    /// Every entry point, unsplit first.
    pub(crate) fn entries(&self) -> Vec<String> {
        let mut v = vec![self.entry.clone()];
        if let Some(s) = &self.split {
            v.push(s.part_entry.clone());
            v.push(s.combine_entry.clone());
        }
        v
    }
}

/// The part count of a split over `reduced` (`None`: no split form), a function of the
/// program only.
fn split_parts(op: ReduceOp, in_dt: DType, out: &[Dim], reduced: &[Dim]) -> Option<u32> {
    // An integer mean keeps two accumulators (sum and count): the lowering does not
    // split it, so it always runs unsplit.
    if op == ReduceOp::Mean && in_dt.is_int() {
        return None;
    }
    let stat = |ds: &[Dim]| -> Option<usize> {
        ds.iter()
            .map(|d| d.is_static().then(|| d.unwrap_static()))
            .product()
    };
    if stat(out).is_some_and(|n| n > MAX_SPLIT_OUTPUTS) {
        return None;
    }
    match stat(reduced) {
        Some(l) if l < SPLIT_FLOOR => None,
        Some(l) => Some(l.div_ceil(PER_PART).clamp(2, MAX_PARTS as usize) as u32),
        None => Some(MAX_PARTS),
    }
}

impl KGen<'_> {
    pub(crate) fn gen_reduce(&mut self) -> Result<ReduceCode, String> {
        let KernelKind::Reduce {
            op,
            arg,
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
        let lk = lower_kernel_with(self.p, self.kid, self.lower).map_err(|e| e.to_string())?;
        let host = self.split_host(&lk);
        let body = host.with(|e| render_c_loop(&lk, e));
        let entry = format!("k{}", self.kid);
        self.entries
            .push_str(&format!("{} {{\n{body}}}\n", self.entry_header(&entry)));
        let in_dt = prologue.nodes[*input as usize].dtype;
        let reduced: Vec<Dim> = axes.iter().map(|&a| in_space[a]).collect();
        // Argmax/argmin carry two accumulators per part: never split.
        let split = match split_parts(*op, in_dt, out_space, &reduced).filter(|_| !arg) {
            Some(parts) => Some(self.gen_split(&entry, parts)?),
            None => None,
        };
        Ok(ReduceCode {
            entry,
            out: out_space.clone(),
            reduced,
            group: lk.group,
            op: *op,
            int_values: in_dt.is_int(),
            split,
        })
    }

    /// The two kernels of the split form in `parts` parts, as entries `<entry>_part`
    /// and `<entry>_combine` sharing this kernel's parameter block.
    fn gen_split(&mut self, entry: &str, parts: u32) -> Result<SplitCode, String> {
        let [part, combine] = lower_split_reduction_with(self.p, self.kid, parts, self.lower)
            .map_err(|e| e.to_string())?;
        let scratch = self.p.buffers.len();
        let partial_bytes = part
            .bufs
            .iter()
            .find(|b| b.buf == scratch)
            .map(|b| b.dtype.size_bytes())
            .ok_or("internal: a split reduction without its scratch slot")?;
        let group = part
            .group
            .ok_or("internal: a split reduction's part kernel is not block-shaped")?;
        let part_entry = format!("{entry}_part");
        let combine_entry = format!("{entry}_combine");
        for (lk, name) in [(&part, &part_entry), (&combine, &combine_entry)] {
            let host = self.split_host(lk);
            let body = host.with(|e| render_c_loop(lk, e));
            self.entries
                .push_str(&format!("{} {{\n{body}}}\n", self.entry_header(name)));
        }
        Ok(SplitCode {
            part_entry,
            combine_entry,
            parts,
            group,
            combine_group: combine.group,
            partial_bytes,
        })
    }

    /// The host bindings of lowered kernel `lk`: as `KGen::loop_host`, with the split's
    /// scratch slot (buffer `p.buffers.len()`) bound to [`SPLIT_SCRATCH`].
    fn split_host(&mut self, lk: &LoopKernel) -> LoopHost {
        let scratch = self.p.buffers.len();
        self.loop_host_with(lk, "v", |g, b| match b {
            s if s == scratch => g.ptr(Ptr::Scratch(SPLIT_SCRATCH)),
            b => g.buf(b),
        })
    }
}

#[cfg(test)]
#[path = "reduce_tests.rs"]
mod tests;
