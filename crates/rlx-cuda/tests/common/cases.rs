//! Targeted cases shared by the emulator tests and the GPU tests: each takes the
//! [`Target`] to compile for and checks results against the oracle (and, where the
//! planner has a choice, which route it took).

use super::check;
use rlx_cuda::device::Gpu;
use rlx_cuda::{Routing, compile_routed};
use rlx_ir::{
    Activation, BinaryOp, DType, Dim, Graph, NodeId, Op, ReduceOp, ScaleLayout, ScaledFormat,
    Shape, TensorData,
};
use rlx_runtime::{Executable, RuntimeResult};
use rlx_testkit::{ArgCase, Rng, op, quantize, random_data, reduce};
use std::sync::Arc;

/// Where the cases run.
pub struct Target {
    pub gpu: Arc<dyn Gpu>,
}

impl Target {
    pub fn compile(&self, g: &Graph) -> RuntimeResult<Arc<dyn Executable>> {
        compile_routed(self.gpu.clone(), g, Routing::default())
    }
    pub fn routed(&self, g: &Graph, r: Routing) -> RuntimeResult<Arc<dyn Executable>> {
        compile_routed(self.gpu.clone(), g, r)
    }
}

/// Batched matmuls through every BLAS operand mapping: transposed operands (BLAS
/// transposes), broadcast batches (pointer arrays), a broadcast operand (packed first),
/// in f32, f64, f16 and bf16, against the oracle and the generic kernel.
pub fn matmul_operand_layouts_map_onto_blas_calls(t: &Target) {
    let mut rng = Rng::new(7);
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for case in 0..5 {
            let mut g = Graph::new("mm");
            let mut args = Vec::new();
            let mut input = |g: &mut Graph, dims: &[usize]| {
                let s = Shape::new(dims, dt);
                args.push(random_data(&mut rng, &s));
                g.input(format!("x{}", args.len()), s)
            };
            let (m, k, n) = (5, 7, 3);
            let (a, b) = match case {
                // Plain batched [2, M, K] × [2, K, N].
                0 => (input(&mut g, &[2, m, k]), input(&mut g, &[2, k, n])),
                // Both operands transposed views.
                1 => {
                    let at = input(&mut g, &[2, k, m]);
                    let bt = input(&mut g, &[2, n, k]);
                    let perm = vec![0, 2, 1];
                    (
                        op(&mut g, Op::Transpose { perm: perm.clone() }, vec![at]),
                        op(&mut g, Op::Transpose { perm }, vec![bt]),
                    )
                }
                // Broadcast batch: [3, 1, M, K] × [2, K, N] → [3, 2, M, N].
                2 => (input(&mut g, &[3, 1, m, k]), input(&mut g, &[2, k, n])),
                // A row broadcast over M: no BLAS layout, packed first.
                3 => {
                    let row = input(&mut g, &[1, k]);
                    let e = op(
                        &mut g,
                        Op::Expand {
                            target_shape: vec![m as i64, k as i64],
                        },
                        vec![row],
                    );
                    (e, input(&mut g, &[k, n]))
                }
                // A narrowed (offset, strided) left operand.
                _ => {
                    let big = input(&mut g, &[m + 2, k + 3]);
                    let r = op(
                        &mut g,
                        Op::Narrow {
                            axis: 0,
                            start: 1,
                            len: m,
                        },
                        vec![big],
                    );
                    let c = op(
                        &mut g,
                        Op::Narrow {
                            axis: 1,
                            start: 2,
                            len: k,
                        },
                        vec![r],
                    );
                    (c, input(&mut g, &[k, n]))
                }
            };
            let p = op(&mut g, Op::MatMul, vec![a, b]);
            g.set_outputs(vec![p]);
            check(&g, &args, &|g| t.compile(g));
            let plan = t.compile(&g).unwrap().explain();
            let want = match case {
                2 => "cublas(pointer batches)",
                3 => "_pa → cublas",
                _ => "cublas[",
            };
            assert!(plan.contains(want), "case {case}: {plan}");
            let o = Routing {
                blas: false,
                ..Routing::default()
            };
            check(&g, &args, &|g| t.routed(g, o));
        }
    }
}

