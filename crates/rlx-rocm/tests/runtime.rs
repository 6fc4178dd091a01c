//! The ROCm device's run-time half without an AMD GPU, and with one where present:
//! - the HIP-dialect program runs through the shared executor on the host emulator
//!   (planned as for rocBLAS: BLAS GEMMs, no fused epilogue, no fp8) against the oracle;
//! - the whole program the device loads (every kernel kind in one translation unit, the
//!   executor's parameter blocks and error word included) compiles with hiprtc;
//! - availability is honest: `is_available` agrees with the probe, and asking for the
//!   device without one is an error carrying the probe's reason;
//! - on a real AMD GPU, the same graphs through [`RocmBackend`] (skipped elsewhere,
//!   printing why).
//!
//! The emulator needs a C++ compiler and hiprtc needs the HIP runtime library
//! (`.ci/run` installs it); each test skips, printing why, without its tool.

use rlx_ir::{
    Activation, BinaryOp, DType, Dim, Graph, MaskKind, NodeId, Op, ReduceOp, Shape, TensorData,
};
use rlx_rocm::{RocmBackend, compile_emulated, hiprtc};
use rlx_runtime::{Backend, Device, Executable, RuntimeResult};
use rlx_testkit::{
    Rng, build_attention_graph, build_random_graph, gqa_attention_graph, op, random_data, reduce,
};
use std::sync::Arc;

fn emulator_ok() -> bool {
    match rlx_rocm::emulator() {
        Ok(_) => true,
        Err(e) => {
            println!("skipping: {e}");
            false
        }
    }
}

fn check(g: &Graph, args: &[TensorData]) -> Arc<dyn Executable> {
    rlx_testkit::check(g, args, "rocm (emulated HIP)", compile_emulated)
}

/// Random inputs for every argument of `g`.
fn inputs(g: &Graph, rng: &mut Rng) -> Vec<TensorData> {
    rlx_testkit::arg_names(g)
        .iter()
        .map(|n| {
            let node = g
                .nodes()
                .iter()
                .find(|x| matches!(&x.op, Op::Input { name, .. } if name == n))
                .expect("argument node");
            random_data(rng, &node.shape)
        })
        .collect()
}

#[test]
fn random_graphs_match_the_oracle_as_hip_on_the_emulator() {
    if !emulator_ok() {
        return;
    }
    for seed in 0..16u64 {
        let mut rng = Rng::new(0x5eed_0000 + seed);
        let (g, args) = build_random_graph(&mut rng, seed % 4 == 3);
        check(&g, &args);
    }
}

#[test]
fn fused_attention_matches_the_oracle_as_hip_on_the_emulator() {
    if !emulator_ok() {
        return;
    }
    for seed in 0..4u64 {
        let mut rng = Rng::new(0xa77e_0000 + seed);
        let (g, args) = build_attention_graph(&mut rng);
        check(&g, &args);
    }
}

/// `act(x·w + b)`: rocBLAS has no fused epilogue, so the product is a BLAS call and the
/// bias and activation a generated kernel over it; batched products with broadcast
/// batches use rocBLAS's pointer-array form. Values against the oracle.
#[test]
fn matmuls_take_rocblas_routes_without_fused_epilogues() {
    if !emulator_ok() {
        return;
    }
    let mut rng = Rng::new(19);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for act in [None, Some(Activation::Relu), Some(Activation::GeluApprox)] {
            let mut g = Graph::new("linear");
            let shapes = [
                Shape::new(&[6, 9], dt),
                Shape::new(&[9, 4], dt),
                Shape::new(&[4], dt),
            ];
            let args: Vec<TensorData> = shapes.iter().map(|s| random_data(&mut rng, s)).collect();
            let ids: Vec<NodeId> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| g.input(format!("x{i}"), s.clone()))
                .collect();
            let y = op(&mut g, Op::FusedMatMulBiasAct { activation: act }, ids);
            g.set_outputs(vec![y]);
            let plan = check(&g, &args).explain();
            assert!(plan.contains(&format!("rocblas[{dt}]")), "{plan}");
            assert!(plan.contains("_ep"), "the epilogue is a kernel: {plan}");
            assert!(!plan.contains("cublas"), "{plan}");
        }
    }
    // [2, 1, 5, 3] x [1, 3, 3, 4]: both batch dims broadcast, one pointer per product.
    let mut g = Graph::new("bmm");
    let a = g.input("a", Shape::new(&[2, 1, 5, 3], DType::F32));
    let b = g.input("b", Shape::new(&[1, 3, 3, 4], DType::F32));
    let p = op(&mut g, Op::MatMul, vec![a, b]);
    g.set_outputs(vec![p]);
    let args = inputs(&g, &mut rng);
    let plan = check(&g, &args).explain();
    assert!(plan.contains("rocblas(pointer batches)"), "{plan}");
}

