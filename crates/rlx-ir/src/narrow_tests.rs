use super::{bf16_from_f64, f16_from_f64, narrow_bits};

/// `2^k` for `k` in f64's normal exponent range, built from its bits (exact).
fn pow2(k: i32) -> f64 {
    assert!((-1022..=1023).contains(&k), "2^{k} is not a normal f64");
    f64::from_bits(((1023 + k) as u64) << 52)
}

/// The value of the non-negative pattern `b` of the format (no sign bit), by the IEEE
/// formula; the pattern of +∞ decodes as `2^(emax+1)`, the next binade's first value.
fn decode(b: u32, exp_bits: u32, man_bits: u32) -> f64 {
    let bias = (1i32 << (exp_bits - 1)) - 1;
    let e = (b >> man_bits) as i32;
    let m = (b & ((1 << man_bits) - 1)) as f64;
    if e == 0 {
        m * pow2(1 - bias - man_bits as i32)
    } else {
        (m + pow2(man_bits as i32)) * pow2(e - bias - man_bits as i32)
    }
}

/// The correctly rounded pattern of finite, non-NaN `x`, found independently of
/// `narrow_bits`: the largest format value `a <= |x|` by binary search over the
/// (monotone) patterns, then the nearer of `a` and its successor by exact distances
/// (Sterbenz: `|x|` lies within a factor 2 of both, or below the smallest subnormal
/// where the comparison cannot flip), ties to the even pattern. The successor of the
/// largest finite value is +∞'s pattern, standing for `2^(emax+1)`, which is also
/// where an overflowing value lands.
fn reference(x: f64, exp_bits: u32, man_bits: u32) -> u32 {
    let sign = (x.is_sign_negative() as u32) << (exp_bits + man_bits);
    let ax = x.abs();
    let inf = ((1u32 << exp_bits) - 1) << man_bits;
    if ax >= decode(inf, exp_bits, man_bits) {
        return sign | inf;
    }
    let (mut lo, mut hi) = (0u32, inf); // decode(lo) <= ax < decode(hi)
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if decode(mid, exp_bits, man_bits) <= ax {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let below = ax - decode(lo, exp_bits, man_bits);
    let above = decode(hi, exp_bits, man_bits) - ax;
    let pick = if below < above {
        lo
    } else if above < below || hi % 2 == 0 {
        hi
    } else {
        lo
    };
    sign | pick
}

/// Xorshift values spread over the exponents around a format's range (including
/// overflow and underflow) with random full 52-bit mantissas, and the same values
/// moved onto the format's ties and one f64 ulp either side of them.
fn samples(exp_lo: i32, exp_hi: i32, man_bits: u32) -> Vec<f64> {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut out = Vec::new();
    for _ in 0..20_000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let e = exp_lo + (s % (exp_hi - exp_lo + 1) as u64) as i32;
        let man = (s >> 12) & ((1 << 52) - 1);
        let sign = (s >> 11) & 1;
        let x = f64::from_bits((sign << 63) | (((1023 + e) as u64) << 52) | man);
        // The same binade's tie: kept bits, then a 1, then zeros.
        let shift = 52 - man_bits;
        let tie = f64::from_bits((x.to_bits() >> shift << shift) | (1 << (shift - 1)));
        let up = f64::from_bits(tie.to_bits() + 1);
        let down = f64::from_bits(tie.to_bits() - 1);
        out.extend([x, tie, up, down]);
    }
    out
}

#[test]
fn the_generic_rounding_matches_rusts_f64_to_f32_cast_everywhere() {
    // f32 is the one 8/23 format with a trusted correctly rounded conversion (`as`):
    // it checks the normal, subnormal, overflow and tie logic of `narrow_bits` itself.
    let mut xs = samples(-160, 130, 23);
    xs.extend([
        0.0,
        -0.0,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        f32::MAX as f64,
        f32::MIN_POSITIVE as f64 * 0.5,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ]);
    for x in xs {
        assert_eq!(
            narrow_bits(x, 8, 23),
            (x as f32).to_bits(),
            "{x:e} ({:#018x})",
            x.to_bits()
        );
    }
}

