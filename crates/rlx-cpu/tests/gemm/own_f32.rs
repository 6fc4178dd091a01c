//! The f32 kernel paths of `sgemm_with`: rlx's own AVX-512 kernel (tile edges, block
//! edges, layouts, thread counts, NaN/∞, batches of small products, agreement with faer)
//! and the rule `F32Path::Auto` follows.

use super::*;

/// The own AVX-512 f32 path, or `None` (with the reason printed) on CPUs without it.
fn own_path() -> Option<F32Path> {
    if F32Path::Avx512.available() {
        Some(F32Path::Avx512)
    } else {
        eprintln!("skipped: this CPU has no AVX-512 F/BW, so the own f32 kernel does not exist");
        None
    }
}

#[test]
fn own_f32_path_matches_naive_on_tile_edges_in_every_layout_and_thread_count() {
    // The packed kernel (12 × 32 tiles with KC = 256, MC = 192, or 8 × 48 tiles with KC and
    // MC from the caches, 512 and 256 on Sapphire Rapids): sizes one short of and one past
    // each, M = 1 and N = 1 (N = 1 with M, K ≥ 16 goes to the
    // narrow kernels), every layout of A, B and C, overwrite and accumulate, 1–3 threads
    // with identical bits.
    let Some(own) = own_path() else { return };
    let mut rng = Lcg(21);
    let sizes = [
        (1, 1, 1),
        (1, 300, 37),
        (37, 300, 1),
        (1, 1025, 700),
        (11, 255, 31),
        (13, 257, 33),
        (13, 511, 33),
        (25, 1025, 65),
        (143, 40, 511),
        (145, 513, 545),
    ];
    for (si, &(m, k, n)) in sizes.iter().enumerate() {
        for (li, &la) in LAYOUTS_5.iter().enumerate() {
            if m * n * k > 10_000_000 && li > 1 {
                continue; // the big shape in two layouts only (the f64 reference is slow)
            }
            let lb = LAYOUTS_5[(li + si) % 5];
            let lc = LAYOUTS_5[(li + 2 * si + 1) % 5];
            let a = Mat::<f32>::random(&mut rng, m, k, la);
            let b = Mat::<f32>::random(&mut rng, k, n, lb);
            let c = Mat::<f32>::random(&mut rng, m, n, lc);
            let c0 = c.vals.clone();
            for beta in [0.0, 1.0] {
                let mut runs = Vec::new();
                for threads in [1, 2, 3] {
                    let mut cc = c.clone();
                    sgemm_with(
                        own,
                        1.0,
                        a.view(),
                        b.view(),
                        beta as f32,
                        cc.view_mut(),
                        threads,
                    );
                    let what =
                        format!("own {m}x{k}x{n} {la:?}·{lb:?}→{lc:?} β={beta} threads {threads}");
                    check(&what, (1.0, beta), &a, &b, &c0, &cc, 2f64.powi(-24));
                    runs.push(cc.store.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
                }
                assert!(
                    runs.windows(2).all(|w| w[0] == w[1]),
                    "own {m}x{k}x{n} {la:?}: the thread count changed bits"
                );
            }
        }
    }
}

#[test]
fn own_f32_path_propagates_nan_and_inf_and_ignores_nan_in_an_overwritten_c() {
    let Some(own) = own_path() else { return };
    let (m, k, n) = (40, 300, 70);
    let mut rng = Lcg(22);
    let mut a: Vec<f32> = (0..m * k).map(|_| rng.uniform() as f32).collect();
    let b0: Vec<f32> = (0..k * n).map(|_| rng.uniform() as f32).collect();
    let mut b = b0.clone();
    a[3 * k + 5] = f32::NAN; // row 3 of C: NaN
    for i in 0..m {
        a[i * k + 7] = 1.0; // column 7 of A positive ...
    }
    a[10 * k + 7] = 0.0; // ... but for row 10: 0 · ∞ = NaN at C[10, 9]
    b[7 * n + 9] = f32::INFINITY; // column 9 of C: +∞
    for threads in [1, 2] {
        let mut c = vec![f32::NAN; m * n];
        sgemm_with(
            own,
            1.0,
            MatRef::row_major(&a, m, k),
            MatRef::row_major(&b, k, n),
            0.0,
            MatMut::row_major(&mut c, m, n),
            threads,
        );
        for i in 0..m {
            for j in 0..n {
                let v = c[i * n + j];
                let want_nan = i == 3 || (i == 10 && j == 9);
                if want_nan {
                    assert!(v.is_nan(), "C[{i},{j}] = {v}, want NaN");
                } else if j == 9 {
                    assert_eq!(v, f32::INFINITY, "C[{i},{j}]");
                } else {
                    assert!(
                        v.is_finite(),
                        "C[{i},{j}] = {v}: NaN/∞ leaked from C or A/B"
                    );
                }
            }
        }
    }
}

#[test]
fn own_f32_path_many_small_products_side_by_side_match_serial_bits() {
    // The contraction executor runs a batch of small products one per thread; each
    // thread keeps its packing buffers between calls, so products of changing sizes
    // interleave on the same buffers. Every result must equal the same product computed
    // alone, and the naive reference.
    let Some(own) = own_path() else { return };
    use rayon::prelude::*;
    let mut rng = Lcg(23);
    let shapes: Vec<(usize, usize, usize)> = (0..48)
        .map(|i| match i % 4 {
            0 => (128, 32, 128),
            1 => (128, 128, 32),
            2 => (17, 300, 45),
            _ => (200, 1030, 70),
        })
        .collect();
    let ops: Vec<(Mat<f32>, Mat<f32>)> = shapes
        .iter()
        .enumerate()
        .map(|(i, &(m, k, n))| {
            let lb = if i % 3 == 0 {
                Layout::ColMajor
            } else {
                Layout::RowMajor
            };
            (
                Mat::<f32>::random(&mut rng, m, k, Layout::RowMajor),
                Mat::<f32>::random(&mut rng, k, n, lb),
            )
        })
        .collect();
    let one = |(a, b): &(Mat<f32>, Mat<f32>)| {
        let mut c = vec![0f32; a.r * b.c];
        sgemm_with(
            own,
            1.0,
            a.view(),
            b.view(),
            0.0,
            MatMut::row_major(&mut c, a.r, b.c),
            1,
        );
        c
    };
    let serial: Vec<Vec<f32>> = ops.iter().map(one).collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let par: Vec<Vec<f32>> = pool.install(|| ops.par_iter().map(one).collect());
    for (i, ((s, p), (a, b))) in serial.iter().zip(&par).zip(&ops).enumerate() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(s),
            bits(p),
            "product {i} ({}x{}x{}) differs",
            a.r,
            a.c,
            b.c
        );
        let cm = Mat::from_row_major(s.clone(), a.r, b.c);
        let c0 = vec![0.0; a.r * b.c];
        check(
            &format!("batch {i}"),
            (1.0, 0.0),
            a,
            b,
            &c0,
            &cm,
            2f64.powi(-24),
        );
    }
}

