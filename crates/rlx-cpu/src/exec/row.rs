//! Row kernels (softmax, log-softmax, layer norm, RMS norm over the last axis): per
//! row, the prologue fills an L1-resident row buffer, the statistics take one or two
//! passes over it, the result is written once (straight into the output when there
//! is no epilogue). Rows are spread over the cores.

use super::ew::{EwPlan, elem, plan_used};
use super::loads::BindCtx;
use super::loads::unravel_into;
use super::loads::{LoadPlan, TilePos, collapse};
use super::par::{Bases, SendPtr, chunks, par_for};
use super::value::{TileValue, Ty, read_bits};
use super::vm::with_scratch;
use super::vm::{TILE, TileEnv, TileProg, run_tile};
use crate::math;
use rlx_compile::program::{Kernel, KernelKind, RowOp};
use rlx_ir::{Activation, DType, IrError, IrResult};

mod onehot;
use onehot::OneHot;

/// A bound row kernel.
pub(crate) struct RowPlan {
    op: RowOp,
    prologue: TileProg,
    input: u32,
    in_ty: Ty,
    loads: Vec<LoadPlan>,
    dims: Vec<usize>,
    rows: usize,
    c: usize,
    params: Option<(LoadPlan, LoadPlan)>,
    out_dt: DType,
    epilogue: EwPlan,
    /// The epilogue only stores the result into an f32 buffer: write rows in place.
    direct: Option<usize>,
    /// The prologue is one dense f32 load: rows are read where they are, not copied.
    in_place: Option<LoadPlan>,
    /// The prologue is one dense bf16/f16 load cast to f32 (a half model's norm input):
    /// rows are widened straight from the buffer, a tile at a time.
    in_half: Option<LoadPlan>,
    /// The epilogue only casts the f32 result to bf16/f16 and stores it: rows are
    /// narrowed straight into this buffer (same rounding as the epilogue's store).
    direct_half: Option<(usize, DType)>,
    /// The epilogue is a softmax cross-entropy's backward, `(p − onehot(label))·s`:
    /// computed on the softmax rows in place in the output (see [`OneHot`]).
    /// (Boxed: most row kernels have none, and a bound kernel's size is its largest kind's.)
    onehot: Option<Box<OneHot>>,
    /// The store buffer, which a one-hot epilogue writes rows straight into.
    onehot_buf: usize,
}

