//! Element-wise and reduction calls: activations, binary arithmetic and comparisons
//! against tensors (broadcasting or not) and every scalar kind, `where_`,
//! `masked_fill`, casts between dtypes, reductions over axis lists, statistics,
//! arg-reductions, running sums and softmax.

use super::case::Case;
use super::leaves;
use super::shape_ops::{axis, operand, signed_axis};
use super::source::Draw;
use rlx_tensor::{Activation, DType, Dim};

/// The right-hand side of a binary call: another tensor or a host scalar.
#[derive(Clone, Copy, Debug)]
enum Rhs {
    T,
    F64(f64),
    F32(f32),
    I32(i32),
    I64(i64),
    Bool(bool),
}

impl Rhs {
    fn code(self, other: &str) -> String {
        match self {
            Rhs::T => format!("&{other}"),
            Rhs::F64(v) => format!("{v:?}f64"),
            Rhs::F32(v) => format!("{v:?}f32"),
            Rhs::I32(v) => format!("{v}i32"),
            Rhs::I64(v) => format!("{v}i64"),
            Rhs::Bool(v) => format!("{v}"),
        }
    }
}

/// `x.$method(rhs)` for whichever kind `rhs` is (the methods take `impl Into<…>`).
macro_rules! with_rhs {
    ($x:expr, $method:ident, $rhs:expr, $other:expr) => {
        match $rhs {
            Rhs::T => $x.$method($other),
            Rhs::F64(v) => $x.$method(v),
            Rhs::F32(v) => $x.$method(v),
            Rhs::I32(v) => $x.$method(v),
            Rhs::I64(v) => $x.$method(v),
            Rhs::Bool(v) => $x.$method(v),
        }
    };
}

/// `mask.try_where(on_true, on_false)` for whichever kind `on_false` is.
macro_rules! where_call {
    ($m:expr, $t:expr, $rf:expr, $ff:expr) => {
        match $rf {
            Rhs::T => $m.try_where($t, $ff),
            Rhs::F64(v) => $m.try_where($t, v),
            Rhs::F32(v) => $m.try_where($t, v),
            Rhs::I32(v) => $m.try_where($t, v),
            Rhs::I64(v) => $m.try_where($t, v),
            Rhs::Bool(v) => $m.try_where($t, v),
        }
    };
}

const BINARY: [&str; 9] = [
    "try_add",
    "try_sub",
    "try_mul",
    "try_div",
    "try_maximum",
    "try_minimum",
    "try_pow",
    "try_rem",
    "try_atan2",
];
const COMPARE: [&str; 6] = ["try_eq", "try_ne", "try_lt", "try_le", "try_gt", "try_ge"];

fn scalar(d: &mut Draw) -> Rhs {
    match d.below(6) {
        0 => Rhs::F32(d.pick(&[0.5, -1.5, 2.0, 0.0])),
        1 => Rhs::I32(d.pick(&[0, 1, -3, 7])),
        2 => {
            // Above 2^53 the i64 cannot be represented exactly; the call must say so.
            let big = d.percent(20);
            Rhs::I64(if big {
                d.pick(&[(1 << 53) + 1, i64::MIN, i64::MAX])
            } else {
                d.range(-4, 4)
            })
        }
        3 => Rhs::Bool(d.below(2) == 1),
        _ => Rhs::F64(d.pick(&[1.0, -0.25, 3.0, 0.0, 1e-3])),
    }
}

/// A second operand for `x`: the same slot, a tensor shaped to broadcast with it
/// (dims replaced by 1 or dropped from the front), or any other tensor.
fn partner(c: &mut Case, d: &mut Draw, x: usize) -> Option<usize> {
    match d.below(4) {
        0 => Some(x),
        1 => operand(c, d),
        _ => {
            let s = c.shape(x);
            if !s.is_static() {
                // A static operand against a dynamic one: its dims are 1 or a guess.
                let dims: Vec<usize> = s
                    .dims()
                    .iter()
                    .map(|dim| match dim {
                        Dim::Static(n) if d.percent(60) => *n,
                        _ => 1,
                    })
                    .collect();
                let dt = pick_dtype(d, s.dtype());
                return leaves::constant(c, d, &dims, dt);
            }
            let mut dims = s.static_dims().unwrap();
            for v in dims.iter_mut() {
                if d.percent(30) {
                    *v = 1;
                }
            }
            let drop = d.below(dims.len() + 1);
            if d.percent(40) {
                dims.drain(..drop);
            }
            if d.percent(8) {
                dims.push(d.pick(&[2, 3, 7]));
            }
            let dt = pick_dtype(d, s.dtype());
            leaves::constant(c, d, &dims, dt)
        }
    }
}

