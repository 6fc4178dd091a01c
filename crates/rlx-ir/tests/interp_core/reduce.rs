//! Reduce, ArgMax/ArgMin and Cumsum.

use super::*;
use rlx_ir::ReduceOp;

fn red(op: ReduceOp, axes: &[usize], keep_dim: bool, x: TensorData) -> TensorData {
    eval(
        Op::Reduce {
            op,
            axes: axes.to_vec(),
            keep_dim,
        },
        &[x],
    )
}

/// 2×3×2 data with distinct values: x[a, b, c] = (−1)^(a+b+c) · (6a + 2b + c + 1).
fn cube() -> (Vec<f64>, TensorData) {
    let mut v = Vec::new();
    for a in 0..2 {
        for b in 0..3 {
            for c in 0..2 {
                let s = if (a + b + c) % 2 == 0 { 1.0 } else { -1.0 };
                v.push(s * (6 * a + 2 * b + c + 1) as f64);
            }
        }
    }
    let t = f64s(&[2, 3, 2], &v);
    (v, t)
}

#[test]
fn reduce_kinds_over_one_and_several_axes_match_naive_loops() {
    let (v, x) = cube();
    let at = |a: usize, b: usize, c: usize| v[a * 6 + b * 2 + c];
    // Over axes [0, 2]: one value per b.
    let groups: Vec<Vec<f64>> = (0..3)
        .map(|b| vec![at(0, b, 0), at(0, b, 1), at(1, b, 0), at(1, b, 1)])
        .collect();
    let fold = |f: fn(&[f64]) -> f64| -> Vec<f64> { groups.iter().map(|g| f(g)).collect() };
    let sum = |g: &[f64]| g.iter().sum::<f64>();
    assert_same(
        &red(ReduceOp::Sum, &[0, 2], false, x.clone()).to_f64_vec(),
        &fold(sum),
    );
    assert_same(
        &red(ReduceOp::Mean, &[0, 2], false, x.clone()).to_f64_vec(),
        &fold(|g| g.iter().sum::<f64>() / 4.0),
    );
    assert_same(
        &red(ReduceOp::Prod, &[0, 2], false, x.clone()).to_f64_vec(),
        &fold(|g| g.iter().product()),
    );
    assert_same(
        &red(ReduceOp::Max, &[0, 2], false, x.clone()).to_f64_vec(),
        &fold(|g| g.iter().cloned().fold(f64::MIN, f64::max)),
    );
    assert_same(
        &red(ReduceOp::Min, &[0, 2], false, x.clone()).to_f64_vec(),
        &fold(|g| g.iter().cloned().fold(f64::MAX, f64::min)),
    );
    // Over the last axis only.
    let last: Vec<f64> = (0..6).map(|r| v[2 * r] + v[2 * r + 1]).collect();
    assert_same(
        &red(ReduceOp::Sum, &[2], false, x.clone()).to_f64_vec(),
        &last,
    );
    // Over every axis gives a rank-0 result.
    let all = red(ReduceOp::Sum, &[0, 1, 2], false, x);
    assert!(all.dims.is_empty());
    assert_same(&all.to_f64_vec(), &[v.iter().sum()]);
}

#[test]
fn keep_dim_keeps_size_one_axes_with_the_same_values() {
    let (_, x) = cube();
    let a = red(ReduceOp::Max, &[1], true, x.clone());
    let b = red(ReduceOp::Max, &[1], false, x);
    assert_eq!(a.dims, [2, 1, 2]);
    assert_eq!(b.dims, [2, 2]);
    assert_eq!(a.bytes, b.bytes);
    let m = red(
        ReduceOp::Sum,
        &[0, 1],
        true,
        f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]),
    );
    assert_eq!(m.dims, [1, 1]);
    assert_same(&m.to_f64_vec(), &[10.0]);
}

#[test]
fn empty_axes_list_is_an_identity_copy() {
    let x = real(DType::BF16, &[2, 2], &[1.0, -2.0, 3.5, 0.25]);
    for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Prod] {
        assert_eq!(red(op, &[], false, x.clone()), x);
        assert_eq!(red(op, &[], true, x.clone()), x);
    }
}

