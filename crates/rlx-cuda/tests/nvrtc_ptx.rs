//! The generated source of every kernel kind compiles with NVRTC to PTX for sm_80 and
//! sm_90 (and to a CUBIN for sm_90), with every entry point present. Needs only the
//! NVRTC library (no GPU): `RLX_NVRTC_LIB` may point at it, e.g. at the `lib` directory
//! of the `nvidia-cuda-nvrtc-cu12` wheel. Skips, printing why, when it cannot be loaded.

use rlx_cuda::codegen::generate;
use rlx_cuda::nvrtc::{Output, compile};
use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Dim, Graph, MaskKind, NodeId, Op, ReduceOp, ScaleLayout,
    ScaledFormat, Shape,
};
use rlx_testkit::{op, quantize, reduce};

fn nvrtc_ok() -> bool {
    if rlx_cuda::loader::nvrtc_present() {
        true
    } else {
        println!(
            "skipping: NVRTC cannot be loaded ({}); `.ci/run` installs the nvidia-cuda-nvrtc-cu12 wheel and sets RLX_NVRTC_LIB",
            rlx_cuda::loader::describe()
        );
        false
    }
}

/// Compile `g`'s generated program for sm_80 and sm_90; returns the kernel labels.
fn compiles(g: &Graph) -> Vec<String> {
    let p = rlx_compile::compile(g, &rlx_cuda::compile_options()).unwrap();
    let gen_ = generate(&p).unwrap_or_else(|e| panic!("{}: {e}", g.name));
    for cc in [80, 90] {
        let img =
            compile(&gen_.source, cc, Output::Ptx).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        let ptx = img.ptx_text().expect("PTX text");
        assert!(
            ptx.contains(&format!(".target sm_{cc}")),
            "{}: no sm_{cc} target",
            g.name
        );
        for e in gen_.entry_names() {
            assert!(
                ptx.contains(&format!(".entry {e}(")),
                "{}: entry {e} missing from the sm_{cc} PTX",
                g.name
            );
        }
    }
    p.kernels.iter().map(|k| k.label()).collect()
}

#[test]
fn elementwise_kernels_of_every_activation_and_dtype_compile() {
    if !nvrtc_ok() {
        return;
    }
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let mut g = Graph::new(format!("acts_{dt}"));
        let x = g.input("x", Shape::new(&[33, 7], dt));
        let outs: Vec<NodeId> = Activation::ALL
            .iter()
            .map(|&a| op(&mut g, Op::Activation(a), vec![x]))
            .collect();
        let mut acc = outs[0];
        for &o in &outs[1..] {
            acc = op(&mut g, Op::Binary(BinaryOp::Add), vec![acc, o]);
        }
        let y = g.input("y", Shape::new(&[7], dt));
        for b in [
            BinaryOp::Pow,
            BinaryOp::Mod,
            BinaryOp::Atan2,
            BinaryOp::Max,
            BinaryOp::Min,
        ] {
            acc = op(&mut g, Op::Binary(b), vec![acc, y]);
        }
        let m = op(&mut g, Op::Compare(CmpOp::Lt), vec![acc, y]);
        let w = op(&mut g, Op::Where, vec![m, acc, x]);
        let r = op(
            &mut g,
            Op::RoundToFormat {
                exp_bits: 4,
                man_bits: 3,
                max_normal: 448.0,
            },
            vec![w],
        );
        let casts: Vec<NodeId> = [
            DType::I8,
            DType::U8,
            DType::I32,
            DType::I64,
            DType::Bool,
            DType::F16,
            DType::BF16,
            DType::F64,
        ]
        .iter()
        .map(|&to| op(&mut g, Op::Cast { to }, vec![r]))
        .collect();
        let mut outs = vec![r];
        outs.extend(casts);
        g.set_outputs(outs);
        compiles(&g);
    }
    // Integer and bool arithmetic, including the ops that report device errors.
    let mut g = Graph::new("ints");
    let a = g.input("a", Shape::new(&[16], DType::I32));
    let b = g.input("b", Shape::new(&[16], DType::I64));
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Mod,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
        BinaryOp::Shl,
        BinaryOp::Shr,
    ];
    let mut acc = a;
    for o in ops {
        acc = op(&mut g, Op::Binary(o), vec![acc, b]);
    }
    let n = op(&mut g, Op::Activation(Activation::Abs), vec![acc]);
    let f = op(&mut g, Op::Cast { to: DType::F16 }, vec![n]);
    let bl = op(&mut g, Op::Cast { to: DType::Bool }, vec![n]);
    let x = op(&mut g, Op::Binary(BinaryOp::BitXor), vec![bl, bl]);
    g.set_outputs(vec![acc, f, x]);
    assert_eq!(compiles(&g), ["elementwise"; 3]);
}

