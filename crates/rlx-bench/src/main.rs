//! `rlx-bench`: runs the peer workloads W1–W10 (`shared/bench/README.md`) in one process on
//! rlx (public `rlx_tensor` API) and on `ndarray`, plus a STREAM-triad and an FMA-peak
//! probe, and prints median times, rates, rlx-vs-ndarray speedups and fractions of the
//! machine's bounds. See `crates/rlx-bench/README.md`.
//!
//! ```text
//! cargo run --release -p rlx-bench -- [--workloads W1,W4] [--repeats 7] [--warmup 2] [--json] [--no-ndarray] [--no-probes] [--kernels] [--torch PYTHON]
//! ```
//!
//! With `--torch`, a Python with torch times PyTorch on W4's products, W11's training step
//! (f32 and bf16 autocast) and the OPS rows in the same run, and its rows print beside
//! rlx's (`peer.rs`).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod kernels;
mod nd;
mod ops;
mod peer;
mod probes;
mod report;
mod rlx;
mod timing;
mod w11;
mod w11_peer;
mod w12;
mod w4_peer;

use ndarray::{Array1, Array2};
use report::{Bounds, Row};
use rlx_bench::inputs::{
    self, ATT, LN, MLP, MM_SIZES, N_EW, Normal, SM, W4_LOWP, W5_BATCH, W6_BATCH, W10,
    mlp_flops_per_row, rel_err,
};
use std::collections::BTreeSet;
use timing::{Plan, median, time};

struct Args {
    workloads: BTreeSet<String>,
    plan: Plan,
    json: bool,
    ndarray: bool,
    probes: bool,
    kernels: bool,
    /// W11: training steps per model (median over the steps after the first 10).
    w11_steps: usize,
    /// W11: the depth variants besides the 4-block W11 model.
    w11_layers: Vec<usize>,
    /// W11: also time the model with `[B·T, d]` activations.
    w11_flat: bool,
    /// W12: `--w12-*` options as (flag, value) pairs, interpreted by [`w12::rows`].
    w12_args: Vec<(String, String)>,
    /// A Python with torch that runs the peer scripts for W4, W11 and OPS in this run
    /// (`peers/w4_torch.py`, `peers/w11_torch_bf16.py`, `peers/ops_torch.py`), whose
    /// rows go beside rlx's.
    torch_python: Option<String>,
}

fn parse_args() -> Args {
    let mut a = Args {
        workloads: (1..=11).map(|i| format!("W{i}")).collect(),
        plan: Plan {
            warmup: 2,
            repeats: 7,
        },
        json: false,
        ndarray: true,
        probes: true,
        kernels: false,
        w11_steps: 60,
        w11_layers: vec![2, 4, 8],
        w11_flat: false,
        w12_args: Vec::new(),
        torch_python: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .unwrap_or_else(|| panic!("rlx-bench: {name} needs a value"))
        };
        match arg.as_str() {
            "--workloads" => {
                a.workloads = value("--workloads")
                    .split(',')
                    .map(|s| s.trim().to_uppercase())
                    .collect()
            }
            "--repeats" => {
                a.plan.repeats = value("--repeats").parse().expect("--repeats takes a count")
            }
            "--warmup" => {
                a.plan.warmup = value("--warmup").parse().expect("--warmup takes a count")
            }
            "--json" => a.json = true,
            "--no-ndarray" => a.ndarray = false,
            "--no-probes" => a.probes = false,
            "--kernels" => a.kernels = true,
            "--w11-steps" => {
                a.w11_steps = value("--w11-steps")
                    .parse()
                    .expect("--w11-steps takes a count");
                assert!(
                    a.w11_steps > 10,
                    "--w11-steps must exceed the 10 untimed steps"
                );
            }
            "--w11-flat" => a.w11_flat = true,
            // `--ops-python` is the flag's first name, from when only OPS had a peer.
            "--torch" | "--ops-python" => a.torch_python = Some(value("--torch")),
            "--w11-layers" => {
                a.w11_layers = value("--w11-layers")
                    .split(',')
                    .map(|s| s.trim().parse().expect("--w11-layers takes counts: 2,4,8"))
                    .collect()
            }
            "-h" | "--help" => {
                println!(
                    "usage: rlx-bench [--workloads W1,W4,...] [--repeats N] [--warmup N] [--json] [--no-ndarray] [--no-probes] [--kernels] [--w11-steps 60] [--w11-layers 2,4,8] [--w11-flat] [--torch PYTHON] [--w12-…]"
                );
                std::process::exit(0);
            }
            flag if flag.starts_with("--w12-") => {
                let v = value(flag);
                a.w12_args.push((flag.to_string(), v));
            }
            other => panic!("rlx-bench: unknown argument `{other}`; see --help"),
        }
    }
    a
}

