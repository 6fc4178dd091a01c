//! The error-function lane kernels the JIT emits in full — `erf` and exact GELU
//! (`x·Φ(x)`) — each as the same sequence of IEEE operations as its `math::special` lane
//! kernel on the FMA path (`F = true`, which both the AVX2+FMA and the AVX-512
//! interpreter paths run), so the bits agree.
//!
//! Both evaluate piecewise polynomials of sixteen intervals (`math::erf_tables`), each
//! coefficient read with one `vpermps` from a 16-float table in the constant pool: erf's
//! polynomial is erf itself on [0.75, 4.75], GELU's Φ itself on [−4.0625, 5.9375] and,
//! for lanes below −4 (an out-of-line branch, rarely taken), the smooth factor `M` of the
//! Gaussian tail `Φ(−a) = e^(−a²/2)·M(a)`. Mask `k6` holds the lane choices, `k7` GELU's
//! tail lanes.
//!
//! The fused GELU-derivative code (`dgelu.rs`) reads the same tables through
//! [`Lower::table_poly`].

use super::special::{exp_mant, load_const};
use super::{Lower, R8, Temps};
use crate::jit::x86::{Asm, Cmp, JE, K6, K7, Mem, Src, Zmm};
// The clamps of |x| for GELU and erf and the polynomial tables are `math::special`'s
// own constants: the emitted code must compute its bits.
use crate::math::erf_tables::{ERF_C0, ERF_D, ERF_LO, GELU_M, GELU_PHI};
use crate::math::special::{
    ERF_MAX, ERF_SCALE, ERF_STEP, GELU_BIAS, GELU_HI, GELU_LO, GELU_MAX, GELU_UNBIAS, PHI_SCALE,
    PHI_SHIFT, PHI_STEP,
};

/// `math::special`'s 1.5·2²³: `s + SHIFTER` holds `round(s)` in its low mantissa bits,
/// the low four of which index the tables.
const SHIFTER: f32 = 12_582_912.0;
const SIGN: u32 = 0x8000_0000;
const ABS: u32 = 0x7FFF_FFFF;

/// Every f32 constant erf and GELU read from the pool (besides
/// [`super::special::exp_consts`]).
pub(super) fn erf_consts() -> Vec<u32> {
    vec![
        ERF_SCALE.to_bits(),
        ERF_STEP.to_bits(),
        GELU_MAX.to_bits(),
        ERF_MAX.to_bits(),
        SIGN,
        ABS,
        0,
        1f32.to_bits(),
        (-0.5f32).to_bits(),
        f32::NEG_INFINITY.to_bits(),
        GELU_BIAS as u32,
        GELU_UNBIAS.to_bits(),
        SHIFTER.to_bits(),
        4f32.to_bits(),
        (-3.5f32).to_bits(),
        GELU_HI.to_bits(),
        GELU_LO.to_bits(),
        PHI_SCALE.to_bits(),
        PHI_SHIFT.to_bits(),
        PHI_STEP.to_bits(),
    ]
}

/// The polynomial tables erf and GELU read, as 64-bit pool entries (two floats each):
/// the prologue pools each row's eight entries as one contiguous run of 16 floats,
/// which [`Lower::table`] finds and `vpermps` reads whole.
pub(super) fn erf_consts64() -> Vec<u64> {
    ERF_D
        .iter()
        .chain([&ERF_C0, &ERF_LO])
        .chain(&GELU_M)
        .chain(&GELU_PHI)
        .flat_map(|row| {
            row.chunks(2)
                .map(|p| u64::from(p[0].to_bits()) | u64::from(p[1].to_bits()) << 32)
        })
        .collect()
}

