//! Oracle semantics of the scaled (low-precision GEMM) ops and of `RoundToFormat`.
//!
//! Element formats are [`ScaledFormat`]s; scales follow a [`ScaleLayout`]. For the block
//! layouts the K axis is the last axis of the operand, and element `[.., k]` uses the
//! scale `[.., k / block]`. Every reduction ("absmax") runs over the *finite* elements
//! only, so an infinity saturates to `±max_finite` instead of poisoning its whole block.
//!
//! - `ScaledQuantScale { format, scale_layout }`, `x [.., K]` (any float dtype):
//!   - `PerTensor` → `F32 [1]`, `s = absmax(x) / format.max_finite()` computed in `f64`
//!     and stored as `f32`; `s = 1.0` when that would be `0` (an all-zero `x`).
//!   - `BlockMxE8M0 { block }` → `U8 [.., K/block]` E8M0 codes (OCP MX): the scale of a
//!     block is `2^(⌊log2 absmax⌋ − emax_elem)` with `emax_elem = ⌊log2 max_finite⌋`,
//!     stored as the biased exponent `c = ⌊log2 absmax⌋ − emax_elem + 127` clamped to
//!     `0..=254` (code 255 is E8M0's NaN and is never produced). An all-zero block gets
//!     code `0`, i.e. the scale `2^−127`. Code `c` decodes to `2^(c − 127)`.
//!     As in the OCP spec, elements up to just under `2·2^emax_elem·scale` can exceed
//!     `max_finite·scale`; they saturate when quantized.
//!   - `Nvfp4 { group }` → `U8 [.., K/group]`: `F8E4M3.encode(absmax / max_finite)` per
//!     group (round-to-nearest-even, saturating). A zero group, or one whose scale
//!     underflows E4M3, gets code `0`, which decodes to the scale `0`. (NVFP4's second,
//!     per-tensor f32 scale is not part of this layout.)
//! - `ScaledQuantize { format, scale_layout }`, `[x, scales]` → `U8` codes shaped like
//!   `x`: `format.encode(x / scale)` with the quotient formed in `f64` and rounded once
//!   (RNE, saturating, NaN → code 0). Where the decoded scale is `0` or not finite, the
//!   code is `0`, so those elements dequantize to `0`.
//! - `ScaledMatMul { lhs_format, rhs_format, scale_layout, has_bias }`,
//!   `[lq [m,k], rq [n,k], ls, rs, (bias [n])]` → `F32 [m,n]`: each operand element is
//!   dequantized exactly in `f64` as `decode(code) · scale`; then
//!   `out[i,j] = (Σ_k a[i,k]·b[j,k]) + bias[j]`, summed in `f64` in increasing `k` from
//!   `0.0`, and rounded once to `f32`.
//! - `RoundToFormat { exp_bits, man_bits, max_normal }` → same dtype as the input:
//!   [`FloatFormat::round_f64`] of each element (which equals `FloatFormat::round` for
//!   `f32` values), stored with the dtype's usual round-to-nearest-even.

use crate::{DType, FloatFormat, IrError, IrResult, Op, ScaleLayout, ScaledFormat, Shape};
use crate::{TensorData, float_format::exponent_of};

pub(super) fn eval(op: &Op, inputs: &[&TensorData], out: &Shape) -> IrResult<TensorData> {
    let dims = out
        .static_dims()
        .expect("the dispatcher passes a concrete result type");
    match op {
        Op::ScaledQuantScale {
            format,
            scale_layout,
        } => Ok(quant_scale(*format, *scale_layout, inputs[0], &dims)),
        Op::ScaledQuantize {
            format,
            scale_layout,
        } => Ok(quantize(*format, *scale_layout, inputs[0], inputs[1])),
        Op::ScaledMatMul {
            lhs_format,
            rhs_format,
            scale_layout,
            has_bias,
        } => matmul(
            op,
            [*lhs_format, *rhs_format],
            *scale_layout,
            inputs,
            *has_bias,
            &dims,
        ),
        Op::RoundToFormat {
            exp_bits,
            man_bits,
            max_normal,
        } => {
            let x = inputs[0];
            if !x.dtype.is_float() {
                return Err(IrError::new(
                    op.name(),
                    format!(
                        "needs a float input, got {} {:?}; cast it to f32 first",
                        x.dtype, x.dims
                    ),
                ));
            }
            let f = FloatFormat {
                exp_bits: *exp_bits,
                man_bits: *man_bits,
                max_normal: *max_normal,
            };
            let v: Vec<f64> = x.to_f64_vec().into_iter().map(|v| f.round_f64(v)).collect();
            Ok(TensorData::from_f64_as(x.dtype, &x.dims, &v))
        }
        other => unreachable!("scaled::eval got {}", other.name()),
    }
}

/// Length of the K (last) axis and the number of scales per row for `layout`.
fn k_and_blocks(dims: &[usize], layout: ScaleLayout) -> (usize, usize) {
    let k = dims.last().copied().unwrap_or(1);
    match layout.block() {
        Some(b) => (k, k / b as usize),
        None => (k, 1),
    }
}

/// Largest finite magnitude of `vals` (0 when there is none).
fn absmax(vals: &[f64]) -> f64 {
    vals.iter()
        .filter(|v| v.is_finite())
        .fold(0.0, |m, v| m.max(v.abs()))
}

