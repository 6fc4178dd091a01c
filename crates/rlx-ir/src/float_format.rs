//! Emulated binary float formats (`lowp`): round an `f32` to the grid of any
//! sign + exponent + mantissa format.
//!
//! A [`FloatFormat`] is an IEEE-style format (bias `2^(exp_bits−1) − 1`, gradual
//! underflow) whose range is cut off at `max_normal` instead of at an infinity:
//! rounding saturates, it never produces `±Inf`. It backs
//! [`crate::Op::RoundToFormat`] and the `rlx_tensor::lowp` module.

use crate::ScaledFormat;

/// A binary floating-point format described by its field widths and largest normal value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloatFormat {
    /// Exponent field width.
    pub exp_bits: u32,
    /// Mantissa (fraction) field width.
    pub man_bits: u32,
    /// Largest finite magnitude; larger inputs saturate to it.
    pub max_normal: f32,
}

/// The smallest positive normal `f32` (`2^−126`); anything below it is an f32 subnormal.
const F32_MIN_NORMAL: f64 = 1.1754943508222875e-38;

impl FloatFormat {
    /// An IEEE-biased format with `exp_bits` exponent bits, `man_bits` mantissa bits, and
    /// saturation bound `max_normal`.
    ///
    /// # Panics
    /// If `exp_bits` is outside `1..=8`, `man_bits > 23` (the format must fit inside `f32`),
    /// or `max_normal` is not a positive finite number.
    pub fn ieee(exp_bits: u32, man_bits: u32, max_normal: f32) -> FloatFormat {
        assert!(
            (1..=8).contains(&exp_bits) && man_bits <= 23,
            "FloatFormat::ieee({exp_bits}, {man_bits}, {max_normal}): need 1..=8 exponent and 0..=23 mantissa bits to fit inside f32"
        );
        assert!(
            max_normal.is_finite() && max_normal > 0.0,
            "FloatFormat::ieee({exp_bits}, {man_bits}, {max_normal}): max_normal must be a positive finite number"
        );
        FloatFormat {
            exp_bits,
            man_bits,
            max_normal,
        }
    }

    /// The exponent bias, `2^(exp_bits−1) − 1`.
    pub fn bias(&self) -> i32 {
        (1i32 << (self.exp_bits.clamp(1, 30) - 1)) - 1
    }

    /// Total bits including the sign: `1 + exp_bits + man_bits`.
    pub fn bits(&self) -> u32 {
        1 + self.exp_bits + self.man_bits
    }

    /// Round `x` to this format's grid:
    ///
    /// - `±0` and NaN pass through unchanged;
    /// - f32-subnormal inputs flush to a zero of the same sign;
    /// - `|x| ≥ max_normal` (including `±Inf`) saturates to `±max_normal`;
    /// - otherwise round-to-nearest-even at step `2^(max(⌊log2|x|⌋, 1−bias) − man_bits)`,
    ///   which keeps the target's subnormals; a rounded value above `max_normal` (a tie
    ///   or round-up just below it) also saturates; with `man_bits = 0` a tie between
    ///   `2^k` and `2^(k+1)` is `1.5` steps, so it goes to the even multiple, `2^(k+1)`;
    /// - a result that would be an f32 subnormal flushes to a signed zero.
    ///
    /// ```
    /// use rlx_ir::FloatFormat;
    /// assert_eq!(FloatFormat::ieee(2, 1, 6.0).round(5.0), 4.0); // tie → even mantissa
    /// assert_eq!(FloatFormat::ieee(4, 3, 448.0).round(1.1), 1.125);
    /// assert_eq!(FloatFormat::ieee(4, 3, 448.0).round(1e6), 448.0);
    /// ```
    pub fn round(&self, x: f32) -> f32 {
        // f32 → f64 is exact and every result is an f32 (≤ 24 significant bits inside the
        // f32 normal range, or `max_normal` itself), so the narrowing cast is exact too.
        self.round_f64(x as f64) as f32
    }

    /// [`FloatFormat::round`] applied to an `f64` with a single rounding (no detour
    /// through `f32`); "f32-subnormal" still means `0 < |x| < 2^−126`. Used by the
    /// oracle for `f64` tensors; for values that are `f32`s it equals `round`.
    pub fn round_f64(&self, x: f64) -> f64 {
        if x == 0.0 || x.is_nan() {
            return x;
        }
        let zero = 0.0f64.copysign(x);
        let a = x.abs();
        if a < F32_MIN_NORMAL {
            return zero;
        }
        let max = self.max_normal as f64;
        if a >= max {
            return max.copysign(x);
        }
        let emin = 1 - self.bias();
        let e = exponent_of(a).max(emin);
        // More than 52 mantissa bits is finer than f64 itself: a no-op, so cap it there.
        let step = e - self.man_bits.min(52) as i32;
        // Scaling by a power of two is exact in f64 for every reachable step, so the only
        // rounding is the ties-to-even one on the integer multiple of the step.
        let q = (a * pow2(-step)).round_ties_even();
        let r = (q * pow2(step)).min(max);
        if r < F32_MIN_NORMAL {
            return zero;
        }
        r.copysign(x)
    }

