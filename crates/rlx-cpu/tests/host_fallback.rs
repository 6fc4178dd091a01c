//! The shared host fallback of the GPU backends (`rlx_runtime::HostKernel`) against the
//! oracle: every kernel of a compiled program run one by one as a host kernel, by the
//! CPU backend and by the oracle interpreter, for every kernel kind (elementwise with
//! views, reductions, row ops, row groups, matmuls, attention, opaque ops), with dynamic
//! dims, and random graphs. Its own binary: one test registers the CPU backend
//! (process-wide state).

use proptest::prelude::*;
use rlx_compile::program::{BufKind, Program};
use rlx_compile::{CompileOptions, compile};
use rlx_cpu::CpuBackend;
use rlx_ir::{
    Activation, BinaryOp, DType, Dim, DimBinding, Graph, NodeId, Op, ReduceOp, Shape, TensorData,
    TensorView,
};
use rlx_runtime::{
    Backend, Executable, HostEngine, HostKernel, RuntimeError, RuntimeResult, register_backend,
};
use rlx_testkit::{Rng, build_attention_graph, build_random_graph, check_executable, op, reduce};
use std::sync::{Arc, Mutex};

/// A program run kernel by kernel on host kernels compiled by `backend` (`None`: the
/// oracle), as an executable so the testkit's oracle comparison applies.
struct HostProgram {
    p: Program,
    backend: Option<CpuBackend>,
    /// The engine of every host kernel built so far, with its kernel's label.
    seen: Mutex<Vec<(String, HostEngine)>>,
}

impl HostProgram {
    fn new(g: &Graph, opts: &CompileOptions, backend: Option<CpuBackend>) -> HostProgram {
        let p = compile(g, opts).unwrap_or_else(|e| panic!("compile failed: {e}\n{g}"));
        HostProgram {
            p,
            backend,
            seen: Mutex::new(Vec::new()),
        }
    }

    fn labels(&self) -> Vec<String> {
        self.p.kernels.iter().map(|k| k.label()).collect()
    }
}

impl Executable for HostProgram {
    fn run(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        let p = &self.p;
        let mut binding = DimBinding::new();
        for ((_, shape), a) in p.args.iter().zip(args) {
            for (d, &n) in shape.dims().iter().zip(a.dims) {
                if let Dim::Dynamic(s) = d {
                    binding.set(*s, n);
                }
            }
        }
        p.guards.check(&binding)?;
        let mut vals: Vec<Option<TensorData>> = vec![None; p.buffers.len()];
        for k in &p.kernels {
            let backend = self.backend.as_ref().map(|b| b as &dyn Backend);
            let hk = HostKernel::with_backend(p, k, &binding, backend)?;
            let views: Vec<TensorView<'_>> = hk
                .inputs()
                .iter()
                .map(|&b| match p.buffers[b].kind {
                    BufKind::Arg(a) => args[a],
                    _ => vals[b].as_ref().expect("written before read").view(),
                })
                .collect();
            let outs = hk.run(&views)?;
            for (&b, v) in hk.outputs().iter().zip(outs) {
                vals[b] = Some(v);
            }
            self.seen
                .lock()
                .unwrap()
                .push((k.label(), hk.engine().clone()));
        }
        p.outputs
            .iter()
            .map(|&b| match &p.buffers[b].kind {
                BufKind::Arg(a) => Ok(args[*a].to_owned()),
                BufKind::Const(bytes) => Ok(TensorData {
                    dtype: p.buffers[b].shape.dtype(),
                    dims: p.buffer_dims(b, &binding).unwrap(),
                    bytes: bytes.clone(),
                }),
                _ => vals[b]
                    .clone()
                    .ok_or_else(|| RuntimeError::new(format!("output buffer {b} never written"))),
            })
            .collect()
    }

    fn explain(&self) -> String {
        rlx_compile::explain(&self.p, "host kernels", None)
    }
}

/// The CPU backend's options (row ops, attention kept whole; row groups, multi-store).
fn cpu_opts() -> CompileOptions {
    rlx_cpu::compile_options()
}

/// Run `g` on host kernels by both engines and compare each with the oracle; returns
/// the kernel labels of the program. Every host kernel of the CPU run must have been
/// run by the CPU backend, every one of the oracle run by the oracle.
fn check_both(g: &Graph, args: &[TensorData], opts: &CompileOptions) -> Vec<String> {
    let mut labels = Vec::new();
    for backend in [Some(CpuBackend), None] {
        let hp = HostProgram::new(g, opts, backend);
        check_executable(g, args, "host fallback", &hp);
        for (label, e) in hp.seen.lock().unwrap().iter() {
            match (backend, e) {
                (Some(_), HostEngine::Backend("cpu")) | (None, HostEngine::Oracle(_)) => {}
                _ => panic!("kernel {label} ran on {e:?}\n{}", hp.explain()),
            }
        }
        labels = hp.labels();
    }
    labels
}

