//! Tile operations: one tight loop per op and operand shape (vector/scalar), in the
//! three compute types. Results round (f16/bf16) or wrap (narrow integers) to the
//! node's dtype, as the oracle stores every node.

use super::value::{Elem, TileValue, Ty, cast_bits, round_f32, sl, slm};
use crate::math;
use rlx_ir::interp::{activation_f64, activation_i64, binary_i64, wrap_int};
use rlx_ir::{Activation, BinaryOp, CmpOp, DType, FloatFormat};

/// `f` applied elementwise to one operand.
/// # Safety
/// A vector `x` and `out` must hold `n` aligned elements of `T` and `U` respectively and
/// must not overlap.
#[inline(always)]
unsafe fn map1<T: Elem, U: Elem>(
    x: TileValue,
    out: *mut u8,
    n: usize,
    f: impl Fn(T) -> U,
) -> TileValue {
    match x {
        TileValue::Scalar(a) => TileValue::Scalar(f(T::from_bits(a)).to_bits()),
        TileValue::Vector(p) => {
            // SAFETY: the caller guarantees `p` holds `n` `T`s and `out` holds `n` `U`s,
            // aligned, with no overlap, so the shared and the mutable slice do not alias.
            let (xs, o) = unsafe { (sl::<T>(p, n), slm::<U>(out, n)) };
            for (o, &x) in o.iter_mut().zip(xs) {
                *o = f(x);
            }
            TileValue::Vector(out)
        }
    }
}

/// `f` applied elementwise to two operands (either may be a scalar).
/// # Safety
/// Vector operands must hold `n` aligned `T`s, `out` `n` aligned `U`s, and `out` must not
/// overlap either operand (the operands may overlap each other: both are only read).
#[inline(always)]
unsafe fn map2<T: Elem, U: Elem>(
    x: TileValue,
    y: TileValue,
    out: *mut u8,
    n: usize,
    f: impl Fn(T, T) -> U,
) -> TileValue {
    // SAFETY: per the caller's contract every vector operand holds `n` `T`s and `out` holds `n`
    // `U`s not overlapping them, so each `sl`/`slm` pair is a valid, non-aliasing view.
    unsafe {
        match (x, y) {
            (TileValue::Scalar(a), TileValue::Scalar(b)) => {
                TileValue::Scalar(f(T::from_bits(a), T::from_bits(b)).to_bits())
            }
            (TileValue::Vector(p), TileValue::Scalar(b)) => {
                let (xs, o, b) = (sl::<T>(p, n), slm::<U>(out, n), T::from_bits(b));
                for (o, &x) in o.iter_mut().zip(xs) {
                    *o = f(x, b);
                }
                TileValue::Vector(out)
            }
            (TileValue::Scalar(a), TileValue::Vector(q)) => {
                let (ys, o, a) = (sl::<T>(q, n), slm::<U>(out, n), T::from_bits(a));
                for (o, &y) in o.iter_mut().zip(ys) {
                    *o = f(a, y);
                }
                TileValue::Vector(out)
            }
            (TileValue::Vector(p), TileValue::Vector(q)) => {
                let (xs, ys, o) = (sl::<T>(p, n), sl::<T>(q, n), slm::<U>(out, n));
                for ((o, &x), &y) in o.iter_mut().zip(xs).zip(ys) {
                    *o = f(x, y);
                }
                TileValue::Vector(out)
            }
        }
    }
}

/// Element `i` of a value (scalar or vector).
/// # Safety
/// A vector `v` must hold more than `i` aligned elements of `T`.
#[inline(always)]
unsafe fn at<T: Elem>(v: TileValue, i: usize) -> T {
    match v {
        TileValue::Scalar(b) => T::from_bits(b),
        // SAFETY: the caller guarantees a vector `v` holds more than `i` aligned `T`s.
        TileValue::Vector(p) => unsafe { *(p as *const T).add(i) },
    }
}

