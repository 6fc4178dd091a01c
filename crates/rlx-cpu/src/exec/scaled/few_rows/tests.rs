//! The few-rows path against a scalar model of its arithmetic (bit for bit) and the exact
//! sum (within the f32 bound), for every table size, layout and K tail; and its
//! refusals.

use super::super::Operand;
use super::super::test_data::{
    Data, FORMATS, Rng, assert_within_f32_bound, codes, fit_k, on_threads, scales,
};
use super::*;
use rlx_ir::{DType, ScaleLayout, ScaledFormat, TensorData};

/// The path's arithmetic one element at a time: lane `p mod 32` chains of fused
/// multiply-adds of the decoded values, folded in [`fold_lanes`]'s order.
fn model(a: &Operand<'_>, b: &Operand<'_>, m: usize, n: usize, k: usize) -> Vec<f32> {
    let (mut av, mut bv) = (vec![0f32; m * k], vec![0f32; n * k]);
    a.decode(0, m, 0, k, &mut av);
    b.decode(0, n, 0, k, &mut bv);
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut lanes = [0f32; 32];
            for p in 0..k {
                lanes[p % 32] = av[i * k + p].mul_add(bv[j * k + p], lanes[p % 32]);
            }
            c[i * n + j] = fold_lanes(&lanes);
        }
    }
    c
}

