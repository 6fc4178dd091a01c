//! The error-function lane kernels the JIT emits in full — `erf` and exact GELU
//! (`½x·erfc(−x/√2)`) — each as the same sequence of IEEE operations as its
//! `math::special` lane kernel on the FMA path (`F = true`, which both the AVX2+FMA and
//! the AVX-512 interpreter paths run), so the bits agree.
//!
//! Masks: `k5` holds erfc's "past the clamp" lanes across the exponential (which uses
//! `k2`); `k6` and `k7` hold the callers' lane choices across the erfc call.

use super::special::{clamp, exp_parts, load_const};
use super::{Lower, Temps};
use crate::jit::x86::{Asm, Cmp};

// Constants of `math::special::erf_small`: erf z = z·E(z²) on |z| < ERF_SMALL.
const ERF_SMALL: f32 = 0.75;
const E0_HI: f32 = std::f32::consts::FRAC_2_SQRT_PI;
const E0_LO: f32 = -5.863_538e-8;
const E: [f32; 5] = [
    -0.376_126_2,
    0.112_833_77,
    -0.026_834_624,
    0.005_114_345_3,
    -0.000_674_951_24,
];

// Constants of `math::special::erfc_pos_mul`: erfc a = t·exp(−a² + P(t − ½)),
// t = 2/(2 + a), P's constant term split into hi + lo.
const ERFC_SMALL: f32 = 0.5;
const ERFC_MAX: f32 = 10.5;
const P0_HI: f32 = -0.671_794_06;
const P0_LO: f32 = -2.777_248_5e-8;
/// `P1..=P9`.
const P: [f32; 9] = [
    1.345_286_4,
    0.189_373_57,
    -0.375_156_55,
    -0.157_993_76,
    0.281_960_96,
    0.113_567_48,
    -0.290_806_8,
    -0.051_781_89,
    0.252_995_4,
];

// Constants of `math::special::gelu`: the clamp ±16 and −1/√2 as hi + lo.
const GELU_LIM: f32 = 16.0;
const NEG_FRAC_1_SQRT2_HI: f32 = -0.707_106_77;
const NEG_FRAC_1_SQRT2_LO: f32 = -1.210_161_7e-8;

const SIGN: u32 = 0x8000_0000;
const ABS: u32 = 0x7FFF_FFFF;

/// Every constant erf and GELU read from the pool (besides [`super::special::exp_consts`]).
pub(super) fn erf_consts() -> Vec<u32> {
    let mut v = vec![
        ERF_SMALL.to_bits(),
        E0_HI.to_bits(),
        E0_LO.to_bits(),
        ERFC_SMALL.to_bits(),
        ERFC_MAX.to_bits(),
        P0_HI.to_bits(),
        P0_LO.to_bits(),
        GELU_LIM.to_bits(),
        (-GELU_LIM).to_bits(),
        NEG_FRAC_1_SQRT2_HI.to_bits(),
        NEG_FRAC_1_SQRT2_LO.to_bits(),
        SIGN,
        ABS,
        0,
        0.5f32.to_bits(),
        1f32.to_bits(),
        2f32.to_bits(),
        f32::NEG_INFINITY.to_bits(),
    ];
    v.extend(E.map(f32::to_bits));
    v.extend(P.map(f32::to_bits));
    v
}

/// Scratch registers `erfc_pos_mul` takes from its caller's [`Temps`].
const ERFC_TEMPS: usize = 10;

