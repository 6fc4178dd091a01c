//! The f16/bf16 attention graphs of the tensor-core tests (shared by the emulator, GPU
//! and NVRTC tests; the NVRTC test includes this file alone).

use rlx_ir::{DType, Graph, MaskKind, Op, Shape, TensorData};
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
