//! Oracle semantics of the movement ops: reshape, transpose, narrow, concat,
//! expand, pad, gather and its adjoint scatter-add.
//!
//! Every op except `ScatterAdd` only moves elements, so it is defined by an
//! index map (the source offset of each output element) applied to the raw
//! bytes; that works unchanged for every dtype, complex included.

use super::elementwise::cast;
use super::index::{broadcast_map, ravel, take, unravel};
use crate::{DType, IrError, IrResult, Op, Shape, TensorData};

pub(super) fn eval(op: &Op, inputs: &[&TensorData], out: &Shape) -> IrResult<TensorData> {
    let dims = out
        .static_dims()
        .expect("the dispatcher passes a concrete result type");
    let x = inputs[0];
    match op {
        // Row-major: the flat order of the elements does not change.
        Op::Reshape { .. } => TensorData::new(x.dtype, &dims, x.bytes.clone()),
        Op::Transpose { perm } => Ok(transpose(x, perm, &dims)),
        Op::Narrow { axis, start, .. } => Ok(narrow(x, *axis, *start, &dims)),
        Op::Concat { axis } => Ok(concat(inputs, *axis, &dims)),
        // The target's -1 entries were resolved by shape inference; `dims` is the result.
        Op::Expand { .. } => Ok(take(x, &broadcast_map(&x.dims, &dims), &dims)),
        Op::Pad {
            axis,
            before,
            value,
            ..
        } => Ok(pad(x, *axis, *before, *value, &dims)),
        Op::Gather { axis } => gather(x, inputs[1], *axis, &dims),
        Op::ScatterAdd { axis } => scatter_add(x, inputs[1], inputs[2], *axis),
        other => unreachable!("movement::eval got {}", other.name()),
    }
}

/// Output axis `i` is input axis `perm[i]`.
fn transpose(x: &TensorData, perm: &[usize], dims: &[usize]) -> TensorData {
    let map: Vec<usize> = (0..dims.iter().product())
        .map(|o| {
            let out_idx = unravel(o, dims);
            let mut in_idx = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                in_idx[p] = out_idx[i];
            }
            ravel(&in_idx, &x.dims)
        })
        .collect();
    take(x, &map, dims)
}

/// Elements `start..start + len` of `axis` (shape inference checked the range).
fn narrow(x: &TensorData, axis: usize, start: usize, dims: &[usize]) -> TensorData {
    let map: Vec<usize> = (0..dims.iter().product())
        .map(|o| {
            let mut idx = unravel(o, dims);
            idx[axis] += start;
            ravel(&idx, &x.dims)
        })
        .collect();
    take(x, &map, dims)
}

/// The inputs laid end to end along `axis`: for each index of the axes before
/// `axis`, the matching slab of every input in order.
fn concat(inputs: &[&TensorData], axis: usize, dims: &[usize]) -> TensorData {
    let dtype = inputs[0].dtype;
    let w = dtype.size_bytes();
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let mut bytes = Vec::with_capacity(dims.iter().product::<usize>() * w);
    for o in 0..outer {
        for t in inputs {
            let slab = t.dims[axis] * inner * w;
            bytes.extend_from_slice(&t.bytes[o * slab..(o + 1) * slab]);
        }
    }
    TensorData {
        dtype,
        dims: dims.to_vec(),
        bytes,
    }
}

/// `before` copies of `value` (converted to the dtype like a cast), the input,
/// then `after` copies, along `axis`.
fn pad(x: &TensorData, axis: usize, before: usize, value: f64, dims: &[usize]) -> TensorData {
    let fill = cast(&TensorData::from_f64(&[], &[value]), x.dtype);
    let n = x.dims[axis];
    let w = x.dtype.size_bytes();
    let mut bytes = Vec::with_capacity(dims.iter().product::<usize>() * w);
    for o in 0..dims.iter().product() {
        let mut idx = unravel(o, dims);
        if idx[axis] >= before && idx[axis] < before + n {
            idx[axis] -= before;
            let src = ravel(&idx, &x.dims);
            bytes.extend_from_slice(&x.bytes[src * w..(src + 1) * w]);
        } else {
            bytes.extend_from_slice(&fill.bytes);
        }
    }
    TensorData {
        dtype: x.dtype,
        dims: dims.to_vec(),
        bytes,
    }
}

