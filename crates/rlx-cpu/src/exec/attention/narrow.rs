//! Items with a few queries (a decode step, the last rows of a sequence): one query at a
//! time against exactly the keys it may see, vectors along the head dimension. The wide
//! kernel ([`super::block`]) puts 16 queries in the vector lanes and would leave most of
//! them empty here.

use super::block::{Item, NEG_INF, nan_pick};
use super::{AttnPlan, BK};
use crate::math;
use rlx_ir::{Activation, MaskKind};

impl AttnPlan {
    /// Item `it` (at most [`NARROW`](super::block::NARROW) queries), inlined into a
    /// function compiled for the caller's instruction set: the same online softmax as the
    /// wide kernel, per query.
    /// # Safety
    /// As [`AttnPlan::body`](super::block): `bases` the plan's bound buffers, `out` the
    /// `B·Sq·H·Dv` f32 output whose rows of this item no other thread writes, `it` an
    /// item of this plan.
    #[inline(always)]
    pub(super) unsafe fn narrow(
        &self,
        bases: &[*mut u8],
        out: *mut f32,
        it: Item,
        buf: &mut Vec<f32>,
    ) {
        let Item { bi, hi, q0, q1 } = it;
        let (d, dv) = (self.d, self.dv);
        let kh = hi / (self.h / self.hk);
        if buf.len() < d + BK + dv {
            buf.resize(d + BK + dv, 0.0);
        }
        let (q, rest) = buf.split_at_mut(d);
        let (s, rest) = rest.split_at_mut(BK);
        let acc = &mut rest[..dv];
        let qb = bases[self.q.0] as *const f32;
        let kb = bases[self.k.0] as *const f32;
        let vb = bases[self.v.0] as *const f32;
        let custom = self.mask == MaskKind::Custom;
        let mut ok = [true; BK];
        for qi in q0..q1 {
            // SAFETY: query `qi < Sq` of batch `bi`, head `hi` has `d` f32s in q's buffer (its
            // layout is the bound load plan AttnPlan::new checked against [B, Sq, H, D]); only
            // read.
            let src = unsafe { std::slice::from_raw_parts(qb.add(self.q.1.at(bi, qi, hi)), d) };
            for (o, &x) in q.iter_mut().zip(src) {
                *o = x * self.scale;
            }
            acc.fill(0.0);
            let (mut m, mut l, mut seen) = (NEG_INF, 0f32, false);
            let (mut k0, kend) = (self.key_lo(qi), self.key_hi(qi));
            while k0 < kend {
                let k1 = (k0 + BK).min(kend);
                let nk = k1 - k0;
                let mut any = false;
                for j in 0..nk {
                    let kj = k0 + j;
                    ok[j] = !custom || self.custom_ok(bases, bi, kj);
                    if !ok[j] {
                        s[j] = NEG_INF;
                        continue;
                    }
                    any = true;
                    let kr =
                        // SAFETY: key `kj < sk` of batch `bi`, head `kh < hk` has `d` f32s in
                        // k's buffer; only read.
                        unsafe { std::slice::from_raw_parts(kb.add(self.k.1.at(bi, kj, kh)), d) };
                    let mut v = dot(q, kr);
                    if let Some(c) = self.softcap {
                        v = c * (v / c).tanh();
                    }
                    if self.mask == MaskKind::Bias {
                        v += self.bias_at(bases, bi, hi, qi, kj);
                    }
                    s[j] = v;
                }
                if !any {
                    k0 = k1;
                    continue;
                }
                seen = true;
                let row = &mut s[..nk];
                let bm = row.iter().fold(NEG_INF, |a, &v| nan_pick(v, a));
                let mnew = if bm.is_nan() { f32::NAN } else { m.max(bm) };
                if mnew == NEG_INF {
                    // Every score so far is −∞: nothing to add yet.
                    k0 = k1;
                    continue;
                }
                let corr = if m == NEG_INF { 0.0 } else { (m - mnew).exp() };
                for x in row.iter_mut() {
                    *x -= mnew;
                }
                math::unary_f32_inplace(Activation::Exp, row);
                l = l * corr + sum16(row);
                for x in acc.iter_mut() {
                    *x *= corr;
                }
                for (j, &p) in row.iter().enumerate() {
                    // Masked keys are skipped, not multiplied by 0: a non-finite value
                    // behind the mask must not reach the row.
                    if ok[j] {
                        // SAFETY: key `k0 + j < sk` of batch `bi`, head `kh` has `dv` f32s in
                        // v's buffer; only read.
                        let vr = unsafe {
                            std::slice::from_raw_parts(vb.add(self.v.1.at(bi, k0 + j, kh)), dv)
                        };
                        for (x, &y) in acc.iter_mut().zip(vr) {
                            *x += p * y;
                        }
                    }
                }
                m = mnew;
                k0 = k1;
            }
            // SAFETY: row `(bi, qi, hi)` is `dv` floats inside `out` (`B·Sq·H·Dv`), written
            // only by this item, and no other reference to it is live.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(
                    out.add(((bi * self.sq + qi) * self.h + hi) * dv),
                    dv,
                )
            };
            if seen {
                let inv = 1.0 / l;
                for (x, &y) in dst.iter_mut().zip(acc.iter()) {
                    *x = y * inv;
                }
            } else {
                dst.fill(0.0);
            }
        }
    }
}

/// `Σ a·b` in 16 independent lanes (vectorizes; a fixed order, so deterministic).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let mut ia = a.chunks_exact(16);
    let mut ib = b.chunks_exact(16);
    for (x, y) in (&mut ia).zip(&mut ib) {
        for k in 0..16 {
            lanes[k] += x[k] * y[k];
        }
    }
    let mut s: f32 = lanes.iter().sum();
    for (x, y) in ia.remainder().iter().zip(ib.remainder()) {
        s += x * y;
    }
    s
}

/// `Σ x` in 16 independent lanes.
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
