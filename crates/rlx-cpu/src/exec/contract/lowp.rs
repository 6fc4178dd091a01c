//! The low-precision products of a contraction: bf16 / f16 operands on the
//! half-precision GEMM, int8 operands on the int8 GEMM (i32 accumulation), small
//! products as matrix-vector loops, and the per-batch driver they share.

use super::*;

impl ContractPlan {
    /// bf16 or f16 operands read in place through their views by the half-precision GEMM
    /// (AMX / AVX512_BF16 / f32 FMA over panels widened while packing, chosen at run time:
    /// [`crate::gemm::lowp`]), accumulated in f32 into `c` and rounded once to the dtype
    /// (to nearest, ties to even), as the oracle stores the matmul node: into `out` (the
    /// output's dense 16-bit storage, `nb·m·n` elements overlapping no operand) when given,
    /// else in place in `c` for the epilogue to read.
    pub(super) fn lowp_gemm<T: HalfFloat>(
        &self,
        bases: &[*mut u8],
        c: *mut f32,
        out: Option<*mut u16>,
    ) {
        let mn = self.m * self.n;
        let (pc, out, dtype) = (SendPtr(c), out.map(SendPtr), self.dtype);
        let batch = |bi: usize, am: MatRef<'_, T>, bm: MatRef<'_, T>, th: usize| {
            // `am.rows` is `m`, or `nb·m` for a folded batch (then `bi = 0`).
            let len = am.rows * self.n;
            // SAFETY: C holds `nb·m·n` f32 (the caller's contract); batch `bi`'s rows are
            // written by this call only, and C overlaps no operand.
            let cs = unsafe { std::slice::from_raw_parts_mut(pc.get().add(bi * mn), len) };
            gemm_half(am, bm, MatMut::row_major(cs, am.rows, self.n), false, th);
        };
        // SAFETY: the caller checked both operand dtypes equal the product's (T's).
        unsafe { self.per_batch::<T>(bases, true, batch) };
        // The rounding pass runs on every thread after the products (per batch, it ran on
        // one thread: 1 M elements of one product were a fifth of a 1024³ bf16 matmul).
        // Tried instead and not kept (2-vCPU Emerald Rapids, 2026-12-04, bf16 graphs
        // `[8, m/8, k] · [k, n]` timed against the same f32 graph in one process, medians
        // of 27 alternated rounds, builds alternated): each tile's rows rounded right after
        // the f32 kernel stored them (a callback per tile, so C is read from L1, not L3):
        // 1024 × 1024 × 256 1.13 → 1.08× the f32 graph's time, 1024 × 256 × 1024 1.13 →
        // 1.10×, but 2048 × 32 × 2048 1.48 → 1.66× (rows of 48 elements, 4 KiB apart, into
        // the 16-bit output), and W11's bf16 step within its noise (±3 %). The kernel
        // alone runs bf16 at 0.95–1.07× its f32 time on those shapes, so the rest of the
        // bf16 graph's 8–13 % lies outside the product (not located further).
        let total = self.batch.iter().product::<usize>() * mn;
        let per = ew_chunk(total, 1);
        let _ = par_for(chunks(total, per), |ch| {
            let (lo, hi) = (ch * per, ((ch + 1) * per).min(total));
            // SAFETY: chunks are disjoint ranges inside the `total` f32 of C and the
            // `total` 16-bit elements of the output (the caller's contract).
            unsafe {
                let cs = std::slice::from_raw_parts_mut(pc.get().add(lo), hi - lo);
                match out {
                    Some(o) => round_into(
                        dtype,
                        cs,
                        std::slice::from_raw_parts_mut(o.get().add(lo), hi - lo),
                    ),
                    None => crate::exec::value::round_f32_slice(dtype, cs),
                }
            }
            Ok(())
        });
    }

    /// Whether the matrix-vector kernels take this product in place
    /// ([`crate::exec::gemv::takes`]: one row of A, or a few with B contiguous along N).
    pub(super) fn gemv_fits(&self) -> bool {
        let rb = self.b.strides.len();
        let (rs, cs) = (self.b.strides[rb - 2], self.b.strides[rb - 1]);
        crate::exec::gemv::takes(self.m, (rs, cs))
    }

