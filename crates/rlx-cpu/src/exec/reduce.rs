//! Reduction kernels: the prologue evaluated tile by tile over the reduced tensor in a
//! permuted order (kept axes, reduced axes, trailing kept axes), folded into
//! accumulators (f64 for floats, wrapping i64 or exact i128 for integers), then the
//! epilogue over the result. Partial sums combine in a fixed order, so results are
//! bit-identical from run to run whatever the thread count: each output folds its
//! elements in order within a block of the reduced axes, and the blocks (cut by sizes
//! alone) combine in block order. Argmax/argmin fold the best value with its position
//! (the oracle's first extremum, a NaN winning) and store the position in the dtype.

use super::ew::{EwPlan, elem, plan_used};
use super::loads::BindCtx;
use super::loads::unravel_into;
use super::loads::{LoadPlan, TilePos, collapse, permute};
use super::par::{Bases, chunks, par_for};
use super::value::{TileValue, Ty};
use super::vm::with_scratch;
use super::vm::{InstrOp, Scratch, TILE, TileEnv, TileProg, fetch_inputs, run_tile, run_tile_jit};
use rlx_compile::program::{Kernel, KernelKind};
use rlx_ir::{DType, IrError, IrResult, ReduceOp};

/// Operand bytes from which tiles prefetch the next tile of their contiguous loads
/// (about an L2 cache: below it the data is resident after the first pass).
mod acc;

pub(crate) use acc::add_row;
use acc::{Acc, combine, finish, fold_tile, fold1, init};

const PREFETCH_BYTES: usize = 2 << 20;

/// A bound reduction.
pub(crate) struct ReducePlan {
    op: ReduceOp,
    /// Argmax (op `Max`) / argmin (op `Min`): the position of the extremum.
    arg: bool,
    prologue: TileProg,
    input: u32,
    in_ty: Ty,
    loads: Vec<LoadPlan>,
    /// Collapsed permuted space.
    dims: Vec<usize>,
    /// Kept-outer count, reduced count, kept-inner count.
    o: usize,
    l: usize,
    inner: usize,
    out_dt: DType,
    out_ty: Ty,
    epilogue: EwPlan,
    /// Prefetch the next tile of each contiguous load: only when the operands are too
    /// large for the caches (a LayerNorm backward's 1 MiB rows of `[1024, 256]` stay in
    /// L2, where the 64 prefetch instructions per tile and load were a tenth of the
    /// kernel's time).
    prefetch: bool,
    /// The prologue computes (not only loads): worth evaluating as machine code.
    computes: bool,
    /// The prologue compiled to machine code (exporting the reduced value), looked up or
    /// compiled on the first tile (`None` inside: not compilable; see [`crate::jit`]).
    jit: std::sync::OnceLock<Option<std::sync::Arc<crate::jit::JitKernel>>>,
    /// The program's machine-code cache (shared with every binding and kernel).
    shared: std::sync::Arc<crate::jit::JitCache>,
}

