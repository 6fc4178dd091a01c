//! Convolution and pooling lowered and run by the loop IR's interpreter against the
//! `rlx-ir` oracle: pooling bit for bit (max, exact small sums), convolution within the
//! f32 fold's error.

use super::tests::run_loops;
use crate::{CompileOptions, compile};
use rlx_ir::{DType, DimBinding, Graph, Op, ReduceOp, Shape, TensorData, interp};

fn values(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| (((i + seed) * 7919) % 97) as f64 * 0.0625 - 3.0)
        .collect()
}

fn run(g: &Graph, inputs: &[(&str, TensorData)]) -> (Vec<f64>, Vec<f64>) {
    let p = compile(g, &CompileOptions::default()).unwrap();
    let got = run_loops(&p, inputs, &DimBinding::new()).unwrap_or_else(|e| panic!("{e}"));
    let want = interp::run(g, inputs).unwrap();
    assert_eq!(got[0].dims, want[0].dims);
    (got[0].to_f64_vec(), want[0].to_f64_vec())
}

#[test]
fn convolutions_with_padding_stride_dilation_groups_and_bias_match_the_oracle() {
    // (x dims, w dims, kernel, stride, padding, dilation, groups, bias)
    type Case = (
        Vec<usize>,
        Vec<usize>,
        Vec<usize>,
        Vec<usize>,
        Vec<usize>,
        Vec<usize>,
        usize,
        bool,
    );
    let cases: Vec<Case> = vec![
        (
            vec![2, 3, 9, 8],
            vec![4, 3, 3, 3],
            vec![3, 3],
            vec![1, 1],
            vec![1, 1],
            vec![1, 1],
            1,
            false,
        ),
        (
            vec![1, 4, 11, 7],
            vec![6, 2, 3, 2],
            vec![3, 2],
            vec![2, 1],
            vec![1, 0],
            vec![2, 1],
            2,
            true,
        ),
        (
            vec![3, 2, 13],
            vec![5, 2, 4],
            vec![4],
            vec![3],
            vec![2],
            vec![1],
            1,
            true,
        ),
    ];
    for (xd, wd, k, s, p, d, groups, bias) in cases {
        let mut g = Graph::new("conv");
        let x = g.input("x", Shape::new(&xd, DType::F32));
        let w = g.input("w", Shape::new(&wd, DType::F32));
        let mut ins = vec![x, w];
        if bias {
            ins.push(g.input("b", Shape::new(&[wd[0]], DType::F32)));
        }
        let conv = Op::Conv {
            kernel_size: k,
            stride: s,
            padding: p,
            dilation: d,
            groups,
        };
        let y = g.add_op(conv, ins).unwrap();
        g.set_outputs(vec![y]);
        let nx: usize = xd.iter().product();
        let nw: usize = wd.iter().product();
        let mut inputs = vec![
            (
                "x",
                TensorData::from_f64_as(DType::F32, &xd, &values(nx, 1)),
            ),
            (
                "w",
                TensorData::from_f64_as(DType::F32, &wd, &values(nw, 2)),
            ),
        ];
        if bias {
            inputs.push((
                "b",
                TensorData::from_f64_as(DType::F32, &[wd[0]], &values(wd[0], 3)),
            ));
        }
        let (got, want) = run(&g, &inputs);
        let terms: usize = wd[1..].iter().product();
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            // |x·w| ≤ 9 per term; one f32 rounding per term.
            let tol = terms as f64 * 9.0 * 2f64.powi(-23);
            assert!(
                (a - b).abs() <= tol,
                "{xd:?} element {i}: loop IR {a}, oracle {b}"
            );
        }
    }
}

#[test]
fn pooling_max_mean_and_sum_with_padding_equal_the_oracle_bit_for_bit() {
    for kind in [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum] {
        for dt in [DType::F32, DType::F16] {
            let xd = [2, 3, 7, 6];
            let mut g = Graph::new("pool");
            let x = g.input("x", Shape::new(&xd, dt));
            let pool = Op::Pool {
                kind,
                kernel_size: vec![3, 2],
                stride: vec![2, 2],
                padding: vec![1, 1],
            };
            let y = g.add_op(pool, vec![x]).unwrap();
            g.set_outputs(vec![y]);
            let mut v = values(252, 5);
            // A NaN wins its windows; −0 before +0 stays −0 (the first maximal entry).
            v[10] = f64::NAN;
            v[0] = -0.0;
            v[1] = 0.0;
            v[6] = -0.0;
            let inputs = [("x", TensorData::from_f64_as(dt, &xd, &v))];
            let (got, want) = run(&g, &inputs);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                let same = (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
                assert!(
                    same,
                    "{kind:?} {dt:?} element {i}: loop IR {a:?}, oracle {b:?}"
                );
            }
        }
    }
}
