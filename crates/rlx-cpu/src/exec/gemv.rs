//! Matrix–vector products: contractions with one output row (`M = 1`), the shape of every
//! linear layer when a language model decodes one token — or a few rows ([`takes`]: a
//! few tokens, a small batch).
//!
//! The blocked GEMM packs its B operand into panels before multiplying; with one row of A
//! each packed element is used once, so packing doubles the memory traffic of a kernel
//! that is bound by reading B (a 100M-parameter model reads 400 MB of f32 weights per
//! token). These kernels read B once, in place, in its storage order:
//!
//! - B contiguous along K (a `[N, K]` weight used as `x · Wᵀ`, PyTorch's `nn.Linear`):
//!   one dot product per output, eight outputs per pass over a single row of A, or blocks
//!   of four outputs by four rows;
//! - B contiguous along N (a `[K, N]` weight, GPT-2's `Conv1D`): the rows of B scaled by
//!   A's elements and summed, four rows of B per pass, into accumulators that stay in
//!   cache (C's row, or a buffer for several rows), over tasks of up to 2048 columns so that
//!   each row of B is read as one long run.
//!
//! Outputs are split across threads in blocks. f32 operands accumulate in f32; bf16
//! operands are widened to f32 as they are read and accumulate in f32, like the
//! half-precision GEMM (the caller rounds the product once to bf16). Only the order of the
//! sum differs from the GEMM paths.

use super::par::{SendPtr, par_for};
use crate::gemm::MatRef;
use crate::gemm::lowp::bf16;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// An element of B widened to f32 as it is read.
pub(crate) trait Widen: Copy + Send + Sync {
    fn widen(self) -> f32;
    /// Sixteen elements from `p` widened into one zmm.
    ///
    /// # Safety
    /// `p` must be valid for 16 reads; the CPU must have AVX-512 F (only called from
    /// functions compiled with it, into which this inlines).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> __m512;
}

impl Widen for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> __m512 {
        // SAFETY: the caller's contract.
        unsafe { _mm512_loadu_ps(p) }
    }
}

impl Widen for bf16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const bf16) -> __m512 {
        // SAFETY: the caller's contract; bf16 is the high half of an f32.
        unsafe {
            let h = _mm256_loadu_si256(p as *const __m256i);
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        }
    }
}

/// SIMD width the inner loops are written for (one zmm of f32).
const L: usize = 16;
/// Rows of B (outputs) per pass over A in the AVX-512 dot kernel.
const ROWS: usize = 8;
/// Elements of a row of B between the lane block being summed and the one prefetched.
const PREFETCH_AHEAD: usize = 512;
/// Outputs per task: enough work per task (≥ 64 KiB of B at K = 768 in f32) to hide the
/// pool's dispatch, small enough to balance two to a few dozen threads.
const BLOCK: usize = 64;

/// Columns per task at most in the axpy form (B contiguous along N): one row's
/// accumulators (8 KiB) stay in L1; up to [`FEW_ROWS_AXPY`] rows' (96 KiB) stay in L2,
/// each touched once per pass of four rows of B.
const AXPY_COLS: usize = 2048;

/// Rows of A up to which a product with B contiguous along N runs here ([`takes`])
/// rather than in the packing GEMM: each row of B is read once, in place, for all of
/// them. m × 4096 × 4096 (2 threads, Emerald Rapids, medians of 41 calls), this path
/// against the GEMM (which packs all of B): 2 rows 1.38–1.64 ms against 4.9, 4 rows 2.09
/// against 6.2, 8 rows 2.7–3.1 against 4.2–4.5, 12 rows 3.7 against 4.8–5.1, 16 rows
/// 5.1–6.0 against 4.8–4.9 (torch/MKL: 2.44, 2.70, 2.98–3.58 ms at 2, 4, 8 rows).
pub(crate) const FEW_ROWS_AXPY: usize = 12;

