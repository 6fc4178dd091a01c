//! Activations, binary ops (with broadcasting), where, casts, straight-through ops.

use crate::{check, check_wrt, constant, op, rand, rand_in, run, scalar, uniform, vals};
use rlx_compile::autodiff::{append_vjp, grad_graph};
use rlx_ir::{Activation, BinaryOp, CmpOp, DType, Graph, Op, Shape, TensorData};

/// Points away from every activation's kinks (0 and ±3), including both sides of ±3.
fn away_from_kinks(dims: &[usize], seed: u64) -> TensorData {
    let n: usize = dims.iter().product();
    let base = [
        -4.5, -2.2, -0.7, -0.3, 0.4, 0.9, 1.6, 2.6, 3.8, -1.3, 0.15, -0.15,
    ];
    let jitter = uniform(n, seed, -0.05, 0.05);
    let v: Vec<f64> = (0..n).map(|i| base[i % base.len()] + jitter[i]).collect();
    TensorData::from_f64(dims, &v)
}

fn data_for(a: Activation, dims: &[usize], seed: u64) -> TensorData {
    match a {
        Activation::Log | Activation::Sqrt | Activation::Rsqrt => rand_in(dims, seed, 0.2, 3.0),
        Activation::Tan => rand_in(dims, seed, -1.2, 1.2),
        Activation::Recip => {
            let v: Vec<f64> = away_from_kinks(dims, seed).to_f64_vec();
            TensorData::from_f64(
                dims,
                &v.iter().map(|x| x + x.signum() * 0.3).collect::<Vec<_>>(),
            )
        }
        _ => away_from_kinks(dims, seed),
    }
}

#[test]
fn every_smooth_activation_matches_finite_differences() {
    let piecewise_constant = [
        Activation::Floor,
        Activation::Ceil,
        Activation::Sign,
        Activation::Round,
    ];
    for (i, a) in Activation::ALL.into_iter().enumerate() {
        if piecewise_constant.contains(&a) {
            continue;
        }
        for dims in [&[12][..], &[2, 3, 2][..]] {
            check(
                &format!("{}{dims:?}", a.name()),
                vec![("x", data_for(a, dims, i as u64))],
                |g, x| op(g, Op::Activation(a), vec![x[0]]),
            );
        }
    }
}

#[test]
fn round_is_straight_through_and_round_to_format_too() {
    for opx in [
        Op::Activation(Activation::Round),
        Op::RoundToFormat {
            exp_bits: 4,
            man_bits: 3,
            max_normal: 448.0,
        },
    ] {
        let mut g = Graph::new("ste");
        let x = g.input("x", Shape::new(&[4], DType::F64));
        let y = op(&mut g, opx.clone(), vec![x]);
        let ct = g.input("ct", Shape::new(&[4], DType::F64));
        let gx = append_vjp(&mut g, &[y], &[ct], &[x]).unwrap()[0].unwrap();
        g.set_outputs(vec![gx]);
        let r = vals(&[4], &[0.5, -1.5, 2.0, 3.25]);
        let out = run(
            &g,
            &[("x", vals(&[4], &[0.4, 1.6, -2.5, 7.1])), ("ct", r.clone())],
        );
        assert_eq!(out[0].to_f64_vec(), r.to_f64_vec(), "{}", opx.name());
    }
}

#[test]
fn arithmetic_with_broadcasting_and_size_one_axes() {
    let shapes: [(&[usize], &[usize]); 5] = [
        (&[2, 3], &[2, 3]),
        (&[2, 3], &[3]),
        (&[2, 1, 4], &[3, 1]),
        (&[1, 3], &[2, 1]),
        (&[3], &[]),
    ];
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Atan2,
    ];
    for (k, (ls, rs)) in shapes.into_iter().enumerate() {
        for b in ops {
            let r = if b == BinaryOp::Div {
                rand_in(rs, 7 + k as u64, 0.5, 2.0)
            } else {
                rand(rs, 7 + k as u64)
            };
            check(
                &format!("{}{ls:?}{rs:?}", b.name()),
                vec![("l", rand(ls, k as u64)), ("r", r.clone())],
                |g, x| op(g, Op::Binary(b), vec![x[0], x[1]]),
            );
            // and with the operands swapped, so the rhs is the larger one
            let l = if b == BinaryOp::Div { rand(rs, 3) } else { r };
            let den = rand_in(ls, 11, 0.5, 2.0);
            check(
                &format!("{}{rs:?}{ls:?}", b.name()),
                vec![("l", l), ("r", den)],
                |g, x| op(g, Op::Binary(b), vec![x[0], x[1]]),
            );
        }
    }
}

