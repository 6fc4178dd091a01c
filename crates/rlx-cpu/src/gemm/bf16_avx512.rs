//! AVX-512 micro-kernels for half-precision operands without AMX:
//! - [`DpBf16`]: bf16 × bf16 with `vdpbf16ps` (AVX512_BF16): each 32-bit lane of the
//!   accumulator adds the products of one bf16 pair, `c += a₀·b₀ + a₁·b₁`, so one
//!   instruction does 32 multiply-adds (twice an f32 FMA's 16). Pair-interleaved
//!   ("VNNI") packing: A's panel is `[sum pair][16 rows][2]` (a row's pair is one 32-bit
//!   broadcast, [`pack_a_words`]), B's `[sum pair][16 columns][2]` (one vector of 16 pairs).
//!   Numerics (Intel SDM, VDPBF16PS): f32 accumulation, round-to-nearest-even, bf16
//!   denormal inputs treated as zero, denormal results flushed to zero.
//!
//! The C tile is 16 × 16 (16 zmm accumulators, one B vector, each row's pair broadcast
//! from memory inside its multiply-add).

use super::avx512::{avx512bw, transpose16};
use super::lowp_drive::{CTile, Kernel, Src};
use std::arch::x86_64::*;

/// Rows of C per micro-kernel call.
const MR: usize = A_PANEL;
/// Columns of C per micro-kernel call (one 16-lane vector).
const NR: usize = 16;

/// Whether the CPU has `vdpbf16ps` (AVX512_BF16) besides AVX-512 F/BW.
pub fn avx512bf16_available() -> bool {
    avx512bw() && is_x86_feature_detected!("avx512bf16")
}

