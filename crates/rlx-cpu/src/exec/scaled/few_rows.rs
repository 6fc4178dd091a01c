//! The scaled matmul for a few rows of A — a quantized model's decoding step (one token,
//! or a handful) — reading B's codes where they lie.
//!
//! The packed paths (`vnni.rs`, `codes.rs`, the bf16 panels) pack or decode all of B into panels
//! before they multiply: with one row of A that is two passes over B for one use of
//! each element, and 1 × 4096 × 4096 from codes took 1.5× (fp4 on the integer unit) to
//! 3.3× (fp8 through bf16 panels) the f32 product's time. Here A's rows are decoded
//! once (to bf16, exactly, then widened to f32); B's codes are decoded in registers, 32
//! at a time ([`Lookup`]: a table permute for fp4 and fp6, bit arithmetic for fp8), and
//! multiplied into every row of A at once, so each code is read once per [`GROUP`] rows.
//! Threads take 16 rows of B at a time; within them K is walked in chunks of [`KC`], so
//! that the group's chunk of A stays in L1 while the 16 rows of B pass it.
//!
//! The element values are those of the other paths (exact in bf16: the same check), and
//! every product is exact in f32: each dot product is 32 chains of fused multiply-adds
//! (lane `l` over the sums `p ≡ l mod 32`, in k order), folded in a fixed order — within
//! the bound of `scaled.rs`, bit-identical to the oracle where the partial sums are
//! representable, and independent of the thread count and of the other rows.
//!
//! Measured (Emerald Rapids, 2 threads, 4096² weights from codes, paired medians of 31
//! calls alternated with the f32 product of the same shape, over several runs on a noisy
//! host): 1 row fp8 MX 0.48–0.78× its time, fp4 MX 0.39–0.63×, NVFP4 0.46–0.72×; 4 rows
//! 0.26–0.37×; 8 rows 0.29–0.50×; 16 rows 0.44–0.69×; 32 rows of fp8 1.01–1.03× (see
//! [`FEW_ROWS`] for the limits). rlx-bench's `W4_decode_4096` rows: 0.46–0.57×.

use super::{CPtr, Operand};
#[cfg(target_arch = "x86_64")]
use crate::exec::scaled_lut::{lookup64_ps, lookup256_bf16};
use crate::gemm::lowp::bf16;
use rayon::prelude::*;

/// Rows of A up to which this path runs where the alternative is the bf16 panels (a
/// `vdpbf16ps` unit): measured where those panels ran in the f32 kernel (fp8 on Intel
/// without AMX, before `codes.rs`), 32 rows from codes took 1.0× the f32 product's time
/// here against 1.3× for the panels, 64 rows 2.7× against 1.2×.
pub(super) const FEW_ROWS: usize = 32;

/// Rows of A up to which this path runs where the own f32 kernel would decode the codes
/// while it packs them (`codes.rs`; fp8 on Intel without AMX). From codes against the f32
/// product of the same shape, paired medians, Emerald Rapids, 2 threads, this path / the
/// packed codes: 4096² 8 rows 0.45× / 0.96×, 12 rows 0.83× / 1.02×, 16 rows 0.85× / 0.84×;
/// 1024² 8 rows 1.38× / 1.70×, 12 rows 1.36× / 1.31×, 16 rows 1.51× / 1.00×.
pub(super) const FEW_ROWS_BESIDE_PACKED_CODES: usize = 8;

/// Rows of A up to which this path runs where the integer unit (`vnni.rs`) or a bf16
/// unit takes the product otherwise: 16 rows of fp4 ran at 0.5× the f32 time against
/// 0.66× on the integer unit, 32 rows at 1.0× against 0.7×.
pub(super) const FEW_ROWS_BESIDE_A_UNIT: usize = 16;

/// Rows of B per task.
const ROWS_PER_TASK: usize = 16;

/// Rows of A per pass over B (two accumulators each in registers).
const GROUP: usize = 8;

