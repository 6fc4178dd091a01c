//! Attention (`Op::Attention`, fused with an epilogue or opaque): one work item per
//! (batch, query position, head), an online softmax over the keys.
//!
//! The item keeps its query row and its `Dv` output accumulators in variables (the head
//! widths are static, so the loops over them are unrolled at lowering time), then walks
//! the keys its mask allows — `Causal` and `SlidingWindow` as the loop's bounds, `Custom`
//! as a condition per key — with the oracle's steps: the scaled dot product, the softcap
//! `c·tanh(s/c)`, the additive bias (broadcast right-aligned to `[B, H, Sq, Sk]`), then
//! the running maximum `m`, the rescaled denominator and accumulators
//! (`acc·e^{m_old − m} + e^{s − m}·v`). Every product that is summed is one fused
//! multiply-add ([`Ex::MulAdd`]), so each backend rounds like the interpreter. A row with no allowed key stores zeros. Layouts
//! `[B, S, H, D]` and `[B, S, H·D]` are both read through their views; grouped-query
//! heads read kv head `h / (H/Hk)`. Values are computed in f32 (f16/bf16 inputs widened)
//! or f64 and rounded once to the dtype before the epilogue.

use super::expr::round;
use super::{Cx, LowerError};
use crate::loops::build::{add, bin, div, float, int, mul, mul_add, rem, select, un};
use crate::loops::{Bin, Ex, Stmt, Ty, Un, Var};
use crate::program::Expr;
use rlx_ir::{DType, Dim, MaskKind, Op};

/// The widest value head the lowering keeps in variables (WGSL's attention kernel limit).
pub const MAX_HEAD: usize = 256;

