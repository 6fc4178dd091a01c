//! Every dtype through the public API, computed on the compiled CPU backend:
//! constructors, typed readers, casts, integer arithmetic (wrap-around, division,
//! remainder), comparisons, f16/bf16 rounding on store, and the errors for op/dtype
//! combinations that are not defined.
//!
//! Every tensor here has more than 64 elements (`R` copies of the listed values), so it
//! reaches the compiled program as an argument: smaller constants would be folded at
//! compile time by the oracle and the CPU kernels would never run.
#![cfg(feature = "eval")]

use rlx_ir::TensorData;
use rlx_tensor::{Activation, DType, Device, Tensor};

const REAL: [DType; 11] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U32,
    DType::Bool,
];

/// Copies of every listed value (rows of the test tensors).
const R: usize = 70;

fn rep<T: Clone>(v: &[T]) -> Vec<T> {
    v.iter().cloned().cycle().take(R * v.len()).collect()
}

/// `[R, v.len()]` of `dt` from integers (wrapping into `dt`).
fn ints(v: &[i64], dt: DType) -> Tensor {
    Tensor::from_data(TensorData::from_i64_as(dt, &[R, v.len()], &rep(v)))
}

/// `[R, v.len()]` of `dt` from f64 values (rounded/truncated into `dt`).
fn vals(v: &[f64], dt: DType) -> Tensor {
    Tensor::from_f64_as(rep(v), [R, v.len()], dt)
}

/// A computed copy of `t` (so reading it compiles and runs a program instead of
/// returning the constant's bytes).
fn computed(t: &Tensor) -> Tensor {
    t.cast(DType::F64).cast(t.dtype())
}

#[test]
fn constructors_store_every_dtype_in_its_own_width() {
    let n = R * 2;
    let f = Tensor::from_vec(rep(&[1.0f32, 2.0]), [R, 2]);
    assert_eq!(f.dtype(), DType::F32);
    assert_eq!((&f * 2.0).to_vec(), rep(&[2.0, 4.0]));
    let d = Tensor::from_f64(rep(&[0.1, 2.0]), [R, 2]);
    assert_eq!(d.dtype(), DType::F64);
    assert_eq!((&d * 2.0).to_vec_f64(), rep(&[0.2, 4.0]));
    let i = Tensor::from_i64(rep(&[1, -2]), [R, 2]);
    assert_eq!(i.dtype(), DType::I64);
    assert_eq!((&i * 3).to_vec_i64(), rep(&[3, -6]));
    let idx = Tensor::index_vec(rep(&[3, 1]));
    assert_eq!((idx.dtype(), idx.dims()), (DType::I64, vec![n]));
    for dt in REAL {
        let t = vals(&[1.0, 0.0, 3.0], dt);
        assert_eq!(t.dtype(), dt);
        let c = computed(&t);
        assert!(c.explain().contains("kernel 0"), "{dt}: {}", c.explain());
        let d = c.to_data();
        assert_eq!(d.dtype, dt);
        assert_eq!(
            d.bytes.len(),
            3 * R * dt.size_bytes(),
            "{dt} stored in its own width"
        );
    }
}

#[test]
fn typed_readers_return_exact_values_for_every_real_dtype() {
    for dt in REAL {
        let v: Vec<f64> = if dt == DType::Bool {
            vec![1.0, 0.0, 1.0, 1.0]
        } else if dt.is_unsigned() {
            vec![0.0, 7.0, 200.0, 1.0]
        } else {
            vec![-3.0, 0.0, 100.0, -1.0]
        };
        let t = computed(&vals(&v, dt));
        assert_eq!(t.to_vec_f64(), rep(&v), "{dt}");
        let as_int: Vec<i64> = v.iter().map(|&x| x as i64).collect();
        assert_eq!(t.to_vec_i64(), rep(&as_int), "{dt}");
        let as_i32: Vec<i32> = as_int.iter().map(|&x| x as i32).collect();
        assert_eq!(t.to_vec_i32(), rep(&as_i32), "{dt}");
        let truth: Vec<bool> = v.iter().map(|&x| x != 0.0).collect();
        assert_eq!(t.to_vec_bool(), rep(&truth), "{dt}");
    }
}

