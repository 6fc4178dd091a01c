//! Norms, softmax, log-softmax, the cross-entropy losses, rope and the spline.

use crate::{check, check_wrt, op, rand, rand_in};
use rlx_ir::{DType, Op, RopeStyle, TensorData};

#[test]
fn layer_norm_and_rms_norm_with_every_gamma_beta_form() {
    let forms: [&[usize]; 3] = [&[4], &[1], &[]];
    for rms in [false, true] {
        for (i, p) in forms.into_iter().enumerate() {
            for xd in [&[3, 4][..], &[2, 1, 4][..], &[4][..]] {
                let opx = if rms {
                    Op::RmsNorm {
                        axis: -1,
                        eps: 1e-5,
                    }
                } else {
                    Op::LayerNorm {
                        axis: -1,
                        eps: 1e-5,
                    }
                };
                check(
                    &format!("{} x{xd:?} params{p:?}", opx.name()),
                    vec![
                        ("x", rand(xd, i as u64)),
                        ("gamma", rand_in(p, 10 + i as u64, 0.5, 1.5)),
                        ("beta", rand(p, 20 + i as u64)),
                    ],
                    |g, x| op(g, opx.clone(), vec![x[0], x[1], x[2]]),
                );
            }
        }
    }
}

#[test]
fn softmax_and_log_softmax_along_every_axis() {
    for axis in [-1, 0, 1] {
        for opx in [Op::Softmax { axis }, Op::LogSoftmax { axis }] {
            check(
                &format!("{} axis {axis}", opx.name()),
                vec![("x", rand(&[3, 4], 5))],
                |g, x| op(g, opx.clone(), vec![x[0]]),
            );
        }
    }
    check("softmax rank3", vec![("x", rand(&[2, 1, 3], 6))], |g, x| {
        op(g, Op::Softmax { axis: 1 }, vec![x[0]])
    });
}

#[test]
fn dense_cross_entropy_differentiates_logits_and_targets() {
    // targets that are not a distribution too (the formula is linear in them)
    check(
        "cross_entropy",
        vec![
            ("l", rand(&[3, 4], 1)),
            ("t", rand_in(&[3, 4], 2, 0.0, 1.0)),
        ],
        |g, x| op(g, Op::SoftmaxCrossEntropy, vec![x[0], x[1]]),
    );
    check(
        "cross_entropy rank3",
        vec![
            ("l", rand(&[2, 2, 3], 3)),
            ("t", rand_in(&[2, 2, 3], 4, 0.0, 1.0)),
        ],
        |g, x| op(g, Op::SoftmaxCrossEntropy, vec![x[0], x[1]]),
    );
}

#[test]
fn label_cross_entropy_differentiates_the_logits() {
    for labels in [
        TensorData::from_f64(&[3], &[2.0, 0.0, 3.0]),
        TensorData::from_i64_as(DType::I64, &[3], &[1, 1, 0]),
    ] {
        check_wrt(
            &format!("ce labels {}", labels.dtype),
            vec![("l", rand(&[3, 4], 1)), ("y", labels)],
            &["l"],
            |g, x| op(g, Op::SoftmaxCrossEntropyWithLogits, vec![x[0], x[1]]),
        );
    }
}

#[test]
fn rope_differentiates_x_and_both_tables_for_both_styles_and_layouts() {
    let (s, hd) = (3, 4);
    let rope = |style, n_rot| Op::Rope {
        head_dim: hd,
        n_rot,
        style,
    };
    for style in [RopeStyle::NeoX, RopeStyle::GptJ] {
        for n_rot in [4, 2] {
            let half = n_rot / 2;
            // rank-3 [B, S, H·D] and rank-4 [B, S, H, D]
            for xd in [&[2, s, 2 * hd][..], &[1, s, 2, hd][..]] {
                check(
                    &format!("rope {style:?} n_rot {n_rot} x{xd:?}"),
                    vec![
                        ("x", rand(xd, 3)),
                        ("cos", rand(&[s, half], 1)),
                        ("sin", rand(&[s, half], 2)),
                    ],
                    |g, x| op(g, rope(style, n_rot), vec![x[0], x[1], x[2]]),
                );
            }
        }
    }
    // a rank-1 table [S·n_rot/2] with spare entries, and a rank-2 table with spare
    // rows and columns: the entries rope never reads get zero gradient
    check(
        "rope rank-1 table",
        vec![
            ("x", rand(&[1, s, hd], 4)),
            ("cos", rand(&[s * 2 + 3], 5)),
            ("sin", rand(&[s * 2 + 3], 6)),
        ],
        |g, x| op(g, rope(RopeStyle::NeoX, hd), vec![x[0], x[1], x[2]]),
    );
    check(
        "rope wide rank-2 table",
        vec![
            ("x", rand(&[2, s, 2, hd], 7)),
            ("cos", rand(&[s + 2, 3], 8)),
            ("sin", rand(&[s + 2, 3], 9)),
        ],
        |g, x| op(g, rope(RopeStyle::GptJ, hd), vec![x[0], x[1], x[2]]),
    );
}

#[test]
fn spline_activation_differentiates_x_and_coefficients() {
    for xd in [&[2, 3][..], &[3][..], &[2, 2, 3][..]] {
        check(
            &format!("spline x{xd:?}"),
            vec![("x", rand_in(xd, 1, -1.5, 1.5)), ("c", rand(&[3, 5], 2))],
            |g, x| {
                op(
                    g,
                    Op::SplineActivation {
                        num_basis: 5,
                        grid_min: -1.0,
                        grid_max: 1.0,
                    },
                    vec![x[0], x[1]],
                )
            },
        );
    }
}
