use crate::program::{BufKind, EOp, KernelKind};
use crate::{CompileOptions, compile};
use rlx_ir::{Activation, BinaryOp, DType, Graph, NodeId, Op, ReduceOp, Shape, TensorData};

fn f32s(g: &mut Graph, name: &str, dims: &[usize]) -> NodeId {
    g.input(name, Shape::new(dims, DType::F32))
}

fn scalar(g: &mut Graph, v: f32) -> NodeId {
    let d = TensorData::from_f32(&[], &[v]);
    {
        let s = d.shape();
        g.add_node(Op::Constant { data: d.bytes }, vec![], s)
    }
}

fn op(g: &mut Graph, o: Op, ins: Vec<NodeId>) -> NodeId {
    g.add_op(o, ins).unwrap()
}

#[test]
fn elementwise_chain_with_views_and_broadcasts_is_one_kernel_without_temporaries() {
    let mut g = Graph::new("chain");
    let a = f32s(&mut g, "a", &[4, 3]);
    let b = f32s(&mut g, "b", &[3]);
    let t = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![a]);
    let tt = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![t]);
    let s = op(&mut g, Op::Binary(BinaryOp::Add), vec![tt, b]);
    let half = scalar(&mut g, 0.5);
    let m = op(&mut g, Op::Binary(BinaryOp::Sub), vec![s, half]);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![m]);
    let r = op(
        &mut g,
        Op::Reshape {
            new_shape: vec![12],
        },
        vec![e],
    );
    g.set_outputs(vec![r]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(p.kernels.len(), 1, "{p:#?}");
    assert!(!p.buffers.iter().any(|b| b.kind == BufKind::Temp));
    let KernelKind::Elementwise { space, expr } = &p.kernels[0].kind else {
        panic!()
    };
    assert_eq!(space.len(), 1);
    assert_eq!(p.kernels[0].loads.len(), 2);
    assert!(expr.nodes.iter().any(|n| matches!(n.op, EOp::Const(_))));
}

#[test]
fn matmul_bias_activation_becomes_one_contraction_with_an_epilogue() {
    let mut g = Graph::new("mlp");
    let x = f32s(&mut g, "x", &[8, 4]);
    let w = g.param("w", Shape::new(&[4, 5], DType::F32));
    let bias = g.param("b", Shape::new(&[5], DType::F32));
    let y = op(
        &mut g,
        Op::FusedMatMulBiasAct {
            activation: Some(Activation::GeluApprox),
        },
        vec![x, w, bias],
    );
    g.set_outputs(vec![y]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(p.kernels.len(), 1, "{p:#?}");
    let KernelKind::Contraction { epilogue, .. } = &p.kernels[0].kind else {
        panic!("{p:#?}")
    };
    assert_eq!(epilogue.op_count(), 2, "bias add + gelu");
}

#[test]
fn reduction_fuses_prologue_and_epilogue() {
    let mut g = Graph::new("r");
    let x = f32s(&mut g, "x", &[4, 6]);
    let sq = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, x]);
    let s = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![1],
            keep_dim: false,
        },
        vec![sq],
    );
    let r = op(&mut g, Op::Activation(Activation::Sqrt), vec![s]);
    g.set_outputs(vec![r]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(p.kernels.len(), 1);
    let KernelKind::Reduce {
        prologue, epilogue, ..
    } = &p.kernels[0].kind
    else {
        panic!()
    };
    assert_eq!(prologue.op_count(), 1);
    assert_eq!(epilogue.op_count(), 1);
}

#[test]
fn expensive_values_used_by_two_kernels_are_materialized_once() {
    let mut g = Graph::new("m");
    let x = f32s(&mut g, "x", &[4, 6]);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![x]);
    let s = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![1],
            keep_dim: true,
        },
        vec![e],
    );
    let d = op(&mut g, Op::Binary(BinaryOp::Div), vec![e, s]);
    g.set_outputs(vec![d]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(p.kernels.len(), 3, "exp, sum, div: {p:#?}");
    assert_eq!(
        p.buffers.iter().filter(|b| b.kind == BufKind::Temp).count(),
        2
    );
}

