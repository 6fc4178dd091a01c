//! `Op::AttentionVjp` fused: the attention backward pass per (batch, kv head), with the
//! probabilities recomputed block by block so the `Sq × Sk` matrices never exist whole.
//!
//! One work item owns batch `bi` and kv head `kh`: it zeroes its dk/dv rows of the packed
//! result, then for every query head of the group and every block of up to [`BQ`] queries
//! runs [`qblock`]: the scores and `dP` of the block against every key it may see (queries
//! along the vector lanes, like the forward), the softmax gradient with vertical folds,
//! and the three products `dQ = dS·K` (straight into the result), `dK += dSᵀ·Q` and
//! `dV += Pᵀ·dO` (into the item's rows of the result, which sum the query heads of a
//! grouped-query group). Causal and sliding-window masks skip every 16 × 16 tile of keys
//! × queries that the mask hides, in every product.
//!
//! Every sum runs in a fixed order inside one item, and an item is one thread's work, so
//! the result does not depend on the thread count. Every mask kind, a bias (which gets no
//! gradient here), softcap, `v_head_dim ≠ head_dim` and grouped-query heads are fused;
//! operands that are not f32 with unit innermost stride go to the oracle (the plan returns
//! `None`). Work is spread over `B·Hk` items, so a single (batch, kv head) runs on one
//! thread.

mod qblock;

use super::super::par::{Bases, SendPtr, par_for};
use super::block::{level, with_buf};
use super::gemm::{self, AVX2, AVX512, Init, PORTABLE};
use super::{AttnPlan, BQ};
use qblock::Block;
use std::cell::Cell;

