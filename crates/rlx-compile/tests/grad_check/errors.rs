//! Diagnostics, dynamic dims, second order, and the graph-level entry points.

use crate::{check, check_wrt, op, rand, rand_in, run, scalar, sum_all, vals};
use rlx_compile::autodiff::{append_grad, append_vjp, grad_graph, value_and_grad_graph, vjp_graph};
use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Dim, Graph, MaskKind, NodeId, Op, ReduceOp, Shape,
    TensorData,
};

fn f64s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::F64)
}

/// The error of differentiating `loss` built from input `x` by `build`.
fn grad_error(build: impl Fn(&mut Graph, NodeId) -> NodeId) -> String {
    let mut g = Graph::new("e");
    let x = g.input("x", f64s(&[3]));
    let y = build(&mut g, x);
    g.set_outputs(vec![y]);
    grad_graph(&g, &[x]).unwrap_err().to_string()
}

#[test]
fn a_gradient_blocked_by_argmax_names_argmax_and_the_input() {
    let e = grad_error(|g, x| {
        op(
            g,
            Op::ArgMax {
                axis: 0,
                keep_dim: false,
            },
            vec![x],
        )
    });
    assert_eq!(
        e,
        "grad: argmax is not differentiable (its output is an index); no gradient reaches `x`"
    );
}

#[test]
fn every_blocking_op_is_named_with_its_reason() {
    type Build = Box<dyn Fn(&mut Graph, NodeId) -> NodeId>;
    let cases: Vec<(Build, &str)> = vec![
        (
            Box::new(|g, x| {
                let w = crate::constant(g, vals(&[3, 2], &[1.0; 6]));
                let b = crate::constant(g, vals(&[2], &[0.0; 2]));
                let act = Some(Activation::Sign);
                op(g, Op::FusedMatMulBiasAct { activation: act }, vec![x, w, b])
            }),
            "linear with activation sign is not differentiable",
        ),
        (
            Box::new(|g, x| op(g, Op::StopGradient, vec![x])),
            "stop_gradient blocks gradients by design",
        ),
        (
            Box::new(|g, x| op(g, Op::Activation(Activation::Floor), vec![x])),
            "floor is not differentiable (it is piecewise constant",
        ),
        (
            Box::new(|g, x| {
                let i = op(g, Op::Cast { to: DType::I32 }, vec![x]);
                op(g, Op::Cast { to: DType::F64 }, vec![i])
            }),
            "cast to i32 is not differentiable (its output is an integer)",
        ),
        (
            Box::new(|g, x| {
                let z = scalar(g, 0.0);
                let m = op(g, Op::Compare(CmpOp::Gt), vec![x, z]);
                let (a, b) = (scalar(g, 1.0), scalar(g, 2.0));
                op(g, Op::Where, vec![m, a, b])
            }),
            "gt is not differentiable (its output is a bool)",
        ),
        (
            Box::new(|g, x| {
                let t = crate::constant(g, vals(&[4], &[1.0, 2.0, 3.0, 4.0]));
                let i = op(g, Op::Activation(Activation::Abs), vec![x]);
                let r = op(g, Op::Activation(Activation::Round), vec![i]);
                op(g, Op::Gather { axis: 0 }, vec![t, r])
            }),
            "the indices of gather are not differentiable (they are positions)",
        ),
    ];
    for (build, want) in cases {
        let e = grad_error(build);
        assert!(
            e.contains(want) && e.ends_with("no gradient reaches `x`"),
            "{e}"
        );
    }
}

