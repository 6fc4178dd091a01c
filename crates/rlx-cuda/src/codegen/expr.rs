//! Expressions as C statements, one SSA variable per node, with the oracle's dtype
//! rules: f32/f16/bf16 compute in `float` (f16/bf16 results rounded after every op),
//! f64 in `double`, integers and bool in wrapping `i64` (wrapped to their width after
//! every op).

use super::KGen;
use rlx_compile::program::{EOp, Expr, Scalar, compute_class};
use rlx_ir::{Activation, BinaryOp, CmpOp, DType};

/// The prelude's name of a dtype (`ld_f16`, `st_bool`).
pub(crate) fn dt_name(dt: DType) -> &'static str {
    match dt {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F64 => "f64",
        DType::I8 => "i8",
        DType::I16 => "i16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::U8 => "u8",
        DType::U32 => "u32",
        DType::Bool => "bool",
        DType::C64 | DType::C128 => "complex",
    }
}

/// The C type values of `dt` are computed in.
pub(crate) fn ctype(dt: DType) -> &'static str {
    match compute_class(dt) {
        Some(DType::F32) => "float",
        Some(DType::F64) => "double",
        _ => "i64",
    }
}

/// `Some(F32 | F64 | I64)`: the compute class.
fn class(dt: DType) -> DType {
    compute_class(dt).expect("complex values are not computed by generated kernels")
}

/// A C literal for `s` as a value of `dt` (rounded like the CPU executor's literals).
pub(crate) fn literal(s: Scalar, dt: DType) -> String {
    match (s, class(dt)) {
        (Scalar::F(v), DType::F32) => {
            let f = v as f32;
            let f = match dt {
                DType::F16 => half::f16::from_f32(f).to_f32(),
                DType::BF16 => half::bf16::from_f32(f).to_f32(),
                _ => f,
            };
            format!("f32_of(0x{:08x}u)", f.to_bits())
        }
        (Scalar::I(v), DType::F32) => format!("f32_of(0x{:08x}u)", (v as f32).to_bits()),
        (Scalar::F(v), DType::F64) => format!("f64_of(0x{:016x}ull)", v.to_bits()),
        (Scalar::I(v), DType::F64) => format!("f64_of(0x{:016x}ull)", (v as f64).to_bits()),
        (Scalar::F(v), _) => int_lit(v as i64),
        (Scalar::I(v), _) => int_lit(v),
    }
}

fn int_lit(v: i64) -> String {
    if v == i64::MIN {
        "(-9223372036854775807ll - 1)".into()
    } else {
        format!("{v}ll")
    }
}

/// Statement rounding/wrapping variable `v` (fresh result of an op) to `dt`.
fn post(dt: DType, v: &str) -> String {
    match dt {
        DType::F16 => format!(" {v} = rnd_h({v});"),
        DType::BF16 => format!(" {v} = rnd_bf({v});"),
        DType::I8 => format!(" {v} = (i64)(i8){v};"),
        DType::I16 => format!(" {v} = (i64)(i16){v};"),
        DType::I32 => format!(" {v} = (i64)(i32){v};"),
        DType::U8 => format!(" {v} = (i64)(u8){v};"),
        DType::U32 => format!(" {v} = (i64)(u32){v};"),
        DType::Bool => format!(" {v} = {v} != 0;"),
        _ => String::new(),
    }
}

/// `(lo, hi)` saturation bounds of a float → integer conversion into `to`.
fn int_bounds(to: DType) -> (&'static str, &'static str, &'static str, &'static str) {
    match to {
        DType::I8 => ("-128.0", "127.0", "-128ll", "127ll"),
        DType::I16 => ("-32768.0", "32767.0", "-32768ll", "32767ll"),
        DType::I32 => (
            "-2147483648.0",
            "2147483647.0",
            "-2147483648ll",
            "2147483647ll",
        ),
        DType::U8 => ("0.0", "255.0", "0ll", "255ll"),
        DType::U32 => ("0.0", "4294967295.0", "0ll", "4294967295ll"),
        _ => (
            "-9223372036854775808.0",
            "9223372036854775807.0",
            "(-9223372036854775807ll - 1)",
            "9223372036854775807ll",
        ),
    }
}

