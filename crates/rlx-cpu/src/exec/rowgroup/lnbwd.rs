//! A LayerNorm backward's row group in four passes per row instead of a pass per stage.
//!
//! The autodiff of `y = x̂·γ + β` (`x̂ = (x − μ)·r`, `r = 1/√(σ² + ε)`, `h = gy·γ`) fuses
//! into one row group of seven stages: `Σ gy` (dβ), `μ`, `r`, `Σ gy·x̂` (dγ), `mean h`,
//! `mean h·x̂`, and `dx = r·(h − mean h − x̂·mean h·x̂)`. As row programs, each stage is a
//! machine-code call per row writing its values out, then a separate fold over them:
//! seven calls and six folds per row (a `[1024, 256]` backward ran at a quarter of the
//! in-cache bandwidth). Here the sums are fused: Σx; Σ(x − μ)²; then one pass for
//! `Σ h`, `Σ h·x̂` and both column sums; and `dx` by its own stage's program.
//!
//! Nothing is assumed about how the compiler spelled the stages: each stage's row
//! program is *evaluated* at a few random points ([`RowProg::probe`]) and must equal the
//! value above (in f64, to 1e-9), its loads must be `x`, `gy`, `γ` (one per column) or
//! an earlier stage's per-row statistic; anything else keeps the stage-by-stage path.
//! Each statistic is finished by its own stage's plan (its mean, its `rsqrt(· + ε)`
//! epilogue), from sums of the same terms; only the order of additions inside a row
//! differs from the row programs (32 f32 lanes per 1024 elements, widened and added as a
//! fixed tree), and the column sums add each row's terms in f64 in row order. Results
//! depend on nothing but the shapes (not on threads or the machine's vector width).

use super::super::reduce::ReducePlan;
use super::Stage;
use super::rows::{RowProg, Src, row_sum};
use crate::math;

/// The stages a LayerNorm backward's row group was recognized in.
pub(super) struct LnBwd {
    x: Src,
    gy: Src,
    gamma: Src,
    /// The per-row statistics as the later stages read them: μ, r, mean h, mean h·x̂.
    mu: Src,
    r: Src,
    mh: Src,
    mhx: Src,
    /// Column partials: dβ's and dγ's index.
    col_beta: usize,
    col_gamma: usize,
    /// The stages of μ, r, mean h, mean h·x̂ and dx.
    stages: [usize; 5],
}

/// The values a probe assigns: x, gy, γ, μ, r, mean h, mean h·x̂.
#[derive(Clone, Copy)]
struct Point([f64; 7]);

/// A stage's program, the node checked and the value it must have at a probe point.
type Check<'a> = (&'a RowProg, u32, fn(&[f64; 7]) -> f64);

/// Probe points: spread signs and magnitudes, none a special value.
const POINTS: [[f64; 7]; 4] = [
    [0.73, -1.31, 1.07, 0.19, 2.3, -0.41, 0.67],
    [-2.9, 0.55, 0.93, -0.61, 0.37, 1.9, -1.13],
    [1.7, 2.2, -0.47, 1.1, 1.45, 0.29, 0.83],
    [-0.35, -0.77, 1.61, -1.4, 0.91, -2.3, -0.59],
];

