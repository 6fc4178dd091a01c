//! Whole-op kernels for nn ops that stay opaque: the oracle's definition, at memory
//! speed.
//!
//! `softmax_cross_entropy_with_logits` is kept whole rather than lowered to primitives
//! because its labels are data: a label outside `0..C` (or not a whole number) is an
//! error naming the row, which a lowered compare-and-select would turn into a silent
//! `logsumexp` loss. Run through the oracle (f64, element by element) it cost 240 ms
//! of a 1.3 s W11 step at `[1024, 512]`; this kernel computes the same values with
//! the vectorized `exp` in one pass.

use crate::math;
use rlx_ir::{Activation, DType, Op, TensorData};

/// The op's result bytes, when this module has a kernel for it.
pub(crate) fn eval(
    op: &Op,
    ins: &[&TensorData],
    out_dims: &[usize],
) -> Option<Result<Vec<u8>, String>> {
    match op {
        Op::SoftmaxCrossEntropyWithLogits
            if ins.len() == 2 && ins[0].dtype == DType::F32 && !ins[0].dims.is_empty() =>
        {
            Some(cross_entropy_labels_f32(op, ins[0], ins[1], out_dims))
        }
        _ => None,
    }
}

/// Per row: `logsumexp(l) − l[label]`, evaluated as the oracle does (the max-shifted
/// sum in f64, NaN for a row holding a NaN or an infinite maximum), with the same
/// error for a label that is not a class index.
fn cross_entropy_labels_f32(
    op: &Op,
    logits: &TensorData,
    labels: &TensorData,
    out_dims: &[usize],
) -> Result<Vec<u8>, String> {
    let c = *logits.dims.last().expect("checked non-scalar");
    let rows: usize = out_dims.iter().product();
    let l = logits.to_f32_vec();
    let y = labels.to_f64_vec();
    if y.len() != rows || l.len() != rows * c {
        return Err(format!(
            "{}: labels {:?} must hold one class index per row of logits {:?}",
            op.name(),
            labels.dims,
            logits.dims
        ));
    }
    for (r, &label) in y.iter().enumerate() {
        if !(label.fract() == 0.0 && label >= 0.0 && label < c as f64) {
            return Err(format!(
                "{}: label {label} of row {r} is not a class index in 0..{c}; labels must be whole numbers below the class count",
                op.name()
            ));
        }
    }
    let maxima: Vec<f32> = l
        .chunks_exact(c.max(1))
        .map(|row| {
            row.iter().fold(f32::NEG_INFINITY, |m, &v| {
                if m.is_nan() || v.is_nan() {
                    f32::NAN
                } else {
                    m.max(v)
                }
            })
        })
        .collect();
    // exp(l − max) for every element at once (one call keeps the vector loop long).
    let mut shifted: Vec<f32> = Vec::with_capacity(l.len());
    for (row, &m) in l.chunks_exact(c.max(1)).zip(&maxima) {
        shifted.extend(row.iter().map(|&v| v - m));
    }
    math::unary_f32_inplace(Activation::Exp, &mut shifted);
    let mut out = Vec::with_capacity(rows * 4);
    for r in 0..rows {
        let m = maxima[r];
        let loss = if !m.is_finite() {
            f32::NAN
        } else {
            let sum: f64 = shifted[r * c..(r + 1) * c].iter().map(|&e| e as f64).sum();
            let lse = m as f64 + sum.ln();
            (lse - l[r * c + y[r] as usize] as f64) as f32
        };
        out.extend_from_slice(&loss.to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{Shape, interp};

    fn oracle(logits: &TensorData, labels: &TensorData) -> Result<Vec<f32>, String> {
        let rows = labels.dims.clone();
        interp::eval_op(
            &Op::SoftmaxCrossEntropyWithLogits,
            &[logits, labels],
            &Shape::new(&rows, DType::F32),
        )
        .map(|d| d.to_f32_vec())
        .map_err(|e| e.to_string())
    }

    fn kernel(logits: &TensorData, labels: &TensorData) -> Result<Vec<f32>, String> {
        let dims = labels.dims.clone();
        eval(&Op::SoftmaxCrossEntropyWithLogits, &[logits, labels], &dims)
            .expect("f32 logits have a kernel")
            .map(|b| {
                b.chunks_exact(4)
                    .map(|x| f32::from_le_bytes(x.try_into().unwrap()))
                    .collect()
            })
    }

    #[test]
    fn matches_the_oracle_on_wide_rows_with_integer_and_float_labels() {
        let (rows, c) = (37, 513);
        let l: Vec<f32> = (0..rows * c)
            .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 24.0)
            .collect();
        let logits = TensorData::from_f32(&[rows, c], &l);
        let ids: Vec<i64> = (0..rows as i64).map(|r| (r * 131) % c as i64).collect();
        for labels in [
            TensorData::from_i64_as(DType::I64, &[rows], &ids),
            TensorData::from_i64_as(DType::I32, &[rows], &ids),
            TensorData::from_f32(&[rows], &ids.iter().map(|&v| v as f32).collect::<Vec<_>>()),
        ] {
            let (got, want) = (
                kernel(&logits, &labels).unwrap(),
                oracle(&logits, &labels).unwrap(),
            );
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 2e-6 * w.abs().max(1.0), "{g} vs {w}");
            }
        }
    }

    #[test]
    fn rows_with_nan_or_infinite_maxima_give_nan_like_the_oracle() {
        let l = [
            f32::NAN,
            0.0,
            1.0, // NaN
            f32::INFINITY,
            0.0,
            1.0, // +inf max
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY, // all −inf
            f32::NEG_INFINITY,
            2.0,
            1.0, // one −inf: finite
        ];
        let logits = TensorData::from_f32(&[4, 3], &l);
        let labels = TensorData::from_i64_as(DType::I64, &[4], &[1, 1, 0, 1]);
        let got = kernel(&logits, &labels).unwrap();
        let want = oracle(&logits, &labels).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                g.is_nan() == w.is_nan() && (g.is_nan() || (g - w).abs() < 1e-6),
                "{got:?} vs {want:?}"
            );
        }
        assert!(got[3].is_finite());
    }

    #[test]
    fn a_label_outside_the_classes_is_the_oracles_error() {
        let logits = TensorData::from_f32(&[2, 3], &[0.0; 6]);
        for bad in [
            TensorData::from_i64_as(DType::I64, &[2], &[0, 3]),
            TensorData::from_i64_as(DType::I64, &[2], &[-1, 0]),
            TensorData::from_f32(&[2], &[0.0, 1.5]),
        ] {
            let got = kernel(&logits, &bad).unwrap_err();
            assert_eq!(got, oracle(&logits, &bad).unwrap_err());
            assert!(got.contains("is not a class index in 0..3"), "{got}");
        }
    }
}