/// Sums per chunk of K: a group's chunk of A (8 rows × 2 KiB) stays in L1 while the
/// task's rows of B pass it, each row's lane sums carried in memory between chunks.
const KC: usize = 512;

/// The 32 lane sums of each row of a group against one row of B.
type Lanes = [[f32; 32]; GROUP];

/// How B's codes become f32 values in registers, 32 at a time.
enum Lookup {
    /// At most 32 codes (fp4): one `vpermt2ps` per 16 codes over a table in two zmm.
    Ps32([f32; 32]),
    /// At most 64 codes (fp6): two, merged on the index's bit 5.
    Ps64([f32; 64]),
    /// 256 codes exact in bf16 (fp8): four `vpermt2w` per 32 codes over a table of bf16
    /// bits in eight zmm, merged on bits 6 and 7, then widened.
    Bf16(Box<[u16; 256]>),
    /// 256 codes of a minifloat decoded by bit arithmetic ([`Arith`]: four instructions
    /// per 16 codes, where `Bf16`'s permutes cost about three times as much); runs of
    /// 32 holding one of the codes it does not cover are looked up as `Bf16`'s.
    Arith(Arith, Box<[u16; 256]>),
}

impl Lookup {
    /// The lookup for `op`'s table (its entries depend only on `c % codes_used`).
    fn of(op: &Operand<'_>) -> Option<Lookup> {
        if op.codes_used <= 32 {
            Some(Lookup::Ps32(std::array::from_fn(|c| op.lut[c])))
        } else if op.codes_used <= 64 {
            Some(Lookup::Ps64(std::array::from_fn(|c| op.lut[c])))
        } else {
            let table = op.lut_bf16.clone()?;
            Some(match arith_of(&op.lut) {
                Some(arith) if scales_take_factor(op, arith.factor) => Lookup::Arith(arith, table),
                _ => Lookup::Bf16(table),
            })
        }
    }

    /// What the scale of each run of codes is multiplied by (the arithmetic's factor).
    fn factor(&self) -> f32 {
        match self {
            Lookup::Arith(arith, _) => arith.factor,
            _ => 1.0,
        }
    }
}

/// A minifloat's decoding by bit arithmetic: the code sign-extended to 32 bits, shifted
/// left by `shift` and masked with `keep` (the sign lands on bit 31, the other seven bits
/// on f32's exponent and mantissa fields) is an f32 that times `factor` (a power of two)
/// is the code's value, for every code but those with `code & special.0 == special.1`
/// (NaN, infinities).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Arith {
    pub(super) shift: u32,
    pub(super) keep: u32,
    pub(super) factor: f32,
    pub(super) special: (u8, u8),
}

impl Arith {
    /// The f32 the bit arithmetic makes of `c` (before the factor).
    fn raw(self, c: u8) -> f32 {
        f32::from_bits(((c as i8 as i32 as u32) << self.shift) & self.keep)
    }
}

/// The [`Arith`] that decodes `lut` (an fp8 format's table), found by trying each
/// mantissa width and checking all 256 codes; `None` if none matches every code outside
/// one `(mask, value)` class.
pub(super) fn arith_of(lut: &[f32; 256]) -> Option<Arith> {
    (1..=5u32).find_map(|mantissa| {
        let shift = 23 - mantissa;
        let mut arith = Arith {
            shift,
            keep: 0x8000_0000 | (0x7f << shift),
            factor: 1.0,
            special: (0, 1),
        };
        // The code of exponent field 1 and mantissa 0 is 2⁻¹²⁶ before the factor.
        let probe = 1u8 << mantissa;
        let factor = lut[probe as usize] / arith.raw(probe);
        if !(factor.is_normal() && factor > 0.0 && factor.to_bits() & 0x7f_ffff == 0) {
            return None;
        }
        arith.factor = factor;
        let wrong: Vec<u8> = (0..=255u8)
            .filter(|&c| (arith.raw(c) * factor).to_bits() != lut[c as usize].to_bits())
            .collect();
        if let Some(&first) = wrong.first() {
            let varying = wrong.iter().fold(0u8, |v, &w| v | (w ^ first));
            let mask = !varying;
            arith.special = (mask, first & mask);
            let class = (0..=255u8).filter(|&c| c & mask == first & mask).count();
            if class != wrong.len() {
                return None;
            }
        }
        Some(arith)
    })
}

