//! `sgemm`/`dgemm` against a naive triple loop accumulated in `f64`, over odd sizes and
//! every kind of layout a view can express (row/column major, padded, transposed, reversed
//! axes, offsets), the BLAS alpha/beta rules, empty dimensions, determinism, and misuse;
//! the f32 kernel paths (`F32Path`) in `own_f32.rs`.

use rlx_cpu::gemm::{F32Path, MatMut, MatRef, dgemm, sgemm, sgemm_with};

#[path = "../common/mod.rs"]
mod common;

use common::mats::{Elem, LAYOUTS_5, Layout, Lcg, Mat, reference};

/// Checks C against alpha·A·B + beta·C0 with the forward error bound of a k-term dot
/// product: |err| ≤ (k + 2)·u·(|alpha|·Σ|a||b| + |beta·c0|), u the unit roundoff.
fn check<T: Elem>(
    what: &str,
    (alpha, beta): (f64, f64),
    a: &Mat<T>,
    b: &Mat<T>,
    c0: &[f64],
    c: &Mat<T>,
    u: f64,
) {
    let (m, k, n) = (a.r, a.c, b.c);
    let (exact, mag) = reference(a, b);
    for i in 0..m {
        for j in 0..n {
            let e = i * n + j;
            let want = alpha * exact[e] + if beta == 0.0 { 0.0 } else { beta * c0[e] };
            let bound =
                (k as f64 + 2.0) * u * (alpha.abs() * mag[e] + (beta * c0[e]).abs()) + 1e-300;
            let got = c.get(i, j).to_f64();
            assert!(
                (got - want).abs() <= bound,
                "{what}: C[{i},{j}] = {got}, want {want} (bound {bound:e}); m={m} k={k} n={n}"
            );
        }
    }
}

#[test]
fn sgemm_matches_naive_on_odd_sizes_in_every_layout() {
    let mut rng = Lcg(1);
    let sizes = [
        (1, 1, 1),
        (3, 5, 7),
        (17, 1, 9),
        (33, 65, 31),
        (67, 129, 45),
        (130, 70, 257),
    ];
    for &(m, k, n) in &sizes {
        for (li, &la) in LAYOUTS_5.iter().enumerate() {
            let lb = LAYOUTS_5[(li + 1) % 5];
            let lc = LAYOUTS_5[(li + 3) % 5];
            let a = Mat::<f32>::random(&mut rng, m, k, la);
            let b = Mat::<f32>::random(&mut rng, k, n, lb);
            let mut c = Mat::<f32>::random(&mut rng, m, n, lc);
            let c0 = c.vals.clone();
            for threads in [1, 2] {
                let mut cc = c.clone();
                sgemm(0.75, a.view(), b.view(), -0.5, cc.view_mut(), threads);
                let what = format!("sgemm {la:?}·{lb:?}→{lc:?} threads {threads}");
                check(&what, (0.75, -0.5), &a, &b, &c0, &cc, 2f64.powi(-24));
            }
            sgemm(1.0, a.view(), b.view(), 0.0, c.view_mut(), 1);
            check("sgemm beta=0", (1.0, 0.0), &a, &b, &c0, &c, 2f64.powi(-24));
        }
    }
}

#[test]
fn dgemm_matches_naive_on_odd_sizes_in_every_layout() {
    let mut rng = Lcg(2);
    for &(m, k, n) in &[(2, 3, 4), (31, 17, 65), (70, 130, 33)] {
        for (li, &la) in LAYOUTS_5.iter().enumerate() {
            let a = Mat::<f64>::random(&mut rng, m, k, la);
            let b = Mat::<f64>::random(&mut rng, k, n, LAYOUTS_5[(li + 2) % 5]);
            let mut c = Mat::<f64>::random(&mut rng, m, n, LAYOUTS_5[(li + 4) % 5]);
            let c0 = c.vals.clone();
            dgemm(-1.25, a.view(), b.view(), 2.0, c.view_mut(), 2);
            check("dgemm", (-1.25, 2.0), &a, &b, &c0, &c, 2f64.powi(-53));
        }
    }
}

