//! Work-group reduction trees finished with warp shuffles ([`LowerOptions::shuffles`]):
//! the interpreter runs the shuffled and the shared-memory lowering of the same kernel
//! over values whose sums depend on the order, and they agree bit for bit; the shuffled
//! kernel has fewer barriers, renders as CUDA/HIP shuffles, and as WGSL subgroup
//! shuffles only for a device whose fixed subgroup size is the lowering's width (8 and
//! 16 here, as well as CUDA/HIP's 32).

use crate::loops::eval::{self, HostBuf};
use crate::loops::{
    self, Bin, CEmbedding, Dialect, Ex, LoopKernel, LowerOptions, SharedArray, Stmt, Ty, WgslError,
};
use crate::program::{BufKind, Program};
use crate::{CompileOptions, compile};
use rlx_ir::{DType, Dim, DimBinding, Graph, Op, ReduceOp, Shape};

fn program(kind: ReduceOp, dims: &[Dim], axes: &[usize], dt: DType) -> Program {
    let mut g = Graph::new("shuffle");
    let x = g.input("x", Shape::from_dims(dims, dt));
    let o = Op::Reduce {
        op: kind,
        axes: axes.to_vec(),
        keep_dim: false,
    };
    let y = g.add_op(o, vec![x]).unwrap();
    g.set_outputs(vec![y]);
    compile(&g, &CompileOptions::default()).unwrap()
}

/// Kernel 0 of `p` (its only one) lowered with `shuffles`, run over `x`: the output.
fn run(p: &Program, shuffles: bool, x: &HostBuf, binding: &DimBinding) -> (LoopKernel, HostBuf) {
    run_width(p, shuffles, 0, x, binding)
}

/// [`run`] with shuffles of `width` lanes (0: the CUDA/HIP width).
fn run_width(
    p: &Program,
    shuffles: bool,
    width: u32,
    x: &HostBuf,
    binding: &DimBinding,
) -> (LoopKernel, HostBuf) {
    let lk = loops::lower_kernel_with(
        p,
        0,
        LowerOptions {
            shuffles,
            shuffle_width: width,
            ..Default::default()
        },
    )
    .unwrap();
    let out = p.outputs[0];
    let n: usize = p.buffers[out]
        .shape
        .dims()
        .iter()
        .map(|d| d.resolve(binding).unwrap())
        .product();
    let mut slots: Vec<HostBuf> = lk
        .bufs
        .iter()
        .map(|b| match p.buffers[b.buf].kind {
            BufKind::Arg(_) => x.clone(),
            _ => HostBuf::zeros(p.buffers[b.buf].shape.dtype(), n),
        })
        .collect();
    eval::run(&lk, &mut slots, binding).unwrap_or_else(|e| panic!("{e}"));
    let at = lk.bufs.iter().position(|b| b.buf == out).unwrap();
    (lk.clone(), slots.swap_remove(at))
}

fn barriers(body: &[Stmt]) -> usize {
    body.iter()
        .map(|s| match s {
            Stmt::Barrier => 1,
            Stmt::Loop { body, .. } | Stmt::If { body, .. } => barriers(body),
            _ => 0,
        })
        .sum()
}

fn shuffles(body: &[Stmt]) -> usize {
    body.iter()
        .map(|s| match s {
            Stmt::ShuffleXor { .. } => 1,
            Stmt::Loop { body, .. } | Stmt::If { body, .. } => shuffles(body),
            _ => 0,
        })
        .sum()
}

/// Values of mixed sign and magnitude: a float sum's last bits depend on the order.
fn values(n: usize, int: bool, seed: u64) -> HostBuf {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    if int {
        HostBuf::Int((0..n).map(|_| (next() >> 1) as i64).collect())
    } else {
        HostBuf::Float(
            (0..n)
                .map(|_| {
                    let r = next();
                    let m =
                        ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * (1 + (r & 1023)) as f32;
                    m as f64
                })
                .collect(),
        )
    }
}

