//! The packers' code readers against the f32 kernel on the decoded operands (bit for
//! bit) and the exact sum (within the f32 bound), for every table size, layout, K tail
//! and sum block that splits a scale block; special codes; thread counts; refusals.

use super::super::Operand;
use super::super::test_data::{
    Data, FORMATS, Rng, assert_within_f32_bound, codes, fit_k, on_threads, operand, scales,
};
use super::*;
use crate::gemm::decoding::F32;
use rlx_ir::{ScaleLayout, ScaledFormat, TensorData};

/// The own f32 kernel's `A·Bᵀ` of the operands decoded to f32 (`Operand::decode`), with
/// the views the codes path hands it.
fn decoded_product(a: &Operand<'_>, b: &Operand<'_>, (m, n, k): (usize, usize, usize)) -> Vec<f32> {
    let (mut av, mut bv) = (vec![0f32; m * k], vec![0f32; n * k]);
    a.decode(0, m, 0, k, &mut av);
    b.decode(0, n, 0, k, &mut bv);
    let mut c = vec![f32::NAN; m * n];
    let threads = rayon::current_num_threads();
    // SAFETY: the kernel runs here (the caller checked `available`); A holds m × k f32,
    // B n × k, C m × n.
    unsafe {
        sgemm_decoding(
            F32,
            Src {
                ptr: av.as_ptr(),
                rs: k as isize,
                cs: 1,
            },
            Src {
                ptr: bv.as_ptr(),
                rs: 1,
                cs: k as isize,
            },
            Dst {
                ptr: c.as_mut_ptr(),
                rs: n as isize,
                cs: 1,
            },
            (m, n, k),
            false,
            threads,
        )
    };
    c
}

/// Whether two results have the same bits (any NaN equals any NaN).
fn same(x: f32, y: f32) -> bool {
    x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan()
}

/// Whether this path runs here; says why not when it does not.
fn runs_here() -> bool {
    let on = enabled();
    if !on {
        eprintln!("skipped: this CPU lacks AVX-512 F/BW/VL (or RLX_SCALED_PACKED_CODES=0)");
    }
    on
}

/// Whether `c` is the f32 kernel's product of the decoded operands, bit for bit (any
/// NaN for a NaN).
fn equals_decoded(a: &Operand<'_>, b: &Operand<'_>, mnk: (usize, usize, usize), c: &[f32]) -> bool {
    let want = decoded_product(a, b, mnk);
    c.len() == want.len() && c.iter().zip(&want).all(|(&x, &y)| same(x, y))
}

#[test]
fn packed_codes_equal_the_f32_kernel_on_decoded_operands_bit_for_bit() {
    if !runs_here() {
        return;
    }
    let mut rng = Rng(7);
    let layouts = [
        ScaleLayout::mx(),
        ScaleLayout::nvfp4(),
        ScaleLayout::PerTensor,
        // Not a power of two: the scale's block found by division.
        ScaleLayout::BlockMxE8M0 { block: 48 },
    ];
    for f in FORMATS {
        for layout in layouts {
            for (m, n, k) in [
                (1usize, 1usize, 96usize),
                (1, 130, 96),
                (37, 1, 144),
                (9, 50, 2),
                (19, 97, 336),
                // Two sum blocks of the kernel (1568 = 2 · 784 on a 1024-sum plan; other
                // plans split it elsewhere): a block starts inside a scale block, so a
                // run of 16 codes meets two scales.
                (24, 70, 1568),
            ] {
                let k = fit_k(layout, k, 3);
                let data = Data::random(&mut rng, f, layout, (m, n, k));
                let (a, b) = data.operands();
                let mut c = vec![f32::NAN; m * n];
                assert!(multiply(&a, &b, (m, n, k), &mut c), "{f} {layout}: refused");
                let want = decoded_product(&a, &b, (m, n, k));
                for (e, (&got, &want)) in c.iter().zip(&want).enumerate() {
                    assert!(
                        same(got, want),
                        "{f} {layout} {m}×{n}×{k} at ({}, {}): {got} vs {want}",
                        e / n,
                        e % n
                    );
                }
                assert_within_f32_bound(&a, &b, &c, (m, n, k), &format!("{f} {layout}"));
            }
        }
    }
}

