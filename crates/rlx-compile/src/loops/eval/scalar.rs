//! The scalar semantics of the loop IR's interpreter: storage widening and narrowing,
//! conversions between compute types, and every unary and binary operator.

use super::Value;
use crate::loops::{Bin, Ty, Un};
use rlx_ir::DType;

/// A stored element as the compute value of `dt`.
pub(super) fn widen(v: f64, dt: DType) -> Value {
    match Ty::of(dt) {
        Some(Ty::Bool) => Value::Bool(v != 0.0),
        Some(Ty::I64) => Value::I64(v as i64),
        Some(Ty::F64) => Value::F64(v),
        _ => Value::F32(v as f32),
    }
}

/// A compute value stored into a buffer of `dt` (already rounded by the kernel).
pub(super) fn narrow(v: Value, dt: DType) -> f64 {
    match dt {
        DType::F16 => rlx_ir::f16_from_f64(v.as_f64()).to_f64(),
        DType::BF16 => rlx_ir::bf16_from_f64(v.as_f64()).to_f64(),
        _ => v.as_f64(),
    }
}

pub(super) fn convert(t: Ty, a: Value) -> Value {
    match (t, a) {
        // NaN compares unequal to 0: true, like every nonzero value.
        (Ty::Bool, v) => Value::Bool(v.as_f64() != 0.0),
        (Ty::F32, Value::F64(v)) => Value::F32(v as f32),
        (Ty::F32, v) => Value::F32(v.as_f64() as f32),
        (Ty::F64, v) => Value::F64(v.as_f64()),
        // Rust's float → int casts truncate toward zero, saturate, and map NaN to 0.
        (Ty::I64 | Ty::Index, Value::F32(v)) => Value::I64(v as i64),
        (Ty::I64 | Ty::Index, Value::F64(v)) => Value::I64(v as i64),
        (Ty::I64 | Ty::Index, Value::Bool(b)) => Value::I64(b as i64),
        (Ty::I64 | Ty::Index, v) => v,
    }
}

pub(super) fn unary(op: Un, a: Value) -> Option<Value> {
    macro_rules! float {
        ($x:ident => $e32:expr, $e64:expr) => {
            match a {
                Value::F32($x) => Value::F32($e32),
                Value::F64($x) => Value::F64($e64),
                _ => return None,
            }
        };
    }
    Some(match op {
        Un::Neg => match a {
            Value::I64(v) => Value::I64(v.wrapping_neg()),
            _ => float!(x => -x, -x),
        },
        Un::Abs => match a {
            Value::I64(v) => Value::I64(v.wrapping_abs()),
            _ => float!(x => x.abs(), x.abs()),
        },
        Un::Sqrt => float!(x => x.sqrt(), x.sqrt()),
        Un::Exp => float!(x => x.exp(), x.exp()),
        Un::Expm1 => float!(x => x.exp_m1(), x.exp_m1()),
        Un::Log => float!(x => x.ln(), x.ln()),
        Un::Log1p => float!(x => x.ln_1p(), x.ln_1p()),
        Un::Sin => float!(x => x.sin(), x.sin()),
        Un::Cos => float!(x => x.cos(), x.cos()),
        Un::Tan => float!(x => x.tan(), x.tan()),
        Un::Atan => float!(x => x.atan(), x.atan()),
        Un::Tanh => float!(x => x.tanh(), x.tanh()),
        Un::Erf => float!(x => libm::erff(x), libm::erf(x)),
        Un::Erfc => float!(x => libm::erfcf(x), libm::erfc(x)),
        Un::Floor => float!(x => x.floor(), x.floor()),
        Un::Ceil => float!(x => x.ceil(), x.ceil()),
        Un::RoundEven => float!(x => x.round_ties_even(), x.round_ties_even()),
        Un::IsNan => match a {
            Value::F32(x) => Value::Bool(x.is_nan()),
            Value::F64(x) => Value::Bool(x.is_nan()),
            _ => Value::Bool(false),
        },
        Un::Not => match a {
            Value::Bool(b) => Value::Bool(!b),
            _ => return None,
        },
        Un::RoundF16 => match a {
            Value::F32(x) => Value::F32(half::f16::from_f32(x).to_f32()),
            _ => return None,
        },
        Un::RoundBf16 => match a {
            Value::F32(x) => Value::F32(half::bf16::from_f32(x).to_f32()),
            _ => return None,
        },
        Un::RoundHalf(dt) => match a {
            Value::F64(x) if dt == DType::F16 => Value::F64(rlx_ir::f16_from_f64(x).to_f64()),
            Value::F64(x) => Value::F64(rlx_ir::bf16_from_f64(x).to_f64()),
            _ => return None,
        },
        Un::IntToF64 { prec } => match a {
            Value::I64(x) => Value::F64(int_to_f64(x, prec)),
            _ => return None,
        },
        Un::RoundFormat {
            exp_bits,
            man_bits,
            max_normal,
        } => match a {
            Value::F64(x) => Value::F64(
                rlx_ir::FloatFormat {
                    exp_bits,
                    man_bits,
                    max_normal,
                }
                .round_f64(x),
            ),
            _ => return None,
        },
        Un::F32Bits => match a {
            Value::F32(x) => Value::I64(x.to_bits() as i32 as i64),
            _ => return None,
        },
        Un::F32FromBits => match a {
            Value::I64(x) => Value::F32(f32::from_bits(x as u32)),
            _ => return None,
        },
        Un::Wrap(dt) => match a {
            Value::I64(x) => Value::I64(match dt {
                DType::I8 => x as i8 as i64,
                DType::I16 => x as i16 as i64,
                DType::I32 => x as i32 as i64,
                DType::U8 => x as u8 as i64,
                DType::U32 => x as u32 as i64,
                _ => x,
            }),
            _ => return None,
        },
    })
}

