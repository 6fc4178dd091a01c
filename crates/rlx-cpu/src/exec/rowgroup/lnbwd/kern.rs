//! The fused norm backward's row loops: one pass for a row's statistics' sums (and dβ's
//! column terms), one pass writing dx (and adding dγ's column terms), and the exact
//! sums a row falls back to when the one-pass sums would cancel.
//!
//! Every loop takes the row in fixed chunks of [`L`] floats (fixed-size arrays: no bounds
//! checks, whole vector registers) and sums each 1024-element block's f32 lanes as a
//! fixed tree into f64, the remainder in f64 in order; no operation is contracted into a
//! fused multiply-add, so the AVX-512, AVX2 and baseline builds give the same bits.

use crate::math;

/// Lanes of the row sums: four 8-float vectors (two of AVX-512) per sum.
const L: usize = 32;

/// Elements per block of f32 lanes (at most 32 terms per lane before they go to f64).
const BLK: usize = 1024;

/// Fold 32 f32 lanes into f64 as a fixed tree (the same on every ISA):
/// `q[k] = (l[k] + l[k+16]) + (l[k+8] + l[k+24])`, then `(q0 + q4) + (q2 + q6)` and
/// `(q1 + q5) + (q3 + q7)` added.
#[inline(always)]
fn tree(l: &[f32; L]) -> f64 {
    let mut h = [0f64; 16];
    for k in 0..16 {
        h[k] = l[k] as f64 + l[k + 16] as f64;
    }
    let mut q = [0f64; 8];
    for k in 0..8 {
        q[k] = h[k] + h[k + 8];
    }
    ((q[0] + q[4]) + (q[2] + q[6])) + ((q[1] + q[5]) + (q[3] + q[7]))
}

/// 32 f64 lanes added as [`tree`] adds its widened lanes.
#[inline(always)]
fn tree_f64(l: &[f64; L]) -> f64 {
    let mut q = [0f64; 8];
    for k in 0..8 {
        q[k] = (l[k] + l[k + 16]) + (l[k + 8] + l[k + 24]);
    }
    ((q[0] + q[4]) + (q[2] + q[6])) + ((q[1] + q[5]) + (q[3] + q[7]))
}

/// `N` sums' lanes folded by [`tree`] each. The AVX-512 and AVX2 builds fold with whole
/// vectors, the same additions in the same order: LLVM's SLP vectorizer split the plain
/// tree into two-lane pieces (about 75 instructions per sum where 15 do).
#[inline(always)]
fn fold<const N: usize>(l: &[[f32; L]; N]) -> [f64; N] {
    #[cfg(target_arch = "x86_64")]
    match math::wide_level() {
        // SAFETY: level 3 means AVX-512 F/DQ are available.
        3 => return unsafe { fold_512(l) },
        // SAFETY: level 2 means AVX2 is available.
        2 => return unsafe { fold_avx2(l) },
        _ => {}
    }
    let mut out = [0f64; N];
    for (o, w) in out.iter_mut().zip(l) {
        *o = tree(w);
    }
    out
}

/// [`fold`] in AVX-512: the four 8-lane quarters A..D widened, `(A + C) + (B + D)`,
/// then halves added. (No closures here: they would be compiled without this
/// function's features.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx2")]
unsafe fn fold_512<const N: usize>(l: &[[f32; L]; N]) -> [f64; N] {
    use std::arch::x86_64::*;
    let mut out = [0f64; N];
    for (o, w) in out.iter_mut().zip(l) {
        let p = w.as_ptr();
        // SAFETY: `w` holds 32 floats; each load reads 8 of them.
        let (a, b, c, d) = unsafe {
            (
                _mm512_cvtps_pd(_mm256_loadu_ps(p)),
                _mm512_cvtps_pd(_mm256_loadu_ps(p.add(8))),
                _mm512_cvtps_pd(_mm256_loadu_ps(p.add(16))),
                _mm512_cvtps_pd(_mm256_loadu_ps(p.add(24))),
            )
        };
        let q = _mm512_add_pd(_mm512_add_pd(a, c), _mm512_add_pd(b, d));
        let e = _mm256_add_pd(_mm512_castpd512_pd256(q), _mm512_extractf64x4_pd::<1>(q));
        let f = _mm_add_pd(_mm256_castpd256_pd128(e), _mm256_extractf128_pd::<1>(e));
        *o = _mm_cvtsd_f64(_mm_add_sd(f, _mm_unpackhi_pd(f, f)));
    }
    out
}

