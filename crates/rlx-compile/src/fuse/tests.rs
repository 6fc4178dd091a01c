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
