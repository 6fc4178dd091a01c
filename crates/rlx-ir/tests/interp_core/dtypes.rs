//! The same ops swept over every real dtype: floats round the exact f64
//! result once, integers wrap to their width, movement is bit-exact.

use super::*;
use rlx_ir::{Activation, BinaryOp, ReduceOp};

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
const INTS: [DType; 6] = [
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U32,
];

/// Wrap an exact integer to the width and signedness of `dt`.
fn wrap(dt: DType, v: i64) -> i64 {
    match dt {
        DType::I8 => v as i8 as i64,
        DType::I16 => v as i16 as i64,
        DType::I32 => v as i32 as i64,
        DType::U8 => v as u8 as i64,
        DType::U32 => v as u32 as i64,
        _ => v,
    }
}

#[test]
fn float_binary_ops_round_the_exact_result_once_in_every_float_dtype() {
    let xs = [1.0 / 3.0, -2.7, 1000.1, 0.0078125, 65000.0];
    let ys = [3.1, 0.37, -7.9, 1.5, 2.0];
    for dt in FLOATS {
        let x = real(dt, &[5], &xs);
        let y = real(dt, &[5], &ys);
        // The operands as stored in dt.
        let (xd, yd) = (x.to_f64_vec(), y.to_f64_vec());
        for (b, f) in [
            (BinaryOp::Add, (|a, b| a + b) as fn(f64, f64) -> f64),
            (BinaryOp::Sub, |a, b| a - b),
            (BinaryOp::Mul, |a, b| a * b),
            (BinaryOp::Div, |a, b| a / b),
        ] {
            let got = eval(Op::Binary(b), &[x.clone(), y.clone()]);
            assert_eq!(got.dtype, dt);
            let exact: Vec<f64> = xd.iter().zip(&yd).map(|(a, b)| f(*a, *b)).collect();
            assert_same(&got.to_f64_vec(), &rounded(dt, &exact));
        }
    }
}

#[test]
fn integer_binary_ops_wrap_in_every_integer_dtype() {
    let xs = [100, -100, 77, 250, -3, 40000];
    let ys = [100, 29, -5, 9, 7, 50000];
    for dt in INTS {
        let x = ints(dt, &[6], &xs);
        let y = ints(dt, &[6], &ys);
        let (xv, yv) = (x.to_i64_vec(), y.to_i64_vec());
        for (b, f) in [
            (BinaryOp::Add, (|a, b| a + b) as fn(i64, i64) -> i64),
            (BinaryOp::Sub, |a, b| a - b),
            (BinaryOp::Mul, |a, b| a * b),
            (BinaryOp::Div, |a, b| a / b),
            (BinaryOp::Mod, |a, b| a % b),
            (BinaryOp::BitXor, |a, b| a ^ b),
        ] {
            let got = eval(Op::Binary(b), &[x.clone(), y.clone()]);
            assert_eq!(got.dtype, dt);
            let want: Vec<i64> = xv
                .iter()
                .zip(&yv)
                .map(|(a, c)| wrap(dt, f(*a, *c)))
                .collect();
            assert_eq!(got.to_i64_vec(), want, "{} on {dt}", b.name());
        }
    }
}

#[test]
fn int_lhs_with_float_rhs_truncates_the_rhs_first() {
    let got = eval(
        Op::Binary(BinaryOp::Add),
        &[
            ints(DType::I32, &[3], &[10, 10, 10]),
            f32s(&[3], &[2.7, -2.7, f32::NAN]),
        ],
    );
    assert_eq!(got.dtype, DType::I32);
    assert_eq!(got.to_i64_vec(), [12, 8, 10]);
}

#[test]
fn neg_and_relu_in_every_signed_dtype() {
    for dt in FLOATS.into_iter().chain(INTS) {
        let x = real(dt, &[3], &[-2.0, 0.0, 3.0]);
        assert_same(
            &eval(Op::Activation(Activation::Relu), std::slice::from_ref(&x)).to_f64_vec(),
            &[0.0, 0.0, 3.0],
        );
        let neg = eval(Op::Activation(Activation::Neg), &[x]).to_f64_vec();
        let want = if dt.is_unsigned() {
            // Stored −2 saturated to 0; −3 wraps.
            vec![0.0, 0.0, (wrap(dt, -3)) as f64]
        } else {
            vec![2.0, 0.0, -3.0]
        };
        assert_same(&neg, &want);
    }
}

