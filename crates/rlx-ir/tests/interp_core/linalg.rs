//! MatMul, FusedMatMulBiasAct, DenseSolve and SynthMatMul.

use super::*;
use rlx_ir::{Activation, SynthKind};

/// Naive `[m, k] × [k, n]` in f64.
fn naive_mm(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            for t in 0..k {
                c[i * n + j] += a[i * k + t] * b[t * n + j];
            }
        }
    }
    c
}

fn wave(n: usize, f: f64) -> Vec<f64> {
    (0..n).map(|i| ((i as f64 + 1.0) * f).sin()).collect()
}

#[test]
fn matmul_2d_matches_hand_values() {
    let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32s(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    let c = eval(Op::MatMul, &[a, b]);
    assert_eq!(c.dims, [2, 2]);
    assert_same(&c.to_f64_vec(), &[58.0, 64.0, 139.0, 154.0]);
}

#[test]
fn matmul_broadcasts_batch_axes() {
    // a: [2, 1, 2, 3], b: [3, 3, 2] → [2, 3, 2, 2].
    let av = wave(12, 0.3);
    let bv = wave(18, 0.7);
    let c = eval(
        Op::MatMul,
        &[f64s(&[2, 1, 2, 3], &av), f64s(&[3, 3, 2], &bv)],
    );
    assert_eq!(c.dims, [2, 3, 2, 2]);
    let got = c.to_f64_vec();
    for i in 0..2 {
        for j in 0..3 {
            let want = naive_mm(&av[i * 6..i * 6 + 6], &bv[j * 6..j * 6 + 6], 2, 3, 2);
            let off = (i * 3 + j) * 4;
            assert_close(&got[off..off + 4], &want, 1e-15);
        }
    }
    // A batched lhs against a plain matrix.
    let c = eval(
        Op::MatMul,
        &[f64s(&[2, 2, 3], &av), f64s(&[3, 2], &bv[..6])],
    );
    assert_eq!(c.dims, [2, 2, 2]);
    let got = c.to_f64_vec();
    for i in 0..2 {
        let want = naive_mm(&av[i * 6..i * 6 + 6], &bv[..6], 2, 3, 2);
        assert_close(&got[i * 4..i * 4 + 4], &want, 1e-15);
    }
}

#[test]
fn matmul_integer_wraps_and_reduced_precision_rounds_once() {
    let a = ints(DType::I32, &[1, 2], &[65536, 3]);
    let b = ints(DType::I32, &[2, 1], &[65536, -4]);
    // 2³² − 12 wraps to −12 in i32.
    assert_eq!(eval(Op::MatMul, &[a, b]).to_i64_vec(), [-12]);
    let u = eval(
        Op::MatMul,
        &[
            ints(DType::U8, &[1, 2], &[16, 1]),
            ints(DType::U8, &[2, 1], &[16, 7]),
        ],
    );
    assert_eq!(u.to_i64_vec(), [(256 + 7) % 256]);
    // f16: 2048·1 + 1·1 + 1·1 accumulated in f64 = 2050 (exact); f16 partial sums would give 2048.
    let h = eval(
        Op::MatMul,
        &[
            real(DType::F16, &[1, 3], &[2048.0, 1.0, 1.0]),
            real(DType::F16, &[3, 1], &[1.0, 1.0, 1.0]),
        ],
    );
    assert_eq!(h.dtype, DType::F16);
    assert_same(&h.to_f64_vec(), &[2050.0]);
    let bf = eval(
        Op::MatMul,
        &[
            real(DType::BF16, &[1, 2], &[1.5, 0.25]),
            real(DType::BF16, &[2, 1], &[1.0078125, 3.0]),
        ],
    );
    assert_same(
        &bf.to_f64_vec(),
        &rounded(DType::BF16, &[1.5 * 1.0078125 + 0.75]),
    );
}

fn linear(act: Option<Activation>, x: TensorData, w: TensorData, b: TensorData) -> TensorData {
    eval(Op::FusedMatMulBiasAct { activation: act }, &[x, w, b])
}

#[test]
fn fused_matmul_bias_act_equals_activation_of_affine_map() {
    let (m, k, n) = (3, 4, 2);
    let xv = wave(m * k, 0.9);
    let wv = wave(k * n, 1.3);
    let bv = [0.25, -0.5];
    let affine: Vec<f64> = naive_mm(&xv, &wv, m, k, n)
        .iter()
        .enumerate()
        .map(|(i, v)| v + bv[i % n])
        .collect();
    let x = f64s(&[m, k], &xv);
    let w = f64s(&[k, n], &wv);
    let b = f64s(&[n], &bv);
    assert_close(
        &linear(None, x.clone(), w.clone(), b.clone()).to_f64_vec(),
        &affine,
        1e-15,
    );
    let relu: Vec<f64> = affine.iter().map(|v| v.max(0.0)).collect();
    assert_close(
        &linear(Some(Activation::Relu), x.clone(), w.clone(), b.clone()).to_f64_vec(),
        &relu,
        1e-15,
    );
    let tanh: Vec<f64> = affine.iter().map(|v| v.tanh()).collect();
    assert_close(
        &linear(Some(Activation::Tanh), x.clone(), w.clone(), b.clone()).to_f64_vec(),
        &tanh,
        1e-15,
    );
    // Matches the separate Activation op on the affine result.
    for a in [Activation::Gelu, Activation::Silu, Activation::Softplus] {
        let fused = linear(Some(a), x.clone(), w.clone(), b.clone()).to_f64_vec();
        let separate = eval(Op::Activation(a), &[f64s(&[m, n], &affine)]).to_f64_vec();
        assert_close(&fused, &separate, 1e-14);
    }
}

#[test]
fn fused_matmul_accepts_batched_x_and_rounds_once() {
    let x = f32s(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let w = f32s(&[2, 2], &[1.0, 0.0, 0.0, -1.0]);
    let y = linear(Some(Activation::Relu), x, w, f32s(&[2], &[0.5, 2.5]));
    assert_eq!(y.dims, [2, 1, 2]);
    assert_same(&y.to_f64_vec(), &[1.5, 0.5, 3.5, 0.0]);
    // f16: 2048 + 1 (product) + 1 (bias) = 2050 with one rounding.
    let y = linear(
        None,
        real(DType::F16, &[1, 2], &[2048.0, 1.0]),
        real(DType::F16, &[2, 1], &[1.0, 1.0]),
        real(DType::F16, &[1], &[1.0]),
    );
    assert_same(&y.to_f64_vec(), &[2050.0]);
}

#[test]
fn dense_solve_pivots_and_satisfies_the_system() {
    // a[0][0] = 0 forces a row swap.
    let a = [0.0, 2.0, 1.0, 1.0, 1.0, 1.0, 2.0, 1.0, 3.0];
    let x_true = [1.0, -2.0, 3.0];
    let b = naive_mm(&a, &x_true, 3, 3, 1);
    let x = eval(Op::DenseSolve, &[f64s(&[3, 3], &a), f64s(&[3], &b)]);
    assert_eq!(x.dims, [3]);
    assert_close(&x.to_f64_vec(), &x_true, 1e-14);
    // Several right-hand sides: [n, k].
    let xs = [1.0, 0.5, -2.0, 4.0, 3.0, -1.0];
    let bs = naive_mm(&a, &xs, 3, 3, 2);
    let x = eval(Op::DenseSolve, &[f64s(&[3, 3], &a), f64s(&[3, 2], &bs)]);
    assert_eq!(x.dims, [3, 2]);
    assert_close(&x.to_f64_vec(), &xs, 1e-14);
}

#[test]
fn dense_solve_is_batched_and_rounds_to_the_rhs_dtype() {
    let a = [2.0, 0.0, 0.0, 4.0, 1.0, 1.0, 0.0, 1.0];
    let b = [2.0, 1.0, 3.0, 1.0];
    let x = eval(
        Op::DenseSolve,
        &[
            f32s(&[2, 2, 2], &a.map(|v| v as f32)),
            f32s(&[2, 2], &b.map(|v| v as f32)),
        ],
    );
    assert_eq!(x.dims, [2, 2]);
    // [[2,0],[0,4]] x = [2,1] → [1, 0.25]; [[1,1],[0,1]] x = [3,1] → [2, 1].
    assert_same(&x.to_f64_vec(), &[1.0, 0.25, 2.0, 1.0]);
    let x = eval(
        Op::DenseSolve,
        &[
            f32s(&[2, 2], &[3.0, 0.0, 0.0, 3.0]),
            f32s(&[2], &[1.0, 2.0]),
        ],
    );
    assert_same(
        &x.to_f64_vec(),
        &[(1.0f64 / 3.0) as f32 as f64, (2.0f64 / 3.0) as f32 as f64],
    );
}

#[test]
fn dense_solve_of_a_singular_matrix_is_an_error_naming_the_column() {
    let a = f64s(&[3, 3], &[1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 1.0, 0.0, 1.0]);
    let msg = eval_err(Op::DenseSolve, &[a, f64s(&[3], &[1.0, 2.0, 3.0])]);
    assert!(msg.starts_with("solve"), "{msg}");
    assert!(
        msg.contains("the matrix is singular (no pivot in column"),
        "{msg}"
    );
    let zero = f64s(&[2, 2], &[0.0; 4]);
    let msg = eval_err(Op::DenseSolve, &[zero, f64s(&[2], &[1.0, 1.0])]);
    assert!(msg.contains("no pivot in column 0"), "{msg}");
    // A tiny but well-conditioned matrix is not singular (the tolerance is relative).
    let tiny = f64s(&[2, 2], &[1e-200, 0.0, 0.0, 1e-200]);
    let x = eval(Op::DenseSolve, &[tiny, f64s(&[2], &[1e-200, 2e-200])]);
    assert_close(&x.to_f64_vec(), &[1.0, 2.0], 1e-15);
}

#[test]
fn synth_matmul_equals_x_times_reconstructed_weight_transposed() {
    let (entry_dim, num_entries) = (2usize, 3usize);
    let (m, k, n) = (2, 4, 3);
    let cb = [1.0, 2.0, -1.0, 0.5, 3.0, -2.0];
    let idx: [i64; 6] = [0, 2, 1, 1, 2, 0];
    let xv = wave(m * k, 0.4);
    // W[j, c·2 + e] = cb[idx[j, c], e]
    let mut w = vec![0.0; n * k];
    for j in 0..n {
        for c in 0..k / entry_dim {
            for e in 0..entry_dim {
                w[j * k + c * entry_dim + e] = cb[idx[j * 2 + c] as usize * entry_dim + e];
            }
        }
    }
    let mut want = vec![0.0; m * n];
    for r in 0..m {
        for j in 0..n {
            want[r * n + j] = (0..k).map(|t| xv[r * k + t] * w[j * k + t]).sum();
        }
    }
    let op = Op::SynthMatMul {
        kind: SynthKind::Codebook {
            entry_dim: entry_dim as u32,
            num_entries: num_entries as u32,
        },
    };
    let args = [
        f64s(&[m, k], &xv),
        ints(DType::U8, &[n, 2], &idx),
        f64s(&[3, 2], &cb),
    ];
    let y = eval(op.clone(), &args);
    assert_eq!(y.dims, [m, n]);
    assert_close(&y.to_f64_vec(), &want, 1e-15);
    let bad = [
        args[0].clone(),
        ints(DType::U8, &[n, 2], &[0, 2, 1, 3, 2, 0]),
        args[2].clone(),
    ];
    let msg = eval_err(op, &bad);
    assert!(
        msg.starts_with("synth_matmul") && msg.contains("indices[1, 1] = 3"),
        "{msg}"
    );
}