/// Rows of A up to which a product with B contiguous along K (a weight stored `[N, K]`,
/// `nn.Linear`'s layout) runs here: same shapes, 2 rows 1.40–1.42 ms against 4.8–5.1 in
/// the GEMM, 4 rows 1.55–1.59 against 4.8, 8 rows 2.77 against 4.8 (torch: 3.64), 12
/// rows 3.9 against 6.3–6.6, 16 rows 5.1–5.6 against 6.0–6.6, 24 rows 7.7–8.3 against
/// 6.7–7.3.
pub(crate) const FEW_ROWS_DOT: usize = 16;

/// Whether [`gemv`] takes an `m`-row product over a B of strides `(rs, cs)` (along K,
/// along N): up to [`FEW_ROWS_DOT`] rows with B contiguous along K, up to
/// [`FEW_ROWS_AXPY`] with B contiguous along N.
pub(crate) fn takes(m: usize, (rs, cs): (isize, isize)) -> bool {
    let most = if rs == 1 {
        FEW_ROWS_DOT
    } else if cs == 1 {
        FEW_ROWS_AXPY
    } else {
        0
    };
    (1..=most).contains(&m)
}

/// `c[i, j] = Σₖ a[i, k] · b[k, j]` for the `M × K` view `a` and the `K × N` view `b`
/// ([`takes`] must hold), accumulated in f32; `c` holds `M × N` values, row-major. One of
/// `b`'s strides must be 1.
pub(crate) fn gemv<T: Widen>(a: MatRef<'_, T>, b: MatRef<'_, T>, c: &mut [f32]) {
    debug_assert!(takes(a.rows, (b.row_stride, b.col_stride)));
    debug_assert_eq!(a.cols, b.rows);
    let (m, k, n) = (a.rows, b.rows, b.cols);
    assert_eq!(
        c.len(),
        m * n,
        "gemv: C holds {} values for {m} × {n}",
        c.len()
    );
    // A is small (M·K values): widen it once into dense f32 rows.
    let av: Vec<f32> = (0..m)
        .flat_map(|i| {
            (0..k).map(move |p| {
                let at = a.offset as isize + i as isize * a.row_stride + p as isize * a.col_stride;
                a.data[at as usize].widen()
            })
        })
        .collect();
    if k == 0 {
        c.fill(0.0);
        return;
    }
    let cp = SendPtr(c.as_mut_ptr());
    // B along N is read a row at a time, so a task's columns are one contiguous run per
    // row of B: wide runs keep the hardware prefetchers streaming (tasks of 64 columns
    // read 256 bytes from rows 16 KiB apart at N = 4096, and 1 × 4096 × 4096 took 1.8×
    // MKL's time).
    let width = if b.row_stride == 1 {
        BLOCK
    } else {
        n.div_ceil(rayon::current_num_threads().max(1))
            .next_multiple_of(BLOCK)
            .min(AXPY_COLS)
    };
    let tasks = n.div_ceil(width);
    let _ = par_for(tasks, |t| {
        let (j0, j1) = (t * width, ((t + 1) * width).min(n));
        let rows = Rows {
            c: cp.get(),
            ldc: n,
            j0,
            w: j1 - j0,
        };
        if b.row_stride == 1 && m == 1 {
            // SAFETY: task `t` writes only `c[j0..j1]` (one row), disjoint from every
            // other task's.
            let out = unsafe { std::slice::from_raw_parts_mut(cp.get().add(j0), j1 - j0) };
            dot_rows(&av, &b, j0, out);
        } else if b.row_stride == 1 {
            // SAFETY: task `t` writes only columns j0..j1 of C's m rows, disjoint from
            // every other task's; C holds m × n values.
            unsafe { dot_rows_few(&av, m, &b, rows) };
        } else {
            // SAFETY: task `t` writes only columns j0..j1 of C's m rows, disjoint from
            // every other task's; C holds m × n values.
            unsafe { axpy_rows(&av, m, &b, rows) };
        }
        Ok(())
    });
}

/// Columns `j0 .. j0 + w` of C's rows, `ldc` apart from `c` (C's element (0, 0)).
#[derive(Clone, Copy)]
struct Rows {
    c: *mut f32,
    ldc: usize,
    j0: usize,
    w: usize,
}