#[test]
fn cheap_values_used_by_two_kernels_are_recomputed() {
    let mut g = Graph::new("c");
    let x = f32s(&mut g, "x", &[4, 6]);
    let n = op(&mut g, Op::Activation(Activation::Neg), vec![x]);
    let s = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Max,
            axes: vec![1],
            keep_dim: false,
        },
        vec![n],
    );
    let r = op(&mut g, Op::Activation(Activation::Relu), vec![n]);
    g.set_outputs(vec![s, r]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(p.kernels.len(), 2);
    assert!(!p.buffers.iter().any(|b| b.kind == BufKind::Temp));
}

#[test]
fn kept_row_ops_are_row_kernels_and_others_decompose() {
    let mut g = Graph::new("sm");
    let x = f32s(&mut g, "x", &[4, 6]);
    let s = op(&mut g, Op::Softmax { axis: -1 }, vec![x]);
    g.set_outputs(vec![s]);
    let opts = CompileOptions {
        keep_whole: vec!["softmax".into()],
        ..Default::default()
    };
    let p = compile(&g, &opts).unwrap();
    assert_eq!(p.kernels.len(), 1);
    assert!(matches!(p.kernels[0].kind, KernelKind::Row { .. }));
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert!(p.kernels.len() >= 2);
    assert!(
        p.kernels
            .iter()
            .all(|k| !matches!(k.kind, KernelKind::Row { .. } | KernelKind::Opaque { .. }))
    );
}

#[test]
fn unfusable_ops_run_as_opaque_kernels_over_viewed_operands() {
    let mut g = Graph::new("o");
    let x = f32s(&mut g, "x", &[4, 6]);
    let t = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![x]);
    let c = op(
        &mut g,
        Op::Cumsum {
            axis: 0,
            exclusive: false,
        },
        vec![t],
    );
    g.set_outputs(vec![c]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(p.kernels.len(), 1);
    assert!(matches!(p.kernels[0].kind, KernelKind::Opaque { .. }));
    assert_eq!(
        p.kernels[0].loads[0].steps.len(),
        1,
        "the transpose is an index map"
    );
}

#[test]
fn outputs_that_are_inputs_get_a_copy_kernel_and_duplicates_share_a_buffer() {
    let mut g = Graph::new("id");
    let x = f32s(&mut g, "x", &[3]);
    g.set_outputs(vec![x, x]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(p.kernels.len(), 1);
    assert_eq!(p.outputs[0], p.outputs[1]);
}

fn multi() -> CompileOptions {
    CompileOptions {
        multi_store: true,
        ..Default::default()
    }
}

fn bin(g: &mut Graph, b: BinaryOp, x: NodeId, y: NodeId) -> NodeId {
    op(g, Op::Binary(b), vec![x, y])
}

/// A momentum-style update over `[4, 6]`: `m' = 0.9·m + g`, `p' = p − 0.1·m'`, where `g`
/// is `grad` (a node of the graph); outputs `[p', m']`.
fn update(g: &mut Graph, grad: NodeId) -> (NodeId, NodeId) {
    let p = f32s(g, "p", &[4, 6]);
    let m = f32s(g, "m", &[4, 6]);
    let mu = scalar(g, 0.9);
    let lr = scalar(g, 0.1);
    let mm = bin(g, BinaryOp::Mul, mu, m);
    let m2 = bin(g, BinaryOp::Add, mm, grad);
    let step = bin(g, BinaryOp::Mul, lr, m2);
    let p2 = bin(g, BinaryOp::Sub, p, step);
    g.set_outputs(vec![p2, m2]);
    (p2, m2)
}

#[test]
fn an_output_read_by_one_same_space_kernel_is_stored_by_that_kernel_under_multi_store() {
    let mut g = Graph::new("u");
    let grad = f32s(&mut g, "g", &[4, 6]);
    update(&mut g, grad);
    let one = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(
        one.kernels.len(),
        2,
        "without multi_store: m' and p' kernels"
    );
    let p = compile(&g, &multi()).unwrap();
    assert_eq!(p.kernels.len(), 1, "{p:#?}");
    let k = &p.kernels[0];
    assert!(matches!(k.kind, KernelKind::Elementwise { .. }));
    let mut written: Vec<_> = k.writes().collect();
    written.sort_unstable();
    let mut outs = p.outputs.clone();
    outs.sort_unstable();
    assert_eq!(written, outs, "both outputs stored by the one kernel");
    // p' reads m' as a value of the kernel, not from m''s buffer.
    assert!(k.loads.iter().all(|l| !p.outputs.contains(&l.buf)));
    // m' is stored before p' (members first, the root last).
    assert_eq!(k.stores.last().unwrap().buf, p.outputs[0]);
}

#[test]
fn a_matmul_absorbs_a_multi_store_update_of_its_product_as_its_epilogue() {
    let mut g = Graph::new("mu");
    let x = f32s(&mut g, "x", &[4, 5]);
    let y = f32s(&mut g, "y", &[5, 6]);
    let grad = op(&mut g, Op::MatMul, vec![x, y]);
    update(&mut g, grad);
    let p = compile(&g, &multi()).unwrap();
    assert_eq!(p.kernels.len(), 1, "{p:#?}");
    let k = &p.kernels[0];
    let KernelKind::Contraction { epilogue, .. } = &k.kind else {
        panic!("{p:#?}")
    };
    assert_eq!(k.stores.len(), 2);
    assert_eq!(epilogue.op_count(), 4, "mul, add, mul, sub");
    assert!(!p.buffers.iter().any(|b| b.kind == BufKind::Temp));
    // Without the option m' absorbs the matmul and p' loads m' back from memory.
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(p.kernels.len(), 2, "{p:#?}");
    assert!(p.kernels[1].loads.iter().any(|l| l.buf == p.outputs[1]));
}

#[test]
fn an_output_read_through_a_view_or_by_two_kernels_is_not_merged() {
    // Read through a transpose: the reader's tile would need other elements.
    let mut g = Graph::new("t");
    let a = f32s(&mut g, "a", &[4, 4]);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![a]);
    let t = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![e]);
    let r = bin(&mut g, BinaryOp::Add, t, a);
    g.set_outputs(vec![r, e]);
    let p = compile(&g, &multi()).unwrap();
    assert_eq!(p.kernels.len(), 2, "{p:#?}");
    assert!(p.kernels.iter().all(|k| k.stores.len() == 1));
    // Read by two kernels (two other outputs of another space, so neither absorbs it).
    let mut g = Graph::new("two");
    let a = f32s(&mut g, "a", &[4, 6]);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![a]);
    let s1 = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![0],
            keep_dim: false,
        },
        vec![e],
    );
    let s2 = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Max,
            axes: vec![1],
            keep_dim: false,
        },
        vec![e],
    );
    g.set_outputs(vec![e, s1, s2]);
    let p = compile(&g, &multi()).unwrap();
    assert_eq!(p.kernels.len(), 3, "{p:#?}");
    assert!(p.kernels.iter().all(|k| k.stores.len() == 1));
}