impl RowPlan {
    pub(crate) fn new(cx: BindCtx<'_>, k: &Kernel) -> IrResult<RowPlan> {
        let BindCtx {
            program: p,
            buffer_dims: bd,
            binding: b,
            ..
        } = cx;
        let KernelKind::Row {
            op,
            space,
            prologue,
            input,
            params,
            dtype,
            epilogue,
        } = &k.kind
        else {
            unreachable!()
        };
        let dims = rlx_compile::program::concrete(space, b).expect("bound");
        let c = *dims.last().unwrap_or(&1);
        let rows = dims.iter().product::<usize>().checked_div(c).unwrap_or(0);
        let mut loads = plan_used(p, bd, k, prologue, &dims, b)?;
        let mut groups = vec![0u8; dims.len()];
        if let Some(g) = groups.last_mut() {
            *g = 1;
        }
        // A size-1 row axis would be dropped by collapsing: keep the dims as they are.
        let cdims = if c == 1 {
            dims.clone()
        } else {
            collapse(&dims, &groups, &mut loads).0
        };
        let params = match params {
            Some((g, bb)) => Some((
                super::loads::plan_load(p, bd, &k.loads[*g], &[c], b)?,
                super::loads::plan_load(p, bd, &k.loads[*bb], &[c], b)?,
            )),
            None => None,
        };
        let st = k.stores[0];
        let ep = EwPlan::with(cx, k, epilogue, (st.value, st.buf), &dims)?;
        let trivial = epilogue.nodes.len() == 1
            && p.buffers[st.buf].shape.dtype() == DType::F32
            && *dtype == DType::F32;
        let in_dt = prologue.nodes[*input as usize].dtype;
        let in_place = match &prologue.nodes[..] {
            [n] if n.dtype == DType::F32 => match n.op {
                rlx_compile::program::EOp::Load(i) => loads
                    .get(i)
                    .filter(|l| l.dtype == DType::F32 && l.flat_dense && l.table.is_none())
                    .cloned(),
                _ => None,
            },
            _ => None,
        };
        let half = |dt: DType| matches!(dt, DType::BF16 | DType::F16);
        let in_half = match &prologue.nodes[..] {
            [l, c]
                if *input == 1
                    && half(l.dtype)
                    && c.dtype == DType::F32
                    && matches!(c.op, rlx_compile::program::EOp::Cast)
                    && c.args == [0] =>
            {
                match l.op {
                    rlx_compile::program::EOp::Load(i) => loads
                        .get(i)
                        .filter(|p| p.dtype == l.dtype && p.flat_dense && p.table.is_none())
                        .cloned(),
                    _ => None,
                }
            }
            _ => None,
        };
        let store_dt = p.buffers[st.buf].shape.dtype();
        let direct_half = match &epilogue.nodes[..] {
            [core, c]
                if k.stores.len() == 1
                    && st.value == 1
                    && *dtype == DType::F32
                    && matches!(core.op, rlx_compile::program::EOp::Core)
                    && matches!(c.op, rlx_compile::program::EOp::Cast)
                    && c.args == [0]
                    && half(c.dtype)
                    && store_dt == c.dtype =>
            {
                Some((st.buf, store_dt))
            }
            _ => None,
        }
        // Rows are read a group at a time before the group is written: never narrow into
        // the buffer the rows come from.
        .filter(|(buf, _)| in_half.as_ref().is_none_or(|l| l.buf != *buf));
        let onehot: Option<Box<OneHot>> = match (op, k.stores.len()) {
            (RowOp::Softmax, 1) if *dtype == DType::F32 && store_dt == DType::F32 => {
                OneHot::detect(p, bd, k, epilogue, &dims, b)?.map(Box::new)
            }
            _ => None,
        };
        Ok(RowPlan {
            onehot_buf: st.buf,
            onehot,
            in_place,
            in_half,
            direct_half,
            op: *op,
            prologue: TileProg::build(prologue)
                .ok_or_else(|| IrError::new("cpu", "complex row input"))?,
            input: *input,
            in_ty: Ty::of(in_dt).expect("float"),
            loads,
            dims: cdims,
            rows,
            c,
            params,
            out_dt: *dtype,
            epilogue: ep,
            direct: trivial.then_some(st.buf),
        })
    }

    /// Row 0 of the input, to read rows where they lie: when the prologue is a plain
    /// dense f32 load and the result is not written over the input.
    fn in_place_rows(&self, bases: &[*mut u8], direct: Option<usize>) -> Option<*const f32> {
        let l = self.in_place.as_ref()?;
        // SAFETY: `in_place` is a dense f32 load of this plan's bound input, so element
        // `l.offset` (its first) lies inside the buffer `bases[l.buf]`.
        let start = unsafe { (bases[l.buf] as *const f32).add(l.offset) };
        let bytes = self.rows * self.c * 4;
        if let Some(buf) = direct {
            let (a, out) = (start as usize, bases[buf] as usize);
            if a < out + bytes && out < a + bytes {
                return None;
            }
        }
        Some(start)
    }

