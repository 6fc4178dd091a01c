//! Reductions, statistics, index reductions, running sums and softmax:
//! values against hand-computed results, shapes, IR, and error messages.
#![cfg(feature = "eval")]

use rlx_ir::op::{BinaryOp, ReduceOp};
use rlx_ir::{Node, Op};
use rlx_tensor::{Activation, DType, Tensor};

fn assert_close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g as f64 == w
        } else {
            (g as f64 - w).abs() <= tol * (1.0 + w.abs())
        };
        assert!(
            ok,
            "element {i}: got {g}, want {w} (got {got:?}, want {want:?})"
        );
    }
}

fn node(t: &Tensor) -> Node {
    t.to_graph().node(t.id()).clone()
}

/// The non-constant ops of `t`'s graph, in order.
fn ops(t: &Tensor) -> Vec<Op> {
    t.to_graph()
        .nodes()
        .iter()
        .map(|n| n.op.clone())
        .filter(|op| !matches!(op, Op::Constant { .. }))
        .collect()
}

/// [[1, 2, 3], [4, 5, 6]]
fn m23() -> Tensor {
    Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])
}

#[test]
fn sum_mean_max_min_prod_along_each_axis() {
    let x = m23();
    assert_eq!(x.sum([0], false).to_vec(), vec![5.0, 7.0, 9.0]);
    assert_eq!(x.sum([1], false).to_vec(), vec![6.0, 15.0]);
    assert_eq!(x.mean([0], false).to_vec(), vec![2.5, 3.5, 4.5]);
    assert_eq!(x.mean([1], false).to_vec(), vec![2.0, 5.0]);
    assert_eq!(x.max([0], false).to_vec(), vec![4.0, 5.0, 6.0]);
    assert_eq!(x.max([1], false).to_vec(), vec![3.0, 6.0]);
    assert_eq!(x.min([0], false).to_vec(), vec![1.0, 2.0, 3.0]);
    assert_eq!(x.min([1], false).to_vec(), vec![1.0, 4.0]);
    assert_eq!(x.prod([0], false).to_vec(), vec![4.0, 10.0, 18.0]);
    assert_eq!(x.prod([1], false).to_vec(), vec![6.0, 120.0]);
}

#[test]
fn reductions_over_several_axes_accept_arrays_and_vecs() {
    let x = m23();
    let s = x.sum([0, 1], false);
    assert_eq!(s.rank(), 0);
    assert_eq!(s.item(), 21.0);
    assert_eq!(x.sum(vec![1, 0], false).item(), 21.0);
    assert_eq!(x.max(vec![0, 1], false).item(), 6.0);
    assert_eq!(x.prod([0, 1], false).item(), 720.0);
    let axes: Vec<usize> = vec![1];
    assert_eq!(x.mean(axes, false).to_vec(), vec![2.0, 5.0]);
}

#[test]
fn keep_dim_keeps_reduced_axes_with_size_one() {
    let x = Tensor::ones([2, 3, 4]);
    assert_eq!(x.sum([1], true).dims(), vec![2, 1, 4]);
    assert_eq!(x.sum([1], false).dims(), vec![2, 4]);
    assert_eq!(x.mean([0, 2], true).dims(), vec![1, 3, 1]);
    assert_eq!(x.max([0, 2], false).dims(), vec![3]);
    let k = m23().sum([1], true);
    assert_eq!(k.to_vec(), vec![6.0, 15.0]);
    // keep_dim results broadcast back against the input.
    let centered = &m23() - &m23().mean([1], true);
    assert_eq!(centered.to_vec(), vec![-1.0, 0.0, 1.0, -1.0, 0.0, 1.0]);
}

#[test]
fn each_reduction_is_one_reduce_node() {
    // A fresh input per case, so each graph holds only that reduction.
    for (op, t) in [
        (ReduceOp::Sum, m23().sum([1], true)),
        (ReduceOp::Mean, m23().mean([1], true)),
        (ReduceOp::Max, m23().max([1], true)),
        (ReduceOp::Min, m23().min([1], true)),
        (ReduceOp::Prod, m23().prod([1], true)),
    ] {
        assert_eq!(
            node(&t).op,
            Op::Reduce {
                op,
                axes: vec![1],
                keep_dim: true
            }
        );
        assert_eq!(ops(&t).len(), 1);
    }
}

