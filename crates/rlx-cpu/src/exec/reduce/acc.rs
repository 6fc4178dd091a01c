//! The accumulators of the reduction kernels: the fold of one element or a whole tile
//! value into an accumulator (f64 for floats, wrapping i64 or exact i128 for integers,
//! best-and-position for argmax/argmin), the combination of two partial accumulators,
//! and the final value in the result's dtype.

use crate::exec::ew::elem;
use crate::exec::value::{TileValue, Ty, cast_bits};
use rlx_ir::interp::wrap_int;
use rlx_ir::{DType, ReduceOp};

/// An accumulator.
#[derive(Debug, Clone, Copy)]
pub(super) enum Acc {
    F(f64),
    I(i64),
    W(i128),
    /// Argmax/argmin: the best element (compute bits) and its position among the `seen`
    /// elements folded so far.
    Arg {
        best: u64,
        at: u64,
        seen: u64,
    },
}

/// The empty accumulator of `op` over elements of compute type `ty` (the position of the
/// extremum for argmax/argmin when `arg`).
pub(super) fn init(op: ReduceOp, arg: bool, ty: Ty) -> Acc {
    match (op, ty) {
        _ if arg => Acc::Arg {
            best: 0,
            at: 0,
            seen: 0,
        },
        (ReduceOp::Prod, Ty::I64) => Acc::I(1),
        (ReduceOp::Mean, Ty::I64) => Acc::W(0),
        (_, Ty::I64) => Acc::I(0),
        (ReduceOp::Prod, _) => Acc::F(1.0),
        _ => Acc::F(0.0),
    }
}

/// Fold one element (compute bits of `ty`) into `a`; `first` for max/min seeding.
#[inline(always)]
pub(super) fn fold1(op: ReduceOp, ty: Ty, a: &mut Acc, bits: u64, first: bool) {
    let fv = || match ty {
        Ty::F32 => f32::from_bits(bits as u32) as f64,
        _ => f64::from_bits(bits),
    };
    match a {
        Acc::F(acc) => {
            let v = fv();
            match op {
                ReduceOp::Sum | ReduceOp::Mean => *acc += v,
                ReduceOp::Prod => *acc *= v,
                ReduceOp::Max | ReduceOp::Min => {
                    let max = op == ReduceOp::Max;
                    if first
                        || (!acc.is_nan()
                            && (v.is_nan() || (max && v > *acc) || (!max && v < *acc)))
                    {
                        *acc = v;
                    }
                }
            }
        }
        Acc::I(acc) => {
            let v = bits as i64;
            match op {
                ReduceOp::Sum => *acc = acc.wrapping_add(v),
                ReduceOp::Prod => *acc = acc.wrapping_mul(v),
                ReduceOp::Max => *acc = if first { v } else { (*acc).max(v) },
                ReduceOp::Min => *acc = if first { v } else { (*acc).min(v) },
                ReduceOp::Mean => unreachable!(),
            }
        }
        Acc::W(acc) => *acc += bits as i64 as i128,
        Acc::Arg { best, at, seen } => {
            if *seen == 0 || arg_beats(op, ty, bits, *best) {
                (*best, *at) = (bits, *seen);
            }
            *seen += 1;
        }
    }
}

/// Whether element `x` replaces `best` (compute bits of `ty`) of an argmax (op `Max`) /
/// argmin: the oracle's rule (a NaN beats any number and nothing beats a NaN; ties keep
/// the first).
#[inline(always)]
fn arg_beats(op: ReduceOp, ty: Ty, x: u64, best: u64) -> bool {
    let max = op == ReduceOp::Max;
    if ty == Ty::I64 {
        let (x, b) = (x as i64, best as i64);
        return (max && x > b) || (!max && x < b);
    }
    let f = |b: u64| match ty {
        Ty::F32 => f32::from_bits(b as u32) as f64,
        _ => f64::from_bits(b),
    };
    let (x, b) = (f(x), f(best));
    !b.is_nan() && (x.is_nan() || (max && x > b) || (!max && x < b))
}

/// Combine partial `b` (of a later block) into `a` (elements of compute type `ty`).
pub(super) fn combine(op: ReduceOp, ty: Ty, a: &mut Acc, b: Acc) {
    match (a, b) {
        (Acc::F(x), Acc::F(y)) => match op {
            ReduceOp::Sum | ReduceOp::Mean => *x += y,
            ReduceOp::Prod => *x *= y,
            ReduceOp::Max | ReduceOp::Min => {
                let max = op == ReduceOp::Max;
                if !x.is_nan() && (y.is_nan() || (max && y > *x) || (!max && y < *x)) {
                    *x = y;
                }
            }
        },
        (Acc::I(x), Acc::I(y)) => match op {
            ReduceOp::Sum => *x = x.wrapping_add(y),
            ReduceOp::Prod => *x = x.wrapping_mul(y),
            ReduceOp::Max => *x = (*x).max(y),
            _ => *x = (*x).min(y),
        },
        (Acc::W(x), Acc::W(y)) => *x += y,
        // `b` folded the `n` elements after `a`'s: its positions shift by a's count.
        (
            Acc::Arg { best, at, seen },
            Acc::Arg {
                best: x,
                at: i,
                seen: n,
            },
        ) => {
            if n > 0 && (*seen == 0 || arg_beats(op, ty, x, *best)) {
                (*best, *at) = (x, *seen + i);
            }
            *seen += n;
        }
        _ => unreachable!("partials of one reduction share a kind"),
    }
}

