//! Packing of the own f32 kernel's operands: B's `KC × NC` block into strips of the
//! tile's width, A's `MC × KC` block into panels of the tile's height.
//!
//! The source is read in the order its memory runs wherever the layout allows, because
//! the sources of large products live in L3 or DRAM and a read pattern of short runs a
//! page apart leaves the hardware prefetchers idle: packing B one strip at a time read
//! 192 bytes from each row (rows 4 KiB apart at 1024 columns), and packing a transposed
//! A one panel at a time read 32 bytes from each stored row. Measured on Sapphire Rapids
//! at 1024³ (one thread, `RLX_GEMM_F32_EXP`-style switches that skipped each packing in
//! one process against MKL): A's packing took 8–9 % of the product and B's 4–6 %, about
//! three cycles per element for what is one load and one store of a vector per 16.
//! Where a panel has to gather rows (row-major A, transposed B), the next panel's lines
//! are prefetched while the current one is transposed.

//!
//! The packers are generic over how a source element becomes f32 ([`Load`]): f32 itself,
//! or bf16 / f16 bits widened exactly while they are packed (the half-precision products
//! of `lowp.rs` run on this kernel that way, see `f32_avx512::sgemm_half`). Both read the
//! source in the same order; a widened load is one 32-byte load and one conversion per
//! 16 elements.

use super::super::avx512::transpose16;
use super::super::lowp_drive::{Half, Src};
use super::mask16;
use std::arch::x86_64::*;
use std::ops::Range;

/// How the packers read source elements as f32.
pub(crate) trait Load: Copy + Send + Sync {
    /// The stored element type.
    type E: Copy;
    /// Whether the stored elements are the f32 values themselves (the micro-kernels may
    /// then read A's rows where they are stored).
    const IN_PLACE: bool = false;
    /// Elements `0..n` (`n <= 16`) at `p` as f32 lanes, zeros above `n`; lanes at or
    /// above `n` are not read.
    ///
    /// # Safety
    /// `p` readable for `n` elements; AVX-512 F, BW and VL present (the packers enable
    /// them). The packers call it on runs of an operand's unit-stride dimension only.
    unsafe fn load(self, p: *const Self::E, n: usize) -> __m512;
    /// The f32 value of one element (exact); the packers call it only on views with no
    /// unit stride.
    fn get(self, e: Self::E) -> f32;
    /// Sums `0..16` of the 16 runs at `p`, `p + stride`, … `p + 15·stride` (a transposed
    /// B's 16 columns), transposed: vector `q` holds sum `q` of every run — what 16
    /// [`Load::load`]s and a 16 × 16 transpose give — where this reader has a cheaper way
    /// to it; `None` (the default) leaves the packer to load and transpose.
    ///
    /// # Safety
    /// Each run readable for 16 elements along one stored row; AVX-512 F, BW and VL
    /// present.
    #[inline(always)]
    unsafe fn load_transposed16(self, p: *const Self::E, stride: isize) -> Option<[__m512; 16]> {
        let _ = (p, stride);
        None
    }
    /// Sums `0..16` of the 8 runs at `p`, `p + stride`, … `p + 7·stride` (an 8-row panel
    /// of a row-major A) as 8 vectors, vector `i` holding sum `2i` of the 8 runs then sum
    /// `2i + 1` (what 8 [`Load::load`]s and `transpose8x16` give) where this reader has a
    /// cheaper way to it; `None` (the default) leaves the packer to load and transpose.
    ///
    /// # Safety
    /// As [`Load::load_transposed16`], for 8 runs.
    #[inline(always)]
    unsafe fn load_panel8x16(self, p: *const Self::E, stride: isize) -> Option<[__m512; 8]> {
        let _ = (p, stride);
        None
    }
}

/// How the packers read A's elements and B's: one [`Load`] for both (f32, bf16, f16), or a
/// [`Pair`] where the operands decode differently (the scaled matmul's codes, each with
/// its own table and block scales, `exec/scaled/codes.rs`).
pub(crate) trait Loads: Copy + Send + Sync {
    /// The stored element type of both operands.
    type E: Copy;
    /// A's reader.
    type A: Load<E = Self::E>;
    /// B's reader.
    type B: Load<E = Self::E>;
    /// A's reader.
    fn a(self) -> Self::A;
    /// B's reader.
    fn b(self) -> Self::B;
}

impl<L: Load> Loads for L {
    type E = L::E;
    type A = L;
    type B = L;
    #[inline(always)]
    fn a(self) -> L {
        self
    }
    #[inline(always)]
    fn b(self) -> L {
        self
    }
}

