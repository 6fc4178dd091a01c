//! rlx's own f32 GEMM for AVX-512 CPUs: packing, a 12 × 32 FMA micro-kernel and the
//! blocked driver, written for f32 alone (the half-precision paths keep `fma32.rs` and
//! the shared driver of `lowp_drive.rs`, whose conversions and buffer tiles this path
//! does not need).
//!
//! Micro-kernel: a 12 × 32 tile of C in 24 zmm accumulators; per sum, two vectors of B
//! and twelve elements of A, each broadcast from memory inside its two FMAs (inline
//! assembly, see [`sums`]), feed 24 FMAs. The C tile's lines are prefetched into L2
//! before the sums.
//!
//! Blocking (per thread): for each `NC`-column block of B and each `KC`-sum block, B's
//! `KC × NC` block is packed into 32-column strips; for each `MC`-row block of A, A's
//! `MC × KC` block is packed into 12-row panels; then for each B strip (32 KiB: it stays
//! in the 48 KiB L1) the A panels of the block stream past it from L2. Packing is
//! vectorized for the layouts the graphs produce: contiguous rows are copied with masked
//! loads, contiguous columns (a transposed operand) go through 16 × 16 register
//! transposes; other strides are read element by element. The thread-local buffers are
//! kept between calls, so a call allocates nothing once a thread has seen its sizes.
//!
//! Measured (2-core Xeon, family 6 model 207, interleaved calls in one process against
//! faer's path and MKL's `SGEMM` from torch's build, `examples/gemm_shapes.rs --mkl`; a
//! shared, noisy machine, so ratios, not rates): 0.86–1.04× MKL on one thread and
//! 0.88–1.05× on two over 256³–2048³ and W11's products; 0.9–1.1× faer's path when A's
//! rows are contiguous, 1.4–2× when A is read transposed (`Xᵀ·dY`).
//!
//! Summation order: each C element is summed in blocks of `KC` sums starting at sum 0,
//! each block one chain of fused multiply-adds in k order from zero, then written over C
//! (the first block of an overwriting product) or added to it. The sequence does not
//! depend on where the element's tile lies or which thread computes it, so results are
//! identical for every thread count. Zero padding of partial tiles adds `0 · 0` terms
//! only to lanes that are never stored.

use super::lowp_drive::{Dst, Src};
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Rows of C per micro-kernel call.
const MR: usize = 12;
/// Vectors of 16 columns per micro-kernel call.
const NV: usize = 2;
/// Columns of C per micro-kernel call.
const NR: usize = 16 * NV;
/// Sums per packed block (a B strip of `KC × NR` f32 is 32 KiB: inside the 48 KiB L1).
/// 128, 192 and 384 measured within noise of 256 on W11's shapes.
const KC: usize = 256;
/// Rows of A per packed block (`MC × KC` f32 = 192 KiB, in the 2 MiB L2); 96 and 384
/// measured the same.
const MC: usize = 192;
/// Columns of B per packed block (`KC × NC` f32 = 2 MiB at most); 512 and 1024 measured
/// the same as whole rows.
const NC: usize = 2048;
/// The mask of the 12 lanes an A panel row stores.
const MR_MASK: u16 = (1 << MR) - 1;

/// Whether this CPU can run the kernel (AVX-512 F; BW is asked for too because every
/// other AVX-512 path of this module family needs it and no CPU has one without the
/// other).
pub(crate) fn available() -> bool {
    super::bf16_avx512::avx512bw()
}

