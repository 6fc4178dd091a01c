//! Norms, softmax, losses, splines, attention and rope.

use crate::{bad, d, dy, f32s, ok, s, sh};
use rlx_ir::op::{MaskKind, RopeStyle};
use rlx_ir::{DType, Op, Shape};

#[test]
fn norms_accept_the_last_axis_by_either_sign_and_broadcast_params() {
    let x = dy(&[d(0), s(5)], DType::BF16);
    for op in [
        Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        },
        Op::RmsNorm { axis: 1, eps: 1e-6 },
    ] {
        assert_eq!(ok(&op, &[&x, &f32s(&[5]), &f32s(&[5])]), x);
        // [1] and rank-0 params broadcast
        assert_eq!(ok(&op, &[&x, &f32s(&[1]), &f32s(&[])]), x);
    }
}

#[test]
fn norms_reject_inner_axes_rank_zero_and_bad_params() {
    let op = Op::LayerNorm {
        axis: -2,
        eps: 1e-5,
    };
    bad(
        &op,
        &[&f32s(&[2, 5]), &f32s(&[5]), &f32s(&[5])],
        &["axis -2", "[2, 5] f32", "transpose"],
    );
    let op = Op::RmsNorm {
        axis: -1,
        eps: 1e-5,
    };
    bad(
        &op,
        &[&f32s(&[]), &f32s(&[]), &f32s(&[])],
        &["rank-0", "reshape it to [1]"],
    );
    bad(
        &op,
        &[&f32s(&[2, 5]), &f32s(&[5]), &f32s(&[5, 1])],
        &["beta", "[5, 1] f32"],
    );
    bad(
        &op,
        &[&f32s(&[2, 5]), &sh(&[5], DType::I32), &f32s(&[5])],
        &["gamma", "[5] i32"],
    );
    bad(
        &op,
        &[&sh(&[2, 5], DType::I32), &f32s(&[5]), &f32s(&[5])],
        &["[2, 5] i32"],
    );
    bad(
        &op,
        &[&f32s(&[2, 5])],
        &["takes 3 input(s)", "x, gamma, beta"],
    );
}

#[test]
fn softmax_and_log_softmax_take_any_valid_axis() {
    let x = dy(&[d(0), s(3), s(4)], DType::F16);
    for axis in [-3, -1, 0, 2] {
        assert_eq!(ok(&Op::Softmax { axis }, &[&x]), x);
        assert_eq!(ok(&Op::LogSoftmax { axis }, &[&x]), x);
    }
    bad(&Op::Softmax { axis: 3 }, &[&x], &["axis 3", "-3..3"]);
    bad(&Op::LogSoftmax { axis: -4 }, &[&x], &["axis -4"]);
    bad(&Op::Softmax { axis: 0 }, &[&f32s(&[])], &["rank-0"]);
}

#[test]
fn cross_entropies_reduce_the_class_axis() {
    assert_eq!(
        ok(
            &Op::SoftmaxCrossEntropy,
            &[&f32s(&[4, 10]), &f32s(&[4, 10])]
        ),
        f32s(&[4])
    );
    // one row: [C] → []
    assert_eq!(
        ok(&Op::SoftmaxCrossEntropy, &[&f32s(&[10]), &f32s(&[10])]),
        f32s(&[])
    );
    let l = dy(&[d(0), s(10)], DType::F32);
    assert_eq!(
        ok(
            &Op::SoftmaxCrossEntropyWithLogits,
            &[&l, &dy(&[d(0)], DType::I64)]
        ),
        dy(&[d(0)], DType::F32)
    );
    bad(
        &Op::SoftmaxCrossEntropy,
        &[&f32s(&[4, 10]), &sh(&[4, 10], DType::I64)],
        &["targets", "[4, 10] i64"],
    );
    bad(
        &Op::SoftmaxCrossEntropy,
        &[&f32s(&[]), &f32s(&[])],
        &["[] f32", "[N, C]"],
    );
    bad(
        &Op::SoftmaxCrossEntropyWithLogits,
        &[&f32s(&[4, 10]), &sh(&[4], DType::Bool)],
        &["labels", "[4] bool"],
    );
    bad(
        &Op::SoftmaxCrossEntropyWithLogits,
        &[&sh(&[4, 10], DType::I32), &f32s(&[4])],
        &["logits", "[4, 10] i32"],
    );
}

