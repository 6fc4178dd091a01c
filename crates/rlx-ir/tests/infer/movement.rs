//! Reshape, transpose, narrow, pad, concat, expand, gather, scatter_add.

use crate::{bad, d, dy, f32s, ok, s, sh};
use rlx_ir::{DType, Op};

fn reshape(new_shape: &[i64]) -> Op {
    Op::Reshape {
        new_shape: new_shape.to_vec(),
    }
}

#[test]
fn reshape_infers_the_wildcard_and_handles_scalars_and_empties() {
    let x = f32s(&[2, 3, 4]);
    assert_eq!(ok(&reshape(&[6, -1]), &[&x]), f32s(&[6, 4]));
    assert_eq!(ok(&reshape(&[-1]), &[&x]), f32s(&[24]));
    assert_eq!(ok(&reshape(&[4, 3, 2]), &[&x]), f32s(&[4, 3, 2]));
    // to and from rank 0
    assert_eq!(ok(&reshape(&[]), &[&f32s(&[1, 1])]), f32s(&[]));
    assert_eq!(ok(&reshape(&[1, -1]), &[&f32s(&[])]), f32s(&[1, 1]));
    // zero-sized tensors
    assert_eq!(ok(&reshape(&[-1, 3]), &[&f32s(&[0, 3])]), f32s(&[0, 3]));
    assert_eq!(ok(&reshape(&[3, 0]), &[&f32s(&[0, 3])]), f32s(&[3, 0]));
    // dtype is kept
    let b = sh(&[2, 2], DType::Bool);
    assert_eq!(ok(&reshape(&[4]), &[&b]), sh(&[4], DType::Bool));
}

#[test]
fn reshape_rejects_bad_targets_with_the_element_counts() {
    let x = f32s(&[2, 3]);
    bad(&reshape(&[-1, -1]), &[&x], &["[-1, -1]", "at most one -1"]);
    bad(&reshape(&[-2, 3]), &[&x], &["[-2, 3]", "≥ 0"]);
    bad(
        &reshape(&[4, -1]),
        &[&x],
        &["[2, 3] f32", "not divisible by 4"],
    );
    bad(&reshape(&[7]), &[&x], &["6 elements", "7 elements"]);
    bad(&reshape(&[]), &[&x], &["[2, 3] f32", "1 elements"]);
    bad(
        &reshape(&[-1, 0]),
        &[&f32s(&[0, 3])],
        &["[0, 3] f32", "ambiguous"],
    );
    bad(
        &reshape(&[i64::MAX, i64::MAX]),
        &[&x],
        &["more elements than fit"],
    );
}

#[test]
fn reshape_moves_one_dynamic_axis_through_the_wildcard() {
    let x = dy(&[d(0), s(2), s(3)], DType::F32);
    assert_eq!(ok(&reshape(&[-1, 6]), &[&x]), dy(&[d(0), s(6)], DType::F32));
    assert_eq!(
        ok(&reshape(&[3, -1, 2]), &[&x]),
        dy(&[s(3), d(0), s(2)], DType::F32)
    );
    // unsqueeze of a dynamic tensor (API: dynamic dims become -1)
    let v = dy(&[d(4)], DType::F32);
    assert_eq!(ok(&reshape(&[1, -1]), &[&v]), dy(&[s(1), d(4)], DType::F32));
}

#[test]
fn reshape_of_dynamic_input_rejects_what_no_symbol_can_express() {
    let x = dy(&[d(0), s(4)], DType::F32);
    bad(
        &reshape(&[-1, 2]),
        &[&x],
        &["[?0, 4] f32", "static sizes (4)"],
    );
    bad(&reshape(&[4, 4]), &[&x], &["[?0, 4] f32", "-1"]);
    let two = dy(&[d(0), d(1)], DType::F32);
    bad(&reshape(&[-1]), &[&two], &["[?0, ?1] f32"]);
    let same = dy(&[d(0), d(0)], DType::F32);
    bad(&reshape(&[-1]), &[&same], &["[?0, ?0] f32"]);
}

#[test]
fn transpose_permutes_dims_including_dynamic_ones() {
    let x = dy(&[s(2), d(0), s(4)], DType::I32);
    assert_eq!(
        ok(
            &Op::Transpose {
                perm: vec![2, 0, 1]
            },
            &[&x]
        ),
        dy(&[s(4), s(2), d(0)], DType::I32)
    );
    assert_eq!(
        ok(&Op::Transpose { perm: vec![] }, &[&f32s(&[])]),
        f32s(&[])
    );
    for perm in [vec![0, 1], vec![0, 1, 3], vec![1, 1, 0], vec![0, 1, 2, 3]] {
        bad(
            &Op::Transpose { perm: perm.clone() },
            &[&x],
            &[&format!("{perm:?}"), "[2, ?0, 4] i32", "0..3"],
        );
    }
}

