//! Elementwise kernels: the expression evaluated tile by tile over the iteration
//! space (row segments when rows are long, flat runs across rows otherwise), with
//! chunks of tiles spread over the cores.

use super::copy::{Axis, Copies, Job, Src};
use super::loads::BindCtx;
use super::loads::plan_load;
use super::loads::unravel_into;
use super::loads::{LoadPlan, TilePos, collapse};
use super::par::{Bases, chunks, par_for};
use super::value::{TileValue, Ty, read_bits};
use super::vm::with_scratch;
use super::vm::{
    InstrOp, Scratch, TILE, TileEnv, TileInputs, TileProg, fetch_inputs_into, run_tile,
    run_tile_jit,
};
use rlx_compile::program::{EOp, Expr, Kernel, Program, Store};
use rlx_ir::{DType, DimBinding, IrError, IrResult};
use smallvec::SmallVec;

/// Tiles ahead of the one computed whose inputs are prefetched while it computes.
mod store;
#[cfg(test)]
mod tests;

use store::{STREAM_BYTES, store, store_fence};

const LOOKAHEAD: usize = 1;

/// Elements per parallel chunk (at most).
pub(crate) const CHUNK: usize = 1 << 16;

/// Tile instructions (element × instruction) worth a parallel chunk of their own: tens
/// of microseconds of work, far above what handing a chunk to another core costs.
const CHUNK_WORK: usize = 1 << 19;

/// Elements per chunk of an elementwise pass over `numel` elements, each costing
/// `instrs` tile instructions: about [`CHUNK_WORK`] instructions' worth (between 4 tiles
/// and [`CHUNK`] elements), but a multiple of the thread count of chunks of equal size
/// (whole tiles), so no core idles through the last chunk (7 chunks on 2 cores leave one
/// idle a seventh of the time). Elementwise results do not depend on the split.
pub(crate) fn ew_chunk(numel: usize, instrs: usize) -> usize {
    let per = (CHUNK_WORK / instrs.max(1)).clamp(4 * TILE, CHUNK);
    let n = chunks(numel, per);
    if n <= 1 {
        return numel.max(1);
    }
    let n = n.next_multiple_of(rayon::current_num_threads().max(1));
    numel.div_ceil(n).next_multiple_of(TILE)
}

/// Whether compiled tiles write in-place outputs directly (`RLX_EW_INPLACE_JIT=0`: through
/// the tile scratch and a copy, as before; for A/B measurements). Read once.
static INPLACE_JIT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

fn inplace_jit_on() -> bool {
    std::env::var_os("RLX_EW_INPLACE_JIT").is_none_or(|v| v != "0")
}

/// A bound elementwise kernel.
pub(crate) struct EwPlan {
    prog: TileProg,
    loads: Vec<LoadPlan>,
    dims: Vec<usize>,
    numel: usize,
    row_mode: bool,
    /// `(slot, buffer, dtype)` of every stored value (one for most kernels; several when
    /// the compiler merged results into this kernel).
    stores: Vec<(u32, usize, DType)>,
    /// A pure copy (one load stored as is): moved as bytes, for every dtype.
    copy: bool,
    /// Write the output with non-temporal stores (it is larger than the caches).
    stream: bool,
    /// Per store: its value may be computed straight into the output buffer (same
    /// dtype as computed, not streamed), saving the copy out of the tile scratch.
    direct_ok: Vec<bool>,
    /// `(buffer, bytes)` of every buffer the loads read: a store target overlapping
    /// one of them (an in-place plan) is written only after the whole tile is computed.
    load_spans: Vec<(usize, usize)>,
    /// Tile instructions per element that do work (constants cost nothing) plus the
    /// stores: the estimate behind the parallel split.
    work: usize,
    /// A copy through a strided view (a `narrow`, a transpose): the load's runs moved
    /// row by row ([`Copies`]) instead of element by element.
    strided_copy: Option<Copies>,
    /// The stored slots (each once): what a compiled tile program writes out.
    exports: Vec<usize>,
    /// The tile program compiled to machine code, looked up (or compiled) on the first
    /// tile (`None` inside: not compilable; see [`crate::jit`]).
    jit: std::sync::OnceLock<Option<std::sync::Arc<crate::jit::JitKernel>>>,
    /// The program's machine code for every binding of its dynamic dims: a plan bound
    /// for a new binding reuses what an earlier one compiled.
    shared: std::sync::Arc<crate::jit::JitCache>,
    /// Streaming plans: per export, the one f32 buffer it is stored to, when every
    /// export has one (the compiled code then writes them with non-temporal stores).
    nt_targets: Option<Vec<usize>>,
    /// The streaming variant of `jit`.
    jit_nt: std::sync::OnceLock<Option<std::sync::Arc<crate::jit::JitKernel>>>,
}

