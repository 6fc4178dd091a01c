use super::*;
use crate::OptimizerState;

/// xorshift stream of uniforms in [−1, 1).
fn uniforms(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

/// Independent f64 Newton–Schulz on a wide (rows ≤ cols) matrix, nested-Vec style.
fn ns_reference(
    m: &[f32],
    rows: usize,
    cols: usize,
    steps: u32,
    (a, b, c): (f64, f64, f64),
) -> Vec<f64> {
    let norm = m.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt() + 1e-7;
    let mut x: Vec<Vec<f64>> = (0..rows)
        .map(|i| (0..cols).map(|j| m[i * cols + j] as f64 / norm).collect())
        .collect();
    for _ in 0..steps {
        let gram: Vec<Vec<f64>> = (0..rows)
            .map(|i| {
                (0..rows)
                    .map(|j| (0..cols).map(|l| x[i][l] * x[j][l]).sum())
                    .collect()
            })
            .collect();
        let poly: Vec<Vec<f64>> = (0..rows)
            .map(|i| {
                (0..rows)
                    .map(|j| {
                        b * gram[i][j] + c * (0..rows).map(|l| gram[i][l] * gram[l][j]).sum::<f64>()
                    })
                    .collect()
            })
            .collect();
        x = (0..rows)
            .map(|i| {
                (0..cols)
                    .map(|j| a * x[i][j] + (0..rows).map(|l| poly[i][l] * x[l][j]).sum::<f64>())
                    .collect()
            })
            .collect();
    }
    x.into_iter().flatten().collect()
}

const COEFFS64: (f64, f64, f64) = (3.4445, -4.7750, 2.0315);

/// Cholesky succeeds iff the symmetric matrix is positive definite.
fn is_positive_definite(a: &[f64], n: usize) -> bool {
    let mut l = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum();
            if i == j {
                let d = a[i * n + i] - s;
                if d <= 0.0 {
                    return false;
                }
                l[i * n + i] = d.sqrt();
            } else {
                l[i * n + j] = (a[i * n + j] - s) / l[j * n + j];
            }
        }
    }
    true
}

/// Small-side Gram matrix `O·Oᵀ` (rows ≤ cols) or `Oᵀ·O`, in f64.
fn small_gram(o: &[f32], rows: usize, cols: usize) -> (Vec<f64>, usize) {
    let (n, wide) = if rows <= cols {
        (rows, true)
    } else {
        (cols, false)
    };
    let at = |i: usize, l: usize| -> f64 {
        if wide {
            o[i * cols + l] as f64
        } else {
            o[l * cols + i] as f64
        }
    };
    let k = rows.max(cols);
    let mut g = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            g[i * n + j] = (0..k).map(|l| at(i, l) * at(j, l)).sum();
        }
    }
    (g, n)
}

/// Singular values of `o` all lie in [√lo, √hi] iff Gram − lo·I and hi·I − Gram are PD.
fn singular_values_within(o: &[f32], rows: usize, cols: usize, lo: f64, hi: f64) -> bool {
    let (g, n) = small_gram(o, rows, cols);
    let shifted = |s: f64, sign: f64| -> Vec<f64> {
        (0..n * n)
            .map(|idx| sign * g[idx] - if idx % (n + 1) == 0 { s } else { 0.0 })
            .collect()
    };
    is_positive_definite(&shifted(lo, 1.0), n) && is_positive_definite(&shifted(-hi, -1.0), n)
}

#[test]
fn defaults_builders_and_set_lr() {
    let mut o = Muon::new(0.1)
        .with_momentum(0.5)
        .with_nesterov(false)
        .with_weight_decay(0.01)
        .with_ns_steps(3)
        .with_ns_coeffs(2.0, -1.5, 0.5);
    assert_eq!(
        (
            o.lr,
            o.momentum,
            o.nesterov,
            o.weight_decay,
            o.ns_steps,
            o.ns_coeffs
        ),
        (0.1, 0.5, false, 0.01, 3, (2.0, -1.5, 0.5))
    );
    o.set_lr(0.3);
    assert_eq!(o.lr, 0.3);
}

