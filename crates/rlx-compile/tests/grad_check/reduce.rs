//! Reductions (sum, mean, max, min, prod) and cumsum.

use crate::{check, constant, op, rand, run, sum_all, vals};
use rlx_compile::autodiff::{append_grad, grad_graph};
use rlx_ir::{BinaryOp, DType, Dim, Graph, NodeId, Op, ReduceOp, Shape};

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

/// `∂/∂x ⟨∂(Σ prod(x, axes))/∂x, v⟩` built in the graph (a Hessian-vector product),
/// as a function of `x`.
fn prod_hvp(g: &mut Graph, x: NodeId, axes: &[usize], v: &[f64]) -> NodeId {
    let p = op(g, reduce(ReduceOp::Prod, axes, false), vec![x]);
    let loss = sum_all(g, p);
    let gx = append_grad(g, loss, &[x], None).unwrap()[0];
    let dims = g.shape(x).static_dims().unwrap();
    let vc = constant(g, vals(&dims, v));
    let gv = op(g, Op::Binary(BinaryOp::Mul), vec![gx, vc]);
    let s = sum_all(g, gv);
    append_grad(g, s, &[x], None).unwrap()[0]
}

/// The Hessian of `Σ prod(x, axes)` by brute force: `H_ij = Π_{k ∉ {i, j}} x_k` for
/// distinct `i, j` of one reduction group, else 0.
fn prod_hessian(x: &[f64], dims: &[usize], axes: &[usize]) -> Vec<Vec<f64>> {
    let n = x.len();
    let coords = |mut i: usize| -> Vec<usize> {
        let mut c = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            c[a] = i % dims[a];
            i /= dims[a];
        }
        c
    };
    let group = |i: usize| -> Vec<usize> {
        let mut c = coords(i);
        for &a in axes {
            c[a] = 0;
        }
        c
    };
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    if i == j || group(i) != group(j) {
                        return 0.0;
                    }
                    (0..n)
                        .filter(|&k| k != i && k != j && group(k) == group(i))
                        .map(|k| x[k])
                        .product()
                })
                .collect()
        })
        .collect()
}

#[test]
fn prod_hessian_is_exact_with_zeros() {
    // (dims, axes, x): one zero, two zeros, a group over two axes with one zero, a
    // group with three zeros, and no zero at all.
    let cases: [(&[usize], &[usize], &[f64]); 5] = [
        (&[3], &[0], &[2.0, 0.0, 4.0]),
        (&[2, 3], &[1], &[0.0, 3.0, 0.0, 1.5, -2.0, 0.5]),
        (&[2, 3], &[0, 1], &[2.0, -1.0, 0.0, 3.0, 0.5, 1.5]),
        (
            &[2, 2, 2],
            &[0, 2],
            &[0.0, 2.0, 0.0, 1.0, 0.0, 3.0, 4.0, -1.0],
        ),
        (&[5], &[0], &[1.5, -2.0, 0.5, 3.0, -1.0]),
    ];
    for (dims, axes, x) in cases {
        let want = prod_hessian(x, dims, axes);
        for k in 0..x.len() {
            let mut e = vec![0.0; x.len()];
            e[k] = 1.0;
            let mut g = Graph::new("prod hvp");
            let xi = g.input("x", Shape::new(dims, DType::F64));
            let hv = prod_hvp(&mut g, xi, axes, &e);
            g.set_outputs(vec![hv]);
            let got = run(&g, &[("x", vals(dims, x))]).remove(0).to_f64_vec();
            let col: Vec<f64> = want.iter().map(|row| row[k]).collect();
            assert_eq!(
                got, col,
                "{dims:?} over {axes:?} at {x:?}: Hessian column {k}"
            );
        }
    }
}

#[test]
fn prod_third_derivative_matches_finite_differences_at_zeros() {
    // The VJP of the in-graph Hessian-vector product is a third derivative; a product
    // is multilinear, so central differences are exact up to rounding even at zeros.
    let v = [0.5, -1.0, 2.0, 1.5];
    for x in [
        [0.0, 2.0, 0.0, -3.0],
        [1.5, 0.0, 2.0, -0.5],
        [0.0, 0.0, 0.0, 2.0],
    ] {
        check(
            &format!("prod third order at {x:?}"),
            vec![("x", vals(&[4], &x))],
            |g, ids| prod_hvp(g, ids[0], &[0], &v),
        );
    }
}

/// The gradient of `Σ prod(x, axes)` (order 1) or its Hessian-vector product with an
/// input `v` of `x`'s type (order 2).
fn prod_derivative(xs: Shape, axes: &[usize], order: usize) -> Graph {
    let mut g = Graph::new("prod derivative");
    let x = g.input("x", xs.clone());
    let p = op(&mut g, reduce(ReduceOp::Prod, axes, false), vec![x]);
    let loss = sum_all(&mut g, p);
    let mut out = append_grad(&mut g, loss, &[x], None).unwrap()[0];
    if order == 2 {
        let v = g.input("v", xs);
        let gv = op(&mut g, Op::Binary(BinaryOp::Mul), vec![out, v]);
        let s = sum_all(&mut g, gv);
        out = append_grad(&mut g, s, &[x], None).unwrap()[0];
    }
    g.set_outputs(vec![out]);
    g
}

#[test]
fn prod_over_dynamic_axes_matches_the_static_graph() {
    // x [?0, 3]: over the static axis alone the Hessian is exact (prefix/suffix
    // products); a group that includes the dynamic axis uses the value-exact case
    // split along it, so its gradient (first order) still matches exactly.
    let xs = [0.0, 2.0, -1.0, 1.5, 0.0, 0.0, 0.5, 3.0, -2.0, 0.0, 4.0, 1.0];
    let v = [
        0.5, -1.0, 2.0, 1.5, 1.0, -0.5, 0.25, 2.0, -1.5, 1.0, 0.5, -2.0,
    ];
    let dynamic = Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(3)], DType::F64);
    for (axes, order) in [(&[1][..], 2), (&[0, 1][..], 1)] {
        let dg = prod_derivative(dynamic.clone(), axes, order);
        for rows in [1, 2, 4] {
            let n = rows * 3;
            let ins = [
                ("x", vals(&[rows, 3], &xs[..n])),
                ("v", vals(&[rows, 3], &v[..n])),
            ];
            let sg = prod_derivative(Shape::new(&[rows, 3], DType::F64), axes, order);
            let want = run(&sg, &ins[..order]).remove(0).to_f64_vec();
            let got = run(&dg, &ins[..order]).remove(0).to_f64_vec();
            assert_eq!(
                got, want,
                "prod over {axes:?} of {rows} rows, order {order}"
            );
        }
    }
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