/// A's reader and B's.
#[derive(Clone, Copy)]
pub(crate) struct Pair<LA, LB>(pub(crate) LA, pub(crate) LB);

impl<LA: Load, LB: Load<E = LA::E>> Loads for Pair<LA, LB> {
    type E = LA::E;
    type A = LA;
    type B = LB;
    #[inline(always)]
    fn a(self) -> LA {
        self.0
    }
    #[inline(always)]
    fn b(self) -> LB {
        self.1
    }
}

/// f32 sources, read as they are.
#[derive(Clone, Copy)]
pub(crate) struct F32;

impl Load for F32 {
    type E = f32;
    const IN_PLACE: bool = true;
    #[inline(always)]
    unsafe fn load(self, p: *const f32, n: usize) -> __m512 {
        // SAFETY: forwarded contract; masked lanes are not read.
        unsafe { _mm512_maskz_loadu_ps(mask16(n), p) }
    }
    #[inline(always)]
    fn get(self, e: f32) -> f32 {
        e
    }
}

impl Load for Half {
    type E = u16;
    #[inline(always)]
    unsafe fn load(self, p: *const u16, n: usize) -> __m512 {
        // SAFETY: forwarded contract: 16 elements are read only when n == 16; a shorter
        // run is copied element by element into a zeroed buffer (the tails of a block).
        unsafe {
            let h = if n >= 16 {
                _mm256_loadu_si256(p as *const __m256i)
            } else {
                let mut t = [0u16; 16];
                std::ptr::copy_nonoverlapping(p, t.as_mut_ptr(), n);
                _mm256_loadu_si256(t.as_ptr() as *const __m256i)
            };
            match self {
                Half::F16 => _mm512_cvtph_ps(h),
                Half::Bf16 => _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)),
            }
        }
    }
    #[inline(always)]
    fn get(self, e: u16) -> f32 {
        self.to_f32(e)
    }
}

/// The strips of B a block of `nb` columns is packed into for tiles `nr` columns wide:
/// full strips, then the rest. A rest of at most 16 columns after a 48-column strip is
/// merged with it and split as 32 + (16 + rest) columns: both run the 8 × 32 loop instead
/// of 8 × 48 and then the 8 × 16 loop, whose loads (one vector and eight broadcasts per
/// eight FMAs) leave the FMA ports idle; this matters at 256 columns (5 × 48 + 16).
#[derive(Clone, Copy)]
pub(super) struct Strips {
    pub(super) nb: usize,
    pub(super) nr: usize,
}

impl Strips {
    /// Whether the last full strip and the rest are split as 32 + (16 + rest).
    fn split(self) -> bool {
        let rest = self.nb % self.nr;
        self.nr == 48 && rest > 0 && rest <= 16 && self.nb > self.nr
    }

    /// How many strips there are.
    pub(super) fn count(self) -> usize {
        // A split replaces the last full strip and the rest by two strips.
        self.nb.div_ceil(self.nr)
    }

    /// Strip `s`: its first column, its width and its row stride in the packed block
    /// (a multiple of 16, at least the width); strip `s` starts `first column · kb` f32
    /// into the packed block, right after strip `s - 1`.
    pub(super) fn get(self, s: usize) -> (usize, usize, usize) {
        let full = self.nb / self.nr;
        if self.split() && s + 2 >= self.count() {
            let j0 = (full - 1) * self.nr + 32 * (s + 2 - self.count());
            return (j0, (self.nb - j0).min(32), 32);
        }
        let j0 = s * self.nr;
        (j0, self.nr.min(self.nb - j0), self.nr)
    }
}

/// Pack sums `0..kb`, columns `0..nb` of `b` into the strips of [`Strips`], the strip
/// of columns `j0..` at `dst + j0·kb` laid out `[kb sums][row stride columns]` (zeros
/// past its width).
///
/// # Safety
/// The `kb × nb` block of `b` must be readable, `dst` writable for
/// `nb.next_multiple_of(16·NV) · kb` f32 and 64-byte aligned; AVX-512 F, BW and VL
/// present (BW and VL for the code decoders' byte lookups).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn pack_b<L: Load, const NV: usize>(
    l: L,
    b: Src<L::E>,
    kb: usize,
    nb: usize,
    dst: *mut f32,
) {
    let strips = Strips { nb, nr: 16 * NV };
    // SAFETY: forwarded contract.
    unsafe { pack_b_strips(l, b, kb, strips, 0..strips.count(), dst) }
}

