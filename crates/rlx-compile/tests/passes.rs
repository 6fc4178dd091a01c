//! Properties of the compiler passes on random graphs: simplification preserves
//! results bit for bit, schedules respect dependencies, the memory plan never lets two
//! live buffers share bytes, outputs are their own buffers, and fused elementwise
//! chains need no arena at all.

use proptest::prelude::*;
use rlx_compile::program::{BufKind, KernelKind};
use rlx_compile::{CompileOptions, compile, memplan, simplify::simplify};
use rlx_ir::{Activation, BinaryOp, DType, Graph, NodeId, Op, ReduceOp, Shape, TensorData, interp};

/// A random graph over f64 inputs from a list of op codes.
fn graph_from(codes: &[(u8, u8)], dims: &[usize]) -> (Graph, Vec<(String, TensorData)>) {
    let mut g = Graph::new("p");
    let mut data = Vec::new();
    let mut vals: Vec<NodeId> = Vec::new();
    let input = |g: &mut Graph, data: &mut Vec<(String, TensorData)>, d: &[usize]| {
        let name = format!("in{}", data.len());
        let n: usize = d.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|i| ((i * 13 + data.len() * 7) % 17) as f64 / 4.0 - 2.0)
            .collect();
        data.push((name.clone(), TensorData::from_f64(d, &v)));
        g.input(name, Shape::new(d, DType::F64))
    };
    vals.push(input(&mut g, &mut data, dims));
    for &(code, arg) in codes {
        let x = vals[vals.len() - 1 - (arg as usize % vals.len().min(3))];
        let xd = g.shape(x).static_dims().unwrap();
        let r = match code % 9 {
            0 => g.add_op(
                Op::Activation(
                    [
                        Activation::Exp,
                        Activation::Tanh,
                        Activation::Neg,
                        Activation::Relu,
                    ][arg as usize % 4],
                ),
                vec![x],
            ),
            1 | 2 => {
                let y = if arg % 2 == 0 {
                    vals[arg as usize % vals.len()]
                } else {
                    input(&mut g, &mut data, &xd)
                };
                g.add_op(
                    Op::Binary(
                        [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Sub, BinaryOp::Max]
                            [arg as usize % 4],
                    ),
                    vec![x, y],
                )
            }
            3 if xd.len() >= 2 => g.add_op(
                Op::Transpose {
                    perm: (0..xd.len()).rev().collect(),
                },
                vec![x],
            ),
            4 if !xd.is_empty() => g.add_op(
                Op::Reduce {
                    op: [ReduceOp::Sum, ReduceOp::Max][arg as usize % 2],
                    axes: vec![arg as usize % xd.len()],
                    keep_dim: true,
                },
                vec![x],
            ),
            5 if xd.len() >= 2 => {
                let k = xd[xd.len() - 1];
                let w = input(&mut g, &mut data, &[k, 3]);
                g.add_op(Op::MatMul, vec![x, w])
            }
            6 => g.add_op(
                Op::Reshape {
                    new_shape: vec![-1],
                },
                vec![x],
            ),
            7 => {
                let one = TensorData::from_f64(&[], &[1.0]);
                let s = one.shape();
                let c = g.add_node(Op::Constant { data: one.bytes }, vec![], s);
                g.add_op(Op::Binary(BinaryOp::Mul), vec![x, c])
            }
            _ if !xd.is_empty() => g.add_op(Op::Softmax { axis: -1 }, vec![x]),
            _ => continue,
        };
        if let Ok(id) = r {
            vals.push(id);
        }
    }
    let n = vals.len();
    let mut outs = vec![vals[n - 1]];
    if n > 2 {
        outs.push(vals[n / 2]);
    }
    g.set_outputs(outs);
    (g, data)
}