#[test]
fn spline_activation_needs_per_channel_coefficients() {
    let op = |n, lo, hi| Op::SplineActivation {
        num_basis: n,
        grid_min: lo,
        grid_max: hi,
    };
    let x = dy(&[d(0), s(3)], DType::F32);
    assert_eq!(ok(&op(8, -1.0, 1.0), &[&x, &f32s(&[3, 8])]), x);
    bad(
        &op(1, -1.0, 1.0),
        &[&x, &f32s(&[3, 1])],
        &["num_basis ≥ 2", "[?0, 3] f32"],
    );
    bad(
        &op(8, 1.0, 1.0),
        &[&x, &f32s(&[3, 8])],
        &["grid_max > grid_min"],
    );
    bad(&op(8, f32::NAN, 1.0), &[&x, &f32s(&[3, 8])], &["NaN"]);
    bad(
        &op(8, -1.0, 1.0),
        &[&f32s(&[]), &f32s(&[3, 8])],
        &["[C, 8]", "[] f32"],
    );
    bad(
        &op(8, -1.0, 1.0),
        &[&x, &sh(&[3, 8], DType::I32)],
        &["coefficients", "[3, 8] i32"],
    );
}

fn attn(num_heads: usize, head_dim: usize, v_head_dim: Option<usize>, mask_kind: MaskKind) -> Op {
    Op::Attention {
        num_heads,
        head_dim,
        v_head_dim,
        mask_kind,
        score_scale: None,
        attn_logit_softcap: None,
    }
}

#[test]
fn attention_rank_four_returns_q_shape_for_every_unmasked_kind() {
    let q = f32s(&[2, 5, 4, 8]);
    let kv = f32s(&[2, 7, 4, 8]);
    for mk in [MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow(2)] {
        assert_eq!(ok(&attn(4, 8, None, mk), &[&q, &kv, &kv]), q);
    }
}

#[test]
fn attention_rank_three_splits_hidden_into_heads() {
    let q = f32s(&[2, 5, 32]);
    let kv = f32s(&[2, 7, 32]);
    assert_eq!(ok(&attn(4, 8, None, MaskKind::None), &[&q, &kv, &kv]), q);
    bad(
        &attn(4, 6, None, MaskKind::None),
        &[&q, &kv, &kv],
        &["[2, 5, 32] f32", "hidden size 32", "head dim 6"],
    );
}

#[test]
fn attention_allows_grouped_query_heads_that_divide_num_heads() {
    let q = f32s(&[1, 5, 8, 4]);
    let kv2 = f32s(&[1, 5, 2, 4]);
    assert_eq!(
        ok(&attn(8, 4, None, MaskKind::Causal), &[&q, &kv2, &kv2]),
        q
    );
    let kv3 = f32s(&[1, 5, 3, 4]);
    bad(
        &attn(8, 4, None, MaskKind::Causal),
        &[&q, &kv3, &kv3],
        &["[1, 5, 3, 4] f32", "3 heads", "divide num_heads (8)"],
    );
    bad(
        &attn(8, 4, None, MaskKind::Causal),
        &[&q, &kv2, &f32s(&[1, 5, 4, 4])],
        &["2 heads", "4", "equal"],
    );
    // rank 3 GQA: hidden 8 = 2 heads × 4
    let q3 = f32s(&[1, 5, 32]);
    let kv3 = f32s(&[1, 6, 8]);
    assert_eq!(
        ok(&attn(8, 4, None, MaskKind::None), &[&q3, &kv3, &kv3]),
        q3
    );
}

#[test]
fn attention_v_head_dim_sets_the_output_head_dim() {
    let q = f32s(&[2, 5, 4, 8]);
    let k = f32s(&[2, 7, 4, 8]);
    let v = f32s(&[2, 7, 4, 16]);
    assert_eq!(
        ok(&attn(4, 8, Some(16), MaskKind::None), &[&q, &k, &v]),
        f32s(&[2, 5, 4, 16])
    );
    bad(
        &attn(4, 8, None, MaskKind::None),
        &[&q, &k, &v],
        &["v is [2, 7, 4, 16] f32", "head dim 8"],
    );
    let q3 = f32s(&[2, 5, 32]);
    assert_eq!(
        ok(
            &attn(4, 8, Some(16), MaskKind::None),
            &[&q3, &f32s(&[2, 7, 32]), &f32s(&[2, 7, 64])]
        ),
        f32s(&[2, 5, 64])
    );
    bad(
        &attn(4, 8, Some(0), MaskKind::None),
        &[&q, &k, &v],
        &["v_head_dim (0)"],
    );
}