/// `act(x·w + b)` fuses into a cuBLASLt epilogue (bias, ReLU, tanh-GELU); other
/// activations run as a generated epilogue kernel over the product.
pub fn linear_layers_use_fused_blas_epilogues(t: &Target) {
    let mut rng = Rng::new(11);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for act in [
            None,
            Some(Activation::Relu),
            Some(Activation::GeluApprox),
            Some(Activation::Silu),
        ] {
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
            check(&g, &args, &|g| t.compile(g));
            let plan = t.compile(&g).unwrap().explain();
            let want = match act {
                Some(Activation::Silu) => "_ep".to_string(),
                Some(a) => format!("cublasLt+bias+{}", a.name()),
                None => "cublasLt+bias[".to_string(),
            };
            assert!(plan.contains(&want), "{act:?} {dt}: {plan}");
        }
    }
}

/// Integer matmuls run on the generated kernel with wrapping accumulation.
pub fn integer_matmul_uses_the_generic_kernel(t: &Target) {
    let mut g = Graph::new("imm");
    let a = g.input("a", Shape::new(&[3, 4], DType::I32));
    let b = g.input("b", Shape::new(&[4, 2], DType::I32));
    let p = op(&mut g, Op::MatMul, vec![a, b]);
    g.set_outputs(vec![p]);
    let av = TensorData::from_i64_as(
        DType::I32,
        &[3, 4],
        &(0..12).map(|i| i - 5).collect::<Vec<_>>(),
    );
    let bv = TensorData::from_i64_as(DType::I32, &[4, 2], &[1, 2, 3, 4, 5, 6, 7, 8]);
    let exe = t.compile(&g).unwrap();
    let out = exe.run(&[av.view(), bv.view()]).unwrap();
    // Row 0 is [-5, -4, -3, -2]: (-5 - 12 - 15 - 14, -10 - 16 - 18 - 16).
    assert_eq!(&out[0].to_i64_vec()[..2], &[-46, -60]);
}

/// A program with a dynamic batch compiles once and runs at several sizes, with
/// reductions (short and work-group), softmax, a matmul and a transposed view.
pub fn dynamic_dims_are_kernel_arguments(t: &Target) {
    let mut g = Graph::new("dyn");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(24)], DType::F32),
    );
    let w = g.input("w", Shape::new(&[24, 5], DType::F32));
    let xt = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![x]);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![xt]);
    let s0 = reduce(&mut g, ReduceOp::Sum, vec![1], false, e);
    let s1 = reduce(&mut g, ReduceOp::Max, vec![0], false, x);
    let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![x]);
    let mm = op(&mut g, Op::MatMul, vec![sm, w]);
    g.set_outputs(vec![s0, s1, mm]);
    let exe = t.routed(&g, Routing::default()).unwrap();
    let mut rng = Rng::new(3);
    for b in [1usize, 7, 40] {
        let args = vec![
            random_data(&mut rng, &Shape::new(&[b, 24], DType::F32)),
            random_data(&mut rng, &Shape::new(&[24, 5], DType::F32)),
        ];
        let views: Vec<_> = args.iter().map(|a| a.view()).collect();
        let got = exe.run(&views).unwrap();
        let mut gs = g.clone();
        // The oracle runs the same graph with the batch bound.
        gs.name = format!("dyn{b}");
        let want = rlx_testkit::oracle(&gs, &args).unwrap();
        for (x, y) in got.iter().zip(&want) {
            assert_eq!(x.dims, y.dims);
            for (p, q) in x.to_f64_vec().iter().zip(y.to_f64_vec()) {
                assert!(
                    (p - q).abs() <= 1e-4 * (1.0 + q.abs()),
                    "batch {b}: {p} vs {q}"
                );
            }
        }
    }
}

