//! Every op and every kernel kind on the GPU, for f32 and f16 (and the integer
//! types the shaders compute in i32): each graph is compared with the oracle and
//! each test asserts the kernels it targets really ran on the GPU (not the host
//! fallback). Kernels that must fall back say so in `explain` and still match.

mod attention_backward;
mod products;
mod scaled;
mod subgroups;
#[path = "../support/mod.rs"]
mod support;

use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Dim, Graph, MaskKind, NodeId, Op, ReduceOp, Shape,
    TensorData,
};
use rlx_runtime::Device;
use rlx_testkit::{Rng, random_data};

/// Deterministic random data for `shape` (see [`random_data`]), one stream per `salt`.
fn data(shape: &Shape, salt: u64) -> TensorData {
    random_data(&mut Rng::new(salt), shape)
}

/// A graph under construction with its argument data.
struct B {
    g: Graph,
    args: Vec<TensorData>,
}

impl B {
    fn new(name: &str) -> B {
        B {
            g: Graph::new(name),
            args: Vec::new(),
        }
    }
    fn input(&mut self, dims: &[usize], dt: DType) -> NodeId {
        let s = Shape::new(dims, dt);
        self.args.push(data(&s, self.args.len() as u64 + 7));
        self.g.input(format!("x{}", self.args.len()), s)
    }
    fn op(&mut self, op: Op, ins: Vec<NodeId>) -> NodeId {
        self.g.add_op(op, ins).unwrap()
    }
    /// Compare with the oracle; every kernel must have run on the GPU.
    fn all_on_gpu(mut self, outs: Vec<NodeId>) {
        self.g.set_outputs(outs);
        let placement = support::check(&self.g, &self.args);
        assert!(
            placement.iter().all(|&p| p),
            "some kernel fell back to the host: {placement:?}\n{}",
            self.g
        );
    }
    /// Compare with the oracle; returns the placement.
    fn run(mut self, outs: Vec<NodeId>) -> Vec<bool> {
        self.g.set_outputs(outs);
        support::check(&self.g, &self.args)
    }
}

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[test]
fn every_activation_matches_the_oracle_on_the_gpu_in_f32_f16_bf16() {
    if !support::gpu_or_skip("activations") {
        return;
    }
    for dt in FLOATS {
        for a in Activation::ALL {
            let mut b = B::new("act");
            let x = b.input(&[3, 37], dt);
            let y = b.op(Op::Activation(a), vec![x]);
            b.all_on_gpu(vec![y]);
        }
    }
}

#[test]
fn activations_at_special_values_match_the_oracle() {
    if !support::gpu_or_skip("special values") {
        return;
    }
    let vals = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        30.0,
        -30.0,
        100.0,
        -100.0,
        0.5,
        -0.5,
        2.5,
        -2.5,
        1e4,
        -3e4,
    ];
    for a in Activation::ALL {
        let mut b = B::new("special");
        let x = b.g.input("x", Shape::new(&[vals.len()], DType::F32));
        b.args.push(TensorData::from_f32(&[vals.len()], &vals));
        let y = b.op(Op::Activation(a), vec![x]);
        b.all_on_gpu(vec![y]);
    }
}

#[test]
fn every_float_binary_op_and_comparison_matches_the_oracle_with_broadcasting() {
    if !support::gpu_or_skip("binary") {
        return;
    }
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
        BinaryOp::Mod,
        BinaryOp::Atan2,
    ];
    for dt in FLOATS {
        for op in ops {
            let mut b = B::new("bin");
            let x = b.input(&[4, 1, 9], dt);
            let y = b.input(&[5, 1], dt);
            let z = b.op(Op::Binary(op), vec![x, y]);
            b.all_on_gpu(vec![z]);
        }
        for c in [
            CmpOp::Eq,
            CmpOp::Ne,
            CmpOp::Lt,
            CmpOp::Le,
            CmpOp::Gt,
            CmpOp::Ge,
        ] {
            let mut b = B::new("cmp");
            let x = b.input(&[6, 7], dt);
            let y = b.input(&[7], dt);
            let m = b.op(Op::Compare(c), vec![x, y]);
            let w = b.op(Op::Where, vec![m, x, y]);
            b.all_on_gpu(vec![m, w]);
        }
    }
}