/// Decode gather/scatter indices and resolve them against an axis of size `n`:
/// integer dtypes as is, floats only when integer-valued; negative indices
/// count from the end (NumPy); anything outside `-n..n` is an error.
fn resolve_indices(
    op: &str,
    indices: &TensorData,
    axis: usize,
    table_dims: &[usize],
) -> IrResult<Vec<usize>> {
    let n = table_dims[axis];
    let raw: Vec<i64> = if indices.dtype.is_float() {
        indices
            .to_f64_vec()
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                if v.fract() == 0.0 && v.abs() < 2f64.powi(63) {
                    Ok(v as i64)
                } else {
                    Err(IrError::new(
                        op,
                        format!(
                            "index {v} (element {i} of the {} indices) is not an integer; float indices must hold whole numbers",
                            indices.dtype
                        ),
                    ))
                }
            })
            .collect::<IrResult<_>>()?
    } else {
        indices.to_i64_vec()
    };
    raw.into_iter()
        .map(|i| {
            let resolved = if i < 0 { i + n as i64 } else { i };
            if resolved < 0 || resolved >= n as i64 {
                Err(IrError::new(
                    op,
                    format!(
                        "index {i} is out of range for axis {axis} of size {n} (table dims {table_dims:?}); valid indices are {}..{n}",
                        -(n as i64)
                    ),
                ))
            } else {
                Ok(resolved as usize)
            }
        })
        .collect()
}

/// For every element of a gather result (`table[..axis] ++ indices ++
/// table[axis+1..]`), the flat offset in the table it reads.
fn gather_map(table_dims: &[usize], idx: &[usize], axis: usize) -> Vec<usize> {
    let outer: usize = table_dims[..axis].iter().product();
    let inner: usize = table_dims[axis + 1..].iter().product();
    let n = table_dims[axis];
    let mut map = Vec::with_capacity(outer * idx.len() * inner);
    for o in 0..outer {
        for &k in idx {
            for i in 0..inner {
                map.push((o * n + k) * inner + i);
            }
        }
    }
    map
}

fn gather(
    table: &TensorData,
    indices: &TensorData,
    axis: usize,
    dims: &[usize],
) -> IrResult<TensorData> {
    let idx = resolve_indices("gather", indices, axis, &table.dims)?;
    Ok(take(table, &gather_map(&table.dims, &idx, axis), dims))
}

/// `base` with every element of `updates` added at the position a gather
/// with the same indices would read; repeated indices accumulate.
///
/// `updates` is first converted to `base`'s dtype; the sums are formed in f64
/// (floats, complex per component) or wrapping i64 (integers) and rounded
/// once on store; for bool the "sum" is a logical or.
fn scatter_add(
    base: &TensorData,
    indices: &TensorData,
    updates: &TensorData,
    axis: usize,
) -> IrResult<TensorData> {
    let idx = resolve_indices("scatter_add", indices, axis, &base.dims)?;
    let map = gather_map(&base.dims, &idx, axis);
    let upd = cast(updates, base.dtype);
    let dt = base.dtype;
    if dt.is_int() {
        let mut acc = base.to_i64_vec();
        for (u, &dst) in upd.to_i64_vec().iter().zip(&map) {
            acc[dst] = acc[dst].wrapping_add(*u);
        }
        Ok(TensorData::from_i64_as(dt, &base.dims, &acc))
    } else if dt == DType::Bool {
        let mut acc = base.to_bool_vec();
        for (u, &dst) in upd.to_bool_vec().iter().zip(&map) {
            acc[dst] |= *u;
        }
        Ok(TensorData::from_bool(&base.dims, &acc))
    } else {
        // Real floats have one component per element, complex two.
        let per = if dt.is_complex() { 2 } else { 1 };
        let mut acc = base.to_f64_vec();
        let u = upd.to_f64_vec();
        for (j, &dst) in map.iter().enumerate() {
            for c in 0..per {
                acc[dst * per + c] += u[j * per + c];
            }
        }
        Ok(TensorData::from_f64_as(dt, &base.dims, &acc))
    }
}
