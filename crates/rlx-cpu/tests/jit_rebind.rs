//! A program with a dynamic dim is bound again for every new size (a decode step binds
//! a new KV-cache length each token). The machine code of its tile programs does not
//! depend on the sizes, so a new binding must reuse the code an earlier one compiled:
//! after warm-up, no binding compiles anything, and the bits are the interpreter's.

use rlx_cpu::CpuBackend;
use rlx_ir::{Activation, BinaryOp, DType, Dim, Graph, Op, ReduceOp, Shape, TensorData};
use rlx_runtime::{Backend, Device, Executable};
use rlx_testkit::{close, op, reduce, scalar, seq};
use std::sync::Mutex;

/// The tests here switch the JIT and read the process-wide compile count: one at a time.
static ONE: Mutex<()> = Mutex::new(());

fn jit_available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("fma")
        && std::env::var_os("RLX_JIT").is_none_or(|v| v != "0")
}

/// `x: [?0, 16]`, `w: [16, 16]`: an elementwise chain (gelu of an affine map), a
/// matmul with a tanh epilogue, a row softmax, and a sum over the dynamic axis — every
/// plan kind with a compiled epilogue, all sized by the dynamic dim.
fn graph() -> Graph {
    let mut g = Graph::new("rebind");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(16)], DType::F32),
    );
    let w = g.input("w", Shape::new(&[16, 16], DType::F32));
    let two = scalar(&mut g, 2.0);
    let one = scalar(&mut g, 1.0);
    let a = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, two]);
    let a = op(&mut g, Op::Binary(BinaryOp::Add), vec![a, one]);
    let y = op(&mut g, Op::Activation(Activation::Gelu), vec![a]);
    let m = op(&mut g, Op::MatMul, vec![y, w]);
    let t = op(&mut g, Op::Activation(Activation::Tanh), vec![m]);
    let s = op(&mut g, Op::Softmax { axis: -1 }, vec![t]);
    let r = reduce(&mut g, ReduceOp::Sum, vec![0], false, s);
    let e = op(&mut g, Op::Binary(BinaryOp::Sub), vec![y, x]);
    g.set_outputs(vec![s, r, e]);
    g
}

fn args(n: usize) -> Vec<TensorData> {
    let x: Vec<f32> = seq(n * 16, 0.37).iter().map(|v| v.sin() * 3.0).collect();
    let w: Vec<f32> = seq(256, 1.3).iter().map(|v| v.cos() * 0.25).collect();
    vec![
        TensorData::from_f32(&[n, 16], &x),
        TensorData::from_f32(&[16, 16], &w),
    ]
}

fn run(exe: &dyn Executable, args: &[TensorData]) -> Vec<TensorData> {
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap()
}

#[test]
fn twenty_bindings_of_a_dynamic_dim_compile_each_tile_program_a_bounded_number_of_times() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    rlx_cpu::set_jit(true);
    let g = graph();
    let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
    // Sizes in a scrambled order, each new: 20 bindings, including tiny ones whose
    // tiles are shorter than a vector and large ones spanning several tiles.
    let sizes = [
        7usize, 1, 130, 2, 64, 3, 200, 17, 5, 96, 33, 8, 150, 11, 256, 40, 9, 70, 4, 111,
    ];
    let start = rlx_cpu::jit_compiled_count();
    let mut per_binding = Vec::new();
    let mut outputs = Vec::new();
    for &n in &sizes {
        let before = rlx_cpu::jit_compiled_count();
        let a = args(n);
        outputs.push(run(exe.as_ref(), &a));
        per_binding.push(rlx_cpu::jit_compiled_count() - before);
    }
    let total = rlx_cpu::jit_compiled_count() - start;
    if jit_available() {
        assert!(per_binding[0] > 0, "the first binding compiled its kernels");
        // Each tile program compiles once per scalar pattern of its inputs (and
        // streaming choice); a tiny binding may add a pattern, never one per size.
        assert!(
            total <= 2 * per_binding[0],
            "{total} compiles over 20 bindings, {} for the first: {per_binding:?}",
            per_binding[0]
        );
        assert!(
            per_binding[10..].iter().all(|&c| c == 0),
            "bindings after warm-up compiled again: {per_binding:?}"
        );
    } else {
        assert_eq!(total, 0, "no JIT, nothing compiled");
    }
    // The same bits as the interpreter, and the values of the reference evaluator.
    rlx_cpu::set_jit(false);
    let interp = CpuBackend.compile(Device::Cpu, &g).unwrap();
    for (&n, got) in sizes.iter().zip(&outputs) {
        let a = args(n);
        let want = run(interp.as_ref(), &a);
        for (k, (x, y)) in got.iter().zip(&want).enumerate() {
            assert_eq!(x.dims, y.dims, "n = {n}, output {k}");
            assert_eq!(
                x.bytes, y.bytes,
                "n = {n}, output {k}: JIT vs interpreter bits"
            );
        }
        let oracle = rlx_testkit::oracle(&g, &a).unwrap();
        for (x, y) in got.iter().zip(&oracle) {
            close(x, y, 1e-4);
        }
    }
    rlx_cpu::set_jit(true);
}

#[test]
fn a_program_compiled_again_compiles_its_own_code() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    rlx_cpu::set_jit(true);
    let g = graph();
    let a = args(24);
    let first = CpuBackend.compile(Device::Cpu, &g).unwrap();
    run(first.as_ref(), &a);
    let before = rlx_cpu::jit_compiled_count();
    let second = CpuBackend.compile(Device::Cpu, &g).unwrap();
    let out = run(second.as_ref(), &a);
    let compiled = rlx_cpu::jit_compiled_count() - before;
    // The cache belongs to one program: a new program does not see the first's code
    // (its count is what a fresh process would compile), and gives the same bits.
    if jit_available() {
        assert!(compiled > 0, "the second program compiled its kernels");
    }
    assert_eq!(
        out.iter().map(|t| &t.bytes).collect::<Vec<_>>(),
        run(first.as_ref(), &a)
            .iter()
            .map(|t| &t.bytes)
            .collect::<Vec<_>>()
    );
}
