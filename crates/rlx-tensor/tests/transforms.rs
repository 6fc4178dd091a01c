//! The forward and batching transforms of `Func` (`vmap`, `jvp`, `hvp`) and their
//! compositions with the gradient transforms, run end to end (compile + execute)
//! and checked against loops of the original function, hand-derived values and
//! finite differences.
#![cfg(all(feature = "autodiff", feature = "eval"))]

use rlx_tensor::{Func, cache_stats, shape};

fn close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: {g} vs {w} (got {got:?}, want {want:?})"
        );
    }
}

fn seq(n: usize, scale: f32, shift: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 * 0.7 + shift).sin()) * scale)
        .collect()
}

/// `f(x) = Σ x·x·sin x` — the W10 benchmark function.
fn w10(n: usize) -> Func {
    Func::new("w10", |s| {
        let x = s.input("x", shape![n]);
        (&(&x * &x) * &x.sin()).sum_all()
    })
}

#[test]
fn seed_example_batched_grad_compiles_once_and_runs_many_times() {
    let f = Func::new("f", |s| {
        let x = s.input("x", shape![3]);
        (&x * &x).sum([0], false)
    });
    let batched_grad = f.grad(&["x"]).vmap(&["x"], 4);
    let compiled = batched_grad.jit();
    let (_, misses) = cache_stats();
    for round in 0..3 {
        let xs: Vec<f32> = (0..12).map(|i| (i + round) as f32 * 0.5).collect();
        let out = compiled.run(&[("x", &xs)]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0], xs.iter().map(|x| 2.0 * x).collect::<Vec<_>>());
    }
    assert_eq!(cache_stats().1, misses, "running a Jitted never recompiles");
}

#[test]
fn vmap_of_grad_of_the_w10_function_equals_a_loop() {
    let n = 8;
    let df = w10(n).grad(&["x"]);
    let batched = df.vmap(&["x"], 5).jit();
    let xs = seq(5 * n, 1.5, 0.3);
    let out = batched.run(&[("x", &xs)]);
    let mut want = Vec::new();
    for b in 0..5 {
        want.extend(df.run(&[("x", &xs[b * n..(b + 1) * n])])[0].clone());
    }
    close(&out[0], &want, 1e-5);
    // d/dx x²·sin x = 2x·sin x + x²·cos x
    let analytic: Vec<f32> = xs
        .iter()
        .map(|x| 2.0 * x * x.sin() + x * x * x.cos())
        .collect();
    close(&out[0], &analytic, 1e-4);
}

