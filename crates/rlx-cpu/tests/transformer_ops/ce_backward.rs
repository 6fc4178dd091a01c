//! The backward of `softmax_cross_entropy_with_logits` (autodiff's `(softmax − onehot)·g`)
//! computed on the softmax rows in place: against the oracle, and bit for bit against the
//! same values computed through a graph the fast path does not recognize
//! (`s·(p + (−onehot))`, which IEEE defines to be `s·(p − onehot)`, signed zeros
//! included).

use super::{bits, oracle, run};
use rlx_compile::autodiff::grad_graph;
use rlx_ir::{Activation, BinaryOp, CmpOp, DType, Graph, NodeId, Op, ReduceOp, Shape, TensorData};
use rlx_testkit::{Rng, close, op, reduce, scalar};

/// `mean` (or `sum`) of the cross-entropy of `[rows, c]` logits and `[rows]` labels.
fn ce_loss(rows: usize, c: usize, label_dt: DType, mean: bool) -> (Graph, NodeId) {
    let mut g = Graph::new("ce");
    let l = g.input("logits", Shape::new(&[rows, c], DType::F32));
    let y = g.input("labels", Shape::new(&[rows], label_dt));
    let ce = op(&mut g, Op::SoftmaxCrossEntropyWithLogits, vec![l, y]);
    let rop = if mean { ReduceOp::Mean } else { ReduceOp::Sum };
    let loss = reduce(&mut g, rop, vec![0], false, ce);
    g.set_outputs(vec![loss]);
    (g, l)
}

/// The same gradient written so that no `core − onehot` subtraction appears
/// (`p + (−onehot)`).
fn generic_grad(rows: usize, c: usize, label_dt: DType, scale: f32) -> Graph {
    let mut g = Graph::new("ce_generic");
    let l = g.input("logits", Shape::new(&[rows, c], DType::F32));
    let y = g.input("labels", Shape::new(&[rows], label_dt));
    let p = op(&mut g, Op::Softmax { axis: -1 }, vec![l]);
    let iota = TensorData::from_i64_as(DType::I64, &[c], &(0..c as i64).collect::<Vec<_>>());
    let iota = g.add_node(
        Op::Constant {
            data: iota.bytes.clone(),
        },
        vec![],
        iota.shape(),
    );
    let yk = op(
        &mut g,
        Op::Reshape {
            new_shape: vec![rows as i64, 1],
        },
        vec![y],
    );
    let hit = op(&mut g, Op::Compare(CmpOp::Eq), vec![iota, yk]);
    let oh = op(&mut g, Op::Cast { to: DType::F32 }, vec![hit]);
    let neg = op(&mut g, Op::Activation(Activation::Neg), vec![oh]);
    let d = op(&mut g, Op::Binary(BinaryOp::Add), vec![p, neg]);
    let s = scalar(&mut g, scale);
    let out = op(&mut g, Op::Binary(BinaryOp::Mul), vec![d, s]);
    g.set_outputs(vec![out]);
    g
}

fn logits(rng: &mut Rng, n: usize, spread: f64) -> Vec<f32> {
    (0..n)
        .map(|_| ((rng.uniform() * 2.0 - 1.0) * spread) as f32)
        .collect()
}

fn labels(dt: DType, ids: &[i64]) -> TensorData {
    match dt {
        DType::F32 => TensorData::from_f32(
            &[ids.len()],
            &ids.iter().map(|&v| v as f32).collect::<Vec<_>>(),
        ),
        _ => TensorData::from_i64_as(dt, &[ids.len()], ids),
    }
}

#[test]
fn gradients_of_mean_and_sum_cross_entropy_match_the_generic_path_bit_for_bit() {
    let mut rng = Rng::new(11);
    // Rows shorter and longer than a tile (1024), with and without vector tails.
    let shapes = [(1, 1), (7, 5), (33, 17), (64, 512), (5, 1030), (130, 76)];
    for (case, &(rows, c)) in shapes.iter().enumerate() {
        for (dt, mean) in [(DType::I32, true), (DType::I64, false), (DType::F32, true)] {
            let (g, l) = ce_loss(rows, c, dt, mean);
            let grad = grad_graph(&g, &[l]).unwrap();
            let ids: Vec<i64> = (0..rows).map(|_| rng.below(c) as i64).collect();
            let args = vec![
                TensorData::from_f32(&[rows, c], &logits(&mut rng, rows * c, 6.0)),
                labels(dt, &ids),
            ];
            let got = &run(&grad, &args)[0];
            close(got, &oracle(&grad, &args)[0], 2e-6);
            let scale = if mean { 1.0 / rows as f32 } else { 1.0 };
            let generic = &run(&generic_grad(rows, c, dt, scale), &args)[0];
            assert_eq!(
                bits(got),
                bits(generic),
                "case {case} [{rows}, {c}] {dt:?} mean={mean}: fast and generic paths differ"
            );
        }
    }
}

