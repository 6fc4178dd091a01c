//! matmul, the fused linear layer, dense solve, codebook matmul, scaled matmul.

use crate::{check, check_wrt, constant, op, rand, run, vals};
use rlx_compile::autodiff::append_vjp;
use rlx_ir::{
    Activation, DType, Graph, Op, ScaleLayout, ScaledFormat, Shape, SynthKind, TensorData,
};

#[test]
fn matmul_plain_batched_and_broadcast_batches() {
    let cases: [(&[usize], &[usize]); 6] = [
        (&[2, 3], &[3, 4]),
        (&[1, 3], &[3, 1]),
        (&[2, 2, 3], &[2, 3, 4]),
        (&[2, 2, 3], &[3, 4]),
        (&[2, 1, 2, 3], &[3, 3, 2]),
        (&[1, 2, 3], &[4, 3, 2]),
    ];
    for (i, (a, b)) in cases.into_iter().enumerate() {
        check(
            &format!("matmul{a:?}x{b:?}"),
            vec![("a", rand(a, i as u64)), ("b", rand(b, 10 + i as u64))],
            |g, x| op(g, Op::MatMul, vec![x[0], x[1]]),
        );
    }
}

#[test]
fn linear_with_and_without_each_kind_of_activation() {
    let acts = [
        None,
        Some(Activation::Relu),
        Some(Activation::Gelu),
        Some(Activation::Tanh),
        Some(Activation::Silu),
        Some(Activation::Sigmoid),
    ];
    for (i, act) in acts.into_iter().enumerate() {
        // A rank-1 x ([K], one example) is a valid linear layer too.
        for xd in [&[4][..], &[3, 4][..], &[2, 3, 4][..]] {
            check(
                &format!("linear {act:?} x{xd:?}"),
                vec![
                    ("x", rand(xd, i as u64)),
                    ("w", rand(&[4, 2], 20 + i as u64)),
                    ("b", rand(&[2], 30 + i as u64)),
                ],
                |g, x| {
                    op(
                        g,
                        Op::FusedMatMulBiasAct { activation: act },
                        vec![x[0], x[1], x[2]],
                    )
                },
            );
        }
    }
}

/// A well-conditioned `[.., n, n]` matrix: random plus 3·identity.
fn well_conditioned(batch: &[usize], n: usize, seed: u64) -> TensorData {
    let mut dims = batch.to_vec();
    dims.extend([n, n]);
    let mut v = rand(&dims, seed).to_f64_vec();
    for (i, e) in v.iter_mut().enumerate() {
        let (r, c) = ((i / n) % n, i % n);
        if r == c {
            *e += 3.0;
        }
    }
    TensorData::from_f64(&dims, &v)
}

#[test]
fn solve_differentiates_matrix_and_right_hand_side() {
    check(
        "solve vector rhs",
        vec![("a", well_conditioned(&[], 3, 1)), ("b", rand(&[3], 2))],
        |g, x| op(g, Op::DenseSolve, vec![x[0], x[1]]),
    );
    check(
        "solve matrix rhs",
        vec![("a", well_conditioned(&[], 3, 3)), ("b", rand(&[3, 2], 4))],
        |g, x| op(g, Op::DenseSolve, vec![x[0], x[1]]),
    );
    check(
        "solve batched",
        vec![
            ("a", well_conditioned(&[2], 2, 5)),
            ("b", rand(&[2, 2, 3], 6)),
        ],
        |g, x| op(g, Op::DenseSolve, vec![x[0], x[1]]),
    );
    check(
        "solve batched vector",
        vec![("a", well_conditioned(&[2], 3, 7)), ("b", rand(&[2, 3], 8))],
        |g, x| op(g, Op::DenseSolve, vec![x[0], x[1]]),
    );
}

#[test]
fn synth_matmul_differentiates_x_and_the_codebook() {
    // k = 4, entry_dim 2 → 2 chunks; n = 3 rows; 4 codebook entries (one unused,
    // one used twice in a row).
    let idx = TensorData::from_i64_as(DType::U8, &[3, 2], &[0, 1, 2, 2, 1, 0]);
    for xd in [&[2, 4][..], &[2, 2, 4][..], &[4][..]] {
        check(
            &format!("synth x{xd:?}"),
            vec![
                ("x", rand(xd, 1)),
                ("idx", idx.clone()),
                ("cb", rand(&[4, 2], 2)),
            ],
            |g, x| {
                op(
                    g,
                    Op::SynthMatMul {
                        kind: SynthKind::Codebook {
                            entry_dim: 2,
                            num_entries: 4,
                        },
                    },
                    vec![x[0], x[1], x[2]],
                )
            },
        );
    }
}