    /// Fill `x32` (f32 inputs) or `x64` (else) with rows `r0..r0 + nrows` of the
    /// prologue, one tile per [`TILE`] elements (several short rows share a tile).
    fn load_rows(
        &self,
        bases: &[*mut u8],
        s: &mut super::vm::Scratch,
        (r0, nrows): (usize, usize),
        x32: &mut [f32],
        x64: &mut [f64],
    ) -> Result<(), String> {
        let rank = self.dims.len();
        let last = rank.saturating_sub(1);
        let mut idx = vec![0usize; rank];
        let (f0, total) = (r0 * self.c, nrows * self.c);
        let mut j = 0;
        while j < total {
            let flat = f0 + j;
            unravel_into(flat, &self.dims, &mut idx);
            let n = (total - j).min(TILE);
            let in_row = rank <= 1 || idx[last] + n <= self.dims[last];
            let t = TilePos {
                flat,
                idx: &idx,
                dims: &self.dims,
                len: n,
                in_row,
            };
            let env = TileEnv {
                loads: &self.loads,
                bases,
                core: None,
                direct: &[],
                prefetch: true,
                spread: &[],
            };
            // SAFETY: `bases` are the buffers this plan was bound to (RowPlan::new), so the
            // prologue's load plans are in bounds for a tile inside the space; the tile covers
            // `flat..flat + n`, `n <= TILE`, within rows `r0..r0 + nrows` of the space.
            unsafe { run_tile(&self.prologue, &env, &t, s)? };
            let v = s.slots[self.input as usize];
            match (self.in_ty, v) {
                (Ty::F32, TileValue::Vector(p)) => x32[j..j + n]
                    // SAFETY: the prologue's value for this tile is `n` f32s (in_ty is F32) in
                    // a scratch register or read in place, not written while copied.
                    .copy_from_slice(unsafe { std::slice::from_raw_parts(p as *const f32, n) }),
                (Ty::F32, TileValue::Scalar(b)) => x32[j..j + n].fill(f32::from_bits(b as u32)),
                _ => {
                    for i in 0..n {
                        // SAFETY: `i < n` and the tile value holds `n` 8-byte elements (in_ty
                        // is F64 here).
                        x64[j + i] = f64::from_bits(unsafe { elem(v, Ty::F64, i) });
                    }
                }
            }
            j += n;
        }
        Ok(())
    }