#[test]
fn integer_and_bool_elementwise_ops_wrap_like_the_oracle() {
    if !support::gpu_or_skip("integers") {
        return;
    }
    for dt in [DType::I32, DType::I16, DType::I8, DType::U8] {
        for op in [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Max,
            BinaryOp::Min,
            BinaryOp::BitAnd,
            BinaryOp::BitOr,
            BinaryOp::BitXor,
            // Square-and-multiply over the exponent's bits, lowered once by the loop IR
            // (negative exponents give the integer part of the real power).
            BinaryOp::Pow,
        ] {
            let mut b = B::new("int");
            let x = b.input(&[5, 11], dt);
            let y = b.input(&[11], dt);
            let s = b.op(Op::Binary(op), vec![x, y]);
            // Products overflow i8/u8 on purpose: results wrap.
            let p = b.op(Op::Binary(BinaryOp::Mul), vec![s, s]);
            let n = b.op(Op::Activation(Activation::Neg), vec![p]);
            b.all_on_gpu(vec![n]);
        }
    }
    let mut b = B::new("bool");
    let x = b.input(&[9, 5], DType::Bool);
    let y = b.input(&[5], DType::Bool);
    let o = b.op(Op::Binary(BinaryOp::BitXor), vec![x, y]);
    let m = b.op(Op::Binary(BinaryOp::Max), vec![o, y]);
    b.all_on_gpu(vec![o, m]);
}

#[test]
fn integer_float_comparisons_are_exact_on_the_gpu() {
    if !support::gpu_or_skip("int/float comparisons") {
        return;
    }
    // 2²⁴ + 1 rounds to 2²⁴ in f32 and i32::MAX to 2³¹: a comparison through f32 would
    // call them equal; the oracle (and the loop IR) compare exactly.
    let ints = [16777217i64, 16777216, -5, 2147483647, 0, 7, -2147483648, 3];
    let floats = [
        16777216.0f32,
        16777216.0,
        -5.0,
        2147483648.0,
        f32::NAN,
        7.5,
        -2147483648.0,
        f32::NEG_INFINITY,
    ];
    for c in [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ] {
        for swap in [false, true] {
            let mut b = B::new("mixed_cmp");
            let i = b.g.input("i", Shape::new(&[8], DType::I32));
            b.args
                .push(TensorData::from_i64_as(DType::I32, &[8], &ints));
            let x = b.g.input("x", Shape::new(&[8], DType::F32));
            b.args.push(TensorData::from_f32(&[8], &floats));
            let ins = if swap { vec![x, i] } else { vec![i, x] };
            let y = b.op(Op::Compare(c), ins);
            b.all_on_gpu(vec![y]);
        }
    }
}

#[test]
fn round_to_format_runs_on_the_gpu_for_f32_and_f16_data() {
    if !support::gpu_or_skip("round_to_format") {
        return;
    }
    let vals = [
        0.0f32,
        -0.0,
        1.1,
        -1.0625,
        5.0,
        1e6,
        -1e6,
        3.3e-3,
        -2.7e-5,
        1e-39,
        f32::NAN,
        f32::INFINITY,
        240.0,
        464.0,
        0.09375,
        -6.5,
    ];
    // e4m3, e5m2, e2m1 (ties to even at 5.0), and a bf16-like format.
    for (e, m, max) in [
        (4, 3, 448.0),
        (5, 2, 57344.0),
        (2, 1, 6.0),
        (8, 7, 3.3895314e38),
    ] {
        for dt in [DType::F32, DType::F16] {
            let mut b = B::new("fmt");
            let x = b.g.input("x", Shape::new(&[vals.len()], dt));
            let wide: Vec<f64> = vals.iter().map(|&v| v as f64).collect();
            b.args
                .push(TensorData::from_f64_as(dt, &[vals.len()], &wide));
            let y = b.op(
                Op::RoundToFormat {
                    exp_bits: e,
                    man_bits: m,
                    max_normal: max,
                },
                vec![x],
            );
            b.all_on_gpu(vec![y]);
        }
    }
}

