//! The WGSL helper library: element encodings, rounding to f16/bf16, and the
//! activations and binary ops with the oracle's special cases (NaN in → NaN out,
//! IEEE `maximum`/`minimum`, `pow` and `fmod` edge cases). Only the helpers a kernel
//! uses (and their dependencies) are emitted into its shader.
//!
//! WGSL lets implementations assume no NaN or infinity in arithmetic, so NaN tests
//! are done on the bits, and builtins whose result is undefined at some inputs
//! (`log` of a negative, `sqrt` of a negative, `pow` of a negative base) are wrapped.

/// `(name, dependencies, source)`.
pub(crate) const HELPERS: &[(&str, &[&str], &str)] = &[
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
        "sigm_",
        &[],
        "fn sigm_(x: f32) -> f32 {
  if (x >= 0.0) { return 1.0 / (1.0 + exp(-x)); }
  let e = exp(x);
  return e / (1.0 + e);
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
        "log1pexp_",
        &[],
        // ln(1 + e^(-|x|)), accurate when e^(-|x|) is tiny.
        "fn log1pexp_(x: f32) -> f32 {
  let t = exp(-abs(x));
  if (t < 1e-4) { return t * (1.0 - 0.5 * t); }
  return log(1.0 + t);
}",
    ),
    (
        "softplus_",
        &["log1pexp_"],
        "fn softplus_(x: f32) -> f32 { return max(x, 0.0) + log1pexp_(x); }",
    ),
    (
        "expm1_",
        &[],
        "fn expm1_(x: f32) -> f32 {
  if (abs(x) < 1e-3) { return x + 0.5 * x * x + x * x * x / 6.0; }
  return exp(x) - 1.0;
}",
    ),
    (
        "round_",
        &[],
        "fn round_(x: f32) -> f32 {
  let f = floor(x);
  let d = x - f;
  if (d > 0.5) { return f + 1.0; }
  if (d < 0.5) { return f; }
  return select(f + 1.0, f, (f * 0.5) == floor(f * 0.5));
}",
    ),
    (
        "fmax_",
        &["nan_"],
        "fn fmax_(x: f32, y: f32) -> f32 {
  if (nan_(x) || nan_(y)) { return x + y; }
  if (x == y) { return bitcast<f32>(bitcast<u32>(x) & bitcast<u32>(y)); }
  return select(y, x, x > y);
}",
    ),
    (
        "fmin_",
        &["nan_"],
        "fn fmin_(x: f32, y: f32) -> f32 {
  if (nan_(x) || nan_(y)) { return x + y; }
  if (x == y) { return bitcast<f32>(bitcast<u32>(x) | bitcast<u32>(y)); }
  return select(y, x, x < y);
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
];

/// The source of helper `name` and its dependencies, in dependency order, appended
/// to `out` unless already in `done`.
pub(crate) fn emit(name: &str, done: &mut Vec<&'static str>, out: &mut String) {
    let Some(&(n, deps, src)) = HELPERS.iter().find(|(n, _, _)| *n == name) else {
        panic!("internal: unknown WGSL helper `{name}`");
    };
    if done.contains(&n) {
        return;
    }
    for d in deps {
        emit(d, done, out);
    }
    done.push(n);
    out.push_str(src);
    out.push('\n');
}
