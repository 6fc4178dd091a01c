//! The row-group fusion decision ([`super::plan_row_groups`]) on hand-built programs:
//! norm backwards become one group, and what may not join does not.

use super::{StageRole, stage_role};
use crate::autodiff::grad_graph;
use crate::program::{KernelKind, Program};
use crate::{CompileOptions, compile};
use rlx_ir::{BinaryOp, DType, Dim, Graph, NodeId, Op, ReduceOp, Shape};

fn op(g: &mut Graph, o: Op, ins: Vec<NodeId>) -> NodeId {
    g.add_op(o, ins).unwrap()
}

fn reduce(g: &mut Graph, o: ReduceOp, axes: Vec<usize>, keep_dim: bool, x: NodeId) -> NodeId {
    op(
        g,
        Op::Reduce {
            op: o,
            axes,
            keep_dim,
        },
        vec![x],
    )
}

/// The CPU's options: norms decomposed (their backward is built from primitives), with
/// and without row groups.
fn opts(row_groups: bool) -> CompileOptions {
    CompileOptions {
        multi_store: true,
        row_groups,
        ..Default::default()
    }
}

/// `∂/∂(x, γ, β) Σ norm(x; γ, β) ⊙ gy` over `[rows, c]` in `dt`.
fn norm_backward(rows: usize, c: usize, rms: bool, dt: DType) -> Graph {
    let mut g = Graph::new("norm_bwd");
    let x = g.input("x", Shape::new(&[rows, c], dt));
    let gamma = g.input("gamma", Shape::new(&[c], dt));
    let beta = g.input("beta", Shape::new(&[c], dt));
    let gy = g.input("gy", Shape::new(&[rows, c], dt));
    let o = if rms {
        Op::RmsNorm {
            axis: -1,
            eps: 1e-5,
        }
    } else {
        Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        }
    };
    let y = op(&mut g, o, vec![x, gamma, beta]);
    let p = op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, gy]);
    let loss = reduce(&mut g, ReduceOp::Sum, vec![0, 1], false, p);
    g.set_outputs(vec![loss]);
    grad_graph(&g, &[x, gamma, beta]).unwrap()
}

fn groups(p: &Program) -> Vec<&Vec<crate::program::Kernel>> {
    p.kernels
        .iter()
        .filter_map(|k| match &k.kind {
            KernelKind::RowGroup { stages, .. } => Some(stages),
            _ => None,
        })
        .collect()
}

#[test]
fn layer_norm_backward_becomes_one_row_group_with_its_column_sums() {
    let g = norm_backward(64, 48, false, DType::F32);
    let apart = compile(&g, &opts(false)).unwrap();
    let p = compile(&g, &opts(true)).unwrap();
    assert!(
        apart.kernels.len() >= 4,
        "{}",
        crate::explain(&apart, "cpu", None)
    );
    assert_eq!(p.kernels.len(), 1, "{}", crate::explain(&p, "cpu", None));
    let KernelKind::RowGroup { space, stages } = &p.kernels[0].kind else {
        panic!("{p:#?}")
    };
    assert_eq!(space, &vec![Dim::Static(64), Dim::Static(48)]);
    assert_eq!(stages.len(), apart.kernels.len(), "every kernel is a stage");
    let roles: Vec<StageRole> = stages
        .iter()
        .map(|s| stage_role(s, space).unwrap())
        .collect();
    assert!(roles.contains(&StageRole::RowReduce));
    assert_eq!(
        roles.iter().filter(|r| **r == StageRole::ColReduce).count(),
        2,
        "dγ and dβ: {roles:?}"
    );
    assert!(roles.contains(&StageRole::Wide), "dx: {roles:?}");
    let text = crate::explain(&p, "cpu", None);
    assert!(
        text.contains("row_group over [64, 48] in blocks of rows"),
        "{text}"
    );
    assert!(text.contains("col reduce_sum"), "{text}");
}

#[test]
fn rms_norm_backward_in_f64_becomes_one_row_group() {
    let g = norm_backward(5, 9, true, DType::F64);
    let p = compile(&g, &opts(true)).unwrap();
    assert_eq!(groups(&p).len(), 1, "{}", crate::explain(&p, "cpu", None));
}

#[test]
fn groups_stay_off_unless_asked_for() {
    let g = norm_backward(8, 16, false, DType::F32);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert!(groups(&p).is_empty());
}