/// Row ops, reductions over a dynamic dim, and a grouped-query attention with every mask
/// kind: the executor binds dynamic dims into the HIP program's parameter blocks.
#[test]
fn rows_reductions_and_attention_with_dynamic_dims_match_the_oracle() {
    if !emulator_ok() {
        return;
    }
    let mut rng = Rng::new(23);
    let mut g = Graph::new("rows");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(300)], DType::F32),
    );
    let s = op(&mut g, Op::Softmax { axis: 1 }, vec![x]);
    let m = reduce(&mut g, ReduceOp::Max, vec![0], true, x);
    let d = op(&mut g, Op::Binary(BinaryOp::Sub), vec![x, m]);
    let t = reduce(&mut g, ReduceOp::Sum, vec![1], false, d);
    g.set_outputs(vec![s, t]);
    let exe = compile_emulated(&g).expect("compiles once for every binding");
    for rows in [1usize, 5, 33] {
        let args = vec![random_data(&mut rng, &Shape::new(&[rows, 300], DType::F32))];
        rlx_testkit::check_executable(&g, &args, "rocm (emulated HIP)", exe.as_ref());
    }
    for mask in [MaskKind::None, MaskKind::Causal] {
        let g = gqa_attention_graph(DType::F32, mask);
        for seq in [1usize, 7] {
            let mut args = Vec::new();
            for n in rlx_testkit::arg_names(&g) {
                let node = g
                    .nodes()
                    .iter()
                    .find(|x| matches!(&x.op, Op::Input { name, .. } if *name == n))
                    .unwrap();
                let dims: Vec<usize> = node
                    .shape
                    .dims()
                    .iter()
                    .map(|d| match d {
                        Dim::Static(v) => *v,
                        Dim::Dynamic(_) => seq,
                    })
                    .collect();
                args.push(random_data(
                    &mut rng,
                    &Shape::new(&dims, node.shape.dtype()),
                ));
            }
            check(&g, &args);
        }
    }
}

/// A device-side fault (integer division by zero) comes back through the HIP program's
/// error word as a run error naming the kernel; the same executable then runs clean
/// data correctly (the word is reset per run).
#[test]
fn device_side_errors_come_back_as_run_errors() {
    if !emulator_ok() {
        return;
    }
    let mut g = Graph::new("div");
    let a = g.input("a", Shape::new(&[4], DType::I32));
    let b = g.input("b", Shape::new(&[4], DType::I32));
    let q = op(&mut g, Op::Binary(BinaryOp::Div), vec![a, b]);
    g.set_outputs(vec![q]);
    let exe = compile_emulated(&g).unwrap();
    let av = TensorData::from_i64_as(DType::I32, &[4], &[7, -7, 9, 1]);
    let zero = TensorData::from_i64_as(DType::I32, &[4], &[2, 0, 1, 1]);
    let err = exe.run(&[av.view(), zero.view()]).unwrap_err().to_string();
    assert!(
        err.contains("division by zero") && err.contains("kernel 0"),
        "{err}"
    );
    let ok = TensorData::from_i64_as(DType::I32, &[4], &[2, 2, -4, 1]);
    // Division truncates toward zero, like the oracle.
    assert_eq!(
        exe.run(&[av.view(), ok.view()]).unwrap()[0].to_i64_vec(),
        vec![3, -3, -2, 1]
    );
}