/// Whether every block scale `op` may take ([`super::Scales::possible`]), times `factor`,
/// is a normal f32 (the scale and the factor are then one multiplier, exactly).
pub(super) fn scales_take_factor(op: &Operand<'_>, factor: f32) -> bool {
    let one = [1.0f32];
    let scales = op.scales.as_ref().map_or(&one[..], |s| s.possible());
    scales
        .iter()
        .all(|&s| s == 0.0 || (s * factor).is_normal() && (s.abs() >= f32::MIN_POSITIVE))
}

/// `C = A·Bᵀ` (overwriting `c`) if this path takes the product: `m ≤ max_rows`, AVX-512
/// F/BW, both operands decode exactly to bf16, B's table has a register lookup, and its
/// scale blocks are whole runs of 32 sums or 16 (per-tensor, MX, NVFP4). `false` (having
/// written nothing) leaves it to the other paths.
pub(super) fn multiply(
    a: &Operand<'_>,
    b: &Operand<'_>,
    (m, n, k): (usize, usize, usize),
    c: &mut [f32],
    max_rows: usize,
) -> bool {
    if m == 0 || m > max_rows || !available() || !a.bf16_exact() || !b.bf16_exact() {
        return false;
    }
    let block_ok = b.scales.is_none() || b.block.is_multiple_of(32) || b.block == 16;
    let Some(lookup) = Lookup::of(b).filter(|_| block_ok) else {
        return false;
    };
    assert!(c.len() == m * n && a.k == k && b.k == k);
    let mut a_half = vec![bf16::ZERO; m * k];
    a.decode_bf16(0, m, 0, k, &mut a_half);
    let mut a32 = vec![0f32; m * k];
    // SAFETY: both hold m·k elements and do not overlap.
    unsafe {
        crate::exec::value::widen_halves(
            rlx_ir::DType::BF16,
            a_half.as_ptr() as *const u8,
            a32.as_mut_ptr(),
            m * k,
        )
    };
    let a32 = &a32;
    let lookup = &lookup;
    let cp = CPtr(c.as_mut_ptr());
    // The block scales' table times the lookup's factor (exact: `Lookup::of`).
    let table: [f32; 256] = match &b.scales {
        Some(s) => std::array::from_fn(|c| s.table[c] * lookup.factor()),
        None => [0.0; 256],
    };
    let table = &table;
    let runs16 = k.div_ceil(16);
    (0..n.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .for_each(|t| {
            let rows = t * ROWS_PER_TASK..((t + 1) * ROWS_PER_TASK).min(n);
            let mut scale16 = vec![lookup.factor(); rows.len() * runs16];
            if let Some(s) = &b.scales {
                // Blocks are whole runs of 16 (checked above).
                let (runs, blocks) = (b.block / 16, k / b.block);
                for (j, scales) in rows.clone().zip(scale16.chunks_mut(runs16)) {
                    fill_scales(scales, &s.codes[j * blocks..][..blocks], table, runs);
                }
            }
            let mut lanes = vec![[[0f32; 32]; GROUP]; rows.len()];
            for g in (0..m).step_by(GROUP) {
                let rows_a = GROUP.min(m - g);
                lanes.iter_mut().for_each(|l| *l = [[0.0; 32]; GROUP]);
                for k0 in (0..k).step_by(KC) {
                    let kc = KC.min(k - k0);
                    for (jl, j) in rows.clone().enumerate() {
                        let row = BRow {
                            codes: &b.codes[j * k + k0..][..kc],
                            scale16: &scale16[jl * runs16 + k0 / 16..],
                            next_row: k,
                        };
                        // SAFETY: AVX-512 F/BW/VL checked (`available`); A's rows g.. lie
                        // `k` apart in `a32`, each with `kc` sums from `k0`.
                        unsafe {
                            row_dots(lookup, &row, &a32[g * k + k0..], k, rows_a, &mut lanes[jl])
                        };
                    }
                }
                for (jl, j) in rows.clone().enumerate() {
                    for (i, lane) in lanes[jl].iter().enumerate().take(rows_a) {
                        let v = fold_lanes(lane);
                        // SAFETY: (g + i, j) lies inside the m × n C; each task writes
                        // only its own columns j.
                        unsafe { *cp.get().add((g + i) * n + j) = v };
                    }
                }
            }
        });
    true
}

/// `scale16[q]`, the scale of run `q` of 16 codes: `table[codes[q / runs]]` (a tight
/// loop for MX's blocks of 32 and NVFP4's of 16: the generic one cost more than the row's
/// dot product).
fn fill_scales(scale16: &mut [f32], codes: &[u8], table: &[f32; 256], runs: usize) {
    match runs {
        1 => {
            for (d, &c) in scale16.iter_mut().zip(codes) {
                *d = table[c as usize];
            }
        }
        2 => {
            for (d, &c) in scale16.chunks_exact_mut(2).zip(codes) {
                let v = table[c as usize];
                d[0] = v;
                d[1] = v;
            }
        }
        _ => {
            for (d, &c) in scale16.chunks_mut(runs).zip(codes) {
                d.fill(table[c as usize]);
            }
        }
    }
}

/// A chunk of one row of B: its codes, the scale of each run of 16 of them (times the
/// lookup's factor), and the distance to the same chunk of the next row (prefetched).
struct BRow<'r> {
    codes: &'r [u8],
    scale16: &'r [f32],
    next_row: usize,
}

