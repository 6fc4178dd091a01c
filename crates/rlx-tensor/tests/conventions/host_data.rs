//! Typed host data in (`HostData`, `run_host`) and out (`TensorDataExt`), with the
//! errors for a wrong dtype, a wrong length and an unknown name.
#![cfg(feature = "eval")]

use half::{bf16, f16};
use rlx_tensor::{DType, Dim, Error, Func, HostData, TensorData, TensorDataExt, shape};

/// An embedding lookup: i64 token ids (any count) into a 4×3 table.
fn embed() -> Func {
    Func::new("embed", |s| {
        let table = s.param("table", shape![4, 3]);
        let ids = s.input_dyn("ids", &[Dim::Dynamic(0)], DType::I64);
        table.gather(&ids, 0)
    })
    .with_param("table", (0..12).map(|i| i as f32 * 0.5).collect::<Vec<_>>())
}

#[test]
fn i64_token_ids_look_up_embedding_rows_end_to_end() {
    let ids: Vec<i64> = vec![3, 0, 3, 1];
    let out = embed().run_host(&[("ids", HostData::from(&ids))]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dtype, DType::F32);
    assert_eq!(out[0].dims, vec![4, 3]);
    let row = |r: usize| (0..3).map(move |c| (r * 3 + c) as f32 * 0.5);
    let want: Vec<f32> = ids.iter().flat_map(|&r| row(r as usize)).collect();
    assert_eq!(out[0].to_vec_of::<f32>(), want);
}

#[test]
fn a_jitted_embedding_takes_i64_ids_of_any_count() {
    let j = embed().jit();
    let out = j.run_host(&[("ids", HostData::from(&[2i64]))]);
    assert_eq!(out[0].to_vec_of::<f32>(), vec![3.0, 3.5, 4.0]);
    let out = j.run_host(&[("ids", HostData::from(&[1i64, 1][..]))]);
    assert_eq!(
        out[0].to_vec_of::<f32>(),
        vec![1.5, 2.0, 2.5, 1.5, 2.0, 2.5]
    );
}

#[test]
fn outputs_come_back_in_their_own_dtype() {
    let f = Func::multi("typed", |s| {
        let a = s.input("a", shape![I32; 3]);
        let b = s.input("b", shape![F64; 2]);
        vec![&a * 3.0, &b / 4.0]
    });
    let a = [1i32, -2, 7];
    let b = vec![1.0f64, 1e-9];
    let out = f.run_host(&[("a", HostData::from(&a)), ("b", HostData::from(&b))]);
    assert_eq!(out[0].dtype, DType::I32);
    assert_eq!(out[0].to_vec_of::<i32>(), vec![3, -6, 21]);
    assert_eq!(out[1].dtype, DType::F64);
    // 1e-9 / 4 survives only in f64 (it is below f32's precision relative to 1.0 here
    // only by representation, so check exactly).
    assert_eq!(out[1].to_vec_of::<f64>(), vec![0.25, 2.5e-10]);
}

#[test]
fn half_and_byte_inputs_pass_through_exactly() {
    let f = Func::multi("small", |s| {
        let h = s.input("h", shape![F16; 2]);
        let g = s.input("g", shape![BF16; 2]);
        let u = s.input("u", shape![U8; 3]);
        vec![&h * 2.0, &g + 1.0, u.relu()]
    });
    let h = [f16::from_f32(1.5), f16::from_f32(-0.25)];
    let g = vec![bf16::from_f32(2.0), bf16::from_f32(0.5)];
    let u: &[u8] = &[0, 7, 255];
    let out = f.run_host(&[
        ("h", HostData::from(&h)),
        ("g", HostData::from(&g)),
        ("u", HostData::from(u)),
    ]);
    assert_eq!(
        out[0].to_vec_of::<f16>(),
        vec![f16::from_f32(3.0), f16::from_f32(-0.5)]
    );
    assert_eq!(
        out[1].to_vec_of::<bf16>(),
        vec![bf16::from_f32(3.0), bf16::from_f32(1.5)]
    );
    assert_eq!(out[2].to_vec_of::<u8>(), vec![0, 7, 255]);
}

