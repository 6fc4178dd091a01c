//! Accuracy of the vectorized math kernels against the oracle interpreter.
//!
//! The reference for every activation is `rlx_ir::interp::eval_op` on `f64` data: the
//! oracle's own definition, unrounded, so the measured error is the distance from the exact
//! value in units of the `f32` ulp at that value (subnormal results: units of 2⁻¹⁴⁹).
//! Inputs: a sweep over the bit patterns of all finite `f32` of both signs, dense uniform
//! grids where the functions bend, and a list of special values (NaN, ±∞, ±0, subnormals,
//! overflow/underflow thresholds, range-reduction edges). Both code paths (AVX2+FMA where
//! the CPU has it, and portable) are measured; run with `--nocapture` to see the table.

use rlx_cpu::math::{self, Isa};
use rlx_ir::{Activation, DType, Op, Shape, TensorData, interp};

fn specials() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(1),
        f32::from_bits(0x007f_ffff),
        f32::MAX,
        f32::MIN,
        f32::EPSILON,
        1.0,
        -1.0,
        0.5,
        -0.5,
        88.722_83,
        88.722_84,
        89.0,
        -87.336_55,
        -87.336_54,
        -103.972_08,
        -103.972_09,
        -104.0,
        -105.0,
        -150.0,
        9.0,
        10.0,
        -10.0,
        12.0,
        -12.0,
        -11.5,
        16.0,
        -16.0,
        -14.0,
        10.5,
        -10.5,
        20.0,
        44.0,
        0.75,
        -0.75,
        std::f32::consts::FRAC_1_SQRT_2,
        -std::f32::consts::FRAC_1_SQRT_2,
        0.414_213_57,
        2.414_213_5,
        1.0e6,
        1.000_000_1e6,
        -1.0e6,
        1.0e7,
        3.0e38,
        -3.0,
        3.0,
        6.0,
        -6.0,
    ];
    for k in -8..=8 {
        let c = k as f32 * std::f32::consts::FRAC_PI_2;
        v.extend([
            c,
            f32::from_bits(c.to_bits() + 1),
            f32::from_bits(c.to_bits().wrapping_sub(1)),
        ]);
    }
    // f32 values closest to multiples of π/2 far out (hard cases for range reduction).
    v.extend([
        16_367_173.0f32,
        1.670_202_6e6,
        4.978_123_4e5,
        8.248_251_6e4,
        103_993.0,
    ]);
    v
}

/// Every f32 input the accuracy tests use (≈ 3.3 M values).
fn inputs() -> Vec<f32> {
    let mut v = specials();
    let step = 0x7f80_0000u32 / 1_000_000;
    for bits in (0..0x7f80_0000u32).step_by(step as usize) {
        let x = f32::from_bits(bits);
        v.push(x);
        v.push(-x);
    }
    let grid = |lo: f32, hi: f32, n: usize, v: &mut Vec<f32>| {
        for i in 0..n {
            v.push(lo + (hi - lo) * (i as f32 + 0.5) / n as f32);
        }
    };
    grid(-20.0, 20.0, 600_000, &mut v);
    grid(-1.0, 1.0, 400_000, &mut v);
    grid(-120.0, 100.0, 200_000, &mut v);
    grid(-10.0, 10.0, 100_000, &mut v);
    v
}

fn oracle(act: Activation, x: &[f32]) -> Vec<f64> {
    let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let data = TensorData::from_f64(&[x.len()], &xd);
    interp::eval_op(
        &Op::Activation(act),
        &[&data],
        &Shape::new(&[x.len()], DType::F64),
    )
    .expect("the oracle evaluates every activation on f64")
    .to_f64_vec()
}

/// Error of `got` against the exact `want`, in ulp of `want` (∞ when NaN-ness, an infinite
/// result or the sign of a zero-free result disagree).
fn ulp_err(got: f32, want: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let w32 = want as f32;
    if w32.is_infinite() || got.is_infinite() {
        return if got == w32 { 0.0 } else { f64::INFINITY };
    }
    let e = if want == 0.0 {
        -126
    } else {
        (want.abs().log2().floor() as i32).max(-126)
    };
    let ulp = 2f64.powi(e - 23);
    (got as f64 - want).abs() / ulp
}

