//! The differential suite on the wgpu backend: the random graphs of [`rlx_testkit`]
//! (elementwise chains, broadcasts, views, reductions, matmuls, row ops, casts and
//! opaque ops over f32/f16/bf16/f64/integer dtypes) and random attention graphs,
//! compiled for `Device::Gpu` and compared with the oracle. Kernels the GPU does not
//! run (f64, i64, opaque ops) fall back to the host; the suite also counts how many
//! kernels really ran on the GPU so a silent all-host run cannot pass.
//!
//! On a machine without any wgpu adapter every test prints why it skipped.

mod support;

use rlx_compile::loops::eval::MulAddMode;
use rlx_ir::{DType, Dim, Graph, Op, ReduceOp, Shape, TensorData};
use rlx_testkit::{Rng, build_attention_graph, build_random_graph};
use std::sync::atomic::{AtomicUsize, Ordering};

static GPU_KERNELS: AtomicUsize = AtomicUsize::new(0);
static ALL_KERNELS: AtomicUsize = AtomicUsize::new(0);

fn run_seed(seed: u64, large: bool) {
    let mut rng = Rng::new(if large {
        seed ^ 0x9e37_79b9_7f4a_7c15
    } else {
        seed
    });
    let (g, args) = build_random_graph(&mut rng, large);
    let placement = support::check(&g, &args);
    GPU_KERNELS.fetch_add(placement.iter().filter(|&&p| p).count(), Ordering::Relaxed);
    ALL_KERNELS.fetch_add(placement.len(), Ordering::Relaxed);
}

/// Deterministic seeds (a fixed list keeps CI time bounded and failures replayable:
/// `RLX_SEED=<n> cargo test -p rlx-wgpu --test differential replay -- --ignored`).
fn seeds(n: u64, salt: u64) -> impl Iterator<Item = u64> {
    (0..n).map(move |i| (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt)
}

#[test]
fn random_graphs_match_the_oracle_on_the_gpu() {
    if !support::gpu_or_skip("random_graphs_match_the_oracle_on_the_gpu") {
        return;
    }
    let n = std::env::var("RLX_WGPU_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    for s in seeds(n, 0x5eed) {
        run_seed(s, false);
    }
    let (gpu, all) = (
        GPU_KERNELS.load(Ordering::Relaxed),
        ALL_KERNELS.load(Ordering::Relaxed),
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "wgpu differential suite on {}: {gpu} of {all} kernels ran on the GPU (the rest: f64/i64 data, gather, ...)",
        rlx_wgpu::adapter_info(rlx_runtime::Device::Gpu).unwrap_or_default()
    );
    assert!(gpu * 3 >= all, "only {gpu} of {all} kernels ran on the GPU");
}

#[test]
fn random_graphs_with_large_dims_match_the_oracle_on_the_gpu() {
    if !support::gpu_or_skip("random_graphs_with_large_dims_match_the_oracle_on_the_gpu") {
        return;
    }
    let n = std::env::var("RLX_WGPU_CASES")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(150, |v| v / 4);
    for s in seeds(n, 0x1a7e) {
        run_seed(s, true);
    }
}

#[test]
fn random_attention_graphs_match_the_oracle_on_the_gpu() {
    if !support::gpu_or_skip("random_attention_graphs_match_the_oracle_on_the_gpu") {
        return;
    }
    let mut on_gpu = 0;
    for s in seeds(40, 0xa77e) {
        let mut rng = Rng::new(s);
        let (g, args) = build_attention_graph(&mut rng);
        let placement = support::check(&g, &args);
        on_gpu += placement.iter().filter(|&&p| p).count();
    }
    assert!(on_gpu >= 40, "attention kernels did not run on the GPU");
}

/// `op` over `axes` of an input of `dims` (`?0` where `dims` has `Dim::Dynamic(0)`).
fn reduction(op: ReduceOp, dt: DType, dims: &[Dim], axes: &[usize]) -> Graph {
    let mut g = Graph::new("reduce");
    let x = g.input("x", Shape::from_dims(dims, dt));
    let r = g
        .add_op(
            Op::Reduce {
                op,
                axes: axes.to_vec(),
                keep_dim: false,
            },
            vec![x],
        )
        .unwrap();
    g.set_outputs(vec![r]);
    g
}

/// Small integers of `dt` (products: ±1), so every order of the sum is exact.
fn small_ints(dt: DType, dims: &[usize], op: ReduceOp) -> TensorData {
    let n: usize = dims.iter().product();
    if dt == DType::Bool {
        return TensorData::from_bool(dims, &(0..n).map(|i| i % 5 != 3).collect::<Vec<_>>());
    }
    let v: Vec<i64> = (0..n as i64)
        .map(|i| match op {
            ReduceOp::Prod => [1, -1, 1][(i % 3) as usize],
            _ => (i * 7) % 11 - if dt == DType::U8 { 0 } else { 5 },
        })
        .collect();
    if dt.is_int() {
        TensorData::from_i64_as(dt, dims, &v)
    } else {
        let f: Vec<f64> = v.iter().map(|&x| x as f64).collect();
        TensorData::from_f64_as(dt, dims, &f)
    }
}

#[test]
fn reductions_of_every_wgsl_dtype_and_of_dynamic_extents_run_on_the_gpu_like_the_oracle() {
    if !support::gpu_or_skip("reductions_of_every_wgsl_dtype") {
        return;
    }
    let ops = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ];
    let s = |n: usize| Dim::Static(n);
    for dt in [DType::BF16, DType::I8, DType::U8, DType::Bool] {
        for op in ops {
            if dt == DType::Bool && !matches!(op, ReduceOp::Max | ReduceOp::Min) {
                continue;
            }
            // A long row, a long column with few outputs (both a workgroup per output)
            // and a short axis (a thread per output).
            for (dims, axes) in [
                (vec![3, 500], vec![1]),
                (vec![400, 6], vec![0]),
                (vec![9, 4], vec![1]),
            ] {
                let sd: Vec<Dim> = dims.iter().map(|&n| s(n)).collect();
                let g = reduction(op, dt, &sd, &axes);
                let placement = support::check(&g, &[small_ints(dt, &dims, op)]);
                let int_mean = dt.is_int() && op == ReduceOp::Mean;
                assert_eq!(placement, vec![!int_mean], "{op:?} {dt:?} {dims:?}");
            }
        }
    }
    // Dynamic extents: the kernel is compiled once; an empty axis runs on the host (the
    // CPU gives the identity or the error), every other binding on the GPU.
    for op in ops {
        for (dims, axes) in [
            (vec![s(3), Dim::Dynamic(0)], vec![1]),
            (vec![Dim::Dynamic(0), s(5)], vec![0]),
        ] {
            let g = reduction(op, DType::F32, &dims, &axes);
            for n in [1usize, 300] {
                let bound: Vec<usize> = dims
                    .iter()
                    .map(|d| {
                        if *d == Dim::Dynamic(0) {
                            n
                        } else {
                            d.unwrap_static()
                        }
                    })
                    .collect();
                let placement = support::check(&g, &[small_ints(DType::F32, &bound, op)]);
                assert_eq!(placement, vec![true], "{op:?} {dims:?} ?0 = {n}");
            }
        }
    }
}

