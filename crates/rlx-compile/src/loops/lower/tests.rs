//! Reductions lowered to the loop IR, run by its reference interpreter (work-groups
//! simulated item by item between barriers), against the `rlx-ir` oracle.
//!
//! Data are small integers (dyadic values for products), so every partial sum and
//! product is exact in the accumulator: the result is then the same whatever the order,
//! and sums, products, max and min must match the oracle bit for bit. Means divide in
//! f32 where the oracle divides in f64 and rounds again: within one ulp of the dtype.

use crate::loops::eval::{self, HostBuf};
use crate::loops::{self, Bin, Ex, LoopKernel, SharedArray, Stmt, Ty};
use crate::program::{BufKind, Program};
use crate::{CompileOptions, compile};
use rlx_ir::{
    Activation, BinaryOp, DType, Dim, DimBinding, Graph, NodeId, Op, ReduceOp, Shape, TensorData,
    interp,
};

/// Every kernel of `p` lowered and run in order; the outputs (or a kernel's error).
pub(super) fn run_loops(
    p: &Program,
    inputs: &[(&str, TensorData)],
    binding: &DimBinding,
) -> Result<Vec<TensorData>, String> {
    let bound = |s: &Shape| -> Vec<usize> {
        s.dims()
            .iter()
            .map(|d| d.resolve(binding).expect("bound"))
            .collect()
    };
    let host_of = |d: &TensorData| {
        if d.dtype.is_int() {
            HostBuf::Int(d.to_i64_vec())
        } else {
            HostBuf::Float(d.to_f64_vec())
        }
    };
    let mut host: Vec<HostBuf> = p
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufKind::Arg(i) => host_of(&inputs.iter().find(|(n, _)| *n == p.args[*i].0).unwrap().1),
            BufKind::Const(bytes) => {
                host_of(&TensorData::new(b.shape.dtype(), &bound(&b.shape), bytes.clone()).unwrap())
            }
            _ => HostBuf::zeros(b.shape.dtype(), bound(&b.shape).iter().product()),
        })
        .collect();
    for k in 0..p.kernels.len() {
        let lk = loops::lower_kernel(p, k).map_err(|e| e.to_string())?;
        let mut slots: Vec<HostBuf> = lk
            .bufs
            .iter()
            .map(|b| std::mem::replace(&mut host[b.buf], HostBuf::Int(Vec::new())))
            .collect();
        eval::run(&lk, &mut slots, binding)?;
        for (b, v) in lk.bufs.iter().zip(slots) {
            host[b.buf] = v;
        }
    }
    Ok(p.outputs
        .iter()
        .map(|&o| {
            let b = &p.buffers[o];
            match &host[o] {
                HostBuf::Int(v) => TensorData::from_i64_as(b.shape.dtype(), &bound(&b.shape), v),
                HostBuf::Float(v) => TensorData::from_f64_as(b.shape.dtype(), &bound(&b.shape), v),
            }
        })
        .collect())
}

fn op(g: &mut Graph, o: Op, inputs: Vec<NodeId>) -> NodeId {
    g.add_op(o, inputs).unwrap_or_else(|e| panic!("{e}"))
}

fn reduce(g: &mut Graph, kind: ReduceOp, axes: &[usize], keep_dim: bool, x: NodeId) -> NodeId {
    let o = Op::Reduce {
        op: kind,
        axes: axes.to_vec(),
        keep_dim,
    };
    op(g, o, vec![x])
}

/// Small integers (products: mostly ±1 with a few 2 and ½), in `dt`.
fn data(dt: DType, dims: &[usize], kind: ReduceOp, seed: u64) -> TensorData {
    let n: usize = dims.iter().product();
    let mut s = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    if dt == DType::Bool {
        let v: Vec<bool> = (0..n).map(|_| next() % 7 != 0).collect();
        return TensorData::from_bool(dims, &v);
    }
    let ints: Vec<i64> = (0..n)
        .map(|_| match kind {
            ReduceOp::Prod => [1, -1, 1, 1, -1, 1, 3][(next() % 7) as usize],
            _ => (next() % 17) as i64 - 8,
        })
        .collect();
    if dt.is_int() {
        let lo = if matches!(dt, DType::U8 | DType::U32) {
            0
        } else {
            -8
        };
        let v: Vec<i64> = ints.iter().map(|&x| x.max(lo)).collect();
        return TensorData::from_i64_as(dt, dims, &v);
    }
    let v: Vec<f64> = ints
        .iter()
        .map(|&x| {
            if kind == ReduceOp::Prod && x == 3 {
                0.5
            } else {
                x as f64
            }
        })
        .collect();
    TensorData::from_f64_as(dt, dims, &v)
}

