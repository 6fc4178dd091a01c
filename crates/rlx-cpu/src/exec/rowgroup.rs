//! Row-group kernels ([`KernelKind::RowGroup`]): the stages (row reductions, column
//! reductions, elementwise kernels over the space or its rows) run together on one
//! block of rows at a time, so each block's operands are read from memory once and
//! every later stage finds them in cache.
//!
//! Blocks are cut by size alone (see [`RowGroupPlan::block_rows`]), never by thread
//! count. A row stage computes each row exactly as its own kernel would (the
//! same folds in the same order). A column reduction adds each block's rows, in order,
//! into f64 partial sums per block; after every block is done the partials combine in
//! block order, then its epilogue runs. So results are bit-identical from run to run
//! whatever the thread count.

use super::ew::EwPlan;
use super::loads::BindCtx;
use super::par::{Bases, chunks, par_for};
use super::reduce::{ReducePlan, add_row};
use super::value::{TileValue, Ty};
use rlx_compile::fuse::rowgroup::{StageRole, stage_role};
use rlx_compile::program::{Kernel, KernelKind, concrete};
use rlx_ir::{IrError, IrResult, ReduceOp};

mod lnbwd;
mod rows;
use rows::{RowProg, V, sum_value};

/// The fewest elements of the space per block of rows. Each stage pays a fixed cost per
/// block (its tile loop's setup): a LayerNorm backward over `[1024, 256]` ran 10% slower
/// in blocks of 4096 elements than as separate kernels, and level with them from 16384.
pub(crate) const MIN_BLOCK_ELEMS: usize = 4096;

/// The most elements of the space per block of rows: a block's operands (a few arrays
/// of this many floats) stay in the L2 cache while every stage passes over them.
pub(crate) const MAX_BLOCK_ELEMS: usize = 65536;

/// A stage's prologue (or a wide stage's expression) as a row program, and the node
/// a reduction folds.
type Fast = Option<(RowProg, u32)>;

/// One bound stage; each stage over the whole space may also run as a row program
/// ([`rows`]), which the block loop prefers.
enum Stage {
    /// A last-axis reduction: rows of the block in, one value per row out.
    Row(ReducePlan, Fast),
    /// A sum over the rows: partial sums per block (index into the partials).
    Col(ReducePlan, usize, Fast),
    /// Elementwise over the space (`wide`) or over the rows.
    Ew(EwPlan, bool, Fast),
}

/// A bound row group.
pub(crate) struct RowGroupPlan {
    rows: usize,
    c: usize,
    stages: Vec<Stage>,
    /// Columns of each column reduction (the length of its partial sums).
    col_widths: Vec<usize>,
    /// The stages are a LayerNorm or RMSNorm backward's: fused passes per block ([`lnbwd`]).
    ln: Option<lnbwd::LnBwd>,
}

