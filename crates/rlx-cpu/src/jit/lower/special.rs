//! The lane kernels the JIT emits in full — `exp`, `expm1`/`tanh`, `log`, `σ` (with a
//! double-float argument and a multiplier), tanh-form GELU, and the interpreter's
//! `max`/`min` — each as the same sequence of IEEE operations as its `math` lane kernel
//! (FMA path), so the bits agree.

use super::{Lower, R8, Temps};
use crate::jit::x86::{Asm, Cmp, K2, K3, Mem, Src, Zmm};

// Constants of the exp/sigmoid lane kernels (see `math::expo`), as f32 bits.
const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const SHIFTER: f32 = 12_582_912.0;
const Q: [f32; 6] = [
    0.5,
    0.166_666_67,
    0.041_666_467,
    0.008_333_361,
    0.001_393_359_7,
    0.000_198_577_95,
];

// Constants of tanh (via expm1) and log (see `math::expo`, `math::special`), as bits.
const LOG_R: [f32; 4] = [0.666_666_7, 0.400_003_14, 0.285_320_9, 0.237_771_97];
const SQRT_HALF_BITS: u32 = 0x3f35_04f3;

/// Every constant tanh and log read from the pool (besides [`exp_consts`]).
pub(super) fn tanh_log_consts() -> Vec<u32> {
    let mut v = vec![
        0x7FFF_FFFF,
        0x8000_0000,
        10f32.to_bits(),
        (-30f32).to_bits(),
        88f32.to_bits(),
        2f32.to_bits(),
        0.5f32.to_bits(),
        1f32.to_bits(),
        f32::MIN_POSITIVE.to_bits(),
        8_388_608f32.to_bits(),
        (-23i32) as u32,
        0x3f80_0000 - SQRT_HALF_BITS,
        0x007f_ffff,
        SQRT_HALF_BITS,
        127,
        f32::INFINITY.to_bits(),
        f32::NEG_INFINITY.to_bits(),
        f32::NAN.to_bits(),
    ];
    v.extend(LOG_R.map(f32::to_bits));
    v
}