#[test]
fn a_merged_output_of_another_space_or_a_broadcast_reader_stays_separate() {
    // m' [6] is read broadcast by p' [4, 6]: p' would recompute it per row.
    let mut g = Graph::new("b");
    let m = f32s(&mut g, "m", &[6]);
    let p0 = f32s(&mut g, "p", &[4, 6]);
    let two = scalar(&mut g, 2.0);
    let m2 = bin(&mut g, BinaryOp::Mul, m, two);
    let p2 = bin(&mut g, BinaryOp::Sub, p0, m2);
    g.set_outputs(vec![p2, m2]);
    let p = compile(&g, &multi()).unwrap();
    assert_eq!(p.kernels.len(), 2, "{p:#?}");
}

#[test]
fn row_cores_are_not_absorbed_into_kernels_with_several_stores() {
    // softmax kept whole feeds a merged pair: the pair stays elementwise (row kernels'
    // epilogues store one value) and the softmax gets its own kernel.
    let mut g = Graph::new("sm");
    let x = f32s(&mut g, "x", &[4, 6]);
    let s = op(&mut g, Op::Softmax { axis: -1 }, vec![x]);
    update(&mut g, s);
    let opts = CompileOptions {
        keep_whole: vec!["softmax".into()],
        multi_store: true,
        ..Default::default()
    };
    let p = compile(&g, &opts).unwrap();
    assert_eq!(p.kernels.len(), 2, "{p:#?}");
    assert!(matches!(p.kernels[0].kind, KernelKind::Row { .. }));
    assert_eq!(p.kernels[0].stores.len(), 1);
    assert!(matches!(p.kernels[1].kind, KernelKind::Elementwise { .. }));
    assert_eq!(p.kernels[1].stores.len(), 2);
}

