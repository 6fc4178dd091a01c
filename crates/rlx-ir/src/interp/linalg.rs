//! Oracle semantics of the linear-algebra ops: `MatMul`,
//! `FusedMatMulBiasAct`, `DenseSolve` and `SynthMatMul`.
//!
//! Float products are accumulated in f64 (in index order) and rounded once on
//! store; integer products use wrapping i64 arithmetic.

use super::elementwise::{activation_f64, activation_i64, cast};
use super::index::broadcast_map;
use crate::{IrError, IrResult, Op, Shape, SynthKind, TensorData};

pub(super) fn eval(op: &Op, inputs: &[&TensorData], out: &Shape) -> IrResult<TensorData> {
    let dims = out
        .static_dims()
        .expect("the dispatcher passes a concrete result type");
    match op {
        Op::MatMul => matmul_bias_act(inputs[0], inputs[1], None, None, out, &dims),
        Op::FusedMatMulBiasAct { activation } => matmul_bias_act(
            inputs[0],
            inputs[1],
            Some(inputs[2]),
            *activation,
            out,
            &dims,
        ),
        Op::DenseSolve => solve(inputs[0], inputs[1], out, &dims),
        Op::SynthMatMul {
            kind:
                SynthKind::Codebook {
                    entry_dim,
                    num_entries,
                },
        } => synth_matmul(
            inputs[0],
            inputs[1],
            inputs[2],
            *entry_dim as usize,
            *num_entries as usize,
            out,
            &dims,
        ),
        other => unreachable!("linalg::eval got {}", other.name()),
    }
}

/// `[.., M, K] × [.., K, N]` with broadcast batch axes, over any element type:
/// `out[b, m, n] = fold(zero, k ↦ mul_add(acc, a[b, m, k], b[b, k, n]))`.
fn batched_matmul<T: Copy>(
    a: &[T],
    a_dims: &[usize],
    b: &[T],
    b_dims: &[usize],
    out_dims: &[usize],
    zero: T,
    mul_add: impl Fn(T, T, T) -> T,
) -> Vec<T> {
    let r = out_dims.len();
    let (m, n) = (out_dims[r - 2], out_dims[r - 1]);
    let k = a_dims[a_dims.len() - 1];
    let batch = &out_dims[..r - 2];
    let a_batch = broadcast_map(&a_dims[..a_dims.len() - 2], batch);
    let b_batch = broadcast_map(&b_dims[..b_dims.len() - 2], batch);
    let mut out = Vec::with_capacity(out_dims.iter().product());
    for (ab, bb) in a_batch.iter().zip(&b_batch) {
        let (ao, bo) = (ab * m * k, bb * k * n);
        for i in 0..m {
            for j in 0..n {
                let mut acc = zero;
                for t in 0..k {
                    acc = mul_add(acc, a[ao + i * k + t], b[bo + t * n + j]);
                }
                out.push(acc);
            }
        }
    }
    out
}

