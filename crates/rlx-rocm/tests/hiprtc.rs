//! Every kernel kind the loop IR lowers compiles with hiprtc to AMDGPU code objects for
//! `gfx90a` (MI200), `gfx1030` (RDNA2) and `gfx1100` (RDNA3, where the loaded HIP
//! runtime knows it; an older one refuses it by name), with the kernel's entry in the
//! image; a rejected source is an error carrying the compiler's log. Needs only the HIP runtime
//! libraries (no GPU): `.ci/run` installs them. Skips, printing why, where they are
//! missing.

use rlx_compile::CompileOptions;
use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Dim, Graph, MaskKind, NodeId, Op, ReduceOp, Shape,
};
use rlx_rocm::{compile_program, hiprtc};

fn hiprtc_ok() -> bool {
    match hiprtc::available() {
        Ok(()) => true,
        Err(e) => {
            println!("skipping: {e}");
            false
        }
    }
}

/// Whether the loaded HIP runtime can target `arch`.
fn knows(arch: &str) -> bool {
    hiprtc::supported_archs().is_ok_and(|a| a.iter().any(|x| x == arch))
}

fn op(g: &mut Graph, o: Op, inputs: Vec<NodeId>) -> NodeId {
    g.add_op(o, inputs).unwrap_or_else(|e| panic!("{e}"))
}

/// A graph with every lowered kernel kind, in `dt`, with a dynamic leading dim.
fn every_kind(dt: DType) -> Graph {
    let mut g = Graph::new(format!("kinds_{dt}"));
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(8)], dt),
    );
    let y = g.input("y", Shape::new(&[8], dt));
    let mut acc = x;
    for a in Activation::ALL {
        let v = op(&mut g, Op::Activation(a), vec![x]);
        acc = op(&mut g, Op::Binary(BinaryOp::Add), vec![acc, v]);
    }
    for b in [BinaryOp::Pow, BinaryOp::Mod, BinaryOp::Max, BinaryOp::Min] {
        acc = op(&mut g, Op::Binary(b), vec![acc, y]);
    }
    let m = op(&mut g, Op::Compare(CmpOp::Le), vec![acc, y]);
    let w = op(&mut g, Op::Where, vec![m, acc, x]);
    let s = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![0],
            keep_dim: false,
        },
        vec![w],
    );
    let ln = op(
        &mut g,
        Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        },
        vec![w, y, y],
    );
    let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![ln]);
    let wt = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![w]);
    let mm = op(&mut g, Op::MatMul, vec![wt, sm]);
    g.set_outputs(vec![s, mm]);
    g
}

fn options() -> CompileOptions {
    CompileOptions {
        keep_whole: vec!["softmax".into(), "layer_norm".into()],
        ..Default::default()
    }
}

#[test]
fn every_lowered_kernel_kind_compiles_for_cdna2_and_rdna_targets() {
    if !hiprtc_ok() {
        return;
    }
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let g = every_kind(dt);
        let p = rlx_compile::compile(&g, &options()).unwrap();
        let kinds: Vec<String> = p.kernels.iter().map(|k| k.label()).collect();
        for want in [
            "elementwise",
            "reduce_sum",
            "layer_norm",
            "softmax",
            "matmul",
        ] {
            assert!(
                kinds.iter().any(|k| k == want),
                "no {want} kernel in {kinds:?}"
            );
        }
        // Every dtype for CDNA2; f32 and bf16 for the RDNA targets (CI time).
        let archs: &[&str] = if matches!(dt, DType::F32 | DType::BF16) {
            &["gfx90a", "gfx1030", "gfx1100"]
        } else {
            &["gfx90a"]
        };
        for &arch in archs {
            if arch == "gfx1100" && !knows(arch) {
                // Debian's HIP 5.2 predates RDNA3: the request is refused by name (its
                // compiler would crash on the target), which is what this checks.
                let e = compile_program(&p, arch).expect_err("an unknown target is refused");
                assert!(e.contains("cannot target gfx1100"), "{e}");
                println!("gfx1100: not supported by this HIP runtime, refused with: {e}");
                continue;
            }
            let ks = compile_program(&p, arch).unwrap_or_else(|e| panic!("{dt:?} {arch}: {e}"));
            assert_eq!(ks.len(), p.kernels.len());
            for k in &ks {
                let img = &k.code_object;
                let name = k.kernel.name.as_bytes();
                assert!(
                    img.windows(name.len()).any(|w| w == name),
                    "{dt:?} {arch}: entry {} not in its {}-byte code object",
                    k.kernel.name,
                    img.len()
                );
                // An AMDGPU ELF, or a clang offload bundle around one.
                let elf = img.starts_with(b"\x7fELF");
                let bundle = img.starts_with(b"__CLANG_OFFLOAD_BUNDLE__");
                assert!(elf || bundle, "{dt:?} {arch}: not a code object");
                assert!(k.source.contains("extern \"C\" __global__"));
            }
        }
    }
}

