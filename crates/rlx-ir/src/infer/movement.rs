//! Data movement: reshape, transpose, narrow, pad, concat, expand, broadcast-like, gather, scatter.

use super::{arity, check_axis, err, require_same_dtype};
use crate::IrError;
use crate::{DType, Dim, IrResult, Op, Shape};

pub(super) fn infer(name: &str, op: &Op, inputs: &[&Shape]) -> IrResult<Shape> {
    match op {
        Op::Reshape { new_shape } => {
            arity(name, inputs, 1, "x")?;
            reshape_shape(name, inputs[0], new_shape)
        }
        Op::Transpose { perm } => {
            arity(name, inputs, 1, "x")?;
            let x = inputs[0];
            let mut seen = vec![false; x.rank()];
            let bad = perm.len() != x.rank()
                || perm
                    .iter()
                    .any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true));
            if bad {
                return Err(err(
                    name,
                    format!(
                        "perm {perm:?} is not a permutation of 0..{r} for {x}; list each of the {r} axes exactly once",
                        r = x.rank()
                    ),
                ));
            }
            Ok(x.with_dims(perm.iter().map(|&p| x.dim(p)).collect()))
        }
        Op::Narrow { axis, start, len } => {
            arity(name, inputs, 1, "x")?;
            let x = inputs[0];
            check_axis(name, *axis, x)?;
            let end = start.checked_add(*len);
            if let Some(n) = x.dim(*axis).as_static()
                && end.is_none_or(|e| e > n)
            {
                return Err(err(
                    name,
                    format!(
                        "range start {start} + len {len} exceeds axis {axis} of size {n} in {x}; keep start + len ≤ {n}"
                    ),
                ));
            }
            Ok(x.with_dim(*axis, Dim::Static(*len)))
        }
        Op::Pad {
            axis,
            before,
            after,
            ..
        } => {
            arity(name, inputs, 1, "x")?;
            let x = inputs[0];
            check_axis(name, *axis, x)?;
            match x.dim(*axis) {
                Dim::Static(n) => {
                    match n.checked_add(*before).and_then(|m| m.checked_add(*after)) {
                        Some(total) => Ok(x.with_dim(*axis, Dim::Static(total))),
                        None => Err(err(
                            name,
                            format!(
                                "padding axis {axis} of {x} by {before} before and {after} after overflows usize; use smaller pads"
                            ),
                        )),
                    }
                }
                d if *before == 0 && *after == 0 => Ok(x.with_dim(*axis, d)),
                d => Err(err(
                    name,
                    format!(
                        "cannot pad dynamic axis {axis} ({d}) of {x}: the padded size {d} + {before} + {after} is not a symbol; pad a static axis or bind the size first"
                    ),
                )),
            }
        }
        Op::Concat { axis } => concat_shape(name, *axis, inputs),
        Op::Expand { target_shape } => {
            arity(name, inputs, 1, "x")?;
            expand_shape(name, inputs[0], target_shape)
        }
        Op::Gather { axis } => {
            arity(name, inputs, 2, "table, indices")?;
            gather_shape(name, *axis, inputs[0], inputs[1])
        }
        Op::ScatterAdd { axis } => {
            arity(name, inputs, 3, "base, indices, updates")?;
            let (base, idx, upd) = (inputs[0], inputs[1], inputs[2]);
            let expected = gather_shape(name, *axis, base, idx)?;
            if expected.dims() != upd.dims() {
                return Err(err(
                    name,
                    format!(
                        "updates are {upd} but gathering {base} at indices {idx} along axis {axis} gives {expected}; the updates must have that shape"
                    ),
                ));
            }
            require_same_dtype(name, ("base", base), ("updates", upd))?;
            Ok(base.clone())
        }
        Op::BroadcastLike => {
            arity(name, inputs, 2, "x, like")?;
            let (x, like) = (inputs[0], inputs[1]);
            let offset = like.rank().checked_sub(x.rank());
            let fits = offset.is_some_and(|off| {
                (0..x.rank()).all(|i| x.dim(i) == like.dim(off + i) || x.dim(i) == Dim::Static(1))
            });
            if !fits {
                return Err(err(
                    name,
                    format!(
                        "cannot broadcast {x} to the dims of {like}: right-aligned, every axis of x must equal like's or be 1 (and x cannot have more axes)"
                    ),
                ));
            }
            Ok(like.with_dtype(x.dtype()))
        }
        _ => unreachable!("movement::infer called with {}", op.name()),
    }
}