thread_local! {
    /// The packed `[dq | dk | dv]` result of the calls this thread makes whose epilogue
    /// is not a plain store (taken out while a call runs).
    static PACKED: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

impl AttnPlan {
    /// Lengths of dq and dk in the packed result (dv follows them).
    fn vjp_lens(&self) -> (usize, usize) {
        (
            self.b * self.sq * self.h * self.d,
            self.b * self.sk * self.hk * self.d,
        )
    }

    /// Run the fused backward into the packed `[|q| + |k| + |v|]` result.
    pub(super) fn run_vjp(&self, bases: &[*mut u8]) -> Result<(), String> {
        let (nq, nk) = self.vjp_lens();
        let total = nq + nk + self.b * self.sk * self.hk * self.dv;
        if total == 0 {
            return Ok(());
        }
        if self.trivial {
            return self.vjp_into(bases, bases[self.out_buf] as *mut f32);
        }
        // The packed result for the epilogue (W11's splits it into dq, dk, dv with three
        // narrows): a buffer kept by the calling thread, so a training step does not
        // allocate and zero megabytes per call. Every element is written by the items
        // (dq rows, and dk/dv rows zeroed before they accumulate), so stale contents from
        // an earlier call never reach the result.
        PACKED.with(|p| {
            let mut scratch = p.take();
            if scratch.len() < total {
                scratch = vec![0f32; total];
            }
            let r = self
                .vjp_into(bases, scratch.as_mut_ptr())
                .and_then(|()| self.epilogue_from(bases, &scratch[..total]));
            p.replace(scratch);
            r
        })
    }

    /// The items of the backward into the dense packed result at `out`.
    fn vjp_into(&self, bases: &[*mut u8], out: *mut f32) -> Result<(), String> {
        let lvl = level();
        let bs = Bases(bases);
        let op = SendPtr(out as *mut u8);
        // Each item writes its own dq rows and its own kv head's dk/dv rows.
        par_for(self.b * self.hk, |item| {
            let (bi, kh) = (item / self.hk, item % self.hk);
            with_buf(|buf| self.vjp_item(lvl, bs.get(), op.get() as *mut f32, bi, kh, buf));
            Ok(())
        })
    }

    fn vjp_item(
        &self,
        level: u8,
        bases: &[*mut u8],
        out: *mut f32,
        bi: usize,
        kh: usize,
        buf: &mut Vec<f32>,
    ) {
        let need = self.vjp_scratch_len();
        if buf.len() < need {
            buf.resize(need, 0.0);
        }
        match level {
            // SAFETY: `level()` returned AVX512 only after detecting avx512f; `bases` are the
            // plan's bound buffers, `out` the packed result that only this item writes at
            // (bi, kh)'s rows, and `buf` holds the scratch's `need` f32s.
            #[cfg(target_arch = "x86_64")]
            AVX512 => unsafe { self.vjp_avx512(bases, out, bi, kh, buf) },
            // SAFETY: as above, after detecting avx2 and fma.
            #[cfg(target_arch = "x86_64")]
            AVX2 => unsafe { self.vjp_avx2(bases, out, bi, kh, buf) },
            // SAFETY: the portable level needs no CPU feature; buffers as above.
            _ => unsafe { self.vjp_body::<PORTABLE>(bases, out, bi, kh, buf) },
        }
    }

    /// # Safety
    /// As [`AttnPlan::vjp_body`], and the CPU must have AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn vjp_avx512(
        &self,
        bases: &[*mut u8],
        out: *mut f32,
        bi: usize,
        kh: usize,
        buf: &mut [f32],
    ) {
        // SAFETY: the caller detected avx512f and passes what vjp_body needs.
        unsafe { self.vjp_body::<AVX512>(bases, out, bi, kh, buf) }
    }

    /// # Safety
    /// As [`AttnPlan::vjp_body`], and the CPU must have AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn vjp_avx2(
        &self,
        bases: &[*mut u8],
        out: *mut f32,
        bi: usize,
        kh: usize,
        buf: &mut [f32],
    ) {
        // SAFETY: the caller detected avx2 and fma and passes what vjp_body needs.
        unsafe { self.vjp_body::<AVX2>(bases, out, bi, kh, buf) }
    }

    /// The item (batch `bi`, kv head `kh`), inlined into a function compiled for level `L`.
    /// # Safety
    /// `bases` must be the buffers this plan was bound to, `out` the dense packed
    /// f32 result that no other thread writes at this item's rows, `buf` at
    /// least [`AttnPlan::vjp_scratch_len`] long, and the CPU must have level `L`'s
    /// features.
    #[inline(always)]
    unsafe fn vjp_body<const L: u8>(
        &self,
        bases: &[*mut u8],
        out: *mut f32,
        bi: usize,
        kh: usize,
        buf: &mut [f32],
    ) {
        let (sq, sk, h, hk, d, dv) = (self.sq, self.sk, self.h, self.hk, self.d, self.dv);
        let group = h / hk;
        let (nqt, nkt) = self.vjp_lens();
        // The block bodies accumulate dK and dV into the result's rows: start them at zero,
        // as products with no terms (vector stores of whole rows; a memset call per short
        // row cost more than the stores).
        let at = (bi * sk) * hk + kh;
        let none = buf.as_ptr();
        // SAFETY: rows (bi, 0..Sk, kh) of dk (`d` floats, `hk·d` apart, after the `nqt` of
        // dq) and of dv (`dv` floats, `hk·dv` apart, after dq and dk) lie in the packed
        // result, and only this item writes them; with `k = 0` the `A` and `B` pointers
        // (thread scratch) are never read.
        unsafe {
            gemm::gemm::<L>(
                gemm::Operands {
                    m: sk,
                    n: d,
                    k: 0,
                    a: none,
                    lda: 0,
                    ldp: 0,
                    b: none,
                    ldb: 0,
                    c: out.add(nqt + at * d),
                    ldc: hk * d,
                },
                Init::Zero,
            );
            let dvp = out.add(nqt + nkt + at * dv);
            gemm::gemm::<L>(
                gemm::Operands {
                    m: sk,
                    n: dv,
                    k: 0,
                    a: none,
                    lda: 0,
                    ldp: 0,
                    b: none,
                    ldb: 0,
                    c: dvp,
                    ldc: hk * dv,
                },
                Init::Zero,
            );
        }
        const { assert!(BQ == 64) };
        for hi in kh * group..(kh + 1) * group {
            for q0 in (0..sq).step_by(BQ) {
                let blk = Block {
                    bi,
                    hi,
                    kh,
                    q0,
                    q1: (q0 + BQ).min(sq),
                };
                // SAFETY: the block is one of this item's (batch bi, query head hi of kv head
                // kh, queries q0..q1 with q1 − q0 ≤ BQ, LQ its count rounded up to 16), and the
                // caller's contract is qblock's.
                unsafe {
                    match (blk.q1 - q0).next_multiple_of(16) {
                        16 => self.qblock::<L, 16>(bases, out, blk, buf),
                        32 => self.qblock::<L, 32>(bases, out, blk, buf),
                        48 => self.qblock::<L, 48>(bases, out, blk, buf),
                        _ => self.qblock::<L, 64>(bases, out, blk, buf),
                    }
                }
            }
        }
    }
}
