//! Contractions: matmul, the fused linear layer, dense solve, codebook matmul.

use super::elementwise::check_activation_dtype;
use super::{arity, dims_str, err, require_float, require_real, require_same_dtype};
use crate::IrError;
use crate::op::SynthKind;
use crate::{DType, Dim, IrResult, Op, Shape};

pub(super) fn infer(name: &str, op: &Op, inputs: &[&Shape]) -> IrResult<Shape> {
    match op {
        Op::MatMul => {
            arity(name, inputs, 2, "a: ..×M×K, b: ..×K×N")?;
            matmul_shape(name, inputs[0], inputs[1])
        }
        Op::FusedMatMulBiasAct { activation } => {
            arity(name, inputs, 3, "x: ..×K, w: K×N, bias: N")?;
            let out = linear_shape(name, inputs[0], inputs[1], inputs[2])?;
            if let Some(a) = activation {
                check_activation_dtype(name, *a, &out)?;
            }
            Ok(out)
        }
        Op::DenseSolve => {
            arity(name, inputs, 2, "a: ..×n×n, b: ..×n or ..×n×k")?;
            solve_shape(name, inputs[0], inputs[1])
        }
        Op::SynthMatMul {
            kind:
                SynthKind::Codebook {
                    entry_dim,
                    num_entries,
                },
        } => {
            arity(name, inputs, 3, "x, indices, codebook")?;
            synth_shape(name, inputs, *entry_dim as usize, *num_entries as usize)
        }
        _ => unreachable!("linalg::infer called with {}", op.name()),
    }
}

/// `[.., M, K] × [.., K, N] → [broadcast(..), M, N]`.
fn matmul_shape(name: &str, a: &Shape, b: &Shape) -> IrResult<Shape> {
    if a.rank() < 2 || b.rank() < 2 {
        return Err(err(
            name,
            format!(
                "operands must have rank ≥ 2 ([.., M, K] and [.., K, N]), got {a} and {b}; use .unsqueeze(0) on a vector"
            ),
        ));
    }
    require_same_dtype(name, ("left", a), ("right", b))?;
    require_real(name, "the operands", a)?;
    let (m, k1) = (a.dim(a.rank() - 2), a.dim(a.rank() - 1));
    let (k2, n) = (b.dim(b.rank() - 2), b.dim(b.rank() - 1));
    if k1 != k2 {
        return Err(err(
            name,
            format!(
                "inner dimensions differ ({k1} ≠ {k2}): left is {a}, right is {b}; the left's last dim must equal the right's second-to-last (transpose with .t() if needed)"
            ),
        ));
    }
    let ba = a.with_dims(a.dims()[..a.rank() - 2].to_vec());
    let bb = b.with_dims(b.dims()[..b.rank() - 2].to_vec());
    let batch = ba.broadcast_with(&bb).map_err(|_| {
        err(
            name,
            format!(
                "batch axes {} of {a} and {} of {b} do not broadcast; each must match or be 1",
                dims_str(ba.dims()),
                dims_str(bb.dims())
            ),
        )
    })?;
    let mut dims = batch.dims().to_vec();
    dims.push(m);
    dims.push(n);
    Ok(a.with_dims(dims))
}

/// `act(x·w + bias)` with `x: [.., K]`, `w: [K, N]`, `bias: [N]` → `[.., N]`.
fn linear_shape(name: &str, x: &Shape, w: &Shape, bias: &Shape) -> IrResult<Shape> {
    if w.rank() != 2 {
        return Err(err(
            name,
            format!(
                "the weight must be 2-D [K, N] (in, out) after transposition, got {w} (x is {x})"
            ),
        ));
    }
    if x.rank() == 0 {
        return Err(err(
            name,
            format!(
                "x must be [.., K] with K = {}, got the scalar {x}",
                w.dim(0)
            ),
        ));
    }
    require_same_dtype(name, ("x", x), ("weight", w))?;
    require_real(name, "x", x)?;
    let k = x.dim(x.rank() - 1);
    if k != w.dim(0) {
        return Err(err(
            name,
            format!(
                "inner dimensions differ ({k} ≠ {}): x is {x}, weight is {w}; x's last dim must equal the weight's first (w is [in, out])",
                w.dim(0)
            ),
        ));
    }
    let n = w.dim(1);
    if bias.rank() != 1 || bias.dim(0) != n {
        return Err(err(
            name,
            format!(
                "bias must have shape [{n}] (the weight {w}'s out dim), got {bias}; reshape it to [{n}]"
            ),
        ));
    }
    require_same_dtype(name, ("x", x), ("bias", bias))?;
    let mut dims = x.dims().to_vec();
    *dims.last_mut().expect("rank ≥ 1") = n;
    Ok(x.with_dims(dims))
}