fn gather_shape(name: &str, axis: usize, table: &Shape, idx: &Shape) -> IrResult<Shape> {
    check_axis(name, axis, table)?;
    if idx.dtype() == DType::Bool || idx.dtype().is_complex() {
        return Err(IrError::dtype(
            name,
            format!(
                "indices must be integers (or integer-valued floats), got {idx}; cast them with .cast(DType::I64)"
            ),
        ));
    }
    let mut dims = table.dims()[..axis].to_vec();
    dims.extend_from_slice(idx.dims());
    dims.extend_from_slice(&table.dims()[axis + 1..]);
    Ok(table.with_dims(dims))
}

fn concat_shape(name: &str, axis: usize, inputs: &[&Shape]) -> IrResult<Shape> {
    let Some(first) = inputs.first() else {
        return Err(err(
            name,
            "needs at least one tensor; pass a non-empty list",
        ));
    };
    check_axis(name, axis, first)?;
    let mut total = Some(0usize);
    for (i, t) in inputs.iter().enumerate() {
        if t.rank() != first.rank() || t.dtype() != first.dtype() {
            return Err(err(
                name,
                format!(
                    "tensor {i} is {t} but tensor 0 is {first}: ranks and dtypes must match (cast or reshape first)"
                ),
            ));
        }
        if let Some(a) = (0..first.rank()).find(|&a| a != axis && t.dim(a) != first.dim(a)) {
            return Err(err(
                name,
                format!(
                    "tensor {i} is {t} but tensor 0 is {first}: every axis except the concat axis {axis} must match (axis {a} differs)"
                ),
            ));
        }
        total = match (total, t.dim(axis).as_static()) {
            (Some(acc), Some(n)) => match acc.checked_add(n) {
                Some(sum) => Some(sum),
                None => {
                    return Err(err(
                        name,
                        format!(
                            "the sizes of axis {axis} of the {} tensors add up to more than usize holds; concatenate fewer or smaller tensors",
                            inputs.len()
                        ),
                    ));
                }
            },
            _ => None,
        };
    }
    match total {
        Some(n) => Ok(first.with_dim(axis, Dim::Static(n))),
        // One dynamic piece plus static pieces of size 0 is still that symbol.
        None => {
            let sizes: Vec<Dim> = inputs.iter().map(|t| t.dim(axis)).collect();
            let nonzero: Vec<Dim> = sizes
                .iter()
                .copied()
                .filter(|d| *d != Dim::Static(0))
                .collect();
            if nonzero.len() == 1 {
                return Ok(first.with_dim(axis, nonzero[0]));
            }
            let list: Vec<String> = sizes.iter().map(|d| d.to_string()).collect();
            Err(err(
                name,
                format!(
                    "cannot concatenate along dynamic axis {axis} (sizes {}): the total is not a single symbol; concatenate along a static axis or bind the dynamic sizes first",
                    list.join(" + ")
                ),
            ))
        }
    }
}

