//! Reductions: the prologue folded over the reduced axes, then the epilogue.
//!
//! Two shapes, chosen once per kernel from its static extents (so a program always
//! reduces in the same order, on every backend):
//! - *one item per output*, folding the reduced positions in row-major order — for short
//!   reductions, and for column reductions (last axis kept) with many outputs, where
//!   neighbouring items read neighbouring elements;
//! - *one work-group per output* of `lanes` items (a power of two, at most
//!   [`MAX_GROUP`]): item `l` folds positions `l, l + lanes, l + 2·lanes, …` (neighbouring
//!   items read neighbouring elements when the last axis is reduced), stores its partial
//!   in a shared array, and the partials are combined by a fixed tree — `sh[l] ⊕= sh[l +
//!   h]` for `h = lanes/2, …, 1`, a barrier between levels — before item 0 applies the
//!   epilogue.
//!
//! Accumulators: f32 for f32/f16/bf16 values (the prologue rounds each value to its
//! dtype; the sum is rounded once at the end), f64 for f64, wrapping i64 for integers
//! (their sum, product, max and min are exact whatever the order), `or`/`and` for the
//! max/min of bools. An integer mean keeps a quotient and a remainder by the count
//! (`Σ v = n·q + r`, `|r| < n`), so it is exact — truncated toward zero like the
//! oracle's 128-bit sum — without wider integers. Float max/min are IEEE (NaN wins, `+0` over `−0`), so their result
//! does not depend on the order either. Float sums and products do: against the oracle's
//! f64 fold they agree to rounding, and bit for bit where every partial is exact.
//!
//! Argmax/argmin fold a (value, position) pair per item: the identity value at the
//! position `count` (no element yet), and a state takes the other's pair when that
//! value is better (a NaN beats any number, nothing beats a NaN) or equal (both NaN,
//! or `−0 = +0`) at a lower position, so every tree shape gives the oracle's first
//! extremum. The position becomes the result in the kernel's dtype.
//!
//! Max, min, argmax, argmin and integer means of an empty axis raise
//! [`Fault::EmptyReduction`] (the oracle's error); an empty sum is 0, an empty product
//! 1, an empty float mean NaN.

use super::expr::{Env, ieee_max, round};
use super::{Cx, LowerError};
use crate::loops::build::{add, bin, div, float, int, mul, rem, select, un};
use crate::loops::{Access, Bin, Ex, Fault, Lit, SharedArray, Stmt, Ty, Un, Var};
use crate::program::Expr;
use rlx_ir::{DType, Dim, ReduceOp};

/// The largest work-group a reduction uses (WebGPU's baseline limit of invocations per
/// workgroup, so every backend can run every lowered reduction).
pub const MAX_GROUP: u32 = 256;
/// Reductions over fewer (static) positions run one item per output.
const GROUP_MIN: usize = 64;
/// Column reductions (last axis kept) use work-groups only for fewer (static) outputs.
const FEW_OUTPUTS: usize = 1024;

/// The product of `dims` when every one is static.
fn static_numel(dims: &[Dim]) -> Option<usize> {
    dims.iter()
        .map(|d| match d {
            Dim::Static(n) => Some(*n),
            Dim::Dynamic(_) => None,
        })
        .product()
}

/// The fields of a `Reduce` kernel.
pub(in crate::loops::lower) struct Reduction<'a> {
    pub op: ReduceOp,
    /// Argmax/argmin: the position of the first extremum (see `KernelKind::Reduce`).
    pub arg: bool,
    pub in_space: &'a [Dim],
    pub axes: &'a [usize],
    pub keep_dim: bool,
    pub prologue: &'a Expr,
    pub input: u32,
    pub out_space: &'a [Dim],
    pub dtype: DType,
    pub epilogue: &'a Expr,
}