    /// A product [`Self::gemv_fits`] takes, through [`crate::exec::gemv::gemv`] (f32 or
    /// bf16 operands, f32 accumulation) into `c` (`nb·m·n` f32); bf16 products are rounded
    /// once to the dtype, into `out` (the output's 16-bit storage) when given, else in
    /// place for the epilogue — as [`Self::lowp_gemm`] does.
    pub(super) fn gemv(&self, bases: &[*mut u8], c: *mut f32, out: Option<*mut u16>) {
        let n = self.n;
        let (pc, out, dtype) = (SendPtr(c), out.map(SendPtr), self.dtype);
        fn batch<T: crate::exec::gemv::Widen>(
            pc: SendPtr<f32>,
            out: Option<SendPtr<u16>>,
            dtype: DType,
            n: usize,
            bi: usize,
            am: MatRef<'_, T>,
            bm: MatRef<'_, T>,
        ) {
            let mn = am.rows * n;
            // SAFETY: C holds `nb·m·n` f32 and the output (if given) `nb·m·n` 16-bit
            // elements; batch `bi`'s `m·n` of each are written by this call only, and
            // neither overlaps an operand (the caller's contract, as for the GEMM paths).
            let (cs, os) = unsafe {
                (
                    std::slice::from_raw_parts_mut(pc.get().add(bi * mn), mn),
                    out.map(|o| std::slice::from_raw_parts_mut(o.get().add(bi * mn), mn)),
                )
            };
            crate::exec::gemv::gemv(am, bm, cs);
            if dtype != DType::F32 {
                match os {
                    Some(o) => round_into(dtype, cs, o),
                    None => crate::exec::value::round_f32_slice(dtype, cs),
                }
            }
        }
        if dtype == DType::F32 {
            // SAFETY: the caller checked both operands are f32.
            unsafe {
                self.per_batch::<f32>(bases, false, |bi, am, bm, _| {
                    batch(pc, out, dtype, n, bi, am, bm)
                })
            }
        } else {
            // SAFETY: the caller checked both operands are bf16.
            unsafe {
                self.per_batch::<bf16>(bases, false, |bi, am, bm, _| {
                    batch(pc, out, dtype, n, bi, am, bm)
                })
            }
        }
    }

    /// i8 operands read in place by the int8 GEMM ([`crate::gemm::int8`]: AMX-INT8,
    /// AVX-512 or portable, chosen at run time) into i32 (wrapping), then written as the
    /// product's compute bits (i64) of the i8 result: the low 8 bits of the sum, exactly
    /// as the oracle's wrapping i64 sum stored as i8.
    pub(super) fn i8_gemm(&self, bases: &[*mut u8], c: *mut u64) {
        let mn = self.m * self.n;
        let pc = SendPtr(c);
        let batch = |bi: usize, am: MatRef<'_, i8>, bm: MatRef<'_, i8>, th: usize| {
            // `am.rows` is `m`, or `nb·m` for a folded batch (then `bi = 0`).
            let len = am.rows * self.n;
            // SAFETY: C holds `nb·m·n` compute words; batch `bi`'s rows are written by this
            // call only, and C (a product scratch) overlaps no operand.
            let cs = unsafe { std::slice::from_raw_parts_mut(pc.get().add(bi * mn), len) };
            let mut acc = vec![0i32; len];
            gemm_i8(
                am,
                bm,
                MatMut::row_major(&mut acc, am.rows, self.n),
                false,
                th,
            );
            for (o, &v) in cs.iter_mut().zip(&acc) {
                *o = cast_bits(DType::I64, DType::I8, v as i64 as u64);
            }
        };
        // SAFETY: the caller checked both operand dtypes are i8.
        unsafe { self.per_batch::<i8>(bases, true, batch) }
    }