/// [`pack_b`] for the strips `range` of `strips` alone (each at its place in the block).
///
/// # Safety
/// As [`pack_b`], with `strips.nr` the tile's width and `range` inside `0..strips.count()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn pack_b_strips<L: Load>(
    l: L,
    b: Src<L::E>,
    kb: usize,
    strips: Strips,
    range: Range<usize>,
    dst: *mut f32,
) {
    if b.cs == 1 {
        // Rows contiguous: each sum's nb columns are read as one run and dealt out to
        // the strips (one 64-byte aligned line per vector).
        for p in 0..kb {
            // SAFETY: row p < kb of the block.
            let row = unsafe { b.at(p, 0).ptr };
            for s in range.clone() {
                let (j0, w, nr) = strips.get(s);
                for g in 0..nr / 16 {
                    let n = w.saturating_sub(16 * g).min(16);
                    // SAFETY: columns j0 + 16g .. j0 + 16g + n < nb of row p are elements
                    // of the block (masked lanes are not read); the store is sum p of
                    // strip s, inside the destination and 64-byte aligned.
                    unsafe {
                        let v = l.load(row.add(j0 + 16 * g), n);
                        _mm512_store_ps(dst.add(j0 * kb + p * nr + 16 * g), v);
                    }
                }
            }
        }
        return;
    }
    for s in range {
        let (j0, w, nr) = strips.get(s);
        // SAFETY: strip s of the destination (caller).
        let out = unsafe { dst.add(j0 * kb) };
        if b.rs == 1 {
            // Columns contiguous (a transposed weight): 16 columns × 16 sums are read as
            // 16 vectors and transposed in registers; the same columns' lines two steps
            // ahead are prefetched (48 columns are more streams than the L2 prefetcher
            // follows).
            for p0 in (0..kb).step_by(16) {
                let kn = 16.min(kb - p0);
                for g in 0..nr / 16 {
                    let n = w.saturating_sub(16 * g).min(16);
                    if n == 16 && kn == 16 {
                        // SAFETY: sums p0 .. p0 + 16 of columns j0 + 16g .. j0 + 16g + 16
                        // < nb are elements of the block, each column's contiguous.
                        let tile = unsafe { l.load_transposed16(b.at(p0, j0 + 16 * g).ptr, b.cs) };
                        if let Some(r) = tile {
                            for (q, x) in r.iter().enumerate() {
                                // SAFETY: sum p0 + q < kb of the strip, 64-byte aligned.
                                unsafe { _mm512_store_ps(out.add((p0 + q) * nr + 16 * g), *x) };
                            }
                            continue;
                        }
                    }
                    let mut r = [_mm512_setzero_ps(); 16];
                    for (t, x) in r.iter_mut().enumerate().take(n) {
                        // SAFETY: sums p0 .. p0 + kn of column j0 + 16g + t < nb are
                        // contiguous elements of the block; masked lanes are not read;
                        // the prefetched sum p0 + 32 < kb is in the block too.
                        *x = unsafe {
                            if p0 + 32 < kb {
                                let ahead = b.at(p0 + 32, j0 + 16 * g + t).ptr;
                                _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                            }
                            l.load(b.at(p0, j0 + 16 * g + t).ptr, kn)
                        };
                    }
                    transpose16(&mut r);
                    for (q, x) in r.iter().enumerate().take(kn) {
                        // SAFETY: sum p0 + q < kb of the strip, 64-byte aligned.
                        unsafe { _mm512_store_ps(out.add((p0 + q) * nr + 16 * g), *x) };
                    }
                }
            }
        } else {
            for p in 0..kb {
                for j in 0..nr {
                    // SAFETY: (p, j0 + j) is inside the block when j < w; the store is
                    // inside the strip.
                    unsafe {
                        *out.add(p * nr + j) = if j < w { l.get(b.get(p, j0 + j)) } else { 0.0 }
                    };
                }
            }
        }
    }
}

