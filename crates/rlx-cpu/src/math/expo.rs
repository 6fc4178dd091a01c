//! Exponential and logarithm lane kernels (`f32`).
//!
//! exp: `x = n·ln2 + r` with `|r| ≤ ln2/2` (Cody–Waite split of ln 2 so that `n·LN2_HI` is
//! exact), `eʳ = 1 + r + r²·q(r)` with a degree-5 minimax `q` (relative error 2·10⁻⁹), and
//! the result scaled by `2ⁿ` in two steps so that subnormal results are rounded once.
//! log: `x = 2ᵏ·m` with `m ∈ [√½, √2)`, `f = m − 1`, `s = f/(2+f)`,
//! `ln(1+f) = f − f²/2 + s·(f²/2 + R(s²))` with a minimax `R` (relative error 4·10⁻¹⁰).

use super::simd::{clamp, mad, sel};

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split: `LN2_HI` has 9 significant bits, so `n·LN2_HI` is exact for |n| < 2¹⁵.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5·2²³: adding it rounds a float of magnitude < 2²² to an integer held in the low bits.
const SHIFTER: f32 = 12_582_912.0;

// e^r − 1 − r = r²·(Q0 + Q1 r + … + Q5 r⁵) on |r| ≤ ln2/2.
const Q0: f32 = 0.5;
const Q1: f32 = 0.166_666_67;
const Q2: f32 = 0.041_666_467;
const Q3: f32 = 0.008_333_361;
const Q4: f32 = 0.001_393_359_7;
const Q5: f32 = 0.000_198_577_95;

/// Round `x·log₂e` to an integer: `(n as f32, n as i32)`.
#[inline(always)]
fn reduce<const F: bool>(x: f32) -> (f32, i32) {
    let t = mad::<F>(x, LOG2E, SHIFTER);
    (
        t - SHIFTER,
        (t.to_bits() as i32).wrapping_sub(SHIFTER.to_bits() as i32),
    )
}

/// `eʳ − 1` for `|r| ≲ ln2/2`.
#[inline(always)]
fn expm1_poly<const F: bool>(r: f32) -> f32 {
    let q = mad::<F>(r, Q5, Q4);
    let q = mad::<F>(r, q, Q3);
    let q = mad::<F>(r, q, Q2);
    let q = mad::<F>(r, q, Q1);
    let q = mad::<F>(r, q, Q0);
    mad::<F>(r * r, q, r)
}

/// `2ⁿ` for `n ∈ [−126, 127]`.
#[inline(always)]
pub(crate) fn pow2i(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) << 23) as u32)
}

/// `e^(x + lo) = p·2ⁿ` as `(p, n)` with `p ∈ [½√2, √2]`, for `x ∈ [−120, 89]` (no clamp:
/// the caller bounds `x`) and `lo` a small correction of `x`.
#[inline(always)]
pub(crate) fn exp_mant<const F: bool>(x: f32, lo: f32) -> (f32, i32) {
    let (n, ni) = reduce::<F>(x);
    let r = mad::<F>(-n, LN2_HI, x);
    let r = mad::<F>(-n, LN2_LO, r) + lo;
    (expm1_poly::<F>(r) + 1.0, ni)
}

/// `e^(hi + lo) = p·s1·s2` with `p ∈ [½√2, √2]` and `s1`, `s2` powers of two, where `lo` is a
/// small correction of `hi` (|lo| ≲ ulp(hi)). Keeping the factors apart lets a caller fold
/// a multiplier into `p` before the last scaling, so that a product `m·eˣ` that lands in the
/// subnormal range is rounded once instead of after `eˣ` already lost bits.
#[inline(always)]
pub(crate) fn exp_parts<const F: bool>(hi: f32, lo: f32) -> (f32, f32, f32) {
    // Beyond this range eˣ is ∞, or so small that even a multiplier near 2¹⁰ (a GELU/SiLU
    // argument) leaves 0; clamping keeps both scale factors normal.
    let x = clamp(hi, -120.0, 89.0);
    let (p, ni) = exp_mant::<F>(x, lo);
    // 2ⁿ = 2^(n/2)·2^(n − n/2): both factors are normal for n ∈ [−174, 128], and the second
    // product is the only one that rounds (also into the subnormal range).
    let n1 = ni >> 1;
    // Below the clamp make eˣ exactly 0, so that no multiplier can revive the clamped value.
    (sel(hi < -120.0, 0.0, p), pow2i(n1), pow2i(ni - n1))
}

