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
/// holds the bias of zero). Row-major B: walked along its rows, four at a time, 64
/// columns (four strips, one line of each row) per step, interleaved by byte and word
/// unpacks (then the last full strips 16 columns at a time); column-major B (a
/// transposed weight): each column's quad is one 32-bit word, 16 columns one gather.
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
    let full_strips = nb / 16;
    // Row-major B: every full quad of every full strip, walking the rows. Read down one
    // strip at a time instead (16 bytes of each row, rows often 1–2 KiB apart), each line
    // of B came in four times and nearly every row was a new page: packing took 4.4% of
    // a 1024³ VNNI product on one Emerald Rapids core and 13.6% at 256³.
    let row_walked = if b.cs == 1 { full_strips } else { 0 };
    if row_walked > 0 {
        let base = dst.as_mut_ptr();
        let strip_len = kq * 64;
        for q in 0..full_quads {
            let mut t = 0;
            while t + 4 <= row_walked {
                // SAFETY: rows 4q .. 4q + 4 <= kb and columns 16t .. 16t + 64 <= nb are
                // inside the block; strips t .. t + 4 hold quad q < kq (64 bytes each).
                unsafe {
                    let r = |e: usize| {
                        _mm512_loadu_si512(b.at(4 * q + e, 16 * t).ptr as *const __m512i)
                    };
                    let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
                    // Within each 128-bit lane (one strip's 16 columns), as in the 16-column
                    // step below: lane L of x[i] is strip t + L's columns 4i .. 4i + 4.
                    let (l01, h01) = (_mm512_unpacklo_epi8(r0, r1), _mm512_unpackhi_epi8(r0, r1));
                    let (l23, h23) = (_mm512_unpacklo_epi8(r2, r3), _mm512_unpackhi_epi8(r2, r3));
                    let x0 = _mm512_unpacklo_epi16(l01, l23);
                    let x1 = _mm512_unpackhi_epi16(l01, l23);
                    let x2 = _mm512_unpacklo_epi16(h01, h23);
                    let x3 = _mm512_unpackhi_epi16(h01, h23);
                    // Transpose the 4 × 4 lanes: strip t + L gets lane L of x0, x1, x2, x3.
                    let t0 = _mm512_shuffle_i64x2::<0x44>(x0, x1);
                    let t1 = _mm512_shuffle_i64x2::<0x44>(x2, x3);
                    let t2 = _mm512_shuffle_i64x2::<0xEE>(x0, x1);
                    let t3 = _mm512_shuffle_i64x2::<0xEE>(x2, x3);
                    let strips = [
                        _mm512_shuffle_i64x2::<0x88>(t0, t1),
                        _mm512_shuffle_i64x2::<0xDD>(t0, t1),
                        _mm512_shuffle_i64x2::<0x88>(t2, t3),
                        _mm512_shuffle_i64x2::<0xDD>(t2, t3),
                    ];
                    for (l, v) in strips.into_iter().enumerate() {
                        let out = base.add((t + l) * strip_len + q * 64) as *mut __m512i;
                        _mm512_storeu_si512(out, _mm512_xor_si512(v, fv));
                    }
                }
                t += 4;
            }
            while t < row_walked {
                // SAFETY: rows 4q .. 4q + 4 <= kb and columns 16t .. 16t + 16 <= nb are
                // inside the block; strip t holds quad q < kq.
                unsafe {
                    let r =
                        |e: usize| _mm_loadu_si128(b.at(4 * q + e, 16 * t).ptr as *const __m128i);
                    let (r01l, r01h) =
                        (_mm_unpacklo_epi8(r(0), r(1)), _mm_unpackhi_epi8(r(0), r(1)));
                    let (r23l, r23h) =
                        (_mm_unpacklo_epi8(r(2), r(3)), _mm_unpackhi_epi8(r(2), r(3)));
                    let o = base.add(t * strip_len + q * 64) as *mut __m128i;
                    let f = _mm512_castsi512_si128(fv);
                    let st = |i: usize, v| _mm_storeu_si128(o.add(i), _mm_xor_si128(v, f));
                    st(0, _mm_unpacklo_epi16(r01l, r23l));
                    st(1, _mm_unpackhi_epi16(r01l, r23l));
                    st(2, _mm_unpacklo_epi16(r01h, r23h));
                    st(3, _mm_unpackhi_epi16(r01h, r23h));
                }
                t += 1;
            }
        }
    }
    for t in 0..cols / 16 {
        let strip = &mut dst[t * kq * 64..(t + 1) * kq * 64];
        let j0 = t * 16;
        let w = 16.min(nb.saturating_sub(j0));
        // Strips whose full quads the row walk wrote: only the tail quad and padding left.
        let mut q = if t < row_walked { full_quads } else { 0 };
        if let Some(gather) = gather.filter(|_| w == 16 && q == 0) {
            while q < full_quads {
                // SAFETY: column-major (rs = 1): rows 4q..4q+4 <= kb of columns
                // j0..j0+16 <= nb are one unaligned word each, inside the block; the
                // strip holds quad q (64 bytes).
                unsafe {
                    let out = strip[q * 64..].as_mut_ptr() as *mut __m512i;
                    let base = b.at(4 * q, j0).ptr as *const i32;
                    let v = _mm512_i32gather_epi32::<1>(gather, base);
                    _mm512_storeu_si512(out, _mm512_xor_si512(v, fv));
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
