//! Tests of the own f32 kernel against f64 references.

use super::*;

/// `C (+)= A·B` on the own kernel with a given tile and blocks, A and B read row- or
/// column-major, against an f64 reference within the dot-product bound.
fn check_plan(plan: Plan, shape: (usize, usize, usize), a_t: bool, b_t: bool, add: bool) {
    check_plan_on(plan, shape, a_t, b_t, add, 2);
}

/// [`check_plan`] on `threads` threads, returning C.
fn check_plan_on(
    plan: Plan,
    (m, k, n): (usize, usize, usize),
    a_t: bool,
    b_t: bool,
    add: bool,
    threads: usize,
) -> Vec<f32> {
    let mut seed = 7u32 + (m * 31 + k * 7 + n) as u32;
    let mut rnd = || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    };
    let a: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rnd()).collect();
    let c0: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
    // Element (i, p) of A at i·k + p (row-major) or p·m + i (A stored transposed).
    let (ars, acs) = if a_t {
        (1, m as isize)
    } else {
        (k as isize, 1)
    };
    let (brs, bcs) = if b_t {
        (1, k as isize)
    } else {
        (n as isize, 1)
    };
    let mut c = c0.clone();
    let src = |v: &[f32], rs, cs| Src {
        ptr: v.as_ptr(),
        rs,
        cs,
    };
    let dst = Dst {
        ptr: c.as_mut_ptr(),
        rs: n as isize,
        cs: 1,
    };
    let (av, bv) = (src(&a, ars, acs), src(&b, brs, bcs));
    let job = Job::new(av, bv, dst, (m, n, k), add);
    // SAFETY: the views cover the three buffers exactly; C is distinct from A and B;
    // the test runs only where the kernel is available.
    unsafe {
        match plan.tile {
            TileShape::M12N32 => sgemm_on::<_, 12, 2>(F32, plan, job, threads),
            TileShape::M8N48 => sgemm_on::<_, 8, 3>(F32, plan, job, threads),
        }
    }
    for i in 0..m {
        for j in 0..n {
            let (mut want, mut mag) = (if add { c0[i * n + j] as f64 } else { 0.0 }, 0.0);
            mag += want.abs();
            for p in 0..k {
                let x = a[(i as isize * ars + p as isize * acs) as usize] as f64
                    * b[(p as isize * brs + j as isize * bcs) as usize] as f64;
                want += x;
                mag += x.abs();
            }
            let got = c[i * n + j] as f64;
            let bound = (k as f64 + 2.0) * 2f64.powi(-24) * mag;
            assert!(
                (got - want).abs() <= bound,
                "{plan:?} {m}x{k}x{n} a_t={a_t} b_t={b_t} add={add}: C[{i},{j}] = {got}, \
                 want {want} ± {bound:e}"
            );
        }
    }
    c
}

#[test]
fn row_split_products_share_b_packing_and_give_the_same_bits_on_1_to_4_threads() {
    if !available() {
        eprintln!("skipped: this CPU has no AVX-512 F/BW");
        return;
    }
    // Sharing is off by default; the bits must not depend on it either way.
    shared::FORCE.store(true, std::sync::atomic::Ordering::Relaxed);
    // M ≥ N, so two or more threads split C's rows and pack B together, in pieces of MC
    // rows times one packed block of B (up to 13 row pieces × 6 blocks, claimed block by
    // block, a piece waiting for its rows' previous block); small blocks give
    // several column and sum blocks (flags of blocks past the first, a padded last
    // column block, groups of 4 strips and a partial last group), and the transposed
    // operands take the other packing loops.
    let plans = [
        Plan {
            tile: TileShape::M8N48,
            kc: 37,
            mc: 24,
            nc: 240,
        },
        Plan {
            tile: TileShape::M8N48,
            kc: 512,
            mc: 128,
            nc: 8160,
        },
        Plan {
            tile: TileShape::M12N32,
            kc: 37,
            mc: 24,
            nc: 64,
        },
    ];
    let shapes = [(64, 75, 49), (300, 100, 250), (130, 38, 113), (40, 600, 16)];
    for plan in plans {
        for &shape in &shapes {
            for t in 0..4 {
                let (a_t, b_t, add) = (t & 1 == 1, t & 2 == 2, t == 3);
                let one = check_plan_on(plan, shape, a_t, b_t, add, 1);
                for threads in 2..=4 {
                    let many = check_plan_on(plan, shape, a_t, b_t, add, threads);
                    let same = crate::threads::same_bits(&one, &many);
                    assert!(
                        same,
                        "{plan:?} {shape:?} a_t={a_t} b_t={b_t}: {threads} threads differ from 1"
                    );
                }
            }
        }
    }
}

