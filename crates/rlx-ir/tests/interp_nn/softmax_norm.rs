//! Softmax, log-softmax, layer norm and RMS norm.

use super::*;

fn softmax(axis: i32) -> Op {
    Op::Softmax { axis }
}

/// Naive softmax of one row: exp(x_j − max) / Σ exp(x − max).
fn softmax_ref(row: &[f64]) -> Vec<f64> {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = row.iter().map(|x| (x - m).exp()).sum();
    row.iter().map(|x| (x - m).exp() / s).collect()
}

#[test]
fn softmax_of_1_2_3_matches_hand_values() {
    let y = eval64(softmax(-1), &[t64(&[3], &[1.0, 2.0, 3.0])]);
    let s = 1.0 + 1.0f64.exp() + 2.0f64.exp();
    let want = [1.0 / s, 1.0f64.exp() / s, 2.0f64.exp() / s];
    assert_close(&y, &want, 1e-15, "softmax [1,2,3]");
}

#[test]
fn softmax_normalizes_along_the_requested_axis_including_negative_and_middle_axes() {
    let dims = [2, 3, 4];
    let x = rand(24, 1).iter().map(|v| v * 5.0).collect::<Vec<_>>();
    let at = |i: usize, j: usize, k: usize| (i * 3 + j) * 4 + k;
    for (axis, ax) in [(0, 0usize), (1, 1), (2, 2), (-1, 2), (-2, 1), (-3, 0)] {
        let y = eval64(softmax(axis), &[t64(&dims, &x)]);
        let mut want = vec![0.0; 24];
        for a in 0..2 {
            for b in 0..3 {
                for c in 0..4 {
                    // the row through (a, b, c) along `ax`
                    let n = dims[ax];
                    let idx = |t: usize| match ax {
                        0 => at(t, b, c),
                        1 => at(a, t, c),
                        _ => at(a, b, t),
                    };
                    let row: Vec<f64> = (0..n).map(|t| x[idx(t)]).collect();
                    let pos = [a, b, c][ax];
                    want[at(a, b, c)] = softmax_ref(&row)[pos];
                }
            }
        }
        assert_close(&y, &want, 1e-14, &format!("softmax axis {axis}"));
    }
}

#[test]
fn softmax_is_shift_invariant_thanks_to_the_max_shift() {
    // Without the max-shift exp(1000) overflows; with it the result equals softmax([0, 1]).
    let y = eval64(softmax(0), &[t64(&[2], &[1000.0, 1001.0])]);
    let want = softmax_ref(&[0.0, 1.0]);
    assert_close(&y, &want, 1e-15, "large logits");
}

#[test]
fn softmax_rows_with_nan_or_pos_inf_or_only_neg_inf_are_all_nan_like_pytorch() {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    let x = [
        1.0, nan, 2.0, // NaN anywhere → whole row NaN
        1.0, inf, 2.0, // +inf: inf − inf = NaN
        -inf, -inf, -inf, // all −inf: −inf − (−inf) = NaN
        0.0, -inf, 0.0, // a lone −inf is simply probability 0
    ];
    let y = eval64(softmax(-1), &[t64(&[4, 3], &x)]);
    assert!(y[..9].iter().all(|v| v.is_nan()), "{y:?}");
    assert_eq!(&y[9..], &[0.5, 0.0, 0.5]);
    let l = eval64(Op::LogSoftmax { axis: -1 }, &[t64(&[4, 3], &x)]);
    assert!(l[..9].iter().all(|v| v.is_nan()), "{l:?}");
    let ln_half = 0.5f64.ln();
    assert_eq!(&l[9..], &[ln_half, -inf, ln_half]);
}

#[test]
fn log_softmax_is_x_minus_max_minus_log_sum_exp() {
    let x = rand(12, 2);
    let y = eval64(Op::LogSoftmax { axis: 1 }, &[t64(&[3, 4], &x)]);
    for r in 0..3 {
        let row = &x[r * 4..r * 4 + 4];
        let want: Vec<f64> = softmax_ref(row).iter().map(|p| p.ln()).collect();
        assert_close(&y[r * 4..r * 4 + 4], &want, 1e-14, "log_softmax");
    }
    // Stays finite where log(softmax) would underflow to −inf.
    let y = eval64(Op::LogSoftmax { axis: 0 }, &[t64(&[2], &[0.0, -1000.0])]);
    assert_close(&y, &[0.0, -1000.0], 1e-15, "log_softmax tail");
}

#[test]
fn softmax_rounds_once_to_f16_and_bf16_outputs() {
    let x = [0.1, 0.7, -1.3, 2.2, 0.05];
    let want = softmax_ref(&x);
    for dt in [DType::F16, DType::BF16, DType::F32] {
        let y = eval(softmax(0), &[t_as(dt, &[5], &x)]);
        assert_eq!(y.dtype, dt);
        // The input is first rounded to dt; the result is the f64 softmax of that, rounded once.
        let xr = t_as(dt, &[5], &x).to_f64_vec();
        let expect = t_as(dt, &[5], &softmax_ref(&xr));
        assert_eq!(
            y.bytes,
            expect.bytes,
            "{dt}: {:?} vs {:?}",
            y.to_f64_vec(),
            expect.to_f64_vec()
        );
        assert_close(&y.to_f64_vec(), &want, 1e-2, "close to exact");
    }
}

fn layer_norm(eps: f32) -> Op {
    Op::LayerNorm { axis: -1, eps }
}

