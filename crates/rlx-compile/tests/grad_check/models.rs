//! Whole models: a 2-layer MLP with layer norm and softmax cross-entropy, and a
//! one-block transformer with causal attention and rope.

use crate::{check, check_wrt, op, rand, rand_in, sum_all};
use rlx_ir::{Activation, BinaryOp, DType, MaskKind, NodeId, Op, ReduceOp, RopeStyle, TensorData};

fn bin(g: &mut rlx_ir::Graph, b: BinaryOp, l: NodeId, r: NodeId) -> NodeId {
    op(g, Op::Binary(b), vec![l, r])
}

#[test]
fn two_layer_mlp_with_layer_norm_and_cross_entropy() {
    let (n, din, hid, classes) = (3, 4, 5, 3);
    let targets = TensorData::from_f64(
        &[n, classes],
        &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0],
    );
    check(
        "mlp",
        vec![
            ("x", rand(&[n, din], 1)),
            ("w1", rand(&[din, hid], 2)),
            ("b1", rand(&[hid], 3)),
            ("gamma", rand_in(&[hid], 4, 0.5, 1.5)),
            ("beta", rand(&[hid], 5)),
            ("w2", rand(&[hid, classes], 6)),
            ("b2", rand(&[classes], 7)),
            ("t", targets),
        ],
        |g, x| {
            let h = op(
                g,
                Op::FusedMatMulBiasAct { activation: None },
                vec![x[0], x[1], x[2]],
            );
            let ln = op(
                g,
                Op::LayerNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![h, x[3], x[4]],
            );
            let a = op(g, Op::Activation(Activation::Gelu), vec![ln]);
            let logits = op(g, Op::MatMul, vec![a, x[5]]);
            let logits = bin(g, BinaryOp::Add, logits, x[6]);
            let ce = op(g, Op::SoftmaxCrossEntropy, vec![logits, x[7]]);
            op(
                g,
                Op::Reduce {
                    op: ReduceOp::Mean,
                    axes: vec![0],
                    keep_dim: false,
                },
                vec![ce],
            )
        },
    );
}

#[test]
fn one_block_transformer_with_causal_attention_and_rope() {
    // x [B, S, D] → pre-norm → q, k, v projections → rope(q, k) → causal attention
    // → output projection + residual → rms norm → MLP (silu) + residual → mean.
    let (b, s, heads, hd) = (2, 3, 2, 2);
    let d = heads * hd;
    let half = hd / 2;
    let angles: Vec<f64> = (0..s * half).map(|i| 0.3 * (i + 1) as f64).collect();
    let cos = TensorData::from_f64(
        &[s, half],
        &angles.iter().map(|a| a.cos()).collect::<Vec<_>>(),
    );
    let sin = TensorData::from_f64(
        &[s, half],
        &angles.iter().map(|a| a.sin()).collect::<Vec<_>>(),
    );
    check_wrt(
        "transformer block",
        vec![
            ("x", rand(&[b, s, d], 1)),
            ("g1", rand_in(&[d], 2, 0.5, 1.5)),
            ("b1", rand(&[d], 3)),
            ("wq", rand(&[d, d], 4)),
            ("wk", rand(&[d, d], 5)),
            ("wv", rand(&[d, d], 6)),
            ("wo", rand(&[d, d], 7)),
            ("g2", rand_in(&[d], 8, 0.5, 1.5)),
            ("w_up", rand(&[d, 6], 9)),
            ("w_down", rand(&[6, d], 10)),
            ("cos", cos),
            ("sin", sin),
        ],
        &[
            "x", "g1", "b1", "wq", "wk", "wv", "wo", "g2", "w_up", "w_down", "cos", "sin",
        ],
        |g, x| {
            let rope = |g: &mut rlx_ir::Graph, t| {
                op(
                    g,
                    Op::Rope {
                        head_dim: hd,
                        n_rot: hd,
                        style: RopeStyle::NeoX,
                    },
                    vec![t, x[10], x[11]],
                )
            };
            let h = op(
                g,
                Op::LayerNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![x[0], x[1], x[2]],
            );
            let q = op(g, Op::MatMul, vec![h, x[3]]);
            let k = op(g, Op::MatMul, vec![h, x[4]]);
            let v = op(g, Op::MatMul, vec![h, x[5]]);
            let (q, k) = (rope(g, q), rope(g, k));
            let att = op(
                g,
                Op::Attention {
                    num_heads: heads,
                    head_dim: hd,
                    v_head_dim: None,
                    mask_kind: MaskKind::Causal,
                    score_scale: None,
                    attn_logit_softcap: None,
                },
                vec![q, k, v],
            );
            let o = op(g, Op::MatMul, vec![att, x[6]]);
            let r1 = bin(g, BinaryOp::Add, x[0], o);
            let zero = crate::constant(g, TensorData::from_f64_as(DType::F64, &[], &[0.0]));
            let n2 = op(
                g,
                Op::RmsNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![r1, x[7], zero],
            );
            let up = op(g, Op::MatMul, vec![n2, x[8]]);
            let act = op(g, Op::Activation(Activation::Silu), vec![up]);
            let down = op(g, Op::MatMul, vec![act, x[9]]);
            let r2 = bin(g, BinaryOp::Add, r1, down);
            let sq = bin(g, BinaryOp::Mul, r2, r2);
            sum_all(g, sq)
        },
    );
}