#[test]
fn one_by_one_matrix_follows_the_scalar_quintic() {
    // μ = 0 → u = g = 2; x0 = 2/(2 + 1e-7); x ← a·x + b·x³ + c·x⁵, 5 times; p = −lr·√1·x.
    let mut x = 2.0 / (2.0 + 1e-7);
    for _ in 0..5 {
        let (a, b, c) = COEFFS64;
        x = a * x + b * x.powi(3) + c * x.powi(5);
    }
    let mut opt = Muon::new(0.5).with_momentum(0.0);
    let mut p = [1.0f32];
    opt.step("s", &[1, 1], &mut p, &[2.0]);
    assert!(
        (p[0] as f64 - (1.0 - 0.5 * x)).abs() < 1e-5,
        "{} vs {}",
        p[0],
        1.0 - 0.5 * x
    );
    // The map oscillates around 1 (1 → 0.701 → …) and stays in the documented band.
    assert!((0.6..1.3).contains(&x), "{x}");
}

#[test]
fn matrix_update_matches_f64_newton_schulz_reference() {
    let g = uniforms(7, 6);
    // Wide 2×3.
    let o = Muon::new(1.0).orthogonalize(&g, 2, 3);
    let want = ns_reference(&g, 2, 3, 5, COEFFS64);
    for (a, b) in o.iter().zip(&want) {
        assert!((*a as f64 - b).abs() < 1e-4, "{o:?} vs {want:?}");
    }
    // Tall 3×2: orthogonalize the transpose and transpose back.
    let gt = transpose(&g, 2, 3);
    let o_tall = Muon::new(1.0).orthogonalize(&gt, 3, 2);
    let want_tall = transpose(&want.iter().map(|&v| v as f32).collect::<Vec<_>>(), 2, 3);
    for (a, b) in o_tall.iter().zip(&want_tall) {
        assert!((a - b).abs() < 1e-4, "{o_tall:?} vs {want_tall:?}");
    }
    // Through step: μ = 0 with Nesterov → u = g, p = −lr·(√3·O).
    let mut p = vec![0.0f32; 6];
    Muon::new(0.1)
        .with_momentum(0.0)
        .step("w", &[2, 3], &mut p, &g);
    for (a, b) in p.iter().zip(&want) {
        assert!((*a as f64 + 0.1 * 3f64.sqrt() * b).abs() < 1e-5, "{p:?}");
    }
}

#[test]
fn tall_input_is_exactly_the_transpose_of_the_wide_result() {
    let g = uniforms(11, 40);
    let opt = Muon::new(1.0);
    let wide = opt.orthogonalize(&g, 5, 8);
    let tall = opt.orthogonalize(&transpose(&g, 5, 8), 8, 5);
    assert_eq!(tall, transpose(&wide, 5, 8));
}

#[test]
fn orthogonalized_random_momentum_has_singular_values_near_one() {
    for (rows, cols, seed) in [(5, 8, 1u64), (8, 5, 2), (16, 16, 3), (4, 32, 4)] {
        let g = uniforms(seed, rows * cols);
        // The raw (normalized) matrix is far from orthogonal…
        assert!(!singular_values_within(&g, rows, cols, 0.25, 2.25));
        let o = Muon::new(1.0).orthogonalize(&g, rows, cols);
        // …the result has every singular value in [0.6, 1.3] (squares: [0.36, 1.69]).
        assert!(
            singular_values_within(&o, rows, cols, 0.36, 1.69),
            "{rows}×{cols}: {:?}",
            small_gram(&o, rows, cols).0
        );
    }
}

#[test]
fn zero_newton_schulz_steps_give_the_normalized_direction() {
    let g = [3.0f32, 0.0, 0.0, 4.0];
    let mut p = [0.0f32; 4];
    Muon::new(1.0)
        .with_momentum(0.0)
        .with_ns_steps(0)
        .step("w", &[2, 2], &mut p, &g);
    // ‖g‖ = 5, scale √2: p = −√2·g/5.
    let s = 2f32.sqrt();
    for (a, b) in p.iter().zip([-0.6 * s, 0.0, 0.0, -0.8 * s]) {
        assert!((a - b).abs() < 1e-6, "{p:?}");
    }
}

