//! The split form on the host emulator against the loop-IR interpreter running the same
//! two kernels: bit for bit, for float sums too (the fold order is the lowering's, fixed
//! by the part count the code generator picks, whatever grid the launcher uses).

use super::{ReduceCode, SPLIT_FLOOR, split_parts};
use crate::codegen::{KCode, generate};
use crate::{Routing, compile_options, compile_routed, emulator};
use rlx_compile::loops::eval::{self, HostBuf};
use rlx_compile::loops::{self, Access};
use rlx_compile::program::{BufKind, Program};
use rlx_ir::{DType, Dim, DimBinding, Graph, Op, ReduceOp, Shape, TensorData};

fn graph(kind: ReduceOp, dims: &[usize], axes: &[usize]) -> Graph {
    let mut g = Graph::new("split_bits");
    let x = g.input("x", Shape::new(dims, DType::F32));
    let op = Op::Reduce {
        op: kind,
        axes: axes.to_vec(),
        keep_dim: false,
    };
    let y = g.add_op(op, vec![x]).unwrap();
    g.set_outputs(vec![y]);
    g
}

/// The split of kernel 0 of `p` in `parts`, run by the interpreter over `x`: the f32
/// outputs widened to f64.
fn interpret_split(p: &Program, parts: u32, x: &[f32], outputs: usize) -> Vec<f64> {
    let [first, second] = loops::lower_split_reduction(p, 0, parts).unwrap();
    let scratch_dt = first
        .bufs
        .iter()
        .find(|b| b.buf == p.buffers.len())
        .unwrap()
        .dtype;
    let mut scratch = HostBuf::zeros(scratch_dt, outputs * parts as usize);
    let mut result = HostBuf::zeros(DType::F32, outputs);
    let input = HostBuf::Float(x.iter().map(|&v| v as f64).collect());
    for k in [&first, &second] {
        let mut slots: Vec<HostBuf> = k
            .bufs
            .iter()
            .map(|b| {
                if b.buf == p.buffers.len() {
                    std::mem::replace(&mut scratch, HostBuf::Int(vec![]))
                } else if matches!(p.buffers[b.buf].kind, BufKind::Arg(_)) {
                    input.clone()
                } else {
                    std::mem::replace(&mut result, HostBuf::Int(vec![]))
                }
            })
            .collect();
        eval::run(k, &mut slots, &DimBinding::new()).unwrap();
        for (b, v) in k.bufs.iter().zip(slots) {
            if b.buf == p.buffers.len() {
                scratch = v;
            } else if b.access == Access::Write {
                result = v;
            }
        }
    }
    match result {
        HostBuf::Float(v) => v,
        HostBuf::Int(_) => unreachable!("an f32 result"),
    }
}

#[test]
fn split_float_sums_are_bit_identical_to_the_loop_ir_split() {
    let gpu = match emulator() {
        Ok(e) => e,
        Err(e) => {
            println!("skipping: {e}");
            return;
        }
    };
    let r = Routing {
        split_min: 0,
        ..Routing::default()
    };
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for (kind, dims, axes) in [
        (ReduceOp::Sum, &[1_000_000usize][..], &[0usize][..]),
        (ReduceOp::Mean, &[3, 333_334], &[1]),
        (ReduceOp::Sum, &[500_000, 2], &[0]),
    ] {
        let g = graph(kind, dims, axes);
        let p = rlx_runtime::compile_program(&g, &compile_options()).unwrap();
        let KCode::Reduce(ReduceCode {
            split: Some(s),
            out,
            ..
        }) = &generate(&p).unwrap().kernels[0].kind
        else {
            panic!("{dims:?}: no split form")
        };
        let outputs: usize = out.iter().map(|d| d.unwrap_static()).product();
        let n: usize = dims.iter().product();
        // Values of mixed magnitude, so the fold order shows in the last bits.
        let x: Vec<f32> = (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * (1 + (state & 1023)) as f32
            })
            .collect();
        let want = interpret_split(&p, s.parts, &x, outputs);
        let exe = compile_routed(gpu.clone(), &g, r).unwrap();
        assert!(exe.explain().contains("_part"), "{}", exe.explain());
        let xd = TensorData::from_f32(dims, &x);
        let got = exe.run(&[xd.view()]).unwrap()[0].to_f64_vec();
        let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "{} over {dims:?}", kind.name());
    }
}