/// Replays one seed (set `RLX_SEED`, optionally `RLX_LARGE=1`).
#[test]
#[ignore]
fn replay() {
    let seed: u64 = std::env::var("RLX_SEED")
        .expect("set RLX_SEED")
        .parse()
        .unwrap();
    let large = std::env::var("RLX_LARGE").is_ok_and(|v| v == "1");
    let mut rng = Rng::new(if large {
        seed ^ 0x9e37_79b9_7f4a_7c15
    } else {
        seed
    });
    let (g, args) = build_random_graph(&mut rng, large);
    eprintln!("{g}");
    let placement = support::check(&g, &args);
    eprintln!("placement {placement:?}");
}

#[test]
fn gpu_sums_are_bit_identical_to_the_loop_ir_reference_in_its_fixed_tree_order() {
    if !support::gpu_or_skip("gpu_sums_are_bit_identical") {
        return;
    }
    rlx_testkit::check_sums_follow_loop_ir_order(&rlx_wgpu::compile_options(), "GPU", &|g, x| {
        let (exe, placement) =
            rlx_wgpu::compile_with_placement(rlx_runtime::Device::Gpu, g).unwrap();
        assert_eq!(placement, vec![true]);
        exe.run(&[x.view()]).unwrap()[0].to_f32_vec()
    });
}

#[test]
fn gpu_matmuls_are_bit_identical_to_the_loop_ir_reference_in_its_fixed_order() {
    if !support::gpu_or_skip("gpu_matmuls_are_bit_identical") {
        return;
    }
    let run = |g: &Graph, args: &[TensorData]| {
        let (exe, placement) =
            rlx_wgpu::compile_with_placement(rlx_runtime::Device::Gpu, g).unwrap();
        assert_eq!(placement, vec![true]);
        let views: Vec<_> = args.iter().map(|a| a.view()).collect();
        exe.run(&views).unwrap()[0].to_f32_vec()
    };
    // WGSL lets a device evaluate `fma` unfused: a 1×2×1 product tells which this one
    // does (fused: (1 + 2⁻¹³)² − (1 + 2⁻¹²) = 2⁻²⁶; unfused: the rounded square is
    // 1 + 2⁻¹², so 0), and the rest must match the interpreter in that mode bit for bit.
    let mut g = Graph::new("fma_probe");
    let a = g.input("a", Shape::new(&[1, 2], DType::F32));
    let b = g.input("b", Shape::new(&[2, 1], DType::F32));
    let y = g.add_op(Op::MatMul, vec![a, b]).unwrap();
    g.set_outputs(vec![y]);
    let x = 1.0 + 2f32.powi(-13);
    let probe = run(
        &g,
        &[
            TensorData::from_f32(&[1, 2], &[-(1.0 + 2f32.powi(-12)), x]),
            TensorData::from_f32(&[2, 1], &[1.0, x]),
        ],
    )[0];
    let mode = if probe == 2f32.powi(-26) {
        MulAddMode::Fused
    } else {
        assert_eq!(probe, 0.0, "neither a fused nor an unfused multiply-add");
        MulAddMode::Separate
    };
    println!("the adapter evaluates WGSL fma as {mode:?}");
    rlx_testkit::check_matmuls_follow_loop_ir_order_with(
        &rlx_wgpu::compile_options(),
        "GPU",
        mode,
        &run,
    );
}