/// Pack sums `0..kb`, columns `0..nb` of `b` as strips of `W` columns, each
/// `[kpad / 2 pairs][W columns][2]`, over `nb.next_multiple_of(nr)` columns (zeros past
/// `nb` and `kb`). Used by the AMX kernel (`W = 16`, one tile per 16 pairs) and by
/// [`DpBf16`] (`W = NR`). Full pairs of full strips are vectorized: with B's rows
/// contiguous, two rows are interleaved 16 columns at a time; with its columns contiguous
/// (a transposed weight), a pair is one 32-bit word and 16 columns are one gather.
///
/// # Safety
/// The `kb × nb` block of `b` must be readable; the CPU must have AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn pack_b_pairs<const W: usize>(
    b: Src,
    kb: usize,
    nb: usize,
    kpad: usize,
    nr: usize,
    dst: &mut [u16],
) {
    const { assert!(W.is_multiple_of(16)) };
    let kp2 = kpad / 2;
    let cols = nb.next_multiple_of(nr);
    assert!(dst.len() >= cols * kpad, "pack_b_pairs: buffer too small");
    // Byte offsets of 16 consecutive columns, for the gather (when they fit an i32).
    let col_bytes =
        b.cs.checked_mul(2)
            .filter(|c| c.unsigned_abs() * 16 < i32::MAX as usize);
    let gather = (b.rs == 1).then_some(col_bytes).flatten().map(|cb| {
        let n = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        _mm512_mullo_epi32(n, _mm512_set1_epi32(cb as i32))
    });
    // SAFETY: IDX holds 32 u16 (64 bytes).
    let idx = unsafe { _mm512_loadu_si512(INTERLEAVE.as_ptr() as *const __m512i) };
    let full_pairs = kb / 2;
    // Row-major B, 16-column strips: the full pairs of every two full strips (32 columns,
    // one 64-byte line of each row) are packed walking B's rows, a pair of rows at a time
    // across the block, each line read once and split into the two strips. Read along its
    // rows B streams through the hardware prefetchers; read down a strip's columns (rows
    // often 2 KiB apart, a new page every other row) the same packing took ~11% of a
    // 1024³ AMX product on one thread.
    let line_pairs = if W == 16 && b.cs == 1 { nb / 32 } else { 0 };
    if line_pairs > 0 {
        // SAFETY: INTERLEAVE_HI holds 32 u16.
        let idx_hi = unsafe { _mm512_loadu_si512(INTERLEAVE_HI.as_ptr() as *const __m512i) };
        let strip_len = kp2 * W * 2;
        let base = dst.as_mut_ptr();
        for p in 0..full_pairs {
            for s in 0..line_pairs {
                // SAFETY: rows 2p, 2p + 1 < kb and columns 32s .. 32s + 32 <= nb are inside
                // the block and contiguous; strips 2s and 2s + 1 exist (32s + 32 <= nb <=
                // cols) and hold kp2 · 16 pairs, pair p < kp2.
                unsafe {
                    let lo = _mm512_loadu_si512(b.at(2 * p, 32 * s).ptr as *const __m512i);
                    let hi = _mm512_loadu_si512(b.at(2 * p + 1, 32 * s).ptr as *const __m512i);
                    let o0 = base.add(2 * s * strip_len + p * W * 2) as *mut __m512i;
                    let o1 = base.add((2 * s + 1) * strip_len + p * W * 2) as *mut __m512i;
                    _mm512_storeu_si512(o0, _mm512_permutex2var_epi16(lo, idx, hi));
                    _mm512_storeu_si512(o1, _mm512_permutex2var_epi16(lo, idx_hi, hi));
                }
            }
        }
    }
    for t in 0..cols / W {
        let j0 = t * W;
        let w = W.min(nb.saturating_sub(j0));
        // Strips whose full pairs the row walk wrote: only the tail pair and the padding
        // are left (below).
        let mut p = if t < 2 * line_pairs { full_pairs } else { 0 };
        let strip = &mut dst[t * kp2 * W * 2..(t + 1) * kp2 * W * 2];
        if w == W && b.cs != 1 && b.rs == 1 {
            // Columns contiguous: 16 columns × 16 pairs are 16 vectors of 32-bit pairs,
            // transposed in registers (a gather per 16 pairs ran at a third of the speed
            // and made packing a transposed weight cost as much as an M = 128 product).
            while p + 16 <= full_pairs {
                for g in 0..W / 16 {
                    let mut r = [_mm512_setzero_ps(); 16];
                    for (t, x) in r.iter_mut().enumerate() {
                        // SAFETY: sums 2p .. 2p + 32 <= kb of column j0 + 16g + t < nb are
                        // contiguous elements of the block (rs = 1).
                        *x = unsafe {
                            _mm512_loadu_ps(b.at(2 * p, j0 + 16 * g + t).ptr as *const f32)
                        };
                    }
                    transpose16(&mut r);
                    for (q, x) in r.iter().enumerate() {
                        let out = strip[((p + q) * W + 16 * g) * 2..].as_mut_ptr() as *mut f32;
                        // SAFETY: pair p + q < kp2 of the strip has W · 2 u16 from column 16g.
                        unsafe { _mm512_storeu_ps(out, *x) };
                    }
                }
                p += 16;
            }
        }
        if w == W && (b.cs == 1 || gather.is_some()) {
            while p < full_pairs {
                for g in 0..W / 16 {
                    let out = strip[(p * W + 16 * g) * 2..].as_mut_ptr() as *mut __m512i;
                    // SAFETY: rows 2p, 2p + 1 < kb and columns j0 + 16g .. +16 <= nb are
                    // inside the block; `out` has 32 more u16 (the strip holds kp2 · W
                    // pairs). Row-major: each row's 16 columns are contiguous. Column-major
                    // (rs = 1): each column's pair is one (unaligned) 32-bit word.
                    unsafe {
                        let r0 = b.at(2 * p, j0 + 16 * g).ptr;
                        let v = if b.cs == 1 {
                            let lo =
                                _mm512_castsi256_si512(_mm256_loadu_si256(r0 as *const __m256i));
                            let r1 = b.at(2 * p + 1, j0 + 16 * g).ptr;
                            let hi =
                                _mm512_castsi256_si512(_mm256_loadu_si256(r1 as *const __m256i));
                            _mm512_permutex2var_epi16(lo, idx, hi)
                        } else {
                            _mm512_i32gather_epi32::<1>(gather.unwrap_unchecked(), r0 as *const i32)
                        };
                        _mm512_storeu_si512(out, v);
                    }
                }
                p += 1;
            }
        }
        for p in p..kp2 {
            let out = &mut strip[p * W * 2..(p + 1) * W * 2];
            let (k0, k1) = (2 * p, 2 * p + 1);
            for (n, pair) in out.chunks_exact_mut(2).enumerate() {
                let inside = n < w;
                // SAFETY: each read is guarded to (k < kb, j0 + n < nb), inside the block.
                unsafe {
                    pair[0] = if inside && k0 < kb {
                        b.get(k0, j0 + n)
                    } else {
                        0
                    };
                    pair[1] = if inside && k1 < kb {
                        b.get(k1, j0 + n)
                    } else {
                        0
                    };
                }
            }
        }
    }
}

