//! Whole-op kernels for nn ops that stay opaque: the oracle's definition, at memory
//! speed.
//!
//! `softmax_cross_entropy_with_logits` is kept whole rather than lowered to primitives
//! because its labels are data: a label outside `0..C` (or not a whole number) is an
//! error naming the row, which a lowered compare-and-select would turn into a silent
//! `logsumexp` loss. Run through the oracle (f64, element by element) it cost 240 ms
//! of a 1.3 s W11 step at `[1024, 512]`; this kernel reads each f32 row where it lies
//! (max, then one pass exponentiating the shifted row in registers and summing in f64
//! lanes), rows spread over the pool. (An earlier version wrote the shifted row to a
//! scratch, exponentiated it there with `math::unary_f32_inplace` and summed it in a third
//! pass: three passes of loads and stores around the `exp` ran at 0.37 of the bandwidth
//! bound for `[1024, 512]`.)

use super::operand::{Operand, gather, gather_into};
use super::par::{SendPtr, par_for};
use crate::math;
use rlx_ir::{DType, Op, TensorData};

/// The op's result bytes, when this module has a kernel for it (operands materialized:
/// the path for views that only an index table expresses).
pub(crate) fn eval(
    op: &Op,
    ins: &[&TensorData],
    out_dims: &[usize],
) -> Option<Result<Vec<u8>, String>> {
    match op {
        Op::SoftmaxCrossEntropyWithLogits
            if ins.len() == 2 && ins[0].dtype == DType::F32 && !ins[0].dims.is_empty() =>
        {
            let (logits, labels) = (ins[0], ins[1]);
            let c = *logits.dims.last().expect("checked non-scalar");
            let rows: usize = out_dims.iter().product();
            Some((|| {
                let y = class_labels(op, &logits.dims, labels, rows, c)?;
                let l = logits.to_f32_vec();
                let mut out = vec![0f32; rows];
                // SAFETY: `l` holds `rows·c` f32 (class_labels checked the count), `out`
                // `rows`.
                unsafe { cross_entropy_rows(l.as_ptr(), c, &y, out.as_mut_ptr()) };
                Ok(out.iter().flat_map(|v| v.to_le_bytes()).collect())
            })())
        }
        _ => None,
    }
}

/// The labels as class indices, checked like the oracle checks them (its error).
fn class_labels(
    op: &Op,
    logits_dims: &[usize],
    labels: &TensorData,
    rows: usize,
    c: usize,
) -> Result<Vec<usize>, String> {
    let y = labels.to_f64_vec();
    if y.len() != rows || logits_dims.iter().product::<usize>() != rows * c {
        return Err(format!(
            "{}: labels {:?} must hold one class index per row of logits {logits_dims:?}",
            op.name(),
            labels.dims,
        ));
    }
    y.iter()
        .enumerate()
        .map(|(r, &label)| {
            if label.fract() == 0.0 && label >= 0.0 && label < c as f64 {
                Ok(label as usize)
            } else {
                Err(format!(
                    "{}: label {label} of row {r} is not a class index in 0..{c}; labels must be whole numbers below the class count",
                    op.name()
                ))
            }
        })
        .collect()
}

/// `softmax_cross_entropy_with_logits` of f32 `logits` (rows of the last axis) and
/// `labels` into `out` (one f32 per row), reading the logits in place when they are a
/// dense block.
///
/// # Safety
/// The operands must be bound to the buffers of `bases`; `out` must hold one f32 per
/// logits row and overlap neither operand.
pub(crate) unsafe fn cross_entropy_native(
    op: &Op,
    logits: &Operand,
    labels: &Operand,
    bases: &[*mut u8],
    out: *mut f32,
) -> Result<(), String> {
    let c = *logits.dims.last().expect("non-scalar logits");
    let rows: usize = logits.dims[..logits.dims.len() - 1].iter().product();
    let y = class_labels(op, &logits.dims, &gather(labels, bases), rows, c)?;
    let own: Vec<f32>;
    let l = match logits.dense_offset() {
        Some(off) => (bases[logits.buf] as *const f32).wrapping_add(off),
        None => {
            let mut v = vec![0f32; rows * c];
            // SAFETY: `logits` is a bound operand of `rows·c` f32 (caller); `v` holds them.
            unsafe { gather_into(logits, bases, v.as_mut_ptr() as *mut u8) };
            own = v;
            own.as_ptr()
        }
    };
    // SAFETY: `l` holds `rows·c` f32 (the dense view or `own`), `out` `rows` (caller).
    unsafe { cross_entropy_rows(l, c, &y, out) };
    Ok(())
}