#[test]
fn reductions_in_row_and_column_mode_compile() {
    if !nvrtc_ok() {
        return;
    }
    for dt in [DType::F32, DType::F64, DType::BF16, DType::I32, DType::Bool] {
        let mut g = Graph::new(format!("reduce_{dt}"));
        let x = g.input("x", Shape::new(&[6, 5, 40], dt));
        let ops: &[ReduceOp] = if dt == DType::Bool {
            &[ReduceOp::Max, ReduceOp::Min]
        } else {
            &[
                ReduceOp::Sum,
                ReduceOp::Mean,
                ReduceOp::Max,
                ReduceOp::Min,
                ReduceOp::Prod,
            ]
        };
        let mut outs = Vec::new();
        for &r in ops {
            for axes in [vec![2], vec![0], vec![0, 2], vec![1]] {
                outs.push(op(
                    &mut g,
                    Op::Reduce {
                        op: r,
                        axes,
                        keep_dim: false,
                    },
                    vec![x],
                ));
            }
        }
        g.set_outputs(outs);
        assert!(compiles(&g).iter().all(|l| l.starts_with("reduce_")));
    }
}

#[test]
fn row_ops_compile_in_every_float_dtype() {
    if !nvrtc_ok() {
        return;
    }
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let mut g = Graph::new(format!("rows_{dt}"));
        let x = g.input("x", Shape::new(&[9, 300], dt));
        let gm = g.input("g", Shape::new(&[300], dt));
        let bt = g.input("b", Shape::new(&[300], dt));
        let e = op(&mut g, Op::Activation(Activation::Exp), vec![x]);
        let s = op(&mut g, Op::Softmax { axis: -1 }, vec![e]);
        let l = op(&mut g, Op::LogSoftmax { axis: -1 }, vec![x]);
        let ln = op(
            &mut g,
            Op::LayerNorm {
                axis: -1,
                eps: 1e-5,
            },
            vec![x, gm, bt],
        );
        let rn = op(
            &mut g,
            Op::RmsNorm {
                axis: -1,
                eps: 1e-6,
            },
            vec![x, gm, bt],
        );
        let t = op(&mut g, Op::Activation(Activation::Tanh), vec![rn]);
        g.set_outputs(vec![s, l, ln, t]);
        let labels = compiles(&g);
        for want in ["softmax", "log_softmax", "layer_norm", "rms_norm"] {
            assert!(labels.iter().any(|l| l == want), "{labels:?}");
        }
    }
}

#[test]
fn attention_kernels_of_every_mask_compile() {
    if !nvrtc_ok() {
        return;
    }
    for (i, mask) in [
        MaskKind::None,
        MaskKind::Causal,
        MaskKind::SlidingWindow(16),
        MaskKind::Custom,
        MaskKind::Bias,
    ]
    .into_iter()
    .enumerate()
    {
        let four = i % 2 == 0;
        let (b, s, h, hk, d) = (2, 128, 8, 2, 64);
        let lay = |hh: usize| {
            if four {
                vec![b, s, hh, d]
            } else {
                vec![b, s, hh * d]
            }
        };
        let mut g = Graph::new(format!("attn{i}"));
        let q = g.input("q", Shape::new(&lay(h), DType::F32));
        let k = g.input("k", Shape::new(&lay(hk), DType::F32));
        let v = g.input("v", Shape::new(&lay(hk), DType::F32));
        let mut ins = vec![q, k, v];
        match mask {
            MaskKind::Custom => ins.push(g.input("m", Shape::new(&[b, s], DType::F32))),
            MaskKind::Bias => ins.push(g.input("bias", Shape::new(&[h, 1, s], DType::F16))),
            _ => {}
        }
        let a = op(
            &mut g,
            Op::Attention {
                num_heads: h,
                head_dim: d,
                v_head_dim: None,
                mask_kind: mask,
                score_scale: None,
                attn_logit_softcap: (i == 1).then_some(30.0),
            },
            ins,
        );
        let o = op(&mut g, Op::Activation(Activation::Silu), vec![a]);
        g.set_outputs(vec![o]);
        assert_eq!(compiles(&g), ["attention"]);
    }
}

