//! Native `ScaledQuantScale` and `ScaledQuantize` (the oracle's semantics in
//! `rlx_ir::interp::scaled`, reproduced bit for bit): block scales from the finite
//! absmax of each block, and codes from a threshold table instead of the oracle's
//! per-element bit arithmetic, in parallel over rows; the hot loops run 16 lanes wide on
//! AVX-512 CPUs ([`simd`], and [`blocks`] for whole runs of MX blocks). Both ops read
//! their operand where it lies and write their result into a given buffer
//! ([`quant_scale_into`], [`quantize_into`]), so the executor need not copy either.

mod blocks;
mod simd;

use rlx_ir::{DType, ScaleLayout, ScaledFormat, TensorData, TensorView};

use rayon::prelude::*;

/// Rows per parallel chunk of the quantization kernels (a few hundred KiB of input).
const ROWS_PER_CHUNK: usize = 64;

/// The values of a float tensor (f32 data read in place; other float dtypes as f64).
pub(super) enum Vals<'a> {
    F32(&'a [u8]),
    F64(Vec<f64>),
}

impl<'a> Vals<'a> {
    /// `None` for non-float dtypes (the oracle then reports the error).
    pub(super) fn of(x: TensorView<'a>) -> Option<Vals<'a>> {
        match x.dtype {
            DType::F32 => Some(Vals::F32(x.bytes)),
            // f16/bf16/f64 → f64 is exact; the oracle reads them the same way.
            d if d.is_float() => Some(Vals::F64(owned(x).to_f64_vec())),
            _ => None,
        }
    }
}

/// An owned copy of a view (for the rare paths that decode a whole tensor to f64).
fn owned(x: TensorView<'_>) -> TensorData {
    TensorData {
        dtype: x.dtype,
        dims: x.dims.to_vec(),
        bytes: x.bytes.to_vec(),
    }
}

/// Clear the upper halves of the vector registers (`vzeroupper`) on this thread.
///
/// The GEMM's AVX-512 kernels return with them dirty; until something clears them,
/// every non-VEX (SSE) instruction this thread runs is slowed by the merge with the
/// upper state — measured 2.5–3× on the quantization loops here. Each task of these
/// kernels starts (and the matmul tasks also continue after each GEMM call) with this.
#[inline]
pub(super) fn clean_upper() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: zeroupper's only requirement is AVX, detected on this CPU just above;
        // vzeroupper changes no memory, and as a call (a target-feature function is not
        // inlined here) it clobbers only vector registers, which are caller-saved.
        unsafe { zeroupper() }
    }
}

/// # Safety
/// The CPU must have AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn zeroupper() {
    std::arch::x86_64::_mm256_zeroupper()
}

/// Largest finite magnitude among elements `lo..hi` (0 when there is none).
#[inline(always)]
fn absmax(x: &Vals<'_>, lo: usize, hi: usize) -> f64 {
    match x {
        // On the bits of |x| (ordered like the magnitudes): NaN and ±∞ count as 0.
        Vals::F32(b) => simd::absmax_f32(&b[4 * lo..4 * hi]) as f64,
        Vals::F64(v) => v[lo..hi]
            .iter()
            .filter(|v| v.is_finite())
            .fold(0.0, |m, v| m.max(v.abs())),
    }
}

