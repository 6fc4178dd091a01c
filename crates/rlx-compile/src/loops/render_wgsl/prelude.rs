//! The WGSL helper library every rendered shader draws on (the one copy: `rlx-wgpu`'s
//! hand-written kernels call the same functions): element access to the arena, rounding
//! to f16/bf16, and the transcendental functions and binary ops with the oracle's special
//! cases (NaN in → NaN out, IEEE `maximum`/`minimum`, `pow` and `fmod` edge cases). Only
//! the helpers a shader uses (and their dependencies) are emitted into it.
//!
//! WGSL lets implementations assume no NaN or infinity in arithmetic, so NaN tests are
//! done on the bits, float comparisons go through `flt_`/`fle_`/`feq_`, and builtins whose
//! result is undefined at some inputs (`log` or `sqrt` of a negative, `pow` of a negative
//! base) are wrapped.

/// `(name, dependencies, source)` of the library helpers.
const LIB: &[(&str, &[&str], &str)] = &[
    (
        "nan_",
        &[],
        "fn nan_(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }",
    ),
    (
        "inf_",
        &[],
        "fn inf_(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }",
    ),
    (
        "consts_",
        &[],
        "const NAN_: u32 = 0x7fc00000u;\nconst PINF_: u32 = 0x7f800000u;\nconst NINF_: u32 = 0xff800000u;",
    ),
    // Round to nearest f16 (ties to even), returned as f32; overflow to ±inf.
    (
        "rf16",
        &["nan_"],
        "fn rf16(x: f32) -> f32 {
  if (nan_(x)) { return x; }
  let b = bitcast<u32>(x);
  let s = b & 0x80000000u;
  let a = b & 0x7fffffffu;
  if (a >= 0x477ff000u) { return bitcast<f32>(s | 0x7f800000u); }
  if (a < 0x38800000u) {
    let q = round(abs(x) * 16777216.0) * 5.9604644775390625e-8;
    return bitcast<f32>(s | bitcast<u32>(q));
  }
  let r = (a + 0x0fffu + ((a >> 13u) & 1u)) & 0xffffe000u;
  return bitcast<f32>(s | r);
}",
    ),
    // Round to nearest bf16 (ties to even), returned as f32.
    (
        "rbf16",
        &["nan_"],
        "fn rbf16(x: f32) -> f32 {
  if (nan_(x)) { return x; }
  let b = bitcast<u32>(x);
  return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}",
    ),
    // f16 bits → f32 (exact).
    (
        "f16_dec",
        &[],
        "fn f16_dec(h: u32) -> f32 {
  let s = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0u) {
    let v = f32(m) * 5.9604644775390625e-8;
    return bitcast<f32>(s | bitcast<u32>(v));
  }
  if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}",
    ),
    // f32 already rounded to f16 precision → f16 bits (exact).
    (
        "f16_enc",
        &["nan_"],
        "fn f16_enc(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let s = (b >> 16u) & 0x8000u;
  let a = b & 0x7fffffffu;
  if (nan_(x)) { return s | 0x7e00u; }
  if (a >= 0x47800000u) { return s | 0x7c00u; }
  if (a < 0x38800000u) { return s | u32(abs(x) * 16777216.0); }
  return s | (((a >> 23u) - 112u) << 10u) | ((a >> 13u) & 0x3ffu);
}",
    ),
    (
        "tanh_",
        &[],
        "fn tanh_(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.0004) { return x; }
  let t = exp(-2.0 * a);
  return sign(x) * (1.0 - t) / (1.0 + t);
}",
    ),
    // Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7).
    (
        "erf_",
        &[],
        "fn erf_(x: f32) -> f32 {
  let a = abs(x);
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
  return select(-y, y, x >= 0.0);
}",
    ),
    (
        "log_",
        &["consts_"],
        "fn log_(x: f32) -> f32 {
  if (x < 0.0) { return bitcast<f32>(NAN_); }
  if (x == 0.0) { return bitcast<f32>(NINF_); }
  if (x == bitcast<f32>(PINF_)) { return x; }
  return log(x);
}",
    ),
    (
        "sqrt_",
        &["consts_"],
        "fn sqrt_(x: f32) -> f32 {
  if (x < 0.0) { return bitcast<f32>(NAN_); }
  if (x == 0.0 || x == bitcast<f32>(PINF_)) { return x; }
  return sqrt(x);
}",
    ),
    (
        "expm1_",
        &[],
        "fn expm1_(x: f32) -> f32 {
  if (abs(x) < 1e-3) { return x + 0.5 * x * x + x * x * x / 6.0; }
  return exp(x) - 1.0;
}",
    ),
    // C fmod: x − trunc(x/y)·y with the quotient corrected so the result has x's sign
    // and is smaller than |y|.
    (
        "fmod_",
        &["nan_", "inf_", "consts_"],
        "fn fmod_(x: f32, y: f32) -> f32 {
  if (nan_(x) || nan_(y) || inf_(x) || y == 0.0) { return bitcast<f32>(NAN_); }
  if (inf_(y)) { return x; }
  let ay = abs(y);
  var r = abs(x);
  if (r < ay) { return x; }
  let q = trunc(r / ay);
  r = fma(-q, ay, r);
  if (r < 0.0) { r = r + ay; }
  if (r >= ay) { r = r - ay; }
  return select(r, -r, x < 0.0 || (x == 0.0 && (bitcast<u32>(x) >> 31u) == 1u));
}",
    ),
    (
        "pow_",
        &["nan_", "inf_", "consts_"],
        "fn pow_(x: f32, y: f32) -> f32 {
  if (y == 0.0 || x == 1.0) { return 1.0; }
  if (nan_(x) || nan_(y)) { return bitcast<f32>(NAN_); }
  let ax = abs(x);
  if (inf_(y)) {
    if (ax == 1.0) { return 1.0; }
    return select(0.0, bitcast<f32>(PINF_), (ax > 1.0) == (y > 0.0));
  }
  let yint = floor(y) == y;
  if (x < 0.0 && !yint) { return bitcast<f32>(NAN_); }
  let odd = yint && abs(y) < 16777216.0 && (u32(abs(y)) & 1u) == 1u;
  var r: f32;
  if (ax == 0.0) { r = select(0.0, bitcast<f32>(PINF_), y < 0.0); }
  else if (inf_(ax)) { r = select(0.0, bitcast<f32>(PINF_), y > 0.0); }
  else { r = exp2(y * log2(ax)); }
  let neg = (bitcast<u32>(x) >> 31u) == 1u;
  return select(r, -r, neg && odd);
}",
    ),
    (
        "atan2_",
        &["nan_", "consts_"],
        "fn atan2_(y: f32, x: f32) -> f32 {
  if (nan_(x) || nan_(y)) { return bitcast<f32>(NAN_); }
  let xneg = (bitcast<u32>(x) >> 31u) == 1u;
  if (y == 0.0) {
    if (xneg) { return select(3.14159265358979, -3.14159265358979, (bitcast<u32>(y) >> 31u) == 1u); }
    return y;
  }
  return atan2(y, x);
}",
    ),
    // sin/cos/tan: quadrant reduction with π/2 in four 8-bit parts (every k·part is
    // exact while |x| < 1e5) and minimax polynomials on [-π/4, π/4]; GPU builtins are only
    // specified on [-π, π] and to 2^-11 absolute there.
    (
        "trig_",
        &[],
        "fn trig_red(x: f32) -> vec2<f32> {
  let k = round(x * 0.6366197723675814);
  var r = x - k * 1.5703125;
  r = r - k * 0.0004825592041015625;
  r = r - k * 1.2665987014770508e-06;
  r = r - k * 9.92093629470503e-10;
  let q = f32(i32(k - 4.0 * floor(k * 0.25)));
  return vec2<f32>(r, q);
}
fn sin_p(r: f32) -> f32 {
  let z = r * r;
  return r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
}
fn cos_p(r: f32) -> f32 {
  let z = r * r;
  return 1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
}
fn sin_(x: f32) -> f32 {
  let t = trig_red(x);
  let r = t.x;
  let q = t.y;
  if (q == 0.0) { return sin_p(r); }
  if (q == 1.0) { return cos_p(r); }
  if (q == 2.0) { return -sin_p(r); }
  return -cos_p(r);
}
fn cos_(x: f32) -> f32 {
  let t = trig_red(x);
  let r = t.x;
  let q = t.y;
  if (q == 0.0) { return cos_p(r); }
  if (q == 1.0) { return -sin_p(r); }
  if (q == 2.0) { return -cos_p(r); }
  return sin_p(r);
}
fn tan_(x: f32) -> f32 { return sin_(x) / cos_(x); }",
    ),
    // The builtin returns 0 at NaN on some drivers (lavapipe).
    (
        "atan_",
        &["nan_"],
        "fn atan_(x: f32) -> f32 { if (nan_(x)) { return x; } return atan(x); }",
    ),
    // An i32 against an f32 without rounding the integer: rounding is monotone, so where
    // f32(i) differs from x it orders them; where it equals x, x is an integer (or 2³¹).
    (
        "icmpf_",
        &["nan_"],
        "fn icmpf_(i: i32, x: f32) -> i32 {
  if (nan_(x)) { return 2i; }
  let fi = f32(i);
  if (fi < x) { return -1i; }
  if (fi > x) { return 1i; }
  if (x >= 2147483648.0) { return -1i; }
  let xi = i32(x);
  return select(select(0i, 1i, i > xi), -1i, i < xi);
}",
    ),
    // An f32 rounded to an emulated float format (the oracle's `FloatFormat::round`):
    // every step is exact in f32; the power-of-two scalings are split in two because
    // WGSL's `ldexp` is only specified for exponents within the f32 range.
    (
        "round_fmt_",
        &["nan_"],
        "fn round_fmt_(x: f32, man: i32, bias: i32, maxv: f32) -> f32 {
  if (x == 0.0 || nan_(x)) { return x; }
  let s = bitcast<u32>(x) & 0x80000000u;
  let a = abs(x);
  if (a < 1.17549435e-38) { return bitcast<f32>(s); }
  if (a >= maxv) { return bitcast<f32>(s | bitcast<u32>(maxv)); }
  let e = max(frexp(a).exp - 1, 1 - bias);
  let st = e - min(man, 52);
  let q = round(ldexp(ldexp(a, (-st) / 2), -st - (-st) / 2));
  let r = min(ldexp(ldexp(q, st / 2), st - st / 2), maxv);
  if (r < 1.17549435e-38) { return bitcast<f32>(s); }
  return bitcast<f32>(s | bitcast<u32>(r));
}",
    ),
    // erfc by the same approximation, without the cancellation of `1 − erf` for x > 0.
    (
        "erfc_",
        &[],
        "fn erfc_(x: f32) -> f32 {
  let a = abs(x);
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let p = (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
  return select(2.0 - p, p, x >= 0.0);
}",
    ),
    // ln(1 + x): the series of 2·atanh(x / (2 + x)) near 0 (no cancellation), the builtin
    // elsewhere (where ln(1 + x) is not small).
    (
        "log1p_",
        &["log_"],
        "fn log1p_(x: f32) -> f32 {
  if (abs(x) < 0.25) {
    let s = x / (2.0 + x);
    let z = s * s;
    return 2.0 * s * (1.0 + z * (0.3333333333 + z * (0.2 + z * (0.1428571429 + z * (0.1111111111 + z * 0.0909090909)))));
  }
  return log_(1.0 + x);
}",
    ),
    // Float comparisons false at NaN on the bits (WGSL may assume no NaN in `<`).
    (
        "fcmp_",
        &["nan_"],
        "fn flt_(a: f32, b: f32) -> bool { return !nan_(a) && !nan_(b) && a < b; }
fn fle_(a: f32, b: f32) -> bool { return !nan_(a) && !nan_(b) && a <= b; }
fn feq_(a: f32, b: f32) -> bool { return !nan_(a) && !nan_(b) && a == b; }",
    ),
    // IEEE minNum/maxNum: a NaN operand gives the other one.
    (
        "fminmax_",
        &["nan_"],
        "fn fminn_(a: f32, b: f32) -> f32 { if (nan_(a)) { return b; } if (nan_(b)) { return a; } return min(a, b); }
fn fmaxn_(a: f32, b: f32) -> f32 { if (nan_(a)) { return b; } if (nan_(b)) { return a; } return max(a, b); }",
    ),
    // An i32 rounded once to `prec` significant bits (ties to even), as f32: exact for
    // prec ≤ 24, so rounding it on to f16/bf16 is a single rounding of the integer.
    (
        "int_round_",
        &[],
        "fn int_round_(v: i32, prec: u32) -> f32 {
  let mag = select(u32(v), 0u - bitcast<u32>(v), v < 0i);
  let bits = 32u - countLeadingZeros(mag);
  if (bits <= prec) { return f32(v); }
  let sh = bits - prec;
  var q = mag >> sh;
  let rest = mag & ((1u << sh) - 1u);
  let half = 1u << (sh - 1u);
  if (rest > half || (rest == half && (q & 1u) == 1u)) { q = q + 1u; }
  let r = ldexp(f32(q), i32(sh));
  return select(r, -r, v < 0i);
}",
    ),
];