/// C expression converting `a` (a value of `from`) to `to` with the oracle's `Cast` rules.
pub(crate) fn cast(a: &str, from: DType, to: DType) -> String {
    if from == to {
        return a.to_string();
    }
    match (class(from), class(to)) {
        (DType::F32, DType::F32) => match to {
            DType::F16 => format!("rnd_h({a})"),
            DType::BF16 => format!("rnd_bf({a})"),
            _ => a.to_string(),
        },
        (DType::F32, DType::F64) => format!("(double)({a})"),
        (DType::F64, DType::F32) => match to {
            DType::F16 => format!("d2h({a})"),
            DType::BF16 => format!("d2bf({a})"),
            _ => format!("(float)({a})"),
        },
        (DType::F32 | DType::F64, _) => {
            if to == DType::Bool {
                format!("(i64)(({a}) != 0)")
            } else {
                let (lo, hi, ilo, ihi) = int_bounds(to);
                format!("f2i((double)({a}), {lo}, {hi}, {ilo}, {ihi})")
            }
        }
        (_, DType::F32) => match to {
            DType::F16 => format!("d2h(rlx_int_to_f64({a}, 11))"),
            DType::BF16 => format!("d2bf(rlx_int_to_f64({a}, 8))"),
            _ => format!("(float)({a})"),
        },
        (_, DType::F64) => format!("(double)({a})"),
        _ => match to {
            DType::Bool => format!("(i64)(({a}) != 0)"),
            DType::I64 => format!("(i64)({a})"),
            other => format!("(i64)({})({a})", dt_name(other)),
        },
    }
}

fn act_name(a: Activation) -> &'static str {
    a.name()
}

/// What an expression reads besides its own nodes.
pub(crate) struct Env<'e> {
    /// Names of the space's index variables (row-major) and its flat index.
    pub idx: &'e [String],
    pub flat: &'e str,
    /// The core value (epilogues), already of the core node's compute type.
    pub core: Option<&'e str>,
}