/// Unbiased binary exponent of a positive normal f64.
fn exponent_of(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// The E8M0 code of the MX scale of a block with largest magnitude `absmax`, for a
/// format whose largest finite value has binary exponent `emax_elem`.
fn mx_scale_code(emax_elem: i32, absmax: f64) -> u8 {
    if absmax < 1e-300 {
        return 0;
    }
    (exponent_of(absmax) - emax_elem + 127).clamp(0, 254) as u8
}

/// The scale (f64) that a stored scale value of `layout` stands for.
pub(super) fn decode_scale(layout: ScaleLayout, code: f64) -> f64 {
    match layout {
        ScaleLayout::PerTensor => code,
        ScaleLayout::BlockMxE8M0 { .. } if code == 255.0 => f64::NAN,
        ScaleLayout::BlockMxE8M0 { .. } => (code - 127.0).exp2(),
        ScaleLayout::Nvfp4 { .. } => ScaledFormat::F8E4M3.decode(code as u8) as f64,
    }
}

/// `ScaledQuantScale` of `x` (any float dtype) into result bytes.
pub(super) fn quant_scale(
    format: ScaledFormat,
    layout: ScaleLayout,
    x: &TensorData,
) -> Option<Vec<u8>> {
    let len = match layout.block() {
        None => 4,
        Some(b) => x.numel() / (b as usize).max(1),
    };
    let mut out = vec![0u8; len];
    quant_scale_into(format, layout, x.view(), &mut out)?;
    Some(out)
}

/// `ScaledQuantScale` of `x` (any float dtype) into `out` (one f32 for a per-tensor
/// scale, else one u8 code per block); `None`, having written nothing, when the operands
/// do not fit (the oracle then runs and reports the problem).
pub(super) fn quant_scale_into(
    format: ScaledFormat,
    layout: ScaleLayout,
    x: TensorView<'_>,
    out: &mut [u8],
) -> Option<()> {
    let n: usize = x.dims.iter().product();
    let max = format.max_finite() as f64;
    let Some(block) = layout.block() else {
        if out.len() != 4 {
            return None;
        }
        let vals = Vals::of(x)?;
        let s = (absmax(&vals, 0, n) / max) as f32;
        let s = if s == 0.0 { 1.0 } else { s };
        out.copy_from_slice(&s.to_le_bytes());
        return Some(());
    };
    let block = block as usize;
    if block == 0 || !n.is_multiple_of(block) || out.len() != n / block {
        return None;
    }
    let vals = Vals::of(x)?;
    let per_chunk = ROWS_PER_CHUNK * 16;
    // NVFP4's group scales are E4M3 codes: the precomputed encoder (the same codes) rather
    // than the format's general `encode_f64`, which re-derives its constants per call.
    let e4m3 = Encoder::new(ScaledFormat::F8E4M3);
    let emax_elem = exponent_of(max);
    let code_of = |a: f64| match layout {
        ScaleLayout::Nvfp4 { .. } => e4m3.encode(a / max),
        _ => mx_scale_code(emax_elem, a),
    };
    out.par_chunks_mut(per_chunk)
        .enumerate()
        .for_each(|(c, out)| {
            clean_upper();
            let b0 = c * per_chunk;
            if let Vals::F32(bytes) = &vals {
                let src = &bytes[4 * b0 * block..4 * (b0 + out.len()) * block];
                if matches!(layout, ScaleLayout::Nvfp4 { .. }) {
                    // The absmaxes first, then their E4M3 codes 8 lanes at a time.
                    let mut bits = [0u32; ROWS_PER_CHUNK * 16];
                    let bits = &mut bits[..out.len()];
                    if blocks::absmax_blocks(src, block, |j, b| bits[j] = b) {
                        if !blocks::encode_quotients(&e4m3, bits, max, out) {
                            for (o, &b) in out.iter_mut().zip(&*bits) {
                                *o = code_of(f32::from_bits(b) as f64);
                            }
                        }
                        return;
                    }
                } else {
                    let each = |j: usize, b: u32| out[j] = code_of(f32::from_bits(b) as f64);
                    if blocks::absmax_blocks(src, block, each) {
                        return;
                    }
                }
            }
            for (j, code) in out.iter_mut().enumerate() {
                let b = b0 + j;
                *code = code_of(absmax(&vals, b * block, (b + 1) * block));
            }
        });
    Some(())
}

/// Round-to-nearest-even encoding of one format with its constants precomputed: the
/// same arithmetic as [`ScaledFormat::encode_f64`] (tested equal on every midpoint
/// between codes and around it), without re-deriving `max_finite` per element and
/// with the rounding done by the 2⁵² trick instead of a libm call.
pub(super) struct Encoder {
    max: f64,
    max_code: u32,
    sign_bit: u32,
    fnuz: bool,
    m: i32,
    bias: i32,
    emin: i32,
}

/// Adding and subtracting 2⁵² rounds a value in [0, 2⁵²) to an integer, ties to even
/// (the default rounding mode).
const ROUND: f64 = 4_503_599_627_370_496.0;

impl Encoder {
    pub(super) fn new(f: ScaledFormat) -> Encoder {
        let max = f.max_finite() as f64;
        let (_, m, bias) = f.fields();
        Encoder {
            max,
            max_code: f.encode_f64(max) as u32,
            sign_bit: 1 << (f.exp_bits() + m),
            fnuz: f.is_fnuz(),
            m: m as i32,
            bias,
            emin: 1 - bias,
        }
    }

    /// The code of `x` (RNE, saturating, NaN → 0).
    #[inline(always)]
    pub(super) fn encode(&self, x: f64) -> u8 {
        if x.is_nan() {
            return 0;
        }
        let a = x.abs();
        let mag = if a >= self.max {
            self.max_code
        } else if a < 1e-60 {
            // Far below half the smallest subnormal of any format (≥ 2^−134).
            0
        } else {
            let mut k = exponent_of(a).max(self.emin);
            // `a·2^(m−k)` is exact: a power-of-two scaling well inside f64's range.
            let scaled = a * f64::from_bits(((self.m - k + 1023) as u64) << 52);
            let mut q = if self.m == 0 && scaled == 1.5 {
                // No mantissa bits: both neighbours of the tie have significand 1, so
                // the even exponent field wins.
                if (k + self.bias) % 2 == 0 { 1 } else { 2 }
            } else {
                ((scaled + ROUND) - ROUND) as u32
            };
            if q == 1 << (self.m + 1) {
                k += 1;
                q = 1 << self.m;
            }
            let code = if q < 1 << self.m {
                q
            } else {
                (((k + self.bias) as u32) << self.m) | (q - (1 << self.m))
            };
            code.min(self.max_code)
        };
        let neg = x.is_sign_negative() && !(self.fnuz && mag == 0);
        (mag | if neg { self.sign_bit } else { 0 }) as u8
    }

    /// Whether [`Encoder::encode_f32_pow2`] is exact for this format: at least one
    /// mantissa bit (the m = 0 tie rule differs), and half the smallest subnormal above
    /// the f32 normal range (so an f32 product that underflows still encodes to 0).
    pub(super) fn has_f32_path(&self) -> bool {
        self.m >= 1 && self.emin - self.m - 1 > -126
    }

    /// The constants of [`Encoder::encode_f32_pow2`] (shared with its AVX-512 form in
    /// [`blocks`], so both read one derivation).
    pub(super) fn pow2_consts(&self) -> Pow2Consts {
        let m = self.m as u32;
        let shift = 23 - m;
        Pow2Consts {
            shift,
            half: (1u32 << (shift - 1)) - 1,
            // f32 exponent field k + 127 → the format's k + bias.
            rebias: ((127 - self.bias) as u32) << m,
            min_normal: f32::from_bits(((self.emin + 127) as u32) << 23),
            // a·2^(m − emin) for the subnormal range; (t + 2²³) − 2²³ rounds t to even.
            sub_scale: f32::from_bits(((self.m - self.emin + 127) as u32) << 23),
            max: self.max as f32,
            max_code: self.max_code,
            sign_bit: self.sign_bit,
            fnuz: self.fnuz,
        }
    }

    /// Codes of the f32 values `src` (little-endian bytes) divided by a power-of-two
    /// scale, given as its inverse `inv` (an f32 power of two): the same codes as
    /// [`Encoder::encode`] of the exact f64 quotients, computed on f32 bits without
    /// branches so the loop vectorizes. `x·inv` is exact in f32 unless it underflows
    /// below 2⁻¹²⁶, where every such format encodes 0 anyway (see `has_f32_path`).
    #[inline(always)]
    pub(super) fn encode_f32_pow2(&self, src: &[u8], inv: f32, out: &mut [u8]) {
        let k = self.pow2_consts();
        for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
            let y = f32::from_le_bytes(c.try_into().unwrap()) * inv;
            let bits = y.to_bits();
            let abits = bits & 0x7fff_ffff;
            let a = f32::from_bits(abits);
            let rounded = abits.wrapping_add(k.half + ((abits >> k.shift) & 1)) >> k.shift;
            let normal = rounded.wrapping_sub(k.rebias).min(k.max_code);
            // t < 2^m ≤ 2^22: adding 2²³ rounds it to an integer (ties to even) that
            // sits in the low mantissa bits.
            let t = a * k.sub_scale;
            let sub = (t + 8_388_608.0).to_bits().wrapping_sub(0x4b00_0000);
            let mag = if a >= k.max {
                k.max_code
            } else if a >= k.min_normal {
                normal
            } else {
                sub
            };
            let nan = abits > 0x7f80_0000;
            let neg = bits >> 31 == 1 && !(k.fnuz && mag == 0);
            let code = mag | if neg { k.sign_bit } else { 0 };
            *o = if nan { 0 } else { code as u8 };
        }
    }
}