fn bits(h: &HostBuf) -> Vec<u64> {
    match h {
        HostBuf::Float(v) => v.iter().map(|f| f.to_bits()).collect(),
        HostBuf::Int(v) => v.iter().map(|&i| i as u64).collect(),
    }
}

#[test]
fn shuffled_trees_equal_shared_memory_trees_bit_for_bit_with_fewer_barriers() {
    let s = Dim::Static;
    let cases: Vec<(ReduceOp, Vec<Dim>, Vec<usize>, DType)> = vec![
        // Rows of 500 (64 lanes), 3000 (256 lanes) and 200 (32 lanes: no shared memory).
        (ReduceOp::Sum, vec![s(3), s(500)], vec![1], DType::F32),
        (ReduceOp::Sum, vec![s(2), s(3000)], vec![1], DType::F32),
        (ReduceOp::Sum, vec![s(2), s(200)], vec![1], DType::F64),
        (ReduceOp::Mean, vec![s(3), s(3000)], vec![1], DType::F16),
        (ReduceOp::Max, vec![s(3), s(3000)], vec![1], DType::F32),
        (ReduceOp::Min, vec![s(3000), s(2)], vec![0], DType::F32),
        (ReduceOp::Prod, vec![s(2), s(700)], vec![1], DType::F64),
        // Wrapping integer sums and exact integer means (two accumulators).
        (ReduceOp::Sum, vec![s(2), s(3000)], vec![1], DType::I64),
        (ReduceOp::Mean, vec![s(2), s(3000)], vec![1], DType::I64),
    ];
    for (i, (kind, dims, axes, dt)) in cases.into_iter().enumerate() {
        let p = program(kind, &dims, &axes, dt);
        let n: usize = dims.iter().map(|d| d.unwrap_static()).product();
        let x = values(n, dt.is_int(), i as u64 + 1);
        let b = DimBinding::new();
        let (plain, want) = run(&p, false, &x, &b);
        // 0: the CUDA/HIP width (32); 8 and 16: WGSL subgroup sizes.
        for width in [0u32, 8, 16] {
            let (shuf, got) = run_width(&p, true, width, &x, &b);
            let what = format!(
                "{} {dt:?} over {dims:?} axes {axes:?}, width {width}",
                kind.name()
            );
            assert_eq!(bits(&got), bits(&want), "{what}");
            let levels = if width == 0 {
                5
            } else {
                width.ilog2() as usize
            };
            assert_eq!(
                shuffles(&shuf.body),
                levels * plain.shared.len().max(1),
                "{what}"
            );
            assert!(
                barriers(&shuf.body) < barriers(&plain.body),
                "{what}: {} barriers shuffled, {} not",
                barriers(&shuf.body),
                barriers(&plain.body)
            );
        }
    }
    // A dynamic extent (256 lanes) over several lengths, the empty one included.
    let p = program(ReduceOp::Sum, &[Dim::Dynamic(0), s(2)], &[0], DType::F32);
    for len in [0usize, 1, 31, 33, 1000] {
        let mut b = DimBinding::new();
        b.set(0, len);
        let x = values(len * 2, false, len as u64 + 7);
        for width in [0u32, 8, 16] {
            assert_eq!(
                bits(&run_width(&p, true, width, &x, &b).1),
                bits(&run(&p, false, &x, &b).1),
                "{len} width {width}"
            );
        }
    }
}

