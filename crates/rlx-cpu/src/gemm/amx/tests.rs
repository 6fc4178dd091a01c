use super::*;
use crate::gemm::lowp::{LowpPath, bf16, gemm_half_with};
use crate::gemm::{MatMut, MatRef};

/// `vals` copied so that element 0 sits `shift` elements past a 64-byte boundary:
/// (storage, index of element 0).
fn placed(vals: &[bf16], shift: usize) -> (Vec<bf16>, usize) {
    let mut store = vec![bf16::ZERO; vals.len() + 64];
    let skip = ((store.as_ptr() as usize).next_multiple_of(64) - store.as_ptr() as usize) / 2;
    let at = skip + shift;
    store[at..at + vals.len()].copy_from_slice(vals);
    (store, at)
}

fn values(len: usize, seed: u64) -> Vec<bf16> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            bf16::from_f32((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
        })
        .collect()
}

#[test]
fn a_read_in_place_gives_the_packed_bits_and_the_f64_product() {
    if !available() {
        println!("skipped: this CPU or OS has no usable AMX-BF16 tiles");
        return;
    }
    // K past one micro-kernel step (256) and past one super-block (2048), M with and
    // without a partial row panel, N = 1 and odd; accumulate or overwrite; 1 and 2
    // threads (a thread's block of rows may be read in place while another's is packed).
    let cases = [
        (32, 32, 1),
        (64, 96, 33),
        (70, 288, 40),
        (96, 1056, 64),
        (32, 2112, 17),
    ];
    for (i, &(m, k, n)) in cases.iter().enumerate() {
        let (av, bv) = (values(m * k, 7 + i as u64), values(k * n, 99 + i as u64));
        let c0: Vec<f32> = (0..m * n).map(|x| (x % 7) as f32 - 3.0).collect();
        for (accumulate, threads) in [(false, 1), (true, 1), (false, 2)] {
            let run = |shift: usize| {
                let (store, at) = placed(&av, shift);
                let a = MatRef {
                    offset: at,
                    ..MatRef::row_major(&store, m, k)
                };
                if shift == 0 && m.is_multiple_of(32) {
                    let src = Src {
                        ptr: store[at..].as_ptr() as *const u16,
                        rs: k as isize,
                        cs: 1,
                    };
                    let amx = Amx {
                        in_place: true,
                        ..Amx::new().expect("AMX checked")
                    };
                    assert!(amx.a_in_place(src, m, k), "{m}x{k}: in place expected");
                }
                let mut c = c0.clone();
                gemm_half_with(
                    LowpPath::Amx,
                    a,
                    MatRef::row_major(&bv, k, n),
                    MatMut::row_major(&mut c, m, n),
                    accumulate,
                    threads,
                );
                c
            };
            // One element off the line boundary: the same product from packed A.
            let (direct, packed) = (run(0), run(1));
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&direct), bits(&packed), "{m}x{k}x{n} acc {accumulate}");
            for r in 0..m {
                for j in 0..n {
                    let (mut exact, mut mag) = (0f64, 0f64);
                    for p in 0..k {
                        let t = av[r * k + p].to_f64() * bv[p * n + j].to_f64();
                        exact += t;
                        mag += t.abs();
                    }
                    if accumulate {
                        exact += c0[r * n + j] as f64;
                        mag += c0[r * n + j].abs() as f64;
                    }
                    let got = direct[r * n + j] as f64;
                    let tol = (k + 2) as f64 * 2f64.powi(-24) * mag;
                    assert!(
                        (got - exact).abs() <= tol,
                        "{m}x{k}x{n} ({r}, {j}): {got} vs {exact} (tol {tol:e})"
                    );
                }
            }
        }
    }
}

#[test]
fn a_is_packed_when_misaligned_transposed_4k_aliased_or_ragged() {
    let store = vec![0u16; 64 * 4096 + 64];
    let skip = ((store.as_ptr() as usize).next_multiple_of(64) - store.as_ptr() as usize) / 2;
    let src = |off: usize, rs: isize, cs: isize| Src {
        ptr: store[skip + off..].as_ptr(),
        rs,
        cs,
    };
    let amx = Amx {
        blocking: tuning().0,
        in_place: true,
        stream_b: false,
    };
    assert!(amx.a_in_place(src(0, 96, 1), 64, 96));
    assert!(
        !amx.a_in_place(src(1, 96, 1), 64, 96),
        "rows off the line boundary"
    );
    assert!(!amx.a_in_place(src(0, 1, 96), 64, 96), "column-major A");
    assert!(
        !amx.a_in_place(src(0, 2048, 1), 64, 96),
        "rows 4 KiB apart alias in L1"
    );
    assert!(
        !amx.a_in_place(src(0, 96, 1), 48, 96),
        "a partial row panel"
    );
    assert!(
        !amx.a_in_place(src(0, 100, 1), 64, 100),
        "a partial sum chunk"
    );
}