struct Stat {
    max: f64,
    at: f32,
    got: f32,
    want: f64,
}

fn measure(isa: Isa, act: Activation, x: &[f32], want: &[f64]) -> Stat {
    let mut out = vec![0f32; x.len()];
    math::unary_f32_with(isa, act, x, &mut out);
    let mut s = Stat {
        max: 0.0,
        at: 0.0,
        got: 0.0,
        want: 0.0,
    };
    for i in 0..x.len() {
        let e = ulp_err(out[i], want[i]);
        if e > s.max || e.is_nan() {
            s = Stat {
                max: e,
                at: x[i],
                got: out[i],
                want: want[i],
            };
        }
    }
    s
}

/// Maximum ulp error allowed for each activation (measured maxima are printed by the test).
fn tolerance(act: Activation) -> f64 {
    use Activation::*;
    match act {
        // Exactly rounded operations: the correctly rounded result is within ½ ulp.
        Relu | Neg | Abs | Round | Floor | Ceil | Sign | Sqrt | Recip => 0.5,
        Rsqrt | HardSigmoid | Softsign => 1.5,
        Exp | Log | Sin | Cos | Tan => 1.0,
        Atan | Softplus | LogSigmoid | Erf | HardSwish | Elu => 2.0,
        Tanh | Sigmoid => 2.5,
        Silu | Gelu | GeluApprox => 3.5,
        Mish => 4.0,
    }
}

const ISAS: [Isa; 3] = [Isa::Avx512, Isa::Avx2Fma, Isa::Portable];

#[test]
fn every_activation_is_within_its_ulp_bound_on_every_path() {
    let x = inputs();
    let mut failures = Vec::new();
    println!("max ulp error vs the f64 oracle over {} inputs", x.len());
    println!(
        "{:<12} {:>8} {:>8} {:>8} {:>6}   worst input",
        "activation", "avx512", "avx2", "portable", "bound"
    );
    for act in Activation::ALL {
        let want = oracle(act, &x);
        let mut row = format!("{:<12}", act.name());
        let mut worst = String::new();
        for isa in ISAS {
            if !isa.is_available() {
                row += &format!(" {:>8}", "n/a");
                continue;
            }
            let s = measure(isa, act, &x, &want);
            row += &format!(" {:>8.3}", s.max);
            if isa != Isa::Avx512 {
                worst += &format!(" x={:e} ({isa:?});", s.at);
            }
            if s.max.is_nan() || s.max > tolerance(act) {
                failures.push(format!(
                    "{}: {:.3} ulp > {} on {isa:?} at x = {:e} (bits {:#010x}): got {:e}, want {:e}",
                    act.name(),
                    s.max,
                    tolerance(act),
                    s.at,
                    s.at.to_bits(),
                    s.got,
                    s.want
                ));
            }
        }
        println!("{row} {:>6}  {worst}", tolerance(act));
    }
    assert!(
        failures.is_empty(),
        "ulp bounds exceeded:\n{}",
        failures.join("\n")
    );
}