#[test]
fn reductions_and_matmul_in_every_real_dtype() {
    let v = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0];
    for dt in FLOATS.into_iter().chain(INTS) {
        let x = real(dt, &[2, 3], &v);
        let sum = eval(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dim: false,
            },
            std::slice::from_ref(&x),
        );
        assert_eq!(sum.dtype, dt);
        assert_same(&sum.to_f64_vec(), &[8.0, 15.0]);
        let max = eval(
            Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![0],
                keep_dim: true,
            },
            std::slice::from_ref(&x),
        );
        assert_same(&max.to_f64_vec(), &[3.0, 5.0, 9.0]);
        let am = eval(
            Op::ArgMax {
                axis: 1,
                keep_dim: false,
            },
            std::slice::from_ref(&x),
        );
        assert_same(&am.to_f64_vec(), &[2.0, 2.0]);
        let xt = eval(Op::Transpose { perm: vec![1, 0] }, std::slice::from_ref(&x));
        let g = eval(Op::MatMul, &[x, xt]);
        // [[3,1,4],[1,5,9]] · its transpose = [[26, 44], [44, 107]].
        let want = [26.0, 44.0, 44.0, 107.0];
        let want: Vec<f64> = if dt.is_int() {
            want.iter().map(|w| wrap(dt, *w as i64) as f64).collect()
        } else {
            rounded(dt, &want)
        };
        assert_same(&g.to_f64_vec(), &want);
    }
}

#[test]
fn movement_ops_are_bit_exact_in_every_dtype() {
    for dt in DType::ALL {
        // Distinct byte patterns per element, whatever they decode to.
        let w = dt.size_bytes();
        let bytes: Vec<u8> = (0..6 * w)
            .map(|i| {
                if dt == DType::Bool {
                    (i % 2) as u8
                } else {
                    (i * 37 + 11) as u8
                }
            })
            .collect();
        let x = TensorData::new(dt, &[2, 3], bytes.clone()).unwrap();
        let elem = |i: usize| bytes[i * w..(i + 1) * w].to_vec();
        let t = eval(Op::Transpose { perm: vec![1, 0] }, std::slice::from_ref(&x));
        let want: Vec<u8> = [0, 3, 1, 4, 2, 5].into_iter().flat_map(elem).collect();
        assert_eq!(t.bytes, want, "transpose {dt}");
        let g = eval(
            Op::Gather { axis: 1 },
            &[x.clone(), ints(DType::I32, &[2], &[2, -3])],
        );
        let want: Vec<u8> = [2, 0, 5, 3].into_iter().flat_map(elem).collect();
        assert_eq!(g.bytes, want, "gather {dt}");
        let c = eval(Op::Concat { axis: 0 }, &[x.clone(), x.clone()]);
        assert_eq!(
            c.bytes,
            [bytes.clone(), bytes.clone()].concat(),
            "concat {dt}"
        );
        let n = eval(
            Op::Narrow {
                axis: 1,
                start: 1,
                len: 1,
            },
            &[x],
        );
        let want: Vec<u8> = [1, 4].into_iter().flat_map(elem).collect();
        assert_eq!(n.bytes, want, "narrow {dt}");
    }
}

#[test]
fn casts_round_trip_through_complex() {
    let x = f64s(&[2], &[1.5, -2.0]);
    let c = eval(Op::Cast { to: DType::C64 }, &[x]);
    assert_eq!(c.dtype, DType::C64);
    assert_same(&c.to_f64_vec(), &[1.5, 0.0, -2.0, 0.0]);
    let z = TensorData::from_f64_as(DType::C128, &[3], &[1.5, 7.0, 0.0, 0.0, 0.0, -1.0]);
    let re = eval(Op::Cast { to: DType::F32 }, std::slice::from_ref(&z));
    assert_same(&re.to_f64_vec(), &[1.5, 0.0, 0.0]);
    let b = eval(Op::Cast { to: DType::Bool }, &[z]);
    assert_eq!(b.bytes, [1, 0, 1]);
}
