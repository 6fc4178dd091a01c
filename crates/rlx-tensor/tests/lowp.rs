//! `rlx_tensor::lowp`: the quantizer entry points, the built-in formats, the
//! `float_format!` macro, and `parse_format`.

use rlx_tensor::lowp::{
    self, BUILTIN, Bf16, F6E3M2, F8E4M3, F8E5M2, F16, FloatFormat, Nvf4, parse_format, quantize,
    quantize_slice, quantize_slice_scaled,
};

#[test]
fn spec_examples_hold() {
    assert_eq!(quantize(5.0, 2, 1, 6.0), 4.0);
    assert_eq!(quantize(2.5, 2, 1, 6.0), 2.0);
    assert_eq!(quantize(1.1, 4, 3, 448.0), 1.125);
    assert_eq!(quantize(1.0 + 2f32.powi(-11), 5, 10, 65504.0), 1.0);
    for g in [0.0f32, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0] {
        assert_eq!(Nvf4::quantize(g), g);
        assert_eq!(Nvf4::quantize(-g), -g);
    }
    // Unscaled, small values vanish under nvf4 (its smallest step is 0.5).
    for x in [0.02f32, -0.02, 0.1, 0.24] {
        assert_eq!(Nvf4::quantize(x), 0.0, "{x}");
    }
}

#[test]
fn quantize_follows_the_special_value_rules() {
    assert_eq!(quantize(-0.0, 4, 3, 448.0).to_bits(), (-0.0f32).to_bits());
    assert!(quantize(f32::NAN, 4, 3, 448.0).is_nan());
    assert_eq!(quantize(1e-40, 8, 7, 3.3895314e38), 0.0);
    assert_eq!(quantize(f32::NEG_INFINITY, 4, 3, 448.0), -448.0);
    assert_eq!(quantize(1e6, 5, 2, 57344.0), 57344.0);
    // Target subnormals are kept: e4m3's smallest step is 2^-9.
    assert_eq!(
        quantize(3.0 * 2f32.powi(-9), 4, 3, 448.0),
        3.0 * 2f32.powi(-9)
    );
    assert_eq!(quantize(2f32.powi(-10), 4, 3, 448.0), 0.0); // tie → even (0)
}

#[test]
fn builtin_table_lists_the_six_formats_in_order() {
    assert_eq!(
        BUILTIN,
        &[
            ("f16", 5, 10, 65504.0),
            ("bf16", 8, 7, 3.3895314e38),
            ("f8e4m3", 4, 3, 448.0),
            ("bf8", 5, 2, 57344.0),
            ("nvf4", 2, 1, 6.0),
            ("f6e3m2", 3, 2, 28.0),
        ]
    );
    // Each marker type agrees with its table row and with parse_format.
    fn row<T: FloatFormat>() -> (&'static str, u32, u32, f32) {
        (T::NAME, T::EXP_BITS, T::MAN_BITS, T::MAX_NORMAL)
    }
    let rows = [
        row::<F16>(),
        row::<Bf16>(),
        row::<F8E4M3>(),
        row::<F8E5M2>(),
        row::<Nvf4>(),
        row::<F6E3M2>(),
    ];
    assert_eq!(&rows[..], BUILTIN);
    for (name, e, m, max) in BUILTIN {
        assert_eq!(parse_format(name), Some((*e, *m, *max)), "{name}");
    }
    assert_eq!(
        [
            F16::BITS,
            Bf16::BITS,
            F8E4M3::BITS,
            F8E5M2::BITS,
            Nvf4::BITS,
            F6E3M2::BITS
        ],
        [16, 16, 8, 8, 4, 6]
    );
}

#[test]
fn builtin_quantize_matches_the_free_function() {
    for i in -2000..2000 {
        let x = i as f32 * 0.173;
        assert_eq!(F16::quantize(x), quantize(x, 5, 10, 65504.0));
        assert_eq!(Bf16::quantize(x), quantize(x, 8, 7, 3.3895314e38));
        assert_eq!(F8E4M3::quantize(x), quantize(x, 4, 3, 448.0));
        assert_eq!(F8E5M2::quantize(x), quantize(x, 5, 2, 57344.0));
        assert_eq!(F6E3M2::quantize(x), quantize(x, 3, 2, 28.0));
        assert_eq!(F16::quantize(x), half::f16::from_f32(x).to_f32());
    }
}

mod custom_formats {
    rlx_tensor::float_format! {
        /// A 5-bit format with a 2-bit mantissa.
        F5E2M2 = (2, 2, 7.0, "f5e2m2");
        #[allow(dead_code)]
        F7E4M2 = (4, 2, 2.0 * 112.0, "f7e4m2");
    }
}

#[test]
fn float_format_macro_generates_types_and_a_table() {
    use custom_formats::{F5E2M2, F7E4M2};
    assert_eq!(
        custom_formats::BUILTIN,
        &[("f5e2m2", 2, 2, 7.0), ("f7e4m2", 4, 2, 224.0)]
    );
    assert_eq!((F5E2M2::BITS, F7E4M2::BITS), (5, 7));
    assert_eq!(F5E2M2::NAME, "f5e2m2");
    // bias 1: grid 0, .25, .5, .75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7.
    assert_eq!(F5E2M2::quantize(1.1), 1.0);
    assert_eq!(F5E2M2::quantize(4.6), 5.0);
    assert_eq!(F5E2M2::quantize(100.0), 7.0);
    assert_eq!(F7E4M2::quantize(300.0), 224.0);
    // The derives are there.
    fn derives<T: Clone + Copy + std::fmt::Debug + Default>() -> String {
        format!("{:?}", T::default().clone())
    }
    assert_eq!(derives::<F5E2M2>(), "F5E2M2");
}

