//! The scaled matmul on rlx's own f32 kernel, its packers reading the codes: each run of
//! up to 16 codes that the packers would have loaded as f32 is looked up in the
//! operand's code table (held in zmm registers), times its block scale, straight into
//! the packed panels. No decoded copy of either operand is made, and the product is one
//! call of the kernel (its blocking, threads and micro-kernels), where the bf16 panels
//! (`accumulate_bf16`) decoded both operands into a scratch first, in blocks of
//! `NC` columns of B, and then widened the scratch again while packing it.
//!
//! Every decoded element is `lut[code] · scale` in f32, as `Operand::decode` computes it,
//! so the result is the f32 kernel's product of the decoded matrices, bit for bit
//! (tested below against that product).

use super::Operand;
use super::few_rows::{Arith, arith_of, scales_take_factor};
use crate::exec::scaled_lut::{lookup64_ps, lookup256_bf16};
use crate::gemm::decoding::{Dst, Load, Pair, Src, available, mask16, sgemm_decoding};
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Whether this path may run: the own kernel's instructions (AVX-512 F, BW, VL) and
/// `RLX_SCALED_PACKED_CODES` not `0` (which leaves the products to the bf16 or f32
/// panels, for A/B runs). Decided once per process.
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let off = std::env::var("RLX_SCALED_PACKED_CODES").is_ok_and(|v| v.trim() == "0");
        !off && available()
    })
}

/// The code table of one operand, in the form its register lookup reads.
#[derive(Clone, Copy)]
enum Table {
    /// At most 64 codes (fp4, fp6): the first `codes` f32 entries, `vpermi2ps`.
    Ps(*const [f32; 256], usize),
    /// 256 codes exact in bf16 (fp8): bf16 bits, `vpermi2w` (see `lookup256_bf16`).
    Bf16(*const [u16; 256]),
    /// An fp8 format decoded by bit arithmetic ([`Arith`]: the factor is in the scales),
    /// runs holding a NaN or infinity code looked up in the bf16 table. The four
    /// `vpermi2w` of a bf16 lookup cost about eight cycles of one port per 16 codes, the
    /// arithmetic about two.
    Arith(Arith, *const [u16; 256]),
}

/// `x / d` for the `x` of one product by a multiplication (a 64-bit division per run of
/// codes cost more than the lookup): the f64 quotient is within one of the true one
/// while `x < 2⁵²`, and is corrected.
#[derive(Clone, Copy)]
struct Divider {
    d: usize,
    inverse: f64,
}

impl Divider {
    fn new(d: usize) -> Divider {
        Divider {
            d,
            inverse: 1.0 / d as f64,
        }
    }

    /// `(x / d, x % d)`.
    #[inline(always)]
    fn div_rem(self, x: usize) -> (usize, usize) {
        let mut q = (x as f64 * self.inverse) as usize;
        if q * self.d > x {
            q -= 1;
        } else if (q + 1) * self.d <= x {
            q += 1;
        }
        (q, x - q * self.d)
    }
}

/// What [`CodeReader`] reads besides the operand, found once per product and owned by
/// [`multiply`]: the fp8 bit arithmetic, if it serves, and the block scales' table
/// times its factor.
struct ReaderTables {
    arith: Option<Arith>,
    scales: [f32; 256],
}

/// How the packers read one operand's codes (`rows × k`, row-major) as f32: the code's
/// table entry times the scale of its block. The block is found from the code's offset
/// from `base` (its row and column), which is why the packers may only ask for runs
/// along a row (see [`Load::load`]).
#[derive(Clone, Copy)]
struct CodeReader {
    /// Code `(0, 0)`.
    base: *const u8,
    /// Codes per row.
    k: Divider,
    table: Table,
    /// The block scales (`rows × k/block` codes) and their table (with the factor of
    /// [`Table::Arith`]), or `None` for one scale (the factor; per-tensor scales are
    /// applied after the sum).
    scales: Option<(*const u8, *const [f32; 256])>,
    /// The scale of every element when there are no block scales.
    one: f32,
    /// Sums per scale block (at least 16, so a run of 16 meets at most two blocks).
    block: Divider,
    /// Scale blocks per row.
    per_row: usize,
}

// SAFETY: the pointers are into the operands of one product and [`multiply`]'s tables,
// which outlive the blocking kernel call; they are only read.
unsafe impl Send for CodeReader {}
// SAFETY: as for Send.
unsafe impl Sync for CodeReader {}