/// One ulp of `dt` at `v` (0 for integers and bools).
fn ulp(dt: DType, v: f64) -> f64 {
    let bits = match dt {
        DType::F16 => 10,
        DType::BF16 => 7,
        DType::F32 => 23,
        DType::F64 => 52,
        _ => return 0.0,
    };
    if v == 0.0 || !v.is_finite() {
        return 0.0;
    }
    2f64.powi(v.abs().log2().floor() as i32 - bits)
}

/// Got == oracle bit for bit, or within `ulps` of the dtype (NaN matches NaN).
fn check(got: &TensorData, want: &TensorData, ulps: f64, what: &str) {
    assert_eq!(got.dims, want.dims, "{what}: dims");
    assert_eq!(got.dtype, want.dtype, "{what}: dtype");
    if want.dtype.is_int() || want.dtype == DType::Bool {
        assert_eq!(got.to_i64_vec(), want.to_i64_vec(), "{what}");
        return;
    }
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        let ok = (g.is_nan() && w.is_nan())
            || g.to_bits() == w.to_bits()
            || (g - w).abs() <= ulps * ulp(want.dtype, w);
        assert!(ok, "{what}: element {i}: loop IR {g:?}, oracle {w:?}");
    }
}

/// The lowered reduce kernel of `p` (the first).
fn reduce_kernel(p: &Program) -> LoopKernel {
    let k = p
        .kernels
        .iter()
        .position(|k| k.label().starts_with("reduce_"))
        .expect("a reduce kernel");
    loops::lower_kernel(p, k).unwrap_or_else(|e| panic!("{e}"))
}

const OPS: [ReduceOp; 5] = [
    ReduceOp::Sum,
    ReduceOp::Mean,
    ReduceOp::Max,
    ReduceOp::Min,
    ReduceOp::Prod,
];

#[test]
fn every_reduce_op_dtype_and_axis_set_matches_the_oracle() {
    let dims = [4, 70, 3];
    // Leading, middle and trailing axes, several, all; short ones run an item per output,
    // long ones a work-group per output (both checked below).
    let axes: [&[usize]; 6] = [&[0], &[1], &[2], &[0, 1], &[1, 2], &[0, 1, 2]];
    let dtypes = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::I8,
        DType::U8,
        DType::I64,
        DType::Bool,
    ];
    let mut shapes = (false, false);
    for dt in dtypes {
        for kind in OPS {
            if dt == DType::Bool && !matches!(kind, ReduceOp::Max | ReduceOp::Min) {
                continue;
            }
            for (ai, ax) in axes.iter().enumerate() {
                let keep = ai % 2 == 1;
                let mut g = Graph::new("red");
                let x = g.input("x", Shape::new(&dims, dt));
                let r = reduce(&mut g, kind, ax, keep, x);
                g.set_outputs(vec![r]);
                let p = compile(&g, &CompileOptions::default()).unwrap();
                let lk = reduce_kernel(&p);
                match lk.group {
                    Some(n) => {
                        shapes.0 = true;
                        assert!(n.is_power_of_two() && n <= 256, "{n}");
                        let arrays = if kind == ReduceOp::Mean && dt.is_int() {
                            2
                        } else {
                            1
                        };
                        assert_eq!(lk.shared.len(), arrays);
                        assert!(lk.shared.iter().all(|a| a.len == n), "{:?}", lk.shared);
                    }
                    None => shapes.1 = true,
                }
                let inputs = [("x", data(dt, &dims, kind, ai as u64 + 1))];
                let want = interp::run(&g, &inputs).unwrap();
                let got = run_loops(&p, &inputs, &DimBinding::new()).unwrap();
                let ulps = if kind == ReduceOp::Mean { 1.0 } else { 0.0 };
                check(
                    &got[0],
                    &want[0],
                    ulps,
                    &format!("{kind:?} {dt:?} axes {ax:?}"),
                );
            }
        }
    }
    assert!(shapes.0 && shapes.1, "both shapes exercised: {shapes:?}");
}

