//! Checking an attention backward's gradients against the oracle, with the documented
//! bound of the f32 lowering GPU backends use for f16/bf16 (`rlx_compile::decompose::
//! ATTENTION_VJP_IN_F32`).

use rlx_ir::{DType, Graph, TensorData, interp};

/// The documented bound of the f32 lowering against the oracle (f64, rounded once): one
/// unit in the last place of the dtype at the oracle's value `w` (the final rounding,
/// half an ulp, plus the f32 work's error pushing a value across a rounding boundary)
/// plus 2⁻¹⁴ of the gradient's largest magnitude `scale` (f32 sums of up to Sk products
/// whose terms cancel in `ds = p ⊙ (dp − Σ dp⊙p)`).
pub fn attention_grad_tolerance(dt: DType, w: f64, scale: f64) -> f64 {
    let ulp = if dt == DType::F16 {
        2f64.powi(-10)
    } else {
        2f64.powi(-7)
    };
    ulp * w.abs() + 2f64.powi(-14) * scale
}

/// The largest error of the gradients `got` against the oracle's for gradient graph `g`
/// (inputs q, k, v and the cotangent w, in that order, as `args`), relative to
/// [`attention_grad_tolerance`] (≤ 1 passes), and the largest absolute error. Panics
/// when a gradient has the wrong dtype or length, is not finite, or is all near zero
/// (which would prove nothing).
pub fn attention_grad_errors(g: &Graph, args: &[TensorData], got: &[TensorData]) -> (f64, f64) {
    let named: Vec<(&str, TensorData)> = ["q", "k", "v", "w"]
        .into_iter()
        .zip(args.iter().cloned())
        .collect();
    let want = interp::run(g, &named).unwrap();
    assert_eq!(got.len(), 3, "{}: three gradients", g.name);
    let (mut rel, mut abs) = (0.0f64, 0.0f64);
    for (x, w) in got.iter().zip(&want) {
        let dt = w.dtype;
        assert_eq!(x.dtype, dt, "{}: a gradient's dtype", g.name);
        let (x, w) = (x.to_f64_vec(), w.to_f64_vec());
        assert_eq!(x.len(), w.len(), "{}", g.name);
        let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(
            scale > 0.1,
            "{}: a gradient of all zeros proves nothing",
            g.name
        );
        for (a, b) in x.iter().zip(&w) {
            assert!(a.is_finite(), "{}: a non-finite gradient", g.name);
            rel = rel.max((a - b).abs() / attention_grad_tolerance(dt, *b, scale));
            abs = abs.max((a - b).abs());
        }
    }
    (rel, abs)
}
