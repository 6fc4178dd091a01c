//! `Op::AttentionVjp` fused: the attention backward pass per (batch, kv head), with the
//! probabilities recomputed block by block so the `Sq × Sk` matrices never exist whole.
//!
//! One work item owns batch `bi` and kv head `kh`: it packs `Kᵀ` and `Vᵀ` once, then for
//! every query head of the group and every block of up to [`BQ`] queries (keys limited
//! to the ones a causal or window mask lets the block see):
//! 1. `S = Q·Kᵀ` and `dP = dO·Vᵀ` (two micro-GEMMs into row-major scratch);
//! 2. per row: `s = scale·S` (softcap `c·tanh(s/c)`, `+ bias`, masked keys `−∞`),
//!    `P = softmax(s)` (a row with no allowed key is zeros), `D = Σ P⊙dP` and
//!    `dS = scale·P⊙(dP − D)` (times `1 − tanh²` under a softcap);
//! 3. `dQ = dS·K` straight into the packed output, `dK += dSᵀ·Q`, `dV += Pᵀ·dO` into
//!    the item's accumulators, which sum the query heads of a grouped-query group.
//!
//! The products run on the forward kernel's register-blocked micro-GEMM
//! ([`super::gemm`]) at the CPU's widest level; every sum runs in a fixed order, so the
//! result does not depend on the thread count. Every mask kind, a bias (which gets no
//! gradient here), softcap, `v_head_dim ≠ head_dim` and grouped-query heads are fused;
//! operands that are not f32 with unit innermost stride go to the oracle (the plan
//! returns `None`). Work is spread over `B·Hk` items, so a single (batch, kv head)
//! runs on one thread.

use super::super::par::{Bases, SendPtr, par_for};
use super::block::{level, with_buf};
use super::gemm::{self, AVX2, AVX512, Init, PORTABLE};
use super::{AttnPlan, BQ};
use crate::math;
use rlx_ir::{Activation, MaskKind};

/// The scratch of one item, carved from the thread's buffer (lengths in f32).
struct Scratch {
    /// Row stride of the score rows and of the packed `Kᵀ`/`Vᵀ` (Sk rounded up to 16).
    skp: usize,
    kt: usize,
    vt: usize,
    dk: usize,
    dv: usize,
    s: usize,
    dp: usize,
    t: usize,
    len: usize,
}

impl AttnPlan {
    /// Lengths of dq and dk in the packed result (dv follows them).
    fn vjp_lens(&self) -> (usize, usize) {
        (
            self.b * self.sq * self.h * self.d,
            self.b * self.sk * self.hk * self.d,
        )
    }

    fn scratch(&self) -> Scratch {
        let skp = self.sk.next_multiple_of(16).max(16);
        let bq = BQ.min(self.sq.max(1));
        let kt = 0;
        let vt = kt + self.d * skp;
        let dk = vt + self.dv * skp;
        let dv = dk + self.sk * self.d;
        let s = dv + self.sk * self.dv;
        let dp = s + bq * skp;
        let t = dp + bq * skp;
        let len = t + if self.softcap.is_some() { bq * skp } else { 0 };
        Scratch {
            skp,
            kt,
            vt,
            dk,
            dv,
            s,
            dp,
            t,
            len,
        }
    }