/// [`fold`] in AVX2: as [`fold_512`] with each quarter in two halves.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fold_avx2<const N: usize>(l: &[[f32; L]; N]) -> [f64; N] {
    use std::arch::x86_64::*;
    let mut out = [0f64; N];
    for (o, w) in out.iter_mut().zip(l) {
        let p = w.as_ptr();
        let mut v = [_mm256_setzero_pd(); 8];
        for (k, v) in v.iter_mut().enumerate() {
            // SAFETY: `w` holds 32 floats; each load reads 4 of them.
            *v = _mm256_cvtps_pd(unsafe { _mm_loadu_ps(p.add(4 * k)) });
        }
        // q[0..4] and q[4..8]: (A + C) + (B + D) by halves.
        let lo = _mm256_add_pd(_mm256_add_pd(v[0], v[4]), _mm256_add_pd(v[2], v[6]));
        let hi = _mm256_add_pd(_mm256_add_pd(v[1], v[5]), _mm256_add_pd(v[3], v[7]));
        let e = _mm256_add_pd(lo, hi);
        let f = _mm_add_pd(_mm256_castpd256_pd128(e), _mm256_extractf128_pd::<1>(e));
        *o = _mm_cvtsd_f64(_mm_add_sd(f, _mm_unpackhi_pd(f, f)));
    }
    out
}

/// The shift of a LayerNorm row's one-pass sums: the mean of its first 16 elements (of
/// all of them in a shorter row), in f32 as a fixed tree. It is near the row's mean for
/// most rows (within σ/4 for independent elements), which is all the sums need; a row
/// where it is not falls back to exact passes (see [`super::LnBwd::run_block`]).
pub(super) fn shift(x: &[f32]) -> f32 {
    match x.first_chunk::<16>() {
        Some(a) => {
            let mut h = [0f32; 8];
            for k in 0..8 {
                h[k] = a[k] + a[k + 8];
            }
            let q = [h[0] + h[4], h[1] + h[5], h[2] + h[6], h[3] + h[7]];
            ((q[0] + q[2]) + (q[1] + q[3])) * (1.0 / 16.0)
        }
        None if x.is_empty() => 0.0,
        None => x.iter().sum::<f32>() / x.len() as f32,
    }
}

math::wide_fn! {
    baseline = stats_base;
    /// One row's first-pass sums `[Σ d, Σ d², Σ h, Σ h·d]` with `d = x − k`, `h = gy·γ`,
    /// each term in f32, in 32 lanes per block of 1024 (f32 lanes folded by [`fold`]),
    /// the remainder in f64 in order; adds `gy` into `dbeta` (f64, one addition per
    /// column, so the column sums keep their row order) unless `dbeta` is empty.
    ///
    /// A LayerNorm's (`ln`) `d²` are summed exactly in f64 lanes ([`tree_f64`]), so that
    /// its shifted variance and r come out as the f64 oracle's but for near-ties. An
    /// RMSNorm's sums are `[0, Σ x², 0, Σ h·x]` (`k = 0`; no mean, no `Σ h`), `Σ x²` in
    /// f32 lanes (all terms positive: nothing cancels), bit for bit [`dev_sq`]`(x, 0)`.
    pub(super) fn stats(
        x: &[f32],
        gy: &[f32],
        gamma: &[f32],
        k: f32,
        ln: bool,
        dbeta: &mut [f64],
    ) -> [f64; 4] {
        match (ln, dbeta.is_empty()) {
            (true, true) => stats_in::<true, false>(x, gy, gamma, k, dbeta),
            (true, false) => stats_in::<true, true>(x, gy, gamma, k, dbeta),
            (false, true) => stats_in::<false, false>(x, gy, gamma, k, dbeta),
            (false, false) => stats_in::<false, true>(x, gy, gamma, k, dbeta),
        }
    }
}

