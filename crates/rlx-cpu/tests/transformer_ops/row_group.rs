//! Row groups (`KernelKind::RowGroup`): a normalization's backward — LayerNorm and
//! RMSNorm as ops, RMSNorm and softmax written from primitives — runs as one kernel a
//! block of rows at a time, and matches the oracle in f32 and f64 for odd row lengths,
//! a single row, 3-D spaces, transposed and broadcast inputs.

use super::{oracle, run};
use rlx_compile::autodiff::grad_graph;
use rlx_compile::program::KernelKind;
use rlx_ir::{Activation, BinaryOp, DType, Graph, NodeId, Op, ReduceOp, Shape, TensorData};
use rlx_testkit::{Rng, close, op, reduce};

/// Random data of `dims` in `dt`, uniform in `±scale` (plus `shift`).
fn data(rng: &mut Rng, dims: &[usize], dt: DType, scale: f64, shift: f64) -> TensorData {
    let n: usize = dims.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| (rng.uniform() * 2.0 - 1.0) * scale + shift)
        .collect();
    match dt {
        DType::F32 => TensorData::from_f32(dims, &v.iter().map(|&x| x as f32).collect::<Vec<_>>()),
        _ => TensorData::from_f64(dims, &v),
    }
}

/// The number of row-group kernels (and all kernels) the CPU compiles `g` into.
fn row_groups(g: &Graph) -> (usize, usize) {
    let p = rlx_compile::compile(g, &rlx_cpu::compile_options()).unwrap();
    let n = p
        .kernels
        .iter()
        .filter(|k| matches!(k.kind, KernelKind::RowGroup { .. }))
        .count();
    (n, p.kernels.len())
}

/// Compares the CPU's outputs with the oracle's; f32 within `1e-4`, f64 within `1e-10`.
fn check(g: &Graph, args: &[TensorData], dt: DType, what: &str) {
    let got = run(g, args);
    let want = oracle(g, args);
    assert_eq!(got.len(), want.len(), "{what}");
    let tol = if dt == DType::F32 { 1e-4 } else { 1e-10 };
    for (k, (a, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            a.to_f64_vec().iter().all(|v| v.is_finite()),
            "{what}: output {k} not finite"
        );
        let r = std::panic::catch_unwind(|| close(a, w, tol));
        assert!(r.is_ok(), "{what}: output {k} differs from the oracle");
    }
}

/// `Σ norm(xv; γ, β) ⊙ gy`, differentiated for `wrt` (by name among x, gamma, beta),
/// where `xv` is `x` seen through `view` (the input may be transposed or scaled).
fn norm_loss(
    dims: &[usize],
    dt: DType,
    rms: bool,
    view: impl Fn(&mut Graph, NodeId) -> NodeId,
    x_dims: &[usize],
) -> Graph {
    let c = *dims.last().unwrap();
    let mut g = Graph::new("norm_bwd");
    let x = g.input("x", Shape::new(x_dims, dt));
    let gamma = g.input("gamma", Shape::new(&[c], dt));
    let beta = g.input("beta", Shape::new(&[c], dt));
    let gy = g.input("gy", Shape::new(dims, dt));
    let xv = view(&mut g, x);
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
    let y = op(&mut g, o, vec![xv, gamma, beta]);
    let p = op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, gy]);
    let all: Vec<usize> = (0..dims.len()).collect();
    let loss = reduce(&mut g, ReduceOp::Sum, all, false, p);
    g.set_outputs(vec![loss]);
    grad_graph(&g, &[x, gamma, beta]).unwrap()
}

/// Arguments for the graph's inputs in order (the gradient graph may drop some).
fn args_for(g: &Graph, all: &[(&str, TensorData)]) -> Vec<TensorData> {
    let names: Vec<String> = g.input_names().iter().map(|s| s.to_string()).collect();
    names
        .iter()
        .map(|n| all.iter().find(|(m, _)| m == n).unwrap().1.clone())
        .collect()
}

#[test]
fn norm_backwards_are_one_row_group_and_match_the_oracle() {
    let mut rng = Rng::new(11);
    for dims in [
        vec![1, 7],
        vec![3, 7],
        vec![40, 33],
        vec![16, 256],
        vec![9, 300],
        vec![2, 1500],
        vec![300, 45],
        vec![2, 5, 17],
    ] {
        for dt in [DType::F32, DType::F64] {
            for rms in [false, true] {
                let g = norm_loss(&dims, dt, rms, |_, x| x, &dims);
                let what = format!("{dims:?} {dt:?} rms={rms}");
                let (groups, kernels) = row_groups(&g);
                assert_eq!((groups, kernels), (1, 1), "{what}");
                let c = *dims.last().unwrap();
                let all = [
                    ("x", data(&mut rng, &dims, dt, 3.0, 0.5)),
                    ("gamma", data(&mut rng, &[c], dt, 0.2, 1.0)),
                    ("beta", data(&mut rng, &[c], dt, 0.2, 0.0)),
                    ("gy", data(&mut rng, &dims, dt, 1.0, 0.0)),
                ];
                check(&g, &args_for(&g, &all), dt, &what);
            }
        }
    }
}

