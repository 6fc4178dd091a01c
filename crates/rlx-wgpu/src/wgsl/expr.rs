//! Elementwise expressions to WGSL statements, with the oracle's per-node rounding.

use super::{Cls, Gen, Space, cls, ty};
use rlx_compile::program::{EOp, Expr, Scalar};
use rlx_ir::{Activation, BinaryOp, CmpOp, DType};

/// `v` rounded (f16/bf16) or wrapped (narrow integers) to `dt`.
pub(crate) fn post(g: &mut Gen<'_>, dt: DType, v: &str) -> String {
    match dt {
        DType::F16 => {
            g.need("rf16");
            format!("rf16({v})")
        }
        DType::BF16 => {
            g.need("rbf16");
            format!("rbf16({v})")
        }
        DType::I16 => format!("(({v} << 16u) >> 16u)"),
        DType::I8 => format!("(({v} << 24u) >> 24u)"),
        DType::U8 => format!("({v} & 255i)"),
        DType::Bool => format!("select(0i, 1i, {v} != 0i)"),
        _ => v.to_string(),
    }
}

/// A literal of dtype `dt` (already rounded/wrapped to it), exact in WGSL.
fn literal(s: Scalar, dt: DType) -> Result<String, String> {
    Ok(match cls(dt)? {
        Cls::F => {
            let v = match s {
                Scalar::F(v) => v,
                Scalar::I(v) => v as f32 as f64,
            };
            let v = match dt {
                DType::F16 => half::f16::from_f64(v).to_f32(),
                DType::BF16 => half::bf16::from_f64(v).to_f32(),
                _ => v as f32,
            };
            format!("bitcast<f32>({:#x}u)", v.to_bits())
        }
        Cls::I => {
            let v = match s {
                Scalar::F(v) => v as i64,
                Scalar::I(v) => v,
            };
            let w = match dt {
                DType::I8 => v as i8 as i64,
                DType::U8 => v as u8 as i64,
                DType::I16 => v as i16 as i64,
                DType::Bool => (v != 0) as i64,
                _ => v as i32 as i64,
            };
            format!("bitcast<i32>({:#x}u)", w as i32 as u32)
        }
    })
}

/// The f32 activation `a` at `x` (a variable name).
fn act_f32(g: &mut Gen<'_>, a: Activation, x: &str) -> String {
    use Activation::*;
    g.need("nan_");
    g.need("consts_");
    let ninf = format!("{x} == bitcast<f32>(NINF_)");
    let neg0 = "bitcast<f32>(0x80000000u)";
    let mut h = |n: &'static str| g.need(n);
    let e = match a {
        Gelu => {
            h("erf_");
            format!("select({x} * 0.5 * (1.0 + erf_({x} * 0.7071067811865476)), {neg0}, {ninf})")
        }
        GeluApprox => {
            h("sigm_");
            format!(
                "select({x} * sigm_(1.5957691216057308 * ({x} + 0.044715 * {x} * {x} * {x})), {neg0}, {ninf})"
            )
        }
        Silu => {
            h("sigm_");
            format!("select({x} * sigm_({x}), {neg0}, {ninf})")
        }
        Relu => format!("select(0.0, {x}, {x} > 0.0)"),
        Sigmoid => {
            h("sigm_");
            format!("sigm_({x})")
        }
        Tanh => {
            h("tanh_");
            format!("tanh_({x})")
        }
        Exp => format!("exp({x})"),
        Log => {
            h("log_");
            format!("log_({x})")
        }
        Sqrt => {
            h("sqrt_");
            format!("sqrt_({x})")
        }
        Rsqrt => {
            h("sqrt_");
            format!("(1.0 / sqrt_({x}))")
        }
        Neg => format!("(-{x})"),
        Abs => format!("abs({x})"),
        Sin => {
            h("trig_");
            format!("sin_({x})")
        }
        Cos => {
            h("trig_");
            format!("cos_({x})")
        }
        Tan => {
            h("trig_");
            format!("tan_({x})")
        }
        Atan => format!("atan({x})"),
        Recip => format!("(1.0 / {x})"),
        Round => format!("round({x})"),
        Floor => format!("floor({x})"),
        Ceil => format!("ceil({x})"),
        Sign => format!("select(select(0.0, -1.0, {x} < 0.0), 1.0, {x} > 0.0)"),
        Softplus => {
            h("softplus_");
            format!("softplus_({x})")
        }
        Elu => {
            h("expm1_");
            format!("select(expm1_({x}), {x}, {x} > 0.0)")
        }
        Erf => {
            h("erf_");
            format!("erf_({x})")
        }
        HardSwish => format!("select({x} * clamp({x} + 3.0, 0.0, 6.0) / 6.0, {neg0}, {ninf})"),
        HardSigmoid => format!("(clamp({x} + 3.0, 0.0, 6.0) / 6.0)"),
        Mish => {
            h("softplus_");
            h("tanh_");
            format!("select({x} * tanh_(softplus_({x})), {neg0}, {ninf})")
        }
        Softsign => {
            h("inf_");
            format!("select({x} / (1.0 + abs({x})), sign({x}), inf_({x}))")
        }
        LogSigmoid => {
            h("log1pexp_");
            format!("(min({x}, 0.0) - log1pexp_({x}))")
        }
    };
    format!("select({e}, {x}, nan_({x}))")
}

