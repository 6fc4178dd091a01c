//! End-to-end run time of a few workloads on the wgpu backend and the CPU backend,
//! measured in the same process: `cargo run -p rlx-wgpu --release --example bench`.
//!
//! The wgpu column is the whole `Executable::run`: argument upload, every kernel,
//! and the readback of the outputs. On a software adapter (lavapipe: `DeviceType::Cpu`)
//! the numbers only say what the emulation costs — they are not a speed claim for
//! GPUs; on a real GPU they include the PCIe round trip that a chain of lazy ops
//! amortizes.

use rlx_ir::{Activation, BinaryOp, DType, Graph, Op, ReduceOp, Shape, TensorData};
use rlx_runtime::{Backend, Device, Executable};
use std::sync::Arc;
use std::time::Instant;

fn data(n: usize, dims: &[usize], salt: u32) -> TensorData {
    let v: Vec<f32> = (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ salt) % 2000) as f32 / 1000.0 - 1.0)
        .collect();
    TensorData::from_f32(dims, &v)
}

/// Median seconds of `reps` runs after one warm-up run.
fn time(exe: &Arc<dyn Executable>, args: &[TensorData], reps: usize) -> f64 {
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).expect("run");
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            exe.run(&views).expect("run");
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn workloads() -> Vec<(&'static str, Graph, Vec<TensorData>)> {
    let mut out = Vec::new();
    // W1: fused elementwise chain over 1M elements.
    let n = 1 << 20;
    let mut g = Graph::new("ew");
    let a = g.input("a", Shape::new(&[n], DType::F32));
    let b = g.input("b", Shape::new(&[n], DType::F32));
    let s = g.add_op(Op::Binary(BinaryOp::Mul), vec![a, b]).unwrap();
    let t = g.add_op(Op::Activation(Activation::Tanh), vec![s]).unwrap();
    let e = g.add_op(Op::Binary(BinaryOp::Add), vec![t, a]).unwrap();
    g.set_outputs(vec![e]);
    out.push((
        "elementwise tanh(a*b)+a, 1M f32",
        g,
        vec![data(n, &[n], 1), data(n, &[n], 2)],
    ));
    // Matmul with a bias + GELU epilogue.
    let m = 256;
    let mut g = Graph::new("mm");
    let x = g.input("x", Shape::new(&[m, m], DType::F32));
    let w = g.input("w", Shape::new(&[m, m], DType::F32));
    let bias = g.input("b", Shape::new(&[m], DType::F32));
    let f = g
        .add_op(
            Op::FusedMatMulBiasAct {
                activation: Some(Activation::Gelu),
            },
            vec![x, w, bias],
        )
        .unwrap();
    g.set_outputs(vec![f]);
    out.push((
        "matmul 256x256x256 + bias + gelu",
        g,
        vec![
            data(m * m, &[m, m], 3),
            data(m * m, &[m, m], 4),
            data(m, &[m], 5),
        ],
    ));
    // Row softmax.
    let (r, c) = (1024, 512);
    let mut g = Graph::new("softmax");
    let x = g.input("x", Shape::new(&[r, c], DType::F32));
    let sm = g.add_op(Op::Softmax { axis: -1 }, vec![x]).unwrap();
    g.set_outputs(vec![sm]);
    out.push(("softmax 1024 rows x 512", g, vec![data(r * c, &[r, c], 6)]));
    // Full reduction.
    let mut g = Graph::new("sum");
    let x = g.input("x", Shape::new(&[n], DType::F32));
    let sq = g.add_op(Op::Binary(BinaryOp::Mul), vec![x, x]).unwrap();
    let sum = g
        .add_op(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![0],
                keep_dim: false,
            },
            vec![sq],
        )
        .unwrap();
    g.set_outputs(vec![sum]);
    out.push(("sum of squares, 1M f32", g, vec![data(n, &[n], 7)]));
    out
}

fn main() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // Only this process's own environment; silences the Vulkan loader's warning.
        // SAFETY: the first statement of main, before any thread is spawned or any
        // library that might read the environment concurrently is initialised.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir()) };
    }
    let adapter = match rlx_wgpu::adapter_info(Device::Gpu) {
        Ok(a) => a,
        Err(e) => {
            println!("no wgpu adapter: {e}");
            return;
        }
    };
    let hw = rlx_wgpu::WgpuBackend.is_hardware(Device::Gpu);
    println!(
        "adapter: {adapter} ({})",
        if hw {
            "hardware"
        } else {
            "software emulation: times are not a GPU speed claim"
        }
    );
    println!("| workload | CPU backend ms | wgpu ms (upload + kernels + readback) | wgpu / CPU |");
    println!("|---|---|---|---|");
    let reps: usize = std::env::var("RLX_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    for (name, g, args) in workloads() {
        let cpu = rlx_cpu::CpuBackend.compile(Device::Cpu, &g).expect("cpu");
        let (gpu, placement) = rlx_wgpu::compile_with_placement(Device::Gpu, &g).expect("wgpu");
        assert!(placement.iter().all(|&p| p), "{}", gpu.explain());
        let (tc, tg) = (time(&cpu, &args, reps), time(&gpu, &args, reps));
        println!(
            "| {name} | {:.3} | {:.3} | {:.1}x |",
            tc * 1e3,
            tg * 1e3,
            tg / tc
        );
    }
}