/// [`stats`]' loop for a LayerNorm or RMSNorm row, with or without the column sum
/// (constants: four loops, no branch).
#[inline(always)]
fn stats_in<const LN: bool, const DB: bool>(
    x: &[f32],
    gy: &[f32],
    gamma: &[f32],
    k: f32,
    dbeta: &mut [f64],
) -> [f64; 4] {
    let n = x.len();
    let (gy, gamma) = (&gy[..n], &gamma[..n]);
    let db = if DB { &mut dbeta[..n] } else { &mut [][..] };
    let mut t = [0f64; 4];
    let mut b0 = 0;
    while b0 < n {
        let b1 = (b0 + BLK).min(n);
        // f32 lanes: LayerNorm Σd, Σh, Σh·d (Σd² in f64 lanes); RMSNorm Σx², -, Σh·x.
        let mut acc = [[0f32; L]; 3];
        let mut acc2 = [0f64; L];
        let full = b0 + (b1 - b0) / L * L;
        let mut j = b0;
        while j < full {
            let xs: &[f32; L] = x[j..j + L].try_into().expect("a chunk of L");
            let gs: &[f32; L] = gy[j..j + L].try_into().expect("a chunk of L");
            let ms: &[f32; L] = gamma[j..j + L].try_into().expect("a chunk of L");
            for q in 0..L {
                let d = xs[q] - k;
                let h = gs[q] * ms[q];
                if LN {
                    acc[0][q] += d;
                    acc2[q] += d as f64 * d as f64;
                    acc[1][q] += h;
                } else {
                    acc[0][q] += d * d;
                }
                acc[2][q] += h * d;
            }
            if DB {
                let b: &mut [f64; L] = (&mut db[j..j + L]).try_into().expect("a chunk of L");
                for q in 0..L {
                    b[q] += gs[q] as f64;
                }
            }
            j += L;
        }
        // Through a black box: the loop keeps whole vectors (LLVM's SLP vectorizer split
        // them when it saw the tree).
        if LN {
            let (lanes, lanes2) = std::hint::black_box((acc, acc2));
            let f = fold(&lanes);
            t[0] += f[0];
            t[1] += tree_f64(&lanes2);
            t[2] += f[1];
            t[3] += f[2];
        } else {
            let lanes = std::hint::black_box([acc[0], acc[2]]);
            let f = fold(&lanes);
            t[1] += f[0];
            t[3] += f[1];
        }
        for j in full..b1 {
            let d = x[j] - k;
            let h = gy[j] * gamma[j];
            if LN {
                t[0] += d as f64;
                t[1] += d as f64 * d as f64;
                t[2] += h as f64;
            } else {
                t[1] += (d * d) as f64;
            }
            t[3] += (h * d) as f64;
            if DB {
                db[j] += gy[j] as f64;
            }
        }
        b0 = b1;
    }
    t
}

math::wide_fn! {
    baseline = dx_row_base;
    /// One row's `dx = ((h − mean h) − x̂·mean h·x̂)·r` with `x̂ = (x − μ)·r`, `h = gy·γ`
    /// (`st = [μ, r, mean h, mean h·x̂]`, each operation in f32), written to `out`;
    /// adds `gy·x̂` into `dgamma` (f64, one addition per column) unless it is empty.
    ///
    /// # Safety
    /// `x`, `gy` and `out` hold `gamma.len()` floats each; `out` may be `x` or `gy` (a
    /// gradient written over its operand) but overlaps them at no other offset.
    pub(super) unsafe fn dx_row(
        x: *const f32,
        gy: *const f32,
        gamma: &[f32],
        st: [f32; 4],
        out: *mut f32,
        dgamma: &mut [f64],
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            if dgamma.is_empty() {
                dx_in::<false>(x, gy, gamma, st, out, dgamma)
            } else {
                dx_in::<true>(x, gy, gamma, st, out, dgamma)
            }
        }
    }
}