#[test]
fn both_tiles_match_f64_on_edge_shapes_odd_sums_and_transposed_operands() {
    if !available() {
        eprintln!("skipped: this CPU has no AVX-512 F/BW");
        return;
    }
    // Small blocks so that every edge appears: odd KC (the 8 × 48 loop's odd tail),
    // MC and NC smaller than the product, last strips of 1, 16, 17 and 33 columns
    // (1–3 vectors), last panels of 1 row, M = 1, N = 1, K = 1; 64, 112, 49 and 256
    // columns split their last 48 + rest columns as 32 + 32, 32 + 17 and 32 + 32.
    let plans = [
        Plan {
            tile: TileShape::M8N48,
            kc: 37,
            mc: 24,
            nc: 96,
        },
        Plan {
            tile: TileShape::M8N48,
            kc: 192,
            mc: 336,
            nc: 8160,
        },
        Plan {
            tile: TileShape::M12N32,
            kc: 37,
            mc: 24,
            nc: 64,
        },
    ];
    let shapes = [
        (1, 1, 1),
        (1, 75, 49),
        (33, 75, 1),
        (9, 38, 113),
        (25, 111, 96),
        (17, 200, 65),
        (49, 74, 145),
        (9, 38, 64),
        (17, 40, 112),
        (8, 5, 49),
        (3, 300, 256),
    ];
    for plan in plans {
        for (s, &shape) in shapes.iter().enumerate() {
            for t in 0..4 {
                check_plan(plan, shape, t & 1 == 1, t & 2 == 2, (s + t) % 2 == 1);
            }
        }
    }
}

#[test]
fn strips_cover_the_block_in_order_and_split_a_short_rest_after_48_columns() {
    let all = |nb, nr| {
        let s = Strips { nb, nr };
        (0..s.count()).map(|i| s.get(i)).collect::<Vec<_>>()
    };
    assert_eq!(all(256, 48)[4..], [(192, 32, 32), (224, 32, 32)]);
    assert_eq!(all(49, 48), [(0, 32, 32), (32, 17, 32)]);
    assert_eq!(all(16, 48), [(0, 16, 48)]);
    assert_eq!(all(113, 48), [(0, 48, 48), (48, 48, 48), (96, 17, 48)]);
    assert_eq!(all(80, 32), [(0, 32, 32), (32, 32, 32), (64, 16, 32)]);
    for nr in [32, 48] {
        for nb in 1..300 {
            let v = all(nb, nr);
            let mut next = 0;
            for &(j0, w, ld) in &v {
                assert!(j0 == next && w >= 1 && w <= ld && ld % 16 == 0 && ld <= nr);
                next = j0 + w;
            }
            assert_eq!(next, nb, "nb = {nb}, nr = {nr}: {v:?}");
            // The last strip's padded rows end inside the packing buffer.
            let &(j0, _, ld) = v.last().unwrap();
            assert!(j0 + ld <= nb.next_multiple_of(nr), "nb = {nb}: {v:?}");
        }
    }
}

#[test]
fn balanced_blocks_split_the_sums_evenly_and_never_exceed_kc() {
    assert_eq!(balanced(256, 192), 128);
    assert_eq!(balanced(300, 256), 150);
    assert_eq!(balanced(192, 192), 192);
    assert_eq!(balanced(193, 192), 97);
    assert_eq!(balanced(1, 192), 1);
    for k in 1..600 {
        let kc = balanced(k, 192);
        assert!(
            kc <= 192 && k.div_ceil(kc) == k.div_ceil(192),
            "k = {k}: {kc}"
        );
    }
}

