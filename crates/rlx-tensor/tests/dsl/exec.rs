//! Graphs built with `rlx!` run through `Func` and match f64 references and the same
//! graphs built with the Tensor API.

use rlx_tensor::{Func, GraphScope, Tensor, graph, graph_with, rlx, rlx_expr, shape};

#[track_caller]
fn close(got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "element {i}: got {g}, want {w} (all: {got:?})"
        );
    }
}

fn seq(n: usize, scale: f32, offset: f32) -> Vec<f32> {
    (0..n).map(|i| i as f32 * scale + offset).collect()
}

/// `a [m,k] × b [k,n]` in f64.
fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|t| a[i * k + t] * b[t * n + j]).sum();
        }
    }
    out
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

#[test]
fn mlp_runs_and_matches_an_f64_reference_and_the_api_graph() {
    let g = rlx! {
        input x: [2, 3];
        param w1: [3, 4];
        param b1: [4];
        param w2: [4, 2];
        let h = relu(x @ w1 + b1);
        let y = h @ w2 * 0.5;
    };
    let (x, w1, b1, w2) = (
        seq(6, 0.5, -1.0),
        seq(12, 0.25, -1.5),
        seq(4, 0.1, -0.2),
        seq(8, -0.3, 1.0),
    );
    let bind = |f: Func| {
        f.with_param("w1", w1.clone())
            .with_param("b1", b1.clone())
            .with_param("w2", w2.clone())
    };
    let got = bind(Func::from_graph(g)).run(&[("x", &x)]);

    let mut h = matmul(&f64s(&x), &f64s(&w1), 2, 3, 4);
    for (i, v) in h.iter_mut().enumerate() {
        *v = (*v + b1[i % 4] as f64).max(0.0);
    }
    let want: Vec<f64> = matmul(&h, &f64s(&w2), 2, 4, 2)
        .iter()
        .map(|v| v * 0.5)
        .collect();
    close(&got[0], &want);

    let api = Func::new("mlp", |s| {
        let x = s.input("x", shape![2, 3]);
        let w1 = s.param("w1", shape![3, 4]);
        let b1 = s.param("b1", shape![4]);
        let w2 = s.param("w2", shape![4, 2]);
        &(&x.matmul(&w1) + &b1).relu().matmul(&w2) * 0.5
    });
    assert_eq!(bind(api).run(&[("x", &x)]), got);
}

#[test]
fn operators_and_sugar_compute_the_documented_values() {
    let g = rlx! {
        input x: [4];
        input y: [4];
        let a = where_(x > 0.0, x, -x ** 2);
        let b = 2 ** x - 7 % y;
        let c = clamp(x * y, -1, 1.5);
        let d = maximum(1.0, x) + minimum(x, y);
        out a, b, c, d;
    };
    let x = [-2.0f32, -0.5, 0.5, 3.0];
    let y = [3.0f32, 2.0, 4.0, 5.0];
    let got = Func::from_graph(g).run(&[("x", &x), ("y", &y)]);
    let (xd, yd) = (f64s(&x), f64s(&y));
    let a: Vec<f64> = xd
        .iter()
        .map(|&v| if v > 0.0 { v } else { (-v).powi(2) })
        .collect();
    let b: Vec<f64> = xd
        .iter()
        .zip(&yd)
        .map(|(&v, &w)| 2f64.powf(v) - 7.0 % w)
        .collect();
    let c: Vec<f64> = xd
        .iter()
        .zip(&yd)
        .map(|(&v, &w)| (v * w).clamp(-1.0, 1.5))
        .collect();
    let d: Vec<f64> = xd
        .iter()
        .zip(&yd)
        .map(|(&v, &w)| v.max(1.0) + v.min(w))
        .collect();
    close(&got[0], &a);
    close(&got[1], &b);
    close(&got[2], &c);
    close(&got[3], &d);
}

#[test]
fn runtime_repeat_values_for_zero_and_two_iterations() {
    let build = |n: usize| {
        rlx! {
            input x: [2];
            param s: [2];
            repeat n { let x = x * s + 1; }
        }
    };
    let x = [1.0f32, 2.0];
    let s = vec![2.0f32, 3.0];
    let run = |n| {
        Func::from_graph(build(n))
            .with_param("s", s.clone())
            .run(&[("x", &x)])
    };
    close(&run(0)[0], &[1.0, 2.0]);
    // x → 2x+1 → 2(2x+1)+1 per element with its own scale.
    close(
        &run(2)[0],
        &[(1.0 * 2.0 + 1.0) * 2.0 + 1.0, (2.0 * 3.0 + 1.0) * 3.0 + 1.0],
    );
}