#[test]
fn reducing_a_size_zero_axis_gives_identities_or_an_error() {
    let x = f32s(&[2, 0], &[]);
    assert_same(
        &red(ReduceOp::Sum, &[1], false, x.clone()).to_f64_vec(),
        &[0.0, 0.0],
    );
    assert_same(
        &red(ReduceOp::Prod, &[1], false, x.clone()).to_f64_vec(),
        &[1.0, 1.0],
    );
    assert_same(
        &red(ReduceOp::Mean, &[1], false, x.clone()).to_f64_vec(),
        &[f64::NAN, f64::NAN],
    );
    for (op, name) in [(ReduceOp::Max, "reduce_max"), (ReduceOp::Min, "reduce_min")] {
        let msg = eval_err(
            Op::Reduce {
                op,
                axes: vec![1],
                keep_dim: false,
            },
            std::slice::from_ref(&x),
        );
        assert!(msg.contains(&format!("{name} of an empty axis")), "{msg}");
    }
    // Reducing the non-empty axis of an empty tensor gives an empty result.
    let e = red(ReduceOp::Max, &[0], false, x);
    assert_eq!(e.dims, [0]);
    let i = ints(DType::I32, &[0], &[]);
    assert_eq!(red(ReduceOp::Sum, &[0], false, i.clone()).to_i64_vec(), [0]);
    assert_eq!(
        red(ReduceOp::Prod, &[0], false, i.clone()).to_i64_vec(),
        [1]
    );
    let msg = eval_err(
        Op::Reduce {
            op: ReduceOp::Mean,
            axes: vec![0],
            keep_dim: false,
        },
        &[i],
    );
    assert!(msg.contains("reduce_mean of an empty axis"), "{msg}");
}

#[test]
fn max_and_min_reductions_propagate_nan_and_handle_infinities() {
    let x = f32s(
        &[2, 3],
        &[1.0, f32::NAN, 3.0, f32::NEG_INFINITY, f32::INFINITY, 0.0],
    );
    assert_same(
        &red(ReduceOp::Max, &[1], false, x.clone()).to_f64_vec(),
        &[f64::NAN, f64::INFINITY],
    );
    assert_same(
        &red(ReduceOp::Min, &[1], false, x.clone()).to_f64_vec(),
        &[f64::NAN, f64::NEG_INFINITY],
    );
    assert_same(
        &red(ReduceOp::Sum, &[1], false, x.clone()).to_f64_vec(),
        &[f64::NAN, f64::NAN],
    );
    assert_same(
        &red(ReduceOp::Max, &[0], false, x).to_f64_vec(),
        &[1.0, f64::NAN, 3.0],
    );
}

#[test]
fn integer_reductions_wrap_and_mean_truncates_toward_zero() {
    let x = ints(DType::I32, &[2, 2], &[-7, 0, 7, 0]);
    assert_eq!(
        red(ReduceOp::Mean, &[1], false, x.clone()).to_i64_vec(),
        [-3, 3]
    );
    assert_eq!(
        red(ReduceOp::Max, &[0], false, x.clone()).to_i64_vec(),
        [7, 0]
    );
    assert_eq!(red(ReduceOp::Min, &[0], false, x).to_i64_vec(), [-7, 0]);
    let u = ints(DType::U8, &[2], &[200, 100]);
    assert_eq!(
        red(ReduceOp::Sum, &[0], false, u.clone()).to_i64_vec(),
        [44]
    );
    assert_eq!(
        red(ReduceOp::Prod, &[0], false, u.clone()).to_i64_vec(),
        [(20000 % 256) as i64]
    );
    assert_eq!(red(ReduceOp::Mean, &[0], false, u).to_i64_vec(), [150]);
    // The mean of large i64 values is exact (no overflow of the sum).
    let big = ints(DType::I64, &[3], &[i64::MAX, i64::MAX, i64::MAX - 3]);
    assert_eq!(
        red(ReduceOp::Mean, &[0], false, big.clone()).to_i64_vec(),
        [i64::MAX - 1]
    );
    assert_eq!(
        red(ReduceOp::Sum, &[0], false, big).to_i64_vec(),
        [i64::MAX - 5]
    );
}

#[test]
fn bool_max_is_any_and_min_is_all() {
    let b = TensorData::from_bool(&[3, 2], &[true, false, false, false, true, true]);
    let any = red(ReduceOp::Max, &[1], false, b.clone());
    assert_eq!(any.dtype, DType::Bool);
    assert_eq!(any.bytes, [1, 0, 1]);
    assert_eq!(red(ReduceOp::Min, &[1], false, b).bytes, [0, 0, 1]);
}