impl ReducePlan {
    pub(crate) fn new(cx: BindCtx<'_>, k: &Kernel) -> IrResult<ReducePlan> {
        let BindCtx {
            program: p,
            buffer_dims: bd,
            binding: b,
            jit,
        } = cx;
        let KernelKind::Reduce {
            op,
            arg,
            in_space,
            axes,
            prologue,
            input,
            out_space,
            dtype,
            epilogue,
            ..
        } = &k.kind
        else {
            unreachable!()
        };
        let in_dims = rlx_compile::program::concrete(in_space, b).expect("bound");
        let out_dims = rlx_compile::program::concrete(out_space, b).expect("bound");
        let rank = in_dims.len();
        let last_reduced = axes.contains(&(rank - 1));
        // Trailing kept axes stay innermost when the last axis is kept.
        let mut inner_start = rank;
        if !last_reduced {
            while inner_start > 0 && !axes.contains(&(inner_start - 1)) {
                inner_start -= 1;
            }
        }
        let mut perm = Vec::with_capacity(rank);
        let mut groups = Vec::with_capacity(rank);
        for a in 0..inner_start {
            if !axes.contains(&a) {
                perm.push(a);
                groups.push(0u8);
            }
        }
        for &a in axes {
            perm.push(a);
            groups.push(1);
        }
        for a in inner_start..rank {
            perm.push(a);
            groups.push(2);
        }
        let plans = plan_used(p, bd, k, prologue, &in_dims, b)?;
        let mut loads: Vec<LoadPlan> = plans
            .iter()
            .map(|pl| permute(pl, &in_dims, &perm))
            .collect();
        let pdims: Vec<usize> = perm.iter().map(|&a| in_dims[a]).collect();
        let prod = |g: u8| {
            pdims
                .iter()
                .zip(&groups)
                .filter(|(_, x)| **x == g)
                .map(|(d, _)| *d)
                .product::<usize>()
        };
        let (o, l, inner) = (prod(0), prod(1), prod(2));
        let (dims, _) = collapse(&pdims, &groups, &mut loads);
        let in_dt = prologue.nodes[*input as usize].dtype;
        let in_ty = Ty::of(in_dt).ok_or_else(|| IrError::new("cpu", "complex reduction"))?;
        let epilogue = EwPlan::with_stores(cx, k, epilogue, &k.stores, &out_dims)?;
        // Bytes the dense loads stream (the ones a tile prefetches for).
        let dense = loads
            .iter()
            .filter(|pl| pl.flat_dense && pl.table.is_none());
        let bytes = dense.map(|pl| pl.dtype.size_bytes()).sum::<usize>() * o * l * inner;
        let prologue =
            TileProg::build(prologue).ok_or_else(|| IrError::new("cpu", "complex prologue"))?;
        let computes = prologue
            .instrs
            .iter()
            .any(|i| !matches!(i.op, InstrOp::Load(_) | InstrOp::Const(_)));
        Ok(ReducePlan {
            op: *op,
            arg: *arg,
            prologue,
            computes,
            jit: std::sync::OnceLock::new(),
            shared: jit.clone(),
            input: *input,
            in_ty,
            loads,
            dims,
            o,
            l,
            inner,
            out_dt: *dtype,
            out_ty: Ty::of(*dtype).expect("real"),
            epilogue,
            prefetch: bytes > PREFETCH_BYTES,
        })
    }

    /// The reduced input's value on tile `t`: the prologue evaluated over it into `s`.
    ///
    /// # Safety
    /// `bases` are the buffers this plan was bound to (so every load plan is in bounds
    /// for a tile inside the space) and `t` lies inside the space with `t.len <= TILE`.
    unsafe fn prologue_value(
        &self,
        bases: &[*mut u8],
        t: &TilePos<'_>,
        s: &mut Scratch,
    ) -> Result<TileValue, String> {
        let env = TileEnv {
            loads: &self.loads,
            bases,
            core: None,
            direct: &[],
            prefetch: self.prefetch,
            spread: &[],
        };
        // SAFETY: forwarded contract.
        if unsafe { self.prologue_jit(&env, t, s) } {
            return Ok(s.slots[self.input as usize]);
        }
        // SAFETY: forwarded contract.
        unsafe { run_tile(&self.prologue, &env, t, s)? };
        Ok(s.slots[self.input as usize])
    }

    /// Evaluate the prologue on tile `t` as machine code (one pass in vector registers
    /// instead of one interpreted pass per instruction; the same bits), compiled on first
    /// use for the scalar pattern of the first tile's inputs; `false` when the tile is to
    /// be interpreted (nothing computed, JIT off, not compilable, another pattern).
    ///
    /// # Safety
    /// As [`Self::prologue_value`].
    unsafe fn prologue_jit(&self, env: &TileEnv<'_>, t: &TilePos<'_>, s: &mut Scratch) -> bool {
        if !self.computes || !crate::jit::enabled() || matches!(self.jit.get(), Some(None)) {
            return false;
        }
        let exports = [self.input as usize];
        // SAFETY: the caller's contract is run_tile's, which fetch_inputs shares.
        let Some(mut inputs) = (unsafe { fetch_inputs(&self.prologue, env, t, s, 1) }) else {
            let _ = self.jit.set(None);
            return false;
        };
        let code = self.jit.get_or_init(|| {
            self.shared
                .get_or_compile(&self.prologue, &exports, inputs.mask, false)
        });
        match code.as_deref().filter(|j| j.scalar_mask == inputs.mask) {
            Some(j) => {
                // SAFETY: run_tile's contract holds (caller) and `j` was compiled for this
                // `inputs.mask`; with no direct targets the export goes to a scratch
                // register that fetch_inputs sized.
                unsafe { run_tile_jit(&self.prologue, j, &mut inputs, env, t, s, None) };
                true
            }
            None => false,
        }
    }

