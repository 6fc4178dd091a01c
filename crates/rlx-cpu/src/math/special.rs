//! Lane kernels of the composite functions: tanh, sigmoid, erf, GELU (both forms),
//! SiLU, softplus, Mish. Each is written so that no step cancels catastrophically; where an
//! exponential's argument is itself a rounded product (GELU), the argument is carried as an
//! unevaluated sum `hi + lo` so its rounding does not grow into the result.

use super::erf_tables::{ERF_C0, ERF_D, ERF_LO, GELU_M, GELU_PHI};
use super::expo::{exp, exp_mant, exp_parts, expm1, log1p_unit};
use super::simd::{Look16, clamp, mad, sel, two_prod, two_sum};

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

/// 1.5·2²³: adding it rounds a float of magnitude < 2²² to an integer held in the low
/// mantissa bits, whose low four bits are the 16-entry table index of [`table_poly`].
const SHIFTER: f32 = 12_582_912.0;

/// The polynomial of interval `round(s) mod 16` of `tab` (row `r`: the coefficients of `tʳ`)
/// at `t`, with `j = s + SHIFTER` (whose low four mantissa bits are that interval): Horner
/// from `fma(t, c_top, c_top−1)`. The JIT reads each row with one `vpermps` on `j`'s bits.
#[inline(always)]
fn table_poly<const F: bool, const N: usize>(tab: &[[f32; 16]; N], j: f32, t: f32) -> f32 {
    let k = (j.to_bits() & 15) as usize;
    let mut p = tab[N - 1][k];
    for r in (0..N - 1).rev() {
        p = mad::<F>(t, p, tab[r][k]);
    }
    p
}

/// GELU's tail factor `M(c) = Φ(−c)·e^(c²/2)` for `c ∈ [0, 15.5]` ([`GELU_M`]: the
/// interval `k = round(c)`, `t = c − k`, exact): a relative error within about 1.3 ulp
/// (0.84 from the polynomial with its `f32` coefficients, half an ulp from the last
/// rounding). It replaced a degree-4/5 rational function evaluated in `f64` (two 8-double
/// halves and two `f64` divisions per 16 lanes, about 0.4 of GELU's time).
#[inline(always)]
fn mills<const F: bool>(c: f32) -> f32 {
    let j = c + SHIFTER;
    let t = c - (j - SHIFTER);
    table_poly::<F, 8>(&GELU_M, j, t)
}

/// `erf c` for `c ∈ [0, 4.7]` ([`ERF_D`]: the interval `k = round(3.2c)`, the variable
/// `t = c − 0.3125k`, both exact as GELU's): measured within 1.42 ulp (0.48 from the
/// polynomials, half an ulp from the last rounding); no exponential, no division, no
/// separate small-argument polynomial.
#[inline(always)]
fn erf_pos<const F: bool>(c: f32) -> f32 {
    let (j, t) = erf_args::<F>(c);
    let k = (j.to_bits() & 15) as usize;
    erf_join::<F>(table_poly::<F, 6>(&ERF_D, j, t), ERF_LO[k], ERF_C0[k], t)
}

/// `t·p1 + (t·lo + c0)`: the last Horner step with `t`'s low coefficient folded in
/// (`lo` and `c0` of the lane's interval; `lo = 0` but in the first interval).
#[inline(always)]
fn erf_join<const F: bool>(p1: f32, lo: f32, c0: f32, t: f32) -> f32 {
    mad::<F>(t, p1, mad::<F>(t, lo, c0))
}

/// [`ERF_D`]'s `(j, t)` of `c ∈ [0, 4.7]` (or NaN): `j = c·3.2 + SHIFTER` holds the
/// interval in its low bits, `t = c − 0.3125·(j − SHIFTER)`.
#[inline(always)]
fn erf_args<const F: bool>(c: f32) -> (f32, f32) {
    let j = mad::<F>(c, ERF_SCALE, SHIFTER);
    (j, mad::<F>(j - SHIFTER, ERF_STEP, c))
}

/// [`ERF_D`]'s interval is `round(3.2c)`, its centre `0.3125k` (five sixteenths).
pub(crate) const ERF_SCALE: f32 = 3.2;
pub(crate) const ERF_STEP: f32 = -0.3125;

/// [`table_poly`] on 16 lanes with the rows read by `L`: the same operations lane by lane.
///
/// # Safety
/// As [`Look16::look`] of `L`.
#[inline(always)]
unsafe fn table_poly16<const F: bool, const N: usize, L: Look16>(
    tab: &[[f32; 16]; N],
    j: &[f32; 16],
    t: &[f32; 16],
) -> [f32; 16] {
    // SAFETY: the caller's contract.
    let mut p = unsafe { L::look(&tab[N - 1], j) };
    for r in (0..N - 1).rev() {
        // SAFETY: as above.
        let c = unsafe { L::look(&tab[r], j) };
        for i in 0..16 {
            p[i] = mad::<F>(t[i], p[i], c[i]);
        }
    }
    p
}

