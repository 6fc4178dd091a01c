//! Gather, scatter-add and cross-entropy with labels, lowered and run by the loop IR's
//! interpreter against the `rlx-ir` oracle: bit for bit where the sums are exact, within
//! the f32 error elsewhere; bad indices and labels are the program's run-time errors.

use super::tests::run_loops;
use crate::{CompileOptions, compile};
use rlx_ir::{DType, DimBinding, Graph, Op, Shape, TensorData, interp};

fn run_both(g: &Graph, inputs: &[(&str, TensorData)]) -> (Vec<TensorData>, Vec<TensorData>) {
    let p = compile(g, &CompileOptions::default()).unwrap();
    let got = run_loops(&p, inputs, &DimBinding::new()).unwrap_or_else(|e| panic!("{e}"));
    let want = interp::run(g, inputs).unwrap();
    (got, want)
}

fn lowered_error(g: &Graph, inputs: &[(&str, TensorData)]) -> String {
    let p = compile(g, &CompileOptions::default()).unwrap();
    run_loops(&p, inputs, &DimBinding::new()).expect_err("a run-time error")
}

fn ramp(n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| (i as f32 - 7.0) * scale).collect()
}

fn gather_graph(table: &[usize], idx: &[usize], idt: DType, axis: usize) -> Graph {
    let mut g = Graph::new("gather");
    let t = g.input("t", Shape::new(table, DType::F32));
    let i = g.input("i", Shape::new(idx, idt));
    let y = g.add_op(Op::Gather { axis }, vec![t, i]).unwrap();
    g.set_outputs(vec![y]);
    g
}

#[test]
fn gather_along_any_axis_with_negative_and_float_indices_equals_the_oracle() {
    let t = TensorData::from_f32(&[5, 3, 4], &ramp(60, 0.37));
    for (axis, idt, idx) in [
        (0, DType::I64, vec![4.0, -1.0, 0.0, -5.0, 2.0, 2.0]),
        (1, DType::I32, vec![2.0, -3.0, 1.0, 0.0, -1.0, 1.0]),
        (2, DType::F32, vec![3.0, -4.0, 0.0, 1.0, 2.0, -2.0]),
    ] {
        let g = gather_graph(&[5, 3, 4], &[2, 3], idt, axis);
        let i = TensorData::from_f64_as(idt, &[2, 3], &idx);
        let (got, want) = run_both(&g, &[("t", t.clone()), ("i", i)]);
        assert_eq!(got[0].dims, want[0].dims, "axis {axis}");
        assert_eq!(got[0].bytes, want[0].bytes, "axis {axis} {idt:?}");
    }
}

#[test]
fn gather_indices_out_of_range_or_fractional_are_run_time_errors() {
    let t = TensorData::from_f32(&[5, 2], &ramp(10, 1.0));
    for (idt, bad) in [(DType::I64, 5.0), (DType::I32, -6.0), (DType::F32, 1.5)] {
        let g = gather_graph(&[5, 2], &[3], idt, 0);
        let i = TensorData::from_f64_as(idt, &[3], &[0.0, bad, 1.0]);
        let e = lowered_error(&g, &[("t", t.clone()), ("i", i.clone())]);
        assert!(e.contains("index is out of range"), "{idt:?} {bad}: {e}");
        assert!(interp::run(&g, &[("t", t.clone()), ("i", i)]).is_err());
    }
}

fn scatter_graph(base: &[usize], idx: &[usize], upd: &[usize], dt: DType, axis: usize) -> Graph {
    let mut g = Graph::new("scatter");
    let b = g.input("b", Shape::new(base, dt));
    let i = g.input("i", Shape::new(idx, DType::I64));
    let u = g.input("u", Shape::new(upd, dt));
    let y = g.add_op(Op::ScatterAdd { axis }, vec![b, i, u]).unwrap();
    g.set_outputs(vec![y]);
    g
}

#[test]
fn scatter_add_accumulates_repeated_indices_like_the_oracle() {
    // Quarter steps: every f32 sum is exact, so f32 and the oracle's f64 agree.
    for dt in [DType::F32, DType::BF16, DType::I32, DType::I8, DType::Bool] {
        for (axis, base, upd) in [(0usize, [6usize, 3], [5usize, 3]), (1, [3, 6], [3, 5])] {
            let g = scatter_graph(&base, &[5], &upd, dt, axis);
            let bv: Vec<f64> = (0..18).map(|i| (i % 5) as f64 * 0.25 - 0.5).collect();
            let uv: Vec<f64> = (0..15).map(|i| (i % 7) as f64 * 0.5 - 1.0).collect();
            let (bv, uv) = if dt == DType::Bool {
                let b: Vec<f64> = bv.iter().map(|v| (*v > 0.0) as u8 as f64).collect();
                let u: Vec<f64> = uv.iter().map(|v| (*v > 0.0) as u8 as f64).collect();
                (b, u)
            } else if dt.is_int() {
                let b: Vec<f64> = bv.iter().map(|v| (v * 40.0).round()).collect();
                let u: Vec<f64> = uv.iter().map(|v| (v * 60.0).round()).collect();
                (b, u)
            } else {
                (bv, uv)
            };
            let inputs = [
                ("b", TensorData::from_f64_as(dt, &base, &bv)),
                ("i", TensorData::from_i64(&[5], &[4, -1, 0, 4, 2])),
                ("u", TensorData::from_f64_as(dt, &upd, &uv)),
            ];
            let (got, want) = run_both(&g, &inputs);
            assert_eq!(got[0].bytes, want[0].bytes, "{dt:?} axis {axis}");
        }
    }
}