impl Cx<'_> {
    /// Lower attention `op` over loads `inputs` (q, k, v and the mask or bias operand);
    /// the result goes through `epilogue`, or straight to the kernel's one store (an
    /// opaque attention kernel). Returns the number of items.
    pub(super) fn attention(
        &mut self,
        op: &Op,
        inputs: &[usize],
        out_space: &[Dim],
        dtype: DType,
        epilogue: Option<&Expr>,
    ) -> Result<Ex, LowerError> {
        let Op::Attention {
            num_heads,
            head_dim,
            v_head_dim,
            mask_kind,
            score_scale,
            attn_logit_softcap,
        } = op
        else {
            return Err(self.fail(format!("an attention kernel of {}", op.name())));
        };
        let (h, d) = (*num_heads, *head_dim);
        let dv = v_head_dim.unwrap_or(d);
        if d == 0 || dv == 0 || d > MAX_HEAD || dv > MAX_HEAD {
            return Err(self.fail(format!(
                "attention with heads of {d} and value heads of {dv} (the lowering keeps 1..={MAX_HEAD})"
            )));
        }
        let ty = match Ty::of(dtype) {
            Some(t) if t.is_float() => t,
            _ => return Err(self.fail(format!("attention of {dtype:?} values"))),
        };
        if let Some(c) = attn_logit_softcap
            && !(c.is_finite() && *c > 0.0)
        {
            return Err(self.fail(format!(
                "attention with softcap {c} (must be finite and > 0)"
            )));
        }
        let loads = self.p.kernels[self.k].loads.clone();
        let view = |cx: &Self, i: usize| -> Result<Vec<Dim>, LowerError> {
            let l = inputs
                .get(i)
                .ok_or_else(|| cx.fail(format!("attention without operand {i}")))?;
            let ld = &loads[*l];
            Ok(
                crate::program::chain_dims(cx.p.buffers[ld.buf].shape.dims(), &ld.steps)
                    .pop()
                    .expect("a view has dims"),
            )
        };
        let (qd, kd, vd) = (view(self, 0)?, view(self, 1)?, view(self, 2)?);
        for (i, v) in [&qd, &kd, &vd].into_iter().enumerate() {
            let dt = self.p.buffers[loads[inputs[i]].buf].shape.dtype();
            if Ty::of(dt) != Some(ty) || !matches!(v.len(), 3 | 4) || v.len() != qd.len() {
                return Err(self.fail(format!("an attention operand {dt:?} {v:?}")));
            }
        }
        let four = qd.len() == 4;
        let hk = match (&kd[..], four) {
            ([_, _, Dim::Static(hh), _], true) => *hh,
            ([_, _, Dim::Static(hid)], false) if hid % d == 0 => hid / d,
            _ => return Err(self.fail(format!("attention with kv heads {kd:?}"))),
        };
        if hk == 0 || h % hk != 0 {
            return Err(self.fail(format!("attention with {h} heads over {hk} kv heads")));
        }
        let sq = self.dim(qd[1]);
        let sk = self.dim(kd[1]);
        let hh = self.b.bind(Ty::Index, rem(Ex::Item, int(h as i64)));
        let rest = self.b.bind(Ty::Index, div(Ex::Item, int(h as i64)));
        let qi = self.b.bind(Ty::Index, rem(rest.clone(), sq.clone()));
        let bi = self.b.bind(Ty::Index, div(rest, sq));
        let kh = self
            .b
            .bind(Ty::Index, div(hh.clone(), int((h / hk) as i64)));
        // Coordinates of (b, s, head, j) in an operand of this layout.
        let at = |b: &Ex, s: &Ex, head: &Ex, j: usize, width: usize| -> Vec<Ex> {
            let j = int(j as i64);
            if four {
                vec![b.clone(), s.clone(), head.clone(), j]
            } else {
                vec![
                    b.clone(),
                    s.clone(),
                    add(mul(head.clone(), int(width as i64)), j),
                ]
            }
        };
        let load = |cx: &mut Self, i: usize, coords: &[Ex]| -> Result<Ex, LowerError> {
            let l = inputs[i];
            let index = cx.view_offset(&loads[l], coords);
            Ok(Ex::Load {
                buf: cx.load_slot(l)?,
                index: Box::new(index),
            })
        };
        let mut q = Vec::with_capacity(d);
        for j in 0..d {
            let v = load(self, 0, &at(&bi, &qi, &hh, j, d))?;
            q.push(self.b.bind(ty, v));
        }
        let f = |v: f64| float(ty, v);
        let mx = self.accumulator(ty, f(f64::NEG_INFINITY));
        let den = self.accumulator(ty, f(0.0));
        let acc: Vec<Var> = (0..dv).map(|_| self.accumulator(ty, f(0.0))).collect();
        // The keys the mask allows, as loop bounds where it is a range.
        let past_q = add(qi.clone(), int(1));
        let causal_end = select(bin(Bin::Lt, past_q.clone(), sk.clone()), past_q, sk.clone());
        let (start, end) = match mask_kind {
            MaskKind::Causal => (int(0), causal_end),
            MaskKind::SlidingWindow(w) => {
                let w = int(*w as i64);
                let from = select(
                    bin(Bin::Lt, w.clone(), qi.clone()),
                    bin(Bin::Sub, qi.clone(), w),
                    int(0),
                );
                (from, causal_end)
            }
            MaskKind::None | MaskKind::Bias | MaskKind::Custom => (int(0), sk.clone()),
        };
        let scale = score_scale
            .map(|s| s as f64)
            .unwrap_or(1.0 / (d as f64).sqrt()) as f32;
        let ki_var = self.b.var(Ty::Index);
        let ki = Ex::Var(ki_var);
        let (step, ()) = self.nested(|cx| {
            let dot = cx.accumulator(ty, f(0.0));
            for (j, qj) in q.iter().enumerate() {
                let kj = load(cx, 1, &at(&bi, &ki, &kh, j, d))?;
                cx.assign(dot, mul_add(ty, qj.clone(), kj, Ex::Var(dot)));
            }
            let mut s = cx.b.bind(ty, bin(Bin::Mul, Ex::Var(dot), f(scale as f64)));
            if let Some(c) = attn_logit_softcap {
                let c = f(*c as f64);
                let t = un(Un::Tanh, bin(Bin::Div, s, c.clone()));
                s = cx.b.bind(ty, bin(Bin::Mul, c, t));
            }
            if *mask_kind == MaskKind::Bias {
                let bd = view(cx, 3)?;
                if bd.len() > 4 {
                    return Err(cx.fail(format!("an attention bias of dims {bd:?}")));
                }
                let full = [bi.clone(), hh.clone(), qi.clone(), ki.clone()];
                let off = 4 - bd.len();
                let mut idx = Vec::with_capacity(bd.len());
                for (j, &dim) in bd.iter().enumerate() {
                    idx.push(match dim {
                        Dim::Static(1) => int(0),
                        Dim::Static(_) => full[j + off].clone(),
                        dyn_dim => {
                            let n = cx.dim(dyn_dim);
                            select(bin(Bin::Eq, n, int(1)), int(0), full[j + off].clone())
                        }
                    });
                }
                let bias = load(cx, 3, &idx)?;
                let bias = Ex::Convert(ty, Box::new(bias));
                s = cx.b.bind(ty, bin(Bin::Add, s, bias));
            }
            let nm = cx.b.bind(ty, bin(Bin::Max, Ex::Var(mx), s.clone()));
            let corr =
                cx.b.bind(ty, un(Un::Exp, bin(Bin::Sub, Ex::Var(mx), nm.clone())));
            let pk = cx.b.bind(ty, un(Un::Exp, bin(Bin::Sub, s, nm.clone())));
            cx.assign(den, mul_add(ty, Ex::Var(den), corr.clone(), pk.clone()));
            for (j, &a) in acc.iter().enumerate() {
                let vj = load(cx, 2, &at(&bi, &ki, &kh, j, dv))?;
                let kept = bin(Bin::Mul, Ex::Var(a), corr.clone());
                cx.assign(a, mul_add(ty, pk.clone(), vj, kept));
            }
            cx.assign(mx, nm);
            Ok(())
        })?;
        let body = if *mask_kind == MaskKind::Custom {
            // The mask is read and tested inside the loop, before the key's step.
            let (mut pre, allowed) = self.nested(|cx| {
                let m = load(cx, 3, &[bi.clone(), ki.clone()])?;
                let m = cx.b.bind(ty, Ex::Convert(ty, Box::new(m)));
                Ok(bin(Bin::Le, f(0.5), m))
            })?;
            pre.push(Stmt::If {
                cond: allowed,
                body: step,
            });
            pre
        } else {
            step
        };
        self.b.push(Stmt::Loop {
            var: ki_var,
            start,
            end,
            body,
        });

        // Outputs: a row with no allowed key (zero denominator) is zeros.
        let denv = Ex::Var(den);
        for (j, &a) in acc.iter().enumerate() {
            let o = select(
                bin(Bin::Eq, denv.clone(), f(0.0)),
                f(0.0),
                bin(Bin::Div, Ex::Var(a), denv.clone()),
            );
            let core = self.b.bind(ty, round(dtype, o));
            let coords = at(&bi, &qi, &hh, j, dv);
            let flat = self.ravel(&coords, out_space);
            let flat = self.b.bind(Ty::Index, flat);
            match epilogue {
                Some(e) => self.finish(e, out_space, flat, coords, core)?,
                None => {
                    let st = self.p.kernels[self.k].stores[0];
                    let slot = self.slot(st.buf, crate::loops::Access::Write)?;
                    let out_dt = self.p.buffers[st.buf].shape.dtype();
                    if out_dt != dtype {
                        return Err(self.fail(format!("attention into a {out_dt:?} buffer")));
                    }
                    self.b.push(Stmt::Store {
                        buf: slot,
                        index: flat,
                        value: core,
                    });
                }
            }
        }
        Ok(mul(self.numel(&qd[..2]), int(h as i64)))
    }
}
