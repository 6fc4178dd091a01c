//! AVX-512 forms of the quantization loops, chosen at run time, each giving the same
//! bits as the portable loop it replaces (tested against it in `tests` below).
//!
//! - [`absmax_f32`] and [`Encoder::encode_f32_pow2`] (MX blocks, power-of-two scales) are
//!   the portable loops compiled a second time inside a function with AVX-512 enabled:
//!   the workspace builds for baseline x86-64, where LLVM keeps them scalar or 4 lanes
//!   wide (no unsigned `min` in SSE2), and with AVX-512 they run 16 lanes wide.
//! - [`Thresholds`] encodes formats with at most 16 magnitude codes (fp4) under any
//!   positive scale, NVFP4's E4M3 group scales included: the code of `x / s` is the number
//!   of rounding boundaries (midpoints between neighbouring codes) times `s` that `|x|`
//!   passes. That replaces an f64 division and a branchy encode per element by a few
//!   compares of 16 f32 lanes.
//!
//! Why the threshold count equals the oracle's code of the f64 quotient `q = fl(x / s)`:
//! for a boundary `mid` (at most 5 significant bits for a 4-bit format) and a scale `s`
//! whose product `t = mid · s` is exact in f32 (checked per block, else the caller falls
//! back to the scalar encoder), `x / s > mid ⇔ |x| > t` exactly; and rounding the quotient
//! to f64 cannot land on `mid` unless `x = t`, because two distinct f32 values differ by at
//! least 2⁻²⁴ of their size, far above f64's 2⁻⁵³. On a tie (`|x| = t`) round-to-nearest-even
//! picks the neighbour with the even code, so boundary `i` (between codes `i` and `i + 1`)
//! counts on `>` when `i` is even and on `≥` when it is odd.

use super::Encoder;
use rlx_ir::ScaledFormat;

/// Most magnitude codes above zero that [`Thresholds`] handles (4-bit formats: 7).
const MAX_STEPS: usize = 15;

/// Whether `RLX_SCALED_QUANT=portable` asks for the portable loops only (no AVX-512
/// loops, no [`Thresholds`]): the quantizer as it was before this module, for A/B timing
/// in one build. Read once.
fn portable_forced() -> bool {
    use std::sync::OnceLock;
    static FORCED: OnceLock<bool> = OnceLock::new();
    *FORCED.get_or_init(|| std::env::var("RLX_SCALED_QUANT").is_ok_and(|v| v == "portable"))
}

/// Whether this CPU runs the AVX-512 loops (F and BW; decided once), unless
/// [`portable_forced`].
pub(super) fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static OK: OnceLock<bool> = OnceLock::new();
        *OK.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && !portable_forced()
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Largest finite magnitude among the f32 values (little-endian bytes) of `src`, as the
/// bits of `|x|` (0 when there is none): NaN and ±∞ count as 0.
#[inline(always)]
fn absmax_bits_portable(src: &[u8]) -> u32 {
    src.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()) & 0x7fff_ffff)
        .fold(0u32, |m, a| m.max(if a < 0x7f80_0000 { a } else { 0 }))
}

/// [`absmax_bits_portable`] compiled for AVX-512.
///
/// # Safety
/// The CPU must have AVX-512 F and BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn absmax_bits_avx512(src: &[u8]) -> u32 {
    absmax_bits_portable(src)
}

/// Largest finite magnitude of the f32 values (little-endian bytes) in `src` (0 when
/// there is none; NaN and ±∞ are skipped).
pub(super) fn absmax_f32(src: &[u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        // SAFETY: AVX-512 F/BW detected just above.
        return f32::from_bits(unsafe { absmax_bits_avx512(src) });
    }
    f32::from_bits(absmax_bits_portable(src))
}

/// [`Encoder::encode_f32_pow2`] on the widest unit this CPU has (same codes).
pub(super) fn encode_pow2(enc: &Encoder, src: &[u8], inv: f32, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        // SAFETY: AVX-512 F/BW detected just above.
        unsafe { encode_pow2_avx512(enc, src, inv, out) };
        return;
    }
    enc.encode_f32_pow2(src, inv, out)
}

