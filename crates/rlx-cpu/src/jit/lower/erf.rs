//! The error-function lane kernels the JIT emits in full — `erf` and exact GELU
//! (`x·Φ(x)`) — each as the same sequence of IEEE operations as its `math::special` lane
//! kernel on the FMA path (`F = true`, which both the AVX2+FMA and the AVX-512
//! interpreter paths run), so the bits agree.
//!
//! Both go through the Gaussian tail `Φ(−a) = e^(−a²/2)·M(a)`, whose smooth factor `M` is a
//! rational function: GELU's evaluated in f64 (the two 8-double halves of the 16 lanes one
//! after the other), erf's (whose error erf damps) in f32. Mask `k6` holds the lane choices.

use super::special::{exp_mant, load_const};
use super::{Lower, R8, Temps};
use crate::jit::x86::{Asm, Cmp, K6, Mem, Src, VDIVPD, Zmm};
// The clamps of |x| for GELU and erf and Mills's M(a) = P(a)/Q(a) (Q0 = 1) are
// `math::special`'s own constants: the emitted code must compute its bits.
use crate::math::special::{EP32, EQ32, ERF_MAX, GELU_BIAS, GELU_MAX, GELU_UNBIAS, MP, MQ};

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

const SIGN: u32 = 0x8000_0000;
const ABS: u32 = 0x7FFF_FFFF;

/// Every f32 constant erf and GELU read from the pool (besides
/// [`super::special::exp_consts`]).
pub(super) fn erf_consts() -> Vec<u32> {
    let mut v = vec![
        ERF_SMALL.to_bits(),
        E0_HI.to_bits(),
        E0_LO.to_bits(),
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
        1,
    ];
    v.extend(E.map(f32::to_bits));
    v.extend(EP32.map(f32::to_bits));
    v.extend(EQ32.map(f32::to_bits));
    v
}

/// Every f64 constant erf and GELU read from the pool (each two adjacent 32-bit slots).
pub(super) fn erf_consts64() -> Vec<u64> {
    let mut v: Vec<u64> = MP.iter().chain(&MQ).map(|c| c.to_bits()).collect();
    v.push(1f64.to_bits());
    v
}

