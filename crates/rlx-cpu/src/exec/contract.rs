//! Contractions: batched matmul through the strided GEMM (`sgemm`/`dgemm`, operands
//! read in place through their views, transposes free), written straight into the
//! output buffer, then the fused epilogue (bias, activation, residual) applied in
//! place over the result in parallel tiles.

use super::ew::{EwPlan, ew_chunk};
use super::loads::BindCtx;
use super::loads::LoadPlan;
use super::loads::plan_load;
use super::loads::unravel_into;
use super::par::{Bases, SendPtr, chunks, par_for};
use super::value::{TileValue, Ty, cast_bits, read_bits};
use crate::gemm::int8::gemm_i8;
use crate::gemm::lowp::{HalfFloat, bf16, f16, gemm_half};
use crate::gemm::{MatMut, MatRef, dgemm, sgemm};
use rlx_compile::program::{Kernel, KernelKind};
use rlx_ir::{DType, IrResult};

mod lowp;

/// A bound contraction.
pub(crate) struct ContractPlan {
    a: LoadPlan,
    b: LoadPlan,
    a_dims: Vec<usize>,
    b_dims: Vec<usize>,
    a_len: usize,
    b_len: usize,
    m: usize,
    n: usize,
    k: usize,
    batch: Vec<usize>,
    a_bstr: Vec<isize>,
    b_bstr: Vec<isize>,
    dtype: DType,
    out_buf: usize,
    out_dt: DType,
    epilogue: EwPlan,
    trivial: bool,
}

