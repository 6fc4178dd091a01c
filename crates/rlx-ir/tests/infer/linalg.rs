//! MatMul, FusedMatMulBiasAct, DenseSolve, SynthMatMul.

use crate::{bad, d, dy, f32s, ok, s, sh};
use rlx_ir::op::SynthKind;
use rlx_ir::{Activation, DType, Op};

#[test]
fn matmul_contracts_the_inner_axis() {
    assert_eq!(
        ok(&Op::MatMul, &[&f32s(&[2, 3]), &f32s(&[3, 4])]),
        f32s(&[2, 4])
    );
    let i = |d: &[usize]| sh(d, DType::I32);
    assert_eq!(ok(&Op::MatMul, &[&i(&[1, 1]), &i(&[1, 0])]), i(&[1, 0]));
}

#[test]
fn matmul_broadcasts_batch_axes_including_size_one_and_missing() {
    assert_eq!(
        ok(&Op::MatMul, &[&f32s(&[5, 1, 2, 3]), &f32s(&[7, 3, 4])]),
        f32s(&[5, 7, 2, 4])
    );
    assert_eq!(
        ok(&Op::MatMul, &[&f32s(&[2, 3]), &f32s(&[6, 3, 4])]),
        f32s(&[6, 2, 4])
    );
    bad(
        &Op::MatMul,
        &[&f32s(&[2, 2, 3]), &f32s(&[3, 3, 4])],
        &["batch axes [2]", "[3]", "[2, 2, 3] f32"],
    );
}

#[test]
fn matmul_keeps_dynamic_m_n_and_batch() {
    let a = dy(&[d(0), d(1), s(3)], DType::F32);
    let b = dy(&[s(3), d(2)], DType::F32);
    assert_eq!(
        ok(&Op::MatMul, &[&a, &b]),
        dy(&[d(0), d(1), d(2)], DType::F32)
    );
    // a dynamic contraction axis must be the same symbol on both sides
    let a = dy(&[s(2), d(5)], DType::F32);
    let b = dy(&[d(5), s(4)], DType::F32);
    assert_eq!(ok(&Op::MatMul, &[&a, &b]), f32s(&[2, 4]));
    bad(
        &Op::MatMul,
        &[&a, &f32s(&[3, 4])],
        &["?5 ≠ 3", "[2, ?5] f32"],
    );
}

#[test]
fn matmul_needs_rank_two_same_dtype_and_real_numbers() {
    bad(
        &Op::MatMul,
        &[&f32s(&[3]), &f32s(&[3, 4])],
        &["rank ≥ 2", "[3] f32", "unsqueeze"],
    );
    bad(&Op::MatMul, &[&f32s(&[]), &f32s(&[])], &["[] f32"]);
    bad(
        &Op::MatMul,
        &[&f32s(&[2, 3]), &sh(&[3, 4], DType::F16)],
        &["[2, 3] f32", "[3, 4] f16", "cast"],
    );
    let b = sh(&[2, 2], DType::Bool);
    bad(&Op::MatMul, &[&b, &b], &["[2, 2] bool"]);
}

fn linear(act: Option<Activation>) -> Op {
    Op::FusedMatMulBiasAct { activation: act }
}

#[test]
fn linear_maps_the_last_axis_and_keeps_leading_axes() {
    let w = f32s(&[3, 5]);
    let b = f32s(&[5]);
    assert_eq!(
        ok(&linear(None), &[&f32s(&[2, 4, 3]), &w, &b]),
        f32s(&[2, 4, 5])
    );
    // a single vector
    assert_eq!(ok(&linear(None), &[&f32s(&[3]), &w, &b]), f32s(&[5]));
    // a dynamic batch
    let x = dy(&[d(0), s(3)], DType::F32);
    assert_eq!(
        ok(&linear(Some(Activation::Gelu)), &[&x, &w, &b]),
        dy(&[d(0), s(5)], DType::F32)
    );
}

#[test]
fn linear_rejects_bad_weight_bias_and_activation() {
    let x = f32s(&[8, 3]);
    bad(
        &linear(None),
        &[&x, &f32s(&[2, 3, 5]), &f32s(&[5])],
        &["2-D", "[2, 3, 5] f32"],
    );
    bad(
        &linear(None),
        &[&f32s(&[8, 4]), &f32s(&[3, 5]), &f32s(&[5])],
        &["4 ≠ 3", "[8, 4] f32", "[3, 5] f32"],
    );
    bad(
        &linear(None),
        &[&x, &f32s(&[3, 5]), &f32s(&[1, 5])],
        &["[1, 5] f32", "[5]"],
    );
    bad(
        &linear(None),
        &[&x, &f32s(&[3, 5]), &f32s(&[])],
        &["[] f32", "[5]"],
    );
    bad(
        &linear(None),
        &[&x, &f32s(&[3, 5]), &sh(&[5], DType::F16)],
        &["[5] f16", "[8, 3] f32"],
    );
    bad(
        &linear(None),
        &[&f32s(&[]), &f32s(&[3, 5]), &f32s(&[5])],
        &["scalar [] f32"],
    );
    let xi = sh(&[2, 3], DType::I32);
    let wi = sh(&[3, 5], DType::I32);
    let bi = sh(&[5], DType::I32);
    assert_eq!(
        ok(&linear(Some(Activation::Relu)), &[&xi, &wi, &bi]),
        sh(&[2, 5], DType::I32)
    );
    bad(
        &linear(Some(Activation::Silu)),
        &[&xi, &wi, &bi],
        &["silu", "[2, 5] i32"],
    );
    bad(&linear(None), &[&x, &f32s(&[3, 5])], &["takes 3 input(s)"]);
}