/// Items per output: 1 (a serial fold per item) or a work-group size.
fn lanes(r: &Reduction<'_>, red: &[Dim]) -> u32 {
    let l = static_numel(red);
    if l.is_some_and(|l| l < GROUP_MIN) {
        return 1;
    }
    let row = r.axes.contains(&(r.in_space.len() - 1));
    if !row && static_numel(r.out_space).is_none_or(|n| n >= FEW_OUTPUTS) {
        return 1;
    }
    match l {
        // About eight positions per item.
        Some(l) => (l.div_ceil(8).next_power_of_two() as u32).clamp(32, MAX_GROUP),
        None => MAX_GROUP,
    }
}

/// Items per row of a row op (softmax, norms) over rows of `c` columns: 1 (serial
/// passes) for short static rows, else a work-group size.
pub(super) fn row_lanes(c: Dim) -> u32 {
    match c {
        Dim::Static(n) if n < GROUP_MIN => 1,
        Dim::Static(n) => (n.div_ceil(8).next_power_of_two() as u32).clamp(32, MAX_GROUP),
        Dim::Dynamic(_) => MAX_GROUP,
    }
}

/// The identity of `op` in compute type `ty` (integers: the extremes of dtype `dt`, so a
/// 32-bit backend holds them).
fn identity(op: ReduceOp, ty: Ty, dt: DType) -> Ex {
    match ty {
        Ty::Bool => Ex::Lit(Lit::Bool(op == ReduceOp::Min)),
        Ty::I64 => {
            let (lo, hi) = match dt {
                DType::I8 => (i8::MIN as i64, i8::MAX as i64),
                DType::I16 => (i16::MIN as i64, i16::MAX as i64),
                DType::I32 => (i32::MIN as i64, i32::MAX as i64),
                DType::U8 => (0, u8::MAX as i64),
                DType::U32 => (0, u32::MAX as i64),
                _ => (i64::MIN, i64::MAX),
            };
            Ex::Lit(Lit::I64(match op {
                ReduceOp::Sum | ReduceOp::Mean => 0,
                ReduceOp::Prod => 1,
                ReduceOp::Max => lo,
                ReduceOp::Min => hi,
            }))
        }
        _ => float(
            ty,
            match op {
                ReduceOp::Sum | ReduceOp::Mean => 0.0,
                ReduceOp::Prod => 1.0,
                ReduceOp::Max => f64::NEG_INFINITY,
                ReduceOp::Min => f64::INFINITY,
            },
        ),
    }
}

/// `a ⊕ b` for `op` in compute type `ty`.
fn combine(op: ReduceOp, ty: Ty, a: Ex, b: Ex) -> Ex {
    match (op, ty) {
        (ReduceOp::Max, Ty::Bool) => bin(Bin::Or, a, b),
        (ReduceOp::Min, Ty::Bool) => bin(Bin::And, a, b),
        (ReduceOp::Sum | ReduceOp::Mean, _) => bin(Bin::Add, a, b),
        (ReduceOp::Prod, _) => bin(Bin::Mul, a, b),
        (ReduceOp::Max, Ty::I64) => bin(Bin::Max, a, b),
        (ReduceOp::Min, Ty::I64) => bin(Bin::Min, a, b),
        (ReduceOp::Max, _) => ieee_max(a, b, ty),
        // min(a, b) = −max(−a, −b) keeps max's NaN and signed-zero rules.
        (ReduceOp::Min, _) => un(Un::Neg, ieee_max(un(Un::Neg, a), un(Un::Neg, b), ty)),
    }
}