impl CodeReader {
    /// Whether `op`'s codes have a reader: a table with a register lookup, and scale
    /// blocks of at least 16 sums (or none).
    fn reads(op: &Operand<'_>) -> bool {
        (op.lut_in_registers || op.lut_bf16.is_some()) && (op.block >= 16 || op.scales.is_none())
    }

    /// The tables [`CodeReader::of`] reads for `op`: the bit arithmetic for its fp8
    /// table where the factor folds into every scale, and the scales times that factor.
    fn tables(op: &Operand<'_>) -> ReaderTables {
        let arith = op
            .lut_bf16
            .as_ref()
            .and_then(|_| arith_of(&op.lut))
            .filter(|a| scales_take_factor(op, a.factor));
        let factor = arith.map_or(1.0, |a| a.factor);
        ReaderTables {
            arith,
            scales: match &op.scales {
                Some(s) => std::array::from_fn(|c| s.table[c] * factor),
                None => [0.0; 256],
            },
        }
    }

    /// The reader of `op`'s codes ([`CodeReader::reads`] must hold); `tables` is
    /// [`CodeReader::tables`] of `op`.
    fn of(op: &Operand<'_>, tables: &ReaderTables) -> CodeReader {
        debug_assert!(Self::reads(op));
        let table = match (&op.lut_bf16, tables.arith) {
            _ if op.lut_in_registers => Table::Ps(&op.lut, op.codes_used),
            (Some(bf16), Some(a)) => Table::Arith(a, &**bf16),
            (Some(bf16), None) => Table::Bf16(&**bf16),
            (None, _) => unreachable!("CodeReader::reads checked the table"),
        };
        CodeReader {
            base: op.codes.as_ptr(),
            k: Divider::new(op.k.max(1)),
            table,
            scales: op
                .scales
                .as_ref()
                .map(|s| (s.codes.as_ptr(), &tables.scales as *const _)),
            one: tables.arith.map_or(1.0, |a| a.factor),
            block: Divider::new(op.block.max(1)),
            per_row: op.k / op.block.max(1),
        }
    }

    /// The scale block of sum `col` and `col`'s place in it (a shift and a mask where
    /// the block is a power of two: MX, NVFP4).
    #[inline(always)]
    fn block_of(self, col: usize) -> (usize, usize) {
        let d = self.block.d;
        if d.is_power_of_two() {
            (col >> d.trailing_zeros(), col & (d - 1))
        } else {
            self.block.div_rem(col)
        }
    }

    /// The scales of the `n <= 16` elements from `(row, col)` on, one per lane.
    ///
    /// # Safety
    /// `(row, col)` and `(row, col + n - 1)` are codes of the operand; AVX-512 F enabled.
    #[inline(always)]
    unsafe fn scale_lanes(self, row: usize, col: usize, n: usize) -> __m512 {
        let Some((codes, table)) = self.scales else {
            // SAFETY: AVX-512 F enabled (caller).
            return unsafe { _mm512_set1_ps(self.one) };
        };
        let (first, within) = self.block_of(col);
        let row_scales = row * self.per_row;
        // SAFETY: blocks `first` and (when the run reaches it) `first + 1` of this row
        // hold codes of the run, so their scales exist (caller).
        unsafe {
            let scale = |b: usize| (*table)[*codes.add(row_scales + b) as usize];
            let lanes = _mm512_set1_ps(scale(first));
            let next = self.block.d - within;
            if next >= n {
                return lanes;
            }
            // Lanes `next..` lie in the next block (`block >= 16 >= n`: no third).
            _mm512_mask_mov_ps(lanes, !mask16(next), _mm512_set1_ps(scale(first + 1)))
        }
    }

    /// Whether a code in `z` is one of [`Table::Arith`]'s special codes (never for the
    /// other tables).
    ///
    /// # Safety
    /// AVX-512 F and BW enabled.
    #[inline(always)]
    unsafe fn any_special(self, z: &[__m512i]) -> bool {
        let Table::Arith(a, _) = self.table else {
            return false;
        };
        // SAFETY: register operations (caller: AVX-512 F/BW).
        unsafe {
            let mask = _mm512_set1_epi8(a.special.0 as i8);
            let value = _mm512_set1_epi8(a.special.1 as i8);
            z.iter()
                .any(|&v| _mm512_cmpeq_epi8_mask(_mm512_and_si512(v, mask), value) != 0)
        }
    }

