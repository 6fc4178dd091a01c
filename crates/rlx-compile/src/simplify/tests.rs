use super::*;
use rlx_ir::{Activation, BinaryOp, DType, Op, Shape, TensorData};

fn scalar(g: &mut Graph, v: f32) -> NodeId {
    let d = TensorData::from_f32(&[], &[v]);
    {
        let s = d.shape();
        g.add_node(Op::Constant { data: d.bytes }, vec![], s)
    }
}

fn run(g: &Graph, x: &[f32]) -> Vec<f32> {
    let n = x.len();
    interp::run(g, &[("x", TensorData::from_f32(&[n], x))]).unwrap()[0].to_f32_vec()
}

#[test]
fn cse_merges_identical_nodes_and_dce_drops_unused_ones() {
    let mut g = Graph::new("g");
    let x = g.input("x", Shape::new(&[3], DType::F32));
    let a = g.add_op(Op::Activation(Activation::Exp), vec![x]).unwrap();
    let b = g.add_op(Op::Activation(Activation::Exp), vec![x]).unwrap();
    let _dead = g.add_op(Op::Activation(Activation::Tanh), vec![x]).unwrap();
    let s = g.add_op(Op::Binary(BinaryOp::Add), vec![a, b]).unwrap();
    g.set_outputs(vec![s]);
    let s2 = simplify(&g);
    assert_eq!(s2.len(), 3, "{s2}");
    assert_eq!(run(&g, &[0.0, 1.0, -1.0]), run(&s2, &[0.0, 1.0, -1.0]));
}

#[test]
fn identities_remove_mul_by_one_double_negation_and_transpose_pairs() {
    let mut g = Graph::new("g");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let one = scalar(&mut g, 1.0);
    let m = g.add_op(Op::Binary(BinaryOp::Mul), vec![x, one]).unwrap();
    let n1 = g.add_op(Op::Activation(Activation::Neg), vec![m]).unwrap();
    let n2 = g.add_op(Op::Activation(Activation::Neg), vec![n1]).unwrap();
    let t1 = g
        .add_op(Op::Transpose { perm: vec![1, 0] }, vec![n2])
        .unwrap();
    let t2 = g
        .add_op(Op::Transpose { perm: vec![1, 0] }, vec![t1])
        .unwrap();
    g.set_outputs(vec![t2]);
    let s = simplify(&g);
    assert_eq!(s.len(), 1, "only the input is left: {s}");
    assert_eq!(s.outputs, vec![NodeId(0)]);
}

#[test]
fn x_plus_zero_is_kept_for_floats_because_of_negative_zero() {
    let mut g = Graph::new("g");
    let x = g.input("x", Shape::new(&[2], DType::F32));
    let z = scalar(&mut g, 0.0);
    let a = g.add_op(Op::Binary(BinaryOp::Add), vec![x, z]).unwrap();
    g.set_outputs(vec![a]);
    let s = simplify(&g);
    assert_eq!(s.len(), 3);
    let out = run(&s, &[-0.0, 1.0]);
    assert!(out[0] == 0.0 && out[0].is_sign_positive());
}

#[test]
fn small_constant_subexpressions_fold_to_one_constant() {
    let mut g = Graph::new("g");
    let x = g.input("x", Shape::new(&[3], DType::F32));
    let c = g.add_node(
        Op::Constant {
            data: TensorData::from_f32(&[3], &[1.0, 2.0, 3.0]).bytes,
        },
        vec![],
        Shape::new(&[3], DType::F32),
    );
    let e = g.add_op(Op::Activation(Activation::Exp), vec![c]).unwrap();
    let y = g.add_op(Op::Binary(BinaryOp::Mul), vec![x, e]).unwrap();
    g.set_outputs(vec![y]);
    let s = simplify(&g);
    assert_eq!(s.len(), 3, "{s}");
    assert!(
        matches!(s.node(NodeId(1)).op, Op::Constant { .. })
            || matches!(s.node(NodeId(0)).op, Op::Constant { .. })
    );
    let want: Vec<f32> = [1.0f64, 2.0, 3.0].iter().map(|v| v.exp() as f32).collect();
    assert_eq!(run(&s, &[1.0, 1.0, 1.0]), want);
}

