//! Convolution, pooling, their gradient ops (second order), and the FFT.

use crate::{check, check_wrt, op, rand};
use rlx_ir::{FftAlgo, FftNorm, Op, ReduceOp};

fn conv(k: &[usize], s: &[usize], p: &[usize], d: &[usize], groups: usize) -> Op {
    Op::Conv {
        kernel_size: k.to_vec(),
        stride: s.to_vec(),
        padding: p.to_vec(),
        dilation: d.to_vec(),
        groups,
    }
}

#[test]
fn conv2d_with_stride_padding_dilation_groups_and_bias() {
    let cases = [
        // (x dims, w dims, op)
        (
            vec![1, 2, 4, 4],
            vec![3, 2, 2, 2],
            conv(&[2, 2], &[1, 1], &[0, 0], &[1, 1], 1),
        ),
        (
            vec![2, 2, 5, 4],
            vec![2, 2, 3, 3],
            conv(&[3, 3], &[2, 1], &[1, 1], &[1, 1], 1),
        ),
        (
            vec![1, 4, 5, 5],
            vec![4, 2, 2, 2],
            conv(&[2, 2], &[1, 2], &[1, 0], &[2, 1], 2),
        ),
    ];
    for (i, (xd, wd, opx)) in cases.into_iter().enumerate() {
        check(
            &format!("conv2d #{i}"),
            vec![("x", rand(&xd, i as u64)), ("w", rand(&wd, 10 + i as u64))],
            |g, x| op(g, opx.clone(), vec![x[0], x[1]]),
        );
        let cout = wd[0];
        check(
            &format!("conv2d+bias #{i}"),
            vec![
                ("x", rand(&xd, i as u64)),
                ("w", rand(&wd, 10 + i as u64)),
                ("b", rand(&[cout], 20 + i as u64)),
            ],
            |g, x| op(g, opx.clone(), vec![x[0], x[1], x[2]]),
        );
    }
}

#[test]
fn conv1d_gradients() {
    check(
        "conv1d",
        vec![("x", rand(&[2, 2, 6], 1)), ("w", rand(&[3, 2, 3], 2))],
        |g, x| op(g, conv(&[3], &[2], &[1], &[1], 1), vec![x[0], x[1]]),
    );
}

#[test]
fn conv_gradient_ops_are_differentiable_for_second_order() {
    let opx = |input: bool| {
        let (kernel_size, stride, padding, dilation) =
            (vec![2, 2], vec![1, 1], vec![1, 0], vec![1, 1]);
        if input {
            Op::ConvGradInput {
                kernel_size,
                stride,
                padding,
                dilation,
                groups: 1,
            }
        } else {
            Op::ConvGradWeight {
                kernel_size,
                stride,
                padding,
                dilation,
                groups: 1,
            }
        }
    };
    // conv of [1, 2, 3, 3] with [2, 2, 2, 2], padding (1, 0): out [1, 2, 4, 2]
    check_wrt(
        "conv_grad_input",
        vec![
            ("x", rand(&[1, 2, 3, 3], 1)),
            ("w", rand(&[2, 2, 2, 2], 2)),
            ("gy", rand(&[1, 2, 4, 2], 3)),
        ],
        &["w", "gy"],
        |g, x| op(g, opx(true), vec![x[0], x[1], x[2]]),
    );
    check_wrt(
        "conv_grad_weight",
        vec![
            ("x", rand(&[1, 2, 3, 3], 4)),
            ("w", rand(&[2, 2, 2, 2], 5)),
            ("gy", rand(&[1, 2, 4, 2], 6)),
        ],
        &["x", "gy"],
        |g, x| op(g, opx(false), vec![x[0], x[1], x[2]]),
    );
}

#[test]
fn pooling_max_mean_and_sum_with_overlapping_windows() {
    for kind in [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum] {
        for (k, s, p) in [(2, 2, 0), (3, 1, 1), (2, 1, 1)] {
            check(
                &format!("{} pool k{k} s{s} p{p}", kind.name()),
                vec![("x", rand(&[1, 2, 4, 5], 7))],
                |g, x| {
                    op(
                        g,
                        Op::Pool {
                            kind,
                            kernel_size: vec![k, k],
                            stride: vec![s, s],
                            padding: vec![p, p],
                        },
                        vec![x[0]],
                    )
                },
            );
        }
    }
}

#[test]
fn mean_pool_grad_is_differentiable_in_grad_out() {
    check_wrt(
        "mean pool2d_grad",
        vec![
            ("x", rand(&[1, 1, 4, 4], 1)),
            ("gy", rand(&[1, 1, 3, 3], 2)),
        ],
        &["gy"],
        |g, x| {
            op(
                g,
                Op::PoolGrad {
                    kind: ReduceOp::Mean,
                    kernel_size: vec![2, 2],
                    stride: vec![1, 1],
                    padding: vec![0, 0],
                },
                vec![x[0], x[1]],
            )
        },
    );
}

#[test]
fn fft_adjoint_for_every_norm_and_direction() {
    for norm in [FftNorm::Backward, FftNorm::Ortho, FftNorm::Forward] {
        for inverse in [false, true] {
            check(
                &format!("fft {norm:?} inverse={inverse}"),
                vec![("x", rand(&[2, 6], 3))],
                |g, x| {
                    op(
                        g,
                        Op::Fft {
                            inverse,
                            norm,
                            algo: FftAlgo::Native,
                        },
                        vec![x[0]],
                    )
                },
            );
        }
    }
}
