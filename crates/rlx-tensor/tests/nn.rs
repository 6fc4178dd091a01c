//! Linear algebra and NN methods: values against naive f64 references written here,
//! the IR each method appends, and the errors of the `try_` twins.
#![cfg(feature = "eval")]

use rlx_ir::op::ReduceOp;
use rlx_ir::{BinaryOp, Node, Op};
use rlx_tensor::{Activation, DType, ScaleLayout, ScaledFormat, Tensor};

/// Attention, rope, FFT, codebook matmul and spline activations.
#[path = "nn/seq.rs"]
mod seq;

fn assert_close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

/// The values of a host tensor as f64 (constants read back without compiling).
fn v(t: &Tensor) -> Vec<f64> {
    t.to_vec().iter().map(|&x| x as f64).collect()
}

fn node(t: &Tensor) -> Node {
    t.to_graph().node(t.id()).clone()
}

fn input_node(t: &Tensor, i: usize) -> Node {
    let g = t.to_graph();
    g.node(g.node(t.id()).inputs[i]).clone()
}

fn count(t: &Tensor, pred: impl Fn(&Op) -> bool) -> usize {
    t.to_graph().nodes().iter().filter(|n| pred(&n.op)).count()
}

/// `[m, k] × [k, n]` on flat row-major data.
fn naive_mm(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    out
}

fn transpose2(a: &[f64], r: usize, c: usize) -> Vec<f64> {
    (0..c * r).map(|i| a[(i % r) * c + i / r]).collect()
}

// ---- matmul family ----

#[test]
fn matmul_and_mm_match_a_naive_triple_loop() {
    let (a, b) = (Tensor::randn([3, 4], 1), Tensor::randn([4, 5], 2));
    let want = naive_mm(&v(&a), &v(&b), 3, 4, 5);
    let y = a.matmul(&b);
    assert_eq!(node(&y).op, Op::MatMul);
    assert_close(&y.to_vec(), &want, 1e-5);
    assert_close(&a.mm(&b).to_vec(), &want, 1e-5);
}

#[test]
fn matmul_broadcasts_batch_axes() {
    let (a, b) = (Tensor::randn([2, 3, 4], 3), Tensor::randn([4, 2], 4));
    let (av, bv) = (v(&a), v(&b));
    let mut want = naive_mm(&av[..12], &bv, 3, 4, 2);
    want.extend(naive_mm(&av[12..], &bv, 3, 4, 2));
    let y = a.matmul(&b);
    assert_eq!(y.dims(), vec![2, 3, 2]);
    assert_close(&y.to_vec(), &want, 1e-5);
}

#[test]
fn try_matmul_names_the_op_the_shapes_and_the_fix() {
    let err = Tensor::zeros([2, 3])
        .try_matmul(&Tensor::zeros([4, 5]))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("matmul:"), "{err}");
    assert!(err.contains("inner dimensions differ (3 ≠ 4)"), "{err}");
    assert!(
        err.contains("[2, 3] f32") && err.contains("[4, 5] f32"),
        "{err}"
    );
    assert!(err.contains(".t()"), "{err}");
    let r = std::panic::catch_unwind(|| Tensor::zeros([3]).matmul(&Tensor::zeros([3, 1])));
    assert!(r.is_err());
}

#[test]
fn matmul_t_multiplies_by_the_transposed_rhs() {
    let (a, b) = (Tensor::randn([2, 3], 5), Tensor::randn([4, 3], 6));
    let want = naive_mm(&v(&a), &transpose2(&v(&b), 4, 3), 2, 3, 4);
    let y = a.matmul_t(&b);
    assert_close(&y.to_vec(), &want, 1e-5);
    assert_eq!(input_node(&y, 1).op, Op::Transpose { perm: vec![1, 0] });
    assert!(a.try_matmul_t(&Tensor::zeros([3])).is_err());
}

