//! Native `ScaledQuantScale` and `ScaledQuantize` (the oracle's semantics in
//! `rlx_ir::interp::scaled`, reproduced bit for bit): block scales from the finite
//! absmax of each block, and codes from a threshold table instead of the oracle's
//! per-element bit arithmetic, in parallel over rows.

use rlx_ir::{DType, ScaleLayout, ScaledFormat, TensorData};

use rayon::prelude::*;

/// Rows per parallel chunk of the quantization kernels (a few hundred KiB of input).
const ROWS_PER_CHUNK: usize = 64;

/// The values of a float tensor, readable per row without copying f32 data.
pub(super) enum Vals<'a> {
    F32(&'a [u8]),
    F64(Vec<f64>),
}

impl<'a> Vals<'a> {
    /// `None` for non-float dtypes (the oracle then reports the error).
    pub(super) fn of(x: &'a TensorData) -> Option<Vals<'a>> {
        match x.dtype {
            DType::F32 => Some(Vals::F32(&x.bytes)),
            // f16/bf16/f64 → f64 is exact; the oracle reads them the same way.
            d if d.is_float() => Some(Vals::F64(x.to_f64_vec())),
            _ => None,
        }
    }

    /// Element `i` as f64 (exact).
    #[inline(always)]
    pub(super) fn get(&self, i: usize) -> f64 {
        match self {
            Vals::F32(b) => f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap()) as f64,
            Vals::F64(v) => v[i],
        }
    }
}

/// Largest finite magnitude among elements `lo..hi` (0 when there is none).
fn absmax(x: &Vals<'_>, lo: usize, hi: usize) -> f64 {
    let mut m = 0.0f64;
    for i in lo..hi {
        let v = x.get(i);
        if v.is_finite() {
            m = m.max(v.abs());
        }
    }
    m
}

/// Unbiased binary exponent of a positive normal f64.
fn exponent_of(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// The E8M0 code of the MX scale of a block with largest magnitude `absmax`.
fn mx_scale_code(format: ScaledFormat, absmax: f64) -> u8 {
    if absmax < 1e-300 {
        return 0;
    }
    let emax_elem = exponent_of(format.max_finite() as f64);
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
    let vals = Vals::of(x)?;
    let n = x.numel();
    let max = format.max_finite() as f64;
    let Some(block) = layout.block() else {
        let s = (absmax(&vals, 0, n) / max) as f32;
        let s = if s == 0.0 { 1.0 } else { s };
        return Some(s.to_le_bytes().to_vec());
    };
    let block = block as usize;
    if block == 0 || !n.is_multiple_of(block) {
        return None;
    }
    let mut codes = vec![0u8; n / block];
    let per_chunk = ROWS_PER_CHUNK * 16;
    codes
        .par_chunks_mut(per_chunk)
        .enumerate()
        .for_each(|(c, out)| {
            for (j, code) in out.iter_mut().enumerate() {
                let b = c * per_chunk + j;
                let a = absmax(&vals, b * block, (b + 1) * block);
                *code = match layout {
                    ScaleLayout::Nvfp4 { .. } => ScaledFormat::F8E4M3.encode_f64(a / max),
                    _ => mx_scale_code(format, a),
                };
            }
        });
    Some(codes)
}

/// Round-to-nearest-even encoding of a format by a table of the midpoints between
/// consecutive codes (equal to [`ScaledFormat::encode_f64`]; tested on every midpoint
/// and its neighbours).
pub(super) struct Encoder {
    /// `mids[c]`: the midpoint between the values of positive codes `c` and `c + 1`.
    mids: Vec<f64>,
    /// The code a value exactly at `mids[c]` gets (the "even" neighbour).
    ties: Vec<u8>,
    max: f64,
    max_code: u8,
    sign_bit: u8,
    fnuz: bool,
}

impl Encoder {
    pub(super) fn new(f: ScaledFormat) -> Encoder {
        let max = f.max_finite() as f64;
        let max_code = f.encode_f64(max);
        let sign_bit = 1u8 << (f.exp_bits() + f.mant_bits());
        let vals: Vec<f64> = (0..=max_code).map(|c| f.decode(c) as f64).collect();
        let mids: Vec<f64> = vals.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
        let ties = mids.iter().map(|&m| f.encode_f64(m)).collect();
        Encoder {
            mids,
            ties,
            max,
            max_code,
            sign_bit,
            fnuz: f.is_fnuz(),
        }
    }

    /// The code of `x` (RNE, saturating, NaN → 0).
    #[inline]
    pub(super) fn encode(&self, x: f64) -> u8 {
        if x.is_nan() {
            return 0;
        }
        let a = x.abs();
        let mag = if a >= self.max {
            self.max_code
        } else {
            let c = self.mids.partition_point(|&m| m < a);
            if c < self.mids.len() && self.mids[c] == a {
                self.ties[c]
            } else {
                c as u8
            }
        };
        if x.is_sign_negative() && !(self.fnuz && mag == 0) {
            mag | self.sign_bit
        } else {
            mag
        }
    }
}

/// `ScaledQuantize` of `x` with `scales` into result bytes (u8 codes shaped like `x`).
pub(super) fn quantize(
    format: ScaledFormat,
    layout: ScaleLayout,
    x: &TensorData,
    scales: &TensorData,
) -> Option<Vec<u8>> {
    let vals = Vals::of(x)?;
    let n = x.numel();
    let k = x.dims.last().copied().unwrap_or(1).max(1);
    let s: Vec<f64> = scales
        .to_f64_vec()
        .into_iter()
        .map(|c| decode_scale(layout, c))
        .collect();
    let (block, per_row) = match layout.block() {
        Some(b) if b > 0 && k % b as usize == 0 => (b as usize, k / b as usize),
        Some(_) => return None,
        None => (k, 1),
    };
    if s.len()
        != if layout.block().is_some() {
            n / k * per_row
        } else {
            1
        }
    {
        return None;
    }
    let enc = Encoder::new(format);
    let mut codes = vec![0u8; n];
    codes
        .par_chunks_mut(ROWS_PER_CHUNK * k)
        .enumerate()
        .for_each(|(c, out)| {
            let base = c * ROWS_PER_CHUNK * k;
            for (j, blk) in out.chunks_mut(block).enumerate() {
                let first = base + j * block;
                let sc = if layout.block().is_some() {
                    s[(first / k) * per_row + (first % k) / block]
                } else {
                    s[0]
                };
                if sc == 0.0 || !sc.is_finite() {
                    blk.fill(0);
                    continue;
                }
                for (t, code) in blk.iter_mut().enumerate() {
                    *code = enc.encode(vals.get(first + t) / sc);
                }
            }
        });
    Some(codes)
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
    fn table_encoder_equals_encode_f64_at_every_midpoint_and_around_it() {
        for f in formats() {
            let enc = Encoder::new(f);
            let mut probes = vec![0.0, -0.0, 1e-310, 1e300, f64::INFINITY, f64::NEG_INFINITY];
            for &m in &enc.mids {
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
    fn table_encoder_equals_encode_f64_on_random_values_over_many_binades() {
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
