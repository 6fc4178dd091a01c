//! f16/bf16 attention lowered through tile products ([`LowerOptions::tile_warps`]) and run by
//! the interpreter against the `rlx-ir` oracle (an f64 softmax), causal and unmasked,
//! head widths 32/64/128 and sequence lengths that are not multiples of 16.
//!
//! Tolerance: two units in the last place of the dtype (the final rounding and the f32
//! sums), plus three times the probabilities' rounding (relative 2⁻¹¹ for f16, 2⁻⁸ for
//! bf16) times the largest |v| (1.5): the weights are normalised by the sum of the
//! rounded weights, so the error of the weighted mean stays within that.

use crate::loops::eval::{self, HostBuf};
use crate::loops::{LowerOptions, Stmt, lower_kernel_with};
use crate::program::{BufKind, Program};
use crate::{CompileOptions, compile};
use rlx_ir::{DType, Dim, DimBinding, Graph, MaskKind, Op, Shape, TensorData, interp};

/// Values in about [−1.5, 1.5], in `dt`.
fn values(dt: DType, dims: &[usize], seed: u64) -> TensorData {
    let n: usize = dims.iter().product();
    let mut s = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    let v: Vec<f64> = (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            if i % 11 == 3 {
                return -0.0;
            }
            // An f32 value first: every dtype then holds a rounding of the same f32.
            (((s >> 11) % 30_001) as f32 / 10_000.0 - 1.5) as f64
        })
        .collect();
    TensorData::from_f64_as(dt, dims, &v)
}

/// Every kernel of `p` lowered with tile products and run; the outputs, and how many
/// tile products the kernels hold.
fn run_tiled(
    warps: u32,
    p: &Program,
    inputs: &[(&str, TensorData)],
    binding: &DimBinding,
) -> (Vec<TensorData>, usize) {
    let bound = |s: &Shape| -> Vec<usize> {
        s.dims()
            .iter()
            .map(|d| d.resolve(binding).expect("bound"))
            .collect()
    };
    let mut host: Vec<HostBuf> = p
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufKind::Arg(i) => HostBuf::Float(
                inputs
                    .iter()
                    .find(|(n, _)| *n == p.args[*i].0)
                    .unwrap()
                    .1
                    .to_f64_vec(),
            ),
            _ => HostBuf::zeros(b.shape.dtype(), bound(&b.shape).iter().product()),
        })
        .collect();
    let mut products = 0;
    for k in 0..p.kernels.len() {
        let opts = LowerOptions {
            tile_warps: warps,
            ..LowerOptions::default()
        };
        let lk = lower_kernel_with(p, k, opts).unwrap_or_else(|e| panic!("{e}"));
        products += count(&lk.body);
        let mut slots: Vec<HostBuf> = lk
            .bufs
            .iter()
            .map(|b| std::mem::replace(&mut host[b.buf], HostBuf::Int(Vec::new())))
            .collect();
        eval::run(&lk, &mut slots, binding).unwrap_or_else(|e| panic!("{e}"));
        for (b, v) in lk.bufs.iter().zip(slots) {
            host[b.buf] = v;
        }
    }
    let outs = p
        .outputs
        .iter()
        .map(|&o| {
            let b = &p.buffers[o];
            match &host[o] {
                HostBuf::Float(v) => TensorData::from_f64_as(b.shape.dtype(), &bound(&b.shape), v),
                HostBuf::Int(_) => panic!("float output expected"),
            }
        })
        .collect();
    (outs, products)
}

fn count(body: &[Stmt]) -> usize {
    body.iter()
        .map(|s| match s {
            Stmt::TileMma(_) => 1,
            Stmt::Loop { body, .. } | Stmt::If { body, .. } => count(body),
            _ => 0,
        })
        .sum()
}

