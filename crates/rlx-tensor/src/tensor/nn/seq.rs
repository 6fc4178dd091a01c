//! Sequence-model and structured-weight ops: attention, rotary embeddings, FFT,
//! codebook (synthesised-weight) matmul and spline activations.

use crate::tensor::Tensor;
use crate::{Error, Result};
use rlx_ir::op::{FftAlgo, FftNorm, RopeStyle, SynthKind};
use rlx_ir::{DType, MaskKind, Op};

impl Tensor {
    /// Scaled dot-product attention `softmax(q·kᵀ/√head_dim + mask)·v` with `self` as q.
    ///
    /// Layouts: `[B, S, H, D]` (rank 4) or `[B, S, H·D]` (rank 3), the same for q, k, v;
    /// k/v may have fewer heads dividing `num_heads` (grouped-query). The output has q's
    /// shape. `mask_kind` is `None`, `Causal` or `SlidingWindow(w)`; for a mask tensor use
    /// [`Tensor::attention_masked`]. Emits one 3-input `Op::Attention`.
    ///
    /// ```
    /// use rlx_tensor::{MaskKind, Tensor};
    /// let q = Tensor::randn([1, 4, 2, 8], 0);
    /// let out = q.attention(&q, &q, 2, 8, MaskKind::Causal);
    /// assert_eq!(out.dims(), vec![1, 4, 2, 8]);
    /// ```
    #[track_caller]
    pub fn attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        num_heads: usize,
        head_dim: usize,
        mask_kind: MaskKind,
    ) -> Tensor {
        self.try_attention(k, v, num_heads, head_dim, mask_kind)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::attention`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        num_heads: usize,
        head_dim: usize,
        mask_kind: MaskKind,
    ) -> Result<Tensor> {
        if matches!(mask_kind, MaskKind::Custom | MaskKind::Bias) {
            return Err(Error::new(format!(
                "attention: mask kind {mask_kind:?} needs a mask tensor (q is {}); use attention_masked(k, v, mask, num_heads, head_dim) for a [batch, key_len] mask",
                self.shape()
            )));
        }
        self.try_apply(attention_op(num_heads, head_dim, mask_kind), &[self, k, v])
    }

    /// Attention with a key-padding mask `[batch, key_len]` (`≥ 0.5` attends, `< 0.5`
    /// is ignored; a fully masked row is zeros). Emits a 4-input `Op::Attention` with
    /// `MaskKind::Custom`.
    #[track_caller]
    pub fn attention_masked(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: &Tensor,
        num_heads: usize,
        head_dim: usize,
    ) -> Tensor {
        self.try_attention_masked(k, v, mask, num_heads, head_dim)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::attention_masked`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_attention_masked(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: &Tensor,
        num_heads: usize,
        head_dim: usize,
    ) -> Result<Tensor> {
        self.try_apply(
            attention_op(num_heads, head_dim, MaskKind::Custom),
            &[self, k, v, mask],
        )
    }

    /// Rotary position embedding (NeoX rotate-half: dimension `i` pairs with
    /// `i + head_dim/2`), applied per head to `self: [B, S, hidden]` (or
    /// `[B, S, H, head_dim]`): `(x1·c − x2·s, x2·c + x1·s)`. The tables hold one row per
    /// position: rank 1 `[S·head_dim/2]`, or rank 2 `[S, w]` with `w ≥ head_dim/2`.
    /// Emits `Op::Rope { head_dim, n_rot: head_dim, style: NeoX }`.
    #[track_caller]
    pub fn rope(&self, cos: &Tensor, sin: &Tensor, head_dim: usize) -> Tensor {
        self.try_rope(cos, sin, head_dim)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::rope`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_rope(&self, cos: &Tensor, sin: &Tensor, head_dim: usize) -> Result<Tensor> {
        self.try_apply(
            Op::Rope {
                head_dim,
                n_rot: head_dim,
                style: RopeStyle::NeoX,
            },
            &[self, cos, sin],
        )
    }

    /// Unnormalized forward FFT along the last axis. Real dtypes use the block layout
    /// `[.., 2N]` (N real parts, then N imaginary parts). Emits
    /// `Op::Fft { inverse: false, norm: Backward, algo: Native }`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// // x = [1, 2] + 0i, block layout [re0, re1, im0, im1]
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 0.0, 0.0], [4]);
    /// # #[cfg(feature = "eval")] {
    /// let y = x.fft().to_vec();
    /// let want = [3.0, -1.0, 0.0, 0.0];
    /// assert!(y.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6));
    /// # }
    /// ```
    #[track_caller]
    pub fn fft(&self) -> Tensor {
        self.try_fft_axis_last(false)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Unnormalized inverse FFT along the last axis (`ifft(fft(x)) = N·x`).
    #[track_caller]
    pub fn ifft(&self) -> Tensor {
        self.try_fft_axis_last(true)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// FFT (or inverse) along `axis`: the axis is moved last, transformed, and moved back.
    #[track_caller]
    pub fn fft_axis(&self, axis: usize, inverse: bool) -> Tensor {
        self.try_fft_axis(axis, inverse)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::fft_axis`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_fft_axis(&self, axis: usize, inverse: bool) -> Result<Tensor> {
        let r = self.rank();
        if axis >= r {
            return Err(Error::shape(format!(
                "fft: axis {axis} is out of range for {} (rank {r}); valid axes are 0..{r}",
                self.shape()
            )));
        }
        if axis + 1 == r {
            return self.try_fft_axis_last(inverse);
        }
        // Swapping two axes is its own inverse.
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(axis, r - 1);
        self.try_transpose(perm.clone())?
            .try_fft_axis_last(inverse)?
            .try_transpose(perm)
    }

    #[track_caller]
    fn try_fft_axis_last(&self, inverse: bool) -> Result<Tensor> {
        self.try_apply(
            Op::Fft {
                inverse,
                norm: FftNorm::Backward,
                algo: FftAlgo::Native,
            },
            &[self],
        )
    }

    /// Matmul against a weight synthesised from a codebook: `self: [m, k]`,
    /// `indices: u8 [n, k/entry_dim]`, `codebook: [num_entries, entry_dim]` → `[m, n]`,
    /// where weight row `j` is the concatenation of `codebook[indices[j, c]]`.
    /// Emits `Op::SynthMatMul { kind: Codebook { entry_dim, num_entries } }`.
    #[track_caller]
    pub fn synth_matmul(
        &self,
        indices: &Tensor,
        codebook: &Tensor,
        entry_dim: u32,
        num_entries: u32,
    ) -> Tensor {
        self.try_synth_matmul(indices, codebook, entry_dim, num_entries)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::synth_matmul`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_synth_matmul(
        &self,
        indices: &Tensor,
        codebook: &Tensor,
        entry_dim: u32,
        num_entries: u32,
    ) -> Result<Tensor> {
        self.try_apply(
            Op::SynthMatMul {
                kind: SynthKind::Codebook {
                    entry_dim,
                    num_entries,
                },
            },
            &[self, indices, codebook],
        )
    }

    /// The dense weight `W: [k, n]` that [`Tensor::synth_matmul`] multiplies by, with
    /// `self` as the `[n, k/entry_dim]` indices (so `x.matmul(&W)` equals
    /// `x.synth_matmul(…)`). Decomposed: `Cast(I64) → Reshape([-1]) → Gather(codebook)
    /// → Reshape([n, k]) → Transpose`.
    #[track_caller]
    pub fn synth_reconstruct(&self, codebook: &Tensor, entry_dim: u32) -> Tensor {
        self.try_synth_reconstruct(codebook, entry_dim)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::synth_reconstruct`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_synth_reconstruct(&self, codebook: &Tensor, entry_dim: u32) -> Result<Tensor> {
        let (idx, cb) = (self.shape(), codebook.shape());
        let ed = entry_dim as usize;
        let (Some(id), Some(cd)) = (idx.static_dims(), cb.static_dims()) else {
            return Err(Error::shape(format!(
                "synth_reconstruct: indices {idx} and codebook {cb} need static shapes"
            )));
        };
        if id.len() != 2 || cd.len() != 2 || cd[1] != ed || ed == 0 {
            return Err(Error::shape(format!(
                "synth_reconstruct: indices must be [n, k/entry_dim] and the codebook [num_entries, entry_dim = {entry_dim}], got {idx} and {cb}"
            )));
        }
        let (n, k) = (id[0], id[1] * ed);
        let flat = self
            .try_apply(Op::Cast { to: DType::I64 }, &[self])?
            .try_reshape([-1])?;
        let rows = flat.try_apply(Op::Gather { axis: 0 }, &[codebook, &flat])?;
        rows.try_reshape([n as i64, k as i64])?
            .try_transpose([1, 0])
    }

    /// Per-channel Gaussian-RBF spline activation over the last axis: with `h =
    /// (grid_max − grid_min)/(num_basis − 1)` and centres `g_b = grid_min + b·h`,
    /// `out = Σ_b coeff[c, b]·exp(−((x − g_b)/h)²)` for channel `c`. `coeff` is
    /// `[channels, num_basis]`. Emits `Op::SplineActivation`.
    #[track_caller]
    pub fn spline_activation(
        &self,
        coeff: &Tensor,
        num_basis: u32,
        grid_min: f32,
        grid_max: f32,
    ) -> Tensor {
        self.try_spline_activation(coeff, num_basis, grid_min, grid_max)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::spline_activation`] returning an error instead of panicking.
    #[track_caller]
    pub fn try_spline_activation(
        &self,
        coeff: &Tensor,
        num_basis: u32,
        grid_min: f32,
        grid_max: f32,
    ) -> Result<Tensor> {
        self.try_apply(
            Op::SplineActivation {
                num_basis,
                grid_min,
                grid_max,
            },
            &[self, coeff],
        )
    }
}

fn attention_op(num_heads: usize, head_dim: usize, mask_kind: MaskKind) -> Op {
    Op::Attention {
        num_heads,
        head_dim,
        v_head_dim: None,
        mask_kind,
        score_scale: None,
        attn_logit_softcap: None,
    }
}