#[test]
fn shuffles_render_as_warp_intrinsics_and_wgsl_refuses_them() {
    let p = program(
        ReduceOp::Sum,
        &[Dim::Static(3), Dim::Static(500)],
        &[1],
        DType::F32,
    );
    let lk = loops::lower_kernel_with(
        &p,
        0,
        LowerOptions {
            shuffles: true,
            ..Default::default()
        },
    )
    .unwrap();
    let render = |dialect| {
        loops::render_c_loop(
            &lk,
            &CEmbedding {
                index_type: "long long",
                buf: &|i| format!("b{i}"),
                dim: &|s| format!("d{s}"),
                fail: &|_| String::new(),
                var_prefix: "v",
                dialect,
            },
        )
    };
    let cuda = render(Dialect::Cuda);
    assert!(cuda.contains("__shfl_xor_sync(0xffffffffu, "), "{cuda}");
    assert!(
        cuda.contains(", 16, 32)") && cuda.contains(", 1, 32)"),
        "{cuda}"
    );
    let hip = render(Dialect::Hip);
    assert!(
        hip.contains("__shfl_xor(") && !hip.contains("__shfl_xor_sync"),
        "{hip}"
    );
    match loops::render_wgsl(&lk) {
        Err(e @ WgslError::Shuffle { .. }) => {
            assert!(e.to_string().contains("without shuffles"), "{e}")
        }
        other => panic!("WGSL rendered a shuffle: {other:?}"),
    }
}

/// A work-group of 64 items where items `0..active` shuffle their index with mask 1 in
/// segments of 32.
fn shuffle_kernel(active: i64, group: bool) -> LoopKernel {
    shuffle_kernel_width(active, group, 1, 32)
}

/// [`shuffle_kernel`] with `mask` in segments of `width`.
fn shuffle_kernel_width(active: i64, group: bool, mask: u32, width: u32) -> LoopKernel {
    let mut b = loops::Builder::default();
    let me = if group { Ex::Local } else { Ex::Item };
    let v = b.var(Ty::Index);
    b.push(Stmt::Let {
        var: v,
        value: me.clone(),
    });
    let body = vec![Stmt::ShuffleXor {
        var: v,
        value: Ex::Var(v),
        mask,
        width,
    }];
    b.push(Stmt::If {
        cond: Ex::Bin(
            Bin::Lt,
            Box::new(me.clone()),
            Box::new(crate::loops::build::int(active)),
        ),
        body,
    });
    b.push(Stmt::Store {
        buf: 0,
        index: me,
        value: Ex::Var(v),
    });
    LoopKernel {
        name: "shuffle".into(),
        bufs: vec![crate::loops::KernelBuf {
            buf: 0,
            dtype: DType::I64,
            access: crate::loops::Access::Write,
        }],
        dims: Vec::new(),
        items: crate::loops::build::int(1),
        group: group.then_some(64),
        shared: Vec::<SharedArray>::new(),
        vars: b.vars,
        body: b.body,
    }
}

#[test]
fn the_interpreter_shuffles_whole_leading_segments_and_refuses_others() {
    let mut out = [HostBuf::zeros(DType::I64, 64)];
    eval::run(&shuffle_kernel(32, true), &mut out, &DimBinding::new()).unwrap();
    let HostBuf::Int(v) = &out[0] else { panic!() };
    let want: Vec<i64> = (0..64).map(|l| if l < 32 { l ^ 1 } else { l }).collect();
    assert_eq!(v, &want);
    for (active, group) in [(20, true), (64, false)] {
        let mut out = [HostBuf::zeros(DType::I64, 64)];
        let e = eval::run(&shuffle_kernel(active, group), &mut out, &DimBinding::new());
        assert!(e.is_err_and(|e| e.contains("shuffle")), "{active} {group}");
    }
}