#[test]
fn a_rejected_source_is_an_error_with_the_compiler_log() {
    if !hiprtc_ok() {
        return;
    }
    let e = hiprtc::compile(
        "extern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }",
        "broken.hip",
        "gfx90a",
    )
    .expect_err("an undeclared identifier is rejected");
    assert!(e.contains("hiprtcCompileProgram"), "{e}");
    assert!(
        e.contains("undefined_name"),
        "the log names the problem: {e}"
    );
}

#[test]
fn kernels_not_lowered_yet_are_named_errors_not_guesses() {
    let mut g = Graph::new("fft");
    let x = g.input("x", Shape::new(&[4, 16], DType::F32));
    let fft = Op::Fft {
        inverse: false,
        norm: rlx_ir::FftNorm::Backward,
        algo: rlx_ir::FftAlgo::Native,
    };
    let y = op(&mut g, fft, vec![x]);
    g.set_outputs(vec![y]);
    let p = rlx_compile::compile(&g, &options()).unwrap();
    let e = compile_program(&p, "gfx90a").expect_err("an FFT is an opaque kernel");
    assert!(e.contains("opaque(fft)"), "{e}");
}

#[test]
fn an_unknown_target_or_a_nul_in_the_source_is_refused_before_compiling() {
    if !hiprtc_ok() {
        return;
    }
    if hiprtc::supported_archs().is_ok() {
        let e = hiprtc::compile("extern \"C\" __global__ void k() {}", "k.hip", "gfx9999")
            .expect_err("no such target");
        assert!(e.contains("cannot target gfx9999"), "{e}");
    }
    let e = hiprtc::compile("extern \"C\" __global__ void k() {}\0", "k.hip", "gfx90a")
        .expect_err("a NUL byte");
    assert!(e.contains("NUL"), "{e}");
}

#[test]
fn work_group_reductions_compile_for_cdna2_and_rdna_targets() {
    if !hiprtc_ok() {
        return;
    }
    let ops = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ];
    for dt in [DType::F32, DType::F16, DType::I64, DType::Bool] {
        let mut g = Graph::new(format!("wg_reduce_{dt}"));
        // A long row (static) and a dynamic column with few outputs: both one
        // work-group per output, with a shared-memory tree.
        let x = g.input("x", Shape::new(&[4, 1000], dt));
        let y = g.input(
            "y",
            Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(3)], dt),
        );
        let mut outs = Vec::new();
        for kind in ops {
            if dt == DType::Bool && !matches!(kind, ReduceOp::Max | ReduceOp::Min) {
                continue;
            }
            for (input, axis) in [(x, 1), (y, 0)] {
                let o = Op::Reduce {
                    op: kind,
                    axes: vec![axis],
                    keep_dim: false,
                };
                outs.push(op(&mut g, o, vec![input]));
            }
        }
        if dt.is_float() {
            // Row ops over long rows: a work-group per row too.
            let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![x]);
            let w = g.input("w", Shape::new(&[1000], dt));
            let ln = Op::LayerNorm {
                axis: -1,
                eps: 1e-5,
            };
            outs.push(op(&mut g, ln, vec![sm, w, w]));
        }
        g.set_outputs(outs);
        let p = rlx_compile::compile(&g, &options()).unwrap();
        for arch in ["gfx90a", "gfx1030", "gfx1100"] {
            if arch == "gfx1100" && !knows(arch) {
                println!("gfx1100: not supported by this HIP runtime");
                continue;
            }
            let ks = compile_program(&p, arch).unwrap_or_else(|e| panic!("{dt:?} {arch}: {e}"));
            assert!(!ks.is_empty());
            for k in &ks {
                assert!(
                    k.kernel.group.is_some(),
                    "{}: a work-group kernel",
                    k.kernel.name
                );
                assert!(k.source.contains("__shared__"), "{}", k.source);
                assert!(k.source.contains("__syncthreads();"), "{}", k.source);
                // Every tree but a bool one finishes with 32-wide shuffles.
                assert_eq!(
                    k.source.contains("__shfl_xor("),
                    dt != DType::Bool,
                    "{}",
                    k.source
                );
                let name = k.kernel.name.as_bytes();
                assert!(
                    k.code_object.windows(name.len()).any(|w| w == name),
                    "{dt:?} {arch}: entry {} not in its code object",
                    k.kernel.name
                );
            }
        }
    }
}