#[test]
fn an_unused_input_and_an_integer_input_are_reported() {
    let mut g = Graph::new("e");
    let x = g.input("x", f64s(&[3]));
    let unused = g.input("unused", f64s(&[3]));
    let idx = g.input("idx", Shape::new(&[3], DType::I64));
    let y = op(&mut g, Op::Activation(Activation::Exp), vec![x]);
    let ii = op(&mut g, Op::Cast { to: DType::F64 }, vec![idx]);
    let y = op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, ii]);
    g.set_outputs(vec![y]);
    let e = grad_graph(&g, &[unused]).unwrap_err().to_string();
    assert!(
        e.contains("no gradient reaches `unused`: the output does not depend on it"),
        "{e}"
    );
    let e = grad_graph(&g, &[idx]).unwrap_err().to_string();
    assert!(
        e.contains("cannot differentiate with respect to `idx`: it is [3] i64"),
        "{e}"
    );
    // append_vjp itself just reports None
    let mut g2 = g.clone();
    let ct = g2.input("ct", f64s(&[3]));
    let got = append_vjp(&mut g2, &[y], &[ct], &[x, unused]).unwrap();
    assert!(got[0].is_some() && got[1].is_none());
}

#[test]
fn mismatched_cotangents_are_rejected() {
    let mut g = Graph::new("e");
    let x = g.input("x", f64s(&[3]));
    let y = op(&mut g, Op::Activation(Activation::Exp), vec![x]);
    let ct = g.input("ct", f64s(&[4]));
    let e = append_vjp(&mut g, &[y], &[ct], &[x])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cotangent") && e.contains("[4] f64") && e.contains("[3] f64"),
        "{e}"
    );
    let e = append_vjp(&mut g, &[y], &[], &[x]).unwrap_err().to_string();
    assert!(e.contains("1 outputs but 0 cotangents"), "{e}");
}

#[test]
fn value_and_grad_and_vjp_graphs_have_the_documented_outputs() {
    let mut g = Graph::new("f");
    let x = g.input("x", f64s(&[2]));
    let w = g.input("w", f64s(&[2]));
    let xw = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, w]);
    let loss = sum_all(&mut g, xw);
    g.set_outputs(vec![loss]);
    let vg = value_and_grad_graph(&g, &[x, w]).unwrap();
    let ins = [
        ("x", vals(&[2], &[1.0, 2.0])),
        ("w", vals(&[2], &[3.0, 4.0])),
    ];
    let out = run(&vg, &ins);
    assert_eq!(out[0].to_f64_vec(), vec![11.0]);
    assert_eq!(out[1].to_f64_vec(), vec![3.0, 4.0]);
    assert_eq!(out[2].to_f64_vec(), vec![1.0, 2.0]);
    // vjp: d_output scales the gradient; an unreachable wrt gets zeros
    let mut g2 = g.clone();
    let other = g2.input("other", f64s(&[2]));
    let vj = vjp_graph(&g2, &[x, other]).unwrap();
    assert!(vj.input_id("d_output").is_some());
    let mut ins = ins.to_vec();
    ins.push(("other", vals(&[2], &[0.0, 0.0])));
    ins.push(("d_output", vals(&[], &[2.0])));
    let out = run(&vj, &ins);
    assert_eq!(out[0].to_f64_vec(), vec![6.0, 8.0]);
    assert_eq!(out[1].to_f64_vec(), vec![0.0, 0.0]);
}

