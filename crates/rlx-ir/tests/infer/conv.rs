//! Conv (1-D/2-D/3-D, dilation, groups), its gradients, Pool and PoolGrad.

use crate::{bad, d, dy, f32s, ok, s, sh};
use rlx_ir::op::ReduceOp;
use rlx_ir::{DType, Op};

/// A convolution with the same kernel/stride/padding/dilation on every spatial axis.
fn conv(sr: usize, k: usize, stride: usize, pad: usize, dil: usize, groups: usize) -> Op {
    Op::Conv {
        kernel_size: vec![k; sr],
        stride: vec![stride; sr],
        padding: vec![pad; sr],
        dilation: vec![dil; sr],
        groups,
    }
}

#[test]
fn conv2d_output_follows_the_sliding_window_formula() {
    let x = f32s(&[1, 3, 8, 8]);
    let w = f32s(&[16, 3, 3, 3]);
    // (in + 2p − d(k−1) − 1)/s + 1
    assert_eq!(ok(&conv(2, 3, 1, 1, 1, 1), &[&x, &w]), f32s(&[1, 16, 8, 8]));
    assert_eq!(ok(&conv(2, 3, 2, 0, 1, 1), &[&x, &w]), f32s(&[1, 16, 3, 3]));
    assert_eq!(ok(&conv(2, 3, 1, 0, 2, 1), &[&x, &w]), f32s(&[1, 16, 4, 4]));
    assert_eq!(ok(&conv(2, 3, 3, 2, 3, 1), &[&x, &w]), f32s(&[1, 16, 2, 2]));
    // per-axis geometry
    let op = Op::Conv {
        kernel_size: vec![3, 1],
        stride: vec![1, 2],
        padding: vec![0, 1],
        dilation: vec![1, 1],
        groups: 1,
    };
    assert_eq!(ok(&op, &[&x, &f32s(&[4, 3, 3, 1])]), f32s(&[1, 4, 6, 5]));
}

#[test]
fn conv_supports_groups_and_depthwise_weights() {
    let x = f32s(&[2, 4, 8, 8]);
    assert_eq!(
        ok(&conv(2, 3, 1, 0, 1, 2), &[&x, &f32s(&[8, 2, 3, 3])]),
        f32s(&[2, 8, 6, 6])
    );
    assert_eq!(
        ok(&conv(2, 3, 1, 1, 1, 4), &[&x, &f32s(&[4, 1, 3, 3])]),
        f32s(&[2, 4, 8, 8])
    );
    bad(
        &conv(2, 3, 1, 0, 1, 3),
        &[&x, &f32s(&[6, 1, 3, 3])],
        &["groups = 3", "4 channels", "[6, 1, 3, 3] f32"],
    );
    bad(
        &conv(2, 3, 1, 0, 1, 2),
        &[&x, &f32s(&[8, 4, 3, 3])],
        &["C/groups = 2", "[8, 4, 3, 3] f32"],
    );
    bad(
        &conv(2, 3, 1, 0, 1, 2),
        &[&x, &f32s(&[7, 2, 3, 3])],
        &["7 output channels"],
    );
}

#[test]
fn conv_works_in_one_and_three_dimensions() {
    assert_eq!(
        ok(
            &conv(1, 3, 2, 0, 1, 1),
            &[&f32s(&[2, 3, 10]), &f32s(&[5, 3, 3])]
        ),
        f32s(&[2, 5, 4])
    );
    assert_eq!(
        ok(
            &conv(3, 3, 1, 1, 1, 1),
            &[&f32s(&[1, 2, 5, 6, 7]), &f32s(&[4, 2, 3, 3, 3])]
        ),
        f32s(&[1, 4, 5, 6, 7])
    );
    bad(
        &conv(1, 3, 1, 0, 1, 1),
        &[&f32s(&[1, 3, 8, 8]), &f32s(&[4, 3, 3])],
        &["1 spatial axes", "[1, 3, 8, 8] f32"],
    );
}

