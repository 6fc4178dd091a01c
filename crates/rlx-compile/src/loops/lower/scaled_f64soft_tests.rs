//! The block-scaled `scaled_matmul` (software f64 in i32, `scaled_f64soft.rs`) against
//! the oracle's f64 fold, bit for bit (NaN as NaN), on data built to reach every path of
//! the adder and of the final rounding: sums whose terms span more than 53 bits (the
//! round-to-nearest-even step at every partial sum, carries into a new binade), exact
//! and near cancellation (long renormalizing shifts), f32 subnormal and zero results
//! (signed zeros), overflow of the f32 result to ±∞, NaN and infinite codes and scales,
//! and f32 biases of every kind. Each kernel also renders as valid WGSL (`run`).

use super::tests::{formats, run, same_f32};
use rlx_ir::{DType, Graph, ScaleLayout, ScaledFormat, TensorData};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `y = a · bᵀ (+ bias)` over `[m, k]` / `[n, k]` codes of `fs` with block layout `l`
/// and an f32 bias.
fn graph(fs: [ScaledFormat; 2], l: ScaleLayout, m: usize, n: usize, k: usize) -> Graph {
    rlx_testkit::scaled_matmul_graph(fs, l, (m, n, k), Some(DType::F32))
}

fn u8s(dims: &[usize], v: &[i64]) -> TensorData {
    TensorData::from_i64_as(DType::U8, dims, v)
}

/// Biases of every kind: zeros of both signs, f32 subnormals (the smallest, negative),
/// normal values, the largest finite, infinities and NaN.
const BIASES: [f32; 12] = [
    0.0,
    -0.0,
    1.0e-45,
    -1.0e-45,
    -1.1754942e-38,
    0.375,
    -3.0e5,
    3.4028235e38,
    -3.4028235e38,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
];

/// Scale codes for one case: `spread` picks how far apart the blocks' scales lie.
fn scale_code(rng: &mut Rng, l: ScaleLayout, spread: u32) -> i64 {
    let x = rng.next();
    match (l, spread) {
        // MX: 2^(c−127). Close scales (cancellation), scales 2^±40 apart (rounding of
        // partial sums across more than 53 bits), the smallest (f32 subnormal and zero
        // results), the largest (f32 overflow), every code (NaN 255 included).
        (ScaleLayout::BlockMxE8M0 { .. }, 0) => (125 + x % 4) as i64,
        (ScaleLayout::BlockMxE8M0 { .. }, 1) => (87 + (x % 3) * 40) as i64,
        (ScaleLayout::BlockMxE8M0 { .. }, 2) => (48 + x % 8) as i64,
        (ScaleLayout::BlockMxE8M0 { .. }, 3) => (248 + x % 7) as i64,
        (ScaleLayout::BlockMxE8M0 { .. }, _) => (x % 256) as i64,
        // NVFP4: an E4M3 code. Close positive scales, every positive code (subnormal
        // scales included), every code (negative, zero and NaN scales).
        (_, 0) => (0x38 + x % 8) as i64,
        (_, 1..=3) => (x % 0x7f) as i64,
        _ => (x % 256) as i64,
    }
}