/// [`gelu`] of 16 lanes, the tables read by permutes instead of 16 indexed loads (the
/// same bits): the Φ table for every lane, and only when a lane lies below [`GELU_LO`]
/// (rare for activations) the tail kernel for all sixteen, blended in.
///
/// # Safety
/// As [`Look16::look`] of `L`.
#[inline(always)]
pub(crate) unsafe fn gelu16<const F: bool, L: Look16>(x: &[f32; 16]) -> [f32; 16] {
    let (mut j, mut t) = ([0f32; 16], [0f32; 16]);
    let mut low = false;
    for i in 0..16 {
        (j[i], t[i]) = phi_args::<F>(x[i]);
        // `|=` over all lanes (no early exit): one compare and mask test
        low |= x[i] < GELU_LO;
    }
    // SAFETY: the caller's contract.
    let p = unsafe { table_poly16::<F, 8, L>(&GELU_PHI, &j, &t) };
    let mut y = [0f32; 16];
    for i in 0..16 {
        y[i] = gelu_phi_with(x[i], p[i]);
    }
    if low {
        // SAFETY: the caller's contract.
        let z = unsafe { gelu_tail16::<F, L>(x) };
        for i in 0..16 {
            y[i] = sel(x[i] < GELU_LO, z[i], y[i]);
        }
    }
    y
}

/// [`gelu_tail`] of 16 lanes, the table read by permutes (the same bits).
///
/// # Safety
/// As [`Look16::look`] of `L`.
#[inline(always)]
unsafe fn gelu_tail16<const F: bool, L: Look16>(x: &[f32; 16]) -> [f32; 16] {
    let (mut j, mut t) = ([0f32; 16], [0f32; 16]);
    for i in 0..16 {
        let c = gelu_clamp(x[i]);
        j[i] = c + SHIFTER;
        t[i] = c - (j[i] - SHIFTER);
    }
    // SAFETY: the caller's contract.
    let m = unsafe { table_poly16::<F, 8, L>(&GELU_M, &j, &t) };
    // A loop, as in `erf16`.
    let mut y = [0f32; 16];
    for i in 0..16 {
        y[i] = gelu_with::<F>(x[i], m[i]);
    }
    y
}

/// [`erf`] of 16 lanes, the table read by permutes (the same bits).
///
/// # Safety
/// As [`Look16::look`] of `L`.
#[inline(always)]
pub(crate) unsafe fn erf16<const F: bool, L: Look16>(x: &[f32; 16]) -> [f32; 16] {
    let (mut j, mut t) = ([0f32; 16], [0f32; 16]);
    for i in 0..16 {
        (j[i], t[i]) = erf_args::<F>(erf_clamp(x[i]));
    }
    // SAFETY: the caller's contract.
    let (p1, lo, c0) = unsafe {
        (
            table_poly16::<F, 6, L>(&ERF_D, &j, &t),
            L::look(&ERF_LO, &j),
            L::look(&ERF_C0, &j),
        )
    };
    // A loop, not `array::from_fn`: LLVM left that closure out of line, compiled without
    // the caller's FMA feature (a libm `fmaf` call per lane, 16x slower).
    let mut y = [0f32; 16];
    for i in 0..16 {
        y[i] = erf_with(x[i], erf_join::<F>(p1[i], lo[i], c0[i], t[i]));
    }
    y
}

/// `|x|` clamped at GELU's and erf's limits: past `GELU_MAX` (c²/2 > 120) x·Φ(x) is −0 or
/// x; past `ERF_MAX` erf rounds to ±1 (erfc 4.7 < 10⁻¹⁰), and `3.2c` stays below 15.5
/// (the last table interval).
pub(crate) const GELU_MAX: f32 = 15.49;
pub(crate) const ERF_MAX: f32 = 4.7;

/// `erf x`: the table polynomial of `min(|x|, 4.7)` ([`erf_pos`], non-negative) with the
/// sign bit of `x` set in.
#[inline(always)]
pub(crate) fn erf<const F: bool>(x: f32) -> f32 {
    erf_with(x, erf_pos::<F>(erf_clamp(x)))
}

/// `min(|x|, ERF_MAX)`, NaN kept.
#[inline(always)]
fn erf_clamp(x: f32) -> f32 {
    let a = x.abs();
    sel(a > ERF_MAX, ERF_MAX, a)
}

/// [`erf`] given `p = erf_pos(erf_clamp(x))`.
#[inline(always)]
fn erf_with(x: f32, p: f32) -> f32 {
    f32::from_bits(p.to_bits() | (x.to_bits() & 0x8000_0000))
}

/// GELU's scaling `2ⁿ` (`n ∈ [−174, 0]`) is applied as `2^(n+64)`, added to the exponent
/// field of `p` (`p·2^(n+64)` stays normal), and then `2⁻⁶⁴` as the last product, which
/// rounds once (into the subnormals): one product where two normal factors
/// `2^(n/2)·2^(n−n/2)` took two and five integer ops.
pub(crate) const GELU_BIAS: i32 = 64;
pub(crate) const GELU_UNBIAS: f32 = f32::from_bits(((127 - GELU_BIAS) as u32) << 23);