#[test]
fn integer_to_half_casts_round_once_on_the_gpu() {
    if !support::gpu_or_skip("int to f16/bf16") {
        return;
    }
    // Ties to even (2049 → 2048 and 2051 → 2052 in f16, 259 → 260 in bf16), overflow to
    // ∞ (65520 in f16), and 2²⁴ + 2¹⁶ + 1, which rounds *up* in bf16 (through f32 it
    // would round to the tie 2²⁴ + 2¹⁶, then down to 2²⁴). Hand-computed, compared bit
    // for bit: the shared comparison's half-precision tolerance would hide an ulp.
    let ints = [
        2049i64,
        2051,
        -2049,
        65519,
        65520,
        257,
        259,
        16842753,
        -16842753,
        2147483647,
        -2147483648,
        0,
    ];
    let inf = f32::INFINITY;
    let f16_want = [
        2048.0f32, 2052.0, -2048.0, 65504.0, inf, 257.0, 259.0, inf, -inf, inf, -inf, 0.0,
    ];
    let bf16_want = [
        2048.0f32,
        2048.0,
        -2048.0,
        65536.0,
        65536.0,
        256.0,
        260.0,
        16908288.0,
        -16908288.0,
        2147483648.0,
        -2147483648.0,
        0.0,
    ];
    support::register_cpu();
    let data = TensorData::from_i64_as(DType::I32, &[ints.len()], &ints);
    for (to, want) in [(DType::F16, f16_want), (DType::BF16, bf16_want)] {
        let mut g = Graph::new("int_half");
        let x = g.input("x", Shape::new(&[ints.len()], DType::I32));
        let y = g.add_op(Op::Cast { to }, vec![x]).unwrap();
        g.set_outputs(vec![y]);
        let (exe, placement) = rlx_wgpu::compile_with_placement(Device::Gpu, &g).unwrap();
        assert!(placement.iter().all(|&p| p), "{}", exe.explain());
        let got = exe.run(&[data.view()]).unwrap()[0].to_f32_vec();
        assert_eq!(got, want, "{to:?}");
    }
}

#[test]
fn casts_between_every_gpu_dtype_match_the_oracle() {
    if !support::gpu_or_skip("casts") {
        return;
    }
    let dts = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];
    for from in dts {
        for to in dts {
            let mut b = B::new("cast");
            let x = b.input(&[3, 17], from);
            // Scale floats up so saturation and wrapping are exercised.
            let x = if from.is_float() {
                let c = b.g.add_node(
                    Op::Constant {
                        data: TensorData::from_f64_as(from, &[], &[100.0]).bytes,
                    },
                    vec![],
                    Shape::new(&[], from),
                );
                b.op(Op::Binary(BinaryOp::Mul), vec![x, c])
            } else {
                x
            };
            let y = b.op(Op::Cast { to }, vec![x]);
            b.all_on_gpu(vec![y]);
        }
    }
}

#[test]
fn views_transpose_narrow_expand_and_reshape_of_a_transpose_read_through_index_maps() {
    if !support::gpu_or_skip("views") {
        return;
    }
    for dt in [DType::F32, DType::F16] {
        let mut b = B::new("views");
        let x = b.input(&[4, 6, 5], dt);
        let t = b.op(
            Op::Transpose {
                perm: vec![2, 0, 1],
            },
            vec![x],
        );
        let n = b.op(
            Op::Narrow {
                axis: 2,
                start: 1,
                len: 4,
            },
            vec![t],
        );
        // A reshape of a non-contiguous view: the walked index map.
        let r = b.op(
            Op::Reshape {
                new_shape: vec![5, 16],
            },
            vec![n],
        );
        let e = b.op(Op::Activation(Activation::Exp), vec![r]);
        let y = b.input(&[16], dt);
        let s = b.op(Op::Binary(BinaryOp::Add), vec![e, y]);
        b.all_on_gpu(vec![s]);
    }
}