/// `deq(q)` as f64: exactly what the straight-through gradient multiplies by.
fn dequantized(x: &TensorData, format: ScaledFormat, layout: ScaleLayout) -> Vec<f64> {
    let mut g = Graph::new("deq");
    let xi = g.input("x", x.shape());
    let s = op(
        &mut g,
        Op::ScaledQuantScale {
            format,
            scale_layout: layout,
        },
        vec![xi],
    );
    let q = op(
        &mut g,
        Op::ScaledQuantize {
            format,
            scale_layout: layout,
        },
        vec![xi, s],
    );
    g.set_outputs(vec![q, s]);
    let out = run(&g, &[("x", x.clone())]);
    let codes = &out[0].bytes;
    let scales = out[1].to_f64_vec();
    let k = *x.dims.last().unwrap();
    codes
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let scale = match layout {
                ScaleLayout::PerTensor => scales[0],
                ScaleLayout::BlockMxE8M0 { block } => {
                    let per_row = k / block as usize;
                    (scales[(i / k) * per_row + (i % k) / block as usize] - 127.0).exp2()
                }
                ScaleLayout::Nvfp4 { group } => {
                    let per_row = k / group as usize;
                    let code = scales[(i / k) * per_row + (i % k) / group as usize];
                    ScaledFormat::F8E4M3.decode(code as u8) as f64
                }
            };
            format.decode(c) as f64 * scale
        })
        .collect()
}

#[test]
fn scaled_matmul_is_straight_through_to_both_float_operands_and_the_bias() {
    let layouts = [
        ScaleLayout::PerTensor,
        ScaleLayout::BlockMxE8M0 { block: 4 },
        ScaleLayout::Nvfp4 { group: 4 },
    ];
    let (m, n, k) = (2, 3, 8);
    for layout in layouts {
        let fmt = ScaledFormat::F8E4M3;
        let xa = TensorData::from_f32(&[m, k], &rand(&[m, k], 1).to_f32_vec());
        let xb = TensorData::from_f32(&[n, k], &rand(&[n, k], 2).to_f32_vec());
        let mut g = Graph::new("smm");
        let a = g.input("a", xa.shape());
        let b = g.input("b", xb.shape());
        let bias = g.input("bias", Shape::new(&[n], DType::F32));
        let quant = |g: &mut Graph, x| {
            let s = op(
                g,
                Op::ScaledQuantScale {
                    format: fmt,
                    scale_layout: layout,
                },
                vec![x],
            );
            let q = op(
                g,
                Op::ScaledQuantize {
                    format: fmt,
                    scale_layout: layout,
                },
                vec![x, s],
            );
            (q, s)
        };
        let (qa, sa) = quant(&mut g, a);
        let (qb, sb) = quant(&mut g, b);
        let y = op(
            &mut g,
            Op::ScaledMatMul {
                lhs_format: fmt,
                rhs_format: fmt,
                scale_layout: layout,
                has_bias: true,
            },
            vec![qa, qb, sa, sb, bias],
        );
        let ct = g.input("ct", Shape::new(&[m, n], DType::F32));
        let grads = append_vjp(&mut g, &[y], &[ct], &[a, b, bias]).unwrap();
        g.set_outputs(grads.into_iter().map(|x| x.unwrap()).collect());
        g.verify().unwrap();
        let r: Vec<f64> = rand(&[m, n], 3).to_f64_vec();
        let ctd = TensorData::from_f64_as(DType::F32, &[m, n], &r);
        let out = run(
            &g,
            &[
                ("a", xa.clone()),
                ("b", xb.clone()),
                ("bias", TensorData::from_f32(&[n], &[0.1, 0.2, 0.3])),
                ("ct", ctd),
            ],
        );
        let (da, db) = (dequantized(&xa, fmt, layout), dequantized(&xb, fmt, layout));
        let r32: Vec<f64> = r.iter().map(|v| *v as f32 as f64).collect();
        // ga = ct · deq(b), gb = ctᵀ · deq(a), gbias = Σ_rows ct
        for i in 0..m {
            for t in 0..k {
                let want: f64 = (0..n).map(|j| r32[i * n + j] * db[j * k + t]).sum();
                let got = out[0].to_f64_vec()[i * k + t];
                assert!(
                    (got - want).abs() < 1e-5,
                    "{layout:?} ga[{i},{t}]: {got} vs {want}"
                );
            }
        }
        for j in 0..n {
            for t in 0..k {
                let want: f64 = (0..m).map(|i| r32[i * n + j] * da[i * k + t]).sum();
                let got = out[1].to_f64_vec()[j * k + t];
                assert!(
                    (got - want).abs() < 1e-5,
                    "{layout:?} gb[{j},{t}]: {got} vs {want}"
                );
            }
            let want: f64 = (0..m).map(|i| r32[i * n + j]).sum();
            assert!((out[2].to_f64_vec()[j] - want).abs() < 1e-6);
        }
    }
}

