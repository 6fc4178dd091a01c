//! Index-driven opaque ops: gather and its adjoint scatter-add (one work item per output
//! element), and softmax cross-entropy with integer labels (one item per row).
//!
//! - gather: the item reads its index, resolves it like the oracle (negative counts from
//!   the end; a float index must be a whole number) and loads the table element; an
//!   index outside `-n..n` raises [`Fault::IndexOutOfRange`].
//! - scatter-add: the item for base element `(o, r, i)` starts from the base value and
//!   adds, in index order, every update whose index resolves to `r` — the oracle's
//!   order of additions for that element, with no atomics, so the result never depends
//!   on the launch. The cost is one pass over the indices per element: fine for the
//!   embedding gradients of the workloads (a few hundred indices), quadratic for a huge
//!   table scattered by as many indices. Sums in the compute type (f32 for
//!   f32/f16/bf16, rounded once to the dtype at the store; the oracle sums in f64),
//!   wrapping i64 for integers (wrapped to the dtype at the store), a logical or for
//!   bools.
//! - cross-entropy with labels: `logsumexp(row) − row[label]` with the oracle's steps
//!   (the NaN-propagating row maximum, `m + ln Σ e^{x−m}`), in the compute type; a label
//!   that is not a class index raises [`Fault::BadLabel`] (the item goes on with class
//!   0, a harmless value the backend discards with the error).

use super::expr::{ieee_max, round};
use super::{Cx, LowerError};
use crate::loops::build::{bin, float, select, un};
use crate::loops::{Access, Bin, Ex, Fault, Lit, Stmt, Ty, Un};
use rlx_ir::{DType, Dim, Shape};

