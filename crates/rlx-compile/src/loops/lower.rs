//! Program kernels → loop kernels.
//!
//! Elementwise kernels are lowered today: one work item per element of the space, the
//! element's coordinates unravelled from the item index, every load's view chain walked
//! backwards to a buffer offset, and the expression spelled in scalar operations with
//! the oracle's dtype rules. Every activation's formula lives in [`activation`] — the
//! one place GPU backends take it from. What is not lowered yet (other kernel kinds,
//! integer dtypes, a few casts) is a [`LowerError::Unsupported`] naming the kernel and
//! the construct, never a guess.

use super::build::{Builder, add, bin, div, float, int, mul, rem, select, un};
use super::{Access, Bin, Ex, KernelBuf, Lit, LoopKernel, Stmt, Ty, Un};
use crate::program::{BufId, EOp, Expr, KernelKind, Load, Program, Scalar, ViewStep};
use rlx_ir::{Activation, BinaryOp, CmpOp, DType, Dim};
use std::fmt;

/// Why a kernel could not be lowered.
#[derive(Debug, Clone, PartialEq)]
pub enum LowerError {
    /// The kernel uses something the loop IR does not lower yet.
    Unsupported {
        /// Index of the kernel in the program.
        kernel: usize,
        /// Its label (`elementwise`, `matmul`, …).
        label: String,
        /// The construct.
        what: String,
    },
}

impl fmt::Display for LowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LowerError::Unsupported {
                kernel,
                label,
                what,
            } => write!(
                f,
                "loop lowering: kernel {kernel} ({label}): {what} is not lowered to the loop IR yet; \
                 the backend must run this kernel another way"
            ),
        }
    }
}

impl std::error::Error for LowerError {}

/// Lower kernel `k` of `p`.
pub fn lower_kernel(p: &Program, k: usize) -> Result<LoopKernel, LowerError> {
    let kernel = &p.kernels[k];
    let fail = |what: String| LowerError::Unsupported {
        kernel: k,
        label: kernel.label(),
        what,
    };
    let KernelKind::Elementwise { space, expr } = &kernel.kind else {
        return Err(fail(format!("a `{}` kernel", kernel.label())));
    };
    let mut cx = Cx {
        p,
        b: Builder::default(),
        slots: Vec::new(),
        dims: Vec::new(),
        fail: &fail,
    };
    let load_slots: Vec<usize> = kernel
        .loads
        .iter()
        .map(|l| cx.slot(l.buf, Access::Read))
        .collect::<Result<_, _>>()?;
    let store_slots: Vec<usize> = kernel
        .stores
        .iter()
        .map(|s| cx.slot(s.buf, Access::Write))
        .collect::<Result<_, _>>()?;

    // Coordinates of the item in the space, unravelled only if a load needs them.
    let mut coords: Option<Vec<Ex>> = None;
    let mut load_index = Vec::with_capacity(kernel.loads.len());
    for l in &kernel.loads {
        if l.steps.iter().all(|s| matches!(s, ViewStep::Reshape(_))) {
            // A dense buffer read in its own order: the offset is the item index.
            load_index.push(Ex::Item);
            continue;
        }
        if coords.is_none() {
            coords = Some(cx.unravel(Ex::Item, space));
        }
        let idx = cx.view_offset(l, coords.as_ref().expect("set above"));
        load_index.push(idx);
    }
    let values = cx.expr(expr, &load_slots, &load_index)?;
    for (s, &slot) in kernel.stores.iter().zip(&store_slots) {
        let dt = p.buffers[s.buf].shape.dtype();
        let node_dt = expr.nodes[s.value as usize].dtype;
        if dt != node_dt {
            return Err(fail(format!(
                "a store of a {node_dt:?} value into a {dt:?} buffer"
            )));
        }
        cx.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value: values[s.value as usize].clone(),
        });
    }
    let items = space.iter().fold(int(1), |acc, &d| mul(acc, cx.dim(d)));
    Ok(LoopKernel {
        name: format!("{}_k{k}", ident(&p.name)),
        bufs: cx.slots,
        dims: cx.dims,
        items,
        vars: cx.b.vars,
        body: cx.b.body,
    })
}