#[test]
fn scan_values_match_the_unrolled_recurrence() {
    let g = rlx! {
        input x: [3];
        param a: [3];
        param b: [3];
        scan h = x for 4 { let t = h * a; let h = tanh(t + b); }
    };
    let x = [0.5f32, -1.0, 2.0];
    let (a, b) = (vec![0.9f32, 1.1, -0.7], vec![0.1f32, -0.2, 0.3]);
    let got = Func::from_graph(g)
        .with_param("a", a.clone())
        .with_param("b", b.clone())
        .run(&[("x", &x)]);
    let want: Vec<f64> = (0..3)
        .map(|i| {
            let mut h = x[i] as f64;
            for _ in 0..4 {
                h = (h * a[i] as f64 + b[i] as f64).tanh();
            }
            h
        })
        .collect();
    close(&got[0], &want);

    // The same scan through the builder API.
    let api = graph("rlx_graph", |s| {
        let x = s.input("x", shape![3]);
        let a = s.param("a", shape![3]);
        let b = s.param("b", shape![3]);
        s.scan_block(&x, &[&a, &b], 4, |h, bc| (&(h * &bc[0]) + &bc[1]).tanh())
    });
    let api_got = Func::from_graph(api)
        .with_param("a", a)
        .with_param("b", b)
        .run(&[("x", &x)]);
    close(&api_got[0], &want);
}

#[test]
fn const_arrays_bind_and_taps_produce_values() {
    let offset = Tensor::from_vec(vec![10.0, 20.0], [2]);
    let g = rlx! {
        bind offset;
        const t = [[1, 2], [3, -4]]: F32;
        const half = 0.5: F32;
        input x: [1, 2];
        let y = x @ t;
        tap y;
        let z = offset + y * half;
    };
    let got = Func::from_graph(g).run(&[("x", &[1.0, 2.0])]);
    // y = [1*1 + 2*3, 1*2 + 2*(-4)] = [7, -6]
    close(&got[0], &[10.0 + 3.5, 20.0 - 3.0]);
    close(&got[1], &[7.0, -6.0]);
}

#[test]
fn fn_inlining_and_collections_compute_like_the_api() {
    struct Layer {
        w: Tensor,
        b: Tensor,
    }
    let layers: Vec<Layer> = (0..2)
        .map(|i| Layer {
            w: Tensor::from_vec(seq(6, 0.2 * (i + 1) as f32, -0.4), [2, 3]),
            b: Tensor::from_vec(seq(2, 0.5, i as f32), [2]),
        })
        .collect();
    let g = rlx! {
        fn block(h, w, b) { let o = gelu(linear(h, w, b)); }
        bind layers[];
        input x: [1, 3];
        let a = block(x, layers[0].w, layers[0].b);
        let y = a + sigmoid(linear(x, layers[1].w, layers[1].b));
    };
    let x = [0.3f32, -0.6, 1.2];
    let got = Func::from_graph(g).run(&[("x", &x)]);
    let api = graph("api", |s| {
        let x = s.input("x", shape![1, 3]);
        let a = x.linear_act(
            &layers[0].w,
            &layers[0].b,
            Some(rlx_tensor::Activation::Gelu),
        );
        let b = x.linear_act(
            &layers[1].w,
            &layers[1].b,
            Some(rlx_tensor::Activation::Sigmoid),
        );
        &a + &b
    });
    let want = Func::from_graph(api).run(&[("x", &x)]);
    close(&got[0], &f64s(&want[0]));
}

#[test]
fn rlx_expr_in_a_rust_loop_matches_the_api() {
    let ws: Vec<Vec<f32>> = (0..3).map(|i| seq(4, 0.3, -0.5 + i as f32 * 0.1)).collect();
    let build = |use_dsl: bool| {
        graph_with("loop", |s: &mut GraphScope| {
            let mut h = s.input("x", shape![1, 2]);
            for i in 0..ws.len() {
                let w = s.param(format!("w{i}"), shape![2, 2]);
                h = if use_dsl {
                    rlx_expr!(tanh(h @ w) - h * 0.5)
                } else {
                    &h.matmul(&w).tanh() - &(&h * 0.5)
                };
            }
            s.set_outputs([&h]);
        })
        .0
    };
    let bind = |g| {
        let mut f = Func::from_graph(g);
        for (i, w) in ws.iter().enumerate() {
            f = f.with_param(format!("w{i}"), w.clone());
        }
        f
    };
    let x = [0.7f32, -0.2];
    let a = bind(build(true)).run(&[("x", &x)]);
    let b = bind(build(false)).run(&[("x", &x)]);
    assert_eq!(a, b);
    assert_eq!(a[0].len(), 2);
}
