//! Building blocks shared by the lane kernels, and the slice drivers that turn a lane
//! kernel into a vectorized loop.
//!
//! A *lane kernel* is a branch-free scalar function (`if` only between values already
//! computed, which LLVM turns into a blend). The drivers call it from a plain loop inside a
//! `#[target_feature(enable = "avx2,fma")]` function, where LLVM vectorizes the loop eight
//! lanes wide; the same kernel compiled without those features is the portable path.
//!
//! The const parameter `F` says whether a fused multiply-add instruction exists. With
//! `F = true` the kernels use `mul_add` (one rounding); with `F = false` they use `a*b + c`
//! (two roundings) and error-free splitting, because a software `fma` would be far slower.
//! Each path is deterministic; the two paths may differ in the last bit.

/// `a·b + c`: fused when the target has FMA (`F`), unfused otherwise.
#[inline(always)]
pub(crate) fn mad<const F: bool>(a: f32, b: f32, c: f32) -> f32 {
    if F { a.mul_add(b, c) } else { a * b + c }
}

/// `a·b + c` in `f64`, with the same contract as [`mad`].
#[inline(always)]
pub(crate) fn mad64<const F: bool>(a: f64, b: f64, c: f64) -> f64 {
    if F { a.mul_add(b, c) } else { a * b + c }
}

/// `(p, e)` with `p = fl(a·b)` and `p + e = a·b` exactly (for |a|, |b| < 2¹⁰⁰).
#[inline(always)]
pub(crate) fn two_prod<const F: bool>(a: f32, b: f32) -> (f32, f32) {
    let p = a * b;
    if F {
        (p, a.mul_add(b, -p))
    } else {
        // Veltkamp splitting into 12-bit halves: every partial product is exact.
        let (ah, al) = split(a);
        let (bh, bl) = split(b);
        (p, ((ah * bh - p) + ah * bl + al * bh) + al * bl)
    }
}

#[inline(always)]
fn split(a: f32) -> (f32, f32) {
    let c = 4097.0 * a;
    let h = c - (c - a);
    (h, a - h)
}

/// `(s, e)` with `s = fl(a + b)` and `s + e = a + b` exactly (Knuth's two-sum, any order).
#[inline(always)]
pub(crate) fn two_sum(a: f32, b: f32) -> (f32, f32) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// `if c { a } else { b }`, written as a function so every use site reads as a blend.
#[inline(always)]
pub(crate) fn sel(c: bool, a: f32, b: f32) -> f32 {
    if c { a } else { b }
}

/// `min(max(x, lo), hi)` that keeps NaN (compares are false for NaN).
#[inline(always)]
pub(crate) fn clamp(x: f32, lo: f32, hi: f32) -> f32 {
    let x = if x < lo { lo } else { x };
    if x > hi { hi } else { x }
}

/// A per-element kernel the drivers can vectorize.
pub(crate) trait Lane {
    /// The value at `x`; `F` says whether FMA is available.
    fn f<const F: bool>(x: f32) -> f32;
    /// Whether some inputs are left to [`Lane::slow`] (huge trigonometric arguments).
    const SLOW: bool = false;
    /// Whether `x` is outside the vector kernel's domain.
    #[inline(always)]
    fn needs_slow(_x: f32) -> bool {
        false
    }
    /// The scalar fallback for inputs where [`Lane::needs_slow`] holds.
    #[inline(always)]
    fn slow(x: f32) -> f32 {
        x
    }
    /// Whether the AVX2 and AVX-512 drivers run [`Lane::f16`] on 16-lane chunks (the
    /// table-driven erf family: permutes instead of gathers).
    const CHUNKED: bool = false;
    /// 16 lanes of [`Lane::f`] (the same bits) with table rows read by `T`.
    ///
    /// # Safety
    /// As [`Look16::look`] of `T`.
    #[inline(always)]
    unsafe fn f16<const F: bool, T: Look16>(x: &[f32; 16]) -> [f32; 16] {
        std::array::from_fn(|i| Self::f::<F>(x[i]))
    }
}

/// A 16-lane table read: `look(row, j)[i] = row[bits(j[i]) & 15]` (a `vpermps` on
/// AVX-512, two `vpermps` and a blend on AVX2: `Look512` and `Look256` below).
pub(crate) trait Look16 {
    /// `row[bits(j[i]) & 15]` for each lane `i`.
    ///
    /// # Safety
    /// The CPU must have the instruction-set features the implementation is compiled for.
    unsafe fn look(row: &[f32; 16], j: &[f32; 16]) -> [f32; 16];
}

/// [`Look16`] by one `vpermps` of 16 lanes.
#[cfg(target_arch = "x86_64")]
struct Look512;

#[cfg(target_arch = "x86_64")]
impl Look16 for Look512 {
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn look(row: &[f32; 16], j: &[f32; 16]) -> [f32; 16] {
        use std::arch::x86_64::*;
        let mut o = [0f32; 16];
        // SAFETY: 16 floats are read from and written to arrays of 16 (unaligned
        // accesses); AVX-512F is enabled for this function.
        unsafe {
            let idx = _mm512_castps_si512(_mm512_loadu_ps(j.as_ptr()));
            let v = _mm512_permutexvar_ps(idx, _mm512_loadu_ps(row.as_ptr()));
            _mm512_storeu_ps(o.as_mut_ptr(), v);
        }
        o
    }
}

