//! The integer spelling of the quantizers (f32 / f16 / bf16 data) against the oracle, bit
//! for bit, on dense sweeps of the hard cases: every midpoint between adjacent codes of
//! every format and its f32 neighbours, under scales whose quotients are inexact (odd
//! significands, f32 subnormal scales, negative, zero, NaN, ∞), every MX and NVFP4 scale
//! code, f32 subnormal data, quotients that are f32 subnormals or overflow f32, absmax
//! at and next to every power of two and next to every E4M3 midpoint times `max_finite`.
//! Each kernel also renders to WGSL that naga validates (see `tests::run`).

use super::super::tests::run_loops;
use super::tests::{formats, op, quant_graph, run, same_bytes};
use crate::{CompileOptions, compile};
use rlx_ir::{DType, DimBinding, Graph, Op, ScaleLayout, ScaledFormat, Shape, TensorData, interp};

/// The sweep's formats: the named and test-custom ones, plus one whose `max_finite` is
/// tiny (quotients overflow f32) and one with no mantissa and a large bias.
fn sweep_formats() -> Vec<ScaledFormat> {
    let mut v = formats();
    v.push(ScaledFormat::custom_with_bias(3, 4, 100));
    v.push(ScaledFormat::custom_with_bias(2, 0, 20));
    v
}

fn up(x: f32) -> f32 {
    x.next_up()
}

fn down(x: f32) -> f32 {
    x.next_down()
}

/// Every representable value of `f` and every midpoint between neighbours (ties), both
/// signs, rounded to f32 after multiplying by `s` (exactly where the product is an f32),
/// with their f32 neighbours; plus the specials.
fn targets(f: ScaledFormat, s: f64, every: usize) -> Vec<f32> {
    let vals = f.representable_values();
    let mut out = Vec::new();
    for (i, w) in vals.windows(2).enumerate() {
        if i % every != 0 {
            continue;
        }
        let (a, b) = (w[0] as f64, w[1] as f64);
        for v in [a, (a + b) / 2.0] {
            let x = (v * s) as f32;
            for y in [x, up(x), down(x)] {
                out.extend([y, -y]);
            }
        }
    }
    let top = (*vals.last().unwrap() as f64 * s) as f32;
    out.extend([
        top,
        up(top),
        top * 2.0,
        f32::INFINITY,
        -f32::INFINITY,
        f32::NAN,
        -0.0,
        0.0,
        f32::from_bits(1),
        -f32::from_bits(0x7f_ffff),
        f32::MAX,
        f32::MIN_POSITIVE,
    ]);
    out
}

fn quantize_graph(f: ScaledFormat, l: ScaleLayout, rows: usize, k: usize) -> Graph {
    let sdims = match l {
        ScaleLayout::PerTensor => Shape::new(&[1], DType::F32),
        _ => Shape::new(&[rows, k / l.block().unwrap() as usize], DType::U8),
    };
    let mut g = Graph::new("qz32");
    let xs = g.input("x", Shape::new(&[rows, k], DType::F32));
    let ss = g.input("s", sdims);
    let q = op(
        &mut g,
        Op::ScaledQuantize {
            format: f,
            scale_layout: l,
        },
        vec![xs, ss],
    );
    g.set_outputs(vec![q]);
    g
}

#[test]
fn quantize_of_f32_data_rounds_every_tie_and_near_tie_like_the_oracle_under_per_tensor_scales() {
    // Odd significands make the quotient inexact; 5·2^−140 is an f32 subnormal.
    let scales = [
        1.0,
        3.0,
        -7.0,
        0.375,
        1.234_567_9,
        5.0 * 2f64.powi(-140),
        3.0e37,
        -0.0,
        0.0,
        f64::NAN,
        f64::INFINITY,
    ];
    for f in sweep_formats() {
        for s in scales {
            let mut x = targets(f, if s.is_finite() && s != 0.0 { s } else { 1.0 }, 1);
            x.resize(x.len().div_ceil(8) * 8, 0.5);
            let rows = x.len() / 8;
            let g = quantize_graph(f, ScaleLayout::PerTensor, rows, 8);
            let inputs = [
                ("x", TensorData::from_f32(&[rows, 8], &x)),
                ("s", TensorData::from_f32(&[1], &[s as f32])),
            ];
            let (got, want) = run(&g, &inputs);
            same_bytes(&got[0], &want[0], &format!("{f} scale {s:e}"));
        }
    }
}

#[test]
fn quantize_of_f32_data_matches_the_oracle_under_every_mx_and_nvfp4_scale_code() {
    for f in sweep_formats() {
        for l in [
            ScaleLayout::BlockMxE8M0 { block: 4 },
            ScaleLayout::Nvfp4 { group: 4 },
        ] {
            // Row r has scale code r % 256; its 4 values target that scale (every
            // fourth midpoint per code, a different phase per code, so every midpoint
            // meets many codes).
            let mut x = Vec::new();
            let mut codes = Vec::new();
            for c in 0..256u32 {
                let s = match l {
                    ScaleLayout::BlockMxE8M0 { .. } if c < 255 => 2f64.powi(c as i32 - 127),
                    ScaleLayout::Nvfp4 { .. } => {
                        let v = ScaledFormat::F8E4M3.decode(c as u8) as f64;
                        if v.is_finite() && v != 0.0 { v } else { 1.0 }
                    }
                    _ => 1.0,
                };
                let t = targets(f, s, 4);
                let phase = c as usize * 7 % t.len().max(1);
                let mut v: Vec<f32> = t.iter().cycle().skip(phase).take(24).copied().collect();
                v.resize(24, 0.0);
                for chunk in v.chunks(4) {
                    x.extend_from_slice(chunk);
                    codes.push(c as i64);
                }
            }
            let rows = codes.len();
            let g = quantize_graph(f, l, rows, 4);
            let inputs = [
                ("x", TensorData::from_f32(&[rows, 4], &x)),
                ("s", TensorData::from_i64_as(DType::U8, &[rows, 1], &codes)),
            ];
            let (got, want) = run(&g, &inputs);
            same_bytes(&got[0], &want[0], &format!("{f} {l}"));
        }
    }
}