/// The maximum of `row` and whether it holds a NaN, in 16 independent lanes (a
/// compare-and-select per lane vectorizes; `f32::max`, NaN-aware, stays scalar and cost
/// this kernel most of its time).
#[inline(always)]
fn row_max(row: &[f32]) -> (f32, bool) {
    let mut mx = [f32::NEG_INFINITY; 16];
    let mut nan = [0u32; 16];
    let mut it = row.chunks_exact(16);
    for ch in &mut it {
        for k in 0..16 {
            let v = ch[k];
            mx[k] = if v > mx[k] { v } else { mx[k] };
            nan[k] |= v.is_nan() as u32;
        }
    }
    let mut m = f32::NEG_INFINITY;
    let mut any = nan.iter().any(|&x| x != 0);
    for &v in mx.iter().chain(it.remainder()) {
        any |= v.is_nan();
        m = if v > m { v } else { m };
    }
    (m, any)
}

/// Shifted logits at or below this contribute `e^-87 ≈ 1.6·10⁻³⁸` or less to a row sum
/// that is at least 1 (the maximum's own term): they count as 0, which moves the f64 sum
/// by under 10⁻³⁴ of itself, and keeps every scale factor of [`exp_le0`] normal.
const EXP_FLOOR: f32 = -87.0;

/// `eᵈ` for `d = x − max ≤ 0` (or −∞), 0 for `d < EXP_FLOOR`: the `math` kernel's `exp`
/// (the same bits wherever the result is a normal float, as every counted term is) without
/// its overflow clamp and its two-step scaling into the subnormal range, which a
/// max-shifted argument never needs.
#[inline(always)]
fn exp_le0<const F: bool>(d: f32) -> f32 {
    let x = if d < EXP_FLOOR { EXP_FLOOR } else { d };
    let (p, n) = math::expo::exp_mant::<F>(x, 0.0);
    let e = p * math::expo::pow2i(n);
    if d < EXP_FLOOR { 0.0 } else { e }
}

/// `logsumexp(row) − row[label]` as the oracle evaluates it (see [`cross_entropy_rows`]):
/// the max pass, then one pass that exponentiates the shifted logits in registers and
/// sums them in 16 f64 lanes (blocks of four terms per lane first in f32): within a few
/// 10⁻⁸ of the oracle's f64 sum, and vectorizable.
/// `F`: fused multiply-adds in the exponential (the AVX2 and AVX-512 paths).
#[inline(always)]
fn row_loss_with<const F: bool>(row: &[f32], label: usize) -> f32 {
    let (m, nan) = row_max(row);
    if nan || !m.is_finite() {
        return f32::NAN;
    }
    let mut lanes = [0f64; 16];
    // Blocks of 64: four terms per lane summed in f32 (each term ≤ 1, so the block sum
    // is off by at most 3 roundings of 2⁻²⁴ of itself), then widened once per block;
    // widening every term cost two conversions and two f64 adds per 16 terms.
    let mut blocks = row.chunks_exact(64);
    for b in &mut blocks {
        let mut acc = [0f32; 16];
        for ch in b.chunks_exact(16) {
            for k in 0..16 {
                acc[k] += exp_le0::<F>(ch[k] - m);
            }
        }
        for k in 0..16 {
            lanes[k] += acc[k] as f64;
        }
    }
    let mut it = blocks.remainder().chunks_exact(16);
    for ch in &mut it {
        for k in 0..16 {
            lanes[k] += exp_le0::<F>(ch[k] - m) as f64;
        }
    }
    for (k, &v) in it.remainder().iter().enumerate() {
        lanes[k] += exp_le0::<F>(v - m) as f64;
    }
    // A fixed tree over the lanes: the same sum on every path.
    let mut w = 16;
    while w > 1 {
        w /= 2;
        for k in 0..w {
            lanes[k] += lanes[k + w];
        }
    }
    (m as f64 + lanes[0].ln() - row[label] as f64) as f32
}

/// [`row_loss_with`] compiled for AVX-512 (the loop runs 16 lanes wide).
///
/// # Safety
/// The CPU must have AVX-512F/DQ/BW/VL, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")]
unsafe fn row_loss_avx512(row: &[f32], label: usize) -> f32 {
    row_loss_with::<true>(row, label)
}

/// [`row_loss_with`] compiled for AVX2 + FMA.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_loss_avx2(row: &[f32], label: usize) -> f32 {
    row_loss_with::<true>(row, label)
}

