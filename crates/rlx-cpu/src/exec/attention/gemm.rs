//! The two products of an attention block, `Sᵀ = K·Qᵀ` and `Oᵀ += Vᵀ·Pᵀ`, as one small
//! dense kernel `C (+)= A·B`: `A` is `m × k` with element `(r, p)` at `a + r·lda + p·ldp`
//! (any strides: K and V are read in place, one scalar at a time, broadcast), `B` is
//! `k × n` with rows `ldb` apart (each row contiguous, read as vectors of 16), `C` is
//! `m × n` with rows `ldc` apart.
//!
//! Three instruction-set levels exist, chosen once per block by the caller: AVX-512
//! (register-blocked outer products written with intrinsics: 6 rows × 64 columns of
//! accumulators stay in registers for the whole `k` loop), AVX2+FMA and portable (row by
//! row `axpy` loops that LLVM vectorizes). Every level sums each `C` element over `k` in
//! ascending order, so a level always gives the same bits for the same inputs.

/// Instruction-set levels of [`gemm`].
pub(super) const PORTABLE: u8 = 0;
/// AVX2 + FMA.
pub(super) const AVX2: u8 = 1;
/// AVX-512 F.
pub(super) const AVX512: u8 = 2;

/// What a product starts from.
#[derive(Clone, Copy)]
pub(super) enum Init {
    /// `C = A·B`.
    Zero,
    /// `C += A·B`.
    Add,
    /// `C = C·diag(s) + A·B`: column `j` of `C` first scaled by `s[j]` (`n` values).
    ScaleAdd(*const f32),
}

impl Init {
    /// The same start for the columns from `j0` on.
    #[inline(always)]
    fn at_col(self, j0: usize) -> Init {
        match self {
            // Wrapping: this safe method cannot know `s` has `j0` values (gemm's caller
            // guarantees `n` of them before any is read).
            Init::ScaleAdd(s) => Init::ScaleAdd(s.wrapping_add(j0)),
            x => x,
        }
    }
}

/// The operands of one product `C (+)= A·B`, laid out as the module doc says.
#[derive(Clone, Copy)]
pub(super) struct Operands {
    /// Rows of `A` and `C`.
    pub m: usize,
    /// Columns of `B` and `C`.
    pub n: usize,
    /// The summed axis: columns of `A`, rows of `B`.
    pub k: usize,
    /// `A`: element `(r, p)` at `a + r·lda + p·ldp`.
    pub a: *const f32,
    pub lda: isize,
    pub ldp: isize,
    /// `B`: row `p` (contiguous) at `b + p·ldb`.
    pub b: *const f32,
    pub ldb: isize,
    /// `C`: row `r` (contiguous) at `c + r·ldc`.
    pub c: *mut f32,
    pub ldc: usize,
}

/// `C = init(C) + A·B` (see the module doc and [`Init`]).
///
/// # Safety
/// The caller runs inside a function compiled for level `L` on a CPU that has it, and
/// every row of `A`, `B` and `C` named by the sizes is in bounds (columns of `B` past `n`
/// are never read).
#[inline(always)]
pub(super) unsafe fn gemm<const L: u8>(o: Operands, init: Init) {
    if o.m == 0 || o.n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if L == AVX512 {
        // SAFETY: L == AVX512 and the caller guarantees the CPU has AVX-512F; the bounds
        // contract is passed through unchanged.
        return unsafe { x86::gemm(o, init) };
    }
    // SAFETY: the caller's bounds contract is axpy_rows's; the FMA variant (`F = true`) is
    // chosen only for L == AVX2, whose callers run on an AVX2+FMA CPU.
    unsafe {
        if L == PORTABLE {
            axpy_rows::<false>(o, init)
        } else {
            axpy_rows::<true>(o, init)
        }
    }
}