/// The helpers one shader needs, emitted once each in dependency order by
/// [`WgslHelpers::source`]. The arena accessors (`ld32_`, `ld16_`, `ld8_`, `st32_`,
/// `st16_`, `st8_`) read and write the storage array `A` of 32-bit words; their source
/// depends on whether the shader declares `A` atomic (it must when it stores elements
/// narrower than a word: neighbouring invocations then update their own bytes of a word
/// with `atomicAnd`/`atomicOr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WgslHelpers {
    atomic: bool,
    names: Vec<&'static str>,
}

impl WgslHelpers {
    /// An empty set for a shader whose arena is atomic (`atomic`) or plain.
    pub fn new(atomic: bool) -> WgslHelpers {
        WgslHelpers {
            atomic,
            names: Vec::new(),
        }
    }

    /// Whether the arena is declared `array<atomic<u32>>`.
    pub fn atomic(&self) -> bool {
        self.atomic
    }

    /// Require helper `name` (a library helper or an arena accessor).
    ///
    /// # Panics
    /// On a name the library does not define (a bug in the caller).
    pub fn need(&mut self, name: &'static str) {
        assert!(
            ACCESSORS.contains(&name) || LIB.iter().any(|(n, _, _)| *n == name),
            "internal: unknown WGSL helper `{name}`"
        );
        if !self.names.contains(&name) {
            self.names.push(name);
        }
    }