/// Device-side errors come back as run errors naming the kernel.
pub fn integer_division_by_zero_is_a_run_error(t: &Target) {
    let mut g = Graph::new("div");
    let a = g.input("a", Shape::new(&[4], DType::I32));
    let b = g.input("b", Shape::new(&[4], DType::I32));
    let q = op(&mut g, Op::Binary(BinaryOp::Div), vec![a, b]);
    g.set_outputs(vec![q]);
    let exe = t.compile(&g).unwrap();
    let av = TensorData::from_i64_as(DType::I32, &[4], &[7, -7, 9, 1]);
    let ok = TensorData::from_i64_as(DType::I32, &[4], &[2, 2, -4, 1]);
    assert_eq!(
        exe.run(&[av.view(), ok.view()]).unwrap()[0].to_i64_vec(),
        vec![3, -3, -2, 1]
    );
    let zero = TensorData::from_i64_as(DType::I32, &[4], &[2, 0, 1, 1]);
    let err = exe.run(&[av.view(), zero.view()]).unwrap_err().to_string();
    assert!(
        err.contains("division by zero") && err.contains("kernel 0"),
        "{err}"
    );
}

/// Softmax cross-entropy with class labels runs natively; a bad label is an error.
pub fn cross_entropy_with_labels_matches_the_oracle_and_rejects_bad_labels(t: &Target) {
    let mut g = Graph::new("xent");
    let l = g.input("l", Shape::new(&[6, 10], DType::F32));
    let y = g.input("y", Shape::new(&[6], DType::F32));
    let e = op(&mut g, Op::SoftmaxCrossEntropyWithLogits, vec![l, y]);
    let m = reduce(&mut g, ReduceOp::Mean, vec![0], false, e);
    g.set_outputs(vec![e, m]);
    let mut rng = Rng::new(5);
    let lv = random_data(&mut rng, &Shape::new(&[6, 10], DType::F32));
    let yv = TensorData::from_f32(&[6], &[0.0, 9.0, 3.0, 3.0, 1.0, 5.0]);
    check(&g, &[lv.clone(), yv], &|g| t.compile(g));
    let bad = TensorData::from_f32(&[6], &[0.0, 10.0, 3.0, 3.0, 1.0, 5.0]);
    let exe = t.compile(&g).unwrap();
    let err = exe.run(&[lv.view(), bad.view()]).unwrap_err().to_string();
    assert!(err.contains("label"), "{err}");
}

/// Per-tensor fp8 scaled matmuls take the cuBLASLt route (emulated), with and without
/// a bias; other formats, and every format without fp8 GEMMs, run the loop IR's lowering
/// on the device, as the scaled quantization always does: nothing runs on the host.
pub fn scaled_fp8_matmul_matches_the_oracle(t: &Target) {
    for (lf, rf, has_bias) in [
        (ScaledFormat::F8E4M3, ScaledFormat::F8E4M3, false),
        (ScaledFormat::F8E4M3, ScaledFormat::F8E5M2, true),
        (ScaledFormat::F6E2M3, ScaledFormat::F6E2M3, true),
    ] {
        let (m, k, n) = (16, 32, 16);
        let mut g = Graph::new("fp8");
        let x = g.input("x", Shape::new(&[m, k], DType::F32));
        let w = g.input("w", Shape::new(&[n, k], DType::F32));
        let pt = ScaleLayout::PerTensor;
        let (qx, sx) = quantize(&mut g, x, lf, pt);
        let (qw, sw) = quantize(&mut g, w, rf, pt);
        let mut ins = vec![qx, qw, sx, sw];
        if has_bias {
            ins.push(g.input("b", Shape::new(&[n], DType::F32)));
        }
        let y = op(
            &mut g,
            Op::ScaledMatMul {
                lhs_format: lf,
                rhs_format: rf,
                scale_layout: pt,
                has_bias,
            },
            ins,
        );
        g.set_outputs(vec![y]);
        let mut rng = Rng::new(13);
        let mut args = vec![
            random_data(&mut rng, &Shape::new(&[m, k], DType::F32)),
            random_data(&mut rng, &Shape::new(&[n, k], DType::F32)),
        ];
        if has_bias {
            args.push(random_data(&mut rng, &Shape::new(&[n], DType::F32)));
        }
        check(&g, &args, &|g| t.compile(g));
        let plan = t.compile(&g).unwrap().explain();
        let native = lf.is_native_fp8() && rf.is_native_fp8();
        let native = native && t.gpu.has_fp8();
        assert_eq!(plan.contains("cublasLt(fp8)"), native, "{plan}");
        assert!(!plan.contains("host("), "{plan}");
        let no_fp8 = Routing {
            fp8: false,
            ..Routing::default()
        };
        check(&g, &args, &|g| t.routed(g, no_fp8));
    }
}

