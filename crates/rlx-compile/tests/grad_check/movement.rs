//! reshape, transpose, narrow, pad, concat, expand, broadcast_like, gather, scatter_add.

use crate::{check, check_wrt, constant, op, rand};
use rlx_ir::{DType, Op, TensorData};

#[test]
fn reshape_and_transpose_move_the_cotangent_back() {
    check("reshape", vec![("x", rand(&[2, 6], 1))], |g, x| {
        op(
            g,
            Op::Reshape {
                new_shape: vec![3, -1, 2],
            },
            vec![x[0]],
        )
    });
    check("transpose", vec![("x", rand(&[2, 3, 4], 2))], |g, x| {
        op(
            g,
            Op::Transpose {
                perm: vec![2, 0, 1],
            },
            vec![x[0]],
        )
    });
}

#[test]
fn narrow_pads_and_pad_narrows() {
    for (axis, start, len) in [(0, 1, 2), (1, 0, 1), (1, 2, 2), (1, 0, 4)] {
        check(
            &format!("narrow {axis} {start} {len}"),
            vec![("x", rand(&[3, 4], 3))],
            |g, x| op(g, Op::Narrow { axis, start, len }, vec![x[0]]),
        );
    }
    check("pad", vec![("x", rand(&[2, 3], 4))], |g, x| {
        op(
            g,
            Op::Pad {
                axis: 1,
                before: 2,
                after: 1,
                value: 5.0,
            },
            vec![x[0]],
        )
    });
}

#[test]
fn concat_splits_the_cotangent_between_operands() {
    check(
        "concat axis 1",
        vec![
            ("a", rand(&[2, 1], 1)),
            ("b", rand(&[2, 3], 2)),
            ("c", rand(&[2, 2], 3)),
        ],
        |g, x| op(g, Op::Concat { axis: 1 }, vec![x[0], x[1], x[2]]),
    );
    // the same tensor twice
    check("concat self", vec![("a", rand(&[2, 2], 4))], |g, x| {
        op(g, Op::Concat { axis: 0 }, vec![x[0], x[0]])
    });
}

#[test]
fn expand_and_broadcast_like_sum_the_copies() {
    check("expand", vec![("x", rand(&[3, 1], 5))], |g, x| {
        op(
            g,
            Op::Expand {
                target_shape: vec![2, 3, 4],
            },
            vec![x[0]],
        )
    });
    check_wrt(
        "broadcast_like",
        vec![("x", rand(&[1, 3], 6)), ("like", rand(&[2, 4, 3], 7))],
        &["x"],
        |g, x| op(g, Op::BroadcastLike, vec![x[0], x[1]]),
    );
}

#[test]
fn gather_scatters_back_with_repeated_and_negative_indices() {
    let idx = TensorData::from_i64_as(DType::I64, &[2, 2], &[0, 2, 2, -1]);
    for axis in [0, 1] {
        check_wrt(
            &format!("gather axis {axis}"),
            vec![("t", rand(&[3, 3], 8)), ("i", idx.clone())],
            &["t"],
            |g, x| op(g, Op::Gather { axis }, vec![x[0], x[1]]),
        );
    }
    // float-encoded indices, a rank-0 index
    check(
        "gather scalar index",
        vec![("t", rand(&[4, 2], 9))],
        |g, x| {
            let i = constant(g, TensorData::from_f64(&[], &[3.0]));
            op(g, Op::Gather { axis: 0 }, vec![x[0], i])
        },
    );
}

#[test]
fn scatter_add_passes_base_through_and_gathers_updates() {
    let idx = TensorData::from_i64_as(DType::I64, &[3], &[1, 1, 0]);
    check_wrt(
        "scatter_add",
        vec![("b", rand(&[2, 3], 1)), ("i", idx), ("u", rand(&[3, 3], 2))],
        &["b", "u"],
        |g, x| op(g, Op::ScatterAdd { axis: 0 }, vec![x[0], x[1], x[2]]),
    );
}