#[test]
fn vmap_shares_params_and_keeps_their_bindings() {
    let f = Func::new("affine", |s| {
        let x = s.input("x", shape![2]);
        let w = s.param("w", shape![2, 3]);
        let b = s.param("b", shape![3]);
        &x.unsqueeze(0).matmul(&w).squeeze(0) + &b
    })
    .with_param("w", vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    .with_param("b", vec![0.5, -0.5, 1.0]);
    let v = f.vmap(&["x"], 3);
    assert_eq!(v.param_binding("w"), f.param_binding("w"));
    assert_eq!(v.graph().outputs.len(), 1);
    let xs = [1.0, 0.0, 0.0, 1.0, 2.0, -1.0];
    let out = v.run(&[("x", &xs)]);
    let mut want = Vec::new();
    for b in 0..3 {
        want.extend(f.run(&[("x", &xs[2 * b..2 * b + 2])])[0].clone());
    }
    assert_eq!(out[0], want);
}

#[test]
fn vmap_keeps_dynamic_dims_dynamic() {
    let f = Func::new("rows", |s| {
        let x = s.input("x", shape![?, 3]);
        x.softmax(-1).sum([0], false)
    });
    let v = f.vmap(&["x"], 2).jit();
    for rows in [1usize, 3] {
        let xs = seq(2 * rows * 3, 1.0, rows as f32);
        let out = v.run(&[("x", &xs)]);
        let mut want = Vec::new();
        for b in 0..2 {
            want.extend(f.run(&[("x", &xs[b * rows * 3..(b + 1) * rows * 3])])[0].clone());
        }
        close(&out[0], &want, 1e-6);
    }
}

#[test]
fn outputs_independent_of_the_batch_are_broadcast() {
    let f = Func::multi("two", |s| {
        let x = s.input("x", shape![2]);
        let w = s.param("w", shape![2]);
        vec![&x + &w, w.exp()]
    })
    .with_param("w", vec![0.0, 1.0]);
    let out = f.vmap(&["x"], 2).run(&[("x", &[1.0, 2.0, 3.0, 4.0])]);
    assert_eq!(out[0], vec![1.0, 3.0, 3.0, 5.0]);
    close(&out[1], &[1.0, 1f32.exp(), 1.0, 1f32.exp()], 1e-6);
}

#[test]
fn jvp_gives_primals_then_directional_derivatives() {
    let f = Func::multi("f", |s| {
        let x = s.input("x", shape![3]);
        let w = s.param("w", shape![3]);
        vec![(&x * &w).sum_all(), x.tanh()]
    })
    .with_param("w", vec![1.0, -2.0, 0.5]);
    let j = f.jvp(&["x", "w"]);
    assert_eq!(j.output_count(), 4);
    let x = [0.3f32, -0.7, 1.1];
    let (tx, tw) = ([1.0f32, 0.5, -1.0], [0.2f32, 0.1, 0.3]);
    let out = j.run(&[("x", &x), ("tangent_x", &tx), ("tangent_w", &tw)]);
    let w = [1.0f32, -2.0, 0.5];
    close(&out[0], &[x[0] * w[0] + x[1] * w[1] + x[2] * w[2]], 1e-6);
    let d: f32 = (0..3).map(|i| tx[i] * w[i] + x[i] * tw[i]).sum();
    close(&out[2], &[d], 1e-6);
    let dt: Vec<f32> = (0..3)
        .map(|i| (1.0 - x[i].tanh().powi(2)) * tx[i])
        .collect();
    close(&out[3], &dt, 1e-6);
}

#[test]
fn hvp_matches_finite_differences_of_the_gradient() {
    let f = Func::new("f", |s| {
        let x = s.input("x", shape![4]);
        let w = s.param("w", shape![4, 4]);
        let h = x.unsqueeze(0).matmul(&w).tanh();
        (&h * &h).sum_all() + (&(&x * &x) * &x.sin()).sum_all()
    })
    .with_param("w", seq(16, 0.8, 0.1));
    let h = f.hvp(&["x"]);
    assert_eq!(h.output_count(), 4);
    let x = seq(4, 1.0, 0.9);
    let v = seq(4, 1.0, 2.0);
    let out = h.run(&[("x", &x), ("tangent_x", &v)]);
    let g = f.grad(&["x"]);
    let grad = g.run(&[("x", &x)])[0].clone();
    close(&out[1], &grad, 1e-6);
    let dot: f32 = grad.iter().zip(&v).map(|(a, b)| a * b).sum();
    close(&out[2], &[dot], 1e-5);
    let eps = 1e-2f32;
    let at = |e: f32| {
        let xe: Vec<f32> = x.iter().zip(&v).map(|(a, b)| a + e * b).collect();
        g.run(&[("x", &xe)])[0].clone()
    };
    let (hi, lo) = (at(eps), at(-eps));
    let fd: Vec<f32> = hi
        .iter()
        .zip(&lo)
        .map(|(a, b)| (a - b) / (2.0 * eps))
        .collect();
    close(&out[3], &fd, 2e-3);
}

#[test]
fn hvp_and_jvp_keep_a_dynamic_batch_dynamic() {
    // f(x) = Σ_rows softplus(x·w)², x: [?, 3]
    let f = Func::new("dyn", |s| {
        let x = s.input("x", shape![?, 3]);
        let w = s.param("w", shape![3, 2]);
        let h = x.matmul(&w).softplus();
        (&h * &h).sum_all()
    })
    .with_param("w", seq(6, 0.5, 0.2));
    let h = f.hvp(&["x"]).jit();
    let g = f.grad(&["x"]);
    for rows in [1usize, 4] {
        let x = seq(rows * 3, 1.0, rows as f32);
        let v = seq(rows * 3, 1.0, 5.0);
        let out = h.run(&[("x", &x), ("tangent_x", &v)]);
        assert_eq!(out[3].len(), rows * 3);
        let eps = 1e-2f32;
        let at = |e: f32| {
            let xe: Vec<f32> = x.iter().zip(&v).map(|(a, b)| a + e * b).collect();
            g.run(&[("x", &xe)])[0].clone()
        };
        let (hi, lo) = (at(eps), at(-eps));
        let fd: Vec<f32> = hi
            .iter()
            .zip(&lo)
            .map(|(a, b)| (a - b) / (2.0 * eps))
            .collect();
        close(&out[3], &fd, 2e-3);
    }
}

#[test]
fn jvp_of_grad_is_hvp_and_grad_of_grad_is_hvp_with_ones() {
    let n = 5;
    let f = w10(n);
    let x = seq(n, 1.2, 0.4);
    let ones = vec![1.0f32; n];
    let hv = f.hvp(&["x"]).run(&[("x", &x), ("tangent_x", &ones)]);
    let jg = f
        .grad(&["x"])
        .jvp(&["x"])
        .run(&[("x", &x), ("tangent_x", &ones)]);
    close(&jg[1], &hv[3], 1e-6);
    // grad of the (non-scalar) gradient differentiates its sum: H·1.
    let gg = f.grad(&["x"]).grad(&["x"]).run(&[("x", &x)]);
    close(&gg[0], &hv[3], 1e-5);
    // H = diag(2 sin x + 4x cos x − x² sin x)
    let want: Vec<f32> = x
        .iter()
        .map(|x| 2.0 * x.sin() + 4.0 * x * x.cos() - x * x * x.sin())
        .collect();
    close(&hv[3], &want, 1e-4);
}

#[test]
fn grad_of_vmap_sums_over_the_batch() {
    let f = Func::new("f", |s| {
        let x = s.input("x", shape![2]);
        let w = s.param("w", shape![2]);
        (&x * &w).sin().sum_all()
    })
    .with_param("w", vec![0.5, -1.5]);
    let gv = f.vmap(&["x"], 3).grad(&["w", "x"]);
    let xs = [0.1f32, 0.2, -0.3, 0.4, 1.0, -1.0];
    let out = gv.run(&[("x", &xs)]);
    let g = f.grad(&["w", "x"]);
    let mut gw = vec![0.0f32; 2];
    let mut gx = Vec::new();
    for b in 0..3 {
        let r = g.run(&[("x", &xs[2 * b..2 * b + 2])]);
        gw[0] += r[0][0];
        gw[1] += r[0][1];
        gx.extend(r[1].clone());
    }
    close(&out[0], &gw, 1e-6);
    close(&out[1], &gx, 1e-6);
}

#[test]
fn errors_name_the_function_and_the_name() {
    let f = Func::new("f", |s| {
        let x = s.input("x", shape![2]);
        let w = s.param("w", shape![2]);
        (&x * &w).sum_all()
    });
    let e = f.try_vmap(&["w"], 2).unwrap_err().to_string();
    assert!(
        e.contains("`w` is a param") && e.contains("only inputs can be batched"),
        "{e}"
    );
    let e = f.try_vmap(&["y"], 2).unwrap_err().to_string();
    assert!(
        e.contains("no input named `y`") && e.contains("\"x\""),
        "{e}"
    );
    let e = f.try_vmap(&["x"], 0).unwrap_err().to_string();
    assert!(e.contains("batch_size must be at least 1"), "{e}");
    let e = f.try_jvp(&["z"]).unwrap_err().to_string();
    assert!(e.contains("Func: no input or param named `z`"), "{e}");
    let g = Func::new("g", |s| {
        let x = s.input("x", shape![2]);
        let y = s.input("y", shape![2]);
        (&x * &x).sum_all() + y.sum_all().stop_gradient()
    });
    let e = g.try_hvp(&["y"]).unwrap_err().to_string();
    assert!(e.contains("`y`") && e.contains("stop_gradient"), "{e}");
}

#[test]
#[should_panic(expected = "no input named `nope`")]
fn vmap_panics_on_an_unknown_input() {
    let f = Func::new("f", |s| s.input("x", shape![2]).exp());
    let _ = f.vmap(&["nope"], 2);
}

#[test]
fn learned_rope_tables_get_gradients_that_agree_with_forward_mode() {
    // rope's cos/sin tables as ordinary (learnable) inputs: the compiled gradient
    // matches finite differences, and jvp·v = ⟨grad, v⟩ for tangents on the tables.
    let f = Func::new("rope", |s| {
        let x = s.input("x", shape![1, 3, 8]);
        let cos = s.input("cos", shape![3, 2]);
        let sin = s.input("sin", shape![3, 2]);
        let r = x.rope(&cos, &sin, 4);
        (&r * &r.sin()).sum_all()
    });
    let x = seq(24, 1.0, 0.2);
    let (cos, sin) = (seq(6, 1.0, 1.3), seq(6, 1.0, 2.9));
    let grads = f
        .grad(&["cos", "sin"])
        .run(&[("x", &x), ("cos", &cos), ("sin", &sin)]);
    let value = |c: &[f32], s: &[f32]| f.run(&[("x", &x), ("cos", c), ("sin", s)])[0][0];
    let eps = 1e-2f32;
    for (k, table) in [&cos, &sin].into_iter().enumerate() {
        let fd: Vec<f32> = (0..6)
            .map(|j| {
                let at = |d: f32| {
                    let mut t = table.clone();
                    t[j] += d;
                    if k == 0 {
                        value(&t, &sin)
                    } else {
                        value(&cos, &t)
                    }
                };
                (at(eps) - at(-eps)) / (2.0 * eps)
            })
            .collect();
        close(&grads[k], &fd, 2e-3);
    }
    let (vc, vs) = (seq(6, 1.0, 0.4), seq(6, 1.0, 4.1));
    let out = f.jvp(&["cos", "sin"]).run(&[
        ("x", &x),
        ("cos", &cos),
        ("sin", &sin),
        ("tangent_cos", &vc),
        ("tangent_sin", &vs),
    ]);
    let dot: f32 = grads[0].iter().zip(&vc).map(|(a, b)| a * b).sum::<f32>()
        + grads[1].iter().zip(&vs).map(|(a, b)| a * b).sum::<f32>();
    close(&out[1], &[dot], 1e-5);
}
