//! The integer spelling of `scaled_matmul` with block scales (MX E8M0, NVFP4): the
//! oracle's f64 fold reproduced by a software f64 in 32-bit integers, so every renderer
//! (WGSL included, which has no f64) runs it bit for bit.
//!
//! Why a software adder without subnormals or overflow suffices here:
//!
//! - Every operand element `decode(code) · scale` is `±M·2^E` with `M < 2^7` (at most
//!   six mantissa bits plus the implicit one) times a scale `2^(c−127)` (MX) or an E4M3
//!   value (`< 2^4` significant); a product of two is `±P·2^Q` with `P < 2^22`: the
//!   oracle's f64 product is exact. `|Q|` stays within about `2^±520`, so no partial sum
//!   is an f64 subnormal (every nonzero partial sum is a multiple of the smallest term's
//!   unit, at least `2^−600`) and none overflows (`< 2^(512+32)`).
//! - The oracle adds each product to an f64 sum starting at `+0.0`, rounding to nearest
//!   even at 53 bits: the adder here aligns the smaller operand with three extra bits
//!   (guard, round, sticky), adds or subtracts, renormalizes and rounds at the same bit.
//!   A finite value is `(h·2^28 + l)·2^e` with `h ∈ [2^27, 2^28)` and `l ≡ 0 mod 8` (53
//!   significant bits; both limbs below `2^28`, so carries fit in an i32); zero is
//!   `h = l = 0`. An exact cancellation gives `+0`, as IEEE addition does.
//! - NaN codes, the MX NaN scale (255), `∞·0` and `∞ − ∞` give NaN; an E5M2 infinity
//!   times nonzero values gives a signed infinity that stays until an opposite one.
//! - The bias (an f32) joins the sum the same way, then the 53-bit value is rounded to
//!   f32 (nearest even, f32 subnormals, overflow to ∞) from its limbs, as the oracle's
//!   `f64 as f32`.
//!
//! Every branch of the adder is computed and the right one selected (shift amounts are
//! clamped so the branches not taken stay defined); every integer is wrapped to i32.

use super::super::{Cx, LowerError};
use crate::loops::build::{bin, div, int, rem, select, un};
use crate::loops::{Bin, Ex, Lit, Stmt, Ty, Un};
use rlx_ir::{DType, ScaleLayout, ScaledFormat};

fn i(v: i64) -> Ex {
    Ex::Lit(Lit::I64(v))
}

fn w(e: Ex) -> Ex {
    Ex::Un(Un::Wrap(DType::I32), Box::new(e))
}

/// `a op b`, integer operands wrapped to i32 (what the WGSL renderer needs to know they
/// fit); the logical `And` / `Or` take bools.
fn ib(op: Bin, a: Ex, b: Ex) -> Ex {
    match op {
        Bin::And | Bin::Or => bin(op, a, b),
        _ => bin(op, w(a), w(b)),
    }
}

const B28: i64 = 1 << 28;
const M28: i64 = B28 - 1;

/// A software f64 value: `kind` 0 finite, 1 infinite, 2 NaN; `sign` 0 or 1; finite
/// values as the module docs say.
#[derive(Clone)]
struct Soft {
    kind: Ex,
    sign: Ex,
    h: Ex,
    l: Ex,
    e: Ex,
}

/// Whether the integer spelling lowers a scaled matmul of this layout and bias dtype.
pub(super) fn applies(layout: ScaleLayout, bias: Option<DType>) -> bool {
    layout.block().is_some()
        && bias.is_none_or(|d| matches!(d, DType::F32 | DType::F16 | DType::BF16))
}