#[test]
fn conv_keeps_a_dynamic_batch_and_takes_a_bias() {
    let x = dy(&[d(0), s(3), s(8), s(8)], DType::F32);
    let w = f32s(&[16, 3, 3, 3]);
    let expected = dy(&[d(0), s(16), s(6), s(6)], DType::F32);
    assert_eq!(ok(&conv(2, 3, 1, 0, 1, 1), &[&x, &w]), expected);
    assert_eq!(
        ok(&conv(2, 3, 1, 0, 1, 1), &[&x, &w, &f32s(&[16])]),
        expected
    );
    bad(
        &conv(2, 3, 1, 0, 1, 1),
        &[&x, &w, &f32s(&[15])],
        &["[16]", "[15] f32"],
    );
    bad(
        &conv(2, 3, 1, 0, 1, 1),
        &[&x, &w, &sh(&[16], DType::F64)],
        &["[16] f64"],
    );
    bad(&conv(2, 3, 1, 0, 1, 1), &[&x], &["[x, w]", "got 1"]);
}

#[test]
fn conv_rejects_degenerate_geometry_without_panicking() {
    let x = f32s(&[1, 3, 8, 8]);
    let w = f32s(&[16, 3, 3, 3]);
    // kernel 0 used to underflow `k - 1`
    bad(
        &conv(2, 0, 1, 0, 1, 1),
        &[&x, &f32s(&[16, 3, 0, 0])],
        &["kernel_size [0, 0]", "≥ 1"],
    );
    bad(&conv(2, 3, 0, 0, 1, 1), &[&x, &w], &["stride [0, 0]"]);
    bad(&conv(2, 3, 1, 0, 0, 1), &[&x, &w], &["dilation [0, 0]"]);
    bad(&conv(2, 3, 1, 0, 1, 0), &[&x, &w], &["groups (0)"]);
    // a dynamic output-channel axis used to panic in unwrap_static
    let wd = dy(&[d(1), s(3), s(3), s(3)], DType::F32);
    bad(
        &conv(2, 3, 1, 0, 1, 1),
        &[&x, &wd],
        &["[?1, 3, 3, 3] f32", "static"],
    );
    let xd = dy(&[s(1), s(3), d(2), s(8)], DType::F32);
    bad(
        &conv(2, 3, 1, 0, 1, 1),
        &[&xd, &w],
        &["spatial axis 0", "?2", "static"],
    );
    bad(
        &conv(2, 3, 1, 0, 4, 1),
        &[&x, &w],
        &["[1, 3, 8, 8] f32", "dilated kernel (9"],
    );
    let mismatched = Op::Conv {
        kernel_size: vec![3, 3],
        stride: vec![1],
        padding: vec![0, 0],
        dilation: vec![1, 1],
        groups: 1,
    };
    bad(
        &mismatched,
        &[&x, &w],
        &["stride [1]", "one entry per spatial axis"],
    );
    bad(
        &conv(2, 3, 1, 0, 1, 1),
        &[
            &sh(&[1, 3, 8, 8], DType::I32),
            &sh(&[16, 3, 3, 3], DType::I32),
        ],
        &["[1, 3, 8, 8] i32"],
    );
    bad(
        &conv(2, 3, 1, 0, 1, 1),
        &[&x, &sh(&[16, 3, 3, 3], DType::F16)],
        &["[16, 3, 3, 3] f16", "cast"],
    );
}

#[test]
fn conv_gradients_return_the_input_and_weight_shapes() {
    let geo = |input: bool| {
        let (kernel_size, stride, padding, dilation) =
            (vec![3, 3], vec![2, 2], vec![1, 1], vec![1, 1]);
        if input {
            Op::ConvGradInput {
                kernel_size,
                stride,
                padding,
                dilation,
                groups: 2,
            }
        } else {
            Op::ConvGradWeight {
                kernel_size,
                stride,
                padding,
                dilation,
                groups: 2,
            }
        }
    };
    let x = f32s(&[2, 4, 9, 9]);
    let w = f32s(&[6, 2, 3, 3]);
    let g = f32s(&[2, 6, 5, 5]);
    assert_eq!(ok(&geo(true), &[&x, &w, &g]), x);
    assert_eq!(ok(&geo(false), &[&x, &w, &g]), w);
    bad(
        &geo(true),
        &[&x, &w, &f32s(&[2, 6, 4, 4])],
        &["[2, 6, 4, 4] f32", "[2, 6, 5, 5] f32"],
    );
    bad(
        &geo(false),
        &[&x, &w, &sh(&[2, 6, 5, 5], DType::F16)],
        &["[2, 6, 5, 5] f16"],
    );
    bad(&geo(false), &[&x, &w], &["takes 3 input(s)"]);
}