fn strategy() -> impl Strategy<Value = (Vec<(u8, u8)>, Vec<usize>)> {
    (
        prop::collection::vec((any::<u8>(), any::<u8>()), 1..14),
        prop::collection::vec(1usize..6, 1..4),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 250, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn simplify_preserves_results_bit_for_bit((codes, dims) in strategy()) {
        let (g, data) = graph_from(&codes, &dims);
        let s = simplify(&g);
        let named: Vec<(&str, TensorData)> = data.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
        let used: Vec<(&str, TensorData)> = named.iter().filter(|(n, _)| s.input_id(n).is_some()).cloned().collect();
        let a = interp::run(&g, &named).unwrap();
        let b = interp::run(&s, &used).unwrap();
        prop_assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            prop_assert_eq!(&x.bytes, &y.bytes);
        }
        prop_assert!(s.len() <= g.len());
    }

    #[test]
    fn schedules_respect_dependencies_and_memory_plans_never_collide((codes, dims) in strategy()) {
        let (g, _) = graph_from(&codes, &dims);
        // (With row groups: the CPU's options, stages merged into one kernel each.)
        for (fuse, row_groups) in [(true, false), (false, false), (true, true)] {
            let opts = CompileOptions { keep_whole: vec!["softmax".into()], fuse, row_groups, multi_store: row_groups };
            let p = compile(&g, &opts).unwrap();
            // Every buffer a kernel reads is an argument, a constant, or written earlier.
            let mut written = vec![false; p.buffers.len()];
            for k in &p.kernels {
                for b in k.reads() {
                    prop_assert!(written[b] || matches!(p.buffers[b].kind, BufKind::Arg(_) | BufKind::Const(_)));
                }
                for b in k.writes() {
                    prop_assert!(!matches!(p.buffers[b].kind, BufKind::Arg(_) | BufKind::Const(_)), "writes an input");
                    written[b] = true;
                }
            }
            // Outputs are output buffers, written by some kernel.
            for &o in &p.outputs {
                prop_assert!(matches!(p.buffers[o].kind, BufKind::Output(_)));
                prop_assert!(written[o]);
            }
            // No two temporaries that are live at once share bytes (unless planned in place).
            let sizes: Vec<usize> = p.buffers.iter().map(|b| b.shape.size_bytes().unwrap()).collect();
            let (off, arena) = memplan::plan_offsets(&p, &sizes);
            let lv = &p.liveness;
            for a in 0..p.buffers.len() {
                let Some(ia) = lv.intervals[a] else { continue };
                prop_assert!(off[a] + sizes[a] <= arena);
                for b in a + 1..p.buffers.len() {
                    let Some(ib) = lv.intervals[b] else { continue };
                    let live = ia.0 <= ib.1 && ib.0 <= ia.1;
                    let overlap = off[a] < off[b] + sizes[b] && off[b] < off[a] + sizes[a] && sizes[a] > 0 && sizes[b] > 0;
                    let in_place = lv.in_place.iter().any(|&(x, y)| (x == a && y == b) || (x == b && y == a));
                    prop_assert!(!(live && overlap) || in_place, "buffers {} and {} collide", a, b);
                }
            }
            // In-place reuse only over a buffer that dies in the writing kernel.
            for &(out, over) in &lv.in_place {
                let (w, _) = lv.intervals[out].unwrap();
                prop_assert_eq!(lv.intervals[over].unwrap().1, w);
            }
        }
    }
}

#[test]
fn a_ten_op_elementwise_chain_needs_no_arena() {
    let n = 1 << 20;
    let mut g = Graph::new("chain10");
    let a = g.input("a", Shape::new(&[n], DType::F32));
    let b = g.input("b", Shape::new(&[n], DType::F32));
    let mut x = g.add_op(Op::Binary(BinaryOp::Add), vec![a, b]).unwrap();
    let acts = [
        Activation::Exp,
        Activation::Tanh,
        Activation::Relu,
        Activation::Sigmoid,
        Activation::Neg,
    ];
    for i in 0..9 {
        x = if i % 2 == 0 {
            g.add_op(Op::Activation(acts[i % acts.len()]), vec![x])
                .unwrap()
        } else {
            g.add_op(Op::Binary(BinaryOp::Mul), vec![x, a]).unwrap()
        };
    }
    g.set_outputs(vec![x]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(p.kernels.len(), 1);
    let sizes: Vec<usize> = p
        .buffers
        .iter()
        .map(|b| b.shape.size_bytes().unwrap())
        .collect();
    let (_, arena) = memplan::plan_offsets(&p, &sizes);
    assert_eq!(
        arena, 0,
        "inputs are read in place and the output is written once"
    );
    assert!(matches!(p.kernels[0].kind, KernelKind::Elementwise { .. }));
    assert_eq!(p.naive_bytes, Some(10 * n * 4));
}

#[test]
fn dynamic_dims_compile_once_and_keep_symbolic_shapes() {
    let mut g = Graph::new("dyn");
    let x = g.input(
        "x",
        Shape::from_dims(
            &[rlx_ir::Dim::Dynamic(0), rlx_ir::Dim::Static(4)],
            DType::F32,
        ),
    );
    let e = g.add_op(Op::Activation(Activation::Exp), vec![x]).unwrap();
    let s = g
        .add_op(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dim: true,
            },
            vec![e],
        )
        .unwrap();
    let d = g.add_op(Op::Binary(BinaryOp::Div), vec![e, s]).unwrap();
    g.set_outputs(vec![d]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert!(p.is_dynamic());
    let mut b = rlx_ir::DimBinding::new();
    for n in [1, 7, 100] {
        b.set(0, n);
        let sizes: Vec<usize> = (0..p.buffers.len())
            .map(|i| p.buffer_dims(i, &b).unwrap().iter().product::<usize>() * 4)
            .collect();
        let (_, arena) = memplan::plan_offsets(&p, &sizes);
        assert!(arena >= n * 4 * 4, "the exp temporary of {n} rows fits");
    }
}