#[test]
fn scatter_add_sums_in_index_order_in_f32() {
    // 1 + 2⁻²⁴ + 2⁻²⁴ rounds to 1 in f32 folded in order; the oracle's f64 sum keeps
    // 1 + 2⁻²³: the lowering's documented fold, within one f32 ulp of the oracle.
    let g = scatter_graph(&[2], &[3], &[3], DType::F32, 0);
    let tiny = 2f32.powi(-24);
    let inputs = [
        ("b", TensorData::from_f32(&[2], &[1.0, 0.0])),
        ("i", TensorData::from_i64(&[3], &[0, 0, 1])),
        ("u", TensorData::from_f32(&[3], &[tiny, tiny, 3.0])),
    ];
    let (got, want) = run_both(&g, &inputs);
    assert_eq!(got[0].to_f32_vec(), vec![1.0, 3.0]);
    assert_eq!(want[0].to_f32_vec(), vec![1.0 + 2f32.powi(-23), 3.0]);
}

fn xent_graph(rows: usize, c: usize, dt: DType, ldt: DType) -> Graph {
    let mut g = Graph::new("xent");
    let x = g.input("x", Shape::new(&[rows, c], dt));
    let y = g.input("y", Shape::new(&[rows], ldt));
    let l = g
        .add_op(Op::SoftmaxCrossEntropyWithLogits, vec![x, y])
        .unwrap();
    g.set_outputs(vec![l]);
    g
}

#[test]
fn cross_entropy_with_integer_or_float_labels_matches_the_oracle() {
    for (dt, ldt) in [
        (DType::F32, DType::I64),
        (DType::F32, DType::F32),
        (DType::BF16, DType::I32),
        (DType::F64, DType::I64),
    ] {
        let (rows, c) = (7, 37);
        let g = xent_graph(rows, c, dt, ldt);
        let mut xv: Vec<f64> = (0..rows * c)
            .map(|i| ((i * 7919) % 101) as f64 * 0.13 - 6.0)
            .collect();
        // A row with a NaN, a row of −∞ but one, a row with +∞.
        xv[c + 3] = f64::NAN;
        for v in &mut xv[2 * c..3 * c] {
            *v = f64::NEG_INFINITY;
        }
        xv[2 * c + 5] = 1.0;
        xv[3 * c + 9] = f64::INFINITY;
        let labels: Vec<f64> = (0..rows).map(|r| ((r * 11) % c) as f64).collect();
        let mut labels = labels;
        labels[2] = 5.0;
        let inputs = [
            ("x", TensorData::from_f64_as(dt, &[rows, c], &xv)),
            ("y", TensorData::from_f64_as(ldt, &[rows], &labels)),
        ];
        let (got, want) = run_both(&g, &inputs);
        let (gv, wv) = (got[0].to_f64_vec(), want[0].to_f64_vec());
        for (r, (g, w)) in gv.iter().zip(&wv).enumerate() {
            let what = format!("{dt:?}/{ldt:?} row {r}: loop IR {g}, oracle {w}");
            if w.is_nan() || w.is_infinite() {
                assert!((g.is_nan() && w.is_nan()) || g == w, "{what}");
            } else if dt == DType::F64 {
                assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{what}");
            } else {
                let ulp = if dt == DType::BF16 {
                    2f64.powi(-7)
                } else {
                    2f64.powi(-22)
                };
                assert!((g - w).abs() <= ulp * w.abs().max(1.0) * 4.0, "{what}");
            }
        }
    }
}

#[test]
fn cross_entropy_labels_that_are_not_class_indices_are_run_time_errors() {
    let x = TensorData::from_f32(&[2, 4], &ramp(8, 0.5));
    for (ldt, bad) in [(DType::I64, 4.0), (DType::I32, -1.0), (DType::F32, 2.5)] {
        let g = xent_graph(2, 4, DType::F32, ldt);
        let y = TensorData::from_f64_as(ldt, &[2], &[0.0, bad]);
        let e = lowered_error(&g, &[("x", x.clone()), ("y", y.clone())]);
        assert!(e.contains("not a class index"), "{ldt:?} {bad}: {e}");
        assert!(interp::run(&g, &[("x", x.clone()), ("y", y)]).is_err());
    }
}
