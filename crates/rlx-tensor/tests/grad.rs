//! `Tensor::grad` and the `Func` gradient transforms, checked through `to_vec`/`run`
//! against hand-derived values and central finite differences.
#![cfg(all(feature = "autodiff", feature = "eval"))]

use rlx_tensor::{DType, Func, MaskKind, Tensor, shape};

fn close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: {g} vs {w} (got {got:?}, want {want:?})"
        );
    }
}

/// Central finite differences of the scalar `f(x)` in f64 (through f64 tensors).
fn fd_grad(x: &[f64], dims: &[usize], f: impl Fn(&Tensor) -> Tensor) -> Vec<f64> {
    (0..x.len())
        .map(|j| {
            let h = 1e-6;
            let at = |d: f64| {
                let mut v = x.to_vec();
                v[j] += d;
                f(&Tensor::from_f64(&v, dims)).to_vec_f64()[0]
            };
            (at(h) - at(-h)) / (2.0 * h)
        })
        .collect()
}

#[test]
fn seed_doc_example_product_rule() {
    let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    let b = Tensor::from_vec(vec![4.0, 5.0, 6.0], [3]);
    let loss = (&a * &b).sum([0], false);
    let g = loss.grad(&[&a, &b]);
    assert_eq!(g[0].to_vec(), b.to_vec());
    assert_eq!(g[1].to_vec(), a.to_vec());
}

#[test]
fn a_non_scalar_loss_differentiates_its_sum() {
    let a = Tensor::from_vec(vec![1.0, -2.0, 3.0, 0.5], [2, 2]);
    let g = (&a * &a).grad(&[&a]);
    assert_eq!(g[0].to_vec(), vec![2.0, -4.0, 6.0, 1.0]);
    assert_eq!(g[0].dims(), vec![2, 2]);
}

#[test]
fn gradients_live_on_a_new_graph_and_wrt_may_come_from_other_graphs() {
    let a = Tensor::from_vec(vec![1.0, 2.0], [2]);
    let b = Tensor::from_vec(vec![3.0, 4.0], [2]); // another graph until combined
    let loss = (&a.exp() * &b).sum_all();
    let g = loss.grad(&[&b, &a]);
    assert!(!g[0].shares_graph(&loss) && !g[0].shares_graph(&a));
    assert!(g[0].shares_graph(&g[1]));
    close(&g[0].to_vec(), &[1f32.exp(), 2f32.exp()], 1e-6);
    close(&g[1].to_vec(), &[3.0 * 1f32.exp(), 4.0 * 2f32.exp()], 1e-6);
    // the loss graph is untouched: it still evaluates
    close(&loss.to_vec(), &[3.0 * 1f32.exp() + 4.0 * 2f32.exp()], 1e-6);
}

#[test]
fn realized_intermediates_are_reused_and_still_differentiated_through() {
    let a = Tensor::from_vec(vec![0.5, -1.0], [2]);
    let e = a.exp();
    let _ = e.to_vec(); // realize
    assert!(e.is_realized());
    let loss = (&e * &e).sum_all();
    let g = loss.grad(&[&a]);
    close(
        &g[0].to_vec(),
        &[2.0 * 1f32.exp(), 2.0 * (-2f32).exp()],
        1e-6,
    );
}

#[test]
fn an_mlp_loss_matches_finite_differences_in_f64() {
    let xs = [0.3, -0.7, 1.1, 0.2, -0.4, 0.9];
    let w = Tensor::from_f64([0.5, -0.3, 0.8, 0.1, -0.6, 0.4], [3, 2]);
    let gamma = Tensor::from_f64([1.2, 0.8], [2]);
    let beta = Tensor::from_f64([0.1, -0.2], [2]);
    let targets = Tensor::from_f64([1.0, 0.0, 0.0, 1.0], [2, 2]);
    let f = |x: &Tensor| {
        let h = x.matmul(&w).tanh().layer_norm(&gamma, &beta, 1e-5);
        h.cross_entropy(&targets).mean_all()
    };
    let x = Tensor::from_f64(xs, [2, 3]);
    let g = f(&x).grad(&[&x]);
    let fd = fd_grad(&xs, &[2, 3], f);
    let got = g[0].to_vec_f64();
    for (a, b) in got.iter().zip(&fd) {
        assert!((a - b).abs() < 1e-7, "{got:?} vs {fd:?}");
    }
}

