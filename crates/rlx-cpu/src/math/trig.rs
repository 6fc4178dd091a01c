//! Trigonometric lane kernels.
//!
//! sin/cos/tan work in `f64` lanes: `x = n·π/2 + r` with π/2 split into three parts of ≤ 33
//! significant bits (so `n·Pᵢ` is exact for |n| < 2²⁰), and Taylor polynomials on
//! `|r| ≤ π/4` whose truncation error (< 10⁻¹¹) is far below an `f32` ulp, so the result is
//! within about half an ulp after the final rounding. Arguments beyond [`TRIG_MAX`] (and
//! ±∞, NaN) take a scalar `f64` fallback. atan works in `f32` with a two-level reduction to
//! `|y| ≤ tan(π/8)` and a minimax polynomial.

use super::simd::{mad, mad64, sel};

/// Largest |x| the vector sin/cos/tan path handles (|n| stays below 2²⁰).
pub(crate) const TRIG_MAX: f32 = 1.0e6;

const TWO_OVER_PI: f64 = std::f64::consts::FRAC_2_PI;
const PIO2_1: f64 = 1.570_796_326_734_125_6;
const PIO2_2: f64 = 6.077_100_506_303_966e-11;
const PIO2_3: f64 = 2.022_266_248_795_950_6e-21;
/// 1.5·2⁵²: adding it rounds an `f64` to an integer kept in the low mantissa bits.
const SHIFTER64: f64 = 6_755_399_441_055_744.0;

// sin r = r + r³(S0 + S1 r² + …), cos r = 1 − r²/2 + r⁴(C0 + C1 r² + …): Taylor coefficients.
const S0: f64 = -1.0 / 6.0;
const S1: f64 = 1.0 / 120.0;
const S2: f64 = -1.0 / 5040.0;
const S3: f64 = 1.0 / 362_880.0;
const S4: f64 = -1.0 / 39_916_800.0;
const S5: f64 = 1.0 / 6_227_020_800.0;
const C0: f64 = 1.0 / 24.0;
const C1: f64 = -1.0 / 720.0;
const C2: f64 = 1.0 / 40320.0;
const C3: f64 = -1.0 / 3_628_800.0;
const C4: f64 = 1.0 / 479_001_600.0;
const C5: f64 = -1.0 / 87_178_291_200.0;

/// `(sin r, cos r, n mod 4)` where `x = n·π/2 + r`.
#[inline(always)]
fn sincos_reduced<const F: bool>(x: f32) -> (f64, f64, i64) {
    let xd = x as f64;
    let t = mad64::<F>(xd, TWO_OVER_PI, SHIFTER64);
    let n = t - SHIFTER64;
    let q = (t.to_bits() as i64) & 3;
    let r = ((xd - n * PIO2_1) - n * PIO2_2) - n * PIO2_3;
    let z = r * r;
    let s = mad64::<F>(z, S5, S4);
    let s = mad64::<F>(z, s, S3);
    let s = mad64::<F>(z, s, S2);
    let s = mad64::<F>(z, s, S1);
    let s = mad64::<F>(z, s, S0);
    let sin = mad64::<F>(r * z, s, r);
    let c = mad64::<F>(z, C5, C4);
    let c = mad64::<F>(z, c, C3);
    let c = mad64::<F>(z, c, C2);
    let c = mad64::<F>(z, c, C1);
    let c = mad64::<F>(z, c, C0);
    let cos = mad64::<F>(z * z, c, mad64::<F>(-0.5, z, 1.0));
    (sin, cos, q)
}

#[inline(always)]
fn sel64(c: bool, a: f64, b: f64) -> f64 {
    if c { a } else { b }
}

/// `sin x` for |x| ≤ [`TRIG_MAX`].
#[inline(always)]
pub(crate) fn sin<const F: bool>(x: f32) -> f32 {
    let (s, c, q) = sincos_reduced::<F>(x);
    let v = sel64(q & 1 == 0, s, c);
    let v = sel64(q & 2 == 0, v, -v);
    // ±0 in, ±0 out (the polynomial's last FMA would turn −0 into +0).
    sel(x == 0.0, x, v as f32)
}

/// `cos x` for |x| ≤ [`TRIG_MAX`].
#[inline(always)]
pub(crate) fn cos<const F: bool>(x: f32) -> f32 {
    let (s, c, q) = sincos_reduced::<F>(x);
    let v = sel64(q & 1 == 0, c, s);
    let v = sel64(((q + 1) & 2) == 0, v, -v);
    v as f32
}

/// `tan x` for |x| ≤ [`TRIG_MAX`].
#[inline(always)]
pub(crate) fn tan<const F: bool>(x: f32) -> f32 {
    let (s, c, q) = sincos_reduced::<F>(x);
    let odd = q & 1 == 1;
    sel(x == 0.0, x, (sel64(odd, -c, s) / sel64(odd, s, c)) as f32)
}

/// Whether the vector sin/cos/tan path leaves `x` to the scalar fallback (also ±∞ and NaN,
/// hence the negated comparison).
#[inline(always)]
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub(crate) fn trig_needs_slow(x: f32) -> bool {
    !(x.abs() <= TRIG_MAX)
}

// atan y = y + y³·P(y²) on |y| ≤ tan(π/8) (minimax, relative error 3·10⁻⁹).
const A0: f32 = -0.333_333_3;
const A1: f32 = 0.199_995_47;
const A2: f32 = -0.142_641_32;
const A3: f32 = 0.107_453_53;
const A4: f32 = -0.064_566_01;
const TAN_PI_8: f32 = 0.414_213_57;
const TAN_3PI_8: f32 = 2.414_213_5;
const PIO2_HI: f32 = std::f32::consts::FRAC_PI_2;
const PIO2_LO: f32 = -4.371_139e-8;
const PIO4_HI: f32 = std::f32::consts::FRAC_PI_4;
const PIO4_LO: f32 = -2.185_569_4e-8;

/// `atan x`.
#[inline(always)]
pub(crate) fn atan<const F: bool>(x: f32) -> f32 {
    let t = x.abs();
    let big = t > TAN_3PI_8;
    let mid = t > TAN_PI_8;
    // atan t = base + atan(num/den): π/2 + atan(−1/t), π/4 + atan((t−1)/(t+1)), or atan t.
    let num = sel(big, -1.0, sel(mid, t - 1.0, t));
    let den = sel(big, t, sel(mid, t + 1.0, 1.0));
    let base_hi = sel(big, PIO2_HI, sel(mid, PIO4_HI, 0.0));
    let base_lo = sel(big, PIO2_LO, sel(mid, PIO4_LO, 0.0));
    let y = num / den;
    let z = y * y;
    let p = mad::<F>(z, A4, A3);
    let p = mad::<F>(z, p, A2);
    let p = mad::<F>(z, p, A1);
    let p = mad::<F>(z, p, A0);
    let v = base_hi + (y + mad::<F>(y * z, p, base_lo));
    v.copysign(x)
}
