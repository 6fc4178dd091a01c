//! Fused attention with an online softmax: per (batch, head, block of queries), key
//! blocks are scored, masked and folded into running row maxima and sums, so the
//! `Sq × Sk` score matrix never exists in memory. f32 operands read in place through
//! their views (`[B, S, H, D]` or `[B, S, H·D]`, any strides with unit innermost
//! stride); other cases run through the oracle.
//!
//! Both products of a block (`Sᵀ = K·Qᵀ`, `Oᵀ += Vᵀ·Pᵀ`) run as register-blocked
//! micro-GEMMs ([`gemm`]) with the queries along the vector lanes; the softmax
//! bookkeeping between them works on whole rows of the block ([`block`]). Causal and
//! sliding-window masks skip the key blocks no query of the block may see and mask only
//! the blocks that straddle the edge. Items of at most four queries (decode steps) take
//! a per-query path instead ([`narrow`]).
//!
//! The same plan runs `Op::AttentionVjp`, the fused backward ([`backward`]): one work
//! item per (batch, kv head) recomputes the probabilities block by block and writes its
//! slices of the packed dq, dk, dv.

mod backward;
mod block;
mod gemm;
mod narrow;

use super::ew::{CHUNK, EwPlan};
use super::loads::LoadPlan;
use super::opaque::view_dims;
use super::par::{Bases, SendPtr, chunks, par_for};
use super::value::{TileValue, Ty, read_bits};
use rlx_compile::program::{Kernel, KernelKind};
use rlx_ir::{DType, IrResult, MaskKind, Op};

/// Queries per block (one work item).
const BQ: usize = 64;
/// Keys per block (a multiple of 16: edge blocks split into bands of 16 keys).
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
    /// The output cotangent of `AttentionVjp` (`[B, Sq, H, Dv]`-like); `None` for the
    /// forward.
    g: Option<(usize, Layout)>,
    out_buf: usize,
    epilogue: EwPlan,
    trivial: bool,
}