/// `C (+)= A·B` for an `m × n` output over `k` sums, on up to `threads` threads of the
/// current rayon pool: C's rows (or columns, when it is wider than tall) are split into
/// one block per thread at multiples of the tile, and each block runs the blocked
/// product on its own packing buffers.
///
/// # Safety
/// [`available`] must be true; `a` must be readable over `m × k`, `b` over `k × n`, `c`
/// writable over `m × n` with pairwise distinct elements that overlap neither A nor B;
/// `m, n, k > 0`.
pub(crate) unsafe fn sgemm(
    a: Src<f32>,
    b: Src<f32>,
    c: Dst<f32>,
    (m, n, k): (usize, usize, usize),
    accumulate: bool,
    threads: usize,
) {
    let rows = m >= n;
    let (len, grain) = if rows { (m, MR) } else { (n, NR) };
    let per = len.div_ceil(threads.max(1)).next_multiple_of(grain);
    let parts = len.div_ceil(per);
    let views = Views { a, b, c };
    let block = |part: usize| {
        let (a, b, c) = views.get();
        let lo = part * per;
        let hi = (lo + per).min(len);
        // SAFETY: rows (or columns) lo..hi of C, with A's rows (or B's columns), lie
        // inside the views (caller); the blocks are disjoint in C; the CPU has AVX-512 F.
        unsafe {
            if rows {
                let a = a.at(lo, 0);
                let c = Dst {
                    ptr: c.at(lo, 0),
                    ..c
                };
                drive(a, b, c, (hi - lo, n, k), accumulate)
            } else {
                let b = b.at(0, lo);
                let c = Dst {
                    ptr: c.at(0, lo),
                    ..c
                };
                drive(a, b, c, (m, hi - lo, k), accumulate)
            }
        }
    };
    if parts <= 1 {
        block(0);
    } else {
        // The calling thread computes block 0 itself and wakes workers only for the rest
        // (a parallel iterator started outside the pool would wake two workers and put
        // the caller to sleep until they finish).
        rayon::in_place_scope(|s| {
            for part in 1..parts {
                s.spawn(move |_| block(part));
            }
            block(0);
        });
    }
}

/// One product's views, shared by the blocks of the parallel loop.
#[derive(Clone, Copy)]
struct Views {
    a: Src<f32>,
    b: Src<f32>,
    c: Dst<f32>,
}

impl Views {
    /// The three views (a method call, so closures capture the `Sync` struct whole, not
    /// its raw-pointer fields).
    fn get(&self) -> (Src<f32>, Src<f32>, Dst<f32>) {
        (self.a, self.b, self.c)
    }
}

// SAFETY: the views cross into the blocks of one blocking parallel loop: A and B are only
// read, each block writes a disjoint range of C's rows or columns, and the views outlive
// the loop (`sgemm`'s contract).
unsafe impl Send for Views {}
// SAFETY: as for Send.
unsafe impl Sync for Views {}

