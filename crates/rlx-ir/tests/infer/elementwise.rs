//! Activations, casts, binary ops, comparisons, `where`, round-to-format.

use crate::{bad, d, dy, f32s, ok, s, sh};
use rlx_ir::{Activation, BinaryOp, CmpOp, DType, Op};

#[test]
fn activation_keeps_shape_dtype_and_dynamic_dims() {
    let x = dy(&[d(0), s(3)], DType::BF16);
    for a in Activation::ALL {
        assert_eq!(ok(&Op::Activation(a), &[&x]), x, "{}", a.name());
    }
    let scalar = f32s(&[]);
    assert_eq!(ok(&Op::Activation(Activation::Tanh), &[&scalar]), scalar);
}

#[test]
fn integer_closed_activations_accept_ints_and_the_rest_do_not() {
    let x = sh(&[4], DType::I32);
    for a in Activation::ALL {
        let op = Op::Activation(a);
        if a.integer_closed() {
            assert_eq!(ok(&op, &[&x]), x, "{}", a.name());
        } else {
            bad(&op, &[&x], &["[4] i32", "dtype i32", ".cast(DType::F32)"]);
        }
    }
}

#[test]
fn activations_reject_bool_and_complex() {
    let op = Op::Activation(Activation::Relu);
    bad(&op, &[&sh(&[2], DType::Bool)], &["[2] bool"]);
    bad(&op, &[&sh(&[2], DType::C64)], &["[2] c64"]);
}

#[test]
fn cast_changes_only_the_dtype() {
    let x = dy(&[d(1), s(2)], DType::F32);
    let y = ok(&Op::Cast { to: DType::I64 }, &[&x]);
    assert_eq!(y, dy(&[d(1), s(2)], DType::I64));
    assert_eq!(
        ok(&Op::Cast { to: DType::Bool }, &[&f32s(&[])]),
        sh(&[], DType::Bool)
    );
    bad(
        &Op::Cast { to: DType::I64 },
        &[],
        &["takes 1 input(s)", "got 0"],
    );
}

#[test]
fn binary_broadcasts_size_one_and_prepends_axes() {
    let add = Op::Binary(BinaryOp::Add);
    assert_eq!(
        ok(&add, &[&f32s(&[4, 1, 3]), &f32s(&[5, 1])]),
        f32s(&[4, 5, 3])
    );
    // rank-0 on either side
    assert_eq!(ok(&add, &[&f32s(&[]), &f32s(&[2, 3])]), f32s(&[2, 3]));
    assert_eq!(ok(&add, &[&f32s(&[2, 3]), &f32s(&[])]), f32s(&[2, 3]));
    assert_eq!(ok(&add, &[&f32s(&[]), &f32s(&[])]), f32s(&[]));
    // size-1 stretches to 0 too
    assert_eq!(ok(&add, &[&f32s(&[1, 3]), &f32s(&[0, 1])]), f32s(&[0, 3]));
}

#[test]
fn binary_result_dtype_is_the_left_operand_dtype() {
    let mul = Op::Binary(BinaryOp::Mul);
    // a scalar f32 constant against an i32 or f64 tensor (API §2.4)
    assert_eq!(
        ok(&mul, &[&sh(&[3], DType::I32), &f32s(&[])]),
        sh(&[3], DType::I32)
    );
    assert_eq!(
        ok(&mul, &[&sh(&[3], DType::F64), &f32s(&[])]),
        sh(&[3], DType::F64)
    );
}

#[test]
fn binary_keeps_matching_dynamic_dims_and_rejects_distinct_symbols() {
    let sub = Op::Binary(BinaryOp::Sub);
    let a = dy(&[d(0), s(3)], DType::F32);
    assert_eq!(ok(&sub, &[&a, &f32s(&[1, 3])]), a);
    assert_eq!(ok(&sub, &[&f32s(&[3]), &a]), a);
    assert_eq!(ok(&sub, &[&a, &a]), a);
    let b = dy(&[d(1), s(3)], DType::F32);
    bad(&sub, &[&a, &b], &["[?0, 3] f32", "[?1, 3] f32"]);
    bad(&sub, &[&a, &f32s(&[2, 3])], &["?0 vs 2"]);
}