impl Cx<'_> {
    /// The accumulator type of reduction `r` of `in_dt` values, or why it is not lowered.
    fn reduce_ty(&self, r: &Reduction<'_>, in_dt: DType) -> Result<Ty, LowerError> {
        let name = format!("reduce_{}", r.op.name());
        let ty = Ty::of(in_dt).ok_or_else(|| self.fail(format!("{name} of {in_dt:?} values")))?;
        if ty == Ty::Bool && !matches!(r.op, ReduceOp::Max | ReduceOp::Min) {
            return Err(self.fail(format!("{name} of bool values (only max/min are defined)")));
        }
        if Ty::of(r.dtype) != Some(ty) {
            return Err(self.fail(format!("{name} of {in_dt:?} values to {:?}", r.dtype)));
        }
        Ok(ty)
    }

    /// Lower reduction `r`; returns the number of items (or work-groups). With `split`,
    /// the first kernel of a split reduction: a work-group per (output, part) storing
    /// its part's state in the scratch slot.
    pub(super) fn reduce(
        &mut self,
        r: &Reduction<'_>,
        split: Option<u32>,
    ) -> Result<Ex, LowerError> {
        let in_dt = r.prologue.nodes[r.input as usize].dtype;
        let ty = self.reduce_ty(r, in_dt)?;
        let red_dims: Vec<Dim> = r.axes.iter().map(|&a| r.in_space[a]).collect();
        let lanes = if split.is_some() {
            MAX_GROUP
        } else {
            lanes(r, &red_dims)
        };
        let out = match split {
            Some(parts) => self.b.bind(Ty::Index, div(Ex::Group, int(parts as i64))),
            None if lanes > 1 => Ex::Group,
            None => Ex::Item,
        };
        let out_coords = self.unravel(out.clone(), r.out_space);
        let count = self.numel(&red_dims);
        let statically_nonempty = matches!(count, Ex::Lit(Lit::Index(n)) if n > 0);
        let needs_element = matches!(r.op, ReduceOp::Max | ReduceOp::Min)
            || (r.op == ReduceOp::Mean && ty == Ty::I64);
        if split.is_some() && r.op == ReduceOp::Mean && ty == Ty::I64 {
            return Err(self.fail("a split integer mean (two accumulators)".into()));
        }
        if split.is_some() && r.arg {
            return Err(self.fail("a split argmax/argmin (two accumulators)".into()));
        }
        if needs_element && !statically_nonempty && split.is_none() {
            self.b.push(Stmt::If {
                cond: bin(Bin::Eq, count.clone(), int(0)),
                body: vec![Stmt::Fail(Fault::EmptyReduction)],
            });
        }
        let fold = Fold::new(self, r, ty, &count);
        let accs: Vec<Var> = fold
            .init(in_dt)
            .into_iter()
            .map(|(t, e)| self.accumulator(t, e))
            .collect();
        // A split's part: positions `base .. base + len` of the `count`, in chunks of
        // `⌈count / parts⌉` (the last parts may be short or empty).
        let (base, len) = match split {
            Some(parts) => {
                let p = parts as i64;
                let part = self.b.bind(Ty::Index, rem(Ex::Group, int(p)));
                let chunk = self
                    .b
                    .bind(Ty::Index, div(add(count.clone(), int(p - 1)), int(p)));
                let base = self.b.bind(Ty::Index, mul(part, chunk.clone()));
                let left = select(
                    bin(Bin::Lt, base.clone(), count.clone()),
                    bin(Bin::Sub, count.clone(), base.clone()),
                    int(0),
                );
                let left = self.b.bind(Ty::Index, left);
                let len = select(bin(Bin::Lt, left.clone(), chunk.clone()), left, chunk);
                (base, self.b.bind(Ty::Index, len))
            }
            None => (int(0), count.clone()),
        };
        // This item's positions: `first, first + lanes, …` below `len`.
        let mine = if lanes > 1 {
            let l = lanes as i64;
            div(
                bin(Bin::Sub, add(len.clone(), int(l - 1)), Ex::Local),
                int(l),
            )
        } else {
            len.clone()
        };
        self.counted(mine, |cx, j| {
            let pos = if lanes > 1 {
                let at = add(base.clone(), add(mul(j, int(lanes as i64)), Ex::Local));
                cx.b.bind(Ty::Index, at)
            } else {
                j
            };
            let red = cx.unravel(pos.clone(), &red_dims);
            // Coordinates in the reduced tensor: kept axes from the output's, reduced axes
            // from the position's.
            let mut kept = 0;
            let coords: Vec<Ex> = (0..r.in_space.len())
                .map(|a| {
                    if let Some(j) = r.axes.iter().position(|&x| x == a) {
                        if r.keep_dim {
                            kept += 1;
                        }
                        red[j].clone()
                    } else {
                        kept += 1;
                        out_coords[kept - 1].clone()
                    }
                })
                .collect();
            let flat = cx.ravel(&coords, r.in_space);
            let flat = cx.b.bind(Ty::Index, flat);
            let mut env = Env {
                space: r.in_space,
                flat,
                coords: Some(coords),
                core: None,
            };
            let v = cx.expr(r.prologue, &mut env)?[r.input as usize].clone();
            let cur: Vec<Ex> = accs.iter().map(|&a| Ex::Var(a)).collect();
            let elem = if r.arg { vec![v, pos] } else { vec![v] };
            let next = fold.merge(cx, cur, elem);
            for (&a, e) in accs.iter().zip(next) {
                cx.assign(a, e);
            }
            Ok(())
        })?;
        if lanes == 1 {
            let total = fold.result(accs.iter().map(|&a| Ex::Var(a)).collect());
            self.reduce_finish(r, ty, total, count, out.clone(), out_coords)?;
            return Ok(self.numel(r.out_space));
        }
        self.group = Some(lanes);
        // With shuffles, the levels below the shuffle width run in registers (item 0's
        // operands keep the tree's order: see `shuffle_levels`).
        let width = self.shuffle_width;
        let shuffled = self.shuffles
            && lanes >= width
            && accs.iter().all(|a| self.b.vars[a.0 as usize] != Ty::Bool);
        let floor = if shuffled { width } else { 1 };
        let arrays = accs.len();
        let sh = |arr: usize, i: Ex| Ex::Shared {
            arr,
            index: Box::new(i),
        };
        if lanes > floor {
            for &a in &accs {
                let arr = self.shared.len();
                self.shared.push(SharedArray {
                    ty: self.b.vars[a.0 as usize],
                    len: lanes,
                });
                self.b.push(Stmt::SharedStore {
                    arr,
                    index: Ex::Local,
                    value: Ex::Var(a),
                });
            }
            self.b.push(Stmt::Barrier);
        }
        let mut half = lanes / 2;
        while half >= floor {
            let (body, ()) = self.nested(|cx| {
                let mut a = Vec::new();
                let mut b = Vec::new();
                for i in 0..arrays {
                    let t = cx.shared[i].ty;
                    a.push(cx.b.bind(t, sh(i, Ex::Local)));
                    b.push(cx.b.bind(t, sh(i, add(Ex::Local, int(half as i64)))));
                }
                let m = fold.merge(cx, a, b);
                for (i, e) in m.into_iter().enumerate() {
                    let e = cx.b.bind(cx.shared[i].ty, e);
                    cx.b.push(Stmt::SharedStore {
                        arr: i,
                        index: Ex::Local,
                        value: e,
                    });
                }
                Ok(())
            })?;
            self.b.push(Stmt::If {
                cond: bin(Bin::Lt, Ex::Local, int(half as i64)),
                body,
            });
            // Item 0 (with shuffles, items below the width) reads back only its own
            // last write.
            if half > floor {
                self.b.push(Stmt::Barrier);
            }
            half /= 2;
        }
        let (body, ()) = self.nested(|cx| {
            let parts: Vec<Ex> = (0..arrays)
                .map(|i| {
                    if !shuffled {
                        let t = cx.shared[i].ty;
                        return cx.b.bind(t, sh(i, int(0)));
                    }
                    // This item's state after the shared levels (or its accumulator
                    // when there were none), in a variable the shuffles update.
                    let t = cx.b.vars[accs[i].0 as usize];
                    let init = if lanes > floor {
                        sh(i, Ex::Local)
                    } else {
                        Ex::Var(accs[i])
                    };
                    Ex::Var(cx.accumulator(t, init))
                })
                .collect();
            if shuffled {
                cx.shuffle_levels(&fold, &parts);
            }
            let (fin, ()) = cx.nested(|cx| {
                let total = fold.result(parts);
                if split.is_some() {
                    let slot = cx.scratch(ty, Access::Write);
                    cx.b.push(Stmt::Store {
                        buf: slot,
                        index: Ex::Group,
                        value: total,
                    });
                    return Ok(());
                }
                cx.reduce_finish(r, ty, total, count, out, out_coords)
            })?;
            if shuffled {
                cx.b.push(Stmt::If {
                    cond: bin(Bin::Eq, Ex::Local, int(0)),
                    body: fin,
                });
            } else {
                cx.b.body.extend(fin);
            }
            Ok(())
        })?;
        // Without shuffles only item 0 finishes; with them the first segment shuffles
        // (whole segments, as the statement needs) and item 0 finishes inside.
        let who = if shuffled {
            bin(Bin::Lt, Ex::Local, int(width as i64))
        } else {
            bin(Bin::Eq, Ex::Local, int(0))
        };
        self.b.push(Stmt::If { cond: who, body });
        let outputs = self.numel(r.out_space);
        Ok(match split {
            Some(parts) => mul(outputs, int(parts as i64)),
            None => outputs,
        })
    }

    /// The last levels of a work-group tree in registers: for `h = width / 2, …, 1` every
    /// item of the first segment combines its state (`states`, variables) with item
    /// `l ^ h`'s. Item 0's operands are the tree's — `s[l] ⊕ s[l + h]`, since every item
    /// its total depends on at level `h` is below `h` — so its total equals the
    /// shared-memory tree's bit for bit (the other items' may not: they are not used).
    fn shuffle_levels(&mut self, fold: &Fold, states: &[Ex]) {
        let vars: Vec<Var> = states
            .iter()
            .map(|e| match e {
                Ex::Var(v) => *v,
                _ => unreachable!("shuffled states are variables"),
            })
            .collect();
        let width = self.shuffle_width;
        let mut h = width / 2;
        while h >= 1 {
            let theirs: Vec<Ex> = vars
                .iter()
                .map(|&x| {
                    let t = self.b.vars[x.0 as usize];
                    let y = self.accumulator(t, Ex::Var(x));
                    self.b.push(Stmt::ShuffleXor {
                        var: y,
                        value: Ex::Var(x),
                        mask: h,
                        width,
                    });
                    Ex::Var(y)
                })
                .collect();
            let merged = fold.merge(self, states.to_vec(), theirs);
            // Every merged part is computed before any state changes.
            let merged: Vec<Ex> = merged
                .into_iter()
                .zip(&vars)
                .map(|(e, &x)| self.b.bind(self.b.vars[x.0 as usize], e))
                .collect();
            for (&x, e) in vars.iter().zip(merged) {
                self.assign(x, e);
            }
            h /= 2;
        }
    }

    /// The scratch slot of a split reduction (see [`super::lower_split_reduction`]).
    fn scratch(&mut self, ty: Ty, access: Access) -> usize {
        let dtype = match ty {
            Ty::F64 => DType::F64,
            Ty::I64 | Ty::Index => DType::I64,
            Ty::Bool => DType::Bool,
            Ty::F32 => DType::F32,
        };
        self.slots.push(crate::loops::KernelBuf {
            buf: self.p.buffers.len(),
            dtype,
            access,
        });
        self.slots.len() - 1
    }

    /// The second kernel of a split reduction: an item per output folding its `parts`
    /// partial states in part order, then the result, epilogue and stores as unsplit.
    pub(super) fn reduce_combine(
        &mut self,
        r: &Reduction<'_>,
        parts: u32,
    ) -> Result<Ex, LowerError> {
        let in_dt = r.prologue.nodes[r.input as usize].dtype;
        let ty = self.reduce_ty(r, in_dt)?;
        if r.arg {
            return Err(self.fail("a split argmax/argmin (two accumulators)".into()));
        }
        let red_dims: Vec<Dim> = r.axes.iter().map(|&a| r.in_space[a]).collect();
        let count = self.numel(&red_dims);
        if matches!(r.op, ReduceOp::Max | ReduceOp::Min)
            && !matches!(count, Ex::Lit(Lit::Index(n)) if n > 0)
        {
            self.b.push(Stmt::If {
                cond: bin(Bin::Eq, count.clone(), int(0)),
                body: vec![Stmt::Fail(Fault::EmptyReduction)],
            });
        }
        let out_coords = self.unravel(Ex::Item, r.out_space);
        let slot = self.scratch(ty, Access::Read);
        let acc = self.accumulator(ty, identity(r.op, ty, in_dt));
        let p = parts as i64;
        self.counted(int(p), |cx, j| {
            let at = add(mul(Ex::Item, int(p)), j);
            let part = Ex::Load {
                buf: slot,
                index: Box::new(at),
            };
            cx.assign(acc, combine(r.op, ty, Ex::Var(acc), part));
            Ok(())
        })?;
        self.reduce_finish(r, ty, Ex::Var(acc), count, Ex::Item, out_coords)?;
        Ok(self.numel(r.out_space))
    }

    /// The reduced value `total` of one output: a float mean divides, the result is rounded to
    /// the kernel's dtype, then the epilogue and the stores at output `flat`.
    fn reduce_finish(
        &mut self,
        r: &Reduction<'_>,
        ty: Ty,
        total: Ex,
        count: Ex,
        flat: Ex,
        coords: Vec<Ex>,
    ) -> Result<(), LowerError> {
        let core = match (r.op, ty) {
            // Integer means are divided by `Fold::result`.
            (ReduceOp::Mean, Ty::F32 | Ty::F64) => {
                bin(Bin::Div, total, Ex::Convert(ty, Box::new(count)))
            }
            _ => total,
        };
        let core = self.b.bind(ty, round(r.dtype, core));
        self.finish(r.epilogue, r.out_space, flat, coords, core)
    }
}

