//! Sliding-window opaque ops over `[N, C, spatial…]`: convolution and pooling, one work
//! item per output element.
//!
//! The kernel taps are static, so the loop over them is unrolled at lowering time; each
//! tap's input position `o·stride + k·dilation − padding` is guarded per spatial axis
//! (padding reads nothing). Convolution folds, like the oracle, over the group's input
//! channels, then the taps in row-major order, from the bias (or `+0`), one fused
//! multiply-add per product in f32 (f64 for f64; the oracle folds in f64 and rounds
//! once). Pooling keeps the oracle's rules: max takes the first maximal value in window
//! order with NaN winning; mean divides the window sum by the full window size (padding
//! included); sum is the window sum.

use super::expr::round;
use super::{Cx, LowerError};
use crate::loops::build::{add, bin, float, int, mul, mul_add, select, un};
use crate::loops::{Access, Bin, Ex, Stmt, Ty, Un};
use rlx_ir::{Dim, Op, ReduceOp, Shape, box_indices};

/// Where a window's taps fall in its input, per spatial axis: outputs start `stride`
/// apart, taps lie `dil` apart, and the input is preceded by `pad` positions that read
/// nothing.
#[derive(Clone, Copy)]
struct Taps<'w> {
    stride: &'w [usize],
    pad: &'w [usize],
    dil: &'w [usize],
}

