//! Rotary embeddings, the two cross-entropy losses and the spline activation.

use super::*;
use rlx_ir::RopeStyle;

fn rope(head_dim: usize, n_rot: usize, style: RopeStyle) -> Op {
    Op::Rope {
        head_dim,
        n_rot,
        style,
    }
}

#[test]
fn rope_neox_and_gptj_pair_different_dims_hand_values() {
    // head_dim 4, one position; pair 0 rotates by 90° (c 0, s 1), pair 1 by 0° (c 1, s 0).
    let x = t64(&[1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
    let cos = t64(&[2], &[0.0, 1.0]);
    let sin = t64(&[2], &[1.0, 0.0]);
    // NeoX pairs (0,2), (1,3): (1,3) → (1·0 − 3·1, 3·0 + 1·1) = (−3, 1); (2,4) unchanged.
    let y = eval64(
        rope(4, 4, RopeStyle::NeoX),
        &[x.clone(), cos.clone(), sin.clone()],
    );
    assert_eq!(y, vec![-3.0, 2.0, 1.0, 4.0]);
    // GptJ pairs (0,1), (2,3): (1,2) → (−2, 1); (3,4) unchanged.
    let y = eval64(rope(4, 4, RopeStyle::GptJ), &[x, cos, sin]);
    assert_eq!(y, vec![-2.0, 1.0, 3.0, 4.0]);
}

/// Reference: rotate each pair `(a, b)` as the complex number `a + ib` times `c + is`.
#[allow(clippy::too_many_arguments)]
fn rope_ref(
    x: &[f64],
    [b, s, h, hd]: [usize; 4],
    n_rot: usize,
    style: RopeStyle,
    cos: &[f64],
    sin: &[f64],
    row_stride: usize,
) -> Vec<f64> {
    let half = n_rot / 2;
    let mut out = x.to_vec();
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                let head = ((bi * s + si) * h + hi) * hd;
                for i in 0..half {
                    let (ia, ib) = match style {
                        RopeStyle::NeoX => (i, i + half),
                        RopeStyle::GptJ => (2 * i, 2 * i + 1),
                    };
                    let (c, sn) = (cos[si * row_stride + i], sin[si * row_stride + i]);
                    let (re, im) = (x[head + ia], x[head + ib]);
                    out[head + ia] = re * c - im * sn;
                    out[head + ib] = re * sn + im * c;
                }
            }
        }
    }
    out
}