    pub(crate) fn run(&self, bases: &[*mut u8]) -> Result<(), String> {
        if self.rows == 0 || self.c == 0 {
            return Ok(());
        }
        let (gamma, beta) = match &self.params {
            Some((g, b)) => (Some(param(g, bases, self.c)), Some(param(b, bases, self.c))),
            None => (None, None),
        };
        let to32 = |v: &Option<Vec<f64>>| {
            v.as_ref()
                .map(|v| v.iter().map(|&x| x as f32).collect::<Vec<f32>>())
        };
        let (g32, b32) = (to32(&gamma), to32(&beta));
        // The one-hot epilogue applies when its class iota holds 0..C (checked per run
        // when it is not a baked constant); its rows are then written straight into the
        // output, like an epilogue-free row op's.
        // SAFETY: `bases` are the buffers this plan was bound to.
        let onehot = self
            .onehot
            .as_ref()
            .filter(|o| unsafe { o.iota_holds(bases) });
        let direct = self.direct.or(onehot.map(|_| self.onehot_buf));
        let per = (super::ew::CHUNK / self.c).max(1);
        // Short rows are handled a tile's worth at a time: one prologue tile and one
        // epilogue pass per group instead of per row (a row of 10 logits would
        // otherwise pay the whole per-tile dispatch for 10 elements).
        let group = (TILE / self.c).max(1);
        let c = self.c;
        let bs = Bases(bases);
        let f32_path = self.in_ty == Ty::F32;
        let src = self
            .in_place_rows(bases, direct)
            .map(|p| SendPtr(p as *mut u8));
        par_for(chunks(self.rows, per), |ch| {
            let (r0, r1) = (ch * per, ((ch + 1) * per).min(self.rows));
            let span = group.min(r1 - r0) * c;
            let mut x32 = vec![0f32; if f32_path && src.is_none() { span } else { 0 }];
            let mut x64 = vec![0f64; if f32_path { 0 } else { span }];
            let mut y32 = vec![
                0f32;
                if f32_path && direct.is_none() {
                    span
                } else {
                    0
                }
            ];
            let mut y64 = vec![0f64; if f32_path { 0 } else { span }];
            let mut r = r0;
            while r < r1 {
                let k = group.min(r1 - r);
                let m = k * c;
                let x32: &[f32] = match src {
                    // SAFETY: `p` is row 0 of a dense f32 input holding `rows·c` floats
                    // (in_place_rows), so rows r..r + k (`m` floats) lie inside it; nothing
                    // writes it during the kernel (in_place_rows refused an overlap with
                    // the direct output).
                    Some(p) => unsafe {
                        std::slice::from_raw_parts((p.get() as *const f32).add(r * c), m)
                    },
                    None => {
                        match &self.in_half {
                            // SAFETY: the load is a dense bf16/f16 view of the whole
                            // `rows × c` space from element `offset` (checked in new), so rows
                            // r..r + k (`m` elements) lie inside its buffer; x32 holds `span
                            // >= m` floats.
                            Some(l) => unsafe {
                                super::value::widen_halves(
                                    l.dtype,
                                    (bs.get()[l.buf] as *const u8).add((l.offset + r * c) * 2),
                                    x32.as_mut_ptr(),
                                    m,
                                )
                            },
                            None => with_scratch(|s| {
                                self.load_rows(bs.get(), s, (r, k), &mut x32, &mut x64)
                            })?,
                        }
                        &x32[..x32.len().min(m)]
                    }
                };
                let (core_ptr, w): (*const u8, usize) = if f32_path {
                    let y: &mut [f32] = match direct {
                        // SAFETY: the direct output is an f32 buffer of the whole `rows × c`
                        // space, so rows `r..r + k` (`m` floats) lie inside it; each chunk
                        // writes only its own rows, and the input rows read above do not
                        // overlap it (in_place_rows checks).
                        Some(buf) => unsafe {
                            std::slice::from_raw_parts_mut(
                                (bs.get()[buf] as *mut f32).add(r * c),
                                m,
                            )
                        },
                        None => &mut y32[..m],
                    };
                    for (x, y) in x32.chunks_exact(c).zip(y.chunks_exact_mut(c)) {
                        row_f32(self.op, x, y, g32.as_deref(), b32.as_deref());
                    }
                    if let Some(oh) = onehot {
                        // SAFETY: `bases` are this plan's bound buffers (OneHot::detect bound
                        // its loads over the same space); rows r..r + k are inside it.
                        unsafe { oh.apply(bs.get(), r, y) };
                    }
                    if direct.is_some() {
                        r += k;
                        continue;
                    }
                    if let Some((buf, dt)) = self.direct_half {
                        // SAFETY: the store buffer holds the whole `rows × c` space densely
                        // in `dt` (one store of the kernel's space), so rows r..r + k lie
                        // inside it; each chunk writes only its own rows, and the input
                        // rows were already read into x32 (no overlap matters).
                        unsafe {
                            super::value::narrow_halves(
                                dt,
                                y32.as_ptr(),
                                (bs.get()[buf]).add(r * c * 2),
                                m,
                            )
                        };
                        r += k;
                        continue;
                    }
                    if matches!(self.out_dt, DType::F16 | DType::BF16) {
                        for v in y32[..m].iter_mut() {
                            *v = super::value::round_f32(self.out_dt, *v);
                        }
                    }
                    (y32.as_ptr() as *const u8, 4)
                } else {
                    for (x, y) in x64[..m].chunks_exact(c).zip(y64[..m].chunks_exact_mut(c)) {
                        row_f64(self.op, x, y, gamma.as_deref(), beta.as_deref());
                    }
                    (y64.as_ptr() as *const u8, 8)
                };
                let f0 = r * c;
                let core =
                    // SAFETY: run_range calls the core only for tiles inside `f0..f0 + m`, and
                    // `y32`/`y64` hold at least `m` elements of `w` bytes.
                    |flat: usize, _n: usize| TileValue::Vector(unsafe { core_ptr.add((flat - f0) * w) });
                self.epilogue.run_range(bs.get(), f0, f0 + m, Some(&core))?;
                r += k;
            }
            Ok(())
        })
    }
}

