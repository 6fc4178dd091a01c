//! Concat, pad and cumsum lowered to the loop IR against the `rlx-ir` oracle, bit for
//! bit: moved values are exact, and the cumsum data are small integers whose every
//! partial sum is exact in the accumulator (the order cannot show).

use super::tests::run_loops;
use crate::{CompileOptions, compile};
use rlx_ir::{DType, Dim, DimBinding, Graph, Op, Shape, TensorData, interp};

/// Small integers (−8..8) in `dt`.
fn ints(dt: DType, dims: &[usize], seed: u64) -> TensorData {
    let n: usize = dims.iter().product();
    let mut s = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    let v: Vec<i64> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 17) as i64 - 8
        })
        .collect();
    if dt == DType::Bool {
        return TensorData::from_bool(dims, &v.iter().map(|&x| x > 0).collect::<Vec<_>>());
    }
    if dt.is_int() {
        let v: Vec<i64> = v.iter().map(|&x| x.rem_euclid(9)).collect();
        return TensorData::from_i64_as(dt, dims, &v);
    }
    TensorData::from_f64_as(dt, dims, &v.iter().map(|&x| x as f64).collect::<Vec<_>>())
}

fn opaque_label(g: &Graph) -> Vec<String> {
    let p = compile(g, &CompileOptions::default()).unwrap();
    p.kernels.iter().map(|k| k.label()).collect()
}

fn same(g: &Graph, inputs: &[(&str, TensorData)], binding: &DimBinding, what: &str) {
    let p = compile(g, &CompileOptions::default()).unwrap();
    let got = run_loops(&p, inputs, binding).unwrap_or_else(|e| panic!("{what}: {e}"));
    let want = interp::run(g, inputs).unwrap();
    assert_eq!(got[0].dims, want[0].dims, "{what}");
    assert_eq!(got[0].bytes, want[0].bytes, "{what}");
}

#[test]
fn concat_of_views_and_pad_with_a_converted_fill_move_values_exactly() {
    for dt in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::U8,
        DType::Bool,
    ] {
        // Concat along axis 1 of a plain input, a transposed view and a third one, over
        // a dynamic number of rows.
        let d = Dim::Dynamic(0);
        let mut g = Graph::new("cat");
        let a = g.input("a", Shape::from_dims(&[d, Dim::Static(2)], dt));
        let bt = g.input("bt", Shape::from_dims(&[Dim::Static(4), d], dt));
        let c = g.input("c", Shape::from_dims(&[d, Dim::Static(3)], dt));
        let b = g
            .add_op(Op::Transpose { perm: vec![1, 0] }, vec![bt])
            .unwrap();
        let y = g.add_op(Op::Concat { axis: 1 }, vec![a, b, c]).unwrap();
        g.set_outputs(vec![y]);
        assert!(opaque_label(&g).iter().any(|l| l == "opaque(concat)"));
        for n in [0usize, 5] {
            let binding: DimBinding = [(0, n)].into_iter().collect();
            let inputs = [
                ("a", ints(dt, &[n, 2], 1)),
                ("bt", ints(dt, &[4, n], 2)),
                ("c", ints(dt, &[n, 3], 3)),
            ];
            same(
                &g,
                &inputs,
                &binding,
                &format!("concat {dt:?} with ?0 = {n}"),
            );
        }
        // Pad axis 0 with a fill that each dtype converts differently.
        let mut g = Graph::new("pad");
        let x = g.input("x", Shape::new(&[2, 3], dt));
        let y = g
            .add_op(
                Op::Pad {
                    axis: 0,
                    before: 2,
                    after: 1,
                    value: -3.7,
                },
                vec![x],
            )
            .unwrap();
        g.set_outputs(vec![y]);
        let inputs = [("x", ints(dt, &[2, 3], 4))];
        same(&g, &inputs, &DimBinding::new(), &format!("pad {dt:?}"));
    }
}

#[test]
fn cumsum_inclusive_and_exclusive_over_any_axis_matches_the_oracle() {
    for dt in [DType::F32, DType::F16, DType::F64, DType::I32, DType::I8] {
        for (axis, exclusive) in [(0, false), (1, true), (-1, false), (2, true)] {
            let mut g = Graph::new("cumsum");
            let x = g.input("x", Shape::new(&[3, 4, 5], dt));
            let y = g.add_op(Op::Cumsum { axis, exclusive }, vec![x]).unwrap();
            g.set_outputs(vec![y]);
            assert!(opaque_label(&g).iter().any(|l| l == "opaque(cumsum)"));
            let inputs = [("x", ints(dt, &[3, 4, 5], 5))];
            let what = format!("cumsum {dt:?} axis {axis} exclusive {exclusive}");
            same(&g, &inputs, &DimBinding::new(), &what);
        }
    }
}

#[test]
fn cumsum_over_a_dynamic_axis_runs_a_line_per_item_for_any_length() {
    let d = Dim::Dynamic(0);
    let mut g = Graph::new("cumsum_dyn");
    let x = g.input("x", Shape::from_dims(&[Dim::Static(3), d], DType::F32));
    let y = g
        .add_op(
            Op::Cumsum {
                axis: 1,
                exclusive: false,
            },
            vec![x],
        )
        .unwrap();
    g.set_outputs(vec![y]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    let k = p
        .kernels
        .iter()
        .position(|k| k.label() == "opaque(cumsum)")
        .unwrap();
    let lk = crate::loops::lower_kernel(&p, k).unwrap();
    // Three lines, whatever the axis length.
    assert_eq!(lk.items, crate::loops::build::int(3));
    for n in [0usize, 1, 70] {
        let binding: DimBinding = [(0, n)].into_iter().collect();
        let inputs = [("x", ints(DType::F32, &[3, n], 6))];
        same(&g, &inputs, &binding, &format!("cumsum with ?0 = {n}"));
    }
}