/// Scale codes, element codes and scaled matmuls of the block layouts (MX E8M0, NVFP4)
/// and of the non-fp8 formats run the loop IR's lowering on the device, bit for bit with
/// the oracle (exact f64 steps rounded once where the oracle rounds), with M = 1 and N = 1,
/// a bias, and inputs holding zeros, infinities and NaN.
pub fn block_scaled_formats_run_on_the_device_bit_for_bit(t: &Target) {
    let cases = [
        (ScaledFormat::F4E2M1, ScaleLayout::nvfp4()),
        (ScaledFormat::F8E4M3, ScaleLayout::mx()),
        (ScaledFormat::F6E3M2, ScaleLayout::BlockMxE8M0 { block: 8 }),
        (ScaledFormat::F8E5M2Fnuz, ScaleLayout::PerTensor),
    ];
    let mut rng = Rng::new(29);
    for (f, l) in cases {
        for (m, n) in [(3, 5), (1, 4), (4, 1)] {
            let k = 32;
            let mut g = Graph::new("blockq");
            let x = g.input("x", Shape::new(&[m, k], DType::F32));
            let w = g.input("w", Shape::new(&[n, k], DType::F32));
            let b = g.input("b", Shape::new(&[n], DType::F32));
            let (qx, sx) = quantize(&mut g, x, f, l);
            let (qw, sw) = quantize(&mut g, w, f, l);
            let o = Op::ScaledMatMul {
                lhs_format: f,
                rhs_format: f,
                scale_layout: l,
                has_bias: true,
            };
            let y = op(&mut g, o, vec![qx, qw, sx, sw, b]);
            g.set_outputs(vec![y, qx, sx]);
            let mut xs = random_data(&mut rng, &Shape::new(&[m, k], DType::F32)).to_f32_vec();
            xs[1] = f32::INFINITY;
            xs[2] = -0.0;
            xs[3] = f32::NAN;
            // A zero block (in the second row, where there is one).
            xs.iter_mut().skip(k).take(16).for_each(|v| *v = 0.0);
            let args = vec![
                TensorData::from_f32(&[m, k], &xs),
                random_data(&mut rng, &Shape::new(&[n, k], DType::F32)),
                random_data(&mut rng, &Shape::new(&[n], DType::F32)),
            ];
            let exe = t.compile(&g).unwrap();
            let plan = exe.explain();
            assert!(!plan.contains("host("), "{plan}");
            let views: Vec<_> = args.iter().map(|a| a.view()).collect();
            let got = exe.run(&views).unwrap();
            let want = rlx_testkit::oracle(&g, &args).unwrap();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                let what = format!("{f} {l} m={m} n={n} output {i}");
                assert_eq!((a.dtype, &a.dims), (b.dtype, &b.dims), "{what}");
                if i == 0 {
                    // The row with a NaN is NaN (any payload); the rest bit for bit.
                    for (p, q) in a.to_f32_vec().iter().zip(b.to_f32_vec()) {
                        let same = (p.is_nan() && q.is_nan()) || p.to_bits() == q.to_bits();
                        assert!(same, "{what}: {p:e} vs {q:e}");
                    }
                } else {
                    assert_eq!(a.bytes, b.bytes, "{what}");
                }
            }
        }
    }
}