/// A `[C]` parameter as f64 values.
fn param(p: &LoadPlan, bases: &[*mut u8], c: usize) -> Vec<f64> {
    (0..c)
        .map(|j| {
            let off = match &p.table {
                Some(t) => t[j],
                None => {
                    (p.offset as isize + j as isize * p.strides.first().copied().unwrap_or(0))
                        as usize
                }
            };
            // SAFETY: `j < c` and the parameter's plan was bound over `[c]` (plan_load), so
            // `off` is an element of its buffer.
            let bits = unsafe { read_bits(p.dtype, bases[p.buf], off) };
            match Ty::of(p.dtype).unwrap() {
                Ty::F32 => f32::from_bits(bits as u32) as f64,
                Ty::F64 => f64::from_bits(bits),
                Ty::I64 => bits as i64 as f64,
            }
        })
        .collect()
}

/// Maximum with NaN propagation (NaN if any element is NaN; −∞ for an empty row).
#[inline(always)]
fn nan_max32(x: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; 8];
    let mut nan = false;
    let mut it = x.chunks_exact(8);
    for c in &mut it {
        for k in 0..8 {
            m[k] = if c[k] > m[k] { c[k] } else { m[k] };
            nan |= c[k].is_nan();
        }
    }
    let mut r = m.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for &v in it.remainder() {
        nan |= v.is_nan();
        if v > r {
            r = v;
        }
    }
    if nan { f32::NAN } else { r }
}

/// Σ x in f64 via eight f32 lanes per 1024-element block.
#[inline(always)]
fn sum32(x: &[f32]) -> f64 {
    let mut total = 0f64;
    for blk in x.chunks(1024) {
        let mut lanes = [0f32; 8];
        let mut it = blk.chunks_exact(8);
        for c in &mut it {
            // A fixed-size array: no bounds checks, so the eight lanes are one vector.
            let c: &[f32; 8] = c.try_into().expect("chunks of 8");
            for k in 0..8 {
                lanes[k] += c[k];
            }
        }
        // Through a black box: widened lane by lane here, the lanes were split over
        // registers of 2, 4 and 1 floats inside the loop (LLVM's SLP vectorizer).
        total += std::hint::black_box(lanes)
            .iter()
            .map(|&v| v as f64)
            .sum::<f64>();
        total += it.remainder().iter().map(|&v| v as f64).sum::<f64>();
    }
    if !total.is_finite() {
        // An f32 lane overflowed (finite values near f32::MAX): redo it in f64, which
        // keeps a row of infinities or NaNs what it is.
        return x.iter().map(|&v| v as f64).sum();
    }
    total
}

/// Lanes of a norm's row statistics: four 8-float vectors (two of AVX-512), so the
/// additions of a row of 256 form chains of 8, not of 32 (one 8-lane accumulator made a
/// LayerNorm row wait on 64 dependent additions for its two sums).
const LANES: usize = 32;

/// The 32 lanes added as a fixed tree (halves lane by lane), the same on every ISA.
#[inline(always)]
fn tree64(l: [f64; LANES]) -> f64 {
    let mut h = [0f64; 16];
    for k in 0..16 {
        h[k] = l[k] + l[k + 16];
    }
    let mut q = [0f64; 8];
    for k in 0..8 {
        q[k] = h[k] + h[k + 8];
    }
    ((q[0] + q[4]) + (q[2] + q[6])) + ((q[1] + q[5]) + (q[3] + q[7]))
}

