//! Attention (`Op::Attention`, fused with an epilogue or opaque): a work-group per
//! (batch, head, block of [`QUERIES`] queries), one local item per query, an online
//! softmax over the keys.
//!
//! The keys are walked in tiles of [`key_tile`] keys: the whole group stages a tile of K
//! and of V in shared arrays (each item a strided part, zeros past the sequence), meets
//! at a barrier, then every item folds the tile's keys in index order into its own
//! running maximum, denominator and `Dv` accumulators (its query row and accumulators
//! are variables: the head widths are static, so the loops over them are unrolled at
//! lowering time), and a second barrier frees the tiles. The tiles a block needs are the
//! same for all its items — under a causal or sliding-window mask only those up to the
//! block's last query (and from its first query's window) — so every barrier is uniform;
//! the mask itself (`Causal` and `SlidingWindow` as a key range per query, `Custom` as a
//! condition per key) selects keys inside the fold. Each key's step follows the oracle:
//! the scaled dot product, the softcap `c·tanh(s/c)`, the additive bias (broadcast
//! right-aligned to `[B, H, Sq, Sk]`), then `m`, the rescaled denominator and
//! accumulators (`acc·e^{m_old − m} + e^{s − m}·v`). Every product that is summed is one
//! fused multiply-add ([`Ex::MulAdd`]), so each backend rounds like the interpreter, and
//! the per-query order of keys does not depend on the tile size. A row with no allowed
//! key stores zeros. Layouts `[B, S, H, D]` and `[B, S, H·D]` are both read through
//! their views; grouped-query heads read kv head `h / (H/Hk)`. Values are computed in
//! f32 (f16/bf16 inputs widened) or f64 and rounded once to the dtype before the
//! epilogue.

use super::expr::round;
use super::{Cx, LowerError};
use crate::loops::build::{add, bin, div, float, int, mul, mul_add, rem, select, un};
use crate::loops::{Bin, Ex, SharedArray, Stmt, Ty, Un, Var};
use crate::program::Expr;
use rlx_ir::{DType, Dim, MaskKind, Op};