/// Rows per A panel of [`pack_a_words`].
pub(crate) const A_PANEL: usize = 16;

/// Pack rows `0..mb`, sums `0..kb` of `a` as panels of [`A_PANEL`] rows, each
/// `[kpad / PER words][16 rows][PER elements]`, where a word is `PER` consecutive sums of
/// one row in 32 bits (bf16 pairs, `PER = 2`; int8 quads, `PER = 4`): the layout of the
/// `vdpbf16ps` / `vpdpbusd` kernels, whose broadcast operand is one row's word. Rows past
/// `mb` and sums past `kb` are zeros. With contiguous rows, a full panel's words are
/// moved 16 × 16 at a time by a transposition in registers (a 32-bit copy per word cost
/// ~9% of a 2048³ int8 product).
///
/// # Safety
/// The `mb × kb` block of `a` must be readable; AVX-512 F present.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn pack_a_words<E: Copy + Default, const PER: usize>(
    a: Src<E>,
    mb: usize,
    kb: usize,
    kpad: usize,
    dst: &mut [E],
) {
    const { assert!(size_of::<E>() * PER == 4) };
    let rows = mb.next_multiple_of(A_PANEL);
    assert!(dst.len() >= rows * kpad, "pack_a_words: buffer too small");
    let words_per_row = kpad / PER;
    let full = kb / PER;
    let words = dst.as_mut_ptr() as *mut u32;
    // Words of full panels moved by the transposition.
    let fast = if a.cs == 1 { full - full % 16 } else { 0 };
    for p0 in (0..rows).step_by(A_PANEL) {
        let panel = words.wrapping_add(p0 * words_per_row);
        let whole = p0 + A_PANEL <= mb && fast > 0;
        if whole {
            for q in (0..fast).step_by(16) {
                let mut v = [_mm512_setzero_ps(); 16];
                for (t, x) in v.iter_mut().enumerate() {
                    // SAFETY: row p0 + t < mb; its sums PER·q .. PER·(q + 16) <= kb are
                    // contiguous (64 bytes).
                    *x = unsafe { _mm512_loadu_ps(a.at(p0 + t, PER * q).ptr as *const f32) };
                }
                transpose16(&mut v);
                for (t, x) in v.iter().enumerate() {
                    // SAFETY: word q + t < words_per_row: 16 words at panel + (q + t)·16.
                    unsafe { _mm512_storeu_ps(panel.add((q + t) * A_PANEL) as *mut f32, *x) };
                }
            }
        }
        for r in 0..A_PANEL {
            let i = p0 + r;
            let mut q = if whole { fast } else { 0 };
            if i < mb && a.cs == 1 {
                // SAFETY: row i < mb; its sums PER·q .. PER·(q + 1) <= kb are contiguous.
                let row = unsafe { a.at(i, 0).ptr };
                while q < full {
                    // SAFETY: as above (read unaligned); word q·16 + r of the panel is
                    // inside `dst`.
                    unsafe {
                        let w = (row.add(PER * q) as *const u32).read_unaligned();
                        *panel.add(q * A_PANEL + r) = w;
                    }
                    q += 1;
                }
            }
            for q in q..words_per_row {
                let mut w = [E::default(); PER];
                if i < mb {
                    for (e, v) in w.iter_mut().enumerate() {
                        if PER * q + e < kb {
                            // SAFETY: guarded to i < mb, PER·q + e < kb: inside the block.
                            *v = unsafe { a.get(i, PER * q + e) };
                        }
                    }
                }
                // SAFETY: word q·16 + r of the panel is inside `dst`; `w` is 4 bytes.
                unsafe {
                    *panel.add(q * A_PANEL + r) = (w.as_ptr() as *const u32).read_unaligned()
                };
            }
        }
    }
}