/// Whether a run of `dt` elements can be copied as is from compute type `ty`.
pub(crate) fn native(dt: DType, ty: Ty) -> bool {
    matches!(
        (dt, ty),
        (DType::F32, Ty::F32) | (DType::F64, Ty::F64) | (DType::I64, Ty::I64)
    )
}

impl EwPlan {
    pub(crate) fn new(
        cx: BindCtx<'_>,
        k: &Kernel,
        expr: &Expr,
        dims: &[usize],
    ) -> IrResult<EwPlan> {
        Self::with_stores(cx, k, expr, &k.stores, dims)
    }

    /// A plan for `expr` over `dims` storing node `store.0` into buffer `store.1`
    /// (also used for the epilogues of core kernels).
    pub(crate) fn with(
        cx: BindCtx<'_>,
        k: &Kernel,
        expr: &Expr,
        store: (u32, usize),
        dims: &[usize],
    ) -> IrResult<EwPlan> {
        let st = Store {
            value: store.0,
            buf: store.1,
        };
        Self::with_stores(cx, k, expr, &[st], dims)
    }

    /// A plan for `expr` over `dims` storing every entry of `stores` (each tile computes
    /// all values, then stores them).
    pub(crate) fn with_stores(
        cx: BindCtx<'_>,
        k: &Kernel,
        expr: &Expr,
        stores: &[Store],
        dims: &[usize],
    ) -> IrResult<EwPlan> {
        let BindCtx {
            program: p,
            buffer_dims: bd,
            binding: b,
            jit,
        } = cx;
        let mut loads = plan_used(p, bd, k, expr, dims, b)?;
        let store_dt = |st: &Store| p.buffers[st.buf].shape.dtype();
        let copy = stores.len() == 1
            && expr.nodes.len() == 1
            && matches!(expr.nodes[0].op, EOp::Load(_))
            && expr.nodes[0].dtype == store_dt(&stores[0]);
        let (expr, stores) = keep_stored(expr, stores);
        let prog = if copy {
            TileProg::default()
        } else {
            TileProg::build(&expr).ok_or_else(|| {
                IrError::new("cpu", "an elementwise kernel computes on complex values")
            })?
        };
        let numel = dims.iter().product();
        let (cdims, _) = collapse(dims, &vec![0; dims.len()], &mut loads);
        let row_mode = cdims.last().is_some_and(|&d| d >= 256);
        let widest = stores.iter().map(|s| store_dt(s).size_bytes()).max();
        let stream = numel * widest.unwrap_or(0) >= STREAM_BYTES;
        let direct_ok = stores
            .iter()
            .map(|st| {
                let dt = store_dt(st);
                !stream
                    && !copy
                    && expr.nodes[st.value as usize].dtype == dt
                    && Ty::of(dt).is_some_and(|ty| native(dt, ty))
            })
            .collect();
        let mut load_spans: Vec<(usize, usize)> = loads
            .iter()
            .map(|l| {
                let n: usize = bd[l.buf].iter().product();
                (l.buf, n * l.dtype.size_bytes())
            })
            .collect();
        load_spans.sort_unstable();
        load_spans.dedup();
        let consts = prog
            .instrs
            .iter()
            .filter(|i| matches!(i.op, InstrOp::Const(_)));
        let work = prog.instrs.len() - consts.count() + stores.len();
        let mut exports: Vec<usize> = Vec::new();
        for st in &stores {
            if !exports.contains(&(st.value as usize)) {
                exports.push(st.value as usize);
            }
        }
        let nt_targets = stream
            .then(|| {
                exports
                    .iter()
                    .map(|&x| {
                        let mut st = stores.iter().filter(|s| s.value as usize == x);
                        match (st.next(), st.next()) {
                            (Some(s), None) if store_dt(s) == DType::F32 => Some(s.buf),
                            _ => None,
                        }
                    })
                    .collect::<Option<Vec<usize>>>()
            })
            .flatten();
        let strided_copy = match loads.first() {
            Some(l) if copy && !l.flat_dense && l.table.is_none() => {
                Some(strided_copy_plan(l, &cdims, store_dt(&stores[0])))
            }
            _ => None,
        };
        Ok(EwPlan {
            strided_copy,
            exports,
            jit: std::sync::OnceLock::new(),
            shared: jit.clone(),
            nt_targets,
            jit_nt: std::sync::OnceLock::new(),
            stream,
            direct_ok,
            load_spans,
            work,
            prog,
            loads,
            dims: cdims,
            numel,
            row_mode,
            stores: stores
                .iter()
                .map(|s| (s.value, s.buf, store_dt(s)))
                .collect(),
            copy,
        })
    }

