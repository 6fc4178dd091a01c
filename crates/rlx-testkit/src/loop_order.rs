//! Whether a backend's reductions follow the loop IR's fixed order, bit for bit.

use rlx_compile::CompileOptions;
use rlx_compile::loops::{self, eval::HostBuf};
use rlx_ir::{DType, Graph, Op, ReduceOp, Shape, TensorData};

/// The loop IR's reference interpreter on the one reduce kernel of `p` (one f32 input,
/// one output buffer): the outputs the lowering defines, in f64.
fn loop_eval(p: &rlx_compile::Program, x: &[f32]) -> Vec<f64> {
    let k = p
        .kernels
        .iter()
        .position(|k| k.label().starts_with("reduce_"))
        .expect("a reduce kernel");
    let lk = loops::lower_kernel(p, k).unwrap();
    let mut slots: Vec<HostBuf> = lk
        .bufs
        .iter()
        .map(|b| match b.access {
            loops::Access::Read => HostBuf::Float(x.iter().map(|&v| v as f64).collect()),
            loops::Access::Write => {
                let n = p.buffers[b.buf]
                    .shape
                    .static_dims()
                    .unwrap()
                    .iter()
                    .product();
                HostBuf::zeros(b.dtype, n)
            }
        })
        .collect();
    loops::eval::run(&lk, &mut slots, &rlx_ir::DimBinding::new()).unwrap();
    match slots.pop() {
        Some(HostBuf::Float(v)) => v,
        other => panic!("the reduce kernel's output is not a float buffer: {other:?}"),
    }
}

/// Check that `run` (a backend compiled with `options`, given the graph and its one
/// argument) returns f32 sums bit-identical to the loop IR's reference interpreter.
///
/// The values are chosen so that their f32 sum depends on the order of the additions:
/// only the lowering's own fixed tree gives the same bits, over a work-group row, a
/// few-output column reduction and a serial short axis. `device` names the backend in
/// the failure message.
pub fn check_sums_follow_loop_ir_order(
    options: &CompileOptions,
    device: &str,
    run: &dyn Fn(&Graph, &TensorData) -> Vec<f32>,
) {
    for (dims, axes) in [
        (vec![3usize, 1000], vec![1]),
        (vec![700, 5], vec![0]),
        (vec![40, 9], vec![1]),
    ] {
        let n: usize = dims.iter().product();
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1009) as f32 * 1.37e-3 + (i % 3) as f32 * 1e4)
            .collect();
        let mut g = Graph::new("sum_bits");
        let xi = g.input("x", Shape::new(&dims, DType::F32));
        let o = Op::Reduce {
            op: ReduceOp::Sum,
            axes: axes.clone(),
            keep_dim: false,
        };
        let r = g.add_op(o, vec![xi]).unwrap();
        g.set_outputs(vec![r]);
        let p = rlx_compile::compile(&g, options).unwrap();
        let want = loop_eval(&p, &x);
        let got = run(&g, &TensorData::from_f32(&dims, &x));
        assert_eq!(got.len(), want.len(), "{dims:?} {axes:?}: output length");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                (*w as f32).to_bits(),
                "{dims:?} {axes:?} element {i}: {device} {g}, loop IR {w}"
            );
        }
    }
}