#[test]
fn rope_matches_reference_for_both_styles_table_ranks_layouts_and_partial_rotation() {
    let (b, s, h, hd) = (2, 3, 2, 8);
    let x = rand(b * s * h * hd, 7);
    for style in [RopeStyle::NeoX, RopeStyle::GptJ] {
        for n_rot in [8, 4, 2] {
            let half = n_rot / 2;
            // Angles θ(s, i) = s·10000^(−2i/n_rot); rank-1 table [s·half], rank-2 table [s + 1, half + 3].
            let theta =
                |si: usize, i: usize| si as f64 * 10000f64.powf(-2.0 * i as f64 / n_rot as f64);
            let w = half + 3;
            let mut cos2 = vec![9.0; (s + 1) * w]; // unused columns/rows hold junk on purpose
            let mut sin2 = vec![9.0; (s + 1) * w];
            let mut cos1 = vec![0.0; s * half];
            let mut sin1 = vec![0.0; s * half];
            for si in 0..s {
                for i in 0..half {
                    cos2[si * w + i] = theta(si, i).cos();
                    sin2[si * w + i] = theta(si, i).sin();
                    cos1[si * half + i] = theta(si, i).cos();
                    sin1[si * half + i] = theta(si, i).sin();
                }
            }
            let want = rope_ref(&x, [b, s, h, hd], n_rot, style, &cos1, &sin1, half);
            let tables = [
                (t64(&[s * half], &cos1), t64(&[s * half], &sin1)),
                (t64(&[s + 1, w], &cos2), t64(&[s + 1, w], &sin2)),
            ];
            for (ct, st) in tables {
                for dims in [vec![b, s, h * hd], vec![b, s, h, hd]] {
                    let y = eval64(
                        rope(hd, n_rot, style),
                        &[t64(&dims, &x), ct.clone(), st.clone()],
                    );
                    let what = format!("{style:?} n_rot {n_rot} table {:?} x {dims:?}", ct.dims);
                    assert_close(&y, &want, 1e-15, &what);
                    // dims at and beyond n_rot pass through untouched
                    for head in 0..b * s * h {
                        assert_eq!(
                            y[head * hd + n_rot..(head + 1) * hd],
                            x[head * hd + n_rot..(head + 1) * hd],
                            "{what}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn rope_preserves_each_pairs_norm() {
    let x = rand(16, 8);
    let th: [f64; 2] = [0.3, -1.1];
    let cos = t64(&[1, 2], &th.map(f64::cos));
    let sin = t64(&[1, 2], &th.map(f64::sin));
    let y = eval64(
        rope(4, 4, RopeStyle::NeoX),
        &[t64(&[1, 1, 4, 4], &x), cos, sin],
    );
    for head in 0..4 {
        for i in 0..2 {
            let (a, b) = (head * 4 + i, head * 4 + i + 2);
            let n0 = x[a].hypot(x[b]);
            let n1 = y[a].hypot(y[b]);
            assert!((n0 - n1).abs() < 1e-15, "pair norm changed: {n0} → {n1}");
        }
    }
}

#[test]
fn dense_cross_entropy_is_logsumexp_minus_targets_dot_logits() {
    // logits [0, ln 3]: logsumexp = ln 4. One-hot on class 1 → ln 4 − ln 3.
    let l3 = 3.0f64.ln();
    let y = eval64(
        Op::SoftmaxCrossEntropy,
        &[
            t64(&[2, 2], &[0.0, l3, 0.0, l3]),
            t64(&[2, 2], &[0.0, 1.0, 2.0, 0.5]),
        ],
    );
    // Row 1 uses non-normalized targets literally: ln 4 − (2·0 + 0.5·ln 3).
    assert_close(
        &y,
        &[4.0f64.ln() - l3, 4.0f64.ln() - 0.5 * l3],
        1e-15,
        "dense ce",
    );
}

#[test]
fn dense_cross_entropy_over_leading_axes_matches_reference_and_stays_finite_for_large_logits() {
    let l: Vec<f64> = rand(24, 9).iter().map(|v| v * 800.0).collect();
    let t: Vec<f64> = rand(24, 10).iter().map(|v| v.abs()).collect();
    let y = eval64(
        Op::SoftmaxCrossEntropy,
        &[t64(&[2, 3, 4], &l), t64(&[2, 3, 4], &t)],
    );
    assert_eq!(y.len(), 6);
    for r in 0..6 {
        let row = &l[r * 4..r * 4 + 4];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        let want = lse - dot(row, &t[r * 4..r * 4 + 4]);
        assert!(want.is_finite());
        assert_close(&y[r..r + 1], &[want], 1e-13, "ce row");
    }
}

#[test]
fn label_cross_entropy_picks_the_labelled_logit() {
    let l3 = 3.0f64.ln();
    let logits = t64(&[2, 3], &[0.0, l3, 0.0, 1.0, 2.0, 3.0]);
    let y = eval64(
        Op::SoftmaxCrossEntropyWithLogits,
        &[logits, t64(&[2], &[1.0, 0.0])],
    );
    let lse2 = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
    assert_close(&y, &[5.0f64.ln() - l3, lse2 - 1.0], 1e-15, "label ce");
}

#[test]
fn label_cross_entropy_rejects_labels_that_are_not_class_indices() {
    let logits = t64(&[2, 3], &[0.0; 6]);
    for bad in [3.0, -1.0, 1.5, f64::NAN] {
        let err = try_eval(
            Op::SoftmaxCrossEntropyWithLogits,
            &[logits.clone(), t64(&[2], &[0.0, bad])],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("row 1") && err.contains("0..3"),
            "label {bad}: {err}"
        );
    }
}

#[test]
fn spline_activation_sums_gaussian_bumps_on_the_grid() {
    // num_basis 3 on [0, 2]: h = 1, grid 0, 1, 2.
    let op = Op::SplineActivation {
        num_basis: 3,
        grid_min: 0.0,
        grid_max: 2.0,
    };
    let coeff = t64(&[2, 3], &[1.0, 2.0, 3.0, -1.0, 0.0, 0.5]);
    let x = [0.5, 2.0, -1.0, 1.0];
    let y = eval64(op.clone(), &[t64(&[2, 2], &x), coeff]);
    let g = |z: f64| (-z * z).exp();
    let c = [[1.0, 2.0, 3.0], [-1.0, 0.0, 0.5]];
    let want: Vec<f64> = x
        .iter()
        .enumerate()
        .map(|(i, &xv)| (0..3).map(|b| c[i % 2][b] * g(xv - b as f64)).sum())
        .collect();
    assert_close(&y, &want, 1e-15, "spline");
    // x = 1 in channel 1: −e^{−1} + 0 + 0.5·e^{−1}.
    assert_close(&y[3..], &[-0.5 * (-1.0f64).exp()], 1e-15, "spline hand");
}