impl Lower<'_> {
    /// `tanh x` as `math::special::tanh`: `expm1(2|x|)/(expm1(2|x|) + 2)`, |x| clamped at
    /// 10, with the sign of `x`; into `d`.
    pub(super) fn tanh(&self, a: &mut Asm, t: &mut Temps, d: Zmm, x: Zmm) {
        let c = self.exp_regs();
        let (abs, sign) = (self.creg(0x7FFF_FFFF), self.creg(0x8000_0000));
        let ten = self.creg(10f32.to_bits());
        let [ax, e] = t.many::<2>();
        a.vandps(ax, x, abs);
        a.vcmpps(K2, ax, ten, Cmp::GtOq);
        a.vblendmps(ax, K2, ax, ten);
        a.vaddps(ax, ax, ax);
        self.expm1(a, &c, t, e, ax);
        let den = t.get();
        a.vaddps(den, e, self.creg(2f32.to_bits()));
        a.vdivps(e, e, den);
        // copysign(e, x)
        a.vandps(e, e, abs);
        a.vandps(den, x, sign);
        a.vorps(d, e, den);
    }

    /// `eˣ − 1` as `math::expo::expm1`, into `d`.
    fn expm1(&self, a: &mut Asm, c: &ExpConsts, t: &mut Temps, d: Zmm, x: Zmm) {
        let [xc, tt, n, r, q, rr, m] = t.many::<7>();
        // xc = clamp(x, −30, 88)
        let (lo, hi) = (self.creg((-30f32).to_bits()), self.creg(88f32.to_bits()));
        clamp(a, xc, x, lo, hi);
        reduce(a, c, m, xc, (tt, n, r));
        // s = 2^ni
        a.vpaddd(tt, tt, c.bias);
        a.vpslld(tt, tt, 23);
        expm1_poly(a, c, m, (q, rr), r);
        // fma(s, poly, s − 1)
        a.vsubps(n, tt, c.one);
        a.vmovaps(d, q);
        a.vfmadd213ps(d, tt, n);
    }

    /// `ln x` as `math::expo::log` (subnormals scaled first; NaN, ±0, negative and +∞
    /// handled as there), into `d`.
    pub(super) fn log(&self, a: &mut Asm, t: &mut Temps, d: Zmm, x: Zmm) {
        let k = |v: u32| self.creg(v);
        let one = k(1f32.to_bits());
        let [xs, kadj, ix, kk, f, den, sv, r, hfsq, m] = t.many::<10>();
        // tiny: x·2²³ and an exponent adjustment of −23
        a.vcmpps(K3, x, k(f32::MIN_POSITIVE.to_bits()), Cmp::LtOq);
        a.vmulps(xs, x, k(8_388_608f32.to_bits()));
        a.vblendmps(xs, K3, x, xs);
        load_const(a, kadj, k((-23i32) as u32));
        a.vmovaps_z(kadj, K3, kadj);
        // ix = bits(xs) + (1.0 − √½ in bits); k = (ix >> 23) − 127 + adj
        a.vpaddd(ix, xs, k(0x3f80_0000 - SQRT_HALF_BITS));
        a.vpsrad(kk, ix, 23);
        a.vpsubd(kk, kk, k(127));
        a.vpaddd(kk, kk, kadj);
        // m = from_bits((ix & mantissa) + √½); f = m − 1; s = f/(2 + f); z = s²
        a.vpandd(f, ix, k(0x007f_ffff));
        a.vpaddd(f, f, k(SQRT_HALF_BITS));
        a.vsubps(f, f, one);
        a.vaddps(den, f, k(2f32.to_bits()));
        a.vdivps(sv, f, den);
        a.vmulps(den, sv, sv); // den = z
        // r = fma(z, fma(z, fma(z, R3, R2), R1), R0) · z
        a.vmovaps(r, den);
        load_const(a, m, k(LOG_R[3].to_bits()));
        a.vfmadd213ps(r, m, k(LOG_R[2].to_bits()));
        a.vfmadd213ps(r, den, k(LOG_R[1].to_bits()));
        a.vfmadd213ps(r, den, k(LOG_R[0].to_bits()));
        a.vmulps(r, r, den);
        // hfsq = 0.5·f·f; kf = k as f32
        a.vmulps(hfsq, f, k(0.5f32.to_bits()));
        a.vmulps(hfsq, hfsq, f);
        a.vcvtdq2ps(kadj, kk); // kadj = kf
        // t = fma(s, hfsq + r, kf·LN2_LO) − hfsq + f; v = fma(kf, LN2_HI, t)
        let c = self.exp_regs();
        a.vaddps(kk, hfsq, r);
        a.vmulps(ix, kadj, c.ln2_lo);
        a.vfmadd213ps(kk, sv, ix);
        a.vsubps(kk, kk, hfsq);
        a.vaddps(kk, kk, f);
        a.vfmadd231ps(kk, kadj, c.ln2_hi);
        // +∞ → +∞; x < 0 → NaN; ±0 → −∞; NaN → x
        a.vcmpps(K2, x, k(f32::INFINITY.to_bits()), Cmp::EqOq);
        a.vblendmps(kk, K2, kk, x);
        a.vcmpps(K2, x, c.zero, Cmp::LtOq);
        a.vblendmps(kk, K2, kk, k(f32::NAN.to_bits()));
        a.vcmpps(K2, x, c.zero, Cmp::EqOq);
        a.vblendmps(kk, K2, kk, k(f32::NEG_INFINITY.to_bits()));
        a.vcmpps(K2, x, x, Cmp::UnordQ);
        a.vblendmps(d, K2, kk, x);
    }

    pub(super) fn exp_regs(&self) -> ExpConsts {
        ExpConsts {
            lo: self.creg((-120f32).to_bits()),
            hi: self.creg(89f32.to_bits()),
            log2e: self.creg(LOG2E.to_bits()),
            shifter: self.creg(SHIFTER.to_bits()),
            ln2_hi: self.creg(LN2_HI.to_bits()),
            ln2_lo: self.creg(LN2_LO.to_bits()),
            q: Q.map(|q| self.creg(q.to_bits())),
            one: self.creg(1f32.to_bits()),
            zero: self.creg(0),
            bias: self.creg(127),
        }
    }

    /// `m·σ(hi + lo)` as `math::special::sigmoid_dd_mul` (`lo = None`: 0, `m = None`:
    /// 1), into `d`.
    pub(super) fn sigmoid_dd_mul(
        &self,
        a: &mut Asm,
        t: &mut Temps,
        d: Zmm,
        hi: Zmm,
        lo: Option<Zmm>,
        m: Option<Zmm>,
    ) {
        let c = self.exp_regs();
        let sign = self.creg(0x8000_0000);
        // neg = hi < 0; arguments (hi, lo) when negative, (−hi, −lo) otherwise.
        let [nx, l] = t.many::<2>();
        a.vxorps(nx, hi, sign);
        a.vcmpps(K3, hi, c.zero, Cmp::LtOq);
        a.vblendmps(nx, K3, nx, hi);
        match lo {
            Some(lo) => {
                a.vxorps(l, lo, sign);
                a.vblendmps(l, K3, l, lo);
            }
            None => {
                load_const(a, l, sign);
                a.vblendmps(l, K3, l, c.zero);
            }
        }
        let (p, s1, s2) = exp_parts(a, &c, t, nx, Some(l));
        // den = 1 + (p·s1)·s2
        let den = t.get();
        a.vmulps(den, p, s1);
        a.vmulps(den, den, s2);
        a.vaddps(den, den, c.one); // 1 + e: the same bits in either order
        // q = (neg ? m·p : m) / den
        let num = t.get();
        match m {
            Some(m) => {
                a.vmulps(num, m, p);
                a.vblendmps(num, K3, m, num);
            }
            None => {
                a.vmulps(num, p, c.one);
                load_const(a, l, c.one); // `l` is free once the exponential is done
                a.vblendmps(num, K3, l, num);
            }
        }
        a.vdivps(num, num, den);
        // neg ? (q·s1)·s2 : q
        a.vmulps(den, num, s1);
        a.vmulps(den, den, s2);
        a.vblendmps(d, K3, num, den);
    }

    /// Tanh-form GELU as `math::special::gelu_tanh`, into `d`: `x·σ(2u)` with
    /// `2u = x·(GC1 + GC3·x²)` carried as a double-float `hi + lo`.
    pub(super) fn gelu_tanh(&self, a: &mut Asm, t: &mut Temps, d: Zmm, x: Zmm) {
        let [lim, neg_lim, gc1_hi, gc1_lo, gc3_hi, gc3_lo] =
            GELU_CONSTS.map(|v| self.creg(v.to_bits()));
        let [ah, al] = t.many::<2>();
        let mark = t.next;
        let [xc, x2h, x2l, th, tl, wh, bb, u] = t.many::<8>();
        // xc = clamp(x, −12, 12)
        clamp(a, xc, x, neg_lim, lim);
        // (x2h, x2l) = two_prod(xc, xc)
        a.vmulps(x2h, xc, xc);
        a.vmovaps(x2l, xc);
        a.vfmsub213ps(x2l, xc, x2h);
        // (th, tl) = two_prod(GC3_HI, x2h); tl = fma(GC3_HI, x2l, fma(GC3_LO, x2h, tl))
        a.vmulps(th, x2h, gc3_hi);
        load_const(a, tl, gc3_hi);
        a.vfmsub213ps(tl, x2h, th);
        a.vfmadd231ps(tl, x2h, gc3_lo);
        a.vfmadd231ps(tl, x2l, gc3_hi);
        // (wh, wl) = two_sum(GC1_HI, th)
        load_const(a, wh, gc1_hi);
        a.vaddps(wh, wh, th);
        a.vsubps(bb, wh, gc1_hi);
        a.vsubps(u, wh, bb);
        load_const(a, x2h, gc1_hi);
        a.vsubps(u, x2h, u);
        a.vsubps(bb, th, bb);
        a.vaddps(u, u, bb); // u = wl
        // wl = wl + (tl + GC1_LO)
        a.vaddps(tl, tl, gc1_lo);
        a.vaddps(u, u, tl);
        // (ah, al) = two_prod(xc, wh); al = fma(xc, wl, al)
        a.vmulps(ah, xc, wh);
        a.vmovaps(al, xc);
        a.vfmsub213ps(al, wh, ah);
        a.vfmadd231ps(al, xc, u);
        // v = x·σ(ah + al); −0 below −12
        t.next = mark;
        let v = t.get();
        self.sigmoid_dd_mul(a, t, v, ah, Some(al), Some(x));
        a.vcmpps(K2, x, neg_lim, Cmp::LtOq);
        a.vblendmps(d, K2, v, self.creg(0x8000_0000));
    }
}

