//! The integer spelling of `scaled_quant_scale` and `scaled_quantize` for f32, f16 and
//! bf16 data: the same bits as the oracle's f64 formulas, computed on the IEEE bits of
//! the f32 values ([`Un::F32Bits`]) with 32-bit integer arithmetic only, so every renderer
//! (WGSL included, which has no f64) runs it, and no float operation can round or flush a
//! subnormal on the way.
//!
//! Why the oracle's f64 steps are exact here:
//!
//! - **absmax** is a maximum of finite `|x|`: for non-negative IEEE values the order of
//!   the magnitude bits (`bits & 0x7fff_ffff`) is the order of the values, and a magnitude
//!   below `0x7f80_0000` is finite. The maximum of the bits is the bits of the maximum.
//! - **MX E8M0 code** `⌊log₂ absmax⌋ − emax + 127` clamped to `0..=254`: `⌊log₂⌋` of a
//!   normal f32 is its exponent field minus 127; of a subnormal, the position of the
//!   fraction's top bit minus 149 (an integer binary search). An absmax of 0 (the oracle's
//!   `< 1e-300`) gives code 0.
//! - **One rounding of a quotient** (`absmax / max_finite` to f32 or to E4M3, `x / scale`
//!   to the element format): the oracle rounds the quotient of two f32 values to f64 and
//!   then to the target. That equals rounding the exact quotient once (what the integer
//!   long division here does): with `x = X·2^a`, `s = S·2^b` (`X, S < 2^24` integers), a
//!   target grid of spacing `2^g` and a midpoint `t = (2j + 1)·2^(g−1)` of it, a quotient
//!   `q = x/s ≠ t` lies at `|q − t| = |X·2^a − t·S·2^b| / (S·2^b)` — a nonzero multiple
//!   of `2^min(a, g−1+b)` over `S·2^b < 2^(24+b)` — so `|q − t| > 2^(min(a−b, g−1) − 24)`,
//!   while the f64 rounding moves `q` by at most `2^−53·|q|`, less than that bound for
//!   both branches of the minimum (`|q| < 2^(24+a−b)`, and near a midpoint of a target
//!   with at most 23 fraction bits `|q| < 2^(g+25)`). So the f64 value never lands on or
//!   across a midpoint that the exact quotient does not: both round alike (ties included,
//!   since a midpoint is exact in f64). The quotients of f32 values lie within
//!   `2^±277`, far inside f64's normal range, and below the oracle's `2^−200` cut every
//!   target rounds to 0 anyway (half its smallest subnormal is at least `2^−134`).
//!   Saturation at `max_finite` needs no separate test: rounding is monotone, so a
//!   quotient at or above `max_finite` rounds to a code at or above the largest finite
//!   one, and the code is clamped to it (the oracle compares the f64 quotient, which is
//!   at or above `max_finite` exactly when the rounded value is its code or above).
//! - The long division keeps `m + 2` quotient bits of `R/S ∈ [1, 2)` (`R, S < 2^25`, the
//!   remainder `< 2^25` before each doubling), shifts right by how far the quotient lies
//!   below the target's smallest normal exponent (subnormals), and rounds to nearest even
//!   with the shifted-out bits and the remainder as the sticky bit. With no mantissa bits
//!   (`m = 0`) a normal tie goes to the even *exponent field*, as the oracle's `encode`
//!   does.
//!
//! Every i64 value of this spelling lies in the i32 range and is wrapped to i32
//! ([`Un::Wrap`]), which tells the WGSL renderer so.

use super::super::{Cx, LowerError};
use crate::loops::build::{bin, int, select, un};
use crate::loops::{Bin, Ex, Lit, Stmt, Ty, Un, Var};
use rlx_ir::{DType, Dim, ScaleLayout, ScaledFormat, Shape};

fn i(v: i64) -> Ex {
    Ex::Lit(Lit::I64(v))
}

/// `e` wrapped to i32 (a no-op on the values here: it records that they fit).
fn w(e: Ex) -> Ex {
    Ex::Un(Un::Wrap(DType::I32), Box::new(e))
}

/// An exact positive float `sig · 2^exp` (`sig < 2^25`, 0 allowed) as integers.
#[derive(Clone)]
struct Exact {
    sig: Ex,
    exp: Ex,
}

