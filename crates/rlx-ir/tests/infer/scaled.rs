//! ScaledQuantScale, ScaledQuantize, ScaledMatMul.

use crate::{bad, d, dy, f32s, ok, s, sh};
use rlx_ir::{DType, Op, ScaleLayout, ScaledFormat, Shape};

fn u8s(dims: &[usize]) -> Shape {
    sh(dims, DType::U8)
}

fn scale_op(layout: ScaleLayout) -> Op {
    Op::ScaledQuantScale {
        format: ScaledFormat::F8E4M3,
        scale_layout: layout,
    }
}

#[test]
fn per_tensor_scales_are_one_f32() {
    for x in [
        f32s(&[4, 64]),
        sh(&[3], DType::BF16),
        dy(&[d(0), s(5)], DType::F32),
    ] {
        assert_eq!(ok(&scale_op(ScaleLayout::PerTensor), &[&x]), f32s(&[1]));
    }
}

#[test]
fn block_scales_are_one_u8_code_per_block_of_the_last_axis() {
    let x = f32s(&[4, 64]);
    assert_eq!(
        ok(&scale_op(ScaleLayout::BlockMxE8M0 { block: 32 }), &[&x]),
        u8s(&[4, 2])
    );
    assert_eq!(
        ok(&scale_op(ScaleLayout::Nvfp4 { group: 16 }), &[&x]),
        u8s(&[4, 4])
    );
    // leading dynamic axes are kept
    let xd = dy(&[d(0), s(3), s(32)], DType::F16);
    assert_eq!(
        ok(&scale_op(ScaleLayout::BlockMxE8M0 { block: 32 }), &[&xd]),
        dy(&[d(0), s(3), s(1)], DType::U8)
    );
}

#[test]
fn scale_layouts_reject_ragged_dynamic_or_missing_k() {
    let mx = scale_op(ScaleLayout::BlockMxE8M0 { block: 32 });
    bad(
        &mx,
        &[&f32s(&[4, 40])],
        &["[4, 40] f32", "multiple of the block 32"],
    );
    bad(
        &mx,
        &[&dy(&[s(4), d(0)], DType::F32)],
        &["[4, ?0] f32", "static"],
    );
    bad(&mx, &[&f32s(&[])], &["scalar [] f32"]);
    bad(
        &scale_op(ScaleLayout::Nvfp4 { group: 0 }),
        &[&f32s(&[4, 64])],
        &["block size 0"],
    );
    bad(&mx, &[&u8s(&[4, 64])], &["[4, 64] u8", "floating-point"]);
    let custom = Op::ScaledQuantScale {
        format: ScaledFormat::Custom {
            exp_bits: 5,
            mant_bits: 4,
            bias: 15,
        },
        scale_layout: ScaleLayout::PerTensor,
    };
    bad(
        &custom,
        &[&f32s(&[4])],
        &["5 exponent", "4 mantissa", "≤ 8"],
    );
    let no_exp = Op::ScaledQuantScale {
        format: ScaledFormat::Custom {
            exp_bits: 0,
            mant_bits: 3,
            bias: 0,
        },
        scale_layout: ScaleLayout::PerTensor,
    };
    bad(&no_exp, &[&f32s(&[4])], &["exp_bits ≥ 1"]);
    let fine = Op::ScaledQuantScale {
        format: ScaledFormat::Custom {
            exp_bits: 3,
            mant_bits: 0,
            bias: 3,
        },
        scale_layout: ScaleLayout::PerTensor,
    };
    assert_eq!(ok(&fine, &[&f32s(&[4])]), f32s(&[1]));
}

#[test]
fn quantize_gives_u8_codes_and_checks_the_scales() {
    let q = |layout| Op::ScaledQuantize {
        format: ScaledFormat::F4E2M1,
        scale_layout: layout,
    };
    let x = f32s(&[4, 64]);
    assert_eq!(
        ok(&q(ScaleLayout::Nvfp4 { group: 16 }), &[&x, &u8s(&[4, 4])]),
        u8s(&[4, 64])
    );
    assert_eq!(
        ok(&q(ScaleLayout::PerTensor), &[&x, &f32s(&[1])]),
        u8s(&[4, 64])
    );
    bad(
        &q(ScaleLayout::PerTensor),
        &[&x, &u8s(&[1])],
        &["[1] f32", "[1] u8"],
    );
    bad(
        &q(ScaleLayout::Nvfp4 { group: 16 }),
        &[&x, &u8s(&[4, 2])],
        &["[4, 4] u8", "[4, 2] u8"],
    );
    bad(
        &q(ScaleLayout::PerTensor),
        &[&x],
        &["takes 2 input(s)", "x, scales"],
    );
}

fn smm(layout: ScaleLayout, has_bias: bool) -> Op {
    Op::ScaledMatMul {
        lhs_format: ScaledFormat::F8E4M3,
        rhs_format: ScaledFormat::F8E5M2,
        scale_layout: layout,
        has_bias,
    }
}

#[test]
fn scaled_matmul_is_tn_and_returns_f32() {
    let mx = ScaleLayout::BlockMxE8M0 { block: 32 };
    let (lq, rq) = (u8s(&[4, 64]), u8s(&[8, 64]));
    assert_eq!(
        ok(&smm(mx, false), &[&lq, &rq, &u8s(&[4, 2]), &u8s(&[8, 2])]),
        f32s(&[4, 8])
    );
    assert_eq!(
        ok(
            &smm(ScaleLayout::PerTensor, true),
            &[&lq, &rq, &f32s(&[1]), &f32s(&[1]), &f32s(&[8])]
        ),
        f32s(&[4, 8])
    );
    let lqd = dy(&[d(0), s(64)], DType::U8);
    assert_eq!(
        ok(
            &smm(ScaleLayout::PerTensor, false),
            &[&lqd, &rq, &f32s(&[1]), &f32s(&[1])]
        ),
        dy(&[d(0), s(8)], DType::F32)
    );
}

#[test]
fn scaled_matmul_rejects_bad_codes_scales_and_bias() {
    let mx = ScaleLayout::BlockMxE8M0 { block: 32 };
    let (lq, rq) = (u8s(&[4, 64]), u8s(&[8, 64]));
    let (ls, rs) = (u8s(&[4, 2]), u8s(&[8, 2]));
    bad(
        &smm(mx, false),
        &[&f32s(&[4, 64]), &rq, &ls, &rs],
        &["[4, 64] f32", "u8 codes"],
    );
    bad(
        &smm(mx, false),
        &[&u8s(&[2, 4, 64]), &rq, &ls, &rs],
        &["[2, 4, 64] u8"],
    );
    bad(
        &smm(mx, false),
        &[&lq, &rq, &ls, &u8s(&[2, 8])],
        &["rhs scales", "[8, 2] u8", "[2, 8] u8"],
    );
    bad(
        &smm(mx, true),
        &[&lq, &rq, &ls, &rs, &f32s(&[4])],
        &["bias", "[8]", "[4] f32"],
    );
    bad(
        &smm(mx, true),
        &[&lq, &rq, &ls, &rs, &u8s(&[8])],
        &["bias", "[8] u8"],
    );
    bad(
        &smm(mx, true),
        &[&lq, &rq, &ls, &rs],
        &["takes 5 input(s)", "bias"],
    );
    bad(
        &smm(mx, false),
        &[&u8s(&[4, 48]), &u8s(&[8, 48]), &ls, &rs],
        &["[4, 48]", "multiple of the block 32"],
    );
}
