//! The register-table decoders of the scaled matmul's bf16 panels (`scaled.rs`): codes
//! looked up 16 or 32 at a time in tables held in zmm registers, scaled, and truncated to
//! bf16.

#[cfg(target_arch = "x86_64")]
use crate::gemm::lowp::bf16;
#[cfg(all(test, target_arch = "x86_64"))]
use rlx_ir::ScaledFormat;

/// Whether this CPU runs [`decode_lut64_bf16`] (AVX-512 F and BW).
pub(super) fn lut_registers_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The first `16·⌊len/16⌋` elements of `Operand::decode_run_bf16` (`scaled.rs`) for a table of at most
/// 64 codes (`codes`, a power of two): each group of 16 codes is widened to 32-bit indices,
/// reduced modulo `codes`, looked up in the table held in registers (`vpermi2ps` over 32
/// entries, twice with a blend for 64), scaled, and truncated to bf16. Returns how many
/// elements it wrote. `scale(i)` is the scale of the 16 elements from `i` on (called
/// once per 16).
///
/// # Safety
/// AVX-512 F and BW present; `lut[c]` must depend only on `c % codes`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn decode_lut64_bf16(
    lut: &[f32; 256],
    codes: usize,
    scale: impl Fn(usize) -> f32,
    src: &[u8],
    out: &mut [bf16],
) -> usize {
    use std::arch::x86_64::*;
    debug_assert!(codes.is_power_of_two() && codes <= 64);
    let n = src.len().min(out.len()) / 16 * 16;
    // SAFETY: the table has 256 f32; four vectors of 16 are its first 64 entries.
    let t = unsafe {
        [
            _mm512_loadu_ps(lut.as_ptr()),
            _mm512_loadu_ps(lut.as_ptr().add(16)),
            _mm512_loadu_ps(lut.as_ptr().add(32)),
            _mm512_loadu_ps(lut.as_ptr().add(48)),
        ]
    };
    let mask = _mm512_set1_epi32(codes as i32 - 1);
    for i in (0..n).step_by(16) {
        let scale = _mm512_set1_ps(scale(i));
        // SAFETY: elements i .. i + 16 <= n of `src` and `out` (unaligned accesses).
        unsafe {
            let c = _mm512_cvtepu8_epi32(_mm_loadu_si128(src.as_ptr().add(i) as *const __m128i));
            let idx = _mm512_and_si512(c, mask);
            let v = lookup64_ps(&t, idx, codes);
            let bits = _mm512_srli_epi32::<16>(_mm512_castps_si512(_mm512_mul_ps(v, scale)));
            _mm256_storeu_si256(
                out.as_mut_ptr().add(i) as *mut __m256i,
                _mm512_cvtepi32_epi16(bits),
            );
        }
    }
    n
}

/// The first `32·⌊len/32⌋` elements of `out[i] = bf16(table[src[i]] · scale(i))` by
/// truncation, for a full 256-entry table of bf16 bits (fp8 codes): each group of 32 codes
/// is widened to 16-bit indices and looked up in the table held in eight registers
/// (`vpermi2w` over 64 entries, four times, merged by index bits 6 and 7), then widened to
/// f32, scaled by `scale(i)` (called once per group, at its first element) and truncated
/// back. Returns how many elements it wrote. Where every table entry and every product is
/// exact in bf16 (the caller's check) this equals `Operand::decode_run_bf16` (`scaled.rs`)'s scalar
/// loop bit for bit.
///
/// # Safety
/// AVX-512 F and BW present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn decode_lut256_bf16(
    table: &[u16; 256],
    src: &[u8],
    scale: impl Fn(usize) -> f32,
    out: &mut [bf16],
) -> usize {
    use std::arch::x86_64::*;
    let n = src.len().min(out.len()) / 32 * 32;
    // SAFETY: the table has 256 u16: eight vectors of 32.
    let t: [__m512i; 8] = std::array::from_fn(|q| unsafe {
        _mm512_loadu_si512(table.as_ptr().add(32 * q) as *const __m512i)
    });
    for i in (0..n).step_by(32) {
        // SAFETY: elements i .. i + 32 <= n of `src` and `out` (unaligned accesses).
        unsafe {
            let c = _mm256_loadu_si256(src.as_ptr().add(i) as *const __m256i);
            let v = lookup256_bf16(&t, c);
            let sc = _mm512_set1_ps(scale(i));
            let half = |h: __m256i| {
                let f = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h));
                let p = _mm512_mul_ps(_mm512_castsi512_ps(f), sc);
                _mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(_mm512_castps_si512(p)))
            };
            let dst = out.as_mut_ptr().add(i) as *mut __m256i;
            _mm256_storeu_si256(dst, half(_mm512_castsi512_si256(v)));
            _mm256_storeu_si256(dst.add(1), half(_mm512_extracti64x4_epi64::<1>(v)));
        }
    }
    n
}