#[test]
fn linear_emits_a_transpose_and_one_fused_node_and_matches_x_wt_plus_b() {
    let x = Tensor::randn([2, 3], 7);
    let w = Tensor::randn([4, 3], 8);
    let b = Tensor::randn([4], 9);
    let mut want = naive_mm(&v(&x), &transpose2(&v(&w), 4, 3), 2, 3, 4);
    for (i, o) in want.iter_mut().enumerate() {
        *o += v(&b)[i % 4];
    }
    let y = x.linear(&w, &b);
    assert_eq!(node(&y).op, Op::FusedMatMulBiasAct { activation: None });
    assert_eq!(input_node(&y, 1).op, Op::Transpose { perm: vec![1, 0] });
    assert_eq!(count(&y, |o| matches!(o, Op::MatMul)), 0);
    assert_close(&y.to_vec(), &want, 1e-5);

    let r = x.linear_act(&w, &b, Some(Activation::Relu));
    assert_eq!(
        node(&r).op,
        Op::FusedMatMulBiasAct {
            activation: Some(Activation::Relu)
        }
    );
    let relu: Vec<f64> = want.iter().map(|&z| z.max(0.0)).collect();
    assert_close(&r.to_vec(), &relu, 1e-5);
    assert_close(&x.try_linear(&w, &b).unwrap().to_vec(), &want, 1e-5);
}

#[test]
fn matmul_plus_bias_stays_unfused_in_the_graph() {
    let x = Tensor::randn([2, 3], 10);
    let w = Tensor::randn([3, 4], 11);
    let b = Tensor::randn([4], 12);
    let y = &x.matmul(&w) + &b;
    assert_eq!(node(&y).op, Op::Binary(BinaryOp::Add));
    assert_eq!(input_node(&y, 0).op, Op::MatMul);
    assert_eq!(count(&y, |o| matches!(o, Op::FusedMatMulBiasAct { .. })), 0);
}