/// [`Look16`] on AVX2: each 8-lane half permutes both table halves and keeps the one
/// that index bit 3 names.
#[cfg(target_arch = "x86_64")]
struct Look256;

#[cfg(target_arch = "x86_64")]
impl Look16 for Look256 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn look(row: &[f32; 16], j: &[f32; 16]) -> [f32; 16] {
        use std::arch::x86_64::*;
        let mut o = [0f32; 16];
        // SAFETY: 8-float reads and writes within arrays of 16; AVX2 is enabled here.
        unsafe {
            let lo = _mm256_loadu_ps(row.as_ptr());
            let hi = _mm256_loadu_ps(row.as_ptr().add(8));
            for h in 0..2 {
                let idx = _mm256_castps_si256(_mm256_loadu_ps(j.as_ptr().add(8 * h)));
                let a = _mm256_permutevar8x32_ps(lo, idx);
                let b = _mm256_permutevar8x32_ps(hi, idx);
                let bit3 = _mm256_castsi256_ps(_mm256_slli_epi32::<28>(idx));
                _mm256_storeu_ps(o.as_mut_ptr().add(8 * h), _mm256_blendv_ps(a, b, bit3));
            }
        }
        o
    }
}

/// `out = L(x)` with the full 16-lane chunks through [`Lane::f16`] and the rest lane by
/// lane (the same bits either way).
///
/// # Safety
/// As [`Look16::look`] of `T`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn map_chunked<L: Lane, T: Look16>(x: &[f32], out: &mut [f32]) {
    let n = x.len() / 16 * 16;
    for (xc, oc) in x[..n].chunks_exact(16).zip(out[..n].chunks_exact_mut(16)) {
        let xc: &[f32; 16] = xc.try_into().expect("a chunk of 16");
        // SAFETY: the caller's contract.
        oc.copy_from_slice(&unsafe { L::f16::<true, T>(xc) });
    }
    map_body::<L, true>(&x[n..], &mut out[n..]);
}

/// [`map_chunked`] in place.
///
/// # Safety
/// As [`Look16::look`] of `T`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn inplace_chunked<L: Lane, T: Look16>(x: &mut [f32]) {
    let n = x.len() / 16 * 16;
    let (body, tail) = x.split_at_mut(n);
    for c in body.chunks_exact_mut(16) {
        let xc: [f32; 16] = (&*c).try_into().expect("a chunk of 16");
        // SAFETY: the caller's contract.
        c.copy_from_slice(&unsafe { L::f16::<true, T>(&xc) });
    }
    inplace_body::<L, true>(tail);
}

#[inline(always)]
fn map_body<L: Lane, const F: bool>(x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = L::f::<F>(v);
    }
    if L::SLOW {
        for (o, &v) in out.iter_mut().zip(x) {
            if L::needs_slow(v) {
                *o = L::slow(v);
            }
        }
    }
}

#[inline(always)]
fn inplace_body<L: Lane, const F: bool>(x: &mut [f32]) {
    if L::SLOW {
        // The fallback needs the original input: keep a copy of one L1-sized block.
        let mut buf = [0f32; 512];
        for chunk in x.chunks_mut(512) {
            let b = &mut buf[..chunk.len()];
            b.copy_from_slice(chunk);
            map_body::<L, F>(b, chunk);
        }
    } else {
        for v in x.iter_mut() {
            *v = L::f::<F>(*v);
        }
    }
}

/// Portable path: `out[i] = L(x[i])`.
pub(crate) fn map_portable<L: Lane>(x: &[f32], out: &mut [f32]) {
    map_body::<L, false>(x, out)
}

/// Portable path, in place.
pub(crate) fn inplace_portable<L: Lane>(x: &mut [f32]) {
    inplace_body::<L, false>(x)
}

/// AVX2+FMA path: `out[i] = L(x[i])`. Callers must have checked the CPU features.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn map_avx2<L: Lane>(x: &[f32], out: &mut [f32]) {
    if L::CHUNKED {
        // SAFETY: this function is compiled for AVX2 (Look256's feature).
        unsafe { map_chunked::<L, Look256>(x, out) }
    } else {
        map_body::<L, true>(x, out)
    }
}

/// AVX2+FMA path, in place. Callers must have checked the CPU features.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn inplace_avx2<L: Lane>(x: &mut [f32]) {
    if L::CHUNKED {
        // SAFETY: this function is compiled for AVX2 (Look256's feature).
        unsafe { inplace_chunked::<L, Look256>(x) }
    } else {
        inplace_body::<L, true>(x)
    }
}

/// AVX-512 path (16 lanes; the same operations as the AVX2+FMA path, so the same bits).
/// Callers must have checked the CPU features.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")]
pub(crate) fn map_avx512<L: Lane>(x: &[f32], out: &mut [f32]) {
    if L::CHUNKED {
        // SAFETY: this function is compiled for AVX-512F (Look512's feature).
        unsafe { map_chunked::<L, Look512>(x, out) }
    } else {
        map_body::<L, true>(x, out)
    }
}

/// AVX-512 path, in place. Callers must have checked the CPU features.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")]
pub(crate) fn inplace_avx512<L: Lane>(x: &mut [f32]) {
    if L::CHUNKED {
        // SAFETY: this function is compiled for AVX-512F (Look512's feature).
        unsafe { inplace_chunked::<L, Look512>(x) }
    } else {
        inplace_body::<L, true>(x)
    }
}