/// How one reduction folds: a single accumulator; for an integer mean a quotient and
/// a remainder by the count `n` (`Σ v = n·q + r`, `|r| < n` kept after every step, so
/// nothing overflows and the mean is exact); for argmax/argmin a value and its position.
struct Fold {
    op: ReduceOp,
    ty: Ty,
    /// The count as an i64, never zero (an empty axis has raised already), for integer
    /// means.
    n: Option<Ex>,
    /// For argmax/argmin: the count, the position of "no element yet".
    arg: Option<Ex>,
}

impl Fold {
    fn new(cx: &mut Cx<'_>, r: &Reduction<'_>, ty: Ty, count: &Ex) -> Fold {
        let op = r.op;
        let arg = r.arg.then(|| count.clone());
        let n = (op == ReduceOp::Mean && ty == Ty::I64).then(|| {
            let safe = match count {
                Ex::Lit(Lit::Index(n)) if *n > 0 => count.clone(),
                _ => select(bin(Bin::Eq, count.clone(), int(0)), int(1), count.clone()),
            };
            cx.b.bind(Ty::I64, Ex::Convert(Ty::I64, Box::new(safe)))
        });
        Fold { op, ty, n, arg }
    }

    /// The accumulators' types and initial values.
    fn init(&self, dt: DType) -> Vec<(Ty, Ex)> {
        if let Some(none) = &self.arg {
            return vec![
                (self.ty, identity(self.op, self.ty, dt)),
                (Ty::Index, none.clone()),
            ];
        }
        match self.n {
            Some(_) => vec![(Ty::I64, Ex::Lit(Lit::I64(0))); 2],
            None => vec![(self.ty, identity(self.op, self.ty, dt))],
        }
    }