#[test]
fn narrow_selects_a_static_range_even_on_dynamic_axes() {
    let x = dy(&[d(0), s(5)], DType::F32);
    let narrow = |axis, start, len| Op::Narrow { axis, start, len };
    assert_eq!(ok(&narrow(1, 2, 3), &[&x]), dy(&[d(0), s(3)], DType::F32));
    assert_eq!(ok(&narrow(0, 0, 2), &[&x]), dy(&[s(2), s(5)], DType::F32));
    assert_eq!(ok(&narrow(1, 5, 0), &[&x]), dy(&[d(0), s(0)], DType::F32));
    bad(&narrow(1, 3, 3), &[&x], &["[?0, 5] f32", "size 5", "≤ 5"]);
    bad(&narrow(1, usize::MAX, 2), &[&x], &["exceeds axis 1"]);
    bad(&narrow(2, 0, 1), &[&x], &["axis 2", "[?0, 5] f32", "0..2"]);
    bad(&narrow(0, 0, 1), &[&f32s(&[])], &["axis 0", "[] f32"]);
}

#[test]
fn pad_grows_static_axes_and_refuses_to_grow_dynamic_ones() {
    let pad = |axis, before, after| Op::Pad {
        axis,
        before,
        after,
        value: 0.0,
    };
    let x = dy(&[d(0), s(3)], DType::F32);
    assert_eq!(ok(&pad(1, 1, 2), &[&x]), dy(&[d(0), s(6)], DType::F32));
    assert_eq!(ok(&pad(0, 0, 0), &[&x]), x);
    bad(&pad(0, 1, 0), &[&x], &["dynamic axis 0", "[?0, 3] f32"]);
    bad(&pad(2, 1, 0), &[&x], &["axis 2", "[?0, 3] f32"]);
}

#[test]
fn concat_sums_the_axis_and_keeps_matching_dynamic_dims() {
    let c = |axis| Op::Concat { axis };
    assert_eq!(
        ok(&c(1), &[&f32s(&[2, 1]), &f32s(&[2, 3]), &f32s(&[2, 0])]),
        f32s(&[2, 4])
    );
    let a = dy(&[d(0), s(3)], DType::F32);
    let b = dy(&[d(0), s(2)], DType::F32);
    assert_eq!(ok(&c(1), &[&a, &b]), dy(&[d(0), s(5)], DType::F32));
    // a single tensor (even along a dynamic axis) is itself
    assert_eq!(ok(&c(0), &[&a]), a);
    // a dynamic piece plus empty static pieces is still that symbol
    assert_eq!(ok(&c(0), &[&f32s(&[0, 3]), &a]), a);
}

#[test]
fn concat_rejects_mismatches_and_unsummable_dynamic_axes() {
    let c = |axis| Op::Concat { axis };
    let a = dy(&[d(0), s(3)], DType::F32);
    let b = dy(&[d(1), s(3)], DType::F32);
    bad(&c(0), &[&a, &b], &["dynamic axis 0", "?0 + ?1"]);
    bad(&c(0), &[&a, &a], &["?0 + ?0"]);
    bad(&c(0), &[&a, &f32s(&[2, 3])], &["?0 + 2"]);
    bad(
        &c(1),
        &[&a, &b],
        &["[?1, 3] f32", "[?0, 3] f32", "axis 0 differs"],
    );
    bad(
        &c(0),
        &[&f32s(&[2, 3]), &sh(&[2, 3], DType::F64)],
        &["[2, 3] f64", "dtypes must match"],
    );
    bad(&c(0), &[&f32s(&[2, 3]), &f32s(&[6])], &["[6] f32", "ranks"]);
    bad(&c(0), &[], &["at least one"]);
    bad(&c(2), &[&f32s(&[2, 3])], &["axis 2", "[2, 3] f32"]);
}

fn expand(t: &[i64]) -> Op {
    Op::Expand {
        target_shape: t.to_vec(),
    }
}

#[test]
fn expand_stretches_size_one_adds_leading_axes_and_keeps_minus_one() {
    assert_eq!(ok(&expand(&[2, 3, 4]), &[&f32s(&[3, 1])]), f32s(&[2, 3, 4]));
    assert_eq!(ok(&expand(&[2, 2]), &[&f32s(&[])]), f32s(&[2, 2]));
    assert_eq!(ok(&expand(&[0, 3]), &[&f32s(&[1, 3])]), f32s(&[0, 3]));
    let x = dy(&[d(0), s(1)], DType::F32);
    assert_eq!(
        ok(&expand(&[4, -1, 5]), &[&x]),
        dy(&[s(4), d(0), s(5)], DType::F32)
    );
    assert_eq!(ok(&expand(&[-1, -1]), &[&x]), x);
}

