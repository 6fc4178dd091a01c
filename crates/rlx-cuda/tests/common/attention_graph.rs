//! The f16/bf16 attention graphs of the tensor-core tests (shared by the emulator, GPU
//! and NVRTC tests; the NVRTC test includes this file alone).

use rlx_ir::{BinaryOp, DType, Graph, MaskKind, Op, ReduceOp, Shape, TensorData};
use rlx_testkit::{Rng, op, random_data};

/// Attention over `[2, s, h, d]` (`four`) or `[2, s, h·d]` operands of `dt` with `hk` kv
/// heads and `mask` (no softcap), as the whole graph; and random q, k, v in ±2.
pub fn attention_graph(
    dt: DType,
    mask: MaskKind,
    four: bool,
    (h, hk): (usize, usize),
    s: usize,
    d: usize,
) -> (Graph, Vec<TensorData>) {
    let dims = |heads: usize| {
        if four {
            vec![2, s, heads, d]
        } else {
            vec![2, s, heads * d]
        }
    };
    let mut g = Graph::new(format!("attn_{dt}_{mask:?}_{s}_{d}").replace(['(', ')'], "_"));
    let mut rng = Rng::new((s * 131 + d) as u64);
    let mut ins = Vec::new();
    let mut args = Vec::new();
    for (name, heads) in [("q", h), ("k", hk), ("v", hk)] {
        let shape = Shape::new(&dims(heads), dt);
        args.push(random_data(&mut rng, &shape));
        ins.push(g.input(name, shape));
    }
    let a = op(
        &mut g,
        Op::Attention {
            num_heads: h,
            head_dim: d,
            v_head_dim: None,
            mask_kind: mask,
            score_scale: None,
            attn_logit_softcap: None,
        },
        ins,
    );
    g.set_outputs(vec![a]);
    (g, args)
}

/// `sum(attention(q, k, v) · w)` differentiated for q, k and v: the gradient graph and
/// its arguments (q, k, v, w; w the output's cotangent).
pub fn backward_graph(
    dt: DType,
    mask: MaskKind,
    heads: (usize, usize),
    s: usize,
    d: usize,
) -> (Graph, Vec<TensorData>) {
    let (mut g, mut args) = attention_graph(dt, mask, true, heads, s, d);
    let a = g.outputs[0];
    let shape = Shape::new(&[2, s, heads.0, d], dt);
    let mut rng = Rng::new((s * 7 + d) as u64);
    args.push(random_data(&mut rng, &shape));
    let w = g.input("w", shape);
    let aw = op(&mut g, Op::Binary(BinaryOp::Mul), vec![a, w]);
    let all = Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![0, 1, 2, 3],
        keep_dim: false,
    };
    let loss = op(&mut g, all, vec![aw]);
    g.set_outputs(vec![loss]);
    let wrt: Vec<_> = ["q", "k", "v"]
        .iter()
        .map(|n| g.input_id(n).unwrap())
        .collect();
    let mut gg = rlx_compile::autodiff::grad_graph(&g, &wrt).unwrap();
    gg.name = format!("{}_grad", g.name);
    assert!(
        gg.nodes()
            .iter()
            .any(|n| matches!(n.op, Op::AttentionVjp { .. })),
        "{}: reverse mode gives the fused attention backward",
        gg.name
    );
    (gg, args)
}