#[test]
fn float_sums_accumulate_in_f64_and_round_once() {
    // f16: 2048 + 1 + 1 = 2050 in f64, exact in f16 (summing in f16 gives 2048).
    let h = real(DType::F16, &[3], &[2048.0, 1.0, 1.0]);
    assert_same(&red(ReduceOp::Sum, &[0], false, h).to_f64_vec(), &[2050.0]);
    // f32: 1 + 1e-8 + … (1000×) keeps the small terms.
    let mut v = vec![1.0f32];
    v.extend(std::iter::repeat_n(1e-8f32, 1000));
    let s = red(ReduceOp::Sum, &[0], false, f32s(&[1001], &v)).to_f64_vec()[0];
    let want = (1.0 + 1000.0 * 1e-8f32 as f64) as f32 as f64;
    assert_eq!(s, want);
    let m = red(
        ReduceOp::Mean,
        &[0],
        false,
        real(DType::BF16, &[3], &[1.0, 2.0, 2.0]),
    );
    assert_same(&m.to_f64_vec(), &rounded(DType::BF16, &[5.0 / 3.0]));
}

fn arg(is_max: bool, axis: usize, keep_dim: bool, x: TensorData) -> TensorData {
    let op = if is_max {
        Op::ArgMax { axis, keep_dim }
    } else {
        Op::ArgMin { axis, keep_dim }
    };
    eval(op, &[x])
}

#[test]
fn argmax_and_argmin_return_the_first_extremum() {
    let x = f32s(&[2, 4], &[1.0, 5.0, 5.0, -2.0, 0.0, -3.0, 7.0, -3.0]);
    let mx = arg(true, 1, false, x.clone());
    assert_eq!(mx.dtype, DType::F32);
    assert_same(&mx.to_f64_vec(), &[1.0, 2.0]);
    assert_same(&arg(false, 1, false, x.clone()).to_f64_vec(), &[3.0, 1.0]);
    let col = arg(true, 0, true, x);
    assert_eq!(col.dims, [1, 4]);
    assert_same(&col.to_f64_vec(), &[0.0, 0.0, 1.0, 0.0]);
}

#[test]
fn argmax_treats_the_first_nan_as_the_extremum_and_orders_infinities() {
    let x = f32s(
        &[3, 3],
        &[
            1.0,
            f32::NAN,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            2.0,
        ],
    );
    assert_same(
        &arg(true, 1, false, x.clone()).to_f64_vec(),
        &[1.0, 1.0, 2.0],
    );
    assert_same(&arg(false, 1, false, x).to_f64_vec(), &[1.0, 0.0, 0.0]);
}

#[test]
fn argmax_on_integers_encodes_the_index_in_the_input_dtype() {
    let x = ints(DType::I32, &[3], &[-5, 9, 9]);
    let a = arg(true, 0, false, x.clone());
    assert_eq!(a.dtype, DType::I32);
    assert!(a.dims.is_empty());
    assert_eq!(a.to_i64_vec(), [1]);
    assert_eq!(arg(false, 0, false, x).to_i64_vec(), [0]);
    let h = arg(true, 0, false, real(DType::F16, &[3], &[0.0, -1.0, 0.5]));
    assert_eq!(h.dtype, DType::F16);
    assert_same(&h.to_f64_vec(), &[2.0]);
}

#[test]
fn cumsum_inclusive_exclusive_and_negative_axis() {
    let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let c = |axis, exclusive| {
        eval(Op::Cumsum { axis, exclusive }, std::slice::from_ref(&x)).to_f64_vec()
    };
    assert_same(&c(1, false), &[1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
    assert_same(&c(-1, false), &[1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
    assert_same(&c(1, true), &[0.0, 1.0, 3.0, 0.0, 4.0, 9.0]);
    assert_same(&c(0, false), &[1.0, 2.0, 3.0, 5.0, 7.0, 9.0]);
    assert_same(&c(-2, true), &[0.0, 0.0, 0.0, 1.0, 2.0, 3.0]);
    let i = eval(
        Op::Cumsum {
            axis: 0,
            exclusive: false,
        },
        &[ints(DType::I8, &[3], &[100, 27, 1])],
    );
    assert_eq!(i.to_i64_vec(), [100, 127, -128]);
    // The running sum stays in f64: f16 outputs 2048, 2049 → 2048 (tie), 2050.
    let h = eval(
        Op::Cumsum {
            axis: 0,
            exclusive: false,
        },
        &[real(DType::F16, &[3], &[2048.0, 1.0, 1.0])],
    );
    assert_same(&h.to_f64_vec(), &[2048.0, 2048.0, 2050.0]);
}
