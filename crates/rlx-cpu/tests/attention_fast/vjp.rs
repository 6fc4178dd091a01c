//! The fused attention backward (`AttentionVjp`) against the oracle: every mask kind,
//! grouped-query heads, Sq ≠ Sk, `dv ≠ d`, both layouts, softcap, batch 1 and odd sizes
//! around the query block; the gradient graph of attention compiles to one
//! `attention_vjp` kernel and matches the oracle; a timing probe (`--ignored`).

use super::common::{Rng, check_against_oracle, random_data};
use super::{Case, run_compiled};
use rlx_compile::autodiff::grad_graph;
use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Graph, MaskKind, NodeId, Op, ReduceOp, Shape, TensorData};
use rlx_runtime::{Backend, Device};

fn attrs(
    c: &Case,
) -> (
    usize,
    usize,
    Option<usize>,
    MaskKind,
    Option<f32>,
    Option<f32>,
) {
    (
        c.h,
        c.d,
        (c.dv != c.d).then_some(c.dv),
        c.mask,
        c.scale,
        c.softcap,
    )
}

/// Inputs q, k, v (+ mask/bias) of `c` in `g`, with random data pushed to `args`.
fn operands(c: &Case, g: &mut Graph, rng: &mut Rng, args: &mut Vec<TensorData>) -> Vec<NodeId> {
    let shape = |s: usize, hh: usize, dd: usize| {
        if c.four {
            vec![c.b, s, hh, dd]
        } else {
            vec![c.b, s, hh * dd]
        }
    };
    let mut input = |g: &mut Graph, name: &str, dims: &[usize]| {
        let s = Shape::new(dims, DType::F32);
        args.push(random_data(rng, &s));
        g.input(name, s)
    };
    let mut ins = vec![
        input(g, "q", &shape(c.sq, c.h, c.d)),
        input(g, "k", &shape(c.sk, c.hk, c.d)),
        input(g, "v", &shape(c.sk, c.hk, c.dv)),
    ];
    match c.mask {
        MaskKind::Custom => ins.push(input(g, "mask", &[c.b, c.sk])),
        MaskKind::Bias => ins.push(input(g, "bias", &[c.h, c.sq, c.sk])),
        _ => {}
    }
    ins.push(input(g, "g", &shape(c.sq, c.h, c.dv)));
    ins
}

fn vjp_graph(c: &Case, seed: u64) -> (Graph, Vec<TensorData>) {
    let mut rng = Rng::new(seed);
    let mut g = Graph::new("attention_vjp");
    let mut args = Vec::new();
    let ins = operands(c, &mut g, &mut rng, &mut args);
    let (num_heads, head_dim, v_head_dim, mask_kind, score_scale, attn_logit_softcap) = attrs(c);
    let y = g
        .add_op(
            Op::AttentionVjp {
                num_heads,
                head_dim,
                v_head_dim,
                mask_kind,
                score_scale,
                attn_logit_softcap,
            },
            ins,
        )
        .unwrap();
    g.set_outputs(vec![y]);
    (g, args)
}

fn check_vjp(c: Case, seed: u64) {
    let (g, args) = vjp_graph(&c, seed);
    check_against_oracle(&g, &args);
}

#[test]
fn attention_vjp_matches_the_oracle_for_every_mask_kind_around_the_query_block() {
    let masks = [
        MaskKind::None,
        MaskKind::Causal,
        MaskKind::SlidingWindow(5),
        MaskKind::Custom,
        MaskKind::Bias,
    ];
    for (i, mask) in masks.into_iter().enumerate() {
        for (j, &s) in [1usize, 3, 17, 64, 65, 130].iter().enumerate() {
            check_vjp(Case::new(2, s, s, 2, 2, 8, mask), (i * 10 + j) as u64);
        }
    }
}

#[test]
fn attention_vjp_with_unequal_lengths_gqa_and_value_widths_matches_the_oracle() {
    for (i, mask) in [MaskKind::None, MaskKind::Causal, MaskKind::Custom]
        .into_iter()
        .enumerate()
    {
        // Sq < Sk and Sq > Sk, batch 1 and 3, odd head dims.
        check_vjp(Case::new(1, 5, 70, 4, 2, 7, mask), 100 + i as u64);
        check_vjp(Case::new(3, 67, 9, 6, 3, 5, mask), 110 + i as u64);
        let mut c = Case::new(2, 33, 33, 4, 1, 16, mask);
        c.dv = 11;
        c.four = false;
        check_vjp(c, 120 + i as u64);
    }
}

#[test]
fn attention_vjp_with_softcap_scale_and_bias_matches_the_oracle() {
    let mut c = Case::new(2, 20, 24, 2, 1, 6, MaskKind::Bias);
    c.softcap = Some(1.5);
    c.scale = Some(0.9);
    check_vjp(c, 130);
    c.mask = MaskKind::Causal;
    check_vjp(c, 131);
}