#[test]
fn transposed_views_multiply_without_copies() {
    // Aᵀ·Bᵀ from row-major storage of A (k×m) and B (n×k) through MatRef::t.
    let mut rng = Lcg(3);
    let (m, k, n) = (9, 13, 11);
    let at: Vec<f32> = (0..k * m).map(|_| rng.uniform() as f32).collect();
    let bt: Vec<f32> = (0..n * k).map(|_| rng.uniform() as f32).collect();
    let mut c = vec![0f32; m * n];
    sgemm(
        1.0,
        MatRef::row_major(&at, k, m).t(),
        MatRef::row_major(&bt, n, k).t(),
        0.0,
        MatMut::row_major(&mut c, m, n),
        1,
    );
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k)
                .map(|p| at[p * m + i] as f64 * bt[j * k + p] as f64)
                .sum();
            assert!(
                (c[i * n + j] as f64 - want).abs() < 1e-5,
                "C[{i},{j}] = {}, want {want}",
                c[i * n + j]
            );
        }
    }
}

#[test]
fn beta_zero_ignores_nan_in_c_and_beta_one_accumulates() {
    let a = [1.0f32, 2.0, 3.0, 4.0]; // [[1,2],[3,4]]
    let b = [5.0f32, 6.0, 7.0, 8.0]; // [[5,6],[7,8]] → A·B = [[19,22],[43,50]]
    let mut c = [f32::NAN; 4];
    sgemm(
        1.0,
        MatRef::row_major(&a, 2, 2),
        MatRef::row_major(&b, 2, 2),
        0.0,
        MatMut::row_major(&mut c, 2, 2),
        1,
    );
    assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
    sgemm(
        2.0,
        MatRef::row_major(&a, 2, 2),
        MatRef::row_major(&b, 2, 2),
        1.0,
        MatMut::row_major(&mut c, 2, 2),
        1,
    );
    assert_eq!(c, [57.0, 66.0, 129.0, 150.0]);
}

#[test]
fn empty_inner_dimension_scales_c_by_beta_and_empty_outputs_are_no_ops() {
    let mut c = [1.0f32, -2.0, 3.0, f32::NAN];
    let e: [f32; 0] = [];
    sgemm(
        1.0,
        MatRef::row_major(&e, 2, 0),
        MatRef::row_major(&e, 0, 2),
        3.0,
        MatMut::row_major(&mut c[..], 2, 2),
        1,
    );
    assert_eq!(&c[..3], &[3.0, -6.0, 9.0]);
    assert!(c[3].is_nan());
    sgemm(
        1.0,
        MatRef::row_major(&e, 2, 0),
        MatRef::row_major(&e, 0, 2),
        0.0,
        MatMut::row_major(&mut c[..], 2, 2),
        1,
    );
    assert_eq!(c, [0.0; 4]);
    let a = [1.0f64; 6];
    let mut none: [f64; 0] = [];
    dgemm(
        1.0,
        MatRef::row_major(&a, 0, 6),
        MatRef::row_major(&a, 6, 1),
        0.0,
        MatMut::row_major(&mut none, 0, 1),
        2,
    );
    dgemm(
        1.0,
        MatRef::row_major(&a, 1, 6),
        MatRef::row_major(&e.map(|v: f32| v as f64), 6, 0),
        0.0,
        MatMut::row_major(&mut none, 1, 0),
        2,
    );
}

#[test]
fn alpha_zero_does_not_read_a_or_b_values() {
    let a = [f32::NAN; 4];
    let mut c = [1.0f32, 2.0, 3.0, 4.0];
    sgemm(
        0.0,
        MatRef::row_major(&a, 2, 2),
        MatRef::row_major(&a, 2, 2),
        0.5,
        MatMut::row_major(&mut c, 2, 2),
        1,
    );
    assert_eq!(c, [0.5, 1.0, 1.5, 2.0]);
}

#[test]
fn results_are_bit_identical_run_to_run() {
    let mut rng = Lcg(4);
    let (m, k, n) = (300, 257, 301);
    let a: Vec<f32> = (0..m * k).map(|_| rng.uniform() as f32).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.uniform() as f32).collect();
    for threads in [1, 2] {
        let run = || {
            let mut c = vec![0f32; m * n];
            sgemm(
                1.0,
                MatRef::row_major(&a, m, k),
                MatRef::row_major(&b, k, n),
                0.0,
                MatMut::row_major(&mut c, m, n),
                threads,
            );
            c
        };
        let first = run();
        for _ in 0..3 {
            assert!(
                first
                    .iter()
                    .zip(run())
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "threads {threads}: results differ between runs"
            );
        }
    }
}

#[test]
#[should_panic(expected = "shapes do not chain: A is 2x3, B is 2x2")]
fn mismatched_inner_dimensions_panic_with_the_shapes() {
    let v = [0f32; 6];
    let mut c = [0f32; 4];
    sgemm(
        1.0,
        MatRef::row_major(&v, 2, 3),
        MatRef::row_major(&v[..4], 2, 2),
        0.0,
        MatMut::row_major(&mut c, 2, 2),
        1,
    );
}

