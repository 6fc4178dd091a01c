//! Convolution, pooling, their gradient ops (second order), and the FFT.

use crate::{check, check_wrt, op, rand, run, sum_all, vals};
use rlx_compile::autodiff::append_grad;
use rlx_ir::{BinaryOp, DType, FftAlgo, FftNorm, Graph, Op, ReduceOp, Shape};

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

fn max_pool(k: usize, s: usize, p: usize, grad: bool) -> Op {
    let (kernel_size, stride, padding) = (vec![k, k], vec![s, s], vec![p, p]);
    if grad {
        Op::PoolGrad {
            kind: ReduceOp::Max,
            kernel_size,
            stride,
            padding,
        }
    } else {
        Op::Pool {
            kind: ReduceOp::Max,
            kernel_size,
            stride,
            padding,
        }
    }
}

#[test]
fn max_pool_grad_is_differentiable_in_grad_out() {
    // Overlapping windows (a tap routes several windows' gradients) and padding.
    for (k, s, p, out) in [(2, 1, 0, 3), (3, 2, 1, 2)] {
        check_wrt(
            &format!("max pool2d_grad k{k} s{s} p{p}"),
            vec![
                ("x", rand(&[1, 2, 4, 4], 1)),
                ("gy", rand(&[1, 2, out, out], 2)),
            ],
            &["gy"],
            |g, x| op(g, max_pool(k, s, p, true), vec![x[0], x[1]]),
        );
    }
}

#[test]
fn max_pool_grad_adjoint_reads_the_first_maximum_of_tied_windows() {
    // x [1, 1, 2, 3] with 2×2 windows at stride 1: window 0 = {1, 5, 5, 2} ties at
    // taps 1 and 2 and routes to the first (x[0, 1]); window 1 = {5, 0, 2, 5} ties at
    // taps 0 and 3 (x[0, 1] again). So ∂⟨u, pool_grad(x, gy)⟩/∂gy reads u[0, 1] for
    // both windows.
    let mut g = Graph::new("max pool grad adjoint");
    let x = g.input("x", Shape::new(&[1, 1, 2, 3], DType::F64));
    let gy = g.input("gy", Shape::new(&[1, 1, 1, 2], DType::F64));
    let u = g.input("u", Shape::new(&[1, 1, 2, 3], DType::F64));
    let pg = op(&mut g, max_pool(2, 1, 0, true), vec![x, gy]);
    let w = op(&mut g, Op::Binary(BinaryOp::Mul), vec![pg, u]);
    let l = sum_all(&mut g, w);
    let ggy = append_grad(&mut g, l, &[gy], None).unwrap()[0];
    g.set_outputs(vec![pg, ggy]);
    let out = run(
        &g,
        &[
            ("x", vals(&[1, 1, 2, 3], &[1.0, 5.0, 0.0, 5.0, 2.0, 5.0])),
            ("gy", vals(&[1, 1, 1, 2], &[10.0, 100.0])),
            ("u", vals(&[1, 1, 2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])),
        ],
    );
    // The forward routing agrees: both windows' gradients land on x[0, 1].
    assert_eq!(out[0].to_f64_vec(), [0.0, 110.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(out[1].to_f64_vec(), [2.0, 2.0]);
}

#[test]
fn second_order_through_max_pooling() {
    // loss = Σ maxpool(x)²: its gradient pool_grad(x, 2·maxpool(x)) is differentiated
    // through grad_out (the routing is locally constant), checked against finite
    // differences of the gradient (random x has no ties).
    check(
        "grad of Σ maxpool(x)²",
        vec![("x", rand(&[1, 2, 4, 4], 5))],
        |g, x| {
            let y = op(g, max_pool(3, 2, 1, false), vec![x[0]]);
            let sq = op(g, Op::Binary(BinaryOp::Mul), vec![y, y]);
            let l = sum_all(g, sq);
            append_grad(g, l, &x[..1], None).unwrap()[0]
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