/// Sign, magnitude bits, and value of an f32 from its bits.
struct Parts {
    /// The signed 32-bit word (negative iff the sign bit is set).
    bits: Ex,
    /// `bits & 0x7fff_ffff`.
    mag: Ex,
    value: Exact,
}

/// The target of a rounding: `m` fraction bits, smallest normal exponent `emin`, and
/// the exponent bias (for the codes, and for the `m = 0` tie rule).
#[derive(Clone, Copy)]
struct Grid {
    m: u32,
    emin: i32,
    bias: i32,
}

impl Grid {
    fn of(f: ScaledFormat) -> Grid {
        let (_, m, bias) = f.fields();
        Grid {
            m,
            emin: 1 - bias,
            bias,
        }
    }

    const F32: Grid = Grid {
        m: 23,
        emin: -126,
        bias: 127,
    };
}

/// `(sig, exp)` of a positive finite f32 known at lowering time.
fn exact_const(v: f32) -> (i64, i64) {
    let b = v.to_bits();
    let (e, f) = ((b >> 23) as i64, (b & 0x7f_ffff) as i64);
    if e == 0 {
        (f, -149)
    } else {
        (f | 0x80_0000, e - 150)
    }
}

/// Whether the integer spelling applies to load dtype `dt` (f64 data keeps the f64 one).
pub(super) fn applies(dt: DType) -> bool {
    matches!(dt, DType::F32 | DType::F16 | DType::BF16)
}