#[test]
fn packed_codes_mix_formats_and_carry_nan_and_infinity_codes() {
    if !runs_here() {
        return;
    }
    let mut rng = Rng(3);
    let (m, n, k, mx) = (5, 40, 128, ScaleLayout::mx());
    // A in fp8 E5M2 with an infinity and a NaN code, B in fp4.
    let mut qa = codes(&mut rng, ScaledFormat::F8E5M2, m, k);
    qa.bytes[k + 7] = 0x7c; // +inf: row 1 is ±inf or NaN wherever B's element is nonzero
    qa.bytes[3 * k + 100] = 0x7f; // NaN: row 3 is NaN
    let qb = codes(&mut rng, ScaledFormat::F4E2M1, n, k);
    let (sa, sb) = (scales(&mut rng, mx, m, k), scales(&mut rng, mx, n, k));
    let a = operand(ScaledFormat::F8E5M2, mx, &qa, &sa);
    let b = operand(ScaledFormat::F4E2M1, mx, &qb, &sb);
    let mut c = vec![0f32; m * n];
    assert!(multiply(&a, &b, (m, n, k), &mut c));
    assert!(equals_decoded(&a, &b, (m, n, k), &c));
    assert!((0..n).all(|j| c[3 * n + j].is_nan()), "a NaN code vanished");
    assert!(
        (0..n).any(|j| c[n + j].is_infinite()),
        "an infinity code vanished"
    );
}

#[test]
fn packed_codes_do_not_depend_on_the_thread_count() {
    if !runs_here() {
        return;
    }
    let mut rng = Rng(5);
    let (f, layout, m, n, k) = (ScaledFormat::F8E4M3, ScaleLayout::mx(), 70, 300, 1568);
    let data = Data::random(&mut rng, f, layout, (m, n, k));
    let (a, b) = data.operands();
    let run = |threads: usize| {
        let mut c = vec![0f32; m * n];
        assert!(on_threads(threads, || multiply(&a, &b, (m, n, k), &mut c)));
        c
    };
    let (one, two) = (run(1), run(2));
    assert!(one.iter().zip(&two).all(|(&x, &y)| same(x, y)));
}

#[test]
fn packed_codes_refuse_one_sum_and_blocks_under_sixteen_without_writing() {
    let mut rng = Rng(9);
    let f = ScaledFormat::F8E4M3;
    // K = 1: the kernel's views would have two unit strides, and its packers could read
    // a run across rows.
    let per_tensor = ScaleLayout::PerTensor;
    let (qa, qb) = (codes(&mut rng, f, 4, 1), codes(&mut rng, f, 3, 1));
    let one = TensorData::from_f32(&[1], &[1.0]);
    let a = operand(f, per_tensor, &qa, &one);
    let b = operand(f, per_tensor, &qb, &one);
    let mut c = vec![f32::NAN; 12];
    assert!(!multiply(&a, &b, (4, 3, 1), &mut c), "K = 1 taken");
    // Blocks of 12 sums: a run of 16 codes could meet three scales.
    let odd = ScaleLayout::BlockMxE8M0 { block: 12 };
    let (qa, qb) = (codes(&mut rng, f, 4, 48), codes(&mut rng, f, 3, 48));
    let (sa, sb) = (scales(&mut rng, odd, 4, 48), scales(&mut rng, odd, 3, 48));
    let a = operand(f, odd, &qa, &sa);
    let b = operand(f, odd, &qb, &sb);
    assert!(!multiply(&a, &b, (4, 3, 48), &mut c), "blocks of 12 taken");
    assert!(c.iter().all(|v| v.is_nan()), "a refusal wrote C");
}

#[test]
fn packed_codes_carry_special_codes_of_a_transposed_b_through_its_tiles() {
    if !runs_here() {
        return;
    }
    let mut rng = Rng(12);
    let (m, n, k, mx) = (6, 48, 96, ScaleLayout::mx());
    // B in fp8 E4M3 with a NaN code in row 20 (a full 16 × 16 tile of B's packing), A in
    // fp6; then the same B without it, whose tiles take the transposed decode.
    let qa = codes(&mut rng, ScaledFormat::F6E2M3, m, k);
    let mut qb = codes(&mut rng, ScaledFormat::F8E4M3, n, k);
    let (sa, sb) = (scales(&mut rng, mx, m, k), scales(&mut rng, mx, n, k));
    for nan in [true, false] {
        qb.bytes[20 * k + 37] = if nan { 0x7f } else { 0x01 };
        let a = operand(ScaledFormat::F6E2M3, mx, &qa, &sa);
        let b = operand(ScaledFormat::F8E4M3, mx, &qb, &sb);
        let mut c = vec![0f32; m * n];
        assert!(multiply(&a, &b, (m, n, k), &mut c));
        assert!(equals_decoded(&a, &b, (m, n, k), &c), "nan = {nan}");
        assert_eq!((0..m).all(|i| c[i * n + 20].is_nan()), nan);
    }
}
