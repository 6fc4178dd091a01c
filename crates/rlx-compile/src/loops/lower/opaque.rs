//! The opaque ops a GPU runs as plain loops: concat and pad (one work item per output
//! element) and cumsum (one per line), operands read through their views.
//!
//! - concat: the item finds its operand by the concat axis's coordinate (one guarded load
//!   per operand; exactly one guard holds);
//! - pad: the fill value (converted to the dtype as the oracle's cast does) unless the
//!   coordinate falls inside the operand;
//! - cumsum: one item per line along the axis, folding it in index order like the
//!   oracle and storing every prefix — wrapping i64 for integers (exact), f32 for
//!   f32/f16/bf16 (each prefix rounded once to the dtype; the oracle folds in f64), f64
//!   for f64.

use super::expr::round;
use super::{Cx, LowerError};
use crate::loops::build::{add, bin, float, int};
use crate::loops::{Access, Bin, Ex, Lit, Stmt, Ty};
use rlx_ir::{DType, Dim, Op, Shape};

/// `value` in `dt` as the oracle's f64 → `dt` cast gives it, as a literal of `dt`'s
/// compute type.
fn fill(value: f64, dt: DType) -> Option<Ex> {
    Some(Ex::Lit(match dt {
        DType::F32 => Lit::F32(value as f32),
        DType::F16 => Lit::F32(rlx_ir::f16_from_f64(value).to_f32()),
        DType::BF16 => Lit::F32(rlx_ir::bf16_from_f64(value).to_f32()),
        DType::F64 => Lit::F64(value),
        DType::I8 => Lit::I64(value as i8 as i64),
        DType::I16 => Lit::I64(value as i16 as i64),
        DType::I32 => Lit::I64(value as i32 as i64),
        DType::I64 => Lit::I64(value as i64),
        DType::U8 => Lit::I64(value as u8 as i64),
        DType::U32 => Lit::I64(value as u32 as i64),
        DType::Bool => Lit::Bool(value != 0.0),
        _ => return None,
    }))
}

impl Cx<'_> {
    /// Lower opaque `op` (concat, pad, cumsum, or a scaled op: see `scaled.rs`) over
    /// loads `inputs` into `out`; returns the number of items.
    pub(super) fn opaque(
        &mut self,
        op: &Op,
        inputs: &[usize],
        out: &Shape,
    ) -> Result<Ex, LowerError> {
        if super::scaled::lowers(op) {
            // Codes, scales and values of different dtypes: their own lowering.
            return self.scaled(op, inputs, out);
        }
        let dt = out.dtype();
        let ty = Ty::of(dt).ok_or_else(|| self.fail(format!("{} of {dt:?}", op.name())))?;
        let loads = self.p.kernels[self.k].loads.clone();
        let mut views = Vec::with_capacity(inputs.len());
        for &l in inputs {
            let ld = &loads[l];
            let idt = self.p.buffers[ld.buf].shape.dtype();
            if idt != dt {
                return Err(self.fail(format!("{} of {idt:?} into {dt:?}", op.name())));
            }
            views.push(
                crate::program::chain_dims(self.p.buffers[ld.buf].shape.dims(), &ld.steps)
                    .pop()
                    .expect("a view has dims"),
            );
        }
        let dims = out.dims().to_vec();
        let load = |cx: &mut Self, i: usize, at: &[Ex]| -> Result<Ex, LowerError> {
            let index = cx.view_offset(&loads[inputs[i]], at);
            Ok(Ex::Load {
                buf: cx.load_slot(inputs[i])?,
                index: Box::new(index),
            })
        };
        let v = match op {
            Op::Concat { axis } => {
                let axis = *axis;
                let coords = self.unravel(Ex::Item, &dims);
                let v = self.b.var(ty);
                if axis >= dims.len() {
                    return Err(self.fail(format!("concat along axis {axis} of {dims:?}")));
                }
                let init = fill(0.0, dt).expect("a real dtype");
                self.b.push(Stmt::Let {
                    var: v,
                    value: init,
                });
                let mut lo = int(0);
                for (i, vd) in views.iter().enumerate() {
                    let len = self.dim(vd[axis]);
                    let hi = self.b.bind(Ty::Index, add(lo.clone(), len));
                    let c = coords[axis].clone();
                    let inside = bin(
                        Bin::And,
                        bin(Bin::Le, lo.clone(), c.clone()),
                        bin(Bin::Lt, c.clone(), hi.clone()),
                    );
                    let (body, ()) = self.nested(|cx| {
                        let mut at = coords.clone();
                        at[axis] = cx.b.bind(Ty::Index, bin(Bin::Sub, c, lo.clone()));
                        let x = load(cx, i, &at)?;
                        cx.assign(v, x);
                        Ok(())
                    })?;
                    self.b.push(Stmt::If { cond: inside, body });
                    lo = hi;
                }
                v
            }
            Op::Pad {
                axis,
                before,
                value,
                ..
            } => {
                let axis = *axis;
                let coords = self.unravel(Ex::Item, &dims);
                let v = self.b.var(ty);
                let init =
                    fill(*value, dt).ok_or_else(|| self.fail(format!("a pad of {dt:?} values")))?;
                self.b.push(Stmt::Let {
                    var: v,
                    value: init,
                });
                let len = self.dim(views[0][axis]);
                let lo = int(*before as i64);
                let hi = add(lo.clone(), len);
                let c = coords[axis].clone();
                let inside = bin(
                    Bin::And,
                    bin(Bin::Le, lo.clone(), c.clone()),
                    bin(Bin::Lt, c.clone(), hi),
                );
                let (body, ()) = self.nested(|cx| {
                    let mut at = coords.clone();
                    at[axis] = cx.b.bind(Ty::Index, bin(Bin::Sub, c, lo));
                    let x = load(cx, 0, &at)?;
                    cx.assign(v, x);
                    Ok(())
                })?;
                self.b.push(Stmt::If { cond: inside, body });
                v
            }
            Op::Cumsum { axis, exclusive } => {
                if ty == Ty::Bool {
                    return Err(self.fail("cumsum of bool values".to_string()));
                }
                let r = dims.len() as i32;
                let ax = if *axis < 0 { axis + r } else { *axis };
                if !(0..r).contains(&ax) {
                    return Err(self.fail(format!("cumsum along axis {axis} of {dims:?}")));
                }
                return self.cumsum(&dims, ax as usize, *exclusive, ty, inputs[0]);
            }
            other => return Err(self.fail(format!("an opaque {} kernel", other.name()))),
        };
        let st = self.p.kernels[self.k].stores[0];
        let slot = self.slot(st.buf, Access::Write)?;
        self.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value: Ex::Var(v),
        });
        Ok(self.numel(&dims))
    }
}

