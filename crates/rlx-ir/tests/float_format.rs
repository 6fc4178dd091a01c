//! `FloatFormat`: the emulated-format rounding rules (checked against hand-computed
//! values, the `half` crate's f16/bf16 conversions, and an enumerated grid), name
//! parsing, and the `RoundToFormat` op in the oracle.

use half::{bf16, f16};
use rlx_ir::{DType, FloatFormat, Graph, Op, Shape, TensorData, interp};

fn ff(e: u32, m: u32, max: f32) -> FloatFormat {
    FloatFormat::ieee(e, m, max)
}

/// Every non-negative grid value of the IEEE-biased all-finite layout `(e, m)` up to
/// `max`, in code order (so index parity = mantissa parity).
fn grid(e: u32, m: u32, max: f32) -> Vec<f64> {
    let bias = (1i32 << (e - 1)) - 1;
    let mut out = Vec::new();
    for code in 0u32.. {
        let (ef, mf) = (code >> m, code & ((1 << m) - 1));
        let v = if ef == 0 {
            mf as f64 * 2f64.powi(1 - bias - m as i32)
        } else {
            (1.0 + mf as f64 / 2f64.powi(m as i32)) * 2f64.powi(ef as i32 - bias)
        };
        if v > max as f64 {
            break;
        }
        out.push(v);
    }
    out
}

/// Deterministic f32 samples: a strided walk over all bit patterns plus dense sweeps.
fn sweep() -> Vec<f32> {
    let mut xs: Vec<f32> = (0..(1u64 << 32))
        .step_by(2053)
        .map(|b| f32::from_bits(b as u32))
        .collect();
    xs.extend((-20000..=20000).map(|i| i as f32 * 0.00037));
    xs.extend((-4000..=4000).map(|i| i as f32 * 17.3));
    xs
}

#[test]
fn spec_examples_hold() {
    assert_eq!(ff(2, 1, 6.0).round(5.0), 4.0);
    assert_eq!(ff(2, 1, 6.0).round(2.5), 2.0);
    assert_eq!(ff(4, 3, 448.0).round(1.1), 1.125);
    assert_eq!(ff(5, 10, 65504.0).round(1.0 + 2f32.powi(-11)), 1.0);
}