impl Lower<'_> {
    fn cf(&self, v: f32) -> crate::jit::x86::Src {
        self.creg(v.to_bits())
    }

    /// `erf x` as `math::special::erf`: the small-argument polynomial below 0.75 in
    /// magnitude, `1 − erfc|x|` with the sign of `x` elsewhere; into `d` (14 temps).
    pub(super) fn erf(&self, a: &mut Asm, t: &mut Temps, d: u8, x: u8) {
        let [ax, e] = t.many::<2>();
        a.vandps(ax, x, self.creg(ABS));
        self.erfc_pos_mul(a, t, e, ax, None, None);
        // large = copysign(1 − e, x)
        let [l, s] = t.many::<2>();
        load_const(a, l, self.cf(1.0));
        a.vsubps(l, l, e);
        a.vandps(l, l, self.creg(ABS));
        a.vandps(e, x, self.creg(SIGN));
        a.vorps(l, l, e);
        self.erf_small(a, (s, e), x);
        // |x| < 0.75 (false for NaN) → the polynomial
        a.vcmpps(6, ax, self.cf(ERF_SMALL), Cmp::LtOq);
        a.vblendmps(d, 6, l, s);
    }

    /// Exact GELU as `math::special::gelu`: `m·erfc(zh + zl)` with `m = ½x` and
    /// `zh + zl = −x/√2` (x clamped to ±16) a double-float; −0 at −∞; into `d` (16 temps).
    pub(super) fn gelu_erf(&self, a: &mut Asm, t: &mut Temps, d: u8, x: u8) {
        let [xc, zh, zl, m, az, e] = t.many::<6>();
        // xc = clamp(x, −16, 16)
        clamp(a, xc, x, self.cf(-GELU_LIM), self.cf(GELU_LIM));
        // (zh, zl) = two_prod(xc, −HI); zl = fma(xc, −LO, zl)
        a.vmulps(zh, xc, self.cf(NEG_FRAC_1_SQRT2_HI));
        a.vmovaps(zl, xc);
        load_const(a, m, self.cf(NEG_FRAC_1_SQRT2_HI));
        a.vfmsub213ps(zl, m, zh);
        a.vfmadd231ps(zl, xc, self.cf(NEG_FRAC_1_SQRT2_LO));
        a.vmulps(m, x, self.cf(0.5));
        // erfc_dd_mul(zh, zl, m): neg = zh < 0 (k6) picks erfc(−a) = 2 − erfc(a),
        // evaluated as erfc_pos_mul(|zh|, −zl, 1) and multiplied by m afterwards.
        a.vcmpps(6, zh, self.cf(0.0), Cmp::LtOq);
        a.vandps(az, zh, self.creg(ABS));
        a.vxorps(xc, zl, self.creg(SIGN));
        a.vblendmps(zl, 6, zl, xc);
        a.vblendmps(xc, 6, m, self.cf(1.0)); // xc = the multiplier
        self.erfc_pos_mul(a, t, e, az, Some(zl), Some(xc));
        // large = neg ? m·(2 − e) : e  (into xc)
        load_const(a, xc, self.cf(2.0));
        a.vsubps(xc, xc, e);
        a.vmulps(xc, m, xc);
        a.vblendmps(xc, 6, e, xc);
        // small = m·(1 − erf_small(zh))  (into zl)
        self.erf_small(a, (zl, e), zh);
        load_const(a, e, self.cf(1.0));
        a.vsubps(e, e, zl);
        a.vmulps(zl, m, e);
        // |zh| < 0.5 → small; then x = −∞ → −0
        a.vcmpps(7, az, self.cf(ERFC_SMALL), Cmp::LtOq);
        a.vblendmps(xc, 7, xc, zl);
        a.vcmpps(7, x, self.cf(f32::NEG_INFINITY), Cmp::EqOq);
        a.vblendmps(d, 7, xc, self.creg(SIGN));
    }

    /// `math::special::erf_small(z)` into `d` (`w` scratch): `fma(z, E0_HI, z·fma(w,
    /// E(w), E0_LO))`, `w = z²`, E by Horner from `fma(w, E5, E4)`; `d`, `w`, `z` distinct.
    fn erf_small(&self, a: &mut Asm, (d, w): (u8, u8), z: u8) {
        a.vmulps(w, z, z);
        load_const(a, d, self.cf(E[4]));
        for k in (0..4).rev() {
            a.vfmadd213ps(d, w, self.cf(E[k]));
        }
        a.vfmadd213ps(d, w, self.cf(E0_LO));
        a.vmulps(d, z, d);
        a.vfmadd231ps(d, z, self.cf(E0_HI));
    }

    /// `m·erfc(a + al)` for `a ≥ 0` as `math::special::erfc_pos_mul` (`al = None`: 0,
    /// `m = None`: 1), into `d`; `a`, `al` and `m` are left unchanged. Takes
    /// [`ERFC_TEMPS`] registers from `t`.
    fn erfc_pos_mul(
        &self,
        a: &mut Asm,
        t: &mut Temps,
        d: u8,
        x: u8,
        al: Option<u8>,
        m: Option<u8>,
    ) {
        let c = self.exp_regs();
        let [a1, r1, dd, bb, de, tt, td, tde, r8, r9] = t.many::<ERFC_TEMPS>();
        let two = self.cf(2.0);
        // big = a > 10.5 (k5): a clamped, al zeroed there
        a.vcmpps(5, x, self.cf(ERFC_MAX), Cmp::GtOq);
        a.vblendmps(a1, 5, x, self.cf(ERFC_MAX));
        let al1 = al.map(|al| {
            a.vblendmps(r1, 5, al, self.cf(0.0));
            r1
        });
        // (dd, de) = two_sum(2, a1)
        a.vaddps(dd, a1, two);
        a.vsubps(bb, dd, two);
        a.vsubps(de, dd, bb);
        load_const(a, td, two);
        a.vsubps(de, td, de);
        a.vsubps(bb, a1, bb);
        a.vaddps(de, de, bb);
        // t = 2/dd; (td, tde) = two_prod(t, dd)
        load_const(a, tt, two);
        a.vdivps(tt, tt, dd);
        a.vmulps(td, tt, dd);
        a.vmovaps(tde, tt);
        a.vfmsub213ps(tde, dd, td);
        // t_lo = (((2 − td) − tde) − t·de)/dd; corr = t_lo·(0.5·dd + P1)  (into bb)
        load_const(a, bb, two);
        a.vsubps(bb, bb, td);
        a.vsubps(bb, bb, tde);
        a.vmulps(tde, tt, de);
        a.vsubps(bb, bb, tde);
        a.vdivps(bb, bb, dd);
        a.vmulps(de, dd, self.cf(0.5));
        a.vaddps(de, de, self.cf(P[0]));
        a.vmulps(bb, bb, de);
        // u = t − 0.5 (de); p = P(u)·u by Horner from fma(u, P9, P8)  (td)
        let (u, p) = (de, td);
        a.vsubps(u, tt, self.cf(0.5));
        a.vmovaps(p, u);
        load_const(a, tde, self.cf(P[8]));
        a.vfmadd213ps(p, tde, self.cf(P[7]));
        for k in (0..7).rev() {
            a.vfmadd213ps(p, u, self.cf(P[k]));
        }
        a.vmulps(p, p, u);
        // (a2h, a2l) = two_prod(a1, a1); a2l = fma(2·a1, al, a2l)
        let (a2h, a2l) = (dd, de);
        a.vmulps(a2h, a1, a1);
        a.vmovaps(a2l, a1);
        a.vfmsub213ps(a2l, a1, a2h);
        a.vaddps(a1, a1, a1);
        match al1 {
            Some(l) => a.vfmadd231ps(a2l, a1, l),
            None => a.vfmadd231ps(a2l, a1, self.cf(0.0)),
        }
        // (c, ce) = two_sum(P0_HI, p)  (c in a1, ce in p)
        let cc = a1;
        a.vaddps(cc, p, self.cf(P0_HI));
        let bb2 = r1; // free once al is folded in
        a.vsubps(bb2, cc, self.cf(P0_HI));
        a.vsubps(tde, cc, bb2);
        load_const(a, r8, self.cf(P0_HI));
        a.vsubps(r8, r8, tde);
        a.vsubps(tde, p, bb2);
        a.vaddps(p, r8, tde);
        let ce = p;
        // (sh, sl) = two_sum(−a2h, c)  (sh in a2h's register, sl in r8)
        a.vxorps(bb2, a2h, self.creg(SIGN)); // −a2h
        let nah = bb2;
        a.vaddps(a2h, nah, cc);
        let sh = a2h;
        a.vsubps(tde, sh, nah); // bb
        a.vsubps(r8, sh, tde);
        a.vsubps(r8, nah, r8);
        a.vsubps(tde, cc, tde);
        a.vaddps(r8, r8, tde);
        // lo = sl + (((ce + P0_LO) − a2l) + corr)  (into ce's register)
        a.vaddps(ce, ce, self.cf(P0_LO));
        a.vsubps(ce, ce, a2l);
        a.vaddps(ce, ce, bb);
        a.vaddps(ce, r8, ce);
        let lo = ce;
        // e^(sh + lo) = (q·s1)·s2 in the seven registers free now
        let mut sub = Temps {
            regs: vec![a1, bb2, bb, de, tde, r8, r9],
            next: 0,
        };
        let (q, s1, s2) = exp_parts(a, &c, &mut sub, sh, Some(lo));
        // big ? 0·m : ((q·(m·t))·s1)·s2
        let v = sh;
        match m {
            Some(m) => {
                // (m·t)·q: a NaN input comes out as the interpreter's (with x's sign).
                a.vmulps(v, m, tt);
                a.vmulps(v, v, q);
            }
            None => a.vmulps(v, q, tt),
        }
        a.vmulps(v, v, s1);
        a.vmulps(v, v, s2);
        match m {
            Some(m) => {
                a.vmulps(lo, m, self.cf(0.0));
                a.vblendmps(d, 5, v, lo);
            }
            None => a.vblendmps(d, 5, v, self.cf(0.0)),
        }
    }
}