fn pool(kind: ReduceOp, sr: usize, k: usize, stride: usize, pad: usize) -> Op {
    Op::Pool {
        kind,
        kernel_size: vec![k; sr],
        stride: vec![stride; sr],
        padding: vec![pad; sr],
    }
}

#[test]
fn pool_windows_follow_the_formula_for_every_supported_kind() {
    let x = dy(&[d(0), s(3), s(8), s(8)], DType::F32);
    for kind in [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum] {
        assert_eq!(
            ok(&pool(kind, 2, 2, 2, 0), &[&x]),
            dy(&[d(0), s(3), s(4), s(4)], DType::F32)
        );
        assert_eq!(
            ok(&pool(kind, 2, 3, 1, 1), &[&x]),
            dy(&[d(0), s(3), s(8), s(8)], DType::F32)
        );
    }
    assert_eq!(
        ok(
            &pool(ReduceOp::Max, 1, 3, 2, 1),
            &[&sh(&[2, 3, 10], DType::I32)]
        ),
        sh(&[2, 3, 5], DType::I32)
    );
    assert_eq!(
        ok(
            &pool(ReduceOp::Mean, 3, 2, 2, 0),
            &[&f32s(&[1, 1, 4, 6, 8])]
        ),
        f32s(&[1, 1, 2, 3, 4])
    );
}

#[test]
fn pool_rejects_unsupported_kinds_and_bad_windows() {
    let x = f32s(&[1, 3, 8, 8]);
    bad(
        &pool(ReduceOp::Prod, 2, 2, 2, 0),
        &[&x],
        &["Prod", "[1, 3, 8, 8] f32"],
    );
    bad(&pool(ReduceOp::Min, 2, 2, 2, 0), &[&x], &["Min"]);
    bad(
        &pool(ReduceOp::Max, 2, 2, 1, 2),
        &[&x],
        &["padding 2", "[1, 3, 8, 8] f32", "padding ≤ 1"],
    );
    bad(
        &pool(ReduceOp::Max, 2, 0, 1, 0),
        &[&x],
        &["kernel_size [0, 0]"],
    );
    bad(&pool(ReduceOp::Max, 2, 2, 0, 0), &[&x], &["stride [0, 0]"]);
    bad(
        &pool(ReduceOp::Max, 2, 9, 1, 0),
        &[&x],
        &["size 8", "window 9"],
    );
    bad(
        &pool(ReduceOp::Max, 1, 2, 2, 0),
        &[&x],
        &["1 spatial axes", "[1, 3, 8, 8] f32"],
    );
    bad(
        &pool(ReduceOp::Max, 2, 2, 2, 0),
        &[&sh(&[1, 3, 8, 8], DType::Bool)],
        &["[1, 3, 8, 8] bool"],
    );
    let xd = dy(&[s(1), s(3), s(8), d(0)], DType::F32);
    bad(
        &pool(ReduceOp::Max, 2, 2, 2, 0),
        &[&xd],
        &["spatial axis 1", "?0"],
    );
}

#[test]
fn pool_grad_returns_the_input_shape_and_checks_grad_out() {
    let op = Op::PoolGrad {
        kind: ReduceOp::Mean,
        kernel_size: vec![2, 2],
        stride: vec![2, 2],
        padding: vec![0, 0],
    };
    let x = f32s(&[1, 3, 8, 8]);
    assert_eq!(ok(&op, &[&x, &f32s(&[1, 3, 4, 4])]), x);
    bad(
        &op,
        &[&x, &f32s(&[1, 3, 4, 5])],
        &["[1, 3, 4, 5] f32", "[1, 3, 4, 4] f32"],
    );
    bad(&op, &[&x], &["takes 2 input(s)"]);
}
