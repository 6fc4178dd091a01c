//! The scaled low-precision ops (fp8 / fp6 / fp4 element codes with per-tensor, MX E8M0
//! or NVFP4 scales) lowered to the loop IR, bit for bit with the oracle
//! (`rlx_ir::interp`'s scaled module), whose formulas are all exact integer and
//! power-of-two arithmetic once spelled in f64:
//!
//! - `scaled_quant_scale`: per tensor, one item folding the finite `|x|` into their
//!   maximum in f64 (exact, so the order cannot show), then `absmax / max_finite` in f64
//!   rounded once to f32 (`1.0` where that is 0); block layouts, an item per scale code
//!   folding its block the same way, then the E8M0 exponent code (clamped to `0..=254`)
//!   or the E4M3 encoding of `absmax / max_finite`;
//! - `scaled_quantize`: an item per element, `encode(x / scale)` with the quotient
//!   rounded once in f64 (RNE, saturating, NaN → 0, signed zeros kept except in the fnuz
//!   formats), code 0 where the scale is 0 or not finite;
//! - `scaled_matmul`: an item per output `[i, j]`, each operand element dequantized
//!   exactly in f64 (`decode(code) · scale`), then the oracle's own fold: a rounded f64
//!   product added to an f64 sum from `0.0` in increasing `k` (the renderers never fuse
//!   an f64 multiply-add), the bias added in f64, one rounding to f32 — the same bits as
//!   the oracle. The bias is read, never added in place after the product.
//!
//! The loop IR has no bit casts, so the two bit-level steps are arithmetic on exact
//! powers of two: `2^k` for an integer `k` in a known range is a product of selected
//! `2^(2^b)` literals (one per bit of `k − lo`), and `⌊log₂ a⌋` clamped to a range
//! `lo..lo + 2^bits` is a binary search comparing `a` with such products. That spelling
//! is f64 throughout; it is kept for f64 data and for the matmul. The quantizers of f32,
//! f16 and bf16 data (the usual case) are lowered instead by the integer spelling of
//! `scaled_int.rs`: the same bits, computed on the f32 bit patterns with 32-bit integers,
//! so every renderer runs them, WGSL (no f64) included. The matmul with MX or NVFP4
//! block scales (exact products) is lowered by `scaled_f64soft.rs`: the oracle's f64
//! sum, each partial sum rounded to 53 bits, reproduced by a software f64 in 32-bit
//! integers, on every backend. With a per-tensor scale (f64 products of up to 62 bits
//! that round) the matmul stays f64: the WGSL renderer refuses it by name and the wgpu
//! backend runs it on the host.
//!
//! The per-tensor scale is one serial item over the whole tensor (a max is exact in any
//! order, but one item keeps the kernel a plain item kernel every backend launches the
//! same way); it costs a single pass over the data on one thread.

use super::{Cx, LowerError};
use crate::loops::build::{add, bin, div, int, mul, rem, select, un};
use crate::loops::{Access, Bin, Ex, Lit, Stmt, Ty, Un, Var};
use crate::program::chain_dims;
use rlx_ir::{Dim, Op, ScaleLayout, ScaledFormat, Shape};

#[cfg(test)]
#[path = "scaled_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "scaled_int_tests.rs"]
mod int_tests;

#[path = "scaled_int.rs"]
mod int_spelling;

#[path = "scaled_f64soft.rs"]
mod soft_f64;

#[cfg(test)]
#[path = "scaled_f64soft_tests.rs"]
mod soft_tests;

/// Whether `op` is one of the scaled ops this module lowers.
pub(super) fn lowers(op: &Op) -> bool {
    matches!(
        op,
        Op::ScaledQuantScale { .. } | Op::ScaledQuantize { .. } | Op::ScaledMatMul { .. }
    )
}

fn f64l(v: f64) -> Ex {
    Ex::Lit(Lit::F64(v))
}

fn i64l(v: i64) -> Ex {
    Ex::Lit(Lit::I64(v))
}

