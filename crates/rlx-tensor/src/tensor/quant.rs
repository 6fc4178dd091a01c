//! Fake quantization as a graph op: round to an emulated float format inside the
//! compiled program (it fuses into elementwise kernels; its gradient is straight-through).

use super::Tensor;
use crate::Result;
use crate::lowp::FloatFormat;
use rlx_ir::Op;

impl Tensor {
    /// Round every element to the grid of the `(exp_bits, man_bits, max_normal)` format
    /// (the rules of [`crate::lowp::quantize`]); the result keeps this tensor's dtype.
    /// Differentiating through it passes the gradient straight through.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.1, 5.0, 100.0], [3]);
    /// let q = x.round_to_format(2, 1, 6.0); // nvf4
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(q.to_vec(), vec![1.0, 4.0, 6.0]);
    /// ```
    #[track_caller]
    pub fn round_to_format(&self, exp_bits: u32, man_bits: u32, max_normal: f32) -> Tensor {
        self.apply(
            Op::RoundToFormat {
                exp_bits,
                man_bits,
                max_normal,
            },
            &[self],
        )
    }

    /// [`Tensor::round_to_format`] returning an error for a bad format or a non-float input.
    #[track_caller]
    pub fn try_round_to_format(
        &self,
        exp_bits: u32,
        man_bits: u32,
        max_normal: f32,
    ) -> Result<Tensor> {
        self.try_apply(
            Op::RoundToFormat {
                exp_bits,
                man_bits,
                max_normal,
            },
            &[self],
        )
    }

    /// Round to the format `F` (e.g. `lowp::F8E4M3`, `lowp::Nvf4`).
    ///
    /// ```
    /// use rlx_tensor::{lowp::Bf16, Tensor};
    /// let q = Tensor::from_vec(vec![1.0 + 1.0 / 512.0], [1]).fake_quant::<Bf16>();
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(q.to_vec(), vec![1.0]);
    /// ```
    #[track_caller]
    pub fn fake_quant<F: FloatFormat>(&self) -> Tensor {
        self.round_to_format(F::EXP_BITS, F::MAN_BITS, F::MAX_NORMAL)
    }
}
