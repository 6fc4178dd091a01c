//! One lowering per kernel kind; each returns the kernel's work-item count.

use super::Cx;
use super::expr::{Env, ieee_max, round};
use super::reduce::{Reduction, row_lanes};
use crate::loops::build::{add, bin, float, mul, un};
use crate::loops::{Access, Bin, Ex, Stmt, Ty, Un};
use crate::program::{Expr, KernelKind, RowOp};
use rlx_ir::{DType, Dim};

impl Cx<'_> {
    /// Lower the kernel's body; returns the number of work items.
    pub(super) fn kind(&mut self) -> Result<Ex, super::LowerError> {
        let kernel = &self.p.kernels[self.k];
        match &kernel.kind {
            KernelKind::Elementwise { space, expr } => {
                let mut env = Env {
                    space,
                    flat: Ex::Item,
                    coords: None,
                    core: None,
                };
                let values = self.expr(expr, &mut env)?;
                self.stores(expr, &values, Ex::Item)?;
                Ok(self.numel(space))
            }
            KernelKind::Reduce {
                op,
                arg,
                in_space,
                axes,
                keep_dim,
                prologue,
                input,
                out_space,
                dtype,
                epilogue,
            } => {
                let r = Reduction {
                    op: *op,
                    arg: *arg,
                    in_space,
                    axes,
                    keep_dim: *keep_dim,
                    prologue,
                    input: *input,
                    out_space,
                    dtype: *dtype,
                    epilogue,
                };
                self.reduce(&r, None)
            }
            KernelKind::Row {
                op,
                space,
                prologue,
                input,
                params,
                dtype,
                epilogue,
            } => self.row(&RowKernel {
                op: *op,
                space,
                prologue,
                input: *input,
                params: *params,
                dtype: *dtype,
                epilogue,
            }),
            KernelKind::Contraction {
                a,
                b,
                out_space,
                dtype,
                epilogue,
            } => self.contraction(*a, *b, out_space, *dtype, epilogue),
            KernelKind::Attention {
                op,
                inputs,
                out_space,
                dtype,
                epilogue,
            } => self.attention(op, inputs, out_space, *dtype, Some(epilogue)),
            KernelKind::Opaque {
                op: op @ rlx_ir::Op::Attention { .. },
                inputs,
                out,
            } => self.attention(op, inputs, out.dims(), out.dtype(), None),
            KernelKind::Opaque {
                op: rlx_ir::Op::Gather { axis },
                inputs,
                out,
            } => self.gather(*axis, inputs, out),
            KernelKind::Opaque {
                op: rlx_ir::Op::ScatterAdd { axis },
                inputs,
                out,
            } => self.scatter_add(*axis, inputs, out),
            KernelKind::Opaque {
                op: rlx_ir::Op::SoftmaxCrossEntropyWithLogits,
                inputs,
                out,
            } => self.cross_entropy_labels(inputs, out),
            KernelKind::Opaque {
                op: op @ (rlx_ir::Op::Conv { .. } | rlx_ir::Op::Pool { .. }),
                inputs,
                out,
            } => self.window(op, inputs, out),
            KernelKind::Opaque { op, inputs, out } if super::opaque::lowers(op) => {
                self.opaque(op, inputs, out)
            }
            KernelKind::Opaque { .. } | KernelKind::RowGroup { .. } => {
                Err(self.fail(format!("a `{}` kernel", kernel.label())))
            }
        }
    }

    /// Write every store of the kernel (values of `expr`) at `index`.
    fn stores(&mut self, expr: &Expr, values: &[Ex], index: Ex) -> Result<(), super::LowerError> {
        let stores = self.p.kernels[self.k].stores.clone();
        for s in stores {
            let slot = self.slot(s.buf, Access::Write)?;
            let dt = self.p.buffers[s.buf].shape.dtype();
            let node_dt = expr.nodes[s.value as usize].dtype;
            if dt != node_dt {
                return Err(self.fail(format!(
                    "a store of a {node_dt:?} value into a {dt:?} buffer"
                )));
            }
            self.b.push(Stmt::Store {
                buf: slot,
                index: index.clone(),
                value: values[s.value as usize].clone(),
            });
        }
        Ok(())
    }

    /// The float compute type of a core's values, or an error naming what is not lowered.
    fn float_ty(&self, dt: DType, what: &str) -> Result<Ty, super::LowerError> {
        match Ty::of(dt) {
            Some(t) if t.is_float() => Ok(t),
            _ => Err(self.fail(format!("{what} over {dt:?} values"))),
        }
    }

    /// The epilogue at a point of `space` (flat index `flat`, coordinates `coords`) with
    /// the core's value `core` (already in the core dtype), then the stores at `flat`.
    pub(super) fn finish(
        &mut self,
        epilogue: &Expr,
        space: &[Dim],
        flat: Ex,
        coords: Vec<Ex>,
        core: Ex,
    ) -> Result<(), super::LowerError> {
        let mut env = Env {
            space,
            flat: flat.clone(),
            coords: Some(coords),
            core: Some(core),
        };
        let values = self.expr(epilogue, &mut env)?;
        self.stores(epilogue, &values, flat)
    }

    /// The epilogue at flat point `flat` of `space` with core value `core`, then the
    /// stores (coordinates unravelled from `flat` on first need).
    pub(super) fn epilogue_fragment(
        &mut self,
        epilogue: &Expr,
        space: &[Dim],
        flat: Ex,
        core: Ex,
    ) -> Result<(), super::LowerError> {
        let mut env = Env {
            space,
            flat: flat.clone(),
            coords: None,
            core: Some(core),
        };
        let values = self.expr(epilogue, &mut env)?;
        self.stores(epilogue, &values, flat)
    }

    /// Passes over each row, re-evaluating the prologue in each: one item per row for
    /// short rows, else one work-group per row whose items take strided columns and
    /// combine each statistic in a fixed tree ([`Cx::group_total`]).
    fn row(&mut self, rk: &RowKernel<'_>) -> Result<Ex, super::LowerError> {
        let RowKernel {
            op,
            space,
            prologue,
            input,
            params,
            dtype,
            epilogue,
        } = *rk;
        let in_dt = prologue.nodes[input as usize].dtype;
        let ty = self.float_ty(in_dt, op.name())?;
        let r = space.len();
        let lanes = row_lanes(space[r - 1]);
        let row = if lanes > 1 { Ex::Group } else { Ex::Item };
        if lanes > 1 {
            self.group = Some(lanes);
            self.shared
                .push(crate::loops::SharedArray { ty, len: lanes });
        }
        let c = self.dim(space[r - 1]);
        let row_coords = self.unravel(row.clone(), &space[..r - 1]);
        let f = |v: f64| float(ty, v);
        // The prologue's value at column `j` of this row, with its point.
        let value = |cx: &mut Self, j: &Ex| -> Result<(Ex, Ex, Vec<Ex>), super::LowerError> {
            let flat =
                cx.b.bind(Ty::Index, add(mul(row.clone(), c.clone()), j.clone()));
            let mut coords = row_coords.clone();
            coords.push(j.clone());
            let mut env = Env {
                space,
                flat: flat.clone(),
                coords: Some(coords.clone()),
                core: None,
            };
            let x = cx.expr(prologue, &mut env)?[input as usize].clone();
            Ok((x, flat, coords))
        };
        let cf = self.b.bind(ty, Ex::Convert(ty, Box::new(c.clone())));
        match op {
            RowOp::Softmax | RowOp::LogSoftmax => {
                // A NaN or +∞ anywhere, or a row of only −∞, gives a NaN row through
                // these formulas, as in the oracle.
                let m = self.accumulator(ty, f(f64::NEG_INFINITY));
                self.columns(c.clone(), lanes, |cx, j| {
                    let (x, _, _) = value(cx, &j)?;
                    cx.assign(m, ieee_max(Ex::Var(m), x, ty));
                    Ok(())
                })?;
                let m = self.group_total(m, ty, lanes, &|a, b| ieee_max(a, b, ty));
                let s = self.accumulator(ty, f(0.0));
                self.columns(c.clone(), lanes, |cx, j| {
                    let (x, _, _) = value(cx, &j)?;
                    let e = un(Un::Exp, bin(Bin::Sub, x, m.clone()));
                    cx.assign(s, bin(Bin::Add, Ex::Var(s), e));
                    Ok(())
                })?;
                let s = self.group_total(s, ty, lanes, &|a, b| bin(Bin::Add, a, b));
                self.columns(c.clone(), lanes, |cx, j| {
                    let (x, flat, coords) = value(cx, &j)?;
                    let shifted = bin(Bin::Sub, x, m.clone());
                    let y = if op == RowOp::Softmax {
                        bin(Bin::Div, un(Un::Exp, shifted), s.clone())
                    } else {
                        bin(Bin::Sub, shifted, un(Un::Log, s.clone()))
                    };
                    let core = cx.b.bind(ty, round(dtype, y));
                    cx.finish(epilogue, space, flat, coords, core)
                })?;
            }
            RowOp::LayerNorm { eps } | RowOp::RmsNorm { eps } => {
                let rms = matches!(op, RowOp::RmsNorm { .. });
                let Some((gl, bl)) = params else {
                    return Err(self.fail(format!("{} without γ/β loads", op.name())));
                };
                let mean = if rms {
                    f(0.0)
                } else {
                    let s1 = self.accumulator(ty, f(0.0));
                    self.columns(c.clone(), lanes, |cx, j| {
                        let (x, _, _) = value(cx, &j)?;
                        cx.assign(s1, bin(Bin::Add, Ex::Var(s1), x));
                        Ok(())
                    })?;
                    let s1 = self.group_total(s1, ty, lanes, &|a, b| bin(Bin::Add, a, b));
                    self.b.bind(ty, bin(Bin::Div, s1, cf.clone()))
                };
                let s2 = self.accumulator(ty, f(0.0));
                self.columns(c.clone(), lanes, |cx, j| {
                    let (x, _, _) = value(cx, &j)?;
                    let d = cx.b.bind(ty, bin(Bin::Sub, x, mean.clone()));
                    cx.assign(s2, bin(Bin::Add, Ex::Var(s2), bin(Bin::Mul, d.clone(), d)));
                    Ok(())
                })?;
                let s2 = self.group_total(s2, ty, lanes, &|a, b| bin(Bin::Add, a, b));
                let var = bin(Bin::Div, s2, cf.clone());
                let inv = self.b.bind(
                    ty,
                    bin(
                        Bin::Div,
                        f(1.0),
                        un(Un::Sqrt, bin(Bin::Add, var, f(eps as f64))),
                    ),
                );
                self.columns(c.clone(), lanes, |cx, j| {
                    let (x, flat, coords) = value(cx, &j)?;
                    let gamma = cx.param(gl, &j, ty)?;
                    let beta = cx.param(bl, &j, ty)?;
                    let y = bin(
                        Bin::Add,
                        bin(
                            Bin::Mul,
                            bin(Bin::Mul, bin(Bin::Sub, x, mean.clone()), inv.clone()),
                            gamma,
                        ),
                        beta,
                    );
                    let core = cx.b.bind(ty, round(dtype, y));
                    cx.finish(epilogue, space, flat, coords, core)
                })?;
            }
        }
        Ok(self.numel(&space[..r - 1]))
    }

    /// Load `l` (a norm's γ or β over `[C]`) at column `j`, in compute type `ty`.
    fn param(&mut self, l: usize, j: &Ex, ty: Ty) -> Result<Ex, super::LowerError> {
        let load = self.p.kernels[self.k].loads[l].clone();
        let dt = self.p.buffers[load.buf].shape.dtype();
        if Ty::of(dt) != Some(ty) {
            return Err(self.fail(format!("a {dt:?} γ/β with {ty:?} rows")));
        }
        let index = self.view_offset(&load, std::slice::from_ref(j));
        Ok(Ex::Load {
            buf: self.load_slot(l)?,
            index: Box::new(index),
        })
    }
}

/// The fields of a `Row` kernel.
#[derive(Clone, Copy)]
struct RowKernel<'a> {
    op: RowOp,
    space: &'a [Dim],
    prologue: &'a Expr,
    input: u32,
    params: Option<(usize, usize)>,
    dtype: DType,
    epilogue: &'a Expr,
}