/// `2^k` as an f64, exact for `−1022 ≤ k ≤ 1023`.
fn pow2(k: i32) -> f64 {
    assert!((-1022..=1023).contains(&k), "2^{k} is not a normal f64");
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// `⌊log₂ a⌋` of a normal positive f64.
fn exponent(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// Bits needed to count `0..n` (`n ≥ 1`).
fn bits_for(n: i32) -> u32 {
    32 - ((n.max(1) - 1) as u32).leading_zeros()
}

/// The magnitude code of `f`'s largest finite value (magnitude codes are ordered like
/// their values, so clamping a code to it saturates): the first code decoding to
/// [`ScaledFormat::max_finite`].
fn max_code(f: ScaledFormat) -> i64 {
    let sign = 1u32 << (f.exp_bits() + f.mant_bits());
    (0..sign)
        .find(|&c| f.decode(c as u8) == f.max_finite())
        .expect("max_finite is a code's value") as i64
}

impl Cx<'_> {
    /// Lower scaled op `op` over loads `inputs` into `out`; returns the number of items.
    pub(super) fn scaled(
        &mut self,
        op: &Op,
        inputs: &[usize],
        out: &Shape,
    ) -> Result<Ex, LowerError> {
        match *op {
            Op::ScaledQuantScale {
                format,
                scale_layout,
            } if int_spelling::applies(self.load_dtype(inputs[0])) => {
                self.quant_scale_int(format, scale_layout, inputs[0], out)
            }
            Op::ScaledQuantScale {
                format,
                scale_layout,
            } => self.quant_scale(format, scale_layout, inputs[0], out),
            Op::ScaledQuantize {
                format,
                scale_layout,
            } if int_spelling::applies(self.load_dtype(inputs[0]))
                && self.load_dtype(inputs[1]) == scale_layout.scale_dtype() =>
            {
                self.quantize_int(format, scale_layout, inputs[0], inputs[1], out)
            }
            Op::ScaledQuantize {
                format,
                scale_layout,
            } => self.quantize(format, scale_layout, inputs[0], inputs[1], out),
            Op::ScaledMatMul {
                lhs_format,
                rhs_format,
                scale_layout,
                has_bias,
            } => self.scaled_matmul([lhs_format, rhs_format], scale_layout, inputs, has_bias),
            ref other => Err(self.fail(format!("an opaque {} kernel", other.name()))),
        }
    }

    /// The dtype of load `l`'s buffer.
    fn load_dtype(&self, l: usize) -> rlx_ir::DType {
        self.p.buffers[self.p.kernels[self.k].loads[l].buf]
            .shape
            .dtype()
    }

    /// The dims of load `l`'s view.
    fn operand_dims(&self, l: usize) -> Vec<Dim> {
        let ld = &self.p.kernels[self.k].loads[l];
        chain_dims(self.p.buffers[ld.buf].shape.dims(), &ld.steps)
            .pop()
            .expect("a view has dims")
    }

    /// Load `l` at `coords` of its view, in its compute type.
    fn operand_at(&mut self, l: usize, coords: &[Ex]) -> Result<Ex, LowerError> {
        let ld = self.p.kernels[self.k].loads[l].clone();
        let index = self.view_offset(&ld, coords);
        Ok(Ex::Load {
            buf: self.load_slot(l)?,
            index: Box::new(index),
        })
    }

    /// Load `l` (a float operand) at `coords`, widened exactly to f64.
    fn load_f64(&mut self, l: usize, coords: &[Ex], what: &str) -> Result<Ex, LowerError> {
        let dt = self.p.buffers[self.p.kernels[self.k].loads[l].buf]
            .shape
            .dtype();
        let v = self.operand_at(l, coords)?;
        match Ty::of(dt) {
            Some(Ty::F32) => Ok(Ex::Convert(Ty::F64, Box::new(v))),
            Some(Ty::F64) => Ok(v),
            _ => Err(self.fail(format!("a scaled op whose {what} is {dt:?} (not a float)"))),
        }
    }

    /// `2^k` (an f64) for an i64 `k` known to lie in `lo..lo + 2^bits`: `2^lo` times the
    /// literal `2^(2^b)` for every set bit `b` of `k − lo` (all exact).
    fn pow2_of(&mut self, k: Ex, lo: i32, bits: u32) -> Ex {
        let off = self.b.bind(Ty::I64, bin(Bin::Sub, k, i64l(lo as i64)));
        let mut p = f64l(pow2(lo));
        for b in 0..bits {
            let bit = bin(
                Bin::BitAnd,
                bin(Bin::Shr, off.clone(), i64l(b as i64)),
                i64l(1),
            );
            let f = select(bin(Bin::Ne, bit, i64l(0)), f64l(pow2(1 << b)), f64l(1.0));
            p = bin(Bin::Mul, p, f);
        }
        self.b.bind(Ty::F64, p)
    }

    /// `(min(⌊log₂ a⌋ − lo, 2^bits − 1) clamped at 0, 2^(lo + that))` for an f64 `a ≥ 0`
    /// (`0` and `2^lo` below `2^lo`, NaN included): a binary search over exact powers of
    /// two, high bit first.
    fn log2_search(&mut self, a: &Ex, lo: i32, bits: u32) -> (Ex, Ex) {
        let p = self.accumulator(Ty::F64, f64l(pow2(lo)));
        let kk = self.accumulator(Ty::I64, i64l(0));
        for b in (0..bits).rev() {
            let t = self
                .b
                .bind(Ty::F64, bin(Bin::Mul, Ex::Var(p), f64l(pow2(1 << b))));
            let up = self.b.bind(Ty::Bool, bin(Bin::Le, t.clone(), a.clone()));
            self.assign(p, select(up.clone(), t, Ex::Var(p)));
            let next = bin(Bin::Add, Ex::Var(kk), i64l(1 << b));
            self.assign(kk, select(up, next, Ex::Var(kk)));
        }
        (Ex::Var(kk), Ex::Var(p))
    }

    /// [`ScaledFormat::decode`] of an i64 code as an f64 (exact: every format value is
    /// an f32).
    fn decode(&mut self, f: ScaledFormat, code: Ex) -> Ex {
        let (e, m, bias) = f.fields();
        let c = self.b.bind(
            Ty::I64,
            bin(Bin::BitAnd, code, i64l((1 << (1 + e + m)) - 1)),
        );
        let ef = bin(Bin::Shr, c.clone(), i64l(m as i64));
        let ef = self
            .b
            .bind(Ty::I64, bin(Bin::BitAnd, ef, i64l((1 << e) - 1)));
        let mf = self
            .b
            .bind(Ty::I64, bin(Bin::BitAnd, c.clone(), i64l((1 << m) - 1)));
        let sub = self.b.bind(Ty::Bool, bin(Bin::Eq, ef.clone(), i64l(0)));
        // Subnormals: M·2^(1−bias−m); normals (2^m + M)·2^(E−bias−m), E ≥ 1.
        let implicit = bin(Bin::Add, mf.clone(), i64l(1 << m));
        let mant = Ex::Convert(Ty::F64, Box::new(select(sub.clone(), mf.clone(), implicit)));
        let e1 = select(sub, i64l(0), bin(Bin::Sub, ef.clone(), i64l(1)));
        let lo = 1 - bias - m as i32;
        let k = bin(Bin::Add, e1, i64l(lo as i64));
        let scale = self.pow2_of(k, lo, e);
        let mut mag = bin(Bin::Mul, mant, scale);
        let is = |a: &Ex, v: i64| bin(Bin::Eq, a.clone(), i64l(v));
        let nan = f64l(f64::NAN);
        match f {
            ScaledFormat::F8E4M3 => {
                mag = select(bin(Bin::And, is(&ef, 15), is(&mf, 7)), nan, mag);
            }
            ScaledFormat::F8E5M2 => {
                let special = select(is(&mf, 0), f64l(f64::INFINITY), nan);
                mag = select(is(&ef, 31), special, mag);
            }
            ScaledFormat::F8E4M3Fnuz | ScaledFormat::F8E5M2Fnuz => {
                mag = select(is(&c, 0x80), nan, mag);
            }
            _ => {}
        }
        let mag = self.b.bind(Ty::F64, mag);
        let sign = bin(Bin::BitAnd, c, i64l(1 << (e + m)));
        let negate = bin(
            Bin::And,
            bin(Bin::Ne, sign, i64l(0)),
            un(Un::Not, un(Un::IsNan, mag.clone())),
        );
        self.b
            .bind(Ty::F64, select(negate, un(Un::Neg, mag.clone()), mag))
    }

    /// [`ScaledFormat::encode_f64`] of an f64 as an i64 code.
    fn encode(&mut self, f: ScaledFormat, x: Ex) -> Ex {
        let (_, m, bias) = f.fields();
        let x = self.b.bind(Ty::F64, x);
        let a = self.b.bind(Ty::F64, un(Un::Abs, x.clone()));
        let maxf = f.max_finite() as f64;
        let top = max_code(f);
        let emin = 1 - bias;
        let emax = exponent(maxf);
        // k = max(⌊log₂ a⌋, emin); below max_finite, ⌊log₂ a⌋ ≤ emax.
        let (kk, p) = self.log2_search(&a, emin, bits_for(emax - emin + 1));
        let k = self.b.bind(Ty::I64, bin(Bin::Add, kk, i64l(emin as i64)));
        // a · 2^(m − k): a division and a product by powers of two, both exact.
        let scaled = bin(Bin::Mul, bin(Bin::Div, a.clone(), p), f64l(pow2(m as i32)));
        let scaled = self.b.bind(Ty::F64, scaled);
        let mut q = un(Un::RoundEven, scaled.clone());
        if m == 0 {
            // With no mantissa bits a tie's neighbours both have significand 1: keep 2^k
            // when its exponent field (k + bias) is even, as bit-level RNE does.
            let field = bin(Bin::Add, k.clone(), i64l(bias as i64));
            let even = bin(Bin::Eq, bin(Bin::BitAnd, field, i64l(1)), i64l(0));
            let tie = select(even, f64l(1.0), f64l(2.0));
            q = select(bin(Bin::Eq, scaled, f64l(1.5)), tie, q);
        }
        let q = self.b.bind(Ty::I64, Ex::Convert(Ty::I64, Box::new(q)));
        // Rounded up into the next binade.
        let up = self
            .b
            .bind(Ty::Bool, bin(Bin::Eq, q.clone(), i64l(1 << (m + 1))));
        let k = select(up.clone(), bin(Bin::Add, k.clone(), i64l(1)), k);
        let q = self.b.bind(Ty::I64, select(up, i64l(1 << m), q));
        let normal = bin(
            Bin::BitOr,
            bin(
                Bin::Shl,
                bin(Bin::Add, k, i64l(bias as i64)),
                i64l(m as i64),
            ),
            bin(Bin::Sub, q.clone(), i64l(1 << m)),
        );
        let code = select(bin(Bin::Lt, q.clone(), i64l(1 << m)), q, normal);
        let code = self.b.bind(Ty::I64, code);
        let code = select(bin(Bin::Lt, code.clone(), i64l(top)), code, i64l(top));
        let tiny = select(bin(Bin::Lt, a.clone(), f64l(pow2(-200))), i64l(0), code);
        let mag = self.b.bind(
            Ty::I64,
            select(bin(Bin::Le, f64l(maxf), a), i64l(top), tiny),
        );
        // The sign bit of x (−0 included: 1/−0 = −∞); fnuz formats have no −0.
        let zero = bin(Bin::Eq, x.clone(), f64l(0.0));
        let neg_zero = bin(Bin::Lt, bin(Bin::Div, f64l(1.0), x.clone()), f64l(0.0));
        let mut negative = select(zero, neg_zero, bin(Bin::Lt, x.clone(), f64l(0.0)));
        if f.is_fnuz() {
            negative = bin(Bin::And, negative, bin(Bin::Ne, mag.clone(), i64l(0)));
        }
        let sign_bit = 1i64 << (f.exp_bits() + f.mant_bits());
        let signed = bin(Bin::BitOr, mag, select(negative, i64l(sign_bit), i64l(0)));
        self.b
            .bind(Ty::I64, select(un(Un::IsNan, x), i64l(0), signed))
    }

    /// The f64 scale a loaded scale value (f32 per tensor, an i64 code otherwise) of
    /// `layout` stands for.
    fn decode_scale(&mut self, layout: ScaleLayout, v: Ex) -> Ex {
        match layout {
            ScaleLayout::PerTensor => self.b.bind(Ty::F64, Ex::Convert(Ty::F64, Box::new(v))),
            ScaleLayout::BlockMxE8M0 { .. } => {
                let c = self.b.bind(Ty::I64, v);
                let k = bin(Bin::Sub, c.clone(), i64l(127));
                let p = self.pow2_of(k, -127, 8);
                let nan = bin(Bin::Eq, c, i64l(255));
                self.b.bind(Ty::F64, select(nan, f64l(f64::NAN), p))
            }
            ScaleLayout::Nvfp4 { .. } => self.decode(ScaledFormat::F8E4M3, v),
        }
    }

    /// Fold the finite `|v|` of `len` values (`value(cx, i)` gives the i-th as an f64)
    /// into their maximum (0 when there is none), exact in any order.
    fn absmax(
        &mut self,
        len: Ex,
        value: impl FnOnce(&mut Self, Ex) -> Result<Ex, LowerError>,
    ) -> Result<Var, LowerError> {
        let m = self.accumulator(Ty::F64, f64l(0.0));
        self.counted(len, |cx, i| {
            let v = value(cx, i)?;
            let a = cx.b.bind(Ty::F64, un(Un::Abs, v));
            let finite = bin(Bin::Le, a.clone(), f64l(f64::MAX));
            let more = bin(Bin::And, finite, bin(Bin::Lt, Ex::Var(m), a.clone()));
            cx.assign(m, select(more, a, Ex::Var(m)));
            Ok(())
        })?;
        Ok(m)
    }

    /// The output slot of this kernel's one store.
    fn out_slot(&mut self) -> Result<usize, LowerError> {
        let st = self.p.kernels[self.k].stores[0];
        self.slot(st.buf, Access::Write)
    }

    fn quant_scale(
        &mut self,
        format: ScaledFormat,
        layout: ScaleLayout,
        x: usize,
        out: &Shape,
    ) -> Result<Ex, LowerError> {
        let xd = self.operand_dims(x);
        let maxf = format.max_finite() as f64;
        let slot = self.out_slot()?;
        let Some(block) = layout.block() else {
            let n = self.numel(&xd);
            let m = self.absmax(n, |cx, i| {
                let at = cx.unravel(i, &xd);
                cx.load_f64(x, &at, "input")
            })?;
            let s = Ex::Convert(Ty::F32, Box::new(bin(Bin::Div, Ex::Var(m), f64l(maxf))));
            let s = self.b.bind(Ty::F32, s);
            let zero = bin(Bin::Eq, s.clone(), Ex::Lit(Lit::F32(0.0)));
            self.b.push(Stmt::Store {
                buf: slot,
                index: int(0),
                value: select(zero, Ex::Lit(Lit::F32(1.0)), s),
            });
            return Ok(int(1));
        };
        // An item per scale code: its block of the last axis.
        let od = out.dims().to_vec();
        let coords = self.unravel(Ex::Item, &od);
        let last = coords.len() - 1;
        let start = self
            .b
            .bind(Ty::Index, mul(coords[last].clone(), int(block as i64)));
        let m = self.absmax(int(block as i64), |cx, j| {
            let mut at = coords.clone();
            at[last] = cx.b.bind(Ty::Index, add(start, j));
            cx.load_f64(x, &at, "input")
        })?;
        let code = match layout {
            ScaleLayout::Nvfp4 { .. } => {
                let q = bin(Bin::Div, Ex::Var(m), f64l(maxf));
                self.encode(ScaledFormat::F8E4M3, q)
            }
            _ => {
                // E8M0: ⌊log₂ absmax⌋ − emax_elem + 127 clamped to 0..=254; an absmax
                // below 2^(emax_elem − 127) (zero included) gets code 0.
                let lo = exponent(maxf) - 127;
                let (kk, _) = self.log2_search(&Ex::Var(m), lo, 8);
                select(bin(Bin::Lt, kk.clone(), i64l(254)), kk, i64l(254))
            }
        };
        self.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value: code,
        });
        Ok(self.numel(&od))
    }

    /// The scale of the operand element at `coords` (scales load `s`), decoded.
    fn element_scale(
        &mut self,
        layout: ScaleLayout,
        s: usize,
        coords: &[Ex],
    ) -> Result<Ex, LowerError> {
        let v = self.scale_code_at(layout, s, coords)?;
        Ok(self.decode_scale(layout, v))
    }

    /// The raw scale operand (scales load `s`) that applies to the element at `coords`:
    /// the one per-tensor scale, or the scale of the block holding the last coordinate.
    /// Shared by the f64 and the integer lowerings.
    pub(super) fn scale_code_at(
        &mut self,
        layout: ScaleLayout,
        s: usize,
        coords: &[Ex],
    ) -> Result<Ex, LowerError> {
        let at = match layout.block() {
            None => vec![int(0)],
            Some(b) => {
                let mut at = coords.to_vec();
                let last = at.len() - 1;
                at[last] = self.b.bind(Ty::Index, div(at[last].clone(), int(b as i64)));
                at
            }
        };
        self.operand_at(s, &at)
    }

    fn quantize(
        &mut self,
        format: ScaledFormat,
        layout: ScaleLayout,
        x: usize,
        s: usize,
        out: &Shape,
    ) -> Result<Ex, LowerError> {
        let od = out.dims().to_vec();
        let coords = self.unravel(Ex::Item, &od);
        let v = self.load_f64(x, &coords, "input")?;
        let v = self.b.bind(Ty::F64, v);
        let scale = self.element_scale(layout, s, &coords)?;
        let q = self.encode(format, bin(Bin::Div, v, scale.clone()));
        let usable = bin(
            Bin::And,
            bin(Bin::Ne, scale.clone(), f64l(0.0)),
            bin(Bin::Le, un(Un::Abs, scale), f64l(f64::MAX)),
        );
        let slot = self.out_slot()?;
        self.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value: select(usable, q, i64l(0)),
        });
        Ok(self.numel(&od))
    }

    fn scaled_matmul(
        &mut self,
        formats: [ScaledFormat; 2],
        layout: ScaleLayout,
        inputs: &[usize],
        has_bias: bool,
    ) -> Result<Ex, LowerError> {
        let (ld, rd) = (self.operand_dims(inputs[0]), self.operand_dims(inputs[1]));
        if ld.len() != 2 || rd.len() != 2 {
            return Err(self.fail(format!(
                "a scaled matmul of codes {ld:?} and {rd:?} (needs [m, k] and [n, k])"
            )));
        }
        let bias = has_bias.then(|| self.load_dtype(inputs[4]));
        if soft_f64::applies(layout, bias) {
            let dims = (self.dim(rd[0]), self.dim(ld[1]));
            self.scaled_matmul_soft(formats, layout, inputs, has_bias, dims)?;
            let (m, n) = (self.dim(ld[0]), self.dim(rd[0]));
            return Ok(mul(m, n));
        }
        let n = self.dim(rd[0]);
        let i = self.b.bind(Ty::Index, div(Ex::Item, n.clone()));
        let j = self.b.bind(Ty::Index, rem(Ex::Item, n));
        let acc = self.accumulator(Ty::F64, f64l(0.0));
        let k = self.dim(ld[1]);
        self.counted(k, |cx, p| {
            let mut term = Vec::with_capacity(2);
            for (side, row) in [(0, &i), (1, &j)] {
                let at = [row.clone(), p.clone()];
                let code = cx.operand_at(inputs[side], &at)?;
                let v = cx.decode(formats[side], code);
                let s = cx.element_scale(layout, inputs[2 + side], &at)?;
                term.push(cx.b.bind(Ty::F64, bin(Bin::Mul, v, s)));
            }
            let prod = bin(Bin::Mul, term[0].clone(), term[1].clone());
            cx.assign(acc, bin(Bin::Add, Ex::Var(acc), prod));
            Ok(())
        })?;
        let mut y = Ex::Var(acc);
        if has_bias {
            let b = self.load_f64(inputs[4], std::slice::from_ref(&j), "bias")?;
            y = bin(Bin::Add, y, b);
        }
        let slot = self.out_slot()?;
        self.b.push(Stmt::Store {
            buf: slot,
            index: Ex::Item,
            value: Ex::Convert(Ty::F32, Box::new(y)),
        });
        let m = self.dim(ld[0]);
        let n = self.dim(rd[0]);
        Ok(mul(m, n))
    }
}