#[test]
fn gradients_of_a_dynamic_batch_run_at_every_batch_size() {
    // x [?0, 3]: mean and max over the dynamic axis, a narrow of it, a layer norm,
    // a matmul and a non-scalar output (the seed is a broadcast one).
    let build = |g: &mut Graph, xs: Shape| -> (NodeId, NodeId, NodeId) {
        let x = g.input("x", xs);
        let w = g.input("w", f64s(&[3, 3]));
        let h = op(g, Op::MatMul, vec![x, w]);
        let one = crate::constant(g, vals(&[3], &[1.0, 1.1, 0.9]));
        let zero = crate::constant(g, vals(&[3], &[0.0, 0.1, -0.1]));
        let n = op(
            g,
            Op::LayerNorm {
                axis: -1,
                eps: 1e-5,
            },
            vec![h, one, zero],
        );
        let t = op(g, Op::Activation(Activation::Tanh), vec![n]);
        let m = op(
            g,
            Op::Reduce {
                op: ReduceOp::Mean,
                axes: vec![0],
                keep_dim: true,
            },
            vec![t],
        );
        let mx = op(
            g,
            Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![0],
                keep_dim: false,
            },
            vec![x],
        );
        let first = op(
            g,
            Op::Narrow {
                axis: 0,
                start: 0,
                len: 1,
            },
            vec![x],
        );
        let a = op(g, Op::Binary(BinaryOp::Mul), vec![t, m]);
        let b = op(g, Op::Binary(BinaryOp::Add), vec![a, mx]);
        let c = op(g, Op::Binary(BinaryOp::Sub), vec![b, first]);
        g.set_outputs(vec![c]);
        (x, w, c)
    };
    let mut dg = Graph::new("dyn");
    let (x, w, _) = build(
        &mut dg,
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(3)], DType::F64),
    );
    let grad = grad_graph(&dg, &[x, w]).unwrap();
    grad.verify().unwrap();
    assert!(
        grad.nodes()
            .iter()
            .any(|n| matches!(n.op, Op::BroadcastLike))
    );
    for batch in [2, 5] {
        let xd = rand(&[batch, 3], batch as u64);
        let wd = rand(&[3, 3], 9);
        let ins = [("x", xd.clone()), ("w", wd.clone())];
        let got = run(&grad, &ins);
        let mut sg = Graph::new("static");
        let (sx, sw, _) = build(&mut sg, f64s(&[batch, 3]));
        let want = run(&grad_graph(&sg, &[sx, sw]).unwrap(), &ins);
        assert_eq!(got[0].dims, vec![batch, 3]);
        for (a, b) in got.iter().zip(&want) {
            for (p, q) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
                assert!((p - q).abs() < 1e-12, "batch {batch}: {p} vs {q}");
            }
        }
    }
}

#[test]
fn reductions_over_two_dynamic_axes_keep_their_gradients() {
    // x [?0, ?1, 3]: mean over the last axis and max over ?1 without keep_dim (the
    // cotangent regains its size-1 axes without a reshape), then a softmax along ?1.
    let build = |g: &mut Graph, xs: Shape| -> NodeId {
        let x = g.input("x", xs);
        let m = op(
            g,
            Op::Reduce {
                op: ReduceOp::Mean,
                axes: vec![2],
                keep_dim: false,
            },
            vec![x],
        );
        let t = op(g, Op::Activation(Activation::Tanh), vec![m]);
        let s = op(g, Op::Softmax { axis: 1 }, vec![t]);
        let p = op(g, Op::Binary(BinaryOp::Mul), vec![s, t]);
        let mx = op(
            g,
            Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![1],
                keep_dim: false,
            },
            vec![p],
        );
        g.set_outputs(vec![mx]);
        x
    };
    let mut dg = Graph::new("dyn2");
    let x = build(
        &mut dg,
        Shape::from_dims(
            &[Dim::Dynamic(0), Dim::Dynamic(1), Dim::Static(3)],
            DType::F64,
        ),
    );
    let grad = grad_graph(&dg, &[x]).unwrap();
    for (b, s) in [(2, 3), (3, 1)] {
        let ins = [("x", rand(&[b, s, 3], 5))];
        let got = run(&grad, &ins).remove(0).to_f64_vec();
        let mut sg = Graph::new("static2");
        let sx = build(&mut sg, f64s(&[b, s, 3]));
        let want = run(&grad_graph(&sg, &[sx]).unwrap(), &ins)
            .remove(0)
            .to_f64_vec();
        for (p, q) in got.iter().zip(&want) {
            assert!((p - q).abs() < 1e-12, "[{b}, {s}, 3]: {p} vs {q}");
        }
    }
}