    /// 16 codes decoded (before their scales), none of them special.
    ///
    /// # Safety
    /// AVX-512 F and BW enabled.
    #[inline(always)]
    unsafe fn decode16(self, c: __m128i) -> __m512 {
        // SAFETY: the tables hold 256 entries (`CodeReader::of`); AVX-512 F/BW (caller).
        unsafe {
            match self.table {
                Table::Arith(a, _) => {
                    let shift = _mm512_set1_epi32(a.shift as i32);
                    let x = _mm512_sllv_epi32(_mm512_cvtepi8_epi32(c), shift);
                    _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(a.keep as i32)))
                }
                Table::Ps(t, used) => {
                    let t = &*t;
                    let regs = [0, 16, 32, 48].map(|i| _mm512_loadu_ps(t.as_ptr().add(i)));
                    let idx = _mm512_and_si512(
                        _mm512_cvtepu8_epi32(c),
                        _mm512_set1_epi32(used as i32 - 1),
                    );
                    lookup64_ps(&regs, idx, used)
                }
                Table::Bf16(t) => bf16_lookup16(t, c),
            }
        }
    }

    /// The scales of `R` runs of 16 sums from `(row, col)`, `(row + 1, col)`, …, lane `t`
    /// that of run `t mod R`: for the block of sum `col`, for the next block, and the
    /// first of the 16 sums in the next block (16 when there is none).
    ///
    /// # Safety
    /// The runs are codes of the operand; AVX-512 F enabled.
    #[inline(always)]
    unsafe fn run_scales<const R: usize>(self, row: usize, col: usize) -> (__m512, __m512, usize) {
        // SAFETY: the runs' scale blocks exist (caller); AVX-512 F (caller).
        unsafe {
            let Some((codes, table)) = self.scales else {
                let one = _mm512_set1_ps(self.one);
                return (one, one, 16);
            };
            let (first, within) = self.block_of(col);
            let next = self.block.d - within;
            let lanes = |b: usize| {
                let v: [f32; 16] = std::array::from_fn(|t| {
                    (*table)[*codes.add((row + t % R) * self.per_row + b) as usize]
                });
                _mm512_loadu_ps(v.as_ptr())
            };
            let s0 = lanes(first);
            (s0, if next < 16 { lanes(first + 1) } else { s0 }, next)
        }
    }
}

/// The runs of 16 codes at `p + t·stride`, `t < 4·G`, four to a vector: 128-bit lane `L`
/// of vector `g` is run `g + G·L`.
///
/// # Safety
/// Each run readable for 16 bytes; AVX-512 F enabled.
#[inline(always)]
unsafe fn runs_in_lanes<const G: usize>(p: *const u8, stride: isize) -> [__m512i; G] {
    // SAFETY: the 4·G runs are readable (caller); AVX-512 F (caller).
    unsafe {
        let run = |t: usize| _mm_loadu_si128(p.offset(t as isize * stride) as *const __m128i);
        std::array::from_fn(|g| {
            let v = _mm512_castsi128_si512(run(g));
            let v = _mm512_inserti32x4::<1>(v, run(g + G));
            let v = _mm512_inserti32x4::<2>(v, run(g + 2 * G));
            _mm512_inserti32x4::<3>(v, run(g + 3 * G))
        })
    }
}

/// Codes laid out by sum, aligned for whole-vector stores.
#[repr(align(64))]
struct Bytes([u8; 256]);

/// 16 codes (in the low half of `c`) looked up in a 256-entry table of bf16 bits, as f32.
///
/// # Safety
/// `t` points to the table; AVX-512 F and BW enabled.
#[inline(always)]
unsafe fn bf16_lookup16(t: *const [u16; 256], c: __m128i) -> __m512 {
    // SAFETY: the table has 256 u16: eight vectors of 32 (caller).
    unsafe {
        let t = &*t;
        let regs: [__m512i; 8] =
            std::array::from_fn(|q| _mm512_loadu_si512(t.as_ptr().add(32 * q) as *const __m512i));
        let bits = lookup256_bf16(&regs, _mm256_zextsi128_si256(c));
        let low = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(bits));
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(low))
    }
}