#[test]
fn contractions_and_native_opaque_kernels_compile() {
    if !nvrtc_ok() {
        return;
    }
    // Batched bf16 matmul with a fused epilogue, an integer matmul (generic kernel).
    let mut g = Graph::new("contract");
    let a = g.input("a", Shape::new(&[4, 64, 32], DType::BF16));
    let w = g.input("w", Shape::new(&[32, 48], DType::BF16));
    let bias = g.input("bias", Shape::new(&[48], DType::BF16));
    let y = op(
        &mut g,
        Op::FusedMatMulBiasAct {
            activation: Some(Activation::GeluApprox),
        },
        vec![a, w, bias],
    );
    let ia = g.input("ia", Shape::new(&[8, 3], DType::I32));
    let ib = g.input("ib", Shape::new(&[3, 5], DType::I32));
    let iy = op(&mut g, Op::MatMul, vec![ia, ib]);
    // 64×64 tiles with 4×4 register blocks (the generic kernel's large shape), f16.
    let ha = g.input("ha", Shape::new(&[2, 100, 70], DType::F16));
    let hb = g.input("hb", Shape::new(&[70, 90], DType::F16));
    let hy = op(&mut g, Op::MatMul, vec![ha, hb]);
    g.set_outputs(vec![y, iy, hy]);
    assert!(compiles(&g).iter().filter(|l| *l == "matmul").count() == 3);
    // The generic kernels stage tiles in shared memory between barriers.
    let p = rlx_compile::compile(&g, &rlx_cuda::compile_options()).unwrap();
    let src = generate(&p).unwrap().source;
    assert!(src.contains("__shared__") && src.contains("__syncthreads()"));

    // Concat, pad, cumsum, cross-entropy with labels, an fp8 scaled matmul with bias.
    let mut g = Graph::new("opaque");
    let x = g.input("x", Shape::new(&[16, 32], DType::F32));
    let z = g.input("z", Shape::new(&[16, 5], DType::F32));
    let c = op(&mut g, Op::Concat { axis: 1 }, vec![x, z]);
    let p = op(
        &mut g,
        Op::Pad {
            axis: 0,
            before: 2,
            after: 1,
            value: -1.5,
        },
        vec![c],
    );
    let cs = op(
        &mut g,
        Op::Cumsum {
            axis: 1,
            exclusive: true,
        },
        vec![p],
    );
    let lab = g.input("lab", Shape::new(&[16], DType::F32));
    let xe = op(&mut g, Op::SoftmaxCrossEntropyWithLogits, vec![x, lab]);
    let pt = ScaleLayout::PerTensor;
    let f = ScaledFormat::F8E4M3;
    let (qx, sx) = quantize(&mut g, x, f, pt);
    let b16 = g.input("b16", Shape::new(&[16], DType::F32));
    let sm = op(
        &mut g,
        Op::ScaledMatMul {
            lhs_format: f,
            rhs_format: f,
            scale_layout: pt,
            has_bias: true,
        },
        vec![qx, qx, sx, sx, b16],
    );
    g.set_outputs(vec![cs, xe, sm]);
    let labels = compiles(&g);
    for want in [
        "opaque(concat)",
        "opaque(pad)",
        "opaque(cumsum)",
        "opaque(softmax_cross_entropy_with_logits)",
        "opaque(scaled_matmul)",
    ] {
        assert!(labels.iter().any(|l| l == want), "{labels:?}");
    }
}

