//! The int8 B packing that two int8 kernels share: the AMX kernel (`tdpbssd`, in
//! `int8.rs`) reads B in this quad layout as it is, the AVX512_VNNI kernel
//! (`int8_vnni.rs`, `vpdpbusd`) reads it with every byte biased by 128. It lives apart
//! from both so that neither kernel module depends on the other.

use super::lowp_drive::Src;
use std::arch::x86_64::*;

/// Pack sums `0..kb`, columns `0..nb` of `b` as strips of 16 columns, each
/// `[kpad / 4 quads][16 columns][4]`, over `nb` rounded up to `nr` columns (a multiple
/// of 16: the kernel's panel width; zeros past `nb` and `kb`), every byte XORed with
/// `flip` (0, or 0x80 to store `b + 128` as unsigned bytes for `vpdpbusd`; padding then
/// holds the bias of zero). Row-major B: four rows interleaved by byte and word unpacks;
/// column-major B (a transposed weight): each column's quad is one 32-bit word, 16
/// columns one gather.
///
/// # Safety
/// The `kb × nb` block of `b` must be readable; AVX-512 F/BW present.
#[target_feature(enable = "avx512f,avx512bw")]
pub(in crate::gemm) unsafe fn pack_b_quads(
    b: Src<i8>,
    (kb, nb): (usize, usize),
    kpad: usize,
    (nr, flip): (usize, u8),
    dst: &mut [i8],
) {
    debug_assert!(nr.is_multiple_of(16));
    let fv = _mm512_set1_epi8(flip as i8);
    let kq = kpad / 4;
    let cols = nb.next_multiple_of(nr);
    assert!(
        dst.len() >= cols * kpad,
        "int8 pack_b_quads: buffer too small"
    );
    let gather = (b.rs == 1 && b.cs.unsigned_abs() * 16 < i32::MAX as usize).then(|| {
        let n = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        _mm512_mullo_epi32(n, _mm512_set1_epi32(b.cs as i32))
    });
    let full_quads = kb / 4;
    for t in 0..cols / 16 {
        let strip = &mut dst[t * kq * 64..(t + 1) * kq * 64];
        let j0 = t * 16;
        let w = 16.min(nb.saturating_sub(j0));
        let mut q = 0;
        if w == 16 && (b.cs == 1 || gather.is_some()) {
            while q < full_quads {
                let out = strip[q * 64..].as_mut_ptr() as *mut __m512i;
                // SAFETY: rows 4q..4q+4 <= kb and columns j0..j0+16 <= nb are inside the
                // block; `out` has 64 bytes. Row-major: each row's 16 bytes are contiguous;
                // column-major (rs = 1): each column's 4 sums are one unaligned word.
                unsafe {
                    if b.cs == 1 {
                        let r =
                            |e: usize| _mm_loadu_si128(b.at(4 * q + e, j0).ptr as *const __m128i);
                        let (r01l, r01h) =
                            (_mm_unpacklo_epi8(r(0), r(1)), _mm_unpackhi_epi8(r(0), r(1)));
                        let (r23l, r23h) =
                            (_mm_unpacklo_epi8(r(2), r(3)), _mm_unpackhi_epi8(r(2), r(3)));
                        let o = out as *mut __m128i;
                        let f = _mm512_castsi512_si128(fv);
                        let st = |i: usize, v| _mm_storeu_si128(o.add(i), _mm_xor_si128(v, f));
                        st(0, _mm_unpacklo_epi16(r01l, r23l));
                        st(1, _mm_unpackhi_epi16(r01l, r23l));
                        st(2, _mm_unpacklo_epi16(r01h, r23h));
                        st(3, _mm_unpackhi_epi16(r01h, r23h));
                    } else {
                        let base = b.at(4 * q, j0).ptr as *const i32;
                        let v = _mm512_i32gather_epi32::<1>(gather.unwrap_unchecked(), base);
                        _mm512_storeu_si512(out, _mm512_xor_si512(v, fv));
                    }
                }
                q += 1;
            }
        }
        for q in q..kq {
            for (n, quad) in strip[q * 64..(q + 1) * 64].chunks_exact_mut(4).enumerate() {
                for (e, v) in quad.iter_mut().enumerate() {
                    let kk = 4 * q + e;
                    *v = flip as i8
                        ^ if n < w && kk < kb {
                            // SAFETY: guarded to kk < kb, j0 + n < nb: inside the block.
                            unsafe { b.get(kk, j0 + n) }
                        } else {
                            0
                        };
                }
            }
        }
    }
}
