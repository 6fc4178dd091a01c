//! Lane kernels of the composite functions: tanh, sigmoid, erf, GELU (both forms),
//! SiLU, softplus, Mish. Each is written so that no step cancels catastrophically; where an
//! exponential's argument is itself a rounded product (GELU), the argument is carried as an
//! unevaluated sum `hi + lo` so its rounding does not grow into the result.

use super::expo::{exp, exp_mant, exp_parts, expm1, log1p_unit};
use super::simd::{clamp, mad, mad64, sel, two_prod, two_sum};

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

// The Gaussian tail through its scaled form: Φ(−a) = e^(−a²/2)·M(a) with M(a) =
// ½·erfcx(a/√2) (Φ(−a)/φ(a) up to 1/√(2π)): M falls smoothly from ½ at 0 like 1/(a√(2π)),
// and a rational function of degrees 4/5 fits it on [0, 16] to a relative error of
// 7.1·10⁻⁹ (Lawson-weighted least squares against f64 erfcx, done once at development
// time). It is evaluated in f64 (then rounded once): in f32 the nine Horner steps alone
// would add up to 5 ulp.
pub(crate) const MP: [f64; 5] = [
    0.500_000_003_538_417_2,
    0.441_111_884_614_508,
    0.185_331_654_513_189_6,
    0.041_342_550_845_268_2,
    0.004_222_257_742_586_323,
];
/// `Q1..=Q5` (`Q0 = 1`).
pub(crate) const MQ: [f64; 5] = [
    1.680_108_827_093_342_2,
    1.211_190_616_618_024_4,
    0.475_007_123_027_391_4,
    0.103_635_944_527_397_91,
    0.010_583_532_814_844_848,
];

// erf's tail factor M(c√2) = ½·erfcx(c) as a rational function of c itself, of degrees
// 2/3: erf only needs it where its error is damped by erfc(c)/erf(c) (c ≥ 0.75, where
// that ratio is ≤ 0.41 and falls like e^(−c²)), so the fit (Lawson-weighted least
// squares against f64 erfcx, done once at development time) minimizes the error it adds
// to erf in ulps, erfc(c)·|ΔM/M|/ulp(erf c): at most 0.016 ulp on [0.75, 9.3]. Four
// f64 products fewer per lane than GELU's 4/5 fit, and no scaling of c by √2.
pub(crate) const EP: [f64; 3] = [
    0.500_212_048_621_194_4,
    0.364_162_656_271_839_5,
    0.111_857_679_843_091_89,
];
/// `Q1..=Q3` (`Q0 = 1`).
pub(crate) const EQ: [f64; 3] = [
    1.859_851_510_162_006_3,
    1.311_654_424_135_287_7,
    0.394_770_410_175_267_54,
];

/// `P(a)/Q(a)` for the coefficients `(mp, mq)` (`mq` from degree 1, `Q0 = 1`) by Horner
/// in f64 from `fma(a, P_top, P_top−1)` and `fma(a, Q_top, Q_top−1)`, rounded once to
/// f32: [`MP`]/[`MQ`] give GELU's `M(a) = Φ(−a)·e^(a²/2)` for `a ∈ [0, 16]`, which GELU
/// needs to 0.1 ulp for negative x (f32 Horner: up to 5.7 ulp, measured). Erf's [`EP`]/[`EQ`] run in f32 ([`mills32`]). This f64 evaluation (two 8-double
/// halves) is about 0.36 of GELU's 0.87 ns per element on one AVX-512 thread.
#[inline(always)]
fn mills<const F: bool, const NP: usize, const NQ: usize>(
    a: f64,
    mp: &[f64; NP],
    mq: &[f64; NQ],
) -> f32 {
    let mut p = mp[NP - 1];
    for k in (0..NP - 1).rev() {
        p = mad64::<F>(a, p, mp[k]);
    }
    let mut q = mq[NQ - 1];
    for k in (0..NQ - 1).rev() {
        q = mad64::<F>(a, q, mq[k]);
    }
    let q = mad64::<F>(a, q, 1.0);
    (p / q) as f32
}

/// erf's `M(c√2) = P(c)/Q(c)` ([`EP`]/[`EQ`], rounded to f32) by Horner in f32 and one
/// f32 division: erf only uses it where its error is damped by `erfc(c)/erf(c)` (≤ 0.41
/// at c = 0.75, falling like e^(−c²)), so the f32 rounding of the six steps costs erf at
/// most ~0.5 ulp more than the f64 evaluation, and saves the widening to two f64 halves
/// and their two f64 divisions.
#[inline(always)]
fn mills32<const F: bool>(c: f32) -> f32 {
    let p = mad::<F>(c, EP32[2], EP32[1]);
    let p = mad::<F>(c, p, EP32[0]);
    let q = mad::<F>(c, EQ32[2], EQ32[1]);
    let q = mad::<F>(c, q, EQ32[0]);
    let q = mad::<F>(c, q, 1.0);
    p / q
}

