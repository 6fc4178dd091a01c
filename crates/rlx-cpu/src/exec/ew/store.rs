//! Writing an elementwise kernel's tile values into their output buffers: element
//! conversion where the compute type differs from the stored one, and non-temporal
//! (streaming) copies for outputs too large to stay in cache.

use super::native;
use crate::exec::value::{TileValue, Ty, write_bits};
use rlx_ir::DType;

/// Outputs at least this large are written with non-temporal stores: they cannot stay
/// in cache anyway, and streaming skips reading each line before overwriting it.
pub(crate) const STREAM_BYTES: usize = 8 << 20;

/// Copy `bytes` from `src` to `dst` (not overlapping) with non-temporal stores where
/// `dst` is 16-byte aligned (64-byte stores when the CPU has AVX-512). The caller
/// fences (`sfence`) before the data is shared.
///
/// # Safety
/// Both ranges must be valid and disjoint.
pub(crate) unsafe fn stream_copy(dst: *mut u8, src: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees both ranges valid and disjoint (this function's contract);
    // the AVX-512 variant runs only after avx512f was detected, the 16-byte one needs only
    // SSE2, which every x86-64 CPU has.
    unsafe {
        // The detection is cached by std: one relaxed load per call.
        if std::arch::is_x86_feature_detected!("avx512f") {
            return stream_copy_avx512(dst, src, bytes);
        }
        stream_copy_16(dst, src, bytes);
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller guarantees `bytes` valid, disjoint bytes at `src` and `dst`.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, bytes)
    };
}

/// [`stream_copy`] with 16-byte non-temporal stores (SSE2, every x86-64 CPU).
/// # Safety
/// As [`stream_copy`]: both ranges valid for `bytes` bytes and disjoint.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_copy_16(dst: *mut u8, src: *const u8, bytes: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    // SAFETY: the ranges are valid and disjoint (caller); copy_in_blocks hands the closure
    // `blocks` whole 16-byte blocks with `d` 16-aligned (as _mm_stream_si128 requires) and `s`
    // read unaligned (_mm_loadu_si128), all inside the ranges; SSE2 is baseline on x86-64.
    unsafe {
        copy_in_blocks::<16>(dst, src, bytes, |d, s, blocks| {
            for i in 0..blocks {
                let v = _mm_loadu_si128((s as *const __m128i).add(i));
                _mm_stream_si128((d as *mut __m128i).add(i), v);
            }
        });
    }
}

/// Copy `bytes` from `src` to `dst` with plain copies up to the first `W`-byte boundary
/// of `dst` and after the last whole block, and `blocks(d, s, n)` for the `n` aligned
/// `W`-byte blocks between.
///
/// # Safety
/// Both ranges must be valid and disjoint; `blocks` must copy exactly its blocks.
#[inline(always)]
unsafe fn copy_in_blocks<const W: usize>(
    dst: *mut u8,
    src: *const u8,
    bytes: usize,
    blocks: impl FnOnce(*mut u8, *const u8, usize),
) {
    let head = ((dst as usize).next_multiple_of(W) - dst as usize).min(bytes);
    let body = (bytes - head) / W;
    // SAFETY: `head <= bytes` and `head + body·W <= bytes`, so the head copy, the `body` blocks
    // starting at the first W-aligned address of `dst`, and the tail copy each stay inside the
    // caller's valid, disjoint ranges and together cover them exactly once.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        blocks(dst.add(head), src.add(head), body);
        let done = head + body * W;
        std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), bytes - done);
    }
}

/// [`stream_copy`] with 64-byte non-temporal stores (plain stores up to the first
/// 64-byte boundary of `dst` and after the last).
/// # Safety
/// As [`stream_copy`], and the CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stream_copy_avx512(dst: *mut u8, src: *const u8, bytes: usize) {
    use std::arch::x86_64::{__m512i, _mm512_loadu_si512, _mm512_stream_si512};
    // SAFETY: the caller detected avx512f and passes valid, disjoint ranges; copy_in_blocks
    // hands the closure whole 64-byte blocks with `d` 64-aligned (as _mm512_stream_si512
    // requires) and `s` read unaligned, all inside the ranges.
    unsafe {
        copy_in_blocks::<64>(dst, src, bytes, |d, s, blocks| {
            for i in 0..blocks {
                let v = _mm512_loadu_si512((s as *const __m512i).add(i));
                _mm512_stream_si512((d as *mut __m512i).add(i), v);
            }
        });
    }
}