    pub(crate) fn run(&self, bases: &[*mut u8]) -> Result<(), String> {
        if self.numel == 0 {
            return Ok(());
        }
        if self.copy {
            return self.run_copy(bases);
        }
        let per = ew_chunk(self.numel, self.work);
        let bs = Bases(bases);
        par_for(chunks(self.numel, per), |c| {
            let (c0, c1) = (c * per, ((c + 1) * per).min(self.numel));
            self.run_range(bs.get(), c0, c1, None)
        })
    }

    /// Evaluate flat elements `c0..c1`, optionally with a core value per tile.
    pub(crate) fn run_range(
        &self,
        bases: &[*mut u8],
        c0: usize,
        c1: usize,
        core: Option<&dyn Fn(usize, usize) -> TileValue>,
    ) -> Result<(), String> {
        let r = self.dims.len();
        let last = r.saturating_sub(1);
        // Small buffers on the stack (heap only for unusually large kernels): a small
        // eager call runs one tile, so three allocations here were a tenth of its time.
        let mut idx = SmallVec::<[usize; 8]>::from_elem(0, r);
        let mut direct = SmallVec::<[*mut u8; 32]>::new();
        let mut spans = SmallVec::<[(usize, usize); 8]>::new();
        self.direct_targets(bases, &mut direct, &mut spans);
        // The compiled code reads every input of a lane before writing its outputs, so it
        // may also write outputs that lie exactly over a dense input (an optimizer state
        // donated and updated in place): a table for the compiled tiles only.
        let mut direct_jit = SmallVec::<[*mut u8; 32]>::new();
        if core.is_none() {
            self.inplace_targets(bases, &direct, &mut direct_jit);
        }
        let mut spread: Vec<(*const u8, usize)> = Vec::new();
        with_scratch(|s| {
            // A streamed single output: tiles end on 64-byte boundaries of it, so the
            // compiled code can write whole tiles with non-temporal stores.
            let skew = match &self.nt_targets {
                Some(b) if b.len() == 1 && crate::jit::enabled() => {
                    Some((bases[b[0]] as usize / 4) % 16)
                }
                _ => None,
            };
            let mut flat = c0;
            while flat < c1 {
                unravel_into(flat, &self.dims, &mut idx);
                let mut len = (c1 - flat).min(TILE);
                if let Some(a) = skew {
                    len = len.min(TILE - (a + flat) % 16);
                }
                let in_row = if r <= 1 {
                    true
                } else if self.row_mode {
                    len = len.min(self.dims[last] - idx[last]);
                    true
                } else {
                    idx[last] + len <= self.dims[last]
                };
                let t = TilePos {
                    flat,
                    idx: &idx,
                    dims: &self.dims,
                    len,
                    in_row,
                };
                let core = core.map(|f| f(flat, len));
                if let Some(TileValue::Vector(cp)) = core {
                    // The core (a product computed in place) must not be overwritten
                    // before the tile has read it.
                    drop_direct_over(&mut direct, &spans, cp as usize);
                }
                spread.clear();
                let ahead = flat + LOOKAHEAD * len;
                if self.stream && core.is_none() && ahead < c1 {
                    for l in &self.loads {
                        if l.flat_dense && l.table.is_none() {
                            let w = l.dtype.size_bytes();
                            let next = (l.offset + ahead) * w;
                            let bytes = len.min(c1 - ahead) * w;
                            // SAFETY: `l` is a dense load (offset + flat index) and `ahead < c1
                            // <= numel`, so element `offset + ahead` lies inside its buffer;
                            // the pointer is only prefetched.
                            spread.push((unsafe { bases[l.buf].add(next) } as *const u8, bytes));
                        }
                    }
                }
                let env = TileEnv {
                    spread: &spread,
                    loads: &self.loads,
                    bases,
                    core,
                    direct: &direct,
                    // An epilogue re-reads operands its core pass has just brought in.
                    prefetch: !self.stream || core.is_some(),
                };
                let env_jit = TileEnv {
                    spread: env.spread,
                    loads: env.loads,
                    bases: env.bases,
                    core: env.core,
                    direct: if direct_jit.is_empty() {
                        &direct
                    } else {
                        &direct_jit
                    },
                    prefetch: env.prefetch,
                };
                // SAFETY: `bases` are this kernel's bound buffers (the EwPlan was built for
                // them by `bind`), so every load plan is in bounds for tile `t` (flat..flat +
                // len inside the space) and `len <= TILE` (both run_tile's and jit_tile's
                // contract); each store writes elements `flat..flat + len` of an output buffer
                // holding the whole space.
                // The compiled code may write `direct_jit`'s in-place targets: it reads each
                // lane's inputs before writing its outputs (JitKernel::run's contract allows
                // same-lane overlap).
                unsafe {
                    if !self.jit_tile(&env_jit, &t, s) {
                        run_tile(&self.prog, &env, &t, s)?;
                    }
                    for &(slot, buf, dt) in &self.stores {
                        let ty = Ty::of(dt).expect("real store");
                        let v = s.slots[slot as usize];
                        store(v, ty, dt, bases[buf], flat, len, self.stream);
                    }
                }
                flat += len;
            }
            if self.stream {
                store_fence();
            }
            Ok(())
        })
    }

