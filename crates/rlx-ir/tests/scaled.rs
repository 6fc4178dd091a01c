//! `ScaledFormat` / `ScaleLayout`: exhaustive code-level checks of every named format
//! and a set of custom ones, names, and the oracle semantics of the scaled ops
//! (`tests/scaled/oracle.rs`).

#[path = "scaled/oracle.rs"]
mod oracle;

use rlx_ir::{DType, ScaleLayout, ScaledFormat};

/// Named formats plus customs covering 1-bit exponents, no mantissa, wide exponents,
/// explicit biases (positive, zero, negative), and layouts that collide with named names.
fn formats() -> Vec<ScaledFormat> {
    let mut v = ScaledFormat::NAMED.to_vec();
    v.extend([
        ScaledFormat::custom(3, 0),
        ScaledFormat::custom(1, 0),
        ScaledFormat::custom(1, 6),
        ScaledFormat::custom(2, 2),
        ScaledFormat::custom(4, 3),
        ScaledFormat::custom(5, 2),
        ScaledFormat::custom(7, 0),
        ScaledFormat::custom(2, 1),
        ScaledFormat::custom_with_bias(3, 2, 5),
        ScaledFormat::custom_with_bias(2, 1, -3),
        ScaledFormat::custom_with_bias(4, 3, 0),
        ScaledFormat::custom_with_bias(1, 0, 127),
    ]);
    v
}

/// Every code of `f` (the low `bit_width` bits).
fn codes(f: ScaledFormat) -> impl Iterator<Item = u8> {
    (0..1u32 << f.bit_width()).map(|c| c as u8)
}

#[test]
fn named_formats_have_the_documented_fields_and_ranges() {
    use ScaledFormat::*;
    // (format, exp, mant, bias, max, has_inf, fnuz, native fp8)
    let table = [
        (F8E4M3, 4, 3, 7, 448.0, false, false, true),
        (F8E5M2, 5, 2, 15, 57344.0, true, false, true),
        (F8E4M3Fnuz, 4, 3, 8, 240.0, false, true, true),
        (F8E5M2Fnuz, 5, 2, 16, 57344.0, false, true, true),
        (F6E2M3, 2, 3, 1, 7.5, false, false, false),
        (F6E3M2, 3, 2, 3, 28.0, false, false, false),
        (F4E2M1, 2, 1, 1, 6.0, false, false, false),
    ];
    for (f, e, m, bias, max, inf, fnuz, native) in table {
        assert_eq!(f.fields(), (e, m, bias), "{f}");
        assert_eq!((f.exp_bits(), f.mant_bits(), f.bias()), (e, m, bias));
        assert_eq!(f.bit_width(), 1 + e + m);
        assert_eq!(f.max_finite(), max, "{f}");
        assert_eq!(
            (f.has_inf(), f.is_fnuz(), f.is_native_fp8()),
            (inf, fnuz, native),
            "{f}"
        );
        assert!(f.is_named() && !f.is_custom());
    }
    assert_eq!(
        ScaledFormat::NAMED.map(|f| f.kernel_id()),
        [0, 1, 2, 3, 4, 5, 6]
    );
}

#[test]
fn custom_formats_use_the_ieee_bias_and_are_all_finite() {
    let f = ScaledFormat::custom(3, 0);
    assert_eq!(f.to_string(), "f4e3m0");
    assert_eq!(f.quantize(1.4), 1.0);
    assert_eq!(f.max_finite(), 16.0);
    // Zero-mantissa ties go to the even code: 12 → 8 (field 6), 6 → 8 (field 6), 3 → 2.
    assert_eq!(
        (f.quantize(12.0), f.quantize(6.0), f.quantize(3.0)),
        (8.0, 8.0, 2.0)
    );
    assert_eq!(
        f,
        ScaledFormat::Custom {
            exp_bits: 3,
            mant_bits: 0,
            bias: 3
        }
    );
    assert!(f.is_custom() && !f.is_named() && !f.has_inf() && !f.is_fnuz() && !f.is_native_fp8());
    // custom(4, 3) is all-finite, so it reaches 480 where F8E4M3 has its NaN.
    assert_eq!(ScaledFormat::custom(4, 3).max_finite(), 480.0);
    assert_eq!(ScaledFormat::custom(4, 3).decode(0x7f), 480.0);
    assert!(ScaledFormat::F8E4M3.decode(0x7f).is_nan());
    assert_eq!(ScaledFormat::custom_with_bias(2, 1, -3).max_finite(), 96.0);
    assert_eq!(ScaledFormat::custom(7, 0).max_finite(), 2f32.powi(64));
    for f in formats().into_iter().filter(|f| f.is_custom()) {
        assert!(
            codes(f).all(|c| f.decode(c).is_finite()),
            "{f} has a non-finite code"
        );
    }
}

