//! The blocked attention kernel against the oracle on chosen shapes: sequence lengths
//! around the block sizes, head dims that are not multiples of the vector width,
//! grouped-query heads, `dv ≠ d`, both layouts, every mask kind, softcap, epilogues,
//! rows that see no key, and NaN/∞ inputs; bf16/f16 attention and its gradients run
//! through f32 (`lowp`, `lowp_vjp`).
//! Plus run-to-run determinism and a timing probe for the W7 shape (`--ignored`, release
//! build).

mod common;
#[path = "attention_fast/lowp.rs"]
mod lowp;
#[path = "attention_fast/lowp_vjp.rs"]
mod lowp_vjp;
#[path = "attention_fast/vjp.rs"]
mod vjp;

use common::{Rng, check_against_oracle, random_data};
use rlx_cpu::CpuBackend;
use rlx_ir::{Activation, DType, Graph, MaskKind, Op, Shape, TensorData};
use rlx_runtime::{Backend, Device};

/// One attention problem.
#[derive(Clone, Copy, Debug)]
struct Case {
    b: usize,
    sq: usize,
    sk: usize,
    h: usize,
    hk: usize,
    d: usize,
    dv: usize,
    mask: MaskKind,
    /// `[B, S, H, D]` (else `[B, S, H·D]`).
    four: bool,
    softcap: Option<f32>,
    scale: Option<f32>,
    /// A tanh after the attention (a non-trivial epilogue).
    tanh: bool,
}

impl Case {
    fn new(b: usize, sq: usize, sk: usize, h: usize, hk: usize, d: usize, mask: MaskKind) -> Case {
        Case {
            b,
            sq,
            sk,
            h,
            hk,
            d,
            dv: d,
            mask,
            four: true,
            softcap: None,
            scale: None,
            tanh: false,
        }
    }
}

/// The graph of `c` and random inputs for it (q, k, v, and the mask/bias operand).
fn build(c: Case, rng: &mut Rng) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("attention_fast");
    let mut args = Vec::new();
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
    let q = input(&mut g, "q", &shape(c.sq, c.h, c.d));
    let k = input(&mut g, "k", &shape(c.sk, c.hk, c.d));
    let v = input(&mut g, "v", &shape(c.sk, c.hk, c.dv));
    let mut ins = vec![q, k, v];
    match c.mask {
        MaskKind::Custom => ins.push(input(&mut g, "mask", &[c.b, c.sk])),
        MaskKind::Bias => ins.push(input(&mut g, "bias", &[c.h, c.sq, c.sk])),
        _ => {}
    }
    let a = g
        .add_op(
            Op::Attention {
                num_heads: c.h,
                head_dim: c.d,
                v_head_dim: (c.dv != c.d).then_some(c.dv),
                mask_kind: c.mask,
                score_scale: c.scale,
                attn_logit_softcap: c.softcap,
            },
            ins,
        )
        .unwrap();
    let out = if c.tanh {
        g.add_op(Op::Activation(Activation::Tanh), vec![a]).unwrap()
    } else {
        a
    };
    g.set_outputs(vec![out]);
    (g, args)
}

fn run_compiled(g: &Graph, args: &[TensorData]) -> Vec<f64> {
    let exe = CpuBackend.compile(Device::Cpu, g).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap()[0].to_f64_vec()
}

fn check(c: Case, seed: u64) {
    let mut rng = Rng::new(seed);
    let (g, args) = build(c, &mut rng);
    check_against_oracle(&g, &args);
}

#[test]
fn causal_and_unmasked_match_the_oracle_around_block_sizes() {
    let mut n = 0;
    for (i, &s) in [1, 2, 15, 17, 63, 64, 65, 127, 129, 200].iter().enumerate() {
        for &d in &[1, 7, 16, 33, 64] {
            for mask in [MaskKind::None, MaskKind::Causal] {
                check(Case::new(1, s, s, 2, 2, d, mask), (i * 100 + d) as u64);
                n += 1;
            }
        }
    }
    assert_eq!(n, 100);
}

#[test]
fn unequal_query_and_key_lengths_match_the_oracle() {
    for &(sq, sk) in &[(1, 70), (70, 1), (100, 37), (37, 100), (130, 64), (64, 190)] {
        for mask in [
            MaskKind::None,
            MaskKind::Causal,
            MaskKind::SlidingWindow(20),
        ] {
            check(
                Case::new(2, sq, sk, 2, 1, 24, mask),
                (sq * 1000 + sk) as u64,
            );
        }
    }
}

#[test]
fn sliding_windows_match_the_oracle() {
    for &w in &[0, 1, 15, 63, 64, 65, 150, 1000] {
        for &s in &[5, 64, 150] {
            check(
                Case::new(1, s, s, 2, 2, 16, MaskKind::SlidingWindow(w)),
                (w * 7 + s) as u64,
            );
        }
    }
}