#[test]
fn sibling_outputs_sharing_an_inlined_value_are_stored_by_one_kernel() {
    // f64 arithmetic over f32 state: `m' = cast(0.9·m + g)` and `p' = cast(p − m64)` both
    // compute `m64` and neither reads the other's output; a matmul feeds both.
    let mut g = Graph::new("s");
    let x = f32s(&mut g, "x", &[4, 5]);
    let y = f32s(&mut g, "y", &[5, 6]);
    let grad = op(&mut g, Op::MatMul, vec![x, y]);
    let p = f32s(&mut g, "p", &[4, 6]);
    let m = f32s(&mut g, "m", &[4, 6]);
    let c = |g: &mut Graph, v, to| op(g, Op::Cast { to }, vec![v]);
    let (g64, m64, p64) = (
        c(&mut g, grad, DType::F64),
        c(&mut g, m, DType::F64),
        c(&mut g, p, DType::F64),
    );
    let mu = {
        let d = TensorData::from_f64(&[], &[0.9]);
        let s = d.shape();
        g.add_node(Op::Constant { data: d.bytes }, vec![], s)
    };
    let mm = bin(&mut g, BinaryOp::Mul, mu, m64);
    let m2 = bin(&mut g, BinaryOp::Add, mm, g64);
    let p2 = bin(&mut g, BinaryOp::Sub, p64, m2);
    let (p_out, m_out) = (c(&mut g, p2, DType::F32), c(&mut g, m2, DType::F32));
    g.set_outputs(vec![p_out, m_out]);
    let p = compile(&g, &multi()).unwrap();
    assert_eq!(p.kernels.len(), 1, "{p:#?}");
    assert!(matches!(p.kernels[0].kind, KernelKind::Contraction { .. }));
    assert_eq!(p.kernels[0].stores.len(), 2);
    let plain = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(plain.kernels.len(), 3, "matmul, m', p': {plain:#?}");
}

#[test]
fn a_sibling_output_that_other_kernels_read_keeps_its_own_kernel() {
    // e = exp(a) and f = a + 1 share `a`; f is also read by a reduction, which may run
    // before the kernel of e, so f is not merged into it.
    let mut g = Graph::new("r");
    let a = f32s(&mut g, "a", &[4, 6]);
    let one = scalar(&mut g, 1.0);
    let f = bin(&mut g, BinaryOp::Add, a, one);
    let r = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![1],
            keep_dim: false,
        },
        vec![f],
    );
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![a]);
    g.set_outputs(vec![e, f, r]);
    let p = compile(&g, &multi()).unwrap();
    assert!(p.kernels.iter().all(|k| k.stores.len() == 1), "{p:#?}");
    // Without the reader they share one pass over `a`.
    let mut g2 = Graph::new("r2");
    let a = f32s(&mut g2, "a", &[4, 6]);
    let one = scalar(&mut g2, 1.0);
    let f = bin(&mut g2, BinaryOp::Add, a, one);
    let e = op(&mut g2, Op::Activation(Activation::Exp), vec![a]);
    g2.set_outputs(vec![e, f]);
    let p = compile(&g2, &multi()).unwrap();
    assert_eq!(p.kernels.len(), 1, "{p:#?}");
    assert_eq!(p.kernels[0].stores.len(), 2);
}

#[test]
fn two_matmul_kernels_sharing_an_input_stay_separate_so_both_keep_their_epilogues() {
    // y1 = x·w1 + x and y2 = x·w2 + x share `x`, but grouping them would leave one of
    // the products materialized instead of fused.
    let mut g = Graph::new("mm2");
    let x = f32s(&mut g, "x", &[4, 4]);
    let w1 = f32s(&mut g, "w1", &[4, 4]);
    let w2 = f32s(&mut g, "w2", &[4, 4]);
    let p1 = op(&mut g, Op::MatMul, vec![x, w1]);
    let p2 = op(&mut g, Op::MatMul, vec![x, w2]);
    let y1 = bin(&mut g, BinaryOp::Add, p1, x);
    let y2 = bin(&mut g, BinaryOp::Add, p2, x);
    g.set_outputs(vec![y1, y2]);
    let p = compile(&g, &multi()).unwrap();
    assert_eq!(p.kernels.len(), 2, "{p:#?}");
    assert!(
        p.kernels
            .iter()
            .all(|k| matches!(k.kind, KernelKind::Contraction { .. }) && k.stores.len() == 1)
    );
    assert!(!p.buffers.iter().any(|b| b.kind == BufKind::Temp));
}