/// Opaque ops the loop IR lowers (gather here) run on the device between the other
/// device kernels, not on the host fallback.
pub fn lowered_opaque_ops_run_on_the_device(t: &Target) {
    let mut g = Graph::new("host");
    let tab = g.input("t", Shape::new(&[5, 3], DType::F32));
    let i = g.input("i", Shape::new(&[4], DType::I64));
    let r = op(&mut g, Op::Activation(Activation::Exp), vec![tab]);
    let gat = op(&mut g, Op::Gather { axis: 0 }, vec![r, i]);
    let s = reduce(&mut g, ReduceOp::Sum, vec![1], false, gat);
    g.set_outputs(vec![s]);
    let mut rng = Rng::new(17);
    let args = vec![
        random_data(&mut rng, &Shape::new(&[5, 3], DType::F32)),
        TensorData::from_i64(&[4], &[4, 0, 2, 2]),
    ];
    check(&g, &args, &|g| t.compile(g));
    let exe = t.compile(&g).unwrap();
    // `check` registered the CPU backend, so the host fallback was available; the
    // lowered gather must not have used it.
    let explain = exe.explain();
    assert!(!explain.contains("on the host"), "{explain}");
}

/// Reductions long enough for one block per output (a fixed shared-memory tree): rows,
/// columns with few outputs, dynamic extents (empty included: both the oracle and the
/// device give the identity or the error) and exact integer means of values whose
/// wrapping sum overflows, in every dtype class.
pub fn work_group_reductions_match_the_oracle(t: &Target) {
    let ops = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ];
    let mut rng = Rng::new(11);
    let dts = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::Bool,
    ];
    for dt in dts {
        for kind in ops {
            if dt == DType::Bool && !matches!(kind, ReduceOp::Max | ReduceOp::Min) {
                continue;
            }
            for (dims, axes) in [(vec![3, 500], vec![1]), (vec![300, 4], vec![0])] {
                let mut g = Graph::new("wg_reduce");
                let x = g.input("x", Shape::new(&dims, dt));
                // Products of many values stay finite through a sigmoid + ½.
                let v = if kind == ReduceOp::Prod && dt.is_float() {
                    let s = op(&mut g, Op::Activation(Activation::Sigmoid), vec![x]);
                    op(&mut g, Op::Binary(BinaryOp::Add), vec![s, s])
                } else {
                    x
                };
                let r = reduce(&mut g, kind, axes, false, v);
                g.set_outputs(vec![r]);
                let args = vec![random_data(&mut rng, &Shape::new(&dims, dt))];
                check(&g, &args, &|g| t.compile(g));
            }
        }
    }
    for kind in ops {
        let mut g = Graph::new("wg_dyn");
        let x = g.input(
            "x",
            Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(5)], DType::F32),
        );
        let r = reduce(&mut g, kind, vec![0], false, x);
        g.set_outputs(vec![r]);
        for n in [0usize, 1, 300] {
            let args = vec![random_data(&mut rng, &Shape::new(&[n, 5], DType::F32))];
            check(&g, &args, &|g| t.compile(g));
        }
    }
    // Row ops over long rows (a block per row) and dynamic rows.
    for (c, dynamic) in [(500usize, false), (300, true)] {
        let cd = if dynamic {
            Dim::Dynamic(0)
        } else {
            Dim::Static(c)
        };
        let mut g = Graph::new("wg_rows");
        let x = g.input("x", Shape::from_dims(&[Dim::Static(3), cd], DType::F32));
        let w = g.input("w", Shape::from_dims(&[cd], DType::F32));
        let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![x]);
        let ls = op(&mut g, Op::LogSoftmax { axis: -1 }, vec![x]);
        let ln = Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        };
        let ln = op(&mut g, ln, vec![sm, w, w]);
        let rms = Op::RmsNorm {
            axis: -1,
            eps: 1e-5,
        };
        let rms = op(&mut g, rms, vec![ls, w, w]);
        g.set_outputs(vec![ln, rms]);
        let args = vec![
            random_data(&mut rng, &Shape::new(&[3, c], DType::F32)),
            random_data(&mut rng, &Shape::new(&[c], DType::F32)),
        ];
        check(&g, &args, &|g| t.compile(g));
    }
    let big: Vec<i64> = (0..600)
        .map(|i| i64::MAX - i * 7 - (i % 3) * (1 << 40))
        .collect();
    let mut g = Graph::new("wg_imean");
    let x = g.input("x", Shape::new(&[2, 300], DType::I64));
    let r = reduce(&mut g, ReduceOp::Mean, vec![1], false, x);
    g.set_outputs(vec![r]);
    check(
        &g,
        &[TensorData::from_i64_as(DType::I64, &[2, 300], &big)],
        &|g| t.compile(g),
    );
}

