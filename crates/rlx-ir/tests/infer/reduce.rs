//! Reduce, ArgMax/ArgMin, Cumsum.

use crate::{bad, d, dy, f32s, ok, s, sh};
use rlx_ir::op::ReduceOp;
use rlx_ir::{DType, Op};

fn reduce(op: ReduceOp, axes: &[usize], keep_dim: bool) -> Op {
    Op::Reduce {
        op,
        axes: axes.to_vec(),
        keep_dim,
    }
}

#[test]
fn reduce_drops_or_keeps_the_listed_axes() {
    let x = f32s(&[2, 3, 4]);
    for op in [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ] {
        assert_eq!(ok(&reduce(op, &[0, 2], false), &[&x]), f32s(&[3]));
        assert_eq!(ok(&reduce(op, &[2, 0], true), &[&x]), f32s(&[1, 3, 1]));
        assert_eq!(ok(&reduce(op, &[0, 1, 2], false), &[&x]), f32s(&[]));
    }
}

#[test]
fn reduce_over_no_axes_is_the_identity() {
    let x = dy(&[d(0), s(3)], DType::I32);
    for keep in [false, true] {
        assert_eq!(ok(&reduce(ReduceOp::Sum, &[], keep), &[&x]), x);
    }
    let scalar = f32s(&[]);
    assert_eq!(ok(&reduce(ReduceOp::Mean, &[], false), &[&scalar]), scalar);
}

#[test]
fn reduce_of_a_dynamic_axis_becomes_static_one_with_keep_dim() {
    let x = dy(&[d(0), s(3)], DType::F32);
    assert_eq!(ok(&reduce(ReduceOp::Sum, &[0], true), &[&x]), f32s(&[1, 3]));
    assert_eq!(
        ok(&reduce(ReduceOp::Sum, &[1], false), &[&x]),
        dy(&[d(0)], DType::F32)
    );
    // summing an empty axis is fine (the identity 0)
    assert_eq!(
        ok(&reduce(ReduceOp::Sum, &[1], false), &[&f32s(&[2, 0])]),
        f32s(&[2])
    );
}

#[test]
fn reduce_rejects_bad_axes_and_dtypes() {
    let x = f32s(&[2, 3, 4]);
    bad(
        &reduce(ReduceOp::Sum, &[3], false),
        &[&x],
        &["axis 3", "[2, 3, 4] f32", "0..3"],
    );
    bad(
        &reduce(ReduceOp::Sum, &[1, 1], false),
        &[&x],
        &["axis 1", "twice", "[1, 1]"],
    );
    bad(
        &reduce(ReduceOp::Sum, &[0], false),
        &[&f32s(&[])],
        &["axis 0", "[] f32"],
    );
    let b = sh(&[4], DType::Bool);
    bad(
        &reduce(ReduceOp::Sum, &[0], false),
        &[&b],
        &["sum", "[4] bool"],
    );
    assert_eq!(
        ok(&reduce(ReduceOp::Max, &[0], false), &[&b]),
        sh(&[], DType::Bool)
    );
    bad(
        &reduce(ReduceOp::Max, &[0], false),
        &[&sh(&[4], DType::C128)],
        &["[4] c128"],
    );
    bad(
        &reduce(ReduceOp::Sum, &[0], false),
        &[&x, &x],
        &["takes 1 input(s)"],
    );
}

#[test]
fn argmax_and_argmin_reduce_one_axis_in_the_input_dtype() {
    for keep in [false, true] {
        let x = sh(&[2, 3], DType::F16);
        let expected = if keep {
            sh(&[2, 1], DType::F16)
        } else {
            sh(&[2], DType::F16)
        };
        assert_eq!(
            ok(
                &Op::ArgMax {
                    axis: 1,
                    keep_dim: keep
                },
                &[&x]
            ),
            expected
        );
        assert_eq!(
            ok(
                &Op::ArgMin {
                    axis: 1,
                    keep_dim: keep
                },
                &[&x]
            ),
            expected
        );
    }
    let x = dy(&[d(0), s(5)], DType::I32);
    assert_eq!(
        ok(
            &Op::ArgMax {
                axis: 1,
                keep_dim: false
            },
            &[&x]
        ),
        dy(&[d(0)], DType::I32)
    );
    assert_eq!(
        ok(
            &Op::ArgMin {
                axis: 0,
                keep_dim: false
            },
            &[&f32s(&[7])]
        ),
        f32s(&[])
    );
}

#[test]
fn argmax_rejects_empty_axes_bad_axes_and_non_real_input() {
    let empty = f32s(&[3, 0]);
    bad(
        &Op::ArgMax {
            axis: 1,
            keep_dim: true,
        },
        &[&empty],
        &["axis 1", "[3, 0] f32", "empty"],
    );
    bad(
        &Op::ArgMin {
            axis: 1,
            keep_dim: false,
        },
        &[&empty],
        &["empty"],
    );
    // an empty axis other than the reduced one is fine
    assert_eq!(
        ok(
            &Op::ArgMax {
                axis: 0,
                keep_dim: false
            },
            &[&empty]
        ),
        f32s(&[0])
    );
    bad(
        &Op::ArgMax {
            axis: 2,
            keep_dim: false,
        },
        &[&f32s(&[3, 4])],
        &["axis 2", "[3, 4] f32"],
    );
    bad(
        &Op::ArgMax {
            axis: 0,
            keep_dim: false,
        },
        &[&f32s(&[])],
        &["axis 0", "[] f32"],
    );
    bad(
        &Op::ArgMin {
            axis: 0,
            keep_dim: false,
        },
        &[&sh(&[2], DType::C64)],
        &["[2] c64"],
    );
}

#[test]
fn cumsum_keeps_the_shape_and_takes_negative_axes() {
    let x = dy(&[d(0), s(3)], DType::I64);
    for axis in [-2, -1, 0, 1] {
        assert_eq!(
            ok(
                &Op::Cumsum {
                    axis,
                    exclusive: axis < 0
                },
                &[&x]
            ),
            x
        );
    }
    bad(
        &Op::Cumsum {
            axis: 2,
            exclusive: false,
        },
        &[&x],
        &["axis 2", "-2..2"],
    );
    bad(
        &Op::Cumsum {
            axis: 0,
            exclusive: false,
        },
        &[&f32s(&[])],
        &["rank-0"],
    );
    bad(
        &Op::Cumsum {
            axis: 0,
            exclusive: false,
        },
        &[&sh(&[3], DType::Bool)],
        &["[3] bool"],
    );
}