thread_local! {
    /// Packed A and packed B of this thread, kept between calls (batched products run
    /// many small GEMMs per thread). They never outgrow `MC × KC` and `KC × NC` f32.
    static BUFS: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// A 64-byte aligned run of `n` f32 inside `v` (grown to fit, never shrunk).
fn aligned(v: &mut Vec<f32>, n: usize) -> *mut f32 {
    if v.len() < n + 16 {
        *v = vec![0.0; n + 16];
    }
    let p = v.as_mut_ptr();
    let skip = ((p as usize).next_multiple_of(64) - p as usize) / size_of::<f32>();
    // SAFETY: `skip < 16` and `v` holds `n + 16` f32, so the run fits.
    unsafe { p.add(skip) }
}

/// The blocked product on the calling thread.
///
/// # Safety
/// As [`sgemm`] for this block.
#[target_feature(enable = "avx512f")]
unsafe fn drive(
    a: Src<f32>,
    b: Src<f32>,
    c: Dst<f32>,
    (m, n, k): (usize, usize, usize),
    accumulate: bool,
) {
    let run = |(va, vb): &mut (Vec<f32>, Vec<f32>)| {
        let ap = aligned(va, MC.min(m).next_multiple_of(MR) * KC.min(k));
        let bp = aligned(vb, NC.min(n).next_multiple_of(NR) * KC.min(k));
        // SAFETY: the buffers hold the largest packed blocks; the caller's contract
        // covers the views.
        unsafe { blocks(a, b, c, (m, n, k), accumulate, ap, bp) };
    };
    let done = BUFS.try_with(|bufs| run(&mut bufs.borrow_mut())).is_ok();
    if !done {
        // Thread-local storage already torn down (a call from a destructor).
        run(&mut (Vec::new(), Vec::new()));
    }
}

/// The loops of [`drive`] over packed blocks in `ap` / `bp`.
///
/// # Safety
/// As [`sgemm`] for this block; `ap` must hold `MC·KC` and `bp` `NC·KC` f32 (or the
/// product's smaller block sizes), 64-byte aligned.
#[target_feature(enable = "avx512f")]
unsafe fn blocks(
    a: Src<f32>,
    b: Src<f32>,
    c: Dst<f32>,
    (m, n, k): (usize, usize, usize),
    accumulate: bool,
    ap: *mut f32,
    bp: *mut f32,
) {
    // A full tile of a C with contiguous, ascending rows is read and written in place;
    // partial tiles and other layouts go through a tile on the stack.
    let direct_layout = c.cs == 1 && c.rs > 0;
    let mut tile = Tile([0.0; MR * NR]);
    let tp = tile.0.as_mut_ptr();
    for jc in (0..n).step_by(NC) {
        let nb = NC.min(n - jc);
        for pc in (0..k).step_by(KC) {
            let kb = KC.min(k - pc);
            let add = accumulate || pc > 0;
            // SAFETY: (pc, jc) and the kb × nb block are inside B; bp holds its strips.
            unsafe { pack_b(b.at(pc, jc), kb, nb, bp) };
            for ic in (0..m).step_by(MC) {
                let mb = MC.min(m - ic);
                // SAFETY: (ic, pc) and the mb × kb block are inside A; ap holds its panels.
                unsafe { pack_a(a.at(ic, pc), mb, kb, ap) };
                for jr in (0..nb).step_by(NR) {
                    let nr = NR.min(nb - jr);
                    // SAFETY: strip jr / NR of the packed block (kb·NR f32 each).
                    let bpanel = unsafe { bp.add(jr * kb) };
                    for ir in (0..mb).step_by(MR) {
                        let mr = MR.min(mb - ir);
                        // SAFETY: panel ir / MR of the packed block; (ic + ir, jc + jr) is
                        // an element of C.
                        let (apanel, cp) = unsafe { (ap.add(ir * kb), c.at(ic + ir, jc + jr)) };
                        if direct_layout && mr == MR && nr == NR {
                            // SAFETY: a full tile of C with unit column stride and row
                            // stride c.rs > 0; the panels hold kb sums.
                            unsafe { micro(kb, apanel, bpanel, cp, c.rs, add) };
                            continue;
                        }
                        // SAFETY: the stack tile is MR × NR f32 with row stride NR, 64-byte
                        // aligned; then the mr × nr corner is merged into C, whose elements
                        // (ic + ir + i, jc + jr + j) exist for i < mr, j < nr.
                        unsafe {
                            micro(kb, apanel, bpanel, tp, NR as isize, false);
                            for i in 0..mr {
                                let row = cp.offset(i as isize * c.rs);
                                for j in 0..nr {
                                    let d = row.offset(j as isize * c.cs);
                                    let v = *tp.add(i * NR + j);
                                    *d = if add { *d + v } else { v };
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A C tile on the stack, aligned for whole-vector stores.
#[repr(align(64))]
struct Tile([f32; MR * NR]);

/// The mask of the low `n <= 16` lanes.
#[inline(always)]
fn mask16(n: usize) -> u16 {
    if n >= 16 { u16::MAX } else { (1u16 << n) - 1 }
}

/// Transpose the 16 × 16 f32 matrix whose rows are `r` in place (three rounds of
/// shuffles: pairs within 128-bit lanes, quadruples, then lanes).
#[inline(always)]
pub(crate) fn transpose16(r: &mut [__m512; 16]) {
    // SAFETY: register-only shuffles; callers run with AVX-512 F enabled.
    unsafe {
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        let mut u = [_mm512_setzero_ps(); 16];
        for g in 0..4 {
            u[4 * g] = _mm512_shuffle_ps::<0x44>(t[4 * g], t[4 * g + 2]);
            u[4 * g + 1] = _mm512_shuffle_ps::<0xEE>(t[4 * g], t[4 * g + 2]);
            u[4 * g + 2] = _mm512_shuffle_ps::<0x44>(t[4 * g + 1], t[4 * g + 3]);
            u[4 * g + 3] = _mm512_shuffle_ps::<0xEE>(t[4 * g + 1], t[4 * g + 3]);
        }
        // u[4g + c], 128-bit lane L, holds rows 4g..4g+4 of column 4L + c.
        for c in 0..4 {
            let x0 = _mm512_shuffle_f32x4::<0x88>(u[c], u[4 + c]);
            let x1 = _mm512_shuffle_f32x4::<0x88>(u[8 + c], u[12 + c]);
            let y0 = _mm512_shuffle_f32x4::<0xDD>(u[c], u[4 + c]);
            let y1 = _mm512_shuffle_f32x4::<0xDD>(u[8 + c], u[12 + c]);
            r[c] = _mm512_shuffle_f32x4::<0x88>(x0, x1);
            r[8 + c] = _mm512_shuffle_f32x4::<0xDD>(x0, x1);
            r[4 + c] = _mm512_shuffle_f32x4::<0x88>(y0, y1);
            r[12 + c] = _mm512_shuffle_f32x4::<0xDD>(y0, y1);
        }
    }
}

/// Pack sums `0..kb`, columns `0..nb` of `b` into `NR`-column strips, strip `s` at
/// `dst + s·kb·NR` laid out `[kb sums][NR columns]` (zeros past `nb`).
///
/// # Safety
/// The `kb × nb` block of `b` must be readable, `dst` writable for
/// `nb.next_multiple_of(NR) · kb` f32 and 64-byte aligned; AVX-512 F present.
#[target_feature(enable = "avx512f")]
unsafe fn pack_b(b: Src<f32>, kb: usize, nb: usize, dst: *mut f32) {
    for s in 0..nb.div_ceil(NR) {
        let j0 = s * NR;
        let w = NR.min(nb - j0);
        // SAFETY: strip s of the destination (caller).
        let out = unsafe { dst.add(s * NR * kb) };
        if b.cs == 1 {
            // Rows contiguous: each sum's columns are one run of memory.
            for p in 0..kb {
                // SAFETY: columns j0 .. j0 + w of row p < kb are contiguous elements of
                // the block (masked lanes are not read); the stores stay in the strip.
                unsafe {
                    let row = b.at(p, j0).ptr;
                    for g in 0..NV {
                        let n = w.saturating_sub(16 * g).min(16);
                        let v = _mm512_maskz_loadu_ps(mask16(n), row.add(16 * g));
                        _mm512_store_ps(out.add(p * NR + 16 * g), v);
                    }
                }
            }
        } else if b.rs == 1 {
            // Columns contiguous (a transposed weight): 16 columns × 16 sums are read as
            // 16 vectors and transposed in registers.
            for p0 in (0..kb).step_by(16) {
                let kn = 16.min(kb - p0);
                for g in 0..NV {
                    let n = w.saturating_sub(16 * g).min(16);
                    let mut r = [_mm512_setzero_ps(); 16];
                    for (t, x) in r.iter_mut().enumerate().take(n) {
                        // SAFETY: sums p0 .. p0 + kn of column j0 + 16g + t < nb are
                        // contiguous elements of the block; masked lanes are not read.
                        *x = unsafe {
                            _mm512_maskz_loadu_ps(mask16(kn), b.at(p0, j0 + 16 * g + t).ptr)
                        };
                    }
                    transpose16(&mut r);
                    for (q, x) in r.iter().enumerate().take(kn) {
                        // SAFETY: sum p0 + q < kb of the strip, 64-byte aligned.
                        unsafe { _mm512_store_ps(out.add((p0 + q) * NR + 16 * g), *x) };
                    }
                }
            }
        } else {
            for p in 0..kb {
                for j in 0..NR {
                    // SAFETY: (p, j0 + j) is inside the block when j < w; the store is
                    // inside the strip.
                    unsafe { *out.add(p * NR + j) = if j < w { b.get(p, j0 + j) } else { 0.0 } };
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
/// `mb.next_multiple_of(MR) · kb` f32; AVX-512 F present.
#[target_feature(enable = "avx512f")]
unsafe fn pack_a(a: Src<f32>, mb: usize, kb: usize, dst: *mut f32) {
    for panel in 0..mb.div_ceil(MR) {
        let i0 = panel * MR;
        let h = MR.min(mb - i0);
        // SAFETY: panel `panel` of the destination (caller).
        let out = unsafe { dst.add(panel * MR * kb) };
        if a.rs == 1 {
            // Columns contiguous (a transposed operand): each sum's rows are one run.
            for p in 0..kb {
                // SAFETY: rows i0 .. i0 + h of sum p < kb are contiguous elements of the
                // block (masked lanes not read); the 12 stored lanes are the panel's row.
                unsafe {
                    let v = _mm512_maskz_loadu_ps(mask16(h), a.at(i0, p).ptr);
                    _mm512_mask_storeu_ps(out.add(p * MR), MR_MASK, v);
                }
            }
        } else if a.cs == 1 {
            // Rows contiguous: 12 rows × 16 sums are read as vectors and transposed.
            for p0 in (0..kb).step_by(16) {
                let kn = 16.min(kb - p0);
                let mut r = [_mm512_setzero_ps(); 16];
                for (t, x) in r.iter_mut().enumerate().take(h) {
                    // SAFETY: sums p0 .. p0 + kn of row i0 + t < mb are contiguous
                    // elements of the block; masked lanes are not read.
                    *x = unsafe { _mm512_maskz_loadu_ps(mask16(kn), a.at(i0 + t, p0).ptr) };
                }
                transpose16(&mut r);
                for (q, x) in r.iter().enumerate().take(kn) {
                    // SAFETY: the 12 stored lanes are sum p0 + q < kb of the panel.
                    unsafe { _mm512_mask_storeu_ps(out.add((p0 + q) * MR), MR_MASK, *x) };
                }
            }
        } else {
            for p in 0..kb {
                for i in 0..MR {
                    // SAFETY: (i0 + i, p) is inside the block when i < h; the store is
                    // inside the panel.
                    unsafe { *out.add(p * MR + i) = if i < h { a.get(i0 + i, p) } else { 0.0 } };
                }
            }
        }
    }
}

/// `C[MR × NR] = A panel · B panel` over `kc` sums, added to C when `add` (C is not read
/// otherwise, so a NaN in an overwritten C does not leak). C's rows are `ldc` elements
/// apart, its columns contiguous.
///
/// # Safety
/// `a` holds `kc · MR` and `b` (64-byte aligned) `kc · NR` packed f32; `c` addresses a
/// writable (and, with `add`, readable) `MR × NR` tile; AVX-512 F present.
#[target_feature(enable = "avx512f")]
unsafe fn micro(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: isize, add: bool) {
    // Ask for the C tile's lines before the sums, into L2 only: rows of 32 f32 span up to
    // three lines. Measured on two threads at W11's shapes: 8–10 % faster than the same
    // prefetches into L1 spread over the last sums (36 lines 3–4 KiB apart compete for a
    // few L1 sets and fill buffers with B's strip), and within 3 % of a run that does not
    // write C at all.
    for r in 0..MR {
        // SAFETY: row r < MR of the tile (caller); prefetches never fault.
        unsafe {
            let cr = c.offset(r as isize * ldc);
            for off in [0, 16, NR - 1] {
                _mm_prefetch::<_MM_HINT_T1>(cr.add(off) as *const i8);
            }
        }
    }
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    // SAFETY: the panels hold kc >= 1 sums (caller: k > 0); AVX-512 F present.
    unsafe { sums(kc, a, b, &mut acc) };
    for (r, row) in acc.iter().enumerate() {
        for (v, x) in row.iter().enumerate() {
            // SAFETY: element (r, 16v) of the tile starts 16 writable (and readable with
            // `add`) f32 (caller).
            unsafe {
                let cp = c.offset(r as isize * ldc).add(16 * v);
                let y = if add {
                    _mm512_add_ps(_mm512_loadu_ps(cp), *x)
                } else {
                    *x
                };
                _mm512_storeu_ps(cp, y);
            }
        }
    }
}

/// `acc[r][v] += A[p][r] · B[p][16v..16v + 16]` for the `kc >= 1` sums of a 12-row A
/// panel and a 32-column B strip. Each sum is two vector loads of B and 24 FMAs whose A
/// operand is broadcast from memory (`{1to16}`): 26 instructions per sum where separate
/// broadcasts take 38 (the compiler does not fold a broadcast that feeds two FMAs), which
/// measured 5 % faster at W11's shapes, within 0–3 % of MKL on one thread.
///
/// # Safety
/// `a` must hold `kc · 12` f32 and `b` (64-byte aligned) `kc · 32`; `kc >= 1`; AVX-512 F
/// present.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn sums(kc: usize, a: *const f32, b: *const f32, acc: &mut [[__m512; NV]; MR]) {
    const { assert!(MR == 12 && NV == 2) };
    debug_assert!(kc >= 1);
    // SAFETY: the loop reads kc·48 bytes of A's panel and kc·128 (aligned) of B's strip,
    // inside the panels (caller); it writes only the listed registers and no memory.
    unsafe {
        std::arch::asm!(
            "2:",
            "vmovaps {b0}, zmmword ptr [{bp}]",
            "vmovaps {b1}, zmmword ptr [{bp} + 64]",
            "vfmadd231ps {c00}, {b0}, dword ptr [{ap} + 0]{{1to16}}",
            "vfmadd231ps {c01}, {b1}, dword ptr [{ap} + 0]{{1to16}}",
            "vfmadd231ps {c10}, {b0}, dword ptr [{ap} + 4]{{1to16}}",
            "vfmadd231ps {c11}, {b1}, dword ptr [{ap} + 4]{{1to16}}",
            "vfmadd231ps {c20}, {b0}, dword ptr [{ap} + 8]{{1to16}}",
            "vfmadd231ps {c21}, {b1}, dword ptr [{ap} + 8]{{1to16}}",
            "vfmadd231ps {c30}, {b0}, dword ptr [{ap} + 12]{{1to16}}",
            "vfmadd231ps {c31}, {b1}, dword ptr [{ap} + 12]{{1to16}}",
            "vfmadd231ps {c40}, {b0}, dword ptr [{ap} + 16]{{1to16}}",
            "vfmadd231ps {c41}, {b1}, dword ptr [{ap} + 16]{{1to16}}",
            "vfmadd231ps {c50}, {b0}, dword ptr [{ap} + 20]{{1to16}}",
            "vfmadd231ps {c51}, {b1}, dword ptr [{ap} + 20]{{1to16}}",
            "vfmadd231ps {c60}, {b0}, dword ptr [{ap} + 24]{{1to16}}",
            "vfmadd231ps {c61}, {b1}, dword ptr [{ap} + 24]{{1to16}}",
            "vfmadd231ps {c70}, {b0}, dword ptr [{ap} + 28]{{1to16}}",
            "vfmadd231ps {c71}, {b1}, dword ptr [{ap} + 28]{{1to16}}",
            "vfmadd231ps {c80}, {b0}, dword ptr [{ap} + 32]{{1to16}}",
            "vfmadd231ps {c81}, {b1}, dword ptr [{ap} + 32]{{1to16}}",
            "vfmadd231ps {c90}, {b0}, dword ptr [{ap} + 36]{{1to16}}",
            "vfmadd231ps {c91}, {b1}, dword ptr [{ap} + 36]{{1to16}}",
            "vfmadd231ps {c100}, {b0}, dword ptr [{ap} + 40]{{1to16}}",
            "vfmadd231ps {c101}, {b1}, dword ptr [{ap} + 40]{{1to16}}",
            "vfmadd231ps {c110}, {b0}, dword ptr [{ap} + 44]{{1to16}}",
            "vfmadd231ps {c111}, {b1}, dword ptr [{ap} + 44]{{1to16}}",
            "add {ap}, 48",
            "add {bp}, 128",
            "dec {k}",
            "jnz 2b",
            ap = inout(reg) a => _,
            bp = inout(reg) b => _,
            k = inout(reg) kc => _,
            b0 = out(zmm_reg) _,
            b1 = out(zmm_reg) _,
            c00 = inout(zmm_reg) acc[0][0],
            c01 = inout(zmm_reg) acc[0][1],
            c10 = inout(zmm_reg) acc[1][0],
            c11 = inout(zmm_reg) acc[1][1],
            c20 = inout(zmm_reg) acc[2][0],
            c21 = inout(zmm_reg) acc[2][1],
            c30 = inout(zmm_reg) acc[3][0],
            c31 = inout(zmm_reg) acc[3][1],
            c40 = inout(zmm_reg) acc[4][0],
            c41 = inout(zmm_reg) acc[4][1],
            c50 = inout(zmm_reg) acc[5][0],
            c51 = inout(zmm_reg) acc[5][1],
            c60 = inout(zmm_reg) acc[6][0],
            c61 = inout(zmm_reg) acc[6][1],
            c70 = inout(zmm_reg) acc[7][0],
            c71 = inout(zmm_reg) acc[7][1],
            c80 = inout(zmm_reg) acc[8][0],
            c81 = inout(zmm_reg) acc[8][1],
            c90 = inout(zmm_reg) acc[9][0],
            c91 = inout(zmm_reg) acc[9][1],
            c100 = inout(zmm_reg) acc[10][0],
            c101 = inout(zmm_reg) acc[10][1],
            c110 = inout(zmm_reg) acc[11][0],
            c111 = inout(zmm_reg) acc[11][1],
            options(nostack, readonly),
        );
    }
}