/// Saturating float → integer conversion (NaN → 0; bool is `x != 0`).
fn float_to_int(g: &mut Gen<'_>, to: DType, x: &str) -> String {
    g.need("nan_");
    let (lo, hi) = match to {
        DType::Bool => return format!("select(0i, 1i, {x} != 0.0 || nan_({x}))"),
        DType::I8 => (-128.0, 127.0),
        DType::U8 => (0.0, 255.0),
        DType::I16 => (-32768.0, 32767.0),
        _ => {
            return format!(
                "select(select(i32(clamp({x}, -2147483648.0, 2147483520.0)), 2147483647i, {x} >= 2147483648.0), 0i, nan_({x}))"
            );
        }
    };
    format!("select(i32(clamp({x}, {lo:.1}, {hi:.1})), 0i, nan_({x}))")
}

impl Gen<'_> {
    /// Emit `e` at the current point of `sp`; returns the variable of every node.
    /// `core` is the kernel core's value for epilogues.
    pub(crate) fn expr(
        &mut self,
        e: &Expr,
        sp: &mut Space,
        core: Option<&str>,
    ) -> Result<Vec<String>, String> {
        let mut vars: Vec<String> = Vec::with_capacity(e.nodes.len());
        for n in &e.nodes {
            let dt = n.dtype;
            let c = cls(dt)?;
            let arg = |k: usize| vars[n.args[k] as usize].clone();
            let adt = |k: usize| e.nodes[n.args[k] as usize].dtype;
            let v = match &n.op {
                EOp::Load(l) => {
                    let buf = self.k.loads[*l].buf;
                    if self.p.buffers[buf].shape.dtype() != dt {
                        return Err(format!(
                            "load of a {} buffer as {dt}",
                            self.p.buffers[buf].shape.dtype()
                        ));
                    }
                    let el = self.load_elem(*l, sp)?;
                    self.read(buf, &el)?
                }
                EOp::Const(s) => literal(*s, dt)?,
                EOp::Core => core.ok_or("epilogue without a core value")?.to_string(),
                EOp::Unary(a) => {
                    let x = arg(0);
                    match c {
                        Cls::F => {
                            let r = act_f32(self, *a, &x);
                            post(self, dt, &r)
                        }
                        Cls::I => {
                            let r = match a {
                                Activation::Neg => format!("(0i - {x})"),
                                Activation::Abs => format!("abs({x})"),
                                Activation::Relu => format!("max({x}, 0i)"),
                                Activation::Sign => format!("sign({x})"),
                                Activation::Round | Activation::Floor | Activation::Ceil => {
                                    x.clone()
                                }
                                other => {
                                    return Err(format!(
                                        "{} of integers is an error the CPU reports",
                                        other.name()
                                    ));
                                }
                            };
                            post(self, dt, &r)
                        }
                    }
                }
                EOp::Binary(b) => {
                    let (x, y) = (arg(0), arg(1));
                    if cls(adt(0))? != c || cls(adt(1))? != c {
                        return Err(format!("{} with mixed operand classes", b.name()));
                    }
                    let r = match (c, b) {
                        (Cls::F, BinaryOp::Add) => format!("({x} + {y})"),
                        (Cls::F, BinaryOp::Sub) => format!("({x} - {y})"),
                        (Cls::F, BinaryOp::Mul) => format!("({x} * {y})"),
                        (Cls::F, BinaryOp::Div) => format!("({x} / {y})"),
                        (Cls::F, BinaryOp::Max) => {
                            self.need("fmax_");
                            format!("fmax_({x}, {y})")
                        }
                        (Cls::F, BinaryOp::Min) => {
                            self.need("fmin_");
                            format!("fmin_({x}, {y})")
                        }
                        (Cls::F, BinaryOp::Pow) => {
                            self.need("pow_");
                            format!("pow_({x}, {y})")
                        }
                        (Cls::F, BinaryOp::Mod) => {
                            self.need("fmod_");
                            format!("fmod_({x}, {y})")
                        }
                        (Cls::F, BinaryOp::Atan2) => {
                            self.need("atan2_");
                            format!("atan2_({x}, {y})")
                        }
                        (Cls::I, BinaryOp::Add) => format!("({x} + {y})"),
                        (Cls::I, BinaryOp::Sub) => format!("({x} - {y})"),
                        (Cls::I, BinaryOp::Mul) => format!("({x} * {y})"),
                        (Cls::I, BinaryOp::Max) if dt == DType::Bool => format!("({x} | {y})"),
                        (Cls::I, BinaryOp::Min) if dt == DType::Bool => format!("({x} & {y})"),
                        (Cls::I, BinaryOp::Max) => format!("max({x}, {y})"),
                        (Cls::I, BinaryOp::Min) => format!("min({x}, {y})"),
                        (Cls::I, BinaryOp::BitAnd) => format!("({x} & {y})"),
                        (Cls::I, BinaryOp::BitOr) => format!("({x} | {y})"),
                        (Cls::I, BinaryOp::BitXor) => format!("({x} ^ {y})"),
                        (_, b) => {
                            return Err(format!(
                                "{} on {dt} runs on the CPU (its error cases are reported there)",
                                b.name()
                            ));
                        }
                    };
                    post(self, dt, &r)
                }
                EOp::Compare(cmp) => {
                    let (x, y) = (arg(0), arg(1));
                    let (ca, cb) = (cls(adt(0))?, cls(adt(1))?);
                    if ca != cb {
                        return Err(format!(
                            "comparing {} with {} needs exact f64 values",
                            adt(0),
                            adt(1)
                        ));
                    }
                    let op = match cmp {
                        CmpOp::Eq => "==",
                        CmpOp::Ne => "!=",
                        CmpOp::Lt => "<",
                        CmpOp::Le => "<=",
                        CmpOp::Gt => ">",
                        CmpOp::Ge => ">=",
                    };
                    let cond = if ca == Cls::F {
                        self.need("nan_");
                        if *cmp == CmpOp::Ne {
                            format!("(nan_({x}) || nan_({y}) || {x} != {y})")
                        } else {
                            format!("(!nan_({x}) && !nan_({y}) && {x} {op} {y})")
                        }
                    } else {
                        format!("({x} {op} {y})")
                    };
                    format!("select(0i, 1i, {cond})")
                }
                EOp::Where => {
                    let (m, t, f) = (arg(0), arg(1), arg(2));
                    if cls(adt(0))? != Cls::I || cls(adt(1))? != c || cls(adt(2))? != c {
                        return Err("where with mixed operand classes".into());
                    }
                    format!("select({f}, {t}, {m} != 0i)")
                }
                EOp::Cast => {
                    let x = arg(0);
                    let from = adt(0);
                    match (cls(from)?, c) {
                        (Cls::F, Cls::F) => post(self, dt, &x),
                        (Cls::F, Cls::I) => float_to_int(self, dt, &x),
                        (Cls::I, Cls::F) => post(self, dt, &format!("f32({x})")),
                        (Cls::I, Cls::I) => post(self, dt, &x),
                    }
                }
                EOp::RoundToFormat { .. } => {
                    return Err("round_to_format runs on the CPU".into());
                }
            };
            let name = self.fresh("v");
            self.line(&format!("let {name}: {} = {v};", ty(c)));
            vars.push(name);
        }
        Ok(vars)
    }
}