#[test]
#[should_panic(expected = "8 bits")]
fn custom_rejects_more_than_eight_bits() {
    ScaledFormat::custom(4, 4);
}

#[test]
#[should_panic(expected = "exponent")]
fn custom_rejects_zero_exponent_bits() {
    ScaledFormat::custom(0, 3);
}

#[test]
#[should_panic(expected = "overflows f32")]
fn custom_with_bias_rejects_ranges_beyond_f32() {
    ScaledFormat::custom_with_bias(7, 0, -10);
}

#[test]
fn special_codes_follow_each_formats_conventions() {
    use ScaledFormat::*;
    for c in [0x7f, 0xff] {
        assert!(F8E4M3.decode(c).is_nan());
    }
    assert_eq!(F8E4M3.decode(0x7e), 448.0);
    assert_eq!(F8E5M2.decode(0x7c), f32::INFINITY);
    assert_eq!(F8E5M2.decode(0xfc), f32::NEG_INFINITY);
    for c in [0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff] {
        assert!(F8E5M2.decode(c).is_nan());
    }
    for f in [F8E4M3Fnuz, F8E5M2Fnuz] {
        assert!(f.decode(0x80).is_nan(), "{f}");
        assert_eq!(codes(f).filter(|&c| f.decode(c).is_nan()).count(), 1);
        assert!(codes(f).all(|c| !f.decode(c).is_infinite()));
        // No negative zero: -0.0 and tiny negatives encode as +0.
        assert_eq!(f.encode(-0.0), 0);
        assert_eq!(f.encode(-1e-30), 0);
        assert_eq!(f.quantize(-1e-30).to_bits(), 0);
    }
    assert_eq!(F8E4M3Fnuz.decode(0x7f), 240.0);
    assert_eq!(F8E5M2Fnuz.decode(0x7f), 57344.0);
    // Smallest subnormals: 2^(1 - bias - m).
    assert_eq!(F8E4M3.decode(1), 2f32.powi(-9));
    assert_eq!(F8E4M3Fnuz.decode(1), 2f32.powi(-10));
    assert_eq!(F8E5M2.decode(1), 2f32.powi(-16));
    assert_eq!(F8E5M2Fnuz.decode(1), 2f32.powi(-17));
    assert_eq!(F4E2M1.decode(1), 0.5);
    // Signed zeros elsewhere.
    assert_eq!(F8E4M3.encode(-0.0), 0x80);
    assert_eq!(F8E4M3.encode(-1e-30), 0x80);
    assert_eq!(F4E2M1.encode(-0.0), 0x8);
    assert!(F4E2M1.decode(0x8).is_sign_negative());
    // Bits above the width are ignored.
    assert_eq!(F4E2M1.decode(0xf7), 6.0);
    assert_eq!(F6E3M2.decode(0xc0 | 0x3f), -28.0);
}

#[test]
fn encode_inverts_decode_on_every_code() {
    for f in formats() {
        let sign = 1u8 << (f.bit_width() - 1);
        for c in codes(f) {
            let v = f.decode(c);
            if v.is_nan() {
                continue;
            }
            let want = if v.is_infinite() {
                // Infinities saturate to the largest finite code of the same sign.
                f.encode(f.max_finite()) | (c & sign)
            } else {
                c
            };
            assert_eq!(f.encode(v), want, "{f}: code {c:#04x} = {v}");
            assert_eq!(f.encode_f64(v as f64), want);
        }
    }
}

#[test]
fn representable_values_are_sorted_unique_and_match_decode() {
    for f in formats() {
        let vals = f.representable_values();
        assert!(
            vals.windows(2).all(|w| w[0] < w[1]),
            "{f} not strictly ascending"
        );
        let mut decoded: Vec<f32> = codes(f)
            .map(|c| f.decode(c))
            .filter(|v| v.is_finite())
            .map(|v| if v == 0.0 { 0.0 } else { v })
            .collect();
        decoded.sort_by(f32::total_cmp);
        decoded.dedup();
        assert_eq!(vals, decoded, "{f}");
        assert_eq!(*vals.last().unwrap(), f.max_finite());
        assert_eq!(vals[0], -f.max_finite());
        assert!(
            vals.iter().all(|&v| f.quantize(v) == v),
            "{f} value not a fixed point"
        );
    }
    use ScaledFormat::*;
    // Counts: codes − NaNs − infinities − the duplicate zero.
    assert_eq!(F8E4M3.representable_values().len(), 256 - 2 - 1);
    assert_eq!(F8E5M2.representable_values().len(), 256 - 6 - 2 - 1);
    assert_eq!(F8E4M3Fnuz.representable_values().len(), 256 - 1);
    assert_eq!(
        F4E2M1.representable_values(),
        vec![
            -6.0, -4.0, -3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0
        ]
    );
}

