//! Benchmark rows of the CUDA backend for the peer workloads of `shared/bench/README.md`:
//! W1, W4 (1024³ and 2048³ in f32 and bf16), W5, W6 and W7.
//!
//! Each row is one JSON line in the peers' format plus `kernel_s`: `median_s` is a full
//! call through the `Executable` (arguments copied to the device, results back),
//! `kernel_s` the kernels alone (arguments resident, back-to-back runs). Every workload's
//! result is checked (against the CPU backend, or sampled f64 dot products for W4)
//! before it is timed.
//!
//! ```text
//! cargo run --release -p rlx-cuda --example gpu_bench [W1|W4|W5|W6|W7]
//! ```
//! With `RLX_BENCH_EMULATE=1` it runs tiny sizes on the host emulator instead (to check
//! the benchmark itself without a GPU; the numbers mean nothing).

use rlx_compile::autodiff::value_and_grad_graph;
use rlx_cuda::Profiled;
use rlx_cuda::device::Gpu;
use rlx_ir::{
    Activation, BinaryOp, DType, Graph, MaskKind, NodeId, Op, ReduceOp, Shape, TensorData,
};
use rlx_runtime::{Backend, Device, Executable};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The device the rows run on, and whether sizes are the emulator's tiny ones.
static TARGET: OnceLock<(Arc<dyn Gpu>, bool)> = OnceLock::new();

fn profiled(g: &Graph) -> Profiled {
    let p = Profiled::on(TARGET.get().unwrap().0.clone(), g).unwrap();
    if std::env::var("RLX_BENCH_EXPLAIN").is_ok() {
        eprintln!("{}", p.executable().explain());
    }
    p
}

/// `full` on a GPU, `tiny` on the emulator.
fn size(full: usize, tiny: usize) -> usize {
    if TARGET.get().unwrap().1 { tiny } else { full }
}

fn op(g: &mut Graph, o: Op, ins: Vec<NodeId>) -> NodeId {
    g.add_op(o, ins).unwrap()
}

fn scalar(g: &mut Graph, v: f32) -> NodeId {
    let d = TensorData::from_f32(&[], &[v]);
    let shape = d.shape();
    g.add_node(Op::Constant { data: d.bytes }, vec![], shape)
}

