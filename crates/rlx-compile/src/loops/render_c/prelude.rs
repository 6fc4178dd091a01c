//! The C++ helpers every rendered loop kernel may call (see [`C_PRELUDE`]).

/// Helpers every rendered loop kernel may call: bit casts, f16/bf16 bit patterns ↔ f32
/// with round to nearest even, float → i64 with the oracle's cast rule. Portable to a
/// host C++ compiler when `RLX_EMU` is defined (the CUDA backend's emulator; `memcpy`
/// must then be declared). Include it once per translation unit.
pub const C_PRELUDE: &str = r#"#ifdef RLX_EMU
#define RLX_LOOP_DEV static inline
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif
// CUDA's unfused arithmetic on the host (built without FMA instructions, nothing fuses).
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float rlx_f32_of(unsigned int b) { float f; memcpy(&f, &b, 4); return f; }
static inline unsigned int rlx_bits_f32(float f) { unsigned int b; memcpy(&b, &f, 4); return b; }
static inline double rlx_f64_of(unsigned long long b) { double f; memcpy(&f, &b, 8); return f; }
#else
#define RLX_LOOP_DEV static __device__ __forceinline__
RLX_LOOP_DEV float rlx_f32_of(unsigned int b) { return __uint_as_float(b); }
RLX_LOOP_DEV unsigned int rlx_bits_f32(float f) { return __float_as_uint(f); }
RLX_LOOP_DEV double rlx_f64_of(unsigned long long b) { return __longlong_as_double((long long)b); }
#endif
RLX_LOOP_DEV float rlx_f16_to_f32(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
  unsigned int e = ((unsigned int)h >> 10) & 0x1fu, m = (unsigned int)h & 0x3ffu;
  if (e == 0u) { float v = (float)m * 5.9604644775390625e-8f; return sign ? -v : v; }
  if (e == 31u) return rlx_f32_of(sign | 0x7f800000u | (m << 13));
  return rlx_f32_of(sign | ((e + 112u) << 23) | (m << 13));
}
RLX_LOOP_DEV unsigned short rlx_f32_to_f16(float f) {
  unsigned int x = rlx_bits_f32(f);
  unsigned int sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) return (unsigned short)(sign | (unsigned int)rintf(rlx_f32_of(ax) * 16777216.0f));
  unsigned int r = ax - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return (unsigned short)(sign | (r >> 13));
}
RLX_LOOP_DEV float rlx_round_f16(float f) { return rlx_f16_to_f32(rlx_f32_to_f16(f)); }
RLX_LOOP_DEV float rlx_bf16_to_f32(unsigned short h) { return rlx_f32_of((unsigned int)h << 16); }
RLX_LOOP_DEV float rlx_round_bf16(float f) {
  unsigned int u = rlx_bits_f32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return f;
  u += 0x7fffu + ((u >> 16) & 1u);
  return rlx_f32_of(u & 0xffff0000u);
}
RLX_LOOP_DEV double rlx_round_grid(double x, int man, int emin, double maxv, double inf_at) {
  if (x == 0.0 || x != x || fabs(x) == rlx_f64_of(0x7ff0000000000000ull)) return x;
  int k; frexp(fabs(x), &k);
  int e = k - 1 < emin ? emin : k - 1;
  double r = ldexp(rint(ldexp(fabs(x), man - e)), e - man);
  if (r >= inf_at || r > maxv) r = rlx_f64_of(0x7ff0000000000000ull);
  return copysign(r, x);
}
RLX_LOOP_DEV double rlx_int_to_f64(long long v, int prec) {
  unsigned long long mag = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  int bits = 0;
  for (unsigned long long t = mag; t; t >>= 1) bits++;
  if (bits <= 53 || bits <= prec) return (double)v;
  int shift = bits - prec;
  unsigned long long q = mag >> shift, rem = mag & ((1ull << shift) - 1ull), half = 1ull << (shift - 1);
  if (rem > half || (rem == half && (q & 1ull))) q += 1ull;
  double r = ldexp((double)q, shift);
  return v < 0 ? -r : r;
}
RLX_LOOP_DEV double rlx_round_format(double x, int man, int bias, double maxv) {
  const double min_normal = 1.1754943508222875e-38;
  if (x == 0.0 || x != x) return x;
  double zero = copysign(0.0, x), a = fabs(x);
  if (a < min_normal) return zero;
  if (a >= maxv) return copysign(maxv, x);
  int k; frexp(a, &k);
  int e = k - 1 < 1 - bias ? 1 - bias : k - 1;
  int step = e - (man < 52 ? man : 52);
  double r = ldexp(rint(ldexp(a, -step)), step);
  if (r > maxv) r = maxv;
  if (r < min_normal) return zero;
  return copysign(r, x);
}
RLX_LOOP_DEV long long rlx_f64_to_i64(double v) {
  if (v != v) return 0;
  if (v <= -9223372036854775808.0) return (-9223372036854775807ll - 1);
  if (v >= 9223372036854775807.0) return 9223372036854775807ll;
  return (long long)v;
}
// Stmt::TileMma on CUDA: c[16x16] += a[16x16ks] * b[16ks x 16] with 16-bit operands in
// shared memory (b row-major `_r`, or transposed `_c`), one warp per call.
#if defined(RLX_EMU)
// The emulator runs a block's threads one after another between barriers: lane 0 of each
// warp computes the warp's whole tile in the loop IR's order (the others do nothing).
static inline void rlx_tile_mma_host(unsigned int lane, int bf, int bt, const unsigned short* a,
    unsigned int lda, const unsigned short* b, unsigned int ldb, float* c, unsigned int ldc,
    unsigned int ks) {
  if (lane != 0u) return;
  for (unsigned int i = 0; i < 16u; ++i)
    for (unsigned int j = 0; j < 16u; ++j) {
      float acc = c[i * ldc + j];
      for (unsigned int k = 0; k < 16u * ks; ++k) {
        unsigned short x = a[i * lda + k], y = bt ? b[j * ldb + k] : b[k * ldb + j];
        float fx = bf ? rlx_bf16_to_f32(x) : rlx_f16_to_f32(x);
        float fy = bf ? rlx_bf16_to_f32(y) : rlx_f16_to_f32(y);
        acc = fmaf(fx, fy, acc);
      }
      c[i * ldc + j] = acc;
    }
}
#define RLX_TILE_MMA(name, bf, bt) \
  static inline void name(unsigned int lane, const unsigned short* a, unsigned int lda, \
      const unsigned short* b, unsigned int ldb, float* c, unsigned int ldc, unsigned int ks) { \
    rlx_tile_mma_host(lane, bf, bt, a, lda, b, ldb, c, ldc, ks); }
