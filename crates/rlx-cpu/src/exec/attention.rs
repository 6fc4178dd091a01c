//! Fused attention with an online softmax: per (batch, head, block of queries), key
//! blocks are scored, masked and folded into running row maxima and sums, so the
//! `Sq × Sk` score matrix never exists in memory. f32 operands read in place through
//! their views (`[B, S, H, D]` or `[B, S, H·D]`, any strides with unit innermost
//! stride); other cases run through the oracle.

use super::ew::{CHUNK, EwPlan};
use super::loads::LoadPlan;
use super::opaque::view_dims;
use super::par::{Bases, SendPtr, chunks, par_for};
use super::value::{Sv, read_bits};
use crate::math;
use rlx_compile::program::{Kernel, KernelKind, Program};
use rlx_ir::{Activation, DType, DimBinding, IrResult, MaskKind, Op};

/// Queries per block.
const BQ: usize = 32;
/// Keys per block.
const BK: usize = 64;

/// Element offsets of a `[B, S, H, D]`-like operand.
#[derive(Clone, Copy)]
struct Layout {
    off: isize,
    sb: isize,
    ss: isize,
    sh: isize,
}

impl Layout {
    fn of(p: &LoadPlan, dims: &[usize], d: usize) -> Option<Layout> {
        if p.table.is_some() || p.dtype != DType::F32 {
            return None;
        }
        let s = &p.strides;
        match dims.len() {
            4 if s[3] == 1 || dims[3] == 1 => Some(Layout {
                off: p.offset as isize,
                sb: s[0],
                ss: s[1],
                sh: s[2],
            }),
            3 if s[2] == 1 => Some(Layout {
                off: p.offset as isize,
                sb: s[0],
                ss: s[1],
                sh: d as isize,
            }),
            _ => None,
        }
    }

    #[inline(always)]
    fn at(&self, b: usize, s: usize, h: usize) -> usize {
        (self.off + b as isize * self.sb + s as isize * self.ss + h as isize * self.sh) as usize
    }
}

/// A bound attention kernel.
pub(crate) struct AttnPlan {
    b: usize,
    sq: usize,
    sk: usize,
    h: usize,
    hk: usize,
    d: usize,
    dv: usize,
    scale: f32,
    softcap: Option<f32>,
    mask: MaskKind,
    q: (usize, Layout),
    k: (usize, Layout),
    v: (usize, Layout),
    extra: Option<(LoadPlan, [isize; 4])>,
    out_buf: usize,
    epilogue: EwPlan,
    trivial: bool,
}