#[test]
fn grouped_query_heads_and_value_widths_match_the_oracle() {
    for &(h, hk) in &[(4, 1), (4, 2), (6, 3), (8, 8)] {
        for &(d, dv) in &[(16, 5), (8, 40), (64, 64), (20, 17)] {
            let mut c = Case::new(2, 90, 90, h, hk, d, MaskKind::Causal);
            c.dv = dv;
            check(c, (h * 31 + hk * 7 + d + dv) as u64);
        }
    }
}

#[test]
fn flat_layout_scale_softcap_and_epilogue_match_the_oracle() {
    for (i, mask) in [
        MaskKind::None,
        MaskKind::Causal,
        MaskKind::SlidingWindow(9),
        MaskKind::Custom,
        MaskKind::Bias,
    ]
    .into_iter()
    .enumerate()
    {
        for variant in 0..4 {
            let mut c = Case::new(2, 75, 75, 4, 2, 12, mask);
            c.four = variant % 2 == 0;
            c.softcap = (variant >= 2).then_some(5.0);
            c.scale = (variant == 1).then_some(0.7);
            c.tanh = variant == 3;
            c.dv = if variant == 3 { 9 } else { 12 };
            check(c, (i * 10 + variant) as u64);
        }
    }
}

#[test]
fn custom_and_bias_masks_match_the_oracle_on_long_rows() {
    for mask in [MaskKind::Custom, MaskKind::Bias] {
        for &s in &[1, 64, 65, 140] {
            check(Case::new(2, s, s, 2, 1, 16, mask), s as u64);
        }
    }
}

/// Query `qi` of a window `w` sees keys `qi − w ..= qi`: with `sq > sk + w` the last
/// rows see no key and must be exactly zero.
#[test]
fn rows_that_see_no_key_are_zero() {
    let c = Case::new(1, 100, 10, 1, 1, 8, MaskKind::SlidingWindow(5));
    let mut rng = Rng::new(3);
    let (g, args) = build(c, &mut rng);
    check_against_oracle(&g, &args);
    let out = run_compiled(&g, &args);
    let d = c.dv;
    for qi in 0..c.sq {
        let row = &out[qi * d..(qi + 1) * d];
        if qi > 10 + 5 - 1 {
            assert!(row.iter().all(|&x| x == 0.0), "row {qi}: {row:?}");
        } else {
            assert!(row.iter().any(|&x| x != 0.0), "row {qi} should see keys");
        }
    }
    // A custom mask that hides every key of batch 0 zeroes its rows.
    let c = Case::new(2, 70, 70, 2, 2, 8, MaskKind::Custom);
    let (g, mut args) = build(c, &mut rng);
    let mut m = args[3].to_f64_vec();
    m[..70].fill(0.0);
    args[3] = TensorData::from_f64_as(DType::F32, &[2, 70], &m);
    check_against_oracle(&g, &args);
    let out = run_compiled(&g, &args);
    assert!(out[..70 * 2 * 8].iter().all(|&x| x == 0.0));
    assert!(out[70 * 2 * 8..].iter().any(|&x| x != 0.0));
}

/// A NaN in one query poisons only that query's row; an ∞ in a future value under a
/// causal mask (a key no earlier query may see) leaves the earlier rows finite.
#[test]
fn nan_and_infinity_propagate_like_the_oracle() {
    let c = Case::new(1, 80, 80, 2, 2, 16, MaskKind::Causal);
    let mut rng = Rng::new(11);
    let (g, mut args) = build(c, &mut rng);
    let (h, d) = (c.h, c.d);
    let mut q = args[0].to_f64_vec();
    q[(5 * h) * d + 3] = f64::NAN; // query 5, head 0
    args[0] = TensorData::from_f64_as(DType::F32, &[1, 80, h, d], &q);
    let mut v = args[2].to_f64_vec();
    v[(70 * h + 1) * d + 2] = f64::INFINITY; // key 70, head 1
    args[2] = TensorData::from_f64_as(DType::F32, &[1, 80, h, d], &v);
    check_against_oracle(&g, &args);
    let out = run_compiled(&g, &args);
    for qi in 0..80 {
        for hi in 0..h {
            let row = &out[(qi * h + hi) * d..(qi * h + hi + 1) * d];
            if qi == 5 && hi == 0 {
                assert!(row.iter().all(|x| x.is_nan()), "NaN query row: {row:?}");
            } else if hi == 1 && qi >= 70 {
                assert!(row.iter().any(|x| !x.is_finite()), "row {qi} sees the ∞");
            } else {
                assert!(
                    row.iter().all(|x| x.is_finite()),
                    "row {qi} head {hi}: {row:?}"
                );
            }
        }
    }
}

