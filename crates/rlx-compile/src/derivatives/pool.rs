//! Max pooling in primitive ops, shared by both modes: forward mode differentiates
//! max pooling through [`max_pool_decomposed`], and reverse mode builds the adjoint of
//! max `pool2d_grad` (in its `grad_out`) with [`max_pool_pick`].

use crate::build::Build;
use rlx_ir::{CmpOp, Dim, IrResult, NodeId, Op, TensorData, box_indices};

/// Max pooling as primitives: pad with −∞, flatten the spatial axes, gather every
/// window (`[N, C, P, K]` for P outputs of K taps), and keep the first maximal tap of
/// each window (the oracle's tie rule) through a one-hot of `argmax`.
pub(crate) fn max_pool_decomposed<B: Build>(
    e: &mut B,
    x: NodeId,
    kernel: &[usize],
    stride: &[usize],
    padding: &[usize],
) -> IrResult<NodeId> {
    max_pool_pick(e, x, None, kernel, stride, padding)
}

/// Per window of `x`, the value of `from` (default `x`; same dims, padded with 0) at
/// the window's first maximal tap of `x`. With `from = u` this is the adjoint of max
/// `pool2d_grad` in its `grad_out`: the gradient that flows back to each window is
/// the cotangent where the window's gradient was routed.
pub(crate) fn max_pool_pick<B: Build>(
    e: &mut B,
    x: NodeId,
    from: Option<NodeId>,
    kernel: &[usize],
    stride: &[usize],
    padding: &[usize],
) -> IrResult<NodeId> {
    let sr = kernel.len();
    let pad_all = |e: &mut B, t: NodeId, value: f64| -> IrResult<NodeId> {
        let mut tp = t;
        for (a, &p) in padding.iter().enumerate() {
            if p > 0 {
                tp = e.op(
                    Op::Pad {
                        axis: 2 + a,
                        before: p,
                        after: p,
                        value,
                    },
                    vec![tp],
                )?;
            }
        }
        Ok(tp)
    };
    let xp = pad_all(e, x, f64::NEG_INFINITY)?;
    let dims = e.dims(xp);
    let sizes: Vec<usize> = dims[2..]
        .iter()
        .map(|d| d.as_static().expect("pool spatial dims are static"))
        .collect();
    let out: Vec<usize> = (0..sr)
        .map(|a| (sizes[a] - kernel[a]) / stride[a] + 1)
        .collect();
    let flat_in: usize = sizes.iter().product();
    let flat = e.reshape_to(xp, &[dims[0], dims[1], Dim::Static(flat_in)])?;
    let (n_out, n_taps): (usize, usize) = (out.iter().product(), kernel.iter().product());
    let mut idx = Vec::with_capacity(n_out * n_taps);
    let taps = box_indices(kernel);
    for oi in box_indices(&out) {
        for ki in &taps {
            let pos: Vec<usize> = (0..sr).map(|a| oi[a] * stride[a] + ki[a]).collect();
            idx.push(ravel(&pos, &sizes) as i64);
        }
    }
    let idx = e.constant(TensorData::from_i64(&[n_out, n_taps], &idx));
    let windows = e.op(Op::Gather { axis: 2 }, vec![flat, idx])?;
    let values = match from {
        None => windows,
        Some(u) => {
            let up = pad_all(e, u, 0.0)?;
            let uflat = e.reshape_to(up, &[dims[0], dims[1], Dim::Static(flat_in)])?;
            e.op(Op::Gather { axis: 2 }, vec![uflat, idx])?
        }
    };
    let dt = e.dtype(x);
    let best = e.op(
        Op::ArgMax {
            axis: 3,
            keep_dim: true,
        },
        vec![windows],
    )?;
    let taps: Vec<f64> = (0..n_taps).map(|k| k as f64).collect();
    let taps = e.constant(TensorData::from_f64_as(dt, &[n_taps], &taps));
    let hot = e.cmp(CmpOp::Eq, taps, best)?;
    let picked = e.keep_where(hot, values)?;
    let y = e.sum(picked, vec![3], false)?;
    let mut target = vec![dims[0], dims[1]];
    target.extend(out.iter().map(|&n| Dim::Static(n)));
    e.reshape_to(y, &target)
}

fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}
