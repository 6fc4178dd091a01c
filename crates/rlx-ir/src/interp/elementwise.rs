//! Oracle semantics of the elementwise ops: activations, casts, binary
//! arithmetic, comparisons and selection.
//!
//! Rules shared by every op here:
//! - Operands broadcast like NumPy ([`broadcast_map`]).
//! - Real floats are decoded to `f64`, computed in `f64`, and rounded once to
//!   the result dtype on store.
//! - Integers are computed in `i64` with wrapping arithmetic and wrap to the
//!   result's width on store; wrapping in 64 bits and then truncating to `n`
//!   bits gives exactly `n`-bit wrapping arithmetic.
//! - The result dtype of `Binary` is the lhs dtype; the rhs is first converted
//!   to it exactly as [`Op::Cast`] would, so `Binary(l, r)` ≡
//!   `Binary(l, Cast(r → dtype(l)))`. `Where` converts both branches to the
//!   result dtype the same way. `Compare` does not convert: it compares the
//!   exact values (as `i64` when both sides are integers or bool, else as `f64`).

use super::index::{broadcast_map, take};
use crate::{Activation, BinaryOp, CmpOp, DType, IrError, IrResult, Op, Shape, TensorData};

pub(super) fn eval(op: &Op, inputs: &[&TensorData], out: &Shape) -> IrResult<TensorData> {
    let dims = out
        .static_dims()
        .expect("the dispatcher passes a concrete result type");
    match op {
        Op::Activation(a) => activation(*a, inputs[0]),
        Op::Cast { to } => Ok(cast(inputs[0], *to)),
        Op::StopGradient => Ok(inputs[0].clone()),
        Op::Binary(b) => binary(*b, inputs[0], inputs[1], out.dtype(), &dims),
        Op::Compare(c) => compare(*c, inputs[0], inputs[1], &dims),
        Op::Where => select(inputs[0], inputs[1], inputs[2], out.dtype(), &dims),
        other => unreachable!("elementwise::eval got {}", other.name()),
    }
}

// ---------------------------------------------------------------- activations

fn activation(a: Activation, x: &TensorData) -> IrResult<TensorData> {
    let dt = x.dtype;
    if dt.is_float() {
        let v: Vec<f64> = x
            .to_f64_vec()
            .into_iter()
            .map(|v| activation_f64(a, v))
            .collect();
        Ok(TensorData::from_f64_as(dt, &x.dims, &v))
    } else if dt.is_int() {
        let v = x
            .to_i64_vec()
            .into_iter()
            .map(|v| activation_i64(a, v))
            .collect::<IrResult<Vec<i64>>>()?;
        Ok(TensorData::from_i64_as(dt, &x.dims, &v))
    } else {
        Err(IrError::new(
            a.name(),
            format!(
                "is not defined for dtype {dt} (input dims {:?}); cast to f32 first",
                x.dims
            ),
        ))
    }
}

/// An activation on an integer value (computed in `i64`; the caller wraps on store).
///
/// Only the integer-closed activations are defined: `neg` and `abs` wrap
/// (`abs(i8::MIN) = i8::MIN`), the roundings are the identity.
pub fn activation_i64(a: Activation, x: i64) -> IrResult<i64> {
    Ok(match a {
        Activation::Neg => x.wrapping_neg(),
        Activation::Abs => x.wrapping_abs(),
        Activation::Relu => x.max(0),
        Activation::Sign => x.signum(),
        Activation::Round | Activation::Floor | Activation::Ceil => x,
        _ => {
            return Err(IrError::new(
                a.name(),
                "is not defined on integer values; cast to a float type first",
            ));
        }
    })
}