/// GELU (tanh form) constants: the clamp `±12`, `2·√(2/π)` and `2·√(2/π)·0.044715` as
/// hi + lo pairs (see `math::special`).
pub(super) const GELU_CONSTS: [f32; 6] = [
    12.0,
    -12.0,
    1.595_769_2,
    -4.534_068e-8,
    0.071_354_814,
    2.398_832_5e-9,
];

/// The pool slots of the constants exp needs.
pub(super) struct ExpConsts {
    lo: Src,
    hi: Src,
    log2e: Src,
    shifter: Src,
    ln2_hi: Src,
    ln2_lo: Src,
    q: [Src; 6],
    one: Src,
    zero: Src,
    /// The integer 127 (exponent bias).
    bias: Src,
}

/// Broadcast pooled constant `c` into register `r` (for operand positions that need a
/// register).
pub(super) fn load_const(a: &mut Asm, r: Zmm, c: Src) {
    let Src::Pool(d) = c else {
        unreachable!("a pooled constant")
    };
    a.vbroadcastss(r, Mem::BaseDisp(R8, d));
}

pub(super) fn exp_consts() -> Vec<u32> {
    let mut v = vec![
        (-120f32).to_bits(),
        89f32.to_bits(),
        LOG2E.to_bits(),
        SHIFTER.to_bits(),
        LN2_HI.to_bits(),
        LN2_LO.to_bits(),
        0,
        127,
    ];
    v.extend(Q.map(f32::to_bits));
    v
}