#[test]
fn attention_gradients_with_dynamic_batch_and_sequence() {
    let att = |mask_kind| Op::Attention {
        num_heads: 2,
        head_dim: 2,
        v_head_dim: None,
        mask_kind,
        score_scale: None,
        attn_logit_softcap: None,
    };
    for mask in [MaskKind::Causal, MaskKind::SlidingWindow(1)] {
        let s = Shape::from_dims(
            &[
                Dim::Dynamic(0),
                Dim::Dynamic(1),
                Dim::Static(2),
                Dim::Static(2),
            ],
            DType::F64,
        );
        let mut g = Graph::new("dyn_att");
        let q = g.input("q", s.clone());
        let k = g.input("k", s.clone());
        let v = g.input("v", s);
        let y = op(&mut g, att(mask), vec![q, k, v]);
        g.set_outputs(vec![y]);
        let dg = grad_graph(&g, &[q, k, v]).unwrap();
        for (b, sl) in [(1, 3), (2, 4)] {
            let d = [b, sl, 2, 2];
            let ins = [("q", rand(&d, 1)), ("k", rand(&d, 2)), ("v", rand(&d, 3))];
            let got = run(&dg, &ins);
            let mut sg = Graph::new("static_att");
            let sq = sg.input("q", f64s(&d));
            let sk = sg.input("k", f64s(&d));
            let sv = sg.input("v", f64s(&d));
            let sy = op(&mut sg, att(mask), vec![sq, sk, sv]);
            sg.set_outputs(vec![sy]);
            let want = run(&grad_graph(&sg, &[sq, sk, sv]).unwrap(), &ins);
            for (a, w) in got.iter().zip(&want) {
                for (p, q) in a.to_f64_vec().iter().zip(w.to_f64_vec()) {
                    assert!((p - q).abs() < 1e-12, "{mask:?} {d:?}: {p} vs {q}");
                }
            }
        }
    }
}

/// Differentiate `f` once in the graph and check the gradient's own VJP (a
/// Hessian-vector product) against finite differences of the gradient.
fn second_order(
    name: &str,
    inputs: Vec<(&str, TensorData)>,
    f: impl Fn(&mut Graph, &[NodeId]) -> NodeId,
) {
    check(name, inputs, |g, x| {
        let loss = f(g, x);
        append_grad(g, loss, &x[..1], None).unwrap()[0]
    });
}

#[test]
fn second_order_gradients_through_elementwise_norms_and_softmax() {
    second_order("x^3", vec![("x", rand(&[4], 1))], |g, x| {
        let three = scalar(g, 3.0);
        let c = op(g, Op::Binary(BinaryOp::Pow), vec![x[0], three]);
        sum_all(g, c)
    });
    second_order(
        "tanh(x·w) ⊙ softmax",
        vec![("x", rand(&[2, 3], 2)), ("w", rand(&[3, 3], 3))],
        |g, x| {
            let h = op(g, Op::MatMul, vec![x[0], x[1]]);
            let t = op(g, Op::Activation(Activation::Tanh), vec![h]);
            let s = op(g, Op::Softmax { axis: -1 }, vec![h]);
            let p = op(g, Op::Binary(BinaryOp::Mul), vec![t, s]);
            sum_all(g, p)
        },
    );
    second_order(
        "layer_norm + gelu + max/prod",
        vec![
            ("x", rand_in(&[2, 4], 4, 0.2, 1.5)),
            ("gamma", rand(&[4], 5)),
            ("beta", rand(&[4], 6)),
        ],
        |g, x| {
            let n = op(
                g,
                Op::LayerNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![x[0], x[1], x[2]],
            );
            let a = op(g, Op::Activation(Activation::Gelu), vec![n]);
            let m = op(
                g,
                Op::Reduce {
                    op: ReduceOp::Max,
                    axes: vec![1],
                    keep_dim: false,
                },
                vec![a],
            );
            let p = op(
                g,
                Op::Reduce {
                    op: ReduceOp::Prod,
                    axes: vec![1],
                    keep_dim: false,
                },
                vec![x[0]],
            );
            let s = op(g, Op::Binary(BinaryOp::Add), vec![m, p]);
            sum_all(g, s)
        },
    );
}