/// Items of one to four queries (decode steps, the last rows of a sequence) take their
/// own path: every mask kind, softcap and layout against the oracle.
#[test]
fn few_query_items_match_the_oracle_for_every_mask() {
    let masks = [
        MaskKind::None,
        MaskKind::Causal,
        MaskKind::SlidingWindow(40),
        MaskKind::Custom,
        MaskKind::Bias,
    ];
    for (i, mask) in masks.into_iter().enumerate() {
        for &(sq, sk) in &[(1, 150), (3, 3), (4, 200), (66, 66), (130, 130)] {
            let mut c = Case::new(2, sq, sk, 4, 2, 20, mask);
            c.dv = 12;
            c.four = sq % 2 == 0;
            c.softcap = (sk == 200).then_some(5.0);
            check(c, (i * 1000 + sq + sk) as u64);
        }
    }
}

/// The same NaN/∞ rules on the few-query path: rows 64 and 65 of a 66-row causal
/// problem form a two-query item.
#[test]
fn few_query_items_propagate_nan_and_infinity_like_the_oracle() {
    let c = Case::new(1, 66, 66, 2, 2, 16, MaskKind::Causal);
    let mut rng = Rng::new(12);
    let (g, mut args) = build(c, &mut rng);
    let (h, d) = (c.h, c.d);
    let mut q = args[0].to_f64_vec();
    q[(65 * h) * d] = f64::NAN; // query 65, head 0
    args[0] = TensorData::from_f64_as(DType::F32, &[1, 66, h, d], &q);
    let mut v = args[2].to_f64_vec();
    v[(65 * h + 1) * d + 4] = f64::INFINITY; // key 65, head 1: only query 65 sees it
    args[2] = TensorData::from_f64_as(DType::F32, &[1, 66, h, d], &v);
    check_against_oracle(&g, &args);
    let out = run_compiled(&g, &args);
    let row = |qi: usize, hi: usize| &out[(qi * h + hi) * d..(qi * h + hi + 1) * d];
    assert!(row(65, 0).iter().all(|x| x.is_nan()));
    assert!(row(64, 1).iter().all(|x| x.is_finite()));
    assert!(row(65, 1).iter().any(|x| !x.is_finite()));
    assert!(row(64, 0).iter().all(|x| x.is_finite()));
}

/// Scores whose softmax is a near one-hot (large logits) still match: the online
/// maximum must rescale earlier blocks correctly.
#[test]
fn large_logits_that_grow_across_key_blocks_match_the_oracle() {
    let c = Case::new(1, 130, 300, 1, 1, 8, MaskKind::None);
    let mut rng = Rng::new(5);
    let (g, mut args) = build(c, &mut rng);
    // Keys grow along the sequence so each block raises the running maximum.
    let mut k = args[1].to_f64_vec();
    for (i, x) in k.iter_mut().enumerate() {
        *x *= 1.0 + (i / 8) as f64 / 20.0;
    }
    args[1] = TensorData::from_f64_as(DType::F32, &[1, 300, 1, 8], &k);
    check_against_oracle(&g, &args);
}

#[test]
fn results_are_identical_run_to_run() {
    let c = Case::new(2, 200, 200, 4, 2, 64, MaskKind::Causal);
    let mut rng = Rng::new(9);
    let (g, args) = build(c, &mut rng);
    let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let first = exe.run(&views).unwrap()[0].to_f64_vec();
    for _ in 0..5 {
        let again = exe.run(&views).unwrap()[0].to_f64_vec();
        assert!(
            first
                .iter()
                .zip(&again)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
}

/// The W7 shape at a size the oracle can check in a debug build (one batch, two heads).
#[test]
fn w7_head_shape_matches_the_oracle() {
    check(Case::new(1, 512, 512, 2, 2, 64, MaskKind::Causal), 77);
}

/// Timing of W7 (B=4, H=8, S=512, D=64, causal): `cargo test --release -p rlx-cpu --test
/// attention_fast -- --ignored --nocapture`.
#[test]
#[ignore]
fn time_w7() {
    time(
        "W7 attention",
        Case::new(4, 512, 512, 8, 8, 64, MaskKind::Causal),
    );
}

/// Timing of one decode step (one query against 4096 keys, 32 heads of 128).
#[test]
#[ignore]
fn time_decode() {
    time(
        "decode attention",
        Case::new(1, 1, 4096, 32, 32, 128, MaskKind::None),
    );
}

fn time(what: &str, c: Case) {
    let mut rng = Rng::new(1);
    let (g, args) = build(c, &mut rng);
    let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let mut times = Vec::new();
    for _ in 0..60 {
        let t = std::time::Instant::now();
        let out = exe.run(&views).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(out);
    }
    times.sort_by(f64::total_cmp);
    eprintln!(
        "{what}: min {:.3} ms, median {:.3} ms",
        times[0],
        times[times.len() / 2]
    );
}