impl AttnPlan {
    /// The plan, or `None` when the operands need the general (oracle) path.
    pub(crate) fn new(cx: super::loads::BindCtx<'_>, k: &Kernel) -> IrResult<Option<AttnPlan>> {
        let super::loads::BindCtx {
            program: p,
            buffer_dims: bd,
            binding: bnd,
            ..
        } = cx;
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
        let Some(rlx_ir::AttentionAttrs {
            num_heads,
            head_dim,
            v_head_dim,
            mask_kind,
            score_scale,
            attn_logit_softcap,
        }) = op.attention_attrs()
        else {
            unreachable!("an attention kernel holds an attention op")
        };
        let vjp = matches!(op, Op::AttentionVjp { .. });
        if *dtype != DType::F32 || attn_logit_softcap.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            return Ok(None);
        }
        let (h, d) = (num_heads, head_dim);
        let dv = v_head_dim.unwrap_or(d);
        let mut plans = Vec::new();
        for &i in inputs {
            let l = &k.loads[i];
            let dims = view_dims(&bd[l.buf], &l.steps, bnd);
            plans.push((super::loads::plan_load(p, bd, l, &dims, bnd)?, dims));
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
        let g = if vjp {
            let (gp, gd) = &plans[plans.len() - 1];
            if gd.len() != qd.len() || gd[..2] != qd[..2] || heads(gd, dv) != h {
                return Ok(None);
            }
            match Layout::of(gp, gd, dv) {
                Some(l) => Some((gp.buf, l)),
                None => return Ok(None),
            }
        } else {
            None
        };
        let extra = match mask_kind {
            MaskKind::Custom | MaskKind::Bias => {
                let (pl, dims) = plans[3].clone();
                if pl.table.is_some() {
                    return Ok(None);
                }
                let full = if mask_kind == MaskKind::Custom {
                    vec![b, sk]
                } else {
                    vec![b, h, sq, sk]
                };
                if dims.len() > full.len() || (mask_kind == MaskKind::Custom && dims != full) {
                    return Ok(None);
                }
                // Every bias axis must broadcast (1) or match: the kernel indexes it up to
                // the full extent, so a shorter bound dim would be read out of bounds.
                let lead = full.len() - dims.len();
                if dims
                    .iter()
                    .enumerate()
                    .any(|(i, &dd)| dd != 1 && dd != full[lead + i])
                {
                    return Ok(None);
                }
                // Right-align to [B, H, Sq, Sk] (custom masks are [B, Sk]: axes 0 and 3).
                let mut st = [0isize; 4];
                if mask_kind == MaskKind::Custom {
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
        let ep = EwPlan::with(cx, k, epilogue, (st.value, st.buf), &out)?;
        Ok(Some(AttnPlan {
            b,
            sq,
            sk,
            h,
            hk,
            d,
            dv,
            scale: score_scale.unwrap_or((1.0 / (d as f64).sqrt()) as f32),
            softcap: attn_logit_softcap,
            mask: mask_kind,
            q: (plans[0].0.buf, ql),
            k: (plans[1].0.buf, kl),
            v: (plans[2].0.buf, vl),
            extra,
            g,
            out_buf: st.buf,
            trivial: epilogue.nodes.len() == 1 && p.buffers[st.buf].shape.dtype() == DType::F32,
            epilogue: ep,
        }))
    }

    pub(crate) fn run(&self, bases: &[*mut u8]) -> Result<(), String> {
        if self.g.is_some() {
            return self.run_vjp(bases);
        }
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
        let bh = self.b * self.h;
        let level = block::level();
        let bs = Bases(bases);
        let op = SendPtr(out as *mut u8);
        // Later query blocks see more keys under causal masks: hand them out first so
        // the cheap ones fill the gaps at the end. Each item writes its own rows, so the
        // result does not depend on which thread runs it.
        par_for(bh * nqb, |item| {
            let it = self.item(item, nqb);
            // A thread runs consecutive items unless it steals: warm the next one's queries.
            let next = (item + 1 < bh * nqb).then(|| self.item(item + 1, nqb));
            block::with_buf(|buf| self.block(level, bs.get(), op.get() as *mut f32, it, next, buf));
            Ok(())
        })?;
        if !self.trivial {
            self.epilogue_from(bases, &scratch)?;
        }
        Ok(())
    }

    /// Run the fused epilogue over the dense result in `scratch` into the store buffer.
    fn epilogue_from(&self, bases: &[*mut u8], scratch: &[f32]) -> Result<(), String> {
        let total = scratch.len();
        let bs = Bases(bases);
        let cp = SendPtr(scratch.as_ptr() as *mut u8);
        par_for(chunks(total, CHUNK), |ch| {
            let (c0, c1) = (ch * CHUNK, ((ch + 1) * CHUNK).min(total));
            let core = |flat: usize, _n: usize| {
                // SAFETY: run_range calls the core only for tiles inside `c0..c1 <= total`,
                // and `scratch` holds `total` f32s, so `flat·4` bytes is inside it.
                TileValue::Vector(unsafe { cp.get().add(flat * 4) as *const u8 })
            };
            self.epilogue.run_range(bs.get(), c0, c1, Some(&core))
        })
    }

    /// Work item `item` of `b·h·nqb`: query blocks from the last (the most keys under
    /// a causal mask) to the first, then batch, then head.
    fn item(&self, item: usize, nqb: usize) -> block::Item {
        let bh = self.b * self.h;
        let qb = nqb - 1 - item / bh;
        block::Item {
            bi: (item % bh) / self.h,
            hi: item % self.h,
            q0: qb * BQ,
            q1: ((qb + 1) * BQ).min(self.sq),
        }
    }

    /// First key query `qi` may see under a causal or sliding-window mask (0 otherwise).
    #[inline]
    fn key_lo(&self, qi: usize) -> usize {
        match self.mask {
            MaskKind::SlidingWindow(w) => qi.saturating_sub(w),
            _ => 0,
        }
    }

    /// One past the last key query `qi` may see under a causal or sliding-window mask
    /// (`sk` otherwise).
    #[inline]
    fn key_hi(&self, qi: usize) -> usize {
        match self.mask {
            MaskKind::Causal | MaskKind::SlidingWindow(_) => (qi + 1).min(self.sk),
            _ => self.sk,
        }
    }

    /// Whether a custom key mask lets batch `bi` see key `ki` (`mask[bi, ki] ≥ 0.5`).
    fn custom_ok(&self, bases: &[*mut u8], bi: usize, ki: usize) -> bool {
        let (p, st) = self.extra.as_ref().unwrap();
        let off = (p.offset as isize + bi as isize * st[0] + ki as isize * st[3]) as usize;
        // SAFETY: `bi < B`, `ki < Sk` and the custom mask was checked to be bound as [B, Sk]
        // with a strided (non-table) plan, so the offset is an element of its buffer.
        let bits = unsafe { read_bits(p.dtype, bases[p.buf], off) };
        let v = match Ty::of(p.dtype).unwrap() {
            Ty::F32 => f32::from_bits(bits as u32) as f64,
            Ty::F64 => f64::from_bits(bits),
            Ty::I64 => bits as i64 as f64,
        };
        v >= 0.5
    }

    /// The additive bias of `(bi, hi, qi, ki)`, broadcast to `[B, H, Sq, Sk]`.
    fn bias_at(&self, bases: &[*mut u8], bi: usize, hi: usize, qi: usize, ki: usize) -> f32 {
        let (p, st) = self.extra.as_ref().unwrap();
        let off = (p.offset as isize
            + bi as isize * st[0]
            + hi as isize * st[1]
            + qi as isize * st[2]
            + ki as isize * st[3]) as usize;
        // SAFETY: the bias plan's dims were checked to broadcast to [B, H, Sq, Sk] (each axis
        // 1, with stride 0 here, or the full extent) and its strides come from the bound plan,
        // so for indices inside the full space the offset is an element of its buffer.
        let bits = unsafe { read_bits(p.dtype, bases[p.buf], off) };
        match Ty::of(p.dtype).unwrap() {
            Ty::F32 => f32::from_bits(bits as u32),
            Ty::F64 => f64::from_bits(bits) as f32,
            Ty::I64 => bits as i64 as f32,
        }
    }
}