/// [`Encoder::encode_f32_pow2`] compiled for AVX-512.
///
/// # Safety
/// The CPU must have AVX-512 F and BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn encode_pow2_avx512(enc: &Encoder, src: &[u8], inv: f32, out: &mut [u8]) {
    enc.encode_f32_pow2(src, inv, out)
}

/// The rounding boundaries of a format with at most [`MAX_STEPS`] magnitude codes above
/// zero, for encoding by comparison (see the module docs).
pub(super) struct Thresholds {
    /// `mids[i]`: the midpoint between the values of magnitude codes `i` and `i + 1`.
    mids: [f64; MAX_STEPS],
    /// Magnitude codes above zero (the largest finite code).
    steps: usize,
    sign_bit: u32,
    fnuz: bool,
}

impl Thresholds {
    /// The boundaries of `f`, or `None` when it has more than [`MAX_STEPS`] magnitude
    /// codes above zero (or its codes are not ordered like their values).
    pub(super) fn new(f: ScaledFormat, enc: &Encoder) -> Option<Thresholds> {
        let steps = enc.max_code as usize;
        if portable_forced() || steps == 0 || steps > MAX_STEPS || enc.max_code >= enc.sign_bit {
            return None;
        }
        let mut mids = [0f64; MAX_STEPS];
        for (i, m) in mids.iter_mut().enumerate().take(steps) {
            let (lo, hi) = (f.decode(i as u8) as f64, f.decode(i as u8 + 1) as f64);
            // Codes must be ordered like their values (a NaN code fails this too).
            if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
                return None;
            }
            // Exact: both are short binary fractions well inside f64.
            *m = (lo + hi) / 2.0;
        }
        Some(Thresholds {
            mids,
            steps,
            sign_bit: enc.sign_bit,
            fnuz: enc.fnuz,
        })
    }

    /// The boundaries of a block with scale `s`, as f32, when every `mid · s` is exact in
    /// f32 and `s` is positive and finite; `None` otherwise (the caller then encodes the
    /// block element by element).
    pub(super) fn scaled(&self, s: f64) -> Option<[f32; MAX_STEPS]> {
        if !(s > 0.0 && s.is_finite()) {
            return None;
        }
        let mut t = [0f32; MAX_STEPS];
        for (o, &m) in t.iter_mut().zip(&self.mids[..self.steps]) {
            // Exact in f64 (a few significant bits times an f64); kept only if f32 holds it.
            let p = m * s;
            let f = p as f32;
            if f as f64 != p {
                return None;
            }
            *o = f;
        }
        Some(t)
    }

    /// The code of one f32 under the boundaries `t` (see the module docs).
    #[inline(always)]
    fn code(&self, t: &[f32; MAX_STEPS], x: f32) -> u8 {
        if x.is_nan() {
            return 0;
        }
        let a = x.abs();
        let mut mag = 0u32;
        for (i, &b) in t[..self.steps].iter().enumerate() {
            mag += if i % 2 == 0 { a > b } else { a >= b } as u32;
        }
        let neg = x.is_sign_negative() && !(self.fnuz && mag == 0);
        (mag | if neg { self.sign_bit } else { 0 }) as u8
    }

    /// Codes of the f32 values (little-endian bytes) of `src` under the boundaries `t`
    /// (from [`Thresholds::scaled`]), into `out` (one per value).
    pub(super) fn encode(&self, t: &[f32; MAX_STEPS], src: &[u8], out: &mut [u8]) {
        assert_eq!(
            src.len(),
            4 * out.len(),
            "Thresholds::encode: length mismatch"
        );
        #[cfg(target_arch = "x86_64")]
        if avx512() {
            // SAFETY: AVX-512 F/BW detected just above; the lengths agree.
            unsafe { self.encode_avx512(t, src, out) };
            return;
        }
        for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
            *o = self.code(t, f32::from_le_bytes(c.try_into().unwrap()));
        }
    }

    /// Codes of consecutive blocks, each under its own boundaries: block `j` of the f32
    /// values (little-endian bytes) of `src` under `by_code[codes[j]]` into `out`'s block
    /// `j`; a block whose code has no boundaries (`None`) goes to `other(j, out_block)`.
    /// One call per parallel task, as a call per 16-element NVFP4 group cost more than
    /// its compares. `false`, having written nothing, without AVX-512 or when `block` is
    /// not a positive multiple of 16.
    pub(super) fn encode_blocks(
        &self,
        by_code: &[Option<[f32; MAX_STEPS]>],
        codes: &[u8],
        src: &[u8],
        block: usize,
        out: &mut [u8],
        other: impl FnMut(usize, &mut [u8]),
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        if avx512() && block > 0 && block.is_multiple_of(16) {
            assert!(
                src.len() == 4 * out.len()
                    && out.len() == codes.len() * block
                    && by_code.len() == 256,
                "Thresholds::encode_blocks: {} value bytes, {} codes, {} scales and {} boundary sets do not fit blocks of {block}",
                src.len(),
                out.len(),
                codes.len(),
                by_code.len()
            );
            // SAFETY: AVX-512 F/BW detected just above; the lengths agree (asserted).
            unsafe {
                // fp4 (7 boundaries) with its compare loop unrolled; other widths general.
                match self.steps {
                    7 => self.encode_blocks_avx512::<7>(by_code, codes, src, block, out, other),
                    _ => self
                        .encode_blocks_avx512::<MAX_STEPS>(by_code, codes, src, block, out, other),
                }
            };
            return true;
        }
        let _ = (by_code, codes, src, out, other);
        false
    }

    /// [`Thresholds::encode_blocks`] on AVX-512 (the lanes of [`Thresholds::encode`]),
    /// for `self.steps` boundaries (`STEPS` its exact count, or [`MAX_STEPS`] for any).
    ///
    /// # Safety
    /// AVX-512 F and BW; `block` a positive multiple of 16; `src.len() == 4 · out.len()`,
    /// `out.len() == codes.len() · block`, `by_code.len() == 256`; `self.steps == STEPS`
    /// unless `STEPS` is [`MAX_STEPS`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn encode_blocks_avx512<const STEPS: usize>(
        &self,
        by_code: &[Option<[f32; MAX_STEPS]>],
        codes: &[u8],
        src: &[u8],
        block: usize,
        out: &mut [u8],
        mut other: impl FnMut(usize, &mut [u8]),
    ) {
        use std::arch::x86_64::*;
        let one = _mm512_set1_epi32(1);
        let sign = _mm512_set1_epi32(self.sign_bit as i32);
        let inf = _mm512_set1_epi32(0x7f80_0000);
        let abs = _mm512_set1_epi32(0x7fff_ffff);
        let zero = _mm512_setzero_si512();
        let blocks = out
            .chunks_exact_mut(block)
            .zip(src.chunks_exact(4 * block))
            .zip(codes);
        for (j, ((o, s), &c)) in blocks.enumerate() {
            let Some(t) = &by_code[c as usize] else {
                other(j, o);
                continue;
            };
            // A constant for the specialised widths, so the compare loop unrolls.
            let steps = if STEPS == MAX_STEPS {
                self.steps
            } else {
                STEPS
            };
            let mut bounds = [_mm512_setzero_ps(); STEPS];
            for (b, &v) in bounds.iter_mut().zip(&t[..steps]) {
                *b = _mm512_set1_ps(v);
            }
            for (o, v) in o.chunks_exact_mut(16).zip(s.chunks_exact(64)) {
                // SAFETY: `v` holds 16 f32 lanes.
                let bits = unsafe { _mm512_loadu_si512(v.as_ptr().cast()) };
                let abits = _mm512_and_si512(bits, abs);
                let a = _mm512_castsi512_ps(abits);
                let mut mag = zero;
                for (i, &b) in bounds[..steps].iter().enumerate() {
                    let past = if i % 2 == 0 {
                        _mm512_cmp_ps_mask::<_CMP_GT_OQ>(a, b)
                    } else {
                        _mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, b)
                    };
                    mag = _mm512_mask_add_epi32(mag, past, mag, one);
                }
                let mut neg = _mm512_cmplt_epi32_mask(bits, zero);
                if self.fnuz {
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

    /// [`Thresholds::encode`] 16 values at a time (the tail under a mask).
    ///
    /// # Safety
    /// AVX-512 F and BW; `src.len() == 4 · out.len()`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn encode_avx512(&self, t: &[f32; MAX_STEPS], src: &[u8], out: &mut [u8]) {
        use std::arch::x86_64::*;
        let bounds: [__m512; MAX_STEPS] = std::array::from_fn(|i| _mm512_set1_ps(t[i]));
        let one = _mm512_set1_epi32(1);
        let sign = _mm512_set1_epi32(self.sign_bit as i32);
        let inf = _mm512_set1_epi32(0x7f80_0000);
        let abs = _mm512_set1_epi32(0x7fff_ffff);
        let n = out.len();
        let mut g = 0;
        while g < n {
            let lanes = (n - g).min(16);
            let mask: __mmask16 = if lanes == 16 {
                0xffff
            } else {
                (1 << lanes) - 1
            };
            // SAFETY: lanes g..g + lanes are inside `out` and (4 bytes each) inside `src`;
            // the masked load and store touch only those.
            unsafe {
                let bits = _mm512_maskz_loadu_epi32(mask, src.as_ptr().add(4 * g) as *const i32);
                let abits = _mm512_and_si512(bits, abs);
                let a = _mm512_castsi512_ps(abits);
                let mut mag = _mm512_setzero_si512();
                for (i, &b) in bounds[..self.steps].iter().enumerate() {
                    let past = if i % 2 == 0 {
                        _mm512_cmp_ps_mask::<_CMP_GT_OQ>(a, b)
                    } else {
                        _mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, b)
                    };
                    mag = _mm512_mask_add_epi32(mag, past, mag, one);
                }
                let mut neg = _mm512_cmplt_epi32_mask(bits, _mm512_setzero_si512());
                if self.fnuz {
                    neg &= _mm512_test_epi32_mask(mag, mag);
                }
                let code = _mm512_mask_or_epi32(mag, neg, mag, sign);
                let nan = _mm512_cmpgt_epi32_mask(abits, inf);
                let code = _mm512_maskz_mov_epi32(!nan, code);
                _mm512_mask_cvtepi32_storeu_epi8(out.as_mut_ptr().add(g) as *mut i8, mask, code);
            }
            g += lanes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    fn bytes(xs: &[f32]) -> Vec<u8> {
        xs.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// fp4 formats (the ones [`Thresholds`] takes) and a fnuz-free 3-bit-exponent one.
    fn narrow_formats() -> Vec<ScaledFormat> {
        vec![
            ScaledFormat::F4E2M1,
            ScaledFormat::custom(3, 0),
            ScaledFormat::custom(1, 2),
            ScaledFormat::custom_with_bias(2, 1, 3),
        ]
    }

    #[test]
    fn thresholds_equal_the_scalar_encoder_of_the_f64_quotient_under_e4m3_scales() {
        let mut next = xorshift(0x5eed_f00d_1234_abcd);
        for f in narrow_formats() {
            let enc = Encoder::new(f);
            let th = Thresholds::new(f, &enc).expect("a 4-bit format has thresholds");
            // Every positive finite E4M3 value as a scale (NVFP4's group scales), plus
            // a few scales that are not E4M3 values.
            let mut scales: Vec<f64> = (1..0x7fu8)
                .map(|c| ScaledFormat::F8E4M3.decode(c) as f64)
                .collect();
            scales.extend([0.3, 1.0 / 3.0, 7.0e-30, 3.0e30]);
            let mut checked_blocks = 0;
            for &s in &scales {
                let Some(t) = th.scaled(s) else { continue };
                checked_blocks += 1;
                let mut xs = vec![
                    0.0,
                    -0.0,
                    f32::NAN,
                    -f32::NAN,
                    f32::INFINITY,
                    -f32::INFINITY,
                ];
                xs.extend([1e-45, -1e-45, f32::MIN_POSITIVE, f32::MAX, -f32::MAX]);
                // Every code's value, every boundary and their f32 neighbours, times s.
                for c in 0..=enc.max_code as u8 {
                    let v = (f.decode(c) as f64 * s) as f32;
                    xs.extend([v, v.next_up(), v.next_down()]);
                }
                for &b in &t[..th.steps] {
                    xs.extend([b, b.next_up(), b.next_down()]);
                }
                for _ in 0..200 {
                    let r = next();
                    let v = f32::from_bits((r >> 32) as u32);
                    let w = (s * 8.0 * (r as u32) as f64 / u32::MAX as f64) as f32;
                    xs.extend([v, w]);
                }
                let neg: Vec<f32> = xs.iter().map(|v| -v).collect();
                xs.extend(neg);
                let mut got = vec![0u8; xs.len()];
                th.encode(&t, &bytes(&xs), &mut got);
                for (x, g) in xs.iter().zip(&got) {
                    let want = enc.encode(*x as f64 / s);
                    assert_eq!(*g, want, "{f} at {x:e} / {s:e}");
                    // The portable lane loop agrees too (the AVX-512 one ran above).
                    assert_eq!(th.code(&t, *x), want, "{f} portable at {x:e} / {s:e}");
                }
            }
            assert!(
                checked_blocks > 100,
                "{f}: only {checked_blocks} scales usable"
            );
        }
    }

    #[test]
    fn thresholds_refuse_inexact_nonpositive_and_wide_cases() {
        let f = ScaledFormat::F4E2M1;
        let enc = Encoder::new(f);
        let th = Thresholds::new(f, &enc).unwrap();
        for s in [0.0, -1.0, f64::NAN, f64::INFINITY, 1.0 + 2f64.powi(-40)] {
            assert!(th.scaled(s).is_none(), "scale {s:e}");
        }
        // 2^-160 · 0.25 is below f32's subnormals: not exact, so refused.
        assert!(th.scaled(2f64.powi(-160)).is_none());
        let e4m3 = ScaledFormat::F8E4M3;
        assert!(Thresholds::new(e4m3, &Encoder::new(e4m3)).is_none());
    }

    #[test]
    fn the_avx512_pow2_encoder_and_absmax_equal_the_portable_loops() {
        let mut next = xorshift(0x0123_4567_89ab_cdef);
        let mut xs: Vec<f32> = (0..4099)
            .map(|_| {
                let r = next();
                f32::from_bits((r >> 32) as u32) * if r & 1 == 0 { 1.0 } else { 1e-30 }
            })
            .collect();
        xs.extend([f32::NAN, f32::INFINITY, -f32::INFINITY, 0.0, -0.0, 1e-45]);
        let src = bytes(&xs);
        for f in ScaledFormat::NAMED {
            let enc = Encoder::new(f);
            if !enc.has_f32_path() {
                continue;
            }
            for inv in [2f32.powi(-100), 2f32.powi(-3), 1.0, 2f32.powi(90)] {
                let (mut fast, mut slow) = (vec![0u8; xs.len()], vec![0u8; xs.len()]);
                encode_pow2(&enc, &src, inv, &mut fast);
                enc.encode_f32_pow2(&src, inv, &mut slow);
                assert_eq!(fast, slow, "{f} × {inv:e}");
            }
        }
        for len in [0, 1, 15, 16, 17, 4105] {
            let s = &src[..4 * len];
            assert_eq!(
                absmax_f32(s).to_bits(),
                absmax_bits_portable(s),
                "len {len}"
            );
        }
        if !avx512() {
            println!("skipped the AVX-512 half: this CPU lacks AVX-512 F/BW");
        }
    }
}