/// The E8M0 code of the MX scale for a block with largest magnitude `absmax`.
fn mx_scale_code(format: ScaledFormat, absmax: f64) -> u8 {
    // Below 2^-1000 the code clamps to 0 anyway; the cut keeps `exponent_of` on normals.
    if absmax < 1e-300 {
        return 0;
    }
    let emax_elem = exponent_of(format.max_finite() as f64);
    (exponent_of(absmax) - emax_elem + 127).clamp(0, 254) as u8
}

/// The scale a code of `layout` stands for.
fn decode_scale(layout: ScaleLayout, code: f64) -> f64 {
    match layout {
        ScaleLayout::PerTensor => code,
        ScaleLayout::BlockMxE8M0 { .. } => {
            if code == 255.0 {
                f64::NAN
            } else {
                (code - 127.0).exp2()
            }
        }
        ScaleLayout::Nvfp4 { .. } => ScaledFormat::F8E4M3.decode(code as u8) as f64,
    }
}

fn quant_scale(
    format: ScaledFormat,
    layout: ScaleLayout,
    x: &TensorData,
    out_dims: &[usize],
) -> TensorData {
    let vals = x.to_f64_vec();
    let max = format.max_finite() as f64;
    match layout {
        ScaleLayout::PerTensor => {
            let s = (absmax(&vals) / max) as f32;
            let s = if s == 0.0 { 1.0 } else { s };
            TensorData::from_f32(&[1], &[s])
        }
        ScaleLayout::BlockMxE8M0 { block } | ScaleLayout::Nvfp4 { group: block } => {
            let block = block as usize;
            let codes: Vec<i64> = if block == 0 || vals.is_empty() {
                Vec::new()
            } else {
                vals.chunks(block)
                    .map(|b| {
                        let a = absmax(b);
                        i64::from(match layout {
                            ScaleLayout::Nvfp4 { .. } => ScaledFormat::F8E4M3.encode_f64(a / max),
                            _ => mx_scale_code(format, a),
                        })
                    })
                    .collect()
            };
            TensorData::from_i64_as(DType::U8, out_dims, &codes)
        }
    }
}

/// Per-element scale (in `f64`) of a `[.., K]` operand with the given scales tensor.
fn element_scales(layout: ScaleLayout, dims: &[usize], scales: &TensorData) -> Vec<f64> {
    let n: usize = dims.iter().product();
    let s: Vec<f64> = scales
        .to_f64_vec()
        .into_iter()
        .map(|c| decode_scale(layout, c))
        .collect();
    match layout.block() {
        None => vec![s[0]; n],
        Some(b) => {
            let (k, per_row) = k_and_blocks(dims, layout);
            (0..n)
                .map(|i| s[(i / k) * per_row + (i % k) / b as usize])
                .collect()
        }
    }
}

fn quantize(
    format: ScaledFormat,
    layout: ScaleLayout,
    x: &TensorData,
    scales: &TensorData,
) -> TensorData {
    let scale = element_scales(layout, &x.dims, scales);
    let codes: Vec<i64> = x
        .to_f64_vec()
        .into_iter()
        .zip(scale)
        .map(|(v, s)| {
            if s == 0.0 || !s.is_finite() {
                0
            } else {
                i64::from(format.encode_f64(v / s))
            }
        })
        .collect();
    TensorData::from_i64_as(DType::U8, &x.dims, &codes)
}

/// Exact `f64` values `decode(code) · scale` of a `[rows, k]` operand.
fn dequantize(
    format: ScaledFormat,
    layout: ScaleLayout,
    q: &TensorData,
    s: &TensorData,
) -> Vec<f64> {
    let scale = element_scales(layout, &q.dims, s);
    q.bytes
        .iter()
        .zip(scale)
        .map(|(&c, s)| format.decode(c) as f64 * s)
        .collect()
}

fn matmul(
    op: &Op,
    formats: [ScaledFormat; 2],
    layout: ScaleLayout,
    inputs: &[&TensorData],
    has_bias: bool,
    out_dims: &[usize],
) -> IrResult<TensorData> {
    let (lq, rq) = (inputs[0], inputs[1]);
    if lq.dtype != DType::U8 || rq.dtype != DType::U8 || lq.dims.len() != 2 || rq.dims.len() != 2 {
        return Err(IrError::new(
            op.name(),
            format!(
                "operands must be u8 codes [m, k] and [n, k], got {} {:?} and {} {:?}; produce them with scaled_quantize",
                lq.dtype, lq.dims, rq.dtype, rq.dims
            ),
        ));
    }
    let (m, k, n) = (lq.dims[0], lq.dims[1], rq.dims[0]);
    let a = dequantize(formats[0], layout, lq, inputs[2]);
    let b = dequantize(formats[1], layout, rq, inputs[3]);
    let bias = has_bias.then(|| inputs[4].to_f64_vec());
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let dot = (0..k).fold(0.0f64, |acc, p| acc + a[i * k + p] * b[j * k + p]);
            out.push(bias.as_ref().map_or(dot, |b| dot + b[j]));
        }
    }
    Ok(TensorData::from_f64_as(DType::F32, out_dims, &out))
}