impl RowGroupPlan {
    pub(crate) fn new(cx: BindCtx<'_>, k: &Kernel) -> IrResult<RowGroupPlan> {
        let b = cx.binding;
        let KernelKind::RowGroup { space, stages } = &k.kind else {
            unreachable!()
        };
        let dims = concrete(space, b).expect("bound");
        let c = *dims.last().expect("a row group's space has a row axis");
        let rows: usize = dims[..dims.len() - 1].iter().product();
        let mut bound = Vec::with_capacity(stages.len());
        let mut col_widths = Vec::new();
        // A reduction's prologue as a row program: float sums and means only.
        let fast_reduce = |s: &Kernel| -> Fast {
            let KernelKind::Reduce {
                op,
                prologue,
                input,
                ..
            } = &s.kind
            else {
                return None;
            };
            if !matches!(op, ReduceOp::Sum | ReduceOp::Mean) || !rows::enabled() {
                return None;
            }
            Some((
                RowProg::new(cx, s, prologue, &dims, &[], &[*input])?,
                *input,
            ))
        };
        for (i, s) in stages.iter().enumerate() {
            let role = stage_role(s, space).ok_or_else(|| {
                IrError::new(
                    "cpu",
                    format!(
                        "internal: stage {i} ({}) of a row group over {dims:?} is no row-group stage",
                        s.label()
                    ),
                )
            })?;
            bound.push(match role {
                StageRole::RowReduce => {
                    let mut r = ReducePlan::new(cx, s)?;
                    r.set_prefetch(false);
                    Stage::Row(r, fast_reduce(s))
                }
                StageRole::ColReduce => {
                    let mut r = ReducePlan::new(cx, s)?;
                    r.set_prefetch(false);
                    if !r.is_column_sum() {
                        return Err(IrError::new(
                            "cpu",
                            format!(
                                "internal: stage {i} ({}) of a row group is no column sum",
                                s.label()
                            ),
                        ));
                    }
                    col_widths.push(r.columns());
                    Stage::Col(r, col_widths.len() - 1, fast_reduce(s))
                }
                StageRole::Wide | StageRole::Narrow => {
                    let KernelKind::Elementwise { space: es, expr } = &s.kind else {
                        unreachable!("elementwise roles are elementwise kernels")
                    };
                    let edims = concrete(es, b).expect("bound");
                    let wide = role == StageRole::Wide;
                    let stores: Vec<(u32, usize)> =
                        s.stores.iter().map(|st| (st.value, st.buf)).collect();
                    // Machine code writes each stored node to its row directly: only when
                    // every node is stored once (at most 4 stores).
                    let mut exports: Vec<u32> = stores.iter().map(|s| s.0).collect();
                    let mut uniq = exports.clone();
                    uniq.sort_unstable();
                    uniq.dedup();
                    if uniq.len() != stores.len() || stores.len() > 4 {
                        exports.clear();
                    }
                    let fast = if wide && edims == dims && rows::enabled() {
                        RowProg::new(cx, s, expr, &dims, &stores, &exports).map(|p| (p, 0))
                    } else {
                        None
                    };
                    Stage::Ew(EwPlan::new(cx, s, expr, &edims)?, wide, fast)
                }
            });
        }
        // `RLX_LN_BWD=0` keeps the stage-by-stage path for LayerNorm and RMSNorm backwards
        // (A/B measurements in one process).
        let ln = if std::env::var_os("RLX_LN_BWD").is_none_or(|v| v != "0") {
            lnbwd::LnBwd::detect(&bound, stages)
        } else {
            None
        };
        Ok(RowGroupPlan {
            rows,
            c,
            stages: bound,
            col_widths,
            ln,
        })
    }

    /// Rows per block, from the sizes alone: about a sixteenth of the space (so two to
    /// a few cores share the blocks evenly), at least [`MIN_BLOCK_ELEMS`] (each stage's
    /// fixed cost per block stays small) and at most [`MAX_BLOCK_ELEMS`] (a block's
    /// operands stay in the L2 cache).
    fn block_rows(&self) -> usize {
        let elems = (self.rows * self.c / 16).clamp(MIN_BLOCK_ELEMS, MAX_BLOCK_ELEMS);
        (elems / self.c.max(1)).max(1)
    }