#[test]
fn expand_rejects_shrinking_negative_sizes_and_lost_axes() {
    bad(
        &expand(&[3, 4]),
        &[&f32s(&[3, 2])],
        &["[3, 2] f32", "neither 4 nor 1"],
    );
    bad(
        &expand(&[4]),
        &[&f32s(&[3, 4])],
        &["[4]", "[3, 4] f32", "fewer axes"],
    );
    bad(
        &expand(&[-1, 3]),
        &[&f32s(&[3])],
        &["-1", "leading axis 0", "[3] f32"],
    );
    bad(
        &expand(&[-2, 3]),
        &[&f32s(&[3])],
        &["negative size -2", "[3] f32"],
    );
    let x = dy(&[d(0), s(1)], DType::F32);
    bad(&expand(&[4, 5]), &[&x], &["[?0, 1] f32", "?0", "-1"]);
}

#[test]
fn gather_splices_the_index_shape_in_place_of_the_axis() {
    let table = f32s(&[10, 4]);
    let g = |axis| Op::Gather { axis };
    assert_eq!(
        ok(&g(0), &[&table, &sh(&[3, 5], DType::I64)]),
        f32s(&[3, 5, 4])
    );
    assert_eq!(ok(&g(1), &[&table, &sh(&[3], DType::I32)]), f32s(&[10, 3]));
    // a rank-0 index drops the axis; a float index is allowed (F32-encoded indices)
    assert_eq!(ok(&g(0), &[&table, &f32s(&[])]), f32s(&[4]));
    let idx = dy(&[d(2)], DType::U32);
    assert_eq!(ok(&g(0), &[&table, &idx]), dy(&[d(2), s(4)], DType::F32));
    bad(&g(2), &[&table, &idx], &["axis 2", "[10, 4] f32"]);
    bad(&g(0), &[&f32s(&[]), &idx], &["axis 0", "[] f32"]);
    bad(
        &g(0),
        &[&table, &sh(&[3], DType::C64)],
        &["[3] c64", "integers"],
    );
}

#[test]
fn scatter_add_takes_updates_shaped_like_the_gather() {
    let sc = |axis| Op::ScatterAdd { axis };
    let base = f32s(&[10, 4]);
    let idx = sh(&[2, 3], DType::I64);
    assert_eq!(ok(&sc(0), &[&base, &idx, &f32s(&[2, 3, 4])]), base);
    assert_eq!(ok(&sc(1), &[&base, &idx, &f32s(&[10, 2, 3])]), base);
    bad(
        &sc(0),
        &[&base, &idx, &f32s(&[6, 4])],
        &["[6, 4] f32", "[2, 3, 4] f32"],
    );
    bad(
        &sc(0),
        &[&base, &idx, &sh(&[2, 3, 4], DType::F16)],
        &["[2, 3, 4] f16", "[10, 4] f32"],
    );
    bad(
        &sc(0),
        &[&base, &sh(&[2], DType::Bool), &f32s(&[2, 4])],
        &["[2] bool"],
    );
    bad(&sc(0), &[&base, &idx], &["takes 3 input(s)"]);
}

#[test]
fn broadcast_like_takes_the_dynamic_dims_of_like_and_the_dtype_of_x() {
    let like = dy(&[d(0), s(3), s(4)], DType::Bool);
    let got = ok(&Op::BroadcastLike, &[&f32s(&[1, 4]), &like]);
    assert_eq!(got, dy(&[d(0), s(3), s(4)], DType::F32));
    // a rank-0 x fills like's shape
    let got = ok(&Op::BroadcastLike, &[&sh(&[], DType::F64), &like]);
    assert_eq!(got, dy(&[d(0), s(3), s(4)], DType::F64));
    // an axis that matches by symbol is kept
    let x = dy(&[d(0), s(1), s(4)], DType::F32);
    assert_eq!(
        ok(&Op::BroadcastLike, &[&x, &like]),
        like.with_dtype(DType::F32)
    );
}

#[test]
fn broadcast_like_rejects_x_with_more_axes_or_a_mismatched_axis() {
    bad(
        &Op::BroadcastLike,
        &[&f32s(&[2, 3, 4]), &f32s(&[3, 4])],
        &["[2, 3, 4] f32", "[3, 4] f32"],
    );
    let like = dy(&[d(0), s(4)], DType::F32);
    bad(
        &Op::BroadcastLike,
        &[&dy(&[d(1), s(4)], DType::F32), &like],
        &["[?1, 4] f32", "[?0, 4] f32"],
    );
}

#[test]
fn broadcast_like_evaluates_like_expand_to_the_bound_dims() {
    use rlx_ir::{Graph, Shape, TensorData, interp};
    let mut g = Graph::new("bl");
    let x = g.input("x", f32s(&[1, 3]));
    let like = g.input("like", Shape::from_dims(&[d(0), s(3)], DType::F32));
    let y = g.add_op(Op::BroadcastLike, vec![x, like]).unwrap();
    g.set_outputs(vec![y]);
    let out = interp::run(
        &g,
        &[
            ("x", TensorData::from_f32(&[1, 3], &[1.0, 2.0, 3.0])),
            ("like", TensorData::from_f32(&[2, 3], &[9.0; 6])),
        ],
    )
    .unwrap();
    assert_eq!(out[0].dims, vec![2, 3]);
    assert_eq!(out[0].to_f32_vec(), vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
}
