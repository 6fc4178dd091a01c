//! The operation vocabulary and its attribute enums.
//!
//! Every node of a [`crate::Graph`] carries one [`Op`]. The variants that user
//! code matches on (API.md §10) keep their exact field names; the rest are
//! primitives the compiler and the autodiff transforms emit.

use crate::{DType, Graph, ScaleLayout, ScaledFormat};

mod attrs;

pub use attrs::{
    Activation, BinaryOp, CmpOp, FftAlgo, FftNorm, MaskKind, ReduceOp, RopeStyle, SynthKind,
};

/// One operation of the IR. See the crate docs for input conventions.
///
/// Input order per variant (shapes use `…` for leading batch axes):
/// - `Binary`, `Compare`: `[lhs, rhs]`, NumPy broadcasting.
/// - `Where`: `[mask, on_true, on_false]`.
/// - `MatMul`: `[a: …×M×K, b: …×K×N]`, batch axes broadcast.
/// - `FusedMatMulBiasAct`: `[x: …×K, w: K×N, bias: N]` → `act(x·w + bias)`.
/// - `DenseSolve`: `[a: …×n×n, b: …×n or …×n×k]` → `x` with `a·x = b`.
/// - `LayerNorm`/`RmsNorm`: `[x, gamma, beta]`.
/// - `Attention`: `[q, k, v]` (+ `mask` for `Custom`, `bias` for `Bias`).
/// - `AttentionVjp`: `[q, k, v, (mask | bias), g]` with `g` the cotangent of the
///   attention output → `[|q| + |k| + |v|]`: dq, dk, dv flattened one after the other
///   (see the variant's doc).
/// - `Rope`: `[x, cos, sin]`.
/// - `Gather`: `[table, indices]`; `ScatterAdd`: `[base, indices, updates]`.
/// - `Conv`: `[x, w]` or `[x, w, bias]`; `ConvGradInput`: `[x, w, grad_out]`;
///   `ConvGradWeight`: `[x, w, grad_out]` (the shape-reference inputs are read for shape only).
/// - `Pool`: `[x]`; `PoolGrad`: `[x, grad_out]`.
/// - `SoftmaxCrossEntropy`: `[logits N×C, targets N×C]`;
///   `SoftmaxCrossEntropyWithLogits`: `[logits N×C, labels N]`.
/// - `SynthMatMul`: `[x, indices, codebook]`; `SplineActivation`: `[x, coeff C×num_basis]`.
/// - `ScaledQuantScale`: `[x]`; `ScaledQuantize`: `[x, scales]`;
///   `ScaledMatMul`: `[lq, rq, ls, rs]` (+ `bias` when `has_bias`).
/// - `Scan`: `[init, bcasts…, xs…]`.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A named runtime input.
    Input {
        name: String,
    },
    /// A named trainable parameter.
    Param {
        name: String,
    },
    /// Literal data, little-endian, in the node's dtype (shape on the node).
    Constant {
        data: Vec<u8>,
    },
    Activation(Activation),
    /// Element type conversion (float → int truncates toward zero; NaN → 0; saturating).
    Cast {
        to: DType,
    },
    /// Identity whose gradient is zero.
    StopGradient,
    Binary(BinaryOp),
    Compare(CmpOp),
    Where,
    MatMul,
    DenseSolve,
    LayerNorm {
        axis: i32,
        eps: f32,
    },
    RmsNorm {
        axis: i32,
        eps: f32,
    },
    Attention {
        num_heads: usize,
        head_dim: usize,
        v_head_dim: Option<usize>,
        mask_kind: MaskKind,
        score_scale: Option<f32>,
        attn_logit_softcap: Option<f32>,
    },
    /// The vector-Jacobian product of [`Op::Attention`] with the same attributes: the
    /// gradients of q, k and v for the output cotangent `g` (q's layout, v's head dim),
    /// packed into one vector `[|q| + |k| + |v|]`: all of dq, then dk, then dv, each
    /// flattened in its operand's own layout (so each is a contiguous slice, read by a
    /// narrow and a reshape). Every operand dim must be static. A mask or bias operand
    /// gets no gradient here (differentiate a learned bias through the primitive form).
    /// Backends that do not keep it whole get its primitive form from `decompose`.
    AttentionVjp {
        num_heads: usize,
        head_dim: usize,
        v_head_dim: Option<usize>,
        mask_kind: MaskKind,
        score_scale: Option<f32>,
        attn_logit_softcap: Option<f32>,
    },
    Rope {
        head_dim: usize,
        n_rot: usize,
        style: RopeStyle,
    },
    /// Row-major reshape; `-1` is inferred (at most one).
    Reshape {
        new_shape: Vec<i64>,
    },
    Transpose {
        perm: Vec<usize>,
    },
    Narrow {
        axis: usize,
        start: usize,
        len: usize,
    },
    Concat {
        axis: usize,
    },
    /// Broadcast to `target_shape` (a `-1` keeps the input's dim).
    Expand {
        target_shape: Vec<i64>,
    },
    Gather {
        axis: usize,
    },
    Reduce {
        op: ReduceOp,
        axes: Vec<usize>,
        keep_dim: bool,
    },
    SynthMatMul {
        kind: SynthKind,
    },
    SplineActivation {
        num_basis: u32,
        grid_min: f32,
        grid_max: f32,
    },
    ScaledMatMul {
        lhs_format: ScaledFormat,
        rhs_format: ScaledFormat,
        scale_layout: ScaleLayout,
        has_bias: bool,
    },
    ScaledQuantize {
        format: ScaledFormat,
        scale_layout: ScaleLayout,
    },
    ScaledQuantScale {
        format: ScaledFormat,
        scale_layout: ScaleLayout,
    },
    Cumsum {
        axis: i32,
        exclusive: bool,
    },
    /// Index of the first maximum along `axis`, encoded in the input's dtype.
    ArgMax {
        axis: usize,
        keep_dim: bool,
    },
    ArgMin {
        axis: usize,
        keep_dim: bool,
    },
    Softmax {
        axis: i32,
    },
    Conv {
        kernel_size: Vec<usize>,
        stride: Vec<usize>,
        padding: Vec<usize>,
        dilation: Vec<usize>,
        groups: usize,
    },
    Pool {
        kind: ReduceOp,
        kernel_size: Vec<usize>,
        stride: Vec<usize>,
        padding: Vec<usize>,
    },
    SoftmaxCrossEntropy,
    SoftmaxCrossEntropyWithLogits,
    FusedMatMulBiasAct {
        activation: Option<Activation>,
    },
    Scan {
        body: Box<Graph>,
        length: u32,
        save_trajectory: bool,
        num_bcast: u32,
        num_xs: u32,
        num_checkpoints: u32,
    },
    /// FFT along the last axis. Real dtypes use the block layout `[…, 2N]`
    /// (N real parts, then N imaginary parts); complex dtypes are `[…, N]`.
    Fft {
        inverse: bool,
        norm: FftNorm,
        algo: FftAlgo,
    },

    // ---- primitives emitted by the compiler and the transforms ----
    /// `log(softmax(x))` along `axis`, computed stably.
    LogSoftmax {
        axis: i32,
    },
    /// `base` with `updates` added at `indices` along `axis` (the adjoint of `Gather`).
    ScatterAdd {
        axis: usize,
    },
    /// Pad `axis` with `before`/`after` copies of `value` (the adjoint of `Narrow`).
    Pad {
        axis: usize,
        before: usize,
        after: usize,
        value: f64,
    },
    /// Gradient of [`Op::Pool`] with respect to its input.
    PoolGrad {
        kind: ReduceOp,
        kernel_size: Vec<usize>,
        stride: Vec<usize>,
        padding: Vec<usize>,
    },
    /// Gradient of [`Op::Conv`] with respect to `x`.
    ConvGradInput {
        kernel_size: Vec<usize>,
        stride: Vec<usize>,
        padding: Vec<usize>,
        dilation: Vec<usize>,
        groups: usize,
    },
    /// Gradient of [`Op::Conv`] with respect to `w`.
    ConvGradWeight {
        kernel_size: Vec<usize>,
        stride: Vec<usize>,
        padding: Vec<usize>,
        dilation: Vec<usize>,
        groups: usize,
    },
    /// `x` broadcast (NumPy rules: right-aligned, size-1 axes stretch) to the dims of
    /// `like`, whose values are never read: inputs `[x, like]`, result `like`'s dims with
    /// `x`'s dtype. Unlike [`Op::Expand`] the target can have dynamic dims, so the
    /// adjoint of a reduction survives a dynamic batch axis.
    BroadcastLike,
    /// Round every element to the grid of an emulated float format
    /// (see [`crate::FloatFormat`]); gradient passes straight through.
    RoundToFormat {
        exp_bits: u32,
        man_bits: u32,
        max_normal: f32,
    },
}