/// What `explain` says of a HIP program: the backend, hiprtc and the device.
#[test]
fn the_plan_names_rocm_hiprtc_and_the_emulated_device() {
    if !emulator_ok() {
        return;
    }
    let mut g = Graph::new("relu");
    let x = g.input("x", Shape::new(&[8], DType::F32));
    let y = op(&mut g, Op::Activation(Activation::Relu), vec![x]);
    g.set_outputs(vec![y]);
    let plan = compile_emulated(&g).unwrap().explain();
    assert!(
        plan.contains("rocm: host emulator of HIP") && plan.contains("one hiprtc module"),
        "{plan}"
    );
    let src = rlx_rocm::generated_source(&g).unwrap();
    assert!(src.starts_with("// HIP C++ (hiprtc)"), "{src}");
}

/// A graph with every kernel kind the executor generates: elementwise, reductions,
/// row ops, a BLAS-able and an integer matmul, attention, and native opaque ops.
fn every_kind() -> Graph {
    let mut g = Graph::new("every_kind");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(16)], DType::F32),
    );
    let w = g.input("w", Shape::new(&[16, 16], DType::F32));
    let h = g.input("h", Shape::new(&[16], DType::F16));
    let i = g.input("i", Shape::new(&[4, 4], DType::I32));
    let e = op(&mut g, Op::Activation(Activation::Gelu), vec![x]);
    let hf = op(&mut g, Op::Cast { to: DType::F32 }, vec![h]);
    let e = op(&mut g, Op::Binary(BinaryOp::Mul), vec![e, hf]);
    let r = reduce(&mut g, ReduceOp::Sum, vec![0], false, e);
    let s = op(&mut g, Op::Softmax { axis: 1 }, vec![e]);
    let mm = op(&mut g, Op::MatMul, vec![s, w]);
    let ii = op(&mut g, Op::MatMul, vec![i, i]);
    let c = op(&mut g, Op::Concat { axis: 1 }, vec![mm, x]);
    let cs = op(
        &mut g,
        Op::Cumsum {
            axis: 1,
            exclusive: false,
        },
        vec![c],
    );
    g.set_outputs(vec![r, cs, ii]);
    g
}

/// The whole HIP program of a graph with every kernel kind, as the device would load
/// it, compiles with hiprtc for gfx90a (CDNA2, 64-wide waves) and gfx1030 (RDNA2,
/// 32-wide) where the runtime knows them (and attention's program separately): the
/// executor's prelude, parameter blocks and atomics are valid HIP, and every entry the
/// executor launches is in the code object.
#[test]
fn the_devices_whole_program_compiles_with_hiprtc() {
    if let Err(e) = hiprtc::available() {
        println!("skipping: {e}");
        return;
    }
    let known = hiprtc::supported_archs().unwrap_or_default();
    for arch in ["gfx90a", "gfx1030"] {
        if !known.iter().any(|a| a == arch) {
            println!("skipping {arch}: this HIP runtime cannot target it");
            continue;
        }
        // The least number of entry points each program has (a kernel may have several).
        for (g, least) in [
            (every_kind(), 6),
            (gqa_attention_graph(DType::F32, MaskKind::Causal), 1),
            // f16 attention is an opaque op the executor launches as an attention entry.
            (gqa_attention_graph(DType::F16, MaskKind::Causal), 1),
        ] {
            let image = rlx_rocm::compile_generated(&g, arch)
                .unwrap_or_else(|e| panic!("{} for {arch}: {e}", g.name));
            assert_eq!(&image[..4], b"\x7fELF", "{}: a code object", g.name);
            let src = rlx_rocm::generated_source(&g).unwrap();
            let entries: Vec<&str> = src
                .lines()
                .filter_map(|l| l.strip_prefix("RLX_KERNEL void "))
                .map(|rest| rest.split('(').next().unwrap())
                .collect();
            assert!(entries.len() >= least, "{}: entries {entries:?}", g.name);
            for name in entries {
                let found = image
                    .windows(name.len() + 1)
                    .any(|w| &w[..name.len()] == name.as_bytes() && w[name.len()] == 0);
                assert!(
                    found,
                    "{} for {arch}: entry {name} missing from the code object",
                    g.name
                );
            }
        }
    }
    // The every-kind graph's program must run on the emulator too (same source text
    // but for RLX_EMU), against the oracle.
    if emulator_ok() {
        let g = every_kind();
        let mut rng = Rng::new(29);
        let args = vec![
            random_data(&mut rng, &Shape::new(&[3, 16], DType::F32)),
            random_data(&mut rng, &Shape::new(&[16, 16], DType::F32)),
            random_data(&mut rng, &Shape::new(&[16], DType::F16)),
            random_data(&mut rng, &Shape::new(&[4, 4], DType::I32)),
        ];
        check(&g, &args);
    }
}