/// Σ x: 32 f32 lanes per block of 1024 elements (32 terms a lane), each block's lanes
/// widened and folded by [`tree64`], the remainder in f64 in order; summed again in f64
/// when an f32 lane overflows (finite values near `f32::MAX`).
#[inline(always)]
fn sum_lanes(x: &[f32]) -> f64 {
    let mut total = 0f64;
    for blk in x.chunks(1024) {
        let mut lanes = [0f32; LANES];
        let mut it = blk.chunks_exact(LANES);
        for c in &mut it {
            // A fixed-size array: no bounds checks, the lanes stay in vector registers.
            let c: &[f32; LANES] = c.try_into().expect("chunks of 32");
            for k in 0..LANES {
                lanes[k] += c[k];
            }
        }
        // Through a black box: seen together with the tree, the loop's lanes were split
        // into narrow registers (LLVM's SLP vectorizer).
        let lanes = std::hint::black_box(lanes);
        total += tree64(std::array::from_fn(|k| lanes[k] as f64));
        for &v in it.remainder() {
            total += v as f64;
        }
    }
    if !total.is_finite() {
        // Keeps a row of infinities or NaNs what it is; recovers an f32 lane's overflow.
        return x.iter().map(|&v| v as f64).sum();
    }
    total
}

/// Σ (x − m)² with the differences and squares in f32, summed as [`sum_lanes`] sums. Not finite when a square overflows f32.
#[inline(always)]
fn dev_sq_lanes(x: &[f32], m: f32) -> f64 {
    let mut total = 0f64;
    for blk in x.chunks(1024) {
        let mut lanes = [0f32; LANES];
        let mut it = blk.chunks_exact(LANES);
        for c in &mut it {
            let c: &[f32; LANES] = c.try_into().expect("chunks of 32");
            for k in 0..LANES {
                let d = c[k] - m;
                lanes[k] += d * d;
            }
        }
        let lanes = std::hint::black_box(lanes);
        total += tree64(std::array::from_fn(|k| lanes[k] as f64));
        for &v in it.remainder() {
            let d = v - m;
            total += (d * d) as f64;
        }
    }
    total
}

math::wide_fn! {
    baseline = row_f32_base;
    /// One row of `op` in f32 (compiled for the CPU's widest vectors).
    fn row_f32(op: RowOp, x: &[f32], y: &mut [f32], gamma: Option<&[f32]>, beta: Option<&[f32]>) {
        let n = x.len();
        match op {
            RowOp::Softmax => {
                let m = nan_max32(x);
                for (o, &v) in y.iter_mut().zip(x) {
                    *o = v - m;
                }
                math::unary_f32_inplace(Activation::Exp, y);
                let s = sum32(y) as f32;
                for o in y.iter_mut() {
                    *o /= s;
                }
            }
            RowOp::LogSoftmax => {
                let m = nan_max32(x);
                for (o, &v) in y.iter_mut().zip(x) {
                    *o = v - m;
                }
                let mut tmp = [0f32; 1024];
                let mut s = 0f64;
                for c in y.chunks(1024) {
                    let t = &mut tmp[..c.len()];
                    math::unary_f32(Activation::Exp, c, t);
                    s += sum32(t);
                }
                let lse = s.ln() as f32;
                for o in y.iter_mut() {
                    *o -= lse;
                }
            }
            RowOp::LayerNorm { eps } | RowOp::RmsNorm { eps } => {
                let rms = matches!(op, RowOp::RmsNorm { .. });
                let mean = if rms {
                    0.0
                } else {
                    (sum_lanes(x) / n as f64) as f32
                };
                let mut sq = dev_sq_lanes(x, mean);
                if !sq.is_finite() {
                    // Squares of elements beyond ≈ 1.8e19 overflow the f32 lanes: redo the
                    // sum in f64 (rare; a row holding ∞ or NaN stays ∞ or NaN).
                    let mean = mean as f64;
                    sq = x
                        .iter()
                        .map(|&v| (v as f64 - mean) * (v as f64 - mean))
                        .sum();
                }
                let d = ((sq / n as f64) + eps as f64).sqrt();
                let inv = (1.0 / d) as f32;
                // Slices cut to the row's length: the loop has no bounds checks and is
                // vectorized (indexing four slices of unknown length kept it scalar).
                let (g, b) = (&gamma.unwrap()[..n], &beta.unwrap()[..n]);
                for (((o, &xv), &gv), &bv) in y[..n].iter_mut().zip(x).zip(g).zip(b) {
                    *o = (xv - mean) * inv * gv + bv;
                }
            }
        }
    }
}

