//! Linear algebra and neural-network ops: matmul, linear layers, low-precision GEMM,
//! solves, norms, losses, convolution and pooling.
//!
//! Sequence-model ops (attention, rope, FFT) and the codebook/spline ops live in
//! [`seq`]. Builders emit the unfused primitives (`matmul` stays `Op::MatMul`); the only
//! fused builders are the explicit ones (`linear`, the norms, the losses, attention).

mod seq;

use super::Tensor;
use crate::{Error, Result};
use rlx_ir::op::ReduceOp;
use rlx_ir::{Activation, Op, ScaleLayout, ScaledFormat, Shape, TensorData};

impl Tensor {
    /// Matrix product `[.., M, K] × [.., K, N] → [.., M, N]` (batch axes broadcast,
    /// rank ≥ 2). Emits `Op::MatMul`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2]);
    /// let b = Tensor::eye(2);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(a.matmul(&b).to_vec(), vec![1.0, 2.0, 3.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn matmul(&self, rhs: &Tensor) -> Tensor {
        self.try_matmul(rhs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::matmul`] returning an error instead of panicking.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let err = Tensor::zeros([2, 3]).try_matmul(&Tensor::zeros([4, 5])).unwrap_err();
    /// assert!(err.to_string().contains("inner dimensions differ"));
    /// ```
    #[track_caller]
    pub fn try_matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.try_apply(Op::MatMul, &[self, rhs])
    }

    /// Alias of [`Tensor::matmul`].
    #[track_caller]
    pub fn mm(&self, rhs: &Tensor) -> Tensor {
        self.matmul(rhs)
    }