/// The value of activation `a` at `x`, in `f64`.
///
/// A NaN input gives NaN for every activation (including `relu`, `sign` and
/// the roundings). Where the textbook formula would produce `∞ · 0` at an
/// infinite input, the limit is returned instead (e.g. `silu(−∞) = −0`).
#[inline]
pub fn activation_f64(a: Activation, x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    match a {
        Activation::Gelu => gelu(x),
        Activation::GeluApprox => gelu_approx(x),
        Activation::Silu => {
            if x == f64::NEG_INFINITY {
                -0.0
            } else {
                x * sigmoid(x)
            }
        }
        Activation::Relu => {
            if x > 0.0 {
                x
            } else {
                0.0
            }
        }
        Activation::Sigmoid => sigmoid(x),
        Activation::Tanh => x.tanh(),
        Activation::Exp => x.exp(),
        Activation::Log => x.ln(),
        Activation::Sqrt => x.sqrt(),
        Activation::Rsqrt => 1.0 / x.sqrt(),
        Activation::Neg => -x,
        Activation::Abs => x.abs(),
        Activation::Sin => x.sin(),
        Activation::Cos => x.cos(),
        Activation::Tan => x.tan(),
        Activation::Atan => x.atan(),
        Activation::Recip => 1.0 / x,
        Activation::Round => x.round_ties_even(),
        Activation::Floor => x.floor(),
        Activation::Ceil => x.ceil(),
        Activation::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        Activation::Softplus => softplus(x),
        // exp_m1 keeps the tiny negative values near 0 accurate.
        Activation::Elu => {
            if x > 0.0 {
                x
            } else {
                x.exp_m1()
            }
        }
        Activation::Erf => libm::erf(x),
        Activation::HardSwish => {
            if x == f64::NEG_INFINITY {
                -0.0
            } else {
                x * hard_sigmoid(x)
            }
        }
        Activation::HardSigmoid => hard_sigmoid(x),
        Activation::Mish => {
            if x == f64::NEG_INFINITY {
                -0.0
            } else {
                x * softplus(x).tanh()
            }
        }
        Activation::Softsign => {
            if x.is_infinite() {
                x.signum()
            } else {
                x / (1.0 + x.abs())
            }
        }
        // ln σ(x) = −softplus(−x) = min(x, 0) − ln(1 + e^−|x|): no overflow for any x.
        Activation::LogSigmoid => x.min(0.0) - (-x.abs()).exp().ln_1p(),
    }
}

/// σ(x) without overflow: `e^x` is only evaluated for `x < 0`.
fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// ln(1 + eˣ) = max(x, 0) + ln(1 + e^−|x|): exact for large |x|, no overflow.
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

fn hard_sigmoid(x: f64) -> f64 {
    (x + 3.0).clamp(0.0, 6.0) / 6.0
}