fn main() {
    let args = parse_args();
    let threads = rayon::current_num_threads();
    report::print_env(threads);
    let mut bounds = Bounds::default();
    let mut rows: Vec<Row> = Vec::new();
    let plan = args.plan;
    if args.probes {
        for th in [1, threads] {
            let (t, gbps) = probes::triad(plan, th);
            rows.push(
                Row::new("triad", &format!("probe_{th}t"), t)
                    .gbps(gbps)
                    .note("a = b + s·c, 64 MiB arrays, 3 arrays counted"),
            );
            let (t, gflops, isa) = probes::fma_peak(plan, th);
            rows.push(
                Row::new("fma_peak", &format!("probe_{th}t"), t)
                    .gflops(gflops)
                    .note(&format!("16 chains, {isa}")),
            );
            bounds.triad_gbps = Some(bounds.triad_gbps.unwrap_or(0.0).max(gbps));
            bounds.fma_gflops = Some(bounds.fma_gflops.unwrap_or(0.0).max(gflops));
        }
        if args.workloads.contains("OPS") {
            for th in [1, threads] {
                let (t, gbps) = probes::triad_n(plan, th, probes::TRIAD_CACHE_N);
                rows.push(
                    Row::new("triad_1MiB", &format!("probe_{th}t"), t)
                        .gbps(gbps)
                        .note("a = b + s·c, 1 MiB arrays (in cache), 3 arrays counted"),
                );
                bounds.triad_cache_gbps = Some(bounds.triad_cache_gbps.unwrap_or(0.0).max(gbps));
            }
        }
        if args.workloads.contains("W1") {
            let (t, gbps) = probes::w1_pattern(plan, threads);
            rows.push(
                Row::new("w1_pattern", &format!("probe_{threads}t"), t)
                    .gbps(gbps)
                    .note("o = (a + b)·c − 0.5 plain loop: W1's traffic, 4 arrays counted"),
            );
        }
    }
    let w = |id: &str| args.workloads.contains(id);

    if w("W1") {
        let mut r = Normal::new(1);
        let (a, b, c) = (r.vec(N_EW, 1.0), r.vec(N_EW, 1.0), r.vec(N_EW, 1.0));
        let bytes = (4 * N_EW * 4) as f64;
        let (aa, ba, ca) = (
            Array1::from_vec(a.clone()),
            Array1::from_vec(b.clone()),
            Array1::from_vec(c.clone()),
        );
        let reference = nd::w1_eager(&aa, &ba, &ca).to_vec();
        if args.ndarray {
            rows.push(
                Row::new(
                    "W1_elementwise_chain",
                    "ndarray",
                    time(plan, || nd::w1_eager(&aa, &ba, &ca)),
                )
                .bytes(bytes),
            );
            let mut out = Array1::zeros(N_EW);
            let t = time(plan, || nd::w1_zip(&aa, &ba, &ca, &mut out));
            rows.push(
                Row::new("W1_elementwise_chain", "ndarray_zip", t)
                    .bytes(bytes)
                    .note("hand-fused Zip, output preallocated"),
            );
        }
        let f = rlx::w1(N_EW);
        let run = || f.run(&[("a", &a), ("b", &b), ("c", &c)]);
        let check = rel_err(&run()[0], &reference);
        rows.push(
            Row::new("W1_elementwise_chain", "rlx", time(plan, run))
                .bytes(bytes)
                .check(check),
        );
    }
    if w("W2") {
        let x = nd::w2_input();
        let xa = Array2::from_shape_vec(SM, x.clone()).expect("W2 shape");
        let reference = nd::w2(&xa).into_raw_vec_and_offset().0;
        let bytes = (2 * SM.0 * SM.1 * 4) as f64;
        if args.ndarray {
            rows.push(
                Row::new(
                    "W2_softmax_4096x4096",
                    "ndarray",
                    time(plan, || nd::w2(&xa)),
                )
                .bytes(bytes),
            );
        }
        let f = rlx::w2();
        let run = || f.run(&[("x", &x)]);
        let check = rel_err(&run()[0], &reference);
        rows.push(
            Row::new("W2_softmax_4096x4096", "rlx", time(plan, run))
                .bytes(bytes)
                .check(check),
        );
    }
    if w("W3") {
        let (x, g, b) = nd::w3_inputs();
        let (xa, ga, ba) = (
            Array2::from_shape_vec(LN, x.clone()).expect("W3 shape"),
            Array1::from_vec(g.clone()),
            Array1::from_vec(b.clone()),
        );
        let reference = nd::w3(&xa, &ga, &ba).into_raw_vec_and_offset().0;
        let bytes = (2 * LN.0 * LN.1 * 4) as f64;
        if args.ndarray {
            rows.push(
                Row::new(
                    "W3_layernorm_8192x1024",
                    "ndarray",
                    time(plan, || nd::w3(&xa, &ga, &ba)),
                )
                .bytes(bytes),
            );
        }
        let f = rlx::w3();
        let run = || f.run(&[("x", &x), ("g", &g), ("b", &b)]);
        let check = rel_err(&run()[0], &reference);
        rows.push(
            Row::new("W3_layernorm_8192x1024", "rlx", time(plan, run))
                .bytes(bytes)
                .check(check),
        );
    }
    // Lines printed after the table: peers' failures and hints, W11's depth fit, …
    let mut after = Vec::new();
    if w("W4") {
        for n in MM_SIZES {
            let id = format!("W4_matmul_{n}");
            let mut r = Normal::new(4 + n as u64);
            let (a, b) = (r.vec(n * n, 1.0), r.vec(n * n, 1.0));
            let (aa, ba) = (
                Array2::from_shape_vec((n, n), a.clone()).expect("A"),
                Array2::from_shape_vec((n, n), b.clone()).expect("B"),
            );
            let reference = aa.dot(&ba).into_raw_vec_and_offset().0;
            let flops = 2.0 * (n as f64).powi(3);
            if args.ndarray {
                rows.push(
                    Row::new(&id, "ndarray", time(plan, || aa.dot(&ba)))
                        .flops(flops)
                        .note("matrixmultiply, 1 thread"),
                );
            }
            for th in [1, threads] {
                let mut c = vec![0f32; n * n];
                let t = time(plan, || {
                    use rlx_cpu::gemm::{MatMut, MatRef, sgemm};
                    sgemm(
                        1.0,
                        MatRef::row_major(&a, n, n),
                        MatRef::row_major(&b, n, n),
                        0.0,
                        MatMut::row_major(&mut c, n, n),
                        th,
                    );
                });
                let check = rel_err(&c, &reference);
                rows.push(
                    Row::new(&id, &format!("rlx_cpu::sgemm_{th}t"), t)
                        .flops(flops)
                        .check(check)
                        .note("the GEMM kernel alone"),
                );
            }
            let f = rlx::w4(n);
            let run = || f.run(&[("a", &a), ("b", &b)]);
            let check = rel_err(&run()[0], &reference);
            let t_f32 = time(plan, run);
            let f32_s = t_f32.median_s;
            rows.push(Row::new(&id, "rlx", t_f32).flops(flops).check(check));
            if n == W4_LOWP {
                rows.extend(w4_lowp(plan, n, &a, &b, &reference, f32_s));
                rows.extend(w4_lowp_kernels(plan, n, &a, &b, &reference, threads));
                rows.extend(w4_decode(plan));
            }
        }
        match args.torch_python.as_deref() {
            Some(py) => after.extend(w4_peer::add_rows(&mut rows, py, threads)),
            None => after.push(
                "W4 peer: add --torch PATH/TO/python (with torch) for PyTorch's rows in this run"
                    .into(),
            ),
        }
    }
    let ps = inputs::mlp_params(5);
    let ((x5, _), (x6, y6)) = nd::mlp_batches();
    if w("W5") || w("W9") {
        let mlp = nd::Mlp::new(&ps);
        let xa = Array2::from_shape_vec((W5_BATCH, MLP[0]), x5.clone()).expect("W5 x");
        let reference = mlp.forward(&xa).into_raw_vec_and_offset().0;
        let flops = (mlp_flops_per_row() * W5_BATCH) as f64;
        if w("W5") {
            if args.ndarray {
                rows.push(
                    Row::new(
                        "W5_mlp_forward_b1024",
                        "ndarray",
                        time(plan, || mlp.forward(&xa)),
                    )
                    .flops(flops),
                );
            }
            let f = rlx::w5(&ps);
            let run = || f.run(&[("x", &x5)]);
            let check = rel_err(&run()[0], &reference);
            rows.push(
                Row::new("W5_mlp_forward_b1024", "rlx", time(plan, run))
                    .flops(flops)
                    .check(check),
            );
        }
        if w("W9") {
            let mut compile_times = Vec::new();
            for _ in 0..plan.repeats.clamp(3, 9) {
                let t0 = std::time::Instant::now();
                let m = rlx::w9_compile(&ps);
                compile_times.push(t0.elapsed().as_secs_f64());
                drop(m);
            }
            rows.push(
                Row::new("W9_compile_latency", "rlx", median(compile_times))
                    .note("fresh W5 Func traced → compiled by Model::on (no cache)"),
            );
            let mut times = Vec::new();
            let mut check = 0.0f64;
            for _ in 0..plan.repeats.clamp(1, 5) {
                let t0 = std::time::Instant::now();
                let out = rlx::w9_once(&ps, &x5);
                times.push(t0.elapsed().as_secs_f64());
                check = check.max(rel_err(&out, &reference));
            }
            rows.push(
                Row::new("W9_compile_latency", "rlx_plus_first_run", median(times))
                    .check(check)
                    .note("fresh W5 Func → Model::on (no cache) → first result"),
            );
        }
    }
    if w("W6") {
        let y_idx: Vec<usize> = y6.iter().map(|&v| v as usize).collect();
        let xa = Array2::from_shape_vec((W6_BATCH, MLP[0]), x6.clone()).expect("W6 x");
        let flops = (3 * mlp_flops_per_row() * W6_BATCH) as f64;
        if args.ndarray {
            let mut mlp = nd::Mlp::new(&ps);
            let mut opt = nd::AdamW::new(&mlp);
            let first = nd::w6_step(&mut mlp, &mut opt, &xa, &y_idx);
            let t = time(plan, || nd::w6_step(&mut mlp, &mut opt, &xa, &y_idx));
            rows.push(
                Row::new("W6_mlp_train_step_b256", "ndarray", t)
                    .flops(flops)
                    .steps()
                    .note(&format!("backward written by hand; first loss {first:.4}")),
            );
        }
        w6_rlx(&mut rows, plan, &ps, &x6, &y6, flops);
    }
    if w("W7") {
        let (b, h, sq, d) = ATT;
        let [q, k, v] = nd::w7_inputs();
        let reference = nd::w7(&q, &k, &v);
        let flops = (4 * b * h * sq * sq * d) as f64;
        if args.ndarray {
            rows.push(
                Row::new(
                    "W7_causal_attention",
                    "ndarray",
                    time(plan, || nd::w7(&q, &k, &v)),
                )
                .flops(flops),
            );
        }
        let (qs, ks, vs) = (
            rlx::swap_heads_seq(&q, b, h, sq, d, true),
            rlx::swap_heads_seq(&k, b, h, sq, d, true),
            rlx::swap_heads_seq(&v, b, h, sq, d, true),
        );
        let f = rlx::w7();
        let run = || f.run(&[("q", &qs), ("k", &ks), ("v", &vs)]);
        let out = rlx::swap_heads_seq(&run()[0], b, h, sq, d, false);
        let check = rel_err(&out, &reference);
        rows.push(
            Row::new("W7_causal_attention", "rlx", time(plan, run))
                .flops(flops)
                .check(check)
                .note("[B,S,H,D] layout"),
        );
    }
    if w("W8") {
        let (a, b) = ([1.0f32, -2.0, 3.0], [0.5f32, 0.5, -4.0]);
        if args.ndarray {
            let (aa, ba) = (Array1::from_vec(a.to_vec()), Array1::from_vec(b.to_vec()));
            rows.push(Row::new(
                "W8_dispatch_3elem",
                "ndarray",
                time(plan, || (&aa + &ba).mapv_into(|v| v.max(0.0))),
            ));
        }
        let f = rlx::w8();
        let run = || f.run(&[("a", &a), ("b", &b)]);
        let check = rel_err(&run()[0], &[1.5, 0.0, 0.0]);
        rows.push(
            Row::new("W8_dispatch_3elem", "rlx", time(plan, run))
                .check(check)
                .note("Jitted::run"),
        );
        // The eager style with new data every call: from_vec → ops → to_vec.
        let calls = std::cell::Cell::new(0u64);
        let eager = || {
            calls.set(calls.get() + 1);
            let bump = (calls.get() % 7) as f32;
            let ta = rlx_tensor::Tensor::from_vec(vec![a[0] + bump, a[1], a[2]], [3]);
            let tb = rlx_tensor::Tensor::from_vec(b.to_vec(), [3]);
            (&ta + &tb).relu().to_vec()
        };
        let compiles = rlx_tensor::cache_compile_count();
        let t = time(plan, eager);
        let recompiles = rlx_tensor::cache_compile_count() - compiles;
        rows.push(Row::new("W8_dispatch_3elem", "rlx_eager", t).note(&format!(
            "from_vec → ops → to_vec, new data each call; {recompiles} compiles in {} calls",
            calls.get()
        )));
    }
    if w("W10") {
        let x = nd::w10_input();
        let xa = Array2::from_shape_vec(W10, x.clone()).expect("W10 x");
        let reference = nd::w10(&xa).into_raw_vec_and_offset().0;
        let bytes = (2 * W10.0 * W10.1 * 4) as f64;
        if args.ndarray {
            rows.push(
                Row::new(
                    "W10_vmap_grad",
                    "ndarray_hand_derived",
                    time(plan, || nd::w10(&xa)),
                )
                .bytes(bytes),
            );
        }
        w10_rlx(&mut rows, plan, &x, &reference, bytes);
    }
    if w("W11") {
        after.extend(w11::rows(
            &mut rows,
            args.w11_steps,
            &args.w11_layers,
            args.w11_flat,
        ));
        if let Some(py) = args.torch_python.as_deref() {
            after.extend(w11_peer::add_rows(&mut rows, py, args.w11_steps, threads));
        }
    }
    if w("W12") {
        after.extend(w12::rows(&mut rows, plan, &args.w12_args));
    }
    if w("OPS") {
        after.extend(ops::rows(&mut rows, plan, args.torch_python.as_deref()));
    }
    report::print_table(&rows, &bounds);
    for line in after {
        println!("{line}");
    }
    if args.kernels {
        kernels::print();
    }
    if args.json {
        for r in &rows {
            println!("{}", r.json());
        }
    }
}

