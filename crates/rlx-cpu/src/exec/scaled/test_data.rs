//! Random operands for the scaled matmul's unit tests (`vnni/tests.rs`,
//! `few_rows/tests.rs`, `codes/tests.rs`).

use super::Operand;
pub(super) use crate::threads::on_threads;
use rlx_ir::{DType, ScaleLayout, ScaledFormat, TensorData};

/// Every format the kernels' tables serve: fp4, both fp6, both OCP fp8.
pub(super) const FORMATS: [ScaledFormat; 5] = [
    ScaledFormat::F4E2M1,
    ScaledFormat::F6E2M3,
    ScaledFormat::F6E3M2,
    ScaledFormat::F8E4M3,
    ScaledFormat::F8E5M2,
];

/// `k` made valid for `layout`: rounded up to whole scale blocks, or (per tensor, any K)
/// `tail` more, so that the runs of codes end in a short one.
pub(super) fn fit_k(layout: ScaleLayout, k: usize, tail: usize) -> usize {
    match layout.block() {
        None => k + tail,
        Some(b) => k.next_multiple_of(b as usize),
    }
}

/// A small deterministic generator (an LCG's high bits).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    /// A value in `0..n`.
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Random codes `[rows, k]` of `f`: every byte value whose decoding is finite (the
/// formats ignore the bits above their width, and so must the kernels' tables; NaN and
/// infinity codes have tests of their own).
pub(super) fn codes(rng: &mut Rng, f: ScaledFormat, rows: usize, k: usize) -> TensorData {
    let bytes = (0..rows * k)
        .map(|_| {
            loop {
                let c = rng.below(256) as u8;
                if f.decode(c).is_finite() {
                    break c;
                }
            }
        })
        .collect();
    TensorData {
        dtype: DType::U8,
        dims: vec![rows, k],
        bytes,
    }
}

/// Scales for `layout`: E8M0 codes of 2⁻⁶..2⁶ (MX), positive normal E4M3 codes of
/// exponents 5..10 (NVFP4), or one f32 (per tensor: factored out of the product).
pub(super) fn scales(rng: &mut Rng, layout: ScaleLayout, rows: usize, k: usize) -> TensorData {
    match layout.block() {
        None => TensorData::from_f32(&[1], &[0.75]),
        Some(b) => {
            let count = rows * (k / b as usize);
            let bytes = (0..count)
                .map(|_| match layout {
                    ScaleLayout::Nvfp4 { .. } => ((5 + rng.below(6)) << 3 | rng.below(8)) as u8,
                    _ => (121 + rng.below(13)) as u8,
                })
                .collect();
            TensorData {
                dtype: DType::U8,
                dims: vec![count],
                bytes,
            }
        }
    }
}

/// Both operands of an `m × n × k` product: codes and scales.
pub(super) struct Data {
    pub(super) f: ScaledFormat,
    pub(super) layout: ScaleLayout,
    pub(super) qa: TensorData,
    pub(super) qb: TensorData,
    pub(super) sa: TensorData,
    pub(super) sb: TensorData,
}

impl Data {
    /// Random codes ([`codes`]) and scales ([`scales`]).
    pub(super) fn random(
        rng: &mut Rng,
        f: ScaledFormat,
        layout: ScaleLayout,
        (m, n, k): (usize, usize, usize),
    ) -> Data {
        let (qa, qb) = (codes(rng, f, m, k), codes(rng, f, n, k));
        let (sa, sb) = (scales(rng, layout, m, k), scales(rng, layout, n, k));
        Data {
            f,
            layout,
            qa,
            qb,
            sa,
            sb,
        }
    }

    /// The two operands (`A`, `B`) over this data.
    pub(super) fn operands(&self) -> (Operand<'_>, Operand<'_>) {
        (
            operand(self.f, self.layout, &self.qa, &self.sa),
            operand(self.f, self.layout, &self.qb, &self.sb),
        )
    }
}

/// The operand of codes `q` and scales `s`.
pub(super) fn operand<'a>(
    f: ScaledFormat,
    layout: ScaleLayout,
    q: &'a TensorData,
    s: &'a TensorData,
) -> Operand<'a> {
    Operand::new(f, layout, q.view(), s.view()).expect("valid operand")
}

/// The exact `Σ a·b` of C's element `(i, j)` and `Σ |a·b|`, in f64 (the decoded values
/// have few significant bits, their products fewer than 53).
pub(super) fn exact_sum(
    a: &Operand<'_>,
    b: &Operand<'_>,
    i: usize,
    j: usize,
    k: usize,
) -> (f64, f64) {
    let value = |op: &Operand<'_>, row: usize, p: usize| {
        let s = op
            .scales
            .as_ref()
            .map_or(1.0, |s| s.get(row * (k / op.block) + p / op.block));
        op.lut[op.codes[row * k + p] as usize] as f64 * s as f64
    };
    (0..k).fold((0.0, 0.0), |(s, abs), p| {
        let x = value(a, i, p) * value(b, j, p);
        (s + x, abs + x.abs())
    })
}

/// Asserts that every element of `c` (`[m, n]`) is within the f32 accumulation bound of
/// `scaled.rs`, `(k + 2)·2⁻²⁴·Σ|a·b|`, of the exact sum; `what` names the case.
pub(super) fn assert_within_f32_bound(
    a: &Operand<'_>,
    b: &Operand<'_>,
    c: &[f32],
    (m, n, k): (usize, usize, usize),
    what: &str,
) {
    for i in 0..m {
        for j in 0..n {
            let (exact, abs) = exact_sum(a, b, i, j, k);
            let got = c[i * n + j] as f64;
            let bound = (k as f64 + 2.0) * 2f64.powi(-24) * abs;
            assert!(
                (got - exact).abs() <= bound,
                "{what} {m}×{n}×{k} at ({i}, {j}): {got} vs {exact}"
            );
        }
    }
}