#[test]
fn attention_with_a_causal_mask_matches_finite_differences() {
    let qv: Vec<f64> = (0..12).map(|i| ((i * 7 % 11) as f64 - 5.0) / 6.0).collect();
    let k = Tensor::from_f64(
        (0..12)
            .map(|i| ((i * 5 % 7) as f64 - 3.0) / 4.0)
            .collect::<Vec<_>>(),
        [1, 3, 2, 2],
    );
    let v = Tensor::from_f64(
        (0..12).map(|i| i as f64 / 10.0).collect::<Vec<_>>(),
        [1, 3, 2, 2],
    );
    let f = |q: &Tensor| {
        let y = q.attention(&k, &v, 2, 2, MaskKind::Causal);
        (&y * &y).sum_all()
    };
    let q = Tensor::from_f64(&qv, [1, 3, 2, 2]);
    let got = f(&q).grad(&[&q])[0].to_vec_f64();
    let fd = fd_grad(&qv, &[1, 3, 2, 2], f);
    for (a, b) in got.iter().zip(&fd) {
        assert!((a - b).abs() < 1e-7, "{got:?} vs {fd:?}");
    }
}

#[test]
fn try_grad_names_the_blocking_op_and_grad_panics_with_it() {
    let a = Tensor::from_vec(vec![1.0, 3.0, 2.0], [3]);
    let e = a.argmax(0, false).try_grad(&[&a]).unwrap_err();
    assert_eq!(
        e.message(),
        "Tensor::grad: argmax is not differentiable (its output is an index); no gradient reaches wrt[0] (a [3] f32 constant)"
    );
    let unrelated = Tensor::from_vec(vec![1.0], [1]);
    let e = a.sum_all().try_grad(&[&unrelated]).unwrap_err();
    assert!(
        e.message().contains("the output does not depend on it"),
        "{e}"
    );
}

#[test]
#[should_panic(expected = "stop_gradient blocks gradients by design; no gradient reaches")]
fn grad_panics_when_only_a_stopped_path_reaches_wrt() {
    let a = Tensor::from_vec(vec![1.0, 3.0], [2]);
    let _ = a.stop_gradient().sum_all().grad(&[&a]);
}

fn affine() -> Func {
    // loss = Σ (x·w + b)², x [?, 2], w [2, 1], b [1]
    Func::new("affine", |s| {
        let x = s.input("x", shape![?, 2]);
        let w = s.param("w", shape![2, 1]);
        let b = s.param("b", shape![1]);
        let y = &x.matmul(&w) + &b;
        (&y * &y).sum_all()
    })
    .with_param("w", vec![1.0, 2.0])
    .with_param("b", vec![0.5])
}

#[test]
fn func_grad_value_and_grad_and_the_all_variants() {
    let f = affine();
    let x = [1.0, 1.0, 2.0, -1.0];
    // y = [3.5, 0.5]; dL/dy = 2y = [7, 1]
    let g = f.grad(&["w", "x"]);
    assert_eq!(g.output_count(), 2);
    assert_eq!(g.param_binding("w"), Some(&[1.0, 2.0][..]));
    let out = g.run(&[("x", &x)]);
    assert_eq!(out[0], vec![7.0 * 1.0 + 1.0 * 2.0, 7.0 * 1.0 - 1.0]);
    assert_eq!(out[1], vec![7.0, 14.0, 1.0, 2.0]);
    let vg = f.value_and_grad(&["b"]);
    let out = vg.run(&[("x", &x)]);
    assert_eq!(out[0], vec![3.5 * 3.5 + 0.25]);
    assert_eq!(out[1], vec![8.0]);
    // the *_all variants use param_names order: w, b
    let all = f.value_and_grad_all().run(&[("x", &x)]);
    assert_eq!(all.len(), 3);
    assert_eq!(all[1], vec![9.0, 6.0]);
    assert_eq!(all[2], vec![8.0]);
    let ga = f.grad_all().run(&[("x", &x)]);
    assert_eq!(ga, vec![vec![9.0, 6.0], vec![8.0]]);
}

#[test]
fn func_gradients_run_on_any_batch_size() {
    let g = affine().grad(&["w"]);
    let one = g.run(&[("x", &[1.0, 1.0])]);
    assert_eq!(one[0], vec![7.0, 7.0]);
    let three = g.run(&[("x", &[1.0, 1.0, 2.0, -1.0, 0.0, 0.0])]);
    // y = [3.5, 0.5, 0.5]: Σ 2y·x
    assert_eq!(three[0], vec![7.0 + 2.0, 7.0 - 1.0]);
}

#[test]
fn second_order_grad_of_grad() {
    let f = Func::new("cube", |s| {
        let x = s.input("x", shape![3]);
        (&(&x * &x) * &x).sum_all()
    });
    let d2 = f.grad(&["x"]).grad(&["x"]);
    let out = d2.run(&[("x", &[1.0, -2.0, 0.5])]);
    assert_eq!(out[0], vec![6.0, -12.0, 3.0]);
    // and a Hessian-vector-style check through tanh
    let t = Func::new("tanh", |s| {
        let x = s.input("x", shape![2]);
        x.tanh().sum_all()
    });
    let out = t.grad(&["x"]).grad(&["x"]).run(&[("x", &[0.3, -0.8])]);
    let want: Vec<f32> = [0.3f32, -0.8]
        .iter()
        .map(|x| -2.0 * x.tanh() * (1.0 - x.tanh() * x.tanh()))
        .collect();
    close(&out[0], &want, 1e-6);
}