/// The generic kernel (no cuBLAS): the loop IR's tiled lowering, a block per output
/// tile. M, N and K off the 16- and 64-wide tiles, M = 1, N = 1, K = 1, 4×4 register
/// blocks, broadcast batches and transposed operands, in every dtype class.
pub fn generic_tiled_matmuls_match_the_oracle(t: &Target) {
    let mut rng = Rng::new(19);
    let no_blas = Routing {
        blas: false,
        fp8: false,
        ..Routing::default()
    };
    let shapes: [(&[usize], &[usize]); 6] = [
        (&[1, 70], &[70, 130]),
        (&[130, 5], &[5, 1]),
        (&[67, 1], &[1, 65]),
        (&[70, 33], &[33, 66]),
        (&[2, 1, 9, 20], &[3, 20, 17]),
        (&[2, 65, 20], &[2, 20, 64]),
    ];
    for dt in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::I64,
    ] {
        for (i, (ad, bd)) in shapes.iter().enumerate() {
            let mut g = Graph::new("generic_mm");
            let mut args = Vec::new();
            let mut input = |g: &mut Graph, dims: &[usize]| {
                let s = Shape::new(dims, dt);
                args.push(random_data(&mut rng, &s));
                g.input(format!("x{}", args.len()), s)
            };
            // Every other product reads its right operand through a transpose.
            let a = input(&mut g, ad);
            let b = if i % 2 == 1 {
                let r = bd.len();
                let mut stored = bd.to_vec();
                stored.swap(r - 2, r - 1);
                let mut perm: Vec<usize> = (0..r).collect();
                perm.swap(r - 2, r - 1);
                let bt = input(&mut g, &stored);
                op(&mut g, Op::Transpose { perm }, vec![bt])
            } else {
                input(&mut g, bd)
            };
            let p = op(&mut g, Op::MatMul, vec![a, b]);
            g.set_outputs(vec![p]);
            check(&g, &args, &|g| t.routed(g, no_blas));
            let plan = t.routed(&g, no_blas).unwrap().explain();
            assert!(plan.contains("_gm"), "{dt:?} case {i}: {plan}");
        }
    }
}

/// Argmax/argmin run as device reductions (one thread per output and a block per output,
/// with warp shuffles) over tie-heavy data with NaN, ±0 and ±∞: the oracle's first
/// extremum, for float, half and integer inputs, kept and dropped axes.
pub fn argmax_and_argmin_run_as_device_reductions(t: &Target) {
    let dtypes = [DType::F32, DType::F16, DType::F64, DType::I32, DType::U8];
    for ArgCase { graph: g, x } in rlx_testkit::argmax_cases(&dtypes, 23) {
        check(&g, std::slice::from_ref(&x), &|g| t.compile(g));
        let want = rlx_ir::interp::run(&g, &[("x", x.clone())]).unwrap();
        let got = t.compile(&g).unwrap().run(&[x.view()]).unwrap();
        assert_eq!(got[0].bytes, want[0].bytes, "{}", g.name);
    }
}
