//! Attention lowered to the loop IR (an item per batch, query and head; an online
//! softmax in f32), run by the reference interpreter against the `rlx-ir` oracle (an
//! f64 two-pass softmax): within f32 rounding for f32, one f16 ulp plus that for f16.

use super::tests::run_loops;
use crate::program::KernelKind;
use crate::{CompileOptions, compile};
use rlx_ir::{DType, Dim, DimBinding, Graph, MaskKind, Op, Shape, TensorData, interp};

/// Values in about [−1.5, 1.5], in `dt`.
fn values(dt: DType, dims: &[usize], seed: u64) -> TensorData {
    let n: usize = dims.iter().product();
    let mut s = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) % 30_001) as f64 / 10_000.0 - 1.5
        })
        .collect();
    let v32: Vec<f64> = v.iter().map(|&x| x as f32 as f64).collect();
    TensorData::from_f64_as(dt, dims, &v32)
}

struct Case {
    mask: MaskKind,
    four: bool,
    heads: (usize, usize),
    dv: Option<usize>,
    softcap: Option<f32>,
    scale: Option<f32>,
}

fn options() -> CompileOptions {
    CompileOptions {
        keep_whole: vec!["attention".into()],
        ..Default::default()
    }
}

/// Run case `c` over `dt` with 2 batches, `s` positions (dynamic when `dynamic`) and
/// query/key heads of `d`.
fn run_case(c: &Case, dt: DType, dynamic: bool, s: usize, d: usize) {
    let b = 2usize;
    let (h, hk) = c.heads;
    let dv = c.dv.unwrap_or(d);
    let sd = if dynamic {
        Dim::Dynamic(0)
    } else {
        Dim::Static(s)
    };
    let layout = |heads: usize, width: usize| -> (Vec<Dim>, Vec<usize>) {
        if c.four {
            (
                vec![Dim::Static(b), sd, Dim::Static(heads), Dim::Static(width)],
                vec![b, s, heads, width],
            )
        } else {
            (
                vec![Dim::Static(b), sd, Dim::Static(heads * width)],
                vec![b, s, heads * width],
            )
        }
    };
    let mut g = Graph::new("attn");
    let (qd, qb) = layout(h, d);
    let (kd, kb) = layout(hk, d);
    let (vd, vb) = layout(hk, dv);
    let q = g.input("q", Shape::from_dims(&qd, dt));
    let k = g.input("k", Shape::from_dims(&kd, dt));
    let v = g.input("v", Shape::from_dims(&vd, dt));
    let mut ins = vec![q, k, v];
    let mut inputs = vec![
        ("q", values(dt, &qb, 1)),
        ("k", values(dt, &kb, 2)),
        ("v", values(dt, &vb, 3)),
    ];
    match c.mask {
        MaskKind::Custom => {
            ins.push(g.input("m", Shape::from_dims(&[Dim::Static(b), sd], dt)));
            // Key 0 of batch 1 and every other key masked; batch 0's first row allowed.
            let m: Vec<f64> = (0..b * s)
                .map(|i| if i % 2 == 1 || i == s { 0.0 } else { 1.0 })
                .collect();
            inputs.push(("m", TensorData::from_f64_as(dt, &[b, s], &m)));
        }
        MaskKind::Bias => {
            let bd = [Dim::Static(h), sd, sd];
            ins.push(g.input("bias", Shape::from_dims(&bd, dt)));
            inputs.push(("bias", values(dt, &[h, s, s], 4)));
        }
        _ => {}
    }
    let a = g
        .add_op(
            Op::Attention {
                num_heads: h,
                head_dim: d,
                v_head_dim: c.dv,
                mask_kind: c.mask,
                score_scale: c.scale,
                attn_logit_softcap: c.softcap,
            },
            ins,
        )
        .unwrap();
    g.set_outputs(vec![a]);
    let p = compile(&g, &options()).unwrap();
    assert!(
        p.kernels.iter().any(|k| matches!(
            &k.kind,
            KernelKind::Attention { .. }
                | KernelKind::Opaque {
                    op: Op::Attention { .. },
                    ..
                }
        )),
        "an attention kernel: {:?}",
        p.kernels.iter().map(|k| k.label()).collect::<Vec<_>>()
    );
    let binding: DimBinding = if dynamic {
        [(0, s)].into_iter().collect()
    } else {
        DimBinding::new()
    };
    let got = run_loops(&p, &inputs, &binding).unwrap();
    let want = interp::run(&g, &inputs).unwrap();
    let what = format!(
        "{dt:?} {:?} four={} heads={:?} dv={dv} softcap={:?} scale={:?} dynamic={dynamic} s={s} d={d}",
        c.mask, c.four, c.heads, c.softcap, c.scale
    );
    assert_eq!(got[0].dims, want[0].dims, "{what}");
    let ulp = if dt == DType::F16 {
        2f64.powi(-10)
    } else {
        2f64.powi(-23)
    };
    for (i, (x, w)) in got[0]
        .to_f64_vec()
        .iter()
        .zip(want[0].to_f64_vec())
        .enumerate()
    {
        let tol = 2.0 * ulp * w.abs().max(0.25) + 1e-5;
        assert!(
            (x - w).abs() <= tol,
            "{what}: element {i}: loop IR {x}, oracle {w}"
        );
    }
}