    /// The source of every required helper and its dependencies.
    pub fn source(&self) -> String {
        let mut done = Vec::new();
        let mut out = String::new();
        for n in &self.names {
            self.emit(n, &mut done, &mut out);
        }
        out
    }

    fn emit(&self, name: &'static str, done: &mut Vec<&'static str>, out: &mut String) {
        if done.contains(&name) {
            return;
        }
        done.push(name);
        if ACCESSORS.contains(&name) {
            out.push_str(&accessor(name, self.atomic));
            out.push('\n');
            return;
        }
        let (_, deps, src) = LIB
            .iter()
            .find(|(n, _, _)| *n == name)
            .expect("checked by need");
        for d in *deps {
            self.emit(d, done, out);
        }
        out.push_str(src);
        out.push('\n');
    }
}

/// The arena accessors: `ld32_(base, e)` is word `e` of the buffer at word `base`,
/// `ld16_`/`ld8_` the `e`-th 16/8-bit field (in the low bits); `st*_` write them.
const ACCESSORS: &[&str] = &["ld32_", "ld16_", "ld8_", "st32_", "st16_", "st8_"];

fn accessor(name: &str, atomic: bool) -> String {
    let rd = |i: &str| {
        if atomic {
            format!("atomicLoad(&A[{i}])")
        } else {
            format!("A[{i}]")
        }
    };
    match name {
        "ld32_" => format!(
            "fn ld32_(b: u32, e: u32) -> u32 {{ return {}; }}",
            rd("b + e")
        ),
        "ld16_" => format!(
            "fn ld16_(b: u32, e: u32) -> u32 {{ return ({} >> ((e & 1u) * 16u)) & 0xffffu; }}",
            rd("b + (e >> 1u)")
        ),
        "ld8_" => format!(
            "fn ld8_(b: u32, e: u32) -> u32 {{ return ({} >> ((e & 3u) * 8u)) & 0xffu; }}",
            rd("b + (e >> 2u)")
        ),
        "st32_" if atomic => {
            "fn st32_(b: u32, e: u32, v: u32) { atomicStore(&A[b + e], v); }".into()
        }
        "st32_" => "fn st32_(b: u32, e: u32, v: u32) { A[b + e] = v; }".into(),
        // Narrow stores exist only in atomic arenas (the renderer refuses them otherwise).
        "st16_" => "fn st16_(b: u32, e: u32, v: u32) {
  let w = b + (e >> 1u);
  let s = (e & 1u) * 16u;
  atomicAnd(&A[w], ~(0xffffu << s));
  atomicOr(&A[w], (v & 0xffffu) << s);
}"
        .into(),
        _ => "fn st8_(b: u32, e: u32, v: u32) {
  let w = b + (e >> 2u);
  let s = (e & 3u) * 8u;
  atomicAnd(&A[w], ~(0xffu << s));
  atomicOr(&A[w], (v & 0xffu) << s);
}"
        .into(),
    }
}
