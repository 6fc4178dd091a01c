//! The error kinds users match on: each mistake lands in its kind, the text still names the
//! op and the fix, and I/O and parser causes are reachable through `source()`.

use rlx_tensor::{DType, Error, Func, Tensor, shape};
use std::error::Error as _;

fn quadratic() -> Func {
    Func::new("quad", |s| {
        let w = s.param("w", shape![2]);
        let d = &w - 3.0;
        (&d * &d).sum_all()
    })
    .with_param("w", vec![0.0, 1.0])
}

#[test]
fn mismatched_matmul_shapes_are_a_shape_error_naming_the_op() {
    let e = Tensor::ones([2, 3])
        .try_matmul(&Tensor::ones([4, 5]))
        .unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("matmul"), "{e}");
}

#[test]
fn mixing_dtypes_is_a_dtype_error_that_says_to_cast() {
    let ints = Tensor::ones([3, 4]).cast(DType::I64);
    let e = Tensor::ones([2, 3]).try_matmul(&ints).unwrap_err();
    assert!(matches!(e, Error::DType { .. }), "{e:?}");
    assert!(e.to_string().contains("cast"), "{e}");
}

#[test]
fn a_reduction_over_a_missing_axis_is_a_shape_error() {
    let e = Tensor::ones([2, 3]).try_var([4], false).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
}

#[cfg(feature = "autodiff")]
#[test]
fn differentiating_by_an_undeclared_name_is_an_unknown_name_error() {
    let e = quadratic().try_grad(&["v"]).unwrap_err();
    assert!(matches!(e, Error::UnknownName { .. }), "{e:?}");
    assert!(e.to_string().contains("`v`"), "{e}");
}

#[cfg(feature = "optim")]
#[test]
fn loading_a_missing_checkpoint_is_an_io_error_with_the_os_error_as_source() {
    let path = std::env::temp_dir().join(format!("rlx_no_such_{}.safetensors", std::process::id()));
    let e = quadratic().load_checkpoint(&path, None).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    let io = e
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("the cause is the io::Error");
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    assert!(e.to_string().contains("rlx_no_such_"), "{e}");
}

#[cfg(feature = "optim")]
#[test]
fn loading_a_corrupt_checkpoint_is_a_checkpoint_error_with_the_parser_error_as_source() {
    let path = std::env::temp_dir().join(format!("rlx_corrupt_{}.safetensors", std::process::id()));
    std::fs::write(&path, [200u8, 0, 0, 0, 0, 0, 0, 0, b'{']).unwrap();
    let e = quadratic().load_checkpoint(&path, None).unwrap_err();
    std::fs::remove_file(&path).ok();
    assert!(matches!(e, Error::Checkpoint { .. }), "{e:?}");
    assert!(
        e.source().is_some(),
        "the safetensors parser's error is chained: {e:?}"
    );
}

#[cfg(feature = "optim")]
#[test]
fn a_checkpoint_of_another_model_is_a_checkpoint_error() {
    let path = std::env::temp_dir().join(format!("rlx_other_{}.safetensors", std::process::id()));
    quadratic().save_checkpoint(&path, None).unwrap();
    let other =
        Func::new("other", |s| s.param("w", shape![3]).sum_all()).with_param("w", vec![0.0; 3]);
    let e = other.load_checkpoint(&path, None).unwrap_err();
    std::fs::remove_file(&path).ok();
    assert!(matches!(e, Error::Checkpoint { .. }), "{e:?}");
}

#[cfg(feature = "safetensors")]
#[test]
fn safetensors_report_missing_files_as_io_and_missing_tensors_as_unknown_names() {
    let dir = std::env::temp_dir();
    let missing = dir.join(format!("rlx_st_missing_{}.safetensors", std::process::id()));
    let e = rlx_tensor::SafeTensors::open(&missing).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");

    let path = dir.join(format!("rlx_st_{}.safetensors", std::process::id()));
    let data = rlx_ir::TensorData::from_f64(&[2], &[1.0, 2.0]);
    rlx_tensor::save_safetensors_data(&path, &[("a", &data)]).unwrap();
    let st = rlx_tensor::SafeTensors::open(&path).unwrap();
    let e = st.load("b", DType::F32).unwrap_err();
    std::fs::remove_file(&path).ok();
    assert!(matches!(e, Error::UnknownName { .. }), "{e:?}");
}

#[test]
fn errors_travel_through_question_mark_into_boxed_errors() {
    fn build() -> Result<Tensor, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Tensor::ones([2, 3]).try_matmul(&Tensor::ones([2, 3]))?)
    }
    let e = build().unwrap_err();
    let ours = e
        .downcast_ref::<Error>()
        .expect("an rlx_tensor::Error inside");
    assert!(matches!(ours, Error::Shape { .. }));
}