impl Load for CodeReader {
    type E = u8;

    #[inline(always)]
    unsafe fn load(self, p: *const u8, n: usize) -> __m512 {
        // SAFETY: `p` holds `n` codes along one row of the operand (the packers' runs,
        // `sgemm_decoding`'s contract), so its offset from `base` names that row and the
        // run's first column; masked lanes are not read; AVX-512 F/BW/VL are enabled
        // in the packers.
        unsafe {
            let (row, col) = self.k.div_rem(p.offset_from(self.base) as usize);
            let live = mask16(n);
            let codes = _mm_maskz_loadu_epi8(live, p as *const i8);
            let mut values = self.decode16(codes);
            if let Table::Arith(a, t) = self.table {
                let specials = _mm_mask_cmpeq_epi8_mask(
                    live,
                    _mm_and_si128(codes, _mm_set1_epi8(a.special.0 as i8)),
                    _mm_set1_epi8(a.special.1 as i8),
                );
                if specials != 0 {
                    // NaN and infinity codes: their table values, less the factor the
                    // scales carry (they stay NaN or infinite).
                    let looked = bf16_lookup16(t, codes);
                    let undone = _mm512_mul_ps(looked, _mm512_set1_ps(1.0 / a.factor));
                    values = _mm512_mask_mov_ps(values, specials, undone);
                }
            }
            _mm512_maskz_mul_ps(live, values, self.scale_lanes(row, col, n))
        }
    }

    #[inline(always)]
    unsafe fn load_transposed16(self, p: *const u8, stride: isize) -> Option<[__m512; 16]> {
        // Transposing the codes as bytes and decoding sum by sum costs a third of the
        // shuffles that transposing 16 decoded vectors of f32 does (a transposed B's
        // packing is most of what a product of few rows costs beyond the f32 one's).
        if let Table::Bf16(_) = self.table {
            return None;
        }
        // SAFETY: the 16 runs of 16 codes at `p + t·stride` lie along rows of the
        // operand (caller), so the first names the rows and the columns of all; AVX-512
        // F/BW/VL are enabled in the packers.
        unsafe {
            // z[g], 128-bit lane L: run g + 4L.
            let z = runs_in_lanes::<4>(p, stride);
            if self.any_special(&z) {
                return None;
            }
            // Lane L of the 16-bit interleaves: runs 4L, 4L + 1 (then 4L + 2, 4L + 3)
            // pair by pair, sums 0..8 (lo) or 8..16 (hi).
            let (a_lo, a_hi) = (
                _mm512_unpacklo_epi8(z[0], z[1]),
                _mm512_unpackhi_epi8(z[0], z[1]),
            );
            let (b_lo, b_hi) = (
                _mm512_unpacklo_epi8(z[2], z[3]),
                _mm512_unpackhi_epi8(z[2], z[3]),
            );
            // w[s], lane L, dword d: runs 4L .. 4L + 4 at sum 4s + d.
            let w = [
                _mm512_unpacklo_epi16(a_lo, b_lo),
                _mm512_unpackhi_epi16(a_lo, b_lo),
                _mm512_unpacklo_epi16(a_hi, b_hi),
                _mm512_unpackhi_epi16(a_hi, b_hi),
            ];
            // Dword d of every lane gathered into lane d: lane d of x[s] is sum 4s + d
            // of runs 0..16, so the bytes in order are the 16 sums.
            let gather = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
            let mut sums = Bytes([0; 256]);
            for (s, &v) in w.iter().enumerate() {
                let x = _mm512_permutexvar_epi32(gather, v);
                _mm512_store_si512(sums.0.as_mut_ptr().add(64 * s) as *mut __m512i, x);
            }
            // Lanes are runs (rows of the operand): one scale vector per block the 16
            // sums meet.
            let (row, col) = self.k.div_rem(p.offset_from(self.base) as usize);
            let (scale0, scale1, next) = self.run_scales::<16>(row, col);
            Some(std::array::from_fn(|q| {
                let c = _mm_load_si128(sums.0.as_ptr().add(16 * q) as *const __m128i);
                _mm512_mul_ps(self.decode16(c), if q < next { scale0 } else { scale1 })
            }))
        }
    }