#[test]
fn empty_axis_list_is_the_identity() {
    let x = m23();
    let s = x.sum(Vec::<usize>::new(), false);
    assert_eq!(s.dims(), vec![2, 3]);
    assert_eq!(s.to_vec(), x.to_vec());
}

#[test]
fn integer_reductions_stay_integer() {
    let x = Tensor::from_i64([1, -2, 3, 4, 5, -6], [2, 3]);
    let s = x.sum([1], false);
    assert_eq!(s.dtype(), DType::I64);
    assert_eq!(s.to_vec_i64(), vec![2, 3]);
    assert_eq!(x.max([0], false).to_vec_i64(), vec![4, 5, 3]);
    assert_eq!(x.prod([1], false).to_vec_i64(), vec![-6, -120]);
}

#[test]
fn max_and_min_propagate_nan_and_handle_infinities() {
    let x = Tensor::from_vec(
        vec![1.0, f32::NAN, 3.0, f32::NEG_INFINITY, f32::INFINITY, 0.0],
        [2, 3],
    );
    assert_close(&x.max([1], false).to_vec(), &[f64::NAN, f64::INFINITY], 0.0);
    assert_close(
        &x.min([1], false).to_vec(),
        &[f64::NAN, f64::NEG_INFINITY],
        0.0,
    );
    assert_close(&x.sum([1], false).to_vec(), &[f64::NAN, f64::NAN], 0.0);
}

#[test]
fn sum_all_and_mean_all_reduce_to_rank0() {
    let x = m23();
    let s = x.sum_all();
    assert_eq!(s.rank(), 0);
    assert_eq!(s.item(), 21.0);
    assert_eq!(
        node(&s).op,
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![0, 1],
            keep_dim: false
        }
    );
    assert_eq!(x.mean_all().item(), 3.5);
    // A rank-0 input comes back unchanged (no new node).
    assert_eq!(s.sum_all().id(), s.id());
    assert_eq!(s.mean_all().id(), s.id());
}

// ------------------------------------------------------------ statistics

#[test]
fn var_is_population_variance_built_from_primitives() {
    // Rows [1, 2, 3] and [4, 5, 6]: mean 2 and 5, squared deviations 1, 0, 1 → 2/3.
    let x = m23();
    let v = x.var([1], false);
    assert_close(&v.to_vec(), &[2.0 / 3.0, 2.0 / 3.0], 1e-6);
    // Columns: [1, 4] → mean 2.5, deviations ±1.5 → 2.25.
    assert_close(&x.var([0], false).to_vec(), &[2.25; 3], 1e-6);
    assert_eq!(x.var([1], true).dims(), vec![2, 1]);
    // All of 1..6: mean 3.5, Σ(d²) = 17.5, / 6.
    assert_close(&x.var([0, 1], false).to_vec(), &[17.5 / 6.0], 1e-6);
    let mean = |keep_dim| Op::Reduce {
        op: ReduceOp::Mean,
        axes: vec![1],
        keep_dim,
    };
    assert_eq!(
        ops(&m23().var([1], false)),
        vec![
            mean(true),
            Op::Binary(BinaryOp::Sub),
            Op::Binary(BinaryOp::Mul),
            mean(false)
        ]
    );
}

#[test]
fn std_is_sqrt_of_var() {
    let x = Tensor::from_vec(vec![2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], [8]);
    // The textbook example: mean 5, population variance 4, std 2.
    assert_close(&x.var([0], false).to_vec(), &[4.0], 1e-6);
    let s = x.std([0], false);
    assert_close(&s.to_vec(), &[2.0], 1e-6);
    assert_eq!(node(&s).op, Op::Activation(Activation::Sqrt));
    assert_eq!(x.std([0], true).dims(), vec![1]);
}