/// `x` followed by `ops` ops alternating `+ 0.1` and `tanh`.
fn add_tanh_chain(g: &mut Graph, mut x: NodeId, ops: usize) -> NodeId {
    for i in 0..ops {
        x = if i % 2 == 0 {
            let c = scalar(g, 0.1);
            op(g, Op::Binary(BinaryOp::Add), vec![x, c])
        } else {
            op(g, Op::Activation(Activation::Tanh), vec![x])
        };
    }
    x
}

#[test]
fn a_chain_deeper_than_the_cap_is_split_and_emitted_on_a_small_stack() {
    let ops = 3 * super::MAX_FUSED_DEPTH + 5;
    // Emission used to recurse once per fused op: this overflowed a 256 KiB stack.
    let p = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let mut g = Graph::new("deep");
            let x = f32s(&mut g, "x", &[16]);
            let y = add_tanh_chain(&mut g, x, ops);
            g.set_outputs(vec![y]);
            compile(&g, &CompileOptions::default()).unwrap()
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(p.kernels.len(), 4, "{} kernels", p.kernels.len());
    let mut total = 0;
    for k in &p.kernels {
        let KernelKind::Elementwise { expr, .. } = &k.kind else {
            panic!("{}", k.label())
        };
        let computed = expr
            .nodes
            .iter()
            .filter(|n| matches!(n.op, EOp::Unary(_) | EOp::Binary(_)))
            .count();
        assert!(
            computed <= super::MAX_FUSED_DEPTH,
            "{computed} ops in one kernel"
        );
        total += computed;
    }
    assert_eq!(total, ops, "every op is computed exactly once");
    assert_eq!(
        p.buffers.iter().filter(|b| b.kind == BufKind::Temp).count(),
        3
    );
}

/// `x + 1` repeated `depth` times, read by a max reduction and by a relu (both outputs).
fn shared_chain(depth: usize) -> Graph {
    let mut g = Graph::new("shared");
    let mut c = f32s(&mut g, "x", &[4, 6]);
    for _ in 0..depth {
        let one = scalar(&mut g, 1.0);
        c = op(&mut g, Op::Binary(BinaryOp::Add), vec![c, one]);
    }
    let s = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Max,
            axes: vec![1],
            keep_dim: false,
        },
        vec![c],
    );
    let r = op(&mut g, Op::Activation(Activation::Relu), vec![c]);
    g.set_outputs(vec![s, r]);
    g
}

#[test]
fn a_cheap_value_read_by_two_kernels_is_recomputed_only_over_a_short_chain() {
    let temps = |p: &crate::Program| p.buffers.iter().filter(|b| b.kind == BufKind::Temp).count();
    // Short: both kernels recompute the chain (as for any cheap shared value).
    let p = compile(&shared_chain(10), &CompileOptions::default()).unwrap();
    assert_eq!((p.kernels.len(), temps(&p)), (2, 0));
    // Long enough that the ops outweigh storing and loading one f32 (the cost rule:
    // 2·(4 + c·d) > 4 + c·d + 12 from d = 33 on), or past the recompute bound: the
    // chain is computed once and stored.
    for depth in [33, super::MAX_RECOMPUTE_DEPTH + 1] {
        let p = compile(&shared_chain(depth), &CompileOptions::default()).unwrap();
        assert_eq!((p.kernels.len(), temps(&p)), (3, 1), "depth {depth}");
    }
    let p = compile(&shared_chain(32), &CompileOptions::default()).unwrap();
    assert_eq!((p.kernels.len(), temps(&p)), (2, 0));
    let p = compile(
        &shared_chain(super::MAX_RECOMPUTE_DEPTH + 1),
        &CompileOptions::default(),
    )
    .unwrap();
    let adds: usize = p
        .kernels
        .iter()
        .map(|k| k.fused_names.iter().filter(|n| *n == "add").count())
        .sum();
    // Stored where the rule tips (at depth 33); the last 32 adds, where recomputing
    // and storing break even, are computed by both readers.
    assert_eq!(
        adds,
        33 + 2 * 32,
        "only the tail after the stored value is computed twice"
    );
}

