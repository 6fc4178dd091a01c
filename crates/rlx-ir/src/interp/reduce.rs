//! Oracle semantics of the reductions: `Reduce`, `ArgMax`/`ArgMin`, `Cumsum`.
//!
//! Each output element reduces its group of input elements in row-major
//! order. Floats are accumulated in f64 and rounded once on store; integers
//! in wrapping i64 (the mean uses an exact i128 sum and truncates toward zero).

use super::index::{ravel, unravel};
use crate::{DType, IrError, IrResult, Op, ReduceOp, Shape, TensorData, norm_axis};

pub(super) fn eval(op: &Op, inputs: &[&TensorData], out: &Shape) -> IrResult<TensorData> {
    let dims = out
        .static_dims()
        .expect("the dispatcher passes a concrete result type");
    let x = inputs[0];
    match op {
        Op::Reduce { op: kind, axes, .. } => {
            if axes.is_empty() {
                return Ok(x.clone());
            }
            reduce(*kind, x, axes, out.dtype(), &dims)
        }
        Op::ArgMax { axis, .. } => arg_extremum(true, x, *axis, out.dtype(), &dims),
        Op::ArgMin { axis, .. } => arg_extremum(false, x, *axis, out.dtype(), &dims),
        Op::Cumsum { axis, exclusive } => {
            let ax = norm_axis("cumsum", *axis as i64, x.dims.len())?;
            Ok(cumsum(x, ax, *exclusive))
        }
        other => unreachable!("reduce::eval got {}", other.name()),
    }
}

/// The groups of input offsets that each output element reduces, in output
/// order; every group lists its members in row-major input order. (With
/// `keep_dim` the reduced axes become size 1, which leaves the flat output
/// order unchanged, so the grouping is the same.)
fn groups(in_dims: &[usize], axes: &[usize]) -> Vec<Vec<usize>> {
    let kept: Vec<usize> = (0..in_dims.len()).filter(|a| !axes.contains(a)).collect();
    let kept_dims: Vec<usize> = kept.iter().map(|&a| in_dims[a]).collect();
    let mut out = vec![Vec::new(); kept_dims.iter().product()];
    for flat in 0..in_dims.iter().product() {
        let idx = unravel(flat, in_dims);
        let key: Vec<usize> = kept.iter().map(|&a| idx[a]).collect();
        out[ravel(&key, &kept_dims)].push(flat);
    }
    out
}

fn reduce(
    kind: ReduceOp,
    x: &TensorData,
    axes: &[usize],
    dt: DType,
    dims: &[usize],
) -> IrResult<TensorData> {
    let gs = groups(&x.dims, axes);
    let name = format!("reduce_{}", kind.name());
    let empty = |what: &str| {
        IrError::new(
            name.clone(),
            format!(
                "reduce_{} of an empty axis: axes {axes:?} of dims {:?} hold no element, and {what}; slice or pad the input so every group is non-empty",
                kind.name(),
                x.dims
            ),
        )
    };
    if matches!(kind, ReduceOp::Max | ReduceOp::Min) && gs.first().is_some_and(|g| g.is_empty()) {
        return Err(empty("max/min have no identity element"));
    }
    let is_max = kind == ReduceOp::Max;
    if dt.is_float() {
        let v = x.to_f64_vec();
        let r: Vec<f64> = gs
            .iter()
            .map(|g| {
                let vals = g.iter().map(|&i| v[i]);
                match kind {
                    // Explicit folds from +0 and 1: an empty sum is 0, an empty product 1.
                    ReduceOp::Sum => vals.fold(0.0, |a, b| a + b),
                    // 0/0 = NaN for an empty group.
                    ReduceOp::Mean => vals.fold(0.0, |a, b| a + b) / g.len() as f64,
                    ReduceOp::Prod => vals.fold(1.0, |a, b| a * b),
                    ReduceOp::Max | ReduceOp::Min => vals
                        .reduce(|a, b| nan_extremum(is_max, a, b))
                        .expect("non-empty group"),
                }
            })
            .collect();
        Ok(TensorData::from_f64_as(dt, dims, &r))
    } else if dt.is_int() {
        let v = x.to_i64_vec();
        if kind == ReduceOp::Mean && gs.first().is_some_and(|g| g.is_empty()) {
            return Err(empty("an integer mean of nothing has no value"));
        }
        let r: Vec<i64> = gs
            .iter()
            .map(|g| {
                let vals = g.iter().map(|&i| v[i]);
                match kind {
                    ReduceOp::Sum => vals.fold(0i64, i64::wrapping_add),
                    // i128 holds the exact sum of any i64 values; `/` truncates toward zero.
                    ReduceOp::Mean => (vals.map(i128::from).sum::<i128>() / g.len() as i128) as i64,
                    ReduceOp::Prod => vals.fold(1i64, i64::wrapping_mul),
                    ReduceOp::Max => vals.max().expect("non-empty group"),
                    ReduceOp::Min => vals.min().expect("non-empty group"),
                }
            })
            .collect();
        Ok(TensorData::from_i64_as(dt, dims, &r))
    } else if dt == DType::Bool && matches!(kind, ReduceOp::Max | ReduceOp::Min) {
        // max = any, min = all.
        let v = x.to_bool_vec();
        let r: Vec<bool> = gs
            .iter()
            .map(|g| {
                if is_max {
                    g.iter().any(|&i| v[i])
                } else {
                    g.iter().all(|&i| v[i])
                }
            })
            .collect();
        Ok(TensorData::from_bool(dims, &r))
    } else {
        Err(IrError::new(
            name,
            format!(
                "is not defined for {dt} input (dims {:?}); cast to a numeric type first",
                x.dims
            ),
        ))
    }
}