#[test]
fn erf_and_exact_gelu_are_within_their_bounds_on_a_fine_sweep_of_the_tail() {
    // Every 61st f32 bit pattern with magnitude in [2⁻³, 16] (both signs, ≈ 2.9 M inputs),
    // where the table polynomials (sixteen intervals each), the double-float exponent and
    // the final scalings do all their work, plus the subnormal results of GELU in
    // [−16, −13]. Measured maxima against the f64 oracle (2-vCPU Xeon, Sapphire Rapids
    // feature set, 2026-12-03), here and in the whole-range test above: GELU 3.09 ulp on
    // the FMA paths, 3.28 portable (its tail kernel below −4; from −4 on, x·Φ(x) with Φ's
    // table: 2.42 and 2.97); erf 1.42 ulp on the FMA paths, 1.64 portable (one table from
    // 0, where the separate small-argument polynomial measured 0.99 and 1.61). With the
    // earlier f64 rational tail factor GELU measured 2.80 ulp and erf 1.57: the tables
    // trade a third of an ulp of GELU for no division.
    let mut x = Vec::new();
    for bits in (0.125f32.to_bits()..=16f32.to_bits()).step_by(61) {
        let v = f32::from_bits(bits);
        x.extend([v, -v]);
    }
    x.extend((0..100_000).map(|i| -16.0 + i as f32 * 3e-5));
    // GELU's Φ table: a dense grid over its range [−4.0625, 5.9375] and past the clamp
    // at 5.875, and 64 neighbours of each interval edge 0.625·(m + ½), of the tail
    // branch at −4 and of the clamp.
    x.extend((0..400_000).map(|i| -4.2 + i as f32 * 2.6e-5));
    let mut edges: Vec<f32> = (-7..10).map(|m| 0.625 * (m as f32 + 0.5)).collect();
    edges.extend([-4.0, 5.875, 5.42]);
    for e in edges {
        for d in -32i32..32 {
            x.push(f32::from_bits((e.to_bits() as i32 + d) as u32));
        }
    }
    // GELU's table range on its own (printed: the tail kernel below −4 dominates the max).
    let table: Vec<f32> = x.iter().copied().filter(|v| *v >= -4.0).collect();
    let want = oracle(Activation::Gelu, &table);
    for isa in ISAS.into_iter().filter(|i| i.is_available()) {
        let s = measure(isa, Activation::Gelu, &table, &want);
        println!(
            "gelu {isa:?} from -4 on: {:.3} ulp at x = {:e}",
            s.max, s.at
        );
    }
    for act in [Activation::Erf, Activation::Gelu] {
        let want = oracle(act, &x);
        for isa in ISAS.into_iter().filter(|i| i.is_available()) {
            let s = measure(isa, act, &x, &want);
            println!("{} {isa:?}: {:.3} ulp at x = {:e}", act.name(), s.max, s.at);
            assert!(
                s.max <= tolerance(act),
                "{} {isa:?}: {:.3} ulp > {} at x = {:e}: got {:e}, want {:e}",
                act.name(),
                s.max,
                tolerance(act),
                s.at,
                s.got,
                s.want
            );
        }
    }
}

fn run(isa: Isa, act: Activation, x: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    math::unary_f32_with(isa, act, x, &mut out);
    out
}

fn same_bits(a: &[f32], b: &[f32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()))
}

#[test]
fn avx2_and_avx512_paths_give_identical_bits() {
    if !Isa::Avx512.is_available() {
        eprintln!("skipped: this CPU has no AVX-512");
        return;
    }
    let x = inputs();
    for act in Activation::ALL {
        let (a, b) = (run(Isa::Avx2Fma, act, &x), run(Isa::Avx512, act, &x));
        if let Some(i) = same_bits(&a, &b) {
            panic!(
                "{}: avx2 gives {:e}, avx512 gives {:e} at x = {:e}",
                act.name(),
                a[i],
                b[i],
                x[i]
            );
        }
    }
}

#[test]
fn portable_and_fma_paths_agree_within_the_sum_of_their_bounds() {
    // Both are measured against the oracle above; this pins how far apart they may be
    // (exactly rounded ops must agree exactly) and prints the largest distance.
    if !Isa::Avx2Fma.is_available() {
        eprintln!("skipped: this CPU has no AVX2+FMA");
        return;
    }
    let x = inputs();
    for act in Activation::ALL {
        let (a, b) = (run(Isa::Portable, act, &x), run(Isa::Avx2Fma, act, &x));
        let mut max = 0f64;
        for i in 0..x.len() {
            let e = ulp_err(a[i], b[i] as f64);
            let bound = if tolerance(act) <= 0.5 {
                0.0
            } else {
                2.0 * tolerance(act)
            };
            assert!(
                e <= bound,
                "{}: portable {:e} vs fma {:e} ({e} ulp) at x = {:e}",
                act.name(),
                a[i],
                b[i],
                x[i]
            );
            max = max.max(e);
        }
        println!("portable vs fma, {:<12} max distance {max} ulp", act.name());
    }
}

