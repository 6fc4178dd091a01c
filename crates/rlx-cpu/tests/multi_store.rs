//! Kernels that store several results (the CPU backend compiles with
//! `CompileOptions::multi_store`): optimizer-style updates merged into one elementwise
//! kernel or into a matmul's epilogue, checked against the oracle, in f32, f64 math
//! over f32 state, and half precision, over spaces large enough for row mode, several
//! tiles and parallel chunks.

mod common;

use common::{Rng, check_against_oracle, random_data};
use rlx_ir::{Activation, BinaryOp, DType, Graph, NodeId, Op, Shape, TensorData};

fn op(g: &mut Graph, o: Op, ins: Vec<NodeId>) -> NodeId {
    g.add_op(o, ins).unwrap()
}

fn bin(g: &mut Graph, b: BinaryOp, x: NodeId, y: NodeId) -> NodeId {
    op(g, Op::Binary(b), vec![x, y])
}

fn cast(g: &mut Graph, x: NodeId, to: DType) -> NodeId {
    if g.shape(x).dtype() == to {
        return x;
    }
    op(g, Op::Cast { to }, vec![x])
}

/// A rank-0 runtime scalar input and its value.
fn scalar(g: &mut Graph, args: &mut Vec<TensorData>, name: &str, dt: DType, v: f64) -> NodeId {
    args.push(TensorData::from_f64_as(dt, &[], &[v]));
    g.input(name, Shape::scalar(dt))
}

/// The kernels of `g` as the CPU backend compiles them, with their store counts.
fn store_counts(g: &Graph) -> Vec<usize> {
    let p = rlx_compile::compile(g, &rlx_cpu::compile_options()).unwrap();
    p.kernels.iter().map(|k| k.stores.len()).collect()
}

/// Where the gradient of [`adamw`] comes from.
#[derive(Clone, Copy, PartialEq)]
enum Grad {
    /// An input.
    Input,
    /// `xᵀ·dy`: a contraction whose epilogue absorbs the update.
    MatMul,
    /// `Σ_rows dy` (a bias gradient; `dims[0]` must be 1): a reduction whose epilogue
    /// absorbs the update.
    ColumnSum,
}

/// AdamW over `dims` (state dtype `dt`, arithmetic in `math`) with the gradient from
/// `grad`. Outputs `[p', m', v']`; returns the graph and its arguments.
fn adamw(
    dims: [usize; 2],
    dt: DType,
    math: DType,
    grad: Grad,
    seed: u64,
) -> (Graph, Vec<TensorData>) {
    let mut rng = Rng::new(seed);
    let mut g = Graph::new("adamw");
    let mut args = Vec::new();
    let shape = Shape::new(&dims, dt);
    let grad = if grad == Grad::ColumnSum {
        let dy = g.input("dy", Shape::new(&[37, dims[1]], dt));
        args.push(random_data(&mut rng, g.shape(dy)));
        op(
            &mut g,
            Op::Reduce {
                op: rlx_ir::ReduceOp::Sum,
                axes: vec![0],
                keep_dim: true,
            },
            vec![dy],
        )
    } else if grad == Grad::MatMul {
        let batch = 7;
        let x = g.input("x", Shape::new(&[batch, dims[0]], dt));
        args.push(random_data(&mut rng, g.shape(x)));
        let dy = g.input("dy", Shape::new(&[batch, dims[1]], dt));
        args.push(random_data(&mut rng, g.shape(dy)));
        let xt = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![x]);
        op(&mut g, Op::MatMul, vec![xt, dy])
    } else {
        let gi = g.input("g", shape.clone());
        args.push(random_data(&mut rng, &shape));
        gi
    };
    let mut state = Vec::new();
    for name in ["p", "m", "v"] {
        let n = g.input(name, shape.clone());
        let mut d = random_data(&mut rng, &shape);
        if name == "v" {
            // A second moment is non-negative.
            d = TensorData::from_f64_as(
                dt,
                &dims,
                &d.to_f64_vec().iter().map(|x| x.abs()).collect::<Vec<_>>(),
            );
        }
        args.push(d);
        state.push(n);
    }
    let k =
        |g: &mut Graph, args: &mut Vec<TensorData>, n: &str, v: f64| scalar(g, args, n, math, v);
    let (b1, c1) = (
        k(&mut g, &mut args, "b1", 0.9),
        k(&mut g, &mut args, "c1", 0.1),
    );
    let (b2, c2) = (
        k(&mut g, &mut args, "b2", 0.999),
        k(&mut g, &mut args, "c2", 0.001),
    );
    let (bc1, bc2) = (
        k(&mut g, &mut args, "bc1", 0.19),
        k(&mut g, &mut args, "bc2", 0.002),
    );
    let (eps, lr) = (
        k(&mut g, &mut args, "eps", 1e-8),
        k(&mut g, &mut args, "lr", 1e-3),
    );
    let wd = k(&mut g, &mut args, "wd", 0.01);
    let (p, m, v) = (
        cast(&mut g, state[0], math),
        cast(&mut g, state[1], math),
        cast(&mut g, state[2], math),
    );
    let gw = cast(&mut g, grad, math);
    let bm = bin(&mut g, BinaryOp::Mul, b1, m);
    let cg = bin(&mut g, BinaryOp::Mul, c1, gw);
    let m2 = bin(&mut g, BinaryOp::Add, bm, cg);
    let bv = bin(&mut g, BinaryOp::Mul, b2, v);
    let cg2 = bin(&mut g, BinaryOp::Mul, c2, gw);
    let cgg = bin(&mut g, BinaryOp::Mul, cg2, gw);
    let v2 = bin(&mut g, BinaryOp::Add, bv, cgg);
    let mh = bin(&mut g, BinaryOp::Div, m2, bc1);
    let vh = bin(&mut g, BinaryOp::Div, v2, bc2);
    let root = op(&mut g, Op::Activation(Activation::Sqrt), vec![vh]);
    let den = bin(&mut g, BinaryOp::Add, root, eps);
    let ratio = bin(&mut g, BinaryOp::Div, mh, den);
    let wp = bin(&mut g, BinaryOp::Mul, wd, p);
    let dir = bin(&mut g, BinaryOp::Add, ratio, wp);
    let step = bin(&mut g, BinaryOp::Mul, lr, dir);
    let p2 = bin(&mut g, BinaryOp::Sub, p, step);
    let outs = vec![
        cast(&mut g, p2, dt),
        cast(&mut g, m2, dt),
        cast(&mut g, v2, dt),
    ];
    g.set_outputs(outs);
    (g, args)
}

