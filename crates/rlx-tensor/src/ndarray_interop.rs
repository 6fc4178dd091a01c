//! Conversions to and from `ndarray` arrays (feature `ndarray`).

use crate::Tensor;
use ndarray::{Array, ArrayD, Dimension, IxDyn};

impl<D: Dimension> From<Array<f32, D>> for Tensor {
    fn from(a: Array<f32, D>) -> Tensor {
        Tensor::from(&a)
    }
}

impl<D: Dimension> From<&Array<f32, D>> for Tensor {
    /// Copies the elements in logical (row-major) order, whatever the array's memory layout.
    fn from(a: &Array<f32, D>) -> Tensor {
        let dims = a.shape().to_vec();
        let data: Vec<f32> = a.iter().copied().collect();
        Tensor::from_vec(data, dims)
    }
}

#[cfg(feature = "eval")]
impl Tensor {
    /// Compute and read back as an `ndarray::ArrayD<f32>`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let a = ndarray::array![[1.0f32, 2.0], [3.0, 4.0]];
    /// let t = Tensor::from(&a);
    /// assert_eq!(t.to_ndarray(), a.into_dyn());
    /// ```
    #[track_caller]
    pub fn to_ndarray(&self) -> ArrayD<f32> {
        let data = self.to_data();
        ArrayD::from_shape_vec(IxDyn(&data.dims), data.to_f32_vec())
            .expect("dims match the element count")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposed_arrays_convert_in_logical_order() {
        let a = ndarray::array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
        let t = Tensor::from(a.t().to_owned());
        assert_eq!(t.dims(), vec![3, 2]);
        #[cfg(feature = "eval")]
        assert_eq!(t.to_vec(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    }
}