#[test]
fn attention_keeps_dynamic_batch_and_sequence_axes() {
    let q = dy(&[d(0), d(1), s(4), s(8)], DType::F16);
    let kv = dy(&[d(0), d(2), s(4), s(8)], DType::F16);
    assert_eq!(ok(&attn(4, 8, None, MaskKind::Causal), &[&q, &kv, &kv]), q);
    let other_batch = dy(&[d(3), d(2), s(4), s(8)], DType::F16);
    bad(
        &attn(4, 8, None, MaskKind::Causal),
        &[&q, &other_batch, &other_batch],
        &["batch", "[?0, ?1, 4, 8] f16", "[?3, ?2, 4, 8] f16"],
    );
}

#[test]
fn attention_custom_mask_is_batch_by_key_len() {
    let q = f32s(&[2, 5, 4, 8]);
    let kv = f32s(&[2, 7, 4, 8]);
    let op = attn(4, 8, None, MaskKind::Custom);
    assert_eq!(ok(&op, &[&q, &kv, &kv, &f32s(&[2, 7])]), q);
    assert_eq!(ok(&op, &[&q, &kv, &kv, &sh(&[2, 7], DType::Bool)]), q);
    bad(
        &op,
        &[&q, &kv, &kv, &f32s(&[2, 5])],
        &["[2, 7]", "[2, 5] f32"],
    );
    bad(&op, &[&q, &kv, &kv], &["4 inputs", "q, k, v, mask"]);
}

#[test]
fn attention_bias_must_broadcast_to_batch_heads_sq_sk() {
    let q = f32s(&[2, 5, 4, 8]);
    let kv = f32s(&[2, 7, 4, 8]);
    let op = attn(4, 8, None, MaskKind::Bias);
    for b in [
        f32s(&[2, 4, 5, 7]),
        f32s(&[1, 1, 5, 7]),
        f32s(&[2, 1, 1, 7]),
        f32s(&[5, 7]),
        f32s(&[]),
    ] {
        assert_eq!(ok(&op, &[&q, &kv, &kv, &b]), q, "bias {b}");
    }
    bad(
        &op,
        &[&q, &kv, &kv, &f32s(&[2, 4, 5, 6])],
        &["[2, 4, 5, 7]", "[2, 4, 5, 6] f32"],
    );
    bad(
        &op,
        &[&q, &kv, &kv, &f32s(&[1, 2, 4, 5, 7])],
        &["[1, 2, 4, 5, 7] f32"],
    );
    bad(
        &op,
        &[&q, &kv, &kv, &sh(&[2, 4, 5, 7], DType::Bool)],
        &["bias", "[2, 4, 5, 7] bool"],
    );
    bad(&op, &[&q, &kv, &kv], &["q, k, v, bias"]);
}

#[test]
fn attention_rejects_layout_dtype_and_attribute_mistakes() {
    let q = f32s(&[2, 5, 4, 8]);
    let kv = f32s(&[2, 7, 4, 8]);
    bad(
        &attn(4, 8, None, MaskKind::Causal),
        &[&q, &kv, &kv, &f32s(&[2, 7])],
        &["Causal", "3 inputs", "[2, 7] f32"],
    );
    bad(
        &attn(4, 8, None, MaskKind::None),
        &[&q, &f32s(&[2, 7, 32]), &kv],
        &["[2, 7, 32] f32", "all be [B, S, H, D]"],
    );
    bad(
        &attn(4, 8, None, MaskKind::None),
        &[&f32s(&[5, 32]), &f32s(&[5, 32]), &f32s(&[5, 32])],
        &["[5, 32] f32"],
    );
    bad(
        &attn(4, 8, None, MaskKind::None),
        &[&q, &sh(&[2, 7, 4, 8], DType::F16), &kv],
        &["[2, 7, 4, 8] f16", "dtype"],
    );
    bad(
        &attn(4, 8, None, MaskKind::None),
        &[&q, &kv, &f32s(&[2, 6, 4, 8])],
        &["[2, 6, 4, 8] f32", "sequence length"],
    );
    bad(
        &attn(0, 8, None, MaskKind::None),
        &[&q, &kv, &kv],
        &["num_heads (0)"],
    );
    let i = sh(&[2, 5, 4, 8], DType::I32);
    bad(
        &attn(4, 8, None, MaskKind::None),
        &[&i, &i, &i],
        &["[2, 5, 4, 8] i32"],
    );
    let capped = Op::Attention {
        num_heads: 4,
        head_dim: 8,
        v_head_dim: None,
        mask_kind: MaskKind::None,
        score_scale: Some(0.25),
        attn_logit_softcap: Some(-1.0),
    };
    bad(&capped, &[&q, &kv, &kv], &["attn_logit_softcap", "-1"]);
}