#[test]
fn quantize_is_the_nearest_value_idempotent_and_monotone() {
    for f in formats() {
        let vals: Vec<f64> = f.representable_values().iter().map(|&v| v as f64).collect();
        let max = f.max_finite();
        let mut xs: Vec<f32> = (-3000..=3000)
            .map(|i| i as f32 / 2000.0 * 1.5 * max)
            .collect();
        // Log-spaced magnitudes reach the subnormals.
        xs.extend((0..2000).flat_map(|i| {
            let x = max * 2f32.powf(-(i as f32) * 0.02);
            [x, -x]
        }));
        xs.sort_by(f32::total_cmp);
        let mut prev = f32::NEG_INFINITY;
        for x in xs {
            let q = f.quantize(x);
            assert_eq!(f.quantize(q), q, "{f}: not idempotent at {x}");
            assert!(q >= prev, "{f}: not monotone at {x}");
            prev = q;
            let err = (q as f64 - x as f64).abs();
            let clamped = (x as f64).clamp(-max as f64, max as f64);
            let best = vals
                .iter()
                .map(|v| (v - clamped).abs())
                .fold(f64::INFINITY, f64::min);
            assert!(
                (q as f64 - clamped).abs() <= best,
                "{f}: {x} → {q} (err {err}) is not nearest"
            );
        }
    }
}

#[test]
fn ties_between_adjacent_values_round_to_the_even_code() {
    for f in formats() {
        let vals = f.representable_values();
        for w in vals.windows(2) {
            let (lo, hi) = (w[0] as f64, w[1] as f64);
            let mid = ((lo + hi) / 2.0) as f32;
            assert_eq!(mid as f64, (lo + hi) / 2.0, "midpoint not exact");
            let q = f.quantize(mid);
            assert!(q as f64 == lo || q as f64 == hi, "{f}: tie {mid} → {q}");
            let code = f.encode(mid);
            assert_eq!(
                code & 1,
                0,
                "{f}: tie {mid} between {lo} and {hi} → odd code {code:#x}"
            );
        }
    }
}

#[test]
fn encode_saturates_and_maps_nan_to_zero() {
    for f in formats() {
        let max = f.max_finite();
        let top = f.encode(max);
        for x in [max * 1.0001, max * 4.0, 1e30, f32::MAX, f32::INFINITY] {
            assert_eq!(f.encode(x), top, "{f}: {x}");
            assert_eq!(f.quantize(-x), -max, "{f}: {}", -x);
        }
        assert_eq!(f.encode(f32::NAN), 0);
        assert_eq!(f.encode(-f32::NAN), 0);
        assert_eq!(f.quantize(f32::NAN), 0.0);
    }
    // E4M3: 464 is the tie between 448 and the (NaN) 480 slot: saturates to 448.
    assert_eq!(ScaledFormat::F8E4M3.quantize(464.0), 448.0);
    assert_eq!(ScaledFormat::F8E4M3.quantize(479.0), 448.0);
    // E5M2: values that IEEE would round to Inf saturate.
    assert_eq!(ScaledFormat::F8E5M2.quantize(61440.0), 57344.0);
    assert_eq!(ScaledFormat::F8E5M2.encode(f32::NEG_INFINITY), 0xfb);
}