#[test]
fn quantize_slice_rounds_every_element() {
    let mut xs = vec![5.0f32, 2.5, 0.02, -7.0, 1.3, f32::NAN];
    quantize_slice(&mut xs, 2, 1, 6.0);
    assert_eq!(&xs[..5], &[4.0, 2.0, 0.0, -6.0, 1.5]);
    assert!(xs[5].is_nan());
}

#[test]
fn quantize_slice_scaled_maps_the_absmax_exactly() {
    let mut xs = vec![0.02f32, -0.013, 0.0071, 0.0033, -0.0005];
    let orig = xs.clone();
    quantize_slice_scaled(&mut xs, 2, 1, 6.0);
    // s = 0.02 / 6: the absmax survives exactly, and nothing vanishes that nvf4 would keep.
    assert_eq!(xs[0], 0.02);
    let s = 0.02f32 as f64 / 6.0;
    for (x, o) in xs.iter().zip(&orig) {
        let want = (quantize((*o as f64 / s) as f32, 2, 1, 6.0) as f64 * s) as f32;
        assert_eq!(*x, want, "{o}");
    }
    assert!(
        (xs[1] - (-4.0 * s) as f32).abs() < 1e-9,
        "−0.013 → 3.9 steps → −4·s"
    );
    // Many magnitudes: every slice's absmax element round-trips exactly.
    for (e, m, max) in [
        (2, 1, 6.0),
        (4, 3, 448.0),
        (5, 2, 57344.0),
        (3, 2, 28.0),
        (5, 10, 65504.0),
    ] {
        for k in -30..30 {
            let a = 1.37f32 * 2f32.powi(k) + k as f32 * 1e-3 * 2f32.powi(k);
            let mut v = vec![a * 0.3, -a, a * 0.77, a * 0.01];
            quantize_slice_scaled(&mut v, e, m, max);
            assert_eq!(v[1], -a, "({e},{m}) absmax {a}");
            assert!(v.iter().all(|x| x.abs() <= a));
        }
    }
}

#[test]
fn quantize_slice_scaled_leaves_zero_slices_alone() {
    let mut zeros = vec![0.0f32, -0.0, 0.0];
    quantize_slice_scaled(&mut zeros, 4, 3, 448.0);
    assert_eq!(
        zeros.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        vec![0, (-0.0f32).to_bits(), 0]
    );
    let mut empty: Vec<f32> = vec![];
    quantize_slice_scaled(&mut empty, 4, 3, 448.0);
    // Non-finite values do not set the scale; an infinity saturates to ±absmax.
    let mut v = vec![f32::INFINITY, 1.0, -0.5, f32::NAN];
    quantize_slice_scaled(&mut v, 2, 1, 6.0);
    assert_eq!(&v[..3], &[1.0, 1.0, -0.5]);
    assert!(v[3].is_nan());
}

#[test]
fn parse_format_covers_names_generic_forms_and_rejects() {
    type Case = (&'static str, Option<(u32, u32, f32)>);
    let cases: &[Case] = &[
        ("f16", Some((5, 10, 65504.0))),
        ("HALF", Some((5, 10, 65504.0))),
        ("fp16", Some((5, 10, 65504.0))),
        ("bf16", Some((8, 7, 3.3895314e38))),
        ("f8", Some((4, 3, 448.0))),
        ("fp8", Some((4, 3, 448.0))),
        ("e4m3", Some((4, 3, 448.0))),
        ("f8e4m3", Some((4, 3, 448.0))),
        ("bf8", Some((5, 2, 57344.0))),
        ("e5m2", Some((5, 2, 57344.0))),
        ("f8e5m2", Some((5, 2, 57344.0))),
        ("f6", Some((2, 3, 7.5))),
        ("fp6", Some((2, 3, 7.5))),
        ("e2m3", Some((2, 3, 7.5))),
        ("e3m2", Some((3, 2, 28.0))),
        ("f4", Some((2, 1, 6.0))),
        ("fp4", Some((2, 1, 6.0))),
        ("e2m1", Some((2, 1, 6.0))),
        (" nvf4 ", Some((2, 1, 6.0))),
        ("f4e3m0", Some((3, 0, 16.0))),
        ("f6e3m2", Some((3, 2, 28.0))),
        ("f8e4m3fnuz", Some((4, 3, 240.0))),
        ("f8e5m2fnuz", Some((5, 2, 57344.0))),
        ("f8m3e4", Some((4, 3, 240.0))),
        ("f4m1e2", Some((2, 1, 3.0))),
        ("f16m10e5", Some((5, 10, 65504.0))),
        ("f8m4e4", None),
        ("f8e4m4", None),
        ("f16e5m10", None),
        ("fp32", None),
        ("", None),
        ("f8m3e4x", None),
    ];
    for (spec, want) in cases {
        assert_eq!(parse_format(spec), *want, "{spec:?}");
    }
}

#[test]
fn lowp_module_path_is_public() {
    // The functions are reachable through the module path as documented.
    assert_eq!(lowp::quantize(3.3, 2, 1, 6.0), 3.0);
}