/// Deterministic values in [−scale, scale].
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn data(dims: &[usize], dt: DType, seed: u64, scale: f32) -> TensorData {
    let n = dims.iter().product();
    let v: Vec<f64> = values(n, seed, scale).into_iter().map(f64::from).collect();
    TensorData::from_f64_as(dt, dims, &v)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median seconds of `reps` full calls.
fn time_calls(exe: &dyn Executable, args: &[TensorData], reps: usize) -> f64 {
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap();
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                exe.run(&views).unwrap();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// Largest |a − b| relative to max |b|.
fn rel_err(a: &TensorData, b: &TensorData) -> f64 {
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    assert_eq!(x.len(), y.len());
    let scale = y.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    x.iter()
        .zip(&y)
        .fold(0.0f64, |m, (p, q)| m.max((p - q).abs() / scale))
}

/// The CPU backend's outputs, as the reference.
fn cpu(g: &Graph, args: &[TensorData]) -> Vec<TensorData> {
    let exe = rlx_cpu::CpuBackend.compile(Device::Cpu, g).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap()
}

fn row(workload: &str, median_s: f64, kernel_s: f64, metric: &str, per_s: f64, err: f64) {
    println!(
        "{{\"peer\": \"rlx-cuda\", \"workload\": \"{workload}\", \"median_s\": {median_s:.6e}, \"kernel_s\": {kernel_s:.6e}, \"{metric}\": {:.2}, \"max_rel_err\": {err:.2e}}}",
        per_s
    );
}

fn w1() {
    let n = size(16 << 20, 4096);
    let mut g = Graph::new("w1");
    let sh = Shape::new(&[n], DType::F32);
    let (a, b, c) = (
        g.input("a", sh.clone()),
        g.input("b", sh.clone()),
        g.input("c", sh),
    );
    let s = op(&mut g, Op::Binary(BinaryOp::Add), vec![a, b]);
    let m = op(&mut g, Op::Binary(BinaryOp::Mul), vec![s, c]);
    let h = scalar(&mut g, 0.5);
    let d = op(&mut g, Op::Binary(BinaryOp::Sub), vec![m, h]);
    let r = op(&mut g, Op::Activation(Activation::Relu), vec![d]);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![r]);
    g.set_outputs(vec![e]);
    let args: Vec<_> = (0..3).map(|i| data(&[n], DType::F32, i, 1.0)).collect();
    let p = profiled(&g);
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = p.executable().run(&views).unwrap();
    let err = rel_err(&got[0], &cpu(&g, &args)[0]);
    let t = time_calls(p.executable(), &args, size(5, 2));
    let k = p.time_kernels(&views, size(50, 2)).unwrap();
    // GB/s counts the 4 arrays of the kernel.
    row("W1", t, k, "gbps", 4.0 * 4.0 * n as f64 / k / 1e9, err);
}

fn w4(n: usize, dt: DType) {
    let mut g = Graph::new(format!("w4_{n}_{dt}"));
    let a = g.input("a", Shape::new(&[n, n], dt));
    let b = g.input("b", Shape::new(&[n, n], dt));
    let c = op(&mut g, Op::MatMul, vec![a, b]);
    g.set_outputs(vec![c]);
    let args = vec![data(&[n, n], dt, 7, 1.0), data(&[n, n], dt, 8, 1.0)];
    let p = profiled(&g);
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = p.executable().run(&views).unwrap()[0].to_f64_vec();
    // Sampled check: 64 entries against f64 dot products of the same (rounded) inputs.
    let (av, bv) = (args[0].to_f64_vec(), args[1].to_f64_vec());
    let mut err = 0f64;
    for s in 0..64 {
        let (i, j) = ((s * 7919) % n, (s * 104_729) % n);
        let want: f64 = (0..n).map(|k| av[i * n + k] * bv[k * n + j]).sum();
        err = err.max((got[i * n + j] - want).abs() / (n as f64).sqrt());
    }
    let t = time_calls(p.executable(), &args, size(5, 2));
    let k = p.time_kernels(&views, size(20, 2)).unwrap();
    let flops = 2.0 * (n as f64).powi(3);
    row(
        &format!("W4-{n}-{dt}"),
        t,
        k,
        "gflops",
        flops / k / 1e9,
        err,
    );
}

/// The MLP 784-512-512-10 (gelu_approx), params `w1, b1, w2, b2, w3, b3`.
fn mlp(g: &mut Graph, x: NodeId) -> (NodeId, Vec<NodeId>) {
    let dims = [784, 512, 512, 10];
    let mut h = x;
    let mut params = Vec::new();
    for i in 0..3 {
        let w = g.input(
            format!("w{}", i + 1),
            Shape::new(&[dims[i], dims[i + 1]], DType::F32),
        );
        let b = g.input(
            format!("b{}", i + 1),
            Shape::new(&[dims[i + 1]], DType::F32),
        );
        params.extend([w, b]);
        let act = (i < 2).then_some(Activation::GeluApprox);
        h = op(g, Op::FusedMatMulBiasAct { activation: act }, vec![h, w, b]);
    }
    (h, params)
}

fn mlp_params() -> Vec<TensorData> {
    let dims = [784usize, 512, 512, 10];
    let mut v = Vec::new();
    for i in 0..3 {
        let s = (1.0 / dims[i] as f32).sqrt();
        v.push(data(&[dims[i], dims[i + 1]], DType::F32, 100 + i as u64, s));
        v.push(data(&[dims[i + 1]], DType::F32, 200 + i as u64, 0.1));
    }
    v
}

fn w5() {
    let batch = size(1024, 8);
    let mut g = Graph::new("w5");
    let x = g.input("x", Shape::new(&[batch, 784], DType::F32));
    let (y, _) = mlp(&mut g, x);
    g.set_outputs(vec![y]);
    let mut args = vec![data(&[batch, 784], DType::F32, 1, 1.0)];
    args.extend(mlp_params());
    let p = profiled(&g);
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let err = rel_err(&p.executable().run(&views).unwrap()[0], &cpu(&g, &args)[0]);
    let t = time_calls(p.executable(), &args, size(10, 2));
    let k = p.time_kernels(&views, size(100, 2)).unwrap();
    let flops = 2.0 * batch as f64 * (784.0 * 512.0 + 512.0 * 512.0 + 512.0 * 10.0);
    row("W5", t, k, "gflops", flops / k / 1e9, err);
}

/// One AdamW(1e-3, 0.9, 0.999, 1e-8, wd 0.01) step of mean softmax cross-entropy of
/// the MLP: inputs x, y, the params, their moments and the two bias corrections;
/// outputs the loss, new params, new moments.
fn w6_graph(batch: usize) -> Graph {
    let mut g = Graph::new("w6");
    let x = g.input("x", Shape::new(&[batch, 784], DType::F32));
    let y = g.input("y", Shape::new(&[batch], DType::F32));
    let (logits, params) = mlp(&mut g, x);
    let ce = op(&mut g, Op::SoftmaxCrossEntropyWithLogits, vec![logits, y]);
    let loss = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Mean,
            axes: vec![0],
            keep_dim: false,
        },
        vec![ce],
    );
    g.set_outputs(vec![loss]);
    let mut g = value_and_grad_graph(&g, &params).unwrap();
    let grads: Vec<NodeId> = g.outputs[1..].to_vec();
    let bc1 = g.input("bc1", Shape::new(&[], DType::F32));
    let bc2 = g.input("bc2", Shape::new(&[], DType::F32));
    let (lr, b1, b2, eps, wd) = (1e-3f32, 0.9f32, 0.999f32, 1e-8f32, 0.01f32);
    let mut outs = vec![g.outputs[0]];
    let bin = |g: &mut Graph, o: BinaryOp, a: NodeId, b: NodeId| op(g, Op::Binary(o), vec![a, b]);
    let (mut new_p, mut new_m, mut new_v) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (&p, &gr)) in params.iter().zip(&grads).enumerate() {
        let sh = g.shape(p).clone();
        let m = g.input(format!("m{i}"), sh.clone());
        let v = g.input(format!("v{i}"), sh);
        let (cb1, c1b1, cb2, c1b2) = (
            scalar(&mut g, b1),
            scalar(&mut g, 1.0 - b1),
            scalar(&mut g, b2),
            scalar(&mut g, 1.0 - b2),
        );
        let m1 = bin(&mut g, BinaryOp::Mul, m, cb1);
        let m2 = bin(&mut g, BinaryOp::Mul, gr, c1b1);
        let m_new = bin(&mut g, BinaryOp::Add, m1, m2);
        let gg = bin(&mut g, BinaryOp::Mul, gr, gr);
        let v1 = bin(&mut g, BinaryOp::Mul, v, cb2);
        let v2 = bin(&mut g, BinaryOp::Mul, gg, c1b2);
        let v_new = bin(&mut g, BinaryOp::Add, v1, v2);
        let mh = bin(&mut g, BinaryOp::Div, m_new, bc1);
        let vh = bin(&mut g, BinaryOp::Div, v_new, bc2);
        let sq = op(&mut g, Op::Activation(Activation::Sqrt), vec![vh]);
        let e = scalar(&mut g, eps);
        let den = bin(&mut g, BinaryOp::Add, sq, e);
        let upd = bin(&mut g, BinaryOp::Div, mh, den);
        let w = scalar(&mut g, wd);
        let decay = bin(&mut g, BinaryOp::Mul, p, w);
        let step = bin(&mut g, BinaryOp::Add, upd, decay);
        let l = scalar(&mut g, lr);
        let delta = bin(&mut g, BinaryOp::Mul, step, l);
        let p_new = bin(&mut g, BinaryOp::Sub, p, delta);
        new_p.push(p_new);
        new_m.push(m_new);
        new_v.push(v_new);
    }
    outs.extend(new_p);
    outs.extend(new_m);
    outs.extend(new_v);
    g.set_outputs(outs);
    g
}