/// Round (f16/bf16) or wrap (narrow ints) a fresh result to its dtype, in place.
/// # Safety
/// A vector `v` must be a fresh result of `n` elements of `ty` that nothing else references
/// (it is rewritten in place).
#[inline(always)]
unsafe fn post(ty: Ty, dt: DType, v: TileValue, n: usize) -> TileValue {
    // SAFETY: the caller passes a freshly computed vector result of `n` elements of `ty` (f32
    // in the F32 arm, i64 in the I64 arm) in its own register, so the mutable view aliases
    // nothing.
    unsafe {
        match (ty, v) {
            (Ty::F32, _) if matches!(dt, DType::F16 | DType::BF16) => match v {
                TileValue::Scalar(b) => {
                    TileValue::Scalar(round_f32(dt, f32::from_bits(b as u32)).to_bits() as u64)
                }
                TileValue::Vector(p) => {
                    super::value::round_f32_slice(dt, slm::<f32>(p as *mut u8, n));
                    v
                }
            },
            (Ty::I64, _) if !matches!(dt, DType::I64) => match v {
                TileValue::Scalar(b) => TileValue::Scalar(wrap_int(b as i64, dt) as u64),
                TileValue::Vector(p) => {
                    for x in slm::<i64>(p as *mut u8, n) {
                        *x = wrap_int(*x, dt);
                    }
                    v
                }
            },
            _ => v,
        }
    }
}

/// IEEE 754-2019 `maximum`: NaN propagates, +0 > −0.
#[inline(always)]
fn fmax<T: num_like::Float>(x: T, y: T) -> T {
    if x.nan() || y.nan() {
        x.add(y)
    } else if x.eq(y) {
        x.and_bits(y)
    } else if x.gt(y) {
        x
    } else {
        y
    }
}

/// IEEE 754-2019 `minimum`: NaN propagates, −0 < +0.
#[inline(always)]
fn fmin<T: num_like::Float>(x: T, y: T) -> T {
    if x.nan() || y.nan() {
        x.add(y)
    } else if x.eq(y) {
        x.or_bits(y)
    } else if x.lt(y) {
        x
    } else {
        y
    }
}

mod num_like {
    pub(crate) trait Float: Copy {
        fn nan(self) -> bool;
        fn add(self, o: Self) -> Self;
        fn eq(self, o: Self) -> bool;
        fn gt(self, o: Self) -> bool;
        fn lt(self, o: Self) -> bool;
        fn and_bits(self, o: Self) -> Self;
        fn or_bits(self, o: Self) -> Self;
    }
    macro_rules! imp {
        ($t:ty) => {
            impl Float for $t {
                #[inline(always)]
                fn nan(self) -> bool {
                    self.is_nan()
                }
                #[inline(always)]
                fn add(self, o: Self) -> Self {
                    self + o
                }
                #[inline(always)]
                fn eq(self, o: Self) -> bool {
                    self == o
                }
                #[inline(always)]
                fn gt(self, o: Self) -> bool {
                    self > o
                }
                #[inline(always)]
                fn lt(self, o: Self) -> bool {
                    self < o
                }
                #[inline(always)]
                fn and_bits(self, o: Self) -> Self {
                    <$t>::from_bits(self.to_bits() & o.to_bits())
                }
                #[inline(always)]
                fn or_bits(self, o: Self) -> Self {
                    <$t>::from_bits(self.to_bits() | o.to_bits())
                }
            }
        };
    }
    imp!(f32);
    imp!(f64);
}

/// An activation.
///
/// # Safety
/// Vector operands and `out` hold `n` aligned elements of the compute type, and `out`
/// overlaps no vector operand (the tile compiler gives every result its own register;
/// a direct output target never overlaps a buffer the kernel loads).
#[inline(always)]
pub(crate) unsafe fn unary(
    a: Activation,
    ty: Ty,
    dt: DType,
    x: TileValue,
    out: *mut u8,
    n: usize,
) -> Result<TileValue, String> {
    // SAFETY: the caller guarantees vector `x` and `out` hold `n` elements of `ty` and do not
    // overlap (this function's contract), which is what math::unary_f32's slices and map1 need;
    // `post` rewrites only the fresh result in `out`.
    unsafe {
        let v = match ty {
            Ty::F32 => match x {
                TileValue::Scalar(b) => {
                    let mut o = [0f32];
                    math::unary_f32(a, &[f32::from_bits(b as u32)], &mut o);
                    TileValue::Scalar(o[0].to_bits() as u64)
                }
                TileValue::Vector(p) => {
                    math::unary_f32(a, sl::<f32>(p, n), slm::<f32>(out, n));
                    TileValue::Vector(out)
                }
            },
            // √ on its own loop vectorizes (the per-element match of the oracle's rule does
            // not); every other activation is the oracle's f64 rule itself.
            Ty::F64 if matches!(a, Activation::Sqrt) => map1::<f64, f64>(x, out, n, f64::sqrt),
            Ty::F64 => map1::<f64, f64>(x, out, n, |v| activation_f64(a, v)),
            Ty::I64 => {
                if !a.integer_closed() {
                    return Err(format!(
                        "{} is not defined on integer values; cast to a float type first",
                        a.name()
                    ));
                }
                // The oracle's integer rule; `a` is integer-closed, so it cannot fail.
                map1::<i64, i64>(x, out, n, |v| activation_i64(a, v).unwrap_or(v))
            }
        };
        Ok(post(ty, dt, v, n))
    }
}