thread_local! {
    /// The last product scratch of this thread, kept for the next run: a fresh zeroed
    /// allocation per run cost a 1024² product 4 MiB of page faults and zeroing.
    static PRODUCT_SCRATCH: std::cell::RefCell<Vec<u64>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Scratch buffers larger than this (in 8-byte words: 64 MiB) are freed after the run
/// instead of being kept by the thread.
const SCRATCH_KEEP_WORDS: usize = 8 << 20;

/// A product scratch of at least the asked words, from this thread's pool; returned to
/// the pool on drop. Its contents are unspecified: every product path overwrites all of
/// C (BLAS semantics with β = 0) before anything reads it.
#[derive(Default)]
struct Scratch {
    words: Vec<u64>,
}

impl Scratch {
    fn take(words: usize) -> Scratch {
        let mut v = PRODUCT_SCRATCH
            .try_with(|s| std::mem::take(&mut *s.borrow_mut()))
            .unwrap_or_default();
        if v.len() < words {
            v = vec![0u64; words];
        }
        Scratch { words: v }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.words.is_empty() || self.words.len() > SCRATCH_KEEP_WORDS {
            return;
        }
        let v = std::mem::take(&mut self.words);
        let _ = PRODUCT_SCRATCH.try_with(|s| {
            let mut kept = s.borrow_mut();
            if kept.len() < v.len() {
                *kept = v;
            }
        });
    }
}

/// Per output batch axis, the operand's stride (0 where it broadcasts).
fn batch_strides(p: &LoadPlan, dims: &[usize], batch: &[usize]) -> Vec<isize> {
    let r = dims.len();
    let nb = r - 2;
    let off = batch.len() - nb;
    // Table operands are gathered into dense row-major copies: use dense strides.
    let dense = super::loads::LoadPlan::strided(
        0,
        p.dtype,
        dims,
        rlx_compile::program::Strided::dense(dims).strides,
        0,
    );
    let strides = if p.table.is_some() {
        &dense.strides
    } else {
        &p.strides
    };
    (0..batch.len())
        .map(|i| {
            if i < off || dims[i - off] == 1 {
                0
            } else {
                strides[i - off]
            }
        })
        .collect()
}

impl ContractPlan {
    pub(crate) fn new(cx: BindCtx<'_>, kern: &Kernel) -> IrResult<ContractPlan> {
        let BindCtx {
            program: p,
            buffer_dims: bd,
            binding: bnd,
            ..
        } = cx;
        let KernelKind::Contraction {
            a,
            b,
            out_space,
            dtype,
            epilogue,
        } = &kern.kind
        else {
            unreachable!()
        };
        let out = rlx_compile::program::concrete(out_space, bnd).expect("bound");
        let la = &kern.loads[*a];
        let lb = &kern.loads[*b];
        let ad = rlx_compile::program::bind_load(&bd[la.buf], &la.steps, bnd).map(|s| s.dims);
        let bdims = rlx_compile::program::bind_load(&bd[lb.buf], &lb.steps, bnd).map(|s| s.dims);
        // Operand dims: from the view when expressible, else from the buffer through the chain.
        let a_dims = ad.unwrap_or_else(|| super::opaque::view_dims(&bd[la.buf], &la.steps, bnd));
        let b_dims = bdims.unwrap_or_else(|| super::opaque::view_dims(&bd[lb.buf], &lb.steps, bnd));
        let ap = plan_load(p, bd, la, &a_dims, bnd)?;
        let bp = plan_load(p, bd, lb, &b_dims, bnd)?;
        let r = out.len();
        let (m, n) = (out[r - 2], out[r - 1]);
        let k = a_dims[a_dims.len() - 1];
        let batch = out[..r - 2].to_vec();
        // The product is written into the last store's buffer (the kernel root's): the
        // epilogue stores it last in each tile, after every value that reads the product.
        let st = *kern.stores.last().expect("a contraction stores its result");
        let ep = EwPlan::with_stores(cx, kern, epilogue, &kern.stores, &out)?;
        let out_dt = p.buffers[st.buf].shape.dtype();
        Ok(ContractPlan {
            a_bstr: batch_strides(&ap, &a_dims, &batch),
            b_bstr: batch_strides(&bp, &b_dims, &batch),
            a_len: bd[la.buf].iter().product(),
            b_len: bd[lb.buf].iter().product(),
            a: ap,
            b: bp,
            a_dims,
            b_dims,
            m,
            n,
            k,
            batch,
            dtype: *dtype,
            out_buf: st.buf,
            out_dt,
            trivial: epilogue.nodes.len() == 1 && out_dt == *dtype,
            epilogue: ep,
        })
    }

    pub(crate) fn run(&self, bases: &[*mut u8]) -> Result<(), String> {
        let nb: usize = self.batch.iter().product();
        let (m, n) = (self.m, self.n);
        let total = nb * m * n;
        if total == 0 {
            return Ok(());
        }
        let native32 =
            self.dtype == DType::F32 && self.a.dtype == DType::F32 && self.b.dtype == DType::F32;
        let native64 =
            self.dtype == DType::F64 && self.a.dtype == DType::F64 && self.b.dtype == DType::F64;
        let direct =
            (native32 && self.out_dt == DType::F32) || (native64 && self.out_dt == DType::F64);
        let w = if Ty::of(self.dtype) == Some(Ty::F32) {
            4
        } else {
            8
        };
        let mut scratch = Scratch::default();
        // The product goes into a store's buffer that no epilogue load reads (the last
        // store's, unless a donated argument shares its storage), else a scratch.
        let target = if direct {
            self.product_target(bases, total * w)
        } else {
            None
        };
        let c_ptr: *mut u8 = if let Some(t) = target {
            t
        } else {
            scratch = Scratch::take((total * w).div_ceil(8));
            scratch.words.as_mut_ptr() as *mut u8
        };
        let strided = self.a.table.is_none() && self.b.table.is_none();
        let halves = self.a.dtype == self.dtype && self.b.dtype == self.dtype;
        // One output row, or a few with B contiguous along N (a decode step's linear
        // layers): the kernels of exec/gemv.rs read B once in place; the GEMM would pack
        // all of B for a few uses of each element.
        let gemv_bf16 = halves && self.dtype == DType::BF16;
        if strided && (native32 || gemv_bf16) && self.gemv_fits() {
            let out = (gemv_bf16 && self.trivial).then(|| bases[self.out_buf] as *mut u16);
            self.gemv(bases, c_ptr as *mut f32, out);
            if out.is_some() || (self.trivial && target.is_some()) {
                return Ok(());
            }
        } else if (native32 || native64) && strided {
            self.gemm(bases, c_ptr, native32);
        } else if strided && halves && matches!(self.dtype, DType::BF16 | DType::F16) {
            // Without an epilogue the rounded product goes straight into the output's
            // 16-bit storage (one pass, instead of an f32 product the epilogue re-reads).
            let out = self.trivial.then(|| bases[self.out_buf] as *mut u16);
            if self.dtype == DType::BF16 {
                self.lowp_gemm::<bf16>(bases, c_ptr as *mut f32, out);
            } else {
                self.lowp_gemm::<f16>(bases, c_ptr as *mut f32, out);
            }
            if out.is_some() {
                return Ok(());
            }
        } else if strided && halves && self.dtype == DType::I8 {
            self.i8_gemm(bases, c_ptr as *mut u64);
        } else if matches!(self.dtype, DType::F16 | DType::BF16 | DType::F32) {
            self.half_gemm(bases, c_ptr as *mut f32);
        } else {
            self.generic(bases, c_ptr, w);
        }
        if self.trivial && target.is_some() {
            return Ok(());
        }
        // Epilogue over the product, in place when the product lives in the output.
        let cp = SendPtr(c_ptr);
        let bs = Bases(bases);
        // Split by the epilogue's work, like an elementwise kernel (W6's GELU-derivative
        // epilogues ran on one core in chunks of the full size).
        let per = ew_chunk(total, self.epilogue.work());
        par_for(chunks(total, per), |ch| {
            let (c0, c1) = (ch * per, ((ch + 1) * per).min(total));
            let core =
                // SAFETY: run_range calls the core only for tiles inside `c0..c1 <= total`, and
                // the product (a store buffer of the whole output space or the scratch) holds
                // `total` elements of `w` bytes.
                |flat: usize, _n: usize| TileValue::Vector(unsafe { cp.get().add(flat * w) as *const u8 });
            self.epilogue.run_range(bs.get(), c0, c1, Some(&core))
        })?;
        drop(scratch);
        Ok(())
    }

    /// How the epilogue runs (see [`EwPlan::jit_note`]); `None` without one.
    pub(crate) fn jit_note(&self) -> Option<String> {
        (!self.trivial).then(|| self.epilogue.jit_note())
    }

    /// A store buffer of the product's dtype whose `bytes` no epilogue load overlaps,
    /// the last store's first (the epilogue stores it after every value that reads the
    /// product).
    fn product_target(&self, bases: &[*mut u8], bytes: usize) -> Option<*mut u8> {
        if self.trivial {
            return Some(bases[self.out_buf]);
        }
        let stores = self.epilogue.store_targets();
        // Another store's buffer only when no stored value is the product itself (which
        // an earlier store in the tile could otherwise overwrite before it is copied).
        let eligible = if self.epilogue.stores_pass_core() {
            1
        } else {
            stores.len()
        };
        stores.rev().take(eligible).find_map(|(b, dt)| {
            let lo = bases[b] as usize;
            (dt == self.dtype && !self.epilogue.reads_overlap(bases, lo, lo + bytes))
                .then_some(bases[b])
        })
    }

    /// Operand offsets of batch `bi`.
    fn offsets(&self, bi: usize, idx: &mut [usize]) -> (usize, usize) {
        unravel_into(bi, &self.batch, idx);
        let mut ao = self.a.offset as isize;
        let mut bo = self.b.offset as isize;
        for (j, &i) in idx.iter().enumerate() {
            ao += i as isize * self.a_bstr[j];
            bo += i as isize * self.b_bstr[j];
        }
        (ao as usize, bo as usize)
    }

    fn gemm(&self, bases: &[*mut u8], c_ptr: *mut u8, f32s: bool) {
        let (mn, n) = (self.m * self.n, self.n);
        let pc = SendPtr(c_ptr);
        // `am.rows` is `m`, or `nb·m` for a folded batch (then `bi = 0`).
        let f32_batch = |bi: usize, am: MatRef<'_, f32>, bm: MatRef<'_, f32>, th: usize| {
            // SAFETY: C is `nb·m·n` f32; batch `bi`'s rows are written by this call only,
            // and C (a product target that overlaps no load, or the scratch) never
            // overlaps A or B. sgemm re-checks every view.
            let cs = unsafe {
                std::slice::from_raw_parts_mut((pc.get() as *mut f32).add(bi * mn), am.rows * n)
            };
            sgemm(1.0, am, bm, 0.0, MatMut::row_major(cs, am.rows, n), th);
        };
        let f64_batch = |bi: usize, am: MatRef<'_, f64>, bm: MatRef<'_, f64>, th: usize| {
            // SAFETY: as for f32_batch, with f64 elements (dgemm re-checks every view).
            let cs = unsafe {
                std::slice::from_raw_parts_mut((pc.get() as *mut f64).add(bi * mn), am.rows * n)
            };
            dgemm(1.0, am, bm, 0.0, MatMut::row_major(cs, am.rows, n), th);
        };
        // SAFETY: native32 / native64 checked both operand dtypes (the caller).
        unsafe {
            if f32s {
                self.per_batch::<f32>(bases, true, f32_batch)
            } else {
                self.per_batch::<f64>(bases, true, f64_batch)
            }
        }
    }

    /// The row stride of A's batch and row axes read as one axis of `batch·m` rows, when
    /// B is the same matrix for every batch (all its batch strides 0) and A's strides
    /// chain (each axis's stride = the next axis's size × stride; size-1 axes ignored) —
    /// the condition for the batched product to be one GEMM. `None` otherwise.
    fn folded_row_stride(&self, row_stride: isize) -> Option<isize> {
        if self.b_bstr.iter().any(|&s| s != 0) {
            return None;
        }
        // (size, stride) from the innermost axis (A's rows) outwards, size-1 axes dropped.
        let axes = std::iter::once((self.m, row_stride))
            .chain(
                self.batch
                    .iter()
                    .copied()
                    .zip(self.a_bstr.iter().copied())
                    .rev(),
            )
            .filter(|&(size, _)| size > 1);
        let mut folded: Option<(isize, isize)> = None; // (stride of the axis, its span)
        for (size, stride) in axes {
            folded = match folded {
                None => Some((stride, stride * size as isize)),
                Some((inner, span)) if stride == span && stride != 0 => {
                    Some((inner, span * size as isize))
                }
                Some(_) => return None,
            };
        }
        folded.map(|(inner, _)| inner)
    }

    /// Any dtype / view: exact-type accumulation (f64 for floats, wrapping i64 for
    /// integers), written as the product's dtype (compute bits, `w` bytes each).
    fn generic(&self, bases: &[*mut u8], c_ptr: *mut u8, w: usize) {
        let nb: usize = self.batch.iter().product();
        let (m, n, k) = (self.m, self.n, self.k);
        let at = |p: &LoadPlan, base: usize, i: usize, j: usize| -> usize {
            match &p.table {
                Some(t) => {
                    // Tables index the operand's own flat order; batch base is a flat index too.
                    let _ = t;
                    unreachable!()
                }
                None => {
                    let r = p.strides.len();
                    (base as isize + i as isize * p.strides[r - 2] + j as isize * p.strides[r - 1])
                        as usize
                }
            }
        };
        let int = Ty::of(self.dtype) == Some(Ty::I64);
        // Table (non-strided) operands are gathered into dense copies first.
        let dense = |p: &LoadPlan, len: usize| -> Option<(Vec<u64>, LoadPlan)> {
            let t = p.table.as_ref()?;
            let mut v = vec![0u64; t.len()];
            for (o, &off) in v.iter_mut().zip(t.iter()) {
                // SAFETY: a table entry of a bound plan is an element offset inside the
                // operand's buffer.
                *o = unsafe { read_bits(p.dtype, bases[p.buf], off) };
            }
            let _ = len;
            Some((v, p.clone()))
        };
        let a_dense = dense(&self.a, self.a_len);
        let b_dense = dense(&self.b, self.b_len);
        let read = |p: &LoadPlan, d: &Option<(Vec<u64>, LoadPlan)>, off: usize| -> u64 {
            match d {
                Some((v, _)) => v[off],
                // SAFETY: `off` is `batch offset + i·row stride + j·col stride` of the bound
                // strided plan for `i`, `j` inside the operand's dims: an element of its
                // buffer.
                None => unsafe { read_bits(p.dtype, bases[p.buf], off) },
            }
        };
        let as_f64 = |dt: DType, bits: u64| -> f64 {
            match Ty::of(dt).unwrap() {
                Ty::F32 => f32::from_bits(bits as u32) as f64,
                Ty::F64 => f64::from_bits(bits),
                Ty::I64 => bits as i64 as f64,
            }
        };
        let mut idx = vec![0usize; self.batch.len()];
        for bi in 0..nb {
            // Dense copies (offset 0) use their own row-major layout.
            let (ao, bo) = self.offsets(bi, &mut idx);
            for i in 0..m {
                for j in 0..n {
                    let bits = if int {
                        let mut acc = 0i64;
                        for t in 0..k {
                            let x = read(
                                &self.a,
                                &a_dense,
                                a_off(&self.a, &a_dense, ao, i, t, k, &at),
                            ) as i64;
                            let y = read(
                                &self.b,
                                &b_dense,
                                a_off(&self.b, &b_dense, bo, t, j, n, &at),
                            ) as i64;
                            acc = acc.wrapping_add(x.wrapping_mul(y));
                        }
                        cast_bits(DType::I64, self.dtype, acc as u64)
                    } else {
                        let mut acc = 0f64;
                        for t in 0..k {
                            let x = as_f64(
                                self.a.dtype,
                                read(
                                    &self.a,
                                    &a_dense,
                                    a_off(&self.a, &a_dense, ao, i, t, k, &at),
                                ),
                            );
                            let y = as_f64(
                                self.b.dtype,
                                read(
                                    &self.b,
                                    &b_dense,
                                    a_off(&self.b, &b_dense, bo, t, j, n, &at),
                                ),
                            );
                            acc += x * y;
                        }
                        cast_bits(DType::F64, self.dtype, acc.to_bits())
                    };
                    let o = bi * m * n + i * n + j;
                    // SAFETY: `o = bi·m·n + i·n + j < nb·m·n`, the product's element count, and
                    // each element is `w` bytes (the product's compute width), aligned in the
                    // scratch or target.
                    unsafe {
                        if w == 4 {
                            *(c_ptr as *mut u32).add(o) = bits as u32;
                        } else {
                            *(c_ptr as *mut u64).add(o) = bits;
                        }
                    }
                }
            }
        }
    }
}

/// `out[i]` = the `dt` (bf16 or f16) bits of `src[i]`, rounded to nearest, ties to even.
fn round_into(dt: DType, src: &[f32], out: &mut [u16]) {
    let n = src.len().min(out.len());
    // SAFETY: both slices hold at least `n` elements and are distinct borrows.
    unsafe { super::value::narrow_halves(dt, src.as_ptr(), out.as_mut_ptr() as *mut u8, n) }
}

/// Offset of element (i, j) of an operand: dense copies are row-major with `cols`.
fn a_off(
    p: &LoadPlan,
    dense: &Option<(Vec<u64>, LoadPlan)>,
    base: usize,
    i: usize,
    j: usize,
    cols: usize,
    at: &dyn Fn(&LoadPlan, usize, usize, usize) -> usize,
) -> usize {
    if dense.is_some() {
        base + i * cols + j
    } else {
        at(p, base, i, j)
    }
}

/// A dense row-major f32 copy of the operand a plan reads over `dims`.
fn dense_f32(p: &LoadPlan, dims: &[usize], bases: &[*mut u8]) -> Vec<f32> {
    let n: usize = dims.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; dims.len()];
    let to_f32 = |bits: u64| match Ty::of(p.dtype).unwrap() {
        Ty::F32 => f32::from_bits(bits as u32),
        Ty::F64 => f64::from_bits(bits) as f32,
        Ty::I64 => bits as i64 as f32,
    };
    for f in 0..n {
        let off = p.element_offset(f, dims, &mut idx);
        // SAFETY: `off` is a table entry or `offset + Σ idx·stride` of the bound plan for an
        // index inside `dims`: an element of the operand's buffer.
        out.push(to_f32(unsafe { read_bits(p.dtype, bases[p.buf], off) }));
    }
    out
}

/// Per output batch axis, the stride of a dense operand of `dims` (0 where it broadcasts).
fn dense_batch_strides(dims: &[usize], batch: &[usize]) -> Vec<usize> {
    let dense = rlx_compile::program::Strided::dense(dims).strides;
    let nb = dims.len() - 2;
    let off = batch.len() - nb;
    (0..batch.len())
        .map(|i| {
            if i < off || dims[i - off] == 1 {
                0
            } else {
                dense[i - off] as usize
            }
        })
        .collect()
}
