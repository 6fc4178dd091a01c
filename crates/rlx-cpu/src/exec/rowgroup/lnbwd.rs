//! A LayerNorm (or RMSNorm) backward's row group in four (three) passes per row instead
//! of a pass per stage.
//!
//! The autodiff of `y = x̂·γ + β` (`x̂ = (x − μ)·r`, `r = 1/√(σ² + ε)`, `h = gy·γ`) fuses
//! into one row group of seven stages: `Σ gy` (dβ), `μ`, `r`, `Σ gy·x̂` (dγ), `mean h`,
//! `mean h·x̂`, and `dx = r·(h − mean h − x̂·mean h·x̂)`. As row programs, each stage is a
//! machine-code call per row writing its values out, then a separate fold over them:
//! seven calls and six folds per row (a `[1024, 256]` backward ran at a quarter of the
//! in-cache bandwidth). Here the sums are fused: Σx; Σ(x − μ)²; then one pass for
//! `Σ h`, `Σ h·x̂` and both column sums; and `dx` by its own stage's program.
//!
//! An RMSNorm backward (`x̂ = x·r`, `r = 1/√(mean x² + ε)`) is the same group without μ
//! and `mean h`: r, `Σ gy·x̂`, `mean h·x̂` and `dx = r·(h − x̂·mean h·x̂)`, three passes.
//! A column sum the gradient does not ask for (no dβ, no dγ) is simply absent.
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

/// A statistic: the load the later stages read it through, and the stage computing it.
type Stat = (Src, usize);

/// The stages a LayerNorm or RMSNorm backward's row group was recognized in.
pub(super) struct LnBwd {
    x: Src,
    gy: Src,
    gamma: Src,
    /// μ and mean h: a LayerNorm's; an RMSNorm backward has neither (no centring, and
    /// its `dx` has no `mean h` term).
    mu: Option<Stat>,
    mh: Option<Stat>,
    r: Stat,
    mhx: Stat,
    /// Column partials' indices: dβ's and dγ's, when the gradient asks for them.
    col_beta: Option<usize>,
    col_gamma: Option<usize>,
    /// The stage computing dx.
    dx_stage: usize,
}

/// The values a probe assigns: x, gy, γ, μ, r, mean h, mean h·x̂ (μ and mean h are 0
/// for an RMSNorm).
#[derive(Clone, Copy)]
struct Point([f64; 7]);

/// Probe points: spread signs and magnitudes, none a special value.
const POINTS: [[f64; 7]; 4] = [
    [0.73, -1.31, 1.07, 0.19, 2.3, -0.41, 0.67],
    [-2.9, 0.55, 0.93, -0.61, 0.37, 1.9, -1.13],
    [1.7, 2.2, -0.47, 1.1, 1.45, 0.29, 0.83],
    [-0.35, -0.77, 1.61, -1.4, 0.91, -2.3, -0.59],
];

/// What a stage must compute at a probe point (see [`Point`]).
type Rule = fn(&[f64; 7]) -> f64;

/// `x̂ = (x − μ)·r`.
fn xhat(v: &[f64; 7]) -> f64 {
    (v[0] - v[3]) * v[4]
}
/// dβ's column term and dγ's.
const DBETA: Rule = |v| v[1];
const DGAMMA: Rule = |v| v[1] * xhat(v);
/// The row statistics' terms: μ's, r's (before its `rsqrt` epilogue), mean h's, mean h·x̂'s.
const MU: Rule = |v| v[0];
const R: Rule = |v| (v[0] - v[3]) * (v[0] - v[3]);
const MH: Rule = |v| v[1] * v[2];
const MHX: Rule = |v| v[1] * v[2] * xhat(v);
/// `dx = r·(h − mean h − x̂·mean h·x̂)`.
const DX: Rule = |v| v[4] * (v[1] * v[2] - v[5] - xhat(v) * v[6]);