#[test]
fn float_arithmetic_lists_each_float_binary_op_once_and_no_bitwise_one() {
    let x = f32s(&[2, 3]);
    let ops = BinaryOp::FLOAT_ARITHMETIC;
    for (i, b) in ops.into_iter().enumerate() {
        assert_eq!(ok(&Op::Binary(b), &[&x, &x]), x, "{}", b.name());
        assert!(!b.is_bitwise(), "{}", b.name());
        assert!(!ops[..i].contains(&b), "{} is listed twice", b.name());
    }
    let bitwise = [
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
        BinaryOp::Shl,
        BinaryOp::Shr,
    ];
    for b in bitwise {
        assert!(b.is_bitwise(), "{}", b.name());
        bad(&Op::Binary(b), &[&x, &x], &["[2, 3] f32"]);
    }
}

#[test]
fn bitwise_ops_need_integers_and_shifts_reject_bool() {
    let i = sh(&[3], DType::I32);
    let bl = sh(&[3], DType::Bool);
    for b in [BinaryOp::BitAnd, BinaryOp::BitOr, BinaryOp::BitXor] {
        assert_eq!(ok(&Op::Binary(b), &[&i, &i]), i);
        assert_eq!(ok(&Op::Binary(b), &[&bl, &bl]), bl);
        bad(
            &Op::Binary(b),
            &[&f32s(&[3]), &i],
            &["[3] f32", "integer or bool"],
        );
        bad(&Op::Binary(b), &[&i, &f32s(&[3])], &["[3] f32"]);
    }
    for b in [BinaryOp::Shl, BinaryOp::Shr] {
        assert_eq!(ok(&Op::Binary(b), &[&i, &i]), i);
        bad(
            &Op::Binary(b),
            &[&bl, &bl],
            &["[3] bool", "integer operands"],
        );
    }
}

#[test]
fn bool_arithmetic_and_complex_operands_are_rejected() {
    let bl = sh(&[2], DType::Bool);
    bad(
        &Op::Binary(BinaryOp::Add),
        &[&bl, &bl],
        &["[2] bool", "cast"],
    );
    // max/min of bools is or/and
    assert_eq!(ok(&Op::Binary(BinaryOp::Max), &[&bl, &bl]), bl);
    let c = sh(&[2], DType::C64);
    bad(&Op::Binary(BinaryOp::Add), &[&c, &c], &["[2] c64"]);
    bad(&Op::Binary(BinaryOp::Add), &[&f32s(&[2]), &c], &["[2] c64"]);
}

#[test]
fn atan2_needs_a_float_left_operand() {
    let op = Op::Binary(BinaryOp::Atan2);
    assert_eq!(ok(&op, &[&f32s(&[2]), &f32s(&[2])]), f32s(&[2]));
    bad(
        &op,
        &[&sh(&[2], DType::I32), &f32s(&[2])],
        &["[2] i32", "floating-point"],
    );
}

#[test]
fn comparisons_broadcast_to_bool() {
    for c in [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ] {
        let x = dy(&[d(0), s(1)], DType::I64);
        assert_eq!(
            ok(&Op::Compare(c), &[&x, &sh(&[4], DType::I64)]),
            dy(&[d(0), s(4)], DType::Bool),
            "{}",
            c.name()
        );
    }
    let z = sh(&[2], DType::C64);
    assert_eq!(
        ok(&Op::Compare(CmpOp::Eq), &[&z, &z]),
        sh(&[2], DType::Bool)
    );
    bad(&Op::Compare(CmpOp::Lt), &[&z, &z], &["[2] c64", "no order"]);
    bad(
        &Op::Compare(CmpOp::Eq),
        &[&f32s(&[2, 3]), &f32s(&[3, 2])],
        &["[2, 3] f32", "[3, 2] f32"],
    );
}