#[test]
fn attention_vjp_with_a_fully_masked_batch_is_zero_there() {
    let c = Case::new(2, 4, 5, 2, 2, 4, MaskKind::Custom);
    let (g, mut args) = vjp_graph(&c, 140);
    // Batch 0 sees no key (mask all < 0.5); batch 1 sees every key.
    args[3] = TensorData::from_f64_as(
        DType::F32,
        &[2, 5],
        &[0.0, 0.1, 0.2, 0.3, 0.4, 1.0, 1.0, 1.0, 1.0, 1.0],
    );
    let got = run_compiled(&g, &args);
    // dq (2·4·2·4), dk and dv (2·5·2·4 each): batch 0's half of each is zero.
    for (lo, n) in [(0, 32), (64, 40), (144, 40)] {
        assert!(got[lo..lo + n].iter().all(|&x| x == 0.0), "batch 0 at {lo}");
        assert!(
            got[lo + n..lo + 2 * n].iter().any(|&x| x != 0.0),
            "batch 1 at {lo}"
        );
    }
    check_against_oracle(&g, &args);
}

#[test]
fn attention_vjp_at_head_dim_32_and_long_windows_matches_the_oracle() {
    // W11's head width; causal and window masks whose edges cut the 16-key bands and the
    // 16-query vectors at every offset (window 0: each query sees only its own key).
    let cases = [
        (Case::new(2, 128, 128, 2, 2, 32, MaskKind::Causal), 170),
        (
            Case::new(1, 130, 150, 4, 2, 32, MaskKind::SlidingWindow(20)),
            171,
        ),
        (
            Case::new(2, 70, 40, 2, 1, 8, MaskKind::SlidingWindow(0)),
            172,
        ),
        (
            Case::new(1, 97, 97, 2, 2, 16, MaskKind::SlidingWindow(33)),
            173,
        ),
        (Case::new(1, 200, 50, 2, 2, 8, MaskKind::Causal), 174),
    ];
    for (c, seed) in cases {
        check_vjp(c, seed);
    }
}

#[test]
fn attention_vjp_gives_the_same_bits_run_to_run() {
    let mut c = Case::new(3, 130, 130, 4, 2, 32, MaskKind::Causal);
    c.softcap = Some(2.0);
    let (g, args) = vjp_graph(&c, 180);
    let first = run_compiled(&g, &args);
    assert!(first.iter().all(|x| x.is_finite()) && first.iter().any(|&x| x != 0.0));
    for _ in 0..3 {
        let again = run_compiled(&g, &args);
        let same = first
            .iter()
            .zip(&again)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "attention_vjp changed bits between runs");
    }
}

/// `loss = Σ w ⊙ attention(q, k, v)`; gradients of q, k, v.
fn grad_of_attention(c: &Case, seed: u64) -> (Graph, Vec<TensorData>) {
    let mut rng = Rng::new(seed);
    let mut g = Graph::new("attention_grad");
    let mut args = Vec::new();
    let mut ins = operands(c, &mut g, &mut rng, &mut args);
    let w = ins.pop().expect("g doubles as the loss weights");
    let (num_heads, head_dim, v_head_dim, mask_kind, score_scale, attn_logit_softcap) = attrs(c);
    let a = g
        .add_op(
            Op::Attention {
                num_heads,
                head_dim,
                v_head_dim,
                mask_kind,
                score_scale,
                attn_logit_softcap,
            },
            ins.clone(),
        )
        .unwrap();
    let aw = g
        .add_op(Op::Binary(rlx_ir::BinaryOp::Mul), vec![a, w])
        .unwrap();
    let axes = (0..g.shape(aw).rank()).collect();
    let loss = g
        .add_op(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes,
                keep_dim: false,
            },
            vec![aw],
        )
        .unwrap();
    g.set_outputs(vec![loss]);
    (grad_graph(&g, &ins[..3]).unwrap(), args)
}

#[test]
fn attention_gradients_compile_to_one_fused_backward_kernel_and_match_the_oracle() {
    let c = Case::new(2, 40, 40, 4, 2, 8, MaskKind::Causal);
    let (dg, args) = grad_of_attention(&c, 150);
    check_against_oracle(&dg, &args);
    let exe = CpuBackend.compile(Device::Cpu, &dg).unwrap();
    let report = exe.explain();
    assert_eq!(
        report.matches(": attention_vjp over").count(),
        1,
        "one fused backward kernel:\n{report}"
    );
    assert!(
        !report.contains("softmax"),
        "no recomputed softmax:\n{report}"
    );
}

/// Timing probe for W11's attention shape (`cargo test --release -- --ignored`).
#[test]
#[ignore]
fn time_w11_backward() {
    let c = Case::new(8, 128, 128, 8, 8, 32, MaskKind::Causal);
    let (g, args) = vjp_graph(&c, 160);
    let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap();
    let t = std::time::Instant::now();
    let n = 50;
    for _ in 0..n {
        exe.run(&views).unwrap();
    }
    eprintln!(
        "attention_vjp W11 block: {:.3} ms",
        t.elapsed().as_secs_f64() * 1e3 / n as f64
    );
}