    /// Run tile `t` through the compiled program, compiled on first use for the scalar
    /// pattern of that tile's inputs; `false` when the tile is to be interpreted.
    ///
    /// # Safety
    /// As [`run_tile`].
    unsafe fn jit_tile(&self, env: &TileEnv<'_>, t: &TilePos<'_>, s: &mut Scratch) -> bool {
        if !crate::jit::enabled() || self.copy {
            return false;
        }
        // Known not to compile: interpret without fetching the inputs twice.
        let failed = |c: &std::sync::OnceLock<Option<std::sync::Arc<crate::jit::JitKernel>>>| {
            matches!(c.get(), Some(None))
        };
        if failed(&self.jit) && (self.nt_targets.is_none() || failed(&self.jit_nt)) {
            return false;
        }
        let mut inputs = TileInputs::new();
        // SAFETY: the caller upholds run_tile's contract, which fetch_inputs_into shares.
        if !unsafe { fetch_inputs_into(&self.prog, env, t, s, self.exports.len(), &mut inputs) } {
            let _ = (self.jit.set(None), self.jit_nt.set(None));
            return false;
        }
        // Streaming outputs written straight from the registers with non-temporal
        // stores, where every export's tile is 64-byte aligned.
        if let Some(bufs) = &self.nt_targets {
            let mut tg = [std::ptr::null_mut::<f32>(); 32];
            let aligned = bufs.len() <= 32
                && bufs.iter().enumerate().all(|(k, &b)| {
                    // SAFETY: an nt target is an f32 output buffer of the whole space (`numel`
                    // elements), so element `t.flat` (< numel) is in bounds.
                    tg[k] = unsafe { (env.bases[b] as *mut f32).add(t.flat) };
                    (tg[k] as usize).is_multiple_of(64)
                });
            if aligned && let Some(j) = self.compiled(true, inputs.mask) {
                let tg = Some(&tg[..bufs.len()]);
                // SAFETY: run_tile's contract holds (caller); `j` was compiled for this
                // `inputs.mask`; each target points at `t.len` f32s of an output buffer,
                // 64-byte aligned as the non-temporal stores require (checked above).
                unsafe { run_tile_jit(&self.prog, j, &mut inputs, env, t, s, tg) };
                return true;
            }
        }
        match self.compiled(false, inputs.mask) {
            Some(j) => {
                // SAFETY: run_tile's contract holds (caller) and `j` was compiled for this
                // `inputs.mask`.
                unsafe { run_tile_jit(&self.prog, j, &mut inputs, env, t, s, None) };
                true
            }
            // (A tile whose inputs differ in being scalar from the first one's.)
            None => false,
        }
    }

