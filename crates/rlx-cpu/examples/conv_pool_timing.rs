//! Time the f32 convolution gradients and pooling on the CPU executor against the
//! oracle interpreter they replace, on a LeNet-like layer: x [N, 32, 28, 28],
//! w [32, 32, 3, 3], stride 1, padding 1; max pooling 2×2 stride 2 forward + gradient.
//! Native: best of 5 runs. The oracle (f64, one element at a time) runs once, on
//! `oracle_n` images, and its time is also given scaled linearly to N (its cost is
//! linear in the batch).
//!
//! `cargo run --release -p rlx-cpu --example conv_pool_timing -- [N] [oracle_n]`
//! (defaults: 64, 2).

use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Graph, Op, ReduceOp, Shape, TensorData, interp};
use rlx_runtime::{Backend, Device};
use std::time::Instant;

fn data(dims: &[usize], seed: u32) -> TensorData {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / 16777216.0 - 0.5
        })
        .collect();
    TensorData::from_f32(dims, &v)
}

/// A graph of `op` over inputs of `dims`, named a, b, c….
fn graph(op: Op, dims: &[&[usize]]) -> Graph {
    let mut g = Graph::new("timing");
    let ins: Vec<_> = dims
        .iter()
        .enumerate()
        .map(|(i, d)| g.input(["a", "b", "c"][i], Shape::new(d, DType::F32)))
        .collect();
    let y = g.add_op(op, ins).unwrap();
    g.set_outputs(vec![y]);
    g
}

fn native_ms(g: &Graph, args: &[TensorData]) -> f64 {
    let exe = CpuBackend.compile(Device::Cpu, g).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap();
    (0..5)
        .map(|_| {
            let s = Instant::now();
            exe.run(&views).unwrap();
            s.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min)
}

fn oracle_ms(g: &Graph, args: &[TensorData]) -> f64 {
    let named: Vec<(&str, &TensorData)> = ["a", "b", "c"].into_iter().zip(args).collect();
    let s = Instant::now();
    interp::run_refs(g, &named).unwrap();
    s.elapsed().as_secs_f64() * 1e3
}

fn row(what: &str, n: usize, on: usize, make: impl Fn(usize) -> (Graph, Vec<TensorData>)) {
    let (g, a) = make(n);
    let native = native_ms(&g, &a);
    let (go, ao) = make(on);
    let oracle = oracle_ms(&go, &ao);
    let scaled = oracle * n as f64 / on as f64;
    println!(
        "{what:<34} native {native:9.2} ms | oracle {oracle:9.1} ms at N={on} -> {scaled:10.1} ms at N={n} | {:7.0}x",
        scaled / native
    );
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).map_or(64, |s| s.parse().unwrap());
    let on: usize = a.get(2).map_or(2, |s| s.parse().unwrap());
    println!("threads: {}", rayon::current_num_threads());
    let conv = |input: bool| {
        move |n: usize| {
            let (k, s, p, d) = (vec![3, 3], vec![1, 1], vec![1, 1], vec![1, 1]);
            let op = if input {
                Op::ConvGradInput {
                    kernel_size: k,
                    stride: s,
                    padding: p,
                    dilation: d,
                    groups: 1,
                }
            } else {
                Op::ConvGradWeight {
                    kernel_size: k,
                    stride: s,
                    padding: p,
                    dilation: d,
                    groups: 1,
                }
            };
            let dims: [&[usize]; 3] = [&[n, 32, 28, 28], &[32, 32, 3, 3], &[n, 32, 28, 28]];
            let args = dims
                .iter()
                .enumerate()
                .map(|(i, d)| data(d, i as u32))
                .collect();
            (graph(op, &dims), args)
        }
    };
    row("conv2d_grad_input", n, on, conv(true));
    row("conv2d_grad_weight", n, on, conv(false));
    let pool = |grad: bool| {
        move |n: usize| {
            let (k, s, p) = (vec![2, 2], vec![2, 2], vec![0, 0]);
            let x: &[usize] = &[n, 32, 28, 28];
            let y: &[usize] = &[n, 32, 14, 14];
            if grad {
                let op = Op::PoolGrad {
                    kind: ReduceOp::Max,
                    kernel_size: k,
                    stride: s,
                    padding: p,
                };
                (graph(op, &[x, y]), vec![data(x, 1), data(y, 2)])
            } else {
                let op = Op::Pool {
                    kind: ReduceOp::Max,
                    kernel_size: k,
                    stride: s,
                    padding: p,
                };
                (graph(op, &[x]), vec![data(x, 1)])
            }
        }
    };
    row("max_pool2d 2x2/2 forward", n, on, pool(false));
    row("pool2d_grad (max) 2x2/2", n, on, pool(true));
}
