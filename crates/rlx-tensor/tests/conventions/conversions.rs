//! `Tensor::from` host arrays, vectors and slices (dtypes kept), `Vec::try_from(&Tensor)`,
//! and `reshape` accepting every published target form plus `usize` shapes.

// Borrowed targets (`&[6, 4]`, `&v`) are forms user code passes; these tests prove they
// compile, so clippy's advice to drop the borrow does not apply.
#![allow(clippy::needless_borrows_for_generic_args)]

use rlx_tensor::{DType, Tensor};

#[test]
fn nested_f32_arrays_keep_their_shape_and_dtype() {
    let t = Tensor::from([1.0f32, 2.0, 3.0]);
    assert_eq!((t.dims(), t.dtype()), (vec![3], DType::F32));
    let t = Tensor::from([[1.0f32, 2.0], [3.0, 4.0]]);
    assert_eq!((t.dims(), t.dtype()), (vec![2, 2], DType::F32));
    let t = Tensor::from([[[1.0f32; 4]; 3]; 2]);
    assert_eq!(t.dims(), vec![2, 3, 4]);
    let t = Tensor::from([[[[0.5f32; 1]; 2]; 3]; 4]);
    assert_eq!(t.dims(), vec![4, 3, 2, 1]);
}

#[test]
fn unsuffixed_literals_give_f32_and_i64() {
    // Float literals fall back to the only float impl (f32), integers to i64.
    let t = Tensor::from([[1.0, 2.0], [3.0, 4.0]]);
    assert_eq!(t.dtype(), DType::F32);
    let t = Tensor::from([[1, 2, 3], [4, 5, 6]]);
    assert_eq!((t.dims(), t.dtype()), (vec![2, 3], DType::I64));
    let t = Tensor::from([true, false, true]);
    assert_eq!((t.dims(), t.dtype()), (vec![3], DType::Bool));
}