#[test]
fn tiled_matmuls_compile_for_cdna2_and_rdna_targets() {
    if !hiprtc_ok() {
        return;
    }
    for dt in [DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32] {
        let mut g = Graph::new(format!("tiled_matmul_{dt}"));
        // 64×64 tiles with 4×4 register blocks over a dynamic batch, B read transposed,
        // a bias epilogue; and a skinny product (16×16 tiles, one output per thread).
        let a = g.input(
            "a",
            Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(100), Dim::Static(70)], dt),
        );
        let bt = g.input("bt", Shape::new(&[90, 70], dt));
        let bias = g.input("bias", Shape::new(&[90], dt));
        let b = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![bt]);
        let y = op(&mut g, Op::MatMul, vec![a, b]);
        let y = op(&mut g, Op::Binary(BinaryOp::Add), vec![y, bias]);
        let v = g.input("v", Shape::new(&[1, 70], dt));
        let z = op(&mut g, Op::MatMul, vec![v, b]);
        g.set_outputs(vec![y, z]);
        let p = rlx_compile::compile(&g, &options()).unwrap();
        let archs: &[&str] = if dt == DType::F32 {
            &["gfx90a", "gfx1030", "gfx1100"]
        } else {
            &["gfx90a"]
        };
        for &arch in archs {
            if arch == "gfx1100" && !knows(arch) {
                println!("gfx1100: not supported by this HIP runtime");
                continue;
            }
            let ks = compile_program(&p, arch).unwrap_or_else(|e| panic!("{dt:?} {arch}: {e}"));
            let mms: Vec<_> = ks
                .iter()
                .filter(|k| k.source.contains("__syncthreads();"))
                .collect();
            assert_eq!(mms.len(), 2, "{dt:?} {arch}: two tiled matmul kernels");
            for k in mms {
                assert_eq!(k.kernel.group, Some(256), "{}", k.kernel.name);
                assert!(k.source.contains("__shared__"), "{}", k.source);
                let name = k.kernel.name.as_bytes();
                assert!(
                    k.code_object.windows(name.len()).any(|w| w == name),
                    "{dt:?} {arch}: entry {} not in its code object",
                    k.kernel.name
                );
            }
        }
    }
}

/// The shared attention graph of `mask` in `dt`, kept whole (one attention kernel).
fn attention_graph(dt: DType, mask: MaskKind) -> (Graph, CompileOptions) {
    let o = CompileOptions {
        keep_whole: vec!["attention".into()],
        ..Default::default()
    };
    (rlx_testkit::gqa_attention_graph(dt, mask), o)
}

#[test]
fn lowered_attention_compiles_for_cdna2_and_rdna_targets() {
    if !hiprtc_ok() {
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
            let (g, o) = attention_graph(dt, mask);
            let p = rlx_compile::compile(&g, &o).unwrap();
            assert!(
                p.kernels.iter().any(|k| k.label().contains("attention")),
                "{:?}",
                p.kernels.iter().map(|k| k.label()).collect::<Vec<_>>()
            );
            let archs: &[&str] = if dt == DType::F32 && mask == MaskKind::Bias {
                &["gfx90a", "gfx1030"]
            } else {
                &["gfx90a"]
            };
            for &arch in archs {
                let ks =
                    compile_program(&p, arch).unwrap_or_else(|e| panic!("{dt:?} {mask:?}: {e}"));
                for k in &ks {
                    let name = k.kernel.name.as_bytes();
                    assert!(
                        k.code_object.windows(name.len()).any(|w| w == name),
                        "{dt:?} {mask:?} {arch}: entry {} not in its code object",
                        k.kernel.name
                    );
                }
            }
        }
    }
}