impl Cx<'_> {
    /// A cumsum along axis `ax` of `dims`: one item per line (every other axis), folding
    /// the line in index order and storing each prefix (before the add when
    /// `exclusive`), rounded to the dtype; the accumulator keeps the compute type.
    fn cumsum(
        &mut self,
        dims: &[Dim],
        ax: usize,
        exclusive: bool,
        ty: Ty,
        input: usize,
    ) -> Result<Ex, LowerError> {
        let ld = self.p.kernels[self.k].loads[input].clone();
        let mut lines = dims.to_vec();
        lines.remove(ax);
        let line = self.unravel(Ex::Item, &lines);
        let dt = self.p.buffers[self.p.kernels[self.k].stores[0].buf]
            .shape
            .dtype();
        let zero = match ty {
            Ty::I64 => Ex::Lit(Lit::I64(0)),
            _ => float(ty, 0.0),
        };
        let acc = self.accumulator(ty, zero);
        let st = self.p.kernels[self.k].stores[0];
        let slot = self.slot(st.buf, Access::Write)?;
        let n = self.dim(dims[ax]);
        self.counted(n, |cx, k| {
            let mut at = line.clone();
            at.insert(ax, k);
            let index = cx.view_offset(&ld, &at);
            let x = Ex::Load {
                buf: cx.load_slot(input)?,
                index: Box::new(index),
            };
            let flat = cx.ravel(&at, dims);
            let flat = cx.b.bind(Ty::Index, flat);
            let store = |cx: &mut Self| {
                cx.b.push(Stmt::Store {
                    buf: slot,
                    index: flat.clone(),
                    value: round(dt, Ex::Var(acc)),
                })
            };
            if exclusive {
                store(cx);
            }
            cx.assign(acc, bin(Bin::Add, Ex::Var(acc), x));
            if !exclusive {
                store(cx);
            }
            Ok(())
        })?;
        Ok(self.numel(&lines))
    }
}

/// Whether `op` is an opaque op the loop IR lowers through [`Cx::opaque`] (concat, pad,
/// cumsum and the scaled ops of `scaled.rs`).
pub(super) fn lowers(op: &Op) -> bool {
    matches!(op, Op::Concat { .. } | Op::Pad { .. } | Op::Cumsum { .. })
        || super::scaled::lowers(op)
}