impl LnBwd {
    /// The LayerNorm or RMSNorm backward in `stages` (bound from `kernels`), if that is
    /// what they compute: the row statistics (LayerNorm: μ, r, mean h, mean h·x̂;
    /// RMSNorm: r, mean h·x̂) in any order, up to two column sums (dβ, dγ: whichever
    /// the gradient asks for) and one elementwise stage (dx). Each stage is told apart by
    /// what it computes, evaluated at the probe points.
    pub(super) fn detect(
        stages: &[Stage],
        kernels: &[rlx_compile::program::Kernel],
    ) -> Option<LnBwd> {
        let (mut rows, mut cols, mut ews) = (Vec::new(), Vec::new(), Vec::new());
        for (i, s) in stages.iter().enumerate() {
            match s {
                Stage::Row(_, Some((p, n))) => rows.push((i, p, *n)),
                Stage::Col(_, j, Some((p, n))) => cols.push((*j, p, *n)),
                Stage::Ew(_, true, Some((p, _))) => ews.push((i, p)),
                _ => return None,
            }
        }
        let [(dx_stage, pdx)] = ews[..] else {
            return None;
        };
        let [(dx_node, _)] = pdx.stores() else {
            return None;
        };
        if cols.len() > 2 {
            return None;
        }
        // A stage's only store (a statistic's buffer).
        let out = |k: usize| match &kernels[k].stores[..] {
            [s] => Some(s.buf),
            _ => None,
        };
        // A statistic's loads: a scalar per row of its buffer (the first reader's view),
        // read one element per row, as written.
        let stat = |k: usize| {
            let buf = out(k)?;
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
                .filter(|s| s.sr == 1 && s.off == 0)
                .map(|s| (s, k))
        };
        // The row stages in role order: [μ, r, mean h, mean h·x̂] or [r, mean h·x̂].
        let n = rows.len();
        if n != 4 && n != 2 {
            return None;
        }
        let orders: Vec<Vec<usize>> = (0..n.pow(n as u32))
            .map(|i| (0..n).map(|d| i / n.pow(d as u32) % n).collect::<Vec<_>>())
            .filter(|p| {
                let mut q = p.clone();
                q.sort_unstable();
                q.iter().enumerate().all(|(i, &k)| i == k)
            })
            .collect();
        for order in &orders {
            let role: Vec<_> = order.iter().map(|&k| rows[k]).collect();
            let (first, last) = (role[0], role[n - 1]);
            // x: the first statistic's one load (μ's, or an RMSNorm's r).
            let x = match first.1.srcs() {
                [s] if s.vec => *s,
                _ => continue,
            };
            // γ: the one vector load with no row stride in mean h·x̂; gy: its other
            // vector load that is not x.
            let vecs = || last.1.srcs().iter().filter(|s| s.vec);
            let Some(gamma) = vecs().find(|s| s.sr == 0).copied() else {
                continue;
            };
            let mut others = vecs().filter(|s| **s != x && **s != gamma);
            let (Some(&gy), None) = (others.next(), others.next()) else {
                continue;
            };
            let st: Vec<Option<Stat>> = role.iter().map(|r| stat(r.0)).collect();
            if st.iter().any(Option::is_none) {
                continue;
            }
            let st: Vec<Stat> = st.into_iter().flatten().collect();
            let (mu, r, mh, mhx) = if n == 4 {
                (Some(st[0]), st[1], Some(st[2]), st[3])
            } else {
                (None, st[0], None, st[1])
            };
            let ln = LnBwd {
                x,
                gy,
                gamma,
                mu,
                mh,
                r,
                mhx,
                col_beta: None,
                col_gamma: None,
                dx_stage,
            };
            let rules: &[Rule] = if n == 4 { &[MU, R, MH, MHX] } else { &[R, MHX] };
            let computes = |p: &RowProg, node: u32, rule: Rule| {
                let close = |got: f64, want: f64| (got - want).abs() <= 1e-9 * (1.0 + want.abs());
                POINTS.iter().all(|pt| {
                    let mut v = *pt;
                    if n == 2 {
                        (v[3], v[5]) = (0.0, 0.0);
                    }
                    let load = |s: &Src| ln.value(s, &Point(v));
                    close(p.probe(node, &load), rule(&v))
                })
            };
            let rows_ok = role
                .iter()
                .zip(rules)
                .all(|(r, rule)| computes(r.1, r.2, *rule));
            if !rows_ok || !computes(pdx, *dx_node, DX) {
                continue;
            }
            // Each column sum is dβ's or dγ's, told apart by its terms.
            let (mut col_beta, mut col_gamma, mut cols_ok) = (None, None, true);
            for &(j, p, node) in &cols {
                if col_beta.is_none() && computes(p, node, DBETA) {
                    col_beta = Some(j);
                } else if col_gamma.is_none() && computes(p, node, DGAMMA) {
                    col_gamma = Some(j);
                } else {
                    cols_ok = false;
                }
            }
            if cols_ok {
                return Some(LnBwd {
                    col_beta,
                    col_gamma,
                    ..ln
                });
            }
        }
        None
    }

