//! The C++ prelude every generated program starts with: scalar types, bit casts,
//! f16/bf16 conversions, loads and stores per dtype, the oracle's activation, binary,
//! cast and rounding semantics, and block-wide combine helpers.
//!
//! The same text compiles with NVRTC (device code, no CUDA headers needed: conversions
//! use the `cvt` instructions directly) and with a host C++ compiler under `RLX_EMU`
//! (the emulator in [`crate::emu`] supplies `threadIdx`, `__syncthreads` and friends).

/// The prelude.
pub const PRELUDE: &str = r#"
#ifdef RLX_EMU
#define RLX_DEV static inline
#else
#define RLX_DEV __device__ __forceinline__
#endif
#define RLX_KERNEL extern "C" __global__

typedef long long i64;
typedef unsigned long long u64;
typedef int i32;
typedef unsigned int u32;
typedef short i16;
typedef unsigned short u16;
typedef signed char i8;
typedef unsigned char u8;

// ---------------------------------------------------------------- bit casts
#ifdef RLX_EMU
RLX_DEV float f32_of(u32 b) { float f; memcpy(&f, &b, 4); return f; }
RLX_DEV u32 bits_f32(float f) { u32 b; memcpy(&b, &f, 4); return b; }
RLX_DEV double f64_of(u64 b) { double f; memcpy(&f, &b, 8); return f; }
RLX_DEV u64 bits_f64(double f) { u64 b; memcpy(&b, &f, 8); return b; }
#else
RLX_DEV float f32_of(u32 b) { return __uint_as_float(b); }
RLX_DEV u32 bits_f32(float f) { return __float_as_uint(f); }
RLX_DEV double f64_of(u64 b) { return __longlong_as_double((long long)b); }
RLX_DEV u64 bits_f64(double f) { return (u64)__double_as_longlong(f); }
#endif
RLX_DEV float f_inf() { return f32_of(0x7f800000u); }
RLX_DEV float f_nan() { return f32_of(0x7fc00000u); }
RLX_DEV double d_inf() { return f64_of(0x7ff0000000000000ull); }

// ---------------------------------------------------------------- math overloads
RLX_DEV float m_exp(float x) { return expf(x); }
RLX_DEV double m_exp(double x) { return exp(x); }
RLX_DEV float m_log(float x) { return logf(x); }
RLX_DEV double m_log(double x) { return log(x); }
RLX_DEV float m_sqrt(float x) { return sqrtf(x); }
RLX_DEV double m_sqrt(double x) { return sqrt(x); }
RLX_DEV float m_sin(float x) { return sinf(x); }
RLX_DEV double m_sin(double x) { return sin(x); }
RLX_DEV float m_cos(float x) { return cosf(x); }
RLX_DEV double m_cos(double x) { return cos(x); }
RLX_DEV float m_tan(float x) { return tanf(x); }
RLX_DEV double m_tan(double x) { return tan(x); }
RLX_DEV float m_atan(float x) { return atanf(x); }
RLX_DEV double m_atan(double x) { return atan(x); }
RLX_DEV float m_tanh(float x) { return tanhf(x); }
RLX_DEV double m_tanh(double x) { return tanh(x); }
RLX_DEV float m_erf(float x) { return erff(x); }
RLX_DEV double m_erf(double x) { return erf(x); }
RLX_DEV float m_erfc(float x) { return erfcf(x); }
RLX_DEV double m_erfc(double x) { return erfc(x); }
RLX_DEV float m_expm1(float x) { return expm1f(x); }
RLX_DEV double m_expm1(double x) { return expm1(x); }
RLX_DEV float m_log1p(float x) { return log1pf(x); }
RLX_DEV double m_log1p(double x) { return log1p(x); }
RLX_DEV float m_floor(float x) { return floorf(x); }
RLX_DEV double m_floor(double x) { return floor(x); }
RLX_DEV float m_ceil(float x) { return ceilf(x); }
RLX_DEV double m_ceil(double x) { return ceil(x); }
RLX_DEV float m_rint(float x) { return rintf(x); }
RLX_DEV double m_rint(double x) { return rint(x); }
RLX_DEV float m_fabs(float x) { return fabsf(x); }
RLX_DEV double m_fabs(double x) { return fabs(x); }
RLX_DEV float m_fmod(float x, float y) { return fmodf(x, y); }
RLX_DEV double m_fmod(double x, double y) { return fmod(x, y); }
RLX_DEV float m_copysign(float x, float y) { return copysignf(x, y); }
RLX_DEV double m_copysign(double x, double y) { return copysign(x, y); }
RLX_DEV float m_inf(float) { return f_inf(); }
RLX_DEV double m_inf(double) { return d_inf(); }
RLX_DEV float m_and(float a, float b) { return f32_of(bits_f32(a) & bits_f32(b)); }
RLX_DEV double m_and(double a, double b) { return f64_of(bits_f64(a) & bits_f64(b)); }
RLX_DEV float m_or(float a, float b) { return f32_of(bits_f32(a) | bits_f32(b)); }
RLX_DEV double m_or(double a, double b) { return f64_of(bits_f64(a) | bits_f64(b)); }