    #[inline(always)]
    unsafe fn load_panel8x16(self, p: *const u8, stride: isize) -> Option<[__m512; 8]> {
        if let Table::Bf16(_) = self.table {
            return None;
        }
        // SAFETY: as in `load_transposed16`, for 8 runs.
        unsafe {
            // z[g], 128-bit lane L: run 2L + g.
            let z = runs_in_lanes::<2>(p, stride);
            if self.any_special(&z) {
                return None;
            }
            // Lane L, word s: runs 2L and 2L + 1 at sum s (lo) or 8 + s (hi).
            let (lo, hi) = (
                _mm512_unpacklo_epi8(z[0], z[1]),
                _mm512_unpackhi_epi8(z[0], z[1]),
            );
            // Word 4s + L of the result is word s of lane L: sum s of runs 0..8 in order.
            let idx: [u16; 32] = std::array::from_fn(|w| (8 * (w % 4) + w / 4) as u16);
            let idx = _mm512_loadu_si512(idx.as_ptr() as *const __m512i);
            let mut sums = Bytes([0; 256]);
            for (h, &v) in [lo, hi].iter().enumerate() {
                let x = _mm512_permutexvar_epi16(idx, v);
                _mm512_store_si512(sums.0.as_mut_ptr().add(64 * h) as *mut __m512i, x);
            }
            let (row, col) = self.k.div_rem(p.offset_from(self.base) as usize);
            let (scale0, scale1, next) = self.run_scales::<8>(row, col);
            Some(std::array::from_fn(|i| {
                let c = _mm_load_si128(sums.0.as_ptr().add(16 * i) as *const __m128i);
                // Lanes 0..8 are sum 2i, 8..16 sum 2i + 1.
                let later =
                    (u16::from(2 * i >= next) * 0x00ff) | (u16::from(2 * i + 1 >= next) * 0xff00);
                _mm512_mul_ps(self.decode16(c), _mm512_mask_mov_ps(scale0, later, scale1))
            }))
        }
    }

    fn get(self, _: u8) -> f32 {
        // `multiply` hands the kernel views with a unit stride and k > 1: the packers
        // read every run through `load`.
        unreachable!("scaled codes are read in runs along their rows, never one by one")
    }
}

/// Whether this path takes a product of `a` and `b` over `k` sums: the own f32 kernel
/// runs here, `k > 1`, and both operands have a reader ([`CodeReader::reads`]).
pub(super) fn takes(a: &Operand<'_>, b: &Operand<'_>, k: usize) -> bool {
    enabled() && k > 1 && a.k == k && b.k == k && CodeReader::reads(a) && CodeReader::reads(b)
}

/// `C = A·Bᵀ` (overwriting `c`, `[m, n]`) if this path takes the product ([`takes`]);
/// `false` (having written nothing) leaves it to the other paths.
pub(super) fn multiply(
    a: &Operand<'_>,
    b: &Operand<'_>,
    (m, n, k): (usize, usize, usize),
    c: &mut [f32],
) -> bool {
    if !takes(a, b, k)
        || m == 0
        || n == 0
        || c.len() != m * n
        || a.codes.len() < m * k
        || b.codes.len() < n * k
    {
        return false;
    }
    let (ta, tb) = (CodeReader::tables(a), CodeReader::tables(b));
    let (ra, rb) = (CodeReader::of(a, &ta), CodeReader::of(b, &tb));
    // A `[m, k]` in rows; B's `[n, k]` codes read as the `k × n` matrix Bᵀ (unit stride
    // down its columns). Both unit strides lie along K, the runs the readers decode.
    let av = Src {
        ptr: a.codes.as_ptr(),
        rs: k as isize,
        cs: 1,
    };
    let bv = Src {
        ptr: b.codes.as_ptr(),
        rs: 1,
        cs: k as isize,
    };
    let cv = Dst {
        ptr: c.as_mut_ptr(),
        rs: n as isize,
        cs: 1,
    };
    let threads = rayon::current_num_threads();
    // SAFETY: the kernel's CPU features were checked (`enabled`); A holds m × k codes and
    // B n × k, C m × n distinct f32 apart from both; the views' unit strides lie along K
    // and k > 1, so every run the packers load lies along one row (the readers' need).
    unsafe { sgemm_decoding(Pair(ra, rb), av, bv, cv, (m, n, k), false, threads) };
    true
}

#[cfg(test)]
#[path = "codes/tests.rs"]
mod tests;
