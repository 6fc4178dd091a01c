//! One work item: the queries `q0..q1` of batch `bi`, head `hi`, against every key block
//! they may see, with an online softmax (running row maxima `m`, sums `l` and output
//! accumulators rescaled when the maximum grows).
//!
//! Per key block: `Kᵀ` is packed densely (`d` rows of `ls` keys, zero padded to whole
//! vectors), `S = (scale·Q)·Kᵀ` is one micro-GEMM, then softcap, bias and mask apply,
//! `exp(S − m)` runs once over the block, and `O += P·V` is a second micro-GEMM reading
//! `V` in place. Masked scores become `−∞`, so their probabilities are exact zeros; the
//! product adds `0·v` for them, which is `0` unless `v` is infinite or NaN. A partially
//! masked block whose `V` holds such values takes a loop over the allowed keys only, so a
//! NaN or infinity behind the mask never leaks into a row (as in the oracle, which never
//! reads masked keys).
//!
//! A row that sees no key is all zeros; a row that sees keys whose scores are all `−∞`
//! ends as `0/0 = NaN` (the oracle's softmax gives NaN there too); a NaN score makes the
//! row's maximum NaN and so the whole row NaN.

use super::gemm::{self, AVX2, AVX512, PORTABLE};
use super::{AttnPlan, BK, BQ};
use crate::math;
use rlx_ir::{Activation, MaskKind};
use std::cell::RefCell;

const NEG_INF: f32 = f32::NEG_INFINITY;