#[test]
fn attention_of_every_mask_layout_and_head_grouping_matches_the_oracle() {
    let cases = [
        (MaskKind::None, true, (4, 2), None, None, None),
        (MaskKind::Causal, true, (4, 4), Some(5), None, None),
        (
            MaskKind::SlidingWindow(2),
            false,
            (4, 2),
            None,
            None,
            Some(0.3),
        ),
        (MaskKind::Custom, false, (2, 1), Some(12), None, None),
        (MaskKind::Bias, true, (4, 1), None, Some(2.5), None),
        (MaskKind::Causal, false, (3, 3), None, Some(1.0), Some(0.7)),
    ];
    for (mask, four, heads, dv, softcap, scale) in cases {
        let c = Case {
            mask,
            four,
            heads,
            dv,
            softcap,
            scale,
        };
        for dt in [DType::F32, DType::F16] {
            run_case(&c, dt, false, 7, 8);
        }
        run_case(&c, DType::F32, true, 7, 8);
    }
}

#[test]
fn attention_over_several_query_blocks_and_key_tiles_matches_the_oracle() {
    // 70 positions: three blocks of 32 queries, and key tiles of 32 (heads of 8) or of
    // 16 (heads of 120, value heads of 136) with a partial last tile; the sliding
    // window starts the later blocks' tile loops past tile 0.
    let cases = [
        (MaskKind::Causal, true, (2, 1), None, None, None),
        (
            MaskKind::SlidingWindow(20),
            false,
            (2, 2),
            None,
            Some(3.0),
            None,
        ),
        (MaskKind::Custom, true, (1, 1), Some(5), None, None),
        (MaskKind::Bias, false, (2, 1), None, None, Some(0.2)),
    ];
    for (mask, four, heads, dv, softcap, scale) in cases {
        let c = Case {
            mask,
            four,
            heads,
            dv,
            softcap,
            scale,
        };
        run_case(&c, DType::F32, false, 70, 8);
        run_case(&c, DType::F32, true, 40, 8);
    }
    let c = Case {
        mask: MaskKind::Causal,
        four: true,
        heads: (1, 1),
        dv: Some(136),
        softcap: None,
        scale: None,
    };
    assert_eq!(super::attention::key_tile(120, 136), 16);
    run_case(&c, DType::F32, false, 45, 120);
}

#[test]
fn attention_the_lowering_cannot_hold_is_a_named_error() {
    let mut g = Graph::new("wide");
    let q = g.input("q", Shape::new(&[1, 2, 1, 300], DType::F32));
    let a = g
        .add_op(
            Op::Attention {
                num_heads: 1,
                head_dim: 300,
                v_head_dim: None,
                mask_kind: MaskKind::None,
                score_scale: None,
                attn_logit_softcap: None,
            },
            vec![q, q, q],
        )
        .unwrap();
    g.set_outputs(vec![a]);
    let p = compile(&g, &options()).unwrap();
    let k = p
        .kernels
        .iter()
        .position(|k| k.label().contains("attention"))
        .expect("an attention kernel");
    let e = crate::loops::lower_kernel(&p, k).expect_err("heads of 300");
    assert!(e.to_string().contains("300"), "{e}");
}