#[test]
fn narrow_shuffles_exchange_within_their_own_segments_and_odd_widths_are_refused() {
    // Width 8, mask 4: items 0..24 (three whole segments) swap halves of each segment.
    let mut out = [HostBuf::zeros(DType::I64, 64)];
    eval::run(
        &shuffle_kernel_width(24, true, 4, 8),
        &mut out,
        &DimBinding::new(),
    )
    .unwrap();
    let HostBuf::Int(v) = &out[0] else { panic!() };
    let want: Vec<i64> = (0..64).map(|l| if l < 24 { l ^ 4 } else { l }).collect();
    assert_eq!(v, &want);
    // 20 items are not whole segments of 8; a mask of 8 leaves a segment of 8; width 3
    // is no power of two.
    for (active, mask, width, says) in [
        (20, 1, 8, "segments of 8"),
        (16, 8, 8, "below 8"),
        (6, 1, 3, "powers of two"),
    ] {
        let mut out = [HostBuf::zeros(DType::I64, 64)];
        let k = shuffle_kernel_width(active, true, mask, width);
        let e = eval::run(&k, &mut out, &DimBinding::new());
        assert!(
            e.as_ref().is_err_and(|e| e.contains(says)),
            "{active} {mask} {width}: {e:?}"
        );
    }
    // The lowering refuses widths that are not powers of two >= 2, by name.
    let p = program(
        ReduceOp::Sum,
        &[Dim::Static(3), Dim::Static(500)],
        &[1],
        DType::F32,
    );
    for width in [1u32, 3, 24] {
        let opts = LowerOptions {
            shuffles: true,
            shuffle_width: width,
            ..Default::default()
        };
        let e = loops::lower_kernel_with(&p, 0, opts).expect_err("an odd width");
        assert!(
            e.to_string().contains(&format!("shuffle width {width}")),
            "{e}"
        );
        let e = loops::lower_split_reduction_with(&p, 0, 4, opts).expect_err("an odd width");
        assert!(e.to_string().contains("shuffle_width"), "{e}");
    }
}

#[test]
fn subgroup_width_shuffles_render_as_wgsl_subgroup_shuffles_that_naga_validates() {
    let p = program(
        ReduceOp::Sum,
        &[Dim::Static(3), Dim::Static(500)],
        &[1],
        DType::F32,
    );
    let lower = |width| {
        loops::lower_kernel_with(
            &p,
            0,
            LowerOptions {
                shuffles: true,
                shuffle_width: width,
                ..Default::default()
            },
        )
        .unwrap()
    };
    let lk = lower(8);
    let src = loops::render_wgsl_subgroups(&lk, Some(8)).unwrap();
    assert_eq!(src.matches("subgroupShuffleXor(").count(), 3, "{src}");
    assert!(src.contains(", 4u);") && src.contains(", 1u);"), "{src}");
    let module = naga::front::wgsl::parse_str(&src)
        .unwrap_or_else(|e| panic!("{}\n{src}", e.emit_to_string(&src)));
    use naga::valid::{
        Capabilities, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator,
    };
    Validator::new(ValidationFlags::all(), Capabilities::SUBGROUP)
        .subgroup_stages(ShaderStages::COMPUTE)
        .subgroup_operations(SubgroupOperationSet::SHUFFLE)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    // Without the capability naga refuses the module: the test above checks something.
    assert!(
        Validator::new(ValidationFlags::all(), Capabilities::empty())
            .validate(&module)
            .is_err()
    );
    // A subgroup size other than the width, or none, is refused by name; a kernel
    // without shuffles needs no extension.
    for (width, sub) in [(8, Some(16)), (8, None), (0, Some(8))] {
        match loops::render_wgsl_subgroups(&lower(width), sub) {
            Err(e @ WgslError::Shuffle { .. }) => {
                assert!(e.to_string().contains("-lane shuffles"), "{e}")
            }
            other => panic!("{width} on {sub:?}: {other:?}"),
        }
    }
    let plain = loops::lower_kernel(&p, 0).unwrap();
    assert!(!loops::wgsl_uses_subgroups(&plain));
    let src = loops::render_wgsl_subgroups(&plain, Some(8)).unwrap();
    assert!(!src.contains("subgroup"), "{src}");
}

/// Row kernel `k` of `p` lowered with `shuffles`, run over `args` (by argument index):
/// the lowered kernel and its output.
fn run_row(
    p: &Program,
    k: usize,
    shuffles: bool,
    args: &[HostBuf],
    b: &DimBinding,
) -> (LoopKernel, HostBuf) {
    run_row_width(p, k, shuffles, 0, args, b)
}