/// `math::expo::exp_parts(hi, lo)` (FMA path): returns the registers of `(p, s1, s2)`
/// with `e^(hi+lo) = (p·s1)·s2`. `lo = None` is the plain `exp` (`lo = +0`).
pub(super) fn exp_parts(
    a: &mut Asm,
    c: &ExpConsts,
    t: &mut Temps,
    hi: Zmm,
    lo: Option<Zmm>,
) -> (Zmm, Zmm, Zmm) {
    let x = t.get();
    // x = clamp(hi, −120, 89), NaN kept: x < lo → lo; then x > hi → hi.
    clamp(a, x, hi, c.lo, c.hi);
    let (q, tt, n) = exp_mant(a, c, t, x, lo);
    // p = 0 where hi < −120
    a.vcmpps(K2, hi, c.lo, Cmp::LtOq);
    a.vblendmps(q, K2, q, c.zero);
    // s1 = 2^(ni >> 1), s2 = 2^(ni − (ni >> 1)) as (k + 127) << 23
    a.vpsrad(n, tt, 1); // n = n1
    a.vpsubd(tt, tt, n); // tt = ni − n1
    pow2i(a, c, n, n);
    pow2i(a, c, tt, tt);
    (q, n, tt)
}

/// `math::expo::exp_mant(x, lo)` (FMA path, no clamp): the registers `(p, ni, spare)` with
/// `e^(x+lo) = p·2^ni` (`ni` an integer per lane; `spare` is free scratch afterwards).
/// Takes 6 temps.
pub(super) fn exp_mant(
    a: &mut Asm,
    c: &ExpConsts,
    t: &mut Temps,
    x: Zmm,
    lo: Option<Zmm>,
) -> (Zmm, Zmm, Zmm) {
    let [tt, n, r, q, rr] = t.many::<5>();
    let m = t.get(); // constants needed in a register
    reduce(a, c, m, x, (tt, n, r));
    match lo {
        Some(l) => a.vaddps(r, r, l),
        None => a.vaddps(r, r, c.zero),
    }
    // p = expm1_poly(r) + 1
    expm1_poly(a, c, m, (q, rr), r);
    a.vaddps(q, q, c.one);
    (q, tt, n)
}

