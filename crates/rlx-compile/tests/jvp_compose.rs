//! Compositions of the transforms on small functions, checked against finite
//! differences and loops: jvp∘grad = hvp, grad∘vmap, vmap∘grad, grad∘grad, jvp∘vmap,
//! vmap∘jvp, plus forward mode over dynamic dims.

use rlx_compile::autodiff::{grad_graph, value_and_grad_graph};
use rlx_compile::jvp::{jvp_graph, tangent_name};
use rlx_compile::vmap::vmap;
use rlx_ir::op::{MaskKind, ReduceOp};
use rlx_ir::{Activation, BinaryOp, DType, Dim, Graph, NodeId, Op, Shape, TensorData, interp};

fn f64s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::F64)
}

fn op(g: &mut Graph, o: Op, ins: &[NodeId]) -> NodeId {
    g.add_op(o, ins.to_vec()).unwrap()
}

fn sum_all(g: &mut Graph, x: NodeId) -> NodeId {
    let r = g.shape(x).rank();
    op(
        g,
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: (0..r).collect(),
            keep_dim: false,
        },
        &[x],
    )
}

/// `f(x, w) = sum(tanh(x·w)²) + sum(x·x·sin x)`, x: [n], w: [n, n] (a scalar loss).
fn loss(n: usize) -> (Graph, NodeId, NodeId) {
    let mut g = Graph::new("loss");
    let x = g.input("x", f64s(&[n]));
    let w = g.input("w", f64s(&[n, n]));
    let xr = op(
        &mut g,
        Op::Reshape {
            new_shape: vec![1, n as i64],
        },
        &[x],
    );
    let xw = op(&mut g, Op::MatMul, &[xr, w]);
    let t = op(&mut g, Op::Activation(Activation::Tanh), &[xw]);
    let t2 = op(&mut g, Op::Binary(BinaryOp::Mul), &[t, t]);
    let a = sum_all(&mut g, t2);
    let xx = op(&mut g, Op::Binary(BinaryOp::Mul), &[x, x]);
    let s = op(&mut g, Op::Activation(Activation::Sin), &[x]);
    let xxs = op(&mut g, Op::Binary(BinaryOp::Mul), &[xx, s]);
    let b = sum_all(&mut g, xxs);
    let l = op(&mut g, Op::Binary(BinaryOp::Add), &[a, b]);
    g.set_outputs(vec![l]);
    (g, x, w)
}

fn data(n: usize, seed: u64) -> Vec<f64> {
    (0..n)
        .map(|i| ((i as f64 + 1.0) * 0.37 + seed as f64 * 0.91).sin())
        .collect()
}

fn run(g: &Graph, ins: &[(&str, TensorData)]) -> Vec<Vec<f64>> {
    interp::run(g, ins)
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|d| d.to_f64_vec())
        .collect()
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?}\nvs\n{b:?}");
    }
}

#[test]
fn jvp_of_grad_is_the_hessian_vector_product() {
    let n = 3;
    let (g, x, w) = loss(n);
    let vg = value_and_grad_graph(&g, &[x, w]).unwrap();
    let hvp = jvp_graph(&vg, &[x, w]).unwrap();
    hvp.verify().unwrap();
    let (xv, wv) = (data(n, 1), data(n * n, 2));
    let (vx, vw) = (data(n, 3), data(n * n, 4));
    let feed = |dx: f64| {
        let xs: Vec<f64> = xv.iter().zip(&vx).map(|(a, b)| a + dx * b).collect();
        let ws: Vec<f64> = wv.iter().zip(&vw).map(|(a, b)| a + dx * b).collect();
        vec![
            ("x", TensorData::from_f64(&[n], &xs)),
            ("w", TensorData::from_f64(&[n, n], &ws)),
        ]
    };
    let mut ins = feed(0.0);
    let tx = tangent_name("x");
    let tw = tangent_name("w");
    ins.push((&tx, TensorData::from_f64(&[n], &vx)));
    ins.push((&tw, TensorData::from_f64(&[n, n], &vw)));
    let out = run(&hvp, &ins);
    // [loss, gx, gw, <g, v>, Hv_x, Hv_w]
    assert_eq!(out.len(), 6);
    let grad = run(&vg, &feed(0.0));
    let dot: f64 = grad[1].iter().zip(&vx).map(|(a, b)| a * b).sum::<f64>()
        + grad[2].iter().zip(&vw).map(|(a, b)| a * b).sum::<f64>();
    close(&out[3], &[dot], 1e-9);
    // H·v against central differences of the gradient.
    let eps = 1e-5;
    let (hi, lo) = (run(&vg, &feed(eps)), run(&vg, &feed(-eps)));
    for k in [1, 2] {
        let fd: Vec<f64> = hi[k]
            .iter()
            .zip(&lo[k])
            .map(|(a, b)| (a - b) / (2.0 * eps))
            .collect();
        close(&out[3 + k], &fd, 1e-6);
    }
}