#[test]
fn results_do_not_depend_on_slice_length_offset_or_in_place() {
    // Tails shorter than a vector run the same operations as the vector body.
    let x: Vec<f32> = (0..1000)
        .map(|i| {
            (i as f32 * 0.7384).sin() * 12.0 + (i % 7) as f32 * 1e6 * (i % 13 == 0) as i32 as f32
        })
        .collect();
    for isa in ISAS.into_iter().filter(|i| i.is_available()) {
        for act in Activation::ALL {
            let whole = run(isa, act, &x);
            let mut pieces = Vec::new();
            let mut start = 0;
            for len in [1usize, 3, 7, 13, 2, 31, 64, 5].iter().cycle() {
                if start >= x.len() {
                    break;
                }
                let end = (start + len).min(x.len());
                pieces.extend(run(isa, act, &x[start..end]));
                start = end;
            }
            let mut inplace = x.clone();
            math::unary_f32_inplace_with(isa, act, &mut inplace);
            for (what, other) in [("pieces", &pieces), ("in place", &inplace)] {
                if let Some(i) = same_bits(&whole, other) {
                    panic!(
                        "{} {isa:?}: {what} gives {:e}, whole slice {:e} at x = {:e}",
                        act.name(),
                        other[i],
                        whole[i],
                        x[i]
                    );
                }
            }
        }
    }
}

#[test]
fn named_functions_equal_unary_f32_of_their_activation() {
    let x: Vec<f32> = (0..517).map(|i| i as f32 * 0.05 - 13.0).collect();
    type Kernel = fn(&[f32], &mut [f32]);
    let named: [(Kernel, Activation); 10] = [
        (math::exp_f32, Activation::Exp),
        (math::log_f32, Activation::Log),
        (math::tanh_f32, Activation::Tanh),
        (math::erf_f32, Activation::Erf),
        (math::sigmoid_f32, Activation::Sigmoid),
        (math::sin_f32, Activation::Sin),
        (math::cos_f32, Activation::Cos),
        (math::gelu_f32, Activation::Gelu),
        (math::gelu_tanh_f32, Activation::GeluApprox),
        (math::silu_f32, Activation::Silu),
    ];
    for (f, act) in named {
        let mut a = vec![0f32; x.len()];
        let mut b = vec![0f32; x.len()];
        f(&x, &mut a);
        math::unary_f32(act, &x, &mut b);
        assert_eq!(same_bits(&a, &b), None, "{}", act.name());
    }
}

#[test]
fn hand_checked_values() {
    // Exact values (to 17 digits) of e^x and tanh x at simple points.
    let x = [0.0f32, 1.0, -1.0, 2.0, 0.5];
    let exp = [
        1.0,
        std::f64::consts::E,
        0.367_879_441_171_442_33,
        7.389_056_098_930_65,
        1.648_721_270_700_128_1,
    ];
    let tanh = [
        0.0,
        0.761_594_155_955_764_9,
        -0.761_594_155_955_764_9,
        0.964_027_580_075_817,
        0.462_117_157_260_009_8,
    ];
    let mut out = [0f32; 5];
    math::exp_f32(&x, &mut out);
    for i in 0..5 {
        assert!(
            ulp_err(out[i], exp[i]) <= tolerance(Activation::Exp),
            "exp({}) = {}",
            x[i],
            out[i]
        );
    }
    math::tanh_f32(&x, &mut out);
    for i in 0..5 {
        assert!(
            ulp_err(out[i], tanh[i]) <= tolerance(Activation::Tanh),
            "tanh({}) = {}",
            x[i],
            out[i]
        );
    }
    math::unary_f32(
        Activation::Relu,
        &[-0.0, -3.0, 2.5, f32::NAN, 0.0],
        &mut out,
    );
    assert_eq!(&out[..3], &[0.0, 0.0, 2.5]);
    assert!(out[0].is_sign_positive() && out[3].is_nan());
    math::gelu_f32(
        &[f32::NEG_INFINITY, -30.0, 0.0, 30.0, f32::INFINITY],
        &mut out,
    );
    assert_eq!(out, [-0.0, -0.0, 0.0, 30.0, f32::INFINITY]);
    assert!(out[0].is_sign_negative());
}

#[test]
#[should_panic(expected = "rlx_cpu::math::exp_f32: input has 3 elements but output has 2")]
fn length_mismatch_panics_with_both_lengths() {
    math::exp_f32(&[1.0, 2.0, 3.0], &mut [0.0; 2]);
}