#[test]
fn every_reduction_short_and_long_matches_the_oracle() {
    if !support::gpu_or_skip("reductions") {
        return;
    }
    let ops = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ];
    for dt in [DType::F32, DType::F16, DType::I32] {
        for op in ops {
            if dt == DType::I32 && op == ReduceOp::Mean {
                continue;
            }
            // Short (thread per output) and long (workgroup per output) reductions,
            // over inner, outer and several axes, with a fused prologue and epilogue.
            for (dims, axes) in [
                (vec![6, 7], vec![1]),
                (vec![5, 300], vec![1]),
                (vec![300, 3], vec![0]),
                (vec![4, 5, 70], vec![0, 2]),
            ] {
                let mut b = B::new("reduce");
                let x = b.input(&dims, dt);
                let pre = if dt.is_float() && op == ReduceOp::Prod {
                    // Keep products finite over 300 factors.
                    let s = b.op(Op::Activation(Activation::Sigmoid), vec![x]);
                    let c = b.g.add_node(
                        Op::Constant {
                            data: TensorData::from_f64_as(dt, &[], &[0.5]).bytes,
                        },
                        vec![],
                        Shape::new(&[], dt),
                    );
                    b.op(Op::Binary(BinaryOp::Add), vec![s, c])
                } else if dt.is_float() {
                    b.op(Op::Activation(Activation::Tanh), vec![x])
                } else {
                    b.op(Op::Activation(Activation::Abs), vec![x])
                };
                let r = b.op(
                    Op::Reduce {
                        op,
                        axes,
                        keep_dim: false,
                    },
                    vec![pre],
                );
                let post = b.op(Op::Binary(BinaryOp::Mul), vec![r, r]);
                b.all_on_gpu(vec![post]);
            }
        }
    }
}

#[test]
fn argmax_and_argmin_run_as_gpu_reductions_with_the_oracles_first_extremum() {
    if !support::gpu_or_skip("argmax") {
        return;
    }
    // Tie-heavy values with NaN, ±0 and ±∞; short rows (a thread per output), long
    // rows and columns (a workgroup tree), length-1 axes, kept and dropped axes.
    let dtypes = [DType::F32, DType::F16, DType::I32];
    for case in rlx_testkit::argmax_cases(&dtypes, 0x2545_f491) {
        let outs = case.graph.outputs.clone();
        let b = B {
            g: case.graph,
            args: vec![case.x],
        };
        b.all_on_gpu(outs);
    }
}

#[test]
fn softmax_log_softmax_layer_norm_and_rms_norm_run_as_gpu_row_kernels() {
    if !support::gpu_or_skip("row ops") {
        return;
    }
    for dt in [DType::F32, DType::F16] {
        for c in [7usize, 200] {
            let mut b = B::new("rows");
            let x = b.input(&[3, 4, c], dt);
            let sm = b.op(Op::Softmax { axis: -1 }, vec![x]);
            let ls = b.op(Op::LogSoftmax { axis: -1 }, vec![x]);
            let g = b.input(&[c], dt);
            let be = b.input(&[c], dt);
            let ln = b.op(
                Op::LayerNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![x, g, be],
            );
            let rn = b.op(
                Op::RmsNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![x, g, be],
            );
            let t = b.op(Op::Activation(Activation::Tanh), vec![ln]);
            b.all_on_gpu(vec![sm, ls, t, rn]);
        }
    }
}

#[test]
fn dynamic_dims_bind_per_call_through_uniforms_without_recompiling() {
    if !support::gpu_or_skip("dynamic dims") {
        return;
    }
    let mut g = Graph::new("dyn");
    let n = Dim::Dynamic(0);
    let x = g.input("x", Shape::from_dims(&[n, Dim::Static(6)], DType::F32));
    let w = g.input("w", Shape::new(&[6, 4], DType::F32));
    let t = g.add_op(Op::Activation(Activation::Tanh), vec![x]).unwrap();
    let m = g.add_op(Op::MatMul, vec![t, w]).unwrap();
    let s = g.add_op(Op::Softmax { axis: -1 }, vec![m]).unwrap();
    let r = g
        .add_op(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![0],
                keep_dim: false,
            },
            vec![s],
        )
        .unwrap();
    g.set_outputs(vec![s, r]);
    let (exe, placement) = rlx_wgpu::compile_with_placement(Device::Gpu, &g).unwrap();
    assert!(placement.iter().all(|&p| p), "{}", exe.explain());
    assert!(
        exe.explain().contains("dynamic parameters"),
        "{}",
        exe.explain()
    );
    for rows in [1usize, 5, 130] {
        let xd = data(&Shape::new(&[rows, 6], DType::F32), rows as u64);
        let wd = data(&Shape::new(&[6, 4], DType::F32), 99);
        let want = rlx_ir::interp::run_refs(&g, &[("x", &xd), ("w", &wd)]);
        let got = exe.run(&[xd.view(), wd.view()]);
        rlx_testkit::compare(&g, exe.as_ref(), "wgpu", want, got);
    }
}