/// `out[i] = Σ_p a32[i·k + p] · B[p]` for `i < m` (`k` = the row's length), per
/// [`row_dots_m`].
///
/// # Safety
/// AVX-512 F, BW and VL present; `a32` holds `m ≤ GROUP` rows `lda` apart, each with
/// the row's length of sums.
#[cfg(target_arch = "x86_64")]
unsafe fn row_dots(
    lookup: &Lookup,
    row: &BRow<'_>,
    a32: &[f32],
    lda: usize,
    m: usize,
    lanes: &mut Lanes,
) {
    // SAFETY: forwarded.
    unsafe {
        match lookup {
            Lookup::Ps32(_) => row_dots_t::<PS32>(lookup, row, a32, lda, m, lanes),
            Lookup::Ps64(_) => row_dots_t::<PS64>(lookup, row, a32, lda, m, lanes),
            Lookup::Bf16(_) => row_dots_t::<BF16>(lookup, row, a32, lda, m, lanes),
            Lookup::Arith(..) => row_dots_t::<ARITH>(lookup, row, a32, lda, m, lanes),
        }
    }
}

/// [`Lookup`]'s kinds as the const parameter of [`row_dots_m`] (the kind is then fixed
/// in the loop, not matched per run of codes).
const PS32: u8 = 0;
const PS64: u8 = 1;
const BF16: u8 = 2;
const ARITH: u8 = 3;