fn f32_data(dims: &[usize], seed: u64) -> TensorData {
    rlx_testkit::random_data(&mut Rng::new(seed), &Shape::new(dims, DType::F32))
}

fn bin(g: &mut Graph, b: BinaryOp, x: NodeId, y: NodeId) -> NodeId {
    op(g, Op::Binary(b), vec![x, y])
}

/// `exp(narrow(transpose(x)) + b) * 2`: transposed, narrowed and broadcast loads and a
/// literal in one elementwise kernel.
fn views_graph() -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("views");
    let x = g.input("x", Shape::new(&[4, 6], DType::F32));
    let b = g.input("b", Shape::new(&[4], DType::F32));
    let t = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![x]);
    let n = op(
        &mut g,
        Op::Narrow {
            axis: 0,
            start: 1,
            len: 3,
        },
        vec![t],
    );
    let s = bin(&mut g, BinaryOp::Add, n, b);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![s]);
    let two = rlx_testkit::scalar(&mut g, 2.0);
    let y = bin(&mut g, BinaryOp::Mul, e, two);
    g.set_outputs(vec![y]);
    (g, vec![f32_data(&[4, 6], 1), f32_data(&[4], 2)])
}

#[test]
fn the_registered_cpu_backend_runs_host_kernels_and_matches_the_oracle() {
    register_backend(Arc::new(CpuBackend));
    let (g, args) = views_graph();
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(
        p.kernels.len(),
        1,
        "{}",
        rlx_compile::explain(&p, "x", None)
    );
    let hk = HostKernel::new(&p, &p.kernels[0], &DimBinding::new()).unwrap();
    assert_eq!(hk.engine(), &HostEngine::Backend("cpu"));
    // The CPU executable's own account, not the oracle's line.
    assert!(hk.explain().contains("on cpu"), "{}", hk.explain());
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = hk.run(&views).unwrap();
    let want = rlx_testkit::oracle(&g, &args).unwrap();
    rlx_testkit::close(&got[0], &want[0], 1e-5);
    // Wrong operands are an error naming the buffer, not a panic in the executor.
    let e = hk.run(&views[..1]).unwrap_err();
    assert!(e.message().contains("values were passed"), "{e}");
}

#[test]
fn elementwise_views_and_reductions_match_the_oracle_on_both_engines() {
    let (g, args) = views_graph();
    assert_eq!(check_both(&g, &args, &cpu_opts()), ["elementwise"]);
    // sqrt(Σ x² over axis 1) and an integer mean (cast in the epilogue).
    let mut g = Graph::new("reduce");
    let x = g.input("x", Shape::new(&[5, 7], DType::F32));
    let sq = bin(&mut g, BinaryOp::Mul, x, x);
    let s = reduce(&mut g, ReduceOp::Sum, vec![1], false, sq);
    let r = op(&mut g, Op::Activation(Activation::Sqrt), vec![s]);
    let m = reduce(&mut g, ReduceOp::Max, vec![0], true, x);
    g.set_outputs(vec![r, m]);
    let labels = check_both(&g, &[f32_data(&[5, 7], 3)], &cpu_opts());
    assert!(labels.contains(&"reduce_sum".to_string()), "{labels:?}");
    assert!(labels.contains(&"reduce_max".to_string()), "{labels:?}");
}

#[test]
fn row_ops_row_groups_and_matmuls_match_the_oracle_on_both_engines() {
    let mut g = Graph::new("rows");
    let x = g.input("x", Shape::new(&[6, 10], DType::F32));
    let gamma = g.input("gamma", Shape::new(&[10], DType::F32));
    let beta = g.input("beta", Shape::new(&[10], DType::F32));
    let w = g.input("w", Shape::new(&[10, 3], DType::F32));
    let bias = g.input("bias", Shape::new(&[3], DType::F32));
    let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![x]);
    let ln = op(
        &mut g,
        Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        },
        vec![x, gamma, beta],
    );
    let mm = op(&mut g, Op::MatMul, vec![ln, w]);
    let mb = bin(&mut g, BinaryOp::Add, mm, bias);
    let y = op(&mut g, Op::Activation(Activation::Relu), vec![mb]);
    g.set_outputs(vec![sm, y]);
    let args = vec![
        f32_data(&[6, 10], 4),
        f32_data(&[10], 5),
        f32_data(&[10], 6),
        f32_data(&[10, 3], 7),
        f32_data(&[3], 8),
    ];
    let labels = check_both(&g, &args, &cpu_opts());
    for want in ["softmax", "layer_norm", "matmul"] {
        assert!(labels.contains(&want.to_string()), "{want}: {labels:?}");
    }
    // A layer norm's backward from primitives: one row-group kernel on the CPU.
    let mut g = Graph::new("norm_bwd");
    let x = g.input("x", Shape::new(&[8, 12], DType::F32));
    let gy = g.input("gy", Shape::new(&[8, 12], DType::F32));
    let m = reduce(&mut g, ReduceOp::Mean, vec![1], true, x);
    let xc = bin(&mut g, BinaryOp::Sub, x, m);
    let v = bin(&mut g, BinaryOp::Mul, xc, xc);
    let var = reduce(&mut g, ReduceOp::Mean, vec![1], true, v);
    let y = bin(&mut g, BinaryOp::Div, xc, var);
    let p = bin(&mut g, BinaryOp::Mul, y, gy);
    let loss = reduce(&mut g, ReduceOp::Sum, vec![0, 1], false, p);
    g.set_outputs(vec![loss]);
    let gg = rlx_compile::autodiff::grad_graph(&g, &[x]).unwrap();
    let labels = check_both(
        &gg,
        &[f32_data(&[8, 12], 9), f32_data(&[8, 12], 10)],
        &cpu_opts(),
    );
    assert!(labels.contains(&"row_group".to_string()), "{labels:?}");
}