/// max/min of two floats where NaN wins (NumPy's `max`/`min` reductions).
fn nan_extremum(is_max: bool, a: f64, b: f64) -> f64 {
    if a.is_nan() {
        a
    } else if b.is_nan() || (is_max && b > a) || (!is_max && b < a) {
        b
    } else {
        a
    }
}

/// Index (along `axis`) of the first maximum (`is_max`) or minimum; a NaN
/// counts as the extremum, so the first NaN wins. The index is encoded in the
/// result dtype (the input's: F32-encoded for f32 input).
fn arg_extremum(
    is_max: bool,
    x: &TensorData,
    axis: usize,
    dt: DType,
    dims: &[usize],
) -> IrResult<TensorData> {
    let name = if is_max { "argmax" } else { "argmin" };
    let gs = groups(&x.dims, &[axis]);
    if gs.first().is_some_and(|g| g.is_empty()) {
        return Err(IrError::new(
            name,
            format!(
                "axis {axis} of dims {:?} is empty: there is no extremum",
                x.dims
            ),
        ));
    }
    let better = |cand: f64, best: f64| -> bool {
        if best.is_nan() {
            false
        } else {
            cand.is_nan() || (is_max && cand > best) || (!is_max && cand < best)
        }
    };
    // Group members are consecutive positions along `axis`, so the position in
    // the group is the index along the axis.
    let idx: Vec<i64> = if x.dtype.is_int() {
        let v = x.to_i64_vec();
        gs.iter()
            .map(|g| {
                let mut best = 0;
                for (k, &i) in g.iter().enumerate() {
                    let (c, b) = (v[i], v[g[best]]);
                    if (is_max && c > b) || (!is_max && c < b) {
                        best = k;
                    }
                }
                best as i64
            })
            .collect()
    } else if x.dtype.is_float() {
        let v = x.to_f64_vec();
        gs.iter()
            .map(|g| {
                let mut best = 0;
                for (k, &i) in g.iter().enumerate() {
                    if better(v[i], v[g[best]]) {
                        best = k;
                    }
                }
                best as i64
            })
            .collect()
    } else {
        return Err(IrError::new(
            name,
            format!(
                "needs a real numeric input, got {} dims {:?}",
                x.dtype, x.dims
            ),
        ));
    };
    Ok(TensorData::from_i64_as(dt, dims, &idx))
}

/// Running sums along `axis`: inclusive `out[i] = x[0] + … + x[i]`, exclusive
/// `out[i] = x[0] + … + x[i−1]` (so `out[0] = 0`). The running sum is kept in
/// f64 (wrapping i64 for integers); each output is rounded once.
fn cumsum(x: &TensorData, axis: usize, exclusive: bool) -> TensorData {
    let n = x.dims[axis];
    let inner: usize = x.dims[axis + 1..].iter().product();
    let outer: usize = x.dims[..axis].iter().product();
    let at = |o: usize, k: usize, i: usize| (o * n + k) * inner + i;
    if x.dtype.is_int() {
        let v = x.to_i64_vec();
        let mut r = vec![0i64; v.len()];
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = 0i64;
                for k in 0..n {
                    let p = at(o, k, i);
                    if exclusive {
                        r[p] = acc;
                        acc = acc.wrapping_add(v[p]);
                    } else {
                        acc = acc.wrapping_add(v[p]);
                        r[p] = acc;
                    }
                }
            }
        }
        TensorData::from_i64_as(x.dtype, &x.dims, &r)
    } else {
        let v = x.to_f64_vec();
        let mut r = vec![0f64; v.len()];
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = 0f64;
                for k in 0..n {
                    let p = at(o, k, i);
                    if exclusive {
                        r[p] = acc;
                        acc += v[p];
                    } else {
                        acc += v[p];
                        r[p] = acc;
                    }
                }
            }
        }
        TensorData::from_f64_as(x.dtype, &x.dims, &r)
    }
}