#[test]
fn programs_with_dynamic_dims_and_gather_views_compile() {
    if !nvrtc_ok() {
        return;
    }
    // Dynamic batch: sizes, strides and launch choices are kernel arguments.
    let mut g = Graph::new("dynamic");
    let x = g.input(
        "x",
        Shape::from_dims(
            &[Dim::Dynamic(0), Dim::Static(16), Dim::Static(8)],
            DType::F32,
        ),
    );
    let t = op(
        &mut g,
        Op::Transpose {
            perm: vec![0, 2, 1],
        },
        vec![x],
    );
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![t]);
    let s = reduce(&mut g, ReduceOp::Sum, vec![0], false, e);
    let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![x]);
    let w = g.input("w", Shape::new(&[8, 4], DType::F32));
    let mm = op(&mut g, Op::MatMul, vec![sm, w]);
    g.set_outputs(vec![s, mm]);
    compiles(&g);
    // A reshape of a transposed view has no strided form: the index map walks the steps.
    let mut g = Graph::new("chain");
    let x = g.input("x", Shape::new(&[6, 10], DType::F16));
    let t = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![x]);
    let r = op(
        &mut g,
        Op::Reshape {
            new_shape: vec![4, 15],
        },
        vec![t],
    );
    let y = op(&mut g, Op::Activation(Activation::Sigmoid), vec![r]);
    g.set_outputs(vec![y]);
    compiles(&g);
}

#[test]
fn a_cubin_for_sm_90_is_produced_and_cached() {
    if !nvrtc_ok() {
        return;
    }
    let mut g = Graph::new("cubin");
    let x = g.input("x", Shape::new(&[1 << 20], DType::F32));
    let y = op(&mut g, Op::Activation(Activation::Relu), vec![x]);
    g.set_outputs(vec![y]);
    let src = rlx_cuda::generated_source(&g).unwrap();
    let img = compile(&src, 90, Output::Cubin).unwrap();
    // An ELF image.
    assert_eq!(&img.bytes[..4], b"\x7fELF");
    let before = rlx_cuda::nvrtc::compilations();
    let again = compile(&src, 90, Output::Cubin).unwrap();
    assert_eq!(
        rlx_cuda::nvrtc::compilations(),
        before,
        "the second compile is a cache hit"
    );
    assert_eq!(again.bytes, img.bytes);
}

/// Kernels lowered to the loop IR (`rlx_compile::loops`) and rendered by its C++
/// renderer compile to sm_80 / sm_90 PTX with the expected entry point: every
/// activation, the binary ops and views, reductions, row ops and a matmul, in each
/// float dtype, with a dynamic dim.
#[test]
fn loop_ir_kernels_rendered_as_cuda_compile() {
    use rlx_compile::loops::{Dialect, lower_kernel, render_c};
    if !nvrtc_ok() {
        return;
    }
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let mut g = Graph::new(format!("loops_{dt}"));
        let x = g.input(
            "x",
            Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(7)], dt),
        );
        let mut acc = op(&mut g, Op::Activation(Activation::ALL[0]), vec![x]);
        for &a in &Activation::ALL[1..] {
            let v = op(&mut g, Op::Activation(a), vec![x]);
            acc = op(&mut g, Op::Binary(BinaryOp::Add), vec![acc, v]);
        }
        let y = g.input("y", Shape::new(&[7], dt));
        for b in [
            BinaryOp::Pow,
            BinaryOp::Mod,
            BinaryOp::Atan2,
            BinaryOp::Max,
            BinaryOp::Min,
            BinaryOp::Div,
        ] {
            acc = op(&mut g, Op::Binary(b), vec![acc, y]);
        }
        let m = op(&mut g, Op::Compare(CmpOp::Lt), vec![acc, y]);
        let w = op(&mut g, Op::Where, vec![m, acc, x]);
        let t = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![w]);
        let n = op(
            &mut g,
            Op::Narrow {
                axis: 0,
                start: 2,
                len: 4,
            },
            vec![t],
        );
        let c = op(&mut g, Op::Cast { to: DType::F32 }, vec![n]);
        // Every other lowered kind: a reduction, the row ops, a batched matmul.
        let s = op(
            &mut g,
            Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![1],
                keep_dim: true,
            },
            vec![w],
        );
        let gamma = g.input("gamma", Shape::new(&[7], dt));
        let ln = op(
            &mut g,
            Op::LayerNorm {
                axis: -1,
                eps: 1e-5,
            },
            vec![w, gamma, y],
        );
        let rn = op(
            &mut g,
            Op::RmsNorm {
                axis: -1,
                eps: 1e-5,
            },
            vec![ln, gamma, y],
        );
        let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![rn]);
        let ls = op(&mut g, Op::LogSoftmax { axis: -1 }, vec![sm]);
        let wt = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![w]);
        let mm = op(&mut g, Op::MatMul, vec![wt, ls]);
        g.set_outputs(vec![c, s, mm]);
        let p = rlx_compile::compile(&g, &rlx_cuda::compile_options()).unwrap();
        let kinds: Vec<String> = p.kernels.iter().map(|k| k.label()).collect();
        for want in [
            "elementwise",
            "reduce_max",
            "layer_norm",
            "rms_norm",
            "softmax",
            "log_softmax",
            "matmul",
        ] {
            assert!(
                kinds.iter().any(|k| k == want),
                "no {want} kernel in {kinds:?}"
            );
        }
        for k in 0..p.kernels.len() {
            let lk = lower_kernel(&p, k).unwrap_or_else(|e| panic!("{e}"));
            let src = render_c(&lk, Dialect::Cuda);
            for cc in [80, 90] {
                let img = compile(&src, cc, Output::Ptx)
                    .unwrap_or_else(|e| panic!("{} kernel {k}: {e}\n{src}", g.name));
                let ptx = img.ptx_text().expect("PTX text");
                assert!(
                    ptx.contains(&format!(".entry {}(", lk.name)),
                    "{}: entry {} missing from the sm_{cc} PTX",
                    g.name,
                    lk.name
                );
            }
        }
    }
}