/// `name` as an identifier (letters, digits and `_`, not starting with a digit).
fn ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert_str(0, "p_");
    }
    s
}

struct Cx<'a, F: Fn(String) -> LowerError> {
    p: &'a Program,
    b: Builder,
    slots: Vec<KernelBuf>,
    dims: Vec<u32>,
    fail: &'a F,
}

impl<F: Fn(String) -> LowerError> Cx<'_, F> {
    fn slot(&mut self, buf: BufId, access: Access) -> Result<usize, LowerError> {
        if let Some(i) = self.slots.iter().position(|s| s.buf == buf) {
            if self.slots[i].access != access {
                return Err((self.fail)(format!(
                    "buffer {buf} both read and written by one kernel"
                )));
            }
            return Ok(i);
        }
        let dtype = self.p.buffers[buf].shape.dtype();
        self.slots.push(KernelBuf { buf, dtype, access });
        Ok(self.slots.len() - 1)
    }

    fn dim(&mut self, d: Dim) -> Ex {
        match d {
            Dim::Static(n) => int(n as i64),
            Dim::Dynamic(s) => {
                if !self.dims.contains(&s) {
                    self.dims.push(s);
                }
                Ex::Dim(s)
            }
        }
    }

    /// Row-major coordinates of flat index `f` over `dims`, each bound to a variable.
    fn unravel(&mut self, f: Ex, dims: &[Dim]) -> Vec<Ex> {
        let r = dims.len();
        let mut idx = vec![int(0); r];
        let mut rest = f;
        for d in (0..r).rev() {
            if d == 0 {
                idx[0] = rest.clone();
                break;
            }
            let n = self.dim(dims[d]);
            idx[d] = self.b.bind(Ty::I64, rem(rest.clone(), n.clone()));
            rest = self.b.bind(Ty::I64, div(rest, n));
        }
        idx
    }

    /// `((i0·d1 + i1)·d2 + i2)…`.
    fn ravel(&mut self, idx: &[Ex], dims: &[Dim]) -> Ex {
        let mut e = idx.first().cloned().unwrap_or(int(0));
        for (i, &d) in idx.iter().zip(dims).skip(1) {
            let n = self.dim(d);
            e = add(mul(e, n), i.clone());
        }
        e
    }

    /// The buffer offset load `l` reads at `coords` of its space: its view steps walked
    /// backwards, each mapping indices of its output to indices of its input.
    fn view_offset(&mut self, l: &Load, coords: &[Ex]) -> Ex {
        let dims = chain_dims(self.p.buffers[l.buf].shape.dims(), &l.steps);
        let mut cur: Vec<Ex> = coords.to_vec();
        for k in (1..=l.steps.len()).rev() {
            let (din, dout) = (&dims[k - 1], &dims[k]);
            cur = match &l.steps[k - 1] {
                ViewStep::Reshape(_) => {
                    let f = self.ravel(&cur, dout);
                    let f = self.b.bind(Ty::I64, f);
                    self.unravel(f, din)
                }
                ViewStep::Transpose(perm) => {
                    let mut next = vec![int(0); perm.len()];
                    for (i, &pi) in perm.iter().enumerate() {
                        next[pi] = cur[i].clone();
                    }
                    next
                }
                ViewStep::Narrow { axis, start, .. } => {
                    let mut next = cur.clone();
                    next[*axis] = add(cur[*axis].clone(), int(*start as i64));
                    next
                }
                ViewStep::Expand(_) => {
                    let off = dout.len() - din.len();
                    (0..din.len())
                        .map(|j| match din[j] {
                            Dim::Static(1) => int(0),
                            Dim::Static(_) => cur[j + off].clone(),
                            d => {
                                // A dynamic axis broadcasts when it is bound to 1.
                                let n = self.dim(d);
                                let one = bin(Bin::Eq, n, int(1));
                                select(one, int(0), cur[j + off].clone())
                            }
                        })
                        .collect()
                }
            };
        }
        let f = self.ravel(&cur, &dims[0]);
        self.b.bind(Ty::I64, f)
    }

    /// Every node of `e` as an expression (bound to variables); loads read `index[i]`.
    fn expr(&mut self, e: &Expr, slots: &[usize], index: &[Ex]) -> Result<Vec<Ex>, LowerError> {
        let mut v: Vec<Ex> = Vec::with_capacity(e.nodes.len());
        for n in &e.nodes {
            let dt = n.dtype;
            let Some(ty) = Ty::of(dt) else {
                return Err((self.fail)(format!("a {dt:?} value")));
            };
            if ty == Ty::I64 {
                return Err((self.fail)(format!("integer arithmetic ({dt:?})")));
            }
            let arg = |i: usize| v[n.args[i] as usize].clone();
            let arg_dt = |i: usize| e.nodes[n.args[i] as usize].dtype;
            let value = match &n.op {
                EOp::Load(i) => Ex::Load {
                    buf: slots[*i],
                    index: Box::new(index[*i].clone()),
                },
                EOp::Const(s) => round(dt, literal(*s, ty)),
                EOp::Core => return Err((self.fail)("the kernel core in an expression".into())),
                EOp::Unary(a) => round(dt, activation(*a, arg(0), ty)),
                EOp::Binary(op) => round(dt, self.binary(*op, arg(0), arg(1), ty)?),
                EOp::Compare(c) => {
                    let (a, b) = (arg(0), arg(1));
                    let (ta, tb) = (Ty::of(arg_dt(0)), Ty::of(arg_dt(1)));
                    if ta != tb || ta == Some(Ty::I64) {
                        return Err((self.fail)(format!(
                            "a comparison of {:?} with {:?}",
                            arg_dt(0),
                            arg_dt(1)
                        )));
                    }
                    compare(*c, a, b)
                }
                EOp::Where => select(arg(0), arg(1), arg(2)),
                EOp::Cast => self.cast(arg(0), arg_dt(0), dt)?,
                EOp::RoundToFormat { .. } => {
                    return Err((self.fail)("round_to_format".into()));
                }
            };
            let value = self.b.bind(ty, value);
            v.push(value);
        }
        Ok(v)
    }

    fn binary(&self, op: BinaryOp, a: Ex, b: Ex, ty: Ty) -> Result<Ex, LowerError> {
        Ok(match op {
            BinaryOp::Add => bin(Bin::Add, a, b),
            BinaryOp::Sub => bin(Bin::Sub, a, b),
            BinaryOp::Mul => bin(Bin::Mul, a, b),
            BinaryOp::Div => bin(Bin::Div, a, b),
            BinaryOp::Mod => bin(Bin::Rem, a, b),
            BinaryOp::Pow => bin(Bin::Pow, a, b),
            BinaryOp::Atan2 => bin(Bin::Atan2, a, b),
            BinaryOp::Max => ieee_max(a, b, ty),
            // min(a, b) = −max(−a, −b) keeps the NaN and signed-zero rules of max.
            BinaryOp::Min => un(Un::Neg, ieee_max(un(Un::Neg, a), un(Un::Neg, b), ty)),
            other => {
                return Err((self.fail)(format!("`{}` on floats", other.name())));
            }
        })
    }

    fn cast(&self, a: Ex, from: DType, to: DType) -> Result<Ex, LowerError> {
        let (tf, tt) = (Ty::of(from), Ty::of(to));
        Ok(match (tf, tt) {
            _ if from == to => a,
            (Some(Ty::F32), Some(Ty::F32)) => round(to, a),
            (Some(Ty::F32), Some(Ty::F64)) => Ex::Convert(Ty::F64, Box::new(a)),
            (Some(Ty::F64), Some(Ty::F32)) if to == DType::F32 => Ex::Convert(Ty::F32, Box::new(a)),
            // NaN is true, like every nonzero value.
            (Some(t), Some(Ty::Bool)) if t.is_float() => bin(Bin::Ne, a, float(t, 0.0)),
            (Some(Ty::Bool), Some(t)) if t.is_float() => {
                round(to, select(a, float(t, 1.0), float(t, 0.0)))
            }
            _ => {
                return Err((self.fail)(format!("a cast from {from:?} to {to:?}")));
            }
        })
    }
}