    /// Run the fused backward into the packed `[|q| + |k| + |v|]` result.
    pub(super) fn run_vjp(&self, bases: &[*mut u8]) -> Result<(), String> {
        let (nq, nk) = self.vjp_lens();
        let total = nq + nk + self.b * self.sk * self.hk * self.dv;
        if total == 0 {
            return Ok(());
        }
        let mut scratch: Vec<f32> = Vec::new();
        let out: *mut f32 = if self.trivial {
            bases[self.out_buf] as *mut f32
        } else {
            scratch = vec![0f32; total];
            scratch.as_mut_ptr()
        };
        let lvl = level();
        let bs = Bases(bases);
        let op = SendPtr(out as *mut u8);
        // Each item writes its own dq rows and its own kv head's dk/dv rows.
        par_for(self.b * self.hk, |item| {
            let (bi, kh) = (item / self.hk, item % self.hk);
            with_buf(|buf| self.vjp_item(lvl, bs.get(), op.get() as *mut f32, bi, kh, buf));
            Ok(())
        })?;
        if !self.trivial {
            self.epilogue_from(bases, &scratch)?;
        }
        Ok(())
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
        let sc = self.scratch();
        if buf.len() < sc.len {
            buf.resize(sc.len, 0.0);
        }
        match level {
            // SAFETY: `level()` returned AVX512 only after detecting avx512f; `bases` are the
            // plan's bound buffers, `out` the packed result that only this item writes at
            // (bi, kh)'s rows, and `buf` holds the scratch's `len` f32s.
            #[cfg(target_arch = "x86_64")]
            AVX512 => unsafe { self.vjp_avx512(bases, out, bi, kh, buf, &sc) },
            // SAFETY: as above, after detecting avx2 and fma.
            #[cfg(target_arch = "x86_64")]
            AVX2 => unsafe { self.vjp_avx2(bases, out, bi, kh, buf, &sc) },
            // SAFETY: the portable level needs no CPU feature; buffers as above.
            _ => unsafe { self.vjp_body::<PORTABLE>(bases, out, bi, kh, buf, &sc) },
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
        sc: &Scratch,
    ) {
        // SAFETY: the caller detected avx512f and passes what vjp_body needs.
        unsafe { self.vjp_body::<AVX512>(bases, out, bi, kh, buf, sc) }
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
        sc: &Scratch,
    ) {
        // SAFETY: the caller detected avx2 and fma and passes what vjp_body needs.
        unsafe { self.vjp_body::<AVX2>(bases, out, bi, kh, buf, sc) }
    }

    /// The item (batch `bi`, kv head `kh`), inlined into a function compiled for level `L`.
    /// # Safety
    /// `bases` must be the buffers this plan was bound to, `out` the dense packed
    /// f32 result that no other thread writes at this item's rows, `buf` at
    /// least `sc.len` long, and the CPU must have level `L`'s features.
    #[inline(always)]
    unsafe fn vjp_body<const L: u8>(
        &self,
        bases: &[*mut u8],
        out: *mut f32,
        bi: usize,
        kh: usize,
        buf: &mut [f32],
        sc: &Scratch,
    ) {
        let (sq, sk, h, hk, d, dv) = (self.sq, self.sk, self.h, self.hk, self.d, self.dv);
        let group = h / hk;
        let skp = sc.skp;
        let (nqt, nkt) = self.vjp_lens();
        let (ql, kl, vl) = (self.q.1, self.k.1, self.v.1);
        let (gbuf, gl) = self.g.expect("a VJP plan has a cotangent");
        let qb = bases[self.q.0] as *const f32;
        let kb = bases[self.k.0] as *const f32;
        let vb = bases[self.v.0] as *const f32;
        let gb = bases[gbuf] as *const f32;
        let bp = buf.as_mut_ptr();
        // SAFETY: every offset in this block indexes q/k/v/g through their bound
        // layouts at indices inside [B, S, H, D] (the plan checked the bound dims), the
        // packed output inside dq, dk, dv (at this item's batch and heads), and the
        // scratch inside the regions `Scratch` laid out within `sc.len <= buf.len()`.
        unsafe {
            let (kt, vt) = (bp.add(sc.kt), bp.add(sc.vt));
            let (dka, dva) = (bp.add(sc.dk), bp.add(sc.dv));
            let (sb, dpb, tb) = (bp.add(sc.s), bp.add(sc.dp), bp.add(sc.t));
            // Kᵀ and Vᵀ: rows of Sk keys, read as B operands of the score products.
            for ki in 0..sk {
                let kp = kb.add(kl.at(bi, ki, kh));
                for j in 0..d {
                    *kt.add(j * skp + ki) = *kp.add(j);
                }
                let vp = vb.add(vl.at(bi, ki, kh));
                for j in 0..dv {
                    *vt.add(j * skp + ki) = *vp.add(j);
                }
            }
            std::ptr::write_bytes(dka, 0, sk * (d + dv));
            let bq = BQ.min(sq.max(1));
            for hi in kh * group..(kh + 1) * group {
                let mut q0 = 0;
                while q0 < sq {
                    let q1 = (q0 + bq).min(sq);
                    let nq = q1 - q0;
                    let dq = out.add(((bi * sq + q0) * h + hi) * d);
                    let (klo, khi) = (self.key_lo(q0), self.key_hi(q1 - 1));
                    if khi <= klo {
                        for r in 0..nq {
                            std::ptr::write_bytes(dq.add(r * h * d), 0, d);
                        }
                        q0 = q1;
                        continue;
                    }
                    let nk = khi - klo;
                    let qp = qb.add(ql.at(bi, q0, hi));
                    let gp = gb.add(gl.at(bi, q0, hi));
                    let skl = skp as isize;
                    gemm::gemm::<L>(
                        nq,
                        nk,
                        d,
                        qp,
                        ql.ss,
                        1,
                        kt.add(klo),
                        skl,
                        sb,
                        skp,
                        Init::Zero,
                    );
                    gemm::gemm::<L>(
                        nq,
                        nk,
                        dv,
                        gp,
                        gl.ss,
                        1,
                        vt.add(klo),
                        skl,
                        dpb,
                        skp,
                        Init::Zero,
                    );
                    for r in 0..nq {
                        let s = std::slice::from_raw_parts_mut(sb.add(r * skp), nk);
                        let dp = std::slice::from_raw_parts_mut(dpb.add(r * skp), nk);
                        let t = std::slice::from_raw_parts_mut(tb.add(r * skp), nk);
                        self.row_grad(bases, bi, hi, q0 + r, klo, s, dp, t);
                    }
                    let kp = kb.add(kl.at(bi, klo, kh));
                    gemm::gemm::<L>(nq, d, nk, dpb, skl, 1, kp, kl.ss, dq, h * d, Init::Zero);
                    gemm::gemm::<L>(
                        nk,
                        d,
                        nq,
                        dpb,
                        1,
                        skl,
                        qp,
                        ql.ss,
                        dka.add(klo * d),
                        d,
                        Init::Add,
                    );
                    gemm::gemm::<L>(
                        nk,
                        dv,
                        nq,
                        sb,
                        1,
                        skl,
                        gp,
                        gl.ss,
                        dva.add(klo * dv),
                        dv,
                        Init::Add,
                    );
                    q0 = q1;
                }
            }
            for ki in 0..sk {
                let at = (bi * sk + ki) * hk + kh;
                std::ptr::copy_nonoverlapping(dka.add(ki * d), out.add(nqt + at * d), d);
                let dvr = out.add(nqt + nkt + at * dv);
                std::ptr::copy_nonoverlapping(dva.add(ki * dv), dvr, dv);
            }
        }
    }

    /// One query row over keys `klo..klo + s.len()`: `s` holds `q·k` and becomes `P`,
    /// `dp` holds `dO·v` and becomes `dS` (scaled, through the softcap); `t` is scratch
    /// for the softcap's tanh.
    #[allow(clippy::too_many_arguments)]
    fn row_grad(
        &self,
        bases: &[*mut u8],
        bi: usize,
        hi: usize,
        qi: usize,
        klo: usize,
        s: &mut [f32],
        dp: &mut [f32],
        t: &mut [f32],
    ) {
        let nk = s.len();
        let scale = self.scale;
        s.iter_mut().for_each(|x| *x *= scale);
        if let Some(c) = self.softcap {
            t.iter_mut().zip(s.iter()).for_each(|(tv, x)| *tv = *x / c);
            math::unary_f32_inplace(Activation::Tanh, t);
            s.iter_mut().zip(t.iter()).for_each(|(x, tv)| *x = c * tv);
        }
        match self.mask {
            MaskKind::Bias => {
                for (j, x) in s.iter_mut().enumerate() {
                    *x += self.bias_at(bases, bi, hi, qi, klo + j);
                }
            }
            MaskKind::Custom => {
                for (j, x) in s.iter_mut().enumerate() {
                    if !self.custom_ok(bases, bi, klo + j) {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
            MaskKind::Causal | MaskKind::SlidingWindow(_) => {
                // Allowed keys of this row: key_lo(qi)..key_hi(qi), within the block's range.
                let lo = self.key_lo(qi).saturating_sub(klo).min(nk);
                let hi = self.key_hi(qi).saturating_sub(klo).min(nk).max(lo);
                s[..lo].fill(f32::NEG_INFINITY);
                s[hi..].fill(f32::NEG_INFINITY);
            }
            MaskKind::None => {}
        }
        let m = s.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
        if m == f32::NEG_INFINITY {
            // No allowed key: the row's output is zero, and so are its gradients.
            s.fill(0.0);
            dp.fill(0.0);
            return;
        }
        s.iter_mut().for_each(|x| *x -= m);
        math::unary_f32_inplace(Activation::Exp, s);
        let inv = 1.0 / s.iter().sum::<f32>();
        s.iter_mut().for_each(|x| *x *= inv);
        let centre: f32 = s.iter().zip(dp.iter()).map(|(p, g)| p * g).sum();
        if self.softcap.is_some() {
            for ((g, p), tv) in dp.iter_mut().zip(s.iter()).zip(t.iter()) {
                *g = scale * p * (*g - centre) * (1.0 - tv * tv);
            }
        } else {
            for (g, p) in dp.iter_mut().zip(s.iter()) {
                *g = scale * p * (*g - centre);
            }
        }
    }
}