/// Row by row: `c_i = Σ_p a_ip · b_p`, each term one vectorizable `axpy` over the row.
/// `F` fuses the multiply-add (only inside functions compiled with FMA).
/// # Safety
/// Every element of `A` (`a + r·lda + p·ldp`), the first `n` of every row of `B` (rows
/// `ldb` apart) and of `C` (rows `ldc` apart) named by `m`, `n`, `k` must be in bounds;
/// with `ScaleAdd(s)`, `s` must hold `n` values; `C` must not overlap `A`, `B` or `s`.
#[inline(always)]
unsafe fn axpy_rows<const F: bool>(o: Operands, init: Init) {
    let Operands {
        m,
        n,
        k,
        a,
        lda,
        ldp,
        b,
        ldb,
        c,
        ldc,
    } = o;
    for i in 0..m {
        // SAFETY: row `i < m` of `C` holds `n` elements (caller's contract) and overlaps no
        // operand, so this is the only live reference to it.
        let crow = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), n) };
        match init {
            Init::Zero => crow.fill(0.0),
            Init::Add => {}
            Init::ScaleAdd(sc) => {
                // SAFETY: with ScaleAdd the caller guarantees `n` readable scales not
                // overlapping `C`.
                let sc = unsafe { std::slice::from_raw_parts(sc, n) };
                for (x, &y) in crow.iter_mut().zip(sc) {
                    *x *= y;
                }
            }
        }
        for p in 0..k {
            // SAFETY: `(i, p)` with `i < m`, `p < k` is an element of `A` (caller's contract).
            let av = unsafe { *a.offset(i as isize * lda + p as isize * ldp) };
            // SAFETY: row `p < k` of `B` holds `n` readable elements (caller's contract), not
            // in `C`.
            let brow = unsafe { std::slice::from_raw_parts(b.offset(p as isize * ldb), n) };
            for (x, &y) in crow.iter_mut().zip(brow) {
                *x = if F { av.mul_add(y, *x) } else { av * y + *x };
            }
        }
    }
}

/// A transposing copy: `dst[r·dstride + c] = scale(r) · src[c·sstride + r]` for
/// `r < rows`, `c < cols`.
#[derive(Clone, Copy)]
pub(super) struct Transposed {
    pub rows: usize,
    pub cols: usize,
    pub src: *const f32,
    pub sstride: isize,
    pub dst: *mut f32,
    pub dstride: usize,
}