/// Word indices interleaving two 16-word rows: `[r0[0], r1[0], r0[1], r1[1], …]`.
/// [`INTERLEAVE`] for the upper 16 elements of each source: `hi[2n] = 16 + n`,
/// `hi[2n + 1] = 48 + n`.
static INTERLEAVE_HI: [u16; 32] = {
    let mut v = [0u16; 32];
    let mut n = 0;
    while n < 16 {
        v[2 * n] = 16 + n as u16;
        v[2 * n + 1] = 48 + n as u16;
        n += 1;
    }
    v
};

pub(crate) static INTERLEAVE: [u16; 32] = {
    let mut v = [0u16; 32];
    let mut n = 0;
    while n < 16 {
        v[2 * n] = n as u16;
        v[2 * n + 1] = 32 + n as u16;
        n += 1;
    }
    v
};

/// The `vdpbf16ps` micro-kernel (construct only when [`avx512bf16_available`]).
pub(crate) struct DpBf16(());

impl DpBf16 {
    /// The kernel, if the CPU has AVX512_BF16.
    pub(crate) fn new() -> Option<DpBf16> {
        avx512bf16_available().then_some(DpBf16(()))
    }
}

impl Kernel for DpBf16 {
    type E = u16;
    type P = u16;
    type C = f32;
    const MR: usize = MR;
    const NR: usize = NR;
    const KU: usize = 2;
    // Per call, a 16 × 256-sum A panel and B panel (8 KiB each) stay in L1; the packed B
    // block (KS × NC, 512 KiB) and A's KC slice (MC × KC, 96 KiB) in a 1 MiB L2 (Zen 4).
    const KC: usize = 256;
    const KS: usize = 1024;
    const MC: usize = 192;
    const NC: usize = 256;

    unsafe fn pack_a(&self, a: Src, mb: usize, kb: usize, kpad: usize, dst: &mut [u16]) {
        // SAFETY: forwarded contract; DpBf16 exists only with AVX-512 F/BW.
        unsafe { pack_a_words::<u16, 2>(a, mb, kb, kpad, dst) }
    }

    unsafe fn pack_b(&self, b: Src, kb: usize, nb: usize, kpad: usize, dst: &mut [u16]) {
        // SAFETY: forwarded contract; DpBf16 exists only with AVX-512 F/BW.
        unsafe { pack_b_pairs::<NR>(b, kb, nb, kpad, NR, dst) }
    }

    unsafe fn micro(
        &self,
        (k0, kb, _): (usize, usize, usize),
        a: *const u16,
        b: *const u16,
        c: CTile,
    ) {
        // SAFETY: forwarded contract (pair k0/2 of each panel starts MR·k0 / NR·k0 elements
        // in and kb more sums follow inside it); DpBf16 exists only with AVX512_BF16.
        unsafe { dp_micro(kb / 2, a.add(k0 * MR) as *const u32, b.add(k0 * NR), c) }
    }
}

/// `C[16 × 16] (+)= A·B` over `kp2` sum pairs with `vdpbf16ps`: per pair, B's 16 columns
/// are one vector and each row's pair is broadcast from memory into its multiply-add
/// (`{1to16}`: one instruction per product step; a 12 × 32 tile whose broadcasts fed two
/// vectors each needed a separate `vpbroadcastd` per row).
///
/// # Safety
/// As [`Kernel::micro`]; the CPU has AVX512_BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn dp_micro(kp2: usize, a: *const u32, b: *const u16, c: CTile) {
    let mut acc = [_mm512_setzero_ps(); MR];
    // SAFETY: the caller guarantees 16 × 16 f32 tiles at c.inp (readable, unless null) and
    // c.out (writable) with their row strides, MR·kp2 pairs in A's panel and NR·kp2 in B's.
    unsafe {
        if !c.inp.is_null() {
            for (r, row) in acc.iter_mut().enumerate() {
                *row = _mm512_loadu_ps(c.inp.offset(r as isize * c.ld_in));
            }
        }
        for p in 0..kp2 {
            let bv: __m512bh =
                std::mem::transmute(_mm512_loadu_si512(b.add(p * 2 * NR) as *const __m512i));
            let ap = a.add(p * MR);
            for (r, row) in acc.iter_mut().enumerate() {
                let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*ap.add(r) as i32));
                *row = _mm512_dpbf16_ps(*row, bv, av);
            }
        }
        for (r, row) in acc.iter().enumerate() {
            _mm512_storeu_ps(c.out.offset(r as isize * c.ld_out), *row);
        }
    }
}