/// Usually `dt`, now and then another dtype (mixed-dtype operands must be rejected
/// or handled the same way by the compiled path and the oracle).
fn pick_dtype(d: &mut Draw, dt: DType) -> DType {
    if d.percent(85) {
        dt
    } else {
        d.pick(&leaves::DTYPES)
    }
}

/// One element-wise or reduction call on a random operand.
pub fn step(c: &mut Case, d: &mut Draw) {
    let Some(x) = operand(c, d) else { return };
    let rank = c.shape(x).rank();
    let xn = c.name(x);
    match d.below(16) {
        0 | 1 => {
            let a = d.pick(&Activation::ALL);
            c.call(
                format!("{xn}.try_activation(Activation::{a:?})"),
                &[x],
                move |t| t[0].try_activation(a).map(|t| vec![t]),
            );
        }
        2..=4 => binary(c, d, x, true),
        5 => binary(c, d, x, false),
        6 => where_(c, d, x),
        7 => {
            let to = if d.percent(4) {
                DType::C64
            } else {
                d.pick(&leaves::ALL_DTYPES)
            };
            c.call(format!("{xn}.try_cast(DType::{to:?})"), &[x], move |t| {
                t[0].try_cast(to).map(|t| vec![t])
            });
        }
        8..=10 => {
            let axes = axes(d, rank);
            let keep = d.below(2) == 1;
            let m = d.pick(&[
                "try_sum", "try_mean", "try_max", "try_min", "try_prod", "try_var", "try_std",
                "try_norm",
            ]);
            let ax2 = axes.clone();
            c.call(format!("{xn}.{m}({axes:?}, {keep})"), &[x], move |t| {
                let x = &t[0];
                match m {
                    "try_sum" => x.try_sum(ax2, keep),
                    "try_mean" => x.try_mean(ax2, keep),
                    "try_max" => x.try_max(ax2, keep),
                    "try_min" => x.try_min(ax2, keep),
                    "try_prod" => x.try_prod(ax2, keep),
                    "try_var" => x.try_var(ax2, keep),
                    "try_std" => x.try_std(ax2, keep),
                    _ => x.try_norm(ax2, keep),
                }
                .map(|t| vec![t])
            });
        }
        11 => {
            let a = axis(d, rank);
            let keep = d.below(2) == 1;
            let m = d.pick(&["try_logsumexp", "try_argmax", "try_argmin"]);
            c.call(format!("{xn}.{m}({a}, {keep})"), &[x], move |t| {
                match m {
                    "try_logsumexp" => t[0].try_logsumexp(a, keep),
                    "try_argmax" => t[0].try_argmax(a, keep),
                    _ => t[0].try_argmin(a, keep),
                }
                .map(|t| vec![t])
            });
        }
        12 | 13 => {
            let a = signed_axis(d, rank);
            match d.below(3) {
                0 => {
                    let excl = d.below(2) == 1;
                    c.call(format!("{xn}.try_cumsum({a}, {excl})"), &[x], move |t| {
                        t[0].try_cumsum(a, excl).map(|t| vec![t])
                    });
                }
                1 => {
                    c.call(format!("{xn}.try_softmax({a})"), &[x], move |t| {
                        t[0].try_softmax(a).map(|t| vec![t])
                    });
                }
                _ => {
                    c.call(format!("{xn}.try_log_softmax({a})"), &[x], move |t| {
                        t[0].try_log_softmax(a).map(|t| vec![t])
                    });
                }
            }
        }
        14 => {
            let Some(m) = partner(c, d, x) else { return };
            let v = d.pick(&[0.0, -1.0, 9.5]);
            let (xn, mn) = (c.name(x), c.name(m));
            c.call(
                format!("{xn}.try_masked_fill(&{mn}, {v:?})"),
                &[x, m],
                move |t| t[0].try_masked_fill(&t[1], v).map(|t| vec![t]),
            );
        }
        _ => {
            let e = if d.percent(10) {
                d.pick(&[0, 9, 40])
            } else {
                d.range(1, 8) as u32
            };
            let m = if d.percent(10) {
                d.pick(&[24, 60])
            } else {
                d.range(0, 10) as u32
            };
            let max = if d.percent(10) {
                d.pick(&[f32::NAN, -1.0, f32::INFINITY, 0.0])
            } else {
                d.pick(&[448.0, 6.0, 57344.0, 65504.0])
            };
            c.call(
                format!("{xn}.try_round_to_format({e}, {m}, {max:?})"),
                &[x],
                move |t| t[0].try_round_to_format(e, m, max).map(|t| vec![t]),
            );
        }
    }
}