/// `x` with `a·x = b`: `a: [.., n, n]`, `b: [.., n]` or `[.., n, k]` (same batch axes) → `b`'s shape.
fn solve_shape(name: &str, a: &Shape, b: &Shape) -> IrResult<Shape> {
    require_float(name, "the system matrix a", a)?;
    require_same_dtype(name, ("a", a), ("b", b))?;
    let r = a.rank();
    if r < 2 || a.dim(r - 1) != a.dim(r - 2) {
        return Err(err(
            name,
            format!("the system matrix a must be square [.., n, n], got {a} (b is {b})"),
        ));
    }
    let n = a.dim(r - 1);
    let batch = &a.dims()[..r - 2];
    // Either way the rows of b sit at axis r - 2: the last axis of a vector
    // right-hand side, the second-to-last of a matrix one.
    let (b_batch, bn) = if b.rank() + 1 == r || b.rank() == r {
        (&b.dims()[..r - 2], b.dim(r - 2))
    } else {
        return Err(err(
            name,
            format!(
                "the right-hand side must be [.., {n}] or [.., {n}, k] with a's batch axes {} for a = {a}, got {b}",
                dims_str(batch)
            ),
        ));
    };
    if b_batch != batch || bn != n {
        return Err(err(
            name,
            format!(
                "a is {a} but b is {b}: b must have a's batch axes {} and {n} rows",
                dims_str(batch)
            ),
        ));
    }
    Ok(b.clone())
}

/// `x: [.., k]`, `indices: u8 [n, k/entry_dim]`, `codebook: [num_entries, entry_dim]` → `[.., n]`.
fn synth_shape(name: &str, inputs: &[&Shape], ed: usize, ne: usize) -> IrResult<Shape> {
    let (x, idx, cb) = (inputs[0], inputs[1], inputs[2]);
    require_float(name, "x", x)?;
    if ed == 0 || ne == 0 || ne > 256 {
        return Err(err(
            name,
            format!(
                "entry_dim ({ed}) must be ≥ 1 and num_entries ({ne}) in 1..=256 (indices are u8); x is {x}"
            ),
        ));
    }
    if x.rank() < 1 {
        return Err(err(name, format!("x must be [.., k], got the scalar {x}")));
    }
    if cb.dims() != [Dim::Static(ne), Dim::Static(ed)] {
        return Err(err(
            name,
            format!("the codebook must be [num_entries, entry_dim] = [{ne}, {ed}], got {cb}"),
        ));
    }
    require_float(name, "the codebook", cb)?;
    if idx.dtype() != DType::U8 || idx.rank() != 2 {
        return Err(IrError::dtype(
            name,
            format!(
                "indices must be u8 [n, k/entry_dim], got {idx}; cast them with .cast(DType::U8)"
            ),
        ));
    }
    let k = x.dim(x.rank() - 1);
    if let Some(k) = k.as_static()
        && (k % ed != 0 || idx.dim(1) != Dim::Static(k / ed))
    {
        return Err(err(
            name,
            format!(
                "x {x} has k = {k}, which must be a multiple of entry_dim {ed}, and the indices must have k/entry_dim = {} columns, got {idx}",
                k / ed
            ),
        ));
    }
    let mut dims = x.dims().to_vec();
    *dims.last_mut().expect("rank ≥ 1") = idx.dim(0);
    Ok(x.with_dims(dims))
}