#[test]
fn norm_is_sqrt_of_sum_of_squares() {
    let x = Tensor::from_vec(vec![3.0, 4.0, 0.0, 5.0, 12.0, 0.0], [2, 3]);
    assert_close(&x.norm([1], false).to_vec(), &[5.0, 13.0], 1e-6);
    assert_close(&x.norm([0, 1], false).to_vec(), &[194f64.sqrt()], 1e-6);
    assert_eq!(x.norm([1], true).dims(), vec![2, 1]);
    assert_eq!(
        ops(&m23().norm([1], false)),
        vec![
            Op::Binary(BinaryOp::Mul),
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dim: false
            },
            Op::Activation(Activation::Sqrt)
        ]
    );
}

#[test]
fn composite_try_twins_name_themselves() {
    let x = m23();
    for (name, r) in [
        ("var", x.try_var([2], false)),
        ("std", x.try_std([5], true)),
        ("norm", x.try_norm([0, 0], false)),
        ("logsumexp", x.try_logsumexp(2, false)),
    ] {
        let e = r.unwrap_err().to_string();
        assert!(e.starts_with(&format!("{name}:")), "{e}");
        assert!(e.contains("[2, 3]"), "{e}");
    }
    assert!(x.try_var([1], false).is_ok());
}

#[test]
#[should_panic(expected = "var: axis 2 is out of range")]
fn var_panics_on_a_bad_axis() {
    let _ = m23().var([2], false);
}

// ------------------------------------------------------------- logsumexp

#[test]
fn logsumexp_matches_the_naive_formula_on_small_values() {
    let x = m23();
    let lse = |a: f64, b: f64, c: f64| (a.exp() + b.exp() + c.exp()).ln();
    assert_close(
        &x.logsumexp(1, false).to_vec(),
        &[lse(1.0, 2.0, 3.0), lse(4.0, 5.0, 6.0)],
        1e-6,
    );
    let k = x.logsumexp(0, true);
    assert_eq!(k.dims(), vec![1, 3]);
    let pair = |a: f64, b: f64| (a.exp() + b.exp()).ln();
    assert_close(
        &k.to_vec(),
        &[pair(1.0, 4.0), pair(2.0, 5.0), pair(3.0, 6.0)],
        1e-6,
    );
    assert_eq!(x.logsumexp(1, false).dims(), vec![2]);
}

#[test]
fn logsumexp_is_stable_for_large_and_infinite_inputs() {
    // exp(1000) overflows f32 and f64; the shifted form does not.
    let x = Tensor::from_vec(vec![1000.0, 1000.0, -1000.0, -1000.0], [2, 2]);
    assert_close(
        &x.logsumexp(1, false).to_vec(),
        &[1000.0 + 2f64.ln(), -1000.0 + 2f64.ln()],
        1e-6,
    );
    let inf = f32::INFINITY;
    let y = Tensor::from_vec(vec![-inf, -inf, 0.0, -inf, 1.0, inf], [3, 2]);
    assert_close(
        &y.logsumexp(1, false).to_vec(),
        &[f64::NEG_INFINITY, 0.0, f64::INFINITY],
        1e-6,
    );
    let n = Tensor::from_vec(vec![f32::NAN, 1.0], [2]);
    assert_close(&n.logsumexp(0, false).to_vec(), &[f64::NAN], 0.0);
}

// ---------------------------------------------------------- argmax / argmin