// ---------------------------------------------------------------- f16 / bf16
// Decode f16 bits exactly (both paths give the same value).
RLX_DEV float h2f_soft(u16 h) {
  u32 s = (u32)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return f32_of(s | 0x7f800000u | (m << 13));
  if (e == 0) {
    float v = (float)m * f32_of(0x33800000u); /* m * 2^-24 */
    return s ? -v : v;
  }
  return f32_of(s | ((e + 112u) << 23) | (m << 13));
}
// Round an f32 to the nearest f16 (ties to even), overflow to infinity.
RLX_DEV u16 f2h_soft(float f) {
  u32 x = bits_f32(f), s = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (u16)(s | 0x7e00u);
  if (a >= 0x477ff000u) return (u16)(s | 0x7c00u); /* ≥ 65520 rounds to inf */
  if (a < 0x38800000u) { /* below 2^-14: subnormal f16, step 2^-24 */
    float v = f32_of(a) * f32_of(0x4b800000u); /* ×2^24, exact */
    float r = rintf(v);
    return (u16)(s | (u32)r);
  }
  u32 e = (a >> 23) - 112u, m = a & 0x7fffffu;
  u32 hm = m >> 13, rem = m & 0x1fffu;
  u32 out = (e << 10) | hm;
  if (rem > 0x1000u || (rem == 0x1000u && (hm & 1u))) out += 1u;
  return (u16)(s | out);
}
RLX_DEV float bf2f(u16 b) { return f32_of((u32)b << 16); }
RLX_DEV u16 f2bf_soft(float f) {
  u32 x = bits_f32(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x40u);
  u32 lsb = (x >> 16) & 1u;
  return (u16)((x + 0x7fffu + lsb) >> 16);
}
#if defined(RLX_EMU) || !defined(__CUDA_ARCH__)
RLX_DEV float h2f(u16 h) { return h2f_soft(h); }
RLX_DEV u16 f2h(float f) { return f2h_soft(f); }
RLX_DEV u16 f2bf(float f) { return f2bf_soft(f); }
#else
RLX_DEV float h2f(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
RLX_DEV u16 f2h(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#if __CUDA_ARCH__ >= 800
RLX_DEV u16 f2bf(float f) { u16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#else
RLX_DEV u16 f2bf(float f) { return f2bf_soft(f); }
#endif
#endif
RLX_DEV float rnd_h(float x) { return h2f(f2h(x)); }
RLX_DEV float rnd_bf(float x) { return bf2f(f2bf(x)); }

// Doubles rounded once to f16 / bf16 (`rlx_round_grid` of the loop-IR prelude, which
// precedes this one); the result is exact in f32.
RLX_DEV float d2h(double x) { return (float)rlx_round_grid(x, 10, -14, 65504.0, 65520.0); }
RLX_DEV float d2bf(double x) {
  return (float)rlx_round_grid(x, 7, -126, 3.3895313892515355e38, 3.3961775292304135e38);
}
// Float -> integer: truncate toward zero, saturate, NaN -> 0.
RLX_DEV i64 f2i(double x, double lo, double hi, i64 ilo, i64 ihi) {
  if (x != x) return 0;
  if (x <= lo) return ilo;
  if (x >= hi) return ihi;
  return (i64)x;
}

// ---------------------------------------------------------------- loads / stores
RLX_DEV float ld_f32(const char* p, u64 i) { return ((const float*)p)[i]; }
RLX_DEV float ld_f16(const char* p, u64 i) { return h2f(((const u16*)p)[i]); }
RLX_DEV float ld_bf16(const char* p, u64 i) { return bf2f(((const u16*)p)[i]); }
RLX_DEV double ld_f64(const char* p, u64 i) { return ((const double*)p)[i]; }
RLX_DEV i64 ld_i8(const char* p, u64 i) { return (i64)((const i8*)p)[i]; }
RLX_DEV i64 ld_i16(const char* p, u64 i) { return (i64)((const i16*)p)[i]; }
RLX_DEV i64 ld_i32(const char* p, u64 i) { return (i64)((const i32*)p)[i]; }
RLX_DEV i64 ld_i64(const char* p, u64 i) { return ((const i64*)p)[i]; }
RLX_DEV i64 ld_u8(const char* p, u64 i) { return (i64)((const u8*)p)[i]; }
RLX_DEV i64 ld_u32(const char* p, u64 i) { return (i64)((const u32*)p)[i]; }
RLX_DEV i64 ld_bool(const char* p, u64 i) { return ((const u8*)p)[i] != 0; }
RLX_DEV void st_f32(char* p, u64 i, float v) { ((float*)p)[i] = v; }
RLX_DEV void st_f16(char* p, u64 i, float v) { ((u16*)p)[i] = f2h(v); }
RLX_DEV void st_bf16(char* p, u64 i, float v) { ((u16*)p)[i] = f2bf(v); }
RLX_DEV void st_f64(char* p, u64 i, double v) { ((double*)p)[i] = v; }
RLX_DEV void st_i8(char* p, u64 i, i64 v) { ((i8*)p)[i] = (i8)v; }
RLX_DEV void st_i16(char* p, u64 i, i64 v) { ((i16*)p)[i] = (i16)v; }
RLX_DEV void st_i32(char* p, u64 i, i64 v) { ((i32*)p)[i] = (i32)v; }
RLX_DEV void st_i64(char* p, u64 i, i64 v) { ((i64*)p)[i] = v; }
RLX_DEV void st_u8(char* p, u64 i, i64 v) { ((u8*)p)[i] = (u8)v; }
RLX_DEV void st_u32(char* p, u64 i, i64 v) { ((u32*)p)[i] = (u32)v; }
RLX_DEV void st_bool(char* p, u64 i, i64 v) { ((u8*)p)[i] = v != 0; }

// ---------------------------------------------------------------- errors
// The first error of a run wins: (kernel + 1) << 8 | code, read back by the host.
RLX_DEV void rlx_fail(u64* err, u64 code) {
  if (err) atomicCAS((unsigned long long*)err, 0ull, (unsigned long long)code);
}

// ---------------------------------------------------------------- activations
// Integer-closed activations (wrapping like the oracle).

// ---------------------------------------------------------------- binary ops
// IEEE 754-2019 maximum/minimum: NaN propagates, +0 > -0.
RLX_DEV float b_pow(float a, float b) { return (float)pow((double)a, (double)b); }
RLX_DEV double b_pow(double a, double b) { return pow(a, b); }
RLX_DEV float b_atan2(float a, float b) { return (float)atan2((double)a, (double)b); }
RLX_DEV double b_atan2(double a, double b) { return atan2(a, b); }
RLX_DEV i64 i_add(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
RLX_DEV i64 i_mul(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }
RLX_DEV i64 i_max(i64 a, i64 b) { return a > b ? a : b; }
RLX_DEV i64 i_min(i64 a, i64 b) { return a < b ? a : b; }

// ---------------------------------------------------------------- emulated formats
// FloatFormat::round_f64: saturating round to a (exp, man, max) grid; f32 subnormals flush.
"#;