/// An axis list for a reduction: distinct valid axes most of the time, repeated or
/// out-of-range axes otherwise.
fn axes(d: &mut Draw, rank: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..rank).filter(|_| d.percent(50)).collect();
    if d.percent(12) {
        v.push(axis(d, rank));
    }
    if d.percent(6) && !v.is_empty() {
        v.push(v[0]);
    }
    v
}

fn binary(c: &mut Case, d: &mut Draw, x: usize, arith: bool) {
    let (rhs, other) = if d.percent(60) {
        match partner(c, d, x) {
            Some(o) => (Rhs::T, o),
            None => return,
        }
    } else {
        (scalar(d), x)
    };
    let m = if arith {
        d.pick(&BINARY)
    } else {
        d.pick(&COMPARE)
    };
    let code = format!("{}.{m}({})", c.name(x), rhs.code(&c.name(other)));
    let ins = if matches!(rhs, Rhs::T) {
        vec![x, other]
    } else {
        vec![x]
    };
    c.call(code, &ins, move |t| {
        let (a, b) = (&t[0], t.get(1).unwrap_or(&t[0]));
        match m {
            "try_add" => with_rhs!(a, try_add, rhs, b),
            "try_sub" => with_rhs!(a, try_sub, rhs, b),
            "try_mul" => with_rhs!(a, try_mul, rhs, b),
            "try_div" => with_rhs!(a, try_div, rhs, b),
            "try_maximum" => with_rhs!(a, try_maximum, rhs, b),
            "try_minimum" => with_rhs!(a, try_minimum, rhs, b),
            "try_pow" => with_rhs!(a, try_pow, rhs, b),
            "try_rem" => with_rhs!(a, try_rem, rhs, b),
            "try_atan2" => with_rhs!(a, try_atan2, rhs, b),
            "try_eq" => with_rhs!(a, try_eq, rhs, b),
            "try_ne" => with_rhs!(a, try_ne, rhs, b),
            "try_lt" => with_rhs!(a, try_lt, rhs, b),
            "try_le" => with_rhs!(a, try_le, rhs, b),
            "try_gt" => with_rhs!(a, try_gt, rhs, b),
            _ => with_rhs!(a, try_ge, rhs, b),
        }
        .map(|t| vec![t])
    });
}

/// `mask.try_where(on_true, on_false)` with tensor or scalar branches.
fn where_(c: &mut Case, d: &mut Draw, mask: usize) {
    let Some(t) = partner(c, d, mask) else { return };
    let Some(f) = partner(c, d, mask) else { return };
    let (rt, rf) = match d.below(5) {
        0 => (scalar(d), scalar(d)),
        1 => (Rhs::T, scalar(d)),
        2 => (scalar(d), Rhs::T),
        _ => (Rhs::T, Rhs::T),
    };
    let code = format!(
        "{}.try_where({}, {})",
        c.name(mask),
        rt.code(&c.name(t)),
        rf.code(&c.name(f))
    );
    c.call(code, &[mask, t, f], move |x| {
        let (m, tt, ff) = (&x[0], &x[1], &x[2]);
        match rt {
            Rhs::T => where_call!(m, tt, rf, ff),
            Rhs::F64(v) => where_call!(m, v, rf, ff),
            Rhs::F32(v) => where_call!(m, v, rf, ff),
            Rhs::I32(v) => where_call!(m, v, rf, ff),
            Rhs::I64(v) => where_call!(m, v, rf, ff),
            Rhs::Bool(v) => where_call!(m, v, rf, ff),
        }
        .map(|t| vec![t])
    });
}