#[cfg(feature = "train")]
fn w6_rlx(rows: &mut Vec<Row>, plan: Plan, ps: &[Vec<f32>], x: &[f32], y: &[f32], flops: f64) {
    use rlx_tensor::AdamW;
    // AdamW(1e-3, 0.9, 0.999, 1e-8, wd 0.01) in f32 arithmetic, as the peers compute it,
    // and with rlx's default f64 arithmetic (same formula, one rounding per result).
    let configs: [(&str, AdamW, &str); 2] = [
        (
            "rlx",
            AdamW::new(1e-3).with_f32_math(true),
            "f32 AdamW math like the peers",
        ),
        (
            "rlx_f64_adamw",
            AdamW::new(1e-3),
            "f64 AdamW math (the default)",
        ),
    ];
    for (system, mut opt, math) in configs {
        let mut f = rlx::w6_func(ps, W6_BATCH);
        let wrt = f.param_names();
        let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
        let fused = f.explain_train_step(&mut opt, &wrt).starts_with("program");
        let (nf, first) = rlx::w6_step(&f, &mut opt, x, y);
        f = nf;
        let t = time(plan, || {
            let (nf, loss) = rlx::w6_step(&f, &mut opt, x, y);
            f = nf;
            loss
        });
        let path = if fused {
            "one compiled program: forward + backward + AdamW"
        } else {
            "host optimizer"
        };
        rows.push(
            Row::new("W6_mlp_train_step_b256", system, t)
                .flops(flops)
                .steps()
                .note(&format!(
                    "Func::train_step_all, {path}, {math}; first loss {first:.4}"
                )),
        );
    }
}