#[test]
fn vectors_and_slices_become_1d_tensors() {
    let t = Tensor::from(vec![1.0f32, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!((t.dims(), t.dtype()), (vec![5], DType::F32));
    let v = [7i64, 8, 9];
    let t = Tensor::from(&v[..]);
    assert_eq!((t.dims(), t.dtype()), (vec![3], DType::I64));
    let t: Tensor = vec![0.0f32; 0].into();
    assert_eq!(t.dims(), vec![0]);
}

#[cfg(feature = "eval")]
#[test]
fn values_round_trip_in_row_major_order() {
    let t = Tensor::from([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]);
    assert_eq!(t.to_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(
        Vec::<f32>::try_from(&t.t()).unwrap(),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    let t = Tensor::from([[[1, 2], [3, 4]], [[5, 6], [7, 8]]]);
    assert_eq!(t.to_vec_i64(), (1..=8).collect::<Vec<i64>>());
    assert_eq!(
        Vec::<i64>::try_from(&t).unwrap(),
        (1..=8).collect::<Vec<_>>()
    );
    let b = Tensor::from([false, true]);
    assert_eq!(Vec::<bool>::try_from(&b).unwrap(), vec![false, true]);
    let owned: Vec<f32> = Tensor::from(vec![2.5f32]).try_into().unwrap();
    assert_eq!(owned, vec![2.5]);
}

#[cfg(feature = "eval")]
#[test]
fn reading_the_wrong_dtype_is_a_dtype_error() {
    let e = Vec::<i64>::try_from(&Tensor::from([1.0f32])).unwrap_err();
    assert!(matches!(e, rlx_tensor::Error::DType { .. }), "{e:?}");
    assert!(e.to_string().contains("holds f32, not i64"), "{e}");
    let e = Vec::<bool>::try_from(&Tensor::from([1i64])).unwrap_err();
    assert!(e.to_string().contains("not bool"), "{e}");
}

#[test]
fn reshape_accepts_every_published_target_form() {
    let x = Tensor::arange(24);
    assert_eq!(x.reshape([2, -1]).dims(), vec![2, 12]);
    assert_eq!(x.reshape([-1]).dims(), vec![24]);
    assert_eq!(x.reshape(vec![2, 3, 4]).dims(), vec![2, 3, 4]);
    assert_eq!(x.reshape(vec![2i64, -1]).dims(), vec![2, 12]);
    assert_eq!(x.reshape(&[4, 6][..]).dims(), vec![4, 6]);
    assert_eq!(x.reshape(&[4i64, -1] as &[i64]).dims(), vec![4, 6]);
    assert_eq!(x.reshape(&[6, 4]).dims(), vec![6, 4]);
    let d: i64 = 8;
    assert_eq!(x.reshape([3, d]).dims(), vec![3, 8]);
    assert_eq!(x.reshape([(2 * 3) as i64, d / 2]).dims(), vec![6, 4]);
    let target: Vec<i64> = vec![12, 2];
    assert_eq!(x.reshape(target.clone()).dims(), vec![12, 2]);
    assert_eq!(x.try_reshape([8, -1]).unwrap().dims(), vec![8, 3]);
    // A one-element tensor to a scalar, in the published spellings.
    assert_eq!(Tensor::from([5.0f32]).reshape([]).rank(), 0);
    assert_eq!(Tensor::from([5.0f32]).reshape(vec![]).rank(), 0);
    // Generic code forwarding the published bound still compiles.
    fn forward(t: &Tensor, target: impl Into<Vec<i64>>) -> Tensor {
        t.reshape(target)
    }
    assert_eq!(forward(&x, [4, 6]).dims(), vec![4, 6]);
    assert_eq!(x.reshape(Box::<[i64]>::from([2, 12])).dims(), vec![2, 12]);
}

#[test]
fn reshape_to_accepts_usize_shapes_and_other_tensors_dims() {
    let x = Tensor::arange(12);
    let (rows, cols): (usize, usize) = (3, 4);
    assert_eq!(x.reshape_to([rows, cols]).dims(), vec![3, 4]);
    assert_eq!(x.reshape_to(vec![cols, rows]).dims(), vec![4, 3]);
    assert_eq!(x.reshape_to(&[2usize, 6][..]).dims(), vec![2, 6]);
    assert_eq!(x.reshape_to([2, -1]).dims(), vec![2, 6]);
    let like = Tensor::zeros([2, 2, 3]);
    assert_eq!(x.reshape_to(like.dims()).dims(), vec![2, 2, 3]);
    assert_eq!(x.reshape_to(&like.dims()).dims(), vec![2, 2, 3]);
    assert_eq!(x.reshape_to(like.shape().dims()).dims(), vec![2, 2, 3]);
    assert_eq!(x.try_reshape_to([6usize, 2]).unwrap().dims(), vec![6, 2]);
}

#[test]
fn reshape_to_dims_with_one_dynamic_axis_keeps_it_dynamic() {
    let f = rlx_tensor::graph("g", |s| {
        let x = s.input("x", rlx_tensor::shape![?, 4]);
        let y = x.reshape_to(x.shape().dims());
        assert_eq!(y.shape(), x.shape());
        let two = rlx_tensor::shape![?, ?1];
        let e = x.try_reshape_to(two.dims()).unwrap_err();
        assert!(matches!(e, rlx_tensor::Error::Shape { .. }), "{e:?}");
        assert!(e.to_string().contains("more than one dynamic dim"), "{e}");
        y
    });
    assert_eq!(f.outputs.len(), 1);
}

#[test]
fn reshape_errors_name_the_sizes() {
    let x = Tensor::arange(6);
    let e = x.try_reshape_to([4usize, 2]).unwrap_err();
    assert!(e.to_string().contains("cannot reshape [6] f32"), "{e}");
    let e = x.try_reshape_to([usize::MAX]).unwrap_err();
    assert!(e.to_string().contains("does not fit in i64"), "{e}");
}