    /// Parse a format name (trimmed, case-insensitive).
    ///
    /// - names: `f16|half|fp16` → (5, 10, 65504); `bf16` → (8, 7, 3.3895314e38);
    ///   `f8|fp8|e4m3|f8e4m3` → (4, 3, 448); `bf8|e5m2|f8e5m2` → (5, 2, 57344);
    ///   `f6|fp6|e2m3` → (2, 3, 7.5); `e3m2` → (3, 2, 28); `f4|fp4|e2m1|nvf4` → (2, 1, 6);
    /// - any `fNeXmY` that parses as a [`ScaledFormat`] (≤ 8 bits, e.g. `f4e3m0`,
    ///   `f6e3m2`, `f8e4m3fnuz`) → its `(exp_bits, mant_bits, max_finite)`; a custom with a
    ///   non-IEEE bias suffix (`…b<bias>`) is rejected because this type is IEEE-biased;
    /// - generic IEEE `fXmYeZ` with `X = 1 + Y + Z`, `1 ≤ Z ≤ 8`, `Y ≤ 23` →
    ///   max = `(2 − 2^−Y)·2^bias` (the largest normal when the top exponent is reserved);
    /// - anything else → `None`.
    ///
    /// ```
    /// use rlx_ir::FloatFormat;
    /// assert_eq!(FloatFormat::parse(" FP8 "), Some(FloatFormat::ieee(4, 3, 448.0)));
    /// assert_eq!(FloatFormat::parse("f8m3e4"), Some(FloatFormat::ieee(4, 3, 240.0)));
    /// assert_eq!(FloatFormat::parse("f8m4e4"), None);
    /// ```
    pub fn parse(spec: &str) -> Option<FloatFormat> {
        let s = spec.trim().to_ascii_lowercase();
        let (e, m, max) = match s.as_str() {
            "f16" | "half" | "fp16" => (5, 10, 65504.0),
            "bf16" => (8, 7, 3.3895314e38),
            "f8" | "fp8" | "e4m3" | "f8e4m3" => (4, 3, 448.0),
            "bf8" | "e5m2" | "f8e5m2" => (5, 2, 57344.0),
            "f6" | "fp6" | "e2m3" => (2, 3, 7.5),
            "e3m2" => (3, 2, 28.0),
            "f4" | "fp4" | "e2m1" | "nvf4" => (2, 1, 6.0),
            _ => {
                if let Ok(f) = s.parse::<ScaledFormat>() {
                    let (e, m, bias) = f.fields();
                    if f.is_custom() && bias != (1 << (e - 1)) - 1 {
                        return None;
                    }
                    (e, m, f.max_finite())
                } else {
                    parse_generic_ieee(&s)?
                }
            }
        };
        Some(FloatFormat::ieee(e, m, max))
    }
}

/// `fXmYeZ` with `X = 1 + Y + Z`, `1 ≤ Z ≤ 8`, `Y ≤ 23`.
fn parse_generic_ieee(s: &str) -> Option<(u32, u32, f32)> {
    let rest = s.strip_prefix('f')?;
    let (total, rest) = rest.split_once('m')?;
    let (man, exp) = rest.split_once('e')?;
    let (total, man, exp) = (digits(total)?, digits(man)?, digits(exp)?);
    if !(1..=8).contains(&exp) || man > 23 || total != 1 + man + exp {
        return None;
    }
    let bias = (1i32 << (exp - 1)) - 1;
    let max = (2.0 - pow2(-(man as i32))) * pow2(bias);
    Some((exp, man, max as f32))
}

/// A non-empty run of ASCII digits as a small number (no sign, no spaces).
pub(crate) fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `⌊log2 a⌋` for a positive normal `f64`, read exactly from its exponent field.
pub(crate) fn exponent_of(a: f64) -> i32 {
    debug_assert!(a > 0.0 && a.is_normal());
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// `2^k` as an `f64`, exact for `−1022 ≤ k ≤ 1023`.
pub(crate) fn pow2(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}
