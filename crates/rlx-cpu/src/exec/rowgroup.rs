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

use super::bind::BindCtx;
use super::ew::EwPlan;
use super::par::{Bases, chunks, par_for};
use super::reduce::ReducePlan;
use rlx_compile::fuse::rowgroup::{StageRole, stage_role};
use rlx_compile::program::{Kernel, KernelKind, concrete};
use rlx_ir::{IrError, IrResult};

/// The fewest elements of the space per block of rows. Each stage pays a fixed cost per
/// block (its tile loop's setup): a LayerNorm backward over `[1024, 256]` ran 10% slower
/// in blocks of 4096 elements than as separate kernels, and level with them from 16384.
pub(crate) const MIN_BLOCK_ELEMS: usize = 4096;

/// The most elements of the space per block of rows: a block's operands (a few arrays
/// of this many floats) stay in the L2 cache while every stage passes over them.
pub(crate) const MAX_BLOCK_ELEMS: usize = 65536;

/// One bound stage.
enum Stage {
    /// A last-axis reduction: rows of the block in, one value per row out.
    Row(ReducePlan),
    /// A sum over the rows: partial sums per block (index into the partials).
    Col(ReducePlan, usize),
    /// Elementwise over the space (`wide`) or over the rows.
    Ew(EwPlan, bool),
}

/// A bound row group.
pub(crate) struct RowGroupPlan {
    rows: usize,
    c: usize,
    stages: Vec<Stage>,
    /// Columns of each column reduction (the length of its partial sums).
    col_widths: Vec<usize>,
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
                    Stage::Row(r)
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
                    Stage::Col(r, col_widths.len() - 1)
                }
                StageRole::Wide | StageRole::Narrow => {
                    let KernelKind::Elementwise { space: es, expr } = &s.kind else {
                        unreachable!("elementwise roles are elementwise kernels")
                    };
                    let edims = concrete(es, b).expect("bound");
                    Stage::Ew(EwPlan::new(cx, s, expr, &edims)?, role == StageRole::Wide)
                }
            });
        }
        Ok(RowGroupPlan {
            rows,
            c,
            stages: bound,
            col_widths,
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
        par_for(nb, |blk| {
            let bases = bs.get();
            let (r0, r1) = (blk * per, ((blk + 1) * per).min(self.rows));
            let mut sums: Vec<Vec<f64>> = self.col_widths.iter().map(|&w| vec![0f64; w]).collect();
            for st in &self.stages {
                match st {
                    Stage::Row(r) => r.run_rows_range(bases, r0, r1)?,
                    Stage::Col(r, j) => r.fold_cols(bases, r0, r1, &mut sums[*j])?,
                    Stage::Ew(e, true) => e.run_range(bases, r0 * self.c, r1 * self.c, None)?,
                    Stage::Ew(e, false) => e.run_range(bases, r0, r1, None)?,
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
            if let Stage::Col(r, j) = st {
                r.finish_cols(bases, &total[*j])?;
            }
        }
        Ok(())
    }

    /// Every stage as a kernel of its own, in order.
    fn run_stagewise(&self, bases: &[*mut u8]) -> Result<(), String> {
        for st in &self.stages {
            match st {
                Stage::Row(r) | Stage::Col(r, _) => r.run(bases)?,
                Stage::Ew(e, _) => e.run(bases)?,
            }
        }
        Ok(())
    }
}