#[test]
fn nan_and_infinities_in_a_work_group_reduction_follow_the_oracle() {
    let mut v: Vec<f32> = (0..300).map(|i| (i % 13) as f32 - 6.0).collect();
    v[77] = f32::NAN;
    v[150 + 3] = f32::INFINITY;
    v[150 + 40] = f32::NEG_INFINITY;
    for kind in OPS {
        let mut g = Graph::new("nan");
        let x = g.input("x", Shape::new(&[2, 150], DType::F32));
        let r = reduce(&mut g, kind, &[1], false, x);
        g.set_outputs(vec![r]);
        let p = compile(&g, &CompileOptions::default()).unwrap();
        assert!(reduce_kernel(&p).group.is_some());
        let inputs = [("x", TensorData::from_f32(&[2, 150], &v))];
        let want = interp::run(&g, &inputs).unwrap();
        let got = run_loops(&p, &inputs, &DimBinding::new()).unwrap();
        check(&got[0], &want[0], 1.0, &format!("{kind:?}"));
    }
}

#[test]
fn fused_views_broadcasts_and_epilogues_match_the_oracle_within_f32_rounding() {
    // sum over the transposed, broadcast-added tanh of x, then exp: random-ish values.
    let mut g = Graph::new("fused");
    let x = g.input("x", Shape::new(&[90, 6], DType::F32));
    let b = g.input("b", Shape::new(&[90], DType::F32));
    let xt = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![x]);
    let e = op(&mut g, Op::Activation(Activation::Tanh), vec![xt]);
    let s = op(&mut g, Op::Binary(BinaryOp::Add), vec![e, b]);
    let r = reduce(&mut g, ReduceOp::Sum, &[1], true, s);
    let y = op(&mut g, Op::Activation(Activation::Exp), vec![r]);
    g.set_outputs(vec![y]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(p.kernels.len(), 1, "prologue and epilogue fused");
    assert!(reduce_kernel(&p).group.is_some());
    let xs: Vec<f32> = (0..540)
        .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
        .collect();
    let bs: Vec<f32> = (0..90).map(|i| (i as f32 * 0.37).sin()).collect();
    let inputs = [
        ("x", TensorData::from_f32(&[90, 6], &xs)),
        ("b", TensorData::from_f32(&[90], &bs)),
    ];
    let want = interp::run(&g, &inputs).unwrap();
    let got = run_loops(&p, &inputs, &DimBinding::new()).unwrap();
    check(&got[0], &want[0], 256.0, "fused sum");
}

#[test]
fn dynamic_reduced_and_kept_dims_are_parameters_and_empty_axes_follow_the_oracle() {
    let d = Dim::Dynamic(0);
    // Rows of dynamic length (row mode) and a dynamic column (few static outputs).
    for (dims, axes) in [
        (vec![Dim::Static(3), d], vec![1]),
        (vec![d, Dim::Static(5)], vec![0]),
    ] {
        for kind in OPS {
            let mut g = Graph::new("dyn");
            let x = g.input("x", Shape::from_dims(&dims, DType::F32));
            let r = reduce(&mut g, kind, &axes, false, x);
            g.set_outputs(vec![r]);
            let p = compile(&g, &CompileOptions::default()).unwrap();
            let lk = reduce_kernel(&p);
            assert_eq!(lk.group, Some(256), "{kind:?} {dims:?}");
            assert_eq!(lk.dims, vec![0]);
            for n in [0usize, 1, 300] {
                let bound: Vec<usize> = dims
                    .iter()
                    .map(|x| x.resolve(&[(0, n)].into_iter().collect()).unwrap())
                    .collect();
                let binding: DimBinding = [(0, n)].into_iter().collect();
                let inputs = [("x", data(DType::F32, &bound, kind, n as u64 + 3))];
                let what = format!("{kind:?} over {dims:?} with ?0 = {n}");
                match (interp::run(&g, &inputs), run_loops(&p, &inputs, &binding)) {
                    (Ok(want), Ok(got)) => check(&got[0], &want[0], 1.0, &what),
                    (Err(e), Err(got)) => {
                        assert!(e.message.contains("empty"), "{what}: oracle {e}");
                        assert!(got.contains("empty axis"), "{what}: {got}");
                    }
                    (want, got) => panic!("{what}: oracle {want:?}, loop IR {got:?}"),
                }
            }
        }
    }
}