/// `e^(hi + lo)` (see [`exp_parts`]); `lo = 0` gives `eˣ`.
#[inline(always)]
pub(crate) fn exp_dd<const F: bool>(hi: f32, lo: f32) -> f32 {
    let (p, s1, s2) = exp_parts::<F>(hi, lo);
    (p * s1) * s2
}

/// `eˣ`.
#[inline(always)]
pub(crate) fn exp<const F: bool>(x: f32) -> f32 {
    exp_dd::<F>(x, 0.0)
}

/// `eˣ − 1`, accurate near 0. Inputs above 88 are clamped (callers stay far below).
#[inline(always)]
pub(crate) fn expm1<const F: bool>(x: f32) -> f32 {
    // Below −30 the result is −1 after rounding.
    let xc = clamp(x, -30.0, 88.0);
    let (n, ni) = reduce::<F>(xc);
    let r = mad::<F>(-n, LN2_HI, xc);
    let r = mad::<F>(-n, LN2_LO, r);
    let s = pow2i(ni);
    // eˣ − 1 = 2ⁿ(eʳ − 1) + (2ⁿ − 1); 2ⁿ − 1 is exact for |n| ≤ 24, and beyond that its
    // rounding is far below the result's ulp.
    mad::<F>(s, expm1_poly::<F>(r), s - 1.0)
}

// ln(1+f) = f − f²/2 + s(f²/2 + z(R0 + R1 z + R2 z² + R3 z³)), z = s², s = f/(2+f).
const R0: f32 = 0.666_666_7;
const R1: f32 = 0.400_003_14;
const R2: f32 = 0.285_320_9;
const R3: f32 = 0.237_771_97;
/// √½ as the bits of an `f32` (0x3f3504f3): the lower end of the mantissa interval.
const SQRT_HALF_BITS: i32 = 0x3f35_04f3;

/// `ln x` for positive, finite, normal `x` (no special-value handling).
#[inline(always)]
fn log_core<const F: bool>(x: f32, k_adjust: i32) -> f32 {
    // Shift the exponent boundary from 1 to √½ so that m lands in [√½, √2).
    let ix = (x.to_bits() as i32).wrapping_add(0x3f80_0000 - SQRT_HALF_BITS);
    let k = (ix >> 23) - 127 + k_adjust;
    let m = f32::from_bits(((ix & 0x007f_ffff) + SQRT_HALF_BITS) as u32);
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let r = mad::<F>(z, R3, R2);
    let r = mad::<F>(z, r, R1);
    let r = mad::<F>(z, r, R0) * z;
    let hfsq = 0.5 * f * f;
    let kf = k as f32;
    let t = mad::<F>(s, hfsq + r, kf * LN2_LO) - hfsq + f;
    mad::<F>(kf, LN2_HI, t)
}

/// `ln x`: NaN for x < 0, −∞ at ±0, +∞ at +∞; subnormal inputs are exact-scaled first.
#[inline(always)]
pub(crate) fn log<const F: bool>(x: f32) -> f32 {
    let tiny = x < f32::MIN_POSITIVE;
    let xs = sel(tiny, x * 8_388_608.0, x);
    let v = log_core::<F>(xs, if tiny { -23 } else { 0 });
    let v = sel(x == f32::INFINITY, x, v);
    let v = sel(x < 0.0, f32::NAN, v);
    let v = sel(x == 0.0, f32::NEG_INFINITY, v);
    sel(x.is_nan(), x, v)
}

/// `ln(1 + e)` for `e ∈ [0, 1]` (the argument of softplus-like functions).
#[inline(always)]
pub(crate) fn log1p_unit<const F: bool>(e: f32) -> f32 {
    let u = 1.0 + e;
    // u − 1 is exact here; c is what the rounding of 1 + e lost, and ln(u + c) ≈ ln u + c/u.
    let c = e - (u - 1.0);
    log_core::<F>(u, 0) + c / u
}