/// The attributes [`Op::Attention`] and [`Op::AttentionVjp`] share (see
/// [`Op::attention_attrs`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionAttrs {
    /// Query heads.
    pub num_heads: usize,
    /// Width of a query / key head.
    pub head_dim: usize,
    /// Width of a value head (`None`: `head_dim`).
    pub v_head_dim: Option<usize>,
    /// Which keys each query sees.
    pub mask_kind: MaskKind,
    /// The score scale (`None`: `1/√head_dim`).
    pub score_scale: Option<f32>,
    /// The logit soft cap `c` (`s ← c·tanh(s/c)`), if any.
    pub attn_logit_softcap: Option<f32>,
}

impl AttentionAttrs {
    /// The fused attention backward ([`Op::AttentionVjp`]) with these attributes.
    pub fn vjp_op(self) -> Op {
        Op::AttentionVjp {
            num_heads: self.num_heads,
            head_dim: self.head_dim,
            v_head_dim: self.v_head_dim,
            mask_kind: self.mask_kind,
            score_scale: self.score_scale,
            attn_logit_softcap: self.attn_logit_softcap,
        }
    }

    /// Whether the op takes a mask or bias operand after q, k, v.
    pub fn has_extra_operand(self) -> bool {
        matches!(self.mask_kind, MaskKind::Custom | MaskKind::Bias)
    }
}

