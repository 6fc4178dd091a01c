//! Lane kernels of the composite functions: tanh, sigmoid, erf/erfc, GELU (both forms),
//! SiLU, softplus, Mish. Each is written so that no step cancels catastrophically; where an
//! exponential's argument is itself a rounded product (GELU), the argument is carried as an
//! unevaluated sum `hi + lo` so its rounding does not grow into the result.

use super::expo::{exp, exp_parts, expm1, log1p_unit};
use super::simd::{clamp, mad, sel, two_prod, two_sum};

/// `tanh x = expm1(2|x|) / (expm1(2|x|) + 2)` with the sign of `x`.
#[inline(always)]
pub(crate) fn tanh<const F: bool>(x: f32) -> f32 {
    // tanh(10) rounds to 1 in f32; clamping also maps ±∞ to ±1.
    let a = sel(x.abs() > 10.0, 10.0, x.abs());
    let e = expm1::<F>(a + a);
    (e / (e + 2.0)).copysign(x)
}

/// `m·σ(hi + lo)`, `σ(v) = 1/(1 + e⁻ᵛ)`: the exponential is only evaluated at non-positive
/// arguments (no overflow, no cancellation), and `m` is folded in before the final power-of-
/// two scaling so that tiny products are rounded once.
#[inline(always)]
pub(crate) fn sigmoid_dd_mul<const F: bool>(hi: f32, lo: f32, m: f32) -> f32 {
    let neg = hi < 0.0;
    let (p, s1, s2) = exp_parts::<F>(sel(neg, hi, -hi), sel(neg, lo, -lo));
    let d = 1.0 + (p * s1) * s2;
    // neg: m·e/(1 + e) = ((m·p/d)·s1)·s2; otherwise m/(1 + e). One division for both.
    let q = sel(neg, m * p, m) / d;
    sel(neg, (q * s1) * s2, q)
}

/// `σ(x)`.
#[inline(always)]
pub(crate) fn sigmoid<const F: bool>(x: f32) -> f32 {
    sigmoid_dd_mul::<F>(x, 0.0, 1.0)
}

/// `x·σ(x)` (−0 at −∞).
#[inline(always)]
pub(crate) fn silu<const F: bool>(x: f32) -> f32 {
    sel(x == f32::NEG_INFINITY, -0.0, sigmoid_dd_mul::<F>(x, 0.0, x))
}

/// `ln(1 + eˣ) = max(x, 0) + ln(1 + e^−|x|)`.
#[inline(always)]
pub(crate) fn softplus<const F: bool>(x: f32) -> f32 {
    sel(x > 0.0, x, 0.0) + log1p_unit::<F>(exp::<F>(-x.abs()))
}

/// `ln σ(x) = min(x, 0) − ln(1 + e^−|x|)`.
#[inline(always)]
pub(crate) fn log_sigmoid<const F: bool>(x: f32) -> f32 {
    sel(x < 0.0, x, 0.0) - log1p_unit::<F>(exp::<F>(-x.abs()))
}

/// `x·tanh(softplus x)`, via `tanh(ln(1+e)) = n/(n+2)` with `n = e(e+2)`, `e = eˣ`: exact
/// algebra, and no cancellation for negative x.
#[inline(always)]
pub(crate) fn mish<const F: bool>(x: f32) -> f32 {
    // n/(n+2) is 1 in f32 from x ≈ 9 on; clamping keeps n finite.
    let (p, s1, s2) = exp_parts::<F>(sel(x > 20.0, 20.0, x), 0.0);
    let e = (p * s1) * s2;
    let n = e * (e + 2.0);
    // x·n/(n+2) = x·e·(e+2)/(n+2), with e's scaling applied last (tiny results round once).
    let k = x * ((e + 2.0) / (n + 2.0));
    let v = sel(x > 20.0, x, ((p * k) * s1) * s2);
    sel(x == f32::NEG_INFINITY, -0.0, v)
}