#[test]
fn reshape_chains_collapse_to_one_reshape() {
    let mut g = Graph::new("g");
    let x = g.input("x", Shape::new(&[2, 6], DType::F32));
    let r1 = g
        .add_op(
            Op::Reshape {
                new_shape: vec![3, 4],
            },
            vec![x],
        )
        .unwrap();
    let r2 = g
        .add_op(
            Op::Reshape {
                new_shape: vec![4, 3],
            },
            vec![r1],
        )
        .unwrap();
    g.set_outputs(vec![r2]);
    let s = simplify(&g);
    assert_eq!(s.len(), 2);
    assert_eq!(s.node(s.outputs[0]).inputs, vec![NodeId(0)]);
}

/// `pad(x[:, s..s+w])` back to `[rows, 6]` along axis 1, for the given slab starts.
fn padded_slabs(starts: &[(usize, usize)]) -> Graph {
    let mut g = Graph::new("slabs");
    let x = g.input("x", Shape::new(&[2, 6], DType::F32));
    let e = g.add_op(Op::Activation(Activation::Exp), vec![x]).unwrap();
    let mut sum = None;
    for &(start, w) in starts {
        let part = g
            .add_op(
                Op::Narrow {
                    axis: 1,
                    start,
                    len: w,
                },
                vec![e],
            )
            .unwrap();
        let t = g
            .add_op(Op::Activation(Activation::Tanh), vec![part])
            .unwrap();
        let p = g
            .add_op(
                Op::Pad {
                    axis: 1,
                    before: start,
                    after: 6 - start - w,
                    value: 0.0,
                },
                vec![t],
            )
            .unwrap();
        sum = Some(match sum {
            None => p,
            Some(s) => g.add_op(Op::Binary(BinaryOp::Add), vec![s, p]).unwrap(),
        });
    }
    g.set_outputs(vec![sum.unwrap()]);
    g
}

fn run_2x6(g: &Graph) -> Vec<f32> {
    interp::run(g, &[("x", TensorData::from_f32(&[2, 6], &SLAB_X))]).unwrap()[0].to_f32_vec()
}

fn count(g: &Graph, name: &str) -> usize {
    g.nodes().iter().filter(|n| n.op.name() == name).count()
}

const SLAB_X: [f32; 12] = [
    0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, 0.8, -0.9, 1.0, 1.1, -1.2,
];

#[test]
fn a_sum_of_adjacent_zero_pads_covering_the_axis_is_one_concat() {
    // q, k, v of a split projection, each padded back (the backward of `narrow`).
    let g = padded_slabs(&[(0, 2), (2, 2), (4, 2)]);
    let s = simplify(&g);
    assert_eq!((count(&s, "pad"), count(&s, "add")), (0, 0), "{s}");
    assert_eq!(count(&s, "concat"), 1, "{s}");
    assert_eq!(run_2x6(&g), run_2x6(&s));
    // In reverse order (as the backward pass accumulates them).
    let g = padded_slabs(&[(4, 2), (2, 2), (0, 2)]);
    let s = simplify(&g);
    assert_eq!(
        (count(&s, "pad"), count(&s, "add"), count(&s, "concat")),
        (0, 0, 1),
        "{s}"
    );
    assert_eq!(run_2x6(&g), run_2x6(&s));
    // Adding a slab that is not adjacent to the run so far leaves that add as it is
    // (runs with holes are not tracked); the value is unchanged.
    let g = padded_slabs(&[(4, 2), (0, 2), (2, 2)]);
    let s = simplify(&g);
    assert_eq!(run_2x6(&g), run_2x6(&s));
}

#[test]
fn adjacent_zero_pads_not_covering_the_axis_become_one_pad_of_a_concat() {
    let g = padded_slabs(&[(1, 2), (3, 2)]);
    let s = simplify(&g);
    assert_eq!(
        (count(&s, "pad"), count(&s, "add"), count(&s, "concat")),
        (1, 0, 1),
        "{s}"
    );
    assert_eq!(run_2x6(&g), run_2x6(&s));
}

#[test]
fn overlapping_or_separated_pads_are_still_added() {
    for starts in [[(0, 3), (2, 3)], [(0, 2), (3, 2)]] {
        let g = padded_slabs(&starts);
        let s = simplify(&g);
        assert_eq!(
            (count(&s, "pad"), count(&s, "add"), count(&s, "concat")),
            (2, 1, 0),
            "{s}"
        );
        assert_eq!(run_2x6(&g), run_2x6(&s));
    }
}