#[test]
fn the_reference_agrees_with_rusts_f64_to_f32_cast() {
    // The test reference itself, checked where an independent answer exists.
    for x in samples(-160, 130, 23).into_iter().step_by(7) {
        assert_eq!(reference(x, 8, 23), (x as f32).to_bits(), "{x:e}");
    }
}

/// A 16-bit format under test: its conversion, the exponents to sample, its fields.
struct Format {
    name: &'static str,
    convert: fn(f64) -> u16,
    exps: (i32, i32),
    exp_bits: u32,
    man_bits: u32,
}

#[test]
fn bf16_and_f16_round_once_from_the_whole_f64_on_random_ties_and_neighbours() {
    let formats = [
        Format {
            name: "bf16",
            convert: |x| bf16_from_f64(x).to_bits(),
            exps: (-140, 130),
            exp_bits: 8,
            man_bits: 7,
        },
        Format {
            name: "f16",
            convert: |x| f16_from_f64(x).to_bits(),
            exps: (-27, 17),
            exp_bits: 5,
            man_bits: 10,
        },
    ];
    for f in formats {
        for x in samples(f.exps.0, f.exps.1, f.man_bits) {
            let want = reference(x, f.exp_bits, f.man_bits);
            let name = f.name;
            assert_eq!(
                (f.convert)(x) as u32,
                want,
                "{name} of {x:e} ({:#x})",
                x.to_bits()
            );
        }
    }
}

#[test]
fn decoded_patterns_match_half_for_every_finite_bf16_and_f16() {
    // `reference` decodes patterns by formula; widening through `half` is exact.
    for b in 0..0x7f80u32 {
        assert_eq!(
            decode(b, 8, 7),
            half::bf16::from_bits(b as u16).to_f64(),
            "{b:#x}"
        );
    }
    for b in 0..0x7c00u32 {
        assert_eq!(
            decode(b, 5, 10),
            half::f16::from_bits(b as u16).to_f64(),
            "{b:#x}"
        );
    }
}

#[test]
fn bf16_rounds_ties_to_even_and_sees_every_bit_below_a_tie() {
    let cases: [(f64, u16); 11] = [
        (1.0, 0x3f80),
        // Halfway between 0x3f80 and 0x3f81: to the even 0x3f80.
        (1.0 + pow2(-8), 0x3f80),
        // Just above that tie, by a bit in the f64's low 32 (half's from_f64 gives 0x3f80).
        (1.0 + pow2(-8) + pow2(-40), 0x3f81),
        (1.0 + pow2(-8) + pow2(-52), 0x3f81),
        (1.0 + pow2(-8) - pow2(-40), 0x3f80),
        // Halfway between 0x3f81 and 0x3f82: to the even 0x3f82.
        (1.0 + 3.0 * pow2(-8), 0x3f82),
        (1.0 + 3.0 * pow2(-8) - pow2(-45), 0x3f81),
        (-(1.0 + pow2(-8) + pow2(-40)), 0xbf81),
        // A carry out of the mantissa into the next binade: (2 - 2^-9) rounds to 2.
        (2.0 - pow2(-9), 0x4000),
        (0.0, 0x0000),
        (-0.0, 0x8000),
    ];
    for (x, want) in cases {
        assert_eq!(bf16_from_f64(x).to_bits(), want, "bf16 of {x:e}");
    }
}