/// Pack rows `0..mb`, sums `0..kb` of `a` into `MR`-row panels, panel `q` at
/// `dst + q·kb·MR` laid out `[kb sums][MR rows]` (zeros past `mb`).
///
/// # Safety
/// The `mb × kb` block of `a` must be readable, `dst` writable for
/// `mb.next_multiple_of(MR) · kb` f32; AVX-512 F, BW and VL present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn pack_a<L: Load, const MR: usize>(
    l: L,
    a: Src<L::E>,
    mb: usize,
    kb: usize,
    dst: *mut f32,
) {
    // The lanes of one sum of a panel (MR <= 16).
    let mr_mask = mask16(MR);
    let panels = mb.div_ceil(MR);
    if a.rs == 1 {
        // Columns contiguous (a transposed operand): each sum's mb rows are one run. The
        // block is packed 16 sums at a time, panel after panel: the 16 runs are read in
        // order (16 streams the prefetchers follow) and each panel's 16 sums are one
        // contiguous piece of whole lines. Walking all panels for one sum instead
        // stored half lines a panel apart (4–8 KiB, one L1 set), each line fetched
        // twice.
        // On the 8-row tile, two full panels are 16 rows of one run: one vector per sum,
        // and two sums of a panel make one whole line, so the pair's two sums go out as
        // two full-line stores (four loads and four half-line stores before). Measured
        // on the Sapphire Rapids VM against the build before, MKL in the same process,
        // medians of three rounds: the TN weight gradients of W6 and W11 +1–2 % on one
        // thread, within noise on two.
        let pairs = if MR == 8 { mb / 16 } else { 0 };
        for p0 in (0..kb).step_by(16) {
            let kn = 16.min(kb - p0);
            for pair in 0..pairs {
                let (i0, even) = (pair * 16, kn & !1);
                // SAFETY: panels 2·pair and 2·pair + 1 are full (16 rows < mb), sums
                // p0 .. p0 + kn < kb; each store is two sums (16 f32) of one panel.
                unsafe {
                    let (lo, hi) = (dst.add(i0 * kb), dst.add((i0 + 8) * kb));
                    for p in (p0..p0 + even).step_by(2) {
                        let v0 = l.load(a.at(i0, p).ptr, 16);
                        let v1 = l.load(a.at(i0, p + 1).ptr, 16);
                        let first = _mm512_shuffle_f32x4::<0b01_00_01_00>(v0, v1);
                        let second = _mm512_shuffle_f32x4::<0b11_10_11_10>(v0, v1);
                        _mm512_storeu_ps(lo.add(p * 8), first);
                        _mm512_storeu_ps(hi.add(p * 8), second);
                    }
                    if even < kn {
                        let p = p0 + even;
                        let v = l.load(a.at(i0, p).ptr, 16);
                        _mm512_mask_storeu_ps(lo.add(p * 8), 0xff, v);
                        let upper = _mm512_shuffle_f32x4::<0b11_10_11_10>(v, v);
                        _mm512_mask_storeu_ps(hi.add(p * 8), 0xff, upper);
                    }
                }
            }
            for panel in 2 * pairs..panels {
                let i0 = panel * MR;
                let h = MR.min(mb - i0);
                for p in p0..p0 + kn {
                    // SAFETY: rows i0 .. i0 + h of sum p < kb are contiguous elements of
                    // the block (masked lanes not read); the MR stored lanes are sum p
                    // of the panel, inside the destination.
                    unsafe {
                        let v = l.load(a.at(i0, p).ptr, h);
                        _mm512_mask_storeu_ps(dst.add(panel * MR * kb + p * MR), mr_mask, v);
                    }
                }
            }
        }
        return;
    }
    for panel in 0..panels {
        let i0 = panel * MR;
        let h = MR.min(mb - i0);
        // Rows of the next panel, whose lines are prefetched while this one is packed.
        let next = MR.min(mb.saturating_sub(i0 + MR));
        // SAFETY: panel `panel` of the destination (caller).
        let out = unsafe { dst.add(panel * MR * kb) };
        if a.cs == 1 {
            // Rows contiguous: MR rows × 16 sums are read as vectors and transposed.
            for p0 in (0..kb).step_by(16) {
                let kn = 16.min(kb - p0);
                if MR == 8 && h == 8 && kn == 16 {
                    // SAFETY: sums p0 .. p0 + 16 of rows i0 .. i0 + 8 < mb are elements
                    // of the block, each row's contiguous.
                    let pairs = unsafe { l.load_panel8x16(a.at(i0, p0).ptr, a.rs) };
                    if let Some(pairs) = pairs {
                        for (pair, x) in pairs.iter().enumerate() {
                            // SAFETY: sums p0 + 2·pair and the next (< kb) of the panel.
                            unsafe { _mm512_storeu_ps(out.add((p0 + 2 * pair) * MR), *x) };
                        }
                        continue;
                    }
                }
                let mut r = [_mm512_setzero_ps(); 16];
                for (t, x) in r.iter_mut().enumerate().take(h) {
                    // SAFETY: sums p0 .. p0 + kn of row i0 + t < mb are contiguous
                    // elements of the block; masked lanes are not read.
                    *x = unsafe { l.load(a.at(i0 + t, p0).ptr, kn) };
                }
                for t in 0..next {
                    // SAFETY: (i0 + MR + t, p0) is an element of the block (t < next).
                    unsafe {
                        let ahead = a.at(i0 + MR + t, p0).ptr;
                        _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                    }
                }
                if MR == 8 {
                    let rows = [r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]];
                    for (pair, x) in transpose8x16(rows).iter().enumerate() {
                        let q = 2 * pair;
                        if q >= kn {
                            break;
                        }
                        // Both sums of the pair, or the first alone at an odd end.
                        let mask = if q + 1 < kn { u16::MAX } else { 0xff };
                        // SAFETY: sums p0 + q (and p0 + q + 1 when stored) < kb of the
                        // panel, 8 f32 each.
                        unsafe { _mm512_mask_storeu_ps(out.add((p0 + q) * MR), mask, *x) };
                    }
                    continue;
                }
                transpose16(&mut r);
                for (q, x) in r.iter().enumerate().take(kn) {
                    // SAFETY: the MR stored lanes are sum p0 + q < kb of the panel.
                    unsafe { _mm512_mask_storeu_ps(out.add((p0 + q) * MR), mr_mask, *x) };
                }
            }
        } else {
            for p in 0..kb {
                for i in 0..MR {
                    // SAFETY: (i0 + i, p) is inside the block when i < h; the store is
                    // inside the panel.
                    unsafe {
                        *out.add(p * MR + i) = if i < h { l.get(a.get(i0 + i, p)) } else { 0.0 }
                    };
                }
            }
        }
    }
}