/// Fold a whole tile value; f32 sums use eight f64 lanes (vectorizable).
///
/// # Safety
/// A vector `v` must hold `n` aligned elements of `ty` that are not written meanwhile.
pub(super) unsafe fn fold_tile(
    op: ReduceOp,
    ty: Ty,
    a: &mut Acc,
    v: TileValue,
    n: usize,
    mut first: bool,
) {
    if let (TileValue::Vector(p), Ty::F32, ReduceOp::Sum | ReduceOp::Mean, Acc::F(acc)) =
        (v, ty, op, &mut *a)
    {
        // SAFETY: the caller guarantees a vector `v` holds `n` aligned, unwritten f32s (ty is
        // F32 here).
        let xs = unsafe { std::slice::from_raw_parts(p as *const f32, n) };
        *acc += sum_f64_lanes(xs);
        return;
    }
    for i in 0..n {
        // SAFETY: `i < n` and the caller guarantees a vector `v` holds `n` elements of `ty`.
        fold1(op, ty, a, unsafe { elem(v, ty, i) }, first);
        first = false;
    }
}

crate::math::wide_fn! {
    baseline = sum_f64_lanes_base;
    /// Σ `xs` in eight f64 lanes (sums of many cancelling f32 terms stay as accurate as the
    /// oracle's), the lanes then added in order, then the remainder. Compiled for the CPU's widest vectors.
    fn sum_f64_lanes(xs: &[f32]) -> f64 {
        let mut lanes = [0f64; 8];
        let mut it = xs.chunks_exact(8);
        for c in &mut it {
            for k in 0..8 {
                lanes[k] += c[k] as f64;
            }
        }
        let mut s: f64 = lanes.iter().sum();
        for &x in it.remainder() {
            s += x as f64;
        }
        s
    }
}

/// The final value (compute bits of the result dtype) of an accumulator over `l` elements.
pub(super) fn finish(op: ReduceOp, a: Acc, l: usize, dt: DType) -> u64 {
    match a {
        Acc::F(v) => {
            let v = if op == ReduceOp::Mean {
                v / l as f64
            } else {
                v
            };
            cast_bits(DType::F64, dt, v.to_bits())
        }
        Acc::I(v) => wrap_int(v, dt) as u64,
        Acc::W(v) => wrap_int((v / l as i128) as i64, dt) as u64,
        // The position, encoded in the result dtype as the oracle's `from_i64_as` does.
        Acc::Arg { at, .. } => cast_bits(DType::I64, dt, at),
    }
}

crate::math::wide_fn! {
    baseline = add_row_base;
    /// `sums[i] += v[i]` in f64 for a tile value of compute type `ty` (f32 or f64): the
    /// sum fold of [`fold1`], element by element in the same order; compiled for the
    /// CPU's widest vectors.
    ///
    /// # Safety
    /// A vector `v` must hold `sums.len()` elements.
    pub(crate) unsafe fn add_row(sums: &mut [f64], v: TileValue, ty: Ty) {
        let n = sums.len();
        match v {
            TileValue::Vector(p) if ty == Ty::F32 => {
                // SAFETY: the caller guarantees a vector `v` holds `sums.len()` f32s (ty is F32 in
                // this arm).
                let xs = unsafe { std::slice::from_raw_parts(p as *const f32, n) };
                for (a, &x) in sums.iter_mut().zip(xs) {
                    *a += x as f64;
                }
            }
            TileValue::Vector(p) => {
                // SAFETY: the caller guarantees a vector `v` holds `sums.len()` f64s (ty is F64
                // here).
                let xs = unsafe { std::slice::from_raw_parts(p as *const f64, n) };
                for (a, &x) in sums.iter_mut().zip(xs) {
                    *a += x;
                }
            }
            TileValue::Scalar(b) => {
                let x = match ty {
                    Ty::F32 => f32::from_bits(b as u32) as f64,
                    _ => f64::from_bits(b),
                };
                for a in sums.iter_mut() {
                    *a += x;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_lane_sums_compiled_wide_have_the_baseline_bits() {
        for n in [0, 1, 7, 8, 9, 255, 256, 1000, 1024] {
            // Cancelling terms of mixed magnitude: any reordering would change the bits.
            let xs: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 1013) as f32 - 506.0) * 10f32.powi((i % 9) as i32 - 4))
                .collect();
            let base = sum_f64_lanes_base(&xs);
            let wide = sum_f64_lanes(&xs);
            assert_eq!(base.to_bits(), wide.to_bits(), "n = {n}");
            let mut s1 = vec![0.5f64; n];
            let mut s2 = s1.clone();
            // SAFETY: both sums hold `n` slots and the tile value `n` f32s.
            unsafe {
                add_row_base(&mut s1, TileValue::Vector(xs.as_ptr() as *mut u8), Ty::F32);
                add_row(&mut s2, TileValue::Vector(xs.as_ptr() as *mut u8), Ty::F32);
            }
            assert_eq!(s1, s2, "n = {n}");
        }
    }
}
