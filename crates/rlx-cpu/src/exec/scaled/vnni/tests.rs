//! The integer-unit scaled matmul against a scalar model of its arithmetic (bit for bit)
//! and against the exact sum (within its stated bound), on shapes that leave partial
//! panels, strips, quads and K chunks; and the plan's refusals.

use super::super::Operand;
use super::super::test_data::{Data, Rng, codes, exact_sum, on_threads, operand, scales};
use super::*;
use rlx_ir::{DType, ScaleLayout, ScaledFormat, TensorData};

/// The kernel's arithmetic, one element at a time: per block the exact integer sum,
/// converted to f32 and added by one fused multiply-add with the product of the two
/// scales (each times its table's unit).
fn model(a: &Operand<'_>, b: &Operand<'_>, m: usize, n: usize, k: usize) -> Vec<f32> {
    let (ua, ub) = (
        int_codes(&a.lut).unwrap().unit,
        int_codes(&b.lut).unwrap().unit,
    );
    let block = if a.scales.is_some() {
        a.block
    } else {
        PER_TENSOR_BLOCK
    };
    let scale = |op: &Operand<'_>, row: usize, blk: usize, unit: f32| {
        op.scales
            .as_ref()
            .map_or(1.0, |s| s.get(row * (k / op.block) + blk))
            * unit
    };
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f32;
            for blk in 0..k.div_ceil(block) {
                let mut sum = 0i64;
                for p in blk * block..((blk + 1) * block).min(k) {
                    let x = a.lut[a.codes[i * k + p] as usize] / ua;
                    let y = b.lut[b.codes[j * k + p] as usize] / ub;
                    sum += x as i64 * y as i64;
                }
                let s = scale(a, i, blk, ua) * scale(b, j, blk, ub);
                acc = (sum as f32).mul_add(s, acc);
            }
            c[i * n + j] = acc;
        }
    }
    c
}

fn skip_without_vnni(test: &str) -> bool {
    if available() {
        return false;
    }
    eprintln!("{test}: skipped, this CPU lacks AVX-512 F/BW or AVX512_VNNI");
    true
}

/// `(format, layout, m, n, k)` cases: partial panels (m not a multiple of 4), strips
/// (n not a multiple of 48), per-tensor K tails (partial quads and blocks), blocks that
/// are not a multiple of 16 (the vector packer's 64-byte runs cross them) or not of 4
/// (the scalar packer only), and more sums than one K chunk.
fn cases() -> Vec<(ScaledFormat, ScaleLayout, usize, usize, usize)> {
    use ScaledFormat::{F4E2M1, F6E2M3};
    let mx = ScaleLayout::mx();
    vec![
        (F4E2M1, mx, 1, 1, 32),
        (F4E2M1, mx, 5, 47, 96),
        (F6E2M3, mx, 9, 97, 1088),
        (F4E2M1, ScaleLayout::nvfp4(), 7, 50, 528),
        (F6E2M3, ScaleLayout::nvfp4(), 4, 48, 64),
        (F4E2M1, ScaleLayout::PerTensor, 6, 49, 7),
        (F6E2M3, ScaleLayout::PerTensor, 3, 20, 700),
        (F4E2M1, ScaleLayout::BlockMxE8M0 { block: 12 }, 5, 30, 120),
        (F4E2M1, ScaleLayout::BlockMxE8M0 { block: 6 }, 2, 60, 66),
        (F6E2M3, ScaleLayout::BlockMxE8M0 { block: 1024 }, 3, 5, 2048),
    ]
}

#[test]
fn int_codes_take_fp4_and_fp6_e2m3_and_refuse_wider_formats() {
    let table = |f: ScaledFormat| std::array::from_fn(|c| f.decode(c as u8));
    let fp4 = int_codes(&table(ScaledFormat::F4E2M1)).unwrap();
    assert_eq!((fp4.unit, fp4.max), (0.5, 12));
    assert_eq!(fp4.bytes[0b0111], 12);
    assert_eq!(fp4.bytes[0b1001], -1);
    // The bits above the format's width are ignored.
    assert_eq!(fp4.bytes[0xf7], fp4.bytes[0x07]);
    let fp6 = int_codes(&table(ScaledFormat::F6E2M3)).unwrap();
    assert_eq!((fp6.unit, fp6.max), (0.125, 60));
    for f in [
        ScaledFormat::F6E3M2,
        ScaledFormat::F8E4M3,
        ScaledFormat::F8E5M2,
        ScaledFormat::F8E4M3Fnuz,
    ] {
        assert!(int_codes(&table(f)).is_none(), "{f} has no byte table");
    }
}