#[test]
#[should_panic(
    expected = "view B (3x2, strides (2, 1), offset 1) reaches storage indices 1..=6 but its slice has 5 elements"
)]
fn views_reaching_past_their_slice_panic() {
    let v = [0f32; 6];
    let mut c = [0f32; 4];
    let b = MatRef {
        data: &v[..5],
        rows: 3,
        cols: 2,
        row_stride: 2,
        col_stride: 1,
        offset: 1,
    };
    sgemm(
        1.0,
        MatRef::row_major(&v, 2, 3),
        b,
        0.0,
        MatMut::row_major(&mut c, 2, 2),
        1,
    );
}

#[test]
#[should_panic(expected = "maps distinct elements to the same storage")]
fn an_output_with_overlapping_strides_panics() {
    let v = [0f32; 4];
    let mut c = [0f32; 4];
    let cm = MatMut {
        data: &mut c,
        rows: 2,
        cols: 2,
        row_stride: 1,
        col_stride: 1,
        offset: 0,
    };
    sgemm(
        1.0,
        MatRef::row_major(&v, 2, 2),
        MatRef::row_major(&v, 2, 2),
        0.0,
        cm,
        1,
    );
}

#[test]
fn one_and_two_threads_give_identical_bits() {
    // Threads split the output (blocks of C's rows, or columns when C is wider than
    // tall), never the k sum, and faer orders each k sum the same for any block: the
    // thread count changes no dot product's order. This pins that (the executor relies
    // on it for determinism) for row and column splits, blocks of uneven sizes, and
    // W6's shapes.
    let mut rng = Lcg(5);
    for &(m, k, n) in &[
        (300, 257, 301),
        (513, 2000, 129),
        (129, 700, 515),
        (256, 784, 512),
        (784, 256, 512),
        (1000, 33, 17),
    ] {
        let a: Vec<f32> = (0..m * k).map(|_| rng.uniform() as f32).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.uniform() as f32).collect();
        let run = |threads| {
            let mut c = vec![0f32; m * n];
            sgemm(
                1.0,
                MatRef::row_major(&a, m, k),
                MatRef::row_major(&b, k, n),
                0.0,
                MatMut::row_major(&mut c, m, n),
                threads,
            );
            c
        };
        let (one, two) = (run(1), run(2));
        let differ = one
            .iter()
            .zip(&two)
            .filter(|(x, y)| x.to_bits() != y.to_bits())
            .count();
        assert_eq!(
            differ, 0,
            "{m}x{k}x{n}: {differ} elements differ between 1 and 2 threads"
        );
    }
}

#[test]
fn narrow_outputs_match_naive_in_every_layout_and_do_not_depend_on_threads() {
    // n ≤ 16 takes the narrow kernels when A's rows (dot form) or columns (outer form)
    // are contiguous, the general GEMM otherwise: every layout, widths 1..16, row counts
    // with partial 16-row blocks and inner sizes with partial 16-lane chunks, α and β.
    let mut rng = Lcg(9);
    for &(m, k, n) in &[
        (16, 16, 1),
        (37, 17, 7),
        (256, 512, 10),
        (100, 33, 16),
        (1000, 300, 10),
    ] {
        for (li, &la) in LAYOUTS_5.iter().enumerate() {
            let lb = LAYOUTS_5[(li + 2) % 5];
            let lc = LAYOUTS_5[(li + 4) % 5];
            let a = Mat::<f32>::random(&mut rng, m, k, la);
            let b = Mat::<f32>::random(&mut rng, k, n, lb);
            let c = Mat::<f32>::random(&mut rng, m, n, lc);
            let c0 = c.vals.clone();
            for (alpha, beta) in [(1.0, 0.0), (0.5, 1.0), (-1.5, 0.25)] {
                let mut runs = Vec::new();
                for threads in [1, 2] {
                    let mut cc = c.clone();
                    sgemm(
                        alpha as f32,
                        a.view(),
                        b.view(),
                        beta as f32,
                        cc.view_mut(),
                        threads,
                    );
                    let what = format!(
                        "narrow {m}x{k}x{n} {la:?}·{lb:?}→{lc:?} α={alpha} β={beta} threads {threads}"
                    );
                    check(&what, (alpha, beta), &a, &b, &c0, &cc, 2f64.powi(-24));
                    runs.push(cc.store.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
                }
                assert_eq!(
                    runs[0], runs[1],
                    "{m}x{k}x{n} {la:?}: 1 and 2 threads differ"
                );
            }
        }
    }
}

mod own_f32;