#[test]
fn non_matrix_params_use_nesterov_momentum_sgd() {
    // lr 0.1, μ 0.95, g = 1, 1: m = 1, u = 1.95 → p = 0.805; m = 1.95, u = 2.8525 → 0.51975.
    for shape in [&[4usize][..], &[2, 1, 2], &[]] {
        let n: usize = shape.iter().product();
        let mut opt = Muon::new(0.1);
        let mut p = vec![1.0f32; n];
        let g = vec![1.0f32; n];
        opt.step("b", shape, &mut p, &g);
        assert!(
            p.iter().all(|v| (v - 0.805).abs() < 1e-6),
            "{shape:?}: {p:?}"
        );
        opt.step("b", shape, &mut p, &g);
        assert!(
            p.iter().all(|v| (v - 0.51975).abs() < 1e-6),
            "{shape:?}: {p:?}"
        );
    }
}

#[test]
fn non_matrix_params_use_plain_momentum_without_nesterov() {
    // u = m: m = 1 → p = 0.9; m = 1.95 → p = 0.705; with wd 0.5 also p −= lr·0.5·p.
    let mut opt = Muon::new(0.1).with_nesterov(false);
    let mut p = [1.0f32];
    opt.step("b", &[1], &mut p, &[1.0]);
    opt.step("b", &[1], &mut p, &[1.0]);
    assert!((p[0] - 0.705).abs() < 1e-6, "{p:?}");
    let mut opt = Muon::new(0.1).with_nesterov(false).with_weight_decay(0.5);
    let mut p = [1.0f32];
    opt.step("b", &[1], &mut p, &[1.0]);
    assert!((p[0] - (1.0 - 0.1 * (1.0 + 0.5))).abs() < 1e-6, "{p:?}");
}

#[test]
fn momentum_buffer_accumulates_raw_gradients() {
    let mut opt = Muon::new(0.01);
    let mut p = vec![0.0f32; 4];
    opt.step("w", &[2, 2], &mut p, &[1.0, 2.0, 3.0, 4.0]);
    opt.end_iteration();
    opt.step("w", &[2, 2], &mut p, &[1.0, 0.0, -1.0, 0.0]);
    opt.end_iteration();
    let s = opt.state_dict().unwrap();
    assert_eq!(s.step, 2);
    let want = [1.95f32, 1.9, 1.85, 3.8];
    for (a, b) in s.buffer("m/w").unwrap().iter().zip(want) {
        assert!((a - b).abs() < 1e-6, "{s:?}");
    }
}

#[test]
fn zero_gradient_matrix_only_decays() {
    let mut p = [1.0f32, -2.0, 3.0, 0.5];
    Muon::new(0.1)
        .with_weight_decay(0.1)
        .step("w", &[2, 2], &mut p, &[0.0; 4]);
    for (a, b) in p.iter().zip([0.99f32, -1.98, 2.97, 0.495]) {
        assert!((a - b).abs() < 1e-6, "{p:?}");
    }
}

#[test]
fn state_round_trips_and_rejects_adam_state() {
    let mut opt = Muon::new(0.01);
    let mut p = vec![0.5f32; 6];
    opt.step("w", &[3, 2], &mut p, &uniforms(5, 6));
    opt.end_iteration();
    let s = opt.state_dict().unwrap();
    let mut fresh = Muon::new(0.01);
    assert!(fresh.load_state_dict(&s));
    assert_eq!(fresh.state_dict().unwrap(), s);
    let adam_like = OptimizerState {
        step: 1,
        buffers: vec![("m/w".into(), vec![0.0; 6]), ("v/w".into(), vec![0.0; 6])],
        ..Default::default()
    };
    assert!(!fresh.load_state_dict(&adam_like));
    assert_eq!(fresh.state_dict().unwrap(), s);
}

#[test]
#[should_panic(expected = "Muon::step: param `w` has shape [2, 3] (6 elements) but 4 values")]
fn matrix_shape_disagreeing_with_the_data_panics() {
    Muon::new(0.1).step("w", &[2, 3], &mut [0.0; 4], &[0.0; 4]);
}

#[test]
#[should_panic(expected = "Muon::step: grad for param `w` has 5 values but the param has 4")]
fn mismatched_grad_length_panics() {
    Muon::new(0.1).step("w", &[2, 2], &mut [0.0; 4], &[0.0; 5]);
}

#[test]
#[should_panic(expected = "a 2×2 matrix needs 4 values but got 3")]
fn orthogonalize_checks_its_dimensions() {
    Muon::new(0.1).orthogonalize(&[1.0, 2.0, 3.0], 2, 2);
}