/// The 8 × 16 matrix whose rows are `r`, transposed into 16 rows of 8 stored two to a
/// vector: vector `i` holds rows `2i` and `2i + 1` of the transpose (column `2i`, then
/// `2i + 1` of `r`), so an 8-row panel's sums are whole-line stores. 32 shuffles where
/// [`transpose16`] of the rows padded with zeros takes 96 (A's packing of a 1024³
/// product on one thread took 8–9 % of its time, mostly these shuffles on one port).
#[inline(always)]
fn transpose8x16(r: [__m512; 8]) -> [__m512; 8] {
    // SAFETY: register-only shuffles; callers run with AVX-512 F enabled.
    unsafe {
        // t[2g], t[2g + 1], 128-bit lane L: rows 2g, 2g + 1 interleaved at columns
        // 4L, 4L + 1 and 4L + 2, 4L + 3.
        let mut t = [_mm512_setzero_ps(); 8];
        for g in 0..4 {
            t[2 * g] = _mm512_unpacklo_ps(r[2 * g], r[2 * g + 1]);
            t[2 * g + 1] = _mm512_unpackhi_ps(r[2 * g], r[2 * g + 1]);
        }
        // u[4h + j], lane L: rows 4h .. 4h + 4 of column 4L + j.
        let mut u = [_mm512_setzero_ps(); 8];
        for h in 0..2 {
            let (a, b, c, d) = (t[4 * h], t[4 * h + 1], t[4 * h + 2], t[4 * h + 3]);
            u[4 * h] = _mm512_shuffle_ps::<0x44>(a, c);
            u[4 * h + 1] = _mm512_shuffle_ps::<0xEE>(a, c);
            u[4 * h + 2] = _mm512_shuffle_ps::<0x44>(b, d);
            u[4 * h + 3] = _mm512_shuffle_ps::<0xEE>(b, d);
        }
        // lo[j] lanes: (column j, rows 0–3), (column 4 + j, rows 0–3), (column j, rows
        // 4–7), (column 4 + j, rows 4–7); hi[j] the same for columns 8 + j, 12 + j.
        let mut lo = [_mm512_setzero_ps(); 4];
        let mut hi = [_mm512_setzero_ps(); 4];
        for j in 0..4 {
            lo[j] = _mm512_shuffle_f32x4::<0x44>(u[j], u[4 + j]);
            hi[j] = _mm512_shuffle_f32x4::<0xEE>(u[j], u[4 + j]);
        }
        // Column 4L + j (j even) and the next: lanes 0, 2 of x[j] then of x[j + 1], with
        // x = lo for L < 2 (lane L of u) and hi above.
        let mut out = [_mm512_setzero_ps(); 8];
        for j in [0, 2] {
            out[j / 2] = _mm512_shuffle_f32x4::<0x88>(lo[j], lo[j + 1]);
            out[2 + j / 2] = _mm512_shuffle_f32x4::<0xDD>(lo[j], lo[j + 1]);
            out[4 + j / 2] = _mm512_shuffle_f32x4::<0x88>(hi[j], hi[j + 1]);
            out[6 + j / 2] = _mm512_shuffle_f32x4::<0xDD>(hi[j], hi[j + 1]);
        }
        out
    }
}
