//! The C++ prelude this backend adds after the loop IR's (`rlx_compile::loops::C_PRELUDE`,
//! whose conversions it uses): the kernel qualifiers, the scalar type names, loads of
//! every dtype in its compute type (the contraction epilogue's dense product) and the
//! run's error word. Everything else a kernel computes is rendered from the loop IR
//! with the loop prelude's helpers.
//!
//! The same text compiles with NVRTC, with hiprtc and with a host C++ compiler under
//! `RLX_EMU` (the emulator in [`crate::emu`] supplies `threadIdx`, `__syncthreads` and
//! `atomicCAS`).

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

RLX_DEV float ld_f32(const char* p, u64 i) { return ((const float*)p)[i]; }
RLX_DEV float ld_f16(const char* p, u64 i) { return rlx_f16_to_f32(((const u16*)p)[i]); }
RLX_DEV float ld_bf16(const char* p, u64 i) { return rlx_bf16_to_f32(((const u16*)p)[i]); }
RLX_DEV double ld_f64(const char* p, u64 i) { return ((const double*)p)[i]; }
RLX_DEV i64 ld_i8(const char* p, u64 i) { return (i64)((const i8*)p)[i]; }
RLX_DEV i64 ld_i16(const char* p, u64 i) { return (i64)((const i16*)p)[i]; }
RLX_DEV i64 ld_i32(const char* p, u64 i) { return (i64)((const i32*)p)[i]; }
RLX_DEV i64 ld_i64(const char* p, u64 i) { return ((const i64*)p)[i]; }
RLX_DEV i64 ld_u8(const char* p, u64 i) { return (i64)((const u8*)p)[i]; }
RLX_DEV i64 ld_u32(const char* p, u64 i) { return (i64)((const u32*)p)[i]; }
RLX_DEV i64 ld_bool(const char* p, u64 i) { return ((const u8*)p)[i] != 0; }

// The first error of a run wins: (kernel + 1) << 8 | code, read back by the host.
RLX_DEV void rlx_fail(u64* err, u64 code) {
  if (err) atomicCAS((unsigned long long*)err, 0ull, (unsigned long long)code);
}
"#;