/// The contiguous run of `len` elements of `b` starting at element `(row, col)`.
fn run_at<'a, T>(b: &MatRef<'a, T>, row: usize, col: usize, len: usize) -> &'a [T] {
    let start = b.offset as isize + row as isize * b.row_stride + col as isize * b.col_stride;
    let start = start as usize;
    &b.data[start..start + len]
}

/// B contiguous along K: `out[i] = a · b[:, j0 + i]`.
fn dot_rows<T: Widen>(a: &[f32], b: &MatRef<'_, T>, j0: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512 F (checked above).
        return unsafe { dot_rows_avx512(a, b, j0, out) };
    }
    dot_rows_any(a, b, j0, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn dot_rows_avx512<T: Widen>(a: &[f32], b: &MatRef<'_, T>, j0: usize, out: &mut [f32]) {
    let k = a.len();
    let full = k / L * L;
    let ap = a.as_ptr();
    let mut i = 0;
    while i < out.len() {
        // ROWS outputs per pass over A (the last pass repeats its last row).
        let r: [&[T]; ROWS] =
            std::array::from_fn(|d| run_at(b, 0, j0 + (i + d).min(out.len() - 1), k));
        let rp = r.map(<[T]>::as_ptr);
        // SAFETY: every load reads lanes p..p+16 ≤ full ≤ k of A or of a k-long row.
        let sums = unsafe {
            let mut acc = [_mm512_setzero_ps(); ROWS];
            let mut p = 0;
            while p < full {
                let av = _mm512_loadu_ps(ap.add(p));
                for (acc, rp) in acc.iter_mut().zip(&rp) {
                    *acc = _mm512_fmadd_ps(av, T::load16(rp.add(p)), *acc);
                }
                // The pass's own rows 2 KiB ahead (the weights stream from L3 or DRAM
                // during decoding). Asking for the next pass's rows at the same offset
                // instead fetched 8 rows × K ahead — 128 KiB at K = 4096, more than L1
                // holds: 1 × 4096 × 4096 (x·wᵀ, 2 threads, Emerald Rapids) ran 1.45–1.59
                // ms that way, 1.24–1.27 ms this way, 1.20–1.40 with no prefetch. Only
                // addresses are formed, and a prefetch never faults.
                for r in rp {
                    _mm_prefetch::<_MM_HINT_T0>(r.wrapping_add(p + PREFETCH_AHEAD) as *const i8);
                }
                p += L;
            }
            let mut sums = [0f32; ROWS];
            for (s, v) in sums.iter_mut().zip(acc) {
                *s = _mm512_reduce_add_ps(v);
            }
            sums
        };
        for d in 0..ROWS.min(out.len() - i) {
            let tail: f32 = (full..k).map(|q| a[q] * r[d][q].widen()).sum();
            out[i + d] = sums[d] + tail;
        }
        i += ROWS;
    }
}

/// B contiguous along K, several rows of A: `C[i, j0 + o] = a[i] · b[:, j0 + o]` for the
/// `m` dense rows of `a`. Each output is computed as [`dot_rows`] computes a one-row
/// product's (16 lane chains of fused multiply-adds in k order, reduced, plus the tail),
/// so a row's results do not depend on the rows beside it.
///
/// # Safety
/// As [`axpy_rows`].
unsafe fn dot_rows_few<T: Widen>(a: &[f32], m: usize, b: &MatRef<'_, T>, rows: Rows) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512 F (checked above); the caller's contract.
        return unsafe { dot_rows_few_avx512(a, m, b, rows) };
    }
    let Rows { c, ldc, j0, w } = rows;
    let k = a.len() / m;
    for i in 0..m {
        // SAFETY: row i's columns j0..j0 + w are the caller's alone.
        let out = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc + j0), w) };
        dot_rows_any(&a[i * k..][..k], b, j0, out);
    }
}