#[test]
fn f32_data_for_an_i64_input_is_an_error_naming_the_input_both_dtypes_and_the_fix() {
    let ids = vec![1.0f32, 2.0];
    let err = embed()
        .try_run_host(&[("ids", HostData::from(&ids))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`ids`"), "{err}");
    assert!(err.contains("i64") && err.contains("f32"), "{err}");
    assert!(err.contains("HostData::I64"), "{err}");
}

#[test]
fn a_wrong_element_count_is_an_error_naming_the_input_and_both_counts() {
    let f = Func::new("sum", |s| s.input("x", shape![I64; 3]).sum_all());
    let err = f
        .try_run_host(&[("x", HostData::from(&[1i64, 2]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`x`"), "{err}");
    assert!(err.contains("needs 3 values, got 2"), "{err}");
    let ok = f.run_host(&[("x", HostData::from(&[1i64, 2, 4]))]);
    assert_eq!(ok[0].to_i64_vec(), vec![7]);
}

#[test]
fn an_unknown_name_is_an_error_listing_the_declared_inputs() {
    let ids = [0i64];
    let err = embed()
        .try_run_host(&[("idz", HostData::from(&ids))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("no input or param named `idz`"), "{err}");
    assert!(err.contains("\"ids\""), "{err}");
    let err = embed().jit().try_run_host(&[("idz", HostData::from(&ids))]);
    assert!(err.is_err());
}

#[test]
fn a_missing_input_and_a_name_given_twice_are_errors() {
    let err = embed().try_run_host(&[]).unwrap_err().to_string();
    assert!(err.contains("missing input `ids`"), "{err}");
    let ids = [0i64];
    let err = embed()
        .try_run_host(&[("ids", HostData::from(&ids)), ("ids", HostData::from(&ids))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("given twice"), "{err}");
}

#[test]
fn the_f32_run_api_still_converts_f32_values_for_integer_inputs() {
    // The published behaviour of `run`: ids passed as f32 values are converted.
    let out = embed().run(&[("ids", &[2.0, 0.0])]);
    assert_eq!(out, vec![vec![3.0, 3.5, 4.0, 0.0, 0.5, 1.0]]);
}

#[test]
fn the_f32_run_api_takes_vecs_slices_and_arrays_in_one_call() {
    let f = Func::new("add", |s| {
        &s.input("a", shape![2]) + &s.input("b", shape![2])
    });
    let a = vec![1.0f32, 2.0];
    let b = [10.0f32, 20.0];
    assert_eq!(
        f.run(&[("a", &a), ("b", b.as_slice())]),
        vec![vec![11.0, 22.0]]
    );
    assert_eq!(f.run(&[("a", &a), ("b", &b)]), vec![vec![11.0, 22.0]]);
    let out = f.run_host(&[("a", (&a).into()), ("b", (&b).into())]);
    assert_eq!(out[0].to_f32_vec(), vec![11.0, 22.0]);
}

#[test]
fn host_data_from_slices_vecs_and_arrays_reports_dtype_and_length() {
    let v = vec![1i32, 2, 3];
    let a = [1u8; 5];
    assert_eq!(HostData::from(&v).dtype(), DType::I32);
    assert_eq!(HostData::from(v.as_slice()).len(), 3);
    assert_eq!(HostData::from(&a), HostData::U8(&[1; 5]));
    assert!(HostData::from(&[0.0f64; 0]).is_empty());
    let d = HostData::from(&[1.0f64, 2.0, 3.0, 4.0])
        .to_tensor_data(&[2, 2])
        .unwrap();
    assert_eq!((d.dtype, d.dims.clone()), (DType::F64, vec![2, 2]));
    assert_eq!(d.to_vec_of::<f64>(), vec![1.0, 2.0, 3.0, 4.0]);
    let err = HostData::from(&v).to_tensor_data(&[2, 2]).unwrap_err();
    assert!(err.to_string().contains("do not fill dims [2, 2]"), "{err}");
}

#[test]
fn typed_readers_refuse_another_dtype_and_borrow_when_aligned() {
    let d = TensorData::from_i64(&[2], &[5, -6]);
    assert_eq!(d.to_vec_of::<i64>(), vec![5, -6]);
    let err = d.try_to_vec_of::<i32>().unwrap_err().to_string();
    assert!(
        err.contains("holds i64") && err.contains("to_vec_of::<i64>"),
        "{err}"
    );
    match d.as_host_data() {
        Some(HostData::I64(v)) => assert_eq!(v, &[5, -6]),
        Some(other) => panic!("wrong variant {other:?}"),
        // A Vec<u8> allocation may be unaligned for i64; then borrowing is refused.
        None => {}
    }
    let bytes = TensorData::new(DType::U8, &[2], vec![9, 8]).unwrap();
    assert_eq!(bytes.as_host_data(), Some(HostData::U8(&[9, 8])));
}

#[test]
fn each_bad_input_has_its_error_kind() {
    let f = embed();
    let (ids, floats, none) = ([0i64, 1], [0.0f32], [0i64; 0]);
    let unknown = f.try_run_host(&[("nope", HostData::from(&ids))]);
    assert!(
        matches!(unknown, Err(Error::UnknownName { .. })),
        "{unknown:?}"
    );
    let dtype = f.try_run_host(&[("ids", HostData::from(&floats))]);
    assert!(matches!(dtype, Err(Error::DType { .. })), "{dtype:?}");
    let g = Func::new("three", |s| s.input("x", shape![I64; 3]).sum_all());
    let shape = g.try_run_host(&[("x", HostData::from(&none))]);
    assert!(matches!(shape, Err(Error::Shape { .. })), "{shape:?}");
    let read = TensorData::from_f32(&[1], &[1.0]).try_to_vec_of::<i64>();
    assert!(matches!(read, Err(Error::DType { .. })), "{read:?}");
}