/// The window attributes a convolution and its two gradient ops share, borrowed from the
/// op ([`Op::conv_attrs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvAttrs<'a> {
    /// Kernel extent per spatial axis.
    pub kernel_size: &'a [usize],
    /// Step between output positions per spatial axis.
    pub stride: &'a [usize],
    /// Zero padding on both sides per spatial axis.
    pub padding: &'a [usize],
    /// Spacing of kernel taps per spatial axis.
    pub dilation: &'a [usize],
    /// Channel groups.
    pub groups: usize,
}

impl ConvAttrs<'_> {
    /// The convolution [`Op::Conv`] with these attributes.
    pub fn conv(self) -> Op {
        Op::Conv {
            kernel_size: self.kernel_size.to_vec(),
            stride: self.stride.to_vec(),
            padding: self.padding.to_vec(),
            dilation: self.dilation.to_vec(),
            groups: self.groups,
        }
    }

    /// The input gradient [`Op::ConvGradInput`] of the convolution with these attributes.
    pub fn grad_input(self) -> Op {
        Op::ConvGradInput {
            kernel_size: self.kernel_size.to_vec(),
            stride: self.stride.to_vec(),
            padding: self.padding.to_vec(),
            dilation: self.dilation.to_vec(),
            groups: self.groups,
        }
    }

    /// The weight gradient [`Op::ConvGradWeight`] of the convolution with these attributes.
    pub fn grad_weight(self) -> Op {
        Op::ConvGradWeight {
            kernel_size: self.kernel_size.to_vec(),
            stride: self.stride.to_vec(),
            padding: self.padding.to_vec(),
            dilation: self.dilation.to_vec(),
            groups: self.groups,
        }
    }
}