#[test]
fn solve_returns_the_right_hand_side_shape() {
    let a = f32s(&[3, 3]);
    assert_eq!(ok(&Op::DenseSolve, &[&a, &f32s(&[3])]), f32s(&[3]));
    assert_eq!(ok(&Op::DenseSolve, &[&a, &f32s(&[3, 4])]), f32s(&[3, 4]));
    let ab = sh(&[2, 3, 3], DType::F64);
    assert_eq!(
        ok(&Op::DenseSolve, &[&ab, &sh(&[2, 3], DType::F64)]),
        sh(&[2, 3], DType::F64)
    );
    assert_eq!(
        ok(&Op::DenseSolve, &[&ab, &sh(&[2, 3, 1], DType::F64)]),
        sh(&[2, 3, 1], DType::F64)
    );
    let ad = dy(&[d(0), d(0)], DType::F32);
    assert_eq!(
        ok(&Op::DenseSolve, &[&ad, &dy(&[d(0)], DType::F32)]),
        dy(&[d(0)], DType::F32)
    );
}

#[test]
fn solve_rejects_mismatched_rows_batches_and_dtypes() {
    let a = f32s(&[2, 3, 3]);
    bad(
        &Op::DenseSolve,
        &[&a, &f32s(&[5, 3])],
        &["batch axes [2]", "[5, 3] f32"],
    );
    bad(
        &Op::DenseSolve,
        &[&a, &f32s(&[2, 4, 1])],
        &["[2, 4, 1] f32", "3 rows"],
    );
    bad(
        &Op::DenseSolve,
        &[&a, &f32s(&[3])],
        &["[3] f32", "[2, 3, 3] f32"],
    );
    bad(
        &Op::DenseSolve,
        &[&f32s(&[3]), &f32s(&[3])],
        &["square", "[3] f32"],
    );
    bad(
        &Op::DenseSolve,
        &[&sh(&[2, 2], DType::I32), &sh(&[2], DType::I32)],
        &["[2, 2] i32", "floating-point"],
    );
    bad(
        &Op::DenseSolve,
        &[&f32s(&[2, 2]), &sh(&[2], DType::F64)],
        &["[2] f64", "cast"],
    );
}

fn synth(entry_dim: u32, num_entries: u32) -> Op {
    Op::SynthMatMul {
        kind: SynthKind::Codebook {
            entry_dim,
            num_entries,
        },
    }
}

#[test]
fn synth_matmul_produces_one_output_per_index_row() {
    let idx = sh(&[6, 2], DType::U8);
    let cb = f32s(&[16, 4]);
    assert_eq!(
        ok(&synth(4, 16), &[&f32s(&[4, 8]), &idx, &cb]),
        f32s(&[4, 6])
    );
    let x = dy(&[d(0), s(8)], DType::F32);
    assert_eq!(
        ok(&synth(4, 16), &[&x, &idx, &cb]),
        dy(&[d(0), s(6)], DType::F32)
    );
    assert_eq!(
        ok(&synth(4, 256), &[&f32s(&[8]), &idx, &f32s(&[256, 4])]),
        f32s(&[6])
    );
}

#[test]
fn synth_matmul_rejects_bad_codebooks_indices_and_k() {
    let idx = sh(&[6, 2], DType::U8);
    let cb = f32s(&[16, 4]);
    bad(
        &synth(4, 16),
        &[&f32s(&[4, 9]), &idx, &cb],
        &["[4, 9] f32", "k = 9", "entry_dim 4"],
    );
    bad(
        &synth(4, 16),
        &[&f32s(&[4, 12]), &idx, &cb],
        &["3 columns", "[6, 2] u8"],
    );
    bad(
        &synth(4, 16),
        &[&f32s(&[4, 8]), &idx, &f32s(&[16, 2])],
        &["[16, 4]", "[16, 2] f32"],
    );
    bad(
        &synth(4, 16),
        &[&f32s(&[4, 8]), &idx, &sh(&[16, 4], DType::U8)],
        &["codebook", "[16, 4] u8"],
    );
    bad(
        &synth(4, 16),
        &[&f32s(&[4, 8]), &sh(&[6, 2], DType::I32), &cb],
        &["u8", "[6, 2] i32"],
    );
    bad(
        &synth(4, 300),
        &[&f32s(&[4, 8]), &idx, &f32s(&[300, 4])],
        &["300", "1..=256"],
    );
    bad(&synth(4, 16), &[&f32s(&[]), &idx, &cb], &["scalar [] f32"]);
}