impl LnBwd {
    /// The LayerNorm backward in `stages` (bound from `kernels`), if that is what they
    /// compute: two column sums, four row statistics and one elementwise stage, in any
    /// order (each is told apart by what it computes).
    pub(super) fn detect(
        stages: &[Stage],
        kernels: &[rlx_compile::program::Kernel],
    ) -> Option<LnBwd> {
        if stages.len() != 7 {
            return None;
        }
        let (mut rows, mut cols, mut ews) = (Vec::new(), Vec::new(), Vec::new());
        for (i, s) in stages.iter().enumerate() {
            match s {
                Stage::Row(_, Some((p, n))) => rows.push((i, p, *n)),
                Stage::Col(_, j, Some((p, n))) => cols.push((*j, p, *n)),
                Stage::Ew(_, true, Some((p, _))) => ews.push((i, p)),
                _ => return None,
            }
        }
        let ([_, _, _, _], [_, _], [(dx_stage, p6)]) = (&rows[..], &cols[..], &ews[..]) else {
            return None;
        };
        let [(dx_node, _)] = p6.stores() else {
            return None;
        };
        // A stage's only store (a statistic's buffer).
        let out = |k: usize| match &kernels[k].stores[..] {
            [s] => Some(s.buf),
            _ => None,
        };
        // A statistic's loads: a scalar per row of its buffer (the first reader's view).
        let stat = |buf: usize| {
            stages
                .iter()
                .filter_map(|s| match s {
                    Stage::Row(_, Some((p, _)))
                    | Stage::Col(_, _, Some((p, _)))
                    | Stage::Ew(_, _, Some((p, _))) => Some(p),
                    _ => None,
                })
                .flat_map(|p| p.srcs().iter().copied())
                .find(|s| s.buf == buf && !s.vec)
        };
        // dβ reads gy alone, μ reads x alone.
        let single = |p: &RowProg| match p.srcs() {
            [s] if s.vec => Some(*s),
            _ => None,
        };
        // Row stages in the order μ, r, mean h, mean h·x̂; column sums dβ, dγ.
        let dx = |v: &[f64; 7]| {
            let xh = (v[0] - v[3]) * v[4];
            v[4] * (v[1] * v[2] - v[5] - xh * v[6])
        };
        // The 24 orders of four stages, lexicographically.
        let perms4: Vec<[usize; 4]> = (0..256)
            .map(|i| [i / 64, i / 16 % 4, i / 4 % 4, i % 4])
            .filter(|p| {
                let mut q = *p;
                q.sort_unstable();
                q == [0, 1, 2, 3]
            })
            .collect();
        for perm in &perms4 {
            let [
                (imu, pmu, nmu),
                (ir, pr, nr),
                (imh, pmh, nmh),
                (imhx, pmhx, nmhx),
            ] = perm.map(|k| rows[k]);
            for (cb, cg) in [(cols[0], cols[1]), (cols[1], cols[0])] {
                let (Some(gy), Some(x)) = (single(cb.1), single(pmu)) else {
                    continue;
                };
                // γ: the one vector load with no row stride in `mean h`.
                let Some(gamma) = pmh.srcs().iter().find(|s| s.vec && s.sr == 0).copied() else {
                    continue;
                };
                let stats = [imu, ir, imh, imhx].map(|k| out(k).and_then(stat));
                let [Some(mu), Some(r), Some(mh), Some(mhx)] = stats else {
                    continue;
                };
                let ln = LnBwd {
                    x,
                    gy,
                    gamma,
                    mu,
                    r,
                    mh,
                    mhx,
                    col_beta: cb.0,
                    col_gamma: cg.0,
                    stages: [imu, ir, imh, imhx, *dx_stage],
                };
                // Every statistic is read one element per row, as written; x, gy, γ differ.
                if [mu, r, mh, mhx].iter().any(|s| s.sr != 1 || s.off != 0)
                    || x == gy
                    || x == gamma
                    || gy == gamma
                {
                    continue;
                }
                let checks: [Check<'_>; 6] = [
                    (cb.1, cb.2, |v| v[1]),
                    (pmu, nmu, |v| v[0]),
                    (pr, nr, |v| (v[0] - v[3]) * (v[0] - v[3])),
                    (cg.1, cg.2, |v| v[1] * (v[0] - v[3]) * v[4]),
                    (pmh, nmh, |v| v[1] * v[2]),
                    (pmhx, nmhx, |v| v[1] * v[2] * (v[0] - v[3]) * v[4]),
                ];
                let ok = |got: f64, want: f64| (got - want).abs() <= 1e-9 * (1.0 + want.abs());
                let all = POINTS.iter().all(|pt| {
                    let pt = Point(*pt);
                    let load = |s: &Src| ln.value(s, &pt);
                    checks
                        .iter()
                        .all(|(p, node, f)| ok(p.probe(*node, &load), f(&pt.0)))
                        && ok(p6.probe(*dx_node, &load), dx(&pt.0))
                });
                if all {
                    return Some(ln);
                }
            }
        }
        None
    }

    /// A probe's value for load `s` (NaN for a load that is none of the known ones, so
    /// that no check passes).
    fn value(&self, s: &Src, p: &Point) -> f64 {
        let known = [
            self.x, self.gy, self.gamma, self.mu, self.r, self.mh, self.mhx,
        ];
        known
            .iter()
            .position(|k| k == s)
            .map_or(f64::NAN, |i| p.0[i])
    }