impl Cx<'_> {
    /// Bind an i64 known to lie in the i32 range.
    fn i32v(&mut self, e: Ex) -> Ex {
        self.b.bind(Ty::I64, w(e))
    }

    fn flag(&mut self, e: Ex) -> Ex {
        self.b.bind(Ty::Bool, e)
    }

    /// The parts of the f32 whose signed word is `bits`.
    fn parts_of_bits(&mut self, bits: Ex) -> Parts {
        let bits = self.i32v(bits);
        let mag = self.i32v(bin(Bin::BitAnd, bits.clone(), i(0x7fff_ffff)));
        let e = self.i32v(bin(Bin::Shr, mag.clone(), i(23)));
        let f = self.i32v(bin(Bin::BitAnd, mag.clone(), i(0x7f_ffff)));
        let sub = self.flag(bin(Bin::Eq, e.clone(), i(0)));
        let sig = self.i32v(select(
            sub.clone(),
            f.clone(),
            bin(Bin::BitOr, f, i(0x80_0000)),
        ));
        let exp = self.i32v(select(sub, i(-149), bin(Bin::Sub, e, i(150))));
        Parts {
            bits,
            mag,
            value: Exact { sig, exp },
        }
    }

    /// The parts of an f32 (or f16 / bf16, computed in f32) value.
    fn parts(&mut self, v: Ex) -> Parts {
        let bits = self.i32v(un(Un::F32Bits, v));
        self.parts_of_bits(bits)
    }

    /// `⌊log₂ x⌋` of an integer `0 < x < 2^32` (0 for `x = 0`): a binary search.
    fn ilog2(&mut self, x: Ex) -> Ex {
        let (mut x, mut r) = (self.i32v(x), i(0));
        for s in [16, 8, 4, 2, 1] {
            let big = self.flag(bin(Bin::Le, i(1 << s), x.clone()));
            x = self.i32v(select(big.clone(), bin(Bin::Shr, x.clone(), i(s)), x));
            r = self.i32v(select(big, bin(Bin::Add, r.clone(), i(s)), r));
        }
        r
    }

    /// `x / s` (`s.sig ≥ 1`) rounded once to nearest even on grid `g`: `(q, k)` with the
    /// value `q · 2^(k − m)`, `k ≥ emin`, `q ≤ 2^(m+1) − 1` (`q < 2^m` only at `k = emin`:
    /// a subnormal or zero). `x.sig = 0` gives `q = 0`.
    fn div_round(&mut self, x: &Exact, s: &Exact, g: Grid) -> (Ex, Ex) {
        let m = g.m as i64;
        // Both significands normalised to [2^23, 2^24).
        let lx = self.ilog2(x.sig.clone());
        let ls = self.ilog2(s.sig.clone());
        let x1 = self.i32v(bin(
            Bin::Shl,
            x.sig.clone(),
            w(bin(Bin::Sub, i(23), lx.clone())),
        ));
        let s1 = self.i32v(bin(
            Bin::Shl,
            s.sig.clone(),
            w(bin(Bin::Sub, i(23), ls.clone())),
        ));
        // R / S1 ∈ [1, 2) and the quotient's exponent e.
        let t = self.flag(bin(Bin::Lt, x1.clone(), s1.clone()));
        let r0 = self.i32v(select(t.clone(), bin(Bin::Shl, x1.clone(), i(1)), x1));
        let tv = select(t, i(1), i(0));
        let e = bin(Bin::Sub, bin(Bin::Add, x.exp.clone(), lx), s.exp.clone());
        let e = self.i32v(bin(Bin::Sub, bin(Bin::Sub, e, ls), tv));
        // m + 2 quotient bits of R / S1 (the leading 1, m fraction bits, a round bit).
        let r = self.accumulator(Ty::I64, r0);
        let q = self.accumulator(Ty::I64, i(0));
        self.counted(int(m + 2), |cx, _| {
            let ge = cx.flag(bin(Bin::Le, s1.clone(), Ex::Var(r)));
            let bit = select(ge.clone(), i(1), i(0));
            cx.assign(q, w(bin(Bin::BitOr, bin(Bin::Shl, Ex::Var(q), i(1)), bit)));
            let rest = select(ge, bin(Bin::Sub, Ex::Var(r), s1.clone()), Ex::Var(r));
            cx.assign(r, w(bin(Bin::Shl, rest, i(1))));
            Ok(())
        })
        .expect("the long division's body builds no fallible load");
        // Below the smallest normal exponent the grid is fixed: shift the extra bits out.
        let k = self.i32v(bin(Bin::Max, e.clone(), i(g.emin as i64)));
        let d = self.i32v(bin(Bin::Min, w(bin(Bin::Sub, k.clone(), e)), i(30)));
        let qq = self.i32v(bin(Bin::Shr, Ex::Var(q), d.clone()));
        let lost = bin(Bin::Sub, Ex::Var(q), bin(Bin::Shl, qq.clone(), d.clone()));
        let sticky = self.flag(bin(
            Bin::Or,
            bin(Bin::Ne, Ex::Var(r), i(0)),
            bin(Bin::Ne, w(lost), i(0)),
        ));
        let qh = self.i32v(bin(Bin::Shr, qq.clone(), i(1)));
        let round = bin(Bin::Ne, bin(Bin::BitAnd, qq, i(1)), i(0));
        let odd = bin(Bin::Ne, bin(Bin::BitAnd, qh.clone(), i(1)), i(0));
        let odd = if g.m == 0 {
            // A normal tie with no mantissa bits: up when the exponent field is odd.
            let field = bin(Bin::Add, k.clone(), i(g.bias as i64));
            let field_odd = bin(Bin::Ne, bin(Bin::BitAnd, w(field), i(1)), i(0));
            select(bin(Bin::Eq, d.clone(), i(0)), field_odd, odd)
        } else {
            odd
        };
        let up = self.flag(bin(Bin::And, round, bin(Bin::Or, sticky, odd)));
        let q2 = self.i32v(bin(Bin::Add, qh, select(up, i(1), i(0))));
        // Rounded up into the next binade.
        let carry = self.flag(bin(Bin::Eq, q2.clone(), i(1 << (m + 1))));
        let k = self.i32v(select(carry.clone(), bin(Bin::Add, k.clone(), i(1)), k));
        let q2 = self.i32v(select(carry, i(1 << m), q2));
        (q2, k)
    }

    /// The magnitude bits of a rounded `(q, k)` on grid `g`, unclamped (a `k` beyond the
    /// largest exponent gives a larger number).
    fn grid_code(&mut self, q: Ex, k: Ex, g: Grid) -> Ex {
        let m = g.m as i64;
        let field = bin(Bin::Add, k, i(g.bias as i64));
        let normal = bin(
            Bin::BitOr,
            bin(Bin::Shl, field, i(m)),
            bin(Bin::Sub, q.clone(), i(1 << m)),
        );
        self.i32v(select(bin(Bin::Lt, q.clone(), i(1 << m)), q, normal))
    }

    /// `f.encode(x / s)`'s magnitude code (the sign is the caller's).
    fn encode_quotient(&mut self, f: ScaledFormat, x: &Exact, s: &Exact) -> Ex {
        let g = Grid::of(f);
        let (q, k) = self.div_round(x, s, g);
        let code = self.grid_code(q, k, g);
        let top = super::max_code(f);
        self.i32v(bin(Bin::Min, code, i(top)))
    }

    /// The finite absmax of `len` values as f32 magnitude bits.
    fn absmax_bits(
        &mut self,
        len: Ex,
        value: impl FnOnce(&mut Self, Ex) -> Result<Ex, LowerError>,
    ) -> Result<Var, LowerError> {
        let m = self.accumulator(Ty::I64, i(0));
        self.counted(len, |cx, j| {
            let v = value(cx, j)?;
            let bits = cx.i32v(un(Un::F32Bits, v));
            let a = cx.i32v(bin(Bin::BitAnd, bits, i(0x7fff_ffff)));
            let finite = bin(Bin::Lt, a.clone(), i(0x7f80_0000));
            let more = bin(Bin::And, finite, bin(Bin::Lt, Ex::Var(m), a.clone()));
            cx.assign(m, select(more, a, Ex::Var(m)));
            Ok(())
        })?;
        Ok(m)
    }

    /// `scaled_quant_scale` of f32-class data (see the module docs).
    pub(super) fn quant_scale_int(
        &mut self,
        format: ScaledFormat,
        layout: ScaleLayout,
        x: usize,
        out: &Shape,
    ) -> Result<Ex, LowerError> {
        let xd = self.operand_dims(x);
        let (msig, mexp) = exact_const(format.max_finite());
        let maxf = Exact {
            sig: i(msig),
            exp: i(mexp),
        };
        let slot = self.out_slot()?;
        let Some(block) = layout.block() else {
            let n = self.numel(&xd);
            let m = self.absmax_bits(n, |cx, j| {
                let at = cx.unravel(j, &xd);
                cx.operand_at(x, &at)
            })?;
            let a = self.parts_of_bits(Ex::Var(m));
            let (q, k) = self.div_round(&a.value, &maxf, Grid::F32);
            let bits = self.grid_code(q, k.clone(), Grid::F32);
            // Past the largest exponent: ∞, as the f64 → f32 cast gives.
            let inf = bin(Bin::Le, i(128), k);
            let bits = self.i32v(select(inf, i(0x7f80_0000), bits));
            // A zero scale (all-zero data, or a quotient below f32's subnormals) is 1.
            let bits = select(bin(Bin::Eq, bits.clone(), i(0)), i(0x3f80_0000), bits);
            self.b.push(Stmt::Store {
                buf: slot,
                index: int(0),
                value: un(Un::F32FromBits, bits),
            });
            return Ok(int(1));
        };
        let od = out.dims().to_vec();
        let coords = self.unravel(Ex::Item, &od);
        let last = coords.len() - 1;
        let start = self.b.bind(
            Ty::Index,
            crate::loops::build::mul(coords[last].clone(), int(block as i64)),
        );
        let m = self.absmax_bits(int(block as i64), |cx, j| {
            let mut at = coords.clone();
            at[last] = cx.b.bind(Ty::Index, crate::loops::build::add(start, j));
            cx.operand_at(x, &at)
        })?;
        let a = self.parts_of_bits(Ex::Var(m));
        let code = match layout {
            ScaleLayout::Nvfp4 { .. } => {
                self.encode_quotient(ScaledFormat::F8E4M3, &a.value, &maxf)
            }
            _ => {
                // ⌊log₂ absmax⌋: the exponent field − 127, or for a subnormal the top bit
                // of the fraction − 149.
                let e = self.i32v(bin(Bin::Shr, a.mag.clone(), i(23)));
                let top = self.ilog2(a.value.sig.clone());
                let l = select(
                    bin(Bin::Eq, e.clone(), i(0)),
                    bin(Bin::Sub, top, i(149)),
                    bin(Bin::Sub, e, i(127)),
                );
                let emax = super::exponent(format.max_finite() as f64) as i64;
                let c = self.i32v(bin(Bin::Add, l, i(127 - emax)));
                let c = self.i32v(bin(Bin::Min, bin(Bin::Max, c, i(0)), i(254)));
                self.i32v(select(bin(Bin::Eq, a.mag, i(0)), i(0), c))
            }
        };
        self.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value: code,
        });
        Ok(self.numel(&od))
    }

    /// The scale of the element at `coords` as `(usable, negative word, exact value)`:
    /// `usable` false where the decoded scale is 0 or not finite.
    fn element_scale_int(
        &mut self,
        layout: ScaleLayout,
        s: usize,
        coords: &[Ex],
    ) -> Result<(Ex, Ex, Exact), LowerError> {
        let v = self.scale_code_at(layout, s, coords)?;
        Ok(match layout {
            ScaleLayout::PerTensor => {
                let p = self.parts(v);
                let usable = bin(
                    Bin::And,
                    bin(Bin::Ne, p.mag.clone(), i(0)),
                    bin(Bin::Lt, p.mag, i(0x7f80_0000)),
                );
                (self.flag(usable), p.bits, p.value)
            }
            ScaleLayout::BlockMxE8M0 { .. } => {
                // 2^(c − 127); code 255 is NaN.
                let c = self.i32v(v);
                let usable = self.flag(bin(Bin::Ne, c.clone(), i(255)));
                let exp = self.i32v(bin(Bin::Sub, c, i(127)));
                (usable, i(0), Exact { sig: i(1), exp })
            }
            ScaleLayout::Nvfp4 { .. } => {
                // An E4M3 code: S.EEEE.MMM, bias 7; 0x7f / 0xff are NaN.
                let c = self.i32v(v);
                let c7 = self.i32v(bin(Bin::BitAnd, c.clone(), i(0x7f)));
                let usable = self.flag(bin(
                    Bin::And,
                    bin(Bin::Ne, c7.clone(), i(0x7f)),
                    bin(Bin::Ne, c7.clone(), i(0)),
                ));
                let ef = self.i32v(bin(Bin::Shr, c7.clone(), i(3)));
                let mf = self.i32v(bin(Bin::BitAnd, c7, i(7)));
                let sub = self.flag(bin(Bin::Eq, ef.clone(), i(0)));
                let sig = self.i32v(select(sub.clone(), mf.clone(), bin(Bin::BitOr, mf, i(8))));
                let exp = self.i32v(bin(Bin::Sub, select(sub, i(1), ef), i(10)));
                let neg = select(
                    bin(Bin::Ne, bin(Bin::BitAnd, c, i(0x80)), i(0)),
                    i(-1),
                    i(0),
                );
                (usable, self.i32v(neg), Exact { sig, exp })
            }
        })
    }

    /// `scaled_quantize` of f32-class data (see the module docs).
    pub(super) fn quantize_int(
        &mut self,
        format: ScaledFormat,
        layout: ScaleLayout,
        x: usize,
        s: usize,
        out: &Shape,
    ) -> Result<Ex, LowerError> {
        let od: Vec<Dim> = out.dims().to_vec();
        let coords = self.unravel(Ex::Item, &od);
        let v = self.operand_at(x, &coords)?;
        let xp = self.parts(v);
        let (usable, sneg, sv) = self.element_scale_int(layout, s, &coords)?;
        let top = super::max_code(format);
        let code = self.encode_quotient(format, &xp.value, &sv);
        // ±∞ saturates; NaN (and an unusable scale) gives code 0.
        let inf = bin(Bin::Eq, xp.mag.clone(), i(0x7f80_0000));
        let mag = self.i32v(select(inf, i(top), code));
        // The quotient's sign: the XOR of the signs (−0 included).
        let mut negative = bin(Bin::Lt, w(bin(Bin::BitXor, xp.bits.clone(), sneg)), i(0));
        if format.is_fnuz() {
            negative = bin(Bin::And, negative, bin(Bin::Ne, mag.clone(), i(0)));
        }
        let sign_bit = 1i64 << (format.exp_bits() + format.mant_bits());
        let signed = bin(Bin::BitOr, mag, select(negative, i(sign_bit), i(0)));
        let nan = bin(Bin::Lt, i(0x7f80_0000), xp.mag);
        let ok = bin(Bin::And, usable, un(Un::Not, nan));
        let value = self.i32v(select(ok, signed, i(0)));
        let slot = self.out_slot()?;
        self.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value,
        });
        Ok(self.numel(&od))
    }
}
