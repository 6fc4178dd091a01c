//! Whether a backend's reductions follow the loop IR's fixed order, bit for bit.

use rlx_compile::CompileOptions;
use rlx_compile::loops::{
    self,
    eval::{HostBuf, MulAddMode},
};
use rlx_ir::{DType, Graph, Op, ReduceOp, Shape, TensorData};

/// The loop IR's reference interpreter on the one kernel of `p` whose label starts with
/// `label`, all of whose inputs are f32 arguments (`args` in argument order): the output
/// the lowering defines, in f64, with fused multiply-adds evaluated as `mode` says.
fn loop_eval(p: &rlx_compile::Program, label: &str, args: &[&[f32]], mode: MulAddMode) -> Vec<f64> {
    use rlx_compile::program::BufKind;
    let k = p
        .kernels
        .iter()
        .position(|k| k.label().starts_with(label))
        .unwrap_or_else(|| panic!("no {label} kernel"));
    let lk = loops::lower_kernel(p, k).unwrap();
    let mut slots: Vec<HostBuf> = lk
        .bufs
        .iter()
        .map(|b| match (&p.buffers[b.buf].kind, b.access) {
            (BufKind::Arg(i), loops::Access::Read) => {
                HostBuf::Float(args[*i].iter().map(|&v| v as f64).collect())
            }
            (_, loops::Access::Write) => {
                let n = p.buffers[b.buf]
                    .shape
                    .static_dims()
                    .unwrap()
                    .iter()
                    .product();
                HostBuf::zeros(b.dtype, n)
            }
            (kind, _) => panic!("the {label} kernel reads a {kind:?} buffer, not an argument"),
        })
        .collect();
    loops::eval::run_with(&lk, &mut slots, &rlx_ir::DimBinding::new(), mode).unwrap();
    match slots.pop() {
        Some(HostBuf::Float(v)) => v,
        other => panic!("the {label} kernel's output is not a float buffer: {other:?}"),
    }
}

/// `got` (a backend's f32 results) equals `want` (the loop IR's, in f64) rounded to f32,
/// bit for bit; `case` and `device` name the failure.
fn assert_same_bits(got: &[f32], want: &[f64], case: &str, device: &str) {
    assert_eq!(got.len(), want.len(), "{case}: output length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits(),
            (*w as f32).to_bits(),
            "{case} element {i}: {device} {g}, loop IR {w}"
        );
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
        let want = loop_eval(&p, "reduce_", &[&x], MulAddMode::Fused);
        let got = run(&g, &TensorData::from_f32(&dims, &x));
        assert_same_bits(&got, &want, &format!("{dims:?} {axes:?}"), device);
    }
}

/// Check that `run` (a backend compiled with `options`, given the graph and its two
/// arguments) returns f32 matmul products bit-identical to the loop IR's reference
/// interpreter: 64×64 tiles with register blocks and 16×16 tiles, M, N and K off the
/// tile, B read through a transpose. The values make every sum depend on its order
/// (and on whether a product is rounded before it is added), so only the lowering's
/// own fold — index order, one fused multiply-add per product — gives the same bits.
pub fn check_matmuls_follow_loop_ir_order(
    options: &CompileOptions,
    device: &str,
    run: &dyn Fn(&Graph, &[TensorData]) -> Vec<f32>,
) {
    check_matmuls_follow_loop_ir_order_with(options, device, MulAddMode::Fused, run)
}

/// [`check_matmuls_follow_loop_ir_order`] against the interpreter's fold with
/// multiply-adds evaluated as `mode` says: a WGSL device may evaluate `fma` unfused.
pub fn check_matmuls_follow_loop_ir_order_with(
    options: &CompileOptions,
    device: &str,
    mode: MulAddMode,
    run: &dyn Fn(&Graph, &[TensorData]) -> Vec<f32>,
) {
    for (m, k, n) in [(67usize, 300usize, 65usize), (5, 1000, 3), (1, 77, 70)] {
        let val = |i: usize, salt: usize| {
            ((i * 7919 + salt) % 1009) as f32 * 1.37e-3 + ((i + salt) % 3) as f32 * 1e2
        };
        let a: Vec<f32> = (0..m * k).map(|i| val(i, 1)).collect();
        let bt: Vec<f32> = (0..n * k).map(|i| val(i, 2) - 150.0).collect();
        let mut g = Graph::new("matmul_bits");
        let ai = g.input("a", Shape::new(&[m, k], DType::F32));
        let bi = g.input("bt", Shape::new(&[n, k], DType::F32));
        let b = g
            .add_op(Op::Transpose { perm: vec![1, 0] }, vec![bi])
            .unwrap();
        let y = g.add_op(Op::MatMul, vec![ai, b]).unwrap();
        g.set_outputs(vec![y]);
        let p = rlx_compile::compile(&g, options).unwrap();
        let want = loop_eval(&p, "matmul", &[&a, &bt], mode);
        let args = [
            TensorData::from_f32(&[m, k], &a),
            TensorData::from_f32(&[n, k], &bt),
        ];
        let got = run(&g, &args);
        assert_same_bits(&got, &want, &format!("{m}x{k}x{n}"), device);
    }
}