/// `C (+)= A·B` on the 8 × 48 plan with A's rows `lda` f32 apart (NaN between the rows,
/// so a read past a row's `k` elements shows), A, B and the first C from fixed seeds.
fn product_with_row_stride(plan: Plan, (m, k, n): (usize, usize, usize), lda: usize) -> Vec<f32> {
    let mut seed = 11u32;
    let mut rnd = || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    };
    let mut a = vec![f32::NAN; m * lda];
    for i in 0..m {
        for p in 0..k {
            a[i * lda + p] = rnd();
        }
    }
    let b: Vec<f32> = (0..k * n).map(|_| rnd()).collect();
    let mut c: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
    let job = Job::new(
        Src {
            ptr: a.as_ptr(),
            rs: lda as isize,
            cs: 1,
        },
        Src {
            ptr: b.as_ptr(),
            rs: n as isize,
            cs: 1,
        },
        Dst {
            ptr: c.as_mut_ptr(),
            rs: n as isize,
            cs: 1,
        },
        (m, n, k),
        true,
    );
    // SAFETY: the views cover the buffers; C is distinct from A and B; the caller checked
    // that the kernel is available.
    unsafe { sgemm_on::<_, 8, 3>(F32, plan, job, 1) };
    c
}

#[test]
fn a_rows_read_in_place_give_the_bits_of_packed_panels() {
    if !available() {
        eprintln!("skipped: this CPU has no AVX-512 F/BW");
        return;
    }
    // The same A through a row stride the kernel reads in place (k, and IN_PLACE_LDA) and
    // one it packs (past IN_PLACE_LDA): the same sums in the same order, so the same bits.
    // The shapes cover full blocks, odd sums (37), the 8 × 32 last strips (1024 and 256
    // columns), a last block with a partial panel (61 rows: that block packed, the
    // others in place) and a last strip of 16 columns (packed).
    let plans = [
        Plan {
            tile: TileShape::M8N48,
            kc: 512,
            mc: 256,
            nc: 8160,
        },
        Plan {
            tile: TileShape::M8N48,
            kc: 37,
            mc: 24,
            nc: 240,
        },
    ];
    let shapes = [
        (64, 600, 1024),
        (40, 37, 256),
        (61, 100, 96),
        (16, 50, 64),
        (24, 75, 16),
    ];
    let lim = IN_PLACE_LDA as usize;
    for plan in plans {
        for &(m, k, n) in &shapes {
            let packed = product_with_row_stride(plan, (m, k, n), lim + 16);
            for lda in [k, lim] {
                let in_place = product_with_row_stride(plan, (m, k, n), lda);
                let same = crate::threads::same_bits(&packed, &in_place);
                assert!(
                    same,
                    "{plan:?} {m}x{k}x{n}: A read in place (lda {lda}) differs from packed"
                );
            }
        }
    }
}

#[test]
fn square_products_with_b_transposed_split_columns_and_give_the_same_bits_on_1_to_3_threads() {
    if !available() {
        eprintln!("skipped: this CPU has no AVX-512 F/BW");
        return;
    }
    // m == n with A read in place and B transposed: the threads split C's columns (each
    // transposes its half of B); with B in rows they split the rows. Both must give the
    // one-thread bits, within the f64 bound `check_plan_on` asserts.
    let plan = Plan {
        tile: TileShape::M8N48,
        kc: 64,
        mc: 32,
        nc: 8160,
    };
    for &(m, k) in &[(96, 40), (200, 130), (48, 7)] {
        for b_t in [true, false] {
            for add in [false, true] {
                let one = check_plan_on(plan, (m, k, m), false, b_t, add, 1);
                for threads in 2..=3 {
                    let many = check_plan_on(plan, (m, k, m), false, b_t, add, threads);
                    assert!(
                        crate::threads::same_bits(&one, &many),
                        "{m}x{k}x{m} b_t={b_t} add={add}: {threads} threads differ from 1"
                    );
                }
            }
        }
    }
}