#[test]
fn a_transposed_and_scaled_norm_input_is_read_through_its_view() {
    let mut rng = Rng::new(12);
    let (r, c) = (37, 21);
    for dt in [DType::F32, DType::F64] {
        // x arrives as [c, r]: the group's stages read it transposed.
        let g = norm_loss(
            &[r, c],
            dt,
            false,
            |g, x| op(g, Op::Transpose { perm: vec![1, 0] }, vec![x]),
            &[c, r],
        );
        assert_eq!(row_groups(&g).0, 1, "{dt:?}");
        let all = [
            ("x", data(&mut rng, &[c, r], dt, 2.0, 0.0)),
            ("gamma", data(&mut rng, &[c], dt, 0.2, 1.0)),
            ("beta", data(&mut rng, &[c], dt, 0.2, 0.0)),
            ("gy", data(&mut rng, &[r, c], dt, 1.0, 0.0)),
        ];
        check(&g, &args_for(&g, &all), dt, "transposed x");
    }
    // A per-row scale broadcast along the rows before the norm.
    let mut g = Graph::new("scaled");
    let dt = DType::F32;
    let x = g.input("x", Shape::new(&[r, c], dt));
    let s = g.input("s", Shape::new(&[r, 1], dt));
    let gy = g.input("gy", Shape::new(&[r, c], dt));
    let xs = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, s]);
    let m = reduce(&mut g, ReduceOp::Mean, vec![1], true, xs);
    let d = op(&mut g, Op::Binary(BinaryOp::Sub), vec![xs, m]);
    let d2 = op(&mut g, Op::Binary(BinaryOp::Mul), vec![d, d]);
    let v = reduce(&mut g, ReduceOp::Mean, vec![1], true, d2);
    let inv = op(&mut g, Op::Activation(Activation::Rsqrt), vec![v]);
    let y = op(&mut g, Op::Binary(BinaryOp::Mul), vec![d, inv]);
    let p = op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, gy]);
    let loss = reduce(&mut g, ReduceOp::Sum, vec![0, 1], false, p);
    g.set_outputs(vec![loss]);
    let g = grad_graph(&g, &[x, s]).unwrap();
    assert_eq!(row_groups(&g).0, 1);
    let all = [
        ("x", data(&mut rng, &[r, c], dt, 2.0, 0.3)),
        ("s", data(&mut rng, &[r, 1], dt, 0.5, 1.0)),
        ("gy", data(&mut rng, &[r, c], dt, 1.0, 0.0)),
    ];
    check(&g, &args_for(&g, &all), dt, "row-scaled x");
}

/// `Σ f(x) ⊙ gy` for `f` built from primitives, differentiated for x.
fn primitive_backward(r: usize, c: usize, dt: DType, softmax: bool) -> Graph {
    let mut g = Graph::new(if softmax { "softmax_bwd" } else { "rms_bwd" });
    let x = g.input("x", Shape::new(&[r, c], dt));
    let gy = g.input("gy", Shape::new(&[r, c], dt));
    let y = if softmax {
        let m = reduce(&mut g, ReduceOp::Max, vec![1], true, x);
        let m = op(&mut g, Op::StopGradient, vec![m]);
        let d = op(&mut g, Op::Binary(BinaryOp::Sub), vec![x, m]);
        let e = op(&mut g, Op::Activation(Activation::Exp), vec![d]);
        let s = reduce(&mut g, ReduceOp::Sum, vec![1], true, e);
        op(&mut g, Op::Binary(BinaryOp::Div), vec![e, s])
    } else {
        let x2 = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, x]);
        let ms = reduce(&mut g, ReduceOp::Mean, vec![1], true, x2);
        let inv = op(&mut g, Op::Activation(Activation::Rsqrt), vec![ms]);
        op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, inv])
    };
    let p = op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, gy]);
    let loss = reduce(&mut g, ReduceOp::Sum, vec![0, 1], false, p);
    g.set_outputs(vec![loss]);
    grad_graph(&g, &[x]).unwrap()
}

#[test]
fn softmax_and_rms_norm_backwards_from_primitives_are_one_row_group() {
    let mut rng = Rng::new(13);
    for (r, c) in [(1, 5), (24, 31), (64, 256), (3, 1100)] {
        for dt in [DType::F32, DType::F64] {
            for softmax in [true, false] {
                let g = primitive_backward(r, c, dt, softmax);
                let what = format!("[{r}, {c}] {dt:?} softmax={softmax}");
                let (groups, kernels) = row_groups(&g);
                assert_eq!((groups, kernels), (1, 1), "{what}");
                let all = [
                    ("x", data(&mut rng, &[r, c], dt, 3.0, 0.2)),
                    ("gy", data(&mut rng, &[r, c], dt, 1.0, 0.0)),
                ];
                check(&g, &args_for(&g, &all), dt, &what);
            }
        }
    }
}

#[test]
fn a_broadcast_copy_of_a_row_sum_runs_after_the_group_and_matches() {
    // The row sum is broadcast back by a pure copy kernel: not a stage (it computes
    // nothing), so the sum keeps its own kernel and the copy reads it whole.
    let mut g = Graph::new("bcast");
    let x0 = g.input("a", Shape::new(&[5, 1], DType::F32));
    let b = op(
        &mut g,
        Op::Expand {
            target_shape: vec![5, 3],
        },
        vec![x0],
    );
    let x2 = g.input("b", Shape::new(&[5, 3], DType::F32));
    let m = op(&mut g, Op::Binary(BinaryOp::Mul), vec![b, x2]);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![m]);
    let s = reduce(&mut g, ReduceOp::Sum, vec![1], true, e);
    let s2 = op(
        &mut g,
        Op::Expand {
            target_shape: vec![5, 3],
        },
        vec![s],
    );
    g.set_outputs(vec![s2]);
    let mut rng = Rng::new(3);
    let args = vec![
        data(&mut rng, &[5, 1], DType::F32, 1.0, 0.0),
        data(&mut rng, &[5, 3], DType::F32, 1.0, 0.0),
    ];
    assert_eq!(row_groups(&g).0, 0);
    check(&g, &args, DType::F32, "broadcast row sum");
}
