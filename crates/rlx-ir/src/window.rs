//! The one enumeration of a sliding window's taps (and of any small index box), shared
//! by the oracle's convolution and pooling and by the compiler's lowerings of them, so
//! the fold order they promise to match is written once.

/// Every multi-index of a box of `dims`, in row-major order (the last axis fastest):
/// `[2, 2]` gives `[0, 0], [0, 1], [1, 0], [1, 1]`. A box with no axes has one index
/// (the empty one); a box with a zero-length axis has none.
pub fn box_indices(dims: &[usize]) -> Vec<Vec<usize>> {
    let mut all = vec![vec![]];
    for &n in dims {
        all = all
            .into_iter()
            .flat_map(|prefix| {
                (0..n).map(move |i| {
                    let mut p = prefix.clone();
                    p.push(i);
                    p
                })
            })
            .collect();
    }
    all
}

#[cfg(test)]
mod tests {
    use super::box_indices;

    #[test]
    fn box_indices_run_row_major_with_the_last_axis_fastest() {
        let got = box_indices(&[2, 3]);
        let want: Vec<Vec<usize>> = (0..2)
            .flat_map(|i| (0..3).map(move |j| vec![i, j]))
            .collect();
        assert_eq!(got, want);
        assert_eq!(box_indices(&[2, 1, 2])[3], vec![1, 0, 1]);
    }

    #[test]
    fn box_indices_of_no_axes_is_one_empty_index_and_of_a_zero_axis_is_none() {
        assert_eq!(box_indices(&[]), vec![Vec::<usize>::new()]);
        assert!(box_indices(&[3, 0, 2]).is_empty());
    }
}
