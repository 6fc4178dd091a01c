//! Attention over f16/bf16 through matrix-tile products ([`Stmt::TileMma`]: tensor
//! cores on CUDA), chosen by [`LowerOptions::tile_warps`](super::LowerOptions::tile_warps) for
//! unmasked or causal attention without softcap and head widths that are multiples of 16.
//!
//! A work-group is `W` warps ([`warps`]) per (batch, head, block of [`TILE`]
//! queries). The block's queries are staged once in a shared `Q[16×D]` tile (zeros past
//! the sequence); the keys go by in tiles of `16·W`: the group stages `K[16W×D]` and
//! `V[16W×Dv]`, clears the scores `S[16×16W]`, and warp `w` computes `S[·][16w..16w+16]
//! += Q·K_wᵀ` (one tile product of `D/16` steps, every warp on its own key block). Items
//! `0..16` then own one query row each: the row's new maximum over its allowed keys
//! (causal: key ≤ query), the rescale `e^{m_old − m}` of its denominator and of its
//! output row `O[i][·]`, and the probabilities `e^{s − m}` rounded to the input dtype
//! into `P[16×16W]` (the rounded values are also what the denominator sums, so the
//! weights stay normalised); then `O += P·V` runs as tile products over `O`'s 16-column
//! blocks, warp `w` taking blocks `w, w + W, …`. At the end each row owner divides its
//! row by the denominator, rounds once to the dtype and stores (through the epilogue). A
//! row with no allowed key stores zeros.
//!
//! Compared with the oracle's f64 softmax the result carries the probabilities' rounding
//! to the dtype (relative 2⁻¹¹ for f16, 2⁻⁸ for bf16 per weight) besides f32 sums in the
//! tile products' order, so it agrees within a few units in the last place of the dtype,
//! not bit for bit with the scalar lowering.

use super::expr::round;
use super::{Cx, LowerError};
use crate::loops::build::{add, bin, div, float, int, mul, rem, select, un};
use crate::loops::{
    Bin, Ex, SHUFFLE_WIDTH, SharedArray, Stmt, TILE, TileMma, TileOperand, Ty, Un, Var,
};
use crate::program::Expr;
use rlx_ir::{DType, Dim};

/// What [`Cx::attention_tiles`] needs from the validated attention operands.
pub(super) struct TileAttention<'e> {
    /// Loads of q, k, v.
    pub inputs: [usize; 3],
    /// `[B, S, H, D]` (true) or `[B, S, H·D]` operands.
    pub four: bool,
    /// Query heads and kv heads.
    pub heads: (usize, usize),
    /// Head width and value head width.
    pub d: usize,
    pub dv: usize,
    /// Query and key lengths.
    pub sq: Ex,
    pub sk: Ex,
    /// The batch dim.
    pub batch: Ex,
    /// Causal (true) or unmasked.
    pub causal: bool,
    pub scale: f32,
    pub dtype: DType,
    pub out_space: &'e [Dim],
    pub epilogue: Option<&'e Expr>,
    /// The most warps per work-group.
    pub max_warps: u32,
}

/// Warps per work-group for heads of `d` and value heads of `dv` (both multiples of 16):
/// the largest divisor of `dv/16` up to `max` (at least 1) whose key tile (16 keys per warp) keeps the K
/// and V tiles within 16 KiB of 16-bit elements (CUDA's 48 KiB of static shared memory
/// then also holds Q, the scores, the probabilities and the f32 output rows).
pub(super) fn warps(d: usize, dv: usize, max: u32) -> u32 {
    let blocks = dv / TILE as usize;
    (1..=max.max(1) as usize)
        .rev()
        .find(|&w| blocks.is_multiple_of(w) && TILE as usize * w * (d + dv) * 2 <= 16384)
        .unwrap_or(1) as u32
}