    /// `f(batch, A view, B view, threads)` for every batch of the product, with the
    /// operands read in place as `E`: many small batches side by side on one thread each,
    /// else one after another with every thread on each. With `fold`, a batch whose
    /// weight is shared and whose rows chain (see [`Self::folded_row_stride`]) is one call
    /// `f(0, A of nb·m rows, B, threads)` — `f` must then size C by `A.rows`.
    ///
    /// # Safety
    /// Both operand buffers must hold elements of type `E`.
    pub(super) unsafe fn per_batch<E: Copy + Sync>(
        &self,
        bases: &[*mut u8],
        fold: bool,
        f: impl Fn(usize, MatRef<'_, E>, MatRef<'_, E>, usize) + Sync,
    ) {
        let nb: usize = self.batch.iter().product();
        let (m, n, k) = (self.m, self.n, self.k);
        let ra = self.a.strides.len();
        let rb = self.b.strides.len();
        let (ars, acs) = (self.a.strides[ra - 2], self.a.strides[ra - 1]);
        let (brs, bcs) = (self.b.strides[rb - 2], self.b.strides[rb - 1]);
        let threads = rayon::current_num_threads();
        let small = m * n * k < (1 << 15);
        let (pa, pb) = (
            SendPtr(bases[self.a.buf] as *mut E),
            SendPtr(bases[self.b.buf] as *mut E),
        );
        if fold
            && nb > 1
            && let Some(rs) = self.folded_row_stride(ars)
        {
            // One `(nb·m) × k` product, as in `gemm` (B packed once).
            let rows = nb * m;
            // SAFETY: as in `one` below; the folded rows visit exactly the elements the
            // per-batch views would (folded_row_stride checked the strides chain).
            let (a, b) = unsafe {
                (
                    std::slice::from_raw_parts(pa.get() as *const E, self.a_len),
                    std::slice::from_raw_parts(pb.get() as *const E, self.b_len),
                )
            };
            let am = MatRef {
                data: a,
                rows,
                cols: k,
                row_stride: rs,
                col_stride: acs,
                offset: self.a.offset,
            };
            let bm = MatRef {
                data: b,
                rows: k,
                cols: n,
                row_stride: brs,
                col_stride: bcs,
                offset: self.b.offset,
            };
            f(
                0,
                am,
                bm,
                if rows * n * k < (1 << 15) { 1 } else { threads },
            );
            return;
        }
        let one = |bi: usize, th: usize| {
            let mut idx = vec![0usize; self.batch.len()];
            let (ao, bo) = self.offsets(bi, &mut idx);
            // SAFETY: A and B are bound buffers of `a_len` / `b_len` elements of E (the
            // caller's contract), only read; the GEMMs re-check every view against these
            // slice lengths.
            let (a, b) = unsafe {
                (
                    std::slice::from_raw_parts(pa.get() as *const E, self.a_len),
                    std::slice::from_raw_parts(pb.get() as *const E, self.b_len),
                )
            };
            let am = MatRef {
                data: a,
                rows: m,
                cols: k,
                row_stride: ars,
                col_stride: acs,
                offset: ao,
            };
            let bm = MatRef {
                data: b,
                rows: k,
                cols: n,
                row_stride: brs,
                col_stride: bcs,
                offset: bo,
            };
            f(bi, am, bm, th);
        };
        if nb > 1 && (small || nb >= threads && m * n * k < (1 << 21)) {
            let _ = par_for(nb, |bi| {
                one(bi, 1);
                Ok(())
            });
        } else {
            for bi in 0..nb {
                one(bi, if small { 1 } else { threads });
            }
        }
    }

    /// Half-precision (or table-viewed f32) operands: dense f32 copies, the f32 GEMM,
    /// then the product rounded to the dtype (as the oracle stores the matmul node).
    pub(super) fn half_gemm(&self, bases: &[*mut u8], c: *mut f32) {
        let a = dense_f32(&self.a, &self.a_dims, bases);
        let b = dense_f32(&self.b, &self.b_dims, bases);
        let ab = dense_batch_strides(&self.a_dims, &self.batch);
        let bb = dense_batch_strides(&self.b_dims, &self.batch);
        let nb: usize = self.batch.iter().product();
        let (m, n, k) = (self.m, self.n, self.k);
        let total = nb * m * n;
        // SAFETY: `c` is the product target (an f32 store buffer of `total` elements that no
        // operand or epilogue load overlaps) or the scratch of `total·w` bytes; nothing else
        // references it while `cs` lives (the epilogue runs afterwards).
        let cs = unsafe { std::slice::from_raw_parts_mut(c, total) };
        let mut idx = vec![0usize; self.batch.len()];
        let threads = if m * n * k >= 1 << 15 {
            rayon::current_num_threads()
        } else {
            1
        };
        for bi in 0..nb {
            unravel_into(bi, &self.batch, &mut idx);
            let ao: usize = idx.iter().zip(&ab).map(|(&i, &s)| i * s).sum();
            let bo: usize = idx.iter().zip(&bb).map(|(&i, &s)| i * s).sum();
            let am = MatRef {
                data: &a,
                rows: m,
                cols: k,
                row_stride: k as isize,
                col_stride: 1,
                offset: ao,
            };
            let bm = MatRef {
                data: &b,
                rows: k,
                cols: n,
                row_stride: n as isize,
                col_stride: 1,
                offset: bo,
            };
            let cm = MatMut {
                data: &mut *cs,
                rows: m,
                cols: n,
                row_stride: n as isize,
                col_stride: 1,
                offset: bi * m * n,
            };
            sgemm(1.0, am, bm, 0.0, cm, threads);
        }
        crate::exec::value::round_f32_slice(self.dtype, cs);
    }
}