    /// The compiled program (the non-temporal-store variant with `nt`), taken from the
    /// program's cache (compiled there if no binding needed it before) on first use for
    /// inputs of scalar pattern `mask`; `None` if it does not compile or was compiled
    /// for another pattern.
    fn compiled(&self, nt: bool, mask: u64) -> Option<&crate::jit::JitKernel> {
        let cell = if nt { &self.jit_nt } else { &self.jit };
        cell.get_or_init(|| {
            self.shared
                .get_or_compile(&self.prog, &self.exports, mask, nt)
        })
        .as_deref()
        .filter(|j| j.scalar_mask == mask)
    }

    /// How this plan's tiles run, for `explain`: compiled to machine code (or will be on
    /// the first run), or interpreted and why.
    pub(crate) fn jit_note(&self) -> String {
        if self.copy || self.prog.instrs.is_empty() {
            return "a copy".into();
        }
        if !crate::jit::enabled() {
            return "interpreted (JIT off or no AVX-512)".into();
        }
        let compiled = [self.jit.get(), self.jit_nt.get()];
        if compiled.iter().any(|j| matches!(j, Some(Some(_)))) {
            return "machine code".into();
        }
        match crate::jit::unsupported(&self.prog) {
            Some(why) => format!("interpreted ({why} not compiled)"),
            None if compiled.iter().any(|j| matches!(j, Some(None))) => {
                "interpreted (too many registers)".into()
            }
            None => "machine code from its first run".into(),
        }
    }

    /// Elements of the kernel's space.
    pub(crate) fn numel(&self) -> usize {
        self.numel
    }

    /// Whether the kernel is a pure copy (run by [`EwPlan::run`] as bytes).
    pub(crate) fn is_copy(&self) -> bool {
        self.copy
    }

    /// Tile instructions per element (the work estimate behind the parallel split).
    pub(crate) fn work(&self) -> usize {
        self.work
    }

    /// Whether bytes `lo..hi` overlap a buffer this plan reads (with donated arguments,
    /// an output may share storage with an input).
    pub(crate) fn reads_overlap(&self, bases: &[*mut u8], lo: usize, hi: usize) -> bool {
        self.load_spans.iter().any(|&(lb, bytes)| {
            let l = bases[lb] as usize;
            l < hi && lo < l + bytes
        })
    }

    /// Whether a stored value may be the core value itself (the core, or a select or
    /// same-type cast that can hand it through): then the core must stay readable until
    /// the tile's last store.
    pub(crate) fn stores_pass_core(&self) -> bool {
        self.stores.iter().any(|&(slot, _, _)| {
            let mut ins = &self.prog.instrs[slot as usize];
            loop {
                match ins.op {
                    InstrOp::Core | InstrOp::Where => return true,
                    InstrOp::Cast(from) if from == ins.dtype => {
                        ins = &self.prog.instrs[ins.args[0] as usize];
                    }
                    _ => return false,
                }
            }
        })
    }