/// A binary op (operands already in the result dtype).
///
/// # Safety
/// As [`unary`].
#[inline(always)]
pub(crate) unsafe fn binary(
    b: BinaryOp,
    ty: Ty,
    dt: DType,
    x: TileValue,
    y: TileValue,
    out: *mut u8,
    n: usize,
) -> Result<TileValue, String> {
    use BinaryOp::*;
    // SAFETY: as in `unary`: vector operands and `out` hold `n` elements of `ty`, `out`
    // overlaps neither operand (caller), as map2 requires; `post` only rewrites the fresh
    // result.
    unsafe {
        let v = match ty {
            Ty::F32 => match b {
                Add => map2::<f32, f32>(x, y, out, n, |a, b| a + b),
                Sub => map2::<f32, f32>(x, y, out, n, |a, b| a - b),
                Mul => map2::<f32, f32>(x, y, out, n, |a, b| a * b),
                Div => map2::<f32, f32>(x, y, out, n, |a, b| a / b),
                Max => map2::<f32, f32>(x, y, out, n, fmax),
                Min => map2::<f32, f32>(x, y, out, n, fmin),
                Mod => map2::<f32, f32>(x, y, out, n, |a, b| a % b),
                Pow => map2::<f32, f32>(x, y, out, n, |a, b| (a as f64).powf(b as f64) as f32),
                Atan2 => map2::<f32, f32>(x, y, out, n, |a, b| (a as f64).atan2(b as f64) as f32),
                _ => return Err(format!("{} needs integer (or bool) operands", b.name())),
            },
            Ty::F64 => match b {
                Add => map2::<f64, f64>(x, y, out, n, |a, b| a + b),
                Sub => map2::<f64, f64>(x, y, out, n, |a, b| a - b),
                Mul => map2::<f64, f64>(x, y, out, n, |a, b| a * b),
                Div => map2::<f64, f64>(x, y, out, n, |a, b| a / b),
                Max => map2::<f64, f64>(x, y, out, n, fmax),
                Min => map2::<f64, f64>(x, y, out, n, fmin),
                Mod => map2::<f64, f64>(x, y, out, n, |a, b| a % b),
                Pow => map2::<f64, f64>(x, y, out, n, f64::powf),
                Atan2 => map2::<f64, f64>(x, y, out, n, f64::atan2),
                _ => return Err(format!("{} needs integer (or bool) operands", b.name())),
            },
            Ty::I64 => {
                match b {
                    Add => map2::<i64, i64>(x, y, out, n, i64::wrapping_add),
                    Sub => map2::<i64, i64>(x, y, out, n, i64::wrapping_sub),
                    Mul => map2::<i64, i64>(x, y, out, n, i64::wrapping_mul),
                    Max if dt == DType::Bool => map2::<i64, i64>(x, y, out, n, |a, b| a | b),
                    Min if dt == DType::Bool => map2::<i64, i64>(x, y, out, n, |a, b| a & b),
                    Max => map2::<i64, i64>(x, y, out, n, i64::max),
                    Min => map2::<i64, i64>(x, y, out, n, i64::min),
                    BitAnd => map2::<i64, i64>(x, y, out, n, |a, b| a & b),
                    BitOr => map2::<i64, i64>(x, y, out, n, |a, b| a | b),
                    BitXor => map2::<i64, i64>(x, y, out, n, |a, b| a ^ b),
                    // The oracle's integer rule (its errors included: a zero divisor, a
                    // negative shift), element by element.
                    Div | Mod | Shl | Shr | Pow => {
                        let rule = |p, q| binary_i64(b, p, q, dt);
                        match (x, y) {
                            (TileValue::Scalar(p), TileValue::Scalar(q)) => {
                                TileValue::Scalar(rule(p as i64, q as i64)? as u64)
                            }
                            _ => {
                                for (i, o) in slm::<i64>(out, n).iter_mut().enumerate() {
                                    *o = rule(at::<i64>(x, i), at::<i64>(y, i))?;
                                }
                                TileValue::Vector(out)
                            }
                        }
                    }
                    Atan2 => return Err("atan2 needs float operands; cast first".into()),
                }
            }
        };
        Ok(post(ty, dt, v, n))
    }
}

