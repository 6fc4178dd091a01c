//! One work item: the queries `q0..q1` of batch `bi`, head `hi`, against every key block
//! they may see, with an online softmax (running maxima `m`, sums `l` and output
//! accumulators rescaled when the maximum grows).
//!
//! Queries run along the vector lanes (`LQ` = the item's queries rounded up to 16), so
//! everything is transposed: `Qᵀ` (pre-scaled) is packed once per item, and per key
//! block `Sᵀ = K·Qᵀ` is one micro-GEMM reading K in place; softcap, bias and mask apply;
//! the per-query maxima and sums are vertical folds over the block's rows; `exp(S − m)`
//! runs once over the block; and `Oᵀ = Oᵀ·diag(corr) + Vᵀ·Pᵀ` is a second micro-GEMM
//! reading V in place. `Oᵀ` is transposed into the output rows at the end. Blocks that
//! straddle a causal or window edge run both products in bands of 16 keys over only the
//! query vectors the band may see.
//!
//! Masked scores become `−∞`, so their probabilities are exact zeros; the product adds
//! `0·v` for them, which is `0` unless `v` is infinite or NaN. A partially masked block
//! whose `V` holds such values takes a loop over the allowed pairs only, so a NaN or
//! infinity behind the mask never leaks into a row (as in the oracle, which never reads
//! masked keys).
//!
//! A row that sees no key is all zeros; a row that sees keys whose scores are all `−∞`
//! ends as `0/0 = NaN` (the oracle's softmax gives NaN there too); a NaN score makes the
//! row's maximum NaN and so the whole row NaN.

use super::gemm::{self, AVX2, AVX512, PORTABLE};
use super::{AttnPlan, BK, BQ};
use crate::math;
use rlx_ir::{Activation, MaskKind};
use std::cell::RefCell;

pub(super) const NEG_INF: f32 = f32::NEG_INFINITY;

/// Items of at most this many queries take the narrow path (`narrow.rs`); `by_lanes!`
/// below picks it.
pub(super) const NARROW: usize = 4;

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

/// Key bands `(b0, b1, c0, c1)` of a block: keys `b0..b1`, query lanes `c0..c1`.
type Bands = [(usize, usize, usize, usize); BK / 16];

/// The queries of one work item.
#[derive(Clone, Copy)]
pub(super) struct Item {
    pub(super) bi: usize,
    pub(super) hi: usize,
    pub(super) q0: usize,
    pub(super) q1: usize,
}

/// `body::<level, LQ>` for the item's lane count (`BQ` is 64: at most four vectors).
macro_rules! by_lanes {
    ($s:ident, $l:expr, $nq:expr, $($a:expr),*) => {{
        const { assert!(BQ == 64) };
        match $nq.next_multiple_of(16) {
            _ if $nq <= NARROW => $s.narrow($($a),*),
            16 => $s.body::<{ $l }, 16>($($a),*),
            32 => $s.body::<{ $l }, 32>($($a),*),
            48 => $s.body::<{ $l }, 48>($($a),*),
            _ => $s.body::<{ $l }, 64>($($a),*),
        }
    }};
}

impl AttnPlan {
    /// Item `it` into `out` (`[B, Sq, H, Dv]`, dense), compiled for `level`.
    pub(super) fn block(
        &self,
        level: u8,
        bases: &[*mut u8],
        out: *mut f32,
        it: Item,
        next: Option<Item>,
        buf: &mut Vec<f32>,
    ) {
        self.prefetch(bases, out, it, next);
        match level {
            // SAFETY: `level()` returned AVX512 only after detecting avx512f on this CPU;
            // `bases` are the buffers this plan was bound to, `out` holds the
            // `[B, Sq, H, Dv]` f32 result and `it` is an item of this plan (the callers'
            // invariants, which is what `body`/`narrow` need).
            #[cfg(target_arch = "x86_64")]
            AVX512 => unsafe { self.block_avx512(bases, out, it, buf) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `level()` returned AVX2 only after detecting avx2 and fma; plan, buffers,
            // `out` and item as for the AVX512 arm.
            AVX2 => unsafe { self.block_avx2(bases, out, it, buf) },
            // SAFETY: the portable level needs no CPU feature; plan, buffers, `out` and item as
            // above.
            _ => unsafe { by_lanes!(self, PORTABLE, it.q1 - it.q0, bases, out, it, buf) },
        }
    }

    /// # Safety
    /// As [`AttnPlan::body`], and the CPU must have AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn block_avx512(&self, bases: &[*mut u8], out: *mut f32, it: Item, buf: &mut Vec<f32>) {
        // SAFETY: the caller detected avx512f (this function's features) and passes the plan's
        // bound buffers, the `[B, Sq, H, Dv]` output and one of its items.
        unsafe { by_lanes!(self, AVX512, it.q1 - it.q0, bases, out, it, buf) }
    }