fn rope(head_dim: usize, n_rot: usize) -> Op {
    Op::Rope {
        head_dim,
        n_rot,
        style: RopeStyle::NeoX,
    }
}

#[test]
fn rope_accepts_rank_one_and_rank_two_tables() {
    let x = f32s(&[1, 6, 16]);
    // rank-1 table: S·n_rot/2 entries
    let t1 = f32s(&[24]);
    assert_eq!(ok(&rope(8, 8), &[&x, &t1, &t1]), x);
    // rank-2 tables: one row per position, at least n_rot/2 wide (wider is a stride)
    for t in [f32s(&[6, 4]), f32s(&[10, 8])] {
        assert_eq!(ok(&rope(8, 8), &[&x, &t, &t]), x);
    }
    // partial rotary: n_rot < head_dim needs only n_rot/2 columns
    let t = f32s(&[6, 2]);
    assert_eq!(ok(&rope(8, 4), &[&x, &t, &t]), x);
    // rank-4 layout and GPT-J pairing
    let x4 = dy(&[d(0), s(6), s(2), s(8)], DType::BF16);
    let gptj = Op::Rope {
        head_dim: 8,
        n_rot: 8,
        style: RopeStyle::GptJ,
    };
    let tb = sh(&[6, 4], DType::BF16);
    assert_eq!(ok(&gptj, &[&x4, &tb, &tb]), x4);
    // a dynamic sequence axis cannot be checked against the table, so it passes
    let xd = dy(&[s(1), d(1), s(16)], DType::F32);
    assert_eq!(ok(&rope(8, 8), &[&xd, &t1, &t1]), xd);
}

#[test]
fn rope_rejects_short_or_narrow_tables_and_bad_rotation_sizes() {
    let x = f32s(&[1, 6, 16]);
    let t23 = f32s(&[23]);
    bad(&rope(8, 8), &[&x, &t23, &t23], &["[23] f32", "6·4 = 24"]);
    let narrow = f32s(&[6, 3]);
    bad(
        &rope(8, 8),
        &[&x, &narrow, &narrow],
        &["[6, 3] f32", "n_rot/2 = 4"],
    );
    let t = f32s(&[6, 4]);
    bad(&rope(8, 7), &[&x, &t, &t], &["n_rot (7)", "even"]);
    bad(&rope(8, 10), &[&x, &t, &t], &["n_rot (10)", "head_dim (8)"]);
    bad(&rope(8, 0), &[&x, &t, &t], &["n_rot (0)"]);
    bad(
        &rope(6, 6),
        &[&x, &t, &t],
        &["hidden size 16", "head_dim 6"],
    );
    bad(
        &rope(8, 8),
        &[&f32s(&[1, 6, 2, 4]), &t, &t],
        &["[1, 6, 2, 4] f32", "head_dim 8"],
    );
    bad(&rope(8, 8), &[&f32s(&[6, 16]), &t, &t], &["[6, 16] f32"]);
    bad(
        &rope(8, 8),
        &[&x, &t, &f32s(&[6, 5])],
        &["[6, 4] f32", "[6, 5] f32", "same shape"],
    );
    let t3 = f32s(&[1, 6, 4]);
    bad(&rope(8, 8), &[&x, &t3, &t3], &["rank 1", "[1, 6, 4] f32"]);
    let ti = sh(&[6, 4], DType::I32);
    bad(&rope(8, 8), &[&x, &ti, &ti], &["cos table", "[6, 4] i32"]);
    bad(
        &rope(8, 8),
        &[&sh(&[1, 6, 16], DType::I32), &t, &t],
        &["[1, 6, 16] i32"],
    );
}

#[test]
fn attention_output_for_every_mask_kind_matches_reference_layout() {
    // The output type never depends on the mask: one table for all kinds.
    let q: Shape = f32s(&[1, 3, 2, 4]);
    let kv = f32s(&[1, 3, 2, 4]);
    let extra = [
        (MaskKind::Custom, Some(f32s(&[1, 3]))),
        (MaskKind::Bias, Some(f32s(&[1, 2, 3, 3]))),
        (MaskKind::SlidingWindow(0), None),
    ];
    for (mk, m) in extra {
        let mut inputs = vec![&q, &kv, &kv];
        if let Some(m) = &m {
            inputs.push(m);
        }
        assert_eq!(ok(&attn(2, 4, None, mk), &inputs), q, "{mk:?}");
    }
}

