//! Whole runs of blocks at a time on AVX-512: the block absmax of `ScaledQuantScale` and
//! the MX (power-of-two scale) encoder of `ScaledQuantize`, for f32 data and blocks of a
//! multiple of 16 elements.
//!
//! The loops of [`super::simd`] are called once per block; for a 32-element MX block LLVM
//! left them scalar (its 16-lane body, unrolled four times, never runs on 32 elements), and
//! each call re-derived its constants. Here one call covers a parallel task's blocks and
//! every step is an explicit 16-lane instruction: the same arithmetic as
//! [`Encoder::encode_f32_pow2`] and [`super::simd::absmax_f32`] (tested equal below).

use super::{Encoder, simd::avx512};

/// Call `each(j, bits)` with the bits of the largest finite `|x|` (0 when none; NaN and ±∞
/// count as 0) of each consecutive `block`-element block `j` of the f32 values (little-
/// endian bytes) of `src`. `false`, having called nothing, when this CPU lacks AVX-512 or
/// `block` is not a positive multiple of 16 (the caller then runs its portable loop).
pub(super) fn absmax_blocks(src: &[u8], block: usize, each: impl FnMut(usize, u32)) -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx512() && block > 0 && block.is_multiple_of(16) {
        // SAFETY: AVX-512 F/BW detected just above.
        unsafe { absmax_blocks_avx512(src, block, each) };
        return true;
    }
    let _ = (src, each);
    false
}

/// [`absmax_blocks`] on AVX-512.
///
/// # Safety
/// AVX-512 F and BW; `block` a positive multiple of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn absmax_blocks_avx512(src: &[u8], block: usize, mut each: impl FnMut(usize, u32)) {
    use std::arch::x86_64::*;
    let abs = _mm512_set1_epi32(0x7fff_ffff);
    let inf = _mm512_set1_epi32(0x7f80_0000);
    for (j, blk) in src.chunks_exact(4 * block).enumerate() {
        let mut m = _mm512_setzero_si512();
        for v in blk.chunks_exact(64) {
            // SAFETY: `v` holds 64 bytes (16 f32 lanes).
            let x = unsafe { _mm512_loadu_si512(v.as_ptr().cast()) };
            // |x| bits order like the magnitudes; ±∞ and NaN (≥ 0x7f80_0000) count as 0.
            let a = _mm512_and_si512(x, abs);
            let finite = _mm512_cmplt_epi32_mask(a, inf);
            m = _mm512_mask_max_epu32(m, finite, m, a);
        }
        each(j, _mm512_reduce_max_epu32(m));
    }
}

/// MX codes of consecutive blocks: block `j` of the f32 values (little-endian bytes) of
/// `src`, under the E8M0 scale code `scales[j]`, into `out`'s block `j`. Scale codes
/// 0..=253 (inverse `2^(127 − c)` a normal f32) are encoded here as
/// [`Encoder::encode_f32_pow2`] does; the rest (254, whose inverse is subnormal, and the
/// NaN scale 255) go to `other(j, out_block)`. `false`, having written nothing, when this
/// CPU lacks AVX-512, the format has no exact f32 path, or `block` is not a positive
/// multiple of 16.
pub(super) fn encode_mx_blocks(
    enc: &Encoder,
    src: &[u8],
    scales: &[u8],
    block: usize,
    out: &mut [u8],
    other: impl FnMut(usize, &mut [u8]),
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx512() && enc.has_f32_path() && block > 0 && block.is_multiple_of(16) {
        assert!(
            src.len() == 4 * out.len() && out.len() == scales.len() * block,
            "encode_mx_blocks: {} value bytes, {} codes and {} scales do not fit blocks of {block}",
            src.len(),
            out.len(),
            scales.len()
        );
        // SAFETY: AVX-512 F/BW detected just above; the lengths agree (asserted).
        unsafe { encode_mx_blocks_avx512(enc, src, scales, block, out, other) };
        return true;
    }
    let _ = (enc, src, scales, out, other);
    false
}

/// The inverse of the E8M0 scale code `c` as an f32, when it is normal (`c ≤ 253`).
pub(super) fn mx_inverse(c: u8) -> Option<f32> {
    // 2^(127 − c): biased f32 exponent 254 − c, normal for 1..=254.
    (c <= 253).then(|| f32::from_bits((254 - c as u32) << 23))
}