/// `math::expo::pow2i`: `d = (n + 127) << 23` for the integer lanes of `n`.
pub(super) fn pow2i(a: &mut Asm, c: &ExpConsts, d: Zmm, n: Zmm) {
    a.vpaddd(d, n, c.bias);
    a.vpslld(d, d, 23);
}

/// `d = clamp(x, lo, hi)` as `math::simd::clamp`: `x < lo → lo`, then `> hi → hi`, NaN
/// kept (uses mask k2).
pub(super) fn clamp(a: &mut Asm, d: Zmm, x: Zmm, lo: Src, hi: Src) {
    a.vcmpps(K2, x, lo, Cmp::LtOq);
    a.vblendmps(d, K2, x, lo);
    a.vcmpps(K2, d, hi, Cmp::GtOq);
    a.vblendmps(d, K2, d, hi);
}

/// `math::expo::reduce` and the Cody–Waite step: `tt = n` as an integer (bits),
/// `n` as a float, `r = x − n·ln2` (high part, then low part), `m` a scratch register.
fn reduce(a: &mut Asm, c: &ExpConsts, m: Zmm, x: Zmm, (tt, n, r): (Zmm, Zmm, Zmm)) {
    // t = x·log2e + shifter; n = t − shifter; ni = bits(t) − bits(shifter)
    a.vmovaps(tt, x);
    load_const(a, m, c.log2e);
    a.vfmadd213ps(tt, m, c.shifter);
    a.vsubps(n, tt, c.shifter);
    a.vpsubd(tt, tt, c.shifter);
    // r = fma(−n, ln2_hi, x); r = fma(−n, ln2_lo, r)
    a.vmovaps(r, x);
    a.vfnmadd231ps(r, n, c.ln2_hi);
    a.vfnmadd231ps(r, n, c.ln2_lo);
}

/// `math::expo::expm1_poly(r)` into `q`: `fma(r·r, Q(r), r)` with `Q` by Horner from
/// `fma(r, Q5, Q4)`; `rr` and `m` are scratch.
fn expm1_poly(a: &mut Asm, c: &ExpConsts, m: Zmm, (q, rr): (Zmm, Zmm), r: Zmm) {
    a.vmovaps(q, r);
    load_const(a, m, c.q[5]);
    a.vfmadd213ps(q, m, c.q[4]);
    for k in (0..4).rev() {
        a.vfmadd213ps(q, r, c.q[k]);
    }
    a.vmulps(rr, r, r);
    a.vfmadd213ps(q, rr, r);
}

/// `fmax`/`fmin` of the interpreter: NaN → `x + y`; equal → bits and/or (so ±0 order
/// correctly); else the larger/smaller.
pub(super) fn minmax(a: &mut Asm, max: bool, d: Zmm, t: Zmm, x: Zmm, y: Zmm) {
    // d = (x > y) ? x : y  (max)   /   (x < y) ? x : y  (min)
    if max {
        a.vcmpps(K2, x, y, Cmp::GtOq);
    } else {
        a.vcmpps(K2, x, y, Cmp::LtOq);
    }
    a.vblendmps(d, K2, y, x);
    if max {
        a.vandps(t, x, y);
    } else {
        a.vorps(t, x, y);
    }
    a.vcmpps(K2, x, y, Cmp::EqOq);
    a.vblendmps(d, K2, d, t);
    a.vaddps(t, x, y);
    a.vcmpps(K2, x, y, Cmp::UnordQ);
    a.vblendmps(d, K2, d, t);
}
