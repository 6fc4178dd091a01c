//! Errors of a compiled CPU program's run carry the kind that says what went wrong.

use rlx_cpu::CpuBackend;
use rlx_ir::{Activation, DType, Graph, Op, Shape, TensorData};
use rlx_runtime::{Backend, Device, RuntimeErrorKind};
use rlx_testkit::op;

fn relu() -> std::sync::Arc<dyn rlx_runtime::Executable> {
    let mut g = Graph::new("kinds");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let r = op(&mut g, Op::Activation(Activation::Relu), vec![x]);
    g.set_outputs(vec![r]);
    CpuBackend.compile(Device::Cpu, &g).unwrap()
}

#[test]
fn arguments_of_the_wrong_dims_are_shape_errors() {
    let exe = relu();
    let x = TensorData::from_f32(&[3, 2], &[1.0; 6]);
    let e = exe.run(&[x.view()]).unwrap_err();
    assert_eq!(e.kind(), RuntimeErrorKind::Shape, "{e}");
    assert!(e.message().contains("`x`"), "{e}");
}

#[test]
fn arguments_of_the_wrong_element_type_are_dtype_errors() {
    let exe = relu();
    let x = TensorData::from_i64(&[2, 3], &[1; 6]);
    let e = exe.run(&[x.view()]).unwrap_err();
    assert_eq!(e.kind(), RuntimeErrorKind::DType, "{e}");
    let ok = exe.run(&[TensorData::from_f32(&[2, 3], &[-1.0; 6]).view()]);
    assert_eq!(ok.unwrap()[0].to_f32_vec(), vec![0.0; 6]);
}
