//! `s!` with Rust ranges and plain (negative) integers beside `rg`/`ix`/`tail`/`ax`:
//! the entries each form becomes, the values a slice reads, and the errors.

use rlx_tensor::{SliceAxis, Tensor, ax, ix, rg, s, tail};

#[test]
fn range_forms_become_the_published_slice_axes() {
    assert_eq!(s![..].axes(), &[SliceAxis::All]);
    assert_eq!(s![1..3].axes(), &[rg(1, 3)]);
    assert_eq!(s![2..].axes(), &[tail(2)]);
    assert_eq!(s![..3].axes(), &[rg(0, 3)]);
    assert_eq!(s![1..=2].axes(), &[rg(1, 3)]);
    assert_eq!(s![..=2].axes(), &[rg(0, 3)]);
    assert_eq!(s![-3..=-2].axes(), &[rg(-3, -1)]);
    // `..=-1` reaches the last element, which no exclusive negative end expresses.
    assert_eq!(s![1..=-1].axes(), &[tail(1)]);
    assert_eq!(s![..=-1].axes(), &[tail(0)]);
    assert_eq!(s![-1].axes(), &[ix(-1)]);
    assert_eq!(s![0..2, .., -1], s![rg(0, 2), ax(), ix(-1)]);
}

#[test]
fn published_helper_forms_still_build_the_same_specs() {
    let spec = s![ax(), ix(-1), rg(0, 2), tail(1), SliceAxis::All,];
    assert_eq!(
        spec.axes(),
        &[
            SliceAxis::All,
            SliceAxis::Index(-1),
            SliceAxis::Range { start: 0, end: 2 },
            SliceAxis::From(1),
            SliceAxis::All
        ]
    );
    assert!(s![].axes().is_empty());
    let entry: SliceAxis = rg(1, 2);
    assert_eq!(s![entry].axes(), &[rg(1, 2)]);
}

#[test]
fn typed_integers_and_usize_variables_work_in_every_position() {
    let (a, b): (usize, usize) = (1, 3);
    assert_eq!(s![a..b].axes(), &[rg(1, 3)]);
    assert_eq!(s![a..].axes(), &[tail(1)]);
    assert_eq!(s![..b].axes(), &[rg(0, 3)]);
    assert_eq!(s![a..=b].axes(), &[rg(1, 4)]);
    assert_eq!(s![b].axes(), &[ix(3)]);
    let (c, d): (i64, i64) = (-2, -1);
    assert_eq!(s![c..d, d].axes(), &[rg(-2, -1), ix(-1)]);
    assert_eq!(s![2i32, 1isize].axes(), &[ix(2), ix(1)]);
    // A usize past i64::MAX saturates and is then reported as out of range.
    assert_eq!(s![usize::MAX].axes(), &[ix(i64::MAX)]);
}

#[test]
fn slices_with_ranges_have_numpy_shapes() {
    let x = Tensor::arange(24).reshape([2, 3, 4]);
    assert_eq!(x.slice(s![0..2, .., -1]).dims(), vec![2, 3, 1]);
    assert_eq!(x.slice(s![1.., ..3, ..=2,]).dims(), vec![1, 3, 3]);
    assert_eq!(x.slice(s![.., 1..-1]).dims(), vec![2, 1, 4]);
    assert_eq!(x.slice(s![-1, -2.., ..=-1]).dims(), vec![1, 2, 4]);
}

#[cfg(feature = "eval")]
#[test]
fn slices_with_ranges_read_the_numpy_values() {
    // x[i, j, k] = 12 i + 4 j + k
    let x = Tensor::arange(24).reshape([2, 3, 4]);
    // x[0:2, :, -1] = [[3, 7, 11], [15, 19, 23]]
    assert_eq!(
        x.slice(s![0..2, .., -1]).to_vec(),
        vec![3.0, 7.0, 11.0, 15.0, 19.0, 23.0]
    );
    // x[1:, :3, :3][.., 0] → 12, 13, 14; 16, 17, 18; 20, 21, 22
    assert_eq!(
        x.slice(s![1.., ..3, ..=2,]).to_vec(),
        vec![12.0, 13.0, 14.0, 16.0, 17.0, 18.0, 20.0, 21.0, 22.0]
    );
    // x[-1, -2:, 1:-1] = [[17, 18], [21, 22]]
    assert_eq!(
        x.slice(s![-1, -2.., 1..-1]).to_vec(),
        vec![17.0, 18.0, 21.0, 22.0]
    );
    // The same through the published helpers.
    assert_eq!(
        x.slice(s![ix(-1), tail(-2), rg(1, -1)]).to_vec(),
        vec![17.0, 18.0, 21.0, 22.0]
    );
}

#[test]
fn out_of_range_and_empty_ranges_are_clear_shape_errors() {
    let x = Tensor::zeros([4, 5]);
    let e = x.try_slice(s![0..5]).unwrap_err();
    assert!(matches!(e, rlx_tensor::Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("outside 0..4"), "{e}");
    let e = x.try_slice(s![.., 3..3]).unwrap_err();
    assert!(e.to_string().contains("empty range 3..3"), "{e}");
    let e = x.try_slice(s![.., -6]).unwrap_err();
    assert!(e.to_string().contains("axis 1"), "{e}");
    let e = x.try_slice(s![usize::MAX]).unwrap_err();
    assert!(e.to_string().contains("outside 0..4"), "{e}");
    let e = x.try_slice(s![.., .., 0]).unwrap_err();
    assert!(e.to_string().contains("3 axis entries"), "{e}");
}

#[test]
#[should_panic(expected = "slice:")]
fn slice_with_a_reversed_range_panics() {
    Tensor::zeros([4]).slice(s![3..1]);
}