impl Op {
    /// The window attributes of an [`Op::Conv`], [`Op::ConvGradInput`] or
    /// [`Op::ConvGradWeight`]; `None` for every other op.
    ///
    /// ```
    /// use rlx_ir::Op;
    /// let op = Op::Conv {
    ///     kernel_size: vec![3, 3],
    ///     stride: vec![1, 1],
    ///     padding: vec![1, 1],
    ///     dilation: vec![1, 1],
    ///     groups: 2,
    /// };
    /// assert_eq!(op.conv_attrs().unwrap().groups, 2);
    /// assert!(Op::MatMul.conv_attrs().is_none());
    /// ```
    pub fn conv_attrs(&self) -> Option<ConvAttrs<'_>> {
        match self {
            Op::Conv {
                kernel_size,
                stride,
                padding,
                dilation,
                groups,
            }
            | Op::ConvGradInput {
                kernel_size,
                stride,
                padding,
                dilation,
                groups,
            }
            | Op::ConvGradWeight {
                kernel_size,
                stride,
                padding,
                dilation,
                groups,
            } => Some(ConvAttrs {
                kernel_size,
                stride,
                padding,
                dilation,
                groups: *groups,
            }),
            _ => None,
        }
    }

    /// The attributes of an [`Op::Attention`] or [`Op::AttentionVjp`]; `None` for every
    /// other op.
    pub fn attention_attrs(&self) -> Option<AttentionAttrs> {
        match self {
            Op::Attention {
                num_heads,
                head_dim,
                v_head_dim,
                mask_kind,
                score_scale,
                attn_logit_softcap,
            }
            | Op::AttentionVjp {
                num_heads,
                head_dim,
                v_head_dim,
                mask_kind,
                score_scale,
                attn_logit_softcap,
            } => Some(AttentionAttrs {
                num_heads: *num_heads,
                head_dim: *head_dim,
                v_head_dim: *v_head_dim,
                mask_kind: *mask_kind,
                score_scale: *score_scale,
                attn_logit_softcap: *attn_logit_softcap,
            }),
            _ => None,
        }
    }

    /// The variant's name (`"MatMul"`, `"Activation"`, …), for tables and coverage checks
    /// that must list every variant. Exhaustive: a new variant must be named here, and
    /// in [`Op::VARIANT_NAMES`] beside it.
    ///
    /// ```
    /// use rlx_ir::{Activation, Op};
    /// assert_eq!(Op::Activation(Activation::Relu).variant_name(), "Activation");
    /// ```
    pub fn variant_name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "Input",
            Op::Param { .. } => "Param",
            Op::Constant { .. } => "Constant",
            Op::Activation(_) => "Activation",
            Op::Cast { .. } => "Cast",
            Op::StopGradient => "StopGradient",
            Op::Binary(_) => "Binary",
            Op::Compare(_) => "Compare",
            Op::Where => "Where",
            Op::MatMul => "MatMul",
            Op::DenseSolve => "DenseSolve",
            Op::LayerNorm { .. } => "LayerNorm",
            Op::RmsNorm { .. } => "RmsNorm",
            Op::Attention { .. } => "Attention",
            Op::AttentionVjp { .. } => "AttentionVjp",
            Op::Rope { .. } => "Rope",
            Op::Reshape { .. } => "Reshape",
            Op::Transpose { .. } => "Transpose",
            Op::Narrow { .. } => "Narrow",
            Op::Concat { .. } => "Concat",
            Op::Expand { .. } => "Expand",
            Op::Gather { .. } => "Gather",
            Op::Reduce { .. } => "Reduce",
            Op::SynthMatMul { .. } => "SynthMatMul",
            Op::SplineActivation { .. } => "SplineActivation",
            Op::ScaledMatMul { .. } => "ScaledMatMul",
            Op::ScaledQuantize { .. } => "ScaledQuantize",
            Op::ScaledQuantScale { .. } => "ScaledQuantScale",
            Op::Cumsum { .. } => "Cumsum",
            Op::ArgMax { .. } => "ArgMax",
            Op::ArgMin { .. } => "ArgMin",
            Op::Softmax { .. } => "Softmax",
            Op::Conv { .. } => "Conv",
            Op::Pool { .. } => "Pool",
            Op::SoftmaxCrossEntropy => "SoftmaxCrossEntropy",
            Op::SoftmaxCrossEntropyWithLogits => "SoftmaxCrossEntropyWithLogits",
            Op::FusedMatMulBiasAct { .. } => "FusedMatMulBiasAct",
            Op::Scan { .. } => "Scan",
            Op::Fft { .. } => "Fft",
            Op::LogSoftmax { .. } => "LogSoftmax",
            Op::ScatterAdd { .. } => "ScatterAdd",
            Op::Pad { .. } => "Pad",
            Op::PoolGrad { .. } => "PoolGrad",
            Op::ConvGradInput { .. } => "ConvGradInput",
            Op::ConvGradWeight { .. } => "ConvGradWeight",
            Op::BroadcastLike => "BroadcastLike",
            Op::RoundToFormat { .. } => "RoundToFormat",
        }
    }

    /// Every variant's [`Op::variant_name`], in declaration order.
    pub const VARIANT_NAMES: [&'static str; 47] = [
        "Input",
        "Param",
        "Constant",
        "Activation",
        "Cast",
        "StopGradient",
        "Binary",
        "Compare",
        "Where",
        "MatMul",
        "DenseSolve",
        "LayerNorm",
        "RmsNorm",
        "Attention",
        "AttentionVjp",
        "Rope",
        "Reshape",
        "Transpose",
        "Narrow",
        "Concat",
        "Expand",
        "Gather",
        "Reduce",
        "SynthMatMul",
        "SplineActivation",
        "ScaledMatMul",
        "ScaledQuantize",
        "ScaledQuantScale",
        "Cumsum",
        "ArgMax",
        "ArgMin",
        "Softmax",
        "Conv",
        "Pool",
        "SoftmaxCrossEntropy",
        "SoftmaxCrossEntropyWithLogits",
        "FusedMatMulBiasAct",
        "Scan",
        "Fft",
        "LogSoftmax",
        "ScatterAdd",
        "Pad",
        "PoolGrad",
        "ConvGradInput",
        "ConvGradWeight",
        "BroadcastLike",
        "RoundToFormat",
    ];

    /// Short name for messages and listings (`"matmul"`, `"reduce_sum"`).
    pub fn name(&self) -> String {
        match self {
            Op::Input { .. } => "input".into(),
            Op::Param { .. } => "param".into(),
            Op::Constant { .. } => "constant".into(),
            Op::Activation(a) => a.name().into(),
            Op::Cast { .. } => "cast".into(),
            Op::StopGradient => "stop_gradient".into(),
            Op::Binary(b) => b.name().into(),
            Op::Compare(c) => c.name().into(),
            Op::Where => "where".into(),
            Op::MatMul => "matmul".into(),
            Op::DenseSolve => "solve".into(),
            Op::LayerNorm { .. } => "layer_norm".into(),
            Op::RmsNorm { .. } => "rms_norm".into(),
            Op::Attention { .. } => "attention".into(),
            Op::AttentionVjp { .. } => "attention_vjp".into(),
            Op::Rope { .. } => "rope".into(),
            Op::Reshape { .. } => "reshape".into(),
            Op::Transpose { .. } => "transpose".into(),
            Op::Narrow { .. } => "narrow".into(),
            Op::Concat { .. } => "concat".into(),
            Op::Expand { .. } => "broadcast_to".into(),
            Op::Gather { .. } => "gather".into(),
            Op::Reduce { op, .. } => format!("reduce_{}", op.name()),
            Op::SynthMatMul { .. } => "synth_matmul".into(),
            Op::SplineActivation { .. } => "spline_activation".into(),
            Op::ScaledMatMul { .. } => "scaled_matmul".into(),
            Op::ScaledQuantize { .. } => "scaled_quantize".into(),
            Op::ScaledQuantScale { .. } => "scaled_quant_scale".into(),
            Op::Cumsum { .. } => "cumsum".into(),
            Op::ArgMax { .. } => "argmax".into(),
            Op::ArgMin { .. } => "argmin".into(),
            Op::Softmax { .. } => "softmax".into(),
            Op::Conv { .. } => "conv2d".into(),
            Op::Pool { kind, .. } => format!("{}_pool2d", kind.name()),
            Op::SoftmaxCrossEntropy => "cross_entropy".into(),
            Op::SoftmaxCrossEntropyWithLogits => "softmax_cross_entropy_with_logits".into(),
            Op::FusedMatMulBiasAct { .. } => "linear".into(),
            Op::Scan { .. } => "scan".into(),
            Op::Fft { inverse: false, .. } => "fft".into(),
            Op::Fft { inverse: true, .. } => "ifft".into(),
            Op::LogSoftmax { .. } => "log_softmax".into(),
            Op::ScatterAdd { .. } => "scatter_add".into(),
            Op::Pad { .. } => "pad".into(),
            Op::PoolGrad { .. } => "pool2d_grad".into(),
            Op::ConvGradInput { .. } => "conv2d_grad_input".into(),
            Op::ConvGradWeight { .. } => "conv2d_grad_weight".into(),
            Op::RoundToFormat { .. } => "round_to_format".into(),
            Op::BroadcastLike => "broadcast_like".into(),
        }
    }

    /// Leaf ops: no inputs, value supplied from outside or baked in.
    pub fn is_leaf(&self) -> bool {
        matches!(
            self,
            Op::Input { .. } | Op::Param { .. } | Op::Constant { .. }
        )
    }

    /// Pure per-element ops (output element `i` depends only on input elements at `i`
    /// after broadcasting).
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Activation(_)
                | Op::Cast { .. }
                | Op::StopGradient
                | Op::Binary(_)
                | Op::Compare(_)
                | Op::Where
                | Op::RoundToFormat { .. }
        )
    }

    /// Pure data-movement ops (each output element is one input element or a fill value).
    pub fn is_movement(&self) -> bool {
        matches!(
            self,
            Op::Reshape { .. }
                | Op::Transpose { .. }
                | Op::Narrow { .. }
                | Op::Concat { .. }
                | Op::Expand { .. }
                | Op::Pad { .. }
        )
    }
}