    /// Fold flat prologue elements `f0..f0 + l·stride` (`stride` apart when `inner > 1`
    /// is handled by the caller) of one output into `a`.
    fn fold_run(
        &self,
        bases: &[*mut u8],
        s: &mut Scratch,
        f0: usize,
        len: usize,
        a: &mut Acc,
        first: &mut bool,
    ) -> Result<(), String> {
        let r = self.dims.len();
        let mut idx = vec![0usize; r];
        let mut flat = f0;
        let end = f0 + len;
        while flat < end {
            unravel_into(flat, &self.dims, &mut idx);
            let mut n = (end - flat).min(TILE);
            let in_row = if r == 0 {
                true
            } else {
                let last = r - 1;
                if self.dims[last] >= 64 {
                    n = n.min(self.dims[last] - idx[last]);
                    true
                } else {
                    idx[last] + n <= self.dims[last]
                }
            };
            let t = TilePos {
                flat,
                idx: &idx,
                dims: &self.dims,
                len: n,
                in_row,
            };
            // SAFETY: `bases` are the buffers this plan was bound to (ReducePlan::new over the
            // program's bound dims), so every load plan is in bounds for a tile inside the
            // space; the tile covers `flat..flat + n` with `n <= TILE` (`min(TILE)` above)
            // inside `f0..f0 + len`, which the callers keep inside the space.
            let v = unsafe { self.prologue_value(bases, &t, s)? };
            // SAFETY: `v` is the prologue's value for this tile: `n` elements of `in_ty`
            // in a scratch register or read in place from an input buffer.
            unsafe { fold_tile(self.op, self.in_ty, a, v, n, *first) };
            *first = false;
            flat += n;
        }
        Ok(())
    }