/// [`dx_row`]'s loop. Each chunk is read whole before it is written: `out` may be an input.
///
/// # Safety
/// As [`dx_row`].
#[inline(always)]
unsafe fn dx_in<const DG: bool>(
    x: *const f32,
    gy: *const f32,
    gamma: &[f32],
    st: [f32; 4],
    out: *mut f32,
    dgamma: &mut [f64],
) {
    let [mu, r, mh, mhx] = st;
    let n = gamma.len();
    let dg = if DG { &mut dgamma[..n] } else { &mut [][..] };
    let full = n / L * L;
    let mut j = 0;
    while j < full {
        // SAFETY: `j + L <= n`, inside the rows (caller); unaligned reads of plain floats.
        let (xs, gs) = unsafe {
            (
                std::ptr::read_unaligned(x.add(j) as *const [f32; L]),
                std::ptr::read_unaligned(gy.add(j) as *const [f32; L]),
            )
        };
        let ms: &[f32; L] = gamma[j..j + L].try_into().expect("a chunk of L");
        let (mut o, mut xh) = ([0f32; L], [0f32; L]);
        for q in 0..L {
            xh[q] = (xs[q] - mu) * r;
            let h = gs[q] * ms[q];
            o[q] = ((h - mh) - xh[q] * mhx) * r;
        }
        if DG {
            let g: &mut [f64; L] = (&mut dg[j..j + L]).try_into().expect("a chunk of L");
            for q in 0..L {
                g[q] += (gs[q] * xh[q]) as f64;
            }
        }
        // SAFETY: as the reads; the chunk's inputs are already read.
        unsafe { std::ptr::write_unaligned(out.add(j) as *mut [f32; L], o) };
        j += L;
    }
    for j in full..n {
        // SAFETY: `j < n` (caller's rows); read before the write, as above.
        let (xv, gv) = unsafe { (*x.add(j), *gy.add(j)) };
        let xh = (xv - mu) * r;
        let h = gv * gamma[j];
        if DG {
            dg[j] += (gv * xh) as f64;
        }
        // SAFETY: as the read.
        unsafe { *out.add(j) = ((h - mh) - xh * mhx) * r };
    }
}

math::wide_fn! {
    baseline = dev_sq_base;
    /// Σ (x − m)² (differences and squares in f32), in f32 lanes as [`stats`]' f32 sums; in f64 when a
    /// square overflows f32. A row's exact second pass, when its one-pass sums would cancel.
    pub(super) fn dev_sq(x: &[f32], m: f32) -> f64 {
        let mut total = 0f64;
        for blk in x.chunks(BLK) {
            let mut lanes = [0f32; L];
            let mut it = blk.chunks_exact(L);
            for ch in &mut it {
                let ch: &[f32; L] = ch.try_into().expect("chunks of L");
                for q in 0..L {
                    let d = ch[q] - m;
                    lanes[q] += d * d;
                }
            }
            total += tree(&std::hint::black_box(lanes));
            for &v in it.remainder() {
                total += ((v - m) * (v - m)) as f64;
            }
        }
        if !total.is_finite() {
            let m = m as f64;
            return x.iter().map(|&v| (v as f64 - m) * (v as f64 - m)).sum();
        }
        total
    }
}