#[test]
fn few_rows_equal_the_scalar_model_bit_for_bit_and_stay_within_the_f32_bound() {
    if !available() {
        eprintln!("skipped: this CPU lacks AVX-512 F/BW");
        return;
    }
    let mut rng = Rng(11);
    let layouts = [
        ScaleLayout::mx(),
        ScaleLayout::nvfp4(),
        ScaleLayout::PerTensor,
    ];
    for f in FORMATS {
        for layout in layouts {
            for (m, n, k) in [
                (1usize, 1usize, 32usize),
                (3, 17, 96),
                (8, 40, 64),
                (2, 5, 160),
                (5, 3, 48),
                // Three groups of rows (the last of 4) and three K chunks.
                (20, 7, 1088),
            ] {
                // Per-tensor: a tail of 6 sums after the runs of 32; MX blocks need K a
                // multiple of 32 (NVFP4's of 16 allow K = 48).
                let k = fit_k(layout, k, 6);
                let data = Data::random(&mut rng, f, layout, (m, n, k));
                let (a, b) = data.operands();
                let mut c = vec![f32::NAN; m * n];
                assert!(
                    multiply(&a, &b, (m, n, k), &mut c, FEW_ROWS),
                    "{f} {layout}: refused"
                );
                let want = model(&a, &b, m, n, k);
                for (e, (got, want)) in c.iter().zip(&want).enumerate() {
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{f} {layout} {m}×{n}×{k} at ({}, {})",
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
fn few_rows_do_not_depend_on_the_thread_count() {
    if !available() {
        eprintln!("skipped: this CPU lacks AVX-512 F/BW");
        return;
    }
    let mut rng = Rng(2);
    let (f, layout, m, n, k) = (ScaledFormat::F8E4M3, ScaleLayout::mx(), 4, 300, 256);
    let data = Data::random(&mut rng, f, layout, (m, n, k));
    let (a, b) = data.operands();
    let run = |threads: usize| {
        let mut c = vec![0f32; m * n];
        assert!(on_threads(threads, || multiply(
            &a,
            &b,
            (m, n, k),
            &mut c,
            FEW_ROWS
        )));
        c
    };
    let one = run(1);
    let two = run(2);
    assert!(crate::threads::same_bits(&one, &two));
}

#[test]
fn few_rows_refuse_many_rows_odd_blocks_and_inexact_decodes() {
    let mut rng = Rng(4);
    let f = ScaledFormat::F8E4M3;
    let k = 48;
    let mx = ScaleLayout::mx();
    let (qa, qb) = (codes(&mut rng, f, 9, 96), codes(&mut rng, f, 4, 96));
    let (sa, sb) = (scales(&mut rng, mx, 9, 96), scales(&mut rng, mx, 4, 96));
    let a = Operand::new(f, mx, qa.view(), sa.view()).unwrap();
    let b = Operand::new(f, mx, qb.view(), sb.view()).unwrap();
    let mut c = vec![f32::NAN; 9 * 4];
    assert!(
        !multiply(&a, &b, (9, 4, 96), &mut c, 8),
        "9 rows taken with a limit of 8"
    );
    // Blocks of 12 sums are not whole runs of 16.
    let odd = ScaleLayout::BlockMxE8M0 { block: 12 };
    let (qa, qb) = (codes(&mut rng, f, 2, k), codes(&mut rng, f, 3, k));
    let (sa, sb) = (scales(&mut rng, odd, 2, k), scales(&mut rng, odd, 3, k));
    let a = Operand::new(f, odd, qa.view(), sa.view()).unwrap();
    let b = Operand::new(f, odd, qb.view(), sb.view()).unwrap();
    let mut c = vec![f32::NAN; 6];
    assert!(
        !multiply(&a, &b, (2, 3, k), &mut c, FEW_ROWS),
        "blocks of 12 taken"
    );
    // A block scale of 2⁻¹²⁷ makes fp8 elements subnormal: not exact in bf16.
    let k = 64;
    let tiny = TensorData {
        dtype: DType::U8,
        dims: vec![3 * k / 32],
        bytes: vec![0; 3 * k / 32],
    };
    let (qa, qb) = (codes(&mut rng, f, 2, k), codes(&mut rng, f, 3, k));
    let sa = scales(&mut rng, mx, 2, k);
    let a = Operand::new(f, mx, qa.view(), sa.view()).unwrap();
    let b = Operand::new(f, mx, qb.view(), tiny.view()).unwrap();
    assert!(
        !multiply(&a, &b, (2, 3, k), &mut c, FEW_ROWS),
        "subnormal decodes taken"
    );
    assert!(c.iter().all(|v| v.is_nan()), "a refusal wrote C");
}

#[test]
fn fp8_tables_decode_by_bit_arithmetic_outside_their_special_codes() {
    let table = |f: ScaledFormat| -> [f32; 256] { std::array::from_fn(|c| f.decode(c as u8)) };
    for (f, shift, factor, special) in [
        (ScaledFormat::F8E4M3, 20, 2f32.powi(120), (0x7f, 0x7f)),
        (ScaledFormat::F8E5M2, 21, 2f32.powi(112), (0x7c, 0x7c)),
        (ScaledFormat::F8E4M3Fnuz, 20, 2f32.powi(119), (0xff, 0x80)),
        (ScaledFormat::F8E5M2Fnuz, 21, 2f32.powi(111), (0xff, 0x80)),
    ] {
        let lut = table(f);
        let arith = arith_of(&lut).unwrap_or_else(|| panic!("{f}: no arithmetic decoding"));
        assert_eq!(
            (arith.shift, arith.factor, arith.special),
            (shift, factor, special),
            "{f}"
        );
        for c in 0..=255u8 {
            let covered = c & special.0 != special.1;
            let value = arith.raw(c) * arith.factor;
            assert_eq!(
                covered,
                value.to_bits() == lut[c as usize].to_bits(),
                "{f}: code {c:#04x} decodes to {value}, the table says {}",
                lut[c as usize]
            );
        }
    }
}

/// Runs of B's codes holding NaN or infinity codes take the table lookup; the result
/// is the scalar model's (NaN where it is NaN), in every row.
#[test]
fn fp8_runs_with_special_codes_give_the_model_nan_for_nan() {
    if !available() {
        eprintln!("skipped: this CPU lacks AVX-512 F/BW/VL");
        return;
    }
    let mut rng = Rng(8);
    for f in [ScaledFormat::F8E4M3, ScaledFormat::F8E5M2] {
        let (m, n, k) = (2, 6, 128);
        let layout = ScaleLayout::mx();
        let qa = codes(&mut rng, f, m, k);
        let mut qb = codes(&mut rng, f, n, k);
        // A NaN in row 1's second run, an infinity (e5m2) or a NaN in row 4's last.
        qb.bytes[k + 40] = 0x7f;
        qb.bytes[4 * k + 127] = 0xfc;
        let (sa, sb) = (
            scales(&mut rng, layout, m, k),
            scales(&mut rng, layout, n, k),
        );
        let a = Operand::new(f, layout, qa.view(), sa.view()).unwrap();
        let b = Operand::new(f, layout, qb.view(), sb.view()).unwrap();
        assert!(matches!(Lookup::of(&b), Some(Lookup::Arith(..))), "{f}");
        let mut c = vec![0f32; m * n];
        assert!(multiply(&a, &b, (m, n, k), &mut c, FEW_ROWS));
        let want = model(&a, &b, m, n, k);
        for (idx, (g, w)) in c.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{f} at {idx}: {g} vs {w}"
            );
        }
        assert!(c[1].is_nan() && c[n + 1].is_nan(), "{f}: the NaN row");
    }
}