impl Cx<'_> {
    /// The dims of load `l`'s view.
    fn view_dims(&self, l: usize) -> Vec<Dim> {
        let ld = &self.p.kernels[self.k].loads[l];
        crate::program::chain_dims(self.p.buffers[ld.buf].shape.dims(), &ld.steps)
            .pop()
            .expect("a view has dims")
    }

    /// Load `l` at `coords` of its view.
    fn load_at(&mut self, l: usize, coords: &[Ex]) -> Result<Ex, LowerError> {
        let ld = self.p.kernels[self.k].loads[l].clone();
        let index = self.view_offset(&ld, coords);
        Ok(Ex::Load {
            buf: self.load_slot(l)?,
            index: Box::new(index),
        })
    }

    /// The value `x` (loaded from an index or label buffer of dtype `dt`) as an i64 in
    /// `lo..n` — negative values counted from the end when `wrap` — or `fault` raised
    /// (and 0 used). Returns the resolved value as an index.
    fn checked_index(
        &mut self,
        x: Ex,
        dt: DType,
        n: Ex,
        wrap: bool,
        fault: Fault,
    ) -> Result<Ex, LowerError> {
        let nn = Ex::Convert(Ty::I64, Box::new(n));
        let (whole, v) = match Ty::of(dt) {
            Some(Ty::I64) => (Ex::Lit(Lit::Bool(true)), self.b.bind(Ty::I64, x)),
            Some(t @ (Ty::F32 | Ty::F64)) => {
                let x = self.b.bind(t, x);
                // A whole number inside the i64 range (NaN and ±∞ fail the first test).
                let whole = bin(
                    Bin::And,
                    bin(Bin::Eq, un(Un::Floor, x.clone()), x.clone()),
                    bin(Bin::Lt, un(Un::Abs, x.clone()), float(t, 2f64.powi(62))),
                );
                let whole = self.b.bind(Ty::Bool, whole);
                let safe = select(whole.clone(), x, float(t, 0.0));
                (
                    whole,
                    self.b.bind(Ty::I64, Ex::Convert(Ty::I64, Box::new(safe))),
                )
            }
            _ => return Err(self.fail(format!("indices of {dt:?} values"))),
        };
        let zero = Ex::Lit(Lit::I64(0));
        let v = if wrap {
            let neg = bin(Bin::Lt, v.clone(), zero.clone());
            self.b.bind(
                Ty::I64,
                select(neg, bin(Bin::Add, v.clone(), nn.clone()), v),
            )
        } else {
            v
        };
        let ok = bin(
            Bin::And,
            whole,
            bin(
                Bin::And,
                bin(Bin::Le, zero.clone(), v.clone()),
                bin(Bin::Lt, v.clone(), nn),
            ),
        );
        let ok = self.b.bind(Ty::Bool, ok);
        self.b.push(Stmt::If {
            cond: un(Un::Not, ok.clone()),
            body: vec![Stmt::Fail(fault)],
        });
        let safe = select(ok, v, zero);
        Ok(self
            .b
            .bind(Ty::Index, Ex::Convert(Ty::Index, Box::new(safe))))
    }

    /// Lower a gather along `axis`: `inputs` are the table and index loads.
    pub(super) fn gather(
        &mut self,
        axis: usize,
        inputs: &[usize],
        out: &Shape,
    ) -> Result<Ex, LowerError> {
        let (td, id) = (self.view_dims(inputs[0]), self.view_dims(inputs[1]));
        let dt = out.dtype();
        let tdt = self.p.buffers[self.p.kernels[self.k].loads[inputs[0]].buf]
            .shape
            .dtype();
        let idt = self.p.buffers[self.p.kernels[self.k].loads[inputs[1]].buf]
            .shape
            .dtype();
        if tdt != dt || Ty::of(dt).is_none() || axis >= td.len() {
            return Err(self.fail(format!(
                "a gather of {tdt:?} {td:?} along axis {axis} into {dt:?}"
            )));
        }
        let dims = out.dims().to_vec();
        let coords = self.unravel(Ex::Item, &dims);
        let ir = id.len();
        let n = self.dim(td[axis]);
        let raw = self.load_at(inputs[1], &coords[axis..axis + ir])?;
        let r = self.checked_index(raw, idt, n, true, Fault::IndexOutOfRange)?;
        let mut at: Vec<Ex> = coords[..axis].to_vec();
        at.push(r);
        at.extend_from_slice(&coords[axis + ir..]);
        let v = self.load_at(inputs[0], &at)?;
        let st = self.p.kernels[self.k].stores[0];
        let slot = self.slot(st.buf, Access::Write)?;
        self.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value: v,
        });
        Ok(self.numel(&dims))
    }

    /// Lower a scatter-add along `axis`: `inputs` are the base, index and update loads.
    pub(super) fn scatter_add(
        &mut self,
        axis: usize,
        inputs: &[usize],
        out: &Shape,
    ) -> Result<Ex, LowerError> {
        let bd = self.view_dims(inputs[0]);
        let id = self.view_dims(inputs[1]);
        let dt = out.dtype();
        let buf_dt =
            |cx: &Self, l: usize| cx.p.buffers[cx.p.kernels[cx.k].loads[l].buf].shape.dtype();
        let (bdt, idt, udt) = (
            buf_dt(self, inputs[0]),
            buf_dt(self, inputs[1]),
            buf_dt(self, inputs[2]),
        );
        let Some(ty) = Ty::of(dt) else {
            return Err(self.fail(format!("a scatter-add of {dt:?} values")));
        };
        if bdt != dt || udt != dt || axis >= bd.len() {
            return Err(self.fail(format!(
                "a scatter-add of {udt:?} updates into a {bdt:?} base {bd:?} along axis {axis} \
                 (cast the updates to the base dtype first)"
            )));
        }
        let dims = out.dims().to_vec();
        let coords = self.unravel(Ex::Item, &dims);
        let base = self.load_at(inputs[0], &coords)?;
        let acc = self.accumulator(ty, base);
        let n = self.dim(bd[axis]);
        let count = self.numel(&id);
        let r = coords[axis].clone();
        self.counted(count, |cx, t| {
            let ic = cx.unravel(t, &id);
            let raw = cx.load_at(inputs[1], &ic)?;
            let ri = cx.checked_index(raw, idt, n.clone(), true, Fault::IndexOutOfRange)?;
            let (body, ()) = cx.nested(|cx| {
                let mut at: Vec<Ex> = coords[..axis].to_vec();
                at.extend(ic.iter().cloned());
                at.extend_from_slice(&coords[axis + 1..]);
                let u = cx.load_at(inputs[2], &at)?;
                let op = if ty == Ty::Bool { Bin::Or } else { Bin::Add };
                let sum = bin(op, Ex::Var(acc), u);
                cx.assign(acc, sum);
                Ok(())
            })?;
            cx.b.push(Stmt::If {
                cond: bin(Bin::Eq, ri, r.clone()),
                body,
            });
            Ok(())
        })?;
        let st = self.p.kernels[self.k].stores[0];
        let slot = self.slot(st.buf, Access::Write)?;
        self.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value: round(dt, Ex::Var(acc)),
        });
        Ok(self.numel(&dims))
    }

    /// Lower softmax cross-entropy of logits `[.., C]` against labels `[..]`.
    pub(super) fn cross_entropy_labels(
        &mut self,
        inputs: &[usize],
        out: &Shape,
    ) -> Result<Ex, LowerError> {
        let (ld, yd) = (self.view_dims(inputs[0]), self.view_dims(inputs[1]));
        let dt = out.dtype();
        let xdt = self.p.buffers[self.p.kernels[self.k].loads[inputs[0]].buf]
            .shape
            .dtype();
        let ydt = self.p.buffers[self.p.kernels[self.k].loads[inputs[1]].buf]
            .shape
            .dtype();
        let ty = match Ty::of(dt) {
            Some(t) if t.is_float() && xdt == dt => t,
            _ => {
                return Err(self.fail(format!(
                    "a cross-entropy of {xdt:?} logits into {dt:?} (the lowering keeps one float dtype)"
                )));
            }
        };
        if ld.len() != yd.len() + 1 {
            return Err(self.fail(format!(
                "a cross-entropy of logits {ld:?} against labels {yd:?}"
            )));
        }
        let c = self.dim(ld[yd.len()]);
        let row = self.unravel(Ex::Item, &yd);
        let f = |v: f64| float(ty, v);
        let at = |j: Ex| {
            let mut a = row.clone();
            a.push(j);
            a
        };
        let m = self.accumulator(ty, f(f64::NEG_INFINITY));
        self.counted(c.clone(), |cx, j| {
            let x = cx.load_at(inputs[0], &at(j))?;
            cx.assign(m, ieee_max(Ex::Var(m), x, ty));
            Ok(())
        })?;
        let s = self.accumulator(ty, f(0.0));
        self.counted(c.clone(), |cx, j| {
            let x = cx.load_at(inputs[0], &at(j))?;
            let e = un(Un::Exp, bin(Bin::Sub, x, Ex::Var(m)));
            cx.assign(s, bin(Bin::Add, Ex::Var(s), e));
            Ok(())
        })?;
        let lab = self.load_at(inputs[1], &row)?;
        let j = self.checked_index(lab, ydt, c, false, Fault::BadLabel)?;
        let xl = self.load_at(inputs[0], &at(j))?;
        let lse = bin(Bin::Add, Ex::Var(m), un(Un::Log, Ex::Var(s)));
        let loss = self.b.bind(ty, round(dt, bin(Bin::Sub, lse, xl)));
        let st = self.p.kernels[self.k].stores[0];
        let slot = self.slot(st.buf, Access::Write)?;
        self.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value: loss,
        });
        Ok(self.numel(&yd))
    }
}