/// The dims after each step of `steps` applied to a buffer of `buf` dims (index 0 is
/// the buffer itself).
fn chain_dims(buf: &[Dim], steps: &[ViewStep]) -> Vec<Vec<Dim>> {
    let mut out = vec![buf.to_vec()];
    for s in steps {
        let prev = out.last().expect("starts non-empty");
        let next = match s {
            ViewStep::Reshape(d) | ViewStep::Expand(d) => d.clone(),
            ViewStep::Transpose(perm) => perm.iter().map(|&p| prev[p]).collect(),
            ViewStep::Narrow { axis, len, .. } => {
                let mut n = prev.clone();
                n[*axis] = Dim::Static(*len);
                n
            }
        };
        out.push(next);
    }
    out
}

/// Re-round a value computed in f32 to the node's narrow float dtype.
fn round(dt: DType, e: Ex) -> Ex {
    match dt {
        DType::F16 => un(Un::RoundF16, e),
        DType::BF16 => un(Un::RoundBf16, e),
        _ => e,
    }
}

fn literal(s: Scalar, ty: Ty) -> Ex {
    let v = match s {
        Scalar::F(v) => v,
        Scalar::I(v) => v as f64,
    };
    match ty {
        Ty::Bool => Ex::Lit(Lit::Bool(v != 0.0)),
        _ => float(ty, v),
    }
}