/// Codes `idx` (one per 32-bit lane) looked up in a table of at most 64 f32 entries held
/// in `t` (`codes` ≤ 32: the first two registers only). `vpermi2ps` reads the low 5 index
/// bits: entries 0..32, then 32..64 where bit 5 is set. (Callable where AVX-512 F and BW
/// are enabled, as in the decoders.)
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn lookup64_ps(
    t: &[std::arch::x86_64::__m512; 4],
    idx: std::arch::x86_64::__m512i,
    codes: usize,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let lo = _mm512_permutex2var_ps(t[0], idx, t[1]);
    if codes <= 32 {
        return lo;
    }
    let hi = _mm512_permutex2var_ps(t[2], idx, t[3]);
    _mm512_mask_mov_ps(lo, _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32)), hi)
}

/// 32 codes `c` looked up in a 256-entry table of bf16 bits held in `t` (eight registers
/// of 32): the codes widened to 16-bit lanes, `vpermi2w` over each quarter of the table
/// (it reads the low 6 index bits), merged on index bits 6 and 7. Returns the 32 bf16
/// bit patterns. (Callable where AVX-512 F and BW are enabled.)
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn lookup256_bf16(
    t: &[std::arch::x86_64::__m512i; 8],
    c: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    let c = _mm512_cvtepu8_epi16(c);
    let q0 = _mm512_permutex2var_epi16(t[0], c, t[1]);
    let q1 = _mm512_permutex2var_epi16(t[2], c, t[3]);
    let q2 = _mm512_permutex2var_epi16(t[4], c, t[5]);
    let q3 = _mm512_permutex2var_epi16(t[6], c, t[7]);
    let m6 = _mm512_test_epi16_mask(c, _mm512_set1_epi16(0x40));
    let m7 = _mm512_test_epi16_mask(c, _mm512_set1_epi16(0x80));
    let lo = _mm512_mask_mov_epi16(q0, m6, q1);
    let hi = _mm512_mask_mov_epi16(q2, m6, q3);
    _mm512_mask_mov_epi16(lo, m7, hi)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The register lookup of 256-entry fp8 tables gives the scalar loop's bits for every
    /// code of every fp8 format (NaNs included), at several scales, over a run with a tail
    /// of fewer than 32 codes that it leaves to the caller.
    #[test]
    fn lut256_register_lookup_gives_the_scalar_bits_for_every_fp8_code() {
        if !lut_registers_available() {
            eprintln!("skipped: no AVX-512 F/BW on this CPU");
            return;
        }
        let src: Vec<u8> = (0..300).map(|i| (i * 37 % 256) as u8).collect();
        for f in [
            ScaledFormat::F8E4M3,
            ScaledFormat::F8E5M2,
            ScaledFormat::F8E4M3Fnuz,
            ScaledFormat::F8E5M2Fnuz,
        ] {
            let lut: [f32; 256] = std::array::from_fn(|c| f.decode(c as u8));
            assert!(
                lut.iter().all(|v| v.to_bits() & 0xffff == 0),
                "{f}: not exact in bf16"
            );
            let table: [u16; 256] = std::array::from_fn(|c| (lut[c].to_bits() >> 16) as u16);
            for sc in [1.0f32, 0.125, 32.0, 2f32.powi(-100)] {
                let mut out = vec![bf16::from_bits(0xdead); src.len()];
                // SAFETY: AVX-512 F/BW checked above.
                let done = unsafe { decode_lut256_bf16(&table, &src, |_| sc, &mut out) };
                assert_eq!(done, 288, "{f}: whole groups of 32 only");
                for (i, (&c, o)) in src.iter().zip(&out).enumerate().take(done) {
                    let want = ((lut[c as usize] * sc).to_bits() >> 16) as u16;
                    assert_eq!(o.to_bits(), want, "{f} × {sc}: code {c:#04x} at {i}");
                }
                assert!(
                    out[done..].iter().all(|o| o.to_bits() == 0xdead),
                    "{f}: tail written"
                );
            }
        }
    }
}