/// A value of compute type `from_ty` converted exactly to compute type `to` (only the
/// widenings a comparison needs: I64/F32 → F64).
/// # Safety
/// A vector `v` must hold `n` elements of `from`'s compute type; `reg` must hold `n`
/// elements of `to` and not overlap `v`.
#[inline(always)]
unsafe fn widen(v: TileValue, from: DType, to: Ty, reg: *mut u8, n: usize) -> TileValue {
    let fty = Ty::of(from).unwrap();
    if fty == to {
        return v;
    }
    // SAFETY: the caller guarantees vector `v` holds `n` elements of `from`'s compute type and
    // `reg` holds `n` 8-byte elements not overlapping it, as map1 requires.
    unsafe {
        match (fty, to) {
            (Ty::F32, Ty::F64) => map1::<f32, f64>(v, reg, n, |x| x as f64),
            (Ty::I64, Ty::F64) => map1::<i64, f64>(v, reg, n, |x| x as f64),
            _ => unreachable!("comparisons only widen to f64"),
        }
    }
}

fn cmp<T: PartialOrd>(c: CmpOp, x: T, y: T) -> i64 {
    (match c {
        CmpOp::Eq => x == y,
        CmpOp::Ne => x != y,
        CmpOp::Lt => x < y,
        CmpOp::Le => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::Ge => x >= y,
    }) as i64
}

/// A comparison of the exact values; bool (0/1 in I64) result.
///
/// # Safety
/// As [`unary`]; `out` must hold `2n` 8-byte elements (the second half is scratch for
/// widening the left operand).
#[inline(always)]
pub(crate) unsafe fn compare(
    c: CmpOp,
    ty: Ty,
    x: (TileValue, DType),
    y: (TileValue, DType),
    out: *mut u8,
    n: usize,
) -> TileValue {
    // SAFETY: `tmp_x`/`tmp_y` are fresh vectors of `n` u64 whenever an operand is a vector that
    // needs widening (else `widen` returns the operand without touching the buffer), so each
    // widened value is `n` f64s in its own allocation; the caller guarantees the unwidened
    // operands hold `n` elements and `out` holds `n` i64s overlapping neither.
    unsafe {
        // Widen into the output register's second half / a stack buffer as needed.
        let mut tmp_x = vec![
            0u64;
            if matches!(x.0, TileValue::Vector(_)) && Ty::of(x.1) != Some(ty) {
                n
            } else {
                0
            }
        ];
        let mut tmp_y = vec![
            0u64;
            if matches!(y.0, TileValue::Vector(_)) && Ty::of(y.1) != Some(ty) {
                n
            } else {
                0
            }
        ];
        let a = widen(x.0, x.1, ty, tmp_x.as_mut_ptr() as *mut u8, n);
        let b = widen(y.0, y.1, ty, tmp_y.as_mut_ptr() as *mut u8, n);
        match ty {
            Ty::F32 => map2::<f32, i64>(a, b, out, n, |p, q| cmp(c, p, q)),
            Ty::F64 => map2::<f64, i64>(a, b, out, n, |p, q| cmp(c, p, q)),
            Ty::I64 => map2::<i64, i64>(a, b, out, n, |p, q| cmp(c, p, q)),
        }
    }
}

/// `mask ? t : f` (mask is bool 0/1).
///
/// # Safety
/// As [`unary`].
#[inline(always)]
pub(crate) unsafe fn select(
    ty: Ty,
    m: TileValue,
    t: TileValue,
    f: TileValue,
    out: *mut u8,
    n: usize,
) -> TileValue {
    // SAFETY: the caller guarantees vector operands hold `n` elements of `ty` (the mask: `n`
    // i64), `out` holds `n` elements and overlaps none of them, so `slm(out)` aliases no `at`
    // read.
    unsafe {
        if let TileValue::Scalar(mb) = m {
            return if mb != 0 { t } else { f };
        }
        match ty {
            Ty::F32 => {
                let o = slm::<f32>(out, n);
                for (i, o) in o.iter_mut().enumerate() {
                    *o = if at::<i64>(m, i) != 0 {
                        at::<f32>(t, i)
                    } else {
                        at::<f32>(f, i)
                    };
                }
            }
            Ty::F64 | Ty::I64 => {
                let o = slm::<u64>(out, n);
                for (i, o) in o.iter_mut().enumerate() {
                    *o = if at::<i64>(m, i) != 0 {
                        at::<u64>(t, i)
                    } else {
                        at::<u64>(f, i)
                    };
                }
            }
        }
        TileValue::Vector(out)
    }
}

