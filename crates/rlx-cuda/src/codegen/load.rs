//! Loads as index maps: the element offset a load reads at a multi-index of the space
//! it is evaluated in, as a device function per load.
//!
//! Three forms, chosen when the source is generated:
//! - *dense*: the view is the buffer's own row-major layout (plus an offset): the
//!   offset is the flat index of the space;
//! - *strided*: `offset + Σ iᵈ·strideᵈ` (transposes, narrows, broadcasts, and reshapes
//!   of contiguous data);
//! - *chain*: the view steps walked backwards (a reshape of a transposed view has no
//!   strided form): each step maps indices of its output to indices of its input.
//!
//! For static programs the form comes from binding the view; for programs with dynamic
//! dims it must hold for every binding, so it is decided from the steps alone.

use super::KGen;
use super::meta::{MSrc, lit};
use rlx_compile::program::{ViewStep, bind_load};
use rlx_ir::{Dim, DimBinding};

/// How a load's offset is computed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Form {
    Dense,
    Strided,
    Chain,
}

pub(crate) use rlx_compile::program::chain_dims;

impl KGen<'_> {
    /// The form of kernel load `l`.
    pub(crate) fn form(&self, l: usize) -> Form {
        let load = &self.k.loads[l];
        match self.fixed {
            Some(bd) => match bind_load(&bd[load.buf], &load.steps, &DimBinding::new()) {
                Some(s) if s.is_dense() => Form::Dense,
                Some(_) => Form::Strided,
                None => Form::Chain,
            },
            None => {
                if load.steps.iter().all(|s| matches!(s, ViewStep::Reshape(_))) {
                    Form::Dense
                } else {
                    // A reshape applied after a transpose/narrow/expand may not be strided.
                    let first_other = load
                        .steps
                        .iter()
                        .position(|s| !matches!(s, ViewStep::Reshape(_)))
                        .unwrap();
                    if load.steps[first_other..]
                        .iter()
                        .any(|s| matches!(s, ViewStep::Reshape(_)))
                    {
                        Form::Chain
                    } else {
                        Form::Strided
                    }
                }
            }
        }
    }

    /// Dims of the view of kernel load `l` (the space it is evaluated in).
    pub(crate) fn view_dims(&self, l: usize) -> Vec<Dim> {
        let load = &self.k.loads[l];
        chain_dims(self.p.buffers[load.buf].shape.dims(), &load.steps)
            .pop()
            .unwrap()
    }

    /// The name of the device function giving load `l`'s element offset, emitted once:
    /// `I f(const P& p, I flat, I i0, …)` over the load's view space.
    pub(crate) fn load_fn(&mut self, l: usize) -> String {
        if let Some(n) = self.load_fns.get(&l) {
            return n.clone();
        }
        let name = format!("k{}_o{}", self.kid, l);
        let rank = self.view_dims(l).len();
        let mut params = String::from("I fl");
        for d in 0..rank {
            params.push_str(&format!(", I i{d}"));
        }
        let body = match self.form(l) {
            Form::Dense => {
                let off = if self.fixed.is_some() {
                    self.m(MSrc::LoadOff(l))
                } else {
                    "0".to_string()
                };
                format!("  return {off} + fl;\n")
            }
            Form::Strided => {
                let mut terms = vec![self.m(MSrc::LoadOff(l))];
                for d in 0..rank {
                    if let Some(bd) = self.fixed {
                        let load = &self.k.loads[l];
                        let s = bind_load(&bd[load.buf], &load.steps, &DimBinding::new())
                            .expect("strided form");
                        if s.strides[d] == 0 || s.dims[d] == 1 {
                            continue;
                        }
                        terms.push(format!("i{d} * {}", lit(s.strides[d] as i64)));
                    } else {
                        let st = self.m(MSrc::LoadStride(l, d));
                        terms.push(format!("i{d} * {st}"));
                    }
                }
                format!("  return {};\n", terms.join(" + "))
            }
            Form::Chain => self.chain_body(l),
        };
        self.funcs.push_str(&format!(
            "RLX_DEV I {name}(const P{kid}& p, {params}) {{\n  (void)p; (void)fl;\n{body}}}\n",
            kid = self.kid
        ));
        self.load_fns.insert(l, name.clone());
        name
    }

    /// Walk the view steps of load `l` backwards from the space indices to buffer indices.
    fn chain_body(&mut self, l: usize) -> String {
        let load = self.k.loads[l].clone();
        let dims = chain_dims(self.p.buffers[load.buf].shape.dims(), &load.steps);
        let mut out = String::new();
        let mut tmp = 0usize;
        let mut fresh = |out: &mut String, init: String| {
            tmp += 1;
            out.push_str(&format!("  I c{tmp} = {init};\n"));
            format!("c{tmp}")
        };
        let n = load.steps.len();
        let mut cur: Vec<String> = (0..dims[n].len()).map(|d| format!("i{d}")).collect();
        for k in (1..=n).rev() {
            let (din, dout) = (&dims[k - 1], &dims[k]);
            cur = match &load.steps[k - 1] {
                ViewStep::Reshape(_) => {
                    let f = self.ravel(&cur, dout);
                    let f = fresh(&mut out, f);
                    self.unravel(&mut out, &f, din, &mut fresh)
                }
                ViewStep::Transpose(perm) => {
                    let mut next = vec![String::new(); perm.len()];
                    for (i, &pi) in perm.iter().enumerate() {
                        next[pi] = cur[i].clone();
                    }
                    next
                }
                ViewStep::Narrow { axis, start, .. } => {
                    let mut next = cur.clone();
                    if *start != 0 {
                        next[*axis] =
                            fresh(&mut out, format!("{} + {}", cur[*axis], lit(*start as i64)));
                    }
                    next
                }
                ViewStep::Expand(_) => {
                    let off = dout.len() - din.len();
                    (0..din.len())
                        .map(|j| match din[j] {
                            Dim::Static(1) => "0".to_string(),
                            Dim::Static(_) => cur[j + off].clone(),
                            d => {
                                let dv = self.dim(d);
                                fresh(&mut out, format!("{dv} == 1 ? (I)0 : {}", cur[j + off]))
                            }
                        })
                        .collect()
                }
            };
        }
        let f = self.ravel(&cur, &dims[0]);
        out.push_str(&format!("  return {f};\n"));
        out
    }

    /// `((i0·d1 + i1)·d2 + i2)…` as C.
    pub(crate) fn ravel(&mut self, idx: &[String], dims: &[Dim]) -> String {
        if idx.is_empty() {
            return "(I)0".to_string();
        }
        let mut e = format!("(I){}", idx[0]);
        for (i, d) in idx.iter().zip(dims).skip(1) {
            if matches!(d, Dim::Static(1)) {
                continue;
            }
            let dv = self.dim(*d);
            e = format!("({e}) * {dv} + {i}");
        }
        e
    }

    /// Split flat index `f` over `dims` into fresh index variables (row-major).
    fn unravel(
        &mut self,
        out: &mut String,
        f: &str,
        dims: &[Dim],
        fresh: &mut impl FnMut(&mut String, String) -> String,
    ) -> Vec<String> {
        let r = dims.len();
        let mut idx = vec![String::new(); r];
        let mut rest = f.to_string();
        for d in (0..r).rev() {
            if d == 0 {
                idx[0] = rest.clone();
                break;
            }
            if matches!(dims[d], Dim::Static(1)) {
                idx[d] = "0".to_string();
                continue;
            }
            let dv = self.dim(dims[d]);
            idx[d] = fresh(out, format!("{rest} % {dv}"));
            rest = fresh(out, format!("{rest} / {dv}"));
        }
        idx
    }

    /// Statements splitting flat index `f` over `dims` into `{prefix}0..`; returns the names.
    pub(crate) fn unravel_stmts(
        &mut self,
        out: &mut String,
        indent: &str,
        f: &str,
        dims: &[Dim],
        prefix: &str,
    ) -> Vec<String> {
        let r = dims.len();
        let names: Vec<String> = (0..r).map(|d| format!("{prefix}{d}")).collect();
        if r == 0 {
            return names;
        }
        out.push_str(&format!("{indent}I {prefix}_r = {f};\n"));
        for d in (1..r).rev() {
            if matches!(dims[d], Dim::Static(1)) {
                out.push_str(&format!("{indent}I {} = 0;\n", names[d]));
                continue;
            }
            let dv = self.dim(dims[d]);
            out.push_str(&format!(
                "{indent}I {} = {prefix}_r % {dv}; {prefix}_r /= {dv};\n",
                names[d]
            ));
        }
        out.push_str(&format!("{indent}I {} = {prefix}_r;\n", names[0]));
        names
    }

    /// The C expression reading load `l` (in its dtype's compute type) at `idx` of its space.
    pub(crate) fn read(&mut self, l: usize, flat: &str, idx: &[String]) -> String {
        let f = self.load_fn(l);
        let buf = self.k.loads[l].buf;
        let dt = self.p.buffers[buf].shape.dtype();
        let b = self.buf(buf);
        let mut args = flat.to_string();
        for i in idx {
            args.push_str(", ");
            args.push_str(i);
        }
        format!("ld_{}({b}, {f}(p, {args}))", super::expr::dt_name(dt))
    }
}