impl Lower<'_> {
    fn cf(&self, v: f32) -> Src {
        self.creg(v.to_bits())
    }

    /// The pool slot of f64 constant `v` (pooled by the prologue from [`erf_consts64`]).
    fn creg64(&self, v: f64) -> Src {
        let b = v.to_bits();
        let (lo, hi) = (b as u32, (b >> 32) as u32);
        let k = (0..self.consts.len().saturating_sub(1))
            .find(|&k| self.consts[k] == lo && self.consts[k + 1] == hi)
            .expect("pooled");
        Src::Pool(4 * k as i32)
    }

    /// `erf x` as `math::special::erf`: the small-argument polynomial below 0.75 in
    /// magnitude, `copysign(1 − 2·e^(−c²)·M(c√2), x)` with `c = min(|x|, 9.3)` elsewhere;
    /// into `d` (12 temps).
    pub(super) fn erf(&self, a: &mut Asm, t: &mut Temps, d: Zmm, x: Zmm) {
        let [c, m, h, l, e1, e2] = t.many::<6>();
        self.clamped_square(a, (c, h, l), x, ERF_MAX);
        a.vxorps(h, h, self.creg(SIGN));
        a.vxorps(l, l, self.creg(SIGN));
        let ec = self.exp_regs();
        let (p, n, _) = exp_mant(a, &ec, t, h, Some(l));
        self.mills32(a, (m, e1, e2), c);
        // erfc|x| = (p + ((n + 1) << 23))·m  (p's exponent field raised by n + 1)
        a.vpaddd(n, n, self.creg(1));
        a.vpslld(n, n, 23);
        a.vpaddd(p, p, n);
        a.vmulps(m, p, m);
        // large = copysign(1 − erfc|x|, x)  (into l)
        load_const(a, l, self.cf(1.0));
        a.vsubps(l, l, m);
        a.vandps(l, l, self.creg(ABS));
        a.vandps(h, x, self.creg(SIGN));
        a.vorps(l, l, h);
        // |x| < 0.75 (c = min(|x|, 9.3); false for NaN) → the polynomial
        a.vcmpps(K6, c, self.cf(ERF_SMALL), Cmp::LtOq);
        self.erf_small(a, (m, h), x);
        a.vblendmps(d, K6, l, m);
    }

    /// Exact GELU as `math::special::gelu`: with `v = Φ(−|x|) = e^(−x²/2)·M(|x|)` (|x|
    /// clamped at 15.49, v = 0 past it), `(p·2^(n+64)·(x·M))·2⁻⁶⁴` for negative x and
    /// `x·(1 − v)` otherwise; −0 at −∞; into `d` (12 temps).
    pub(super) fn gelu_erf(&self, a: &mut Asm, t: &mut Temps, d: Zmm, x: Zmm) {
        let [c, m, h, l, e1, e2] = t.many::<6>();
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
        let mut mt = Temps {
            regs: vec![h, l, e1, e2],
            next: 0,
        };
        self.mills(a, &mut mt, m, c, (&MP, &MQ));
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
        a.vblendmps(d, K6, h, self.creg(SIGN));
    }

    /// `math::special::clamped_square`: `c = min(|x|, max)` (k6: clamped) and
    /// `h + l = c²` exactly.
    fn clamped_square(&self, a: &mut Asm, (c, h, l): (Zmm, Zmm, Zmm), x: Zmm, max: f32) {
        a.vandps(c, x, self.creg(ABS));
        a.vcmpps(K6, c, self.cf(max), Cmp::GtOq);
        a.vblendmps(c, K6, c, self.cf(max));
        a.vmulps(h, c, c);
        a.vmovaps(l, c);
        a.vfmsub213ps(l, c, h);
    }

    /// `math::special::mills` of the 16 floats in `c` with the coefficients `(mp, mq)`
    /// into `d`: each 8-double half widened, `P(a)/Q(a)` by Horner from `fma(a, P_top,
    /// P_top−1)` and `fma(a, Q_top, Q_top−1)`, rounded back; 4 temps, `c` and `d`
    /// distinct and kept apart from them.
    fn mills(&self, a: &mut Asm, t: &mut Temps, d: Zmm, c: Zmm, (mp, mq): (&[f64], &[f64])) {
        let [w, p, q, hi] = t.many::<4>();
        for half in 0..2 {
            if half == 0 {
                a.vcvtps2pd(w, c);
            } else {
                a.vextract_hi(hi, c);
                a.vcvtps2pd(w, hi);
            }
            self.load64(a, p, mp[mp.len() - 1]);
            for k in (0..mp.len() - 1).rev() {
                a.vfmadd213pd(p, w, self.creg64(mp[k]));
            }
            self.load64(a, q, mq[mq.len() - 1]);
            for k in (0..mq.len() - 1).rev() {
                a.vfmadd213pd(q, w, self.creg64(mq[k]));
            }
            a.vfmadd213pd(q, w, self.creg64(1.0));
            a.op3(VDIVPD, p, p, q);
            if half == 0 {
                a.vcvtpd2ps(d, p);
            } else {
                a.vcvtpd2ps(hi, p);
                a.vinsert_hi(d, d, hi);
            }
        }
    }

    /// `math::special::mills32` (erf's `M(c√2) = P(c)/Q(c)` in f32) of the 16 floats in
    /// `c` into `d`: Horner from `fma(c, P2, P1)` and `fma(c, Q3, Q2)`, one division;
    /// `d`, `p`, `q` and `c` distinct.
    fn mills32(&self, a: &mut Asm, (d, p, q): (Zmm, Zmm, Zmm), c: Zmm) {
        load_const(a, p, self.cf(EP32[2]));
        a.vfmadd213ps(p, c, self.cf(EP32[1]));
        a.vfmadd213ps(p, c, self.cf(EP32[0]));
        load_const(a, q, self.cf(EQ32[2]));
        a.vfmadd213ps(q, c, self.cf(EQ32[1]));
        a.vfmadd213ps(q, c, self.cf(EQ32[0]));
        a.vfmadd213ps(q, c, self.cf(1.0));
        a.vdivps(d, p, q);
    }

    /// Broadcast pooled f64 constant `v` into register `r`.
    fn load64(&self, a: &mut Asm, r: Zmm, v: f64) {
        let Src::Pool(off) = self.creg64(v) else {
            unreachable!("a pooled constant")
        };
        a.vbroadcastsd(r, Mem::BaseDisp(R8, off));
    }

    /// `math::special::erf_small(z)` into `d` (`w` scratch): `fma(z, E0_HI, z·fma(w,
    /// E(w), E0_LO))`, `w = z²`, E by Horner from `fma(w, E5, E4)`; `d`, `w`, `z` distinct.
    fn erf_small(&self, a: &mut Asm, (d, w): (Zmm, Zmm), z: Zmm) {
        a.vmulps(w, z, z);
        load_const(a, d, self.cf(E[4]));
        for k in (0..4).rev() {
            a.vfmadd213ps(d, w, self.cf(E[k]));
        }
        a.vfmadd213ps(d, w, self.cf(E0_LO));
        a.vmulps(d, z, d);
        a.vfmadd231ps(d, z, self.cf(E0_HI));
    }
}