#[test]
fn nvf4_grid_is_exact_and_complete() {
    let f = ff(2, 1, 6.0);
    let grid = [0.0f32, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    for g in grid {
        assert_eq!(f.round(g), g);
        assert_eq!(f.round(-g), -g);
    }
    // Every output of a dense sweep lies on that grid.
    for i in -1000..=1000 {
        let y = f.round(i as f32 * 0.0093);
        assert!(grid.contains(&y.abs()), "{y} is off the nvf4 grid");
    }
    assert_eq!(f.round(0.02), 0.0);
    assert_eq!(f.round(-0.02), 0.0);
    assert!(f.round(-0.02).is_sign_negative());
    // The smallest subnormal is 0.5; 0.25 is the tie between 0 and 0.5 → even (0).
    assert_eq!(f.round(0.25), 0.0);
    assert_eq!(f.round(0.2500001), 0.5);
}

#[test]
fn zero_mantissa_ties_go_to_the_even_multiple_of_the_step() {
    let f = ff(3, 0, 16.0);
    assert_eq!(f.round(12.0), 16.0);
    assert_eq!(f.round(6.0), 8.0);
    assert_eq!(f.round(-3.0), -4.0);
    assert_eq!(f.round(11.9), 8.0);
}

#[test]
fn zeros_and_nan_pass_through() {
    let f = ff(4, 3, 448.0);
    assert_eq!(f.round(0.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(f.round(-0.0).to_bits(), (-0.0f32).to_bits());
    assert!(f.round(f32::NAN).is_nan());
    assert!(f.round(-f32::NAN).is_nan());
}

#[test]
fn f32_subnormal_inputs_flush_to_signed_zero() {
    for f in [ff(8, 7, 3.3895314e38), ff(8, 23, f32::MAX), ff(4, 3, 448.0)] {
        for bits in [1u32, 7, 0x0040_0000, 0x007f_ffff] {
            let x = f32::from_bits(bits);
            assert!(x.is_subnormal());
            assert_eq!(f.round(x).to_bits(), 0);
            assert_eq!(f.round(-x).to_bits(), (-0.0f32).to_bits());
        }
    }
    // f32 itself: the smallest normal is kept, everything below vanishes.
    assert_eq!(
        ff(8, 23, f32::MAX).round(f32::MIN_POSITIVE),
        f32::MIN_POSITIVE
    );
}

#[test]
fn large_values_and_infinities_saturate() {
    let f = ff(5, 10, 65504.0);
    for x in [65504.0f32, 65519.0, 65520.0, 1e9, f32::MAX, f32::INFINITY] {
        assert_eq!(f.round(x), 65504.0, "{x}");
        assert_eq!(f.round(-x), -65504.0, "{}", -x);
    }
    // Below max_normal, a round-up past it saturates: the IEEE e4m3 grid's next value
    // after 448 is 480, which 465 would round to.
    assert_eq!(ff(4, 3, 448.0).round(465.0), 448.0);
    assert_eq!(ff(4, 3, 448.0).round(447.0), 448.0);
    // A bound that is not on the grid is still the saturation value.
    assert_eq!(ff(4, 3, 500.0).round(600.0), 500.0);
    // Values that round up past the bound land on it (the bound acts as a grid point).
    assert_eq!(ff(4, 3, 500.0).round(499.0), 500.0);
    assert_eq!(ff(4, 3, 500.0).round(485.0), 480.0);
}

#[test]
fn f16_rounding_matches_half_crate() {
    let f = ff(5, 10, 65504.0);
    let mut checked = 0;
    for x in sweep() {
        if x.is_nan() || x.abs() >= 65504.0 {
            continue;
        }
        let want = f16::from_f32(x).to_f32();
        let got = f.round(x);
        if want.is_infinite() {
            // half overflows ties/round-ups past the max to Inf; we saturate.
            assert_eq!(got, 65504f32.copysign(x), "{x:e}");
        } else {
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "x = {x:e} ({:#x})",
                x.to_bits()
            );
        }
        checked += 1;
    }
    // Every f16 value and every midpoint between neighbours (the ties).
    for b in 0..0x7c00u16 {
        let lo = f16::from_bits(b).to_f32();
        let hi = f16::from_bits(b + 1).to_f32();
        for x in [lo, (lo + hi) / 2.0, -lo, -(lo + hi) / 2.0] {
            if x.abs() >= 65504.0 {
                continue;
            }
            let want = f16::from_f32(x).to_f32();
            assert_eq!(f.round(x).to_bits(), want.to_bits(), "x = {x:e}");
            checked += 1;
        }
    }
    assert!(checked > 1_000_000, "only {checked} values checked");
}

#[test]
fn bf16_rounding_matches_half_crate() {
    let f = ff(8, 7, 3.3895314e38);
    assert_eq!(f.max_normal, bf16::MAX.to_f32());
    let mut checked = 0;
    for x in sweep() {
        // We flush f32 subnormals (half keeps them as bf16 subnormals) and saturate.
        if x.is_nan() || x.is_subnormal() || x.abs() >= bf16::MAX.to_f32() {
            continue;
        }
        let want = bf16::from_f32(x).to_f32();
        let got = f.round(x);
        if want.is_infinite() {
            assert_eq!(got, bf16::MAX.to_f32().copysign(x), "{x:e}");
        } else {
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "x = {x:e} ({:#x})",
                x.to_bits()
            );
        }
        checked += 1;
    }
    // Ties: every midpoint between adjacent positive normal bf16 values.
    for b in 0x0080..0x7f7fu16 {
        let lo = bf16::from_bits(b).to_f32();
        let hi = bf16::from_bits(b + 1).to_f32();
        let mid = f32::from_bits((lo.to_bits() + hi.to_bits()) / 2);
        assert_eq!(f.round(mid), bf16::from_f32(mid).to_f32(), "tie {mid:e}");
        assert_eq!(f.round(-mid), bf16::from_f32(-mid).to_f32(), "tie {}", -mid);
        checked += 2;
    }
    assert!(checked > 1_000_000, "only {checked} values checked");
}

#[test]
fn rounding_is_nearest_on_an_enumerated_grid_with_ties_to_even() {
    for (e, m, max) in [
        (2, 1, 6.0),
        (4, 3, 448.0),
        (3, 2, 28.0),
        (2, 3, 7.5),
        (1, 2, 3.5),
        (5, 2, 57344.0),
    ] {
        let f = ff(e, m, max);
        let g = grid(e, m, max);
        assert_eq!(*g.last().unwrap(), max as f64, "({e},{m}) grid top");
        for (i, w) in g.windows(2).enumerate() {
            let (lo, hi) = (w[0], w[1]);
            // Both neighbours are fixed points.
            assert_eq!(f.round(lo as f32) as f64, lo);
            // The exact midpoint goes to the even code (code = grid index).
            let mid = (lo + hi) / 2.0;
            let even = if i % 2 == 0 { lo } else { hi };
            assert_eq!(f.round(mid as f32) as f64, even, "({e},{m}) tie {mid}");
            assert_eq!(f.round(-mid as f32) as f64, -even, "({e},{m}) tie -{mid}");
            // Just off the tie it goes to the nearer neighbour.
            let below = f32::from_bits((mid as f32).to_bits() - 1);
            let above = f32::from_bits((mid as f32).to_bits() + 1);
            assert_eq!(f.round(below) as f64, lo, "({e},{m}) below {mid}");
            assert_eq!(f.round(above) as f64, hi, "({e},{m}) above {mid}");
        }
    }
}

#[test]
fn rounding_is_idempotent_and_monotone() {
    for f in [
        ff(2, 1, 6.0),
        ff(4, 3, 448.0),
        ff(5, 2, 57344.0),
        ff(3, 0, 16.0),
        ff(5, 10, 65504.0),
        ff(8, 7, 3.3895314e38),
    ] {
        let mut xs: Vec<f32> = sweep().into_iter().filter(|x| !x.is_nan()).collect();
        xs.sort_by(f32::total_cmp);
        let mut prev = f32::NEG_INFINITY;
        for x in xs {
            let y = f.round(x);
            assert_eq!(
                f.round(y).to_bits(),
                y.to_bits(),
                "{f:?} not idempotent at {x:e}"
            );
            assert!(y >= prev, "{f:?} not monotone at {x:e}: {y} < {prev}");
            assert!(y.abs() <= f.max_normal);
            prev = y;
        }
    }
}

#[test]
fn parse_accepts_every_listed_name() {
    let cases: &[(&str, (u32, u32, f32))] = &[
        ("f16", (5, 10, 65504.0)),
        ("half", (5, 10, 65504.0)),
        ("fp16", (5, 10, 65504.0)),
        ("bf16", (8, 7, 3.3895314e38)),
        ("f8", (4, 3, 448.0)),
        ("fp8", (4, 3, 448.0)),
        ("e4m3", (4, 3, 448.0)),
        ("f8e4m3", (4, 3, 448.0)),
        ("bf8", (5, 2, 57344.0)),
        ("e5m2", (5, 2, 57344.0)),
        ("f8e5m2", (5, 2, 57344.0)),
        ("f6", (2, 3, 7.5)),
        ("fp6", (2, 3, 7.5)),
        ("e2m3", (2, 3, 7.5)),
        ("e3m2", (3, 2, 28.0)),
        ("f4", (2, 1, 6.0)),
        ("fp4", (2, 1, 6.0)),
        ("e2m1", (2, 1, 6.0)),
        ("nvf4", (2, 1, 6.0)),
        // ScaledFormat names, named and custom.
        ("f4e3m0", (3, 0, 16.0)),
        ("f6e3m2", (3, 2, 28.0)),
        ("f6e2m3", (2, 3, 7.5)),
        ("f4e2m1", (2, 1, 6.0)),
        ("f8e4m3fnuz", (4, 3, 240.0)),
        ("f8e5m2fnuz", (5, 2, 57344.0)),
        ("f8e3m4", (3, 4, 31.0)),
        ("f8e4m3b7", (4, 3, 480.0)),
        ("f2e1m0", (1, 0, 2.0)),
        // Generic IEEE fXmYeZ.
        ("f8m3e4", (4, 3, 240.0)),
        ("f4m1e2", (2, 1, 3.0)),
        ("f8m2e5", (5, 2, 57344.0)),
        ("f16m10e5", (5, 10, 65504.0)),
        ("f32m23e8", (8, 23, f32::MAX)),
        ("f9m0e8", (8, 0, 2f32.powi(127))),
        // Trimmed and case-insensitive.
        ("  FP16\t", (5, 10, 65504.0)),
        ("NvF4", (2, 1, 6.0)),
        (" F8M3E4 ", (4, 3, 240.0)),
    ];
    for &(spec, (e, m, max)) in cases {
        assert_eq!(FloatFormat::parse(spec), Some(ff(e, m, max)), "{spec:?}");
    }
}

#[test]
fn parse_rejects_malformed_and_inconsistent_names() {
    for spec in [
        "", "f", "fp32", "f8m4e4", "f8m3e3", "f9e4m3", "f16e5m10", "f10e4m5", "f1m0e0", "f34m24e9",
        "f33m23e9", "f25m24e0", "f8e0m7", "f8e4m3b5", "fm3e4", "f8m3e", "f8m-3e4", "e4m3fn",
        "bf32", "f8 e4m3", "f+8m3e4",
    ] {
        assert_eq!(FloatFormat::parse(spec), None, "{spec:?} should not parse");
    }
}

#[test]
#[should_panic(expected = "exponent")]
fn ieee_rejects_zero_exponent_bits() {
    ff(0, 3, 1.0);
}

#[test]
#[should_panic(expected = "max_normal")]
fn ieee_rejects_non_finite_max() {
    ff(4, 3, f32::INFINITY);
}

fn round_op(x: TensorData, e: u32, m: u32, max: f32) -> TensorData {
    let mut g = Graph::new("round_to_format");
    let xi = g.input("x", x.shape());
    let y = g
        .add_op(
            Op::RoundToFormat {
                exp_bits: e,
                man_bits: m,
                max_normal: max,
            },
            vec![xi],
        )
        .unwrap();
    g.set_outputs(vec![y]);
    interp::run(&g, &[("x", x)]).unwrap().remove(0)
}

#[test]
fn round_to_format_op_applies_float_format_round_elementwise() {
    let vals: Vec<f32> = (-300..300)
        .map(|i| i as f32 * 0.0371)
        .chain([f32::NAN, f32::INFINITY, -0.0, 1e-40])
        .collect();
    let out = round_op(TensorData::from_f32(&[vals.len()], &vals), 2, 1, 6.0);
    assert_eq!(out.dtype, DType::F32);
    let f = ff(2, 1, 6.0);
    for (x, y) in vals.iter().zip(out.to_f32_vec()) {
        let want = f.round(*x);
        assert!(
            y.to_bits() == want.to_bits() || (y.is_nan() && want.is_nan()),
            "{x}: {y} vs {want}"
        );
    }
}

#[test]
fn round_to_format_op_keeps_f16_and_f64_dtypes() {
    let f = ff(4, 3, 448.0);
    let vals: Vec<f64> = (-50..50).map(|i| i as f64 * 3.71).collect();
    let x16 = TensorData::from_f64_as(DType::F16, &[100], &vals);
    let out = round_op(x16.clone(), 4, 3, 448.0);
    assert_eq!(out.dtype, DType::F16);
    for (x, y) in x16.to_f64_vec().iter().zip(out.to_f64_vec()) {
        assert_eq!(y, f.round(*x as f32) as f64);
    }
    // f64 data is rounded once: 1 + 2^-4 + 2^-40 is just above an e4m3 tie, so it rounds
    // up, although its nearest f32 (the tie itself) would round down to 1.0.
    let x = 1.0 + 2f64.powi(-4) + 2f64.powi(-40);
    let out = round_op(TensorData::from_f64(&[1], &[x]), 4, 3, 448.0);
    assert_eq!(out.dtype, DType::F64);
    assert_eq!(out.to_f64_vec(), vec![1.125]);
    assert_eq!(f.round(x as f32), 1.0);
}

#[test]
fn round_to_format_shape_rule_rejects_bad_formats() {
    let mut g = Graph::new("bad");
    let x = g.input("x", Shape::new(&[4], DType::F32));
    for (e, m, max) in [
        (0, 3, 1.0),
        (9, 3, 1.0),
        (4, 24, 1.0),
        (4, 3, 0.0),
        (4, 3, f32::NAN),
    ] {
        let r = g.add_op(
            Op::RoundToFormat {
                exp_bits: e,
                man_bits: m,
                max_normal: max,
            },
            vec![x],
        );
        assert!(r.is_err(), "({e}, {m}, {max}) accepted");
    }
}