#[test]
fn labels_outside_the_classes_hit_no_class_like_the_oracle() {
    // The backward program does not check labels (only the forward does): a label
    // outside 0..C, or a fraction, compares unequal to every class, as in the oracle.
    let (rows, c) = (6, 9);
    for (dt, ids) in [
        (DType::I64, vec![-1i64, 9, 100, 0, 8, i64::MIN]),
        (DType::I32, vec![-5, 9, 3, 2, 1, 0]),
    ] {
        let (g, l) = ce_loss(rows, c, dt, true);
        let grad = grad_graph(&g, &[l]).unwrap();
        let mut rng = Rng::new(3);
        let args = vec![
            TensorData::from_f32(&[rows, c], &logits(&mut rng, rows * c, 3.0)),
            labels(dt, &ids),
        ];
        let got = &run(&grad, &args)[0];
        close(got, &oracle(&grad, &args)[0], 2e-6);
        let generic = &run(&generic_grad(rows, c, dt, 1.0 / rows as f32), &args)[0];
        assert_eq!(bits(got), bits(generic), "{dt:?}");
        // Row 0 (label −1) is softmax/rows: every entry positive.
        assert!(got.to_f32_vec()[..c].iter().all(|&v| v > 0.0));
    }
    // Float labels: 2.5 and −0.0 (which is class 0).
    let (g, l) = ce_loss(2, 4, DType::F32, false);
    let grad = grad_graph(&g, &[l]).unwrap();
    let args = vec![
        TensorData::from_f32(&[2, 4], &[0.0, 1.0, 2.0, 3.0, 0.5, 0.5, 0.5, 0.5]),
        TensorData::from_f32(&[2], &[2.5, -0.0]),
    ];
    let got = run(&grad, &args)[0].to_f32_vec();
    let want = oracle(&grad, &args)[0].to_f32_vec();
    for (a, w) in got.iter().zip(&want) {
        assert!((a - w).abs() <= 2e-7, "{got:?} vs {want:?}");
    }
    assert!(got[..4].iter().all(|&v| v > 0.0), "2.5 hits no class");
    assert!(
        (got[4] + 0.75).abs() < 1e-6,
        "−0.0 hits class 0: {}",
        got[4]
    );
}

#[test]
fn rows_holding_nan_or_infinities_give_the_generic_paths_values() {
    let (rows, c) = (4, 6);
    let mut v = vec![0.5f32; rows * c];
    v[1] = f32::NAN;
    v[c + 2] = f32::INFINITY;
    v[2 * c + 3] = f32::NEG_INFINITY;
    let (g, l) = ce_loss(rows, c, DType::I64, true);
    let grad = grad_graph(&g, &[l]).unwrap();
    let args = vec![
        TensorData::from_f32(&[rows, c], &v),
        TensorData::from_i64_as(DType::I64, &[rows], &[1, 2, 3, 0]),
    ];
    let got = &run(&grad, &args)[0];
    let generic = &run(&generic_grad(rows, c, DType::I64, 1.0 / rows as f32), &args)[0];
    let (a, b) = (got.to_f32_vec(), generic.to_f32_vec());
    for (x, y) in a.iter().zip(&b) {
        assert!(
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
            "{a:?} vs {b:?}"
        );
    }
}

/// `(softmax(l) − cast(iota == label))·s` with the class indices a program input (as a
/// front end passes larger constants): the pattern of the fast path with an iota it
/// must check on every run.
fn grad_with_iota_input(rows: usize, c: usize, scale: f32) -> Graph {
    let mut g = Graph::new("ce_iota_input");
    let l = g.input("logits", Shape::new(&[rows, c], DType::F32));
    let y = g.input("labels", Shape::new(&[rows], DType::I64));
    let iota = g.input("iota", Shape::new(&[c], DType::I64));
    let p = op(&mut g, Op::Softmax { axis: -1 }, vec![l]);
    let yk = op(
        &mut g,
        Op::Reshape {
            new_shape: vec![rows as i64, 1],
        },
        vec![y],
    );
    let hit = op(&mut g, Op::Compare(CmpOp::Eq), vec![iota, yk]);
    let oh = op(&mut g, Op::Cast { to: DType::F32 }, vec![hit]);
    let d = op(&mut g, Op::Binary(BinaryOp::Sub), vec![p, oh]);
    let s = scalar(&mut g, scale);
    let out = op(&mut g, Op::Binary(BinaryOp::Mul), vec![s, d]);
    g.set_outputs(vec![out]);
    g
}

#[test]
fn class_indices_passed_as_an_argument_are_checked_on_every_run() {
    let (rows, c) = (9, 300);
    let g = grad_with_iota_input(rows, c, 0.25);
    let mut rng = Rng::new(17);
    let ids: Vec<i64> = (0..rows).map(|_| rng.below(c) as i64).collect();
    let l = TensorData::from_f32(&[rows, c], &logits(&mut rng, rows * c, 4.0));
    let y = TensorData::from_i64_as(DType::I64, &[rows], &ids);
    let iota: Vec<i64> = (0..c as i64).collect();
    // The true iota, then a permuted one (class j named c − 1 − j) and one with a hole:
    // only the first is the one-hot of the label; the others must still give the
    // oracle's values.
    let mut holed = iota.clone();
    holed[ids[0] as usize] = -7;
    for (k, idx) in [iota.clone(), iota.iter().rev().copied().collect(), holed]
        .into_iter()
        .enumerate()
    {
        let args = vec![
            l.clone(),
            y.clone(),
            TensorData::from_i64_as(DType::I64, &[c], &idx),
        ];
        let got = &run(&g, &args)[0];
        close(got, &oracle(&g, &args)[0], 2e-6);
        if k == 0 {
            let generic = &run(&generic_grad(rows, c, DType::I64, 0.25), &args[..2])[0];
            assert_eq!(
                bits(got),
                bits(generic),
                "true iota: fast and generic differ"
            );
        }
    }
}