    pub(crate) fn run(&self, bases: &[*mut u8]) -> Result<(), String> {
        let nout = self.o * self.inner;
        if nout == 0 {
            return Ok(());
        }
        if self.l == 0 && self.arg {
            return Err(format!(
                "arg{} of an empty axis: there is no extremum; narrow or pad the axis to at least one element",
                self.op.name()
            ));
        }
        if self.l == 0 && matches!(self.op, ReduceOp::Max | ReduceOp::Min) {
            return Err(format!(
                "reduce_{} of an empty axis: max/min have no identity element; slice or pad the input so every group is non-empty",
                self.op.name()
            ));
        }
        if self.l == 0 && self.op == ReduceOp::Mean && self.in_ty == Ty::I64 {
            return Err(
                "reduce_mean of an empty axis: an integer mean of nothing has no value".into(),
            );
        }
        let bs = Bases(bases);
        let w = if self.out_ty == Ty::F32 { 4 } else { 8 };
        if self.inner == 1 {
            // One accumulator per output row; long rows of few outputs split into blocks.
            if self.o < 4 && self.l >= 4 * super::ew::CHUNK {
                return self.run_split(bases);
            }
            let per = (super::ew::CHUNK / self.l.max(1)).max(1);
            // Each chunk of output rows folds exactly as a row group's block does.
            par_for(chunks(self.o, per), |c| {
                let (o0, o1) = (c * per, ((c + 1) * per).min(self.o));
                self.run_rows_range(bs.get(), o0, o1)
            })
        } else if self.multi_row_ok() {
            self.run_rows(bases)
        } else {
            // Vector accumulators over chunks of the trailing kept axes. A single output
            // row (a bias gradient) is split so every core folds a part of it; each
            // output still folds its elements in the same order.
            let per_i = if self.o * chunks(self.inner, TILE) >= 2 || self.inner < 128 {
                TILE
            } else {
                self.inner.div_ceil(2).next_multiple_of(16)
            };
            let ni = chunks(self.inner, per_i);
            // Float sums fold whole rows into f64 lanes (the per-element `fold1`, in a
            // vectorizable loop).
            let lanes = matches!(self.op, ReduceOp::Sum | ReduceOp::Mean)
                && matches!(self.in_ty, Ty::F32 | Ty::F64);
            par_for(self.o * ni, |c| {
                let (o, ic) = (c / ni, c % ni);
                let (i0, i1) = (ic * per_i, ((ic + 1) * per_i).min(self.inner));
                let n = i1 - i0;
                let mut accs = vec![init(self.op, self.arg, self.in_ty); n];
                let mut sums = vec![0f64; if lanes { n } else { 0 }];
                with_scratch(|s| -> Result<(), String> {
                    let r = self.dims.len();
                    let mut idx = vec![0usize; r];
                    for rr in 0..self.l {
                        let flat = (o * self.l + rr) * self.inner + i0;
                        unravel_into(flat, &self.dims, &mut idx);
                        let in_row = r <= 1 || idx[r - 1] + n <= self.dims[r - 1];
                        let t = TilePos {
                            flat,
                            idx: &idx,
                            dims: &self.dims,
                            len: n,
                            in_row,
                        };
                        // SAFETY: bound plan and buffers as in fold_run; the tile covers
                        // `flat..flat + n` with `n = i1 - i0 <= per_i <= TILE` (per_i is TILE,
                        // or half of an `inner <= TILE` rounded up to 16) inside the space.
                        let v = unsafe { self.prologue_value(bs.get(), &t, s)? };
                        if lanes {
                            // SAFETY: `v` is the prologue's tile value of `n = sums.len()`
                            // elements of `in_ty`.
                            unsafe { add_row(&mut sums, v, self.in_ty) };
                            continue;
                        }
                        for (i, a) in accs.iter_mut().enumerate() {
                            fold1(
                                self.op,
                                self.in_ty,
                                a,
                                // SAFETY: `i < n = accs.len()` and `v` holds `n` elements of
                                // `in_ty`.
                                unsafe { elem(v, self.in_ty, i) },
                                rr == 0,
                            );
                        }
                    }
                    Ok(())
                })?;
                if lanes {
                    accs = sums.into_iter().map(Acc::F).collect();
                }
                let mut out = vec![0u64; n];
                for (i, a) in accs.into_iter().enumerate() {
                    // SAFETY: `out` has `n` u64 slots, `i < n = accs.len()`, `w <= 8`,
                    // 8-aligned.
                    unsafe {
                        put(
                            out.as_mut_ptr() as *mut u8,
                            w,
                            i,
                            finish(self.op, a, self.l, self.out_dt),
                        )
                    };
                }
                let f0 = o * self.inner + i0;
                let base = out.as_ptr() as *const u8;
                let core = |flat: usize, _n: usize| {
                    // SAFETY: run_range calls the core only for tiles inside `f0..f0 + n`, so
                    // `flat - f0 < n`, the length of `out`.
                    TileValue::Vector(unsafe { base.add((flat - f0) * w) })
                };
                self.epilogue.run_range(bs.get(), f0, f0 + n, Some(&core))
            })
        }
    }

    /// For a row group's stage (`exec::rowgroup`): whether to prefetch the next tile
    /// (a group's stages read rows another stage has just brought into cache: never).
    pub(crate) fn set_prefetch(&mut self, on: bool) {
        self.prefetch = on;
    }