    /// Rows `r0..r1` of the group: the statistics (finished by their stages' plans into
    /// their buffers), the column partials added into `sums`, then `dx` by its stage.
    ///
    /// # Safety
    /// `bases` are the group's bound buffers, `r0..r1` rows of its `c`-long rows,
    /// `scratch` holds the stages' largest scratch and `c` floats.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn run_block(
        &self,
        stages: &[Stage],
        bases: &[*mut u8],
        (r0, r1): (usize, usize),
        c: usize,
        sums: &mut [Vec<f64>],
        scratch: &mut [f32],
        vals: &mut Vec<super::rows::V>,
    ) -> Result<(), String> {
        let [smu, sr, smh, smhx, sdx] = self.stages;
        let plan = |i: usize| -> &ReducePlan {
            match &stages[i] {
                Stage::Row(r, _) => r,
                _ => unreachable!("detect checked the stage kinds"),
            }
        };
        let row = |s: &Src, row: usize| {
            // SAFETY: `s` is a load of the group planned over its space, so row `row` of it
            // (`c` floats for a vector load, one for a statistic) lies in its buffer (as
            // RowProg::eval reads it); nothing writes these rows during the block.
            unsafe {
                std::slice::from_raw_parts(
                    (bases[s.buf] as *const f32).offset(s.off + row as isize * s.sr),
                    if s.vec { c } else { 1 },
                )
            }
        };
        let gamma = row(&self.gamma, r0);
        let mut st: Vec<f64> = (r0..r1).map(|r| row_sum(row(&self.x, r))).collect();
        plan(smu).finish_rows(bases, r0, r1, &st)?;
        for (k, r) in (r0..r1).enumerate() {
            st[k] = dev_sq(row(&self.x, r), row(&self.mu, r)[0]);
        }
        plan(sr).finish_rows(bases, r0, r1, &st)?;
        let mut st2 = vec![0f64; r1 - r0];
        let (lo, hi) = (
            self.col_beta.min(self.col_gamma),
            self.col_beta.max(self.col_gamma),
        );
        let (a, b) = sums.split_at_mut(hi);
        let (cb, cg) = if self.col_beta < self.col_gamma {
            (&mut a[lo], &mut b[0])
        } else {
            (&mut b[0], &mut a[lo])
        };
        for (k, r) in (r0..r1).enumerate() {
            let (x, gy) = (row(&self.x, r), row(&self.gy, r));
            let (mu, rr) = (row(&self.mu, r)[0], row(&self.r, r)[0]);
            let (h, hx) = h_sums(x, gy, gamma, (mu, rr), cg, cb);
            st[k] = h;
            st2[k] = hx;
        }
        plan(smh).finish_rows(bases, r0, r1, &st)?;
        plan(smhx).finish_rows(bases, r0, r1, &st2)?;
        let Stage::Ew(_, _, Some((p, _))) = &stages[sdx] else {
            unreachable!("detect checked the stage kinds")
        };
        for r in r0..r1 {
            // SAFETY: as the group's own dx stage (RowGroupPlan::run): bound buffers, a row
            // of the space, dense f32 store rows; `scratch` as the caller guarantees.
            unsafe {
                let outs = p.store_rows(bases, r, c);
                let outs = &outs[..p.n_stores().min(outs.len())];
                if !p.run_jit(bases, r, c, outs) {
                    p.eval(bases, r, c, scratch, vals);
                    p.store(bases, r, c, vals);
                }
            }
        }
        Ok(())
    }
}

/// Lanes of the row sums: four 8-float vectors (two of AVX-512).
const L: usize = 32;