/// [`run_row`] with shuffles of `width` lanes (0: the CUDA/HIP width).
fn run_row_width(
    p: &Program,
    k: usize,
    shuffles: bool,
    width: u32,
    args: &[HostBuf],
    b: &DimBinding,
) -> (LoopKernel, HostBuf) {
    let lk = loops::lower_kernel_with(
        p,
        k,
        LowerOptions {
            shuffles,
            shuffle_width: width,
            ..Default::default()
        },
    )
    .unwrap();
    let out = p.outputs[0];
    let numel = |buf: usize| -> usize {
        p.buffers[buf]
            .shape
            .dims()
            .iter()
            .map(|d| d.resolve(b).unwrap())
            .product()
    };
    let mut slots: Vec<HostBuf> = lk
        .bufs
        .iter()
        .map(|s| match p.buffers[s.buf].kind {
            BufKind::Arg(i) => args[i].clone(),
            _ => HostBuf::zeros(p.buffers[s.buf].shape.dtype(), numel(s.buf)),
        })
        .collect();
    eval::run(&lk, &mut slots, b).unwrap_or_else(|e| panic!("{e}"));
    let at = lk.bufs.iter().position(|s| s.buf == out).unwrap();
    (lk.clone(), slots.swap_remove(at))
}

#[test]
fn shuffled_row_op_totals_equal_shared_memory_trees_bit_for_bit_with_fewer_barriers() {
    let opts = CompileOptions {
        keep_whole: ["softmax", "log_softmax", "layer_norm", "rms_norm"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..Default::default()
    };
    // Rows of 200 (32 lanes: registers only), 500 (64), 3000 (256) and dynamic rows
    // (256 lanes) of 1, 33 and 1000 columns.
    let cases: [(Dim, usize); 6] = [
        (Dim::Static(200), 200),
        (Dim::Static(500), 500),
        (Dim::Static(3000), 3000),
        (Dim::Dynamic(0), 1),
        (Dim::Dynamic(0), 33),
        (Dim::Dynamic(0), 1000),
    ];
    for (ci, (cd, c)) in cases.into_iter().enumerate() {
        for (oi, o) in [
            Op::Softmax { axis: -1 },
            Op::LogSoftmax { axis: -1 },
            Op::LayerNorm {
                axis: -1,
                eps: 1e-5,
            },
            Op::RmsNorm {
                axis: -1,
                eps: 1e-5,
            },
        ]
        .into_iter()
        .enumerate()
        {
            let mut g = Graph::new("rows");
            let x = g.input("x", Shape::from_dims(&[Dim::Static(3), cd], DType::F32));
            let mut ins = vec![x];
            if oi >= 2 {
                ins.push(g.input("g", Shape::from_dims(&[cd], DType::F32)));
                ins.push(g.input("b", Shape::from_dims(&[cd], DType::F32)));
            }
            let y = g.add_op(o.clone(), ins).unwrap();
            g.set_outputs(vec![y]);
            let p = compile(&g, &opts).unwrap();
            let k = p
                .kernels
                .iter()
                .position(|k| matches!(k.kind, crate::program::KernelKind::Row { .. }))
                .unwrap();
            let args: Vec<HostBuf> = p
                .args
                .iter()
                .enumerate()
                .map(|(i, (name, _))| {
                    let n = if name == "x" { 3 * c } else { c };
                    values(n, false, (ci * 10 + oi + i) as u64 + 3)
                })
                .collect();
            let b: DimBinding = [(0, c)].into_iter().collect();
            let (plain, want) = run_row(&p, k, false, &args, &b);
            for width in [0u32, 8, 16] {
                let (shuf, got) = run_row_width(&p, k, true, width, &args, &b);
                let what = format!("{o:?} over rows of {c} ({cd:?}), width {width}");
                assert_eq!(bits(&got), bits(&want), "{what}");
                let levels = if width == 0 {
                    5
                } else {
                    width.ilog2() as usize
                };
                assert!(shuffles(&shuf.body) >= levels, "{what}");
                assert!(
                    barriers(&shuf.body) < barriers(&plain.body),
                    "{what}: {} barriers shuffled, {} not",
                    barriers(&shuf.body),
                    barriers(&plain.body)
                );
            }
        }
    }
}