#[test]
fn split_forms_exist_only_for_long_splittable_reductions() {
    let s = |d: usize| Dim::Static(d);
    let f = DType::F32;
    assert_eq!(
        split_parts(ReduceOp::Sum, f, &[], &[s(SPLIT_FLOOR - 1)]),
        None
    );
    assert_eq!(
        split_parts(ReduceOp::Sum, f, &[], &[s(SPLIT_FLOOR)]),
        Some(2)
    );
    assert_eq!(
        split_parts(ReduceOp::Sum, f, &[s(3)], &[s(1_000_000)]),
        Some(245)
    );
    assert_eq!(split_parts(ReduceOp::Max, f, &[], &[s(1 << 30)]), Some(256));
    assert_eq!(
        split_parts(ReduceOp::Sum, f, &[], &[Dim::Dynamic(0)]),
        Some(256)
    );
    assert_eq!(
        split_parts(ReduceOp::Mean, DType::I32, &[], &[s(1 << 20)]),
        None
    );
    assert_eq!(
        split_parts(ReduceOp::Mean, f, &[], &[s(1 << 20)]),
        Some(256)
    );
    assert_eq!(
        split_parts(ReduceOp::Sum, f, &[s(4096)], &[s(1 << 20)]),
        None
    );
}

/// The split form of static reductions in every dtype class compiles with NVRTC (when it
/// loads) with both split entries present; the emulator runs the same source.
#[test]
fn static_split_forms_compile_with_nvrtc() {
    if !crate::loader::nvrtc_present() {
        println!(
            "skipping: NVRTC cannot be loaded ({})",
            crate::loader::describe()
        );
        return;
    }
    let mut g = Graph::new("split_nvrtc");
    let mut outs = Vec::new();
    for dt in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::I64,
    ] {
        let x = g.input(format!("x_{dt:?}"), Shape::new(&[2, 5000], dt));
        for kind in [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::Prod,
        ] {
            let op = Op::Reduce {
                op: kind,
                axes: vec![1],
                keep_dim: false,
            };
            outs.push(g.add_op(op, vec![x]).unwrap());
        }
    }
    g.set_outputs(outs);
    let p = rlx_runtime::compile_program(&g, &compile_options()).unwrap();
    let gen_ = generate(&p).unwrap();
    let splits = gen_
        .kernels
        .iter()
        .filter(|k| matches!(&k.kind, KCode::Reduce(r) if r.split.is_some()))
        .count();
    // Every reduction but the two integer means carries a split form.
    assert_eq!(splits, 6 * 5 - 2);
    // The unsplit and part kernels finish their trees with shuffles (the default).
    assert!(gen_.source.contains("__shfl_xor_sync(0xffffffffu, "));
    let img = crate::nvrtc::compile(&gen_.source, 80, crate::nvrtc::Output::Ptx).unwrap();
    let ptx = img.ptx_text().expect("PTX text");
    for e in gen_.entry_names() {
        assert!(ptx.contains(&format!(".entry {e}(")), "entry {e} missing");
    }
    assert!(ptx.contains("shfl.sync.bfly"), "no butterfly shuffle");
}