#[test]
fn i64_and_f64_extremes_survive_from_i64_and_from_f64() {
    let t = Tensor::from_i64(rep(&[i64::MAX, i64::MIN, -1]), [R, 3]);
    assert_eq!((&t + 0).to_vec_i64(), rep(&[i64::MAX, i64::MIN, -1]));
    let f = Tensor::from_f64(rep(&[1e300, -2.5e-300, 0.1]), [R, 3]);
    assert_eq!((&f * 1.0).to_vec_f64(), rep(&[1e300, -2.5e-300, 0.1]));
}

#[test]
fn float_to_int_casts_truncate_toward_zero_saturate_and_send_nan_to_zero() {
    let x = vals(&[-2.7, -0.5, 0.5, 2.7, 300.0, -300.0, f64::NAN], DType::F32);
    let cases: [(DType, [i64; 7]); 6] = [
        (DType::I8, [-2, 0, 0, 2, 127, -128, 0]),
        (DType::U8, [0, 0, 0, 2, 255, 0, 0]),
        (DType::I16, [-2, 0, 0, 2, 300, -300, 0]),
        (DType::I32, [-2, 0, 0, 2, 300, -300, 0]),
        (DType::U32, [0, 0, 0, 2, 300, 0, 0]),
        (DType::I64, [-2, 0, 0, 2, 300, -300, 0]),
    ];
    for (dt, want) in cases {
        let c = x.cast(dt);
        assert_eq!(c.dtype(), dt);
        assert_eq!(c.to_vec_i64(), rep(&want), "{dt}");
    }
    let as_i32: Vec<i32> = [-2, 0, 0, 2, 300, -300, 0].to_vec();
    assert_eq!(x.cast(DType::I32).to_vec_i32(), rep(&as_i32));
    // Bool is `x != 0` (NaN is not zero).
    assert_eq!(x.cast(DType::Bool).to_vec_bool(), vec![true; 7 * R]);
    let big = vals(&[1e30, -1e30], DType::F64);
    assert_eq!(
        big.cast(DType::I64).to_vec_i64(),
        rep(&[i64::MAX, i64::MIN])
    );
}

#[test]
fn casts_to_narrow_floats_round_to_nearest_even() {
    let u = |k: i32| 2f64.powi(k);
    let x = vals(
        &[1.0 + u(-11), 1.0 + 3.0 * u(-11), 65520.0, 1e-8],
        DType::F64,
    );
    assert_eq!(
        x.cast(DType::F16).to_vec_f64(),
        rep(&[1.0, 1.0 + u(-9), f64::INFINITY, 0.0])
    );
    let y = vals(&[1.0 + u(-8), 1.0 + 3.0 * u(-8), 3.0e38], DType::F64);
    assert_eq!(
        y.cast(DType::BF16).to_vec_f64(),
        rep(&[1.0, 1.0 + u(-6), half::bf16::from_f64(3.0e38).to_f64()])
    );
    // Integers above 2²⁴ round once into f32.
    let i = ints(
        &[(1 << 24) + 1, (1 << 24) + 3, -((1 << 24) + 1)],
        DType::I64,
    );
    assert_eq!(
        i.cast(DType::F32).to_vec_f64(),
        rep(&[16777216.0, 16777220.0, -16777216.0])
    );
}

#[test]
fn f16_and_bf16_results_are_rounded_after_every_op() {
    // 2048 + 1 is a tie in f16 (spacing 2) and rounds to 2048, so (a + b) − a is 0;
    // without rounding the intermediate it would be 1.
    let a = vals(&[2048.0, 2048.0], DType::F16);
    let b = vals(&[1.0, 3.0], DType::F16);
    let s = &a + &b;
    assert_eq!(s.to_vec_f64(), rep(&[2048.0, 2052.0]));
    assert_eq!((&(&a + &b) - &a).to_vec_f64(), rep(&[0.0, 4.0]));
    let a = vals(&[256.0, 256.0], DType::BF16);
    let b = vals(&[1.0, 3.0], DType::BF16);
    assert_eq!(((&a + &b) - &a).to_vec_f64(), rep(&[0.0, 4.0]));
    // exp in f16: correctly rounded from the f32 value.
    let e = vals(&[1.0], DType::F16).exp();
    assert_eq!(e.dtype(), DType::F16);
    let want = half::f16::from_f64(std::f64::consts::E).to_f64();
    assert_eq!(e.to_vec_f64(), rep(&[want]));
    assert_eq!(e.to_data().bytes.len(), 2 * R);
}