impl AttnPlan {
    /// The plan, or `None` when the operands need the general (oracle) path.
    pub(crate) fn new(
        p: &Program,
        bd: &[Vec<usize>],
        k: &Kernel,
        bnd: &DimBinding,
    ) -> IrResult<Option<AttnPlan>> {
        let KernelKind::Attention {
            op,
            inputs,
            out_space,
            dtype,
            epilogue,
        } = &k.kind
        else {
            unreachable!()
        };
        let Op::Attention {
            num_heads,
            head_dim,
            v_head_dim,
            mask_kind,
            score_scale,
            attn_logit_softcap,
        } = op
        else {
            unreachable!()
        };
        if *dtype != DType::F32 || attn_logit_softcap.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            return Ok(None);
        }
        let (h, d) = (*num_heads, *head_dim);
        let dv = v_head_dim.unwrap_or(d);
        let mut plans = Vec::new();
        for &i in inputs {
            let l = &k.loads[i];
            let dims = view_dims(&bd[l.buf], &l.steps, bnd);
            plans.push((super::bind::plan_load(p, bd, l, &dims, bnd)?, dims));
        }
        let (qd, kd, vd) = (&plans[0].1, &plans[1].1, &plans[2].1);
        let heads = |dims: &Vec<usize>, w: usize| {
            if dims.len() == 4 {
                dims[2]
            } else {
                dims[2] / w
            }
        };
        let (b, sq, sk) = (qd[0], qd[1], kd[1]);
        let hk = heads(kd, d);
        if heads(qd, d) != h
            || hk == 0
            || h % hk != 0
            || heads(vd, dv) != hk
            || vd[1] != sk
            || kd[0] != b
            || vd[0] != b
        {
            return Ok(None);
        }
        let (Some(ql), Some(kl), Some(vl)) = (
            Layout::of(&plans[0].0, qd, d),
            Layout::of(&plans[1].0, kd, d),
            Layout::of(&plans[2].0, vd, dv),
        ) else {
            return Ok(None);
        };
        let extra = match mask_kind {
            MaskKind::Custom | MaskKind::Bias => {
                let (pl, dims) = plans[3].clone();
                if pl.table.is_some() {
                    return Ok(None);
                }
                let full = if *mask_kind == MaskKind::Custom {
                    vec![b, sk]
                } else {
                    vec![b, h, sq, sk]
                };
                if dims.len() > full.len() || (*mask_kind == MaskKind::Custom && dims != full) {
                    return Ok(None);
                }
                // Right-align to [B, H, Sq, Sk] (custom masks are [B, Sk]: axes 0 and 3).
                let mut st = [0isize; 4];
                if *mask_kind == MaskKind::Custom {
                    st[0] = pl.strides[0];
                    st[3] = pl.strides[1];
                } else {
                    let off = 4 - dims.len();
                    for (i, &dd) in dims.iter().enumerate() {
                        if dd != 1 {
                            st[off + i] = pl.strides[i];
                        }
                    }
                }
                Some((pl, st))
            }
            _ => None,
        };
        let out = rlx_compile::program::concrete(out_space, bnd).expect("bound");
        let st = k.stores[0];
        let ep = EwPlan::with(p, bd, k, epilogue, (st.value, st.buf), &out, bnd)?;
        Ok(Some(AttnPlan {
            b,
            sq,
            sk,
            h,
            hk,
            d,
            dv,
            scale: score_scale.unwrap_or((1.0 / (d as f64).sqrt()) as f32),
            softcap: *attn_logit_softcap,
            mask: *mask_kind,
            q: (plans[0].0.buf, ql),
            k: (plans[1].0.buf, kl),
            v: (plans[2].0.buf, vl),
            extra,
            out_buf: st.buf,
            trivial: epilogue.nodes.len() == 1 && p.buffers[st.buf].shape.dtype() == DType::F32,
            epilogue: ep,
        }))
    }

    pub(crate) fn run(&self, bases: &[*mut u8]) -> Result<(), String> {
        let total = self.b * self.sq * self.h * self.dv;
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
        let nqb = self.sq.div_ceil(BQ);
        let bs = Bases(bases);
        let op = SendPtr(out as *mut u8);
        par_for(self.b * self.h * nqb, |item| {
            let (bh, qb) = (item / nqb, item % nqb);
            let (bi, hi) = (bh / self.h, bh % self.h);
            self.block(
                bs.get(),
                op.get() as *mut f32,
                bi,
                hi,
                qb * BQ,
                ((qb + 1) * BQ).min(self.sq),
            );
            Ok(())
        })?;
        if !self.trivial {
            let cp = SendPtr(out as *mut u8);
            par_for(chunks(total, CHUNK), |ch| {
                let (c0, c1) = (ch * CHUNK, ((ch + 1) * CHUNK).min(total));
                let core = |flat: usize, _n: usize| {
                    Sv::Vec(unsafe { cp.get().add(flat * 4) as *const u8 })
                };
                self.epilogue.run_range(bs.get(), c0, c1, Some(&core))
            })?;
        }
        drop(scratch);
        Ok(())
    }

    fn allowed(&self, bi: usize, qi: usize, ki: usize, bases: &[*mut u8]) -> bool {
        match self.mask {
            MaskKind::None | MaskKind::Bias => true,
            MaskKind::Causal => ki <= qi,
            MaskKind::SlidingWindow(w) => ki <= qi && qi - ki <= w,
            MaskKind::Custom => {
                let (p, st) = self.extra.as_ref().unwrap();
                let off = (p.offset as isize + bi as isize * st[0] + ki as isize * st[3]) as usize;
                let bits = unsafe { read_bits(p.dtype, bases[p.buf], off) };
                let v = match super::value::Ty::of(p.dtype).unwrap() {
                    super::value::Ty::F32 => f32::from_bits(bits as u32) as f64,
                    super::value::Ty::F64 => f64::from_bits(bits),
                    super::value::Ty::I64 => bits as i64 as f64,
                };
                v >= 0.5
            }
        }
    }

    /// Queries `q0..q1` of batch `bi`, head `hi`.
    fn block(&self, bases: &[*mut u8], out: *mut f32, bi: usize, hi: usize, q0: usize, q1: usize) {
        let (d, dv) = (self.d, self.dv);
        let kh = hi / (self.h / self.hk);
        let nq = q1 - q0;
        let qb = bases[self.q.0] as *const f32;
        let kb = bases[self.k.0] as *const f32;
        let vb = bases[self.v.0] as *const f32;
        // Queries pre-scaled into a dense block.
        let mut q = vec![0f32; nq * d];
        for i in 0..nq {
            let src = unsafe { std::slice::from_raw_parts(qb.add(self.q.1.at(bi, q0 + i, hi)), d) };
            for (o, &x) in q[i * d..(i + 1) * d].iter_mut().zip(src) {
                *o = x;
            }
        }
        let mut acc = vec![0f32; nq * dv];
        let mut m = vec![f32::NEG_INFINITY; nq];
        let mut l = vec![0f64; nq];
        let mut s = vec![0f32; BK];
        let kend = match self.mask {
            MaskKind::Causal | MaskKind::SlidingWindow(_) => q1.min(self.sk),
            _ => self.sk,
        };
        let mut k0 = match self.mask {
            MaskKind::SlidingWindow(w) => q0.saturating_sub(w) / BK * BK,
            _ => 0,
        };
        while k0 < kend {
            let k1 = (k0 + BK).min(kend);
            let nk = k1 - k0;
            for i in 0..nq {
                let qi = q0 + i;
                let qrow = &q[i * d..(i + 1) * d];
                let row = &mut s[..nk];
                let mut any = false;
                for (j, sj) in row.iter_mut().enumerate() {
                    let ki = k0 + j;
                    if !self.allowed(bi, qi, ki, bases) {
                        *sj = f32::NEG_INFINITY;
                        continue;
                    }
                    any = true;
                    let krow =
                        unsafe { std::slice::from_raw_parts(kb.add(self.k.1.at(bi, ki, kh)), d) };
                    let mut v = dot(qrow, krow) * self.scale;
                    if let Some(c) = self.softcap {
                        v = c * ((v / c) as f64).tanh() as f32;
                    }
                    if let Some((p, st)) = &self.extra
                        && self.mask == MaskKind::Bias
                    {
                        let off = (p.offset as isize
                            + bi as isize * st[0]
                            + hi as isize * st[1]
                            + qi as isize * st[2]
                            + ki as isize * st[3]) as usize;
                        let bits = unsafe { read_bits(p.dtype, bases[p.buf], off) };
                        v += match super::value::Ty::of(p.dtype).unwrap() {
                            super::value::Ty::F32 => f32::from_bits(bits as u32),
                            super::value::Ty::F64 => f64::from_bits(bits) as f32,
                            super::value::Ty::I64 => bits as i64 as f32,
                        };
                    }
                    *sj = v;
                }
                if !any {
                    continue;
                }
                let mut bm = f32::NEG_INFINITY;
                let mut nan = false;
                for &v in row.iter() {
                    nan |= v.is_nan();
                    if v > bm {
                        bm = v;
                    }
                }
                let mnew = if nan { f32::NAN } else { m[i].max(bm) };
                let corr = if m[i] == f32::NEG_INFINITY {
                    0.0
                } else {
                    (m[i] - mnew).exp()
                };
                for v in row.iter_mut() {
                    *v -= mnew;
                }
                math::unary_f32_inplace(Activation::Exp, row);
                let o = &mut acc[i * dv..(i + 1) * dv];
                if corr != 1.0 {
                    for x in o.iter_mut() {
                        *x *= corr;
                    }
                }
                let mut ls = 0f64;
                for (j, &p) in row.iter().enumerate() {
                    if p == 0.0 {
                        continue;
                    }
                    ls += p as f64;
                    let vrow = unsafe {
                        std::slice::from_raw_parts(vb.add(self.v.1.at(bi, k0 + j, kh)), dv)
                    };
                    for (x, &y) in o.iter_mut().zip(vrow) {
                        *x += p * y;
                    }
                }
                l[i] = l[i] * corr as f64 + ls;
                m[i] = mnew;
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
            let o = &acc[i * dv..(i + 1) * dv];
            if l[i] == 0.0 && !m[i].is_nan() {
                dst.fill(0.0);
            } else {
                let inv = l[i] as f32;
                for (x, &y) in dst.iter_mut().zip(o) {
                    *x = y / inv;
                }
            }
        }
    }
}

/// `Σ a·b` with eight independent lanes (vectorizes).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut ia = a.chunks_exact(8);
    let mut ib = b.chunks_exact(8);
    for (x, y) in (&mut ia).zip(&mut ib) {
        for k in 0..8 {
            lanes[k] += x[k] * y[k];
        }
    }
    let mut s: f32 = lanes.iter().sum();
    for (x, y) in ia.remainder().iter().zip(ib.remainder()) {
        s += x * y;
    }
    s
}