/// Fold 32 f32 lanes into f64 as a fixed tree (the same on every ISA).
#[inline(always)]
fn tree(l: [f32; L]) -> f64 {
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

math::wide_fn! {
    baseline = dev_sq_base;
    /// Σ (x − m)² (differences and squares in f32), in 32 f32 lanes per block of 1024,
    /// each block's lanes folded by [`tree`], the remainder in f64 in order; in f64 when
    /// a square overflows f32.
    fn dev_sq(x: &[f32], m: f32) -> f64 {
        let mut total = 0f64;
        for blk in x.chunks(1024) {
            let mut lanes = [0f32; L];
            let mut it = blk.chunks_exact(L);
            for ch in &mut it {
                let ch: &[f32; L] = ch.try_into().expect("chunks of 32");
                for k in 0..L {
                    let d = ch[k] - m;
                    lanes[k] += d * d;
                }
            }
            // Through a black box: the loop keeps whole vectors (LLVM's SLP vectorizer
            // split them when it saw the tree).
            total += tree(std::hint::black_box(lanes));
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
    /// [`dev_sq`] sums), adding `gy·x̂` into `dgamma` and `gy` into `dbeta` (f64, one
    /// addition per column: the column sums' row order is kept).
    fn h_sums(
        x: &[f32],
        gy: &[f32],
        gamma: &[f32],
        stats: (f32, f32),
        dgamma: &mut [f64],
        dbeta: &mut [f64],
    ) -> (f64, f64) {
        let (mu, r) = stats;
        let n = x.len();
        let (gy, gamma, dgamma, dbeta) = (&gy[..n], &gamma[..n], &mut dgamma[..n], &mut dbeta[..n]);
        let (mut th, mut thx) = (0f64, 0f64);
        let mut j0 = 0;
        while j0 < n {
            let j1 = (j0 + 1024).min(n);
            let (mut lh, mut lhx) = ([0f32; L], [0f32; L]);
            let full = j0 + (j1 - j0) / L * L;
            let mut j = j0;
            while j < full {
                let xs: &[f32; L] = x[j..j + L].try_into().expect("32");
                let gs: &[f32; L] = gy[j..j + L].try_into().expect("32");
                let ms: &[f32; L] = gamma[j..j + L].try_into().expect("32");
                let dg: &mut [f64; L] = (&mut dgamma[j..j + L]).try_into().expect("32");
                let db: &mut [f64; L] = (&mut dbeta[j..j + L]).try_into().expect("32");
                for k in 0..L {
                    let xh = (xs[k] - mu) * r;
                    let h = gs[k] * ms[k];
                    lh[k] += h;
                    lhx[k] += h * xh;
                    dg[k] += (gs[k] * xh) as f64;
                    db[k] += gs[k] as f64;
                }
                j += L;
            }
            th += tree(std::hint::black_box(lh));
            thx += tree(std::hint::black_box(lhx));
            for j in full..j1 {
                let xh = (x[j] - mu) * r;
                let h = gy[j] * gamma[j];
                th += h as f64;
                thx += (h * xh) as f64;
                dgamma[j] += (gy[j] * xh) as f64;
                dbeta[j] += gy[j] as f64;
            }
            j0 = j1;
        }
        if !(th.is_finite() && thx.is_finite()) {
            // An f32 lane overflowed (or the row holds ∞/NaN): the sums again in f64.
            th = 0.0;
            thx = 0.0;
            for j in 0..n {
                let xh = (x[j] - mu) * r;
                let h = gy[j] * gamma[j];
                th += h as f64;
                thx += (h * xh) as f64;
            }
        }
        (th, thx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_backward_sums_match_f64_sums_and_the_baseline_bits() {
        for n in [1usize, 7, 31, 32, 33, 256, 1000, 1025] {
            let f = |k: usize, s: f32| -> Vec<f32> {
                (0..n)
                    .map(|i| (((i * k) % 1013) as f32 / 1013.0 - 0.5) * s)
                    .collect()
            };
            let (x, gy, g) = (f(7919, 6.0), f(104_729, 2.0), f(31, 0.4));
            let (mu, r) = (0.3f32, 1.7f32);
            let (mut dg, mut db) = (vec![0.5f64; n], vec![-0.25f64; n]);
            let (mut dg2, mut db2) = (dg.clone(), db.clone());
            let (h, hx) = h_sums(&x, &gy, &g, (mu, r), &mut dg, &mut db);
            let (h2, hx2) = h_sums_base(&x, &gy, &g, (mu, r), &mut dg2, &mut db2);
            assert_eq!((h.to_bits(), hx.to_bits()), (h2.to_bits(), hx2.to_bits()));
            assert_eq!(dg, dg2);
            assert_eq!(db, db2);
            let (mut eh, mut ehx, mut abs) = (0f64, 0f64, 0f64);
            for j in 0..n {
                let xh = (x[j] - mu) * r;
                let hh = gy[j] * g[j];
                eh += hh as f64;
                ehx += (hh * xh) as f64;
                abs += (hh * xh).abs() as f64 + hh.abs() as f64;
                assert_eq!(dg[j], 0.5 + (gy[j] * xh) as f64, "n = {n}, column {j}");
                assert_eq!(db[j], -0.25 + gy[j] as f64);
            }
            assert!((h - eh).abs() <= 1e-6 * abs.max(1e-30), "n = {n}");
            assert!((hx - ehx).abs() <= 1e-6 * abs.max(1e-30), "n = {n}");
            let ed: f64 = x.iter().map(|&v| ((v - mu) * (v - mu)) as f64).sum();
            assert!(
                (dev_sq(&x, mu) - ed).abs() <= 1e-6 * ed.max(1e-30),
                "n = {n}"
            );
            assert_eq!(dev_sq(&x, mu).to_bits(), dev_sq_base(&x, mu).to_bits());
        }
        // ∞ in a row: the sums are not finite, as the f64 sums.
        let x = [1.0f32, f32::INFINITY, 2.0];
        let (mut dg, mut db) = (vec![0f64; 3], vec![0f64; 3]);
        let (h, hx) = h_sums(&x, &[1.0; 3], &[1.0; 3], (0.0, 1.0), &mut dg, &mut db);
        assert!(h.is_finite() && !hx.is_finite());
        assert!(!dev_sq(&x, 0.0).is_finite());
    }
}