impl Lower<'_> {
    pub(super) fn cf(&self, v: f32) -> Src {
        self.creg(v.to_bits())
    }

    /// The pool address of the 16-float table `row` (pooled by the prologue from
    /// [`erf_consts64`] as one contiguous run).
    fn table(&self, row: &[f32; 16]) -> Mem {
        let bits = row.map(f32::to_bits);
        let k = self
            .consts
            .windows(16)
            .position(|w| w == bits)
            .expect("the prologue pools each erf/GELU table row as one contiguous run");
        Mem::BaseDisp(R8, 4 * k as i32)
    }

    /// `math::special::table_poly`: the polynomial of table `tab` (row `r`: the
    /// coefficients of `tʳ`) in interval `j & 15` (`j`'s bits) at `t`, into `d`, by
    /// Horner with each coefficient looked up by `vpermps`; `d`, `q`, `j`, `t` distinct.
    pub(super) fn table_poly<const N: usize>(
        &self,
        a: &mut Asm,
        (d, q): (Zmm, Zmm),
        tab: &[[f32; 16]; N],
        j: Zmm,
        t: Zmm,
    ) {
        a.vpermps(d, j, self.table(&tab[N - 1]));
        for r in (0..N - 1).rev() {
            a.vpermps(q, j, self.table(&tab[r]));
            a.vfmadd213ps(d, t, q);
        }
    }

    /// `erf x` as `math::special::erf`: the table polynomial of `c = min(|x|, 4.7)` in
    /// the interval `round(3.2c)` at `c − 0.3125·round(3.2c)`, with the sign of `x`;
    /// into `d` (5 temps).
    pub(super) fn erf(&self, a: &mut Asm, t: &mut Temps, d: Zmm, x: Zmm) {
        let [c, j, p, q, r] = t.many::<5>();
        // c = min(|x|, ERF_MAX), NaN kept
        a.vandps(c, x, self.creg(ABS));
        a.vcmpps(K6, c, self.cf(ERF_MAX), Cmp::GtOq);
        a.vblendmps(c, K6, c, self.cf(ERF_MAX));
        // j = c·3.2 + SHIFTER; t = c − 0.3125·(j − SHIFTER), exact (into c)
        load_const(a, j, self.cf(ERF_SCALE));
        a.vfmadd213ps(j, c, self.cf(SHIFTER));
        a.vsubps(q, j, self.cf(SHIFTER));
        a.vfmadd231ps(c, q, self.cf(ERF_STEP));
        // p = t·p1 + (t·lo + c0), p1 the polynomial of rows t¹…t⁶
        self.table_poly(a, (p, q), &ERF_D, j, c);
        a.vpermps(q, j, self.table(&ERF_LO));
        a.vpermps(r, j, self.table(&ERF_C0));
        a.vfmadd213ps(q, c, r);
        a.vfmadd213ps(p, c, q);
        // p | sign(x)  (p ≥ 0)
        a.vandps(q, x, self.creg(SIGN));
        a.vorps(d, p, q);
    }

    /// Exact GELU as `math::special::gelu`, into `d` (11 temps): `x·Φ(min(x, 5.875))`
    /// with Φ the table polynomial of interval `round(1.6c) + 6`; where a lane lies below
    /// −4 (k7), a branch (not taken for most vectors) runs [`Lower::gelu_tail`] on all 16
    /// lanes and blends those lanes in.
    pub(super) fn gelu_erf(&self, a: &mut Asm, t: &mut Temps, d: Zmm, x: Zmm) {
        if std::env::var_os("RLX_GELU_PHI").is_some_and(|v| v == "0") {
            // Measurement switch, read at each compile (same-process A/B): the tail kernel
            // on every lane, as before the Φ table. Its bits differ from the interpreter's
            // (which has no switch) within the GELU bound.
            let v = self.gelu_tail(a, t, x);
            a.vmovaps(d, v);
            return;
        }
        // Done with before the tail takes the same registers.
        let [c, j, p, q] = t.peek::<4>();
        // c = min(x, GELU_HI) (NaN: GELU_HI; the product with x below gives x's NaN)
        a.vminps(c, x, self.cf(GELU_HI));
        // j = c·1.6 + (SHIFTER + 6); t = c − 0.625·(j − SHIFTER − 6), exact (into c)
        load_const(a, j, self.cf(PHI_SCALE));
        a.vfmadd213ps(j, c, self.cf(PHI_SHIFT));
        a.vsubps(q, j, self.cf(PHI_SHIFT));
        a.vfmadd231ps(c, q, self.cf(PHI_STEP));
        self.table_poly(a, (p, q), &GELU_PHI, j, c);
        a.vmulps(d, x, p);
        // Lanes below GELU_LO (k7; never NaN): the tail kernel, jumped over when none.
        a.vcmpps(K7, x, self.cf(GELU_LO), Cmp::LtOq);
        a.kortestw(K7, K7);
        let skip = a.jump(Some(JE));
        let v = self.gelu_tail(a, t, x);
        a.vblendmps(d, K7, d, v);
        a.patch(skip, a.code.len());
    }

    /// Exact GELU as `math::special::gelu_tail`: with `v = Φ(−|x|) = e^(−x²/2)·M(|x|)`
    /// (|x| clamped at 15.49, v = 0 past it), `(p·2^(n+64)·(x·M))·2⁻⁶⁴` for negative x
    /// and `x·(1 − v)` otherwise; −0 at −∞; returns the temp holding it (11 temps).
    fn gelu_tail(&self, a: &mut Asm, t: &mut Temps, x: Zmm) -> Zmm {
        let [c, m, h, l, e1] = t.many::<5>();
        // c = min(|x|, max) (k6: clamped); h + l = c·(−c/2) exactly
        a.vandps(c, x, self.creg(ABS));
        a.vcmpps(K6, c, self.cf(GELU_MAX), Cmp::GtOq);
        a.vblendmps(c, K6, c, self.cf(GELU_MAX));
        a.vmulps(e1, c, self.cf(-0.5));
        a.vmulps(h, c, e1);
        a.vmovaps(l, c);
        a.vfmsub213ps(l, e1, h);
        let ec = self.exp_regs();
        let (p, s, _) = exp_mant(a, &ec, t, h, Some(l));
        // p += (n + GELU_BIAS) << 23 (its exponent field); then p = 0 past the clamp (k6)
        a.vpaddd(s, s, self.creg(GELU_BIAS as u32));
        a.vpslld(s, s, 23);
        a.vpaddd(p, p, s);
        a.vblendmps(p, K6, p, self.cf(0.0));
        // m = M(c): the table polynomial of interval round(c) at c − round(c)
        a.vaddps(h, c, self.cf(SHIFTER));
        a.vsubps(l, h, self.cf(SHIFTER));
        a.vsubps(l, c, l);
        self.table_poly(a, (m, e1), &GELU_M, h, l);
        // neg = x < 0 (k6); v = (p·(sel(neg, x, 1)·M))·2^−GELU_BIAS  (into c)
        a.vcmpps(K6, x, self.cf(0.0), Cmp::LtOq);
        load_const(a, c, self.cf(1.0));
        a.vblendmps(c, K6, c, x);
        a.vmulps(c, c, m);
        a.vmulps(c, p, c);
        a.vmulps(c, c, self.cf(GELU_UNBIAS));
        // neg ? v : x·(1 − v)  (into h); then x = −∞ → −0
        load_const(a, h, self.cf(1.0));
        a.vsubps(h, h, c);
        a.vmulps(h, x, h);
        a.vblendmps(h, K6, h, c);
        a.vcmpps(K6, x, self.cf(f32::NEG_INFINITY), Cmp::EqOq);
        a.vblendmps(h, K6, h, self.creg(SIGN));
        h
    }
}