#[test]
fn every_f32_path_rejects_views_past_their_slice() {
    for path in F32Path::ALL.into_iter().filter(|p| p.available()) {
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
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            sgemm_with(
                path,
                1.0,
                MatRef::row_major(&v, 2, 3),
                b,
                0.0,
                MatMut::row_major(&mut c, 2, 2),
                1,
            )
        }));
        let msg = r.expect_err("an out-of-bounds view must panic");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("reaches storage indices 1..=6 but its slice has 5 elements"),
            "{}: {msg}",
            path.name()
        );
    }
}

#[test]
fn own_and_faer_paths_agree_within_the_dot_product_bound() {
    // The two paths sum in different orders; both must lie within (k+2)·u·Σ|ab| of the
    // exact value, so within twice that of each other (checked per element, W11's shapes).
    let Some(own) = own_path() else { return };
    let mut rng = Lcg(24);
    for &(m, k, n) in &[(256, 256, 192), (64, 1024, 96)] {
        let a = Mat::<f32>::random(&mut rng, m, k, Layout::RowMajor);
        let b = Mat::<f32>::random(&mut rng, k, n, Layout::ColMajor);
        let run = |p| {
            let mut c = vec![0f32; m * n];
            sgemm_with(
                p,
                1.0,
                a.view(),
                b.view(),
                0.0,
                MatMut::row_major(&mut c, m, n),
                2,
            );
            c
        };
        let (x, y) = (run(own), run(F32Path::Faer));
        let (_, mag) = reference(&a, &b);
        for i in 0..m {
            for j in 0..n {
                let bound = 2.0 * (k as f64 + 2.0) * 2f64.powi(-24) * mag[i * n + j];
                let d = (x[i * n + j] as f64 - y[i * n + j] as f64).abs();
                assert!(
                    d <= bound,
                    "{m}x{k}x{n} C[{i},{j}]: own {} faer {} (bound {bound:e})",
                    x[i * n + j],
                    y[i * n + j]
                );
            }
        }
    }
}