#[test]
fn a_transposed_read_of_a_group_result_is_not_a_stage() {
    // y = x − mean(x) is written by the group; z = yᵀ + 1 reads it across rows, so it
    // must wait for every row: it stays a kernel of its own after the group.
    let mut g = Graph::new("t");
    let x = g.input("x", Shape::new(&[6, 6], DType::F32));
    let m = reduce(&mut g, ReduceOp::Mean, vec![1], true, x);
    let y = op(&mut g, Op::Binary(BinaryOp::Sub), vec![x, m]);
    let s = reduce(&mut g, ReduceOp::Sum, vec![1], true, y);
    let z = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![y]);
    let one = {
        let d = rlx_ir::TensorData::from_f32(&[], &[1.0]);
        let sh = d.shape();
        g.add_node(Op::Constant { data: d.bytes }, vec![], sh)
    };
    let w = op(&mut g, Op::Binary(BinaryOp::Add), vec![z, one]);
    g.set_outputs(vec![y, s, w]);
    let p = compile(&g, &opts(true)).unwrap();
    let gs = groups(&p);
    assert_eq!(gs.len(), 1, "{}", crate::explain(&p, "cpu", None));
    // The transposed reader is outside the group and runs after it.
    let gi = p
        .kernels
        .iter()
        .position(|k| matches!(k.kind, KernelKind::RowGroup { .. }))
        .unwrap();
    let reader = p
        .kernels
        .iter()
        .position(|k| {
            k.loads.iter().any(|l| !l.steps.is_empty())
                && !matches!(k.kind, KernelKind::RowGroup { .. })
        })
        .unwrap();
    assert!(reader > gi, "{}", crate::explain(&p, "cpu", None));
}

#[test]
fn a_column_sum_read_by_a_later_stage_ends_the_group_before_it() {
    // cs = Σ_rows x is only known once every row is done: `x·cs` cannot be a stage.
    let mut g = Graph::new("c");
    let x = g.input("x", Shape::new(&[8, 4], DType::F32));
    let rs = reduce(&mut g, ReduceOp::Sum, vec![1], true, x);
    let cs = reduce(&mut g, ReduceOp::Sum, vec![0], true, x);
    let a = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, rs]);
    let b = op(&mut g, Op::Binary(BinaryOp::Mul), vec![a, cs]);
    g.set_outputs(vec![a, b]);
    let p = compile(&g, &opts(true)).unwrap();
    for st in groups(&p) {
        for s in st {
            assert!(
                !s.reads().any(|b| st.iter().any(|o| {
                    matches!(o.kind, KernelKind::Reduce { ref axes, .. } if axes == &[0])
                        && o.writes().any(|w| w == b)
                })),
                "{}",
                crate::explain(&p, "cpu", None)
            );
        }
    }
}

#[test]
fn dynamic_row_counts_are_not_grouped() {
    let mut g = Graph::new("d");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(8)], DType::F32),
    );
    let m = reduce(&mut g, ReduceOp::Max, vec![1], true, x);
    let y = op(&mut g, Op::Binary(BinaryOp::Sub), vec![x, m]);
    let s = reduce(&mut g, ReduceOp::Sum, vec![1], true, y);
    g.set_outputs(vec![y, s]);
    let p = compile(&g, &opts(true)).unwrap();
    assert!(groups(&p).is_empty());
}

#[test]
fn integer_reductions_and_single_column_spaces_are_not_stages() {
    let mut g = Graph::new("i");
    let x = g.input("x", Shape::new(&[4, 5], DType::I32));
    let s = reduce(&mut g, ReduceOp::Sum, vec![1], true, x);
    g.set_outputs(vec![s]);
    let p = compile(&g, &opts(true)).unwrap();
    let KernelKind::Reduce { in_space, .. } = &p.kernels[0].kind else {
        panic!()
    };
    assert_eq!(stage_role(&p.kernels[0], in_space), None);
    let mut g = Graph::new("one");
    let x = g.input("x", Shape::new(&[4, 1], DType::F32));
    let m = reduce(&mut g, ReduceOp::Max, vec![1], true, x);
    let y = op(&mut g, Op::Binary(BinaryOp::Sub), vec![x, m]);
    let s = reduce(&mut g, ReduceOp::Sum, vec![1], true, y);
    g.set_outputs(vec![y, s]);
    assert!(groups(&compile(&g, &opts(true)).unwrap()).is_empty());
}