fn row_f64(op: RowOp, x: &[f64], y: &mut [f64], gamma: Option<&[f64]>, beta: Option<&[f64]>) {
    let n = x.len() as f64;
    let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| {
        if m.is_nan() || v.is_nan() {
            f64::NAN
        } else {
            m.max(v)
        }
    });
    match op {
        RowOp::Softmax => {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = (v - m).exp();
            }
            let s: f64 = y.iter().sum();
            y.iter_mut().for_each(|o| *o /= s);
        }
        RowOp::LogSoftmax => {
            let lse = x.iter().map(|&v| (v - m).exp()).sum::<f64>().ln();
            for (o, &v) in y.iter_mut().zip(x) {
                *o = v - m - lse;
            }
        }
        RowOp::LayerNorm { eps } | RowOp::RmsNorm { eps } => {
            let rms = matches!(op, RowOp::RmsNorm { .. });
            let mean = if rms { 0.0 } else { x.iter().sum::<f64>() / n };
            let var = x.iter().map(|&a| (a - mean) * (a - mean)).sum::<f64>() / n;
            let d = (var + eps as f64).sqrt();
            let (g, b) = (gamma.unwrap(), beta.unwrap());
            for (j, (o, &a)) in y.iter_mut().zip(x).enumerate() {
                *o = (a - mean) / d * g[j] + b[j];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norm_lane_sums_stay_within_f32_rounding_of_f64_sums_and_recover_overflow() {
        for n in [1usize, 7, 31, 32, 33, 256, 1000, 1024, 1025, 3000] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 9.0 + 40.0)
                .collect();
            let exact: f64 = x.iter().map(|&v| v as f64).sum();
            let abs: f64 = x.iter().map(|&v| (v as f64).abs()).sum();
            let s = sum_lanes(&x);
            assert!((s - exact).abs() <= 1e-6 * abs, "n = {n}: {s} vs {exact}");
            let m = (exact / n as f64) as f32;
            let dev: f64 = x.iter().map(|&v| ((v - m) as f64).powi(2)).sum();
            let d = dev_sq_lanes(&x, m);
            assert!(
                (d - dev).abs() <= 1e-6 * dev.max(1e-30),
                "n = {n}: {d} vs {dev}"
            );
        }
        // Finite values whose f32 lane sum overflows are summed again in f64.
        let big = vec![3e38f32; 64];
        assert_eq!(sum_lanes(&big), 64.0 * 3e38f32 as f64);
        assert!(
            !dev_sq_lanes(&big, 0.0).is_finite(),
            "the caller's f64 retry"
        );
        assert!(sum_lanes(&[1.0, f32::NAN, 2.0]).is_nan());
        assert_eq!(sum_lanes(&[1.0, f32::INFINITY]), f64::INFINITY);
    }

    #[test]
    fn rows_compiled_wide_have_the_baseline_bits_at_every_length() {
        // `row_f32` runs compiled for AVX-512/AVX2: every row op must keep the
        // bits of the baseline code, for lengths with and without vector tails.
        for c in [1, 3, 8, 9, 16, 31, 256, 1000, 1025, 2100] {
            let x: Vec<f32> = (0..c)
                .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 9.0)
                .collect();
            let g: Vec<f32> = (0..c).map(|i| 1.0 + (i % 7) as f32 * 0.03).collect();
            let b: Vec<f32> = (0..c).map(|i| (i % 5) as f32 * 0.01 - 0.02).collect();
            for op in [
                RowOp::Softmax,
                RowOp::LogSoftmax,
                RowOp::LayerNorm { eps: 1e-5 },
                RowOp::RmsNorm { eps: 1e-6 },
            ] {
                let (mut y1, mut y2) = (vec![0f32; c], vec![0f32; c]);
                row_f32_base(op, &x, &mut y1, Some(&g), Some(&b));
                row_f32(op, &x, &mut y2, Some(&g), Some(&b));
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&y1), bits(&y2), "{op:?}, c = {c}");
            }
        }
    }
}