#[cfg(not(feature = "train"))]
fn w6_rlx(_: &mut Vec<Row>, _: Plan, _: &[Vec<f32>], _: &[f32], _: &[f32], _: f64) {
    println!("note: W6 on rlx skipped: built without feature `train` (Func::train_step_all)");
}

#[cfg(feature = "transforms")]
fn w10_rlx(rows: &mut Vec<Row>, plan: Plan, x: &[f32], reference: &[f32], bytes: f64) {
    let f = rlx::w10();
    let run = || f.run(&[("x", x)]);
    let check = rel_err(&run()[0], reference);
    rows.push(
        Row::new("W10_vmap_grad", "rlx", time(plan, run))
            .bytes(bytes)
            .check(check)
            .note("jit(vmap(grad(f)))"),
    );
}

#[cfg(not(feature = "transforms"))]
fn w10_rlx(_: &mut Vec<Row>, _: Plan, _: &[f32], _: &[f32], _: f64) {
    println!(
        "note: W10 on rlx skipped: built without feature `transforms` (Func::grad, Func::vmap)"
    );
}

/// W4 at `n = W4_LOWP`: the low-precision GEMM kernels alone (no graph), on 1 and
/// `threads` threads, beside the `rlx_cpu::sgemm_*` rows: bf16 and f16 operands with f32
/// accumulation (`gemm_half`, on the default unit for this CPU: AMX, AVX512_BF16, widened
/// to f32 on AVX-512, or cast) and int8 with i32 accumulation (`gemm_i8`: AMX-INT8, VNNI
/// or portable). The int8 operands are the f32 ones scaled by 32 and rounded; its check
/// is against the exact integer product. Notes name the unit used.
fn w4_lowp_kernels(
    plan: Plan,
    n: usize,
    a: &[f32],
    b: &[f32],
    reference: &[f32],
    threads: usize,
) -> Vec<Row> {
    use rlx_cpu::gemm::int8::{I8Path, gemm_i8};
    use rlx_cpu::gemm::lowp::{HalfFloat, LowpPath, bf16, f16, gemm_half};
    use rlx_cpu::gemm::{MatMut, MatRef};
    let id = format!("W4_matmul_{n}");
    let flops = 2.0 * (n as f64).powi(3);
    let mut rows = Vec::new();
    fn half_rows<T: HalfFloat>(
        plan: Plan,
        (id, n, flops): (&str, usize, f64),
        (a, b, reference): (&[f32], &[f32], &[f32]),
        threads: usize,
        rows: &mut Vec<Row>,
    ) {
        let (ah, bh): (Vec<T>, Vec<T>) = (
            a.iter().map(|&v| T::from_f32_rne(v)).collect(),
            b.iter().map(|&v| T::from_f32_rne(v)).collect(),
        );
        let note = format!(
            "{} kernel alone, {} unit, f32 accumulation",
            T::NAME,
            LowpPath::default_for::<T>().name()
        );
        for th in [1, threads] {
            let mut c = vec![0f32; n * n];
            let t = time(plan, || {
                gemm_half(
                    MatRef::row_major(&ah, n, n),
                    MatRef::row_major(&bh, n, n),
                    MatMut::row_major(&mut c, n, n),
                    false,
                    th,
                )
            });
            let check = rel_err(&c, reference);
            rows.push(
                Row::new(id, &format!("rlx_cpu::gemm_half_{}_{th}t", T::NAME), t)
                    .flops(flops)
                    .check(check)
                    .note(&note),
            );
        }
    }
    half_rows::<bf16>(plan, (&id, n, flops), (a, b, reference), threads, &mut rows);
    half_rows::<f16>(plan, (&id, n, flops), (a, b, reference), threads, &mut rows);
    let q = |v: &[f32]| -> Vec<i8> {
        v.iter()
            .map(|&x| (x * 32.0).round().clamp(-127.0, 127.0) as i8)
            .collect()
    };
    let (ai, bi) = (q(a), q(b));
    // The exact product of 64 rows, in i64, for the check.
    let rows_checked = 64.min(n);
    let mut exact = vec![0i64; rows_checked * n];
    for i in 0..rows_checked {
        for p in 0..n {
            let x = ai[i * n + p] as i64;
            for (j, e) in exact[i * n..(i + 1) * n].iter_mut().enumerate() {
                *e += x * bi[p * n + j] as i64;
            }
        }
    }
    let note = format!(
        "int8 kernel alone, {} unit, i32 accumulation (ops counted as FLOP); check = elements of the first 64 rows that differ from the exact product",
        I8Path::default_path().name()
    );
    for th in [1, threads] {
        let mut c = vec![0i32; n * n];
        let t = time(plan, || {
            gemm_i8(
                MatRef::row_major(&ai, n, n),
                MatRef::row_major(&bi, n, n),
                MatMut::row_major(&mut c, n, n),
                false,
                th,
            )
        });
        let wrong = exact
            .iter()
            .zip(&c)
            .filter(|&(&e, &g)| e != g as i64)
            .count();
        rows.push(
            Row::new(&id, &format!("rlx_cpu::gemm_i8_{th}t"), t)
                .flops(flops)
                .check(wrong as f64)
                .note(&note),
        );
    }
    rows
}

