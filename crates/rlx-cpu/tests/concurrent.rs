//! One compiled program run from several threads at once: every concurrent result must
//! equal, bit for bit, the result of the same inputs run alone on one thread.

use rlx_cpu::CpuBackend;
use rlx_ir::{Activation, BinaryOp, DType, Dim, Graph, Op, ReduceOp, Shape, TensorData};
use rlx_runtime::{CompiledGraph, Device, register_backend};
use rlx_testkit::{op, reduce};
use std::sync::Arc;

const THREADS: usize = 4;
const ITERS: usize = 25;

/// Deterministic pseudo-random values in [-1, 1) from `seed`.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// A multi-kernel program with intermediates in the arena: `tanh(x·w + b)`, its
/// row softmax, and the row sums of its square; `x` has a dynamic batch dim.
fn mlp_graph(k: usize, n: usize) -> Graph {
    let mut g = Graph::new("concurrent_mlp");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(k)], DType::F32),
    );
    let w = g.param("w", Shape::new(&[k, n], DType::F32));
    let b = g.param("b", Shape::new(&[n], DType::F32));
    let m = op(&mut g, Op::MatMul, vec![x, w]);
    let z = op(&mut g, Op::Binary(BinaryOp::Add), vec![m, b]);
    let h = op(&mut g, Op::Activation(Activation::Tanh), vec![z]);
    let s = op(&mut g, Op::Softmax { axis: -1 }, vec![h]);
    let sq = op(&mut g, Op::Binary(BinaryOp::Mul), vec![h, h]);
    let r = reduce(&mut g, ReduceOp::Sum, vec![1], false, sq);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![r]);
    g.set_outputs(vec![s, r, e]);
    g
}

/// The inputs of run `i` (batch sizes vary so dynamic plans are bound concurrently).
fn input_for(i: usize, k: usize) -> TensorData {
    let rows = [1usize, 7, 64, 130, 33][i % 5];
    TensorData::from_f32(&[rows, k], &values(rows * k, i as u64 + 1))
}

fn compiled(k: usize, n: usize) -> CompiledGraph {
    register_backend(Arc::new(CpuBackend));
    let mut cg = CompiledGraph::new(Device::Cpu, &mlp_graph(k, n)).unwrap();
    cg.set_param("w", TensorData::from_f32(&[k, n], &values(k * n, 999)))
        .unwrap();
    cg.set_param("b", TensorData::from_f32(&[n], &values(n, 1234)))
        .unwrap();
    cg
}

#[test]
fn one_compiled_program_run_from_four_threads_gives_the_single_thread_results() {
    let (k, n) = (96, 80);
    let cg = Arc::new(compiled(k, n));
    let inputs: Vec<TensorData> = (0..THREADS * ITERS).map(|i| input_for(i, k)).collect();
    // Reference: every input run alone, one after another, on this thread.
    let want: Vec<Vec<TensorData>> = inputs
        .iter()
        .map(|x| cg.run(&[("x", x.view())]).unwrap())
        .collect();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (cg, inputs, want) = (Arc::clone(&cg), &inputs, &want);
            s.spawn(move || {
                for it in 0..ITERS {
                    // Interleave the threads' inputs so neighbouring runs differ in size.
                    let i = it * THREADS + t;
                    let got = if it % 2 == 0 {
                        cg.run(&[("x", inputs[i].view())]).unwrap()
                    } else {
                        cg.run_host(&[("x", inputs[i].view())])
                            .unwrap()
                            .into_iter()
                            .map(|o| o.into_data())
                            .collect()
                    };
                    assert_eq!(got, want[i], "thread {t}, run {it} (input {i})");
                }
            });
        }
    });
}

#[test]
fn a_static_program_shared_by_scoped_threads_gives_identical_bits() {
    // A static program (one fixed plan and one pooled arena size), borrowed by the
    // threads instead of shared through an Arc.
    register_backend(Arc::new(CpuBackend));
    let mut g = Graph::new("concurrent_static");
    let a = g.input("a", Shape::new(&[128, 128], DType::F32));
    let b = g.input("b", Shape::new(&[128, 128], DType::F32));
    let m = op(&mut g, Op::MatMul, vec![a, b]);
    let t = op(&mut g, Op::Activation(Activation::Tanh), vec![m]);
    let m2 = op(&mut g, Op::MatMul, vec![t, b]);
    let s = op(&mut g, Op::Softmax { axis: -1 }, vec![m2]);
    g.set_outputs(vec![s]);
    let cg = CompiledGraph::new(Device::Cpu, &g).unwrap();
    let b_data = TensorData::from_f32(&[128, 128], &values(128 * 128, 77));
    let a_data: Vec<TensorData> = (0..THREADS * 8)
        .map(|i| TensorData::from_f32(&[128, 128], &values(128 * 128, 500 + i as u64)))
        .collect();
    let run = |a: &TensorData| {
        cg.run(&[("a", a.view()), ("b", b_data.view())])
            .unwrap()
            .remove(0)
    };
    let want: Vec<TensorData> = a_data.iter().map(run).collect();
    // Different inputs give different outputs, so a result crossing runs would show.
    assert_ne!(want[0], want[1]);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (run, a_data, want) = (&run, &a_data, &want);
            s.spawn(move || {
                for round in 0..3 {
                    for (i, a) in a_data.iter().enumerate().skip(t).step_by(THREADS) {
                        assert_eq!(run(a), want[i], "thread {t}, round {round}, input {i}");
                    }
                }
            });
        }
    });
}

#[test]
fn concurrent_runs_stay_exact_while_the_thread_count_changes() {
    // Runs in flight keep the pool they started in; new runs pick up the new one.
    let (k, n) = (64, 48);
    let cg = compiled(k, n);
    let inputs: Vec<TensorData> = (0..THREADS * 10).map(|i| input_for(i, k)).collect();
    let want: Vec<Vec<TensorData>> = inputs
        .iter()
        .map(|x| cg.run(&[("x", x.view())]).unwrap())
        .collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let done = &done;
        s.spawn(move || {
            let mut i = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                rlx_cpu::set_num_threads([1, 2, 0, 3][i % 4]);
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            rlx_cpu::set_num_threads(0);
        });
        let runners: Vec<_> = (0..THREADS)
            .map(|t| {
                let (cg, inputs, want) = (&cg, &inputs, &want);
                s.spawn(move || {
                    for (i, x) in inputs.iter().enumerate().skip(t).step_by(THREADS) {
                        let got = cg.run(&[("x", x.view())]).unwrap();
                        assert_eq!(got, want[i], "thread {t}, input {i}");
                    }
                })
            })
            .collect();
        for r in runners {
            r.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}