/// [`row_loss_with`] on the widest path this CPU has (the AVX2 and AVX-512 paths give
/// the same bits: the same fused operations in the same order; the baseline, without
/// FMA, may differ in the last bit of a term).
fn row_loss(row: &[f32], label: usize) -> f32 {
    #[cfg(target_arch = "x86_64")]
    match math::wide_level() {
        // SAFETY: level 3 means AVX-512F/DQ/BW/VL, AVX2 and FMA were detected.
        3 => return unsafe { row_loss_avx512(row, label) },
        // SAFETY: level 2 means AVX2 and FMA were detected.
        2 => return unsafe { row_loss_avx2(row, label) },
        _ => {}
    }
    row_loss_with::<false>(row, label)
}

/// Per row `r`: `logsumexp(l[r]) − l[r][y[r]]`, evaluated as the oracle does (the
/// max-shifted sum, its log in f64, NaN for a row holding a NaN or an infinite maximum).
///
/// # Safety
/// `l` must hold `y.len()·c` f32, `out` `y.len()` f32, not overlapping; every label `< c`.
unsafe fn cross_entropy_rows(l: *const f32, c: usize, y: &[usize], out: *mut f32) {
    let rows = y.len();
    // About 64 KiB of logits per task.
    let per = (16384 / c.max(1)).max(1);
    let (lp, op) = (SendPtr(l as *mut f32), SendPtr(out));
    let _ = par_for(rows.div_ceil(per), |t| {
        let r0 = t * per;
        for (r, &label) in y.iter().enumerate().take((r0 + per).min(rows)).skip(r0) {
            // SAFETY: row `r < rows` of the `rows·c` logits (caller).
            let row = unsafe { std::slice::from_raw_parts(lp.get().add(r * c), c) };
            let loss = row_loss(row, label);
            // SAFETY: element `r < rows` of `out`, written by this task only.
            unsafe { *op.get().add(r) = loss };
        }
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{Shape, interp};

    fn oracle(logits: &TensorData, labels: &TensorData) -> Result<Vec<f32>, String> {
        let rows = labels.dims.clone();
        interp::eval_op(
            &Op::SoftmaxCrossEntropyWithLogits,
            &[logits, labels],
            &Shape::new(&rows, DType::F32),
        )
        .map(|d| d.to_f32_vec())
        .map_err(|e| e.to_string())
    }

    fn kernel(logits: &TensorData, labels: &TensorData) -> Result<Vec<f32>, String> {
        let dims = labels.dims.clone();
        eval(&Op::SoftmaxCrossEntropyWithLogits, &[logits, labels], &dims)
            .expect("f32 logits have a kernel")
            .map(|b| {
                b.chunks_exact(4)
                    .map(|x| f32::from_le_bytes(x.try_into().unwrap()))
                    .collect()
            })
    }

    #[test]
    fn matches_the_oracle_on_wide_rows_with_integer_and_float_labels() {
        let (rows, c) = (37, 513);
        let l: Vec<f32> = (0..rows * c)
            .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 24.0)
            .collect();
        let logits = TensorData::from_f32(&[rows, c], &l);
        let ids: Vec<i64> = (0..rows as i64).map(|r| (r * 131) % c as i64).collect();
        for labels in [
            TensorData::from_i64_as(DType::I64, &[rows], &ids),
            TensorData::from_i64_as(DType::I32, &[rows], &ids),
            TensorData::from_f32(&[rows], &ids.iter().map(|&v| v as f32).collect::<Vec<_>>()),
        ] {
            let (got, want) = (
                kernel(&logits, &labels).unwrap(),
                oracle(&logits, &labels).unwrap(),
            );
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 2e-6 * w.abs().max(1.0), "{g} vs {w}");
            }
        }
    }

    #[test]
    fn rows_with_nan_or_infinite_maxima_give_nan_like_the_oracle() {
        let l = [
            f32::NAN,
            0.0,
            1.0, // NaN
            f32::INFINITY,
            0.0,
            1.0, // +inf max
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY, // all −inf
            f32::NEG_INFINITY,
            2.0,
            1.0, // one −inf: finite
        ];
        let logits = TensorData::from_f32(&[4, 3], &l);
        let labels = TensorData::from_i64_as(DType::I64, &[4], &[1, 1, 0, 1]);
        let got = kernel(&logits, &labels).unwrap();
        let want = oracle(&logits, &labels).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                g.is_nan() == w.is_nan() && (g.is_nan() || (g - w).abs() < 1e-6),
                "{got:?} vs {want:?}"
            );
        }
        assert!(got[3].is_finite());
    }

    /// A row of `c` logits spread over ±`scale`/2.
    fn spread_row(c: usize, scale: f32) -> Vec<f32> {
        (0..c)
            .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * scale)
            .collect()
    }

    #[test]
    fn row_losses_have_the_same_bits_on_the_avx2_and_avx512_paths_at_every_length() {
        // Both paths run the same fused operations in the same order; the lengths cover
        // rows with and without a 16-wide tail. The portable path (no FMA) agrees within
        // a few ulp of a term.
        for c in [1, 7, 8, 15, 16, 17, 31, 100, 512, 513] {
            let row = spread_row(c, 30.0);
            let label = (c * 5) / 7;
            let base = row_loss_with::<false>(&row, label);
            let want = row_loss(&row, label);
            assert!((base - want).abs() <= 1e-6 * want.abs().max(1.0), "c = {c}");
            #[cfg(target_arch = "x86_64")]
            if math::wide_level() == 3 {
                // SAFETY: level 3: AVX-512F/DQ/BW/VL, AVX2 and FMA are present.
                let (a512, a2) =
                    unsafe { (row_loss_avx512(&row, label), row_loss_avx2(&row, label)) };
                assert_eq!(a512.to_bits(), a2.to_bits(), "c = {c}: {a512} vs {a2}");
            }
        }
    }

    #[test]
    fn shifted_exponentials_have_the_math_kernels_bits_and_vanish_below_the_floor() {
        // Every f32 in [−87, 0] sampled: the same bits as `math::exp_f32` (whose results
        // there are normal), and 0 below −87 and at −∞.
        let xs: Vec<f32> = (0..=200_000)
            .map(|i| -87.0 * i as f32 / 200_000.0)
            .chain([-0.0, f32::MIN_POSITIVE.copysign(-1.0), -86.999_99])
            .collect();
        let mut want = vec![0f32; xs.len()];
        math::exp_f32(&xs, &mut want);
        for (&x, &w) in xs.iter().zip(&want) {
            let got = if math::wide_level() >= 2 {
                exp_le0::<true>(x)
            } else {
                exp_le0::<false>(x)
            };
            assert_eq!(got.to_bits(), w.to_bits(), "exp({x})");
        }
        for x in [-87.000_01, -100.0, -1e30, f32::NEG_INFINITY] {
            assert_eq!(exp_le0::<true>(x), 0.0, "exp({x})");
            assert_eq!(exp_le0::<false>(x), 0.0, "exp({x})");
        }
    }

    #[test]
    fn extreme_logits_match_the_oracle() {
        // Rows whose terms fall below the kernel's e⁻⁸⁷ floor (huge spreads, −∞ entries,
        // logits near f32::MAX), a single dominating logit with the label elsewhere, and
        // a row of equal logits (loss ln C).
        let c = 37;
        let mut l = Vec::new();
        l.extend(spread_row(c, 1e4));
        l.extend(spread_row(c, 1e30));
        l.extend((0..c).map(|i| {
            if i % 3 == 0 {
                f32::NEG_INFINITY
            } else {
                i as f32
            }
        }));
        l.extend((0..c).map(|i| f32::MAX * if i % 2 == 0 { 1.0 } else { -0.5 }));
        l.extend((0..c).map(|i| if i == 4 { 200.0 } else { -200.0 }));
        l.extend((0..c).map(|i| -90.0 + (i as f32) * 0.1));
        l.extend(std::iter::repeat_n(3.25, c));
        let rows = l.len() / c;
        let logits = TensorData::from_f32(&[rows, c], &l);
        let ids: Vec<i64> = (0..rows as i64).map(|r| (r * 5 + 1) % c as i64).collect();
        let labels = TensorData::from_i64_as(DType::I64, &[rows], &ids);
        let got = kernel(&logits, &labels).unwrap();
        let want = oracle(&logits, &labels).unwrap();
        for (r, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g - w).abs() <= 2e-6 * w.abs().max(1.0),
                "row {r}: {g} vs {w}"
            );
        }
        // Equal logits: every class has probability 1/C.
        assert!((got[rows - 1] - (c as f32).ln()).abs() < 1e-6);
    }

    #[test]
    fn a_label_outside_the_classes_is_the_oracles_error() {
        let logits = TensorData::from_f32(&[2, 3], &[0.0; 6]);
        for bad in [
            TensorData::from_i64_as(DType::I64, &[2], &[0, 3]),
            TensorData::from_i64_as(DType::I64, &[2], &[-1, 0]),
            TensorData::from_f32(&[2], &[0.0, 1.5]),
        ] {
            let got = kernel(&logits, &bad).unwrap_err();
            assert_eq!(got, oracle(&logits, &bad).unwrap_err());
            assert!(got.contains("is not a class index in 0..3"), "{got}");
        }
    }
}