#[test]
fn pow_differentiates_base_and_exponent() {
    check(
        "pow",
        vec![
            ("l", rand_in(&[2, 3], 1, 0.3, 2.0)),
            ("r", rand_in(&[3], 2, -1.5, 2.5)),
        ],
        |g, x| op(g, Op::Binary(BinaryOp::Pow), vec![x[0], x[1]]),
    );
    // a constant exponent (pow_scalar) on negative bases
    check("pow_scalar", vec![("l", rand(&[5], 3))], |g, x| {
        let e = scalar(g, 3.0);
        op(g, Op::Binary(BinaryOp::Pow), vec![x[0], e])
    });
}

#[test]
fn pow_exponent_gradient_is_zero_at_a_zero_base() {
    let mut g = Graph::new("pow0");
    let l = g.input("l", Shape::new(&[2], DType::F64));
    let r = g.input("r", Shape::new(&[2], DType::F64));
    let y = op(&mut g, Op::Binary(BinaryOp::Pow), vec![l, r]);
    g.set_outputs(vec![y]);
    let dg = grad_graph(&g, &[l, r]).unwrap();
    let out = run(
        &dg,
        &[
            ("l", vals(&[2], &[0.0, 2.0])),
            ("r", vals(&[2], &[2.0, 3.0])),
        ],
    );
    assert_eq!(out[0].to_f64_vec(), vec![0.0, 12.0]);
    assert_eq!(out[1].to_f64_vec()[0], 0.0);
    assert!((out[1].to_f64_vec()[1] - 8.0 * 2f64.ln()).abs() < 1e-12);
}

#[test]
fn fmod_differentiates_both_operands() {
    check(
        "rem",
        vec![
            ("l", vals(&[4], &[5.3, -7.1, 2.2, 9.7])),
            ("r", vals(&[4], &[2.0, 3.0, -1.5, 4.1])),
        ],
        |g, x| op(g, Op::Binary(BinaryOp::Mod), vec![x[0], x[1]]),
    );
}

#[test]
fn maximum_and_minimum_route_to_the_winner_with_broadcasting() {
    for b in [BinaryOp::Max, BinaryOp::Min] {
        check(
            b.name(),
            vec![("l", rand(&[3, 4], 5)), ("r", rand(&[4], 6))],
            |g, x| op(g, Op::Binary(b), vec![x[0], x[1]]),
        );
    }
}

#[test]
fn maximum_splits_ties_evenly() {
    // clamp_min(x, 1): at x == 1 exactly, each side gets half.
    let mut g = Graph::new("tie");
    let x = g.input("x", Shape::new(&[3], DType::F64));
    let one = scalar(&mut g, 1.0);
    let y = op(&mut g, Op::Binary(BinaryOp::Max), vec![x, one]);
    let s = crate::sum_all(&mut g, y);
    g.set_outputs(vec![s]);
    let dg = grad_graph(&g, &[x]).unwrap();
    let out = run(&dg, &[("x", vals(&[3], &[0.5, 1.0, 2.0]))]);
    assert_eq!(out[0].to_f64_vec(), vec![0.0, 0.5, 1.0]);
}

#[test]
fn where_sends_the_cotangent_to_the_selected_branch() {
    check_wrt(
        "where",
        vec![
            ("a", rand(&[2, 3], 1)),
            ("b", rand(&[3], 2)),
            ("m", rand(&[2, 1], 3)),
        ],
        &["a", "b"],
        |g, x| {
            let zero = scalar(g, 0.0);
            let mask = op(g, Op::Compare(CmpOp::Gt), vec![x[2], zero]);
            op(g, Op::Where, vec![mask, x[0], x[1]])
        },
    );
}

#[test]
fn casts_between_floats_cast_the_cotangent_back() {
    // exp computed in f32: d/dx = exp(x) to f32 precision, returned as f64.
    let mut g = Graph::new("cast");
    let x = g.input("x", Shape::new(&[3], DType::F64));
    let f = op(&mut g, Op::Cast { to: DType::F32 }, vec![x]);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![f]);
    let y = op(&mut g, Op::Cast { to: DType::F64 }, vec![e]);
    let l = crate::sum_all(&mut g, y);
    g.set_outputs(vec![l]);
    let dg = grad_graph(&g, &[x]).unwrap();
    assert_eq!(dg.shape(dg.outputs[0]).dtype(), DType::F64);
    let xs = [0.5, -1.0, 2.0];
    let out = run(&dg, &[("x", vals(&[3], &xs))]).remove(0).to_f64_vec();
    for (got, x) in out.iter().zip(xs) {
        assert!(
            (got - x.exp()).abs() < 1e-6 * x.exp(),
            "{got} vs {}",
            x.exp()
        );
    }
}