fn attn_vjp(num_heads: usize, head_dim: usize, mask_kind: MaskKind) -> Op {
    Op::AttentionVjp {
        num_heads,
        head_dim,
        v_head_dim: None,
        mask_kind,
        score_scale: None,
        attn_logit_softcap: None,
    }
}

#[test]
fn attention_vjp_packs_dq_dk_dv_into_one_vector() {
    // |q| + |k| + |v| = 2·5·32 + 2·7·16 + 2·7·16.
    let (q, kv) = (f32s(&[2, 5, 32]), f32s(&[2, 7, 16]));
    let y = ok(&attn_vjp(4, 8, MaskKind::Causal), &[&q, &kv, &kv, &q]);
    assert_eq!(y, f32s(&[768]));
    // The mask operand comes before g.
    let (q4, k4) = (f32s(&[1, 3, 2, 4]), f32s(&[1, 6, 2, 4]));
    let m = sh(&[1, 6], DType::Bool);
    let y = ok(&attn_vjp(2, 4, MaskKind::Custom), &[&q4, &k4, &k4, &m, &q4]);
    assert_eq!(y, f32s(&[24 + 48 + 48]));
}

#[test]
fn attention_vjp_rejects_wrong_arity_cotangent_and_dynamic_sequence() {
    let (q, kv) = (f32s(&[2, 5, 32]), f32s(&[2, 7, 32]));
    bad(
        &attn_vjp(4, 8, MaskKind::None),
        &[&q, &kv, &kv],
        &["takes 4 inputs", "q, k, v, g"],
    );
    bad(
        &attn_vjp(4, 8, MaskKind::Bias),
        &[&q, &kv, &kv, &q],
        &["takes 5 inputs", "q, k, v, bias, g"],
    );
    bad(
        &attn_vjp(4, 8, MaskKind::None),
        &[&q, &kv, &kv, &f32s(&[2, 5, 16])],
        &[
            "cotangent g is [2, 5, 16] f32",
            "attention output is [2, 5, 32] f32",
        ],
    );
    bad(
        &attn_vjp(4, 8, MaskKind::None),
        &[&q, &kv, &kv, &sh(&[2, 5, 32], DType::F64)],
        &["cotangent g"],
    );
    // The forward checks still apply (here: heads that do not divide).
    bad(
        &attn_vjp(4, 8, MaskKind::None),
        &[&q, &f32s(&[2, 7, 24]), &f32s(&[2, 7, 24]), &q],
        &["3 heads", "divide"],
    );
    for qd in [
        dy(&[s(2), d(1), s(32)], DType::F32),
        dy(&[d(0), s(3), s(32)], DType::F32),
    ] {
        bad(
            &attn_vjp(4, 8, MaskKind::None),
            &[&qd, &qd, &qd, &qd],
            &["q is", "static"],
        );
    }
}

#[test]
fn attention_attrs_are_read_from_both_attention_ops_and_no_other() {
    let fwd = Op::Attention {
        num_heads: 4,
        head_dim: 16,
        v_head_dim: Some(8),
        mask_kind: MaskKind::Bias,
        score_scale: Some(0.5),
        attn_logit_softcap: Some(30.0),
    };
    let a = fwd
        .attention_attrs()
        .expect("Attention has attention attributes");
    assert_eq!((a.num_heads, a.head_dim, a.v_head_dim), (4, 16, Some(8)));
    assert_eq!(
        (a.score_scale, a.attn_logit_softcap),
        (Some(0.5), Some(30.0))
    );
    assert!(a.has_extra_operand(), "a bias is a fourth operand");
    let vjp = a.vjp_op();
    assert!(matches!(vjp, Op::AttentionVjp { .. }));
    assert_eq!(
        vjp.attention_attrs(),
        Some(a),
        "the backward keeps every attribute"
    );
    let causal = rlx_ir::AttentionAttrs {
        mask_kind: MaskKind::Causal,
        ..a
    };
    assert!(!causal.has_extra_operand());
    for other in [
        Op::MatMul,
        Op::Activation(rlx_ir::Activation::Relu),
        Op::Softmax { axis: -1 },
    ] {
        assert_eq!(other.attention_attrs(), None, "{}", other.name());
    }
}