/// `act(a · b + bias)`; plain `MatMul` has no bias and no activation. The
/// bias (`[N]`, one value per output column) is added in f64 (wrapping i64
/// for integers) before the activation and the single rounding on store.
fn matmul_bias_act(
    a: &TensorData,
    b: &TensorData,
    bias: Option<&TensorData>,
    act: Option<crate::Activation>,
    out: &Shape,
    dims: &[usize],
) -> IrResult<TensorData> {
    let dt = out.dtype();
    let n = dims[dims.len() - 1];
    // The linear layer accepts a single example `x: [K]` (result `[N]`): it is
    // the one-row matrix `[1, K]` giving `[1, N]`, the same elements in order.
    let (a_dims, mm_dims) = if a.dims.len() == 1 {
        (vec![1, a.dims[0]], vec![1, n])
    } else {
        (a.dims.clone(), dims.to_vec())
    };
    if dt.is_float() {
        let mut v = batched_matmul(
            &a.to_f64_vec(),
            &a_dims,
            &b.to_f64_vec(),
            &b.dims,
            &mm_dims,
            0.0,
            |acc, x, y| acc + x * y,
        );
        if let Some(bias) = bias {
            let bv = cast(bias, dt).to_f64_vec();
            for (i, e) in v.iter_mut().enumerate() {
                *e += bv[i % n];
            }
        }
        if let Some(act) = act {
            v.iter_mut().for_each(|e| *e = activation_f64(act, *e));
        }
        Ok(TensorData::from_f64_as(dt, dims, &v))
    } else if dt.is_int() {
        let mut v = batched_matmul(
            &a.to_i64_vec(),
            &a_dims,
            &b.to_i64_vec(),
            &b.dims,
            &mm_dims,
            0i64,
            |acc, x, y| acc.wrapping_add(x.wrapping_mul(y)),
        );
        if let Some(bias) = bias {
            let bv = cast(bias, dt).to_i64_vec();
            for (i, e) in v.iter_mut().enumerate() {
                *e = e.wrapping_add(bv[i % n]);
            }
        }
        if let Some(act) = act {
            for e in v.iter_mut() {
                *e = activation_i64(act, *e)?;
            }
        }
        Ok(TensorData::from_i64_as(dt, dims, &v))
    } else {
        Err(IrError::new(
            if bias.is_some() { "linear" } else { "matmul" },
            format!(
                "needs real numeric operands, got {} {:?} and {} {:?}",
                a.dtype, a.dims, b.dtype, b.dims
            ),
        ))
    }
}

/// `x` with `a · x = b` for `a: [.., n, n]` and `b: [.., n]` or `[.., n, k]`.
///
/// Gaussian elimination with partial pivoting in f64 (the first row with the
/// largest |entry| is the pivot). A pivot with |p| ≤ 1e-12 · max|a| means the
/// matrix is singular (an error). A matrix with a NaN or infinite entry
/// gives an all-NaN solution for that system. `a`'s batch axes must equal
/// `b`'s or be 1 (the result has `b`'s shape).
fn solve(a: &TensorData, b: &TensorData, out: &Shape, dims: &[usize]) -> IrResult<TensorData> {
    let ra = a.dims.len();
    let n = a.dims[ra - 1];
    let vector_rhs = b.dims.len() == ra - 1;
    let (b_batch, k) = if vector_rhs {
        (&b.dims[..b.dims.len() - 1], 1)
    } else {
        (&b.dims[..b.dims.len() - 2], b.dims[b.dims.len() - 1])
    };
    let a_batch = &a.dims[..ra - 2];
    if a_batch.iter().zip(b_batch).any(|(&x, &y)| x != y && x != 1) {
        return Err(IrError::new(
            "solve",
            format!(
                "the batch axes of a {:?} must match those of b {:?} (or be 1)",
                a.dims, b.dims
            ),
        ));
    }
    let av = a.to_f64_vec();
    let bv = cast(b, out.dtype()).to_f64_vec();
    let a_of = broadcast_map(a_batch, b_batch);
    let mut x = Vec::with_capacity(bv.len());
    for (batch, &ab) in a_of.iter().enumerate() {
        let mat = &av[ab * n * n..(ab + 1) * n * n];
        let rhs = &bv[batch * n * k..(batch + 1) * n * k];
        let sol = solve_one(mat, rhs, n, k).map_err(|col| {
            IrError::new(
                "solve",
                format!(
                    "the matrix is singular (no pivot in column {col}) in system {batch} of a {:?}; regularize it (e.g. add a small multiple of the identity)",
                    a.dims
                ),
            )
        })?;
        x.extend(sol);
    }
    Ok(TensorData::from_f64_as(out.dtype(), dims, &x))
}