math::wide_fn! {
    baseline = h_sums_base;
    /// One row's `(Σ h, Σ h·x̂)` with `h = gy·γ`, `x̂ = (x − μ)·r` (in f32, summed as
    /// [`stats`]; again in f64 when an f32 lane overflows): the exact sums of a row whose
    /// one-pass sums would cancel or are not finite.
    pub(super) fn h_sums(x: &[f32], gy: &[f32], gamma: &[f32], mu: f32, r: f32) -> (f64, f64) {
        let n = x.len();
        let (gy, gamma) = (&gy[..n], &gamma[..n]);
        let (mut th, mut thx) = (0f64, 0f64);
        let mut b0 = 0;
        while b0 < n {
            let b1 = (b0 + BLK).min(n);
            let (mut lh, mut lhx) = ([0f32; L], [0f32; L]);
            let full = b0 + (b1 - b0) / L * L;
            let mut j = b0;
            while j < full {
                let xs: &[f32; L] = x[j..j + L].try_into().expect("a chunk of L");
                let gs: &[f32; L] = gy[j..j + L].try_into().expect("a chunk of L");
                let ms: &[f32; L] = gamma[j..j + L].try_into().expect("a chunk of L");
                for q in 0..L {
                    let h = gs[q] * ms[q];
                    lh[q] += h;
                    lhx[q] += h * ((xs[q] - mu) * r);
                }
                j += L;
            }
            let f = fold(&std::hint::black_box([lh, lhx]));
            th += f[0];
            thx += f[1];
            for j in full..b1 {
                let h = gy[j] * gamma[j];
                th += h as f64;
                thx += (h * ((x[j] - mu) * r)) as f64;
            }
            b0 = b1;
        }
        if !(th.is_finite() && thx.is_finite()) {
            // An f32 lane overflowed (or the row holds ∞/NaN): the sums again in f64.
            (th, thx) = (0.0, 0.0);
            for j in 0..n {
                let h = gy[j] * gamma[j];
                th += h as f64;
                thx += (h * ((x[j] - mu) * r)) as f64;
            }
        }
        (th, thx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic spread values: `s·(u − 0.5)` for `u` in [0, 1).
    fn spread(n: usize, k: usize, s: f32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * k) % 1013) as f32 / 1013.0 - 0.5) * s)
            .collect()
    }

    /// The one-pass sums and dx against f64 sums, the scalar formula and the baseline
    /// build's bits, at lengths around the lane and block sizes.
    #[test]
    fn two_pass_loops_match_f64_sums_the_scalar_formula_and_the_baseline_bits() {
        for n in [
            1usize, 7, 15, 16, 17, 31, 32, 33, 256, 300, 1000, 1024, 1025, 2100,
        ] {
            let (x, gy, g) = (
                spread(n, 7919, 6.0),
                spread(n, 104_729, 2.0),
                spread(n, 31, 0.4),
            );
            let k = shift(&x);
            let (mut db, mut db2) = (vec![-0.25f64; n], vec![-0.25f64; n]);
            let s = stats(&x, &gy, &g, k, true, &mut db);
            let bits = |s: [f64; 4]| s.map(f64::to_bits);
            let s2 = stats_base(&x, &gy, &g, k, true, &mut db2);
            assert_eq!(bits(s), bits(s2), "n = {n}");
            assert_eq!(db, db2);
            // Without the column sum: the same row sums.
            let s3 = stats(&x, &gy, &g, k, true, &mut []);
            assert_eq!(bits(s), bits(s3), "n = {n}");
            // An RMSNorm row: Σx² as dev_sq(x, 0) (bit for bit), Σh·x as a LayerNorm
            // row's Σh·d with k = 0; the same column terms.
            let mut db3 = vec![-0.25f64; n];
            let rs = stats(&x, &gy, &g, 0.0, false, &mut db3);
            let ls = stats_base(&x, &gy, &g, 0.0, true, &mut []);
            let rs2 = stats_base(&x, &gy, &g, 0.0, false, &mut []);
            assert_eq!(bits(rs), bits(rs2), "n = {n}");
            assert_eq!(rs[1].to_bits(), dev_sq(&x, 0.0).to_bits(), "n = {n}");
            assert_eq!((rs[0], rs[2], rs[3].to_bits()), (0.0, 0.0, ls[3].to_bits()));
            assert_eq!(db3, db, "n = {n}");
            let (mut want, mut abs) = ([0f64; 4], [0f64; 4]);
            for j in 0..n {
                let d = x[j] - k;
                let h = gy[j] * g[j];
                let terms = [d as f64, d as f64 * d as f64, h as f64, (h * d) as f64];
                for (w, (a, t)) in want.iter_mut().zip(abs.iter_mut().zip(terms)) {
                    *w += t;
                    *a += t.abs();
                }
                assert_eq!(db[j], -0.25 + gy[j] as f64, "n = {n}, column {j}");
            }
            for q in 0..4 {
                assert!(
                    (s[q] - want[q]).abs() <= 1e-6 * abs[q].max(1e-30),
                    "n = {n} sum {q}"
                );
            }
            // Σd² in f64 lanes: to f64 rounding.
            assert!(
                (s[1] - want[1]).abs() <= 1e-13 * want[1].max(1e-30),
                "n = {n}"
            );

            let st = [0.3f32, 1.7, -0.2, 0.45];
            let (mut out, mut out2) = (vec![0f32; n], vec![0f32; n]);
            let (mut dg, mut dg2) = (vec![0.5f64; n], vec![0.5f64; n]);
            // SAFETY: every row holds n floats; the outputs are separate.
            unsafe {
                dx_row(x.as_ptr(), gy.as_ptr(), &g, st, out.as_mut_ptr(), &mut dg);
                dx_row_base(x.as_ptr(), gy.as_ptr(), &g, st, out2.as_mut_ptr(), &mut dg2);
            }
            assert_eq!(out, out2, "n = {n}");
            assert_eq!(dg, dg2, "n = {n}");
            for j in 0..n {
                let xh = (x[j] - st[0]) * st[1];
                let h = gy[j] * g[j];
                assert_eq!(out[j], ((h - st[2]) - xh * st[3]) * st[1], "n = {n}, {j}");
                assert_eq!(dg[j], 0.5 + (gy[j] * xh) as f64, "n = {n}, column {j}");
            }
            // dx written over gy (an in-place gradient): the same values.
            let mut inplace = gy.clone();
            let p = inplace.as_mut_ptr();
            // SAFETY: as above; `out` is `gy` itself, element for element.
            unsafe { dx_row(x.as_ptr(), p, &g, st, p, &mut []) };
            assert_eq!(inplace, out, "n = {n} in place");

            let (h, hx) = h_sums(&x, &gy, &g, 0.3, 1.7);
            let (h2, hx2) = h_sums_base(&x, &gy, &g, 0.3, 1.7);
            assert_eq!((h.to_bits(), hx.to_bits()), (h2.to_bits(), hx2.to_bits()));
            let (mut eh, mut ehx, mut a) = (0f64, 0f64, 0f64);
            for j in 0..n {
                let hh = gy[j] * g[j];
                let t = hh * ((x[j] - 0.3) * 1.7);
                (eh, ehx, a) = (
                    eh + hh as f64,
                    ehx + t as f64,
                    a + (hh.abs() + t.abs()) as f64,
                );
            }
            assert!(
                (h - eh).abs() <= 1e-6 * a && (hx - ehx).abs() <= 1e-6 * a,
                "n = {n}"
            );
            let ed: f64 = x.iter().map(|&v| ((v - 0.3) * (v - 0.3)) as f64).sum();
            assert!(
                (dev_sq(&x, 0.3) - ed).abs() <= 1e-6 * ed.max(1e-30),
                "n = {n}"
            );
            assert_eq!(dev_sq(&x, 0.3).to_bits(), dev_sq_base(&x, 0.3).to_bits());
        }
    }

    #[test]
    fn vector_folds_add_the_lanes_in_the_portable_trees_order() {
        for seed in 0..50usize {
            let l: [[f32; L]; 3] = std::array::from_fn(|w| {
                std::array::from_fn(|k| {
                    let v = ((k * 7919 + w * 31 + seed * 104_729) % 1013) as f32 - 506.0;
                    // Magnitudes 2^-20..2^20 so that the order of the additions shows.
                    v * 2f32.powi(((k * 13 + w + seed) % 41) as i32 - 20)
                })
            });
            let want = l.map(|w| tree(&w).to_bits());
            assert_eq!(fold(&l).map(f64::to_bits), want, "seed {seed}");
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: AVX2 is available.
                    assert_eq!(unsafe { fold_avx2(&l) }.map(f64::to_bits), want);
                }
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                {
                    // SAFETY: AVX-512 F and DQ are available.
                    assert_eq!(unsafe { fold_512(&l) }.map(f64::to_bits), want);
                }
            }
            // The f64 tree adds the widened lanes in the same order.
            assert_eq!(tree_f64(&l[0].map(f64::from)).to_bits(), want[0]);
        }
    }

    #[test]
    fn shift_is_the_mean_of_the_first_sixteen_elements() {
        let x: Vec<f32> = (0..40).map(|i| i as f32).collect();
        assert_eq!(shift(&x), 7.5);
        assert_eq!(shift(&x[..5]), 2.0);
        assert_eq!(shift(&[]), 0.0);
        assert_eq!(shift(&[3.0; 16]), 3.0);
    }

    #[test]
    fn overflowing_or_infinite_rows_give_non_finite_one_pass_sums_and_exact_fallbacks() {
        // ∞ in a row: the one-pass sums are not finite (the row falls back), as the f64 sums.
        let x = [1.0f32, f32::INFINITY, 2.0];
        let s = stats(&x, &[1.0; 3], &[1.0; 3], shift(&x), true, &mut []);
        assert!(!s.iter().all(|v| v.is_finite()));
        let (h, hx) = h_sums(&x, &[1.0; 3], &[1.0; 3], 0.0, 1.0);
        assert!(h.is_finite() && !hx.is_finite());
        assert!(!dev_sq(&x, 0.0).is_finite());
        // Squares past f32's range: Σd² (in f64) holds, Σh·d overflows (the row falls
        // back); dev_sq finishes in f64.
        let big = [3e19f32, -3e19, 1e19];
        let s = stats(&big, &[1e30; 3], &[1.0; 3], 0.0, true, &mut []);
        assert!(s[1].is_finite() && !s[3].is_finite());
        // An RMSNorm row's Σx² in f32 lanes overflows: the row falls back to dev_sq.
        assert!(!stats(&big, &[1.0; 3], &[1.0; 3], 0.0, false, &mut [])[1].is_finite());
        let want: f64 = big.iter().map(|&v| (v as f64).powi(2)).sum();
        assert!((dev_sq(&big, 0.0) - want).abs() <= 1e-6 * want);
    }
}
