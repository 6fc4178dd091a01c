//! What the AVX-512 GEMM kernels of this module share and none of them owns: the
//! AVX-512 F + BW check every one of them makes before it runs, and the in-register
//! 16 × 16 f32 transpose that both the f32 kernel's packing and the bf16/int8 packing
//! (`f32_avx512/pack.rs`, `bf16_avx512.rs`) use for operands whose columns are
//! contiguous. It lives here, not in one of those kernels, so that neither kernel
//! module depends on the other.

use std::arch::x86_64::*;

/// Whether the CPU has AVX-512 F and BW (every kernel here needs them).
pub(crate) fn avx512bw() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
}

/// Transpose the 16 × 16 f32 matrix whose rows are `r` in place (three rounds of
/// shuffles: pairs within 128-bit lanes, quadruples, then lanes).
#[inline(always)]
pub(crate) fn transpose16(r: &mut [__m512; 16]) {
    // SAFETY: register-only shuffles; callers run with AVX-512 F enabled.
    unsafe {
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        let mut u = [_mm512_setzero_ps(); 16];
        for g in 0..4 {
            u[4 * g] = _mm512_shuffle_ps::<0x44>(t[4 * g], t[4 * g + 2]);
            u[4 * g + 1] = _mm512_shuffle_ps::<0xEE>(t[4 * g], t[4 * g + 2]);
            u[4 * g + 2] = _mm512_shuffle_ps::<0x44>(t[4 * g + 1], t[4 * g + 3]);
            u[4 * g + 3] = _mm512_shuffle_ps::<0xEE>(t[4 * g + 1], t[4 * g + 3]);
        }
        // u[4g + c], 128-bit lane L, holds rows 4g..4g+4 of column 4L + c.
        for c in 0..4 {
            let x0 = _mm512_shuffle_f32x4::<0x88>(u[c], u[4 + c]);
            let x1 = _mm512_shuffle_f32x4::<0x88>(u[8 + c], u[12 + c]);
            let y0 = _mm512_shuffle_f32x4::<0xDD>(u[c], u[4 + c]);
            let y1 = _mm512_shuffle_f32x4::<0xDD>(u[8 + c], u[12 + c]);
            r[c] = _mm512_shuffle_f32x4::<0x88>(x0, x1);
            r[8 + c] = _mm512_shuffle_f32x4::<0xDD>(x0, x1);
            r[4 + c] = _mm512_shuffle_f32x4::<0x88>(y0, y1);
            r[12 + c] = _mm512_shuffle_f32x4::<0xDD>(y0, y1);
        }
    }
}
