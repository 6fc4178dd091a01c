//! Joining tensors: [`cat`] and [`stack`] (and their `try_` twins).

use crate::tensor::Tensor;
use crate::{Error, Result};
use rlx_ir::Op;

/// Concatenate tensors along an existing axis (NumPy `concatenate`). Inputs from
/// different graphs are merged into the first tensor's graph; emits one `Op::Concat`.
///
/// Panics on an empty list or mismatched shapes (see [`try_cat`]).
///
/// ```
/// use rlx_tensor::{cat, Tensor};
/// let a = Tensor::from_vec(vec![1.0, 2.0], [1, 2]);
/// let b = Tensor::from_vec(vec![3.0, 4.0, 5.0, 6.0], [2, 2]);
/// let c = cat(&[&a, &b], 0);
/// assert_eq!(c.dims(), vec![3, 2]);
/// # #[cfg(feature = "eval")]
/// assert_eq!(c.to_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
/// ```
#[track_caller]
pub fn cat(tensors: &[&Tensor], axis: usize) -> Tensor {
    try_cat(tensors, axis).unwrap_or_else(|e| panic!("{e}"))
}

/// [`cat`] returning an error instead of panicking.
#[track_caller]
pub fn try_cat(tensors: &[&Tensor], axis: usize) -> Result<Tensor> {
    let Some(first) = tensors.first() else {
        return Err(Error::new(
            "cat: needs at least one tensor; pass a non-empty list",
        ));
    };
    first.try_apply(Op::Concat { axis }, tensors)
}

/// Stack tensors along a new axis (NumPy `stack`): each gains a size-1 axis at `axis`,
/// then they are concatenated there.
///
/// ```
/// use rlx_tensor::{stack, Tensor};
/// let a = Tensor::from_vec(vec![1.0, 2.0], [2]);
/// let b = Tensor::from_vec(vec![3.0, 4.0], [2]);
/// let s = stack(&[&a, &b], 1);
/// assert_eq!(s.dims(), vec![2, 2]);
/// # #[cfg(feature = "eval")]
/// assert_eq!(s.to_vec(), vec![1.0, 3.0, 2.0, 4.0]);
/// ```
#[track_caller]
pub fn stack(tensors: &[&Tensor], axis: usize) -> Tensor {
    try_stack(tensors, axis).unwrap_or_else(|e| panic!("{e}"))
}

/// [`stack`] returning an error instead of panicking.
#[track_caller]
pub fn try_stack(tensors: &[&Tensor], axis: usize) -> Result<Tensor> {
    if tensors.is_empty() {
        return Err(Error::new(
            "stack: needs at least one tensor; pass a non-empty list",
        ));
    }
    let first = tensors[0].shape();
    for (i, t) in tensors.iter().enumerate() {
        let s = t.shape();
        if s != first {
            return Err(Error::shape(format!(
                "stack: tensor {i} is {s} but tensor 0 is {first}; every stacked tensor needs the same shape and dtype"
            )));
        }
    }
    let lifted = tensors
        .iter()
        .map(|t| t.try_unsqueeze(axis))
        .collect::<Result<Vec<_>>>()
        .map_err(|e| e.context("stack"))?;
    let refs: Vec<&Tensor> = lifted.iter().collect();
    try_cat(&refs, axis)
}
