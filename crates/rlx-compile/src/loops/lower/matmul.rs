//! Contractions `[batch.., M, K] × [batch.., K, N]`: one work-group per output tile.
//!
//! A group of [`THREADS`]² local items owns a `TM × TN` tile of one batch's result
//! (`TM = THREADS · reg`, likewise `TN`). The K axis is walked in slices of [`BK`]: each
//! slice of A (`TM × BK`) and of B (`BK × TN`) is staged in a shared array by the whole
//! group (each item loads `TM·BK / THREADS²` elements, zero past the edges of M, N or K),
//! a barrier, then every item folds the slice into its `reg × reg` register block —
//! rows `ty + THREADS·i`, columns `tx + THREADS·j`, so neighbouring items read
//! neighbouring B columns and one A row — and a second barrier frees the arrays.
//! Edges are guarded: loads past M, N or K stage zeros, and only in-range results run
//! the epilogue and store.
//!
//! Each output folds its products in index order `k = 0, 1, …, K−1` from `+0`, whatever
//! the tile shape (the last slice's fold stops at K when K is not a static multiple of
//! [`BK`]: a staged zero past K would turn a `−0` accumulator — reachable with fused
//! products that underflow — into `+0`): the result
//! is the serial fold in the compute type — `acc = fma(a, b, acc)` in f32 for
//! f32/f16/bf16 inputs (one rounding per step, [`Ex::MulAdd`], so every backend fuses
//! the same way; rounded once to the dtype at the end), `acc + a·b` in f64 for f64 and
//! wrapping i64 for integers (both exactly the oracle) — and does not depend on the tile
//! choice.
//! Operands are any views (transposes, broadcast batch axes): their index math is the
//! view chain, walked once per staged element.
//!
//! The tile is chosen once per kernel from the static extents: a 64×64 tile with 4×4
//! register blocks when both M and N may reach 64, else a 16×16 tile of one output per
//! item (skinny products such as M = 1 waste less of the group).

use super::expr::round;
use super::{Cx, LowerError};
use crate::loops::build::{add, bin, div, float, int, mul, mul_add, rem, select};
use crate::loops::{Bin, Ex, Lit, SharedArray, Stmt, Ty, Var};
use crate::program::Expr;
use rlx_ir::{DType, Dim};

/// Items along each side of a work-group (the group has `THREADS²` items).
pub const THREADS: u32 = 16;
/// Length of the K slice staged per step.
pub const BK: u32 = 16;

/// Register-block side (outputs per item along M and along N) for an `m × n` result.
fn reg_block(m: Dim, n: Dim) -> u32 {
    let big = |d: Dim| !matches!(d, Dim::Static(x) if x < 64);
    if big(m) && big(n) { 4 } else { 1 }
}

/// The tile side `THREADS · reg` a contraction of an `m × n` result uses (backends that
/// size their launch from the program read it here).
pub fn matmul_tile(m: Dim, n: Dim) -> u32 {
    THREADS * reg_block(m, n)
}

