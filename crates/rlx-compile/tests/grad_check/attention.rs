//! Attention: every mask kind, both layouts, GQA, softcap, custom scale, v_head_dim.

use crate::{check_wrt, op, rand, run, sum_all, uniform};
use rlx_compile::autodiff::grad_graph;
use rlx_compile::jvp::{jvp_graph, tangent_name};
use rlx_ir::{BinaryOp, DType, Dim, Graph, MaskKind, NodeId, Op, Shape, TensorData};

struct Cfg {
    mask: MaskKind,
    heads: usize,
    kv_heads: usize,
    d: usize,
    dv: usize,
    sq: usize,
    sk: usize,
    rank4: bool,
    scale: Option<f32>,
    softcap: Option<f32>,
}

fn base(mask: MaskKind) -> Cfg {
    Cfg {
        mask,
        heads: 2,
        kv_heads: 2,
        d: 3,
        dv: 3,
        sq: 3,
        sk: 4,
        rank4: true,
        scale: None,
        softcap: None,
    }
}

fn dims(c: &Cfg, s: usize, h: usize, d: usize) -> Vec<usize> {
    if c.rank4 {
        vec![2, s, h, d]
    } else {
        vec![2, s, h * d]
    }
}

fn run_case(name: &str, c: Cfg, extra: Option<TensorData>) {
    let mut inputs = vec![
        ("q", rand(&dims(&c, c.sq, c.heads, c.d), 1)),
        ("k", rand(&dims(&c, c.sk, c.kv_heads, c.d), 2)),
        ("v", rand(&dims(&c, c.sk, c.kv_heads, c.dv), 3)),
    ];
    let mut wrt = vec!["q", "k", "v"];
    if let Some(e) = extra {
        inputs.push(("m", e));
        if c.mask == MaskKind::Bias {
            wrt.push("m");
        }
    }
    let opx = Op::Attention {
        num_heads: c.heads,
        head_dim: c.d,
        v_head_dim: (c.dv != c.d).then_some(c.dv),
        mask_kind: c.mask,
        score_scale: c.scale,
        attn_logit_softcap: c.softcap,
    };
    check_wrt(name, inputs, &wrt, |g, x| op(g, opx.clone(), x.to_vec()));
}

#[test]
fn attention_without_a_mask_in_both_layouts() {
    run_case("none rank4", base(MaskKind::None), None);
    run_case(
        "none rank3",
        Cfg {
            rank4: false,
            ..base(MaskKind::None)
        },
        None,
    );
}

#[test]
fn causal_attention_with_fewer_and_more_keys_than_queries() {
    run_case("causal", base(MaskKind::Causal), None);
    run_case(
        "causal sq > sk",
        Cfg {
            sq: 4,
            sk: 3,
            ..base(MaskKind::Causal)
        },
        None,
    );
}

#[test]
fn sliding_window_attention_including_rows_with_no_allowed_key() {
    run_case("window 1", base(MaskKind::SlidingWindow(1)), None);
    // queries 4.. see no key at all: their output rows are zero and pass nothing.
    run_case(
        "window 0, sq 6 > sk",
        Cfg {
            sq: 6,
            ..base(MaskKind::SlidingWindow(0))
        },
        None,
    );
}

#[test]
fn custom_mask_attention_with_a_fully_masked_batch_row() {
    // batch 0 masks key 1; batch 1 masks every key (its output is all zeros).
    let m = TensorData::from_f64(&[2, 4], &[1.0, 0.0, 1.0, 0.9, 0.2, 0.4, 0.0, 0.1]);
    run_case("custom", base(MaskKind::Custom), Some(m.clone()));
    let b = TensorData::from_bool(
        &[2, 4],
        &[true, false, true, true, false, true, true, false],
    );
    run_case(
        "custom bool rank3",
        Cfg {
            rank4: false,
            ..base(MaskKind::Custom)
        },
        Some(b),
    );
}

#[test]
fn bias_attention_differentiates_the_bias_at_every_broadcast_rank() {
    for bd in [&[2, 2, 3, 4][..], &[1, 2, 1, 4][..], &[3, 4][..], &[4][..]] {
        run_case(
            &format!("bias {bd:?}"),
            base(MaskKind::Bias),
            Some(rand(bd, 9)),
        );
    }
}

#[test]
fn grouped_query_attention_sums_the_shared_kv_heads() {
    for rank4 in [true, false] {
        run_case(
            &format!("gqa rank4={rank4}"),
            Cfg {
                heads: 4,
                kv_heads: 2,
                rank4,
                ..base(MaskKind::Causal)
            },
            None,
        );
    }
    run_case(
        "mqa",
        Cfg {
            heads: 3,
            kv_heads: 1,
            ..base(MaskKind::None)
        },
        None,
    );
}