/// [`encode_mx_blocks`] on AVX-512.
///
/// # Safety
/// AVX-512 F and BW; `block` a positive multiple of 16; `src.len() == 4 · out.len()` and
/// `out.len() == scales.len() · block`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn encode_mx_blocks_avx512(
    enc: &Encoder,
    src: &[u8],
    scales: &[u8],
    block: usize,
    out: &mut [u8],
    mut other: impl FnMut(usize, &mut [u8]),
) {
    use std::arch::x86_64::*;
    let k = enc.pow2_consts();
    let shift = _mm512_set1_epi32(k.shift as i32);
    let half = _mm512_set1_epi32(k.half as i32);
    let rebias = _mm512_set1_epi32(k.rebias as i32);
    let min_normal = _mm512_set1_ps(k.min_normal);
    let sub_scale = _mm512_set1_ps(k.sub_scale);
    let max = _mm512_set1_ps(k.max);
    let max_code = _mm512_set1_epi32(k.max_code as i32);
    let sign = _mm512_set1_epi32(k.sign_bit as i32);
    let one = _mm512_set1_epi32(1);
    let abs = _mm512_set1_epi32(0x7fff_ffff);
    let inf = _mm512_set1_epi32(0x7f80_0000);
    let two23 = _mm512_set1_ps(8_388_608.0);
    let two23_bits = _mm512_set1_epi32(0x4b00_0000);
    let zero = _mm512_setzero_si512();
    let blocks = out
        .chunks_exact_mut(block)
        .zip(src.chunks_exact(4 * block))
        .zip(scales);
    for (j, ((o, s), &c)) in blocks.enumerate() {
        let Some(inv) = mx_inverse(c) else {
            other(j, o);
            continue;
        };
        let inv = _mm512_set1_ps(inv);
        for (o, v) in o.chunks_exact_mut(16).zip(s.chunks_exact(64)) {
            // SAFETY: `v` holds 16 f32 lanes.
            let x = unsafe { _mm512_loadu_ps(v.as_ptr().cast()) };
            // The lanes of `encode_f32_pow2`, step for step.
            let bits = _mm512_castps_si512(_mm512_mul_ps(x, inv));
            let abits = _mm512_and_si512(bits, abs);
            let a = _mm512_castsi512_ps(abits);
            let lsb = _mm512_and_si512(_mm512_srlv_epi32(abits, shift), one);
            let rounded =
                _mm512_srlv_epi32(_mm512_add_epi32(abits, _mm512_add_epi32(half, lsb)), shift);
            let normal = _mm512_min_epu32(_mm512_sub_epi32(rounded, rebias), max_code);
            let t = _mm512_mul_ps(a, sub_scale);
            let sub = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(t, two23)), two23_bits);
            let is_normal = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, min_normal);
            let saturated = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, max);
            let mag = _mm512_mask_mov_epi32(sub, is_normal, normal);
            let mag = _mm512_mask_mov_epi32(mag, saturated, max_code);
            let mut neg = _mm512_cmplt_epi32_mask(bits, zero);
            if k.fnuz {
                neg &= _mm512_test_epi32_mask(mag, mag);
            }
            let code = _mm512_mask_or_epi32(mag, neg, mag, sign);
            let nan = _mm512_cmpgt_epi32_mask(abits, inf);
            let code = _mm512_maskz_mov_epi32(!nan, code);
            // SAFETY: `o` holds 16 bytes.
            unsafe { _mm_storeu_si128(o.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(code)) };
        }
    }
}