#[test]
fn the_kernel_equals_the_scalar_model_bit_for_bit_with_either_packer() {
    if skip_without_vnni("the_kernel_equals_the_scalar_model_bit_for_bit_with_either_packer") {
        return;
    }
    let mut rng = Rng(17);
    for (f, layout, m, n, k) in cases() {
        let data = Data::random(&mut rng, f, layout, (m, n, k));
        let (a, b) = data.operands();
        let plan = plan_here(&a, &b).unwrap_or_else(|| panic!("{f} {layout}: no plan"));
        let want = model(&a, &b, m, n, k);
        for vector in [true, false] {
            // The output holds garbage: the product must overwrite it.
            let mut c = vec![f32::NAN; m * n];
            accumulate_packing(&plan, &a, &b, (m, n, k), &mut c, vector);
            for (idx, (g, w)) in c.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "{f} {layout} {m}×{n}×{k} (vector packing {vector}) at {idx}: {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn the_kernel_stays_within_one_rounding_per_block_of_the_exact_sum() {
    if skip_without_vnni("the_kernel_stays_within_one_rounding_per_block_of_the_exact_sum") {
        return;
    }
    let mut rng = Rng(5);
    for (f, layout, m, n, k) in cases() {
        let data = Data::random(&mut rng, f, layout, (m, n, k));
        let (a, b) = data.operands();
        let plan = plan_here(&a, &b).unwrap();
        let mut c = vec![0f32; m * n];
        accumulate(&plan, &a, &b, (m, n, k), &mut c);
        let blocks = k.div_ceil(plan.block) as f64;
        for i in 0..m {
            for j in 0..n {
                let (want, abs) = exact_sum(&a, &b, i, j, k);
                let got = c[i * n + j] as f64;
                let bound = blocks * 2f64.powi(-24) * abs + 1e-30;
                assert!(
                    (got - want).abs() <= bound,
                    "{f} {layout} {m}×{n}×{k} at ({i}, {j}): {got} vs {want} (bound {bound})"
                );
            }
        }
    }
}

#[test]
fn the_result_does_not_depend_on_the_thread_count() {
    if skip_without_vnni("the_result_does_not_depend_on_the_thread_count") {
        return;
    }
    let mut rng = Rng(3);
    let (f, layout, m, n, k) = (ScaledFormat::F4E2M1, ScaleLayout::mx(), 1030, 150, 640);
    let data = Data::random(&mut rng, f, layout, (m, n, k));
    let (a, b) = data.operands();
    let plan = plan_here(&a, &b).unwrap();
    let run = |threads: usize| {
        let mut c = vec![0f32; m * n];
        on_threads(threads, || accumulate(&plan, &a, &b, (m, n, k), &mut c));
        c
    };
    let one = run(1);
    for threads in [2, 3] {
        let other = run(threads);
        assert!(
            crate::threads::same_bits(&one, &other),
            "{threads} threads changed the bits"
        );
    }
}

#[test]
fn the_plan_refuses_what_it_cannot_sum_exactly() {
    let mut rng = Rng(9);
    let (m, n, k) = (4, 4, 64);
    let fp4 = ScaledFormat::F4E2M1;
    let (qa, qb) = (codes(&mut rng, fp4, m, k), codes(&mut rng, fp4, n, k));
    let mx = ScaleLayout::mx();
    let (sa, sb) = (scales(&mut rng, mx, m, k), scales(&mut rng, mx, n, k));
    assert!(plan_here(&operand(fp4, mx, &qa, &sa), &operand(fp4, mx, &qb, &sb)).is_some());
    // fp8 on either side has no byte table.
    let fp8 = ScaledFormat::F8E4M3;
    assert!(plan_here(&operand(fp8, mx, &qa, &sa), &operand(fp4, mx, &qb, &sb)).is_none());
    assert!(plan_here(&operand(fp4, mx, &qa, &sa), &operand(fp8, mx, &qb, &sb)).is_none());
    // Block scales whose products leave the f32 normal range, or a NaN scale (E8M0 255).
    let with_scale = |code: u8| TensorData {
        dtype: DType::U8,
        dims: vec![m * k / 32],
        bytes: vec![code; m * k / 32],
    };
    for (code_a, code_b, why) in [
        (2, 2, "2⁻¹²⁵ · 2⁻¹²⁵ underflows"),
        (250, 250, "2¹²³ · 2¹²³ overflows a block's sum"),
        (255, 127, "a NaN scale"),
    ] {
        let (sa, sb) = (with_scale(code_a), with_scale(code_b));
        let a = operand(fp4, mx, &qa, &sa);
        let b = operand(fp4, mx, &qb, &sb);
        assert!(plan_here(&a, &b).is_none(), "planned despite {why}");
    }
    // Per-tensor scales sum blocks of 256 whatever K is.
    let one = TensorData::from_f32(&[1], &[1.0]);
    let pt = ScaleLayout::PerTensor;
    let plan = plan_here(&operand(fp4, pt, &qa, &one), &operand(fp4, pt, &qb, &one)).unwrap();
    assert_eq!(plan.block, PER_TENSOR_BLOCK);
}