impl KGen<'_> {
    /// Emit `e` as statements (`T {prefix}N = …;`) and return each node's variable.
    pub(crate) fn expr(
        &mut self,
        out: &mut String,
        indent: &str,
        e: &Expr,
        prefix: &str,
        env: &Env<'_>,
    ) -> Result<Vec<String>, String> {
        let mut vars: Vec<String> = Vec::with_capacity(e.nodes.len());
        let errp = self.err_ptr();
        let code = ((self.kid as u64) + 1) << 8;
        for (i, n) in e.nodes.iter().enumerate() {
            if n.dtype.is_complex()
                || n.args
                    .iter()
                    .any(|&a| e.nodes[a as usize].dtype.is_complex())
            {
                return Err("an elementwise expression computes on complex values".into());
            }
            let v = format!("{prefix}{i}");
            let t = ctype(n.dtype);
            let a = |k: usize| vars[n.args[k] as usize].clone();
            let adt = |k: usize| e.nodes[n.args[k] as usize].dtype;
            let cls = class(n.dtype);
            let (rhs, needs_post) = match &n.op {
                EOp::Load(l) => (self.read(*l, env.flat, env.idx), false),
                EOp::Const(s) => (literal(*s, n.dtype), false),
                EOp::Core => (
                    env.core
                        .ok_or("internal: core value read outside an epilogue")?
                        .to_string(),
                    false,
                ),
                EOp::Unary(act) => {
                    if cls == DType::I64 {
                        let f = match act {
                            Activation::Neg => format!("iact_neg({})", a(0)),
                            Activation::Abs => format!("iact_abs({})", a(0)),
                            Activation::Relu => format!("iact_relu({})", a(0)),
                            Activation::Sign => format!("iact_sign({})", a(0)),
                            Activation::Round | Activation::Floor | Activation::Ceil => a(0),
                            other => {
                                return Err(format!(
                                    "{} is not defined on integer values; cast to a float type first",
                                    other.name()
                                ));
                            }
                        };
                        (f, true)
                    } else {
                        (format!("act_{}<{t}>({})", act_name(*act), a(0)), true)
                    }
                }
                EOp::Binary(b) => (self.binary(*b, n.dtype, &a(0), &a(1), &errp, code)?, true),
                EOp::Compare(c) => {
                    let (da, db) = (adt(0), adt(1));
                    let (x, y) = match (class(da), class(db)) {
                        (DType::I64, DType::I64) | (DType::F32, DType::F32) => (a(0), a(1)),
                        _ => (format!("(double)({})", a(0)), format!("(double)({})", a(1))),
                    };
                    let op = match c {
                        CmpOp::Eq => "==",
                        CmpOp::Ne => "!=",
                        CmpOp::Lt => "<",
                        CmpOp::Le => "<=",
                        CmpOp::Gt => ">",
                        CmpOp::Ge => ">=",
                    };
                    (format!("(i64)(({x}) {op} ({y}))"), false)
                }
                EOp::Where => (format!("{} ? {} : {}", a(0), a(1), a(2)), false),
                EOp::Cast => (cast(&a(0), adt(0), n.dtype), false),
                EOp::RoundToFormat {
                    exp_bits,
                    man_bits,
                    max_normal,
                } => {
                    let bias = (1i64 << (exp_bits.clamp(&1, &30) - 1)) - 1;
                    let r = format!(
                        "rlx_round_format((double)({}), {man_bits}, {bias}, f64_of(0x{:016x}ull))",
                        a(0),
                        (*max_normal as f64).to_bits()
                    );
                    let rhs = match n.dtype {
                        DType::F16 => format!("d2h({r})"),
                        DType::BF16 => format!("d2bf({r})"),
                        DType::F32 => format!("(float)({r})"),
                        DType::F64 => r,
                        other => {
                            return Err(format!(
                                "round_to_format needs a float input, got {other}; cast it to f32 first"
                            ));
                        }
                    };
                    (rhs, false)
                }
            };
            let p = if needs_post {
                post(n.dtype, &v)
            } else {
                String::new()
            };
            out.push_str(&format!("{indent}{t} {v} = {rhs};{p}\n"));
            vars.push(v);
        }
        Ok(vars)
    }

    fn binary(
        &mut self,
        b: BinaryOp,
        dt: DType,
        x: &str,
        y: &str,
        errp: &str,
        code: u64,
    ) -> Result<String, String> {
        use BinaryOp::*;
        let cls = class(dt);
        if cls != DType::I64 {
            return Ok(match b {
                Add => format!("{x} + {y}"),
                Sub => format!("{x} - {y}"),
                Mul => format!("{x} * {y}"),
                Div => format!("{x} / {y}"),
                Max => format!("b_max({x}, {y})"),
                Min => format!("b_min({x}, {y})"),
                Pow => format!("b_pow({x}, {y})"),
                Mod => format!("m_fmod({x}, {y})"),
                Atan2 => format!("b_atan2({x}, {y})"),
                _ => {
                    return Err(format!(
                        "{} needs integer (or bool) operands; cast the float operands first",
                        b.name()
                    ));
                }
            });
        }
        let width = (dt.size_bytes() * 8) as i64;
        if dt == DType::Bool {
            return Ok(match b {
                BitAnd | Min => format!("{x} & {y}"),
                BitOr | Max => format!("{x} | {y}"),
                BitXor => format!("{x} ^ {y}"),
                _ => {
                    return Err(format!(
                        "{} is not defined on bool operands; cast to an integer or float type first",
                        b.name()
                    ));
                }
            });
        }
        Ok(match b {
            Add => format!("i_add({x}, {y})"),
            Sub => format!("i_sub({x}, {y})"),
            Mul => format!("i_mul({x}, {y})"),
            Div => format!("i_div({x}, {y}, {errp}, {code}ull)"),
            Mod => format!("i_rem({x}, {y}, {errp}, {code}ull)"),
            Max => format!("i_max({x}, {y})"),
            Min => format!("i_min({x}, {y})"),
            Pow => format!("i_pow({x}, {y})"),
            BitAnd => format!("{x} & {y}"),
            BitOr => format!("{x} | {y}"),
            BitXor => format!("{x} ^ {y}"),
            Shl => format!("i_shl({x}, {y}, {width}, {errp}, {code}ull)"),
            Shr => format!("i_shr({x}, {y}, {width}, {errp}, {code}ull)"),
            Atan2 => return Err("atan2 needs float operands; cast first".into()),
        })
    }
}