    /// The stores as `(buffer, dtype)`, in store order.
    pub(crate) fn store_targets(
        &self,
    ) -> impl DoubleEndedIterator<Item = (usize, DType)> + ExactSizeIterator + '_ {
        self.stores.iter().map(|&(_, b, dt)| (b, dt))
    }

    /// Into `direct` (given empty): per instruction slot, the base of the output buffer
    /// its value is computed into (null: the tile scratch). Only stores that no load of
    /// this kernel can alias. Into `spans` (given empty): `(base, bytes)` of each output
    /// so used.
    fn direct_targets(
        &self,
        bases: &[*mut u8],
        direct: &mut SmallVec<[*mut u8; 32]>,
        spans: &mut SmallVec<[(usize, usize); 8]>,
    ) {
        if !self.direct_ok.contains(&true) {
            // Nothing to place: `direct` stays empty (every slot reads as the scratch).
            return;
        }
        direct.resize(self.prog.instrs.len(), std::ptr::null_mut());
        for (&(slot, buf, dt), &ok) in self.stores.iter().zip(&self.direct_ok) {
            let (lo, hi) = (
                bases[buf] as usize,
                bases[buf] as usize + self.numel * dt.size_bytes(),
            );
            let clear = !self.reads_overlap(bases, lo, hi);
            if ok && clear {
                direct[slot as usize] = bases[buf];
                spans.push((lo, hi - lo));
                // A stored value that other nodes also read is stored through a
                // same-dtype cast (see `keep_stored`), which returns its operand: that
                // operand is then computed into the output (where later instructions
                // cannot overwrite it) and read back from there.
                let ins = &self.prog.instrs[slot as usize];
                if let InstrOp::Cast(from) = ins.op
                    && from == ins.dtype
                {
                    let a = ins.args[0] as usize;
                    if direct[a].is_null() {
                        direct[a] = bases[buf];
                    }
                }
            }
        }
    }

    /// Into `out` (given empty): `direct` plus, for every store whose output lies
    /// exactly over a dense, unoffset load of the same dtype and overlaps no other load
    /// (an in-place update), that output as its direct target; left empty when no store
    /// is such. Only for compiled tiles: the interpreter may write a value before a
    /// later instruction reads the input it overwrites.
    fn inplace_targets(
        &self,
        bases: &[*mut u8],
        direct: &[*mut u8],
        out: &mut SmallVec<[*mut u8; 32]>,
    ) {
        if self.stream || INPLACE_JIT.get_or_init(inplace_jit_on) == &false {
            return;
        }
        for (&(slot, buf, dt), &ok) in self.stores.iter().zip(&self.direct_ok) {
            let slot = slot as usize;
            if !ok || direct.get(slot).is_some_and(|d| !d.is_null()) {
                continue;
            }
            let (lo, hi) = (
                bases[buf] as usize,
                bases[buf] as usize + self.numel * dt.size_bytes(),
            );
            let mut exact = false;
            let mut other = false;
            for l in &self.loads {
                let l0 = bases[l.buf] as usize;
                let l1 = l0 + self.load_bytes(l);
                if !(l0 < hi && lo < l1) {
                    continue;
                }
                let same = l0 == lo
                    && l1 == hi
                    && l.flat_dense
                    && l.table.is_none()
                    && l.offset == 0
                    && l.dtype == dt;
                exact |= same;
                other |= !same;
            }
            if exact && !other {
                if out.is_empty() {
                    out.extend_from_slice(direct);
                    out.resize(self.prog.instrs.len(), std::ptr::null_mut());
                }
                out[slot] = bases[buf];
            }
        }
    }

    /// Bytes of the buffer load `l` reads (its whole buffer, as `load_spans` counts it).
    fn load_bytes(&self, l: &LoadPlan) -> usize {
        self.load_spans
            .iter()
            .find(|&&(b, _)| b == l.buf)
            .map_or(0, |&(_, bytes)| bytes)
    }

    fn run_copy(&self, bases: &[*mut u8]) -> Result<(), String> {
        let p = &self.loads[0];
        let (_, store_buf, store_dt) = self.stores[0];
        let w = store_dt.size_bytes();
        let src = bases[p.buf] as *const u8;
        let dst = bases[store_buf];
        if let Some(c) = &self.strided_copy {
            let out = (dst as usize, dst as usize + self.numel * w);
            if !self.reads_overlap(bases, out.0, out.1) {
                // SAFETY: the plan's strides and offset were bound for the load's buffer
                // (every element of the view lies inside it) and the destination is the
                // store buffer of `numel` dense elements; the two do not overlap (checked
                // above); each destination element is one job element, written once.
                unsafe { c.run(bases, dst) };
                return Ok(());
            }
        }
        if p.flat_dense && p.table.is_none() {
            // SAFETY: the load is dense over `numel` elements of the same dtype as the store (a
            // copy plan requires equal dtypes), so `offset·w .. (offset + numel)·w` lies inside
            // the source and `numel·w` bytes inside the output; std::ptr::copy allows an in-
            // place overlap.
            unsafe { std::ptr::copy(src.add(p.offset * w), dst, self.numel * w) };
            return Ok(());
        }
        let nchunks = chunks(self.numel, CHUNK);
        let (s, d) = (
            super::par::SendPtr(src as *mut u8),
            super::par::SendPtr(dst),
        );
        par_for(nchunks, |c| {
            let (c0, c1) = (c * CHUNK, ((c + 1) * CHUNK).min(self.numel));
            let mut idx = vec![0usize; self.dims.len()];
            for f in c0..c1 {
                let off = p.element_offset(f, &self.dims, &mut idx);
                // SAFETY: `off` comes from the bound plan (a table entry or offset + Σ
                // idx·stride for an index inside the space), an in-bounds element of the
                // source; `f < numel` is an element of the output. The two are different
                // buffers: in-place pairs (memplan, donation) read through identity views,
                // which are dense and take the ptr::copy branch above. Chunks write disjoint
                // `f` ranges.
                unsafe {
                    std::ptr::copy_nonoverlapping(s.get().add(off * w), d.get().add(f * w), w)
                };
            }
            Ok(())
        })
    }
}