#[test]
fn matmul_with_a_constant_operand_only_builds_the_needed_side() {
    check_wrt(
        "x @ const",
        vec![("x", rand(&[2, 3], 1))],
        &["x"],
        |g, x| {
            let w = constant(g, vals(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
            op(g, Op::MatMul, vec![x[0], w])
        },
    );
    let mut g = Graph::new("lean");
    let x = g.input("x", Shape::new(&[2, 3], DType::F64));
    let w = constant(&mut g, vals(&[3, 2], &[1.0; 6]));
    let y = op(&mut g, Op::MatMul, vec![x, w]);
    let ct = g.input("ct", Shape::new(&[2, 2], DType::F64));
    let before = g.len();
    append_vjp(&mut g, &[y], &[ct], &[x]).unwrap();
    // g·wᵀ: one transpose and one matmul, nothing for the constant.
    assert_eq!(g.len() - before, 2, "{g}");
}

#[test]
fn linear_gelu_recomputes_the_preactivation_but_relu_reads_the_output() {
    for (act, extra) in [(Activation::Relu, 0), (Activation::Gelu, 1)] {
        let mut g = Graph::new("lin");
        let x = g.input("x", Shape::new(&[2, 3], DType::F64));
        let w = g.input("w", Shape::new(&[3, 2], DType::F64));
        let b = g.input("b", Shape::new(&[2], DType::F64));
        let y = op(
            &mut g,
            Op::FusedMatMulBiasAct {
                activation: Some(act),
            },
            vec![x, w, b],
        );
        let ct = g.input("ct", Shape::new(&[2, 2], DType::F64));
        let before = g.len();
        append_vjp(&mut g, &[y], &[ct], &[x]).unwrap();
        let recomputed = g.nodes()[before..]
            .iter()
            .filter(|n| matches!(n.op, Op::FusedMatMulBiasAct { .. }))
            .count();
        assert_eq!(recomputed, extra, "{act:?}");
    }
}

#[test]
fn a_weight_shared_by_batches_gets_one_flat_product_not_a_batched_one_and_a_sum() {
    // x [2, 3, 4] · w [4, 5]: dW = reshape(x, [6, 4])ᵀ · reshape(ct, [6, 5]).
    for fused in [false, true] {
        let mut g = Graph::new("flat");
        let x = g.input("x", Shape::new(&[2, 3, 4], DType::F64));
        let w = g.input("w", Shape::new(&[4, 5], DType::F64));
        let y = if fused {
            let b = constant(&mut g, vals(&[5], &[0.5; 5]));
            op(
                &mut g,
                Op::FusedMatMulBiasAct { activation: None },
                vec![x, w, b],
            )
        } else {
            op(&mut g, Op::MatMul, vec![x, w])
        };
        let ct = g.input("ct", Shape::new(&[2, 3, 5], DType::F64));
        let before = g.len();
        append_vjp(&mut g, &[y], &[ct], &[w]).unwrap();
        let new = &g.nodes()[before..];
        let products: Vec<Vec<usize>> = new
            .iter()
            .filter(|n| matches!(n.op, Op::MatMul))
            .map(|n| {
                n.inputs
                    .iter()
                    .flat_map(|&i| g.shape(i).static_dims().unwrap())
                    .collect()
            })
            .collect();
        assert_eq!(products, vec![vec![4, 6, 6, 5]], "fused {fused}: {g}");
        assert!(
            !new.iter().any(|n| matches!(n.op, Op::Reduce { .. })),
            "no sum over the batch axis: {g}"
        );
    }
    check(
        "matmul [2,3,4]x[4,5]",
        vec![("a", rand(&[2, 3, 4], 7)), ("b", rand(&[4, 5], 8))],
        |g, x| op(g, Op::MatMul, vec![x[0], x[1]]),
    );
}