/// Row ops over long and dynamic rows (a block per row) as the code generator emits
/// them, shuffles on (the default) and off: both compile with NVRTC, only the first
/// shuffles.
#[test]
fn shuffled_row_ops_compile_with_nvrtc() {
    let mut g = Graph::new("rows_nvrtc");
    let mut outs = Vec::new();
    for (i, c) in [Dim::Static(1000), Dim::Dynamic(0)].into_iter().enumerate() {
        let x = g.input(
            format!("x{i}"),
            Shape::from_dims(&[Dim::Static(4), c], DType::F32),
        );
        let w = g.input(format!("w{i}"), Shape::from_dims(&[c], DType::F32));
        outs.push(g.add_op(Op::Softmax { axis: -1 }, vec![x]).unwrap());
        let ln = Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        };
        outs.push(g.add_op(ln, vec![x, w, w]).unwrap());
    }
    g.set_outputs(outs);
    let p = rlx_runtime::compile_program(&g, &compile_options()).unwrap();
    let gen_ = |shuffles| {
        let o = crate::codegen::CodegenOptions { shuffles };
        crate::codegen::generate_with(&p, crate::device::Dialect::Cuda, o).unwrap()
    };
    let (on, off) = (gen_(true), gen_(false));
    assert!(on.source.contains("__shfl_xor_sync(0xffffffffu, "));
    assert!(!off.source.contains("__shfl_xor"));
    assert!(
        on.source.matches("__syncthreads").count() < off.source.matches("__syncthreads").count()
    );
    if !crate::loader::nvrtc_present() {
        println!(
            "skipping the NVRTC compile: NVRTC cannot be loaded ({})",
            crate::loader::describe()
        );
        return;
    }
    for (gen_, shuffled) in [(on, true), (off, false)] {
        let img = crate::nvrtc::compile(&gen_.source, 80, crate::nvrtc::Output::Ptx).unwrap();
        let ptx = img.ptx_text().expect("PTX text");
        for e in gen_.entry_names() {
            assert!(ptx.contains(&format!(".entry {e}(")), "entry {e} missing");
        }
        assert_eq!(ptx.contains("shfl.sync.bfly"), shuffled);
    }
}

/// A reduction lowered with warp shuffles (`LowerOptions::shuffles`) as a standalone
/// loop-IR kernel compiles with NVRTC.
#[test]
fn shuffled_reduction_trees_compile_with_nvrtc() {
    if !crate::loader::nvrtc_present() {
        println!(
            "skipping: NVRTC cannot be loaded ({})",
            crate::loader::describe()
        );
        return;
    }
    let mut src = String::from(crate::device::Dialect::Cuda.preamble());
    src.push_str(loops::C_PRELUDE);
    let mut names = Vec::new();
    for (i, (kind, dt)) in [
        (ReduceOp::Sum, DType::F32),
        (ReduceOp::Max, DType::F64),
        (ReduceOp::Mean, DType::I64),
    ]
    .into_iter()
    .enumerate()
    {
        let mut g = Graph::new("shuffled");
        let x = g.input("x", Shape::new(&[3, 3000], dt));
        let op = Op::Reduce {
            op: kind,
            axes: vec![1],
            keep_dim: false,
        };
        let y = g.add_op(op, vec![x]).unwrap();
        g.set_outputs(vec![y]);
        let p = rlx_runtime::compile_program(&g, &compile_options()).unwrap();
        let opts = loops::LowerOptions {
            shuffles: true,
            ..Default::default()
        };
        let lk = loops::lower_kernel_with(&p, 0, opts).unwrap();
        let body = loops::render_c_loop(
            &lk,
            &loops::CEmbedding {
                index_type: "long long",
                buf: &|i| format!("b{i}"),
                dim: &|s| format!("d{s}"),
                fail: &|_| String::new(),
                var_prefix: "v",
                dialect: crate::device::Dialect::Cuda,
            },
        );
        assert!(body.contains("__shfl_xor_sync"), "{body}");
        let params: Vec<String> = (0..lk.bufs.len()).map(|b| format!("char* b{b}")).collect();
        src.push_str(&format!(
            "extern \"C\" __global__ void s{i}({}) {{\n{body}}}\n",
            params.join(", ")
        ));
        names.push(format!("s{i}"));
    }
    let img = crate::nvrtc::compile(&src, 80, crate::nvrtc::Output::Ptx)
        .unwrap_or_else(|e| panic!("{e}\n{src}"));
    let ptx = img.ptx_text().expect("PTX text");
    for n in names {
        assert!(ptx.contains(&format!(".entry {n}(")), "entry {n} missing");
    }
    assert!(
        ptx.contains("shfl.sync.bfly"),
        "no butterfly shuffle in the PTX"
    );
}