pub(super) fn binary(op: Bin, a: Value, b: Value) -> Option<Value> {
    use Value::*;
    Some(match (a, b) {
        (F32(x), F32(y)) => match op {
            Bin::Add => F32(x + y),
            Bin::Sub => F32(x - y),
            Bin::Mul => F32(x * y),
            Bin::Div => F32(x / y),
            Bin::Rem => F32(x % y),
            Bin::Pow => F32(x.powf(y)),
            Bin::Atan2 => F32(x.atan2(y)),
            Bin::Min => F32(x.min(y)),
            Bin::Max => F32(x.max(y)),
            Bin::Lt => Bool(x < y),
            Bin::Le => Bool(x <= y),
            Bin::Eq => Bool(x == y),
            Bin::Ne => Bool(x != y),
            _ => return None,
        },
        (F64(x), F64(y)) => match op {
            Bin::Add => F64(x + y),
            Bin::Sub => F64(x - y),
            Bin::Mul => F64(x * y),
            Bin::Div => F64(x / y),
            Bin::Rem => F64(x % y),
            Bin::Pow => F64(x.powf(y)),
            Bin::Atan2 => F64(x.atan2(y)),
            Bin::Min => F64(x.min(y)),
            Bin::Max => F64(x.max(y)),
            Bin::Lt => Bool(x < y),
            Bin::Le => Bool(x <= y),
            Bin::Eq => Bool(x == y),
            Bin::Ne => Bool(x != y),
            _ => return None,
        },
        (I64(x), I64(y)) => match op {
            Bin::Add => I64(x.wrapping_add(y)),
            Bin::Sub => I64(x.wrapping_sub(y)),
            Bin::Mul => I64(x.wrapping_mul(y)),
            Bin::Div if y != 0 => I64(x.wrapping_div(y)),
            Bin::Rem if y != 0 => I64(x.wrapping_rem(y)),
            Bin::Min => I64(x.min(y)),
            Bin::Max => I64(x.max(y)),
            Bin::Lt => Bool(x < y),
            Bin::Le => Bool(x <= y),
            Bin::Eq => Bool(x == y),
            Bin::Ne => Bool(x != y),
            Bin::BitAnd => I64(x & y),
            Bin::BitOr => I64(x | y),
            Bin::BitXor => I64(x ^ y),
            Bin::Shl if (0..64).contains(&y) => I64(((x as u64) << y) as i64),
            Bin::Shr if (0..64).contains(&y) => I64(x >> y),
            _ => return None,
        },
        (Bool(x), Bool(y)) => match op {
            Bin::And => Bool(x && y),
            Bin::Or => Bool(x || y),
            Bin::Eq => Bool(x == y),
            Bin::Ne => Bool(x != y),
            Bin::Lt => Bool(!x & y),
            Bin::Le => Bool(x <= y),
            _ => return None,
        },
        _ => return None,
    })
}

/// `v` rounded to `prec` significant bits (ties to even) as an f64: one rounding of the
/// exact integer.
pub(super) fn int_to_f64(v: i64, prec: u32) -> f64 {
    let mag = v.unsigned_abs();
    let bits = 64 - mag.leading_zeros();
    if bits <= 53 || bits <= prec {
        return v as f64;
    }
    let shift = bits - prec;
    let (mut q, rem, half) = (
        mag >> shift,
        mag & ((1u64 << shift) - 1),
        1u64 << (shift - 1),
    );
    if rem > half || (rem == half && q & 1 == 1) {
        q += 1;
    }
    let r = q as f64 * 2f64.powi(shift as i32);
    if v < 0 { -r } else { r }
}