/// Below this, exact GELU is [`gelu_tail`]; from here on `x·Φ(x)` with Φ read from
/// [`GELU_PHI`] (whose first interval starts at −4.0625). Normal inputs rarely reach it
/// (Φ(−4) = 3.2·10⁻⁵): a 16-lane chunk then branches over the tail kernel.
pub(crate) const GELU_LO: f32 = -4.0;
/// `x` is clamped here for the Φ table: Φ rounds to 1 in `f32` from 5.42 on, and 5.875
/// lies inside the last interval (ending at 5.9375, where the index would wrap to 0).
pub(crate) const GELU_HI: f32 = 5.875;
/// The Φ table's interval is `round(1.6·c) + 6` (the low bits of `c·1.6 + (SHIFTER + 6)`,
/// one FMA); its centre `0.625·(k − 6)` is subtracted exactly (`PHI_STEP`, five eighths).
pub(crate) const PHI_SCALE: f32 = 1.6;
pub(crate) const PHI_SHIFT: f32 = SHIFTER + 6.0;
pub(crate) const PHI_STEP: f32 = -0.625;

/// The Φ table's `(j, t)` of `x` (`c = min(x, GELU_HI)`, NaN kept): `j = c·1.6 +
/// (SHIFTER + 6)` holds the interval in its low bits, `t = c − 0.625·(j − SHIFTER − 6)` is exact
/// (a small integer times 5/8 taken from a float at most twice, or half, its size).
#[inline(always)]
fn phi_args<const F: bool>(x: f32) -> (f32, f32) {
    let c = sel(x > GELU_HI, GELU_HI, x);
    let j = mad::<F>(c, PHI_SCALE, PHI_SHIFT);
    (j, mad::<F>(j - PHI_SHIFT, PHI_STEP, c))
}

/// `x·p` for `p = Φ(x)` from the table; NaN in gives `x` quieted, as the JIT's product
/// with `x` first does (LLVM may commute a product, and then `p`'s NaN would come out).
#[inline(always)]
fn gelu_phi_with(x: f32, p: f32) -> f32 {
    sel(x.is_nan(), f32::from_bits(x.to_bits() | 0x0040_0000), x * p)
}

/// Exact GELU `x·Φ(x)` (−0 at −∞): from `x ≥ −4` on `x` times the table polynomial of
/// Φ ([`GELU_PHI`]: within 0.73 ulp relative, ≈ 1.2 ulp after the `f32` Horner steps,
/// half an ulp more for the product), below it [`gelu_tail`]. One polynomial and one
/// product where the tail kernel takes a double-float exponential, a polynomial of the
/// Gaussian's tail factor and a cancellation-free `x·(1 − v)`.
#[inline(always)]
pub(crate) fn gelu<const F: bool>(x: f32) -> f32 {
    let (j, t) = phi_args::<F>(x);
    let y = gelu_phi_with(x, table_poly::<F, 8>(&GELU_PHI, j, t));
    sel(x < GELU_LO, gelu_tail::<F>(x), y)
}

/// Exact GELU below [`GELU_LO`] (and correct everywhere): with `v = Φ(−|x|) =
/// e^(−x²/2)·M(|x|)`, `x·v` for negative x (the multiplier folded in before the last
/// power-of-two scaling, so that a subnormal result is rounded once) and `x·(1 − v)`
/// otherwise (v ≤ ½: no cancellation).
#[inline(always)]
pub(crate) fn gelu_tail<const F: bool>(x: f32) -> f32 {
    gelu_with::<F>(x, mills::<F>(gelu_clamp(x)))
}

/// `min(|x|, GELU_MAX)`, NaN kept.
#[inline(always)]
fn gelu_clamp(x: f32) -> f32 {
    let a = x.abs();
    sel(a > GELU_MAX, GELU_MAX, a)
}

/// [`gelu`] given `m = mills(gelu_clamp(x))`.
#[inline(always)]
fn gelu_with<const F: bool>(x: f32, m: f32) -> f32 {
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
    let neg = x < 0.0;
    // p·(x·M) (≥ 2⁻¹¹⁶: positive x at the clamp) rounds as a normal number; the product
    // by 2⁻⁶⁴ is exact but where the result is subnormal
    let v = (p * (sel(neg, x, 1.0) * m)) * GELU_UNBIAS;
    let y = sel(neg, v, x * (1.0 - v));
    let y = sel(x == f32::NEG_INFINITY, -0.0, y);
    // NaN in: x quieted, as the JIT's x·(1 − v) gives it (the product's first operand);
    // LLVM may commute the product, and then the NaN of 1 − v (positive) would come out.
    sel(x.is_nan(), f32::from_bits(x.to_bits() | 0x0040_0000), y)
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