#[test]
fn display_and_from_str_round_trip() {
    let mut all = formats();
    for e in 1..=7u8 {
        for m in 0..=(7 - e) {
            all.push(ScaledFormat::custom(e, m));
        }
    }
    for f in all {
        let s = f.to_string();
        assert_eq!(s.parse::<ScaledFormat>(), Ok(f), "{s}");
        assert_eq!(s.to_uppercase().parse::<ScaledFormat>(), Ok(f), "{s}");
    }
    use ScaledFormat::*;
    let names = [
        (F8E4M3, "f8e4m3"),
        (F8E5M2, "f8e5m2"),
        (F8E4M3Fnuz, "f8e4m3fnuz"),
        (F8E5M2Fnuz, "f8e5m2fnuz"),
        (F6E2M3, "f6e2m3"),
        (F6E3M2, "f6e3m2"),
        (F4E2M1, "f4e2m1"),
    ];
    for (f, n) in names {
        assert_eq!(f.to_string(), n);
    }
    // Customs whose plain name belongs to a named format, or with a non-IEEE bias, carry
    // their bias so that parsing gives them back.
    assert_eq!(ScaledFormat::custom(4, 3).to_string(), "f8e4m3b7");
    assert_eq!(ScaledFormat::custom(2, 1).to_string(), "f4e2m1b1");
    assert_eq!(
        ScaledFormat::custom_with_bias(2, 1, -3).to_string(),
        "f4e2m1b-3"
    );
    assert_eq!(
        ScaledFormat::custom_with_bias(3, 2, 5).to_string(),
        "f6e3m2b5"
    );
    assert_eq!(ScaledFormat::custom(1, 6).to_string(), "f8e1m6");
    assert_eq!(
        " f5e2m2 ".parse::<ScaledFormat>(),
        Ok(ScaledFormat::custom(2, 2))
    );
    for bad in [
        "",
        "f8",
        "fp8",
        "e4m3",
        "f8e4m4",
        "f9e4m4",
        "f8e0m7",
        "f8e8m0",
        "f8e4m3b200",
        "f8e7m0b-10",
        "f8e4m3fn",
        "f8e4m3b",
    ] {
        let err = bad.parse::<ScaledFormat>().expect_err(bad);
        assert!(err.message.contains("fNeXmY"), "{bad}: {err}");
    }
}

#[test]
fn kernel_ids_are_distinct() {
    let mut all: Vec<ScaledFormat> = ScaledFormat::NAMED.to_vec();
    for e in 1..=7u8 {
        for m in 0..=(7 - e) {
            for bias in [-1i8, 0, 1, 3, 7, 15, 63, 127] {
                // A bias of -1 with 7 exponent bits would overflow f32.
                if (1i32 << e) - 1 - bias as i32 <= 127 {
                    all.push(ScaledFormat::custom_with_bias(e, m, bias));
                }
            }
        }
    }
    let mut ids: Vec<u32> = all.iter().map(|f| f.kernel_id()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), all.len());
}

#[test]
fn scale_layout_accessors() {
    use ScaleLayout::*;
    assert_eq!(ScaleLayout::mx(), BlockMxE8M0 { block: 32 });
    assert_eq!(ScaleLayout::nvfp4(), Nvfp4 { group: 16 });
    assert_eq!(PerTensor.scale_dtype(), DType::F32);
    assert_eq!(ScaleLayout::mx().scale_dtype(), DType::U8);
    assert_eq!(ScaleLayout::nvfp4().scale_dtype(), DType::U8);
    assert_eq!(PerTensor.block(), None);
    assert_eq!(BlockMxE8M0 { block: 64 }.block(), Some(64));
    assert_eq!(Nvfp4 { group: 8 }.block(), Some(8));
    assert_eq!(PerTensor.mode_block(), (0, 0));
    assert_eq!(ScaleLayout::mx().mode_block(), (1, 32));
    assert_eq!(ScaleLayout::nvfp4().mode_block(), (2, 16));
}

#[test]
fn scale_layout_display_and_from_str() {
    use ScaleLayout::*;
    for (l, s) in [
        (PerTensor, "per_tensor"),
        (BlockMxE8M0 { block: 32 }, "mx_e8m0/32"),
        (Nvfp4 { group: 16 }, "nvfp4/16"),
        (BlockMxE8M0 { block: 7 }, "mx_e8m0/7"),
    ] {
        assert_eq!(l.to_string(), s);
        assert_eq!(s.parse::<ScaleLayout>(), Ok(l));
    }
    for (s, l) in [
        ("per_tensor", PerTensor),
        ("pertensor", PerTensor),
        ("mx", ScaleLayout::mx()),
        ("mxfp8", ScaleLayout::mx()),
        ("block", ScaleLayout::mx()),
        ("nvfp4", ScaleLayout::nvfp4()),
        ("mx/64", BlockMxE8M0 { block: 64 }),
        ("mx_e8m0/16", BlockMxE8M0 { block: 16 }),
        ("nvfp4/32", Nvfp4 { group: 32 }),
        ("  NVFP4/8 ", Nvfp4 { group: 8 }),
    ] {
        assert_eq!(s.parse::<ScaleLayout>(), Ok(l), "{s}");
    }
    for bad in [
        "",
        "mx/0",
        "mx/",
        "nvfp4/x",
        "tile",
        "per-tensor",
        "e8m0/32",
        "mx/-1",
        "nvfp4/16/2",
    ] {
        assert!(bad.parse::<ScaleLayout>().is_err(), "{bad} accepted");
    }
}