#[test]
fn size_one_axes_and_single_outputs_reduce_like_the_oracle() {
    for (dims, axes) in [
        (vec![1usize, 1], vec![0usize, 1]),
        (vec![5, 1, 4], vec![1]),
        (vec![1, 200], vec![1]),
        (vec![200, 1], vec![0]),
    ] {
        for kind in OPS {
            let mut g = Graph::new("one");
            let x = g.input("x", Shape::new(&dims, DType::F32));
            let r = reduce(&mut g, kind, &axes, false, x);
            g.set_outputs(vec![r]);
            let p = compile(&g, &CompileOptions::default()).unwrap();
            if !p.kernels.iter().any(|k| k.label().starts_with("reduce_")) {
                continue; // simplified away (a reduction over size-1 axes is a reshape)
            }
            let inputs = [("x", data(DType::F32, &dims, kind, 9))];
            let want = interp::run(&g, &inputs).unwrap();
            let got = run_loops(&p, &inputs, &DimBinding::new()).unwrap();
            check(
                &got[0],
                &want[0],
                1.0,
                &format!("{kind:?} {dims:?} {axes:?}"),
            );
        }
    }
}

#[test]
fn integer_means_are_exact_where_a_wrapping_i64_sum_would_overflow() {
    // Values near i64::MAX and MIN: their sum overflows i64 many times over; the oracle
    // sums in i128 and truncates toward zero.
    for (len, sign) in [(3usize, 1i64), (150, 1), (150, -1), (7, 0)] {
        let v: Vec<i64> = (0..2 * len as i64)
            .map(|i| match sign {
                1 => i64::MAX - i * 3,
                -1 => i64::MIN + i * 5 + 1,
                _ => {
                    if i % 2 == 0 {
                        i64::MAX - i
                    } else {
                        -(i * 1000) - 1
                    }
                }
            })
            .collect();
        for dt in [DType::I64, DType::I32] {
            let v: Vec<i64> = if dt == DType::I32 {
                v.iter().map(|&x| x >> 32).collect()
            } else {
                v.clone()
            };
            let mut g = Graph::new("imean");
            let x = g.input("x", Shape::new(&[2, len], dt));
            let r = reduce(&mut g, ReduceOp::Mean, &[1], false, x);
            g.set_outputs(vec![r]);
            let p = compile(&g, &CompileOptions::default()).unwrap();
            assert_eq!(reduce_kernel(&p).group.is_some(), len >= 64);
            let inputs = [("x", TensorData::from_i64_as(dt, &[2, len], &v))];
            let want = interp::run(&g, &inputs).unwrap();
            let got = run_loops(&p, &inputs, &DimBinding::new()).unwrap();
            check(
                &got[0],
                &want[0],
                0.0,
                &format!("mean of {len} {dt:?} ({sign})"),
            );
        }
    }
}

/// A one-group kernel of 4 items: each stores its index into a shared array, then item 0
/// sums the array into buffer 0 — with or without the barrier between.
fn barrier_kernel(with_barrier: bool, divergent: bool) -> LoopKernel {
    let mut body = vec![Stmt::SharedStore {
        arr: 0,
        index: Ex::Local,
        value: Ex::Local,
    }];
    if with_barrier {
        body.push(Stmt::Barrier);
    }
    if divergent {
        body.push(Stmt::If {
            cond: Ex::Bin(
                Bin::Lt,
                Box::new(Ex::Local),
                Box::new(Ex::Lit(loops::Lit::Index(2))),
            ),
            body: vec![Stmt::Barrier],
        });
    }
    let sum = (1..4).fold(
        Ex::Shared {
            arr: 0,
            index: Box::new(Ex::Lit(loops::Lit::Index(0))),
        },
        |a, i| {
            Ex::Bin(
                Bin::Add,
                Box::new(a),
                Box::new(Ex::Shared {
                    arr: 0,
                    index: Box::new(Ex::Lit(loops::Lit::Index(i))),
                }),
            )
        },
    );
    body.push(Stmt::If {
        cond: Ex::Bin(
            Bin::Eq,
            Box::new(Ex::Local),
            Box::new(Ex::Lit(loops::Lit::Index(0))),
        ),
        body: vec![Stmt::Store {
            buf: 0,
            index: Ex::Group,
            value: Ex::Convert(Ty::I64, Box::new(sum)),
        }],
    });
    LoopKernel {
        name: "t".into(),
        bufs: vec![loops::KernelBuf {
            buf: 0,
            dtype: DType::I32,
            access: loops::Access::Write,
        }],
        dims: vec![],
        items: Ex::Lit(loops::Lit::Index(2)),
        group: Some(4),
        shared: vec![SharedArray {
            ty: Ty::Index,
            len: 4,
        }],
        vars: vec![],
        body,
    }
}