#[test]
fn quantize_of_f16_and_bf16_data_matches_the_oracle() {
    for f in formats() {
        for dt in [DType::F16, DType::BF16] {
            let l = ScaleLayout::Nvfp4 { group: 4 };
            let mut x: Vec<f64> = targets(f, 1.0, 1).iter().map(|&v| v as f64).collect();
            x.resize(x.len().div_ceil(4) * 4, 0.0);
            let rows = x.len() / 4;
            let codes: Vec<i64> = (0..rows as i64).map(|r| (r * 37 + 5) % 256).collect();
            let mut g = Graph::new("qz16");
            let xs = g.input("x", Shape::new(&[rows, 4], dt));
            let ss = g.input("s", Shape::new(&[rows, 1], DType::U8));
            let q = op(
                &mut g,
                Op::ScaledQuantize {
                    format: f,
                    scale_layout: l,
                },
                vec![xs, ss],
            );
            g.set_outputs(vec![q]);
            let inputs = [
                ("x", TensorData::from_f64_as(dt, &[rows, 4], &x)),
                ("s", TensorData::from_i64_as(DType::U8, &[rows, 1], &codes)),
            ];
            let (got, want) = run(&g, &inputs);
            same_bytes(&got[0], &want[0], &format!("{f} {dt:?}"));
        }
    }
}

/// Absmax values next to the hard points of the scale computations: every power of two
/// of the f32 range and its neighbours (MX codes), `max_finite` times every E4M3 value
/// and midpoint and its neighbours (NVFP4), subnormals, f32's extremes.
fn absmax_targets(f: ScaledFormat) -> Vec<f32> {
    let maxf = f.max_finite() as f64;
    let mut out = Vec::new();
    for e in -149..=127 {
        let p = 2f64.powi(e) as f32;
        out.extend([p, up(p), down(p), p * 1.5]);
    }
    let e4 = ScaledFormat::F8E4M3.representable_values();
    for w in e4.windows(2) {
        let (a, b) = (w[0] as f64, w[1] as f64);
        for v in [a, (a + b) / 2.0] {
            let x = (v * maxf) as f32;
            out.extend([x, up(x), down(x)]);
        }
    }
    out.extend([f32::MAX, f32::from_bits(1), f32::from_bits(0x7f_ffff), 0.0]);
    out.retain(|v| v.is_finite() && *v >= 0.0);
    out
}

#[test]
fn block_scales_of_f32_data_match_the_oracle_at_every_hard_absmax() {
    for f in sweep_formats() {
        for l in [
            ScaleLayout::BlockMxE8M0 { block: 4 },
            ScaleLayout::Nvfp4 { group: 4 },
        ] {
            // A block per target: the target, a smaller value, a NaN or ∞ (ignored by
            // absmax) and the target negated.
            let t = absmax_targets(f);
            let mut x = Vec::new();
            for (i, &a) in t.iter().enumerate() {
                let special = [f32::NAN, f32::INFINITY, -f32::INFINITY, 0.0][i % 4];
                x.extend([a / 3.0, special, -a, a * 0.5]);
            }
            let rows = t.len();
            let g = quant_graph(DType::F32, &[rows, 4], f, l);
            let (got, want) = run(&g, &[("x", TensorData::from_f32(&[rows, 4], &x))]);
            same_bytes(&got[0], &want[0], &format!("scales {f} {l}"));
            same_bytes(&got[1], &want[1], &format!("codes {f} {l}"));
        }
    }
}

#[test]
fn per_tensor_scales_of_f32_data_match_the_oracle_near_f32_ties_subnormals_and_overflow() {
    for f in sweep_formats() {
        let maxf = f.max_finite() as f64;
        let mut cases: Vec<f32> = Vec::new();
        // a / max_finite next to f32 midpoints: a = (y + ½ulp)·max rounded, ± 1 ulp.
        let mut y = 1.000_000_1f32;
        for e in (-150..=128).step_by(7) {
            y = up(y * 1.37) % 2.0 + 1.0;
            let mid = (y as f64 + (up(y) as f64 - y as f64) / 2.0) * 2f64.powi(e);
            let a = (mid * maxf) as f32;
            if a.is_finite() {
                cases.extend([a, up(a), down(a)]);
            }
        }
        cases.extend(absmax_targets(f).into_iter().step_by(5));
        let g = quant_graph(DType::F32, &[1, 4], f, ScaleLayout::PerTensor);
        let p = compile(&g, &CompileOptions::default()).unwrap();
        for (i, &a) in cases.iter().enumerate() {
            let special = [f32::NAN, f32::INFINITY, 0.0][i % 3];
            let x = TensorData::from_f32(&[1, 4], &[-a, a * 0.25, special, 0.0]);
            let inputs = [("x", x)];
            let got = run_loops(&p, &inputs, &DimBinding::default()).unwrap();
            let want = interp::run(&g, &inputs).unwrap();
            same_bytes(&got[0], &want[0], &format!("scale {f} absmax {a:e}"));
            same_bytes(&got[1], &want[1], &format!("codes {f} absmax {a:e}"));
        }
    }
}
