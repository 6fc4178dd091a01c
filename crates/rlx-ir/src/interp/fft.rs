//! Oracle semantics of [`Op::Fft`]: a direct O(N²) DFT along the last axis, in `f64`.
//!
//! `X_k = scale · Σ_j x_j · e^{∓2πi·jk/N}` (− forward, + inverse), with `scale` from
//! [`FftNorm`]: `Backward` 1 both ways (so `ifft(fft(x)) = N·x`), `Ortho` `1/√N` both
//! ways, `Forward` `1/N` forward and 1 inverse. The algorithm hint never changes the result.
//!
//! Real float dtypes hold each row as `[re_0 … re_{N−1}, im_0 … im_{N−1}]` (last dim `2N`);
//! complex dtypes hold `N` interleaved `(re, im)` pairs. The output has the input's layout.

use crate::{FftNorm, IrError, IrResult, Op, Shape, TensorData};
use std::f64::consts::PI;

pub(super) fn eval(op: &Op, inputs: &[&TensorData], out: &Shape) -> IrResult<TensorData> {
    let Op::Fft { inverse, norm, .. } = op else {
        return Err(IrError::new(
            op.name(),
            "is not an fft op; the interpreter routed it to the wrong module",
        ));
    };
    if inputs.len() != 1 {
        return Err(IrError::new(
            op.name(),
            format!("takes 1 operand, got {}", inputs.len()),
        ));
    }
    let x = inputs[0];
    let complex = x.dtype.is_complex();
    let Some(&last) = x.dims.last() else {
        return Err(IrError::new(
            op.name(),
            "needs at least one axis, got a scalar",
        ));
    };
    if !complex && (!x.dtype.is_float() || last % 2 != 0) {
        return Err(IrError::new(
            op.name(),
            format!(
                "input {} must be complex or real float in the block layout [.., 2N] (even last dim)",
                x.shape()
            ),
        ));
    }
    if out.static_dims().as_deref() != Some(&x.dims[..]) || out.dtype() != x.dtype {
        return Err(IrError::new(
            op.name(),
            format!("result type {out} must equal the input type {}", x.shape()),
        ));
    }
    let n = if complex { last } else { last / 2 };
    let v = x.to_f64_vec();
    // Both layouts store 2N numbers per row; only the position of (re_j, im_j) differs.
    let at = |j: usize| {
        if complex {
            (2 * j, 2 * j + 1)
        } else {
            (j, n + j)
        }
    };
    let scale = match (norm, inverse) {
        (FftNorm::Backward, _) | (FftNorm::Forward, true) => 1.0,
        (FftNorm::Ortho, _) => 1.0 / (n as f64).sqrt(),
        (FftNorm::Forward, false) => 1.0 / n as f64,
    };
    let sign = if *inverse { 1.0 } else { -1.0 };
    let mut res = vec![0.0; v.len()];
    for row in 0..v.len() / (2 * n).max(1) {
        let base = row * 2 * n;
        for k in 0..n {
            let (mut re, mut im) = (0.0, 0.0);
            for j in 0..n {
                // Reduce jk mod N first so the twiddle angle stays small and exact-ish.
                let theta = sign * 2.0 * PI * ((j * k) % n) as f64 / n as f64;
                let (s, c) = theta.sin_cos();
                let (ir, ii) = at(j);
                let (xr, xi) = (v[base + ir], v[base + ii]);
                re += xr * c - xi * s;
                im += xr * s + xi * c;
            }
            let (or, oi) = at(k);
            res[base + or] = scale * re;
            res[base + oi] = scale * im;
        }
    }
    Ok(TensorData::from_f64_as(x.dtype, &x.dims, &res))
}