/// Elementwise kernels are rendered from the loop IR (its grid-stride loop over
/// `n_items`): float, integer and emulated-format ones alike.
#[test]
fn elementwise_kernels_come_from_the_loop_ir() {
    for dt in [DType::F32, DType::I32, DType::F16] {
        let mut g = Graph::new(format!("ew_{dt}"));
        let x = g.input("x", Shape::new(&[64], dt));
        let y = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, x]);
        let y = op(&mut g, Op::Activation(Activation::Abs), vec![y]);
        let y = op(&mut g, Op::Cast { to: DType::F32 }, vec![y]);
        let y = op(
            &mut g,
            Op::RoundToFormat {
                exp_bits: 4,
                man_bits: 3,
                max_normal: 448.0,
            },
            vec![y],
        );
        g.set_outputs(vec![y]);
        let src = rlx_cuda::generated_source(&g).unwrap();
        let body = &src[src.find("// ---- kernel 0").expect("kernel 0")..];
        assert!(body.contains("n_items"), "{dt:?}: {body}");
    }
}

/// Attention lowered to the loop IR renders, standalone, to CUDA C that NVRTC compiles
/// for every mask kind in f32/f16/bf16 (the kernel the HIP and WGSL backends render too;
/// this backend embeds the same lowering in its parameter-block convention).
#[test]
fn lowered_attention_renders_as_cuda_and_compiles() {
    use rlx_compile::loops::{Dialect, lower_kernel, render_c};
    if !nvrtc_ok() {
        return;
    }
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for mask in [
            MaskKind::None,
            MaskKind::Causal,
            MaskKind::SlidingWindow(3),
            MaskKind::Custom,
            MaskKind::Bias,
        ] {
            let g = rlx_testkit::gqa_attention_graph(dt, mask);
            let p = rlx_compile::compile(&g, &rlx_cuda::compile_options()).unwrap();
            let k = p
                .kernels
                .iter()
                .position(|k| k.label().contains("attention"))
                .expect("an attention kernel");
            let lk = lower_kernel(&p, k).unwrap_or_else(|e| panic!("{e}"));
            let src = render_c(&lk, Dialect::Cuda);
            let img = compile(&src, 80, Output::Ptx)
                .unwrap_or_else(|e| panic!("{dt:?} {mask:?}: {e}\n{src}"));
            let ptx = img.ptx_text().expect("PTX text");
            assert!(
                ptx.contains(&format!(".entry {}(", lk.name)),
                "{dt:?} {mask:?}"
            );
        }
    }
}