#[test]
fn try_linear_explains_the_hf_weight_layout() {
    let x = Tensor::zeros([2, 3]);
    let err = x
        .try_linear(&Tensor::zeros([3, 4]), &Tensor::zeros([4]))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("linear:") && err.contains("[out, in]"),
        "{err}"
    );
    let err = x
        .try_linear(&Tensor::zeros([4, 3]), &Tensor::zeros([3]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bias must be [out] = [4]") && err.contains("[3] f32"),
        "{err}"
    );
    let err = x
        .try_linear(&Tensor::zeros([2, 4, 3]), &Tensor::zeros([4]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("2-D"), "{err}");
}

#[test]
fn scaled_matmul_quantizes_each_operand_then_multiplies() {
    let a = Tensor::from_vec(vec![1.0, -2.0, 0.5, 1.5, 2.0, -1.0, 0.25, 1.0], [2, 4]);
    let b = Tensor::from_vec(
        vec![
            1.0, 1.0, -1.0, 2.0, 0.5, -0.5, 1.5, 1.0, 2.0, 0.0, 1.0, -1.0,
        ],
        [3, 4],
    );
    let fmt = ScaledFormat::F8E4M3;
    let y = a.scaled_matmul(&b, fmt, ScaleLayout::PerTensor);
    assert_eq!(y.dims(), vec![2, 3]);
    assert_eq!(y.dtype(), DType::F32);
    let n = node(&y);
    assert_eq!(
        n.op,
        Op::ScaledMatMul {
            lhs_format: fmt,
            rhs_format: fmt,
            scale_layout: ScaleLayout::PerTensor,
            has_bias: false
        }
    );
    let g = y.to_graph();
    let kinds: Vec<&str> = n
        .inputs
        .iter()
        .map(|&i| match &g.node(i).op {
            Op::ScaledQuantize { .. } => "q",
            Op::ScaledQuantScale { .. } => "s",
            other => panic!("unexpected input {other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["q", "q", "s", "s"]);
    // lq quantizes a with ls; rq quantizes b with rs.
    assert_eq!(g.node(n.inputs[0]).inputs[1], n.inputs[2]);
    assert_eq!(g.node(n.inputs[1]).inputs[1], n.inputs[3]);
    // Every value has ≤ 3 significant bits, so e4m3 (3 mantissa bits) keeps it up to
    // the per-tensor scale's rounding; allow e4m3's relative step per product.
    let want = naive_mm(&v(&a), &transpose2(&v(&b), 3, 4), 2, 4, 3);
    let bound: Vec<f64> = naive_mm(
        &v(&a).iter().map(|x| x.abs()).collect::<Vec<_>>(),
        &transpose2(&v(&b), 3, 4)
            .iter()
            .map(|x| x.abs())
            .collect::<Vec<_>>(),
        2,
        4,
        3,
    );
    let got = y.to_vec();
    for i in 0..6 {
        assert!(
            (got[i] as f64 - want[i]).abs() <= 0.13 * bound[i] + 1e-6,
            "element {i}: got {got:?}, want {want:?}"
        );
    }
    let err = a
        .try_scaled_matmul(&Tensor::zeros([4, 3]), fmt, ScaleLayout::PerTensor)
        .unwrap_err()
        .to_string();
    assert!(err.contains("[n, k] (both K-last)"), "{err}");
}

// ---- solve / inv ----

#[test]
fn inv_and_solve_invert_a_small_system() {
    let a = Tensor::from_vec(vec![4.0, 7.0, 2.0, 6.0], [2, 2]);
    // inverse of [[4, 7], [2, 6]] is [[0.6, -0.7], [-0.2, 0.4]].
    let i = a.inv();
    assert_eq!(node(&i).op, Op::DenseSolve);
    assert!(i.shares_graph(&a));
    assert_close(&i.to_vec(), &[0.6, -0.7, -0.2, 0.4], 1e-5);
    let b = Tensor::from_vec(vec![1.0, 2.0], [2]);
    // x = inv(a)·b = [0.6 − 1.4, −0.2 + 0.8].
    assert_close(&a.solve(&b).to_vec(), &[-0.8, 0.6], 1e-5);
    let m = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
    let err = m.try_inv().unwrap_err().to_string();
    assert!(
        err.contains("inv: needs a square matrix") && err.contains("[2, 3] f32"),
        "{err}"
    );
    assert!(a.try_solve(&Tensor::zeros([3])).is_err());
}

#[test]
fn inv_of_a_batch_inverts_each_matrix() {
    let a = Tensor::from_vec(vec![2.0, 0.0, 0.0, 4.0, 1.0, 1.0, 0.0, 1.0], [2, 2, 2]);
    assert_close(
        &a.inv().to_vec(),
        &[0.5, 0.0, 0.0, 0.25, 1.0, -1.0, 0.0, 1.0],
        1e-5,
    );
}

// ---- norms and losses ----

#[test]
fn layer_norm_and_rms_norm_match_their_formulas() {
    let x = Tensor::randn([3, 5], 13);
    let gamma = Tensor::randn([5], 14);
    let beta = Tensor::randn([5], 15);
    let (xv, g, b) = (v(&x), v(&gamma), v(&beta));
    let eps = 1e-5;
    let (mut ln, mut rms) = (vec![], vec![]);
    for r in 0..3 {
        let row = &xv[r * 5..r * 5 + 5];
        let mean = row.iter().sum::<f64>() / 5.0;
        let var = row.iter().map(|z| (z - mean).powi(2)).sum::<f64>() / 5.0;
        let ms = row.iter().map(|z| z * z).sum::<f64>() / 5.0;
        for c in 0..5 {
            ln.push((row[c] - mean) / (var + eps).sqrt() * g[c] + b[c]);
            rms.push(row[c] / (ms + eps).sqrt() * g[c] + b[c]);
        }
    }
    let y = x.layer_norm(&gamma, &beta, eps as f32);
    assert_eq!(
        node(&y).op,
        Op::LayerNorm {
            axis: -1,
            eps: 1e-5
        }
    );
    assert_close(&y.to_vec(), &ln, 1e-4);
    let z = x.rms_norm(&gamma, &beta, eps as f32);
    assert_eq!(
        node(&z).op,
        Op::RmsNorm {
            axis: -1,
            eps: 1e-5
        }
    );
    assert_close(&z.to_vec(), &rms, 1e-4);
    let err = x
        .try_layer_norm(&Tensor::zeros([4]), &beta, 1e-5)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("layer_norm:") && err.contains("gamma"),
        "{err}"
    );
    assert!(x.try_rms_norm(&gamma, &Tensor::zeros([2]), 1e-5).is_err());
}

fn logsumexp(row: &[f64]) -> f64 {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    m + row.iter().map(|z| (z - m).exp()).sum::<f64>().ln()
}

#[test]
fn cross_entropies_are_logsumexp_minus_the_target_logit() {
    let logits = Tensor::randn([3, 4], 16);
    let lv = v(&logits);
    let targets = Tensor::from_vec(
        vec![0.0, 1.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 1.0],
        [3, 4],
    );
    let tv = v(&targets);
    let dense: Vec<f64> = (0..3)
        .map(|r| {
            let row = &lv[r * 4..r * 4 + 4];
            logsumexp(row) - (0..4).map(|c| tv[r * 4 + c] * row[c]).sum::<f64>()
        })
        .collect();
    let y = logits.cross_entropy(&targets);
    assert_eq!(node(&y).op, Op::SoftmaxCrossEntropy);
    assert_eq!(y.dims(), vec![3]);
    assert_close(&y.to_vec(), &dense, 1e-5);

    let labels = Tensor::from_vec(vec![2.0, 0.0, 3.0], [3]);
    let sparse: Vec<f64> = [2usize, 0, 3]
        .iter()
        .enumerate()
        .map(|(r, &c)| logsumexp(&lv[r * 4..r * 4 + 4]) - lv[r * 4 + c])
        .collect();
    let z = logits.softmax_cross_entropy_with_logits(&labels);
    assert_eq!(node(&z).op, Op::SoftmaxCrossEntropyWithLogits);
    assert_close(&z.to_vec(), &sparse, 1e-5);
    let err = logits
        .try_cross_entropy(&Tensor::zeros([3]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("softmax_cross_entropy_with_logits"), "{err}");
    assert!(
        logits
            .try_softmax_cross_entropy_with_logits(&Tensor::zeros([4]))
            .is_err()
    );
}

// ---- conv / pool ----

struct Conv {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    co: usize,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    g: usize,
}

fn naive_conv(x: &[f64], wt: &[f64], c: &Conv) -> (Vec<usize>, Vec<f64>) {
    let out = |a: usize| (([c.h, c.w][a] + 2 * c.p[a] - c.d[a] * (c.k[a] - 1) - 1) / c.s[a]) + 1;
    let (oh, ow) = (out(0), out(1));
    let (cg, og) = (c.c / c.g, c.co / c.g);
    let mut y = vec![0.0; c.n * c.co * oh * ow];
    for n in 0..c.n {
        for co in 0..c.co {
            let grp = co / og;
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = 0.0;
                    for ci in 0..cg {
                        for ki in 0..c.k[0] {
                            for kj in 0..c.k[1] {
                                let yy = (i * c.s[0] + ki * c.d[0]) as i64 - c.p[0] as i64;
                                let xx = (j * c.s[1] + kj * c.d[1]) as i64 - c.p[1] as i64;
                                if yy < 0 || xx < 0 || yy >= c.h as i64 || xx >= c.w as i64 {
                                    continue;
                                }
                                let ch = grp * cg + ci;
                                let xi = ((n * c.c + ch) * c.h + yy as usize) * c.w + xx as usize;
                                let wi = ((co * cg + ci) * c.k[0] + ki) * c.k[1] + kj;
                                acc += x[xi] * wt[wi];
                            }
                        }
                    }
                    y[((n * c.co + co) * oh + i) * ow + j] = acc;
                }
            }
        }
    }
    (vec![c.n, c.co, oh, ow], y)
}

#[test]
fn conv2d_matches_a_naive_convolution_with_stride_padding_dilation_and_groups() {
    let cases = [
        Conv {
            n: 1,
            c: 2,
            h: 5,
            w: 5,
            co: 3,
            k: [3, 3],
            s: [1, 1],
            p: [1, 1],
            d: [1, 1],
            g: 1,
        },
        Conv {
            n: 2,
            c: 4,
            h: 6,
            w: 5,
            co: 2,
            k: [3, 2],
            s: [2, 1],
            p: [1, 0],
            d: [1, 2],
            g: 2,
        },
    ];
    for (t, c) in cases.iter().enumerate() {
        let x = Tensor::randn([c.n, c.c, c.h, c.w], 20 + t as u64);
        let w = Tensor::randn([c.co, c.c / c.g, c.k[0], c.k[1]], 30 + t as u64);
        let (dims, want) = naive_conv(&v(&x), &v(&w), c);
        let y = x.conv2d(&w, c.k, c.s, c.p, c.d, c.g);
        assert_eq!(y.dims(), dims, "case {t}");
        assert_eq!(
            node(&y).op,
            Op::Conv {
                kernel_size: c.k.to_vec(),
                stride: c.s.to_vec(),
                padding: c.p.to_vec(),
                dilation: c.d.to_vec(),
                groups: c.g
            }
        );
        assert_close(&y.to_vec(), &want, 1e-4);
    }
    let err = Tensor::zeros([1, 3, 4, 4])
        .try_conv2d(
            &Tensor::zeros([2, 2, 3, 3]),
            [3, 3],
            [1, 1],
            [0, 0],
            [1, 1],
            1,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("conv2d:") && err.contains("groups"),
        "{err}"
    );
}

fn naive_pool(x: &[f64], dims: [usize; 4], k: usize, s: usize, p: usize, max: bool) -> Vec<f64> {
    let [n, c, h, w] = dims;
    let (oh, ow) = ((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1);
    let mut out = vec![];
    for plane in 0..n * c {
        for i in 0..oh {
            for j in 0..ow {
                let mut vals = vec![];
                for a in 0..k {
                    for b in 0..k {
                        let (y, xx) =
                            ((i * s + a) as i64 - p as i64, (j * s + b) as i64 - p as i64);
                        if y >= 0 && xx >= 0 && (y as usize) < h && (xx as usize) < w {
                            vals.push(x[plane * h * w + y as usize * w + xx as usize]);
                        }
                    }
                }
                out.push(if max {
                    vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
                } else {
                    // The divisor is the full window: padding counts as zeros.
                    vals.iter().sum::<f64>() / (k * k) as f64
                });
            }
        }
    }
    out
}

#[test]
fn pools_match_naive_windows() {
    let x = Tensor::randn([2, 2, 5, 5], 40);
    let xv = v(&x);
    for (k, s, p) in [(2, 2, 0), (3, 2, 1), (3, 1, 0)] {
        let mx = x.max_pool2d([k, k], [s, s], [p, p]);
        assert_close(
            &mx.to_vec(),
            &naive_pool(&xv, [2, 2, 5, 5], k, s, p, true),
            1e-6,
        );
        let av = x.avg_pool2d([k, k], [s, s], [p, p]);
        assert_close(
            &av.to_vec(),
            &naive_pool(&xv, [2, 2, 5, 5], k, s, p, false),
            1e-5,
        );
    }
    let y = x.pool2d(ReduceOp::Max, [2, 2], [1, 1], [0, 0]);
    assert!(matches!(
        node(&y).op,
        Op::Pool {
            kind: ReduceOp::Max,
            ..
        }
    ));
    assert_eq!(y.dims(), vec![2, 2, 4, 4]);
    let err = x
        .try_pool2d(ReduceOp::Prod, [2, 2], [1, 1], [0, 0])
        .unwrap_err()
        .to_string();
    assert!(err.contains("Prod") && err.contains("Max, Mean"), "{err}");
}