#[test]
fn unsupported_kernels_fall_back_to_the_host_with_a_reason_and_stay_correct() {
    if !support::gpu_or_skip("fallback") {
        return;
    }
    // f64 math (host) between GPU kernels.
    let mut b = B::new("mixed");
    let x = b.input(&[4, 9], DType::F32);
    let e = b.op(Op::Activation(Activation::Exp), vec![x]);
    let d = b.op(Op::Cast { to: DType::F64 }, vec![e]);
    let l = b.op(Op::Activation(Activation::Log), vec![d]);
    let f = b.op(Op::Cast { to: DType::F32 }, vec![l]);
    let c = b.op(
        Op::Cumsum {
            axis: 1,
            exclusive: false,
        },
        vec![f],
    );
    let t = b.op(Op::Activation(Activation::Tanh), vec![c]);
    b.g.set_outputs(vec![t]);
    let (exe, placement) = rlx_wgpu::compile_with_placement(Device::Gpu, &b.g).unwrap();
    let ex = exe.explain();
    assert!(placement.iter().any(|&p| p), "{ex}");
    assert!(placement.iter().any(|&p| !p), "{ex}");
    assert!(ex.contains("CPU fallback ("), "{ex}");
    assert!(ex.contains("GPU (WGSL"), "{ex}");
    let placement2 = b.run(vec![t]);
    assert_eq!(placement, placement2);
}

#[test]
fn integer_division_by_zero_is_the_same_error_as_on_the_cpu() {
    if !support::gpu_or_skip("int division") {
        return;
    }
    let mut g = Graph::new("div0");
    let x = g.input("x", Shape::new(&[3], DType::I32));
    let y = g.input("y", Shape::new(&[3], DType::I32));
    let d = g.add_op(Op::Binary(BinaryOp::Div), vec![x, y]).unwrap();
    g.set_outputs(vec![d]);
    let (exe, _) = rlx_wgpu::compile_with_placement(Device::Gpu, &g).unwrap();
    let xd = TensorData::from_i64_as(DType::I32, &[3], &[1, 2, 3]);
    let yd = TensorData::from_i64_as(DType::I32, &[3], &[1, 0, 3]);
    let err = exe.run(&[xd.view(), yd.view()]).unwrap_err();
    assert!(err.message().contains("division by zero"), "{err}");
}

#[test]
fn device_selectors_map_onto_the_adapter_of_their_api() {
    use rlx_runtime::Backend;
    use rlx_wgpu::{WgpuBackend, adapter_info};
    if !support::gpu_or_skip("device selectors") {
        return;
    }
    let info = adapter_info(Device::Gpu).unwrap();
    if info.contains("Vulkan") {
        assert!(WgpuBackend.is_available(Device::Vulkan));
        assert!(adapter_info(Device::Vulkan).unwrap().contains("Vulkan"));
    }
    if cfg!(target_os = "linux") {
        assert!(!WgpuBackend.is_available(Device::Metal));
        assert!(!WgpuBackend.is_available(Device::DirectX));
    }
    // The browser API does not exist in a native build; CUDA is another backend's.
    assert!(!WgpuBackend.is_available(Device::WebGpu));
    assert!(!WgpuBackend.is_available(Device::Cuda));
    // lavapipe and other CPU emulations are usable but are not hardware.
    if info.contains("Cpu") {
        assert!(!WgpuBackend.is_hardware(Device::Gpu));
    }
}