#[test]
fn auto_path_takes_the_own_kernel_exactly_for_large_transposed_a_or_wide_products_on_intel() {
    // Auto's rule: at least 2²² multiply-adds with A read transposed (its columns
    // contiguous) → the own kernel; on Intel (the 8 × 48 tile) also A's rows contiguous
    // with at least 2²⁴ multiply-adds and a multiple of 48 or at least 256 columns; a
    // smaller product or any other layout → faer. Checked by comparing bits with the two
    // forced paths at a K where their summation orders differ.
    let Some(own) = own_path() else { return };
    let intel = {
        let id = std::arch::x86_64::__cpuid(0);
        (id.ebx, id.edx, id.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e)
    };
    // RLX_GEMM_F32_PLAN (a benchmarking override) can change the tile, and with it the
    // rule for A's rows contiguous: only the transposed-A cases hold then.
    let overridden = std::env::var_os("RLX_GEMM_F32_PLAN").is_some();
    let mut rng = Lcg(25);
    let k = 2100;
    for (m, n, la, want_own) in [
        (64, 128, Layout::ColMajor, true),
        // 4.2 M multiply-adds (just above 2²²) and 3.15 M (below).
        (40, 50, Layout::ColMajor, true),
        (30, 50, Layout::ColMajor, false),
        (64, 128, Layout::RowMajor, false),
        (32, 480, Layout::RowMajor, intel),
        (24, 400, Layout::RowMajor, intel),
        (32, 256, Layout::RowMajor, intel),
        (64, 250, Layout::RowMajor, false),
        (8, 50, Layout::RowMajor, false),
    ] {
        if overridden && la == Layout::RowMajor {
            continue;
        }
        let a = Mat::<f32>::random(&mut rng, m, k, la);
        let b = Mat::<f32>::random(&mut rng, k, n, Layout::RowMajor);
        let run = |p| {
            let mut c = vec![0f32; m * n];
            sgemm_with(
                p,
                1.0,
                a.view(),
                b.view(),
                0.0,
                MatMut::row_major(&mut c, m, n),
                1,
            );
            c.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        let (auto, own_bits, faer) = (run(F32Path::Auto), run(own), run(F32Path::Faer));
        let differ = own_bits.iter().zip(&faer).filter(|(x, y)| x != y).count();
        assert!(
            differ > 0,
            "{m}x{k}x{n} {la:?}: the paths should sum in different orders at k = {k}"
        );
        let want = if want_own { &own_bits } else { &faer };
        assert_eq!(
            &auto, want,
            "{m}x{k}x{n} {la:?}: auto took the wrong kernel"
        );
    }
}

#[test]
fn own_f32_kernel_block_edges_match_naive_in_the_packed_layouts_and_any_thread_count() {
    // The own kernel's blocks: 12 × 32 tiles, KC = 256 sums, MC = 192 rows, NC = 2048
    // columns (8 × 48 tiles on Intel: see gemm::f32_avx512's unit tests for its edges); 16-sum register transposes when A's rows or B's columns are contiguous.
    // Sizes one short of / one past each block, exact multiples, and outputs wider than
    // tall (split by columns on several threads), in the four contiguous layouts of A and
    // B (the vectorized packers) with row- and column-major C, overwrite and accumulate.
    let Some(own) = own_path() else { return };
    let mut rng = Lcg(26);
    let sizes = [
        (12, 16, 32),
        (191, 15, 33),
        (193, 17, 31),
        (385, 257, 65),
        (24, 512, 64),
        (13, 20, 2049),
        (5, 3, 2080),
    ];
    let contiguous = [Layout::RowMajor, Layout::ColMajor];
    for &(m, k, n) in &sizes {
        for (li, &la) in contiguous.iter().enumerate() {
            for &lb in &contiguous {
                let lc = contiguous[(li + m) % 2];
                let a = Mat::<f32>::random(&mut rng, m, k, la);
                let b = Mat::<f32>::random(&mut rng, k, n, lb);
                let c = Mat::<f32>::random(&mut rng, m, n, lc);
                for beta in [0.0, 1.0] {
                    let mut runs = Vec::new();
                    for threads in [1, 2, 3] {
                        let mut cc = c.clone();
                        let (av, bv) = (a.view(), b.view());
                        sgemm_with(own, 1.0, av, bv, beta as f32, cc.view_mut(), threads);
                        let what = format!("{m}x{k}x{n} {la:?}·{lb:?}→{lc:?} β={beta} t={threads}");
                        check(&what, (1.0, beta), &a, &b, &c.vals, &cc, 2f64.powi(-24));
                        runs.push(cc.store.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
                    }
                    assert!(
                        runs.windows(2).all(|w| w[0] == w[1]),
                        "{m}x{k}x{n} {la:?}·{lb:?}: the thread count changed bits"
                    );
                }
            }
        }
    }
}

#[test]
fn own_f32_kernel_carries_nan_and_inf_across_sum_blocks() {
    // A NaN and an ∞ in the second block of 256 sums reach the partial sums stored after
    // the first block: C rows / columns through them must come out NaN / ∞, when C is
    // overwritten and when it is added to, in both packed layouts of A.
    let Some(own) = own_path() else { return };
    let (m, k, n) = (30, 600, 70);
    let mut rng = Lcg(27);
    for la in [Layout::RowMajor, Layout::ColMajor] {
        let mut a = Mat::<f32>::random(&mut rng, m, k, la);
        let mut b = Mat::<f32>::random(&mut rng, k, n, Layout::RowMajor);
        for i in 0..m {
            a.set(i, 300, if i == 4 { f32::NAN } else { 1.0 });
        }
        b.set(300, 9, f32::INFINITY);
        for beta in [0.0f32, 1.0] {
            let mut c = vec![if beta == 0.0 { f32::NAN } else { 0.5 }; m * n];
            sgemm_with(
                own,
                1.0,
                a.view(),
                b.view(),
                beta,
                MatMut::row_major(&mut c, m, n),
                2,
            );
            for i in 0..m {
                for j in 0..n {
                    let v = c[i * n + j];
                    if i == 4 {
                        assert!(v.is_nan(), "{la:?} β={beta} C[{i},{j}] = {v}, want NaN");
                    } else if j == 9 {
                        assert_eq!(v, f32::INFINITY, "{la:?} β={beta} C[{i},{j}]");
                    } else {
                        assert!(v.is_finite(), "{la:?} β={beta} C[{i},{j}] = {v}");
                    }
                }
            }
        }
    }
}