/// `C (+)= A·B` through the driver with one AMX kernel variant; A is `m × k` (row-major
/// or, with `ta`, the transpose of a `k × m` row-major store), B `k × n` row-major, C
/// `m × n` with row stride `ldc` starting `c_at` elements into `c`.
fn run_variant(
    kern: &Amx,
    (av, ta): (&[bf16], bool),
    bv: &[bf16],
    (m, n, k): (usize, usize, usize),
    (c, c_at, ldc): (&mut [f32], usize, usize),
    accumulate: bool,
) {
    let a = Src {
        ptr: av.as_ptr() as *const u16,
        rs: if ta { 1 } else { k as isize },
        cs: if ta { m as isize } else { 1 },
    };
    let b = Src {
        ptr: bv.as_ptr() as *const u16,
        rs: n as isize,
        cs: 1,
    };
    assert!(c.len() >= c_at + (m - 1) * ldc + n);
    let dst = crate::gemm::lowp_drive::Dst {
        ptr: c[c_at..].as_mut_ptr(),
        rs: ldc as isize,
        cs: 1,
    };
    // SAFETY: A holds m·k, B k·n elements; C's m rows of n elements from c_at with row
    // stride ldc >= n are inside `c` (asserted) and distinct; AMX is available (caller).
    unsafe { crate::gemm::lowp_drive::drive(kern, a, b, dst, (m, n, k), accumulate) }
}

#[test]
fn every_blocking_loop_order_and_load_hint_gives_the_same_bits() {
    if !available() {
        println!("skipped: this CPU or OS has no usable AMX-BF16 tiles");
        return;
    }
    let base = Amx::new().expect("AMX checked");
    let mut kernels = Vec::new();
    for rows_outer in [false, true] {
        for (kc, kc_in_place) in [(2048, 1024), (256, 256), (64, 32)] {
            for (in_place, stream_b) in [(true, false), (false, true), (true, true)] {
                kernels.push(Amx {
                    blocking: Blocking {
                        kc,
                        kc_in_place,
                        kc_short: kc_in_place,
                        mc: 64,
                        nc: 96,
                        rows_outer,
                    },
                    in_place,
                    stream_b,
                });
            }
        }
    }
    kernels.push(base);
    // Tails in every dimension, M = 1, N = 1, K = 1, K past a super-block (2048) and
    // sums that are not a multiple of the 32-sum tile; A row-major (read in place when
    // its rows are whole lines) or transposed; C with a row stride of its own, 64-byte
    // aligned or one element off (tile stores and the in-loop prefetch then split lines).
    let cases = [
        (1, 1, 1),
        (1, 40, 64),
        (33, 1, 96),
        (64, 96, 64),
        (70, 130, 33),
        (96, 64, 1056),
        (32, 200, 2080),
        (128, 192, 256),
    ];
    for (i, &(m, n, k)) in cases.iter().enumerate() {
        let (av, bv) = (values(m * k, 3 + i as u64), values(k * n, 50 + i as u64));
        let ldc = n + 5;
        for (ta, accumulate, shift) in [(false, false, 0), (true, true, 1), (false, true, 1)] {
            let len = m * ldc + 64;
            let c0: Vec<f32> = (0..len).map(|x| (x % 5) as f32 - 2.0).collect();
            let (cstore, c_at) = {
                let mut v = c0.clone();
                let skip = ((v.as_ptr() as usize).next_multiple_of(64) - v.as_ptr() as usize) / 4;
                v.truncate(len);
                (v, skip + shift)
            };
            let (astore, a_at) = placed(&av, 0);
            let a = &astore[a_at..a_at + m * k];
            let mut first: Option<Vec<u32>> = None;
            for kern in &kernels {
                let mut c = cstore.clone();
                run_variant(
                    kern,
                    (a, ta),
                    &bv,
                    (m, n, k),
                    (&mut c, c_at, ldc),
                    accumulate,
                );
                let bits: Vec<u32> = c.iter().map(|x| x.to_bits()).collect();
                match &first {
                    None => {
                        // The first variant against the f64 product.
                        for r in 0..m {
                            for j in 0..n {
                                let (mut exact, mut mag) = (0f64, 0f64);
                                for p in 0..k {
                                    let x = if ta { a[p * m + r] } else { a[r * k + p] };
                                    let t = x.to_f64() * bv[p * n + j].to_f64();
                                    exact += t;
                                    mag += t.abs();
                                }
                                let at = c_at + r * ldc + j;
                                if accumulate {
                                    exact += cstore[at] as f64;
                                    mag += cstore[at].abs() as f64;
                                }
                                let got = c[at] as f64;
                                let tol = (k + 2) as f64 * 2f64.powi(-24) * mag;
                                assert!(
                                    (got - exact).abs() <= tol,
                                    "{m}x{k}x{n} ({r}, {j}): {got} vs {exact}"
                                );
                            }
                        }
                        // Elements outside C's view are untouched.
                        for (x, (&got, &was)) in c.iter().zip(&cstore).enumerate() {
                            let inside = x >= c_at && (x - c_at) / ldc < m && (x - c_at) % ldc < n;
                            if !inside {
                                assert_eq!(got.to_bits(), was.to_bits(), "{m}x{k}x{n}: {x}");
                            }
                        }
                        first = Some(bits);
                    }
                    Some(want) => assert!(
                        want == &bits,
                        "{m}x{k}x{n} ta {ta} acc {accumulate}: {:?} differs",
                        kern.blocking
                    ),
                }
            }
        }
    }
}