/// Whether the tile lowering takes attention of these parameters.
pub(super) fn eligible(dtype: DType, d: usize, dv: usize) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
        && d.is_multiple_of(TILE as usize)
        && dv.is_multiple_of(TILE as usize)
}

impl Cx<'_> {
    /// Lower attention `a` with tile products; returns the number of groups.
    pub(super) fn attention_tiles(&mut self, a: &TileAttention<'_>) -> Result<Ex, LowerError> {
        let (h, hk) = a.heads;
        let (d, dv) = (a.d as i64, a.dv as i64);
        let t = TILE as i64;
        let ty = Ty::F32;
        let f = |v: f64| float(ty, v);
        let rnd = |x: Ex| {
            let op = if a.dtype == DType::F16 {
                Un::RoundF16
            } else {
                Un::RoundBf16
            };
            un(op, x)
        };
        let nw = warps(a.d, a.dv, a.max_warps) as i64;
        // Keys per tile: one 16-key block per warp.
        let kt = t * nw;
        let w = SHUFFLE_WIDTH as i64 * nw;
        self.group = Some(w as u32);
        let array = |cx: &mut Self, len: i64| {
            cx.shared.push(SharedArray {
                ty,
                len: len as u32,
            });
            cx.shared.len() - 1
        };
        let (sh_q, sh_k, sh_v) = (
            array(self, t * d),
            array(self, kt * d),
            array(self, kt * dv),
        );
        let (sh_s, sh_p, sh_o) = (
            array(self, t * kt),
            array(self, t * kt),
            array(self, t * dv),
        );
        let loads = self.p.kernels[self.k].loads.clone();
        // group = (b · H + h) · ⌈Sq/16⌉ + query block.
        let nqb = div(add(a.sq.clone(), int(t - 1)), int(t));
        let qb = self.b.bind(Ty::Index, rem(Ex::Group, nqb.clone()));
        let rest = self.b.bind(Ty::Index, div(Ex::Group, nqb.clone()));
        let hh = self.b.bind(Ty::Index, rem(rest.clone(), int(h as i64)));
        let bi = self.b.bind(Ty::Index, div(rest, int(h as i64)));
        let kh = self
            .b
            .bind(Ty::Index, div(hh.clone(), int((h / hk) as i64)));
        let q0 = self.b.bind(Ty::Index, mul(qb, int(t)));
        let four = a.four;
        let at = move |b: &Ex, s: &Ex, head: &Ex, j: Ex, width: i64| -> Vec<Ex> {
            if four {
                vec![b.clone(), s.clone(), head.clone(), j]
            } else {
                vec![b.clone(), s.clone(), add(mul(head.clone(), int(width)), j)]
            }
        };
        let load = |cx: &mut Self, i: usize, coords: &[Ex]| -> Result<Ex, LowerError> {
            let l = a.inputs[i];
            let index = cx.view_offset(&loads[l], coords);
            Ok(Ex::Load {
                buf: cx.load_slot(l)?,
                index: Box::new(index),
            })
        };
        // Stage rows `first + e / width` of operand `operand` (head `head`) into `arr`,
        // every item a strided part, zeros at and past row `limit`.
        let stage = |cx: &mut Self,
                     arr: usize,
                     operand: usize,
                     first: &Ex,
                     head: &Ex,
                     rows: i64,
                     width: i64,
                     limit: &Ex|
         -> Result<(), LowerError> {
            let head = head.clone();
            let total = rows * width;
            cx.counted(int((total + w - 1) / w), |cx, r| {
                let e = cx.b.bind(Ty::Index, add(mul(r, int(w)), Ex::Local));
                let row =
                    cx.b.bind(Ty::Index, add(first.clone(), div(e.clone(), int(width))));
                let j = rem(e.clone(), int(width));
                let v = cx.accumulator(ty, f(0.0));
                let (body, ()) = cx.nested(|cx| {
                    let x = load(cx, operand, &at(&bi, &row, &head, j, width))?;
                    cx.assign(v, x);
                    Ok(())
                })?;
                cx.b.push(Stmt::If {
                    cond: bin(Bin::Lt, row, limit.clone()),
                    body,
                });
                let st = Stmt::SharedStore {
                    arr,
                    index: e.clone(),
                    value: Ex::Var(v),
                };
                if total % w == 0 {
                    cx.b.push(st);
                } else {
                    cx.b.push(Stmt::If {
                        cond: bin(Bin::Lt, e, int(total)),
                        body: vec![st],
                    });
                }
                Ok(())
            })
        };
        // Clear `len` elements of `arr`, every item a strided part.
        let clear = |cx: &mut Self, arr: usize, len: i64| {
            cx.counted(int(len / w), |cx, r| {
                cx.b.push(Stmt::SharedStore {
                    arr,
                    index: add(mul(r, int(w)), Ex::Local),
                    value: f(0.0),
                });
                Ok(())
            })
        };
        stage(self, sh_q, 0, &q0, &hh, t, d, &a.sq)?;
        clear(self, sh_o, t * dv)?;
        // Row state (meaningful in the row owners, items 0..16).
        let mx = self.accumulator(ty, f(f64::NEG_INFINITY));
        let den = self.accumulator(ty, f(0.0));
        let owner = self.b.bind(Ty::Bool, bin(Bin::Lt, Ex::Local, int(t)));
        let qi = self.b.bind(Ty::Index, add(q0.clone(), Ex::Local));
        // Keys this row may see, and the key tiles the block needs.
        let key_end = |q_past: Ex| {
            select(
                bin(Bin::Lt, q_past.clone(), a.sk.clone()),
                q_past,
                a.sk.clone(),
            )
        };
        let (end, t_end) = if a.causal {
            (
                key_end(add(qi.clone(), int(1))),
                key_end(add(q0.clone(), int(t))),
            )
        } else {
            (a.sk.clone(), a.sk.clone())
        };
        let end = self.b.bind(Ty::Index, end);
        let tiles = self
            .b
            .bind(Ty::Index, div(add(t_end, int(kt - 1)), int(kt)));
        let sh = |arr: usize, index: Ex| Ex::Shared {
            arr,
            index: Box::new(index),
        };
        // Operand windows at `per_warp · warp + at` (`per_warp` 0: the same for all).
        let warp_tile = |arr: usize, stride: i64, per_warp: i64, at: i64| TileOperand {
            arr,
            offset: add(
                mul(div(Ex::Local, int(SHUFFLE_WIDTH as i64)), int(per_warp)),
                int(at),
            ),
            stride: stride as u32,
        };
        let t_var: Var = self.b.var(Ty::Index);
        let (tile_body, ()) = self.nested(|cx| {
            let k0 = cx.b.bind(Ty::Index, mul(Ex::Var(t_var), int(kt)));
            stage(cx, sh_k, 1, &k0, &kh, kt, d, &a.sk)?;
            stage(cx, sh_v, 2, &k0, &kh, kt, dv, &a.sk)?;
            clear(cx, sh_s, t * kt)?;
            // Warp w: S[·][16w..16w+16] += Q · (keys 16w..16w+16)ᵀ.
            cx.b.push(Stmt::TileMma(Box::new(TileMma {
                elem: a.dtype,
                a: warp_tile(sh_q, d, 0, 0),
                b: warp_tile(sh_k, d, t * d, 0),
                b_transposed: true,
                c: warp_tile(sh_s, kt, t, 0),
                k_steps: (d / t) as u32,
            })));
            // The row owners' softmax step over this tile's keys.
            let (row, ()) = cx.nested(|cx| {
                let base = cx.b.bind(Ty::Index, mul(Ex::Local, int(kt)));
                let allowed = |j: i64| bin(Bin::Lt, add(k0.clone(), int(j)), end.clone());
                let score = |j: i64| {
                    bin(
                        Bin::Mul,
                        sh(sh_s, add(base.clone(), int(j))),
                        f(a.scale as f64),
                    )
                };
                let mut m = Ex::Var(mx);
                for j in 0..kt {
                    m = select(allowed(j), bin(Bin::Max, m.clone(), score(j)), m);
                    m = cx.b.bind(ty, m);
                }
                // No allowed key so far: nothing to rescale, no weight.
                let none =
                    cx.b.bind(Ty::Bool, bin(Bin::Eq, m.clone(), f(f64::NEG_INFINITY)));
                let corr = cx.b.bind(
                    ty,
                    select(
                        none.clone(),
                        f(1.0),
                        un(Un::Exp, bin(Bin::Sub, Ex::Var(mx), m.clone())),
                    ),
                );
                let sum = cx.accumulator(ty, f(0.0));
                for j in 0..kt {
                    let p = rnd(un(Un::Exp, bin(Bin::Sub, score(j), m.clone())));
                    let p = cx.b.bind(
                        ty,
                        select(
                            bin(Bin::And, allowed(j), un(Un::Not, none.clone())),
                            p,
                            f(0.0),
                        ),
                    );
                    cx.assign(sum, bin(Bin::Add, Ex::Var(sum), p.clone()));
                    cx.b.push(Stmt::SharedStore {
                        arr: sh_p,
                        index: add(base.clone(), int(j)),
                        value: p,
                    });
                }
                cx.assign(
                    den,
                    bin(
                        Bin::Add,
                        bin(Bin::Mul, Ex::Var(den), corr.clone()),
                        Ex::Var(sum),
                    ),
                );
                cx.assign(mx, m);
                let obase = cx.b.bind(Ty::Index, mul(Ex::Local, int(dv)));
                cx.counted(int(dv), |cx, j| {
                    let i = add(obase.clone(), j);
                    cx.b.push(Stmt::SharedStore {
                        arr: sh_o,
                        index: i.clone(),
                        value: bin(Bin::Mul, sh(sh_o, i), corr.clone()),
                    });
                    Ok(())
                })
            })?;
            cx.b.push(Stmt::If {
                cond: owner.clone(),
                body: row,
            });
            // O's 16-column blocks, warp w taking blocks w, w + W, …: O[·][cols] += P · V[·][cols].
            for r in 0..dv / t / nw {
                let at = r * nw * t;
                cx.b.push(Stmt::TileMma(Box::new(TileMma {
                    elem: a.dtype,
                    a: warp_tile(sh_p, kt, 0, 0),
                    b: warp_tile(sh_v, dv, t, at),
                    b_transposed: false,
                    c: warp_tile(sh_o, dv, t, at),
                    k_steps: nw as u32,
                })));
            }
            Ok(())
        })?;
        self.b.push(Stmt::Loop {
            var: t_var,
            start: int(0),
            end: tiles,
            body: tile_body,
        });
        // Outputs: row owners with a query; a zero denominator stores zeros.
        let (outs, ()) = self.nested(|cx| {
            let denv = Ex::Var(den);
            for j in 0..dv {
                let o = select(
                    bin(Bin::Eq, denv.clone(), f(0.0)),
                    f(0.0),
                    bin(
                        Bin::Div,
                        sh(sh_o, add(mul(Ex::Local, int(dv)), int(j))),
                        denv.clone(),
                    ),
                );
                let core = cx.b.bind(ty, round(a.dtype, o));
                let coords = at(&bi, &qi, &hh, int(j), dv);
                cx.attention_output(a.epilogue, a.out_space, a.dtype, coords, core)?;
            }
            Ok(())
        })?;
        self.b.push(Stmt::If {
            cond: bin(Bin::And, owner, bin(Bin::Lt, qi, a.sq.clone())),
            body: outs,
        });
        Ok(mul(mul(a.batch.clone(), int(h as i64)), nqb))
    }
}
