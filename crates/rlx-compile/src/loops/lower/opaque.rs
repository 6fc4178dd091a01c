//! The opaque ops a GPU runs as plain loops: concat, pad and cumsum, one work item per
//! output element, operands read through their views.
//!
//! - concat: the item finds its operand by the concat axis's coordinate (one guarded load
//!   per operand; exactly one guard holds);
//! - pad: the fill value (converted to the dtype as the oracle's cast does) unless the
//!   coordinate falls inside the operand;
//! - cumsum: a serial fold of the positions up to (inclusive) or before (exclusive) the
//!   item's along the axis, in index order like the oracle — wrapping i64 for integers
//!   (exact), f32 for f32/f16/bf16 (rounded once to the dtype; the oracle folds in f64),
//!   f64 for f64.

use super::expr::round;
use super::{Cx, LowerError};
use crate::loops::build::{add, bin, float, int};
use crate::loops::{Access, Bin, Ex, Lit, Stmt, Ty};
use rlx_ir::{DType, Op, Shape};

/// `value` in `dt` as the oracle's f64 → `dt` cast gives it, as a literal of `dt`'s
/// compute type.
fn fill(value: f64, dt: DType) -> Option<Ex> {
    Some(Ex::Lit(match dt {
        DType::F32 => Lit::F32(value as f32),
        DType::F16 => Lit::F32(half::f16::from_f64(value).to_f32()),
        DType::BF16 => Lit::F32(half::bf16::from_f64(value).to_f32()),
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
    /// Lower opaque `op` (concat, pad or cumsum) over loads `inputs` into `out`; returns
    /// the number of items.
    pub(super) fn opaque(
        &mut self,
        op: &Op,
        inputs: &[usize],
        out: &Shape,
    ) -> Result<Ex, LowerError> {
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
        let coords = self.unravel(Ex::Item, &dims);
        let v = self.b.var(ty);
        let load = |cx: &mut Self, i: usize, at: &[Ex]| -> Result<Ex, LowerError> {
            let index = cx.view_offset(&loads[inputs[i]], at);
            Ok(Ex::Load {
                buf: cx.load_slot(inputs[i])?,
                index: Box::new(index),
            })
        };
        match op {
            Op::Concat { axis } => {
                let axis = *axis;
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
            }
            Op::Pad {
                axis,
                before,
                value,
                ..
            } => {
                let axis = *axis;
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
                let ax = ax as usize;
                let zero = match ty {
                    Ty::I64 => Ex::Lit(Lit::I64(0)),
                    _ => float(ty, 0.0),
                };
                self.b.push(Stmt::Let {
                    var: v,
                    value: zero,
                });
                let end = if *exclusive {
                    coords[ax].clone()
                } else {
                    add(coords[ax].clone(), int(1))
                };
                self.counted(end, |cx, j| {
                    let mut at = coords.clone();
                    at[ax] = j;
                    let x = load(cx, 0, &at)?;
                    cx.assign(v, bin(Bin::Add, Ex::Var(v), x));
                    Ok(())
                })?;
                self.assign(v, round(dt, Ex::Var(v)));
            }
            other => return Err(self.fail(format!("an opaque {} kernel", other.name()))),
        }
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

/// Whether `op` is an opaque op the loop IR lowers (besides attention).
pub(super) fn lowers(op: &Op) -> bool {
    matches!(op, Op::Concat { .. } | Op::Pad { .. } | Op::Cumsum { .. })
}