#[test]
fn block_scaled_matmul_matches_the_oracle_through_rounding_cancellation_and_f32_edges() {
    let mut rng = Rng(0x05ee_df64);
    let fs = formats();
    let (m, n) = (3, 4);
    // Oracle outputs seen: NaN, ±∞, −0, +0, f32 subnormal, normal.
    let mut seen = [0usize; 6];
    for l in [
        ScaleLayout::BlockMxE8M0 { block: 2 },
        ScaleLayout::BlockMxE8M0 { block: 8 },
        ScaleLayout::Nvfp4 { group: 4 },
    ] {
        let k = 24;
        let per = k / l.block().unwrap() as usize;
        for (fi, &fa) in fs.iter().enumerate() {
            let fb = fs[(fi + 3) % fs.len()];
            let g = graph([fa, fb], l, m, n, k);
            let sign = |f: ScaledFormat| 1i64 << (f.exp_bits() + f.mant_bits());
            for spread in 0..5u32 {
                for round in 0..3 {
                    // Finite codes only in two of three rounds (NaN and ∞ codes otherwise
                    // hide the rounding paths): the low six bits.
                    let code = |rng: &mut Rng| {
                        let c = (rng.next() % 256) as i64;
                        if round < 2 { c & 0x3f } else { c }
                    };
                    // Rows of a; row 1 is row 0 negated in its second half (exact and
                    // near cancellation against b's rows that repeat their first half).
                    let mut a: Vec<i64> = (0..m * k).map(|_| code(&mut rng)).collect();
                    for p in k / 2..k {
                        a[k + p] = a[p - k / 2] ^ sign(fa);
                        a[p] = a[p - k / 2];
                    }
                    let mut b: Vec<i64> = (0..n * k).map(|_| code(&mut rng)).collect();
                    for p in k / 2..k {
                        b[p] = b[p - k / 2];
                    }
                    let mut sa: Vec<i64> = (0..m * per)
                        .map(|_| scale_code(&mut rng, l, spread))
                        .collect();
                    let sb: Vec<i64> = (0..n * per)
                        .map(|_| scale_code(&mut rng, l, spread))
                        .collect();
                    for p in per / 2..per {
                        sa[per + p] = sa[p - per / 2];
                        sa[p] = sa[p - per / 2];
                    }
                    let bias: Vec<f32> = (0..n)
                        .map(|j| BIASES[(j + 4 * round + spread as usize) % BIASES.len()])
                        .collect();
                    let inputs = [
                        ("a", u8s(&[m, k], &a)),
                        ("b", u8s(&[n, k], &b)),
                        ("sa", u8s(&[m, per], &sa)),
                        ("sb", u8s(&[n, per], &sb)),
                        ("bias", TensorData::from_f32(&[n], &bias)),
                    ];
                    let (got, want) = run(&g, &inputs);
                    let what = format!("{fa} x {fb} {l} spread={spread} round={round}");
                    same_f32(&got[0], &want[0], &what);
                    for v in want[0].to_f32_vec() {
                        let class = if v.is_nan() {
                            0
                        } else if v.is_infinite() {
                            1
                        } else if v == 0.0 && v.is_sign_negative() {
                            2
                        } else if v == 0.0 {
                            3
                        } else if v.is_subnormal() {
                            4
                        } else {
                            5
                        };
                        seen[class] += 1;
                    }
                }
            }
        }
    }
    assert!(
        seen.iter().all(|&c| c > 0),
        "every kind of result is reached (NaN, inf, -0, +0, subnormal, normal): {seen:?}"
    );
}

/// The shared f64 tie cases ([`rlx_testkit::ScaledTieCase`]: every ordered sum
/// `1 ± 2^a ± 2^b ± 2^c` with `a, b, c` around the f32 rounding bit, the f64 rounding bit
/// and far below, one term per MX block): the f64 partial sums round at ties (to even,
/// both ways), just off ties, and across binades, and the final f32 rounding sees the
/// f64 value (double rounding), so a wrong f64 rounding changes the f32 result. The
/// rows known by hand check the oracle itself.
#[test]
fn block_scaled_sums_round_ties_at_53_bits_like_the_oracle() {
    let c = rlx_testkit::ScaledTieCase::new();
    let g = graph([c.format; 2], c.layout, c.m, c.n, c.k);
    let inputs: Vec<(&str, TensorData)> = ["a", "b", "sa", "sb", "bias"]
        .into_iter()
        .zip(c.args())
        .collect();
    let (got, want) = run(&g, &inputs);
    same_f32(&got[0], &want[0], "1 ± 2^a ± 2^b ± 2^c");
    let w = want[0].to_f32_vec();
    for (row, value) in c.known_rows() {
        assert_eq!(w[row], value, "oracle row {row}");
    }
}