#[test]
fn availability_is_the_probe_and_its_absence_an_error_with_the_reason() {
    let avail = RocmBackend.is_available(Device::Rocm);
    assert_eq!(avail, rlx_rocm::unavailable_reason().is_none());
    assert!(!RocmBackend.is_available(Device::Cuda));
    assert_eq!(RocmBackend.devices(), &[Device::Rocm]);
    if avail {
        return;
    }
    let reason = rlx_rocm::unavailable_reason().unwrap();
    println!("ROCm unavailable: {reason}");
    // Each failure names the missing piece: a library that does not load, or a runtime
    // that finds no GPU.
    assert!(
        reason.contains("cannot be opened")
            || reason.contains("cannot be loaded")
            || reason.contains("no AMD GPU"),
        "{reason}"
    );
    assert_eq!(
        RocmBackend.unavailable_reason(Device::Rocm).as_deref(),
        Some(reason.as_str())
    );
    let mut g = Graph::new("x");
    let x = g.input("x", Shape::new(&[2], DType::F32));
    g.set_outputs(vec![x]);
    let e = RocmBackend
        .compile(Device::Rocm, &g)
        .err()
        .expect("no device, no executable")
        .to_string();
    assert!(
        e.contains("ROCm is not available") && e.contains(&reason),
        "{e}"
    );
    // Through the registry the error carries the same reason.
    rlx_runtime::register_backend(Arc::new(RocmBackend));
    let e = rlx_runtime::compile(Device::Rocm, &g)
        .err()
        .expect("unavailable")
        .to_string();
    assert!(e.contains(&reason) && e.contains("ROCm"), "{e}");
}

/// On an AMD GPU: random graphs, attention and the every-kind graph through the
/// backend, against the oracle.
#[test]
fn graphs_match_the_oracle_on_an_amd_gpu() {
    let gpu = match rlx_rocm::device() {
        Ok(d) => d,
        Err(e) => {
            println!("skipping: no usable AMD GPU ({e})");
            return;
        }
    };
    println!(
        "running on {} ({})",
        rlx_cuda::device::Gpu::describe(gpu.as_ref()),
        gpu.blas_status()
    );
    let on_gpu =
        |g: &Graph| -> RuntimeResult<Arc<dyn Executable>> { RocmBackend.compile(Device::Rocm, g) };
    for seed in 0..32u64 {
        let mut rng = Rng::new(0x6a1_0000 + seed);
        let (g, args) = build_random_graph(&mut rng, seed % 2 == 1);
        rlx_testkit::check(&g, &args, "rocm", on_gpu);
        let (g, args) = build_attention_graph(&mut rng);
        rlx_testkit::check(&g, &args, "rocm", on_gpu);
    }
    let g = every_kind();
    let mut rng = Rng::new(31);
    let args = vec![
        random_data(&mut rng, &Shape::new(&[130, 16], DType::F32)),
        random_data(&mut rng, &Shape::new(&[16, 16], DType::F32)),
        random_data(&mut rng, &Shape::new(&[16], DType::F16)),
        random_data(&mut rng, &Shape::new(&[4, 4], DType::I32)),
    ];
    rlx_testkit::check(&g, &args, "rocm", on_gpu);
}