#[test]
fn grad_of_grad_matches_finite_differences_of_the_gradient() {
    // d/dx Σ_i ∂f/∂x_i = (H·1)
    let n = 3;
    let (g, x, w) = loss(n);
    let gg = grad_graph(&g, &[x]).unwrap();
    let mut g2 = gg.clone();
    let sum = sum_all(&mut g2, gg.outputs[0]);
    g2.set_outputs(vec![sum]);
    let h1 = grad_graph(&g2, &[x]).unwrap();
    let _ = w;
    let (xv, wv) = (data(n, 5), data(n * n, 6));
    let feed = |xs: &[f64]| {
        vec![
            ("x", TensorData::from_f64(&[n], xs)),
            ("w", TensorData::from_f64(&[n, n], &wv)),
        ]
    };
    let got = run(&h1, &feed(&xv))[0].clone();
    // Compare with jvp of the gradient along the all-ones direction.
    let hv = jvp_graph(&gg, &[x]).unwrap();
    let tx = tangent_name("x");
    let mut ins = feed(&xv);
    ins.push((&tx, TensorData::from_f64(&[n], &vec![1.0; n])));
    let out = run(&hv, &ins);
    close(&got, &out[1], 1e-9);
}

#[test]
fn vmap_of_grad_equals_a_loop_of_grads() {
    let n = 4;
    let (g, x, _) = loss(n);
    let gg = grad_graph(&g, &[x]).unwrap();
    let xg = gg.input_id("x").unwrap();
    let bg = vmap(&gg, &[xg], 3).unwrap();
    let xs: Vec<f64> = data(3 * n, 7);
    let wv = data(n * n, 8);
    let out = run(
        &bg,
        &[
            ("x", TensorData::from_f64(&[3, n], &xs)),
            ("w", TensorData::from_f64(&[n, n], &wv)),
        ],
    );
    let mut want = Vec::new();
    for b in 0..3 {
        want.extend(
            run(
                &gg,
                &[
                    ("x", TensorData::from_f64(&[n], &xs[b * n..(b + 1) * n])),
                    ("w", TensorData::from_f64(&[n, n], &wv)),
                ],
            )[0]
            .clone(),
        );
    }
    close(&out[0], &want, 1e-12);
}

#[test]
fn grad_of_vmap_differentiates_the_sum_over_the_batch() {
    let n = 3;
    let (g, x, w) = loss(n);
    let bg = vmap(&g, &[x], 2).unwrap();
    let wb = bg.input_id("w").unwrap();
    let xb = bg.input_id("x").unwrap();
    let gb = grad_graph(&bg, &[wb, xb]).unwrap();
    let xs = data(2 * n, 9);
    let wv = data(n * n, 10);
    let out = run(
        &gb,
        &[
            ("x", TensorData::from_f64(&[2, n], &xs)),
            ("w", TensorData::from_f64(&[n, n], &wv)),
        ],
    );
    // d/dw Σ_b f(x_b, w) = Σ_b ∂f/∂w(x_b); d/dx_b = ∂f/∂x(x_b).
    let gg = grad_graph(&g, &[w, x]).unwrap();
    let mut gw = vec![0.0; n * n];
    let mut gx = Vec::new();
    for b in 0..2 {
        let r = run(
            &gg,
            &[
                ("x", TensorData::from_f64(&[n], &xs[b * n..(b + 1) * n])),
                ("w", TensorData::from_f64(&[n, n], &wv)),
            ],
        );
        for (a, v) in gw.iter_mut().zip(&r[0]) {
            *a += v;
        }
        gx.extend(r[1].clone());
    }
    close(&out[0], &gw, 1e-12);
    close(&out[1], &gx, 1e-12);
}

#[test]
fn jvp_of_vmap_and_vmap_of_jvp_agree() {
    let n = 3;
    let (g, x, _) = loss(n);
    let a = jvp_graph(&vmap(&g, &[x], 2).unwrap(), &[NodeId(0)]).unwrap();
    let j = jvp_graph(&g, &[x]).unwrap();
    let b = vmap(
        &j,
        &[j.input_id("x").unwrap(), j.input_id("tangent_x").unwrap()],
        2,
    )
    .unwrap();
    let xs = data(2 * n, 11);
    let ts = data(2 * n, 12);
    let wv = data(n * n, 13);
    let ins = [
        ("x", TensorData::from_f64(&[2, n], &xs)),
        ("w", TensorData::from_f64(&[n, n], &wv)),
        ("tangent_x", TensorData::from_f64(&[2, n], &ts)),
    ];
    let (ra, rb) = (run(&a, &ins), run(&b, &ins));
    close(&ra[1], &rb[1], 1e-12);
    close(&ra[0], &rb[0], 1e-12);
}