/// The row-by-row copy of strided load `l` over the (collapsed) space `dims` into a
/// dense output of `dt` elements.
fn strided_copy_plan(l: &LoadPlan, dims: &[usize], dt: DType) -> Copies {
    let dst = super::copy::dense_strides(dims);
    let axes = dims
        .iter()
        .zip(&l.strides)
        .zip(dst)
        .map(|((&n, &src), dst)| Axis { n, src, dst })
        .collect();
    let job = Job {
        src: Src::Buf {
            buf: l.buf,
            offset: l.offset,
        },
        dst_off: 0,
        axes,
    };
    Copies::new(vec![job], dt.size_bytes())
}

/// Stop computing into the direct store target (of `spans`: base, bytes) that contains
/// address `p`, if any.
fn drop_direct_over(direct: &mut [*mut u8], spans: &[(usize, usize)], p: usize) {
    for &(base, bytes) in spans {
        if base <= p && p < base + bytes {
            for d in direct.iter_mut().filter(|d| **d as usize == base) {
                *d = std::ptr::null_mut();
            }
        }
    }
}

/// `expr` and `stores` such that every stored value lives until the end of the tile:
/// a stored value that other nodes also read (a result merged into this kernel and
/// used by later ones) is stored through a same-dtype cast, which the tile compiler
/// keeps (with the register it aliases) alive to the end.
fn keep_stored(expr: &Expr, stores: &[Store]) -> (Expr, Vec<Store>) {
    let mut read = vec![false; expr.nodes.len()];
    for n in &expr.nodes {
        for &a in &n.args {
            read[a as usize] = true;
        }
    }
    if !stores.iter().any(|s| read[s.value as usize]) {
        return (expr.clone(), stores.to_vec());
    }
    let mut e = expr.clone();
    let stores = stores
        .iter()
        .map(|s| {
            if !read[s.value as usize] {
                return *s;
            }
            let dt = e.nodes[s.value as usize].dtype;
            Store {
                value: e.push(EOp::Cast, vec![s.value], dt),
                buf: s.buf,
            }
        })
        .collect();
    (e, stores)
}

/// Plans for the loads `expr` uses, over `dims`; the kernel's other loads (used by
/// another of its expressions) get inert placeholders.
pub(crate) fn plan_used(
    p: &Program,
    bd: &[Vec<usize>],
    k: &Kernel,
    expr: &Expr,
    dims: &[usize],
    b: &DimBinding,
) -> IrResult<Vec<LoadPlan>> {
    let mut used = vec![false; k.loads.len()];
    for n in &expr.nodes {
        if let EOp::Load(l) = n.op {
            used[l] = true;
        }
    }
    k.loads
        .iter()
        .zip(used)
        .map(|(l, u)| {
            if u {
                plan_load(p, bd, l, dims, b)
            } else {
                Ok(LoadPlan::strided(
                    l.buf,
                    p.buffers[l.buf].shape.dtype(),
                    dims,
                    vec![0; dims.len()],
                    0,
                ))
            }
        })
        .collect()
}

/// Read element `i` of a tile value as compute bits.
///
/// # Safety
/// A vector value must hold more than `i` elements of `ty`.
#[inline(always)]
pub(crate) unsafe fn elem(v: TileValue, ty: Ty, i: usize) -> u64 {
    // SAFETY: the caller guarantees a vector value holds more than `i` elements of `ty` (which
    // fixes the element width read).
    unsafe {
        match v {
            TileValue::Scalar(b) => b,
            TileValue::Vector(p) => match ty {
                Ty::F32 => *(p as *const u32).add(i) as u64,
                _ => *(p as *const u64).add(i),
            },
        }
    }
}

/// # Safety
/// As [`read_bits`]: `p` must hold at least `i + 1` aligned elements of `dt`.
#[allow(dead_code)]
pub(crate) unsafe fn read(dt: DType, p: *const u8, i: usize) -> u64 {
    // SAFETY: this function's contract is read_bits's.
    unsafe { read_bits(dt, p, i) }
}