    /// Which norm's backward this is, for `explain()`.
    pub(super) fn note(&self) -> &'static str {
        if self.mu.is_some() {
            "fused LayerNorm backward (4 passes per row)"
        } else {
            "fused RMSNorm backward (3 passes per row)"
        }
    }

    /// A probe's value for load `s` (NaN for a load that is none of the known ones, so
    /// that no check passes; x, gy and γ must be three different loads).
    fn value(&self, s: &Src, p: &Point) -> f64 {
        let known = [
            Some(self.x),
            Some(self.gy),
            Some(self.gamma),
            self.mu.map(|m| m.0),
            Some(self.r.0),
            self.mh.map(|m| m.0),
            Some(self.mhx.0),
        ];
        if self.x == self.gy || self.x == self.gamma || self.gy == self.gamma {
            return f64::NAN;
        }
        known
            .iter()
            .position(|k| *k == Some(*s))
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
        // μ (LayerNorm) or 0 (RMSNorm: `x − 0` is `x`, bit for bit).
        let mut st = vec![0f64; r1 - r0];
        if let Some((mu, smu)) = &self.mu {
            for (k, r) in (r0..r1).enumerate() {
                st[k] = row_sum(row(&self.x, r));
            }
            plan(*smu).finish_rows(bases, r0, r1, &st)?;
            for (k, r) in (r0..r1).enumerate() {
                st[k] = dev_sq(row(&self.x, r), row(mu, r)[0]);
            }
        } else {
            for (k, r) in (r0..r1).enumerate() {
                st[k] = dev_sq(row(&self.x, r), 0.0);
            }
        }
        plan(self.r.1).finish_rows(bases, r0, r1, &st)?;
        let mut st2 = vec![0f64; r1 - r0];
        // A column sum the gradient does not ask for goes to a spare row.
        let mut spare = [vec![], vec![]];
        for (k, want) in [self.col_beta, self.col_gamma].iter().enumerate() {
            if want.is_none() {
                spare[k] = vec![0f64; c];
            }
        }
        let [spare_b, spare_g] = &mut spare;
        let (cb, cg) = match (self.col_beta, self.col_gamma) {
            (Some(b), Some(g)) => {
                let (lo, hi) = (b.min(g), b.max(g));
                let (a, z) = sums.split_at_mut(hi);
                if b < g {
                    (&mut a[lo], &mut z[0])
                } else {
                    (&mut z[0], &mut a[lo])
                }
            }
            (Some(b), None) => (&mut sums[b], spare_g),
            (None, Some(g)) => (spare_b, &mut sums[g]),
            (None, None) => (spare_b, spare_g),
        };
        for (k, r) in (r0..r1).enumerate() {
            let (x, gy) = (row(&self.x, r), row(&self.gy, r));
            let mu = self.mu.map_or(0.0, |(m, _)| row(&m, r)[0]);
            let rr = row(&self.r.0, r)[0];
            let (h, hx) = h_sums(x, gy, gamma, (mu, rr), cg, cb);
            st[k] = h;
            st2[k] = hx;
        }
        if let Some((_, smh)) = self.mh {
            plan(smh).finish_rows(bases, r0, r1, &st)?;
        }
        plan(self.mhx.1).finish_rows(bases, r0, r1, &st2)?;
        let Stage::Ew(_, _, Some((p, _))) = &stages[self.dx_stage] else {
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
