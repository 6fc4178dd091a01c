//! Strided-view copies (`narrow` on the last axis, `transpose`, both) against the oracle,
//! bit for bit, at shapes with and without vector tails and for several dtypes.

use super::{oracle, run};
use rlx_ir::{DType, Graph, Op, Shape};
use rlx_testkit::{Rng, op, random_data};

#[test]
fn narrowed_and_transposed_outputs_copy_the_oracles_elements_exactly() {
    let mut rng = Rng::new(7);
    for case in 0..24 {
        let dt = [DType::F32, DType::I32, DType::BF16, DType::F64][case % 4];
        let (b, t) = (1 + rng.below(4), 1 + rng.below(40));
        let d = 1 + rng.below(70);
        let parts = 2 + rng.below(3);
        let mut g = Graph::new("split");
        let x = g.input("x", Shape::new(&[b, t, parts * d], dt));
        let mut outs = Vec::new();
        for i in 0..parts {
            let n = op(
                &mut g,
                Op::Narrow {
                    axis: 2,
                    start: i * d,
                    len: d,
                },
                vec![x],
            );
            outs.push(n);
        }
        // A transposed view of one part and of the whole input as well.
        let tp = op(
            &mut g,
            Op::Transpose {
                perm: vec![0, 2, 1],
            },
            vec![outs[0]],
        );
        let tx = op(
            &mut g,
            Op::Transpose {
                perm: vec![2, 1, 0],
            },
            vec![x],
        );
        outs.push(tp);
        outs.push(tx);
        g.set_outputs(outs);
        let args = vec![random_data(&mut rng, &Shape::new(&[b, t, parts * d], dt))];
        let (got, want) = (run(&g, &args), oracle(&g, &args));
        assert_eq!(got.len(), want.len());
        for (k, (a, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a.dims, w.dims, "case {case} output {k}");
            assert_eq!(
                a.bytes, w.bytes,
                "case {case} ({dt:?}, [{b}, {t}, {parts}·{d}]) output {k} differs"
            );
        }
    }
}

#[test]
fn an_empty_narrow_copies_nothing_and_a_full_one_copies_everything() {
    let mut g = Graph::new("edges");
    let x = g.input("x", Shape::new(&[3, 5, 4], DType::F32));
    let e = op(
        &mut g,
        Op::Narrow {
            axis: 2,
            start: 4,
            len: 0,
        },
        vec![x],
    );
    let f = op(
        &mut g,
        Op::Narrow {
            axis: 1,
            start: 1,
            len: 4,
        },
        vec![x],
    );
    g.set_outputs(vec![e, f]);
    let v: Vec<f32> = (0..60).map(|i| i as f32).collect();
    let args = vec![rlx_ir::TensorData::from_f32(&[3, 5, 4], &v)];
    let got = run(&g, &args);
    assert_eq!(got[0].dims, vec![3, 5, 0]);
    assert!(got[0].to_f32_vec().is_empty());
    let want: Vec<f32> = (0..3)
        .flat_map(|i| (4..20).map(move |j| (i * 20 + j) as f32))
        .collect();
    assert_eq!(got[1].to_f32_vec(), want);
}
