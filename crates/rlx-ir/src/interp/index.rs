//! Row-major index arithmetic shared by the oracle modules.
//!
//! Everything here works on concrete dims (`&[usize]`) and flat element
//! offsets. The oracle builds explicit index maps (one source offset per
//! output element) instead of clever strided loops, so each op's meaning can
//! be read off its map.

use crate::TensorData;

/// The multi-index of flat offset `flat` in a row-major tensor of `dims`.
pub(crate) fn unravel(flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    let mut rest = flat;
    for i in (0..dims.len()).rev() {
        if dims[i] > 0 {
            idx[i] = rest % dims[i];
            rest /= dims[i];
        }
    }
    idx
}

/// The flat row-major offset of multi-index `idx` in a tensor of `dims`.
pub(crate) fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// For every element of a tensor of `out_dims`, the flat offset of the element
/// of a tensor of `in_dims` that NumPy broadcasting reads there.
///
/// `in_dims` is aligned to the right of `out_dims` (missing leading axes are
/// size 1); a size-1 input axis is read at index 0 for every output index.
/// The caller guarantees the dims broadcast (shape inference checked it).
pub(crate) fn broadcast_map(in_dims: &[usize], out_dims: &[usize]) -> Vec<usize> {
    let n: usize = out_dims.iter().product();
    let offset = out_dims.len() - in_dims.len();
    (0..n)
        .map(|o| {
            let out_idx = unravel(o, out_dims);
            let in_idx: Vec<usize> = in_dims
                .iter()
                .enumerate()
                .map(|(a, &d)| if d == 1 { 0 } else { out_idx[a + offset] })
                .collect();
            ravel(&in_idx, in_dims)
        })
        .collect()
}

/// A tensor of `dims` whose element `i` is element `map[i]` of `src`
/// (a byte copy, so it works for every dtype including complex).
pub(crate) fn take(src: &TensorData, map: &[usize], dims: &[usize]) -> TensorData {
    let w = src.dtype.size_bytes();
    let mut bytes = Vec::with_capacity(map.len() * w);
    for &m in map {
        bytes.extend_from_slice(&src.bytes[m * w..(m + 1) * w]);
    }
    TensorData {
        dtype: src.dtype,
        dims: dims.to_vec(),
        bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ravel_and_unravel_agree() {
        let dims = [2, 3, 4];
        for flat in 0..24 {
            assert_eq!(ravel(&unravel(flat, &dims), &dims), flat);
        }
        assert_eq!(unravel(23, &dims), vec![1, 2, 3]);
        assert_eq!(ravel(&[], &[]), 0);
    }

    #[test]
    fn broadcast_map_stretches_size_one_axes_and_prepends() {
        // [3, 1] against [2, 3, 2]: reads row i, column 0 for every column.
        assert_eq!(
            broadcast_map(&[3, 1], &[2, 3, 2]),
            vec![0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]
        );
        assert_eq!(broadcast_map(&[], &[2, 2]), vec![0, 0, 0, 0]);
        assert_eq!(broadcast_map(&[1, 3], &[2, 3]), vec![0, 1, 2, 0, 1, 2]);
    }
}