impl Cx<'_> {
    /// The input coordinates output `o` reads at tap `k` of a window placed as `taps`
    /// says over an input of spatial dims `size`, and the condition that they lie inside
    /// the input (not in the padding).
    fn tap_pos(&mut self, o: &[Ex], k: &[usize], taps: Taps<'_>, size: &[Dim]) -> (Vec<Ex>, Ex) {
        let Taps { stride, pad, dil } = taps;
        let mut pos = Vec::with_capacity(o.len());
        let mut inside = Ex::Lit(crate::loops::Lit::Bool(true));
        for a in 0..o.len() {
            // `t = o·s + k·d` stays an (unsigned) index; the position is `t − pad`.
            let t = add(
                mul(o[a].clone(), int(stride[a] as i64)),
                int((k[a] * dil[a]) as i64),
            );
            let t = self.b.bind(Ty::Index, t);
            let n = self.dim(size[a]);
            let hi = bin(Bin::Lt, t.clone(), add(n, int(pad[a] as i64)));
            let cond = if pad[a] == 0 {
                hi
            } else {
                bin(Bin::And, bin(Bin::Le, int(pad[a] as i64), t.clone()), hi)
            };
            inside = bin(Bin::And, inside, cond);
            pos.push(if pad[a] == 0 {
                t
            } else {
                bin(Bin::Sub, t, int(pad[a] as i64))
            });
        }
        (pos, inside)
    }

    /// The dims of load `l`'s view, and its buffer's dtype.
    fn window_operand(&self, l: usize) -> (Vec<Dim>, rlx_ir::DType) {
        let ld = &self.p.kernels[self.k].loads[l];
        let dims = crate::program::chain_dims(self.p.buffers[ld.buf].shape.dims(), &ld.steps)
            .pop()
            .expect("a view has dims");
        (dims, self.p.buffers[ld.buf].shape.dtype())
    }

    /// Load `l` at `coords` of its view.
    fn window_load(&mut self, l: usize, coords: &[Ex]) -> Result<Ex, LowerError> {
        let ld = self.p.kernels[self.k].loads[l].clone();
        let index = self.view_offset(&ld, coords);
        Ok(Ex::Load {
            buf: self.load_slot(l)?,
            index: Box::new(index),
        })
    }

    /// Lower a convolution or pooling `op` over loads `inputs` into `out`.
    pub(super) fn window(
        &mut self,
        op: &Op,
        inputs: &[usize],
        out: &Shape,
    ) -> Result<Ex, LowerError> {
        let dt = out.dtype();
        let ty = match Ty::of(dt) {
            Some(t) if t.is_float() => t,
            _ => return Err(self.fail(format!("{} of {dt:?} values", op.name()))),
        };
        let (xd, xdt) = self.window_operand(inputs[0]);
        if xdt != dt || xd.len() < 3 {
            return Err(self.fail(format!("{} of {xdt:?} {xd:?} into {dt:?}", op.name())));
        }
        let dims = out.dims().to_vec();
        let sp = xd.len() - 2;
        let coords = self.unravel(Ex::Item, &dims);
        let (n, c, o) = (coords[0].clone(), coords[1].clone(), &coords[2..]);
        let value = match op {
            Op::Conv {
                kernel_size,
                stride,
                padding,
                dilation,
                groups,
            } => {
                let (wd, wdt) = self.window_operand(inputs[1]);
                let (Dim::Static(cout), Dim::Static(cin_g)) = (wd[0], wd[1]) else {
                    return Err(self.fail(format!("a convolution with weights {wd:?}")));
                };
                if wdt != dt || wd.len() != sp + 2 || *groups == 0 || cout % groups != 0 {
                    return Err(self.fail(format!(
                        "a convolution of {xd:?} with {wdt:?} weights {wd:?} in {groups} groups"
                    )));
                }
                let cout_g = cout / groups;
                let acc = match inputs.get(2) {
                    Some(&lb) => {
                        let (bd, bdt) = self.window_operand(lb);
                        if bdt != dt || bd.len() != 1 {
                            return Err(self.fail(format!("a convolution bias {bdt:?} {bd:?}")));
                        }
                        let b = self.window_load(lb, std::slice::from_ref(&c))?;
                        self.accumulator(ty, b)
                    }
                    None => self.accumulator(ty, float(ty, 0.0)),
                };
                let first = mul(
                    crate::loops::build::div(c.clone(), int(cout_g as i64)),
                    int(cin_g as i64),
                );
                let first = self.b.bind(Ty::Index, first);
                let taps = Taps {
                    stride,
                    pad: padding,
                    dil: dilation,
                };
                self.counted(int(cin_g as i64), |cx, ci| {
                    let xc = cx.b.bind(Ty::Index, add(first.clone(), ci.clone()));
                    for k in box_indices(kernel_size) {
                        let (pos, inside) = cx.tap_pos(o, &k, taps, &xd[2..]);
                        let (body, ()) = cx.nested(|cx| {
                            let mut xi = vec![n.clone(), xc.clone()];
                            xi.extend(pos);
                            let x = cx.window_load(inputs[0], &xi)?;
                            let mut wi = vec![c.clone(), ci.clone()];
                            wi.extend(k.iter().map(|&t| int(t as i64)));
                            let w = cx.window_load(inputs[1], &wi)?;
                            cx.assign(acc, mul_add(ty, x, w, Ex::Var(acc)));
                            Ok(())
                        })?;
                        cx.b.push(Stmt::If { cond: inside, body });
                    }
                    Ok(())
                })?;
                Ex::Var(acc)
            }
            Op::Pool {
                kind,
                kernel_size,
                stride,
                padding,
            } => {
                let ones = vec![1; sp];
                let init = match kind {
                    ReduceOp::Max => f64::NEG_INFINITY,
                    // −0 is the exact identity of `+` (an all −0 window sums to −0, as
                    // the oracle's fold does).
                    ReduceOp::Mean | ReduceOp::Sum => -0.0,
                    other => {
                        return Err(self.fail(format!("a {other:?} pooling")));
                    }
                };
                let acc = self.accumulator(ty, float(ty, init));
                let taps = Taps {
                    stride,
                    pad: padding,
                    dil: &ones,
                };
                for k in box_indices(kernel_size) {
                    let (pos, inside) = self.tap_pos(o, &k, taps, &xd[2..]);
                    let (body, ()) = self.nested(|cx| {
                        let mut xi = vec![n.clone(), c.clone()];
                        xi.extend(pos);
                        let x = cx.window_load(inputs[0], &xi)?;
                        let x = cx.b.bind(ty, x);
                        let a = Ex::Var(acc);
                        let next = if *kind == ReduceOp::Max {
                            // The oracle's argmax: the first maximal entry, NaN winning.
                            let better = bin(
                                Bin::And,
                                un(Un::Not, un(Un::IsNan, a.clone())),
                                bin(
                                    Bin::Or,
                                    un(Un::IsNan, x.clone()),
                                    bin(Bin::Lt, a.clone(), x.clone()),
                                ),
                            );
                            select(better, x, a)
                        } else {
                            bin(Bin::Add, a, x)
                        };
                        cx.assign(acc, next);
                        Ok(())
                    })?;
                    self.b.push(Stmt::If { cond: inside, body });
                }
                if *kind == ReduceOp::Mean {
                    let size: usize = kernel_size.iter().product();
                    bin(Bin::Div, Ex::Var(acc), float(ty, size as f64))
                } else {
                    Ex::Var(acc)
                }
            }
            other => return Err(self.fail(format!("an opaque {} kernel", other.name()))),
        };
        let st = self.p.kernels[self.k].stores[0];
        let slot = self.slot(st.buf, Access::Write)?;
        self.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value: round(dt, value),
        });
        Ok(self.numel(&dims))
    }
}