#[test]
fn bf16_keeps_its_largest_finite_value_and_overflows_from_half_an_ulp_above() {
    let max = (2.0 - pow2(-7)) * pow2(127); // 0x7f7f, 3.3895313892515355e38
    let tie = (2.0 - pow2(-8)) * pow2(127);
    let cases: [(f64, u16); 8] = [
        (max, 0x7f7f),
        (tie - pow2(75), 0x7f7f), // one f64 ulp below the overflow tie
        (tie, 0x7f80),            // the tie rounds to the even side: +∞
        (pow2(128), 0x7f80),
        (f64::MAX, 0x7f80),
        (-f64::MAX, 0xff80),
        (f64::INFINITY, 0x7f80),
        (f64::NEG_INFINITY, 0xff80),
    ];
    for (x, want) in cases {
        assert_eq!(bf16_from_f64(x).to_bits(), want, "bf16 of {x:e}");
    }
}

#[test]
fn bf16_rounds_into_and_out_of_its_subnormals_once() {
    let tiny = pow2(-133); // the smallest subnormal, 0x0001
    let cases: [(f64, u16); 10] = [
        (tiny, 0x0001),
        (tiny * 0.5, 0x0000), // tie between 0 and 0x0001: to even 0
        (tiny * 0.5 * (1.0 + pow2(-52)), 0x0001),
        (-tiny * 0.5, 0x8000),
        (tiny * 1.5, 0x0002), // tie between 0x0001 and 0x0002: to even
        (tiny * 2.5, 0x0002),
        (tiny * 127.0, 0x007f),       // the largest subnormal
        (tiny * 127.5, 0x0080),       // tie: carries into the smallest normal
        (5e-324, 0x0000),             // f64 subnormals are far below bf16's
        (-f64::MIN_POSITIVE, 0x8000), // and so is f64's smallest normal
    ];
    for (x, want) in cases {
        assert_eq!(bf16_from_f64(x).to_bits(), want, "bf16 of {x:e}");
    }
}

#[test]
fn nan_stays_a_quiet_nan_with_its_sign_and_top_payload_bits() {
    let cases: [(u64, u16, u16); 4] = [
        (f64::NAN.to_bits(), 0x7fc0, 0x7e00),
        (0x7ff0_0000_0000_0001, 0x7fc0, 0x7e00), // signalling, payload only in low bits
        (0x7ff4_0000_0000_0000, 0x7fe0, 0x7f00), // signalling, top payload bit kept
        (0xfff8_0000_0000_0000, 0xffc0, 0xfe00),
    ];
    for (b, bf, h) in cases {
        let x = f64::from_bits(b);
        assert_eq!(bf16_from_f64(x).to_bits(), bf, "bf16 of NaN {b:#x}");
        assert_eq!(f16_from_f64(x).to_bits(), h, "f16 of NaN {b:#x}");
    }
}

#[test]
fn f16_rounds_once_at_ties_overflow_and_subnormals() {
    let tiny = pow2(-24); // the smallest f16 subnormal
    let cases: [(f64, u16); 17] = [
        (1.0, 0x3c00),
        (1.0 + pow2(-11), 0x3c00), // tie: to even
        // Just above the tie: half's from_f64 rounds through f32 on x86 (the 2^-40 is
        // lost, leaving the tie) or drops the low 32 bits, giving 0x3c00 either way.
        (1.0 + pow2(-11) + pow2(-40), 0x3c01),
        (1.0 + pow2(-11) + pow2(-25), 0x3c01),
        (1.0 + 3.0 * pow2(-11), 0x3c02),
        (1.0 + 3.0 * pow2(-11) - pow2(-52), 0x3c01),
        (65504.0, 0x7bff), // the largest finite
        (65520.0 - pow2(-37), 0x7bff),
        (65520.0, 0x7c00), // the overflow tie goes to the even side: +∞
        (-1e300, 0xfc00),
        (tiny, 0x0001),
        (tiny * 0.5, 0x0000),
        (tiny * 0.5 * (1.0 + pow2(-52)), 0x0001),
        (tiny * 1.5, 0x0002),
        (tiny * 1023.5, 0x0400), // the largest subnormal's tie carries to 2^-14
        (-0.0, 0x8000),
        (-5e-324, 0x8000),
    ];
    for (x, want) in cases {
        assert_eq!(f16_from_f64(x).to_bits(), want, "f16 of {x:e}");
    }
}