/// The copy `t` describes, each destination row `r` scaled by `scale(r)`: packs Qᵀ from
/// the query rows and writes the output rows from `Oᵀ`.
///
/// # Safety
/// As for [`gemm`]: compiled for level `L`, every element named is in bounds.
#[inline(always)]
pub(super) unsafe fn transpose<const L: u8>(t: Transposed, scale: impl Fn(usize) -> f32) {
    #[cfg(target_arch = "x86_64")]
    if L == AVX512 {
        // SAFETY: L == AVX512 and the caller guarantees the CPU has AVX-512F; bounds passed
        // through.
        return unsafe { x86::transpose(t, scale) };
    }
    let Transposed {
        rows,
        cols,
        src,
        sstride,
        dst,
        dstride,
    } = t;
    for r in 0..rows {
        let sr = scale(r);
        for c in 0..cols {
            // SAFETY: `r < rows`, `c < cols`: the caller guarantees `src[c·sstride + r]` and
            // `dst[r·dstride + c]` are in bounds (this function's contract).
            unsafe {
                *dst.add(r * dstride + c) = sr * *src.offset(c as isize * sstride + r as isize)
            };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Init, Operands, Transposed};
    use std::arch::x86_64::*;

    /// Rows of `C` per register tile.
    const MR: usize = 6;

    /// The AVX-512 level: tiles of up to `MR` rows × 64 columns, the last vector of a
    /// tile masked when `n` is not a multiple of 16 (masked loads never touch the
    /// elements they skip, so `B` and `C` need no padding).
    /// # Safety
    /// As [`super::gemm`]: every row of `A`, `B`, `C` named by the sizes in bounds, `C`
    /// overlapping no operand, and the CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn gemm(o: Operands, init: Init) {
        let Operands {
            m,
            n,
            k,
            a,
            lda,
            ldp,
            b,
            ldb,
            c,
            ldc,
        } = o;
        let mut j0 = 0;
        while j0 < n {
            let w = (n - j0).min(64);
            let nv = w.div_ceil(16);
            let tail = w - 16 * (nv - 1);
            let mask: __mmask16 = if tail == 16 {
                0xffff
            } else {
                (1u16 << tail) - 1
            };
            let mut i0 = 0;
            while i0 < m {
                let mr = (m - i0).min(MR);
                let t = Tile {
                    k,
                    // SAFETY: `i0 < m`, so row `i0` of `A` is in bounds (the caller's
                    // contract).
                    a: unsafe { a.offset(i0 as isize * lda) },
                    lda,
                    ldp,
                    // SAFETY: `j0 < n`, so column `j0` of `B`'s first row is in bounds.
                    b: unsafe { b.add(j0) },
                    ldb,
                    // SAFETY: `i0 < m` and `j0 < n`: element `(i0, j0)` of `C` is in bounds.
                    c: unsafe { c.add(i0 * ldc + j0) },
                    ldc,
                    mask,
                    init: init.at_col(j0),
                };
                macro_rules! by_nv {
                    ($mr:literal) => {
                        // SAFETY: the Tile is the `mr × w` corner at (i0, j0) with
                        // `mr <= MR` rows and `nv = ceil(w/16)` vectors whose last is masked
                        // to `w`'s tail, so every access `tile` makes lies inside the
                        // caller's `m × n` (and `k`) bounds; AVX-512F is enabled for this
                        // function.
                        unsafe {
                            match nv {
                                1 => tile::<$mr, 1>(&t),
                                2 => tile::<$mr, 2>(&t),
                                3 => tile::<$mr, 3>(&t),
                                _ => tile::<$mr, 4>(&t),
                            }
                        }
                    };
                }
                match mr {
                    1 => by_nv!(1),
                    2 => by_nv!(2),
                    3 => by_nv!(3),
                    4 => by_nv!(4),
                    5 => by_nv!(5),
                    _ => by_nv!(6),
                }
                i0 += mr;
            }
            j0 += 64;
        }
    }

    /// Lanes `0..w` set.
    #[inline(always)]
    fn lanes(w: usize) -> __mmask16 {
        if w >= 16 { 0xffff } else { (1u16 << w) - 1 }
    }

    /// Butterfly stage `S` of a 16 × 16 transpose: rows `i` (bit `S` clear) and `i + S`
    /// exchange their off-diagonal `S`-lane halves. Lanes with bit `S` clear keep their
    /// own row's element, the others take the partner's (index `16 + j` selects lane `j`
    /// of the second source).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn stage<const S: usize>(v: &mut [__m512; 16]) {
        let mut lo = [0i32; 16];
        let mut hi = [0i32; 16];
        for j in 0..16 {
            if j & S == 0 {
                lo[j] = j as i32;
                hi[j] = (j + S) as i32;
            } else {
                lo[j] = (16 + j - S) as i32;
                hi[j] = (16 + j) as i32;
            }
        }
        // SAFETY: 16 i32 read from an array of 16.
        // SAFETY: each load reads 16 i32 (64 bytes) from a local array of exactly 16 i32
        // (unaligned loads allowed); avx512f is enabled for this function.
        let (il, ih) = unsafe {
            (
                _mm512_loadu_si512(lo.as_ptr() as *const _),
                _mm512_loadu_si512(hi.as_ptr() as *const _),
            )
        };
        for i in 0..16 {
            if i & S == 0 {
                let (a, b) = (v[i], v[i + S]);
                v[i] = _mm512_permutex2var_ps(a, il, b);
                v[i + S] = _mm512_permutex2var_ps(a, ih, b);
            }
        }
    }

    /// [`super::transpose`] in 16 × 16 tiles transposed in registers: four butterfly
    /// stages, stage `s` swapping the off-diagonal `s × s` blocks of every `2s × 2s`
    /// block (16 two-source permutes each). Contiguous loads and stores only.
    /// # Safety
    /// As [`super::transpose`]: every `src[c·sstride + r]` and `dst[r·dstride + c]` for
    /// `r < rows`, `c < cols` in bounds, and the CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose(t: Transposed, scale: impl Fn(usize) -> f32) {
        let Transposed {
            rows,
            cols,
            src,
            sstride,
            dst,
            dstride,
        } = t;
        // SAFETY: every load and store is masked to the lanes inside `rows × cols` (empty masks
        // past the edges, and masked-off lanes are never accessed), so only in-bounds elements
        // of `src`/`dst` (caller's contract) are touched; pointers to masked-off rows are
        // formed with wrapping arithmetic; AVX-512F is enabled for this function.
        unsafe {
            let mut r0 = 0;
            while r0 < rows {
                let rm = lanes(rows - r0);
                let mut c0 = 0;
                while c0 < cols {
                    let cw = (cols - c0).min(16);
                    // Every one of the 16 rows loaded and stored (masks empty past the
                    // edges), so the tile is indexed by constants and stays in registers.
                    let mut v = [_mm512_setzero_ps(); 16];
                    for (c, x) in v.iter_mut().enumerate() {
                        let p = src.wrapping_offset((c0 + c) as isize * sstride + r0 as isize);
                        *x = _mm512_maskz_loadu_ps(if c < cw { rm } else { 0 }, p);
                    }
                    stage::<8>(&mut v);
                    stage::<4>(&mut v);
                    stage::<2>(&mut v);
                    stage::<1>(&mut v);
                    let (cm, nr) = (lanes(cw), rows - r0);
                    for (r, &x) in v.iter().enumerate() {
                        let sc = _mm512_set1_ps(if r < nr { scale(r0 + r) } else { 0.0 });
                        _mm512_mask_storeu_ps(
                            dst.wrapping_add((r0 + r) * dstride + c0),
                            if r < nr { cm } else { 0 },
                            _mm512_mul_ps(x, sc),
                        );
                    }
                    c0 += 16;
                }
                r0 += 16;
            }
        }
    }

    /// One register tile's operands (already offset to the tile's corner).
    struct Tile {
        k: usize,
        a: *const f32,
        lda: isize,
        ldp: isize,
        b: *const f32,
        ldb: isize,
        c: *mut f32,
        ldc: usize,
        /// Lanes of the tile's last vector that exist.
        mask: __mmask16,
        init: Init,
    }

    /// `MR × 16·NV` accumulators in registers; per step of `k`: `NV` vector loads of a
    /// `B` row, then one broadcast and `NV` FMAs per row of `A`.
    /// # Safety
    /// `t` must describe an in-bounds corner: `MR` rows of `A` (`k` steps of `ldp`),
    /// `k` rows of `B` and `MR` rows of `C` each with `16·(NV−1)` + (lanes of `t.mask`)
    /// columns readable (and writable for `C`), `ScaleAdd` scales likewise; the CPU
    /// must have AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn tile<const MR: usize, const NV: usize>(t: &Tile) {
        // SAFETY: every pointer is the tile's corner plus `r·ldc`/`r·lda` for `r < MR`, `16·v`
        // for `v < NV` (the last vector masked to the existing lanes), and `p·ldp`/`p·ldb` for
        // `p < k`: inside the bounds the caller (x86::gemm) guarantees; masked loads never
        // touch skipped lanes.
        unsafe {
            let load = |p: *const f32, v: usize| {
                if v + 1 == NV {
                    _mm512_maskz_loadu_ps(t.mask, p)
                } else {
                    _mm512_loadu_ps(p)
                }
            };
            let mut acc = [[_mm512_setzero_ps(); NV]; MR];
            match t.init {
                Init::Zero => {}
                Init::Add => {
                    for (r, row) in acc.iter_mut().enumerate() {
                        for (v, x) in row.iter_mut().enumerate() {
                            *x = load(t.c.add(r * t.ldc + 16 * v), v);
                        }
                    }
                }
                Init::ScaleAdd(sc) => {
                    let mut s = [_mm512_setzero_ps(); NV];
                    for (v, x) in s.iter_mut().enumerate() {
                        *x = load(sc.add(16 * v), v);
                    }
                    for (r, row) in acc.iter_mut().enumerate() {
                        for (v, x) in row.iter_mut().enumerate() {
                            *x = _mm512_mul_ps(load(t.c.add(r * t.ldc + 16 * v), v), s[v]);
                        }
                    }
                }
            }
            let mut ap = t.a;
            let mut bp = t.b;
            for _ in 0..t.k {
                let mut bv = [_mm512_setzero_ps(); NV];
                for (v, x) in bv.iter_mut().enumerate() {
                    *x = load(bp.add(16 * v), v);
                }
                for (r, row) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_ps(*ap.offset(r as isize * t.lda));
                    for (x, &y) in row.iter_mut().zip(&bv) {
                        *x = _mm512_fmadd_ps(av, y, *x);
                    }
                }
                // Wrapping: after the last step these point one whole stride past
                // the operands (beyond their allocations when a stride exceeds a
                // row), where `offset` would be undefined behaviour; never read there.
                ap = ap.wrapping_offset(t.ldp);
                bp = bp.wrapping_offset(t.ldb);
            }
            for (r, row) in acc.iter().enumerate() {
                for (v, &x) in row.iter().enumerate() {
                    let p = t.c.add(r * t.ldc + 16 * v);
                    if v + 1 == NV {
                        _mm512_mask_storeu_ps(p, t.mask, x);
                    } else {
                        _mm512_storeu_ps(p, x);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `gemm` at level `L`, run inside a function compiled for it; `o`'s pointers are
    /// into buffers the test sized for every row and column the product names.
    fn run(level: u8, o: Operands, acc: Init) {
        /// # Safety
        /// As [`gemm`] at the AVX-512 level: operands in bounds, CPU with AVX-512F.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        unsafe fn l2(o: Operands, acc: Init) {
            // SAFETY: l2 is compiled with avx512f and only called where `levels()` detected it;
            // the test sizes its buffers for every row and column gemm reads or writes.
            unsafe { gemm::<AVX512>(o, acc) }
        }
        /// # Safety
        /// As [`gemm`] at the AVX2 level: operands in bounds, CPU with AVX2 and
        /// FMA.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn l1(o: Operands, acc: Init) {
            // SAFETY: l1 is compiled with avx2,fma and only called where `levels()` detected
            // both.
            unsafe { gemm::<AVX2>(o, acc) }
        }
        match level {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AVX512 is in `levels()` only when detected; the buffers behind `o` are
            // sized by the test for `m × k` (strides lda, ldp), `k × ldb` and `m × ldc`.
            AVX512 => unsafe { l2(o, acc) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AVX2 is in `levels()` only when avx2 and fma were detected; buffers as
            // above.
            AVX2 => unsafe { l1(o, acc) },
            // SAFETY: the portable level needs no CPU feature; buffers sized as above.
            _ => unsafe { gemm::<PORTABLE>(o, acc) },
        }
    }

    fn levels() -> Vec<u8> {
        let mut v = vec![PORTABLE];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                v.push(AVX2);
            }
            if is_x86_feature_detected!("avx512f") {
                v.push(AVX512);
            }
        }
        v
    }

    #[test]
    fn every_level_matches_an_f64_product_on_ragged_tiles() {
        let mut seed = 0x1234_5678_9abc_def1u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        for level in levels() {
            for &(m, n, k) in &[
                (1, 1, 1),
                (7, 5, 3),
                (6, 64, 64),
                (13, 70, 9),
                (64, 130, 64),
                (5, 16, 0),
            ] {
                let sc: Vec<f32> = (0..n).map(|j| 0.5 + j as f32 / 8.0).collect();
                for (acc, transposed) in [
                    (Init::Zero, false),
                    (Init::Zero, true),
                    (Init::Add, false),
                    (Init::ScaleAdd(sc.as_ptr()), false),
                    (Init::ScaleAdd(sc.as_ptr()), true),
                ] {
                    let (ldb, ldc) = (n + 3, n + 1);
                    // A row-major (rows k + 2 apart) or column-major (columns m + 1 apart).
                    let (lda, ldp) = if transposed { (1, m + 1) } else { (k + 2, 1) };
                    let a: Vec<f32> = (0..(m + 1) * (k + 2)).map(|_| rnd()).collect();
                    let b: Vec<f32> = (0..k.max(1) * ldb).map(|_| rnd()).collect();
                    let c0: Vec<f32> = (0..m * ldc).map(|_| rnd()).collect();
                    let mut c = c0.clone();
                    let o = Operands {
                        m,
                        n,
                        k,
                        a: a.as_ptr(),
                        lda: lda as isize,
                        ldp: ldp as isize,
                        b: b.as_ptr(),
                        ldb: ldb as isize,
                        c: c.as_mut_ptr(),
                        ldc,
                    };
                    run(level, o, acc);
                    for i in 0..m {
                        for j in 0..ldc {
                            let got = c[i * ldc + j] as f64;
                            if j >= n {
                                assert_eq!(got, c0[i * ldc + j] as f64, "column past n written");
                                continue;
                            }
                            let mut want = match acc {
                                Init::Zero => 0.0,
                                Init::Add => c0[i * ldc + j] as f64,
                                Init::ScaleAdd(_) => (c0[i * ldc + j] * sc[j]) as f64,
                            };
                            for p in 0..k {
                                want += a[i * lda + p * ldp] as f64 * b[p * ldb + j] as f64;
                            }
                            assert!(
                                (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                                "level {level} m{m} n{n} k{k} transposed {transposed} at ({i},{j}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_level_transposes_ragged_tiles_with_row_scales() {
        /// # Safety
        /// As [`transpose`]: every element named in bounds, CPU with AVX-512F.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        unsafe fn t2(t: Transposed) {
            // SAFETY: t2 is compiled with avx512f and only called where `levels()` detected it.
            unsafe { transpose::<AVX512>(t, |i| 1.0 + i as f32) }
        }
        for level in levels() {
            for &(rows, cols) in &[(1, 1), (16, 16), (17, 5), (64, 64), (3, 40), (33, 70)] {
                let ss = rows + 3;
                let src: Vec<f32> = (0..cols * ss).map(|i| i as f32 * 0.25 - 7.0).collect();
                let ds = cols + 2;
                let mut dst = vec![f32::NAN; rows * ds];
                let t = Transposed {
                    rows,
                    cols,
                    src: src.as_ptr(),
                    sstride: ss as isize,
                    dst: dst.as_mut_ptr(),
                    dstride: ds,
                };
                match level {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: avx512f detected (`levels()`); `src` has `cols·ss` and `dst`
                    // `rows·ds` elements, covering every `(r, c)` with `r < rows`, `c < cols`.
                    AVX512 => unsafe { t2(t) },
                    // SAFETY: portable level; `src`/`dst` sized for every `(r, c)` as above.
                    _ => unsafe { transpose::<PORTABLE>(t, |i| 1.0 + i as f32) },
                }
                for r in 0..rows {
                    for c in 0..ds {
                        let got = dst[r * ds + c];
                        if c >= cols {
                            assert!(got.is_nan(), "level {level}: ({r},{c}) past cols written");
                        } else {
                            assert_eq!(
                                got,
                                (1.0 + r as f32) * src[c * ss + r],
                                "level {level} {rows}x{cols} ({r},{c})"
                            );
                        }
                    }
                }
            }
        }
    }
}