/// `out[j] = enc.encode(f32::from_bits(bits[j]) as f64 / max)` for block absmaxes `bits`
/// (finite magnitudes, as [`absmax_blocks`] gives them) and a positive finite `max`:
/// NVFP4's E4M3 group scales, 8 at a time in f64 lanes (the scalar encoder per block cost
/// more than finding the block's absmax). `false`, having written nothing, without
/// AVX-512 or for a format without mantissa bits (whose tie rule differs).
pub(super) fn encode_quotients(enc: &Encoder, bits: &[u32], max: f64, out: &mut [u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx512() && enc.m >= 1 && max > 0.0 && max.is_finite() {
        assert_eq!(bits.len(), out.len(), "encode_quotients: length mismatch");
        // SAFETY: AVX-512 F/BW detected just above; the lengths agree (asserted).
        unsafe { encode_quotients_avx512(enc, bits, max, out) };
        return true;
    }
    let _ = (enc, bits, max, out);
    false
}

/// [`encode_quotients`] on AVX-512: [`Encoder::encode`]'s steps on 8 f64 lanes (the
/// quotients are non-negative, so no sign; the tail through the scalar encoder).
///
/// # Safety
/// AVX-512 F and BW; `bits.len() == out.len()`; `enc.m ≥ 1`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn encode_quotients_avx512(enc: &Encoder, bits: &[u32], max: f64, out: &mut [u8]) {
    use std::arch::x86_64::*;
    let maxv = _mm512_set1_pd(max);
    let sat = _mm512_set1_pd(enc.max);
    let tiny = _mm512_set1_pd(1e-60);
    let round = _mm512_set1_pd(super::ROUND);
    let emin = _mm512_set1_epi64(enc.emin as i64);
    let m_bias = _mm512_set1_epi64((enc.m + 1023) as i64);
    let one = _mm512_set1_epi64(1);
    let bias = _mm512_set1_epi64(enc.bias as i64);
    let m_shift = _mm512_set1_epi64(enc.m as i64);
    let implicit = _mm512_set1_epi64(1 << enc.m);
    let carry = _mm512_set1_epi64(1 << (enc.m + 1));
    let max_code = _mm512_set1_epi64(enc.max_code as i64);
    let e1023 = _mm512_set1_epi64(1023);
    let n8 = bits.len() / 8 * 8;
    for (o, b) in out[..n8].chunks_exact_mut(8).zip(bits.chunks_exact(8)) {
        // SAFETY: `b` holds 8 u32s.
        let a = unsafe { _mm256_loadu_si256(b.as_ptr().cast()) };
        let q = _mm512_div_pd(_mm512_cvtps_pd(_mm256_castsi256_ps(a)), maxv);
        let qb = _mm512_castpd_si512(q);
        // Unbiased exponent (q ≥ 0: no sign bit), at least emin.
        let e = _mm512_sub_epi64(_mm512_srli_epi64::<52>(qb), e1023);
        let mut k = _mm512_max_epi64(e, emin);
        // q · 2^(m − k), exact; rounded to an integer (ties to even) by ±2⁵².
        let pw = _mm512_slli_epi64::<52>(_mm512_sub_epi64(m_bias, k));
        let scaled = _mm512_mul_pd(q, _mm512_castsi512_pd(pw));
        let mut r = _mm512_sub_epi64(
            _mm512_castpd_si512(_mm512_add_pd(scaled, round)),
            _mm512_castpd_si512(round),
        );
        let over = _mm512_cmpeq_epi64_mask(r, carry);
        k = _mm512_mask_add_epi64(k, over, k, one);
        r = _mm512_mask_mov_epi64(r, over, implicit);
        let normal = _mm512_or_si512(
            _mm512_sllv_epi64(_mm512_add_epi64(k, bias), m_shift),
            _mm512_sub_epi64(r, implicit),
        );
        let sub = _mm512_cmplt_epi64_mask(r, implicit);
        let code = _mm512_min_epi64(_mm512_mask_mov_epi64(normal, sub, r), max_code);
        let code = _mm512_mask_mov_epi64(code, _mm512_cmp_pd_mask::<_CMP_GE_OQ>(q, sat), max_code);
        let code = _mm512_maskz_mov_epi64(!_mm512_cmp_pd_mask::<_CMP_LT_OQ>(q, tiny), code);
        // SAFETY: `o` holds 8 bytes.
        unsafe { _mm_storel_epi64(o.as_mut_ptr().cast(), _mm512_cvtepi64_epi8(code)) };
    }
    for (o, &b) in out[n8..].iter_mut().zip(&bits[n8..]) {
        *o = enc.encode(f32::from_bits(b) as f64 / max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::ScaledFormat;

    /// Random f32 bit patterns of every class (NaN, ±∞, subnormals, ±0) and values near
    /// the codes of every scale, `n` of them.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        let mut xs: Vec<f32> = (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let r = s;
                match i % 4 {
                    0 => f32::from_bits((r >> 32) as u32),
                    1 => ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 900.0,
                    2 => ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1e-38,
                    _ => {
                        ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                            * 2f32.powi((r % 60) as i32 - 30)
                    }
                }
            })
            .collect();
        for (i, v) in [
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            -f32::INFINITY,
            0.0,
            -0.0,
            1e-45,
        ]
        .into_iter()
        .enumerate()
        {
            xs[i * 37 % n] = v;
        }
        xs
    }

    fn bytes(xs: &[f32]) -> Vec<u8> {
        xs.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn block_absmax_equals_the_portable_absmax_of_each_block() {
        let xs = values(64 * 48, 0x1357_9bdf_2468_ace0);
        let src = bytes(&xs);
        for block in [16, 32, 48] {
            let mut got = vec![u32::MAX; xs.len() / block];
            let ran = absmax_blocks(&src, block, |j, b| got[j] = b);
            if !ran {
                println!("skipped: this CPU lacks AVX-512 F/BW");
                return;
            }
            for (j, g) in got.iter().enumerate() {
                let want = super::super::simd::absmax_f32(&src[4 * j * block..4 * (j + 1) * block]);
                assert_eq!(*g, want.to_bits(), "block {j} of {block}");
            }
        }
        // A block of only NaN and ±∞ has no finite value: 0.
        let special = bytes(&[f32::NAN, f32::INFINITY, -f32::INFINITY, -f32::NAN].repeat(4));
        let mut got = 1;
        assert!(absmax_blocks(&special, 16, |_, b| got = b));
        assert_eq!(got, 0);
    }

    #[test]
    fn mx_block_encoder_equals_encode_f64_of_the_exact_quotient_for_every_scale_code() {
        let mut formats = ScaledFormat::NAMED.to_vec();
        formats.extend([ScaledFormat::custom(5, 2), ScaledFormat::custom(1, 6)]);
        let block = 32;
        // One block per scale code, twice over: every code sees varied values.
        let scales: Vec<u8> = (0..=255u8).chain(0..=255u8).collect();
        let xs = values(scales.len() * block, 0xfeed_beef_0bad_f00d);
        let src = bytes(&xs);
        for f in formats {
            let enc = Encoder::new(f);
            let mut got = vec![0xaau8; xs.len()];
            let mut others = Vec::new();
            let ran = encode_mx_blocks(&enc, &src, &scales, block, &mut got, |j, o| {
                others.push(j);
                o.fill(0x55);
            });
            if !enc.has_f32_path() {
                assert!(!ran, "{f} has no f32 path");
                continue;
            }
            if !ran {
                println!("skipped: this CPU lacks AVX-512 F/BW");
                return;
            }
            for (j, &c) in scales.iter().enumerate() {
                let blk = &got[j * block..(j + 1) * block];
                if c > 253 {
                    assert!(
                        others.contains(&j),
                        "{f}: scale code {c} left to the caller"
                    );
                    assert!(blk.iter().all(|&b| b == 0x55), "{f}: block {j} written");
                    continue;
                }
                let s = 2f64.powi(c as i32 - 127);
                for (i, &g) in blk.iter().enumerate() {
                    let x = xs[j * block + i];
                    let want = f.encode_f64(x as f64 / s);
                    assert_eq!(g, want, "{f} at {x:e} / 2^{}", c as i32 - 127);
                }
            }
            assert_eq!(others.len(), 4, "{f}: codes 254 and 255, twice");
        }
    }

    #[test]
    fn e4m3_quotient_encoder_equals_the_scalar_encoder_for_every_f32_binade() {
        let enc = Encoder::new(ScaledFormat::F8E4M3);
        // Every E4M3 value and midpoint times 6 (ties of a / 6), their f32 neighbours, and
        // random finite magnitudes over all binades (subnormal f32 included).
        let f = ScaledFormat::F8E4M3;
        let mut xs: Vec<f32> = vec![0.0, 1e-45, f32::MIN_POSITIVE, f32::MAX, 2688.0, 3000.0];
        for c in 0..0x7eu8 {
            let (lo, hi) = (f.decode(c) as f64, f.decode(c + 1) as f64);
            for v in [lo * 6.0, (lo + hi) / 2.0 * 6.0] {
                let v = v as f32;
                xs.extend([v, v.next_up(), v.next_down().max(0.0)]);
            }
        }
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            xs.push(f32::from_bits((s >> 33) as u32 % 0x7f80_0000));
        }
        let bits: Vec<u32> = xs.iter().map(|v| v.to_bits()).collect();
        for max in [6.0, 448.0, 0.75] {
            let mut got = vec![0xaau8; bits.len()];
            if !encode_quotients(&enc, &bits, max, &mut got) {
                println!("skipped: this CPU lacks AVX-512 F/BW");
                return;
            }
            for (x, g) in xs.iter().zip(&got) {
                let want = f.encode_f64(*x as f64 / max);
                assert_eq!(*g, want, "{x:e} / {max}");
            }
        }
    }

    #[test]
    fn mx_inverse_is_the_exact_normal_inverse_or_none() {
        for c in 0..=255u8 {
            match mx_inverse(c) {
                Some(inv) => {
                    assert!(inv.is_normal(), "code {c}");
                    assert_eq!(inv as f64, 2f64.powi(127 - c as i32), "code {c}");
                }
                None => assert!(c >= 254, "code {c}"),
            }
        }
    }
}