#[test]
fn integer_arithmetic_wraps_in_the_storage_width() {
    assert_eq!(
        (&ints(&[127, -128], DType::I8) + 1).to_vec_i64(),
        rep(&[-128, -127])
    );
    assert_eq!(
        (&ints(&[0, 255], DType::U8) - 1).to_vec_i64(),
        rep(&[255, 254])
    );
    let s = ints(&[300], DType::I16);
    assert_eq!((&s * &s).to_vec_i64(), rep(&[24464]));
    assert_eq!(
        (&ints(&[i32::MAX as i64], DType::I32) + 1).to_vec_i32(),
        rep(&[i32::MIN])
    );
    assert_eq!(
        (&ints(&[0], DType::U32) - 1).to_vec_i64(),
        rep(&[u32::MAX as i64])
    );
    assert_eq!(
        (&ints(&[i64::MAX], DType::I64) + 1).to_vec_i64(),
        rep(&[i64::MIN])
    );
    // A float scalar next to an integer tensor takes the tensor's dtype (truncated).
    assert_eq!((&ints(&[10], DType::I64) + 2.7).to_vec_i64(), rep(&[12]));
    assert_eq!(ints(&[-5, 5], DType::I8).abs().to_vec_i64(), rep(&[5, 5]));
    assert_eq!((-&ints(&[-128], DType::I8)).to_vec_i64(), rep(&[-128]));
}

#[test]
fn integer_division_truncates_toward_zero_and_rem_takes_the_dividends_sign() {
    for dt in [DType::I8, DType::I16, DType::I32, DType::I64] {
        let a = ints(&[-7, 7, -7, 7, 0], dt);
        let b = ints(&[2, 2, -2, -2, 3], dt);
        assert_eq!((&a / &b).to_vec_i64(), rep(&[-3, 3, 3, -3, 0]), "{dt}");
        assert_eq!(a.rem(&b).to_vec_i64(), rep(&[-1, 1, -1, 1, 0]), "{dt}");
    }
    for dt in [DType::U8, DType::U32] {
        let a = ints(&[7, 200, 5], dt);
        let b = ints(&[2, 7, 9], dt);
        assert_eq!((&a / &b).to_vec_i64(), rep(&[3, 28, 0]), "{dt}");
        assert_eq!(a.rem(&b).to_vec_i64(), rep(&[1, 4, 5]), "{dt}");
    }
    // Float division and fmod for comparison.
    let f = vals(&[-7.0, 7.5], DType::F32);
    assert_eq!((&f / 2.0).to_vec(), rep(&[-3.5f32, 3.75]));
    assert_eq!(f.rem(2.0).to_vec(), rep(&[-1.0f32, 1.5]));
}

#[test]
fn integer_division_by_zero_is_an_error_naming_the_op() {
    for dt in [DType::I32, DType::U8, DType::I64] {
        let q = &ints(&[1, 2], dt) / &ints(&[1, 0], dt);
        let err = q.try_to_data().unwrap_err().to_string();
        assert!(err.contains("div"), "{dt}: {err}");
        assert!(err.contains("zero"), "{dt}: {err}");
    }
}

#[test]
fn comparisons_give_bool_for_every_real_dtype() {
    for dt in REAL {
        let a = vals(&[0.0, 1.0, 1.0], dt);
        let b = vals(&[1.0, 1.0, 0.0], dt);
        let checks = [
            (a.lt(&b), [true, false, false]),
            (a.le(&b), [true, true, false]),
            (a.gt(&b), [false, false, true]),
            (a.ge(&b), [false, true, true]),
            (a.eq(&b), [false, true, false]),
            (a.ne(&b), [true, false, true]),
        ];
        for (i, (m, want)) in checks.into_iter().enumerate() {
            assert_eq!(m.dtype(), DType::Bool, "{dt} comparison {i}");
            assert_eq!(m.to_vec_bool(), rep(&want), "{dt} comparison {i}");
        }
    }
    // Mixed dtypes compare exactly (no rounding of either side).
    let big = ints(&[(1 << 24) + 1], DType::I64);
    let f = vals(&[16777216.0], DType::F32);
    assert_eq!(big.gt(&f).to_vec_bool(), vec![true; R]);
}

