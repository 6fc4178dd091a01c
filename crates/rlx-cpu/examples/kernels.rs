//! Times the compiled executor alone (no tensor front end) on W1-, W2- and W3-shaped
//! graphs: `cargo run --release -p rlx-cpu --example kernels`.

use rlx_cpu::CpuBackend;
use rlx_ir::{Activation, BinaryOp, DType, Graph, Op, Shape, TensorData};
use rlx_runtime::{Backend, Device};
use std::time::Instant;

fn time(name: &str, bytes: f64, f: &mut dyn FnMut()) {
    f();
    let mut v = Vec::new();
    for _ in 0..11 {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_secs_f64());
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let (m, best) = (v[5], v[0]);
    println!(
        "{name:<28} median {:>9.3} ms  {:>7.2} GB/s   best {:>9.3} ms  {:>7.2} GB/s",
        m * 1e3,
        bytes / m / 1e9,
        best * 1e3,
        bytes / best / 1e9
    );
}

fn main() {
    if std::env::var_os("RLX_EXPLAIN").is_some() {
        println!(
            "{}",
            CpuBackend
                .compile(Device::Cpu, &mlp_graph())
                .unwrap()
                .explain()
        );
        return;
    }
    {
        // W8-style: compiling and running `relu(a + b)` on 3 elements.
        let mut g = Graph::new("w8");
        let a = g.input("a", Shape::new(&[3], DType::F32));
        let b = g.input("b", Shape::new(&[3], DType::F32));
        let s = g.add_op(Op::Binary(BinaryOp::Add), vec![a, b]).unwrap();
        let r = g.add_op(Op::Activation(Activation::Relu), vec![s]).unwrap();
        g.set_outputs(vec![r]);
        let reps = 2000;
        let t = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(CpuBackend.compile(Device::Cpu, &g).unwrap());
        }
        println!(
            "W8 graph compile: {:.2} µs",
            t.elapsed().as_secs_f64() / reps as f64 * 1e6
        );
        let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
        let x = TensorData::from_f32(&[3], &[1.0, -2.0, 3.0]);
        let t = Instant::now();
        for _ in 0..reps * 10 {
            std::hint::black_box(exe.run(&[x.view(), x.view()]).unwrap());
        }
        println!(
            "W8 executor run: {:.3} µs",
            t.elapsed().as_secs_f64() / (reps * 10) as f64 * 1e6
        );
    }
    {
        let t = Instant::now();
        let reps = 200;
        for _ in 0..reps {
            let g = mlp_graph();
            std::hint::black_box(CpuBackend.compile(Device::Cpu, &g).unwrap());
        }
        println!(
            "W9 compile (MLP graph → executable): {:.1} µs",
            t.elapsed().as_secs_f64() / reps as f64 * 1e6
        );
    }
    let n = 16 << 20;
    let mut g = Graph::new("w1");
    let a = g.input("a", Shape::new(&[n], DType::F32));
    let b = g.input("b", Shape::new(&[n], DType::F32));
    let c = g.input("c", Shape::new(&[n], DType::F32));
    let s = g.add_op(Op::Binary(BinaryOp::Add), vec![a, b]).unwrap();
    let m = g.add_op(Op::Binary(BinaryOp::Mul), vec![s, c]).unwrap();
    let h = TensorData::from_f32(&[], &[0.5]);
    let hs = h.shape();
    let hc = g.add_node(Op::Constant { data: h.bytes }, vec![], hs);
    let d = g.add_op(Op::Binary(BinaryOp::Sub), vec![m, hc]).unwrap();
    let r = g.add_op(Op::Activation(Activation::Relu), vec![d]).unwrap();
    let e = g.add_op(Op::Activation(Activation::Exp), vec![r]).unwrap();
    g.set_outputs(vec![e]);
    let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
    let data: Vec<TensorData> = (0..3)
        .map(|k| TensorData::from_f32(&[n], &vec![0.1 * k as f32; n]))
        .collect();
    let views: Vec<_> = data.iter().map(|d| d.view()).collect();
    time("W1 executor", 16.0 * n as f64, &mut || {
        let o = exe.run(&views).unwrap();
        std::hint::black_box(o);
    });
    if std::env::var_os("RLX_ONLY_W1").is_some() {
        for _ in 0..30 {
            std::hint::black_box(exe.run(&views).unwrap());
        }
        return;
    }
    let mut out = vec![0f32; n];
    {
        // STREAM triad a = b + s·c over 64 MiB arrays on every core (3 arrays counted).
        use rayon::prelude::*;
        let m = 16 << 20;
        let (b, c) = (vec![1f32; m], vec![2f32; m]);
        let mut a = vec![0f32; m];
        time("STREAM triad (all threads)", 12.0 * m as f64, &mut || {
            a.par_chunks_mut(1 << 16)
                .zip(b.par_chunks(1 << 16))
                .zip(c.par_chunks(1 << 16))
                .for_each(|((a, b), c)| {
                    for i in 0..a.len() {
                        a[i] = b[i] + 3.0 * c[i];
                    }
                });
            std::hint::black_box(&a);
        });
    }
    time("W1 plain loop 1 thread", 16.0 * n as f64, &mut || {
        let (x, y, z) = (data[0].view(), data[1].view(), data[2].view());
        let f = |t: &rlx_ir::TensorView| {
            assert!(t.bytes.len() >= 4 * n && (t.bytes.as_ptr() as usize).is_multiple_of(4));
            // SAFETY: the view's bytes hold at least `n` f32s and are 4-byte aligned
            // (asserted above); they are borrowed from `data`, which nothing writes here.
            unsafe { std::slice::from_raw_parts(t.bytes.as_ptr() as *const f32, n) }
        };
        let (x, y, z) = (f(&x), f(&y), f(&z));
        for i in 0..n {
            out[i] = ((x[i] + y[i]) * z[i] - 0.5).max(0.0).exp();
        }
        std::hint::black_box(&out);
    });

    for (name, op, dims) in [
        (
            "W2 softmax",
            Op::Softmax { axis: -1 },
            vec![4096usize, 4096],
        ),
        (
            "W3 layer_norm",
            Op::LayerNorm {
                axis: -1,
                eps: 1e-5,
            },
            vec![8192, 1024],
        ),
    ] {
        let mut g = Graph::new(name);
        let x = g.input("x", Shape::new(&dims, DType::F32));
        let mut ins = vec![x];
        if matches!(op, Op::LayerNorm { .. }) {
            ins.push(g.input("g", Shape::new(&dims[1..], DType::F32)));
            ins.push(g.input("b", Shape::new(&dims[1..], DType::F32)));
        }
        let y = g.add_op(op, ins).unwrap();
        g.set_outputs(vec![y]);
        let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
        let numel: usize = dims.iter().product();
        let mut data = vec![TensorData::from_f32(&dims, &vec![0.3; numel])];
        if g.len() > 2 {
            data.push(TensorData::from_f32(&dims[1..], &vec![1.0; dims[1]]));
            data.push(TensorData::from_f32(&dims[1..], &vec![0.0; dims[1]]));
        }
        let views: Vec<_> = data.iter().map(|d| d.view()).collect();
        time(&format!("{name} executor"), 8.0 * numel as f64, &mut || {
            std::hint::black_box(exe.run(&views).unwrap());
        });
    }
}

/// W9-style compile latency: a fresh 784-512-512-10 gelu MLP graph compiled (no run).
#[allow(dead_code)]
pub fn mlp_graph() -> Graph {
    let mut g = Graph::new("mlp");
    let mut h = g.input("x", Shape::new(&[1024, 784], DType::F32));
    let dims = [784usize, 512, 512, 10];
    for i in 0..3 {
        let w = g.param(
            format!("w{i}"),
            Shape::new(&[dims[i], dims[i + 1]], DType::F32),
        );
        let b = g.param(format!("b{i}"), Shape::new(&[dims[i + 1]], DType::F32));
        let m = g.add_op(Op::MatMul, vec![h, w]).unwrap();
        h = g.add_op(Op::Binary(BinaryOp::Add), vec![m, b]).unwrap();
        if i < 2 {
            h = g
                .add_op(Op::Activation(Activation::GeluApprox), vec![h])
                .unwrap();
        }
    }
    g.set_outputs(vec![h]);
    g
}