    /// Output rows `o0..o1` of a last-axis reduction (`inner == 1`), then the epilogue
    /// over them: exactly what [`Self::run`] computes for those outputs (the same folds in
    /// the same order), for a row group running a block of rows at a time.
    pub(crate) fn run_rows_range(
        &self,
        bases: &[*mut u8],
        o0: usize,
        o1: usize,
    ) -> Result<(), String> {
        debug_assert_eq!(self.inner, 1, "a row reduction keeps no trailing axis");
        if o1 <= o0 {
            return Ok(());
        }
        let w = if self.out_ty == Ty::F32 { 4 } else { 8 };
        let short = self.l >= 1 && self.l <= TILE / 2;
        let mut out = vec![0u64; o1 - o0];
        with_scratch(|s| -> Result<(), String> {
            if short {
                return self.fold_short_rows(bases, s, o0, o1, &mut out);
            }
            for o in o0..o1 {
                let mut a = init(self.op, self.arg, self.in_ty);
                let mut first = true;
                self.fold_run(bases, s, o * self.l, self.l, &mut a, &mut first)?;
                let bits = finish(self.op, a, self.l, self.out_dt);
                // SAFETY: `out` has `o1 - o0` u64 slots and `o0 <= o < o1`; `w <= 8`.
                unsafe { put(out.as_mut_ptr() as *mut u8, w, o - o0, bits) };
            }
            Ok(())
        })?;
        let base = out.as_ptr() as *const u8;
        // SAFETY: run_range calls the core only for tiles inside `o0..o1`, so `flat - o0`
        // is below `out`'s length.
        let core = |flat: usize, _n: usize| TileValue::Vector(unsafe { base.add((flat - o0) * w) });
        self.epilogue.run_range(bases, o0, o1, Some(&core))
    }

    /// Output rows `o0..o1` of a last-axis reduction from their f64 `sums` (one per row,
    /// as [`Self::run_rows_range`] folds them), then the epilogue over them: for a row
    /// group whose stage folded the rows itself (the row programs of `exec::rowgroup`).
    pub(crate) fn finish_rows(
        &self,
        bases: &[*mut u8],
        o0: usize,
        o1: usize,
        sums: &[f64],
    ) -> Result<(), String> {
        debug_assert_eq!(sums.len(), o1 - o0);
        let w = if self.out_ty == Ty::F32 { 4 } else { 8 };
        let mut out = vec![0u64; o1 - o0];
        for (i, &v) in sums.iter().enumerate() {
            let bits = finish(self.op, Acc::F(v), self.l, self.out_dt);
            // SAFETY: `out` has `o1 - o0 = sums.len()` u64 slots, `i` is below it; `w <= 8`.
            unsafe { put(out.as_mut_ptr() as *mut u8, w, i, bits) };
        }
        let base = out.as_ptr() as *const u8;
        // SAFETY: run_range calls the core only for tiles inside `o0..o1`, so `flat - o0`
        // is below `out`'s length.
        let core = |flat: usize, _n: usize| TileValue::Vector(unsafe { base.add((flat - o0) * w) });
        self.epilogue.run_range(bases, o0, o1, Some(&core))
    }

    /// Whether this plan is a float sum or mean of every axis but the last (`o == 1`):
    /// a column reduction a row group can fold block by block.
    pub(crate) fn is_column_sum(&self) -> bool {
        self.o == 1
            && matches!(self.op, ReduceOp::Sum | ReduceOp::Mean)
            && matches!(self.in_ty, Ty::F32 | Ty::F64)
    }