/// Solve one `n × n` system with `k` right-hand-side columns (row-major
/// `rhs[i * k + c]`); `Err(column)` when no pivot is found.
fn solve_one(mat: &[f64], rhs: &[f64], n: usize, k: usize) -> Result<Vec<f64>, usize> {
    if mat.iter().any(|v| !v.is_finite()) {
        return Ok(vec![f64::NAN; n * k]);
    }
    let mut a: Vec<Vec<f64>> = (0..n).map(|i| mat[i * n..(i + 1) * n].to_vec()).collect();
    let mut b: Vec<Vec<f64>> = (0..n).map(|i| rhs[i * k..(i + 1) * k].to_vec()).collect();
    let scale = mat.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let tol = 1e-12 * scale;
    for j in 0..n {
        let mut p = j;
        for i in j + 1..n {
            if a[i][j].abs() > a[p][j].abs() {
                p = i;
            }
        }
        if scale == 0.0 || a[p][j].abs() <= tol {
            return Err(j);
        }
        a.swap(j, p);
        b.swap(j, p);
        let (pivot_a, pivot_b) = (a[j].clone(), b[j].clone());
        for i in j + 1..n {
            let f = a[i][j] / pivot_a[j];
            for (e, p) in a[i][j..].iter_mut().zip(&pivot_a[j..]) {
                *e -= f * p;
            }
            for (e, p) in b[i].iter_mut().zip(&pivot_b) {
                *e -= f * p;
            }
        }
    }
    let mut x = vec![vec![0.0; k]; n];
    for i in (0..n).rev() {
        for c in 0..k {
            let mut s = b[i][c];
            for t in i + 1..n {
                s -= a[i][t] * x[t][c];
            }
            x[i][c] = s / a[i][i];
        }
    }
    Ok(x.into_iter().flatten().collect())
}

/// `x · Wᵀ` where row `j` of `W` is the concatenation of the codebook entries
/// chosen by `indices[j, ..]`: `W[j, c·entry_dim + e] = codebook[indices[j, c], e]`.
fn synth_matmul(
    x: &TensorData,
    indices: &TensorData,
    codebook: &TensorData,
    entry_dim: usize,
    num_entries: usize,
    out: &Shape,
    dims: &[usize],
) -> IrResult<TensorData> {
    let dt = out.dtype();
    let k = x.dims[x.dims.len() - 1];
    let (n, chunks) = (indices.dims[0], indices.dims[1]);
    let idx = indices.to_i64_vec();
    let cb = cast(codebook, dt).to_f64_vec();
    let mut w = vec![0.0; n * k];
    for j in 0..n {
        for c in 0..chunks {
            let e_idx = idx[j * chunks + c] as usize;
            if e_idx >= num_entries {
                return Err(IrError::new(
                    "synth_matmul",
                    format!(
                        "indices[{j}, {c}] = {e_idx} is out of range for a codebook of {num_entries} entries; indices must be < num_entries"
                    ),
                ));
            }
            for e in 0..entry_dim {
                w[j * k + c * entry_dim + e] = cb[e_idx * entry_dim + e];
            }
        }
    }
    let xv = x.to_f64_vec();
    let rows: usize = dims[..dims.len() - 1].iter().product();
    let mut v = Vec::with_capacity(rows * n);
    for r in 0..rows {
        for j in 0..n {
            let mut acc = 0.0;
            for t in 0..k {
                acc += xv[r * k + t] * w[j * k + t];
            }
            v.push(acc);
        }
    }
    Ok(TensorData::from_f64_as(dt, dims, &v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Activation, DType};

    #[test]
    fn linear_accepts_a_single_example_vector() {
        // x = [1, 2, 3], w = [[1, 0], [0, 1], [1, -1]], bias = [0.5, -4]:
        // x·w = [4, -1], + bias = [4.5, -5], relu → [4.5, 0].
        for dt in [DType::F32, DType::F64, DType::I32] {
            let x = TensorData::from_f64_as(dt, &[3], &[1.0, 2.0, 3.0]);
            let w = TensorData::from_f64_as(dt, &[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, -1.0]);
            let half = if dt.is_float() { 0.5 } else { 0.0 };
            let bias = TensorData::from_f64_as(dt, &[2], &[half, -4.0]);
            let op = Op::FusedMatMulBiasAct {
                activation: Some(Activation::Relu),
            };
            let got = eval(&op, &[&x, &w, &bias], &Shape::new(&[2], dt)).unwrap();
            assert_eq!(got.dims, [2]);
            assert_eq!(got.to_f64_vec(), [4.0 + half, 0.0], "{dt:?}");
        }
    }
}