/// [`EP`] rounded to f32 (what [`mills32`] and the JIT's erf read).
pub(crate) const EP32: [f32; 3] = [EP[0] as f32, EP[1] as f32, EP[2] as f32];
/// [`EQ`] rounded to f32.
pub(crate) const EQ32: [f32; 3] = [EQ[0] as f32, EQ[1] as f32, EQ[2] as f32];

/// `|x|` clamped at GELU's and erf's limits: past `GELU_MAX` (c²/2 > 120) x·Φ(x) is −0 or
/// x; past `ERF_MAX` (c² > 86.5, so that e^(−c²) = p·2ⁿ with a normal 2ⁿ) erf rounds to ±1.
pub(crate) const GELU_MAX: f32 = 15.49;
pub(crate) const ERF_MAX: f32 = 9.3;

/// `(c, clamped, h, l)` with `c = min(|x|, max)` and `h + l = c²` exactly (at c = 13,
/// rounding c² alone would cost tens of ulp in e^(−c²/2)).
#[inline(always)]
fn clamped_square<const F: bool>(x: f32, max: f32) -> (f32, bool, f32, f32) {
    let a = x.abs();
    let big = a > max;
    let c = sel(big, max, a);
    let (h, l) = two_prod::<F>(c, c);
    (c, big, h, l)
}

/// `erf x`: the small-argument polynomial below 0.75 in magnitude; elsewhere
/// `1 − erfc|x|` with the sign of `x`, `erfc c = 2Φ(−c√2) = 2e^(−c²)·M(c√2)` (M by
/// [`EP`]/[`EQ`]).
#[inline(always)]
pub(crate) fn erf<const F: bool>(x: f32) -> f32 {
    let (c, _, h, l) = clamped_square::<F>(x, ERF_MAX);
    let (p, n) = exp_mant::<F>(-h, -l);
    let m = mills32::<F>(c);
    // erfc|x| = (p·2ⁿ⁺¹)·M (≤ 10⁻³⁹ at the clamp: 1 − that is 1), the scaling added to
    // p's exponent field (n ≥ −125: p·2ⁿ⁺¹ is normal, the exact product), so that the
    // one rounded product and the subtraction leave the multiply pipes a product and an
    // FMA fewer than (p·M)·2ⁿ and fma(−2, that, 1), with the same bits
    let p = f32::from_bits((p.to_bits() as i32).wrapping_add((n + 1) << 23) as u32);
    let large = (1.0 - p * m).copysign(x);
    sel(x.abs() < ERF_SMALL, erf_small::<F>(x), large)
}

/// GELU's scaling `2ⁿ` (`n ∈ [−174, 0]`) is applied as `2^(n+64)`, added to the exponent
/// field of `p` (`p·2^(n+64)` stays normal), and then `2⁻⁶⁴` as the last product, which
/// rounds once (into the subnormals): one product where two normal factors
/// `2^(n/2)·2^(n−n/2)` took two and five integer ops.
pub(crate) const GELU_BIAS: i32 = 64;
pub(crate) const GELU_UNBIAS: f32 = f32::from_bits(((127 - GELU_BIAS) as u32) << 23);

/// Exact GELU `x·Φ(x)` (−0 at −∞): with `v = Φ(−|x|) = e^(−x²/2)·M(|x|)`, `x·v` for
/// negative x (the multiplier folded in before the last power-of-two scaling, so that a
/// subnormal result is rounded once) and `x·(1 − v)` otherwise (v ≤ ½: no cancellation).
#[inline(always)]
pub(crate) fn gelu<const F: bool>(x: f32) -> f32 {
    let a = x.abs();
    let big = a > GELU_MAX;
    let c = sel(big, GELU_MAX, a);
    // h + l = −c²/2 exactly (the product by −½ is exact: one product fewer than
    // squaring and halving both parts)
    let (h, l) = two_prod::<F>(c, c * -0.5);
    let (p, n) = exp_mant::<F>(h, l);
    // p·2^(n+64) through the exponent field: p ∈ [½√2, √2] and n + 64 ≥ −110 keep it
    // normal, so this is the exact product
    let p = f32::from_bits((p.to_bits() as i32).wrapping_add((n + GELU_BIAS) << 23) as u32);
    // v = 0 past the clamp
    let p = sel(big, 0.0, p);
    let m = mills::<F, 5, 5>(c as f64, &MP, &MQ);
    let neg = x < 0.0;
    // p·(x·M) (≥ 2⁻¹¹⁶: positive x at the clamp) rounds as a normal number; the product
    // by 2⁻⁶⁴ is exact but where the result is subnormal
    let v = (p * (sel(neg, x, 1.0) * m)) * GELU_UNBIAS;
    let y = sel(neg, v, x * (1.0 - v));
    sel(x == f32::NEG_INFINITY, -0.0, y)
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