    /// Add rows `r0..r1` of a column reduction's input (`o == 1`, `inner` columns) into
    /// `sums` (f64, one per column), row by row in order: a row group's partial for one
    /// block of rows. Rows up to `TILE / 2` long share a tile, as in [`Self::run_rows`].
    pub(crate) fn fold_cols(
        &self,
        bases: &[*mut u8],
        r0: usize,
        r1: usize,
        sums: &mut [f64],
    ) -> Result<(), String> {
        debug_assert!(self.is_column_sum() && sums.len() == self.inner);
        let inner = self.inner;
        let esize = self.in_ty.size();
        let per_tile = if inner <= TILE / 2 { TILE / inner } else { 1 };
        with_scratch(|s| -> Result<(), String> {
            let r = self.dims.len();
            let mut idx = vec![0usize; r];
            let mut rr = r0;
            while rr < r1 {
                let rows = per_tile.min(r1 - rr);
                // Rows longer than a tile go a tile-wide column chunk at a time.
                let span = if rows > 1 { rows * inner } else { inner };
                let mut i0 = 0;
                while i0 < span {
                    let n = (span - i0).min(TILE);
                    let flat = rr * inner + i0;
                    unravel_into(flat, &self.dims, &mut idx);
                    let t = TilePos {
                        flat,
                        idx: &idx,
                        dims: &self.dims,
                        len: n,
                        in_row: r <= 1 || idx[r - 1] + n <= self.dims[r - 1],
                    };
                    // SAFETY: bound plan and buffers as in fold_run; the tile covers
                    // `flat..flat + n` (`n <= TILE`) inside rows `rr..rr + rows` of the space.
                    let v = unsafe { self.prologue_value(bases, &t, s)? };
                    if rows > 1 {
                        for j in 0..rows {
                            let row = match v {
                                TileValue::Vector(p) => {
                                    // SAFETY: row `j < rows` of the tile value's `rows·inner`
                                    // elements.
                                    TileValue::Vector(unsafe { p.add(j * inner * esize) })
                                }
                                scal => scal,
                            };
                            // SAFETY: `row` holds `inner = sums.len()` elements of `in_ty`.
                            unsafe { add_row(sums, row, self.in_ty) };
                        }
                    } else {
                        // SAFETY: `v` holds the `n` elements of columns `i0..i0 + n`.
                        unsafe { add_row(&mut sums[i0..i0 + n], v, self.in_ty) };
                    }
                    i0 += n;
                }
                rr += rows;
            }
            Ok(())
        })
    }

    /// A column reduction's result from its column `sums` over every row, then its
    /// epilogue over the `[C]` result.
    pub(crate) fn finish_cols(&self, bases: &[*mut u8], sums: &[f64]) -> Result<(), String> {
        let w = if self.out_ty == Ty::F32 { 4 } else { 8 };
        let mut out = vec![0u64; self.inner];
        for (i, &v) in sums.iter().enumerate() {
            // SAFETY: `out` has `inner` u64 slots, `i < inner`, `w <= 8`, 8-aligned.
            unsafe {
                put(
                    out.as_mut_ptr() as *mut u8,
                    w,
                    i,
                    finish(self.op, Acc::F(v), self.l, self.out_dt),
                )
            };
        }
        let base = out.as_ptr() as *const u8;
        // SAFETY: run_range calls the core only for tiles inside `0..inner`, the length of
        // `out`.
        let core = |flat: usize, _n: usize| TileValue::Vector(unsafe { base.add(flat * w) });
        self.epilogue.run_range(bases, 0, self.inner, Some(&core))
    }

    /// Columns of a column reduction (`inner`).
    pub(crate) fn columns(&self) -> usize {
        self.inner
    }

    /// Outputs `o0..o1` of short rows (`l <= TILE / 2`, one output each) into `out`:
    /// `TILE / l` rows per tile, each row's segment folded by one [`fold_tile`] (as a
    /// row's own single tile would be), at a fraction of the tiles: a LayerNorm
    /// backward's row means over 256 elements paid the tile program's fixed cost per row.
    /// Any load may span rows: dense and uniform ones are read in place, the others
    /// (a per-row mean or rstd broadcast along the row, a strided view) are copied row
    /// segment by row segment ([`super::loads::fetch`]), the same elements a tile per
    /// row reads.
    fn fold_short_rows(
        &self,
        bases: &[*mut u8],
        s: &mut Scratch,
        o0: usize,
        o1: usize,
        out: &mut [u64],
    ) -> Result<(), String> {
        let (l, k) = (self.l, TILE / self.l);
        let w = if self.out_ty == Ty::F32 { 4 } else { 8 };
        let r = self.dims.len();
        let mut idx = vec![0usize; r];
        let mut o = o0;
        while o < o1 {
            let rows = k.min(o1 - o);
            let flat = o * l;
            unravel_into(flat, &self.dims, &mut idx);
            let t = TilePos {
                flat,
                idx: &idx,
                dims: &self.dims,
                len: rows * l,
                in_row: r <= 1 || idx[r - 1] + rows * l <= self.dims[r - 1],
            };
            // SAFETY: bound plan and buffers as in fold_run; the tile covers rows `o..o +
            // rows` (`flat..flat + rows·l`, `rows·l <= TILE`) inside the space.
            let v = unsafe { self.prologue_value(bases, &t, s)? };
            for j in 0..rows {
                let seg = match v {
                    TileValue::Vector(p) => {
                        // SAFETY: row `j < rows` of the tile value's `rows·l` elements.
                        TileValue::Vector(unsafe { p.add(j * l * self.in_ty.size()) })
                    }
                    scal => scal,
                };
                let mut a = init(self.op, self.arg, self.in_ty);
                // SAFETY: `seg` holds the `l` elements of row `o + j` of `in_ty`.
                unsafe { fold_tile(self.op, self.in_ty, &mut a, seg, l, true) };
                let bits = finish(self.op, a, l, self.out_dt);
                // SAFETY: `out` has `o1 - o0` u64 slots and `o0 <= o + j < o1`; `w <= 8`.
                unsafe { put(out.as_mut_ptr() as *mut u8, w, o + j - o0, bits) };
            }
            o += rows;
        }
        Ok(())
    }