#[test]
fn argmax_argmin_indices_read_as_integers() {
    let x = Tensor::from_vec(vec![1.0, 5.0, 2.0, 7.0, 0.0, 3.0], [2, 3]);
    let i = x.argmax(1, false);
    assert_eq!(
        node(&i).op,
        Op::ArgMax {
            axis: 1,
            keep_dim: false
        }
    );
    assert_eq!(i.dtype(), DType::F32, "indices keep the input dtype");
    assert_eq!(i.dims(), vec![2]);
    assert_eq!(i.to_vec_i64(), vec![1, 0]);
    assert_eq!(x.argmax(0, false).to_vec_i64(), vec![1, 0, 1]);
    assert_eq!(x.argmin(1, false).to_vec_i64(), vec![0, 1]);
    assert_eq!(x.argmin(0, false).to_vec_i64(), vec![0, 1, 0]);
    assert_eq!(
        node(&x.argmin(0, false)).op,
        Op::ArgMin {
            axis: 0,
            keep_dim: false
        }
    );
    let k = x.argmax(1, true);
    assert_eq!(k.dims(), vec![2, 1]);
    assert_eq!(k.to_vec_i64(), vec![1, 0]);
}

#[test]
fn argmax_picks_the_first_of_ties_and_nan_wins() {
    let x = Tensor::from_vec(vec![2.0, 2.0, 1.0, 1.0, f32::NAN, 9.0], [2, 3]);
    assert_eq!(x.argmax(1, false).to_vec_i64(), vec![0, 1]);
    assert_eq!(x.argmin(1, false).to_vec_i64(), vec![2, 1]);
    let i = Tensor::from_i64([3, 9, 9, -1], [4]);
    assert_eq!(i.argmax(0, false).to_vec_i64(), vec![1]);
    assert_eq!(i.argmin(0, false).to_vec_i64(), vec![3]);
}

#[test]
fn try_argmax_and_argmin_report_bad_axes() {
    let x = m23();
    let e = x.try_argmax(2, false).unwrap_err().to_string();
    assert!(
        e.starts_with("argmax:") && e.contains("axis 2") && e.contains("[2, 3]"),
        "{e}"
    );
    let e = x.try_argmin(3, true).unwrap_err().to_string();
    assert!(e.starts_with("argmin:"), "{e}");
}

// ------------------------------------------------------------------ cumsum

