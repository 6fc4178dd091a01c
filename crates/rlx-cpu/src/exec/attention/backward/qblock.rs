//! One query block of the fused attention backward: queries `q0..q1` of batch `bi`, head
//! `hi`, against the keys `klo..khi` some query of the block may see.
//!
//! Queries run along the vector lanes (`LQ` = the block's queries rounded up to 16), as in
//! the forward, so every per-query statistic is a vertical fold over rows of keys:
//! 1. `Qᵀ` (pre-scaled) and `dOᵀ` are packed once; per band of 16 keys, `Sᵀ = K·Qᵀ` and
//!    `dPᵀ = V·dOᵀ` are micro-GEMMs reading K and V in place, over only the query vectors
//!    some key of the band may see (about half the diagonal tiles under a causal mask);
//! 2. per key row: softcap, bias, mask (masked scores `−∞`, masked `dP` zero), the lane
//!    maxima; then `exp(S − m)` over the whole block, the sums `l` and `Σ e·dP` in one
//!    fold, and one pass making `P = e/l` and `dS = scale·P⊙(dP − D)` with
//!    `D = Σ P⊙dP` (times `1 − tanh²` under a softcap);
//! 3. per band over the band's query vectors: `dV += Pᵀ·dO` and `dK += dSᵀ·Q` (dO and Q
//!    read in place, the result's rows accumulated in place) and `dQᵀ += Kᵀ·dSᵀ` (K read
//!    in place; `dQᵀ` has the lanes as columns, so its tiles are 64 wide where a `dQ`
//!    tile would be `d` = 32 wide), transposed into the result at the end.
//!
//! The softmax is evaluated once per (query, key) pair; the forward's row statistics are
//! not an operand of `AttentionVjp`, so they are recomputed from the whole key row, which
//! the block holds at once. Masked pairs hold `P = dS = 0` exactly, and the products skip
//! whole tiles of them, so a skipped tile changes no bit of a result.

use super::super::gemm::{self, Init};
use super::super::{AttnPlan, BQ};
use crate::math;
use rlx_ir::{Activation, MaskKind};

const NEG_INF: f32 = f32::NEG_INFINITY;

/// Keys per band: the tiles a causal or window mask may skip are 16 keys × 16 queries.
const BAND: usize = 16;

/// A band of a block: 16 keys and the query lanes they may see. A block has up to
/// `Sk / 16` of them (no fixed cap fits long sequences), so they come from an iterator.
#[derive(Clone, Copy)]
struct Band {
    /// Rows `b0..b1` of the block (keys `klo + b0 .. klo + b1`).
    b0: usize,
    b1: usize,
    /// Query lanes `c0..c1` (`c0` a multiple of 16, `c1 <= nq`) some key of the band sees.
    c0: usize,
    c1: usize,
}

/// One query block of a backward item.
#[derive(Clone, Copy)]
pub(super) struct Block {
    pub(super) bi: usize,
    pub(super) hi: usize,
    pub(super) kh: usize,
    pub(super) q0: usize,
    pub(super) q1: usize,
}

impl AttnPlan {
    /// f32s of scratch one backward item needs: `Qᵀ` and `dQᵀ` (`d × BQ`), `dOᵀ`
    /// (`dv × BQ`), and `Sᵀ`, `dPᵀ` (and the softcap's `tanh`) as `Sk` rows of `BQ`
    /// lanes.
    pub(super) fn vjp_scratch_len(&self) -> usize {
        let rows = if self.softcap.is_some() { 3 } else { 2 };
        (2 * self.d + self.dv + rows * self.sk) * BQ
    }

    /// The lanes (`a..b`, relative to `q0`) of queries `q0..q1` that see key `kj` under
    /// a causal or sliding-window mask; all of `0..q1 − q0` under the others.
    #[inline(always)]
    fn vjp_key_lanes(&self, kj: usize, q0: usize, q1: usize) -> (usize, usize) {
        let (lo, hi) = match self.mask {
            MaskKind::Causal => (kj, q1),
            MaskKind::SlidingWindow(w) => (kj, kj.saturating_add(w).saturating_add(1)),
            _ => (q0, q1),
        };
        (lo.clamp(q0, q1) - q0, hi.clamp(q0, q1) - q0)
    }