    /// Whether [`Self::run_rows`] applies: a float sum or mean into few output rows
    /// (a bias gradient, `[B, T, d] → [d]`, or a LayerNorm gain's gradient, whose
    /// prologue reads the per-row mean and rstd) of short rows, over many rows.
    fn multi_row_ok(&self) -> bool {
        matches!(self.op, ReduceOp::Sum | ReduceOp::Mean)
            && matches!(self.in_ty, Ty::F32 | Ty::F64)
            && self.o < 4
            && self.inner <= TILE
            && self.l >= 2 * (TILE / self.inner)
    }

    /// Short rows folded several per tile: one tile of `TILE / inner` whole rows, each
    /// row added into f64 sums per output element (row by row, in order), instead of a
    /// tile per half-row (each paying the tile program's fixed cost on 128 elements:
    /// W11's bias gradients ran at a third of the bound). The rows are cut into fixed
    /// blocks (by size only, never by thread count) reduced in parallel; the blocks'
    /// sums combine in block order.
    fn run_rows(&self, bases: &[*mut u8]) -> Result<(), String> {
        let inner = self.inner;
        let k = TILE / inner;
        // About CHUNK elements per block, at most 64 blocks per output row.
        let nb = (self.l * inner / super::ew::CHUNK).clamp(1, 64);
        let per = self.l.div_ceil(nb).next_multiple_of(k);
        let nb = self.l.div_ceil(per);
        let bs = Bases(bases);
        let parts: Vec<std::sync::Mutex<Vec<f64>>> = (0..self.o * nb)
            .map(|_| std::sync::Mutex::new(Vec::new()))
            .collect();
        let esize = if self.in_ty == Ty::F32 { 4 } else { 8 };
        par_for(self.o * nb, |c| {
            let (o, b) = (c / nb, c % nb);
            let (r0, r1) = (b * per, ((b + 1) * per).min(self.l));
            let mut sums = vec![0f64; inner];
            with_scratch(|s| -> Result<(), String> {
                let r = self.dims.len();
                let mut idx = vec![0usize; r];
                let mut rr = r0;
                while rr < r1 {
                    let rows = k.min(r1 - rr);
                    let flat = (o * self.l + rr) * inner;
                    unravel_into(flat, &self.dims, &mut idx);
                    let t = TilePos {
                        flat,
                        idx: &idx,
                        dims: &self.dims,
                        len: rows * inner,
                        in_row: r <= 1 || idx[r - 1] + rows * inner <= self.dims[r - 1],
                    };
                    // SAFETY: bound plan and buffers as in fold_run; the tile covers
                    // `flat..flat + rows·inner` with `rows·inner <= k·inner <= TILE`, inside
                    // the space (rows `rr..rr + rows` of output row `o`).
                    let v = unsafe { self.prologue_value(bs.get(), &t, s)? };
                    for j in 0..rows {
                        let row = match v {
                            TileValue::Vector(p) => {
                                // SAFETY: row `j < rows` of the tile value's `rows·inner`
                                // elements.
                                TileValue::Vector(unsafe { p.add(j * inner * esize) })
                            }
                            scal => scal,
                        };
                        // SAFETY: `row` holds `inner = sums.len()` elements of `in_ty`.
                        unsafe { add_row(&mut sums, row, self.in_ty) };
                    }
                    rr += rows;
                }
                Ok(())
            })?;
            *parts[c].lock().unwrap() = sums;
            Ok(())
        })?;
        let w = if self.out_ty == Ty::F32 { 4 } else { 8 };
        for o in 0..self.o {
            let mut total = std::mem::take(&mut *parts[o * nb].lock().unwrap());
            for b in 1..nb {
                let p = parts[o * nb + b].lock().unwrap();
                for (t, &x) in total.iter_mut().zip(p.iter()) {
                    *t += x;
                }
            }
            let mut out = vec![0u64; inner];
            for (i, &v) in total.iter().enumerate() {
                // SAFETY: `out` has `inner` u64 slots, `i < inner`, `w <= 8`, 8-aligned.
                unsafe {
                    put(
                        out.as_mut_ptr() as *mut u8,
                        w,
                        i,
                        finish(self.op, Acc::F(v), self.l, self.out_dt),
                    )
                };
            }
            let f0 = o * inner;
            let base = out.as_ptr() as *const u8;
            // SAFETY: run_range calls the core only for tiles inside `f0..f0 + inner`, so
            // `flat - f0 < inner`, the length of `out`.
            let core =
                |flat: usize, _n: usize| TileValue::Vector(unsafe { base.add((flat - f0) * w) });
            self.epilogue
                .run_range(bases, f0, f0 + inner, Some(&core))?;
        }
        Ok(())
    }