#[test]
fn func_errors_name_the_missing_input_and_the_blocking_op() {
    let f = affine();
    let e = f.try_grad(&["nope"]).unwrap_err();
    assert!(
        e.message()
            .starts_with("Func: no input or param named `nope` in `affine` (inputs: [\"x\"], params: [\"w\", \"b\"])"),
        "{e}"
    );
    let h = Func::new("h", |s| {
        let x = s.input("x", shape![3]);
        let i = s.input("i", shape![I64; 3]);
        (&x.floor() * &i.cast(DType::F32)).sum_all()
    });
    let e = h.try_grad(&["x"]).unwrap_err();
    assert!(e.message().contains("floor is not differentiable"), "{e}");
    assert!(e.message().ends_with("no gradient reaches `x`"), "{e}");
    let e = h.try_value_and_grad(&["i"]).unwrap_err();
    assert!(
        e.message()
            .contains("cannot differentiate with respect to `i`"),
        "{e}"
    );
    let e = Func::new("p", |s| s.input("x", shape![1]).exp())
        .try_grad_all()
        .unwrap_err();
    assert!(e.message().contains("declares none"), "{e}");
}

#[test]
#[should_panic(expected = "Func: no input or param named `missing`")]
fn func_grad_panics_on_an_unknown_name() {
    let _ = affine().value_and_grad(&["missing"]);
}

#[test]
fn the_first_output_is_the_loss_of_a_multi_output_func() {
    let f = Func::multi("two", |s| {
        let x = s.input("x", shape![2]);
        vec![(&x * &x).sum_all(), x.exp()]
    });
    let out = f.grad(&["x"]).run(&[("x", &[1.0, 3.0])]);
    assert_eq!(out, vec![vec![2.0, 6.0]]);
}

#[test]
fn a_mean_over_a_dynamic_batch_differentiates_like_the_static_function() {
    let build = |batch: Option<usize>| {
        Func::new("ce", move |s| {
            let x = match batch {
                Some(b) => s.input("x", shape![b, 3]),
                None => s.input("x", shape![?, 3]),
            };
            let t = match batch {
                Some(b) => s.input("t", shape![b, 2]),
                None => s.input("t", shape![?, 2]),
            };
            let w = s.param("w", shape![3, 2]);
            let logits = x.matmul(&w).softmax(-1);
            let centered = &x - &x.mean([0], true);
            let spread = (&centered * &centered).mean_all();
            &logits.cross_entropy(&t).mean_all() + &spread
        })
        .with_param("w", vec![0.2, -0.1, 0.4, 0.3, -0.5, 0.1])
    };
    let dynamic = build(None).value_and_grad(&["w", "x"]);
    for b in [2usize, 4] {
        let x: Vec<f32> = (0..b * 3).map(|i| (i as f32 * 0.37).sin()).collect();
        let t: Vec<f32> = (0..b * 2).map(|i| (i % 2) as f32).collect();
        let ins = [("x", &x[..]), ("t", &t[..])];
        let got = dynamic.run(&ins);
        let want = build(Some(b)).value_and_grad(&["w", "x"]).run(&ins);
        for (g, w) in got.iter().zip(&want) {
            close(g, w, 1e-6);
        }
    }
}

#[test]
fn a_gradient_that_does_not_read_an_input_still_accepts_it_by_name() {
    // d/dw Σ(w[i]·g) does not depend on w: the compiled gradient has no `w` slot, but
    // `w` is one of the function's inputs and every run passes it.
    let f = Func::new("g", |s| {
        let w = s.input("w", rlx_tensor::Shape::new(&[4, 2], DType::F32));
        let i = s.input("i", rlx_tensor::Shape::new(&[3], DType::I32));
        let g = s.input("g", rlx_tensor::Shape::new(&[3, 2], DType::F32));
        (&w.gather(&i, 0) * &g).sum_all()
    })
    .grad(&["w"]);
    assert!(f.input_names().iter().any(|n| n == "w"));
    let g: Vec<f32> = (1..=6).map(|v| v as f32).collect();
    let args: [(&str, &[f32]); 3] = [("w", &[0.0; 8]), ("i", &[0.0, 1.0, 3.0]), ("g", &g)];
    // Rows 0, 1 and 3 of the gradient are rows 0, 1, 2 of g; row 2 is zero.
    let want = [1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 5.0, 6.0];
    assert_eq!(f.try_run(&args).unwrap()[0], want);
    assert_eq!(f.jit().try_run(&args).unwrap()[0], want);
    // A name the function never declared is still an error.
    let bad: [(&str, &[f32]); 1] = [("nope", &[0.0])];
    let e = f.jit().try_run(&bad).unwrap_err().to_string();
    assert!(e.contains("no input or param named `nope`"), "{e}");
}