fn compare(c: CmpOp, a: Ex, b: Ex) -> Ex {
    match c {
        CmpOp::Eq => bin(Bin::Eq, a, b),
        CmpOp::Ne => bin(Bin::Ne, a, b),
        CmpOp::Lt => bin(Bin::Lt, a, b),
        CmpOp::Le => bin(Bin::Le, a, b),
        CmpOp::Gt => bin(Bin::Lt, b, a),
        CmpOp::Ge => bin(Bin::Le, b, a),
    }
}

/// IEEE maximum with the oracle's rules: NaN if either operand is NaN, `+0` over `−0`.
fn ieee_max(a: Ex, b: Ex, ty: Ty) -> Ex {
    // Equal operands (or a NaN in `a`): a zero picks `a + b` (+0 unless both are −0),
    // anything else is `a` itself (NaN stays NaN).
    let equal = select(
        bin(Bin::Eq, a.clone(), float(ty, 0.0)),
        bin(Bin::Add, a.clone(), b.clone()),
        a.clone(),
    );
    select(
        bin(Bin::Lt, b.clone(), a.clone()),
        a.clone(),
        select(
            bin(Bin::Lt, a.clone(), b.clone()),
            b.clone(),
            select(un(Un::IsNan, b.clone()), b, equal),
        ),
    )
}