    /// `self × rhsᵀ` (the last two axes of `rhs` swapped): `[.., M, K] × [.., N, K]`.
    #[track_caller]
    pub fn matmul_t(&self, rhs: &Tensor) -> Tensor {
        self.try_matmul_t(rhs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::matmul_t`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_matmul_t(&self, rhs: &Tensor) -> Result<Tensor> {
        self.try_matmul(&rhs.try_t()?)
    }

    /// A dense layer `self · wᵀ + b` with a HF-layout weight `w: [out, in]` and bias
    /// `b: [out]`. Emits a `Transpose` of `w` and one `Op::FusedMatMulBiasAct`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0], [1, 2]);
    /// let w = Tensor::from_vec(vec![1.0, 0.0, 1.0, 1.0, 0.0, -1.0], [3, 2]);
    /// let b = Tensor::from_vec(vec![0.5, 0.0, 0.0], [3]);
    /// let y = x.linear(&w, &b);
    /// assert_eq!(y.dims(), vec![1, 3]);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(y.to_vec(), vec![1.5, 3.0, -2.0]);
    /// ```
    #[track_caller]
    pub fn linear(&self, w: &Tensor, b: &Tensor) -> Tensor {
        self.linear_act(w, b, None)
    }

    /// [`Tensor::linear`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_linear(&self, w: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.try_linear_act(w, b, None)
    }

    /// [`Tensor::linear`] followed by an optional activation, fused into one
    /// `Op::FusedMatMulBiasAct { activation }`.
    #[track_caller]
    pub fn linear_act(&self, w: &Tensor, b: &Tensor, act: Option<Activation>) -> Tensor {
        self.try_linear_act(w, b, act)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::linear_act`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_linear_act(
        &self,
        w: &Tensor,
        b: &Tensor,
        act: Option<Activation>,
    ) -> Result<Tensor> {
        let (x, ws, bs) = (self.shape(), w.shape(), b.shape());
        if ws.rank() != 2 {
            return Err(Error::shape(format!(
                "linear: the weight must be 2-D [out, in], got {ws} (x is {x})"
            )));
        }
        if x.rank() == 0 || x.dim(x.rank() - 1) != ws.dim(1) {
            return Err(Error::shape(format!(
                "linear: x {x} must end in the weight's in dim {}: w is {ws} in [out, in] layout; pass the weight untransposed or fix x's last axis",
                ws.dim(1)
            )));
        }
        if bs.rank() != 1 || bs.dim(0) != ws.dim(0) {
            return Err(Error::shape(format!(
                "linear: the bias must be [out] = [{}] for the weight {ws}, got {bs}",
                ws.dim(0)
            )));
        }
        let wt = w.try_t()?;
        self.try_apply(Op::FusedMatMulBiasAct { activation: act }, &[self, &wt, b])
    }

    /// Low-precision TN GEMM: `self: [m, k]` and `rhs: [n, k]` (K-last) are each
    /// quantized to `fmt` with scales in `layout`, multiplied, and dequantized → F32
    /// `[m, n]`. Emits `ScaledQuantScale` + `ScaledQuantize` per operand, then
    /// `Op::ScaledMatMul { has_bias: false }` with inputs `[lq, rq, ls, rs]`.
    #[track_caller]
    pub fn scaled_matmul(&self, rhs: &Tensor, fmt: ScaledFormat, layout: ScaleLayout) -> Tensor {
        self.try_scaled_matmul(rhs, fmt, layout)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::scaled_matmul`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_scaled_matmul(
        &self,
        rhs: &Tensor,
        fmt: ScaledFormat,
        layout: ScaleLayout,
    ) -> Result<Tensor> {
        let (l, r) = (self.shape(), rhs.shape());
        if l.rank() != 2 || r.rank() != 2 || l.dim(1) != r.dim(1) {
            return Err(Error::shape(format!(
                "scaled_matmul: operands must be [m, k] and [n, k] (both K-last), got {l} and {r}; transpose the rhs with .t() if it is [k, n]"
            )));
        }
        let (lq, ls) = self.quantize_operand(self, fmt, layout)?;
        let (rq, rs) = self.quantize_operand(rhs, fmt, layout)?;
        self.try_apply(
            Op::ScaledMatMul {
                lhs_format: fmt,
                rhs_format: fmt,
                scale_layout: layout,
                has_bias: false,
            },
            &[&lq, &rq, &ls, &rs],
        )
    }

    /// `(codes, scales)` of `t` (adopted into this tensor's graph) under `fmt`/`layout`.
    #[track_caller]
    fn quantize_operand(
        &self,
        t: &Tensor,
        fmt: ScaledFormat,
        layout: ScaleLayout,
    ) -> Result<(Tensor, Tensor)> {
        let scales = self.try_apply(
            Op::ScaledQuantScale {
                format: fmt,
                scale_layout: layout,
            },
            &[t],
        )?;
        let codes = self.try_apply(
            Op::ScaledQuantize {
                format: fmt,
                scale_layout: layout,
            },
            &[t, &scales],
        )?;
        Ok((codes, scales))
    }

    /// Inverse of a square matrix `[.., n, n]` (static shape): `DenseSolve(self, I)`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let a = Tensor::from_vec(vec![2.0, 0.0, 0.0, 4.0], [2, 2]);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(a.inv().to_vec(), vec![0.5, 0.0, 0.0, 0.25]);
    /// ```
    #[track_caller]
    pub fn inv(&self) -> Tensor {
        self.try_inv().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::inv`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_inv(&self) -> Result<Tensor> {
        let s = self.shape();
        let dims = s.static_dims().unwrap_or_default();
        let r = dims.len();
        if !s.is_static() || r < 2 || dims[r - 1] != dims[r - 2] {
            return Err(Error::shape(format!(
                "inv: needs a square matrix [.., n, n] with static dims, got {s}"
            )));
        }
        let n = dims[r - 1];
        let eye: Vec<f64> = (0..n * n)
            .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
            .collect();
        let mut eye = self.constant_in_graph(
            Shape::new(&[n, n], s.dtype()),
            TensorData::from_f64_as(s.dtype(), &[n, n], &eye).bytes,
        );
        if r > 2 {
            let target: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
            eye = eye.try_broadcast_to(target)?;
        }
        self.try_solve(&eye).map_err(|e| e.context("inv"))
    }

    /// Solve `self · x = b` for `x` (`self: [.., n, n]`, `b: [.., n]` or `[.., n, k]`).
    /// Emits `Op::DenseSolve`; the result has `b`'s shape.
    #[track_caller]
    pub fn solve(&self, b: &Tensor) -> Tensor {
        self.try_solve(b).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::solve`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_solve(&self, b: &Tensor) -> Result<Tensor> {
        self.try_apply(Op::DenseSolve, &[self, b])
    }

    /// Layer normalization over the last axis: `(x − mean) / √(var + eps) · γ + β`.
    /// Emits `Op::LayerNorm { axis: -1, eps }` with inputs `[x, γ, β]`.
    #[track_caller]
    pub fn layer_norm(&self, gamma: &Tensor, beta: &Tensor, eps: f32) -> Tensor {
        self.try_layer_norm(gamma, beta, eps)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::layer_norm`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_layer_norm(&self, gamma: &Tensor, beta: &Tensor, eps: f32) -> Result<Tensor> {
        self.try_apply(Op::LayerNorm { axis: -1, eps }, &[self, gamma, beta])
    }

    /// RMS normalization over the last axis: `x / √(mean(x²) + eps) · γ + β` (β is added).
    /// Emits `Op::RmsNorm { axis: -1, eps }`.
    #[track_caller]
    pub fn rms_norm(&self, gamma: &Tensor, beta: &Tensor, eps: f32) -> Tensor {
        self.try_rms_norm(gamma, beta, eps)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::rms_norm`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_rms_norm(&self, gamma: &Tensor, beta: &Tensor, eps: f32) -> Result<Tensor> {
        self.try_apply(Op::RmsNorm { axis: -1, eps }, &[self, gamma, beta])
    }

    /// Per-row softmax cross-entropy with dense targets: logits `[N, C]`, targets
    /// `[N, C]` → `[N]` (`logsumexp(row) − Σ t·logit`). Emits `Op::SoftmaxCrossEntropy`.
    #[track_caller]
    pub fn cross_entropy(&self, targets: &Tensor) -> Tensor {
        self.try_cross_entropy(targets)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::cross_entropy`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_cross_entropy(&self, targets: &Tensor) -> Result<Tensor> {
        self.try_apply(Op::SoftmaxCrossEntropy, &[self, targets])
    }

    /// Per-row softmax cross-entropy with class labels: logits `[N, C]`, labels `[N]`
    /// (class indices, F32-encoded or integer) → `[N]`. Emits
    /// `Op::SoftmaxCrossEntropyWithLogits`.
    #[track_caller]
    pub fn softmax_cross_entropy_with_logits(&self, labels: &Tensor) -> Tensor {
        self.try_softmax_cross_entropy_with_logits(labels)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::softmax_cross_entropy_with_logits`] returning an error.
    #[track_caller]
    pub fn try_softmax_cross_entropy_with_logits(&self, labels: &Tensor) -> Result<Tensor> {
        self.try_apply(Op::SoftmaxCrossEntropyWithLogits, &[self, labels])
    }

    /// 2-D convolution (NCHW): `self: [N, C, H, W]`, `weight: [C_out, C/groups, kH, kW]`.
    /// Output spatial size is `(in + 2p − d(k−1) − 1)/s + 1`. Emits `Op::Conv`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::ones([1, 1, 4, 4]);
    /// let w = Tensor::ones([2, 1, 3, 3]);
    /// let y = x.conv2d(&w, [3, 3], [1, 1], [1, 1], [1, 1], 1);
    /// assert_eq!(y.dims(), vec![1, 2, 4, 4]);
    /// ```
    #[track_caller]
    pub fn conv2d(
        &self,
        weight: &Tensor,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    ) -> Tensor {
        self.try_conv2d(weight, kernel_size, stride, padding, dilation, groups)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::conv2d`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_conv2d(
        &self,
        weight: &Tensor,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    ) -> Result<Tensor> {
        self.try_apply(
            Op::Conv {
                kernel_size: kernel_size.to_vec(),
                stride: stride.to_vec(),
                padding: padding.to_vec(),
                dilation: dilation.to_vec(),
                groups,
            },
            &[self, weight],
        )
    }

    /// 2-D pooling (NCHW) with window `kind` (`ReduceOp::Max` or `ReduceOp::Mean`; also
    /// `Sum`). Padding must be at most half the window. Emits `Op::Pool`.
    #[track_caller]
    pub fn pool2d(
        &self,
        kind: ReduceOp,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> Tensor {
        self.try_pool2d(kind, kernel_size, stride, padding)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::pool2d`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_pool2d(
        &self,
        kind: ReduceOp,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> Result<Tensor> {
        self.try_apply(
            Op::Pool {
                kind,
                kernel_size: kernel_size.to_vec(),
                stride: stride.to_vec(),
                padding: padding.to_vec(),
            },
            &[self],
        )
    }

    /// 2-D max pooling (`pool2d(ReduceOp::Max, …)`).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::arange(16).reshape([1, 1, 4, 4]);
    /// let y = x.max_pool2d([2, 2], [2, 2], [0, 0]);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!(y.to_vec(), vec![5.0, 7.0, 13.0, 15.0]);
    /// ```
    #[track_caller]
    pub fn max_pool2d(
        &self,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> Tensor {
        self.pool2d(ReduceOp::Max, kernel_size, stride, padding)
    }

    /// 2-D average pooling (`pool2d(ReduceOp::Mean, …)`).
    #[track_caller]
    pub fn avg_pool2d(
        &self,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> Tensor {
        self.pool2d(ReduceOp::Mean, kernel_size, stride, padding)
    }
}