/// [`row_dots`] for the lookup kind `T`.
///
/// # Safety
/// As [`row_dots`]; `lookup` is of kind `T`.
#[cfg(target_arch = "x86_64")]
unsafe fn row_dots_t<const T: u8>(
    lookup: &Lookup,
    row: &BRow<'_>,
    a32: &[f32],
    lda: usize,
    m: usize,
    lanes: &mut Lanes,
) {
    // SAFETY: forwarded.
    unsafe {
        match m {
            1 => row_dots_m::<1, T>(lookup, row, a32, lda, lanes),
            2 => row_dots_m::<2, T>(lookup, row, a32, lda, lanes),
            3 => row_dots_m::<3, T>(lookup, row, a32, lda, lanes),
            4 => row_dots_m::<4, T>(lookup, row, a32, lda, lanes),
            5 => row_dots_m::<5, T>(lookup, row, a32, lda, lanes),
            6 => row_dots_m::<6, T>(lookup, row, a32, lda, lanes),
            7 => row_dots_m::<7, T>(lookup, row, a32, lda, lanes),
            _ => row_dots_m::<8, T>(lookup, row, a32, lda, lanes),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn row_dots(_: &Lookup, _: &BRow<'_>, _: &[f32], _: usize, _: usize, _: &mut Lanes) {
    unreachable!("the few-rows path runs only where AVX-512 is present");
}

/// [`row_dots`] for `M` rows and the lookup kind `T`: per run of 32 sums, B's codes looked up and scaled in two
/// vectors of 16, then one fused multiply-add into each row's two accumulators (so each
/// lane is one chain over the sums `p ≡ lane (mod 32)`); the lanes are summed by
/// [`fold_lanes`]'s order.
///
/// # Safety
/// As [`row_dots`], with `m = M`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn row_dots_m<const M: usize, const T: u8>(
    lookup: &Lookup,
    row: &BRow<'_>,
    a32: &[f32],
    lda: usize,
    lanes: &mut Lanes,
) {
    use std::arch::x86_64::*;
    let k = row.codes.len();
    assert!(M <= GROUP && a32.len() >= (M - 1) * lda + k && row.scale16.len() >= k.div_ceil(16));
    let mut acc: [[__m512; 2]; M] = std::array::from_fn(|i| {
        // SAFETY: 32 f32 per row of lanes.
        unsafe {
            [
                _mm512_loadu_ps(lanes[i].as_ptr()),
                _mm512_loadu_ps(lanes[i].as_ptr().add(16)),
            ]
        }
    });
    // SAFETY: the tables are read whole from their arrays; codes and A's rows are read
    // masked to `k` (asserted lengths).
    unsafe {
        let tables: [__m512i; 8] =
            match lookup {
                Lookup::Ps32(t) => std::array::from_fn(|q| {
                    _mm512_loadu_si512(t.as_ptr().add(16 * (q % 2)) as *const __m512i)
                }),
                Lookup::Ps64(t) => std::array::from_fn(|q| {
                    _mm512_loadu_si512(t.as_ptr().add(16 * (q % 4)) as *const __m512i)
                }),
                Lookup::Bf16(t) => std::array::from_fn(|q| {
                    _mm512_loadu_si512(t.as_ptr().add(32 * q) as *const __m512i)
                }),
                // The table is read from memory by the rare runs that need it.
                Lookup::Arith(..) => [_mm512_setzero_si512(); 8],
            };
        let (arith, fallback) = match lookup {
            Lookup::Arith(a, t) => (*a, Some(&**t)),
            _ => (
                Arith {
                    shift: 0,
                    keep: 0,
                    factor: 1.0,
                    special: (0, 1),
                },
                None,
            ),
        };
        let shift = _mm512_set1_epi32(arith.shift as i32);
        let keep = _mm512_set1_epi32(arith.keep as i32);
        let (special_mask, special_value) = (
            _mm256_set1_epi8(arith.special.0 as i8),
            _mm256_set1_epi8(arith.special.1 as i8),
        );
        let ps: [__m512; 4] = std::array::from_fn(|q| _mm512_castsi512_ps(tables[q]));
        let codes = if T == PS32 { 32 } else { 64 };
        // One run of 32 codes from `p`, `mask` their lanes below k: the whole runs pass
        // a constant mask, so that their loads and products compile unmasked. (A macro:
        // a closure called twice was not inlined at 8 rows, and passed the accumulators
        // through memory on every run.)
        macro_rules! run {
            ($p:expr, $mask:expr) => {{
                let (p, mask): (usize, u32) = ($p, $mask);
                let (m0, m1) = (mask as u16, (mask >> 16) as u16);
                let at = row.codes.as_ptr().add(p);
                // B's codes stream from L3 or memory, used once: asked for a few lines ahead
                // (the addresses past the row are the next row's; a prefetch never faults).
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(row.next_row) as *const i8);
                let c = _mm256_maskz_loadu_epi8(mask, at as *const i8);
                let half = |h: __m128i| lookup64_ps(&ps, _mm512_cvtepu8_epi32(h), codes);
                let bf16_lookup = |t: &[__m512i; 8]| {
                    let v = lookup256_bf16(t, c);
                    let wide = |h: __m256i| {
                        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
                    };
                    (
                        wide(_mm512_castsi512_si256(v)),
                        wide(_mm512_extracti64x4_epi64::<1>(v)),
                    )
                };
                let (v0, v1) = match T {
                    BF16 => bf16_lookup(&tables),
                    ARITH => {
                        let specials = _mm256_mask_cmpeq_epi8_mask(
                            mask,
                            _mm256_and_si256(c, special_mask),
                            special_value,
                        );
                        if specials == 0 {
                            let bits = |h: __m128i| {
                                let x = _mm512_sllv_epi32(_mm512_cvtepi8_epi32(h), shift);
                                _mm512_castsi512_ps(_mm512_and_si512(x, keep))
                            };
                            // Each half sign-extended straight from memory (masked lanes
                            // are past k and zeroed below, whatever they hold).
                            let (h0, h1) = if mask == u32::MAX {
                                (
                                    _mm_loadu_si128(at as *const __m128i),
                                    _mm_loadu_si128(at.add(16) as *const __m128i),
                                )
                            } else {
                                (_mm256_castsi256_si128(c), _mm256_extracti128_si256::<1>(c))
                            };
                            // The factor is in the run's scale (`scale16`).
                            (bits(h0), bits(h1))
                        } else {
                            let t = fallback.expect("an Arith lookup has its table");
                            let tables: [__m512i; 8] = std::array::from_fn(|q| {
                                _mm512_loadu_si512(t.as_ptr().add(32 * q) as *const __m512i)
                            });
                            // The table holds values, not raw bits: the factor comes off
                            // here. (Inexact only where it underflows, and then immaterial:
                            // a NaN or infinite code makes the whole dot product NaN or
                            // infinite.)
                            let (w0, w1) = bf16_lookup(&tables);
                            let inv = _mm512_set1_ps(1.0 / arith.factor);
                            (_mm512_mul_ps(w0, inv), _mm512_mul_ps(w1, inv))
                        }
                    }
                    _ => (
                        half(_mm256_castsi256_si128(c)),
                        half(_mm256_extracti128_si256::<1>(c)),
                    ),
                };
                // Lanes past k are zeroed (a table entry may be NaN).
                let q = p / 16;
                let scale = |q: usize| _mm512_set1_ps(*row.scale16.get_unchecked(q));
                let v0 = _mm512_maskz_mul_ps(m0, v0, scale(q));
                let v1 = if m1 == 0 {
                    _mm512_setzero_ps()
                } else {
                    _mm512_maskz_mul_ps(m1, v1, scale(q + 1))
                };
                for (i, acc) in acc.iter_mut().enumerate() {
                    let a = a32.as_ptr().add(i * lda + p);
                    acc[0] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, a), v0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, a.add(16)), v1, acc[1]);
                }
            }};
        }
        let whole = k / 32 * 32;
        for p in (0..whole).step_by(32) {
            run!(p, u32::MAX);
        }
        if whole < k {
            run!(whole, (1u32 << (k - whole)) - 1);
        }
        for (i, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(lanes[i].as_mut_ptr(), acc[0]);
            _mm512_storeu_ps(lanes[i].as_mut_ptr().add(16), acc[1]);
        }
    }
}

/// Whether this CPU runs the path (AVX-512 F, BW and VL).
fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::lut_registers_available() && is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The fixed order in which a row's 32 lane sums (lane `l` summing the products of
/// sums `p ≡ l (mod 32)`) are added: lane `l` with lane `l + 16`, then the 16 pairwise.
fn fold_lanes(lanes: &[f32; 32]) -> f32 {
    let mut v: [f32; 16] = std::array::from_fn(|l| lanes[l] + lanes[16 + l]);
    let mut w = 16;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            v[l] += v[l + w];
        }
    }
    v[0]
}

#[cfg(test)]
mod tests;