impl Elem for u64 {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        self
    }
    #[inline(always)]
    fn from_bits(b: u64) -> Self {
        b
    }
}

/// Dtype conversion.
///
/// # Safety
/// As [`unary`].
#[inline(always)]
pub(crate) unsafe fn cast(
    from: DType,
    to: DType,
    x: TileValue,
    out: *mut u8,
    n: usize,
) -> TileValue {
    let (fty, tty) = (Ty::of(from).unwrap(), Ty::of(to).unwrap());
    // SAFETY: the caller guarantees a vector `x` holds `n` elements of `from`'s compute type (4
    // bytes for F32, else 8: the `w` read below) and `out` holds `n` of `to`'s (`ow`), not
    // overlapping `x`; map1 gets the same guarantees.
    unsafe {
        match (fty, tty, x) {
            (Ty::F32, Ty::F32, _) if to == DType::F32 => x,
            // Between f32-class dtypes: one rounding to the narrower format.
            (Ty::F32, Ty::F32, TileValue::Vector(p)) => {
                let src = sl::<f32>(p, n);
                let dst = slm::<f32>(out, n);
                dst.copy_from_slice(src);
                super::value::round_f32_slice(to, dst);
                TileValue::Vector(out)
            }
            (Ty::F32, Ty::F64, _) => map1::<f32, f64>(x, out, n, |v| v as f64),
            (Ty::F64, Ty::F32, _) if to == DType::F32 => map1::<f64, f32>(x, out, n, |v| v as f32),
            (Ty::I64, Ty::F32, _) if to == DType::F32 => map1::<i64, f32>(x, out, n, |v| v as f32),
            (Ty::I64, Ty::F64, _) => map1::<i64, f64>(x, out, n, |v| v as f64),
            (Ty::F32, Ty::I64, _) => {
                map1::<f32, i64>(x, out, n, |v| rlx_ir::interp::float_to_int(v as f64, to))
            }
            (_, _, TileValue::Scalar(b)) => TileValue::Scalar(cast_bits(from, to, b)),
            (_, _, TileValue::Vector(p)) => {
                let w = match fty {
                    Ty::F32 => 4,
                    _ => 8,
                };
                let ow = match tty {
                    Ty::F32 => 4,
                    _ => 8,
                };
                for i in 0..n {
                    let bits = if w == 4 {
                        *(p as *const u32).add(i) as u64
                    } else {
                        *(p as *const u64).add(i)
                    };
                    let r = cast_bits(from, to, bits);
                    if ow == 4 {
                        *(out as *mut u32).add(i) = r as u32;
                    } else {
                        *(out as *mut u64).add(i) = r;
                    }
                }
                TileValue::Vector(out)
            }
        }
    }
}

/// Round to an emulated float format, then to the node's dtype.
///
/// # Safety
/// As [`unary`].
pub(crate) unsafe fn round_format(
    f: &FloatFormat,
    ty: Ty,
    dt: DType,
    x: TileValue,
    out: *mut u8,
    n: usize,
) -> TileValue {
    // SAFETY: the caller guarantees a vector `x` holds `n` elements of `ty` and `out` holds `n`
    // elements not overlapping it; the f16/bf16 pass reads `x` as `n` f32 (ty is F32 there) and
    // rewrites `out`.
    unsafe {
        let v = match ty {
            Ty::F32 if dt == DType::F32 => map1::<f32, f32>(x, out, n, |v| f.round(v)),
            Ty::F32 => map1::<f32, f32>(x, out, n, |v| f.round_f64(v as f64) as f32),
            _ => map1::<f64, f64>(x, out, n, |v| f.round_f64(v)),
        };
        // f16/bf16: the f64 result rounds once to the dtype.
        if ty == Ty::F32 && dt != DType::F32 {
            let r = match x {
                TileValue::Scalar(b) => TileValue::Scalar(super::value::cast_bits(
                    DType::F64,
                    dt,
                    f.round_f64(f32::from_bits(b as u32) as f64).to_bits(),
                )),
                TileValue::Vector(p) => {
                    let xs = sl::<f32>(p, n);
                    let o = slm::<f32>(out, n);
                    for (o, &v) in o.iter_mut().zip(xs) {
                        *o = f32::from_bits(super::value::cast_bits(
                            DType::F64,
                            dt,
                            f.round_f64(v as f64).to_bits(),
                        ) as u32);
                    }
                    TileValue::Vector(out)
                }
            };
            return r;
        }
        v
    }
}