fn w6() {
    let batch = size(256, 8);
    let g = w6_graph(batch);
    let params = mlp_params();
    let zeros: Vec<TensorData> = params
        .iter()
        .map(|p| TensorData::zeros(DType::F32, &p.dims))
        .collect();
    let labels: Vec<f32> = (0..batch).map(|i| (i * 7 % 10) as f32).collect();
    // Argument order: x, y, w1, b1, …, bc1, bc2, m0, v0, m1, v1, … (node order).
    let order = rlx_runtime::arg_order(&g);
    let mut state: std::collections::HashMap<String, TensorData> = std::collections::HashMap::new();
    state.insert("x".into(), data(&[batch, 784], DType::F32, 3, 1.0));
    state.insert("y".into(), TensorData::from_f32(&[batch], &labels));
    for (i, p) in params.iter().enumerate() {
        let name = if i % 2 == 0 {
            format!("w{}", i / 2 + 1)
        } else {
            format!("b{}", i / 2 + 1)
        };
        state.insert(name, p.clone());
        state.insert(format!("m{i}"), zeros[i].clone());
        state.insert(format!("v{i}"), zeros[i].clone());
    }
    let names: Vec<String> = order
        .iter()
        .map(|&id| match &g.node(id).op {
            Op::Input { name } | Op::Param { name } => name.clone(),
            _ => unreachable!(),
        })
        .collect();
    let args_for =
        |state: &std::collections::HashMap<String, TensorData>, t: i32| -> Vec<TensorData> {
            names
                .iter()
                .map(|n| match n.as_str() {
                    "bc1" => TensorData::from_f32(&[], &[1.0 - 0.9f32.powi(t)]),
                    "bc2" => TensorData::from_f32(&[], &[1.0 - 0.999f32.powi(t)]),
                    n => state[n].clone(),
                })
                .collect()
        };
    let p = profiled(&g);
    let first = args_for(&state, 1);
    let views: Vec<_> = first.iter().map(|a| a.view()).collect();
    let got = p.executable().run(&views).unwrap();
    let want = cpu(&g, &first);
    let errs: Vec<f64> = got.iter().zip(&want).map(|(a, b)| rel_err(a, b)).collect();
    if std::env::var("RLX_BENCH_VERBOSE").is_ok() {
        eprintln!(
            "W6 per-output max relative errors: {:?}",
            errs.iter().map(|e| format!("{e:.1e}")).collect::<Vec<_>>()
        );
    }
    // The loss and the moments (the gradients, scaled) are compared; the new params are
    // not: AdamW's first step moves each by ±lr·sign(g), which flips for gradients that
    // round to either side of zero.
    let err = errs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || *i > params.len())
        .map(|(_, e)| *e)
        .fold(0.0, f64::max);
    // Full training steps: state round-trips through the host, as a user's loop would.
    let steps = size(20, 2) as i32;
    let t = Instant::now();
    let mut loss = 0f32;
    for s in 1..=steps {
        let args = args_for(&state, s);
        let views: Vec<_> = args.iter().map(|a| a.view()).collect();
        let out = p.executable().run(&views).unwrap();
        loss = out[0].to_f32_vec()[0];
        for (i, _) in params.iter().enumerate() {
            let name = if i % 2 == 0 {
                format!("w{}", i / 2 + 1)
            } else {
                format!("b{}", i / 2 + 1)
            };
            state.insert(name, out[1 + i].clone());
            state.insert(format!("m{i}"), out[1 + params.len() + i].clone());
            state.insert(format!("v{i}"), out[1 + 2 * params.len() + i].clone());
        }
    }
    let per_step = t.elapsed().as_secs_f64() / steps as f64;
    let k = p.time_kernels(&views, size(50, 2)).unwrap();
    eprintln!("W6 loss after {steps} steps: {loss}");
    row("W6", per_step, k, "steps_per_s", 1.0 / per_step, err);
}

