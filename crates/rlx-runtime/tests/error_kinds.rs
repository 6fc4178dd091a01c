//! Errors of `CompiledGraph` and the registry carry the kind that says what went
//! wrong (the messages are checked elsewhere).

use rlx_ir::{DType, Graph, Shape, TensorData};
use rlx_runtime::*;
use std::sync::Arc;

mod common;
use common::NullBackend;

fn compiled() -> CompiledGraph {
    register_backend(Arc::new(NullBackend));
    let mut g = Graph::new("kinds");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let w = g.param("w", Shape::new(&[2, 3], DType::F32));
    g.set_outputs(vec![x, w]);
    CompiledGraph::new(Device::Cpu, &g).unwrap()
}

#[test]
fn names_the_graph_does_not_declare_are_unknown_name_errors() {
    let mut cg = compiled();
    let x = TensorData::from_f32(&[2, 3], &[0.0; 6]);
    let e = cg.run(&[("y", x.view())]).unwrap_err();
    assert_eq!(e.kind(), RuntimeErrorKind::UnknownName, "{e}");
    let e = cg.set_param("v", x.clone()).unwrap_err();
    assert_eq!(e.kind(), RuntimeErrorKind::UnknownName, "{e}");
}

#[test]
fn wrong_dims_are_shape_errors_and_wrong_element_types_dtype_errors() {
    let cg = compiled();
    let w = TensorData::from_f32(&[2, 3], &[0.0; 6]);
    let short = TensorData::from_f32(&[3, 2], &[0.0; 6]);
    let e = cg.run(&[("x", short.view()), ("w", w.view())]).unwrap_err();
    assert_eq!(e.kind(), RuntimeErrorKind::Shape, "{e}");
    let ints = TensorData::from_i64(&[2, 3], &[0; 6]);
    let e = cg.run(&[("x", ints.view()), ("w", w.view())]).unwrap_err();
    assert_eq!(e.kind(), RuntimeErrorKind::DType, "{e}");
    let ok = cg.run(&[("x", w.view()), ("w", w.view())]);
    assert!(ok.is_ok(), "{ok:?}");
}

#[test]
fn a_device_no_backend_serves_is_a_device_unavailable_error() {
    register_backend(Arc::new(NullBackend));
    let e = unavailable(Device::Cuda);
    assert_eq!(e.kind(), RuntimeErrorKind::DeviceUnavailable, "{e}");
    assert!(e.message().contains("not available"), "{e}");
}