    /// `a ⊕ b` of two states; `b` may be a single value (one element, remainder 0 for
    /// integer means; an element and its position for argmax/argmin).
    fn merge(&self, cx: &mut Cx<'_>, a: Vec<Ex>, b: Vec<Ex>) -> Vec<Ex> {
        if self.arg.is_some() {
            return self.merge_arg(cx, a, b);
        }
        let Some(n) = &self.n else {
            let (a, b) = (a.into_iter().next(), b.into_iter().next());
            return vec![combine(self.op, self.ty, a.unwrap(), b.unwrap())];
        };
        let (bq, br) = match b.len() {
            1 => (
                bin(Bin::Div, b[0].clone(), n.clone()),
                bin(Bin::Rem, b[0].clone(), n.clone()),
            ),
            _ => (b[0].clone(), b[1].clone()),
        };
        let r = cx.b.bind(Ty::I64, bin(Bin::Add, a[1].clone(), br));
        let q = bin(
            Bin::Add,
            bin(Bin::Add, a[0].clone(), bq),
            bin(Bin::Div, r.clone(), n.clone()),
        );
        vec![q, bin(Bin::Rem, r, n.clone())]
    }

    /// Argmax/argmin: `b`'s (value, position) when its value is better than `a`'s (a
    /// NaN beats a number, nothing beats a NaN) or the same (both NaN, or equal, `−0 =
    /// +0`) at a lower position, else `a`'s. Associative and commutative, so every tree
    /// gives the first extremum.
    fn merge_arg(&self, cx: &mut Cx<'_>, a: Vec<Ex>, b: Vec<Ex>) -> Vec<Ex> {
        let ty = self.ty;
        let av = cx.b.bind(ty, a[0].clone());
        let ai = cx.b.bind(Ty::Index, a[1].clone());
        let bv = cx.b.bind(ty, b[0].clone());
        let bi = cx.b.bind(Ty::Index, b[1].clone());
        let beats = if self.op == ReduceOp::Max {
            bin(Bin::Lt, av.clone(), bv.clone())
        } else {
            bin(Bin::Lt, bv.clone(), av.clone())
        };
        let (better, same) = if ty == Ty::I64 {
            (beats, bin(Bin::Eq, av.clone(), bv.clone()))
        } else {
            let (an, bn) = (un(Un::IsNan, av.clone()), un(Un::IsNan, bv.clone()));
            (
                bin(
                    Bin::And,
                    un(Un::Not, an.clone()),
                    bin(Bin::Or, bn.clone(), beats),
                ),
                bin(
                    Bin::Or,
                    bin(Bin::Eq, av.clone(), bv.clone()),
                    bin(Bin::And, an, bn),
                ),
            )
        };
        let earlier = bin(Bin::And, same, bin(Bin::Lt, bi.clone(), ai.clone()));
        let take = cx.b.bind(Ty::Bool, bin(Bin::Or, better, earlier));
        vec![select(take.clone(), bv, av), select(take, bi, ai)]
    }