fn w7() {
    let (b, h, s, d) = (size(4, 1), size(8, 2), size(512, 70), size(64, 16));
    let mut g = Graph::new("w7");
    let sh = Shape::new(&[b, s, h, d], DType::F32);
    let ins: Vec<NodeId> = ["q", "k", "v"]
        .iter()
        .map(|n| g.input(*n, sh.clone()))
        .collect();
    let a = op(
        &mut g,
        Op::Attention {
            num_heads: h,
            head_dim: d,
            v_head_dim: None,
            mask_kind: MaskKind::Causal,
            score_scale: None,
            attn_logit_softcap: None,
        },
        ins,
    );
    g.set_outputs(vec![a]);
    let args: Vec<_> = (0..3)
        .map(|i| data(&[b, s, h, d], DType::F32, 40 + i, 1.0))
        .collect();
    let p = profiled(&g);
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let err = rel_err(&p.executable().run(&views).unwrap()[0], &cpu(&g, &args)[0]);
    let t = time_calls(p.executable(), &args, size(10, 2));
    let k = p.time_kernels(&views, size(50, 2)).unwrap();
    // Causal: half the score matrix, two matmuls' worth of flops over it.
    let flops = 2.0 * 2.0 * (b * h) as f64 * (s * s) as f64 * d as f64 / 2.0;
    row("W7", t, k, "gflops", flops / k / 1e9, err);
}

fn main() {
    let emulate = std::env::var("RLX_BENCH_EMULATE").is_ok_and(|v| v == "1");
    let gpu: Arc<dyn Gpu> = if emulate {
        rlx_cuda::emulator().unwrap()
    } else {
        if let Some(r) = rlx_cuda::unavailable_reason() {
            eprintln!("gpu_bench: no usable CUDA device: {r}");
            std::process::exit(2);
        }
        rlx_cuda::device().unwrap()
    };
    eprintln!(
        "device: {} ({}f32 GEMMs)",
        gpu.describe(),
        if std::env::var("RLX_CUDA_TF32").is_ok_and(|v| v == "1") {
            "TF32 "
        } else {
            "strict FP32 "
        }
    );
    let _ = TARGET.set((gpu, emulate));
    let only: Option<String> = std::env::args().nth(1);
    let want = |w: &str| only.as_deref().is_none_or(|o| w.starts_with(o));
    if want("W1") {
        w1();
    }
    if want("W4") {
        for dt in [DType::F32, DType::BF16] {
            for n in [size(1024, 48), size(2048, 64)] {
                w4(n, dt);
            }
        }
    }
    if want("W5") {
        w5();
    }
    if want("W6") {
        w6();
    }
    if want("W7") {
        w7();
    }
}