// erf z = z·E(z²) on |z| < ERF_SMALL (minimax in z², relative error 1.4·10⁻⁹).
const ERF_SMALL: f32 = 0.75;
const E0_HI: f32 = std::f32::consts::FRAC_2_SQRT_PI;
const E0_LO: f32 = -5.863_538e-8;
const E1: f32 = -0.376_126_2;
const E2: f32 = 0.112_833_77;
const E3: f32 = -0.026_834_624;
const E4: f32 = 0.005_114_345_3;
const E5: f32 = -0.000_674_951_24;

#[inline(always)]
fn erf_small<const F: bool>(z: f32) -> f32 {
    let w = z * z;
    let p = mad::<F>(w, E5, E4);
    let p = mad::<F>(w, p, E3);
    let p = mad::<F>(w, p, E2);
    let p = mad::<F>(w, p, E1);
    // E0 (≈ 2/√π) is split so that its rounding does not add half an ulp.
    mad::<F>(z, E0_HI, z * mad::<F>(w, p, E0_LO))
}

// erfc a = t·exp(−a² + P(t − ½)), t = 2/(2 + a), a ∈ [0.5, 10.5]: a degree-9 minimax P
// (absolute error 1.5·10⁻⁹, i.e. that relative error in erfc). P's constant term is split
// into hi + lo because it sits next to −a² in the exponent.
const ERFC_SMALL: f32 = 0.5;
const ERFC_MAX: f32 = 10.5;
const P0_HI: f32 = -0.671_794_06;
const P0_LO: f32 = -2.777_248_5e-8;
const P1: f32 = 1.345_286_4;
const P2: f32 = 0.189_373_57;
const P3: f32 = -0.375_156_55;
const P4: f32 = -0.157_993_76;
const P5: f32 = 0.281_960_96;
const P6: f32 = 0.113_567_48;
const P7: f32 = -0.290_806_8;
const P8: f32 = -0.051_781_89;
const P9: f32 = 0.252_995_4;

/// `m·erfc(a + al)` for `a ≥ 0` (`a` clamped to [`ERFC_MAX`], beyond which erfc underflows).
#[inline(always)]
fn erfc_pos_mul<const F: bool>(a: f32, al: f32, m: f32) -> f32 {
    let big = a > ERFC_MAX;
    let a = sel(big, ERFC_MAX, a);
    let al = sel(big, 0.0, al);
    let (d, de) = two_sum(2.0, a);
    let t = 2.0 / d;
    // t enters both as a factor and through P: its rounding error t_lo would cost ~1 ulp, so
    // it is recovered (t_lo = (2 − t·d − t·de)/d) and folded into the exponent below, using
    // erfc = t·e^(…+P(t)) ⇒ d(ln erfc)/dt = 1/t + P'(t) ≈ d/2 + P1.
    let (td, tde) = two_prod::<F>(t, d);
    let t_lo = (((2.0 - td) - tde) - t * de) / d;
    let u = t - 0.5;
    let p = mad::<F>(u, P9, P8);
    let p = mad::<F>(u, p, P7);
    let p = mad::<F>(u, p, P6);
    let p = mad::<F>(u, p, P5);
    let p = mad::<F>(u, p, P4);
    let p = mad::<F>(u, p, P3);
    let p = mad::<F>(u, p, P2);
    let p = mad::<F>(u, p, P1) * u;
    let (a2h, a2l) = two_prod::<F>(a, a);
    let a2l = mad::<F>(2.0 * a, al, a2l);
    // exponent = −a² + P as hi + lo, with |lo| tiny (exp's reduction assumes that).
    let (c, ce) = two_sum(P0_HI, p);
    let (sh, sl) = two_sum(-a2h, c);
    let corr = t_lo * (0.5 * d + P1);
    let (q, s1, s2) = exp_parts::<F>(sh, sl + (((ce + P0_LO) - a2l) + corr));
    // Past the clamp erfc is 0 (also when a huge m comes with it, as in GELU at −∞·…).
    sel(big, 0.0 * m, ((q * (m * t)) * s1) * s2)
}

