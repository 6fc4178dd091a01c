//! Attention: every mask kind, both layouts, GQA, softcap, custom scale, v_head_dim.

use crate::{check_wrt, op, rand};
use rlx_ir::{MaskKind, Op, TensorData};

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