thread_local! {
    /// Per-thread scratch (packed Q, packed Kᵀ, the score block and the accumulators),
    /// grown on demand and reused by every item the thread runs.
    static BUF: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` with this thread's block scratch.
pub(super) fn with_buf<R>(f: impl FnOnce(&mut Vec<f32>) -> R) -> R {
    BUF.with(|b| f(&mut b.borrow_mut()))
}

/// The widest [`gemm`] level this CPU runs.
pub(super) fn level() -> u8 {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            return AVX512;
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return AVX2;
        }
    }
    PORTABLE
}

/// The queries of one work item.
#[derive(Clone, Copy)]
pub(super) struct Item {
    pub(super) bi: usize,
    pub(super) hi: usize,
    pub(super) q0: usize,
    pub(super) q1: usize,
}

impl AttnPlan {
    /// Item `it` into `out` (`[B, Sq, H, Dv]`, dense), compiled for `level`.
    pub(super) fn block(
        &self,
        level: u8,
        bases: &[*mut u8],
        out: *mut f32,
        it: Item,
        buf: &mut Vec<f32>,
    ) {
        match level {
            // SAFETY: `level()` found the features on this CPU.
            #[cfg(target_arch = "x86_64")]
            AVX512 => unsafe { self.block_avx512(bases, out, it, buf) },
            #[cfg(target_arch = "x86_64")]
            AVX2 => unsafe { self.block_avx2(bases, out, it, buf) },
            _ => unsafe { self.body::<PORTABLE>(bases, out, it, buf) },
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn block_avx512(&self, bases: &[*mut u8], out: *mut f32, it: Item, buf: &mut Vec<f32>) {
        unsafe { self.body::<AVX512>(bases, out, it, buf) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn block_avx2(&self, bases: &[*mut u8], out: *mut f32, it: Item, buf: &mut Vec<f32>) {
        unsafe { self.body::<AVX2>(bases, out, it, buf) }
    }

    /// The driver, inlined into a function compiled for level `L`.
    #[inline(always)]
    unsafe fn body<const L: u8>(
        &self,
        bases: &[*mut u8],
        out: *mut f32,
        it: Item,
        buf: &mut Vec<f32>,
    ) {
        let Item { bi, hi, q0, q1 } = it;
        let (d, dv) = (self.d, self.dv);
        let kh = hi / (self.h / self.hk);
        let nq = q1 - q0;
        debug_assert!(nq <= BQ);
        let need = nq * d + d * BK + nq * BK + nq * dv;
        if buf.len() < need {
            buf.resize(need, 0.0);
        }
        let (q, rest) = buf.split_at_mut(nq * d);
        let (kt, rest) = rest.split_at_mut(d * BK);
        let (s, rest) = rest.split_at_mut(nq * BK);
        let acc = &mut rest[..nq * dv];
        let qb = bases[self.q.0] as *const f32;
        let kb = bases[self.k.0] as *const f32;
        let vb = bases[self.v.0] as *const f32;
        // Queries pre-scaled into a dense block.
        for i in 0..nq {
            let src = unsafe { std::slice::from_raw_parts(qb.add(self.q.1.at(bi, q0 + i, hi)), d) };
            for (o, &x) in q[i * d..(i + 1) * d].iter_mut().zip(src) {
                *o = x * self.scale;
            }
        }
        acc.fill(0.0);
        let mut m = [NEG_INF; BQ];
        let mut l = [0f32; BQ];
        let mut seen = [false; BQ];
        let mut colok = [true; BK];
        let custom = self.mask == MaskKind::Custom;
        // Keys outside [lo(q0), hi(q1 − 1)) are masked for every query of the block.
        let (mut k0, kend) = (self.key_lo(q0), self.key_hi(q1 - 1));
        while k0 < kend {
            let k1 = (k0 + BK).min(kend);
            let nk = k1 - k0;
            // `full`: no score of the block is masked.
            let full = if custom {
                let (mut all, mut any) = (true, false);
                for (j, ok) in colok[..nk].iter_mut().enumerate() {
                    *ok = self.custom_ok(bases, bi, k0 + j);
                    all &= *ok;
                    any |= *ok;
                }
                if !any {
                    k0 = k1;
                    continue;
                }
                all
            } else {
                self.key_lo(q1 - 1) <= k0 && self.key_hi(q0) >= k1
            };
            // Kᵀ packed with rows of `ls` keys (whole vectors; the padding scores are
            // computed but never read).
            let ls = nk.next_multiple_of(16);
            for j in 0..nk {
                let src =
                    unsafe { std::slice::from_raw_parts(kb.add(self.k.1.at(bi, k0 + j, kh)), d) };
                for (t, &x) in src.iter().enumerate() {
                    kt[t * ls + j] = x;
                }
            }
            if ls > nk {
                for t in 0..d {
                    kt[t * ls + nk..(t + 1) * ls].fill(0.0);
                }
            }
            let sb = &mut s[..nq * ls];
            unsafe {
                gemm::gemm::<L>(
                    nq,
                    ls,
                    d,
                    q.as_ptr(),
                    d,
                    kt.as_ptr(),
                    ls as isize,
                    sb.as_mut_ptr(),
                    ls,
                    false,
                )
            };
            if let Some(c) = self.softcap {
                for x in sb.iter_mut() {
                    *x /= c;
                }
                math::unary_f32_inplace(Activation::Tanh, sb);
                for x in sb.iter_mut() {
                    *x *= c;
                }
            }
            if self.mask == MaskKind::Bias {
                for i in 0..nq {
                    for j in 0..nk {
                        sb[i * ls + j] += self.bias_at(bases, bi, hi, q0 + i, k0 + j);
                    }
                }
            }
            if full {
                seen[..nq].fill(true);
            } else if custom {
                for i in 0..nq {
                    for (x, &ok) in sb[i * ls..i * ls + nk].iter_mut().zip(&colok) {
                        if !ok {
                            *x = NEG_INF;
                        }
                    }
                }
                seen[..nq].fill(true);
            } else {
                for i in 0..nq {
                    let row = &mut sb[i * ls..i * ls + nk];
                    let (a, b) = self.row_keys(q0 + i, k0, k1);
                    if a >= b {
                        row.fill(NEG_INF);
                        continue;
                    }
                    seen[i] = true;
                    row[..a].fill(NEG_INF);
                    row[b..].fill(NEG_INF);
                }
            }
            // Online softmax: new maxima, then every row shifted by its maximum.
            let mut corr = [1f32; BQ];
            for i in 0..nq {
                let row = &mut sb[i * ls..(i + 1) * ls];
                let bm = nan_max(&row[..nk]);
                let mold = m[i];
                let mnew = if bm.is_nan() { f32::NAN } else { mold.max(bm) };
                if mnew == NEG_INF {
                    // Nothing seen yet has a finite score: the block adds nothing.
                    row.fill(NEG_INF);
                    continue;
                }
                corr[i] = if mold == NEG_INF {
                    0.0
                } else {
                    (mold - mnew).exp()
                };
                for x in row[..nk].iter_mut() {
                    *x -= mnew;
                }
                m[i] = mnew;
            }
            math::unary_f32_inplace(Activation::Exp, sb);
            for i in 0..nq {
                l[i] = l[i] * corr[i] + sum16(&sb[i * ls..i * ls + nk]);
                if corr[i] != 1.0 {
                    for x in acc[i * dv..(i + 1) * dv].iter_mut() {
                        *x *= corr[i];
                    }
                }
            }
            let ss = self.v.1.ss;
            let v0 = unsafe { vb.add(self.v.1.at(bi, k0, kh)) };
            if full || unsafe { all_finite(v0, ss, nk, dv) } {
                unsafe {
                    gemm::gemm::<L>(
                        nq,
                        dv,
                        nk,
                        sb.as_ptr(),
                        ls,
                        v0,
                        ss,
                        acc.as_mut_ptr(),
                        dv,
                        true,
                    )
                };
            } else {
                for i in 0..nq {
                    let (a, b) = if custom {
                        (0, nk)
                    } else {
                        self.row_keys(q0 + i, k0, k1)
                    };
                    let o = &mut acc[i * dv..(i + 1) * dv];
                    for j in a..b {
                        if custom && !colok[j] {
                            continue;
                        }
                        let p = sb[i * ls + j];
                        let vr =
                            unsafe { std::slice::from_raw_parts(v0.offset(j as isize * ss), dv) };
                        for (x, &y) in o.iter_mut().zip(vr) {
                            *x += p * y;
                        }
                    }
                }
            }
            k0 = k1;
        }
        for i in 0..nq {
            let dst = unsafe {
                std::slice::from_raw_parts_mut(
                    out.add(((bi * self.sq + q0 + i) * self.h + hi) * dv),
                    dv,
                )
            };
            if !seen[i] {
                dst.fill(0.0);
            } else {
                let li = l[i];
                for (x, &y) in dst.iter_mut().zip(&acc[i * dv..(i + 1) * dv]) {
                    *x = y / li;
                }
            }
        }
    }

    /// The keys `k0 + a .. k0 + b` of block `k0..k1` that query `qi` may see under a
    /// causal, sliding-window or no mask (`a ≥ b`: none).
    #[inline(always)]
    fn row_keys(&self, qi: usize, k0: usize, k1: usize) -> (usize, usize) {
        let a = self.key_lo(qi).clamp(k0, k1) - k0;
        let b = self.key_hi(qi).clamp(k0, k1) - k0;
        (a, b)
    }
}

/// Maximum that propagates NaN (a NaN lane stays NaN), in 16 independent lanes.
#[inline(always)]
fn nan_max(x: &[f32]) -> f32 {
    #[inline(always)]
    fn pick(v: f32, m: f32) -> f32 {
        if v > m || v.is_nan() { v } else { m }
    }
    let mut lanes = [NEG_INF; 16];
    let mut it = x.chunks_exact(16);
    for c in &mut it {
        for k in 0..16 {
            lanes[k] = pick(c[k], lanes[k]);
        }
    }
    it.remainder()
        .iter()
        .chain(&lanes)
        .fold(NEG_INF, |m, &v| pick(v, m))
}

/// `Σ x` in 16 independent lanes (vectorizes; a fixed order, so deterministic).
#[inline(always)]
fn sum16(x: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let mut it = x.chunks_exact(16);
    for c in &mut it {
        for k in 0..16 {
            lanes[k] += c[k];
        }
    }
    lanes.iter().chain(it.remainder()).sum()
}

/// Whether the `n` rows of `w` values at `p`, `stride` apart, are all finite.
#[inline(always)]
unsafe fn all_finite(p: *const f32, stride: isize, n: usize, w: usize) -> bool {
    let mut ok = true;
    for j in 0..n {
        let r = unsafe { std::slice::from_raw_parts(p.offset(j as isize * stride), w) };
        ok &= r.iter().fold(true, |a, x| a & x.is_finite());
    }
    ok
}