/// The constants of the branch-free f32 encoder ([`Encoder::pow2_consts`]): a value `a`
/// (an f32 magnitude) encodes to `max_code` from `max` up, to its f32 bits rounded to
/// `23 − shift` mantissa bits and rebiased from `min_normal` up, and below that to the
/// integer nearest `a · sub_scale` (a subnormal code).
pub(super) struct Pow2Consts {
    pub(super) shift: u32,
    pub(super) half: u32,
    pub(super) rebias: u32,
    pub(super) min_normal: f32,
    pub(super) sub_scale: f32,
    pub(super) max: f32,
    pub(super) max_code: u32,
    pub(super) sign_bit: u32,
    pub(super) fnuz: bool,
}

/// `ScaledQuantize` of `x` with `scales` into result bytes (u8 codes shaped like `x`).
pub(super) fn quantize(
    format: ScaledFormat,
    layout: ScaleLayout,
    x: &TensorData,
    scales: &TensorData,
) -> Option<Vec<u8>> {
    let mut out = vec![0u8; x.numel()];
    quantize_into(format, layout, x.view(), scales.view(), &mut out)?;
    Some(out)
}

/// `ScaledQuantize` of `x` with `scales` into `out` (u8 codes shaped like `x`); `None`,
/// having written nothing, when the operands do not fit (the oracle then reports it).
pub(super) fn quantize_into(
    format: ScaledFormat,
    layout: ScaleLayout,
    x: TensorView<'_>,
    scales: TensorView<'_>,
    out: &mut [u8],
) -> Option<()> {
    let n: usize = x.dims.iter().product();
    let k = x.dims.last().copied().unwrap_or(1).max(1);
    let (block, per_row) = match layout.block() {
        Some(b) if b > 0 && k % b as usize == 0 => (b as usize, k / b as usize),
        Some(_) => return None,
        None => (k, 1),
    };
    let blocked = layout.block().is_some();
    let n_scales: usize = scales.dims.iter().product();
    if out.len() != n || n_scales != if blocked { n / k * per_row } else { 1 } {
        return None;
    }
    let vals = Vals::of(x)?;
    // u8 scale codes (MX E8M0, NVFP4 E4M3) are decoded through a table of all 256: an
    // `exp2` (MX) or the format's general decoder (NVFP4) per block cost more than
    // encoding the block's elements.
    let table: Option<[f64; 256]> = (blocked && scales.dtype == DType::U8)
        .then(|| std::array::from_fn(|c| decode_scale(layout, c as f64)));
    let raw: Vec<f64> = match table {
        Some(_) => Vec::new(),
        None => owned(scales).to_f64_vec(),
    };
    // Code (as the byte the NVFP4 boundary table is indexed by) and scale of block `sb`.
    let scale_of = |sb: usize| -> (u8, f64) {
        match &table {
            Some(t) => {
                let c = scales.bytes[sb];
                (c, t[c as usize])
            }
            None => (raw[sb] as u8, decode_scale(layout, raw[sb])),
        }
    };
    // MX codes and f32 values: whole runs of blocks on AVX-512 (`blocks`).
    let mx_codes = (matches!(layout, ScaleLayout::BlockMxE8M0 { .. }) && table.is_some())
        .then_some(scales.bytes);
    let enc = Encoder::new(format);
    // fp4 codes under scales that are not powers of two (NVFP4): by comparison with the
    // block's rounding boundaries, 16 lanes at a time, instead of an f64 division each.
    let thresholds = simd::Thresholds::new(format, &enc);
    // With E4M3 scales, every block's boundaries are one of 256: computed once each.
    let bounds_by_code: Option<Vec<_>> = match (&thresholds, layout, &table) {
        (Some(th), ScaleLayout::Nvfp4 { .. }, Some(t)) => {
            Some(t.iter().map(|&sc| th.scaled(sc)).collect())
        }
        _ => None,
    };
    // One block (`block` elements from `first`, scale `sb`), element by element or by
    // the 16-lane loops.
    let encode_block = |sb: usize, first: usize, blk: &mut [u8]| {
        let (code, sc) = scale_of(sb);
        if sc == 0.0 || !sc.is_finite() {
            blk.fill(0);
            return;
        }
        // x/s rounded once in f64, as the oracle forms it; for a power-of-two
        // scale (every MX scale) that is the exact product with 1/s.
        let pow2 = sc.is_normal() && sc.to_bits() & ((1 << 52) - 1) == 0;
        let inv = 1.0 / sc;
        let q = |v: f64| {
            enc.encode(if pow2 && inv.is_normal() {
                v * inv
            } else {
                v / sc
            })
        };
        let fast_pow2 = pow2 && enc.has_f32_path() && (inv as f32).is_normal();
        let bounds = match (&vals, &thresholds, &bounds_by_code) {
            (Vals::F32(_), Some(th), Some(by_code)) if !fast_pow2 => {
                by_code[code as usize].map(|t| (th, t))
            }
            (Vals::F32(_), Some(th), None) if !fast_pow2 => th.scaled(sc).map(|t| (th, t)),
            _ => None,
        };
        match &vals {
            Vals::F32(b) if fast_pow2 => {
                let src = &b[4 * first..4 * (first + blk.len())];
                simd::encode_pow2(&enc, src, inv as f32, blk);
            }
            Vals::F32(b) if bounds.is_some() => {
                let (th, t) = bounds.as_ref().expect("checked by the guard");
                let src = &b[4 * first..4 * (first + blk.len())];
                th.encode(t, src, blk);
            }
            Vals::F32(b) => {
                let src = b[4 * first..4 * (first + blk.len())].chunks_exact(4);
                for (code, v) in blk.iter_mut().zip(src) {
                    *code = q(f32::from_le_bytes(v.try_into().unwrap()) as f64);
                }
            }
            Vals::F64(v) => {
                for (code, &v) in blk.iter_mut().zip(&v[first..]) {
                    *code = q(v);
                }
            }
        }
    };
    out.par_chunks_mut(ROWS_PER_CHUNK * k)
        .enumerate()
        .for_each(|(c, out)| {
            clean_upper();
            let base = c * ROWS_PER_CHUNK * k;
            // `block` divides the row length `k`, so blocks are numbered in storage
            // order: block `j` of this chunk is `base / block + j` (a row's scales are
            // consecutive).
            let sb0 = if blocked { base / block } else { 0 };
            // NVFP4 codes: whole runs of groups under their codes' boundaries.
            if let (Some(th), Some(by_code), Vals::F32(b)) = (&thresholds, &bounds_by_code, &vals) {
                let src = &b[4 * base..4 * (base + out.len())];
                let codes = &scales.bytes[sb0..sb0 + out.len() / block];
                let other = |j: usize, blk: &mut [u8]| encode_block(sb0 + j, base + j * block, blk);
                if th.encode_blocks(by_code, codes, src, block, out, other) {
                    return;
                }
            }
            if let (Some(codes), Vals::F32(b)) = (mx_codes, &vals) {
                let src = &b[4 * base..4 * (base + out.len())];
                let codes = &codes[sb0..sb0 + out.len() / block];
                let other = |j: usize, blk: &mut [u8]| encode_block(sb0 + j, base + j * block, blk);
                if blocks::encode_mx_blocks(&enc, src, codes, block, out, other) {
                    return;
                }
            }
            for (j, blk) in out.chunks_mut(block).enumerate() {
                let sb = if blocked { sb0 + j } else { 0 };
                encode_block(sb, base + j * block, blk);
            }
        });
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn formats() -> Vec<ScaledFormat> {
        let mut f = ScaledFormat::NAMED.to_vec();
        f.extend([
            ScaledFormat::custom(3, 0),
            ScaledFormat::custom(5, 2),
            ScaledFormat::custom(1, 6),
            ScaledFormat::custom_with_bias(4, 3, -3),
        ]);
        f
    }

    #[test]
    fn encoder_equals_encode_f64_at_every_midpoint_between_codes_and_around_it() {
        for f in formats() {
            let enc = Encoder::new(f);
            let mut probes = vec![
                0.0,
                -0.0,
                1e-310,
                1e-59,
                1e-61,
                1e300,
                f64::INFINITY,
                f64::NEG_INFINITY,
            ];
            // Midpoints between consecutive positive codes (the rounding boundaries).
            let top = f.encode_f64(f.max_finite() as f64);
            let mids = (0..top).map(|c| (f.decode(c) as f64 + f.decode(c + 1) as f64) / 2.0);
            for m in mids {
                for v in [m, m.next_up(), m.next_down(), m * 0.75, m * 1.25] {
                    probes.extend([v, -v]);
                }
            }
            for c in 0..=255u8 {
                let v = f.decode(c) as f64;
                probes.extend([v, v.next_up(), v.next_down()]);
            }
            for v in probes {
                assert_eq!(enc.encode(v), f.encode_f64(v), "{f} at {v:e}");
            }
            assert_eq!(enc.encode(f64::NAN), 0, "{f}");
        }
    }

    #[test]
    fn f32_power_of_two_path_equals_encode_f64_of_the_exact_quotient() {
        let mut s = 0x0bad_cafe_1234_5678u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for f in formats() {
            let enc = Encoder::new(f);
            if !enc.has_f32_path() {
                continue;
            }
            for j in [-126, -40, -7, 0, 3, 60, 126] {
                let inv = 2f32.powi(j);
                let mut xs: Vec<f32> = (0..4000)
                    .map(|_| {
                        let r = next();
                        let mant = 1.0 + (r >> 40) as f32 / (1u64 << 24) as f32;
                        let e = (r % 80) as i32 - 40 - j;
                        let v = mant * 2f32.powi(e.clamp(-149, 127));
                        if r & 1 == 0 { v } else { -v }
                    })
                    .collect();
                // Every code value and midpoint, exactly, at this scale.
                let top = f.encode_f64(f.max_finite() as f64);
                for c in 0..top {
                    let (lo, hi) = (f.decode(c), f.decode(c + 1));
                    for v in [lo, (lo + hi) / 2.0, hi * 1.01, lo.next_up()] {
                        xs.extend([v / inv, -v / inv]);
                    }
                }
                xs.extend([f32::NAN, f32::INFINITY, -f32::INFINITY, 0.0, -0.0, 1e-45]);
                let bytes: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
                let mut got = vec![0u8; xs.len()];
                enc.encode_f32_pow2(&bytes, inv, &mut got);
                for (x, g) in xs.iter().zip(got) {
                    let want = f.encode_f64(*x as f64 * inv as f64);
                    assert_eq!(g, want, "{f} at {x:e} × 2^{j}");
                }
            }
        }
    }

    #[test]
    fn nvfp4_quantize_equals_the_f64_encoder_of_each_quotient_for_every_scale_code() {
        // Rows of 48 values (3 groups of 16) per E4M3 scale code: codes 0 (zero scale)
        // and 0x7f (NaN) give zero blocks, tiny codes leave the threshold path.
        let (rows, k) = (256usize, 48usize);
        let mut st = 0x9e37_79b9_7f4a_7c15u64;
        let mut xs = Vec::with_capacity(rows * k);
        for r in 0..rows {
            let s = ScaledFormat::F8E4M3.decode(r as u8) as f64;
            for i in 0..k {
                st ^= st << 13;
                st ^= st >> 7;
                st ^= st << 17;
                let code = (st % 16) as u8;
                let v = match i % 6 {
                    // Exact code values and midpoints times the scale (ties).
                    0 => ScaledFormat::F4E2M1.decode(code) as f64 * s,
                    1 => {
                        let (lo, hi) = (code % 7, code % 7 + 1);
                        (ScaledFormat::F4E2M1.decode(lo) as f64
                            + ScaledFormat::F4E2M1.decode(hi) as f64)
                            / 2.0
                            * s
                    }
                    2 => f64::from(f32::from_bits((st >> 32) as u32)),
                    _ => ((st >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 14.0 * s,
                };
                xs.push(v as f32);
            }
        }
        xs[5] = f32::NAN;
        xs[6] = f32::INFINITY;
        xs[7] = -0.0;
        let x = TensorData::from_f32(&[rows, k], &xs);
        let scale_codes: Vec<u8> = (0..rows).flat_map(|r| [r as u8; 3]).collect();
        let scales = TensorData::new(DType::U8, &[rows, 3], scale_codes.clone()).unwrap();
        let layout = ScaleLayout::nvfp4();
        let f = ScaledFormat::F4E2M1;
        let got = quantize(f, layout, &x, &scales).unwrap();
        let enc = Encoder::new(f);
        for (i, (&v, &g)) in xs.iter().zip(&got).enumerate() {
            let s = decode_scale(layout, scale_codes[i / 16] as f64);
            let want = if s == 0.0 || !s.is_finite() {
                0
            } else {
                enc.encode(v as f64 / s)
            };
            assert_eq!(g, want, "element {i}: {v:e} / {s:e}");
        }
    }

    #[test]
    fn encoder_equals_encode_f64_on_random_values_over_many_binades() {
        let mut s = 0x1234_5678_9abc_def1u64;
        for f in formats() {
            let enc = Encoder::new(f);
            for _ in 0..20_000 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let mant = 1.0 + (s >> 11) as f64 / (1u64 << 53) as f64;
                let e = (s % 60) as i32 - 30;
                let v = mant * 2f64.powi(e) * if s & 1 == 0 { 1.0 } else { -1.0 };
                assert_eq!(enc.encode(v), f.encode_f64(v), "{f} at {v:e}");
            }
        }
    }
}
