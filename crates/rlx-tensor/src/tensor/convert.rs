//! Conversions between host values and tensors: `Tensor::from` nested arrays, `Vec`s and
//! slices, and (feature `eval`) `Vec::try_from(&tensor)` to read a result back.
//!
//! Element types are `f32` (→ F32), `i64` (→ I64) and `bool` (→ Bool). f64 and i32 are
//! deliberately left out: Rust types unsuffixed literals by fallback when several impls
//! could match, so with them `Tensor::from([1.0, 2.0])` would silently become an F64
//! tensor and `Tensor::from([1, 2])` an I32 one. With this set, float literals give F32
//! (the library's working type) and integer literals I64 (the index type of `gather`);
//! use `Tensor::from_f64` / `Tensor::from_f64_as` for other dtypes.

use super::Tensor;
use rlx_ir::TensorData;

/// One element type that `Tensor::from` accepts.
trait Element: Copy {
    fn data(dims: &[usize], values: &[Self]) -> TensorData;
}

impl Element for f32 {
    fn data(dims: &[usize], values: &[f32]) -> TensorData {
        TensorData::from_f32(dims, values)
    }
}

impl Element for i64 {
    fn data(dims: &[usize], values: &[i64]) -> TensorData {
        TensorData::from_i64(dims, values)
    }
}

impl Element for bool {
    fn data(dims: &[usize], values: &[bool]) -> TensorData {
        TensorData::from_bool(dims, values)
    }
}

fn tensor<E: Element>(dims: &[usize], values: &[E]) -> Tensor {
    Tensor::from_data(E::data(dims, values))
}

macro_rules! from_host {
    ($($e:ty),*) => {$(
        /// A 1-D tensor of the array's elements.
        impl<const A: usize> From<[$e; A]> for Tensor {
            fn from(v: [$e; A]) -> Tensor {
                tensor(&[A], &v)
            }
        }
        /// A 2-D `[A, B]` tensor, rows in order.
        impl<const A: usize, const B: usize> From<[[$e; B]; A]> for Tensor {
            fn from(v: [[$e; B]; A]) -> Tensor {
                tensor(&[A, B], v.as_flattened())
            }
        }
        /// A 3-D `[A, B, C]` tensor.
        impl<const A: usize, const B: usize, const C: usize> From<[[[$e; C]; B]; A]> for Tensor {
            fn from(v: [[[$e; C]; B]; A]) -> Tensor {
                tensor(&[A, B, C], v.as_flattened().as_flattened())
            }
        }
        /// A 4-D `[A, B, C, D]` tensor.
        impl<const A: usize, const B: usize, const C: usize, const D: usize>
            From<[[[[$e; D]; C]; B]; A]> for Tensor
        {
            fn from(v: [[[[$e; D]; C]; B]; A]) -> Tensor {
                tensor(&[A, B, C, D], v.as_flattened().as_flattened().as_flattened())
            }
        }
        /// A 1-D tensor of the vector's elements.
        impl From<Vec<$e>> for Tensor {
            fn from(v: Vec<$e>) -> Tensor {
                tensor(&[v.len()], &v)
            }
        }
        /// A 1-D tensor of the slice's elements (copied).
        impl From<&[$e]> for Tensor {
            fn from(v: &[$e]) -> Tensor {
                tensor(&[v.len()], v)
            }
        }
    )*};
}
from_host!(f32, i64, bool);

#[cfg(feature = "eval")]
mod readback {
    use super::Tensor;
    use crate::{Error, Result};
    use rlx_ir::DType;

    /// Compute the tensor and read it back as f32 (row-major), like
    /// [`Tensor::try_to_vec`].
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let t = Tensor::from([[1.0f32, 2.0], [3.0, 4.0]]);
    /// let v = Vec::<f32>::try_from(&(&t * 2.0)).unwrap();
    /// assert_eq!(v, vec![2.0, 4.0, 6.0, 8.0]);
    /// ```
    impl TryFrom<&Tensor> for Vec<f32> {
        type Error = Error;
        fn try_from(t: &Tensor) -> Result<Vec<f32>> {
            t.try_to_vec()
        }
    }

    /// [`TryFrom<&Tensor>`] for an owned tensor.
    impl TryFrom<Tensor> for Vec<f32> {
        type Error = Error;
        fn try_from(t: Tensor) -> Result<Vec<f32>> {
            t.try_to_vec()
        }
    }

    /// Compute an I64 tensor and read it back; an error for other dtypes.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let v = Vec::<i64>::try_from(&Tensor::from([3i64, 1, 2])).unwrap();
    /// assert_eq!(v, vec![3, 1, 2]);
    /// assert!(Vec::<i64>::try_from(&Tensor::from([1.0f32])).is_err());
    /// ```
    impl TryFrom<&Tensor> for Vec<i64> {
        type Error = Error;
        fn try_from(t: &Tensor) -> Result<Vec<i64>> {
            let dtype = t.dtype();
            if dtype != DType::I64 {
                return Err(Error::dtype(format!(
                    "Vec<i64>::try_from: the tensor {} holds {dtype}, not i64; convert with .cast(DType::I64) first or read it as Vec<f32>",
                    t.shape()
                )));
            }
            Ok(t.try_to_data()?.to_i64_vec())
        }
    }

    /// Compute a Bool tensor and read it back; an error for other dtypes.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let v = Vec::<bool>::try_from(&Tensor::from([true, false])).unwrap();
    /// assert_eq!(v, vec![true, false]);
    /// ```
    impl TryFrom<&Tensor> for Vec<bool> {
        type Error = Error;
        fn try_from(t: &Tensor) -> Result<Vec<bool>> {
            let dtype = t.dtype();
            if dtype != DType::Bool {
                return Err(Error::dtype(format!(
                    "Vec<bool>::try_from: the tensor {} holds {dtype}, not bool; compare it (e.g. .gt(0.0)) to get a bool tensor",
                    t.shape()
                )));
            }
            Ok(t.try_to_data()?.to_bool_vec())
        }
    }
}
