//! f64 → f16 / bf16 conversion rounded once, from the whole f64.
//!
//! `half`'s `f16::from_f64` and `bf16::from_f64` are not correctly rounded: the
//! portable path drops the f64's low 32 mantissa bits before rounding (an f64 just
//! above a tie rounds down), and on x86 with F16C `f16::from_f64` goes through `f32`
//! (two roundings). The oracle defines every f16/bf16 result as the f64 value
//! rounded once to nearest even, as backends that round from f32 or in f64
//! arithmetic do; these functions are that rule, and every place that makes a
//! 16-bit float from an f64 for the oracle (or to match it) calls them.

use half::{bf16, f16};

/// `x` rounded once to the nearest bf16 (ties to even); values past the largest
/// finite bf16 by half an ulp or more become ±∞, tiny values round to subnormals or
/// ±0 (sign kept), and NaN stays NaN (quiet, sign and top payload bits kept).
#[inline]
pub fn bf16_from_f64(x: f64) -> bf16 {
    bf16::from_bits(narrow_bits(x, 8, 7) as u16)
}

/// `x` rounded once to the nearest f16 (ties to even); values of 65520 or more in
/// magnitude become ±∞, tiny values round to subnormals or ±0 (sign kept), and NaN
/// stays NaN (quiet, sign and top payload bits kept).
#[inline]
pub fn f16_from_f64(x: f64) -> f16 {
    f16::from_bits(narrow_bits(x, 5, 10) as u16)
}

/// The bits of `x` rounded to nearest even in the IEEE binary format with `exp_bits`
/// exponent bits (2..=10) and `man_bits` stored mantissa bits (1..=23, with
/// `exp_bits + man_bits <= 31`), gradual
/// underflow and infinities; sign at bit `exp_bits + man_bits`.
///
/// Works on the f64's integer fields: the result's exponent and mantissa are the top
/// bits of the rebiased f64 (or of its significand shifted into the subnormal range),
/// and the bits shifted out decide the rounding (above half: up; exactly half: to
/// even). A carry out of the mantissa moves into the exponent field, which is the
/// correct encoding of the next binade, and of ∞ past the largest finite value.
const fn narrow_bits(x: f64, exp_bits: u32, man_bits: u32) -> u32 {
    let bits = x.to_bits();
    let sign = ((bits >> 63) as u32) << (exp_bits + man_bits);
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let man = bits & ((1u64 << 52) - 1);
    let inf = sign | (((1u32 << exp_bits) - 1) << man_bits);
    if exp == 0x7ff {
        if man == 0 {
            return inf;
        }
        // A quiet NaN whose payload is the f64 payload's top bits.
        let quiet = 1u32 << (man_bits - 1);
        return inf | quiet | (man >> (52 - man_bits)) as u32;
    }
    if exp == 0 {
        // ±0 or an f64 subnormal: below 2^-1022, far under half the smallest
        // subnormal of any format with at most 10 exponent bits.
        return sign;
    }
    let bias = (1i32 << (exp_bits - 1)) - 1;
    let e = exp - 1023;
    if e > bias {
        return inf;
    }
    let sig = man | (1u64 << 52);
    let (head, shift) = if e >= 1 - bias {
        // Normal: the rebiased exponent above the top `man_bits` mantissa bits.
        let shift = 52 - man_bits;
        ((((e + bias) as u64) << man_bits) | (man >> shift), shift)
    } else {
        // Subnormal: the significand shifted so its unit is the smallest subnormal.
        let shift = (52 - man_bits) as i32 + (1 - bias - e);
        if shift > 53 {
            // Below half the smallest subnormal (the significand is under 2^53).
            return sign;
        }
        (sig >> shift, shift as u32)
    };
    let rest = sig & ((1u64 << shift) - 1);
    let half = 1u64 << (shift - 1);
    let up = rest > half || (rest == half && head & 1 == 1);
    sign | (head + up as u64) as u32
}

#[cfg(test)]
#[path = "narrow_tests.rs"]
mod tests;