/// The formula of activation `a` at `x` (compute type `ty`), with the oracle's values
/// at NaN, at the infinities and at the kinks.
pub(super) fn activation(a: Activation, x: Ex, ty: Ty) -> Ex {
    let f = |v: f64| float(ty, v);
    let neg_inf = || bin(Bin::Eq, x.clone(), f(f64::NEG_INFINITY));
    // σ(x) without overflow: e^x is only taken where x < 0.
    let sigmoid = |x: Ex| {
        let e = un(Un::Exp, x.clone());
        select(
            bin(Bin::Le, f(0.0), x.clone()),
            bin(
                Bin::Div,
                f(1.0),
                bin(Bin::Add, f(1.0), un(Un::Exp, un(Un::Neg, x))),
            ),
            bin(Bin::Div, e.clone(), bin(Bin::Add, f(1.0), e)),
        )
    };
    // ln(1 + eˣ) = max(x, 0) + ln(1 + e^−|x|).
    let softplus = |x: Ex| {
        bin(
            Bin::Add,
            select(bin(Bin::Lt, f(0.0), x.clone()), x.clone(), f(0.0)),
            un(Un::Log1p, un(Un::Exp, un(Un::Neg, un(Un::Abs, x)))),
        )
    };
    // relu6(x + 3) / 6; NaN stays NaN.
    let hard_sigmoid = |x: Ex| {
        let s = bin(Bin::Add, x, f(3.0));
        select(
            bin(Bin::Le, s.clone(), f(0.0)),
            f(0.0),
            select(
                bin(Bin::Le, f(6.0), s.clone()),
                f(1.0),
                bin(Bin::Div, s, f(6.0)),
            ),
        )
    };
    // The limit −0 at −∞ where the formula would give ∞·0.
    let minus_zero_at_neg_inf = |v: Ex| select(neg_inf(), f(-0.0), v);
    match a {
        Activation::Gelu => minus_zero_at_neg_inf(bin(
            Bin::Mul,
            bin(Bin::Mul, x.clone(), f(0.5)),
            un(
                Un::Erfc,
                bin(
                    Bin::Div,
                    un(Un::Neg, x.clone()),
                    f(std::f64::consts::SQRT_2),
                ),
            ),
        )),
        Activation::GeluApprox => {
            let x3 = bin(Bin::Mul, bin(Bin::Mul, x.clone(), x.clone()), x.clone());
            let u = bin(
                Bin::Mul,
                f((2.0 / std::f64::consts::PI).sqrt()),
                bin(Bin::Add, x.clone(), bin(Bin::Mul, f(0.044715), x3)),
            );
            minus_zero_at_neg_inf(bin(Bin::Mul, x.clone(), sigmoid(bin(Bin::Mul, f(2.0), u))))
        }
        Activation::Silu => minus_zero_at_neg_inf(bin(Bin::Mul, x.clone(), sigmoid(x.clone()))),
        Activation::Relu => select(bin(Bin::Le, x.clone(), f(0.0)), f(0.0), x),
        Activation::Sigmoid => sigmoid(x),
        Activation::Tanh => un(Un::Tanh, x),
        Activation::Exp => un(Un::Exp, x),
        Activation::Log => un(Un::Log, x),
        Activation::Sqrt => un(Un::Sqrt, x),
        Activation::Rsqrt => bin(Bin::Div, f(1.0), un(Un::Sqrt, x)),
        Activation::Neg => un(Un::Neg, x),
        Activation::Abs => un(Un::Abs, x),
        Activation::Sin => un(Un::Sin, x),
        Activation::Cos => un(Un::Cos, x),
        Activation::Tan => un(Un::Tan, x),
        Activation::Atan => un(Un::Atan, x),
        Activation::Recip => bin(Bin::Div, f(1.0), x),
        Activation::Round => un(Un::RoundEven, x),
        Activation::Floor => un(Un::Floor, x),
        Activation::Ceil => un(Un::Ceil, x),
        Activation::Sign => select(
            bin(Bin::Lt, f(0.0), x.clone()),
            f(1.0),
            select(
                bin(Bin::Lt, x.clone(), f(0.0)),
                f(-1.0),
                select(un(Un::IsNan, x.clone()), x, f(0.0)),
            ),
        ),
        Activation::Softplus => softplus(x),
        Activation::Elu => select(bin(Bin::Lt, f(0.0), x.clone()), x.clone(), un(Un::Expm1, x)),
        Activation::Erf => un(Un::Erf, x),
        Activation::HardSwish => {
            minus_zero_at_neg_inf(bin(Bin::Mul, x.clone(), hard_sigmoid(x.clone())))
        }
        Activation::HardSigmoid => hard_sigmoid(x),
        Activation::Mish => {
            minus_zero_at_neg_inf(bin(Bin::Mul, x.clone(), un(Un::Tanh, softplus(x.clone()))))
        }
        Activation::Softsign => select(
            bin(Bin::Eq, un(Un::Abs, x.clone()), f(f64::INFINITY)),
            select(bin(Bin::Lt, f(0.0), x.clone()), f(1.0), f(-1.0)),
            bin(Bin::Div, x.clone(), bin(Bin::Add, f(1.0), un(Un::Abs, x))),
        ),
        // ln σ(x) = min(x, 0) − ln(1 + e^−|x|): no overflow for any x.
        Activation::LogSigmoid => bin(
            Bin::Sub,
            select(bin(Bin::Lt, x.clone(), f(0.0)), x.clone(), f(0.0)),
            un(Un::Log1p, un(Un::Exp, un(Un::Neg, un(Un::Abs, x)))),
        ),
    }
}
