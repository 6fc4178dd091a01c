//! Activations, casts, binary ops, comparisons and `Where`.

use super::*;
use rlx_ir::{Activation, BinaryOp, CmpOp, Dim, Shape};

fn act(a: Activation, x: TensorData) -> TensorData {
    eval(Op::Activation(a), &[x])
}

fn bin(b: BinaryOp, l: TensorData, r: TensorData) -> TensorData {
    eval(Op::Binary(b), &[l, r])
}

fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Naive textbook formulas, accurate in f64 at moderate |x|.
fn naive(a: Activation, x: f64) -> f64 {
    use std::f64::consts::PI;
    match a {
        Activation::Gelu => f64::NAN, // checked against tabulated values instead
        Activation::GeluApprox => {
            0.5 * x * (1.0 + ((2.0 / PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::Relu => x.max(0.0),
        Activation::Sigmoid => sig(x),
        Activation::Tanh => x.tanh(),
        Activation::Exp => x.exp(),
        Activation::Log => x.ln(),
        Activation::Sqrt => x.sqrt(),
        Activation::Rsqrt => 1.0 / x.sqrt(),
        Activation::Neg => -x,
        Activation::Abs => x.abs(),
        Activation::Sin => x.sin(),
        Activation::Cos => x.cos(),
        Activation::Tan => x.tan(),
        Activation::Atan => x.atan(),
        Activation::Recip => 1.0 / x,
        Activation::Round => f64::NAN, // checked by hand below
        Activation::Floor => x.floor(),
        Activation::Ceil => x.ceil(),
        Activation::Sign => f64::NAN, // checked by hand below
        Activation::Softplus => (1.0 + x.exp()).ln(),
        Activation::Elu => {
            if x > 0.0 {
                x
            } else {
                x.exp() - 1.0
            }
        }
        Activation::Erf => f64::NAN, // tabulated
        Activation::HardSwish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
        Activation::HardSigmoid => (x + 3.0).clamp(0.0, 6.0) / 6.0,
        Activation::Mish => x * (1.0 + x.exp()).ln().tanh(),
        Activation::Softsign => x / (1.0 + x.abs()),
        Activation::LogSigmoid => sig(x).ln(),
    }
}

#[test]
fn every_activation_matches_its_f64_formula_at_moderate_points() {
    let pts = [-4.0, -2.5, -1.0, -0.3, 0.0, 0.2, 0.7, 1.0, 3.5];
    let pos = [0.01, 0.3, 1.0, 2.0, 9.0, 100.0];
    for a in Activation::ALL {
        if matches!(
            a,
            Activation::Gelu | Activation::Erf | Activation::Round | Activation::Sign
        ) {
            continue;
        }
        let xs: &[f64] = if matches!(a, Activation::Log | Activation::Sqrt | Activation::Rsqrt) {
            &pos
        } else {
            &pts
        };
        let got = act(a, f64s(&[xs.len()], xs)).to_f64_vec();
        let want: Vec<f64> = xs.iter().map(|&x| naive(a, x)).collect();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g == w || (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                "{}({}) = {g}, want {w}",
                a.name(),
                xs[i]
            );
        }
    }
}

#[test]
fn gelu_and_erf_match_tabulated_values() {
    // erf from Python's math.erf; gelu = x·erfc(−x/√2)/2 from math.erfc.
    let xs = [-3.0, -1.0, -0.5, 0.5, 1.0, 2.0];
    let erf = [
        -0.9999779095030014,
        -0.8427007929497149,
        -0.5204998778130465,
        0.5204998778130465,
        0.8427007929497149,
        0.9953222650189527,
    ];
    assert_close(
        &act(Activation::Erf, f64s(&[6], &xs)).to_f64_vec(),
        &erf,
        1e-15,
    );
    let gx = [-10.0, -3.0, -1.0, 0.0, 1.0, 2.0];
    let gelu = [
        -7.619853024160593e-23,
        -0.004049694094890287,
        -0.15865525393145707,
        0.0,
        0.8413447460685429,
        1.9544997361036416,
    ];
    let got = act(Activation::Gelu, f64s(&[6], &gx)).to_f64_vec();
    for (g, w) in got.iter().zip(&gelu) {
        // Relative: the −10 value is tiny but must not cancel to 0.
        assert!((g - w).abs() <= 1e-13 * w.abs() + 1e-300, "{g} vs {w}");
    }
}

#[test]
fn activations_are_stable_at_large_magnitudes() {
    let xs = [-1000.0, -50.0, 50.0, 1000.0];
    let x = f64s(&[4], &xs);
    let f = |a| act(a, x.clone()).to_f64_vec();
    assert_close(
        &f(Activation::Softplus),
        &[0.0, (-50f64).exp(), 50.0, 1000.0],
        1e-14,
    );
    assert_close(
        &f(Activation::LogSigmoid),
        &[-1000.0, -50.0, -(-50f64).exp(), 0.0],
        1e-14,
    );
    assert_close(
        &f(Activation::Sigmoid),
        &[0.0, (-50f64).exp(), 1.0, 1.0],
        1e-14,
    );
    assert_close(
        &f(Activation::Silu),
        &[0.0, -50.0 * (-50f64).exp(), 50.0, 1000.0],
        1e-14,
    );
    assert_close(
        &f(Activation::Mish),
        &[0.0, -50.0 * (-50f64).exp(), 50.0, 1000.0],
        1e-12,
    );
    assert_close(&f(Activation::Elu), &[-1.0, -1.0, 50.0, 1000.0], 1e-15);
    assert_close(&f(Activation::GeluApprox), &[0.0, 0.0, 50.0, 1000.0], 1e-15);
    assert_close(&f(Activation::Gelu), &[0.0, 0.0, 50.0, 1000.0], 1e-15);
    assert_close(&f(Activation::Tanh), &[-1.0, -1.0, 1.0, 1.0], 0.0);
    // Small-magnitude results keep their relative accuracy (no cancellation).
    let tiny = f(Activation::Softplus)[1];
    assert!((tiny / (-50f64).exp() - 1.0).abs() < 1e-14, "{tiny}");
}

#[test]
fn activations_at_infinities_take_their_limits() {
    let x = f32s(&[2], &[f32::NEG_INFINITY, f32::INFINITY]);
    let f = |a| act(a, x.clone()).to_f64_vec();
    let inf = f64::INFINITY;
    assert_same(&f(Activation::Gelu), &[0.0, inf]);
    assert_same(&f(Activation::GeluApprox), &[0.0, inf]);
    assert_same(&f(Activation::Silu), &[0.0, inf]);
    assert_same(&f(Activation::Mish), &[0.0, inf]);
    assert_same(&f(Activation::HardSwish), &[0.0, inf]);
    assert_same(&f(Activation::HardSigmoid), &[0.0, 1.0]);
    assert_same(&f(Activation::Softsign), &[-1.0, 1.0]);
    assert_same(&f(Activation::Softplus), &[0.0, inf]);
    assert_same(&f(Activation::LogSigmoid), &[-inf, 0.0]);
    assert_same(&f(Activation::Sigmoid), &[0.0, 1.0]);
    assert_same(&f(Activation::Elu), &[-1.0, inf]);
    assert_same(&f(Activation::Exp), &[0.0, inf]);
    assert_same(&f(Activation::Erf), &[-1.0, 1.0]);
    assert_same(&f(Activation::Relu), &[0.0, inf]);
    assert_same(&f(Activation::Recip), &[-0.0, 0.0]);
    assert_same(
        &f(Activation::Atan),
        &[
            -std::f64::consts::FRAC_PI_2 as f32 as f64,
            std::f64::consts::FRAC_PI_2 as f32 as f64,
        ],
    );
}

#[test]
fn nan_propagates_through_every_activation() {
    for a in Activation::ALL {
        for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let got = act(a, real(dt, &[2], &[f64::NAN, 1.0])).to_f64_vec();
            assert!(got[0].is_nan(), "{}({dt}) of NaN gave {}", a.name(), got[0]);
        }
    }
}

#[test]
fn round_is_half_to_even_and_sign_of_zero_is_zero() {
    let x = f32s(&[8], &[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 3.5]);
    assert_same(
        &act(Activation::Round, x).to_f64_vec(),
        &[0.0, 2.0, 2.0, 0.0, -2.0, -2.0, 2.0, 4.0],
    );
    let x = f32s(&[5], &[-3.0, 0.0, -0.0, 0.1, f32::NEG_INFINITY]);
    assert_same(
        &act(Activation::Sign, x.clone()).to_f64_vec(),
        &[-1.0, 0.0, 0.0, 1.0, -1.0],
    );
    assert_same(
        &act(Activation::Floor, x.clone()).to_f64_vec(),
        &[-3.0, 0.0, 0.0, 0.0, f64::NEG_INFINITY],
    );
    assert_same(
        &act(Activation::Ceil, x).to_f64_vec(),
        &[-3.0, 0.0, 0.0, 1.0, f64::NEG_INFINITY],
    );
}

#[test]
fn rsqrt_log_sqrt_follow_ieee_at_zero_and_negatives() {
    let x = f32s(&[3], &[0.0, -1.0, 4.0]);
    assert_same(
        &act(Activation::Rsqrt, x.clone()).to_f64_vec(),
        &[f64::INFINITY, f64::NAN, 0.5],
    );
    assert_same(
        &act(Activation::Log, x.clone()).to_f64_vec(),
        &[f64::NEG_INFINITY, f64::NAN, 4f64.ln() as f32 as f64],
    );
    assert_same(
        &act(Activation::Sqrt, x).to_f64_vec(),
        &[0.0, f64::NAN, 2.0],
    );
}

#[test]
fn reduced_precision_activations_round_once_from_f64() {
    for dt in [DType::F16, DType::BF16, DType::F32] {
        let xs = [1.0, -0.75, 3.0];
        let got = act(Activation::Exp, real(dt, &[3], &xs)).to_f64_vec();
        let want: Vec<f64> = xs.iter().map(|x: &f64| x.exp()).collect();
        assert_same(&got, &rounded(dt, &want));
    }
    // e rounds to 2.71875 in both f16 (ulp 2⁻⁹ → 1392·2⁻⁹) and bf16 (ulp 2⁻⁶ → 174·2⁻⁶).
    assert_eq!(
        act(Activation::Exp, real(DType::BF16, &[1], &[1.0])).to_f64_vec(),
        [2.71875]
    );
    assert_eq!(
        act(Activation::Exp, real(DType::F16, &[1], &[1.0])).to_f64_vec(),
        [2.71875]
    );
}

#[test]
fn integer_activations_wrap_and_roundings_are_identity() {
    let x = ints(DType::I8, &[5], &[-128, -5, 0, 7, 127]);
    let f = |a| act(a, x.clone()).to_i64_vec();
    assert_eq!(f(Activation::Neg), [-128, 5, 0, -7, -127]);
    assert_eq!(f(Activation::Abs), [-128, 5, 0, 7, 127]);
    assert_eq!(f(Activation::Relu), [0, 0, 0, 7, 127]);
    assert_eq!(f(Activation::Sign), [-1, -1, 0, 1, 1]);
    for a in [Activation::Round, Activation::Floor, Activation::Ceil] {
        assert_eq!(f(a), [-128, -5, 0, 7, 127]);
    }
    let u = ints(DType::U8, &[3], &[0, 5, 255]);
    assert_eq!(act(Activation::Neg, u.clone()).to_i64_vec(), [0, 251, 1]);
    assert_eq!(act(Activation::Sign, u).to_i64_vec(), [0, 1, 1]);
    let big = ints(DType::I64, &[2], &[i64::MIN, -3]);
    assert_eq!(act(Activation::Abs, big).to_i64_vec(), [i64::MIN, 3]);
    let i32s = ints(DType::I32, &[2], &[i32::MIN as i64, -9]);
    assert_eq!(
        act(Activation::Neg, i32s).to_i64_vec(),
        [i32::MIN as i64, 9]
    );
}

#[test]
fn non_integer_activations_on_integers_are_rejected() {
    let msg = eval_err(
        Op::Activation(Activation::Exp),
        &[ints(DType::I32, &[1], &[1])],
    );
    assert!(msg.contains("exp") && msg.contains("i32"), "{msg}");
}

// ---------------------------------------------------------------------- casts

fn cast(x: TensorData, to: DType) -> TensorData {
    eval(Op::Cast { to }, &[x])
}

#[test]
fn cast_float_to_int_truncates_saturates_and_maps_nan_to_zero() {
    let x = f32s(&[6], &[-2.7, 2.7, 3e9, f32::NAN, f32::NEG_INFINITY, -0.5]);
    let i = cast(x.clone(), DType::I32);
    assert_eq!(i.dtype, DType::I32);
    assert_eq!(
        i.to_i64_vec(),
        [-2, 2, i32::MAX as i64, 0, i32::MIN as i64, 0]
    );
    assert_eq!(
        cast(x.clone(), DType::U8).to_i64_vec(),
        [0, 2, 255, 0, 0, 0]
    );
    assert_eq!(
        cast(x.clone(), DType::I8).to_i64_vec(),
        [-2, 2, 127, 0, -128, 0]
    );
    assert_eq!(
        cast(x, DType::I64).to_i64_vec(),
        [-2, 2, 3_000_000_000, 0, i64::MIN, 0]
    );
}

/// The per-element cast rules rlx-ir exports for backends, called directly: their edges
/// (saturation, NaN, wrapping, rounding of integers past 2⁵³ and past a float's
/// precision) and dtypes outside their domain, which leave the value as documented
/// instead of inventing a cast.
#[test]
fn public_cast_rules_hold_at_their_edges_and_outside_their_dtypes() {
    use rlx_ir::interp::{float_to_int, int_for_float, round_float, wrap_int};
    assert_eq!(float_to_int(f64::NAN, DType::I32), 0);
    assert_eq!(float_to_int(1e10, DType::I32), i32::MAX as i64);
    assert_eq!(float_to_int(-1.5, DType::U8), 0);
    assert_eq!(float_to_int(-0.5, DType::I8), 0);
    assert_eq!(float_to_int(f64::NAN, DType::Bool), 1);
    assert_eq!(float_to_int(0.0, DType::Bool), 0);
    // Outside the integer dtypes: truncated and saturated to i64.
    assert_eq!(float_to_int(2.9, DType::F32), 2);
    assert_eq!(float_to_int(f64::INFINITY, DType::F64), i64::MAX);

    assert_eq!(wrap_int(300, DType::U8), 44);
    assert_eq!(wrap_int(-1, DType::U32), u32::MAX as i64);
    assert_eq!(wrap_int(-129, DType::I8), 127);
    assert_eq!(wrap_int(2, DType::Bool), 1);
    // Float and complex targets: the value is left for int_for_float.
    assert_eq!(wrap_int(-7, DType::F32), -7);
    assert_eq!(wrap_int(i64::MIN, DType::C64), i64::MIN);

    assert_eq!(round_float(0.1, DType::F32), 0.1f32 as f64);
    assert_eq!(round_float(65520.0, DType::F16), f64::INFINITY);
    assert!(round_float(f64::NAN, DType::BF16).is_nan());
    // f64 and non-float targets: unchanged.
    assert_eq!(round_float(0.1, DType::F64), 0.1);
    assert_eq!(round_float(2.5, DType::I32), 2.5);

    // int → float is round_float(int_for_float(v)): one rounding to nearest even.
    let to_float = |v: i64, to: DType| round_float(int_for_float(v, to), to);
    assert_eq!(to_float((1 << 24) + 1, DType::F32), 16_777_216.0);
    assert_eq!(to_float((1 << 24) + 3, DType::F32), 16_777_220.0);
    assert_eq!(to_float(-((1 << 24) + 3), DType::F32), -16_777_220.0);
    assert_eq!(to_float(2049, DType::F16), 2048.0);
    assert_eq!(to_float(2051, DType::F16), 2052.0);
    // Past 2⁵³ int_for_float itself rounds (f64 cannot hold the integer).
    assert_eq!(int_for_float((1 << 53) + 1, DType::F64), 2f64.powi(53));
    assert_eq!(
        int_for_float((1 << 53) + 3, DType::F64),
        2f64.powi(53) + 4.0
    );
    assert_eq!(int_for_float(i64::MAX, DType::BF16), 2f64.powi(63));
    // Non-float targets round like f64.
    assert_eq!(
        int_for_float((1 << 53) + 3, DType::I32),
        int_for_float((1 << 53) + 3, DType::F64)
    );
}

#[test]
fn cast_int_to_int_wraps() {
    let x = ints(DType::I32, &[4], &[200, -1, 256, -129]);
    assert_eq!(cast(x.clone(), DType::I8).to_i64_vec(), [-56, -1, 0, 127]);
    assert_eq!(cast(x.clone(), DType::U8).to_i64_vec(), [200, 255, 0, 127]);
    assert_eq!(
        cast(x, DType::U32).to_i64_vec(),
        [200, 4294967295, 256, 4294967167]
    );
    let u = ints(DType::U32, &[1], &[4294967295]);
    assert_eq!(cast(u, DType::I32).to_i64_vec(), [-1]);
}

#[test]
fn cast_to_and_from_bool() {
    let x = f32s(&[5], &[0.0, -0.0, f32::NAN, 0.5, -3.0]);
    let b = cast(x, DType::Bool);
    assert_eq!(b.dtype, DType::Bool);
    assert_eq!(b.bytes, [0, 0, 1, 1, 1]);
    let i = cast(ints(DType::I32, &[3], &[0, 7, -1]), DType::Bool);
    assert_eq!(i.bytes, [0, 1, 1]);
    let back = TensorData::from_bool(&[3], &[true, false, true]);
    assert_same(
        &cast(back.clone(), DType::F32).to_f64_vec(),
        &[1.0, 0.0, 1.0],
    );
    assert_eq!(cast(back.clone(), DType::I64).to_i64_vec(), [1, 0, 1]);
    assert_eq!(cast(back, DType::U8).bytes, [1, 0, 1]);
}

#[test]
fn cast_int_to_float_rounds_once_even_beyond_2_pow_53() {
    // 2⁶⁰ + 2³⁶ + 1 lies just above the midpoint of two f32 neighbours; a detour
    // through f64 would land on the midpoint and round to even (down).
    let v: i64 = (1 << 60) + (1 << 36) + 1;
    let got = cast(ints(DType::I64, &[1], &[v]), DType::F32).to_f64_vec()[0];
    assert_eq!(got, ((1i64 << 60) + (1 << 37)) as f64);
    let bf = cast(ints(DType::I32, &[2], &[257, 259]), DType::BF16).to_f64_vec();
    // bf16 holds 8 significant bits: 257 → 256 (tie to even), 259 → 260.
    assert_same(&bf, &[256.0, 260.0]);
    let h = cast(ints(DType::I32, &[2], &[65519, 65520]), DType::F16).to_f64_vec();
    assert_same(&h, &[65504.0, f64::INFINITY]);
}

#[test]
fn cast_between_floats_rounds_to_nearest_even() {
    let x = f64s(&[3], &[0.1, 1.0 + 1.0 / 2048.0, 1e6]);
    assert_same(
        &cast(x.clone(), DType::F32).to_f64_vec(),
        &[0.1f32 as f64, 1.0 + 1.0 / 2048.0, 1e6],
    );
    // f16 has 10 fraction bits: 1 + 2⁻¹¹ is a tie → 1; 1e6 overflows (max 65504).
    assert_same(
        &cast(x.clone(), DType::F16).to_f64_vec(),
        &[rounded(DType::F16, &[0.1])[0], 1.0, f64::INFINITY],
    );
    assert_same(
        &cast(x, DType::BF16).to_f64_vec(),
        &rounded(DType::BF16, &[0.1, 1.0, 1e6]),
    );
}

#[test]
fn stop_gradient_is_the_identity() {
    let x = real(DType::BF16, &[2, 2], &[1.5, -2.0, 0.0, 7.0]);
    assert_eq!(eval(Op::StopGradient, std::slice::from_ref(&x)), x);
}

// --------------------------------------------------------------------- binary

#[test]
fn binary_broadcasts_numpy_style_including_rank_0() {
    let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let row = f32s(&[3], &[10.0, 20.0, 30.0]);
    let got = bin(BinaryOp::Add, a.clone(), row);
    assert_eq!(got.dims, [2, 3]);
    assert_same(&got.to_f64_vec(), &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    let col = f32s(&[2, 1], &[1.0, -1.0]);
    assert_same(
        &bin(BinaryOp::Mul, a.clone(), col).to_f64_vec(),
        &[1.0, 2.0, 3.0, -4.0, -5.0, -6.0],
    );
    let s = f32s(&[], &[2.0]);
    assert_same(
        &bin(BinaryOp::Sub, s.clone(), a).to_f64_vec(),
        &[1.0, 0.0, -1.0, -2.0, -3.0, -4.0],
    );
    let outer = bin(
        BinaryOp::Mul,
        f32s(&[3, 1], &[1.0, 2.0, 3.0]),
        f32s(&[1, 2], &[1.0, 10.0]),
    );
    assert_eq!(outer.dims, [3, 2]);
    assert_same(&outer.to_f64_vec(), &[1.0, 10.0, 2.0, 20.0, 3.0, 30.0]);
    let scalar = bin(BinaryOp::Div, s.clone(), s);
    assert!(scalar.dims.is_empty());
    assert_same(&scalar.to_f64_vec(), &[1.0]);
}

#[test]
fn float_binary_ops_match_f64_references() {
    let xs = [5.5, -5.5, 2.0, -0.0, 1.0, 3.0];
    let ys = [2.0, 2.0, -3.0, 1.0, 0.0, 0.5];
    let x = f64s(&[6], &xs);
    let y = f64s(&[6], &ys);
    let f = |b| bin(b, x.clone(), y.clone()).to_f64_vec();
    let r = |g: fn(f64, f64) -> f64| -> Vec<f64> {
        xs.iter().zip(&ys).map(|(a, b)| g(*a, *b)).collect()
    };
    assert_same(&f(BinaryOp::Add), &r(|a, b| a + b));
    assert_same(&f(BinaryOp::Sub), &r(|a, b| a - b));
    assert_same(&f(BinaryOp::Mul), &r(|a, b| a * b));
    assert_same(
        &f(BinaryOp::Div),
        &[2.75, -2.75, -2.0 / 3.0, -0.0, f64::INFINITY, 6.0],
    );
    assert_same(&f(BinaryOp::Pow), &r(f64::powf));
    assert_same(&f(BinaryOp::Atan2), &r(f64::atan2));
    // fmod: the sign of the dividend; x % 0 is NaN.
    assert_same(&f(BinaryOp::Mod), &[1.5, -1.5, 2.0, -0.0, f64::NAN, 0.0]);
    assert_same(&f(BinaryOp::Max), &[5.5, 2.0, 2.0, 1.0, 1.0, 3.0]);
    assert_same(&f(BinaryOp::Min), &[2.0, -5.5, -3.0, -0.0, 0.0, 0.5]);
}

#[test]
fn max_min_propagate_nan_and_order_signed_zeros_and_infinities() {
    let nan = f32::NAN;
    let x = f32s(&[5], &[nan, 1.0, f32::INFINITY, -0.0, 0.0]);
    let y = f32s(&[5], &[1.0, nan, f32::NEG_INFINITY, 0.0, -0.0]);
    let mx = bin(BinaryOp::Max, x.clone(), y.clone()).to_f64_vec();
    let mn = bin(BinaryOp::Min, x, y).to_f64_vec();
    assert_same(&mx, &[f64::NAN, f64::NAN, f64::INFINITY, 0.0, 0.0]);
    assert_same(&mn, &[f64::NAN, f64::NAN, f64::NEG_INFINITY, 0.0, 0.0]);
    // +0 > −0 in both orders.
    assert!(mx[3].is_sign_positive() && mx[4].is_sign_positive());
    assert!(mn[3].is_sign_negative() && mn[4].is_sign_negative());
}

#[test]
fn reduced_precision_binary_rounds_once_on_store() {
    // f16 spacing at 2048 is 2: 2048 + 1 is a tie → 2048, 2048 + 3 → 2052 (tie to even).
    let a = real(DType::F16, &[2], &[2048.0, 2048.0]);
    let b = real(DType::F16, &[2], &[1.0, 3.0]);
    assert_same(&bin(BinaryOp::Add, a, b).to_f64_vec(), &[2048.0, 2052.0]);
    // bf16 product of 1.5 · 1.0078125 = 1.51171875 → nearest bf16 1.5078125 or 1.515625.
    let p = bin(
        BinaryOp::Mul,
        real(DType::BF16, &[1], &[1.5]),
        real(DType::BF16, &[1], &[1.0078125]),
    );
    assert_same(&p.to_f64_vec(), &rounded(DType::BF16, &[1.5 * 1.0078125]));
    assert_eq!(p.dtype, DType::BF16);
}

#[test]
fn rhs_is_converted_to_the_lhs_dtype_first() {
    // f16 lhs, f32 rhs 0.1: the rhs becomes f16(0.1) before the add.
    let l = real(DType::F16, &[1], &[0.0]);
    let got = bin(BinaryOp::Add, l, f32s(&[1], &[0.1]));
    assert_eq!(got.dtype, DType::F16);
    assert_same(&got.to_f64_vec(), &rounded(DType::F16, &[0.1]));
    // u8 lhs, i32 rhs −1 → 255.
    let got = bin(
        BinaryOp::BitAnd,
        ints(DType::U8, &[1], &[0b1010_1010]),
        ints(DType::I32, &[1], &[-1]),
    );
    assert_eq!(got.to_i64_vec(), [0b1010_1010]);
    // f32 lhs, i32 rhs.
    let got = bin(
        BinaryOp::Mul,
        f32s(&[2], &[0.5, 2.0]),
        ints(DType::I32, &[2], &[3, -4]),
    );
    assert_same(&got.to_f64_vec(), &[1.5, -8.0]);
}

#[test]
fn integer_arithmetic_wraps_and_divides_toward_zero() {
    let i8s = |v: &[i64]| ints(DType::I8, &[v.len()], v);
    assert_eq!(
        bin(BinaryOp::Add, i8s(&[100, -100]), i8s(&[100, -100])).to_i64_vec(),
        [-56, 56]
    );
    assert_eq!(bin(BinaryOp::Mul, i8s(&[16]), i8s(&[16])).to_i64_vec(), [0]);
    let u8s = |v: &[i64]| ints(DType::U8, &[v.len()], v);
    assert_eq!(
        bin(BinaryOp::Add, u8s(&[200]), u8s(&[100])).to_i64_vec(),
        [44]
    );
    assert_eq!(bin(BinaryOp::Sub, u8s(&[1]), u8s(&[2])).to_i64_vec(), [255]);
    let i32s = |v: &[i64]| ints(DType::I32, &[v.len()], v);
    let x = i32s(&[7, -7, 7, -7, i32::MIN as i64]);
    let y = i32s(&[2, 2, -2, -2, -1]);
    assert_eq!(
        bin(BinaryOp::Div, x.clone(), y.clone()).to_i64_vec(),
        [3, -3, -3, 3, i32::MIN as i64]
    );
    assert_eq!(
        bin(BinaryOp::Mod, x.clone(), y.clone()).to_i64_vec(),
        [1, -1, 1, -1, 0]
    );
    assert_eq!(
        bin(BinaryOp::Max, x.clone(), y.clone()).to_i64_vec(),
        [7, 2, 7, -2, -1]
    );
    assert_eq!(
        bin(BinaryOp::Min, x, y).to_i64_vec(),
        [2, -7, -2, -7, i32::MIN as i64]
    );
    let big = ints(DType::I64, &[1], &[i64::MAX]);
    assert_eq!(
        bin(BinaryOp::Add, big.clone(), ints(DType::I64, &[1], &[1])).to_i64_vec(),
        [i64::MIN]
    );
    assert_eq!(
        bin(BinaryOp::Mul, big, ints(DType::I64, &[1], &[2])).to_i64_vec(),
        [-2]
    );
}

#[test]
fn integer_division_or_mod_by_zero_is_an_error_naming_the_op() {
    for b in [BinaryOp::Div, BinaryOp::Mod] {
        let msg = eval_err(
            Op::Binary(b),
            &[
                ints(DType::I32, &[3], &[1, 2, 3]),
                ints(DType::I32, &[3], &[1, 0, 1]),
            ],
        );
        assert!(msg.contains("integer division by zero"), "{msg}");
        assert!(msg.starts_with(b.name()), "{msg}");
        assert!(msg.contains("element 1"), "{msg}");
    }
}

#[test]
fn integer_pow_wraps_and_negative_exponents_truncate() {
    let b = ints(DType::I32, &[7], &[2, 3, 1, -1, -1, 5, 0]);
    let e = ints(DType::I32, &[7], &[10, 21, -5, -3, -4, -1, 0]);
    // 3²¹ = 10460353203 wraps in i32 to 10460353203 − 2·2³² = 1870418611.
    assert_eq!(
        bin(BinaryOp::Pow, b, e).to_i64_vec(),
        [1024, 1870418611, 1, -1, 1, 0, 1]
    );
}

#[test]
fn bitwise_ops_on_integers_and_bools() {
    let x = ints(DType::I32, &[3], &[0b1100, -1, -8]);
    let y = ints(DType::I32, &[3], &[0b1010, 0x0f, 3]);
    assert_eq!(
        bin(BinaryOp::BitAnd, x.clone(), y.clone()).to_i64_vec(),
        [0b1000, 0x0f, 0]
    );
    assert_eq!(
        bin(BinaryOp::BitOr, x.clone(), y.clone()).to_i64_vec(),
        [0b1110, -1, -5]
    );
    assert_eq!(bin(BinaryOp::BitXor, x, y).to_i64_vec(), [0b0110, -16, -5]);
    let p = TensorData::from_bool(&[4], &[false, false, true, true]);
    let q = TensorData::from_bool(&[4], &[false, true, false, true]);
    assert_eq!(
        bin(BinaryOp::BitAnd, p.clone(), q.clone()).bytes,
        [0, 0, 0, 1]
    );
    assert_eq!(
        bin(BinaryOp::BitOr, p.clone(), q.clone()).bytes,
        [0, 1, 1, 1]
    );
    assert_eq!(
        bin(BinaryOp::BitXor, p.clone(), q.clone()).bytes,
        [0, 1, 1, 0]
    );
    assert_eq!(bin(BinaryOp::Max, p.clone(), q.clone()).bytes, [0, 1, 1, 1]);
    assert_eq!(bin(BinaryOp::Min, p, q).bytes, [0, 0, 0, 1]);
}

#[test]
fn shifts_saturate_past_the_bit_width_and_reject_negative_amounts() {
    let i8s = |v: &[i64]| ints(DType::I8, &[v.len()], v);
    assert_eq!(
        bin(BinaryOp::Shl, i8s(&[64, 1, 1, 3]), i8s(&[1, 7, 8, 100])).to_i64_vec(),
        [-128, -128, 0, 0]
    );
    assert_eq!(
        bin(BinaryOp::Shr, i8s(&[-128, -128, 64, 5]), i8s(&[1, 9, 9, 1])).to_i64_vec(),
        [-64, -1, 0, 2]
    );
    let u8s = |v: &[i64]| ints(DType::U8, &[v.len()], v);
    // Unsigned right shifts are logical.
    assert_eq!(
        bin(BinaryOp::Shr, u8s(&[200, 200, 255]), u8s(&[3, 9, 7])).to_i64_vec(),
        [25, 0, 1]
    );
    assert_eq!(
        bin(BinaryOp::Shl, u8s(&[200]), u8s(&[1])).to_i64_vec(),
        [144]
    );
    let i64s = |v: &[i64]| ints(DType::I64, &[v.len()], v);
    assert_eq!(
        bin(BinaryOp::Shl, i64s(&[1, 1]), i64s(&[63, 64])).to_i64_vec(),
        [i64::MIN, 0]
    );
    assert_eq!(
        bin(BinaryOp::Shr, i64s(&[-16, -16]), i64s(&[2, 64])).to_i64_vec(),
        [-4, -1]
    );
    let msg = eval_err(Op::Binary(BinaryOp::Shl), &[i8s(&[1]), i8s(&[-1])]);
    assert!(
        msg.contains("shl") && msg.contains("negative shift"),
        "{msg}"
    );
}

// ------------------------------------------------------- comparison and where

#[test]
fn comparisons_give_bool_and_nan_is_unordered() {
    let x = f32s(&[4], &[1.0, 2.0, f32::NAN, f32::NEG_INFINITY]);
    let y = f32s(&[4], &[2.0, 2.0, f32::NAN, -1.0]);
    let c = |op| eval(Op::Compare(op), &[x.clone(), y.clone()]);
    let out = c(CmpOp::Eq);
    assert_eq!(out.dtype, DType::Bool);
    assert_eq!(out.bytes, [0, 1, 0, 0]);
    assert_eq!(c(CmpOp::Ne).bytes, [1, 0, 1, 1]);
    assert_eq!(c(CmpOp::Lt).bytes, [1, 0, 0, 1]);
    assert_eq!(c(CmpOp::Le).bytes, [1, 1, 0, 1]);
    assert_eq!(c(CmpOp::Gt).bytes, [0, 0, 0, 0]);
    assert_eq!(c(CmpOp::Ge).bytes, [0, 1, 0, 0]);
}

#[test]
fn comparisons_are_exact_on_integers_and_broadcast() {
    // 2⁵³ + 1 and 2⁵³ are equal in f64 but not as integers.
    let a = ints(DType::I64, &[1], &[(1 << 53) + 1]);
    let b = ints(DType::I64, &[1], &[1 << 53]);
    assert_eq!(eval(Op::Compare(CmpOp::Gt), &[a, b]).bytes, [1]);
    let x = ints(DType::I32, &[2, 1], &[1, 3]);
    let y = f32s(&[3], &[0.5, 1.0, 3.5]);
    let out = eval(Op::Compare(CmpOp::Le), &[x, y]);
    assert_eq!(out.dims, [2, 3]);
    assert_eq!(out.bytes, [0, 1, 1, 0, 0, 1]);
}

#[test]
fn where_selects_by_nonzero_mask_with_broadcast() {
    let mask = f32s(&[3], &[0.0, f32::NAN, -0.0]);
    let t = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let f = f32s(&[], &[-1.0]);
    let out = eval(Op::Where, &[mask, t, f]);
    assert_eq!(out.dims, [2, 3]);
    assert_same(&out.to_f64_vec(), &[-1.0, 2.0, -1.0, -1.0, 5.0, -1.0]);
    // A bool mask [2, 1] against bf16 branches [2].
    let mask = TensorData::from_bool(&[2, 1], &[true, false]);
    let t = real(DType::BF16, &[2], &[0.5, 1.5]);
    let f = real(DType::BF16, &[2], &[256.0, 7.0]);
    let out = eval(Op::Where, &[mask, t, f]);
    assert_eq!(out.dtype, DType::BF16);
    assert_eq!(out.dims, [2, 2]);
    assert_same(&out.to_f64_vec(), &[0.5, 1.5, 256.0, 7.0]);
    // Integer mask, integer branches.
    let out = eval(
        Op::Where,
        &[
            ints(DType::U8, &[3], &[0, 2, 0]),
            ints(DType::I64, &[3], &[1, 2, 3]),
            ints(DType::I64, &[1], &[9]),
        ],
    );
    assert_eq!(out.to_i64_vec(), [9, 2, 9]);
}

#[test]
fn dynamic_batch_runs_with_two_batch_sizes() {
    let mut g = Graph::new("dyn");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(3)], DType::F32),
    );
    let bias_bytes: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let b = g.add_node(
        Op::Constant { data: bias_bytes },
        vec![],
        Shape::new(&[3], DType::F32),
    );
    let s = g.add_op(Op::Binary(BinaryOp::Add), vec![x, b]).unwrap();
    let y = g.add_op(Op::Activation(Activation::Relu), vec![s]).unwrap();
    let r = g
        .add_op(
            Op::Reduce {
                op: rlx_ir::ReduceOp::Sum,
                axes: vec![1],
                keep_dim: false,
            },
            vec![y],
        )
        .unwrap();
    g.set_outputs(vec![y, r]);
    let out = interp::run(
        &g,
        &[("x", f32s(&[2, 3], &[-5.0, 0.0, 1.0, 0.5, -2.5, -4.0]))],
    )
    .unwrap();
    assert_eq!(out[0].dims, [2, 3]);
    assert_same(&out[0].to_f64_vec(), &[0.0, 2.0, 4.0, 1.5, 0.0, 0.0]);
    assert_same(&out[1].to_f64_vec(), &[6.0, 1.5]);
    let xs: Vec<f32> = (0..15).map(|i| i as f32 - 7.0).collect();
    let out = interp::run(&g, &[("x", f32s(&[5, 3], &xs))]).unwrap();
    assert_eq!(out[0].dims, [5, 3]);
    let want: Vec<f64> = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| (v as f64 + [1.0, 2.0, 3.0][i % 3]).max(0.0))
        .collect();
    assert_same(&out[0].to_f64_vec(), &want);
    assert_eq!(out[1].dims, [5]);
}

#[test]
fn float_pow_follows_c_pow_special_cases() {
    let x = f64s(&[6], &[f64::NAN, 1.0, -8.0, 0.0, -2.0, 4.0]);
    let y = f64s(&[6], &[0.0, f64::NAN, 1.0 / 3.0, -1.0, 3.0, 0.5]);
    let got = bin(BinaryOp::Pow, x, y).to_f64_vec();
    // pow(NaN, 0) = 1 and pow(1, NaN) = 1; a negative base with a
    // non-integer exponent is NaN; pow(0, −1) = +∞.
    assert_same(&got, &[1.0, 1.0, f64::NAN, f64::INFINITY, -8.0, 2.0]);
}