/// Rows of A in W4's decoding-step products (one token, and a few).
const W4_DECODE_ROWS: [usize; 2] = [1, 8];
/// The weight's size in W4's decoding-step products.
const W4_DECODE_N: usize = 4096;

/// W4 as a model's decoding step: `m` rows (`W4_DECODE_ROWS`) times an `n × n` weight
/// (`W4_DECODE_N`), in f32 and bf16 (activations, weight and result; f32 accumulation)
/// with the weight in both layouts, and as MX fp8, MX fp4 and NVFP4 scaled matmuls from
/// codes quantized once; notes give the time ratio to the f32 row of the same `m`
/// (rlx's own: torch has no CPU scaled matmul).
fn w4_decode(plan: Plan) -> Vec<Row> {
    use rlx_tensor::{HostData, ScaleLayout, ScaledFormat};
    let n = W4_DECODE_N;
    let id = format!("W4_decode_{n}");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut data = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    };
    let (a, w) = (data(n * n), data(n * n));
    // The scaled rows multiply by the transposed operand's codes (K-last), and the
    // `_wt` rows by the transposed weight.
    let wt = transposed_square(&w, n);
    let mut rows = Vec::new();
    let mut baselines = Vec::new();
    for m in W4_DECODE_ROWS {
        let f = rlx::w4_rows(m, n, false, rlx_tensor::DType::F32);
        let x = &a[..m * n];
        let run = || f.run(&[("x", x), ("w", &w)]);
        let reference = run()[0].clone();
        let t = time(plan, run);
        let f32_s = t.median_s;
        rows.push(
            Row::new(&id, &format!("rlx_f32_rows{m}"), t)
                .flops(2.0 * (m * n * n) as f64)
                .note("f32 baseline of the decoding-step rows below (weight [in, out])"),
        );
        // The same product with the weight stored [out, in] (nn.Linear's layout).
        let f = rlx::w4_rows(m, n, true, rlx_tensor::DType::F32);
        let run = || f.run(&[("x", x), ("w", &wt)]);
        let check = rel_err(&run()[0], &reference);
        let t = time(plan, run);
        rows.push(
            Row::new(&id, &format!("rlx_f32_rows{m}_wt"), t)
                .flops(2.0 * (m * n * n) as f64)
                .check(check)
                .note("the f32 rows with the weight stored [out, in] (nn.Linear), x·wᵀ"),
        );
        rows.extend(w4_decode_bf16(
            plan,
            &id,
            m,
            (x, &w, &wt),
            (&reference, f32_s),
        ));
        baselines.push((m, f32_s, reference));
    }
    let formats = [
        ("mxfp8", ScaledFormat::F8E4M3, ScaleLayout::mx()),
        ("mxfp4", ScaledFormat::F4E2M1, ScaleLayout::mx()),
        ("nvfp4", ScaledFormat::F4E2M1, ScaleLayout::nvfp4()),
    ];
    for (tag, fmt, layout) in formats {
        let (quantize, _) = rlx::w4_scaled_parts(n, fmt, layout);
        let q = quantize.run_host(&[("a", HostData::F32(&a)), ("bt", HostData::F32(&wt))]);
        let per_row = q[2].bytes.len() / n;
        for (m, f32_s, reference) in &baselines {
            let m = *m;
            let g = rlx::w4_scaled_rows(m, n, fmt, layout);
            let ins = [
                ("lq", HostData::U8(&q[0].bytes[..m * n])),
                ("rq", HostData::U8(&q[1].bytes)),
                ("ls", HostData::U8(&q[2].bytes[..m * per_row])),
                ("rs", HostData::U8(&q[3].bytes)),
            ];
            let run = || g.run_host(&ins)[0].to_f32_vec();
            let check = rel_err(&run(), reference);
            let t = time(plan, run);
            let note = format!(
                "{m} row(s) of codes × a {n}² weight's codes ({tag}, quantized once), {:.2}x the f32 rows' time",
                t.median_s / f32_s
            );
            rows.push(
                Row::new(&id, &format!("rlx_scaled_{tag}_rows{m}"), t)
                    .flops(2.0 * (m * n * n) as f64)
                    .check(check)
                    .note(&note),
            );
        }
    }
    rows
}