/// Order this thread's non-temporal stores before anything it does next.
pub(crate) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence is SSE (baseline on x86-64) and only orders this thread's stores.
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
}

/// Store tile value `v` (compute type `ty`) as elements `flat..flat + n` of the dense
/// `dt` buffer at `dst`.
///
/// # Safety
/// `dst` must hold `flat + n` elements; a vector `v` must hold `n` elements.
pub(crate) unsafe fn store(
    v: TileValue,
    ty: Ty,
    dt: DType,
    dst: *mut u8,
    flat: usize,
    n: usize,
    stream: bool,
) {
    // SAFETY: the caller guarantees `dst` holds `flat + n` elements of `dt` (aligned: executor
    // buffers are) and a vector `v` holds `n` elements of `ty`; a native copy is a move of
    // `n·w` bytes (std::ptr::copy when the ranges may overlap, the streaming copy only after
    // checking they do not), the other arms convert element by element.
    unsafe {
        match v {
            TileValue::Scalar(b) => {
                if dt == DType::F32 {
                    let o = std::slice::from_raw_parts_mut((dst as *mut f32).add(flat), n);
                    o.fill(f32::from_bits(b as u32));
                } else {
                    for i in 0..n {
                        write_bits(dt, dst, flat + i, b);
                    }
                }
            }
            TileValue::Vector(p) => {
                let w = dt.size_bytes();
                if native(dt, ty) {
                    let d = dst.add(flat * w);
                    if !std::ptr::eq(d, p) {
                        if stream
                            && (p as usize + n * w <= d as usize
                                || d as usize + n * w <= p as usize)
                        {
                            stream_copy(d, p, n * w);
                        } else {
                            std::ptr::copy(p, d, n * w);
                        }
                    }
                } else if ty == Ty::F32 && matches!(dt, DType::F16 | DType::BF16) {
                    crate::exec::value::narrow_halves(dt, p as *const f32, dst.add(flat * 2), n);
                } else if ty == Ty::F32 {
                    for i in 0..n {
                        write_bits(dt, dst, flat + i, *(p as *const u32).add(i) as u64);
                    }
                } else {
                    for i in 0..n {
                        write_bits(dt, dst, flat + i, *(p as *const u64).add(i));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{store_fence, stream_copy};

    /// Every alignment of the destination and every length around the 16- and 64-byte
    /// store widths copies exactly the source bytes and nothing outside the range, on
    /// each path this CPU runs.
    #[test]
    fn stream_copy_copies_exactly_the_range_at_any_alignment_and_length() {
        type Copy = unsafe fn(*mut u8, *const u8, usize);
        let mut paths: Vec<Copy> = vec![stream_copy];
        #[cfg(target_arch = "x86_64")]
        {
            paths.push(super::stream_copy_16);
            if std::arch::is_x86_feature_detected!("avx512f") {
                paths.push(super::stream_copy_avx512);
            }
        }
        let src: Vec<u8> = (0..600u32).map(|i| (i * 7 + 3) as u8).collect();
        for (dst_off, copy) in (0..70).flat_map(|o| paths.iter().map(move |c| (o, c))) {
            for len in [0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200, 511] {
                let mut dst = vec![0xAAu8; 700];
                // SAFETY: `dst` has 700 bytes and `dst_off + len <= 69 + 511 < 700`; `src` has
                // 600 bytes and `5 + 511 < 600`; the two vectors are distinct allocations, and
                // each path pushed was either baseline or detected on this CPU.
                unsafe { copy(dst.as_mut_ptr().add(dst_off), src.as_ptr().add(5), len) };
                store_fence();
                assert!(dst[..dst_off].iter().all(|&b| b == 0xAA), "{dst_off} {len}");
                assert_eq!(
                    &dst[dst_off..dst_off + len],
                    &src[5..5 + len],
                    "{dst_off} {len}"
                );
                assert!(
                    dst[dst_off + len..].iter().all(|&b| b == 0xAA),
                    "{dst_off} {len}"
                );
            }
        }
    }
}
