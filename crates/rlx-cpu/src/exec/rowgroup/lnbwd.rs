//! A LayerNorm (or RMSNorm) backward's row group in two passes per row instead of a
//! pass per stage.
//!
//! The autodiff of `y = x̂·γ + β` (`x̂ = (x − μ)·r`, `r = 1/√(σ² + ε)`, `h = gy·γ`) fuses
//! into one row group of seven stages: `Σ gy` (dβ), `μ`, `r`, `Σ gy·x̂` (dγ), `mean h`,
//! `mean h·x̂`, and `dx = r·(h − mean h − x̂·mean h·x̂)`. As row programs, each stage is a
//! machine-code call per row writing its values out, then a separate fold over them:
//! seven calls and six folds per row (a `[1024, 256]` backward ran at a quarter of the
//! in-cache bandwidth). Here ([`LnBwd::run_block`]) one pass over a row sums
//! `d = x − K`, `d²`, `h` and `h·d` (K: the mean of the row's first 16 elements) and adds
//! dβ's column terms; every statistic follows from those four sums; a second pass
//! writes dx and adds dγ's column terms. The shift keeps the one-pass variance from
//! cancelling (`Σd² − (Σd)²/n` loses nothing while |μ − K| is within σ); a row where
//! it is not, or whose sums are not finite, is summed again in exact passes (Σx, then
//! Σ(x − μ)², then Σh and Σh·x̂, as the stage-by-stage programs do).
//!
//! An RMSNorm backward (`x̂ = x·r`, `r = 1/√(mean x² + ε)`) is the same group without μ
//! and `mean h` (K = 0: nothing cancels): r, `Σ gy·x̂`, `mean h·x̂` and
//! `dx = r·(h − x̂·mean h·x̂)`. A column sum the gradient does not ask for (no dβ, no dγ)
//! is simply absent.
//!
//! Nothing is assumed about how the compiler spelled the stages: each stage's row
//! program is *evaluated* at a few random points ([`RowProg::probe`]) and must equal the
//! value above (in f64, to 1e-9), its loads must be `x`, `gy`, `γ` (one per column) or
//! an earlier stage's per-row statistic; anything else keeps the stage-by-stage path.
//! Each statistic is finished by its own stage's plan (its mean, its `rsqrt(· + ε)`
//! epilogue); dx is computed here as `((h − mean h) − x̂·mean h·x̂)·r`, in f32 operations
//! (the stage's own spelling may order them differently: a few ulps). Row sums add
//! 32 f32 lanes per 1024 elements, widened and added as a fixed tree; the column sums
//! add each row's terms in f64 in row order. Results depend on nothing but the shapes
//! (not on threads or the machine's vector width).

use super::super::reduce::ReducePlan;
use super::Stage;
use super::rows::{RowProg, Src, row_sum};