/// Graphs covering every kernel kind the wgpu backend generates, in f32 and f16.
fn every_kind_graphs() -> Vec<Graph> {
    let mut out = Vec::new();
    for dt in [DType::F32, DType::F16] {
        let mut g = Graph::new(format!("kinds_{dt}"));
        let x = g.input("x", Shape::new(&[4, 8, 16], dt));
        let w = g.input("w", Shape::new(&[16, 16], dt));
        let gamma = g.input("gamma", Shape::new(&[16], dt));
        let mut acc = x;
        for a in Activation::ALL {
            let v = g.add_op(Op::Activation(a), vec![x]).unwrap();
            acc = g.add_op(Op::Binary(BinaryOp::Add), vec![acc, v]).unwrap();
        }
        let m = g.add_op(Op::Compare(CmpOp::Lt), vec![acc, x]).unwrap();
        let acc = g.add_op(Op::Where, vec![m, acc, x]).unwrap();
        let mm = g.add_op(Op::MatMul, vec![acc, w]).unwrap();
        let ln = g
            .add_op(
                Op::LayerNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![mm, gamma, gamma],
            )
            .unwrap();
        let sm = g.add_op(Op::Softmax { axis: -1 }, vec![ln]).unwrap();
        let r = g
            .add_op(
                Op::Reduce {
                    op: ReduceOp::Sum,
                    axes: vec![1],
                    keep_dim: false,
                },
                vec![sm],
            )
            .unwrap();
        let long = g
            .add_op(
                Op::Reduce {
                    op: ReduceOp::Max,
                    axes: vec![0, 1, 2],
                    keep_dim: false,
                },
                vec![sm],
            )
            .unwrap();
        let at = g
            .add_op(
                Op::Attention {
                    num_heads: 2,
                    head_dim: 8,
                    v_head_dim: None,
                    mask_kind: MaskKind::Causal,
                    score_scale: None,
                    attn_logit_softcap: None,
                },
                vec![sm, sm, sm],
            )
            .unwrap();
        let c = g.add_op(Op::Concat { axis: 2 }, vec![at, x]).unwrap();
        g.set_outputs(vec![r, long, c]);
        out.push(g);
    }
    // A dynamic dim (sizes read from the uniform block).
    let mut g = Graph::new("dynamic");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(32)], DType::F32),
    );
    let y = g.add_op(Op::Activation(Activation::Gelu), vec![x]).unwrap();
    let s = g
        .add_op(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![0],
                keep_dim: false,
            },
            vec![y],
        )
        .unwrap();
    g.set_outputs(vec![s]);
    out.push(g);
    // The scaled quantizers (integer code on f32 bit patterns).
    out.extend(scaled::msl_graphs());
    out
}

/// `eval-metal` runs through wgpu's Metal adapter, which translates WGSL to MSL with naga:
/// every shader this backend generates must translate (checked on any host, no adapter).
#[test]
fn every_generated_shader_translates_to_msl() {
    let mut translated = 0;
    for g in every_kind_graphs() {
        let shaders = rlx_wgpu::generated_wgsl(&g).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        for (i, s) in shaders.iter().enumerate() {
            let Ok(wgsl) = s else { continue };
            let module = naga::front::wgsl::parse_str(wgsl)
                .unwrap_or_else(|e| panic!("{} kernel {i}: WGSL parse: {e}\n{wgsl}", g.name));
            let info = naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::all(),
            )
            .validate(&module)
            .unwrap_or_else(|e| panic!("{} kernel {i}: validation: {e:?}", g.name));
            let options = naga::back::msl::Options {
                lang_version: (2, 4),
                ..Default::default()
            };
            let (msl, _) = naga::back::msl::write_string(
                &module,
                &info,
                &options,
                &naga::back::msl::PipelineOptions::default(),
            )
            .unwrap_or_else(|e| panic!("{} kernel {i}: MSL: {e:?}", g.name));
            assert!(msl.contains("kernel void"), "{} kernel {i}: {msl}", g.name);
            translated += 1;
        }
    }
    assert!(
        translated >= 15,
        "only {translated} shaders were translated"
    );
}

#[test]
fn generated_wgsl_refuses_a_malformed_graph() {
    let mut g = Graph::new("malformed");
    let x = g.input("x", Shape::new(&[4], DType::F32));
    // An output that names no node of the graph.
    g.set_outputs(vec![x, NodeId(99)]);
    let e = rlx_wgpu::generated_wgsl(&g).expect_err("a malformed graph");
    assert!(e.to_string().contains("malformed"), "{e}");
}