    /// Few outputs over long rows: fixed-size blocks reduced in parallel, partials
    /// combined in block order.
    fn run_split(&self, bases: &[*mut u8]) -> Result<(), String> {
        let blk = super::ew::CHUNK;
        let nb = chunks(self.l, blk);
        let bs = Bases(bases);
        let parts: Vec<std::sync::Mutex<Option<Acc>>> = (0..self.o * nb)
            .map(|_| std::sync::Mutex::new(None))
            .collect();
        par_for(self.o * nb, |c| {
            let (o, k) = (c / nb, c % nb);
            let (l0, l1) = (k * blk, ((k + 1) * blk).min(self.l));
            let mut a = init(self.op, self.arg, self.in_ty);
            let mut first = true;
            with_scratch(|s| {
                self.fold_run(bs.get(), s, o * self.l + l0, l1 - l0, &mut a, &mut first)
            })?;
            *parts[c].lock().unwrap() = Some(a);
            Ok(())
        })?;
        let w = if self.out_ty == Ty::F32 { 4 } else { 8 };
        let mut out = vec![0u64; self.o];
        for o in 0..self.o {
            let mut a = parts[o * nb].lock().unwrap().take().unwrap();
            for k in 1..nb {
                combine(
                    self.op,
                    self.in_ty,
                    &mut a,
                    parts[o * nb + k].lock().unwrap().take().unwrap(),
                );
            }
            // SAFETY: `out` has `self.o` u64 slots and `o < self.o`; `w <= 8`, 8-aligned.
            unsafe {
                put(
                    out.as_mut_ptr() as *mut u8,
                    w,
                    o,
                    finish(self.op, a, self.l, self.out_dt),
                )
            };
        }
        let base = out.as_ptr() as *const u8;
        // SAFETY: run_range(0, self.o) calls the core only for `flat < self.o`, the length of
        // `out`.
        let core = |flat: usize, _n: usize| TileValue::Vector(unsafe { base.add(flat * w) });
        self.epilogue.run_range(bases, 0, self.o, Some(&core))
    }
}

/// Write compute bits as element `i` of a `w`-byte-element buffer.
///
/// # Safety
/// `p` must hold more than `i` elements of `w` bytes (`w` is 4 or 8), aligned for them.
unsafe fn put(p: *mut u8, w: usize, i: usize, bits: u64) {
    // SAFETY: the caller guarantees element `i` of width `w` lies inside `p`, aligned.
    unsafe {
        if w == 4 {
            *(p as *mut u32).add(i) = bits as u32;
        } else {
            *(p as *mut u64).add(i) = bits;
        }
    }
}