/// Rows of A and outputs per block of [`dot_rows_few_avx512`] (16 accumulators).
const FEW_DOT: usize = 4;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn dot_rows_few_avx512<T: Widen>(a: &[f32], m: usize, b: &MatRef<'_, T>, rows: Rows) {
    let Rows { c, ldc, j0, w } = rows;
    let k = a.len() / m;
    let full = k / L * L;
    let mut o = 0;
    while o < w {
        // FEW_DOT outputs (rows of the stored weight), the last block repeating its last.
        let wr: [&[T]; FEW_DOT] = std::array::from_fn(|d| run_at(b, 0, j0 + (o + d).min(w - 1), k));
        let wp = wr.map(<[T]>::as_ptr);
        // Row groups inner: the block's rows of B are read from memory once, then from L2.
        for i0 in (0..m).step_by(FEW_DOT) {
            let ar: [*const f32; FEW_DOT] =
                std::array::from_fn(|r| a[(i0 + r).min(m - 1) * k..].as_ptr());
            // SAFETY: every load reads lanes p..p + 16 <= full <= k of a k-long row of A
            // or of B; prefetches form addresses only.
            let sums = unsafe {
                let mut acc = [[_mm512_setzero_ps(); FEW_DOT]; FEW_DOT];
                let mut p = 0;
                while p < full {
                    let wv: [__m512; FEW_DOT] = std::array::from_fn(|d| T::load16(wp[d].add(p)));
                    if i0 == 0 {
                        for r in wp {
                            _mm_prefetch::<_MM_HINT_T0>(
                                r.wrapping_add(p + PREFETCH_AHEAD) as *const i8
                            );
                        }
                    }
                    for (accr, &arow) in acc.iter_mut().zip(&ar) {
                        let av = _mm512_loadu_ps(arow.add(p));
                        for (acc, &wv) in accr.iter_mut().zip(&wv) {
                            *acc = _mm512_fmadd_ps(av, wv, *acc);
                        }
                    }
                    p += L;
                }
                acc.map(|accr| accr.map(|v| _mm512_reduce_add_ps(v)))
            };
            for (r, sums) in sums.iter().enumerate().take(m - i0) {
                let arow = &a[(i0 + r) * k..][..k];
                for (d, &sum) in sums.iter().enumerate().take(w - o) {
                    let tail: f32 = (full..k).map(|q| arow[q] * wr[d][q].widen()).sum();
                    // SAFETY: row i0 + r < m, column j0 + o + d < j0 + w: the caller's.
                    unsafe { *c.add((i0 + r) * ldc + j0 + o + d) = sum + tail };
                }
            }
        }
        o += FEW_DOT;
    }
}

#[inline(always)]
fn dot_rows_any<T: Widen>(a: &[f32], b: &MatRef<'_, T>, j0: usize, out: &mut [f32]) {
    let k = a.len();
    let mut i = 0;
    while i + 4 <= out.len() {
        let r = [0, 1, 2, 3].map(|d| run_at(b, 0, j0 + i + d, k));
        out[i..i + 4].copy_from_slice(&dot4(a, r));
        i += 4;
    }
    for (o, i) in out[i..].iter_mut().zip(i..) {
        let r = run_at(b, 0, j0 + i, k);
        *o = dot4(a, [r, r, r, r])[0];
    }
}

/// Four dot products sharing the loads of `a`; 16 lanes per row in independent
/// accumulators (vectorized by the compiler), summed at the end.
#[inline(always)]
fn dot4<T: Widen>(a: &[f32], rows: [&[T]; 4]) -> [f32; 4] {
    let k = a.len();
    let mut acc = [[0f32; L]; 4];
    let full = k / L * L;
    let mut p = 0;
    while p < full {
        let av: &[f32; L] = a[p..p + L].try_into().expect("L lanes");
        for (acc, row) in acc.iter_mut().zip(&rows) {
            let rv: &[T; L] = row[p..p + L].try_into().expect("L lanes");
            for l in 0..L {
                acc[l] += av[l] * rv[l].widen();
            }
        }
        p += L;
    }
    let mut res = [0f32; 4];
    for ((r, acc), row) in res.iter_mut().zip(&acc).zip(&rows) {
        let mut s = acc.iter().sum::<f32>();
        for q in full..k {
            s += a[q] * row[q].widen();
        }
        *r = s;
    }
    res
}