fn rms_norm(eps: f32) -> Op {
    Op::RmsNorm { axis: -1, eps }
}

#[test]
fn layer_norm_uses_population_variance_and_eps() {
    // mean 2.5, population variance 1.25, eps 0.25 (exact in f32) → divide by √1.5.
    let x = t64(&[1, 4], &[1.0, 2.0, 3.0, 4.0]);
    let ones = t64(&[4], &[1.0; 4]);
    let zeros = t64(&[4], &[0.0; 4]);
    let y = eval64(layer_norm(0.25), &[x, ones, zeros]);
    let d = 1.5f64.sqrt();
    assert_close(
        &y,
        &[-1.5 / d, -0.5 / d, 0.5 / d, 1.5 / d],
        1e-15,
        "layer_norm",
    );
}

#[test]
fn layer_norm_eps_is_the_f32_value_widened_exactly() {
    // eps = 1e-5 as f32 is 9.99999974737875e-6, not 1e-5; the oracle uses the former.
    let x = [0.0, 1e-3];
    let y = eval64(
        layer_norm(1e-5),
        &[t64(&[2], &x), t64(&[], &[1.0]), t64(&[], &[0.0])],
    );
    let var = 0.25e-6;
    let want = -0.5e-3 / (var + 1e-5f32 as f64).sqrt();
    assert_eq!(y[0], want);
}

#[test]
fn layer_norm_broadcasts_gamma_and_beta_of_shape_c_one_or_scalar() {
    let x = rand(12, 3);
    let g = [0.5, -2.0, 3.0, 1.5];
    let b = [0.1, 0.2, -0.3, 0.4];
    let norm = |row: &[f64]| -> Vec<f64> {
        let m = row.iter().sum::<f64>() / 4.0;
        let v = row.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / 4.0;
        row.iter()
            .map(|a| (a - m) / (v + 1e-3f32 as f64).sqrt())
            .collect()
    };
    let xt = t64(&[3, 4], &x);
    let full = eval64(
        layer_norm(1e-3),
        &[xt.clone(), t64(&[4], &g), t64(&[4], &b)],
    );
    let one = eval64(
        layer_norm(1e-3),
        &[xt.clone(), t64(&[1], &[2.0]), t64(&[1], &[-1.0])],
    );
    let scalar = eval64(layer_norm(1e-3), &[xt, t64(&[], &[2.0]), t64(&[], &[-1.0])]);
    for r in 0..3 {
        let n = norm(&x[r * 4..r * 4 + 4]);
        let want_full: Vec<f64> = (0..4).map(|j| n[j] * g[j] + b[j]).collect();
        let want_one: Vec<f64> = n.iter().map(|v| v * 2.0 - 1.0).collect();
        assert_close(&full[r * 4..r * 4 + 4], &want_full, 1e-14, "gamma [C]");
        assert_close(&one[r * 4..r * 4 + 4], &want_one, 1e-14, "gamma [1]");
        assert_close(&scalar[r * 4..r * 4 + 4], &want_one, 1e-14, "gamma scalar");
    }
}

#[test]
fn layer_norm_rounds_once_to_f16_and_bf16_outputs() {
    let x = [0.3, -1.7, 2.9, 0.01, 5.5, -0.2];
    for dt in [DType::F16, DType::BF16] {
        let xr = t_as(dt, &[6], &x).to_f64_vec();
        let m = xr.iter().sum::<f64>() / 6.0;
        let v = xr.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / 6.0;
        let want: Vec<f64> = xr
            .iter()
            .map(|a| (a - m) / (v + 1e-2f32 as f64).sqrt() * 1.5 + 0.25)
            .collect();
        let y = eval(
            layer_norm(1e-2),
            &[
                t_as(dt, &[6], &x),
                t_as(dt, &[6], &[1.5; 6]),
                t_as(dt, &[6], &[0.25; 6]),
            ],
        );
        assert_eq!(y.dtype, dt);
        assert_eq!(
            y.bytes,
            t_as(dt, &[6], &want).bytes,
            "{dt}: {:?} vs {want:?}",
            y.to_f64_vec()
        );
    }
}

#[test]
fn rms_norm_divides_by_root_mean_square_and_adds_beta() {
    // mean(x²) = (9 + 16)/2 = 12.5; eps 0.5 → √13.
    let y = eval64(
        rms_norm(0.5),
        &[
            t64(&[2], &[3.0, 4.0]),
            t64(&[2], &[2.0, -1.0]),
            t64(&[2], &[10.0, 20.0]),
        ],
    );
    let d = 13.0f64.sqrt();
    assert_close(
        &y,
        &[3.0 / d * 2.0 + 10.0, -4.0 / d + 20.0],
        1e-15,
        "rms_norm",
    );
}

#[test]
fn rms_norm_over_many_rows_matches_naive_reference() {
    let x = rand(30, 4);
    let g = rand(5, 5);
    let y = eval64(
        rms_norm(1e-6),
        &[t64(&[2, 3, 5], &x), t64(&[5], &g), t64(&[1], &[0.5])],
    );
    for r in 0..6 {
        let row = &x[r * 5..r * 5 + 5];
        let rms = (row.iter().map(|a| a * a).sum::<f64>() / 5.0 + 1e-6f32 as f64).sqrt();
        let want: Vec<f64> = (0..5).map(|j| row[j] / rms * g[j] + 0.5).collect();
        assert_close(&y[r * 5..r * 5 + 5], &want, 1e-14, "rms rows");
    }
}