#[test]
fn second_order_gradients_through_conv_pool_and_attention() {
    second_order(
        "conv + mean pool",
        vec![("x", rand(&[1, 1, 4, 4], 7)), ("w", rand(&[2, 1, 2, 2], 8))],
        |g, x| {
            let c = op(
                g,
                Op::Conv {
                    kernel_size: vec![2, 2],
                    stride: vec![1, 1],
                    padding: vec![0, 0],
                    dilation: vec![1, 1],
                    groups: 1,
                },
                vec![x[0], x[1]],
            );
            let t = op(g, Op::Activation(Activation::Tanh), vec![c]);
            let p = op(
                g,
                Op::Pool {
                    kind: ReduceOp::Mean,
                    kernel_size: vec![2, 2],
                    stride: vec![1, 1],
                    padding: vec![0, 0],
                },
                vec![t],
            );
            let sq = op(g, Op::Binary(BinaryOp::Mul), vec![p, p]);
            sum_all(g, sq)
        },
    );
    second_order(
        "causal attention",
        vec![
            ("q", rand(&[1, 3, 2, 2], 9)),
            ("k", rand(&[1, 3, 2, 2], 10)),
            ("v", rand(&[1, 3, 2, 2], 11)),
        ],
        |g, x| {
            let y = op(
                g,
                Op::Attention {
                    num_heads: 2,
                    head_dim: 2,
                    v_head_dim: None,
                    mask_kind: MaskKind::Causal,
                    score_scale: None,
                    attn_logit_softcap: None,
                },
                vec![x[0], x[1], x[2]],
            );
            let sq = op(g, Op::Binary(BinaryOp::Mul), vec![y, y]);
            sum_all(g, sq)
        },
    );
}

#[test]
fn gradient_with_respect_to_an_intermediate_node() {
    // wrt h = exp(x) in loss = sum(h·h): 2h, and x still gets 2h·h.
    let mut g = Graph::new("mid");
    let x = g.input("x", f64s(&[2]));
    let h = op(&mut g, Op::Activation(Activation::Exp), vec![x]);
    let hh = op(&mut g, Op::Binary(BinaryOp::Mul), vec![h, h]);
    let l = sum_all(&mut g, hh);
    g.set_outputs(vec![l]);
    let dg = grad_graph(&g, &[h, x]).unwrap();
    let out = run(&dg, &[("x", vals(&[2], &[0.0, 1.0]))]);
    let e = 1f64.exp();
    assert_eq!(out[0].to_f64_vec(), vec![2.0, 2.0 * e]);
    assert!((out[1].to_f64_vec()[1] - 2.0 * e * e).abs() < 1e-12);
    check_wrt("noop", vec![("x", rand(&[1], 1))], &["x"], |_, x| x[0]);
}

#[test]
fn a_backward_pass_that_cannot_be_built_names_the_node_and_the_fix() {
    // A head split [?0, ?1, 4] → [?0, ?1, 2, 2] recorded with its type (a front end
    // that tracks the symbols can append it; `add_op`'s reshape infers one `-1`): its
    // gradient needs the inverse reshape, which follows two dynamic axes.
    let dims = |tail: &[usize]| {
        let mut d = vec![Dim::Dynamic(0), Dim::Dynamic(1)];
        d.extend(tail.iter().map(|&n| Dim::Static(n)));
        Shape::from_dims(&d, DType::F64)
    };
    let mut g = Graph::new("split");
    let x = g.input("x", dims(&[4]));
    let split = Op::Reshape {
        new_shape: vec![-1, -1, 2, 2],
    };
    let y = g.add_node(split, vec![x], dims(&[2, 2]));
    let t = op(&mut g, Op::Activation(Activation::Tanh), vec![y]);
    g.set_outputs(vec![t]);
    let e = grad_graph(&g, &[x]).unwrap_err().to_string();
    assert!(
        e.starts_with("grad: differentiating reshape node %1: the backward pass needs to reshape [?0, ?1, 2, 2] f64"),
        "{e}"
    );
    assert!(e.contains("only one dynamic axis"), "{e}");
}