fn reshape_shape(name: &str, x: &Shape, new_shape: &[i64]) -> IrResult<Shape> {
    let wild = new_shape.iter().filter(|&&d| d == -1).count();
    if wild > 1 || new_shape.iter().any(|&d| d < -1) {
        return Err(err(
            name,
            format!(
                "target {new_shape:?} for {x} is invalid: sizes must be ≥ 0 with at most one -1 (the inferred axis)"
            ),
        ));
    }
    let known = new_shape
        .iter()
        .filter(|&&d| d >= 0)
        .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
        .ok_or_else(|| {
            err(
                name,
                format!("target {new_shape:?} for {x} has more elements than fit in usize"),
            )
        })?;
    let fill = |inferred: Dim| -> Vec<Dim> {
        new_shape
            .iter()
            .map(|&d| {
                if d == -1 {
                    inferred
                } else {
                    Dim::Static(d as usize)
                }
            })
            .collect()
    };
    if let Some(total) = x.num_elements() {
        if wild == 0 {
            if known != total {
                return Err(err(
                    name,
                    format!(
                        "cannot reshape {x} ({total} elements) to {new_shape:?} ({known} elements); the counts must match"
                    ),
                ));
            }
            return Ok(x.with_dims(fill(Dim::Static(0))));
        }
        if known == 0 {
            return Err(err(
                name,
                format!(
                    "cannot reshape {x} to {new_shape:?}: the -1 is ambiguous when the other sizes multiply to 0; give every size explicitly"
                ),
            ));
        }
        if total % known != 0 {
            return Err(err(
                name,
                format!(
                    "cannot reshape {x} ({total} elements) to {new_shape:?}: {total} is not divisible by {known}, the product of the given sizes"
                ),
            ));
        }
        return Ok(x.with_dims(fill(Dim::Static(total / known))));
    }
    // A dynamic input: the -1 takes the one dynamic symbol when the static parts
    // multiply to the same product on both sides (so the element counts agree for
    // every binding).
    let dynamic: Vec<Dim> = x
        .dims()
        .iter()
        .copied()
        .filter(|d| !d.is_static())
        .collect();
    let static_prod: usize = x
        .dims()
        .iter()
        .filter_map(|d| d.as_static())
        .fold(1usize, |acc, n| acc.saturating_mul(n));
    if wild == 1 && dynamic.len() == 1 && static_prod == known {
        return Ok(x.with_dims(fill(dynamic[0])));
    }
    Err(err(
        name,
        format!(
            "cannot reshape dynamic {x} to {new_shape:?}: with exactly one dynamic axis, use -1 for it and keep the product of the static sizes ({static_prod}) unchanged; otherwise bind the dynamic sizes first"
        ),
    ))
}

fn expand_shape(name: &str, x: &Shape, target: &[i64]) -> IrResult<Shape> {
    if target.len() < x.rank() {
        return Err(err(
            name,
            format!(
                "target {target:?} has fewer axes than {x}; broadcasting only adds leading axes (reshape to drop axes)"
            ),
        ));
    }
    let offset = target.len() - x.rank();
    let mut dims = Vec::with_capacity(target.len());
    for (i, &t) in target.iter().enumerate() {
        let src = i.checked_sub(offset).map(|j| x.dim(j));
        let d = match (t, src) {
            (-1, Some(s)) => s,
            (-1, None) => {
                return Err(err(
                    name,
                    format!(
                        "-1 in target {target:?} at new leading axis {i} has no dim of {x} to keep; give its size"
                    ),
                ));
            }
            (t, _) if t < 0 => {
                return Err(err(
                    name,
                    format!(
                        "target {target:?} for {x} has the negative size {t}; sizes are ≥ 0 (or -1 to keep the input's dim)"
                    ),
                ));
            }
            (t, None) => Dim::Static(t as usize),
            (t, Some(s)) => {
                let t = t as usize;
                if s == Dim::Static(t) || s == Dim::Static(1) {
                    Dim::Static(t)
                } else {
                    return Err(err(
                        name,
                        format!(
                            "cannot broadcast {x} to {target:?}: target axis {i} is {t} but the input has {s} there, which is neither {t} nor 1 (use -1 to keep a dynamic dim)"
                        ),
                    ));
                }
            }
        };
        dims.push(d);
    }
    Ok(x.with_dims(dims))
}