#[test]
fn jvp_over_dynamic_dims_keeps_them_and_matches_finite_differences() {
    // Softmax cross-entropy with labels, layer norm and causal attention in the
    // [B, S, H·D] layout with dynamic B and S (the per-head split path).
    let dy = |dims: &[Dim]| Shape::from_dims(dims, DType::F64);
    let (b, s) = (Dim::Dynamic(0), Dim::Dynamic(1));
    let mut g = Graph::new("dyn");
    let q = g.input("q", dy(&[b, s, Dim::Static(4)]));
    let a = op(
        &mut g,
        Op::Attention {
            num_heads: 2,
            head_dim: 2,
            v_head_dim: None,
            mask_kind: MaskKind::Causal,
            score_scale: None,
            attn_logit_softcap: None,
        },
        &[q, q, q],
    );
    let one = g.add_node(
        Op::Constant {
            data: 1f64.to_le_bytes().to_vec(),
        },
        vec![],
        Shape::scalar(DType::F64),
    );
    let ln = op(
        &mut g,
        Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        },
        &[a, one, one],
    );
    let mx = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Max,
            axes: vec![2],
            keep_dim: false,
        },
        &[ln],
    );
    let labels = g.input("y", dy(&[b]));
    let row = op(
        &mut g,
        Op::Narrow {
            axis: 1,
            start: 0,
            len: 1,
        },
        &[ln],
    );
    let row = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![1],
            keep_dim: false,
        },
        &[row],
    );
    let ce = op(&mut g, Op::SoftmaxCrossEntropyWithLogits, &[row, labels]);
    g.set_outputs(vec![mx, ce]);
    let j = jvp_graph(&g, &[q]).unwrap();
    j.verify().unwrap();
    assert_eq!(
        j.shape(j.input_id("tangent_q").unwrap()).dims(),
        &[b, s, Dim::Static(4)]
    );
    for (bn, sn) in [(1, 2), (2, 3)] {
        let qv = data(bn * sn * 4, 14);
        let tv = data(bn * sn * 4, 15);
        let yv: Vec<f64> = (0..bn).map(|i| (i % 4) as f64).collect();
        let feed = |e: f64| {
            let qs: Vec<f64> = qv.iter().zip(&tv).map(|(a, t)| a + e * t).collect();
            vec![
                ("q", TensorData::from_f64(&[bn, sn, 4], &qs)),
                ("y", TensorData::from_f64(&[bn], &yv)),
            ]
        };
        let mut ins = feed(0.0);
        ins.push(("tangent_q", TensorData::from_f64(&[bn, sn, 4], &tv)));
        let out = run(&j, &ins);
        let eps = 1e-6;
        let (hi, lo) = (run(&g, &feed(eps)), run(&g, &feed(-eps)));
        for k in 0..2 {
            let fd: Vec<f64> = hi[k]
                .iter()
                .zip(&lo[k])
                .map(|(a, b)| (a - b) / (2.0 * eps))
                .collect();
            close(&out[2 + k], &fd, 1e-6);
        }
    }
}

#[test]
fn jvp_graph_errors_name_the_node() {
    let (g, _, _) = loss(2);
    let e = jvp_graph(&g, &[NodeId(2)]).unwrap_err().to_string();
    assert!(
        e.contains("Op::Input or Op::Param") && e.contains("reshape"),
        "{e}"
    );
    let e = jvp_graph(&g, &[NodeId(0), NodeId(0)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("tangent_x") && e.contains("listed twice"), "{e}");
}

#[test]
fn outputs_without_a_tangent_get_zeros_of_their_type() {
    let mut g = Graph::new("f");
    let x = g.input("x", f64s(&[2]));
    let w = g.input("w", f64s(&[2]));
    let y = op(&mut g, Op::Binary(BinaryOp::Mul), &[x, x]);
    let z = op(&mut g, Op::Activation(Activation::Exp), &[w]);
    let c = op(&mut g, Op::Compare(rlx_ir::CmpOp::Gt), &[x, w]);
    g.set_outputs(vec![y, z, c]);
    let j = jvp_graph(&g, &[x]).unwrap();
    let out = interp::run(
        &j,
        &[
            ("x", TensorData::from_f64(&[2], &[1.0, 2.0])),
            ("w", TensorData::from_f64(&[2], &[0.0, 3.0])),
            ("tangent_x", TensorData::from_f64(&[2], &[1.0, 1.0])),
        ],
    )
    .unwrap();
    assert_eq!(out[3].to_f64_vec(), vec![2.0, 4.0]);
    assert_eq!(out[4].to_f64_vec(), vec![0.0, 0.0]);
    assert_eq!(out[5].dtype, DType::Bool);
    assert_eq!(out[5].to_bool_vec(), vec![false, false]);
}