#[test]
fn where_broadcasts_mask_and_branches_together() {
    let m = sh(&[4, 1, 1], DType::Bool);
    let t = f32s(&[2, 1]);
    let f = f32s(&[3]);
    assert_eq!(ok(&Op::Where, &[&m, &t, &f]), f32s(&[4, 2, 3]));
    // a rank-0 mask and scalar branches
    let m0 = sh(&[], DType::Bool);
    assert_eq!(ok(&Op::Where, &[&m0, &f32s(&[]), &f32s(&[])]), f32s(&[]));
    // a float mask (non-zero selects) keeps the branches' dtype
    let i = sh(&[2], DType::I32);
    assert_eq!(ok(&Op::Where, &[&f32s(&[2]), &i, &i]), i);
    // dynamic dims flow through
    let md = dy(&[d(0), s(1)], DType::Bool);
    assert_eq!(
        ok(&Op::Where, &[&md, &f32s(&[3]), &f32s(&[1])]),
        dy(&[d(0), s(3)], DType::F32)
    );
}

#[test]
fn where_rejects_mismatched_mask_branches_and_dtypes() {
    let m = sh(&[5], DType::Bool);
    bad(
        &Op::Where,
        &[&m, &f32s(&[2, 3]), &f32s(&[2, 3])],
        &["mask [5] bool", "[2, 3] f32", "broadcast"],
    );
    bad(
        &Op::Where,
        &[&sh(&[3], DType::Bool), &f32s(&[2]), &f32s(&[3])],
        &["[2] f32", "[3] f32"],
    );
    bad(
        &Op::Where,
        &[&sh(&[3], DType::Bool), &f32s(&[3]), &sh(&[3], DType::I32)],
        &["on_true [3] f32", "on_false [3] i32"],
    );
    bad(
        &Op::Where,
        &[&sh(&[3], DType::C64), &f32s(&[3]), &f32s(&[3])],
        &["[3] c64", "bool"],
    );
    bad(
        &Op::Where,
        &[&f32s(&[3]), &f32s(&[3])],
        &["takes 3 input(s)"],
    );
}

#[test]
fn round_to_format_checks_float_input_and_format_fields() {
    let op = |e, m, max| Op::RoundToFormat {
        exp_bits: e,
        man_bits: m,
        max_normal: max,
    };
    let x = dy(&[d(0)], DType::F16);
    assert_eq!(ok(&op(5, 10, 65504.0), &[&x]), x);
    assert_eq!(ok(&op(8, 23, f32::MAX), &[&f32s(&[])]), f32s(&[]));
    bad(
        &op(9, 2, 1.0),
        &[&f32s(&[2])],
        &["9 exponent", "[2] f32", "1..=8"],
    );
    bad(&op(0, 2, 1.0), &[&f32s(&[2])], &["0 exponent"]);
    bad(&op(4, 24, 1.0), &[&f32s(&[2])], &["24 mantissa"]);
    bad(&op(4, 3, 0.0), &[&f32s(&[2])], &["max_normal", "[2] f32"]);
    bad(&op(4, 3, f32::NAN), &[&f32s(&[2])], &["max_normal"]);
    bad(&op(4, 3, 448.0), &[&sh(&[2], DType::U8)], &["[2] u8"]);
}

#[test]
fn stop_gradient_is_the_identity_on_types() {
    let x = dy(&[s(2), d(7)], DType::I8);
    assert_eq!(ok(&Op::StopGradient, &[&x]), x);
    bad(
        &Op::StopGradient,
        &[&x, &x],
        &["takes 1 input(s)", "[2, ?7] i8"],
    );
}