#[test]
fn softcap_custom_scale_and_a_wider_value_head() {
    run_case(
        "softcap",
        Cfg {
            softcap: Some(0.8),
            ..base(MaskKind::Causal)
        },
        None,
    );
    run_case(
        "scale + dv",
        Cfg {
            scale: Some(0.7),
            dv: 5,
            ..base(MaskKind::None)
        },
        None,
    );
    run_case(
        "everything",
        Cfg {
            heads: 4,
            kv_heads: 2,
            dv: 2,
            softcap: Some(1.5),
            scale: Some(1.3),
            rank4: false,
            ..base(MaskKind::Bias)
        },
        Some(rand(&[2, 4, 3, 4], 4)),
    );
}

/// `⟨r, attention(q, k, v, m)⟩` in the `[B, S, H·D]` layout with batch `b` and sequence
/// `s` (4 query heads over 2 k/v heads, d = 2, dv = 3); returns the graph and the
/// differentiated inputs (q, k, v, and a bias).
fn hidden_layout_loss(
    mask: MaskKind,
    softcap: Option<f32>,
    b: Dim,
    s: Dim,
) -> (Graph, Vec<NodeId>) {
    let mut g = Graph::new("attention_hidden_layout");
    let t = |dims: &[Dim]| Shape::from_dims(dims, DType::F64);
    let q = g.input("q", t(&[b, s, Dim::Static(8)]));
    let k = g.input("k", t(&[b, s, Dim::Static(4)]));
    let v = g.input("v", t(&[b, s, Dim::Static(6)]));
    let r = g.input("r", t(&[b, s, Dim::Static(12)]));
    let mut ins = vec![q, k, v];
    let mut wrt = ins.clone();
    match mask {
        MaskKind::Custom => ins.push(g.input("m", t(&[b, s]))),
        MaskKind::Bias => {
            let m = g.input("m", t(&[Dim::Static(4), s, s]));
            ins.push(m);
            wrt.push(m);
        }
        _ => {}
    }
    let a = Op::Attention {
        num_heads: 4,
        head_dim: 2,
        v_head_dim: Some(3),
        mask_kind: mask,
        score_scale: None,
        attn_logit_softcap: softcap,
    };
    let y = op(&mut g, a, ins);
    let yr = op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, r]);
    let loss = sum_all(&mut g, yr);
    g.set_outputs(vec![loss]);
    (g, wrt)
}

/// (The inputs are created in the order q, k, v, r, m, so a node's index is its
/// position in the feed.)
/// Attention in the `[B, S, H·D]` layout with a dynamic batch and sequence (the heads
/// are then cut and joined by narrows, and the gradients of shared k/v heads summed
/// piecewise), grouped-query heads, every mask kind: reverse mode's gradients equal
/// those of the same graph with static dims (the fused backward, which the oracle
/// evaluates directly, or the bias path checked against finite differences above),
/// and forward mode's tangent along random directions equals ⟨gradient, direction⟩.
#[test]
fn dynamic_hidden_layout_gradients_and_tangents_agree_for_every_mask_kind() {
    let (b, s) = (2, 3);
    let kinds = [
        MaskKind::None,
        MaskKind::Causal,
        MaskKind::SlidingWindow(1),
        MaskKind::Custom,
        MaskKind::Bias,
    ];
    for (i, mask) in kinds.into_iter().enumerate() {
        let softcap = (i % 2 == 1).then_some(1.5);
        let (dg, wrt) = hidden_layout_loss(mask, softcap, Dim::Dynamic(0), Dim::Dynamic(1));
        let (sg, _) = hidden_layout_loss(mask, softcap, Dim::Static(b), Dim::Static(s));
        let mut feed = vec![
            ("q", rand(&[b, s, 8], 11)),
            ("k", rand(&[b, s, 4], 12)),
            ("v", rand(&[b, s, 6], 13)),
            ("r", rand(&[b, s, 12], 14)),
        ];
        match mask {
            // Batch row 1 attends no key: its output and gradients are zero.
            MaskKind::Custom => feed.push((
                "m",
                TensorData::from_f64(&[b, s], &[1.0, 0.0, 1.0, 0.0, 0.2, 0.4]),
            )),
            MaskKind::Bias => feed.push(("m", rand(&[4, s, s], 15))),
            _ => {}
        }
        let grads = run(&grad_graph(&dg, &wrt).unwrap(), &feed);
        let want = run(&grad_graph(&sg, &wrt).unwrap(), &feed);
        for (w, (got, want)) in grads.iter().zip(&want).enumerate() {
            for (j, (x, y)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
                assert!(
                    (x - y).abs() < 1e-12,
                    "{mask:?}: gradient {w}[{j}] {x} with dynamic dims vs {y} with static dims"
                );
            }
        }
        let jg = jvp_graph(&dg, &wrt).unwrap();
        let mut contraction = 0.0;
        let mut tangents = Vec::new();
        for (w, &id) in wrt.iter().enumerate() {
            let (name, x) = &feed[id.index()];
            let dir = uniform(x.numel(), 20 + w as u64, -1.0, 1.0);
            contraction += grads[w]
                .to_f64_vec()
                .iter()
                .zip(&dir)
                .map(|(a, b)| a * b)
                .sum::<f64>();
            let dims = x.shape().static_dims().unwrap();
            tangents.push((tangent_name(name), TensorData::from_f64(&dims, &dir)));
        }
        let mut jfeed = feed.clone();
        jfeed.extend(tangents.iter().map(|(n, t)| (n.as_str(), t.clone())));
        let tangent = run(&jg, &jfeed)[1].to_f64_vec()[0];
        assert!(
            (tangent - contraction).abs() < 1e-10 * (1.0 + contraction.abs()),
            "{mask:?}: jvp·v = {tangent} but ⟨grad, v⟩ = {contraction}"
        );
    }
}

