//! Work-group reduction trees finished with warp shuffles ([`LowerOptions::shuffles`]):
//! the interpreter runs the shuffled and the shared-memory lowering of the same kernel
//! over values whose sums depend on the order, and they agree bit for bit; the shuffled
//! kernel has fewer barriers, renders as CUDA/HIP shuffles and is refused by WGSL.

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
    let lk = loops::lower_kernel_with(
        p,
        0,
        LowerOptions {
            shuffles,
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
        let (shuf, got) = run(&p, true, &x, &b);
        let what = format!("{} {dt:?} over {dims:?} axes {axes:?}", kind.name());
        assert_eq!(bits(&got), bits(&want), "{what}");
        assert_eq!(
            shuffles(&shuf.body),
            5 * plain.shared.len().max(1),
            "{what}"
        );
        assert!(
            barriers(&shuf.body) < barriers(&plain.body),
            "{what}: {} barriers shuffled, {} not",
            barriers(&shuf.body),
            barriers(&plain.body)
        );
    }
    // A dynamic extent (256 lanes) over several lengths, the empty one included.
    let p = program(ReduceOp::Sum, &[Dim::Dynamic(0), s(2)], &[0], DType::F32);
    for len in [0usize, 1, 31, 33, 1000] {
        let mut b = DimBinding::new();
        b.set(0, len);
        let x = values(len * 2, false, len as u64 + 7);
        assert_eq!(
            bits(&run(&p, true, &x, &b).1),
            bits(&run(&p, false, &x, &b).1),
            "{len}"
        );
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

/// A work-group of 64 items where items `0..active` shuffle their index with mask 1.
fn shuffle_kernel(active: i64, group: bool) -> LoopKernel {
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
        mask: 1,
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

/// Row kernel `k` of `p` lowered with `shuffles`, run over `args` (by argument index):
/// the lowered kernel and its output.
fn run_row(
    p: &Program,
    k: usize,
    shuffles: bool,
    args: &[HostBuf],
    b: &DimBinding,
) -> (LoopKernel, HostBuf) {
    let lk = loops::lower_kernel_with(
        p,
        k,
        LowerOptions {
            shuffles,
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
            let (shuf, got) = run_row(&p, k, true, &args, &b);
            let what = format!("{o:?} over rows of {c} ({cd:?})");
            assert_eq!(bits(&got), bits(&want), "{what}");
            assert!(shuffles(&shuf.body) >= 5, "{what}");
            assert!(
                barriers(&shuf.body) < barriers(&plain.body),
                "{what}: {} barriers shuffled, {} not",
                barriers(&shuf.body),
                barriers(&plain.body)
            );
        }
    }
}