/// W4_decode's bf16 rows for `m` rows of `x` against `w` stored `[in, out]` and its
/// transpose `wt` (both rounded to bf16 once, outside the timing): the product read back
/// as f32 against the f32 rows' `reference`, the time against theirs (`f32_s`).
fn w4_decode_bf16(
    plan: Plan,
    id: &str,
    m: usize,
    (x, w, wt): (&[f32], &[f32], &[f32]),
    (reference, f32_s): (&[f32], f64),
) -> Vec<Row> {
    use rlx_tensor::HostData;
    let n = W4_DECODE_N;
    let to_bf16 = |v: &[f32]| {
        v.iter()
            .map(|&e| half::bf16::from_f32(e))
            .collect::<Vec<_>>()
    };
    let xb = to_bf16(x);
    let mut rows = Vec::new();
    for (out_in, weight, suffix, layout) in [
        (false, w, "", "x·w, w [in, out]"),
        (true, wt, "_wt", "x·wᵀ, w [out, in] (nn.Linear)"),
    ] {
        let wb = to_bf16(weight);
        let f = rlx::w4_rows(m, n, out_in, rlx_tensor::DType::BF16);
        let ins = [("x", HostData::from(&xb)), ("w", HostData::from(&wb))];
        let run = || f.run_host(&ins);
        let check = rel_err(&run()[0].to_f32_vec(), reference);
        let t = time(plan, run);
        let note = format!(
            "{layout}, bf16 in and out (f32 accumulation), {:.2}x the f32 rows' time",
            t.median_s / f32_s
        );
        rows.push(
            Row::new(id, &format!("rlx_bf16_rows{m}{suffix}"), t)
                .flops(2.0 * (m * n * n) as f64)
                .check(check)
                .note(&note),
        );
    }
    rows
}