/// `⟨r, attention(q, k, v)⟩` over `[2, S, 2, 3]` q/k/v (static dims, so reverse mode
/// emits the fused `AttentionVjp`, which the oracle evaluates by its own definition).
fn rank4_loss(mask: MaskKind, scale: Option<f32>, sq: usize, sk: usize) -> Graph {
    let mut g = Graph::new("attention_rank4");
    let t = |s: usize| Shape::from_dims(&[2, s, 2, 3].map(Dim::Static), DType::F64);
    let q = g.input("q", t(sq));
    let k = g.input("k", t(sk));
    let v = g.input("v", t(sk));
    let r = g.input("r", t(sq));
    let a = Op::Attention {
        num_heads: 2,
        head_dim: 3,
        v_head_dim: None,
        mask_kind: mask,
        score_scale: scale,
        attn_logit_softcap: None,
    };
    let y = op(&mut g, a, vec![q, k, v]);
    let yr = op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, r]);
    let loss = sum_all(&mut g, yr);
    g.set_outputs(vec![loss]);
    g
}

/// Forward and reverse mode differentiate attention from one definition: for causal
/// and unmasked attention, with the default and a custom score scale, the tangent
/// along a random direction `u` of (q, k, v) equals ⟨gradient, u⟩ to 1e-12 (relative)
/// in f64, and both equal the central finite difference of the loss along `u`.
#[test]
fn attention_jvp_equals_the_gradient_contraction_and_finite_differences() {
    for mask in [MaskKind::None, MaskKind::Causal] {
        for scale in [None, Some(0.7)] {
            for (sq, sk) in [(3, 3), (2, 4)] {
                let g = rank4_loss(mask, scale, sq, sk);
                let ids: Vec<NodeId> = (0..3).map(|i| NodeId(i as u32)).collect();
                let feed = vec![
                    ("q", rand(&[2, sq, 2, 3], 31)),
                    ("k", rand(&[2, sk, 2, 3], 32)),
                    ("v", rand(&[2, sk, 2, 3], 33)),
                    ("r", rand(&[2, sq, 2, 3], 34)),
                ];
                let dirs: Vec<Vec<f64>> = (0..3)
                    .map(|i| uniform(feed[i].1.numel(), 40 + i as u64, -1.0, 1.0))
                    .collect();
                let grads = run(&grad_graph(&g, &ids).unwrap(), &feed);
                let contraction: f64 = grads
                    .iter()
                    .zip(&dirs)
                    .flat_map(|(gr, d)| gr.to_f64_vec().into_iter().zip(d.clone()))
                    .map(|(a, b)| a * b)
                    .sum();
                let mut jfeed = feed.clone();
                let names: Vec<String> = (0..3).map(|i| tangent_name(feed[i].0)).collect();
                for (i, name) in names.iter().enumerate() {
                    jfeed.push((name, TensorData::from_f64(&feed[i].1.dims, &dirs[i])));
                }
                let tangent = run(&jvp_graph(&g, &ids).unwrap(), &jfeed)[1].to_f64_vec()[0];
                let case = format!("{mask:?} scale {scale:?} sq {sq} sk {sk}");
                assert!(
                    (tangent - contraction).abs() <= 1e-12 * (1.0 + contraction.abs()),
                    "{case}: jvp·u = {tangent} but ⟨grad, u⟩ = {contraction}"
                );
                let loss_at = |h: f64| {
                    let mut f = feed.clone();
                    for (i, d) in dirs.iter().enumerate() {
                        let x: Vec<f64> = f[i].1.to_f64_vec();
                        let moved: Vec<f64> = x.iter().zip(d).map(|(x, d)| x + h * d).collect();
                        f[i].1 = TensorData::from_f64(&feed[i].1.dims, &moved);
                    }
                    run(&g, &f)[0].to_f64_vec()[0]
                };
                let h = 1e-5;
                let fd = (loss_at(h) - loss_at(-h)) / (2.0 * h);
                assert!(
                    (tangent - fd).abs() <= 1e-8 * (1.0 + fd.abs()),
                    "{case}: jvp·u = {tangent} but the finite difference is {fd}"
                );
            }
        }
    }
}