/// The attention graph: batch 2, `s` positions (dynamic when `dynamic`), heads
/// `(h, hk)` of width `d`, `[B, S, H, D]` when `four`.
pub(super) fn graph(
    dt: DType,
    causal: bool,
    four: bool,
    heads: (usize, usize),
    s: usize,
    d: usize,
    dynamic: bool,
) -> (Graph, Vec<(&'static str, TensorData)>) {
    let b = 2usize;
    let (h, hk) = heads;
    let sd = if dynamic {
        Dim::Dynamic(0)
    } else {
        Dim::Static(s)
    };
    let layout = |heads: usize| -> (Vec<Dim>, Vec<usize>) {
        if four {
            (
                vec![Dim::Static(b), sd, Dim::Static(heads), Dim::Static(d)],
                vec![b, s, heads, d],
            )
        } else {
            (
                vec![Dim::Static(b), sd, Dim::Static(heads * d)],
                vec![b, s, heads * d],
            )
        }
    };
    let mut g = Graph::new("attn_tc");
    let (qd, qb) = layout(h);
    let (kd, kb) = layout(hk);
    let q = g.input("q", Shape::from_dims(&qd, dt));
    let k = g.input("k", Shape::from_dims(&kd, dt));
    let v = g.input("v", Shape::from_dims(&kd, dt));
    let a = g
        .add_op(
            Op::Attention {
                num_heads: h,
                head_dim: d,
                v_head_dim: None,
                mask_kind: if causal {
                    MaskKind::Causal
                } else {
                    MaskKind::None
                },
                score_scale: None,
                attn_logit_softcap: None,
            },
            vec![q, k, v],
        )
        .unwrap();
    g.set_outputs(vec![a]);
    let inputs = vec![
        ("q", values(dt, &qb, 1 + s as u64)),
        ("k", values(dt, &kb, 2 + d as u64)),
        ("v", values(dt, &kb, 3)),
    ];
    (g, inputs)
}

/// The largest allowed |loop IR − oracle| for an oracle value `w` of `dt`.
pub(super) fn tolerance(dt: DType, w: f64) -> f64 {
    let (ulp, p) = if dt == DType::F16 {
        (2f64.powi(-10), 2f64.powi(-11))
    } else {
        (2f64.powi(-7), 2f64.powi(-8))
    };
    2.0 * ulp * w.abs().max(0.25) + 3.0 * p * 1.5
}

fn check(
    warps: u32,
    dt: DType,
    causal: bool,
    four: bool,
    heads: (usize, usize),
    s: usize,
    d: usize,
) {
    let dynamic = s % 2 == 1;
    let (g, inputs) = graph(dt, causal, four, heads, s, d, dynamic);
    let opts = CompileOptions {
        keep_whole: vec!["attention".into()],
        ..Default::default()
    };
    let p = compile(&g, &opts).unwrap();
    let binding: DimBinding = if dynamic {
        [(0, s)].into_iter().collect()
    } else {
        DimBinding::new()
    };
    let (got, products) = run_tiled(warps, &p, &inputs, &binding);
    let what =
        format!("warps<={warps} {dt:?} causal={causal} four={four} heads={heads:?} s={s} d={d}");
    let w = super::attention_tc::warps(d, d, warps) as usize;
    assert_eq!(
        products,
        1 + d / 16 / w,
        "{what}: Q·Kᵀ, then P·V per column block"
    );
    let want = interp::run(&g, &inputs).unwrap();
    assert_eq!(got[0].dims, want[0].dims, "{what}");
    let mut worst = 0.0f64;
    for (i, (x, w)) in got[0]
        .to_f64_vec()
        .iter()
        .zip(want[0].to_f64_vec())
        .enumerate()
    {
        let tol = tolerance(dt, w);
        assert!(
            (x - w).abs() <= tol,
            "{what}: element {i}: loop IR {x}, oracle {w}"
        );
        worst = worst.max((x - w).abs() / tol);
    }
    assert!(
        worst > 0.0 || s < 2,
        "{what}: exact everywhere is suspicious"
    );
}

#[test]
fn tiled_f16_and_bf16_attention_matches_the_oracle_causal_and_unmasked() {
    for dt in [DType::F16, DType::BF16] {
        for (causal, four, heads, s, d) in [
            (true, true, (2, 1), 21, 32),
            (false, false, (2, 2), 7, 64),
            (true, false, (4, 2), 37, 128),
            (false, true, (1, 1), 16, 32),
            (true, true, (1, 1), 33, 64),
        ] {
            for warps in [1, 4] {
                check(warps, dt, causal, four, heads, s, d);
            }
        }
    }
}

#[test]
fn attention_outside_the_tile_lowering_keeps_the_scalar_lowering() {
    // f32, or a head width that is not a multiple of 16: no tile products.
    for (dt, d) in [(DType::F32, 32), (DType::F16, 24)] {
        let (g, _) = graph(dt, true, true, (1, 1), 9, d, false);
        let opts = CompileOptions {
            keep_whole: vec!["attention".into()],
            ..Default::default()
        };
        let p = compile(&g, &opts).unwrap();
        let k = p
            .kernels
            .iter()
            .position(|k| k.label().contains("attention"))
            .expect("an attention kernel");
        let lk = lower_kernel_with(
            &p,
            k,
            LowerOptions {
                tile_warps: 4,
                ..LowerOptions::default()
            },
        )
        .unwrap();
        assert_eq!(count(&lk.body), 0, "{dt:?} d={d}");
    }
}