#[test]
fn a_lower_precision_rhs_gets_its_own_dtype_back() {
    // f64 lhs · f32 rhs: the rhs gradient is summed in f64 and cast to f32.
    let mut g = Graph::new("mixed");
    let l = g.input("l", Shape::new(&[2, 2], DType::F64));
    let r = g.input("r", Shape::new(&[2], DType::F32));
    let y = op(&mut g, Op::Binary(BinaryOp::Mul), vec![l, r]);
    g.set_outputs(vec![y]);
    let dg = grad_graph(&g, &[r]).unwrap();
    assert_eq!(dg.shape(dg.outputs[0]), &Shape::new(&[2], DType::F32));
    let out = run(
        &dg,
        &[
            ("l", vals(&[2, 2], &[1.0, 2.0, 3.0, 4.0])),
            ("r", TensorData::from_f32(&[2], &[1.0, 1.0])),
        ],
    );
    assert_eq!(out[0].to_f64_vec(), vec![4.0, 6.0]);
}

#[test]
fn a_value_used_twice_accumulates_both_contributions() {
    check("x*sin(x)+x", vec![("x", rand(&[4], 8))], |g, x| {
        let s = op(g, Op::Activation(Activation::Sin), vec![x[0]]);
        let m = op(g, Op::Binary(BinaryOp::Mul), vec![x[0], s]);
        op(g, Op::Binary(BinaryOp::Add), vec![m, x[0]])
    });
    // x·x reads x in both operand slots of one node
    check("x*x", vec![("x", rand(&[4], 9))], |g, x| {
        op(g, Op::Binary(BinaryOp::Mul), vec![x[0], x[0]])
    });
}

#[test]
fn the_backward_pass_of_sum_x_x_sin_x_is_minimal() {
    // d/dx Σ x·x·sin x = 2x·sin x + x²·cos x. The ones seed of the sum is never
    // multiplied in, and x·x gives one term 2·(g·x): the backward pass is cos, three
    // multiplies and one add (the W10 benchmark's gradient).
    let n = 300; // above the size at which the seed is a broadcast scalar
    let mut g = Graph::new("w10");
    let x = g.input("x", Shape::new(&[n], DType::F64));
    let xx = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, x]);
    let s = op(&mut g, Op::Activation(Activation::Sin), vec![x]);
    let p = op(&mut g, Op::Binary(BinaryOp::Mul), vec![xx, s]);
    let l = crate::sum_all(&mut g, p);
    g.set_outputs(vec![l]);
    let dg = grad_graph(&g, &[x]).unwrap();
    let count = |f: &dyn Fn(&Op) -> bool| dg.nodes().iter().filter(|n| f(&n.op)).count();
    let fwd_muls = 2;
    assert_eq!(
        count(&|o| *o == Op::Binary(BinaryOp::Mul)) - fwd_muls,
        3,
        "{dg}"
    );
    assert_eq!(count(&|o| *o == Op::Binary(BinaryOp::Add)), 1, "{dg}");
    assert_eq!(count(&|o| *o == Op::Activation(Activation::Cos)), 1, "{dg}");
    let xv = uniform(n, 3, -3.0, 3.0);
    let got = run(&dg, &[("x", vals(&[n], &xv))]).remove(0).to_f64_vec();
    for (gi, xi) in got.iter().zip(&xv) {
        let want = 2.0 * xi * xi.sin() + xi * xi * xi.cos();
        assert!((gi - want).abs() < 1e-12, "{gi} vs {want}");
    }
}

#[test]
fn stop_gradient_blocks_one_path_and_keeps_the_other() {
    // y = x·stop(x): dy/dx = stop(x) = x (not 2x).
    let mut g = Graph::new("sg");
    let x = g.input("x", Shape::new(&[2], DType::F64));
    let s = op(&mut g, Op::StopGradient, vec![x]);
    let y = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, s]);
    let l = crate::sum_all(&mut g, y);
    g.set_outputs(vec![l]);
    let dg = grad_graph(&g, &[x]).unwrap();
    let out = run(&dg, &[("x", vals(&[2], &[3.0, -2.0]))]);
    assert_eq!(out[0].to_f64_vec(), vec![3.0, -2.0]);
}

#[test]
fn check_with_respect_to_a_subset_of_inputs() {
    check_wrt(
        "only_b",
        vec![("a", rand(&[3], 1)), ("b", rand(&[3], 2))],
        &["b"],
        |g, x| {
            let c = constant(g, vals(&[3], &[1.0, 2.0, 3.0]));
            let ab = op(g, Op::Binary(BinaryOp::Mul), vec![x[0], x[1]]);
            op(g, Op::Binary(BinaryOp::Mul), vec![ab, c])
        },
    );
}