#[test]
fn where_and_masks_select_in_every_dtype() {
    let m = vals(&[1.0, -1.0, 2.0], DType::F32).gt(0.0);
    for dt in REAL {
        let r = m.where_(&vals(&[1.0; 3], dt), &vals(&[0.0; 3], dt));
        assert_eq!(r.dtype(), dt);
        assert_eq!(r.to_vec_f64(), rep(&[1.0, 0.0, 1.0]), "{dt}");
    }
}

#[test]
fn index_vec_gathers_rows_of_every_real_dtype() {
    // Row r of the table is [r mod 2, r mod 3 == 0] (0/1 so that every dtype holds it).
    let data: Vec<f64> = (0..R)
        .flat_map(|r| [(r % 2) as f64, (r % 3 == 0) as u8 as f64])
        .collect();
    for dt in REAL {
        let table = Tensor::from_f64_as(&data, [R, 2], dt);
        let g = table.gather(&Tensor::index_vec(rep(&[2, 0, 69])), 0);
        assert_eq!(g.dtype(), dt);
        assert_eq!(g.dims(), vec![3 * R, 2]);
        assert_eq!(g.to_vec_f64(), rep(&[0.0, 0.0, 0.0, 1.0, 1.0, 1.0]), "{dt}");
    }
}

#[test]
fn reductions_of_integers_stay_integers() {
    let t = ints(&[100, 100, 100, -5], DType::I8);
    // The sum wraps in i8 like every other i8 result: 295 → 39.
    let s = t.sum(vec![1], false);
    assert_eq!(s.dtype(), DType::I8);
    assert_eq!(s.to_vec_i64(), vec![39; R]);
    let w = ints(&[100, 100, 100, -5], DType::I32);
    assert_eq!(w.sum(vec![1], false).to_vec_i32(), vec![295; R]);
    assert_eq!(w.max(vec![1], false).to_vec_i32(), vec![100; R]);
    assert_eq!(w.argmin(1, false).to_vec_i64(), vec![3; R]);
}

/// `err` names each needle (case-insensitively).
fn assert_names(err: &str, needles: &[&str]) {
    let lower = err.to_lowercase();
    for n in needles {
        assert!(
            lower.contains(&n.to_lowercase()),
            "`{err}` does not mention `{n}`"
        );
    }
}

#[test]
fn unsupported_op_dtype_combinations_name_the_op_the_dtype_and_the_fix() {
    let i = ints(&[1, 2], DType::I32);
    let b = Tensor::from_vec(vec![1.0, -1.0], [2]).gt(0.0);
    let u = ints(&[1, 2], DType::U8);
    let e = i.try_activation(Activation::Exp).unwrap_err().to_string();
    assert_names(&e, &["exp", "i32", "cast"]);
    let e = i
        .try_activation(Activation::Sigmoid)
        .unwrap_err()
        .to_string();
    assert_names(&e, &["sigmoid", "i32", "cast"]);
    let e = b.try_add(&b).unwrap_err().to_string();
    assert_names(&e, &["add", "bool", "cast"]);
    let e = b.try_activation(Activation::Neg).unwrap_err().to_string();
    assert_names(&e, &["neg", "bool", "cast"]);
    let e = i.try_atan2(&i).unwrap_err().to_string();
    assert_names(&e, &["atan2", "i32", "cast"]);
    let e = u.try_softmax(-1).unwrap_err().to_string();
    assert_names(&e, &["softmax", "u8", "cast"]);
    let e = i.try_round_to_format(4, 3, 448.0).unwrap_err().to_string();
    assert_names(&e, &["round_to_format", "i32", "cast"]);
    let e = i.try_layer_norm(&i, &i, 1e-5).unwrap_err().to_string();
    assert_names(&e, &["layer_norm", "i32", "cast"]);
    let c = Tensor::from_data(TensorData::from_f64_as(
        DType::C64,
        &[2],
        &[1.0, 0.0, 2.0, 0.0],
    ));
    let e = c.try_lt(&c).unwrap_err().to_string();
    assert_names(&e, &["lt", "c64", "compare"]);
    let e = c.try_activation(Activation::Relu).unwrap_err().to_string();
    assert_names(&e, &["relu", "c64", "cast"]);
}

#[test]
fn every_dtype_runs_on_the_explicit_cpu_device() {
    for dt in REAL {
        let t = computed(&vals(&[1.0, 0.0], dt));
        let d = t.try_to_data_on(Device::Cpu).unwrap();
        assert_eq!(d.to_f64_vec(), rep(&[1.0, 0.0]), "{dt}");
    }
}