/// `erf x`.
#[inline(always)]
pub(crate) fn erf<const F: bool>(x: f32) -> f32 {
    let a = x.abs();
    let large = (1.0 - erfc_pos_mul::<F>(a, 0.0, 1.0)).copysign(x);
    sel(a < ERF_SMALL, erf_small::<F>(x), large)
}

/// `m·erfc(zh + zl)` for any sign (`zl` a small correction of `zh`).
#[inline(always)]
pub(crate) fn erfc_dd_mul<const F: bool>(zh: f32, zl: f32, m: f32) -> f32 {
    let neg = zh < 0.0;
    // erfc(−a) = 2 − erfc(a) ≥ 1 needs no subnormal care: multiply by m afterwards there.
    let e = erfc_pos_mul::<F>(zh.abs(), sel(neg, -zl, zl), sel(neg, 1.0, m));
    let large = sel(neg, m * (2.0 - e), e);
    sel(zh.abs() < ERFC_SMALL, m * (1.0 - erf_small::<F>(zh)), large)
}

const FRAC_1_SQRT2_HI: f32 = 0.707_106_77;
const FRAC_1_SQRT2_LO: f32 = 1.210_161_7e-8;

/// Exact GELU `x·Φ(x) = ½x·erfc(−x/√2)` (−0 at −∞).
#[inline(always)]
pub(crate) fn gelu<const F: bool>(x: f32) -> f32 {
    // |x| > 16 is in the saturated range (Φ = 1 or x·Φ underflows); the clamp keeps the
    // error-free products finite.
    let xc = clamp(x, -16.0, 16.0);
    let (zh, zl) = two_prod::<F>(xc, -FRAC_1_SQRT2_HI);
    let zl = mad::<F>(xc, -FRAC_1_SQRT2_LO, zl);
    let v = erfc_dd_mul::<F>(zh, zl, 0.5 * x);
    sel(x == f32::NEG_INFINITY, -0.0, v)
}

// 2·√(2/π) and 2·√(2/π)·0.044715 as hi + lo pairs.
const GC1_HI: f32 = 1.595_769_2;
const GC1_LO: f32 = -4.534_068e-8;
const GC3_HI: f32 = 0.071_354_814;
const GC3_LO: f32 = 2.398_832_5e-9;

/// Tanh-form GELU `½x(1 + tanh u) = x·σ(2u)`, `2u = 2√(2/π)(x + 0.044715x³)` carried as
/// `hi + lo` (−0 at −∞).
#[inline(always)]
pub(crate) fn gelu_tanh<const F: bool>(x: f32) -> f32 {
    // σ(2u) is 1 above 12 and x·σ(2u) underflows below −12.
    let xc = clamp(x, -12.0, 12.0);
    let (x2h, x2l) = two_prod::<F>(xc, xc);
    let (th, tl) = two_prod::<F>(GC3_HI, x2h);
    let tl = mad::<F>(GC3_HI, x2l, mad::<F>(GC3_LO, x2h, tl));
    let (wh, wl) = two_sum(GC1_HI, th);
    let wl = wl + (tl + GC1_LO);
    let (ah, al) = two_prod::<F>(xc, wh);
    let al = mad::<F>(xc, wl, al);
    let v = sigmoid_dd_mul::<F>(ah, al, x);
    sel(x < -12.0, -0.0, v)
}

/// `(x + 3).clamp(0, 6) / 6`.
#[inline(always)]
pub(crate) fn hard_sigmoid(x: f32) -> f32 {
    clamp(x + 3.0, 0.0, 6.0) / 6.0
}

/// `x·hard_sigmoid(x)` (−0 at −∞).
#[inline(always)]
pub(crate) fn hard_swish(x: f32) -> f32 {
    sel(x == f32::NEG_INFINITY, -0.0, x * hard_sigmoid(x))
}