/// f16/bf16 attention of a real program (an opaque `Op::Attention`: the fuser fuses only
/// f32 attention) gets the tensor-core body beside the scalar one: NVRTC compiles it to
/// `wmma.mma` tile products for sm_80 and sm_90 (and ptxas to an sm_90 CUBIN), while
/// sm_75, without bf16 `wmma`, compiles the scalar body. Masks the tile lowering does not
/// take (a sliding window) and head widths that are not multiples of 16 keep only the
/// scalar body.
#[test]
fn f16_and_bf16_attention_programs_compile_to_wmma_for_sm80_and_sm90() {
    if !nvrtc_ok() {
        return;
    }
    for (dt, t, elem) in [
        (DType::F16, "f16", "f32.f32"),
        (DType::BF16, "bf16", "f32.bf16.bf16.f32"),
    ] {
        for (mask, d, tiled) in [
            (MaskKind::Causal, 32, true),
            (MaskKind::None, 64, true),
            (MaskKind::Causal, 128, true),
            (MaskKind::SlidingWindow(4), 32, false),
            (MaskKind::Causal, 24, false),
        ] {
            let (g, _) = rlx_testkit::attention_case(dt, mask, true, (2, 1), 19, d);
            let p = rlx_compile::compile(&g, &rlx_cuda::compile_options()).unwrap();
            let src = generate(&p).unwrap().source;
            let name = format!("{dt:?} {mask:?} d={d}");
            let call = format!("rlx_tile_mma_{t}_c((unsigned int)");
            assert_eq!(src.contains(&call), tiled, "{name}: tile products");
            for cc in [80, 90] {
                let img = compile(&src, cc, Output::Ptx).unwrap_or_else(|e| panic!("{e}"));
                let ptx = img.ptx_text().expect("PTX text");
                let mma = format!("wmma.mma.sync.aligned.row.col.m16n16k16.{elem}");
                assert_eq!(ptx.contains(&mma), tiled, "{name} sm_{cc}: {mma}");
            }
            if tiled {
                compile(&src, 90, Output::Cubin).unwrap_or_else(|e| panic!("{name}: {e}"));
                let old = compile(&src, 75, Output::Ptx).unwrap_or_else(|e| panic!("{e}"));
                assert!(!old.ptx_text().unwrap().contains("wmma"), "{name} sm_75");
            }
        }
    }
}

/// The tile lowering with four warps per work-group (the multi-warp form a standalone
/// kernel may take) renders as CUDA that NVRTC compiles to `wmma` for a real f16/bf16
/// attention program.
#[test]
fn multi_warp_tile_attention_renders_as_standalone_cuda_that_nvrtc_compiles() {
    use rlx_compile::loops::{Dialect, LowerOptions, lower_kernel_with, render_c};
    if !nvrtc_ok() {
        return;
    }
    for dt in [DType::F16, DType::BF16] {
        let (g, _) = rlx_testkit::attention_case(dt, MaskKind::None, true, (2, 1), 40, 64);
        let p = rlx_compile::compile(&g, &rlx_cuda::compile_options()).unwrap();
        let opts = LowerOptions {
            tile_warps: 4,
            ..LowerOptions::default()
        };
        let lk = lower_kernel_with(&p, 0, opts).unwrap();
        assert_eq!(lk.group, Some(128), "{dt:?}: four warps");
        let src = render_c(&lk, Dialect::Cuda);
        let img = compile(&src, 80, Output::Ptx).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            img.ptx_text().unwrap().contains("wmma.mma.sync.aligned"),
            "{dt:?}: no wmma"
        );
    }
}

/// The f16/bf16 attention backward of real gradient programs (decompose's f32 lowering:
/// casts, batched matmuls, the masked softmax, the Jacobian's row sums) and attention
/// with heads wider than the loop IR's default 256 (the backend takes up to 1024: the
/// scalar lowering with spilled rows, f16 opaque and f32 fused) compile for sm_80 and
/// sm_90 with every entry point present.
#[test]
fn attention_backward_and_wide_head_programs_compile() {
    if !nvrtc_ok() {
        return;
    }
    for dt in [DType::F16, DType::BF16] {
        for (mask, heads) in [
            (MaskKind::Causal, (2, 1)),
            (MaskKind::SlidingWindow(3), (2, 2)),
        ] {
            let (g, _) = rlx_testkit::attention_backward_case(dt, mask, heads, 19, 32);
            let labels = compiles(&g);
            assert!(
                labels.iter().any(|l| l.contains("softmax")),
                "{}: {labels:?}",
                g.name
            );
        }
    }
    for (dt, d) in [(DType::F16, 320), (DType::F32, 512)] {
        let (g, _) = rlx_testkit::attention_case(dt, MaskKind::Causal, true, (2, 1), 9, d);
        let labels = compiles(&g);
        assert_eq!(labels.len(), 1, "{}: one attention kernel", g.name);
    }
}