#[test]
fn the_interpreter_runs_groups_phase_by_phase_and_reports_races_and_divergent_barriers() {
    let mut out = [HostBuf::Int(vec![0; 2])];
    eval::run(&barrier_kernel(true, false), &mut out, &DimBinding::new()).unwrap();
    assert_eq!(out[0], HostBuf::Int(vec![6, 6]));
    let e = eval::run(&barrier_kernel(false, false), &mut out, &DimBinding::new()).unwrap_err();
    assert!(e.contains("data race on shared array 0"), "{e}");
    let e = eval::run(&barrier_kernel(true, true), &mut out, &DimBinding::new()).unwrap_err();
    assert!(e.contains("uniform control flow"), "{e}");
}

#[test]
fn row_ops_over_long_and_dynamic_rows_run_as_work_groups_like_the_oracle() {
    let opts = CompileOptions {
        keep_whole: ["softmax", "log_softmax", "layer_norm", "rms_norm"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..Default::default()
    };
    for (c, dynamic) in [(7usize, false), (200, false), (130, true)] {
        let cd = if dynamic {
            Dim::Dynamic(0)
        } else {
            Dim::Static(c)
        };
        let mut g = Graph::new("rows");
        let x = g.input("x", Shape::from_dims(&[Dim::Static(3), cd], DType::F32));
        let gm = g.input("g", Shape::from_dims(&[cd], DType::F32));
        let bt = g.input("b", Shape::from_dims(&[cd], DType::F32));
        let outs = [
            op(&mut g, Op::Softmax { axis: -1 }, vec![x]),
            op(&mut g, Op::LogSoftmax { axis: -1 }, vec![x]),
            op(
                &mut g,
                Op::LayerNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![x, gm, bt],
            ),
            op(
                &mut g,
                Op::RmsNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![x, gm, bt],
            ),
        ];
        for (i, &o) in outs.iter().enumerate() {
            let mut gi = g.clone();
            gi.set_outputs(vec![o]);
            let p = compile(&gi, &opts).unwrap();
            let k = p
                .kernels
                .iter()
                .position(|k| matches!(k.kind, crate::program::KernelKind::Row { .. }));
            let Some(k) = k else {
                panic!(
                    "no row kernel: {:?}",
                    p.kernels.iter().map(|k| k.label()).collect::<Vec<_>>()
                )
            };
            let lk = loops::lower_kernel(&p, k).unwrap();
            assert_eq!(lk.group.is_some(), c >= 64, "row op {i} over {c}");
            let xs: Vec<f32> = (0..3 * c)
                .map(|j| ((j * 37) % 23) as f32 / 7.0 - 1.5)
                .collect();
            let ps: Vec<f32> = (0..c).map(|j| 1.0 + (j % 5) as f32 / 4.0).collect();
            let inputs = [
                ("x", TensorData::from_f32(&[3, c], &xs)),
                ("g", TensorData::from_f32(&[c], &ps)),
                ("b", TensorData::from_f32(&[c], &ps)),
            ];
            let binding: DimBinding = [(0, c)].into_iter().collect();
            let want = interp::run(&gi, &inputs).unwrap();
            let got = run_loops(&p, &inputs, &binding).unwrap();
            check(&got[0], &want[0], 64.0, &format!("row op {i} over {c}"));
        }
    }
}