#[test]
fn cumsum_inclusive_and_exclusive_along_each_axis() {
    let x = m23();
    let c = x.cumsum(1, false);
    assert_eq!(
        node(&c).op,
        Op::Cumsum {
            axis: 1,
            exclusive: false
        }
    );
    assert_eq!(c.to_vec(), vec![1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
    assert_eq!(
        x.cumsum(1, true).to_vec(),
        vec![0.0, 1.0, 3.0, 0.0, 4.0, 9.0]
    );
    assert_eq!(
        x.cumsum(0, false).to_vec(),
        vec![1.0, 2.0, 3.0, 5.0, 7.0, 9.0]
    );
    assert_eq!(
        x.cumsum(0, true).to_vec(),
        vec![0.0, 0.0, 0.0, 1.0, 2.0, 3.0]
    );
    assert_eq!(x.cumsum(-1, false).to_vec(), x.cumsum(1, false).to_vec());
    assert_eq!(x.cumsum(-2, true).to_vec(), x.cumsum(0, true).to_vec());
    let i = Tensor::from_i64([1, 2, 3], [3]);
    assert_eq!(i.cumsum(0, true).to_vec_i64(), vec![0, 1, 3]);
}

#[test]
fn try_cumsum_reports_the_valid_axis_range() {
    let e = m23().try_cumsum(2, false).unwrap_err().to_string();
    assert!(e.starts_with("cumsum:") && e.contains("-2..2"), "{e}");
}

// ----------------------------------------------------------------- softmax

#[test]
fn softmax_rows_sum_to_one_and_match_the_formula() {
    let x = m23();
    let p = x.softmax(1);
    assert_eq!(node(&p).op, Op::Softmax { axis: 1 });
    let (e1, e2) = (1f64.exp(), 2f64.exp());
    let z = 1.0 + e1 + e2;
    let row = [1.0 / z, e1 / z, e2 / z];
    let want: Vec<f64> = row.iter().chain(row.iter()).copied().collect();
    assert_close(&p.to_vec(), &want, 1e-6);
    // Down the columns: each column is [a, a+3] → [1/(1+e³), e³/(1+e³)].
    let e3 = 3f64.exp();
    let (lo, hi) = (1.0 / (1.0 + e3), e3 / (1.0 + e3));
    assert_close(&x.softmax(0).to_vec(), &[lo, lo, lo, hi, hi, hi], 1e-6);
}

#[test]
fn softmax_negative_axis_counts_from_the_end() {
    let x = Tensor::randn([2, 3, 4], 7);
    assert_eq!(node(&x.softmax(-1)).op, Op::Softmax { axis: -1 });
    assert_eq!(x.softmax(-1).to_vec(), x.softmax(2).to_vec());
    assert_eq!(x.softmax(-3).to_vec(), x.softmax(0).to_vec());
    let sums = x.softmax(-2).sum([1], false).to_vec();
    assert_close(&sums, &[1.0; 8], 1e-6);
}

#[test]
fn softmax_is_stable_and_propagates_nan() {
    let x = Tensor::from_vec(vec![1000.0, 1000.0, f32::NEG_INFINITY, 0.0], [2, 2]);
    assert_close(&x.softmax(-1).to_vec(), &[0.5, 0.5, 0.0, 1.0], 1e-6);
    let n = Tensor::from_vec(vec![f32::NAN, 1.0, 2.0, 3.0], [2, 2]);
    assert_close(
        &n.softmax(1).to_vec(),
        &[
            f64::NAN,
            f64::NAN,
            1.0 / (1.0 + 1f64.exp()),
            1f64.exp() / (1.0 + 1f64.exp()),
        ],
        1e-6,
    );
}

#[test]
fn log_softmax_equals_log_of_softmax() {
    let x = m23();
    let l = x.log_softmax(-1);
    assert_eq!(node(&l).op, Op::LogSoftmax { axis: -1 });
    let lse = |a: f64, b: f64, c: f64| (a.exp() + b.exp() + c.exp()).ln();
    let (r0, r1) = (lse(1.0, 2.0, 3.0), lse(4.0, 5.0, 6.0));
    assert_close(
        &l.to_vec(),
        &[1.0 - r0, 2.0 - r0, 3.0 - r0, 4.0 - r1, 5.0 - r1, 6.0 - r1],
        1e-6,
    );
    // Stable where log(softmax(x)) underflows to −∞.
    let big = Tensor::from_vec(vec![0.0, 200.0], [2]);
    assert_close(&big.log_softmax(0).to_vec(), &[-200.0, 0.0], 1e-6);
}

#[test]
fn try_softmax_and_reduce_twins_report_op_shape_and_fix() {
    let x = m23();
    let e = x.try_softmax(2).unwrap_err().to_string();
    assert!(e.starts_with("softmax:") && e.contains("-2..2"), "{e}");
    let e = x.try_log_softmax(-3).unwrap_err().to_string();
    assert!(e.starts_with("log_softmax:"), "{e}");
    let e = Tensor::from_i64([1, 2], [2])
        .try_softmax(0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("floating-point") && e.contains("cast"), "{e}");
    let e = x.try_sum([2], false).unwrap_err().to_string();
    assert!(e.starts_with("reduce_sum:"), "{e}");
    assert!(
        e.contains("axis 2") && e.contains("[2, 3]") && e.contains("0..2"),
        "{e}"
    );
    let e = x.try_mean([1, 1], false).unwrap_err().to_string();
    assert!(
        e.starts_with("reduce_mean:") && e.contains("listed twice"),
        "{e}"
    );
    assert!(x.try_max([3], true).is_err());
    assert!(x.try_min([3], true).is_err());
    assert!(x.try_prod([3], true).is_err());
    assert_eq!(x.try_sum([0], false).unwrap().to_vec(), vec![5.0, 7.0, 9.0]);
}

#[test]
#[should_panic(expected = "reduce_max: axis 5 is out of range")]
fn max_panics_on_a_bad_axis() {
    let _ = m23().max([5], false);
}

#[test]
#[should_panic(expected = "softmax:")]
fn softmax_panics_on_a_bad_axis() {
    let _ = m23().softmax(4);
}