impl Cx<'_> {
    /// Lower a contraction; returns the number of work-groups (`batch · ⌈M/TM⌉ · ⌈N/TN⌉`).
    pub(super) fn contraction(
        &mut self,
        a: usize,
        b: usize,
        out_space: &[Dim],
        dtype: DType,
        epilogue: &Expr,
    ) -> Result<Ex, LowerError> {
        let ty = match Ty::of(dtype) {
            Some(t @ (Ty::F32 | Ty::F64 | Ty::I64)) => t,
            _ => return Err(self.fail(format!("a matmul of {dtype:?} values"))),
        };
        let loads = self.p.kernels[self.k].loads.clone();
        let view = |l: usize| {
            crate::program::chain_dims(self.p.buffers[loads[l].buf].shape.dims(), &loads[l].steps)
                .pop()
                .expect("a view has dims")
        };
        let (av, bv) = (view(a), view(b));
        let r = out_space.len();
        for (l, v) in [(a, &av), (b, &bv)] {
            let dt = self.p.buffers[loads[l].buf].shape.dtype();
            if Ty::of(dt) != Some(ty) || v.len() < 2 || r < 2 {
                return Err(self.fail(format!(
                    "a matmul operand {dt:?} {v:?} into {dtype:?} {out_space:?} (both operands need \
                     at least two axes and the result's compute type)"
                )));
            }
        }
        let reg = reg_block(out_space[r - 2], out_space[r - 1]);
        let t = THREADS as i64;
        let (tm, tn, bk) = (t * reg as i64, t * reg as i64, BK as i64);
        self.group = Some(THREADS * THREADS);
        let sa = self.shared.len();
        self.shared.push(SharedArray {
            ty,
            len: (tm * bk) as u32,
        });
        let sb = self.shared.len();
        self.shared.push(SharedArray {
            ty,
            len: (bk * tn) as u32,
        });

        // The group's tile: `group = (batch · tiles_m + tile_m) · tiles_n + tile_n`.
        let m_len = self.dim(out_space[r - 2]);
        let n_len = self.dim(out_space[r - 1]);
        let k_len = self.dim(av[av.len() - 1]);
        let tiles_m = div(add(m_len.clone(), int(tm - 1)), int(tm));
        let tiles_n = div(add(n_len.clone(), int(tn - 1)), int(tn));
        let tile_n = self.b.bind(Ty::Index, rem(Ex::Group, tiles_n.clone()));
        let rest = self.b.bind(Ty::Index, div(Ex::Group, tiles_n.clone()));
        let tile_m = self.b.bind(Ty::Index, rem(rest.clone(), tiles_m.clone()));
        let bz = self.b.bind(Ty::Index, div(rest, tiles_m.clone()));
        let batch_coords = self.unravel(bz, &out_space[..r - 2]);
        let row0 = self.b.bind(Ty::Index, mul(tile_m, int(tm)));
        let col0 = self.b.bind(Ty::Index, mul(tile_n, int(tn)));
        let tx = self.b.bind(Ty::Index, rem(Ex::Local, int(t)));
        let ty_l = self.b.bind(Ty::Index, div(Ex::Local, int(t)));

        // An operand's batch axes align right with the result's; its size-1 axes broadcast.
        let batch = |cx: &mut Self, v: &[Dim]| -> Vec<Ex> {
            let vb = v.len() - 2;
            (0..vb)
                .map(|i| {
                    let c = batch_coords[r - 2 - vb + i].clone();
                    match v[i] {
                        Dim::Static(1) => int(0),
                        Dim::Static(_) => c,
                        d => {
                            let size = cx.dim(d);
                            crate::loops::build::select(bin(Bin::Eq, size, int(1)), int(0), c)
                        }
                    }
                })
                .collect()
        };
        let (ab, bb) = (batch(self, &av), batch(self, &bv));

        let zero = match ty {
            Ty::I64 => Ex::Lit(Lit::I64(0)),
            _ => float(ty, 0.0),
        };
        let accs: Vec<Var> = (0..reg * reg)
            .map(|_| self.accumulator(ty, zero.clone()))
            .collect();
        let group_items = t * t;
        let k_tiles = div(add(k_len.clone(), int(bk - 1)), int(bk));
        self.counted(k_tiles, |cx, kt| {
            let k0 = cx.b.bind(Ty::Index, mul(kt, int(bk)));
            // Stage A[row0 .. row0+TM, k0 .. k0+BK] and B[k0 .. k0+BK, col0 .. col0+TN].
            let stages = [
                (
                    a,
                    sa,
                    tm,
                    bk,
                    [row0.clone(), k0.clone()],
                    [m_len.clone(), k_len.clone()],
                    &ab,
                ),
                (
                    b,
                    sb,
                    bk,
                    tn,
                    [k0.clone(), col0.clone()],
                    [k_len.clone(), n_len.clone()],
                    &bb,
                ),
            ];
            for (l, arr, rows, cols, base, [lim_r, lim_c], prefix) in stages {
                for s in 0..(rows * cols) / group_items {
                    let e = cx.b.bind(Ty::Index, add(Ex::Local, int(s * group_items)));
                    let (er, ec) = (div(e.clone(), int(cols)), rem(e.clone(), int(cols)));
                    let gr = cx.b.bind(Ty::Index, add(base[0].clone(), er));
                    let gc = cx.b.bind(Ty::Index, add(base[1].clone(), ec));
                    let v = cx.accumulator(ty, zero.clone());
                    let inside = bin(
                        Bin::And,
                        bin(Bin::Lt, gr.clone(), lim_r.clone()),
                        bin(Bin::Lt, gc.clone(), lim_c.clone()),
                    );
                    let (body, ()) = cx.nested(|cx| {
                        let mut coords = prefix.clone();
                        coords.extend([gr.clone(), gc.clone()]);
                        let index = cx.view_offset(&loads[l], &coords);
                        let buf = cx.load_slot(l)?;
                        cx.assign(
                            v,
                            Ex::Load {
                                buf,
                                index: Box::new(index),
                            },
                        );
                        Ok(())
                    })?;
                    cx.b.push(Stmt::If { cond: inside, body });
                    cx.b.push(Stmt::SharedStore {
                        arr,
                        index: e,
                        value: Ex::Var(v),
                    });
                }
            }
            cx.b.push(Stmt::Barrier);
            // The slice's length: BK, or what is left of K in the last slice (the same for
            // the whole group, so no barrier depends on it).
            let slice = match k_len {
                Ex::Lit(Lit::Index(kl)) if kl % bk == 0 => int(bk),
                _ => {
                    let left = bin(Bin::Sub, k_len.clone(), k0.clone());
                    let left = cx.b.bind(Ty::Index, left);
                    let short = bin(Bin::Lt, left.clone(), int(bk));
                    cx.b.bind(Ty::Index, select(short, left, int(bk)))
                }
            };
            cx.counted(slice, |cx, kk| {
                let sh = |arr: usize, index: Ex| Ex::Shared {
                    arr,
                    index: Box::new(index),
                };
                let av: Vec<Ex> = (0..reg as i64)
                    .map(|i| {
                        let row = add(ty_l.clone(), int(t * i));
                        cx.b.bind(ty, sh(sa, add(mul(row, int(bk)), kk.clone())))
                    })
                    .collect();
                let bv: Vec<Ex> = (0..reg as i64)
                    .map(|j| {
                        let col = add(tx.clone(), int(t * j));
                        cx.b.bind(ty, sh(sb, add(mul(kk.clone(), int(tn)), col)))
                    })
                    .collect();
                for i in 0..reg as usize {
                    for j in 0..reg as usize {
                        let acc = accs[i * reg as usize + j];
                        let sum = mul_add(ty, av[i].clone(), bv[j].clone(), Ex::Var(acc));
                        cx.assign(acc, sum);
                    }
                }
                Ok(())
            })?;
            cx.b.push(Stmt::Barrier);
            Ok(())
        })?;

        // The epilogue and stores of every in-range output of this item.
        for i in 0..reg as i64 {
            let row = self
                .b
                .bind(Ty::Index, add(row0.clone(), add(ty_l.clone(), int(t * i))));
            for j in 0..reg as i64 {
                let col = self
                    .b
                    .bind(Ty::Index, add(col0.clone(), add(tx.clone(), int(t * j))));
                let acc = accs[(i * reg as i64 + j) as usize];
                let inside = bin(
                    Bin::And,
                    bin(Bin::Lt, row.clone(), m_len.clone()),
                    bin(Bin::Lt, col.clone(), n_len.clone()),
                );
                let (body, ()) = self.nested(|cx| {
                    let mut coords = batch_coords.clone();
                    coords.extend([row.clone(), col.clone()]);
                    let flat = cx.ravel(&coords, out_space);
                    let flat = cx.b.bind(Ty::Index, flat);
                    let core = cx.b.bind(ty, round(dtype, Ex::Var(acc)));
                    cx.finish(epilogue, out_space, flat, coords, core)
                })?;
                self.b.push(Stmt::If { cond: inside, body });
            }
        }
        let batch_n = self.numel(&out_space[..r - 2]);
        Ok(mul(batch_n, mul(tiles_m, tiles_n)))
    }
}