/// B contiguous along N: `C[i, j0 ..] = Σₖ a[i, k] · b[k, j0 ..]` for the `m` dense rows
/// of `a`.
///
/// # Safety
/// `rows` names `m` rows of `w` writable f32 that no other thread touches; `b` has
/// columns `j0 .. j0 + w`.
unsafe fn axpy_rows<T: Widen>(a: &[f32], m: usize, b: &MatRef<'_, T>, rows: Rows) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512 F (checked above); the caller's contract.
        return unsafe { axpy_rows_avx512(a, m, b, rows) };
    }
    // SAFETY: the caller's contract.
    unsafe { axpy_rows_any(a, m, b, rows) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn axpy_rows_avx512<T: Widen>(a: &[f32], m: usize, b: &MatRef<'_, T>, rows: Rows) {
    if m == 1 {
        // C's row is the accumulator (it stays in L1).
        let out = Rows {
            c: rows.c.wrapping_add(rows.j0),
            ..rows
        };
        // SAFETY: the caller's contract (its row's columns j0 .. j0 + w).
        return unsafe { axpy_into(a, 1, b, out) };
    }
    // Several rows accumulate in a buffer whose rows are a cache line more than the
    // task's width apart: C's rows are N apart, 16 KiB at N = 4096, so each row's load
    // would fall on the page offset of the store to the row before it, which the CPU
    // may take for a dependency (4K aliasing). (Measured with the loop order before the
    // current one, tasks equally wide, 16 rows: 8.7–8.8 ms in C's rows, 7.5–8.2 ms in
    // the buffer; within noise at 8 rows.)
    let Rows { c, ldc, j0, w } = rows;
    let ld = w.next_multiple_of(L) + L;
    ACCUMULATORS.with(|buf| {
        let mut buf = buf.borrow_mut();
        if buf.len() < m * ld {
            buf.resize(m * ld, 0.0);
        }
        let acc = Rows {
            c: buf.as_mut_ptr(),
            ldc: ld,
            j0: 0,
            w,
        };
        // SAFETY: the buffer holds m rows of `ld >= w` f32 of this thread's alone; then
        // the caller's rows of C receive them.
        unsafe {
            axpy_into(a, m, b, Rows { j0, ..acc });
            for i in 0..m {
                std::ptr::copy_nonoverlapping(buf.as_ptr().add(i * ld), c.add(i * ldc + j0), w);
            }
        }
    });
}

thread_local! {
    /// [`axpy_rows_avx512`]'s accumulators for several rows, kept between calls.
    static ACCUMULATORS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The sums of [`axpy_rows_avx512`] into `acc`'s rows: `acc.c + i·acc.ldc` holds row `i`'s
/// `acc.w` outputs, which are B's columns `acc.j0 ..`.
///
/// # Safety
/// `acc` names `m` rows of `w` writable f32 that no other thread touches; `b` has those
/// columns; AVX-512 F and FMA present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn axpy_into<T: Widen>(a: &[f32], m: usize, b: &MatRef<'_, T>, acc: Rows) {
    let Rows { c, ldc, j0, w } = acc;
    // Every output is one chain of fused multiply-adds in k order, whatever the task's
    // width (the last n mod 16 columns by scalar fused multiply-adds), so the bits do not
    // depend on the thread count.
    let k = a.len() / m;
    let full = w / L * L;
    let brow = |kk: usize| run_at(b, kk, j0, w).as_ptr();
    // SAFETY: row i's run c + i·ldc .. + w is the caller's; each row run of B holds w
    // elements (checked by run_at's slicing); vectors read and write lanes p..p + 16 <=
    // full <= w.
    unsafe {
        for i in 0..m {
            std::ptr::write_bytes(c.add(i * ldc), 0, w);
        }
        let mut kk = 0;
        while kk + 4 <= k {
            // Four rows of B per pass over the accumulators: each vector of them is
            // loaded once and multiplied into every row's (A's elements broadcast from
            // memory), so the B rows stream past once and only the accumulators stay in
            // cache.
            let r = [brow(kk), brow(kk + 1), brow(kk + 2), brow(kk + 3)];
            let ap = a.as_ptr().add(kk);
            let mut p = 0;
            while p < full {
                let bv: [__m512; 4] = std::array::from_fn(|d| T::load16(r[d].add(p)));
                for i in 0..m {
                    let (ai, op) = (ap.add(i * k), c.add(i * ldc + p));
                    let mut acc = _mm512_loadu_ps(op);
                    for (d, &bv) in bv.iter().enumerate() {
                        acc = _mm512_fmadd_ps(_mm512_set1_ps(*ai.add(d)), bv, acc);
                    }
                    _mm512_storeu_ps(op, acc);
                }
                p += L;
            }
            for i in 0..m {
                let (ai, op) = (&a[i * k + kk..][..4], c.add(i * ldc));
                for (d, &rd) in r.iter().enumerate() {
                    for j in full..w {
                        *op.add(j) = ai[d].mul_add((*rd.add(j)).widen(), *op.add(j));
                    }
                }
            }
            kk += 4;
        }
        for kk in kk..k {
            let r = brow(kk);
            for i in 0..m {
                let (s, op) = (a[i * k + kk], c.add(i * ldc));
                let sv = _mm512_set1_ps(s);
                let mut p = 0;
                while p < full {
                    let acc = _mm512_fmadd_ps(sv, T::load16(r.add(p)), _mm512_loadu_ps(op.add(p)));
                    _mm512_storeu_ps(op.add(p), acc);
                    p += L;
                }
                for j in full..w {
                    *op.add(j) = s.mul_add((*r.add(j)).widen(), *op.add(j));
                }
            }
        }
    }
}

/// [`axpy_rows_avx512`] without vectors (and without fused multiply-adds).
///
/// # Safety
/// As [`axpy_rows`].
unsafe fn axpy_rows_any<T: Widen>(a: &[f32], m: usize, b: &MatRef<'_, T>, rows: Rows) {
    let Rows { c, ldc, j0, w } = rows;
    let k = a.len() / m;
    for i in 0..m {
        // SAFETY: row i's run of w values is the caller's alone.
        let out = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc + j0), w) };
        out.fill(0.0);
        for (kk, &s) in a[i * k..][..k].iter().enumerate() {
            let row = run_at(b, kk, j0, w);
            for (o, &x) in out.iter_mut().zip(row) {
                *o += s * x.widen();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// f64 reference of `a · b` through the views.
    fn reference<T: Widen>(a: &MatRef<'_, T>, b: &MatRef<'_, T>) -> Vec<f64> {
        (0..b.cols)
            .map(|j| {
                (0..b.rows)
                    .map(|k| {
                        let ai = (a.offset as isize + k as isize * a.col_stride) as usize;
                        let bi = (b.offset as isize
                            + k as isize * b.row_stride
                            + j as isize * b.col_stride) as usize;
                        a.data[ai].widen() as f64 * b.data[bi].widen() as f64
                    })
                    .sum()
            })
            .collect()
    }

    /// The `K × N` view of a `[N, K]` weight `w` (nn.Linear's layout: B along K).
    fn weight_n_by_k<T>(w: &[T], k: usize, n: usize) -> MatRef<'_, T> {
        MatRef {
            data: w,
            rows: k,
            cols: n,
            row_stride: 1,
            col_stride: k as isize,
            offset: 0,
        }
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
                (h % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    fn check<T: Widen>(a: MatRef<'_, T>, b: MatRef<'_, T>, tol: f64) {
        let mut c = vec![f32::NAN; b.cols];
        gemv(a, b, &mut c);
        let r = reference(&a, &b);
        for (j, (&got, &want)) in c.iter().zip(&r).enumerate() {
            assert!(
                (got as f64 - want).abs() <= tol * (1.0 + want.abs()),
                "column {j} of {}: {got} vs {want}",
                b.cols
            );
        }
    }

    #[test]
    fn weight_stored_n_by_k_matches_f64_dot_products_with_ragged_sizes() {
        // K = 37 (two lane blocks and a tail), N = 131 (blocks of 64 and a 3-wide tail);
        // B read as the transpose of a [N, K] weight with an offset, A strided.
        for (k, n) in [(37, 131), (768, 70), (1, 5), (16, 4)] {
            let w = values(n * k + 3, 1);
            let av = values(2 * k + 1, 2);
            let a = MatRef {
                data: &av[..],
                rows: 1,
                cols: k,
                row_stride: 0,
                col_stride: 2,
                offset: 1,
            };
            let b = MatRef {
                data: &w[..],
                rows: k,
                cols: n,
                row_stride: 1,
                col_stride: k as isize,
                offset: 3,
            };
            check(a, b, 1e-5);
        }
    }

    #[test]
    fn weight_stored_k_by_n_matches_f64_row_sums() {
        for (k, n) in [(37, 131), (5, 64), (200, 1)] {
            let w = values(n * k, 3);
            let av = values(k, 4);
            let a = MatRef::row_major(&av[..], 1, k);
            let b = MatRef::row_major(&w[..], k, n);
            check(a, b, 1e-5);
        }
    }

    #[test]
    fn a_few_rows_against_a_k_by_n_weight_match_f64_sums_on_any_thread_count() {
        // 1..=FEW_ROWS_AXPY rows against B along N: strided A, ragged K (passes of four
        // and a rest), N with a tail and columns split into tasks (up to AXPY_COLS wide)
        // by the thread count.
        for (m, k, n) in [
            (1, 39, 4100),
            (2, 5, 17),
            (3, 39, 4100),
            (8, 64, 300),
            (FEW_ROWS_AXPY, 13, 1030),
        ] {
            let w = values(n * k, 11);
            let av = values(2 * m * k, 12);
            let a = MatRef {
                data: &av[..],
                rows: m,
                cols: k,
                row_stride: 2 * k as isize,
                col_stride: 2,
                offset: 0,
            };
            let b = MatRef::row_major(&w[..], k, n);
            assert!(takes(m, (b.row_stride, b.col_stride)));
            let run = |threads: usize| {
                let mut c = vec![f32::NAN; m * n];
                crate::threads::on_threads(threads, || gemv(a, b, &mut c));
                c
            };
            let one = run(1);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|p| av[i * 2 * k + 2 * p] as f64 * w[p * n + j] as f64)
                        .sum();
                    let got = one[i * n + j] as f64;
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{m}×{k}×{n} at ({i}, {j}): {got} vs {want}"
                    );
                }
            }
            for threads in [2, 3] {
                let other = run(threads);
                assert!(
                    crate::threads::same_bits(&one, &other),
                    "{m}×{k}×{n}: {threads} threads changed the bits"
                );
            }
        }
        // More rows than the limits, or B without a unit stride, stay with the GEMM.
        assert!(!takes(FEW_ROWS_AXPY + 1, (64, 1)) && !takes(FEW_ROWS_DOT + 1, (1, 64)));
        assert!(takes(FEW_ROWS_DOT, (1, 64)));
        assert!(takes(1, (1, 64)) && !takes(1, (2, 64)) && !takes(0, (1, 64)));
    }

    #[test]
    fn a_few_rows_against_an_n_by_k_weight_equal_their_one_row_products_bit_for_bit() {
        // B read as the transpose of a [N, K] weight (nn.Linear): blocks of four rows and
        // four outputs, the last of each partial; K with a tail of 5.
        for (m, k, n) in [(2, 37, 9), (5, 69, 70), (FEW_ROWS_DOT, 133, 131)] {
            let w = values(n * k, 13);
            let av = values(m * k, 14);
            let b = weight_n_by_k(&w, k, n);
            let mut c = vec![f32::NAN; m * n];
            gemv(MatRef::row_major(&av[..], m, k), b, &mut c);
            for i in 0..m {
                let mut row = vec![f32::NAN; n];
                gemv(MatRef::row_major(&av[i * k..][..k], 1, k), b, &mut row);
                assert!(
                    crate::threads::same_bits(&row, &c[i * n..][..n]),
                    "{m}×{k}×{n}: row {i} differs from its one-row product"
                );
                for (j, &got) in row.iter().enumerate() {
                    let want: f64 = (0..k)
                        .map(|p| av[i * k + p] as f64 * w[j * k + p] as f64)
                        .sum();
                    assert!(
                        (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{m}×{k}×{n} at ({i}, {j}): {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn bf16_operands_widen_exactly_and_accumulate_in_f32() {
        let (k, n) = (100, 67);
        let w: Vec<bf16> = values(n * k, 5).into_iter().map(bf16::from_f32).collect();
        let av: Vec<bf16> = values(k, 6).into_iter().map(bf16::from_f32).collect();
        let a = MatRef::row_major(&av[..], 1, k);
        // Both layouts: [N, K] read transposed, and [K, N].
        let bt = weight_n_by_k(&w, k, n);
        check(a, bt, 1e-5);
        check(a, MatRef::row_major(&w[..], k, n), 1e-5);
        // Three rows at once, both layouts: each row as its own one-row product.
        let a3: Vec<bf16> = values(3 * k, 15).into_iter().map(bf16::from_f32).collect();
        for b in [bt, MatRef::row_major(&w[..], k, n)] {
            let mut c = vec![f32::NAN; 3 * n];
            gemv(MatRef::row_major(&a3[..], 3, k), b, &mut c);
            for i in 0..3 {
                let row = MatRef::row_major(&a3[i * k..][..k], 1, k);
                let mut one = vec![f32::NAN; n];
                gemv(row, b, &mut one);
                check(row, b, 1e-5);
                for (x, y) in one.iter().zip(&c[i * n..][..n]) {
                    assert!(
                        (x - y).abs() <= 1e-5 * (1.0 + x.abs()),
                        "row {i}: {x} vs {y}"
                    );
                }
            }
        }
        // 1.5 · 2 widened exactly: bf16 holds both.
        let one = [bf16::from_f32(1.5)];
        let two = [bf16::from_f32(2.0)];
        let mut c = [0f32];
        gemv(
            MatRef::row_major(&one[..], 1, 1),
            MatRef::row_major(&two[..], 1, 1),
            &mut c,
        );
        assert_eq!(c, [3.0]);
    }

    #[test]
    fn portable_kernels_match_the_f64_reference_too() {
        // The AVX-512 kernels run on machines that have it; these are the others'.
        let (k, n) = (37, 70);
        let w = values(n * k, 7);
        let av = values(k, 8);
        let a = MatRef::row_major(&av[..], 1, k);
        let bt = weight_n_by_k(&w, k, n);
        let bn = MatRef::row_major(&w[..], k, n);
        for (b, dot) in [(bt, true), (bn, false)] {
            let want = reference(&a, &b);
            let mut got = vec![0f32; n];
            for j0 in (0..n).step_by(BLOCK) {
                let j1 = (j0 + BLOCK).min(n);
                if dot {
                    dot_rows_any(&av, &b, j0, &mut got[j0..j1]);
                } else {
                    let rows = Rows {
                        c: got.as_mut_ptr(),
                        ldc: n,
                        j0,
                        w: j1 - j0,
                    };
                    // SAFETY: columns j0..j1 of the one row of `got`.
                    unsafe { axpy_rows_any(&av, 1, &b, rows) };
                }
            }
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (*g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{g} vs {w}"
                );
            }
        }
        // Three rows at once through the portable axpy kernel: each row as its own
        // one-row product (same loop, same order of sums).
        let (m, a3) = (3, values(3 * k, 9));
        let mut got = vec![f32::NAN; m * n];
        let rows = Rows {
            c: got.as_mut_ptr(),
            ldc: n,
            j0: 0,
            w: n,
        };
        // SAFETY: all m rows of `got`, n columns each.
        unsafe { axpy_rows_any(&a3, m, &bn, rows) };
        for i in 0..m {
            let mut one = vec![f32::NAN; n];
            let row = Rows {
                c: one.as_mut_ptr(),
                ldc: n,
                j0: 0,
                w: n,
            };
            // SAFETY: the one row of `one`.
            unsafe { axpy_rows_any(&a3[i * k..][..k], 1, &bn, row) };
            assert!(crate::threads::same_bits(&one, &got[i * n..][..n]));
            let want = reference(&MatRef::row_major(&a3[i * k..][..k], 1, k), &bn);
            for (g, w) in one.iter().zip(&want) {
                assert!(
                    (*g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{g} vs {w}"
                );
            }
        }
    }
}