#[test]
fn an_adamw_update_is_one_kernel_with_three_stores_and_matches_the_oracle() {
    for (i, (dims, dt, math)) in [
        ([300, 517], DType::F32, DType::F32),
        ([300, 517], DType::F32, DType::F64),
        ([3, 5], DType::F32, DType::F32),
        ([40, 300], DType::F16, DType::F32),
        ([40, 300], DType::BF16, DType::F64),
    ]
    .into_iter()
    .enumerate()
    {
        let (g, args) = adamw(dims, dt, math, Grad::Input, 11 + i as u64);
        assert_eq!(store_counts(&g), vec![3], "{dims:?} {dt} in {math}");
        check_against_oracle(&g, &args);
    }
}

#[test]
fn a_weight_gradient_matmul_absorbs_the_adamw_update_and_matches_the_oracle() {
    for (i, (dims, math)) in [
        ([300, 517], DType::F32),
        ([300, 517], DType::F64),
        ([5, 3], DType::F32),
    ]
    .into_iter()
    .enumerate()
    {
        let (g, args) = adamw(dims, DType::F32, math, Grad::MatMul, 31 + i as u64);
        let p = rlx_compile::compile(&g, &rlx_cpu::compile_options()).unwrap();
        assert_eq!(p.kernels.len(), 1, "{dims:?} in {math}");
        assert!(
            matches!(
                p.kernels[0].kind,
                rlx_compile::program::KernelKind::Contraction { .. }
            ),
            "the update is the matmul's epilogue"
        );
        assert_eq!(p.kernels[0].stores.len(), 3);
        check_against_oracle(&g, &args);
    }
}

#[test]
fn a_chain_of_outputs_each_read_by_the_next_is_stored_by_one_kernel() {
    // a = exp(x); b = a·y; c = b + a: three outputs, each read by the next (and `a` by
    // two later ones), in one pass; stored values read later must survive the tile.
    for (seed, dt) in [
        (5, DType::F32),
        (6, DType::F16),
        (7, DType::BF16),
        (8, DType::F64),
    ] {
        let mut rng = Rng::new(seed);
        let mut g = Graph::new("chain");
        let s = Shape::new(&[9, 700], dt);
        let x = g.input("x", s.clone());
        let y = g.input("y", s.clone());
        let args = vec![random_data(&mut rng, &s), random_data(&mut rng, &s)];
        let a = op(&mut g, Op::Activation(Activation::Exp), vec![x]);
        let b = bin(&mut g, BinaryOp::Mul, a, y);
        let c = bin(&mut g, BinaryOp::Add, b, a);
        let d = op(&mut g, Op::Activation(Activation::Tanh), vec![c]);
        g.set_outputs(vec![d, b, a, c]);
        assert_eq!(store_counts(&g), vec![4], "{dt}");
        check_against_oracle(&g, &args);
    }
}

#[test]
fn a_bias_gradient_reduction_absorbs_the_adamw_update_and_matches_the_oracle() {
    for (i, (n, math)) in [(700, DType::F32), (700, DType::F64), (3, DType::F32)]
        .into_iter()
        .enumerate()
    {
        let (g, args) = adamw([1, n], DType::F32, math, Grad::ColumnSum, 51 + i as u64);
        let p = rlx_compile::compile(&g, &rlx_cpu::compile_options()).unwrap();
        assert_eq!(p.kernels.len(), 1, "[{n}] in {math}");
        assert!(matches!(
            p.kernels[0].kind,
            rlx_compile::program::KernelKind::Reduce { .. }
        ));
        assert_eq!(p.kernels[0].stores.len(), 3);
        check_against_oracle(&g, &args);
    }
}

#[test]
fn column_sums_split_across_threads_equal_a_sequential_f64_fold_bit_for_bit() {
    // One output row of 700 column sums (a bias gradient) is split over the cores; each
    // column still folds its 300 values in row order in f64, then rounds once.
    use rlx_runtime::{Backend, Device};
    let (rows, cols) = (300, 700);
    let mut rng = Rng::new(9);
    let s = Shape::new(&[rows, cols], DType::F32);
    let data = random_data(&mut rng, &s);
    let mut g = Graph::new("colsum");
    let x = g.input("x", s);
    let r = op(
        &mut g,
        Op::Reduce {
            op: rlx_ir::ReduceOp::Sum,
            axes: vec![0],
            keep_dim: false,
        },
        vec![x],
    );
    g.set_outputs(vec![r]);
    let exe = rlx_cpu::CpuBackend.compile(Device::Cpu, &g).unwrap();
    let got = exe.run(&[data.view()]).unwrap()[0].to_f64_vec();
    let xs = data.to_f64_vec();
    for (j, &v) in got.iter().enumerate() {
        let mut acc = 0f64;
        for i in 0..rows {
            acc += xs[i * cols + j];
        }
        assert_eq!(v, acc as f32 as f64, "column {j}");
    }
}