RLX_TILE_MMA(rlx_tile_mma_f16_r, 0, 0)
RLX_TILE_MMA(rlx_tile_mma_f16_c, 0, 1)
RLX_TILE_MMA(rlx_tile_mma_bf16_r, 1, 0)
RLX_TILE_MMA(rlx_tile_mma_bf16_c, 1, 1)
#elif defined(__CUDACC__) && !defined(__HIP__)
// The PTX wmma instructions (sm_70+ for f16, sm_80+ for bf16) without <mma.h>, which
// NVRTC cannot find without a toolkit's include tree. Fragments stay opaque registers.
#define RLX_WMMA_C(op) \
  asm volatile("wmma." op ".sync.aligned.row.m16n16k16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8], %9;" \
    : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]) \
    : "l"(c), "r"(ldc) : "memory")
#define RLX_WMMA_STORE \
  asm volatile("wmma.store.d.sync.aligned.row.m16n16k16.f32 [%0], {%1,%2,%3,%4,%5,%6,%7,%8}, %9;" \
    :: "l"(c), "f"(d[0]), "f"(d[1]), "f"(d[2]), "f"(d[3]), "f"(d[4]), "f"(d[5]), "f"(d[6]), "f"(d[7]), \
       "r"(ldc) : "memory")
#define RLX_TILE_MMA_F16(name, bl, bt) \
  RLX_LOOP_DEV void name(unsigned int lane, const unsigned short* a, unsigned int lda, \
      const unsigned short* b, unsigned int ldb, float* c, unsigned int ldc, unsigned int ks) { \
    float d[8]; unsigned int x[8], y[8]; (void)lane; \
    RLX_WMMA_C("load.c"); \
    for (unsigned int s = 0; s < ks; ++s) { \
      const unsigned short* as = a + 16u * s; \
      const unsigned short* bs = bt ? b + 16u * s : b + 16u * s * ldb; \
      asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8], %9;" \
        : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3]), "=r"(x[4]), "=r"(x[5]), "=r"(x[6]), "=r"(x[7]) \
        : "l"(as), "r"(lda) : "memory"); \
      asm volatile("wmma.load.b.sync.aligned." bl ".m16n16k16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8], %9;" \
        : "=r"(y[0]), "=r"(y[1]), "=r"(y[2]), "=r"(y[3]), "=r"(y[4]), "=r"(y[5]), "=r"(y[6]), "=r"(y[7]) \
        : "l"(bs), "r"(ldb) : "memory"); \
      asm volatile("wmma.mma.sync.aligned.row." bl ".m16n16k16.f32.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, " \
        "{%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19,%20,%21,%22,%23}, {%0,%1,%2,%3,%4,%5,%6,%7};" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]) \
        : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(x[4]), "r"(x[5]), "r"(x[6]), "r"(x[7]), \
          "r"(y[0]), "r"(y[1]), "r"(y[2]), "r"(y[3]), "r"(y[4]), "r"(y[5]), "r"(y[6]), "r"(y[7])); \
    } \
    RLX_WMMA_STORE; }
#define RLX_TILE_MMA_BF16(name, bl, bt) \
  RLX_LOOP_DEV void name(unsigned int lane, const unsigned short* a, unsigned int lda, \
      const unsigned short* b, unsigned int ldb, float* c, unsigned int ldc, unsigned int ks) { \
    float d[8]; unsigned int x[4], y[4]; (void)lane; \
    RLX_WMMA_C("load.c"); \
    for (unsigned int s = 0; s < ks; ++s) { \
      const unsigned short* as = a + 16u * s; \
      const unsigned short* bs = bt ? b + 16u * s : b + 16u * s * ldb; \
      asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.bf16 {%0,%1,%2,%3}, [%4], %5;" \
        : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3]) : "l"(as), "r"(lda) : "memory"); \
      asm volatile("wmma.load.b.sync.aligned." bl ".m16n16k16.bf16 {%0,%1,%2,%3}, [%4], %5;" \
        : "=r"(y[0]), "=r"(y[1]), "=r"(y[2]), "=r"(y[3]) : "l"(bs), "r"(ldb) : "memory"); \
      asm volatile("wmma.mma.sync.aligned.row." bl ".m16n16k16.f32.bf16.bf16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, " \
        "{%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3,%4,%5,%6,%7};" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]) \
        : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(y[0]), "r"(y[1]), "r"(y[2]), "r"(y[3])); \
    } \
    RLX_WMMA_STORE; }
RLX_TILE_MMA_F16(rlx_tile_mma_f16_r, "row", 0)
RLX_TILE_MMA_F16(rlx_tile_mma_f16_c, "col", 1)
RLX_TILE_MMA_BF16(rlx_tile_mma_bf16_r, "row", 0)
RLX_TILE_MMA_BF16(rlx_tile_mma_bf16_c, "col", 1)
#endif
"#;