impl Cx<'_> {
    fn sv(&mut self, e: Ex) -> Ex {
        self.b.bind(Ty::I64, w(e))
    }

    fn sb(&mut self, e: Ex) -> Ex {
        self.b.bind(Ty::Bool, e)
    }

    /// `select` over integers, bound.
    fn ssel(&mut self, c: &Ex, a: Ex, b: Ex) -> Ex {
        self.sv(select(c.clone(), a, b))
    }

    /// `x` clamped to `lo..=hi`.
    fn clamp(&mut self, x: Ex, lo: i64, hi: i64) -> Ex {
        let x = self.sv(x);
        let below = ib(Bin::Lt, x.clone(), i(lo));
        let x = self.sv(select(below, i(lo), x));
        let above = ib(Bin::Lt, i(hi), x.clone());
        self.sv(select(above, i(hi), x))
    }

    /// `⌊log₂ x⌋` of `0 < x < 2^28` (0 for `x ≤ 0`): a binary search.
    fn log2_28(&mut self, x: Ex) -> Ex {
        let (mut x, mut r) = (self.sv(x), i(0));
        for s in [16, 8, 4, 2, 1] {
            let big = self.sb(ib(Bin::Le, i(1 << s), x.clone()));
            x = self.ssel(&big, ib(Bin::Shr, x.clone(), i(s)), x.clone());
            r = self.ssel(&big, ib(Bin::Add, r.clone(), i(s)), r);
        }
        r
    }

    /// A nonzero `(h, l)` (limbs `< 2^28`) shifted left until `h ∈ [2^27, 2^28)`, and the
    /// shift.
    fn normalize(&mut self, h: Ex, l: Ex) -> (Ex, Ex, Ex) {
        let lh = self.log2_28(h.clone());
        let ll = self.log2_28(l.clone());
        let hz = self.sb(ib(Bin::Eq, h.clone(), i(0)));
        let top = self.ssel(&hz, ll, ib(Bin::Add, lh, i(28)));
        let s = self.sv(ib(Bin::Sub, i(55), top));
        let far = self.sb(ib(Bin::Le, i(28), s.clone()));
        // s ≥ 28: h = l << (s − 28), l = 0.
        let sa = self.clamp(ib(Bin::Sub, s.clone(), i(28)), 0, 27);
        let ha = self.sv(ib(Bin::Shl, l.clone(), sa));
        // s < 28: h = h << s | l >> (28 − s), l = (l & (2^(28−s) − 1)) << s.
        let sb = self.clamp(s.clone(), 0, 27);
        let back = self.sv(ib(Bin::Sub, i(28), sb.clone()));
        let keep = self.sv(ib(Bin::Sub, ib(Bin::Shl, i(1), back.clone()), i(1)));
        let hb = self.sv(ib(
            Bin::BitOr,
            ib(Bin::Shl, h, sb.clone()),
            ib(Bin::Shr, l.clone(), back),
        ));
        let lb = self.sv(ib(Bin::Shl, ib(Bin::BitAnd, l, keep), sb));
        let nh = self.ssel(&far, ha, hb);
        let nl = self.ssel(&far, i(0), lb);
        (nh, nl, s)
    }

    /// `(h, l)` shifted right by `0 ≤ d`, the bits shifted out ORed into bit 0.
    fn shr_sticky(&mut self, h: Ex, l: Ex, d: Ex) -> (Ex, Ex) {
        let d = self.clamp(d, 0, 60);
        // d < 28.
        let d0 = self.clamp(d.clone(), 0, 27);
        let mask0 = self.sv(ib(Bin::Sub, ib(Bin::Shl, i(1), d0.clone()), i(1)));
        let lost0 = ib(Bin::Ne, ib(Bin::BitAnd, l.clone(), mask0.clone()), i(0));
        let up = ib(
            Bin::Shl,
            ib(Bin::BitAnd, h.clone(), mask0),
            ib(Bin::Sub, i(28), d0.clone()),
        );
        let l0 = self.sv(ib(
            Bin::BitOr,
            ib(Bin::BitOr, ib(Bin::Shr, l.clone(), d0.clone()), up),
            select(lost0, i(1), i(0)),
        ));
        let h0 = self.sv(ib(Bin::Shr, h.clone(), d0));
        // 28 ≤ d < 56.
        let d1 = self.clamp(ib(Bin::Sub, d.clone(), i(28)), 0, 27);
        let mask1 = ib(Bin::Sub, ib(Bin::Shl, i(1), d1.clone()), i(1));
        let lost1 = ib(
            Bin::Or,
            ib(Bin::Ne, l.clone(), i(0)),
            ib(Bin::Ne, ib(Bin::BitAnd, h.clone(), mask1), i(0)),
        );
        let l1 = self.sv(ib(
            Bin::BitOr,
            ib(Bin::Shr, h.clone(), d1),
            select(lost1, i(1), i(0)),
        ));
        // d ≥ 56: only the sticky bit.
        let l2 = select(ib(Bin::Ne, ib(Bin::BitOr, h, l), i(0)), i(1), i(0));
        let near = self.sb(ib(Bin::Lt, d.clone(), i(28)));
        let mid = ib(Bin::Lt, d, i(56));
        let lo = self.sv(select(mid, l1, l2));
        let l = self.ssel(&near, l0, lo);
        let h = self.ssel(&near, h0, i(0));
        (h, l)
    }

    /// `(h, l, e)` rounded to nearest even at bit 3 (the three guard bits cleared).
    fn round3(&mut self, h: Ex, l: Ex, e: Ex) -> (Ex, Ex, Ex) {
        let r = self.sv(ib(Bin::BitAnd, l.clone(), i(7)));
        let l = self.sv(ib(Bin::BitAnd, l, i(M28 & !7)));
        let odd = ib(Bin::BitAnd, ib(Bin::Shr, l.clone(), i(3)), i(1));
        let up = ib(
            Bin::Or,
            ib(Bin::Lt, i(4), r.clone()),
            ib(Bin::And, ib(Bin::Eq, r, i(4)), ib(Bin::Eq, odd, i(1))),
        );
        let l = self.sv(ib(Bin::Add, l, select(up, i(8), i(0))));
        let carry = self.sb(ib(Bin::Le, i(B28), l.clone()));
        let l = self.ssel(&carry, ib(Bin::Sub, l.clone(), i(B28)), l);
        let h = self.sv(ib(Bin::Add, h, select(carry, i(1), i(0))));
        let over = self.sb(ib(Bin::Le, i(B28), h.clone()));
        let h = self.ssel(&over, i(1 << 27), h);
        let e = self.sv(ib(Bin::Add, e, select(over, i(1), i(0))));
        (h, l, e)
    }

    /// The exact value `±p·2^q` (`0 ≤ p < 2^28`) of kind `kind`, normalized.
    fn soft_exact(&mut self, kind: Ex, sign: Ex, p: Ex, q: Ex) -> Soft {
        let (h, l, s) = self.normalize(i(0), p.clone());
        let zero = self.sb(ib(Bin::Eq, p, i(0)));
        Soft {
            kind,
            sign,
            h: self.ssel(&zero, i(0), h),
            l: self.ssel(&zero, i(0), l),
            e: self.ssel(&zero, i(0), ib(Bin::Sub, q, s)),
        }
    }

    /// `a + b` rounded to nearest even at 53 bits.
    fn soft_add(&mut self, a: &Soft, b: &Soft) -> Soft {
        let is = |x: &Ex, v: i64| ib(Bin::Eq, x.clone(), i(v));
        // The finite sum of two nonzero values, |x| ≥ |y|.
        let a_big = ib(
            Bin::Or,
            ib(Bin::Lt, b.e.clone(), a.e.clone()),
            ib(
                Bin::And,
                ib(Bin::Eq, a.e.clone(), b.e.clone()),
                ib(
                    Bin::Or,
                    ib(Bin::Lt, b.h.clone(), a.h.clone()),
                    ib(
                        Bin::And,
                        ib(Bin::Eq, a.h.clone(), b.h.clone()),
                        ib(Bin::Le, b.l.clone(), a.l.clone()),
                    ),
                ),
            ),
        );
        let a_big = self.sb(a_big);
        let pick = |cx: &mut Self, f: fn(&Soft) -> &Ex, first: bool| {
            let (p, q) = if first { (a, b) } else { (b, a) };
            cx.ssel(&a_big, f(p).clone(), f(q).clone())
        };
        let (xs, xh, xl, xe) = (
            pick(self, |s| &s.sign, true),
            pick(self, |s| &s.h, true),
            pick(self, |s| &s.l, true),
            pick(self, |s| &s.e, true),
        );
        let (ys, yh, yl, ye) = (
            pick(self, |s| &s.sign, false),
            pick(self, |s| &s.h, false),
            pick(self, |s| &s.l, false),
            pick(self, |s| &s.e, false),
        );
        let d = ib(Bin::Sub, xe.clone(), ye);
        let (yh, yl) = self.shr_sticky(yh, yl, d);
        let same = self.sb(ib(Bin::Eq, xs.clone(), ys));
        // Same signs: add, then one right shift on a carry out of 56 bits.
        let sl = self.sv(ib(Bin::Add, xl.clone(), yl.clone()));
        let c = self.sb(ib(Bin::Le, i(B28), sl.clone()));
        let sl = self.ssel(&c, ib(Bin::Sub, sl.clone(), i(B28)), sl);
        let sh = self.sv(ib(
            Bin::Add,
            ib(Bin::Add, xh.clone(), yh.clone()),
            select(c, i(1), i(0)),
        ));
        let big = self.sb(ib(Bin::Le, i(B28), sh.clone()));
        let sl2 = ib(
            Bin::BitOr,
            ib(
                Bin::BitOr,
                ib(Bin::Shr, sl.clone(), i(1)),
                ib(Bin::Shl, ib(Bin::BitAnd, sh.clone(), i(1)), i(27)),
            ),
            ib(Bin::BitAnd, sl.clone(), i(1)),
        );
        let sl = self.ssel(&big, sl2, sl);
        let sh = self.ssel(&big, ib(Bin::Shr, sh.clone(), i(1)), sh);
        let se = self.sv(ib(Bin::Add, xe.clone(), select(big, i(1), i(0))));
        // Opposite signs: subtract, then normalize (exact when it shifts far).
        let dl = self.sv(ib(Bin::Sub, xl, yl));
        let borrow = self.sb(ib(Bin::Lt, dl.clone(), i(0)));
        let dl = self.ssel(&borrow, ib(Bin::Add, dl.clone(), i(B28)), dl);
        let dh = self.sv(ib(
            Bin::Sub,
            ib(Bin::Sub, xh, yh),
            select(borrow, i(1), i(0)),
        ));
        let cancel = self.sb(ib(
            Bin::And,
            un(Un::Not, same.clone()),
            ib(Bin::And, is(&dh, 0), is(&dl, 0)),
        ));
        let (dh, dl, s) = self.normalize(dh, dl);
        let de = self.sv(ib(Bin::Sub, xe, s));
        let zh = self.ssel(&same, sh, dh);
        let zl = self.ssel(&same, sl, dl);
        let ze = self.ssel(&same, se, de);
        let (zh, zl, ze) = self.round3(zh, zl, ze);
        // Zeros: an exact cancellation is +0; a zero operand gives the other one; two
        // zeros give −0 only when both are −0.
        let az = self.sb(is(&a.h, 0));
        let bz = self.sb(is(&b.h, 0));
        let both = self.sb(ib(Bin::And, az.clone(), bz.clone()));
        let pick2 = |cx: &mut Self, sum: Ex, zero: Ex, fa: &Ex, fb: &Ex| {
            let v = cx.ssel(&cancel, zero.clone(), sum);
            let v = cx.ssel(&bz, fa.clone(), v);
            let v = cx.ssel(&az, fb.clone(), v);
            cx.ssel(&both, zero, v)
        };
        let h = pick2(self, zh, i(0), &a.h, &b.h);
        let l = pick2(self, zl, i(0), &a.l, &b.l);
        let e = pick2(self, ze, i(0), &a.e, &b.e);
        let zsign = ib(Bin::BitAnd, a.sign.clone(), b.sign.clone());
        let sign = pick2(self, xs, zsign, &a.sign, &b.sign);
        // Infinities and NaN.
        let ainf = self.sb(is(&a.kind, 1));
        let binf = self.sb(is(&b.kind, 1));
        let nan = ib(
            Bin::Or,
            ib(Bin::Or, is(&a.kind, 2), is(&b.kind, 2)),
            ib(
                Bin::And,
                ib(Bin::And, ainf.clone(), binf.clone()),
                ib(Bin::Ne, a.sign.clone(), b.sign.clone()),
            ),
        );
        let nan = self.sb(nan);
        let inf = ib(Bin::Or, ainf.clone(), binf);
        let kind = self.sv(select(nan, i(2), select(inf, i(1), i(0))));
        let sign = self.ssel(&ainf, a.sign.clone(), sign);
        let sign = self.ssel(&is(&b.kind, 1), b.sign.clone(), sign);
        Soft {
            kind,
            sign,
            h,
            l,
            e,
        }
    }

    /// The f32 bits (a signed i32 word) of `a` rounded to f32 (nearest even, subnormals,
    /// overflow to ∞).
    fn soft_to_f32_bits(&mut self, a: &Soft) -> Ex {
        let u = self.sv(ib(Bin::Add, a.e.clone(), i(55)));
        let under = self.clamp(ib(Bin::Sub, i(-126), u.clone()), 0, 64);
        let normal = self.sb(ib(Bin::Eq, under.clone(), i(0)));
        // Right shift of the 56-bit value by 32 + under ≥ 32: h alone by d, l sticky.
        let d = self.clamp(ib(Bin::Add, under, i(4)), 4, 29);
        let kept = self.sv(ib(Bin::Shr, a.h.clone(), d.clone()));
        let rest = self.sv(ib(
            Bin::BitAnd,
            a.h.clone(),
            ib(Bin::Sub, ib(Bin::Shl, i(1), d.clone()), i(1)),
        ));
        let half = self.sv(ib(Bin::Shl, i(1), ib(Bin::Sub, d, i(1))));
        let sticky = ib(
            Bin::Or,
            ib(Bin::Ne, a.l.clone(), i(0)),
            ib(
                Bin::Ne,
                ib(Bin::BitAnd, rest.clone(), ib(Bin::Sub, half.clone(), i(1))),
                i(0),
            ),
        );
        let odd = ib(Bin::Eq, ib(Bin::BitAnd, kept.clone(), i(1)), i(1));
        let up = ib(
            Bin::And,
            ib(Bin::Ne, ib(Bin::BitAnd, rest, half), i(0)),
            ib(Bin::Or, sticky, odd),
        );
        let m = self.sv(ib(Bin::Add, kept, select(up, i(1), i(0))));
        let bump = self.sb(ib(Bin::Eq, m.clone(), i(1 << 24)));
        let mn = self.ssel(&bump, i(1 << 23), m.clone());
        let un_ = self.sv(ib(Bin::Add, u, select(bump, i(1), i(0))));
        let field = ib(
            Bin::BitOr,
            ib(Bin::Shl, ib(Bin::Add, un_.clone(), i(127)), i(23)),
            ib(Bin::BitAnd, mn, i((1 << 23) - 1)),
        );
        let inf = i(0x7f80_0000);
        let bn = self.ssel(
            &ib(Bin::Lt, i(127), un_),
            inf.clone(),
            ib(Bin::BitAnd, field, i(0x7fff_ffff)),
        );
        let mag = self.ssel(&normal, bn, m);
        let mag = self.ssel(&ib(Bin::Eq, a.h.clone(), i(0)), i(0), mag);
        let mag = self.ssel(&ib(Bin::Eq, a.kind.clone(), i(1)), inf, mag);
        let signed = self.ssel(
            &ib(Bin::Eq, a.sign.clone(), i(1)),
            ib(Bin::BitOr, mag.clone(), i(i32::MIN as i64)),
            mag,
        );
        self.ssel(&ib(Bin::Eq, a.kind.clone(), i(2)), i(0x7fc0_0000), signed)
    }

    /// `(kind, sign, p, q)` of an element code of `f`: the value `±p·2^q`.
    fn code_parts(&mut self, f: ScaledFormat, code: Ex) -> [Ex; 4] {
        let (e, m, bias) = f.fields();
        let c = self.sv(ib(Bin::BitAnd, code, i((1 << (1 + e + m)) - 1)));
        let ef = self.sv(ib(
            Bin::BitAnd,
            ib(Bin::Shr, c.clone(), i(m as i64)),
            i((1 << e) - 1),
        ));
        let mf = self.sv(ib(Bin::BitAnd, c.clone(), i((1 << m) - 1)));
        let sub = self.sb(ib(Bin::Eq, ef.clone(), i(0)));
        let p = self.ssel(&sub, mf.clone(), ib(Bin::BitOr, mf.clone(), i(1 << m)));
        let q = self.sv(ib(
            Bin::Sub,
            select(sub, i(1), ef.clone()),
            i((bias + m as i32) as i64),
        ));
        let is = |x: &Ex, v: i64| ib(Bin::Eq, x.clone(), i(v));
        let kind = match f {
            ScaledFormat::F8E4M3 => select(ib(Bin::And, is(&ef, 15), is(&mf, 7)), i(2), i(0)),
            ScaledFormat::F8E5M2 => select(is(&ef, 31), select(is(&mf, 0), i(1), i(2)), i(0)),
            ScaledFormat::F8E4M3Fnuz | ScaledFormat::F8E5M2Fnuz => select(is(&c, 0x80), i(2), i(0)),
            _ => i(0),
        };
        let kind = self.sv(kind);
        let sign = self.sv(ib(Bin::BitAnd, ib(Bin::Shr, c, i((e + m) as i64)), i(1)));
        [kind, sign, p, q]
    }

    /// `(kind, sign, p, q)` of the block scale of the operand element at `coords`.
    fn scale_parts(
        &mut self,
        layout: ScaleLayout,
        s: usize,
        coords: &[Ex],
    ) -> Result<[Ex; 4], LowerError> {
        let b = layout.block().expect("a block layout") as i64;
        let at = [
            coords[0].clone(),
            self.b.bind(Ty::Index, div(coords[1].clone(), int(b))),
        ];
        let v = self.operand_at(s, &at)?;
        let c = self.sv(v);
        Ok(match layout {
            ScaleLayout::Nvfp4 { .. } => self.code_parts(ScaledFormat::F8E4M3, c),
            _ => {
                let kind = self.sv(select(ib(Bin::Eq, c.clone(), i(255)), i(2), i(0)));
                let q = self.sv(ib(Bin::Sub, c, i(127)));
                [kind, i(0), i(1), q]
            }
        })
    }

    /// `scaled_matmul` of block-scaled `[m, k]` and `[n, k]` codes, an item per output,
    /// bit for bit with the oracle's f64 fold.
    pub(super) fn scaled_matmul_soft(
        &mut self,
        formats: [ScaledFormat; 2],
        layout: ScaleLayout,
        inputs: &[usize],
        has_bias: bool,
        (n, k): (Ex, Ex),
    ) -> Result<(), LowerError> {
        let row = self.b.bind(Ty::Index, div(Ex::Item, n.clone()));
        let col = self.b.bind(Ty::Index, rem(Ex::Item, n));
        let acc = [0; 5].map(|_| self.accumulator(Ty::I64, i(0)));
        self.counted(k, |cx, p| {
            let mut parts = Vec::with_capacity(4);
            for (side, r) in [(0, &row), (1, &col)] {
                let at = [r.clone(), p.clone()];
                let code = cx.operand_at(inputs[side], &at)?;
                parts.push(cx.code_parts(formats[side], code));
                parts.push(cx.scale_parts(layout, inputs[2 + side], &at)?);
            }
            let any = |cx: &mut Self, f: &dyn Fn(&[Ex; 4]) -> Ex| {
                let mut v = f(&parts[0]);
                for x in &parts[1..] {
                    v = ib(Bin::Or, v, f(x));
                }
                cx.sb(v)
            };
            let nan = any(cx, &|x| ib(Bin::Eq, x[0].clone(), i(2)));
            let inf = any(cx, &|x| ib(Bin::Eq, x[0].clone(), i(1)));
            let zero = any(cx, &|x| {
                ib(
                    Bin::And,
                    ib(Bin::Eq, x[0].clone(), i(0)),
                    ib(Bin::Eq, x[2].clone(), i(0)),
                )
            });
            let kind = cx.sv(select(
                ib(Bin::Or, nan, ib(Bin::And, inf.clone(), zero)),
                i(2),
                select(inf, i(1), i(0)),
            ));
            let mut sign = parts[0][1].clone();
            let mut pp = parts[0][2].clone();
            let mut qq = parts[0][3].clone();
            for x in &parts[1..] {
                sign = cx.sv(ib(Bin::BitXor, sign, x[1].clone()));
                pp = cx.sv(ib(Bin::Mul, pp, x[2].clone()));
                qq = cx.sv(ib(Bin::Add, qq, x[3].clone()));
            }
            let t = cx.soft_exact(kind, sign, pp, qq);
            let a = Soft {
                kind: Ex::Var(acc[0]),
                sign: Ex::Var(acc[1]),
                h: Ex::Var(acc[2]),
                l: Ex::Var(acc[3]),
                e: Ex::Var(acc[4]),
            };
            let s = cx.soft_add(&a, &t);
            for (v, x) in acc.iter().zip([s.kind, s.sign, s.h, s.l, s.e]) {
                cx.assign(*v, x);
            }
            Ok(())
        })?;
        let mut y = Soft {
            kind: Ex::Var(acc[0]),
            sign: Ex::Var(acc[1]),
            h: Ex::Var(acc[2]),
            l: Ex::Var(acc[3]),
            e: Ex::Var(acc[4]),
        };
        if has_bias {
            let v = self.operand_at(inputs[4], std::slice::from_ref(&col))?;
            let bits = self.sv(un(Un::F32Bits, v));
            let mag = self.sv(ib(Bin::BitAnd, bits.clone(), i(0x7fff_ffff)));
            let ef = self.sv(ib(Bin::Shr, mag.clone(), i(23)));
            let fr = self.sv(ib(Bin::BitAnd, mag.clone(), i(0x7f_ffff)));
            let sub = self.sb(ib(Bin::Eq, ef.clone(), i(0)));
            let sig = self.ssel(&sub, fr.clone(), ib(Bin::BitOr, fr, i(0x80_0000)));
            let exp = self.ssel(&sub, i(-149), ib(Bin::Sub, ef, i(150)));
            let kind = self.sv(select(
                ib(Bin::Lt, i(0x7f80_0000), mag.clone()),
                i(2),
                select(ib(Bin::Eq, mag, i(0x7f80_0000)), i(1), i(0)),
            ));
            let sign = self.sv(select(ib(Bin::Lt, bits, i(0)), i(1), i(0)));
            let b = self.soft_exact(kind, sign, sig, exp);
            y = self.soft_add(&y, &b);
        }
        let bits = self.soft_to_f32_bits(&y);
        let slot = self.out_slot()?;
        self.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value: un(Un::F32FromBits, bits),
        });
        Ok(())
    }
}