    /// How the group runs when that is not stage by stage (for `explain()`): a fused
    /// LayerNorm or RMSNorm backward.
    pub(crate) fn fused_note(&self) -> Option<&'static str> {
        self.ln.as_ref().map(lnbwd::LnBwd::note)
    }

    pub(crate) fn run(&self, bases: &[*mut u8]) -> Result<(), String> {
        if self.rows == 0 {
            // Nothing to split: each stage as its own kernel (column reductions of no
            // rows still write their empty sums).
            return self.run_stagewise(bases);
        }
        let per = self.block_rows();
        let nb = chunks(self.rows, per);
        let bs = Bases(bases);
        // Per block and column reduction: the block's partial sums.
        let parts: Vec<std::sync::Mutex<Vec<Vec<f64>>>> =
            (0..nb).map(|_| std::sync::Mutex::new(Vec::new())).collect();
        let c = self.c;
        let scratch_len = self
            .stages
            .iter()
            .filter_map(|st| match st {
                Stage::Row(_, f) | Stage::Col(_, _, f) | Stage::Ew(_, _, f) => f.as_ref(),
            })
            .map(|(p, _)| p.scratch_len(c))
            .max()
            .unwrap_or(0);
        par_for(nb, |blk| {
            let bases = bs.get();
            let (r0, r1) = (blk * per, ((blk + 1) * per).min(self.rows));
            let mut sums: Vec<Vec<f64>> = self.col_widths.iter().map(|&w| vec![0f64; w]).collect();
            if let Some(ln) = &self.ln {
                // SAFETY: the group's bound buffers and rows of its space.
                unsafe { ln.run_block(&self.stages, bases, (r0, r1), c, &mut sums)? };
                *parts[blk].lock().unwrap_or_else(|e| e.into_inner()) = sums;
                return Ok(());
            }
            // The stage-by-stage path's buffers (the fused backward above needs none).
            let mut scratch = vec![0f32; scratch_len];
            let mut vals: Vec<V> = Vec::new();
            let mut rsum: Vec<f64> = Vec::with_capacity(r1 - r0);
            for st in &self.stages {
                // Row programs: `bases` are the buffers the group was bound to, every row
                // `r0..r1` lies in its space, and a vector value holds `c` floats.
                match st {
                    Stage::Row(r, Some((p, input))) => {
                        rsum.clear();
                        for row in r0..r1 {
                            // SAFETY: bound buffers, a row of the space, and `scratch` holds
                            // the largest program's scratch_len (>= c) floats.
                            let v = unsafe {
                                row_value(p, *input, bases, row, c, &mut scratch, &mut vals)
                            };
                            // SAFETY: a vector value of a row holds `c` floats.
                            rsum.push(unsafe { sum_value(v, c) });
                        }
                        r.finish_rows(bases, r0, r1, &rsum)?;
                    }
                    Stage::Col(_, j, Some((p, input))) => {
                        let s = &mut sums[*j];
                        for row in r0..r1 {
                            // SAFETY: as for a row stage above.
                            let v = match unsafe {
                                row_value(p, *input, bases, row, c, &mut scratch, &mut vals)
                            } {
                                V::P(q) => TileValue::Vector(q as *const u8),
                                V::S(x) => TileValue::Scalar(x.to_bits() as u64),
                            };
                            // SAFETY: a vector value holds `c = s.len()` floats.
                            unsafe { add_row(s, v, Ty::F32) };
                        }
                    }
                    Stage::Ew(_, true, Some((p, _))) => {
                        for row in r0..r1 {
                            // SAFETY: bound buffers and a row of the space; the store rows
                            // are rows of dense f32 buffers of the space (RowProg::new), so
                            // they overlap an input only at the same element; `scratch` as
                            // above. (Machine code only with at most 4 stores.)
                            unsafe {
                                let outs = p.store_rows(bases, row, c);
                                let outs = &outs[..p.n_stores().min(outs.len())];
                                if !p.run_jit(bases, row, c, outs) {
                                    p.eval(bases, row, c, &mut scratch, &mut vals);
                                    p.store(bases, row, c, &vals);
                                }
                            }
                        }
                    }
                    Stage::Row(r, None) => r.run_rows_range(bases, r0, r1)?,
                    Stage::Col(r, j, None) => r.fold_cols(bases, r0, r1, &mut sums[*j])?,
                    Stage::Ew(e, true, _) => e.run_range(bases, r0 * c, r1 * c, None)?,
                    Stage::Ew(e, false, _) => e.run_range(bases, r0, r1, None)?,
                }
            }
            *parts[blk].lock().unwrap_or_else(|e| e.into_inner()) = sums;
            Ok(())
        })?;
        if self.col_widths.is_empty() {
            return Ok(());
        }
        let mut parts: Vec<Vec<Vec<f64>>> = parts
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .collect();
        let mut total = std::mem::take(&mut parts[0]);
        for p in &parts[1..] {
            for (t, s) in total.iter_mut().zip(p) {
                for (a, &x) in t.iter_mut().zip(s) {
                    *a += x;
                }
            }
        }
        for st in &self.stages {
            if let Stage::Col(r, j, _) = st {
                r.finish_cols(bases, &total[*j])?;
            }
        }
        Ok(())
    }

    /// Every stage as a kernel of its own, in order.
    fn run_stagewise(&self, bases: &[*mut u8]) -> Result<(), String> {
        for st in &self.stages {
            match st {
                Stage::Row(r, _) | Stage::Col(r, _, _) => r.run(bases)?,
                Stage::Ew(e, _, _) => e.run(bases)?,
            }
        }
        Ok(())
    }
}

/// A reduction stage's input on row `row`: as machine code into `scratch` when there is
/// code, else evaluated node by node.
///
/// # Safety
/// `bases` are the group's bound buffers, `row` a row of its space, `scratch` at least
/// the program's [`RowProg::scratch_len`] (and `c`) floats.
unsafe fn row_value(
    p: &RowProg,
    input: u32,
    bases: &[*mut u8],
    row: usize,
    c: usize,
    scratch: &mut [f32],
    vals: &mut Vec<V>,
) -> V {
    let out = scratch.as_mut_ptr();
    // SAFETY: the caller's contract; `out` holds `c` floats and overlaps no input.
    if unsafe { p.run_jit(bases, row, c, &[out]) } {
        return V::P(out);
    }
    // SAFETY: the caller's contract.
    unsafe { p.eval(bases, row, c, scratch, vals) };
    vals[input as usize]
}
