//! Tests of the elementwise kernels: their per-run tables against the oracle.

use crate::CpuBackend;
use rlx_ir::{Activation, BinaryOp, DType, Graph, Op, Shape, TensorData};
use rlx_runtime::{Backend, Device};

/// `relu(a + b)` followed by `chain` alternating adds/muls, over `a_dims` broadcast
/// against `b_dims`; outputs the relu (read again by the chain, so stored from inside
/// the kernel) and the chain's end. Compared with the oracle on two runs of one
/// executable with different data (the per-run tables are rebuilt each run).
fn check_chain(a_dims: &[usize], b_dims: &[usize], chain: usize) {
    let mut g = Graph::new("ew_tables");
    let a = g.input("a", Shape::new(a_dims, DType::F32));
    let b = g.input("b", Shape::new(b_dims, DType::F32));
    let s = g.add_op(Op::Binary(BinaryOp::Add), vec![a, b]).unwrap();
    let r = g.add_op(Op::Activation(Activation::Relu), vec![s]).unwrap();
    let mut x = r;
    for i in 0..chain {
        let op = [BinaryOp::Add, BinaryOp::Mul][i % 2];
        x = g
            .add_op(Op::Binary(op), vec![x, if i % 3 == 0 { a } else { r }])
            .unwrap();
    }
    g.set_outputs(vec![r, x]);
    let exe = rlx_testkit::check(&g, &data(a_dims, b_dims, 0.0), "cpu", |g| {
        CpuBackend.compile(Device::Cpu, g)
    });
    rlx_testkit::check_executable(&g, &data(a_dims, b_dims, 0.37), "cpu", exe.as_ref());
}

fn data(a_dims: &[usize], b_dims: &[usize], shift: f64) -> Vec<TensorData> {
    let vals = |dims: &[usize], k: f64| -> Vec<f64> {
        let n: usize = dims.iter().product();
        (0..n)
            .map(|i| ((i as f64 * k).sin() - 0.2 + shift) * 0.9)
            .collect()
    };
    vec![
        TensorData::from_f64_as(DType::F32, a_dims, &vals(a_dims, 0.7)),
        TensorData::from_f64_as(DType::F32, b_dims, &vals(b_dims, 1.3)),
    ]
}

/// A small kernel (tables inline on the stack), a rank-9 space that no two axes of
/// collapse (its index table on the heap) and a 70-instruction kernel with a stored
/// intermediate (its direct-target table on the heap) all match the oracle, run
/// after run.
#[test]
fn elementwise_kernels_match_the_oracle_with_inline_and_heap_run_tables() {
    check_chain(&[3], &[3], 2);
    check_chain(
        &[2, 1, 2, 1, 2, 1, 2, 1, 2],
        &[1, 2, 1, 2, 1, 2, 1, 2, 1],
        3,
    );
    check_chain(&[4, 33], &[4, 33], 66);
}
