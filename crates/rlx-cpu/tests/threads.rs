//! The CPU thread count: `set_num_threads` changes what `num_threads` reports and the
//! pool runs use, and results are bit-identical for any thread count.

use rlx_cpu::{CpuBackend, num_threads, set_num_threads};
use rlx_ir::{Activation, BinaryOp, DType, Graph, Op, ReduceOp, Shape, TensorData};
use rlx_runtime::{Backend, Device};
use rlx_testkit::{op, reduce};
use std::sync::Mutex;

/// The thread count is process-wide: tests that set it run one at a time.
static LOCK: Mutex<()> = Mutex::new(());

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

/// Work every parallel path touches: a matmul, an elementwise chain over many chunks,
/// row softmax, and a sum over one long row (reduced in parallel blocks).
fn graph(m: usize, k: usize, n: usize) -> Graph {
    let mut g = Graph::new("threads");
    let a = g.input("a", Shape::new(&[m, k], DType::F32));
    let b = g.input("b", Shape::new(&[k, n], DType::F32));
    let c = op(&mut g, Op::MatMul, vec![a, b]);
    let t = op(&mut g, Op::Activation(Activation::Tanh), vec![c]);
    let e = op(&mut g, Op::Binary(BinaryOp::Mul), vec![t, c]);
    let s = op(&mut g, Op::Softmax { axis: -1 }, vec![e]);
    let flat = op(
        &mut g,
        Op::Reshape {
            new_shape: vec![1, (m * n) as i64],
        },
        vec![e],
    );
    let total = reduce(&mut g, ReduceOp::Sum, vec![1], false, flat);
    g.set_outputs(vec![s, total]);
    g
}

fn run_all(g: &Graph, args: &[TensorData]) -> Vec<TensorData> {
    let exe = CpuBackend.compile(Device::Cpu, g).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap()
}

#[test]
fn set_num_threads_changes_the_reported_count() {
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    set_num_threads(1);
    assert_eq!(num_threads(), 1);
    set_num_threads(3);
    assert_eq!(num_threads(), 3);
    set_num_threads(0);
    assert_eq!(
        num_threads(),
        rayon::current_num_threads(),
        "0: the global pool"
    );
}

#[test]
fn an_absurd_thread_count_is_clamped_instead_of_starting_a_million_threads() {
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let max = rlx_cpu::max_num_threads();
    assert!(max >= 64);
    set_num_threads(1_000_000);
    assert_eq!(num_threads(), max);
    set_num_threads(usize::MAX);
    assert_eq!(num_threads(), max);
    set_num_threads(0);
}

#[test]
fn results_are_bit_identical_with_one_two_and_three_threads() {
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (m, k, n) = (192, 160, 320);
    let g = graph(m, k, n);
    let args = [
        TensorData::from_f32(&[m, k], &values(m * k, 3)),
        TensorData::from_f32(&[k, n], &values(k * n, 5)),
    ];
    set_num_threads(1);
    let one = run_all(&g, &args);
    set_num_threads(2);
    assert_eq!(num_threads(), 2);
    let two = run_all(&g, &args);
    set_num_threads(3);
    let three = run_all(&g, &args);
    set_num_threads(0);
    let all = run_all(&g, &args);
    assert_eq!(one, two, "1 vs 2 threads");
    assert_eq!(one, three, "1 vs 3 threads");
    assert_eq!(one, all, "1 thread vs all cores");
    // The outputs are real values, not an untouched buffer.
    let total = one[1].to_f32_vec()[0];
    assert!(total.is_finite() && total != 0.0, "{total}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_thread_count_starts_that_many_named_workers() {
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // A count unlike the global pool's, so a pool of its own starts.
    let n = rayon::current_num_threads() + 3;
    let last = format!("rlx-cpu-{}", n - 1);
    set_num_threads(n);
    assert_eq!(num_threads(), n);
    let worker_names = || -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|s| s.trim().to_string())
            .collect()
    };
    // Workers name themselves as they start: give them a moment.
    let mut names = worker_names();
    for _ in 0..100 {
        if names.contains(&last) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        names = worker_names();
    }
    set_num_threads(0);
    // Only a pool of at least n workers names one `rlx-cpu-{n-1}`.
    assert!(names.contains(&last), "no {last} among threads {names:?}");
}

#[test]
fn a_norm_backward_row_group_gives_the_same_bits_with_one_two_and_three_threads() {
    // LayerNorm backward over [300, 45] and [40, 300]: one row-group kernel whose blocks
    // of rows (several here) fold the column sums (dγ, dβ) into partials per block.
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for (r, c) in [(300, 45), (40, 300)] {
        let mut g = Graph::new("ln_bwd");
        let x = g.input("x", Shape::new(&[r, c], DType::F32));
        let gamma = g.input("gamma", Shape::new(&[c], DType::F32));
        let beta = g.input("beta", Shape::new(&[c], DType::F32));
        let gy = g.input("gy", Shape::new(&[r, c], DType::F32));
        let y = op(
            &mut g,
            Op::LayerNorm {
                axis: -1,
                eps: 1e-5,
            },
            vec![x, gamma, beta],
        );
        let p = op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, gy]);
        let loss = reduce(&mut g, ReduceOp::Sum, vec![0, 1], false, p);
        g.set_outputs(vec![loss]);
        let g = rlx_compile::autodiff::grad_graph(&g, &[x, gamma, beta]).unwrap();
        let prog = rlx_compile::compile(&g, &rlx_cpu::compile_options()).unwrap();
        assert!(
            prog.kernels
                .iter()
                .any(|k| matches!(k.kind, rlx_compile::program::KernelKind::RowGroup { .. })),
            "{}",
            rlx_compile::explain(&prog, "cpu", None)
        );
        let args = [
            TensorData::from_f32(&[r, c], &values(r * c, 7)),
            TensorData::from_f32(&[c], &values(c, 8)),
            TensorData::from_f32(&[c], &values(c, 9)),
            TensorData::from_f32(&[r, c], &values(r * c, 10)),
        ];
        set_num_threads(1);
        let one = run_all(&g, &args);
        set_num_threads(2);
        let two = run_all(&g, &args);
        set_num_threads(3);
        let three = run_all(&g, &args);
        set_num_threads(0);
        assert_eq!(one, two, "[{r}, {c}]: 1 vs 2 threads");
        assert_eq!(one, three, "[{r}, {c}]: 1 vs 3 threads");
        assert!(one.iter().all(|t| t.to_f32_vec().iter().any(|v| *v != 0.0)));
    }
}