/// The `n × n` row-major matrix `b` transposed.
fn transposed_square(b: &[f32], n: usize) -> Vec<f32> {
    let mut t = vec![0f32; n * n];
    for p in 0..n {
        for j in 0..n {
            t[j * n + p] = b[p * n + j];
        }
    }
    t
}

/// W4 at `n = W4_LOWP` in low precision: a bf16 matmul (bf16 operands and result,
/// f32 accumulation) and scaled matmuls — MX fp8 (e4m3), MX fp4 (e2m1), both with
/// 32-element E8M0 blocks, and NVFP4 (e2m1, 16-element E4M3 groups) — that quantize both
/// f32 operands in the graph, each also alone on operands quantized once; notes give the
/// time ratio to the f32 `rlx` row (`f32_s`).
fn w4_lowp(plan: Plan, n: usize, a: &[f32], b: &[f32], reference: &[f32], f32_s: f64) -> Vec<Row> {
    let id = format!("W4_matmul_{n}");
    let flops = 2.0 * (n as f64).powi(3);
    let mut rows = Vec::new();
    let f = rlx::w4_bf16(n);
    let run = || f.run(&[("a", a), ("b", b)]);
    let check = rel_err(&run()[0], reference);
    let t = time(plan, run);
    let note = format!("bf16 in/out, {:.2}x the f32 rlx time", t.median_s / f32_s);
    rows.push(
        Row::new(&id, "rlx_bf16", t)
            .flops(flops)
            .check(check)
            .note(&note),
    );
    // scaled_matmul is TN (both operands K-last): feed bᵀ so the product is a·b.
    let bt = transposed_square(b, n);
    use rlx_tensor::{ScaleLayout, ScaledFormat};
    let formats = [
        (
            "mxfp8",
            "MX fp8 e4m3",
            ScaledFormat::F8E4M3,
            ScaleLayout::mx(),
        ),
        (
            "mxfp4",
            "MX fp4 e2m1",
            ScaledFormat::F4E2M1,
            ScaleLayout::mx(),
        ),
        (
            "nvfp4",
            "NVFP4 (e2m1, E4M3 scales per 16)",
            ScaledFormat::F4E2M1,
            ScaleLayout::nvfp4(),
        ),
    ];
    for (tag, name, fmt, layout) in formats {
        let f = rlx::w4_scaled(n, fmt, layout);
        let run = || f.run(&[("a", a), ("bt", &bt)]);
        let check = rel_err(&run()[0], reference);
        let t = time(plan, run);
        let note = format!(
            "{name} (quantize both; fp4 on the integer dot-product unit with VNNI and no AMX, on AMX or vdpbf16ps bf16 panels where exact, else codes decoded by the f32 kernel's packers (AVX-512) or f32 panels), {:.2}x the f32 rlx time",
            t.median_s / f32_s
        );
        rows.push(
            Row::new(&id, &format!("rlx_scaled_{tag}"), t)
                .flops(flops)
                .check(check)
                .note(&note),
        );
        // The scaled matmul alone, on operands quantized once (as a quantized model's
        // weights are): the kernel the row above runs after its quantizations.
        let (quantize, matmul) = rlx::w4_scaled_parts(n, fmt, layout);
        use rlx_tensor::HostData;
        let q = quantize.run_host(&[("a", HostData::F32(a)), ("bt", HostData::F32(&bt))]);
        let ins = [
            ("lq", HostData::U8(&q[0].bytes)),
            ("rq", HostData::U8(&q[1].bytes)),
            ("ls", HostData::U8(&q[2].bytes)),
            ("rs", HostData::U8(&q[3].bytes)),
        ];
        let run = || matmul.run_host(&ins)[0].to_f32_vec();
        let check = rel_err(&run(), reference);
        let t = time(plan, run);
        let note = format!(
            "the {name} scaled matmul alone on operands quantized once, {:.2}x the f32 rlx time",
            t.median_s / f32_s
        );
        rows.push(
            Row::new(&id, &format!("rlx_scaled_{tag}_matmul"), t)
                .flops(flops)
                .check(check)
                .note(&note),
        );
    }
    rows
}
