//! Max / mean / sum pooling and their gradients.

use super::*;
use rlx_ir::ReduceOp;

fn pool(kind: ReduceOp, k: &[usize], s: &[usize], p: &[usize]) -> Op {
    Op::Pool {
        kind,
        kernel_size: k.to_vec(),
        stride: s.to_vec(),
        padding: p.to_vec(),
    }
}

fn pool_grad(kind: ReduceOp, k: &[usize], s: &[usize], p: &[usize]) -> Op {
    Op::PoolGrad {
        kind,
        kernel_size: k.to_vec(),
        stride: s.to_vec(),
        padding: p.to_vec(),
    }
}

const KINDS: [ReduceOp; 3] = [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum];

#[test]
fn pool1d_overlapping_windows_hand_values() {
    let x = t64(&[1, 1, 5], &[1.0, 3.0, 2.0, 5.0, 4.0]);
    let y = |kind| eval64(pool(kind, &[2], &[1], &[0]), std::slice::from_ref(&x));
    assert_eq!(y(ReduceOp::Max), vec![3.0, 3.0, 5.0, 5.0]);
    assert_eq!(y(ReduceOp::Mean), vec![2.0, 2.5, 3.5, 4.5]);
    assert_eq!(y(ReduceOp::Sum), vec![4.0, 5.0, 7.0, 9.0]);
}

