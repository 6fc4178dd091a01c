//! Reductions (sum, mean, max, min, prod) and cumsum.

use crate::{check, op, rand, run, vals};
use rlx_compile::autodiff::grad_graph;
use rlx_ir::{DType, Graph, Op, ReduceOp, Shape};

fn reduce(kind: ReduceOp, axes: &[usize], keep_dim: bool) -> Op {
    Op::Reduce {
        op: kind,
        axes: axes.to_vec(),
        keep_dim,
    }
}

#[test]
fn every_reduction_over_several_axis_sets() {
    let kinds = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ];
    let axis_sets: [&[usize]; 5] = [&[0], &[1], &[2], &[0, 2], &[0, 1, 2]];
    for (i, kind) in kinds.into_iter().enumerate() {
        for axes in axis_sets {
            for keep in [false, true] {
                check(
                    &format!("{} {axes:?} keep={keep}", kind.name()),
                    vec![("x", rand(&[2, 3, 2], i as u64 + 1))],
                    |g, x| op(g, reduce(kind, axes, keep), vec![x[0]]),
                );
            }
        }
    }
    check(
        "sum of size-1 axis",
        vec![("x", rand(&[3, 1], 9))],
        |g, x| op(g, reduce(ReduceOp::Sum, &[1], false), vec![x[0]]),
    );
}

fn grad_of(kind: ReduceOp, x: &[f64]) -> Vec<f64> {
    let mut g = Graph::new("r");
    let xi = g.input("x", Shape::new(&[x.len()], DType::F64));
    let y = op(&mut g, reduce(kind, &[0], false), vec![xi]);
    g.set_outputs(vec![y]);
    let dg = grad_graph(&g, &[xi]).unwrap();
    run(&dg, &[("x", vals(&[x.len()], x))])
        .remove(0)
        .to_f64_vec()
}

#[test]
fn max_and_min_split_the_gradient_between_tied_extrema() {
    assert_eq!(
        grad_of(ReduceOp::Max, &[1.0, 3.0, 3.0, 2.0]),
        vec![0.0, 0.5, 0.5, 0.0]
    );
    assert_eq!(
        grad_of(ReduceOp::Min, &[1.0, 3.0, 1.0, 1.0]),
        vec![1.0 / 3.0, 0.0, 1.0 / 3.0, 1.0 / 3.0]
    );
}

#[test]
fn prod_gradient_is_exact_with_zeros() {
    assert_eq!(
        grad_of(ReduceOp::Prod, &[2.0, 3.0, 4.0]),
        vec![12.0, 8.0, 6.0]
    );
    // one zero: only it gets the product of the others
    assert_eq!(
        grad_of(ReduceOp::Prod, &[2.0, 0.0, 4.0]),
        vec![0.0, 8.0, 0.0]
    );
    // two zeros: every partial is 0
    assert_eq!(
        grad_of(ReduceOp::Prod, &[0.0, 3.0, 0.0]),
        vec![0.0, 0.0, 0.0]
    );
}

#[test]
fn cumsum_inclusive_and_exclusive_along_each_axis() {
    for axis in [0, 1, -1] {
        for exclusive in [false, true] {
            check(
                &format!("cumsum {axis} {exclusive}"),
                vec![("x", rand(&[3, 4], 4))],
                |g, x| op(g, Op::Cumsum { axis, exclusive }, vec![x[0]]),
            );
        }
    }
}