    /// # Safety
    /// As [`AttnPlan::body`], and the CPU must have AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn block_avx2(&self, bases: &[*mut u8], out: *mut f32, it: Item, buf: &mut Vec<f32>) {
        // SAFETY: the caller detected avx2 and fma and passes the plan's bound buffers, the
        // output and one of its items.
        unsafe { by_lanes!(self, AVX2, it.q1 - it.q0, bases, out, it, buf) }
    }

    /// Start loading what the items will touch first and that is likely not cached: the
    /// next item's query rows and this item's output rows (both read or written only once
    /// per call, rows far apart, so the hardware prefetchers do not find them).
    fn prefetch(&self, bases: &[*mut u8], out: *mut f32, it: Item, next: Option<Item>) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
            let lines = |p: *const f32, n: usize| {
                for off in (0..n).step_by(16) {
                    // SAFETY: _mm_prefetch is SSE (baseline on x86-64) and only a hint that
                    // never faults; the addresses are formed with wrapping_add.
                    unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(off) as *const i8) };
                }
            };
            if let Some(n) = next {
                let qb = bases[self.q.0] as *const f32;
                for qi in n.q0..n.q1 {
                    lines(qb.wrapping_add(self.q.1.at(n.bi, qi, n.hi)), self.d);
                }
            }
            for qi in it.q0..it.q1 {
                let row = ((it.bi * self.sq + qi) * self.h + it.hi) * self.dv;
                lines(out.wrapping_add(row), self.dv);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (bases, out, it, next);
    }

    /// The driver, inlined into a function compiled for level `L`, for items whose
    /// queries fill `LQ` lanes (a constant, so the per-query rows stay in registers).
    /// # Safety
    /// `bases` must be the buffers this plan was bound to (q, k, v and any mask/bias
    /// read through their layouts), `out` must hold `B·Sq·H·Dv` f32 that no other
    /// thread writes at this item's rows, `it` must be an item of this plan (`q1 − q0
    /// <= BQ`, `LQ` its queries rounded up to 16) and the CPU must have level `L`'s
    /// features.
    #[inline(always)]
    unsafe fn body<const L: u8, const LQ: usize>(
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
        // Queries run along the vector lanes: every per-query quantity is a row of `lq`.
        let lq = LQ;
        debug_assert_eq!(lq, nq.next_multiple_of(16));
        let need = (d + BK + dv) * lq;
        if buf.len() < need {
            buf.resize(need, 0.0);
        }
        let (qt, rest) = buf.split_at_mut(d * lq);
        let (st, rest) = rest.split_at_mut(BK * lq);
        let ot = &mut rest[..dv * lq];
        let qb = bases[self.q.0] as *const f32;
        let kb = bases[self.k.0] as *const f32;
        let vb = bases[self.v.0] as *const f32;
        // Qᵀ, pre-scaled, padded with zero queries to whole vectors.
        qt.fill(0.0);
        // SAFETY: `qt` has `d·lq` floats (rows `lq` apart, `nq <= lq` columns written); query
        // rows `q0..q1` of head `hi` lie in q's buffer (its layout comes from the bound f32
        // load plan whose dims AttnPlan::new checked against B, Sq, H, D), `d` values each; the
        // caller guarantees level `L`.
        unsafe {
            gemm::transpose::<L>(
                gemm::Transposed {
                    rows: d,
                    cols: nq,
                    src: qb.add(self.q.1.at(bi, q0, hi)),
                    sstride: self.q.1.ss,
                    dst: qt.as_mut_ptr(),
                    dstride: lq,
                },
                |_| self.scale,
            )
        };
        ot.fill(0.0);
        let mut m = [NEG_INF; BQ];
        let mut l = [0f32; BQ];
        let mut seen = [false; BQ];
        let mut colok = [true; BK];
        let custom = self.mask == MaskKind::Custom;
        let (kss, vss) = (self.k.1.ss, self.v.1.ss);
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
            let sb = &mut st[..nk * lq];
            // SAFETY: key `k0 < kend <= sk` of batch `bi`, head `kh < hk`, is inside k's buffer
            // (its layout covers [B, Sk, Hk, D]).
            let k0p = unsafe { kb.add(self.k.1.at(bi, k0, kh)) };
            // A block that straddles a causal or window edge runs in bands of 16 keys,
            // each over only the query vectors some key of the band may see (about 5/8
            // of the work on a causal diagonal block). The rest is masked below.
            let banded = !full && !custom;
            let (bands, nb) = self.bands(k0, nk, q0, q1);
            let all = [(0, nk, 0, lq)];
            let parts: &[(usize, usize, usize, usize)] = if banded { &bands[..nb] } else { &all };
            for &(b0, b1, c0, c1) in parts {
                // SAFETY: band rows `b0..b1` of the block are keys `k0 + b0 .. k0 + b1 <=
                // kend`, `d` values each, `kss` apart (in k's buffer); the band's query columns
                // `c0..c1 <= lq` of `qt` (`d` rows of `lq`) and of `sb` (`nk` rows of `lq`,
                // written here only) are inside this thread's scratch, which no operand
                // overlaps.
                unsafe {
                    gemm::gemm::<L>(
                        gemm::Operands {
                            m: b1 - b0,
                            n: c1 - c0,
                            k: d,
                            a: k0p.offset(b0 as isize * kss),
                            lda: kss,
                            ldp: 1,
                            b: qt.as_ptr().add(c0),
                            ldb: lq as isize,
                            c: sb.as_mut_ptr().add(b0 * lq + c0),
                            ldc: lq,
                        },
                        gemm::Init::Zero,
                    )
                };
            }
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
                for j in 0..nk {
                    for i in 0..nq {
                        sb[j * lq + i] += self.bias_at(bases, bi, hi, q0 + i, k0 + j);
                    }
                }
            }
            if full || custom {
                for (j, row) in sb.chunks_exact_mut(lq).enumerate() {
                    if !colok[j] {
                        row.fill(NEG_INF);
                    }
                }
                seen[..nq].fill(true);
            } else {
                for (j, row) in sb.chunks_exact_mut(lq).enumerate() {
                    let (a, b) = self.key_queries(k0 + j, q0, q1);
                    row[..a].fill(NEG_INF);
                    // Padding lanes too: a band may have left them unwritten.
                    row[b.max(a)..].fill(NEG_INF);
                }
                for (i, s) in seen[..nq].iter_mut().enumerate() {
                    let (a, b) = self.row_keys(q0 + i, k0, k1);
                    *s |= a < b;
                }
            }
            // Online softmax: per query (lane), the block maximum, the new running
            // maximum, the shift applied to the block and the factor for the past.
            let bm = fold_rows::<LQ>(sb, NEG_INF, nan_pick);
            let mut shift = [0f32; BQ];
            let mut corr = [0f32; BQ];
            for i in 0..lq {
                let mold = m[i];
                let mnew = if bm[i].is_nan() {
                    f32::NAN
                } else {
                    mold.max(bm[i])
                };
                // A lane whose scores so far are all −∞ adds nothing: shift by 0 (so
                // e^(−∞ − 0) = 0) and keep the past (nothing) as is.
                let empty = mnew == NEG_INF;
                shift[i] = if empty { 0.0 } else { mnew };
                corr[i] = if empty {
                    0.0
                } else if mold == NEG_INF {
                    NEG_INF
                } else {
                    mold - mnew
                };
                if !empty {
                    m[i] = mnew;
                }
            }
            math::unary_f32_inplace(Activation::Exp, &mut corr[..lq]);
            for row in sb.chunks_exact_mut(LQ) {
                let row: &mut [f32; LQ] = row.try_into().unwrap();
                for i in 0..LQ {
                    row[i] -= shift[i];
                }
            }
            math::unary_f32_inplace(Activation::Exp, sb);
            let colsum = fold_rows::<LQ>(sb, 0.0, |p, acc| acc + p);
            for i in 0..lq {
                l[i] = l[i] * corr[i] + colsum[i];
            }
            // SAFETY: key `k0 < sk` of batch `bi`, head `kh < hk`, is inside v's buffer (its
            // layout covers [B, Sk, Hk, Dv]).
            let v0 = unsafe { vb.add(self.v.1.at(bi, k0, kh)) };
            // SAFETY: rows `k0..k0 + nk` of V, `dv` values each and `vss` apart, are in v's
            // buffer.
            let clean = full || unsafe { all_finite(v0, vss, nk, dv) };
            if clean && banded {
                for row in ot.chunks_exact_mut(LQ) {
                    let row: &mut [f32; LQ] = row.try_into().unwrap();
                    for i in 0..LQ {
                        row[i] *= corr[i];
                    }
                }
                for &(b0, b1, c0, c1) in parts {
                    // SAFETY: `A` is `Vᵀ` of the band's keys (`dv × (b1−b0)`, read in v's
                    // buffer), `B` the band's rows of `sb` (columns `c0..c1 <= lq`), `C`
                    // columns `c0..c1` of `ot` (`dv` rows of `lq`): all inside their buffers;
                    // `ot` is thread scratch, overlapping no operand.
                    unsafe {
                        gemm::gemm::<L>(
                            gemm::Operands {
                                m: dv,
                                n: c1 - c0,
                                k: b1 - b0,
                                a: v0.offset(b0 as isize * vss),
                                lda: 1,
                                ldp: vss,
                                b: sb.as_ptr().add(b0 * lq + c0),
                                ldb: lq as isize,
                                c: ot.as_mut_ptr().add(c0),
                                ldc: lq,
                            },
                            gemm::Init::Add,
                        )
                    };
                }
            } else if clean {
                // SAFETY: `A` is `Vᵀ` of keys `k0..k0+nk` (in v's buffer), `B` is `sb` (`nk ×
                // lq`), `C` is `ot` (`dv × lq`) and the scales are `corr`, `lq <= BQ` values:
                // all in bounds, `ot` overlapping none of them.
                unsafe {
                    gemm::gemm::<L>(
                        gemm::Operands {
                            m: dv,
                            n: lq,
                            k: nk,
                            a: v0,
                            lda: 1,
                            ldp: vss,
                            b: sb.as_ptr(),
                            ldb: lq as isize,
                            c: ot.as_mut_ptr(),
                            ldc: lq,
                        },
                        gemm::Init::ScaleAdd(corr.as_ptr()),
                    )
                };
            } else {
                // Only the allowed (key, query) pairs: a non-finite value behind the mask
                // must not turn 0·v into NaN.
                for row in ot.chunks_exact_mut(lq) {
                    for (x, &c) in row.iter_mut().zip(&corr[..lq]) {
                        *x *= c;
                    }
                }
                for j in 0..nk {
                    let (a, b) = if custom {
                        if colok[j] { (0, nq) } else { (0, 0) }
                    } else {
                        self.key_queries(k0 + j, q0, q1)
                    };
                    // SAFETY: key `k0 + j < sk` has `dv` values in v's buffer; the slice is
                    // only read.
                    let vr = unsafe { std::slice::from_raw_parts(v0.offset(j as isize * vss), dv) };
                    for i in a..b {
                        let p = sb[j * lq + i];
                        for (c, &y) in vr.iter().enumerate() {
                            ot[c * lq + i] += p * y;
                        }
                    }
                }
            }
            k0 = k1;
        }
        let mut inv = [0f32; BQ];
        for (x, &li) in inv[..lq].iter_mut().zip(&l[..lq]) {
            *x = 1.0 / li;
        }
        // SAFETY: `bi < B`, `q0 < Sq`, `hi < H`: the row's first element is inside `out`
        // (`B·Sq·H·Dv` floats).
        let row0 = unsafe { out.add(((bi * self.sq + q0) * self.h + hi) * dv) };
        let ostride = self.h * dv;
        // SAFETY: rows `q0..q1` of head `hi` are `nq` rows of `dv` values `H·Dv` apart in `out`
        // (written only by this item); `ot` holds `dv × lq` floats, column `i < nq` read.
        unsafe {
            gemm::transpose::<L>(
                gemm::Transposed {
                    rows: nq,
                    cols: dv,
                    src: ot.as_ptr(),
                    sstride: lq as isize,
                    dst: row0,
                    dstride: ostride,
                },
                |i| inv[i],
            )
        };
        for (i, &s) in seen[..nq].iter().enumerate() {
            if !s {
                // SAFETY: row `i < nq` of this item is `dv` floats inside `out`, written only
                // by this item, and no other reference to it is live.
                unsafe { std::slice::from_raw_parts_mut(row0.add(i * ostride), dv) }.fill(0.0);
            }
        }
    }

    /// Bands of 16 keys of block `k0..k0 + nk` under a causal or window mask, each with
    /// the query lanes `c0..c1` (whole vectors) that some key of the band may see; bands
    /// no query sees are left out. Both bounds grow with the key, so the band's first key
    /// gives `c0` and its last `c1`.
    fn bands(&self, k0: usize, nk: usize, q0: usize, q1: usize) -> (Bands, usize) {
        let lq = (q1 - q0).next_multiple_of(16);
        let mut v = [(0, 0, 0, 0); BK / 16];
        let mut n = 0;
        for b0 in (0..nk).step_by(16) {
            let b1 = (b0 + 16).min(nk);
            let (a, _) = self.key_queries(k0 + b0, q0, q1);
            let (_, b) = self.key_queries(k0 + b1 - 1, q0, q1);
            if a < b {
                v[n] = (b0, b1, a / 16 * 16, b.next_multiple_of(16).min(lq));
                n += 1;
            }
        }
        (v, n)
    }

    /// The queries `q0 + a .. q0 + b` of block `q0..q1` that may see key `kj` under a
    /// causal, sliding-window or no mask (`a ≥ b`: none).
    #[inline(always)]
    fn key_queries(&self, kj: usize, q0: usize, q1: usize) -> (usize, usize) {
        let (lo, hi) = match self.mask {
            MaskKind::Causal => (kj, q1),
            MaskKind::SlidingWindow(w) => (kj, kj.saturating_add(w).saturating_add(1)),
            _ => (q0, q1),
        };
        (lo.clamp(q0, q1) - q0, hi.clamp(q0, q1) - q0)
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

/// `acc[i] = f(row[i], acc[i])` over the rows of `LQ` lanes of `sb`, from `init`. A
/// fixed-size accumulator returned by value, so it lives in vector registers.
#[inline(always)]
fn fold_rows<const LQ: usize>(sb: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> [f32; LQ] {
    let mut acc = [init; LQ];
    for row in sb.chunks_exact(LQ) {
        let row: &[f32; LQ] = row.try_into().unwrap();
        for i in 0..LQ {
            acc[i] = f(row[i], acc[i]);
        }
    }
    acc
}

/// `max(v, m)` that propagates NaN: once a lane is NaN it stays NaN.
#[inline(always)]
pub(super) fn nan_pick(v: f32, m: f32) -> f32 {
    if v > m || v.is_nan() { v } else { m }
}

/// Whether the `n` rows of `w` values at `p`, `stride` apart, are all finite.
/// # Safety
/// The `n` rows of `w` values at `p + j·stride` (`j < n`) must be readable f32s.
#[inline(always)]
unsafe fn all_finite(p: *const f32, stride: isize, n: usize, w: usize) -> bool {
    let mut ok = true;
    for j in 0..n {
        // SAFETY: row `j < n` has `w` readable floats (caller's contract); the slice is only
        // read.
        let r = unsafe { std::slice::from_raw_parts(p.offset(j as isize * stride), w) };
        ok &= r.iter().fold(true, |a, x| a & x.is_finite());
    }
    ok
}