/// x·Φ(x) with Φ(x) = erfc(−x/√2)/2; erfc keeps the tail for negative x
/// (1 + erf(x/√2) would cancel to 0 below x ≈ −8).
fn gelu(x: f64) -> f64 {
    if x == f64::NEG_INFINITY {
        return -0.0;
    }
    x * 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

/// ½x(1 + tanh u) with u = √(2/π)(x + 0.044715x³), evaluated through the
/// identity ½(1 + tanh u) = σ(2u), which does not cancel for negative x.
fn gelu_approx(x: f64) -> f64 {
    if x == f64::NEG_INFINITY {
        return -0.0;
    }
    let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    x * sigmoid(2.0 * u)
}

// ---------------------------------------------------------------------- casts

/// Convert `x` to dtype `to`, element by element.
///
/// - float → int truncates toward zero and saturates, NaN → 0 ([`float_to_int`]);
/// - int → int wraps (two's complement, [`wrap_int`]);
/// - int → float rounds the exact integer to nearest even (also for `i64`
///   values beyond 2⁵³, which a detour through `f64` would round twice: [`int_for_float`]);
/// - float → float rounds to nearest even ([`round_float`]);
/// - anything → bool is `v != 0` (NaN is true); bool → number is 0/1;
/// - real → complex has a zero imaginary part; complex → real keeps the real
///   part (NumPy's rule); complex → bool is `re != 0 || im != 0`.
pub(crate) fn cast(x: &TensorData, to: DType) -> TensorData {
    let from = x.dtype;
    if from == to {
        return x.clone();
    }
    let dims = &x.dims;
    if from.is_complex() {
        let pairs = x.to_f64_vec();
        if to.is_complex() {
            return TensorData::from_f64_as(to, dims, &pairs);
        }
        if to == DType::Bool {
            let b: Vec<bool> = pairs
                .chunks_exact(2)
                .map(|p| p[0] != 0.0 || p[1] != 0.0)
                .collect();
            return TensorData::from_bool(dims, &b);
        }
        let re: Vec<f64> = pairs.chunks_exact(2).map(|p| p[0]).collect();
        return cast_f64s(&re, to, dims);
    }
    if from.is_float() {
        return cast_f64s(&x.to_f64_vec(), to, dims);
    }
    // Integer or bool source: exact i64 values.
    let v = x.to_i64_vec();
    if to.is_int() || to == DType::Bool {
        let w: Vec<i64> = v.iter().map(|&i| wrap_int(i, to)).collect();
        return TensorData::from_i64_as(to, dims, &w);
    }
    let f: Vec<f64> = v.iter().map(|&i| int_for_float(i, to)).collect();
    cast_f64s(&f, to, dims)
}

/// Real values `v` (exact f64s) cast to `to` by the element rules below; the encoders
/// only store the already-converted values.
fn cast_f64s(v: &[f64], to: DType, dims: &[usize]) -> TensorData {
    if to.is_complex() {
        let real = if to == DType::C64 {
            DType::F32
        } else {
            DType::F64
        };
        let pairs: Vec<f64> = v
            .iter()
            .flat_map(|&r| [round_float(r, real), 0.0])
            .collect();
        TensorData::from_f64_as(to, dims, &pairs)
    } else if to.is_float() {
        let r: Vec<f64> = v.iter().map(|&x| round_float(x, to)).collect();
        TensorData::from_f64_as(to, dims, &r)
    } else {
        let r: Vec<i64> = v.iter().map(|&x| float_to_int(x, to)).collect();
        TensorData::from_i64_as(to, dims, &r)
    }
}

/// The oracle's cast of one float value to the integer dtype (or bool) `to`: truncation
/// toward zero, saturating at the dtype's range, NaN → 0; bool is `x != 0` (NaN is true).
/// Backends call this for their scalar casts (the CPU executor's `cast_bits`). Any other
/// `to` (i64, or a float dtype, which is not an integer cast) saturates to i64.
#[inline]
pub fn float_to_int(x: f64, to: DType) -> i64 {
    match to {
        DType::I8 => x as i8 as i64,
        DType::U8 => x as u8 as i64,
        DType::I16 => x as i16 as i64,
        DType::I32 => x as i32 as i64,
        DType::U32 => x as u32 as i64,
        DType::Bool => (x != 0.0) as i64,
        _ => x as i64,
    }
}

/// The oracle's cast of one integer (or bool as 0/1) to the integer dtype (or bool)
/// `to`: two's-complement wrapping; bool is `v != 0`. Float and complex `to` leave `v`
/// unchanged (use [`int_for_float`]).
#[inline]
pub fn wrap_int(v: i64, to: DType) -> i64 {
    match to {
        DType::I8 => v as i8 as i64,
        DType::U8 => v as u8 as i64,
        DType::I16 => v as i16 as i64,
        DType::I32 => v as i32 as i64,
        DType::U32 => v as u32 as i64,
        DType::Bool => (v != 0) as i64,
        _ => v,
    }
}

/// The oracle's cast of one float value to the float dtype `to` (f32, f16, bf16, f64):
/// rounded to nearest even, overflow to ±∞, NaN stays NaN; the result is exact in `to`.
/// f16/bf16 round once from the whole f64 ([`crate::f16_from_f64`],
/// [`crate::bf16_from_f64`]), as the data encoders do.
/// f64, complex-f64 and non-float `to` leave `x` unchanged.
#[inline]
pub fn round_float(x: f64, to: DType) -> f64 {
    match to {
        DType::F32 | DType::C64 => x as f32 as f64,
        DType::F16 => crate::f16_from_f64(x).to_f64(),
        DType::BF16 => crate::bf16_from_f64(x).to_f64(),
        _ => x,
    }
}

/// An `f64` that rounds (in [`round_float`]) to the value nearest to the integer `v` in
/// the float dtype `to`: the first step of the oracle's int → float cast.
///
/// Integers up to 2⁵³ are exact in `f64`, so they round once, correctly. Larger
/// ones are first rounded to the target's precision here, in integer
/// arithmetic, which leaves a value that `f64` and the target hold exactly.
pub fn int_for_float(v: i64, to: DType) -> f64 {
    let precision = match to {
        DType::F32 | DType::C64 => 24,
        DType::BF16 => 8,
        DType::F16 => 11,
        _ => 53,
    };
    let mag = v.unsigned_abs();
    let bits = 64 - mag.leading_zeros();
    if bits <= 53 || bits <= precision {
        return v as f64;
    }
    let shift = bits - precision;
    let mut q = mag >> shift;
    let rem = mag & ((1u64 << shift) - 1);
    let half = 1u64 << (shift - 1);
    if rem > half || (rem == half && q % 2 == 1) {
        q += 1;
    }
    let r = q as f64 * 2f64.powi(shift as i32);
    if v < 0 { -r } else { r }
}

// --------------------------------------------------------------------- binary

fn binary(
    b: BinaryOp,
    l: &TensorData,
    r: &TensorData,
    dt: DType,
    dims: &[usize],
) -> IrResult<TensorData> {
    let l = cast(l, dt);
    let r = cast(r, dt);
    let lm = broadcast_map(&l.dims, dims);
    let rm = broadcast_map(&r.dims, dims);
    if dt.is_float() {
        let (lv, rv) = (l.to_f64_vec(), r.to_f64_vec());
        let v = (0..lm.len())
            .map(|i| binary_f64(b, lv[lm[i]], rv[rm[i]]))
            .collect::<IrResult<Vec<f64>>>()?;
        Ok(TensorData::from_f64_as(dt, dims, &v))
    } else if dt.is_int() {
        let (lv, rv) = (l.to_i64_vec(), r.to_i64_vec());
        let mut v = Vec::with_capacity(lm.len());
        for i in 0..lm.len() {
            v.push(binary_i64(b, lv[lm[i]], rv[rm[i]], dt).map_err(|msg| {
                IrError::new(
                    b.name(),
                    format!(
                        "{msg} (element {i} of the {dims:?} {dt} result; lhs {:?}, rhs {:?})",
                        l.dims, r.dims
                    ),
                )
            })?);
        }
        Ok(TensorData::from_i64_as(dt, dims, &v))
    } else if dt == DType::Bool {
        let (lv, rv) = (l.to_bool_vec(), r.to_bool_vec());
        let v = (0..lm.len())
            .map(|i| binary_bool(b, lv[lm[i]], rv[rm[i]]))
            .collect::<IrResult<Vec<bool>>>()?;
        Ok(TensorData::from_bool(dims, &v))
    } else {
        Err(IrError::new(
            b.name(),
            format!("complex operands ({dt}) are not supported by element-wise ops"),
        ))
    }
}

/// A binary op on two real float values.
///
/// `max`/`min` follow IEEE 754-2019 `maximum`/`minimum`: NaN propagates and
/// +0 > −0. `rem` is C `fmod` (sign of the dividend). `pow` is C `pow`
/// (so `pow(x, 0) = 1` and `pow(1, y) = 1` even for NaN).
pub(crate) fn binary_f64(b: BinaryOp, x: f64, y: f64) -> IrResult<f64> {
    Ok(match b {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Max => ieee_max(x, y),
        BinaryOp::Min => -ieee_max(-x, -y),
        BinaryOp::Pow => x.powf(y),
        BinaryOp::Mod => x % y,
        BinaryOp::Atan2 => x.atan2(y),
        BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr => {
            return Err(IrError::new(
                b.name(),
                "bitwise ops need integer (or bool) operands; cast the float operands first",
            ));
        }
    })
}

fn ieee_max(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else if x == y {
        // Only ±0 compare equal with different bits: prefer +0.
        if x.is_sign_positive() { x } else { y }
    } else if x > y {
        x
    } else {
        y
    }
}

/// A binary op on two integer values of dtype `dt` (already in `dt`'s range).
/// The result is wrapped to `dt` by the caller. Errors are plain messages.
pub fn binary_i64(b: BinaryOp, x: i64, y: i64, dt: DType) -> Result<i64, String> {
    let width = (dt.size_bytes() * 8) as i64;
    Ok(match b {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::Div | BinaryOp::Mod if y == 0 => {
            return Err(format!(
                "integer division by zero ({x} {} 0); mask the zero divisors or cast to a float type",
                if b == BinaryOp::Div { "/" } else { "%" }
            ));
        }
        // Truncating division; `MIN / −1` wraps to MIN.
        BinaryOp::Div => x.wrapping_div(y),
        // Sign of the dividend, like C fmod.
        BinaryOp::Mod => x.wrapping_rem(y),
        BinaryOp::Max => x.max(y),
        BinaryOp::Min => x.min(y),
        BinaryOp::Pow => int_pow(x, y),
        BinaryOp::BitAnd => x & y,
        BinaryOp::BitOr => x | y,
        BinaryOp::BitXor => x ^ y,
        BinaryOp::Shl | BinaryOp::Shr if y < 0 => {
            return Err(format!(
                "negative shift amount {y}; shift amounts must be ≥ 0"
            ));
        }
        BinaryOp::Shl => {
            if y >= width {
                0
            } else {
                x << y
            }
        }
        // Values of unsigned dtypes are non-negative here, so the arithmetic
        // shift of i64 is the logical shift they need; signed values fill with
        // their sign.
        BinaryOp::Shr => {
            if y >= width {
                if x < 0 { -1 } else { 0 }
            } else {
                x >> y
            }
        }
        BinaryOp::Atan2 => {
            return Err("atan2 needs float operands; cast first".to_string());
        }
    })
}

/// `x^y` with wrap-around; a negative exponent gives the integer part of the
/// real result: 1 for x = 1, ±1 for x = −1, 0 otherwise (including x = 0).
fn int_pow(x: i64, y: i64) -> i64 {
    if y < 0 {
        return match x {
            1 => 1,
            -1 => {
                if y % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut base, mut e, mut acc) = (x, y as u64, 1i64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        e >>= 1;
    }
    acc
}

/// Bool operands: `and`/`or`/`xor` are logical, `max` is or, `min` is and.
fn binary_bool(b: BinaryOp, x: bool, y: bool) -> IrResult<bool> {
    Ok(match b {
        BinaryOp::BitAnd | BinaryOp::Min => x & y,
        BinaryOp::BitOr | BinaryOp::Max => x | y,
        BinaryOp::BitXor => x ^ y,
        _ => {
            return Err(IrError::new(
                b.name(),
                "is not defined on bool operands; cast to an integer or float type first",
            ));
        }
    })
}

// ------------------------------------------------------- comparison, selection

fn compare(c: CmpOp, l: &TensorData, r: &TensorData, dims: &[usize]) -> IrResult<TensorData> {
    let lm = broadcast_map(&l.dims, dims);
    let rm = broadcast_map(&r.dims, dims);
    let exact_int = |d: DType| d.is_int() || d == DType::Bool;
    let v: Vec<bool> = if exact_int(l.dtype) && exact_int(r.dtype) {
        let (lv, rv) = (l.to_i64_vec(), r.to_i64_vec());
        (0..lm.len())
            .map(|i| cmp(c, &lv[lm[i]], &rv[rm[i]]))
            .collect()
    } else if l.dtype.is_complex() || r.dtype.is_complex() {
        if !matches!(c, CmpOp::Eq | CmpOp::Ne) {
            return Err(IrError::new(
                c.name(),
                format!(
                    "complex numbers are not ordered ({} vs {}); only eq and ne are defined",
                    l.dtype, r.dtype
                ),
            ));
        }
        let (lp, rp) = (complex_pairs(l), complex_pairs(r));
        (0..lm.len())
            .map(|i| {
                let equal = lp[lm[i]] == rp[rm[i]];
                (c == CmpOp::Eq) == equal
            })
            .collect()
    } else {
        let (lv, rv) = (l.to_f64_vec(), r.to_f64_vec());
        (0..lm.len())
            .map(|i| cmp(c, &lv[lm[i]], &rv[rm[i]]))
            .collect()
    };
    Ok(TensorData::from_bool(dims, &v))
}

/// A comparison with IEEE semantics: NaN is unordered, so everything but `ne` is false.
fn cmp<T: PartialOrd>(c: CmpOp, x: &T, y: &T) -> bool {
    match c {
        CmpOp::Eq => x == y,
        CmpOp::Ne => x != y,
        CmpOp::Lt => x < y,
        CmpOp::Le => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::Ge => x >= y,
    }
}

/// `(re, im)` per element; real data gets a zero imaginary part.
fn complex_pairs(x: &TensorData) -> Vec<(f64, f64)> {
    let v = cast(x, DType::C128).to_f64_vec();
    v.chunks_exact(2).map(|p| (p[0], p[1])).collect()
}

/// `Where`: element from `on_true` where the mask is non-zero (NaN counts as
/// non-zero), else from `on_false`; both branches converted to `dt` first.
fn select(
    mask: &TensorData,
    on_true: &TensorData,
    on_false: &TensorData,
    dt: DType,
    dims: &[usize],
) -> IrResult<TensorData> {
    let m = mask.to_bool_vec();
    let (t, f) = (cast(on_true, dt), cast(on_false, dt));
    let mm = broadcast_map(&mask.dims, dims);
    let tm = broadcast_map(&t.dims, dims);
    let fm = broadcast_map(&f.dims, dims);
    let t_part = take(&t, &tm, dims);
    let f_part = take(&f, &fm, dims);
    let w = dt.size_bytes();
    let mut bytes = Vec::with_capacity(mm.len() * w);
    for (i, &src) in mm.iter().enumerate() {
        let from = if m[src] { &t_part } else { &f_part };
        bytes.extend_from_slice(&from.bytes[i * w..(i + 1) * w]);
    }
    TensorData::new(dt, dims, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_for_float_rounds_large_i64_once() {
        // 2^60 + 2^36 + 1 is just above the midpoint between two f32 values
        // (spacing 2^37 there); via f64 it first rounds down onto the midpoint
        // and then ties to even, i.e. down — a double-rounding error.
        let v: i64 = (1 << 60) + (1 << 36) + 1;
        assert_eq!(int_for_float(v, DType::F32) as f32, v as f32);
        assert_eq!(v as f32, ((1i64 << 60) + (1 << 37)) as f32);
        assert_eq!(int_for_float(-v, DType::F32), -int_for_float(v, DType::F32));
        assert_eq!(int_for_float(7, DType::BF16), 7.0);
        assert_eq!(int_for_float(i64::MIN, DType::F32), -(2f64.powi(63)));
    }

    #[test]
    fn int_pow_wraps_and_handles_negative_exponents() {
        assert_eq!(int_pow(3, 4), 81);
        assert_eq!(int_pow(2, 64), 0);
        assert_eq!(int_pow(-1, -3), -1);
        assert_eq!(int_pow(-1, -4), 1);
        assert_eq!(int_pow(1, -9), 1);
        assert_eq!(int_pow(5, -1), 0);
        assert_eq!(int_pow(0, 0), 1);
    }

    #[test]
    fn public_integer_rules_refuse_invalid_operands_with_errors_that_say_why() {
        // Division and remainder by zero, negative shifts: errors naming the problem.
        for b in [BinaryOp::Div, BinaryOp::Mod] {
            let e = binary_i64(b, 7, 0, DType::I32).unwrap_err();
            assert!(e.contains("division by zero"), "{e}");
        }
        for b in [BinaryOp::Shl, BinaryOp::Shr] {
            let e = binary_i64(b, 7, -1, DType::I32).unwrap_err();
            assert!(e.contains("negative shift amount -1"), "{e}");
        }
        // Edge operands that are valid: wrapping, shifts past the width.
        assert_eq!(
            binary_i64(BinaryOp::Div, i64::MIN, -1, DType::I64),
            Ok(i64::MIN)
        );
        assert_eq!(binary_i64(BinaryOp::Mod, -7, 2, DType::I32), Ok(-1));
        assert_eq!(binary_i64(BinaryOp::Shl, 1, 32, DType::I32), Ok(0));
        assert_eq!(binary_i64(BinaryOp::Shr, -8, 40, DType::I32), Ok(-1));
        // Float-only activations on integers: an error naming the activation.
        let e = activation_i64(Activation::Exp, 3).unwrap_err().to_string();
        assert!(
            e.contains("exp") && e.contains("cast to a float type"),
            "{e}"
        );
        assert_eq!(activation_i64(Activation::Neg, i64::MIN).unwrap(), i64::MIN);
        assert_eq!(activation_i64(Activation::Relu, -4).unwrap(), 0);
        // The f64 rule: NaN stays NaN, limits at infinities.
        assert!(activation_f64(Activation::Relu, f64::NAN).is_nan());
        assert_eq!(activation_f64(Activation::Relu, f64::NEG_INFINITY), 0.0);
    }
}
