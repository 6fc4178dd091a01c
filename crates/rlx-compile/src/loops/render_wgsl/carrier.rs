//! f64 values as carriers of f32-exact values (WGSL has no f64): the lowering widens to
//! f64 to cast floats to integers, to compare integers with floats, and to round once to
//! f16/bf16 or an emulated format. Where every such value is an f32 (or a literal
//! compared with one), the renderer computes it in f32.

use super::{Bin, Ex, Lit, Renderer, Ty, WgslError, f32_lit, f64_err};

impl Renderer<'_> {
    /// A float carrier (clamped into the i32 range) converted to i32: the conversion is
    /// pushed into selects, so the chosen bound is an exact integer literal and the value
    /// itself is only truncated where it lies inside the range.
    pub(super) fn int_of_carrier(&mut self, e: &Ex) -> Result<String, WgslError> {
        Ok(match e {
            Ex::Select(c, a, b) => {
                let (c, a, b) = (
                    self.ex(c)?,
                    self.int_of_carrier(a)?,
                    self.int_of_carrier(b)?,
                );
                format!("select({b}, {a}, {c})")
            }
            Ex::Lit(Lit::F64(v)) => self.lit(Lit::I64(*v as i64))?,
            Ex::Lit(Lit::F32(v)) => self.lit(Lit::I64(*v as i64))?,
            // In range wherever it is selected (elsewhere any value does); NaN is 0.
            _ => {
                self.h.need("nan_");
                let x = self.ex(e)?;
                format!("select(i32({x}), 0i, nan_({x}))")
            }
        })
    }

    /// A comparison of f64 carriers: an f32 value against an f64 literal compares against
    /// the f32 neighbour of the literal that keeps the comparison's truth.
    pub(super) fn carried_compare(&mut self, op: Bin, a: &Ex, b: &Ex) -> Result<String, WgslError> {
        if let Some(s) = self.int_float_compare(op, a, b)? {
            return Ok(s);
        }
        let lit = |e: &Ex| match e {
            Ex::Lit(Lit::F64(v)) => Some(*v),
            _ => None,
        };
        let (la, lb) = (lit(a), lit(b));
        let exact = |v: f64| (v as f32) as f64 == v;
        // `c ≤ x` ⇔ `ceil₃₂(c) ≤ x`; `x ≤ c` ⇔ `x ≤ floor₃₂(c)`; likewise for `<`.
        let (x, y) = match (op, la, lb) {
            (_, Some(c), None) if !exact(c) && matches!(op, Bin::Le | Bin::Lt) => {
                let r = if op == Bin::Le { ceil32(c) } else { floor32(c) };
                (f32_lit(r), self.ex(b)?)
            }
            (_, None, Some(c)) if !exact(c) && matches!(op, Bin::Le | Bin::Lt) => {
                let r = if op == Bin::Le { floor32(c) } else { ceil32(c) };
                (self.ex(a)?, f32_lit(r))
            }
            (Bin::Le | Bin::Lt | Bin::Eq | Bin::Ne, _, _) => (self.ex(a)?, self.ex(b)?),
            _ => return Err(f64_err(self.k, format!("{op:?} of f64 values"))),
        };
        self.h.need("fcmp_");
        Ok(match op {
            Bin::Lt => format!("flt_({x}, {y})"),
            Bin::Le => format!("fle_({x}, {y})"),
            Bin::Eq => format!("feq_({x}, {y})"),
            _ => format!("(!feq_({x}, {y}))"),
        })
    }
    /// An integer compared with an f32 (both widened to f64 by the lowering), exactly:
    /// `icmpf_` orders the integer against the float without rounding the integer.
    fn int_float_compare(&mut self, op: Bin, a: &Ex, b: &Ex) -> Result<Option<String>, WgslError> {
        if !matches!(op, Bin::Lt | Bin::Le | Bin::Eq | Bin::Ne) {
            return Ok(None);
        }
        let widened = |e: &Ex, t: Ty| match e {
            Ex::Convert(Ty::F64, inner) if self.k.ty(inner) == t => Some((**inner).clone()),
            _ => None,
        };
        let (i, x, swapped) = match (widened(a, Ty::I64), widened(b, Ty::F32)) {
            (Some(i), Some(x)) => (i, x, false),
            _ => match (widened(a, Ty::F32), widened(b, Ty::I64)) {
                (Some(x), Some(i)) => (i, x, true),
                _ => return Ok(None),
            },
        };
        let iv = self.exact(&i, "a comparison with a float")?;
        let xv = self.ex(&x)?;
        self.h.need("icmpf_");
        // c: −1, 0, 1 as the integer is below, equal to or above the float; 2 at NaN.
        let c = format!("icmpf_({iv}, {xv})");
        // With the float on the left, `<` asks whether the integer is above.
        let below = if swapped { "1i" } else { "-1i" };
        Ok(Some(match op {
            Bin::Lt => format!("({c} == {below})"),
            Bin::Le => format!("({c} == {below} || {c} == 0i)"),
            Bin::Eq => format!("({c} == 0i)"),
            Bin::Ne => format!("({c} != 0i)"),
            _ => return Ok(None),
        }))
    }
}

/// The value range of a float carrier converted to an integer: the lowering's clamp
/// `x ≤ lo ? lo : (hi ≤ x ? hi : x)` (NaN converts to 0), or a literal.
pub(super) fn carried_range(e: &Ex) -> Option<(f64, f64)> {
    let lit = |e: &Ex| match e {
        Ex::Lit(Lit::F64(v)) => Some(*v),
        Ex::Lit(Lit::F32(v)) => Some(*v as f64),
        _ => None,
    };
    match e {
        Ex::Select(c, a, b) => {
            let Ex::Bin(Bin::Le, p, q) = &**c else {
                return None;
            };
            let lo = lit(a)?;
            if lit(q) != Some(lo) {
                return None;
            }
            let Ex::Select(c2, a2, b2) = &**b else {
                return None;
            };
            let Ex::Bin(Bin::Le, p2, q2) = &**c2 else {
                return None;
            };
            let hi = lit(a2)?;
            if lit(p2) != Some(hi) || p != q2 || q2 != b2 || lo > hi {
                return None;
            }
            Some((lo.min(0.0), hi.max(0.0)))
        }
        e => lit(e).map(|v| (v, v)),
    }
}

/// The largest f32 ≤ `c`.
pub(super) fn floor32(c: f64) -> f32 {
    let f = c as f32;
    if f as f64 > c { f.next_down() } else { f }
}

/// The smallest f32 ≥ `c`.
pub(super) fn ceil32(c: f64) -> f32 {
    let f = c as f32;
    if (f as f64) < c { f.next_up() } else { f }
}