/// The widest head the lowering keeps in variables by default (WGSL's attention kernel
/// limit); a backend raises it with [`super::LowerOptions::max_head`].
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
        let max = if self.max_head == 0 {
            MAX_HEAD
        } else {
            self.max_head
        };
        if d == 0 || dv == 0 || d > max || dv > max {
            return Err(self.fail(format!(
                "attention with heads of {d} and value heads of {dv} (the lowering keeps 1..={max})"
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
        // Wide heads take the scalar lowering only (the tiles' shared arrays are sized
        // for heads up to MAX_HEAD).
        if self.tile_warps > 0
            && d.max(dv) <= MAX_HEAD
            && super::attention_tc::eligible(dtype, d, dv)
            && matches!(mask_kind, MaskKind::None | MaskKind::Causal)
            && attn_logit_softcap.is_none()
        {
            let scale = score_scale
                .map(|s| s as f64)
                .unwrap_or(1.0 / (d as f64).sqrt()) as f32;
            let batch = self.dim(qd[0]);
            let a = super::attention_tc::TileAttention {
                inputs: [inputs[0], inputs[1], inputs[2]],
                four,
                heads: (h, hk),
                d,
                dv,
                sq,
                sk,
                batch,
                causal: *mask_kind == MaskKind::Causal,
                scale,
                dtype,
                out_space,
                epilogue,
                max_warps: self.tile_warps,
            };
            return self.attention_tiles(&a);
        }
        let (bq, bk) = (QUERIES as i64, key_tile(d, dv) as i64);
        self.group = Some(QUERIES);
        let sh_k = self.shared.len();
        self.shared.push(SharedArray {
            ty,
            len: (bk * d as i64) as u32,
        });
        let sh_v = self.shared.len();
        self.shared.push(SharedArray {
            ty,
            len: (bk * dv as i64) as u32,
        });
        // group = (b · H + h) · ⌈Sq/BQ⌉ + query block.
        let nqb = div(add(sq.clone(), int(bq - 1)), int(bq));
        let qb = self.b.bind(Ty::Index, rem(Ex::Group, nqb.clone()));
        let rest = self.b.bind(Ty::Index, div(Ex::Group, nqb.clone()));
        let hh = self.b.bind(Ty::Index, rem(rest.clone(), int(h as i64)));
        let bi = self.b.bind(Ty::Index, div(rest, int(h as i64)));
        let kh = self
            .b
            .bind(Ty::Index, div(hh.clone(), int((h / hk) as i64)));
        let q0 = self.b.bind(Ty::Index, mul(qb, int(bq)));
        let qi = self.b.bind(Ty::Index, add(q0.clone(), Ex::Local));
        let valid = self.b.bind(Ty::Bool, bin(Bin::Lt, qi.clone(), sq.clone()));
        // Coordinates of (b, s, head, j) in an operand of this layout.
        let at = |b: &Ex, s: &Ex, head: &Ex, j: Ex, width: usize| -> Vec<Ex> {
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
        let f = |v: f64| float(ty, v);
        // The query row, loaded by the items with a query (the others only stage tiles).
        let q: Vec<Var> = (0..d).map(|_| self.accumulator(ty, f(0.0))).collect();
        let (body, ()) = self.nested(|cx| {
            for (j, &qj) in q.iter().enumerate() {
                let v = load(cx, 0, &at(&bi, &qi, &hh, int(j as i64), d))?;
                cx.assign(qj, v);
            }
            Ok(())
        })?;
        self.b.push(Stmt::If {
            cond: valid.clone(),
            body,
        });
        let mx = self.accumulator(ty, f(f64::NEG_INFINITY));
        let den = self.accumulator(ty, f(0.0));
        let acc: Vec<Var> = (0..dv).map(|_| self.accumulator(ty, f(0.0))).collect();
        // The keys the mask allows this query, and the key tiles the whole block needs
        // (the same for every item of the group, so the tile loop's barriers are uniform).
        let past_q = add(qi.clone(), int(1));
        let causal_end = select(bin(Bin::Lt, past_q.clone(), sk.clone()), past_q, sk.clone());
        let past_block = add(q0.clone(), int(bq));
        let block_end = select(
            bin(Bin::Lt, past_block.clone(), sk.clone()),
            past_block,
            sk.clone(),
        );
        let tiles = |end: Ex| div(add(end, int(bk - 1)), int(bk));
        let (start, end, t_start, t_end) = match mask_kind {
            MaskKind::Causal => (int(0), causal_end, int(0), tiles(block_end)),
            MaskKind::SlidingWindow(w) => {
                let w = int(*w as i64);
                let from = |q: &Ex| {
                    select(
                        bin(Bin::Lt, w.clone(), q.clone()),
                        bin(Bin::Sub, q.clone(), w.clone()),
                        int(0),
                    )
                };
                let first = div(from(&q0), int(bk));
                (from(&qi), causal_end, first, tiles(block_end))
            }
            MaskKind::None | MaskKind::Bias | MaskKind::Custom => {
                (int(0), sk.clone(), int(0), tiles(sk.clone()))
            }
        };
        let start = self.b.bind(Ty::Index, start);
        let end = self.b.bind(Ty::Index, end);
        let t_start = self.b.bind(Ty::Index, t_start);
        let t_end = self.b.bind(Ty::Index, t_end);
        let scale = score_scale
            .map(|s| s as f64)
            .unwrap_or(1.0 / (d as f64).sqrt()) as f32;
        let sh = |arr: usize, index: Ex| Ex::Shared {
            arr,
            index: Box::new(index),
        };
        // One key's step of the online softmax: `key` indexes the operands, `kk` the tile.
        let step = |cx: &mut Self, key: &Ex, kk: &Ex| -> Result<(), LowerError> {
            let dot = cx.accumulator(ty, f(0.0));
            for (j, &qj) in q.iter().enumerate() {
                let kj = sh(sh_k, add(mul(kk.clone(), int(d as i64)), int(j as i64)));
                cx.assign(dot, mul_add(ty, Ex::Var(qj), kj, Ex::Var(dot)));
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
                let full = [bi.clone(), hh.clone(), qi.clone(), key.clone()];
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
                let vj = sh(sh_v, add(mul(kk.clone(), int(dv as i64)), int(j as i64)));
                let kept = bin(Bin::Mul, Ex::Var(a), corr.clone());
                cx.assign(a, mul_add(ty, pk.clone(), vj, kept));
            }
            cx.assign(mx, nm);
            Ok(())
        };
        let t_var = self.b.var(Ty::Index);
        let (tile_body, ()) = self.nested(|cx| {
            let k0 = cx.b.bind(Ty::Index, mul(Ex::Var(t_var), int(bk)));
            // Stage the tile's keys and values (zeros past Sk), every item a strided part.
            for (arr, width, operand) in [(sh_k, d, 1), (sh_v, dv, 2)] {
                let total = bk * width as i64;
                for s in 0..(total + bq - 1) / bq {
                    let (stage, ()) = cx.nested(|cx| {
                        let e = cx.b.bind(Ty::Index, add(Ex::Local, int(s * bq)));
                        let row = div(e.clone(), int(width as i64));
                        let key = cx.b.bind(Ty::Index, add(k0.clone(), row));
                        let j = cx.b.bind(Ty::Index, rem(e.clone(), int(width as i64)));
                        let v = cx.accumulator(ty, f(0.0));
                        let (body, ()) = cx.nested(|cx| {
                            let x = load(cx, operand, &at(&bi, &key, &kh, j, width))?;
                            cx.assign(v, x);
                            Ok(())
                        })?;
                        cx.b.push(Stmt::If {
                            cond: bin(Bin::Lt, key, sk.clone()),
                            body,
                        });
                        cx.b.push(Stmt::SharedStore {
                            arr,
                            index: e,
                            value: Ex::Var(v),
                        });
                        Ok(())
                    })?;
                    if (s + 1) * bq <= total {
                        cx.b.body.extend(stage);
                    } else {
                        let e = add(Ex::Local, int(s * bq));
                        cx.b.push(Stmt::If {
                            cond: bin(Bin::Lt, e, int(total)),
                            body: stage,
                        });
                    }
                }
            }
            cx.b.push(Stmt::Barrier);
            // The tile's keys in index order, those the mask allows this query.
            let (fold, ()) = cx.nested(|cx| {
                cx.counted(int(bk), |cx, kk| {
                    let key = cx.b.bind(Ty::Index, add(k0.clone(), kk.clone()));
                    let inside = bin(
                        Bin::And,
                        bin(Bin::Lt, key.clone(), end.clone()),
                        bin(Bin::Le, start.clone(), key.clone()),
                    );
                    let (body, ()) = cx.nested(|cx| {
                        if *mask_kind == MaskKind::Custom {
                            let m = load(cx, 3, &[bi.clone(), key.clone()])?;
                            let m = cx.b.bind(ty, Ex::Convert(ty, Box::new(m)));
                            let (b, ()) = cx.nested(|cx| step(cx, &key, &kk))?;
                            cx.b.push(Stmt::If {
                                cond: bin(Bin::Le, f(0.5), m),
                                body: b,
                            });
                            Ok(())
                        } else {
                            step(cx, &key, &kk)
                        }
                    })?;
                    cx.b.push(Stmt::If { cond: inside, body });
                    Ok(())
                })
            })?;
            cx.b.push(Stmt::If {
                cond: valid.clone(),
                body: fold,
            });
            cx.b.push(Stmt::Barrier);
            Ok(())
        })?;
        self.b.push(Stmt::Loop {
            var: t_var,
            start: t_start,
            end: t_end,
            body: tile_body,
        });

        // Outputs: a row with no allowed key (zero denominator) is zeros.
        let (outs, ()) = self.nested(|cx| {
            let denv = Ex::Var(den);
            for (j, &a) in acc.iter().enumerate() {
                let o = select(
                    bin(Bin::Eq, denv.clone(), f(0.0)),
                    f(0.0),
                    bin(Bin::Div, Ex::Var(a), denv.clone()),
                );
                let core = cx.b.bind(ty, round(dtype, o));
                let coords = at(&bi, &qi, &hh, int(j as i64), dv);
                cx.attention_output(epilogue, out_space, dtype, coords, core)?;
            }
            Ok(())
        })?;
        self.b.push(Stmt::If {
            cond: valid,
            body: outs,
        });
        let batch = self.dim(qd[0]);
        Ok(mul(mul(batch, int(h as i64)), nqb))
    }

    /// Store one attention output element `core` at `coords` of `out_space`, or run the
    /// kernel's epilogue on it (shared by the scalar and the tensor-core lowerings).
    pub(super) fn attention_output(
        &mut self,
        epilogue: Option<&Expr>,
        out_space: &[Dim],
        dtype: DType,
        coords: Vec<Ex>,
        core: Ex,
    ) -> Result<(), LowerError> {
        let flat = self.ravel(&coords, out_space);
        let flat = self.b.bind(Ty::Index, flat);
        if let Some(e) = epilogue {
            return self.finish(e, out_space, flat, coords, core);
        }
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
        Ok(())
    }
}

/// Queries per work-group of the lowered attention (one item each).
pub const QUERIES: u32 = 32;

/// Keys per shared-memory tile for heads of `d` and value heads of `dv`: the K and V
/// tiles together stay within 16 KiB of f32 (WebGPU's default work-group storage), at
/// most [`QUERIES`] keys.
pub fn key_tile(d: usize, dv: usize) -> u32 {
    (4096 / (d + dv)).clamp(1, QUERIES as usize) as u32
}