#[test]
fn max_pool_ignores_padding_and_mean_pool_divides_by_the_full_window() {
    // Every 2×2 window (stride 2, padding 1) holds exactly one real element.
    let x = t64(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let y = |kind| {
        eval64(
            pool(kind, &[2, 2], &[2, 2], &[1, 1]),
            std::slice::from_ref(&x),
        )
    };
    assert_eq!(y(ReduceOp::Max), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        y(ReduceOp::Mean),
        vec![0.25, 0.5, 0.75, 1.0],
        "count_include_pad"
    );
    assert_eq!(y(ReduceOp::Sum), vec![1.0, 2.0, 3.0, 4.0]);
    // All-negative input: padding is not a zero candidate for max.
    let neg = t64(&[1, 1, 2], &[-5.0, -3.0]);
    let y = eval64(pool(ReduceOp::Max, &[2], &[1], &[1]), &[neg]);
    assert_eq!(y, vec![-5.0, -3.0, -3.0]);
}

#[test]
fn max_pool_propagates_nan() {
    let x = t64(&[1, 1, 4], &[1.0, f64::NAN, 2.0, 0.0]);
    let y = eval64(pool(ReduceOp::Max, &[2], &[1], &[0]), &[x]);
    assert!(y[0].is_nan() && y[1].is_nan() && y[2] == 2.0, "{y:?}");
}

/// Naive 2-D pool over `[n, c, h, w]`; padded positions skipped, mean divides by kh·kw.
fn pool2d_ref(
    kind: ReduceOp,
    x: &[f64],
    d: [usize; 4],
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
) -> Vec<f64> {
    let oh = (d[2] + 2 * p[0] - k[0]) / s[0] + 1;
    let ow = (d[3] + 2 * p[1] - k[1]) / s[1] + 1;
    let mut y = Vec::new();
    for nc in 0..d[0] * d[1] {
        for i in 0..oh {
            for j in 0..ow {
                let mut vals = Vec::new();
                for a in 0..k[0] {
                    for b in 0..k[1] {
                        let r = (i * s[0] + a) as isize - p[0] as isize;
                        let c = (j * s[1] + b) as isize - p[1] as isize;
                        if r >= 0 && c >= 0 && (r as usize) < d[2] && (c as usize) < d[3] {
                            vals.push(x[(nc * d[2] + r as usize) * d[3] + c as usize]);
                        }
                    }
                }
                y.push(match kind {
                    ReduceOp::Max => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                    ReduceOp::Mean => vals.iter().sum::<f64>() / (k[0] * k[1]) as f64,
                    _ => vals.iter().sum::<f64>(),
                });
            }
        }
    }
    y
}

#[test]
fn pool2d_matches_naive_reference_with_overlap_stride_and_padding() {
    let d = [2, 3, 7, 6];
    let x = rand(d.iter().product(), 500);
    for (k, s, p) in [
        ([3, 3], [2, 2], [1, 1]),
        ([2, 3], [1, 2], [1, 0]),
        ([3, 2], [3, 1], [0, 1]),
    ] {
        for kind in KINDS {
            let y = eval64(pool(kind, &k, &s, &p), &[t64(&d, &x)]);
            let want = pool2d_ref(kind, &x, d, k, s, p);
            assert_close(
                &y,
                &want,
                1e-15,
                &format!("{kind:?} k {k:?} s {s:?} p {p:?}"),
            );
        }
    }
}

#[test]
fn pool1d_and_pool3d_agree_with_the_2d_reference_on_lifted_inputs() {
    let x = rand(2 * 9, 501);
    for kind in KINDS {
        let y1 = eval64(pool(kind, &[3], &[2], &[1]), &[t64(&[1, 2, 9], &x)]);
        let want = pool2d_ref(kind, &x, [1, 2, 1, 9], [1, 3], [1, 2], [0, 1]);
        assert_close(&y1, &want, 1e-15, &format!("1-D {kind:?}"));
        // 3-D with a unit depth axis and unit depth window is the 2-D pool.
        let y3 = eval64(
            pool(kind, &[1, 2, 3], &[1, 1, 2], &[0, 1, 1]),
            &[t64(&[1, 2, 1, 3, 3], &x)],
        );
        let want3 = pool2d_ref(kind, &x, [1, 2, 3, 3], [2, 3], [1, 2], [1, 1]);
        assert_close(&y3, &want3, 1e-15, &format!("3-D {kind:?}"));
    }
}

#[test]
fn max_pool_grad_routes_to_the_first_maximum_and_overlapping_windows_accumulate() {
    let x = t64(&[1, 1, 5], &[1.0, 3.0, 2.0, 5.0, 4.0]);
    let g = t64(&[1, 1, 4], &[1.0, 10.0, 100.0, 1000.0]);
    let dx = eval64(pool_grad(ReduceOp::Max, &[2], &[1], &[0]), &[x, g]);
    assert_eq!(dx, vec![0.0, 11.0, 0.0, 1100.0, 0.0]);
    // Ties: the first maximal position in window order wins.
    let x = t64(&[1, 1, 3], &[2.0, 2.0, 2.0]);
    let g = t64(&[1, 1, 2], &[1.0, 10.0]);
    assert_eq!(
        eval64(pool_grad(ReduceOp::Max, &[2], &[1], &[0]), &[x, g]),
        vec![1.0, 10.0, 0.0]
    );
    // 2-D ties are broken in row-major window order: (0,1) comes before (1,0).
    let x = t64(&[1, 1, 2, 2], &[0.0, 7.0, 7.0, 7.0]);
    let g = t64(&[1, 1, 1, 1], &[5.0]);
    assert_eq!(
        eval64(pool_grad(ReduceOp::Max, &[2, 2], &[1, 1], &[0, 0]), &[x, g]),
        vec![0.0, 5.0, 0.0, 0.0]
    );
}

#[test]
fn mean_and_sum_pool_grads_spread_the_gradient_over_each_window() {
    let x = t64(&[1, 1, 3], &[0.0; 3]);
    // k 2, s 1, p 1 → 4 windows: [pad,0], [0,1], [1,2], [2,pad].
    let g = t64(&[1, 1, 4], &[1.0, 2.0, 4.0, 8.0]);
    let sum = eval64(
        pool_grad(ReduceOp::Sum, &[2], &[1], &[1]),
        &[x.clone(), g.clone()],
    );
    assert_eq!(sum, vec![3.0, 6.0, 12.0]);
    let mean = eval64(pool_grad(ReduceOp::Mean, &[2], &[1], &[1]), &[x, g]);
    assert_eq!(
        mean,
        vec![1.5, 3.0, 6.0],
        "divided by the full window size 2"
    );
}

#[test]
fn pool_grads_match_central_finite_differences() {
    let d = [1, 2, 5, 6];
    let n: usize = d.iter().product();
    // Distinct values spaced ≥ 0.1 apart so a step of 1e-4 never changes a window's winner.
    let mut x: Vec<f64> = (0..n).map(|i| ((i * 37) % n) as f64 * 0.1).collect();
    for (v, r) in x.iter_mut().zip(rand(n, 600)) {
        *v += r * 0.01;
    }
    for (k, s, p) in [
        ([3, 3], [2, 2], [1, 1]),
        ([2, 2], [1, 2], [1, 0]),
        ([3, 2], [1, 1], [0, 1]),
    ] {
        for kind in KINDS {
            let y0 = eval(pool(kind, &k, &s, &p), &[t64(&d, &x)]);
            let g = rand(y0.numel(), 601);
            let loss = |xp: &[f64]| dot(&eval64(pool(kind, &k, &s, &p), &[t64(&d, xp)]), &g);
            let fd = grad_fd(&x, 1e-4, loss);
            let dx = eval64(
                pool_grad(kind, &k, &s, &p),
                &[t64(&d, &x), t64(&y0.dims, &g)],
            );
            assert_close(&dx, &fd, 1e-8, &format!("{kind:?} k {k:?} s {s:?} p {p:?}"));
        }
    }
}

#[test]
fn mean_pool_on_integers_truncates_on_store() {
    let x = TensorData::from_i64(&[1, 1, 3], &[1, 2, 4]);
    let y = eval(pool(ReduceOp::Mean, &[2], &[1], &[0]), &[x]);
    assert_eq!(y.dtype, DType::I64);
    assert_eq!(y.to_i64_vec(), vec![1, 3], "1.5 → 1 and 3 → 3");
}