    /// The bands of 16 keys of the block's `nk` keys from `klo`, each with the query lanes
    /// its keys may see (bands no query sees are left out). Both bounds grow with the key,
    /// so the band's first key gives `c0` and its last `c1`.
    fn vjp_bands(&self, klo: usize, nk: usize, q0: usize, q1: usize) -> impl Iterator<Item = Band> {
        (0..nk).step_by(BAND).filter_map(move |b0| {
            let b1 = (b0 + BAND).min(nk);
            let (a, _) = self.vjp_key_lanes(klo + b0, q0, q1);
            let (_, b) = self.vjp_key_lanes(klo + b1 - 1, q0, q1);
            (a < b).then_some(Band {
                b0,
                b1,
                c0: a / 16 * 16,
                c1: b,
            })
        })
    }

    /// The block `blk`'s share of dq, dk and dv, inlined into a function compiled for
    /// level `L`, for blocks whose queries fill `LQ` lanes.
    /// # Safety
    /// `bases` must be the buffers this plan was bound to, `out` the dense packed f32
    /// result (dq, dk, dv) whose rows of `blk`'s queries and of its (batch, kv head) no
    /// other thread touches, with this item's dk/dv rows already started; `buf` at least
    /// [`AttnPlan::vjp_scratch_len`] long; `blk` a block of the plan with `q1 − q0 <= BQ`
    /// and `LQ` that count rounded up to 16; the CPU must have level `L`'s features.
    #[inline(always)]
    pub(super) unsafe fn qblock<const L: u8, const LQ: usize>(
        &self,
        bases: &[*mut u8],
        out: *mut f32,
        blk: Block,
        buf: &mut [f32],
    ) {
        let Block { bi, hi, kh, q0, q1 } = blk;
        let (sq, sk, h, hk, d, dv) = (self.sq, self.sk, self.h, self.hk, self.d, self.dv);
        let nq = q1 - q0;
        debug_assert!(nq <= BQ && LQ == nq.next_multiple_of(16));
        let (nqt, nkt) = self.vjp_lens();
        let (ql, kl, vl) = (self.q.1, self.k.1, self.v.1);
        let (gbuf, gl) = self.g.expect("a VJP plan has a cotangent");
        let qb = bases[self.q.0] as *const f32;
        let kb = bases[self.k.0] as *const f32;
        let vb = bases[self.v.0] as *const f32;
        let gb = bases[gbuf] as *const f32;
        let dqs = h * d;
        // SAFETY: `bi < B`, `q0 < Sq`, `hi < H`: the block's first dq row is in the result.
        let dq0 = unsafe { out.add(((bi * sq + q0) * h + hi) * d) };
        let (klo, khi) = (self.key_lo(q0), self.key_hi(q1 - 1));
        if khi <= klo {
            for r in 0..nq {
                // SAFETY: row `r < nq` of the block's dq (`d` floats, `dqs` apart) is in the
                // result and only this item writes it.
                unsafe { std::ptr::write_bytes(dq0.add(r * dqs), 0, d) };
            }
            return;
        }
        let nk = khi - klo;
        let (qt, rest) = buf.split_at_mut(d * LQ);
        let (gt, rest) = rest.split_at_mut(dv * LQ);
        let (dqt, rest) = rest.split_at_mut(d * LQ);
        let (st, rest) = rest.split_at_mut(sk * LQ);
        let (dpt, rest) = rest.split_at_mut(sk * LQ);
        let (st, dpt) = (&mut st[..nk * LQ], &mut dpt[..nk * LQ]);
        let tt = if self.softcap.is_some() {
            &mut rest[..nk * LQ]
        } else {
            &mut rest[..0]
        };
        // SAFETY: query row `q0` of head `hi` (and cotangent row) lie in q's (g's) buffer:
        // their layouts come from bound f32 load plans checked against [B, Sq, H, D(v)].
        let (qp, gp) = unsafe { (qb.add(ql.at(bi, q0, hi)), gb.add(gl.at(bi, q0, hi))) };
        // SAFETY: key row `klo < sk` of kv head `kh` lies in k's and v's buffers.
        let (k0p, v0p) = unsafe { (kb.add(kl.at(bi, klo, kh)), vb.add(vl.at(bi, klo, kh))) };
        let (kss, vss) = (kl.ss, vl.ss);
        // Padding lanes are zero, so their scores are finite; they are masked below and
        // never read by a product.
        if nq < LQ {
            qt.fill(0.0);
            gt.fill(0.0);
        }
        dqt.fill(0.0);
        // SAFETY: rows `q0..q1` of q and g hold `d` / `dv` values `ss` apart (in bounds as
        // above); `qt` is `d × LQ` and `gt` `dv × LQ` thread scratch, `nq <= LQ` columns
        // written; the caller guarantees level `L`.
        unsafe {
            gemm::transpose::<L>(
                gemm::Transposed {
                    rows: d,
                    cols: nq,
                    src: qp,
                    sstride: ql.ss,
                    dst: qt.as_mut_ptr(),
                    dstride: LQ,
                },
                |_| self.scale,
            );
            gemm::transpose::<L>(
                gemm::Transposed {
                    rows: dv,
                    cols: nq,
                    src: gp,
                    sstride: gl.ss,
                    dst: gt.as_mut_ptr(),
                    dstride: LQ,
                },
                |_| 1.0,
            );
        }
        for Band { b0, b1, c0, c1 } in self.vjp_bands(klo, nk, q0, q1) {
            // SAFETY: band rows are keys `klo + b0 .. klo + b1 <= khi <= sk` of k and v (`d`
            // / `dv` values, `kss` / `vss` apart, in their buffers); columns `c0..c1 <= nq`
            // of `qt` / `gt` and rows `b0..b1` of `st` / `dpt` (`LQ` lanes each) are inside
            // this thread's scratch, which overlaps no operand.
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
                        ldb: LQ as isize,
                        c: st.as_mut_ptr().add(b0 * LQ + c0),
                        ldc: LQ,
                    },
                    Init::Zero,
                );
                gemm::gemm::<L>(
                    gemm::Operands {
                        m: b1 - b0,
                        n: c1 - c0,
                        k: dv,
                        a: v0p.offset(b0 as isize * vss),
                        lda: vss,
                        ldp: 1,
                        b: gt.as_ptr().add(c0),
                        ldb: LQ as isize,
                        c: dpt.as_mut_ptr().add(b0 * LQ + c0),
                        ldc: LQ,
                    },
                    Init::Zero,
                );
            }
        }
        let at = BlockPos {
            bi,
            hi,
            q0,
            q1,
            klo,
        };
        let mx = self.vjp_mask::<LQ>(bases, at, st, dpt, tt);
        let mut shift = [0f32; LQ];
        for i in 0..LQ {
            // A lane that sees no key is all −∞: shifting by 0 makes its e⁻∞ exact zeros.
            shift[i] = if mx[i] == NEG_INF { 0.0 } else { mx[i] };
        }
        for row in st.chunks_exact_mut(LQ) {
            let row: &mut [f32; LQ] = row.try_into().unwrap();
            for i in 0..LQ {
                row[i] -= shift[i];
            }
        }
        math::unary_f32_inplace(Activation::Exp, st);
        // Per lane: l = Σ e and Σ e·dP, in one pass over both blocks.
        let mut l = [0f32; LQ];
        let mut edp = [0f32; LQ];
        for (e, g) in st.chunks_exact(LQ).zip(dpt.chunks_exact(LQ)) {
            let (e, g): (&[f32; LQ], &[f32; LQ]) = (e.try_into().unwrap(), g.try_into().unwrap());
            for i in 0..LQ {
                l[i] += e[i];
                edp[i] += e[i] * g[i];
            }
        }
        let mut inv = [0f32; LQ];
        let mut cen = [0f32; LQ];
        for i in 0..LQ {
            // l = 0 only for a lane that sees no key (its e are zeros): P = dS = 0 there.
            inv[i] = if l[i] == 0.0 { 0.0 } else { 1.0 / l[i] };
            cen[i] = edp[i] * inv[i];
        }
        let scale = self.scale;
        if self.softcap.is_some() {
            for ((e, g), t) in st
                .chunks_exact_mut(LQ)
                .zip(dpt.chunks_exact_mut(LQ))
                .zip(tt.chunks_exact(LQ))
            {
                let e: &mut [f32; LQ] = e.try_into().unwrap();
                let g: &mut [f32; LQ] = g.try_into().unwrap();
                let t: &[f32; LQ] = t.try_into().unwrap();
                for i in 0..LQ {
                    let p = e[i] * inv[i];
                    e[i] = p;
                    g[i] = scale * p * (g[i] - cen[i]) * (1.0 - t[i] * t[i]);
                }
            }
        } else {
            for (e, g) in st.chunks_exact_mut(LQ).zip(dpt.chunks_exact_mut(LQ)) {
                let e: &mut [f32; LQ] = e.try_into().unwrap();
                let g: &mut [f32; LQ] = g.try_into().unwrap();
                for i in 0..LQ {
                    let p = e[i] * inv[i];
                    e[i] = p;
                    g[i] = scale * p * (g[i] - cen[i]);
                }
            }
        }
        let (dks, dvs) = (hk * d, hk * dv);
        // SAFETY: row (bi, klo, kh) of dk and of dv is in the packed result (after dq, and
        // after dq and dk).
        let (dk0, dv0) = unsafe {
            let at = (bi * sk + klo) * hk + kh;
            (out.add(nqt + at * d), out.add(nqt + nkt + at * dv))
        };
        for Band { b0, b1, c0, c1 } in self.vjp_bands(klo, nk, q0, q1) {
            // SAFETY: `A` is rows `b0..b1` of `st` / `dpt` (columns `c0..c1 <= nq`, `LQ`
            // apart, thread scratch); `B` is query rows `q0 + c0 .. q0 + c1` of g / q (in
            // their buffers, `dv` / `d` values each); `C` is the dk / dv rows of keys
            // `klo + b0 .. klo + b1` of this item (in the result, written by this item only,
            // overlapping no operand). For dQᵀ, `A` is `Kᵀ` of the band's keys (read in
            // k's buffer), `B` the band's rows of `dpt`, `C` columns `c0..c1` of `dqt`
            // (`d` rows of `LQ`, thread scratch).
            unsafe {
                gemm::gemm::<L>(
                    gemm::Operands {
                        m: b1 - b0,
                        n: dv,
                        k: c1 - c0,
                        a: st.as_ptr().add(b0 * LQ + c0),
                        lda: LQ as isize,
                        ldp: 1,
                        b: gp.offset(c0 as isize * gl.ss),
                        ldb: gl.ss,
                        c: dv0.add(b0 * dvs),
                        ldc: dvs,
                    },
                    Init::Add,
                );
                gemm::gemm::<L>(
                    gemm::Operands {
                        m: b1 - b0,
                        n: d,
                        k: c1 - c0,
                        a: dpt.as_ptr().add(b0 * LQ + c0),
                        lda: LQ as isize,
                        ldp: 1,
                        b: qp.offset(c0 as isize * ql.ss),
                        ldb: ql.ss,
                        c: dk0.add(b0 * dks),
                        ldc: dks,
                    },
                    Init::Add,
                );
                gemm::gemm::<L>(
                    gemm::Operands {
                        m: d,
                        n: c1 - c0,
                        k: b1 - b0,
                        a: k0p.offset(b0 as isize * kss),
                        lda: 1,
                        ldp: kss,
                        b: dpt.as_ptr().add(b0 * LQ + c0),
                        ldb: LQ as isize,
                        c: dqt.as_mut_ptr().add(c0),
                        ldc: LQ,
                    },
                    Init::Add,
                );
            }
        }
        // dQᵀ (d × lanes) to dq rows.
        // SAFETY: `dqt` holds `d` rows of `LQ` lanes (columns `< nq` read); the block's dq
        // rows `q0..q1` of head `hi` are `nq` rows of `d` values `dqs` apart in the result,
        // written only by this item.
        unsafe {
            gemm::transpose::<L>(
                gemm::Transposed {
                    rows: nq,
                    cols: d,
                    src: dqt.as_ptr(),
                    sstride: LQ as isize,
                    dst: dq0,
                    dstride: dqs,
                },
                |_| 1.0,
            )
        };
    }

    /// Softcap, bias and mask over the block's `Sᵀ` rows (`st`, keys from `klo`), zero
    /// `dP` where masked (`dpt`), keep the softcap's `tanh` in `tt`; returns the per-lane
    /// maxima (NaN once a lane holds a NaN score, `−∞` for a lane that sees no key).
    #[inline(always)]
    fn vjp_mask<const LQ: usize>(
        &self,
        bases: &[*mut u8],
        at: BlockPos,
        st: &mut [f32],
        dpt: &mut [f32],
        tt: &mut [f32],
    ) -> [f32; LQ] {
        let BlockPos {
            bi,
            hi,
            q0,
            q1,
            klo,
        } = at;
        let nq = q1 - q0;
        if let Some(c) = self.softcap {
            for (t, s) in tt.iter_mut().zip(st.iter()) {
                *t = *s / c;
            }
            math::unary_f32_inplace(Activation::Tanh, tt);
            for (s, t) in st.iter_mut().zip(tt.iter()) {
                *s = c * *t;
            }
        }
        let mut mx = [NEG_INF; LQ];
        for (j, (s, g)) in st
            .chunks_exact_mut(LQ)
            .zip(dpt.chunks_exact_mut(LQ))
            .enumerate()
        {
            let s: &mut [f32; LQ] = s.try_into().unwrap();
            let g: &mut [f32; LQ] = g.try_into().unwrap();
            let kj = klo + j;
            let (a, b) = match self.mask {
                MaskKind::Custom if !self.custom_ok(bases, bi, kj) => (0, 0),
                _ => self.vjp_key_lanes(kj, q0, q1),
            };
            if self.mask == MaskKind::Bias {
                for (i, x) in s[..nq].iter_mut().enumerate() {
                    *x += self.bias_at(bases, bi, hi, q0 + i, kj);
                }
            }
            // Lanes outside a..b (padding lanes too) are masked; a band may have left
            // them unwritten.
            s[..a].fill(NEG_INF);
            g[..a].fill(0.0);
            s[b.max(a)..].fill(NEG_INF);
            g[b.max(a)..].fill(0.0);
            if self.softcap.is_some() {
                // An unwritten lane's tanh came from stale scratch (NaN after a NaN input
                // of an earlier call): zero it, so that dS = 0·(…)·(1 − t²) stays 0.
                let t = &mut tt[j * LQ..(j + 1) * LQ];
                t[..a].fill(0.0);
                t[b.max(a)..].fill(0.0);
            }
            for i in 0..LQ {
                let v = s[i];
                mx[i] = if v > mx[i] || v.is_nan() { v } else { mx[i] };
            }
        }
        mx
    }
}

/// Where a query block's `Sᵀ` rows sit: batch `bi`, head `hi`, queries `q0..q1`, and the
/// key of its first row, `klo`.
#[derive(Clone, Copy)]
struct BlockPos {
    bi: usize,
    hi: usize,
    q0: usize,
    q1: usize,
    klo: usize,
}
