//! FFT along the last axis: block layout for real dtypes, interleaved for complex.

use super::*;
use rlx_ir::{FftAlgo, FftNorm};
use std::f64::consts::PI;

fn fft(inverse: bool, norm: FftNorm) -> Op {
    Op::Fft {
        inverse,
        norm,
        algo: FftAlgo::Native,
    }
}

/// Reference DFT of one complex row (`re`, `im`), unscaled, sign −1 forward / +1 inverse.
fn dft(re: &[f64], im: &[f64], inverse: bool) -> (Vec<f64>, Vec<f64>) {
    let n = re.len();
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut out = (vec![0.0; n], vec![0.0; n]);
    for k in 0..n {
        for j in 0..n {
            let a = sign * 2.0 * PI * (j * k) as f64 / n as f64;
            out.0[k] += re[j] * a.cos() - im[j] * a.sin();
            out.1[k] += re[j] * a.sin() + im[j] * a.cos();
        }
    }
    out
}

/// Block layout of rows of complex values.
fn block(rows: &[(Vec<f64>, Vec<f64>)]) -> Vec<f64> {
    rows.iter()
        .flat_map(|(r, i)| r.iter().chain(i).copied().collect::<Vec<_>>())
        .collect()
}

#[test]
fn fft_of_impulse_is_all_ones_and_of_constant_is_n_at_zero() {
    let y = eval64(
        fft(false, FftNorm::Backward),
        &[t64(&[8], &[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])],
    );
    assert_close(
        &y,
        &[1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
        1e-15,
        "impulse",
    );
    let y = eval64(
        fft(false, FftNorm::Backward),
        &[t64(&[8], &[1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])],
    );
    assert_close(
        &y,
        &[4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        1e-15,
        "constant",
    );
}

#[test]
fn fft_of_a_pure_tone_is_n_at_its_frequency() {
    let n = 6;
    let m = 2;
    let re: Vec<f64> = (0..n)
        .map(|j| (2.0 * PI * (m * j) as f64 / n as f64).cos())
        .collect();
    let im: Vec<f64> = (0..n)
        .map(|j| (2.0 * PI * (m * j) as f64 / n as f64).sin())
        .collect();
    let y = eval64(
        fft(false, FftNorm::Backward),
        &[t64(&[2 * n], &block(&[(re, im)]))],
    );
    let mut want = vec![0.0; 2 * n];
    want[m] = n as f64;
    assert_close(&y, &want, 1e-14, "tone");
}

#[test]
fn fft_and_ifft_match_the_dft_formula_on_batched_rows() {
    let (rows, n) = (6, 7);
    let data: Vec<(Vec<f64>, Vec<f64>)> = (0..rows)
        .map(|r| (rand(n, 700 + r as u64), rand(n, 710 + r as u64)))
        .collect();
    let x = block(&data);
    for inverse in [false, true] {
        let y = eval64(fft(inverse, FftNorm::Backward), &[t64(&[2, 3, 2 * n], &x)]);
        let want: Vec<_> = data.iter().map(|(r, i)| dft(r, i, inverse)).collect();
        assert_close(&y, &block(&want), 1e-13, &format!("inverse {inverse}"));
    }
}

#[test]
fn each_norm_scales_the_two_directions_as_documented() {
    let n = 5;
    let x = rand(2 * n, 720);
    let (re, im) = (x[..n].to_vec(), x[n..].to_vec());
    let raw_f = block(&[dft(&re, &im, false)]);
    let raw_i = block(&[dft(&re, &im, true)]);
    let scaled = |v: &[f64], s: f64| v.iter().map(|a| a * s).collect::<Vec<_>>();
    let rs = 1.0 / (n as f64).sqrt();
    let cases = [
        (FftNorm::Backward, 1.0, 1.0),
        (FftNorm::Ortho, rs, rs),
        (FftNorm::Forward, 1.0 / n as f64, 1.0),
    ];
    for (norm, fwd, inv) in cases {
        let y = eval64(fft(false, norm), &[t64(&[2 * n], &x)]);
        assert_close(
            &y,
            &scaled(&raw_f, fwd),
            1e-14,
            &format!("{norm:?} forward"),
        );
        let y = eval64(fft(true, norm), &[t64(&[2 * n], &x)]);
        assert_close(
            &y,
            &scaled(&raw_i, inv),
            1e-14,
            &format!("{norm:?} inverse"),
        );
    }
}

#[test]
fn round_trips_give_n_x_for_backward_and_x_for_ortho_and_forward() {
    let n = 8;
    let x = rand(3 * 2 * n, 730);
    for (norm, factor) in [
        (FftNorm::Backward, n as f64),
        (FftNorm::Ortho, 1.0),
        (FftNorm::Forward, 1.0),
    ] {
        let f = eval(fft(false, norm), &[t64(&[3, 2 * n], &x)]);
        let back = eval64(fft(true, norm), &[f]);
        let want: Vec<f64> = x.iter().map(|v| v * factor).collect();
        assert_close(&back, &want, 1e-14, &format!("{norm:?} round trip"));
    }
}

#[test]
fn parseval_holds_for_ortho_and_scales_by_n_for_backward() {
    let n = 9;
    let x = rand(2 * n, 740);
    let energy = |v: &[f64]| v.iter().map(|a| a * a).sum::<f64>();
    let ortho = eval64(fft(false, FftNorm::Ortho), &[t64(&[2 * n], &x)]);
    assert!((energy(&ortho) - energy(&x)).abs() < 1e-13, "ortho energy");
    let back = eval64(fft(false, FftNorm::Backward), &[t64(&[2 * n], &x)]);
    assert!(
        (energy(&back) - n as f64 * energy(&x)).abs() < 1e-12,
        "backward energy"
    );
}

#[test]
fn complex_dtypes_use_interleaved_pairs_and_match_the_block_layout() {
    let n = 6;
    let x = rand(2 * 2 * n, 750);
    // Convert two block rows to interleaved pairs.
    let mut inter = Vec::new();
    for r in 0..2 {
        let row = &x[r * 2 * n..(r + 1) * 2 * n];
        for j in 0..n {
            inter.push(row[j]);
            inter.push(row[n + j]);
        }
    }
    for inverse in [false, true] {
        let blk = eval64(fft(inverse, FftNorm::Ortho), &[t64(&[2, 2 * n], &x)]);
        let cx = eval(
            fft(inverse, FftNorm::Ortho),
            &[t_as(DType::C128, &[2, n], &inter)],
        );
        assert_eq!((cx.dtype, cx.dims.clone()), (DType::C128, vec![2, n]));
        let cv = cx.to_f64_vec();
        for r in 0..2 {
            for j in 0..n {
                let b = r * 2 * n;
                assert_close(
                    &[cv[2 * (r * n + j)], cv[2 * (r * n + j) + 1]],
                    &[blk[b + j], blk[b + n + j]],
                    1e-15,
                    "c128 vs block",
                );
            }
        }
        // C64 computes in f64 and rounds each part to f32 once.
        let c64 = eval(
            fft(inverse, FftNorm::Ortho),
            &[t_as(DType::C64, &[2, n], &inter)],
        );
        let c64_in = t_as(DType::C64, &[2, n], &inter).to_f64_vec();
        let exact = eval64(
            fft(inverse, FftNorm::Ortho),
            &[t_as(DType::C128, &[2, n], &c64_in)],
        );
        assert_eq!(c64.bytes, t_as(DType::C64, &[2, n], &exact).bytes);
    }
}

#[test]
fn the_algorithm_hint_does_not_change_the_result() {
    let x = rand(2 * 10, 760);
    for inverse in [false, true] {
        let a = eval(fft(inverse, FftNorm::Backward), &[t64(&[20], &x)]);
        let op = Op::Fft {
            inverse,
            norm: FftNorm::Backward,
            algo: FftAlgo::Dft,
        };
        assert_eq!(a, eval(op, &[t64(&[20], &x)]));
    }
}

#[test]
fn f32_block_layout_rounds_the_f64_transform_once() {
    let x = rand(16, 770);
    let xf = t_as(DType::F32, &[16], &x);
    let y = eval(fft(false, FftNorm::Backward), std::slice::from_ref(&xf));
    let exact = eval64(
        fft(false, FftNorm::Backward),
        &[t64(&[16], &xf.to_f64_vec())],
    );
    assert_eq!(y.bytes, t_as(DType::F32, &[16], &exact).bytes);
}