    /// The reduced value of a final state (integer means: `q` truncated toward zero;
    /// argmax/argmin: the position, in the compute type).
    fn result(&self, s: Vec<Ex>) -> Ex {
        if self.arg.is_some() {
            return Ex::Convert(self.ty, Box::new(s[1].clone()));
        }
        if self.n.is_none() {
            return s.into_iter().next().unwrap();
        }
        let (q, r) = (s[0].clone(), s[1].clone());
        let zero = || Ex::Lit(Lit::I64(0));
        let one = || Ex::Lit(Lit::I64(1));
        select(
            bin(
                Bin::And,
                bin(Bin::Lt, zero(), q.clone()),
                bin(Bin::Lt, r.clone(), zero()),
            ),
            bin(Bin::Sub, q.clone(), one()),
            select(
                bin(
                    Bin::And,
                    bin(Bin::Lt, q.clone(), zero()),
                    bin(Bin::Lt, zero(), r),
                ),
                bin(Bin::Add, q.clone(), one()),
                q,
            ),
        )
    }
}

impl Cx<'_> {
    /// `for j in this item's columns of 0..count { f(j) }`: every column for `lanes` 1,
    /// else `Local, Local + lanes, …` (neighbouring items read neighbouring columns).
    pub(super) fn columns(
        &mut self,
        count: Ex,
        lanes: u32,
        f: impl FnOnce(&mut Self, Ex) -> Result<(), LowerError>,
    ) -> Result<(), LowerError> {
        if lanes == 1 {
            return self.counted(count, f);
        }
        let l = lanes as i64;
        let mine = div(bin(Bin::Sub, add(count, int(l - 1)), Ex::Local), int(l));
        self.counted(mine, |cx, t| {
            let j = cx.b.bind(Ty::Index, add(mul(t, int(l)), Ex::Local));
            f(cx, j)
        })
    }

    /// The combination (`⊕`, associative) of every item's `acc` over the work-group, in a
    /// fixed tree order through shared array 0, as a value every item holds (for `lanes`
    /// 1, `acc` itself). Barriers around the tree leave the array free for the next use.
    ///
    /// With shuffles ([`super::LowerOptions::shuffles`], `lanes` ≥ the width, no bools)
    /// the levels below the shuffle width run in the first segment's registers, item 0's
    /// operands in the tree's order (see `shuffle_levels`), and item 0 hands the total to
    /// the others through `sh[0]`: the same value bit for bit, with four barriers fewer.
    pub(super) fn group_total(
        &mut self,
        acc: Var,
        ty: Ty,
        lanes: u32,
        op: &dyn Fn(Ex, Ex) -> Ex,
    ) -> Ex {
        if lanes == 1 {
            return Ex::Var(acc);
        }
        let width = self.shuffle_width;
        let shuffled = self.shuffles && lanes >= width && ty != Ty::Bool;
        let floor = if shuffled { width } else { 1 };
        let sh = |i: Ex| Ex::Shared {
            arr: 0,
            index: Box::new(i),
        };
        if lanes > floor {
            self.b.push(Stmt::SharedStore {
                arr: 0,
                index: Ex::Local,
                value: Ex::Var(acc),
            });
            self.b.push(Stmt::Barrier);
        }
        let mut half = lanes / 2;
        while half >= floor {
            let mut inner = crate::loops::Builder {
                vars: std::mem::take(&mut self.b.vars),
                body: Vec::new(),
            };
            let a = inner.bind(ty, sh(Ex::Local));
            let b = inner.bind(ty, sh(add(Ex::Local, int(half as i64))));
            inner.push(Stmt::SharedStore {
                arr: 0,
                index: Ex::Local,
                value: op(a, b),
            });
            self.b.vars = inner.vars;
            self.b.push(Stmt::If {
                cond: bin(Bin::Lt, Ex::Local, int(half as i64)),
                body: inner.body,
            });
            // With shuffles the first segment reads back only its own last writes.
            if half > floor || !shuffled {
                self.b.push(Stmt::Barrier);
            }
            half /= 2;
        }
        if shuffled {
            let mut inner = crate::loops::Builder {
                vars: std::mem::take(&mut self.b.vars),
                body: Vec::new(),
            };
            let init = if lanes > floor {
                sh(Ex::Local)
            } else {
                Ex::Var(acc)
            };
            let x = inner.var(ty);
            inner.push(Stmt::Let {
                var: x,
                value: init,
            });
            let mut h = width / 2;
            while h >= 1 {
                let y = inner.var(ty);
                inner.push(Stmt::Let {
                    var: y,
                    value: Ex::Var(x),
                });
                inner.push(Stmt::ShuffleXor {
                    var: y,
                    value: Ex::Var(x),
                    mask: h,
                    width,
                });
                // Item 0's operands: its own state, then item `h`'s (the tree's order).
                inner.push(Stmt::Assign {
                    var: x,
                    value: op(Ex::Var(x), Ex::Var(y)),
                });
                h /= 2;
            }
            inner.push(Stmt::If {
                cond: bin(Bin::Eq, Ex::Local, int(0)),
                body: vec![Stmt::SharedStore {
                    arr: 0,
                    index: int(0),
                    value: Ex::Var(x),
                }],
            });
            self.b.vars = inner.vars;
            self.b.push(Stmt::If {
                cond: bin(Bin::Lt, Ex::Local, int(width as i64)),
                body: inner.body,
            });
            self.b.push(Stmt::Barrier);
        }
        let total = self.b.bind(ty, sh(int(0)));
        // Every item has read the total before the array is written again.
        self.b.push(Stmt::Barrier);
        total
    }
}
