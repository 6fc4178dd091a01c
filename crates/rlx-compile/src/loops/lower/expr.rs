//! Expressions in scalar operations: the oracle's dtype rules (per-op rounding of
//! f16/bf16, casts), IEEE maximum/minimum, and the formula of every activation — the
//! one definition every GPU renderer takes them from.

use super::{Cx, LowerError};
use crate::loops::build::{bin, float, select, un};
use crate::loops::{Bin, Ex, Lit, Ty, Un};
use crate::program::{EOp, Expr, Scalar, ViewStep};
use rlx_ir::{Activation, BinaryOp, CmpOp, DType, Dim};

/// Where an expression is evaluated: a point of `space`, given by its flat row-major
/// index (and its coordinates, unravelled on first need), plus the kernel core's value
/// in epilogues.
pub(super) struct Env<'s> {
    pub space: &'s [Dim],
    pub flat: Ex,
    pub coords: Option<Vec<Ex>>,
    pub core: Option<Ex>,
}

impl Cx<'_> {
    /// Every node of `e` as an expression (bound to variables), evaluated at the point
    /// of `env`'s space that `env` describes.
    pub(super) fn expr(&mut self, e: &Expr, env: &mut Env<'_>) -> Result<Vec<Ex>, LowerError> {
        let mut v: Vec<Ex> = Vec::with_capacity(e.nodes.len());
        for n in &e.nodes {
            let dt = n.dtype;
            let Some(ty) = Ty::of(dt) else {
                return Err(self.fail(format!("a {dt:?} value")));
            };
            if ty == Ty::I64 {
                return Err(self.fail(format!("integer arithmetic ({dt:?})")));
            }
            let arg = |i: usize| v[n.args[i] as usize].clone();
            let arg_dt = |i: usize| e.nodes[n.args[i] as usize].dtype;
            let value = match &n.op {
                EOp::Load(i) => {
                    let index = self.load_index(*i, env);
                    Ex::Load {
                        buf: self.load_slots[*i],
                        index: Box::new(index),
                    }
                }
                EOp::Const(s) => round(dt, literal(*s, ty)),
                EOp::Core => match &env.core {
                    Some(c) => c.clone(),
                    None => return Err(self.fail("the kernel core outside an epilogue".into())),
                },
                EOp::Unary(a) => round(dt, activation(*a, arg(0), ty)),
                EOp::Binary(op) => round(dt, self.binary(*op, arg(0), arg(1), ty)?),
                EOp::Compare(c) => {
                    let (a, b) = (arg(0), arg(1));
                    let (ta, tb) = (Ty::of(arg_dt(0)), Ty::of(arg_dt(1)));
                    if ta != tb || ta == Some(Ty::I64) {
                        return Err(self.fail(format!(
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
                    return Err(self.fail("round_to_format".into()));
                }
            };
            let value = self.b.bind(ty, value);
            v.push(value);
        }
        Ok(v)
    }

    pub(super) fn binary(&self, op: BinaryOp, a: Ex, b: Ex, ty: Ty) -> Result<Ex, LowerError> {
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
                return Err(self.fail(format!("`{}` on floats", other.name())));
            }
        })
    }

    pub(super) fn cast(&self, a: Ex, from: DType, to: DType) -> Result<Ex, LowerError> {
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
                return Err(self.fail(format!("a cast from {from:?} to {to:?}")));
            }
        })
    }

    /// The buffer offset kernel load `l` reads at `env`'s point: the flat index for a
    /// dense read in the space's own order, else the view chain walked backwards.
    fn load_index(&mut self, l: usize, env: &mut Env<'_>) -> Ex {
        let load = &self.p.kernels[self.k].loads[l];
        if load.steps.iter().all(|s| matches!(s, ViewStep::Reshape(_))) {
            return env.flat.clone();
        }
        if env.coords.is_none() {
            env.coords = Some(self.unravel(env.flat.clone(), env.space));
        }
        let load = load.clone();
        self.view_offset(&load, env.coords.as_ref().expect("set above"))
    }
}

/// Re-round a value computed in f32 to the node's narrow float dtype.
pub(super) fn round(dt: DType, e: Ex) -> Ex {
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
pub(super) fn ieee_max(a: Ex, b: Ex, ty: Ty) -> Ex {
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