#[test]
fn opaque_ops_match_the_oracle_on_both_engines() {
    let mut g = Graph::new("opaque");
    let x = g.input("x", Shape::new(&[3, 16], DType::F32));
    let a = g.input("a", Shape::new(&[4, 4], DType::F32));
    let rhs = g.input("rhs", Shape::new(&[4, 2], DType::F32));
    let idx = g.input("idx", Shape::new(&[5], DType::I64));
    let f = op(
        &mut g,
        Op::Fft {
            inverse: false,
            norm: rlx_ir::FftNorm::Backward,
            algo: rlx_ir::FftAlgo::Native,
        },
        vec![x],
    );
    // A well-conditioned system: a + 4·I.
    let eye: Vec<f32> = (0..16)
        .map(|i| if i % 5 == 0 { 4.0 } else { 0.0 })
        .collect();
    let e = TensorData::from_f32(&[4, 4], &eye);
    let e = g.add_node(
        Op::Constant {
            data: e.bytes.clone(),
        },
        vec![],
        e.shape(),
    );
    let a4 = bin(&mut g, BinaryOp::Add, a, e);
    let s = op(&mut g, Op::DenseSolve, vec![a4, rhs]);
    let ga = op(&mut g, Op::Gather { axis: 1 }, vec![x, idx]);
    let cs = op(
        &mut g,
        Op::Cumsum {
            axis: -1,
            exclusive: false,
        },
        vec![ga],
    );
    g.set_outputs(vec![f, s, cs]);
    let args = vec![
        f32_data(&[3, 16], 11),
        f32_data(&[4, 4], 12),
        f32_data(&[4, 2], 13),
        TensorData::from_i64(&[5], &[3, 0, 15, 7, 7]),
    ];
    let labels = check_both(&g, &args, &cpu_opts());
    for want in [
        "opaque(fft)",
        "opaque(solve)",
        "opaque(gather)",
        "opaque(cumsum)",
    ] {
        assert!(labels.contains(&want.to_string()), "{want}: {labels:?}");
    }
}

#[test]
fn dynamic_dims_are_bound_per_binding_on_both_engines() {
    let mut g = Graph::new("dynamic");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(8)], DType::F32),
    );
    let b = g.input("b", Shape::new(&[8], DType::F32));
    let t = op(&mut g, Op::Activation(Activation::Tanh), vec![x]);
    let y = bin(&mut g, BinaryOp::Add, t, b);
    let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![y]);
    let s = reduce(&mut g, ReduceOp::Sum, vec![0], false, y);
    g.set_outputs(vec![sm, s]);
    for (rows, seed) in [(3, 20), (5, 21), (1, 22)] {
        let args = vec![f32_data(&[rows, 8], seed), f32_data(&[8], seed + 100)];
        let labels = check_both(&g, &args, &cpu_opts());
        assert!(labels.contains(&"softmax".to_string()), "{labels:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, rng_seed: rlx_testkit::proptest_seed(), ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_match_the_oracle_on_host_kernels(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let (g, args) = build_random_graph(&mut rng, false);
        check_both(&g, &args, &cpu_opts());
        // The wgpu backend's options: no row groups, row ops decomposed.
        check_both(&g, &args, &CompileOptions::default());
    }

    #[test]
    fn attention_graphs_match_the_oracle_on_host_kernels(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let (g, args) = build_attention_graph(&mut rng);
        let labels = check_both(&g, &args, &cpu_opts());
        prop_assert!(labels.iter().any(|l| l.starts_with("attention")), "{labels:?}");
    }
}