/// A pre-norm residual stack: `x ← x + relu(norm(x)·W_l)` for `layers` layers, where
/// `norm` is a row reduction (a sum over the last axis, subtracted). Every `x_l` is read
/// by its norm's reduction, the next layer's add and the output sum: left inlined, the
/// stream at layer `l` re-adds `l` stored products in each reader.
fn residual_stack(layers: usize) -> Graph {
    let mut g = Graph::new("residual");
    let mut x = f32s(&mut g, "x", &[16, 32]);
    let mut total = None;
    for l in 0..layers {
        let s = op(
            &mut g,
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dim: true,
            },
            vec![x],
        );
        let centred = op(&mut g, Op::Binary(BinaryOp::Sub), vec![x, s]);
        let w = g.param(format!("w{l}"), Shape::new(&[32, 32], DType::F32));
        let m = op(&mut g, Op::MatMul, vec![centred, w]);
        let r = op(&mut g, Op::Activation(Activation::Relu), vec![m]);
        x = op(&mut g, Op::Binary(BinaryOp::Add), vec![x, r]);
        let part = op(
            &mut g,
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![0, 1],
                keep_dim: false,
            },
            vec![x],
        );
        total = Some(match total {
            None => part,
            Some(t) => op(&mut g, Op::Binary(BinaryOp::Add), vec![t, part]),
        });
    }
    g.set_outputs(vec![x, total.unwrap()]);
    g
}

#[test]
fn a_residual_stream_is_stored_once_per_layer_and_never_re_added() {
    for layers in [2, 4, 8] {
        let p = compile(&residual_stack(layers), &CompileOptions::default()).unwrap();
        // Residual adds in the [16, 32] space: exactly one per layer across all kernels.
        let stream_adds: usize = p
            .kernels
            .iter()
            .map(|k| {
                let in_space = match &k.kind {
                    KernelKind::Elementwise { space, .. } => space.len() == 2,
                    KernelKind::Contraction { .. } => true,
                    _ => false,
                };
                if in_space {
                    k.fused_names.iter().filter(|n| *n == "add").count()
                } else {
                    0
                }
            })
            .sum();
        assert_eq!(
            stream_adds,
            layers,
            "L = {layers}: {}",
            crate::explain(&p, "test", None)
        );
        // Per layer: the norm's sum, the part sum, the matmul (with centring prologue
        // stored by a kernel of its own or absorbed) — the count grows linearly.
        let per_layer = p.kernels.len() as f64 / layers as f64;
        assert!(
            per_layer <= 5.0,
            "L = {layers}: {} kernels",
            p.kernels.len()
        );
        let stored = p.sharing.iter().filter(|v| v.sharing.stored()).count();
        assert!(stored >= layers - 1, "{:#?}", p.sharing);
    }
}

#[test]
fn explain_reports_each_shared_value_with_its_costs_and_decision() {
    let p = compile(&residual_stack(3), &CompileOptions::default()).unwrap();
    let text = crate::explain(&p, "test", None);
    assert!(text.contains("shared values:"), "{text}");
    assert!(text.contains("B/elem"), "{text}");
    assert!(text.contains("-> stored"), "{text}");
    // A cheap chain on one buffer read by two kernels: each of its three adds is
    // reported as recomputed.
    let p = compile(&shared_chain(3), &CompileOptions::default()).unwrap();
    assert_eq!(p.sharing.len(), 3, "{:#?}", p.sharing);
    assert!(p.sharing.iter().all(|v| !v.sharing.stored()));
    assert!(crate::explain(&p, "test", None).contains("-> recomputed"));
}

#[test]
fn a_mask_read_by_two_kernels_stays_inline_even_when_storing_it_moves_fewer_bytes() {
    // x > y (a 1-byte bool from two f32 buffers) read by a select and a cast-multiply:
    // by bytes alone storing it would win; masks are kept in registers instead.
    let mut g = Graph::new("mask");
    let x = f32s(&mut g, "x", &[64]);
    let y = f32s(&mut g, "y", &[64]);
    let gr = f32s(&mut g, "g", &[64]);
    let m = op(&mut g, Op::Compare(rlx_ir::CmpOp::Gt), vec![x, y]);
    let zero = scalar(&mut g, 0.0);
    let sel = op(&mut g, Op::Where, vec![m, gr, zero]);
    let mf = op(&mut g, Op::Cast { to: DType::F32 }, vec![m]);
    let prod = op(&mut g, Op::Binary(BinaryOp::Mul), vec![gr, mf]);
    g.set_outputs(vec![sel, prod]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert!(!p.buffers.iter().any(|b| b.kind == BufKind::Temp), "{p:#?}");
    let mask = p.sharing.iter().find(|v| v.op == "gt").expect("reported");
    assert!(!mask.sharing.stored(), "{mask}");
}
