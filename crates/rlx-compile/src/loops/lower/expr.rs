//! Expressions in scalar operations: the oracle's dtype rules (per-op rounding of
//! f16/bf16, casts), IEEE maximum/minimum, and the formula of every activation — the
//! one definition every GPU renderer takes them from.

use super::{Cx, LowerError};
use crate::loops::build::{bin, float, int, select, un};
use crate::loops::{Bin, Ex, Fault, Lit, Stmt, Ty, Un};
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
            let arg = |i: usize| v[n.args[i] as usize].clone();
            let arg_dt = |i: usize| e.nodes[n.args[i] as usize].dtype;
            let value = match &n.op {
                EOp::Load(i) => {
                    let index = self.load_index(*i, env);
                    Ex::Load {
                        buf: self.load_slot(*i)?,
                        index: Box::new(index),
                    }
                }
                EOp::Const(s) => round(dt, literal(*s, ty)),
                EOp::Unary(a) if ty == Ty::I64 => round(dt, self.int_activation(*a, arg(0))?),
                EOp::Binary(op) if ty == Ty::I64 => {
                    let r = self.int_binary(*op, arg(0), arg(1), dt)?;
                    round(dt, r)
                }
                EOp::Binary(op) if ty == Ty::Bool => self.bool_binary(*op, arg(0), arg(1))?,
                EOp::Core => match &env.core {
                    Some(c) => c.clone(),
                    None => return Err(self.fail("the kernel core outside an epilogue".into())),
                },
                EOp::Unary(a) => round(dt, activation(*a, arg(0), ty)),
                EOp::Binary(op) => round(dt, self.binary(*op, arg(0), arg(1), ty)?),
                EOp::Compare(c) => {
                    let (a, b) = (arg(0), arg(1));
                    let (ta, tb) = (Ty::of(arg_dt(0)), Ty::of(arg_dt(1)));
                    if ta == tb {
                        compare(*c, a, b)
                    } else if ta == Some(Ty::Bool)
                        || tb == Some(Ty::Bool)
                        || ta.is_none()
                        || tb.is_none()
                    {
                        return Err(self.fail(format!(
                            "a comparison of {:?} with {:?}",
                            arg_dt(0),
                            arg_dt(1)
                        )));
                    } else {
                        // Across classes (integer with float, f32 with f64): both in f64,
                        // exact for every float and for integers up to 2⁵³.
                        let f = |x: Ex| Ex::Convert(Ty::F64, Box::new(x));
                        compare(*c, f(a), f(b))
                    }
                }
                EOp::Where => select(arg(0), arg(1), arg(2)),
                EOp::Cast => self.cast(arg(0), arg_dt(0), dt)?,
                EOp::RoundToFormat {
                    exp_bits,
                    man_bits,
                    max_normal,
                } => {
                    if !matches!(Ty::of(arg_dt(0)), Some(Ty::F32 | Ty::F64)) {
                        return Err(
                            self.fail(format!("round_to_format of a {:?} value", arg_dt(0)))
                        );
                    }
                    let x = Ex::Convert(Ty::F64, Box::new(arg(0)));
                    let r = un(
                        Un::RoundFormat {
                            exp_bits: *exp_bits,
                            man_bits: *man_bits,
                            max_normal: *max_normal,
                        },
                        x,
                    );
                    from_f64(r, dt)
                        .ok_or_else(|| self.fail(format!("round_to_format to {dt:?}")))?
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
            (Some(Ty::F64), Some(Ty::F32)) => {
                from_f64(a, to).ok_or_else(|| self.fail(format!("a cast to {to:?}")))?
            }
            // NaN is true, like every nonzero value.
            (Some(t), Some(Ty::Bool)) if t.is_float() => bin(Bin::Ne, a, float(t, 0.0)),
            (Some(Ty::Bool), Some(t)) if t.is_float() => {
                round(to, select(a, float(t, 1.0), float(t, 0.0)))
            }
            (Some(Ty::I64), Some(Ty::Bool)) => bin(Bin::Ne, a, Ex::Lit(Lit::I64(0))),
            (Some(Ty::Bool), Some(Ty::I64)) => {
                select(a, Ex::Lit(Lit::I64(1)), Ex::Lit(Lit::I64(0)))
            }
            // Integers wrap to the narrower width.
            (Some(Ty::I64), Some(Ty::I64)) => round(to, a),
            // One rounding of the exact integer: f32/f64 directly from the i64, f16/bf16
            // through the integer rounded to their precision (exact in f64).
            (Some(Ty::I64), Some(t)) if matches!(to, DType::F32 | DType::F64) => {
                Ex::Convert(t, Box::new(a))
            }
            (Some(Ty::I64), Some(Ty::F32)) => {
                let prec = if to == DType::F16 { 11 } else { 8 };
                let x = un(Un::IntToF64 { prec }, a);
                from_f64(x, to).ok_or_else(|| self.fail(format!("a cast to {to:?}")))?
            }
            // Truncate toward zero, saturate to the target's range, NaN → 0 (the bounds
            // are compared in f64, where every one of them is exact).
            (Some(t), Some(Ty::I64)) if t.is_float() => {
                let x = if t == Ty::F64 {
                    a
                } else {
                    Ex::Convert(Ty::F64, Box::new(a))
                };
                let (lo, hi) = int_range(to);
                let f = |v: f64| Ex::Lit(Lit::F64(v));
                let clamped = select(
                    bin(Bin::Le, x.clone(), f(lo)),
                    f(lo),
                    select(bin(Bin::Le, f(hi), x.clone()), f(hi), x),
                );
                Ex::Convert(Ty::I64, Box::new(clamped))
            }
            _ => {
                return Err(self.fail(format!("a cast from {from:?} to {to:?}")));
            }
        })
    }

    /// An activation on integer values: only the integer-closed ones are defined.
    fn int_activation(&self, a: Activation, x: Ex) -> Result<Ex, LowerError> {
        let i = |v: i64| Ex::Lit(Lit::I64(v));
        Ok(match a {
            Activation::Neg => un(Un::Neg, x),
            Activation::Abs => select(bin(Bin::Lt, x.clone(), i(0)), un(Un::Neg, x.clone()), x),
            Activation::Relu => select(bin(Bin::Lt, x.clone(), i(0)), i(0), x),
            Activation::Sign => select(
                bin(Bin::Lt, i(0), x.clone()),
                i(1),
                select(bin(Bin::Lt, x, i(0)), i(-1), i(0)),
            ),
            Activation::Round | Activation::Floor | Activation::Ceil => x,
            other => {
                return Err(self.fail(format!("`{}` on integer values", other.name())));
            }
        })
    }

    /// A binary op on integer values of dtype `dt` (the result is wrapped by the caller).
    /// Division by zero and negative shifts raise the oracle's errors; the value computed
    /// alongside never divides by zero or shifts out of range.
    fn int_binary(&mut self, op: BinaryOp, a: Ex, b: Ex, dt: DType) -> Result<Ex, LowerError> {
        let i = |v: i64| Ex::Lit(Lit::I64(v));
        let width = (dt.size_bytes() * 8) as i64;
        let a = self.b.bind(Ty::I64, a);
        let b = self.b.bind(Ty::I64, b);
        let guard = |cx: &mut Self, cond: Ex, fault: Fault| {
            cx.b.push(Stmt::If {
                cond,
                body: vec![Stmt::Fail(fault)],
            });
        };
        Ok(match op {
            BinaryOp::Add => bin(Bin::Add, a, b),
            BinaryOp::Sub => bin(Bin::Sub, a, b),
            BinaryOp::Mul => bin(Bin::Mul, a, b),
            BinaryOp::Max => select(bin(Bin::Lt, a.clone(), b.clone()), b, a),
            BinaryOp::Min => select(bin(Bin::Lt, b.clone(), a.clone()), b, a),
            BinaryOp::BitAnd => bin(Bin::BitAnd, a, b),
            BinaryOp::BitOr => bin(Bin::BitOr, a, b),
            BinaryOp::BitXor => bin(Bin::BitXor, a, b),
            BinaryOp::Div | BinaryOp::Mod => {
                guard(
                    self,
                    bin(Bin::Eq, b.clone(), i(0)),
                    Fault::IntegerDivisionByZero,
                );
                let safe = select(bin(Bin::Eq, b.clone(), i(0)), i(1), b.clone());
                // MIN / −1 wraps to MIN (and MIN % −1 is 0) without overflowing.
                let minus_one = bin(Bin::Eq, b, i(-1));
                if op == BinaryOp::Div {
                    select(minus_one, un(Un::Neg, a.clone()), bin(Bin::Div, a, safe))
                } else {
                    select(minus_one, i(0), bin(Bin::Rem, a, safe))
                }
            }
            BinaryOp::Shl | BinaryOp::Shr => {
                guard(self, bin(Bin::Lt, b.clone(), i(0)), Fault::NegativeShift);
                let out = bin(Bin::Le, i(width), b.clone());
                let safe = select(
                    bin(Bin::Or, out.clone(), bin(Bin::Lt, b.clone(), i(0))),
                    i(0),
                    b,
                );
                if op == BinaryOp::Shl {
                    select(out, i(0), bin(Bin::Shl, a, safe))
                } else {
                    let fill = select(bin(Bin::Lt, a.clone(), i(0)), i(-1), i(0));
                    select(out, fill, bin(Bin::Shr, a, safe))
                }
            }
            BinaryOp::Pow => {
                // Square-and-multiply over the 63 bits of a non-negative exponent,
                // wrapping; a negative exponent gives the integer part of the real power.
                let acc = self.accumulator(Ty::I64, i(1));
                let base = self.accumulator(Ty::I64, a.clone());
                let e = b.clone();
                self.counted(int(63), |cx, bit| {
                    let bit = Ex::Convert(Ty::I64, Box::new(bit));
                    let set = bin(
                        Bin::Ne,
                        bin(Bin::BitAnd, bin(Bin::Shr, e.clone(), bit), i(1)),
                        i(0),
                    );
                    cx.b.push(Stmt::If {
                        cond: set,
                        body: vec![Stmt::Assign {
                            var: acc,
                            value: bin(Bin::Mul, Ex::Var(acc), Ex::Var(base)),
                        }],
                    });
                    cx.assign(base, bin(Bin::Mul, Ex::Var(base), Ex::Var(base)));
                    Ok(())
                })?;
                let odd = bin(Bin::Ne, bin(Bin::BitAnd, b.clone(), i(1)), i(0));
                let negative = select(
                    bin(Bin::Eq, a.clone(), i(1)),
                    i(1),
                    select(bin(Bin::Eq, a, i(-1)), select(odd, i(-1), i(1)), i(0)),
                );
                select(bin(Bin::Lt, b, i(0)), negative, Ex::Var(acc))
            }
            BinaryOp::Atan2 => {
                return Err(self.fail("`atan2` on integer values".into()));
            }
        })
    }

    /// A binary op on bools: `and`/`or`/`xor` are logical, `max` is or, `min` is and.
    fn bool_binary(&self, op: BinaryOp, a: Ex, b: Ex) -> Result<Ex, LowerError> {
        Ok(match op {
            BinaryOp::BitAnd | BinaryOp::Min => bin(Bin::And, a, b),
            BinaryOp::BitOr | BinaryOp::Max => bin(Bin::Or, a, b),
            BinaryOp::BitXor => bin(Bin::Ne, a, b),
            other => return Err(self.fail(format!("`{}` on bool values", other.name()))),
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

/// Re-round a value computed in f32 to the node's narrow float dtype, or wrap an
/// integer to the node's width.
pub(super) fn round(dt: DType, e: Ex) -> Ex {
    match dt {
        DType::F16 => un(Un::RoundF16, e),
        DType::BF16 => un(Un::RoundBf16, e),
        DType::I8 | DType::I16 | DType::I32 | DType::U8 | DType::U32 => un(Un::Wrap(dt), e),
        _ => e,
    }
}

/// An f64 value as a value of float dtype `dt`, rounded once (`None`: not a float dtype).
fn from_f64(x: Ex, dt: DType) -> Option<Ex> {
    Some(match dt {
        DType::F64 => x,
        DType::F32 => Ex::Convert(Ty::F32, Box::new(x)),
        // One rounding to the half grid; the result is exact in f32.
        DType::F16 | DType::BF16 => Ex::Convert(Ty::F32, Box::new(un(Un::RoundHalf(dt), x))),
        _ => return None,
    })
}

/// The value range of an integer dtype, as f64 (exact for every bound).
fn int_range(dt: DType) -> (f64, f64) {
    match dt {
        DType::I8 => (-128.0, 127.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::I32 => (-2147483648.0, 2147483647.0),
        DType::U8 => (0.0, 255.0),
        DType::U32 => (0.0, 4294967295.0),
        // i64: the conversion itself saturates.
        _ => (f64::NEG_INFINITY, f64::INFINITY),
    }
}

fn literal(s: Scalar, ty: Ty) -> Ex {
    match (s, ty) {
        (Scalar::I(v), Ty::I64) => Ex::Lit(Lit::I64(v)),
        (Scalar::F(v), Ty::I64) => Ex::Lit(Lit::I64(v as i64)),
        (Scalar::I(v), Ty::Bool) => Ex::Lit(Lit::Bool(v != 0)),
        (Scalar::F(v), Ty::Bool) => Ex::Lit(Lit::Bool(v != 0.0)),
        (Scalar::I(v), _) => float(ty, v as f64),
        (Scalar::F(v), _) => float(ty, v),
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