mod kern;

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
            "fused LayerNorm backward (2 passes per row)"
        } else {
            "fused RMSNorm backward (2 passes per row)"
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

    /// Rows `r0..r1` of the group in two passes per row. The first sums, per row,
    /// `d = x − K` (K: [`kern::shift`], 0 for an RMSNorm), `d²`, `h` and `h·d` (and adds
    /// dβ's column terms); the statistics follow from these sums and are finished by
    /// their stages' plans into their buffers (μ = K + Σd/n; Σ(x − μ)² = Σd² − δ(2Σd − nδ)
    /// with δ = μ − K; Σh·x̂ = r·(Σh·d − δ·Σh)). The second pass writes dx and adds dγ's
    /// column terms. A LayerNorm row whose shift is far from its mean (`2(Σd)² > n·Σd²`:
    /// |μ − K| above the row's σ), or whose sums are not finite, takes exact passes
    /// instead (Σx, then Σ(x − μ)², then Σh, Σh·x̂), as the stage-by-stage programs do.
    /// Column sums the gradient does not ask for are skipped.
    ///
    /// # Safety
    /// `bases` are the group's bound buffers, `r0..r1` rows of its `c`-long rows.
    pub(super) unsafe fn run_block(
        &self,
        stages: &[Stage],
        bases: &[*mut u8],
        (r0, r1): (usize, usize),
        c: usize,
        sums: &mut [Vec<f64>],
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
            // RowProg::eval reads it); nothing writes these rows while they are read as
            // slices (dx is written through raw pointers, after its row is read).
            unsafe {
                std::slice::from_raw_parts(
                    (bases[s.buf] as *const f32).offset(s.off + row as isize * s.sr),
                    if s.vec { c } else { 1 },
                )
            }
        };
        let Stage::Ew(_, _, Some((pdx, _))) = &stages[self.dx_stage] else {
            unreachable!("detect checked the stage kinds")
        };
        let gamma = row(&self.gamma, r0);
        let (db, dg): (&mut [f64], &mut [f64]) = match (self.col_beta, self.col_gamma) {
            (Some(b), Some(g)) => {
                let [db, dg] = sums
                    .get_disjoint_mut([b, g])
                    .expect("detect found two column sums");
                (db, dg)
            }
            (Some(b), None) => (&mut sums[b], &mut []),
            (None, Some(g)) => (&mut [], &mut sums[g]),
            (None, None) => (&mut [], &mut []),
        };
        let (nr, n, ln) = (r1 - r0, c as f64, self.mu.is_some());
        // Pass 1: each row's shift and sums [Σd, Σd², Σh, Σh·d], and whether they hold.
        let mut shifts = Vec::with_capacity(nr);
        let mut one = Vec::with_capacity(nr);
        for r in r0..r1 {
            let x = row(&self.x, r);
            let k = if ln { kern::shift(x) } else { 0.0 };
            one.push(kern::stats(x, row(&self.gy, r), gamma, k, ln, db));
            shifts.push(k);
        }
        let exact: Vec<bool> = one
            .iter()
            .map(|s| !s.iter().all(|v| v.is_finite()) || (ln && 2.0 * s[0] * s[0] > n * s[1]))
            .collect();
        let mut st = vec![0f64; nr];
        let mut st2 = vec![0f64; nr];
        // μ, then Σ(x − μ)² about the μ the later stages read (its f32 value).
        let mut delta = vec![0f64; nr];
        if let Some((mu, smu)) = &self.mu {
            for (i, r) in (r0..r1).enumerate() {
                st[i] = if exact[i] {
                    row_sum(row(&self.x, r))
                } else {
                    n * shifts[i] as f64 + one[i][0]
                };
            }
            plan(*smu).finish_rows(bases, r0, r1, &st)?;
            for (i, r) in (r0..r1).enumerate() {
                let m = row(mu, r)[0];
                st[i] = if exact[i] {
                    kern::dev_sq(row(&self.x, r), m)
                } else {
                    let d = m as f64 - shifts[i] as f64;
                    delta[i] = d;
                    (one[i][1] - d * (2.0 * one[i][0] - n * d)).max(0.0)
                };
            }
        } else {
            for (i, r) in (r0..r1).enumerate() {
                st[i] = if exact[i] {
                    kern::dev_sq(row(&self.x, r), 0.0)
                } else {
                    one[i][1]
                };
            }
        }
        plan(self.r.1).finish_rows(bases, r0, r1, &st)?;
        // Σh and Σh·x̂ with the r the later stages read.
        for (i, r) in (r0..r1).enumerate() {
            let mu = self.mu.map_or(0.0, |(m, _)| row(&m, r)[0]);
            let rr = row(&self.r.0, r)[0];
            (st[i], st2[i]) = if exact[i] {
                kern::h_sums(row(&self.x, r), row(&self.gy, r), gamma, mu, rr)
            } else {
                let s = one[i];
                (s[2], rr as f64 * (s[3] - delta[i] * s[2]))
            };
        }
        if let Some((_, smh)) = self.mh {
            plan(smh).finish_rows(bases, r0, r1, &st)?;
        }
        plan(self.mhx.1).finish_rows(bases, r0, r1, &st2)?;
        // Pass 2: dx, and dγ's column terms.
        for r in r0..r1 {
            let stat = |s: Option<Stat>| s.map_or(0.0, |(m, _)| row(&m, r)[0]);
            let sv = [
                stat(self.mu),
                row(&self.r.0, r)[0],
                stat(self.mh),
                row(&self.mhx.0, r)[0],
            ];
            let at = |s: &Src| {
                // SAFETY: as `row`, without making a slice (dx may be written over it).
                unsafe { (bases[s.buf] as *const f32).offset(s.off + r as isize * s.sr) }
            };
            // SAFETY: the dx stage's one store is a dense f32 buffer of the space
            // (RowProg::new), so its row `r` holds `c` floats and overlaps x or gy only
            // at the same element; x's and gy's rows hold `c` floats, γ `c`.
            unsafe {
                let out = pdx.store_rows(bases, r, c)[0];
                kern::dx_row(at(&self.x), at(&self.gy), gamma, sv, out, dg);
            }
        }
        Ok(())
    }
}
