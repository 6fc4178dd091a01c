//! The ops that fusion leaves whole, and why.
//!
//! `classify` (in the parent module) gives every node it does not recognize the class
//! `Opaque`: the node gets its own `KernelKind::Opaque` kernel, which the backend runs
//! whole on materialized (or view-read) operands, with nothing fused before or after
//! it. This table lists the ops that end there after the default pipeline
//! (`simplify → decompose → simplify → fuse`) with the CPU backend's options
//! (`rlx_cpu::compile_options()`: `keep_whole` = softmax, log_softmax, layer_norm,
//! rms_norm, attention, attention_vjp, and the requests `attention_in_f32` and
//! `attention_vjp_whole_in_f32`). The unit test below compiles one small graph per `Op`
//! variant (and per condition) and checks that exactly these ops come out as opaque
//! kernels, so the table cannot drift from the code silently.
//!
//! "Oracle" in the last column means the CPU has no kernel of its own: `exec/opaque.rs`
//! materializes the operands and calls `rlx_ir::interp::eval_op` (correct, element by
//! element in f64, slow). Paths are under `crates/rlx-cpu/src/exec/`.
//!
//! # Always opaque ([`OPAQUE_OPS`])
//!
//! | op (`Op::name()`) | why it needs a whole-op kernel (or why it is not yet primitives) | CPU kernel |
//! |---|---|---|
//! | `solve` (`DenseSolve`) | Gaussian elimination with partial pivoting: which row is the pivot depends on the data, every elimination step reads the previous one's result, and a singular matrix is an error naming the system. No elementwise, reduction or contraction form. | oracle (f64 elimination) |
//! | `rope` | Expressible in primitives (narrowed halves times the cos/sin tables), but the rotated halves go back together by a `concat`, itself opaque. The kernel reads each pair once and rounds once from f64 as the oracle does, so its bits are the oracle's. No measurement of a primitive form exists. | `rope.rs` (dense operands), else oracle |
//! | `concat` | Each output element comes from one of several buffers, chosen by its coordinate; a load reads one buffer through an index map (reshape, transpose, narrow, expand), so no elementwise kernel expresses it (a `where` over zero-padded operands would, but `pad` is not a view either). The CPU copies each operand's slab from its view into the output (W11's q/k/v-split backward concat went from 8.1 to 0.40 ms when it stopped materializing its operands first, commit 093318e). | `copy.rs` through `opaque.rs` `concat_copies`; mixed dtypes or index-table views: `movement.rs` |
//! | `pad` | Elements outside the operand take a fill value; no view step has a fill (`ViewStep` is reshape, expand, transpose, narrow). A guarded load would let consumers fuse it; not done. | `copy.rs` through `opaque.rs` `pad_copies`, else `movement.rs` |
//! | `gather` | Which element is read depends on data (the index buffer), while loads are static index maps; an index outside `-n..n` (or a fractional float index) must be an error naming the op, not a silent read. | `opaque.rs` `gather_rows` (a dense table read in place, only the selected rows copied), else `movement.rs` |
//! | `scatter_add` | Destinations depend on data and several updates may land on one element; the CPU adds them per destination row in index order, in f64 like the oracle, so the result is the same for every thread count. No kernel kind writes data-addressed elements. | `scatter.rs` |
//! | `synth_matmul` | Weight rows are codebook entries chosen by u8 indices. Expressible as a `gather` of codebook rows, a reshape and a `matmul`; `decompose` does not lower it (and the gather would stay opaque). | oracle |
//! | `spline_activation` | Each element reads the coefficients of the grid interval it falls in: an index computed from data, i.e. a gather. Could be floor + gather + elementwise basis math; not lowered. | oracle |
//! | `scaled_quant_scale` | One scale per block from the absmax of its finite elements, encoded by the format's rules (an f32, an E8M0 power of two or an E4M3 value): a reduction followed by format-specific rounding that no elementwise op provides. | `scaled_quant.rs` through `opaque.rs` (`Native::Scaled`, `scaled.rs` `eval_into`) |
//! | `scaled_quantize` | Encodes each element into a byte code of an fp8/fp6/fp4 format with its block's scale: per-format bit arithmetic (threshold tables on the CPU) that no elementwise op or dtype provides. | `scaled_quant.rs` (as above) |
//! | `scaled_matmul` | The operands are codes: panels of K are decoded (code table × block scale) into a scratch and multiplied by the f32 or bf16 GEMM, never materialized in f32; a contraction kernel reads typed elements through views. | `scaled.rs` |
//! | `cumsum` | Every output element depends on all earlier ones along the axis (a scan): not elementwise, and a reduction has one result per line. A matmul with a triangular constant would express it at O(n²) work; not done. | native (`exec/cumsum.rs`: the oracle's bits, f64 running sum for floats, wrapping integers; lines in parallel) |
//! | `conv2d` (`Conv`, any number of spatial axes) | DESIGN.md counts convolution among the contractions, but the fuser has no window (im2col) load: receptive fields overlap, which no view expresses. So a conv's bias is inside the op and an activation after it is a kernel of its own. | `conv.rs` (f32: im2col + GEMM), else oracle |
//! | `max_pool2d`, `mean_pool2d`, `sum_pool2d` (`Pool`) | Windows overlap or hang over the padding: an element belongs to several windows, which neither a view nor a reduction axis expresses (an unfold view would). | `pool.rs` (f32: per channel plane, the oracle's f64 sums and bits), else oracle |
//! | `pool2d_grad` (`PoolGrad`) | The adjoint of a window op: an input element sums the gradients of every window that contains it (for max, only where it was the window's first maximum: data-dependent). | `pool.rs` (f32, the oracle's bits), else oracle |
//! | `conv2d_grad_input`, `conv2d_grad_weight` | Window ops like `conv2d` (a transposed convolution, a correlation of `x` with the output gradient); no im2col load. | `conv_grad.rs` (f32: GEMM + col2im, GEMM over im2col), else oracle |
//! | `softmax_cross_entropy_with_logits` | The labels are data: a label outside `0..C` or not a whole number is an error naming the row, which a lowered compare-and-select would turn into a silent loss (`nn_ops.rs`). | `nn_ops.rs` (f32 logits read in place), else oracle |
//! | `scan` | A loop: `length` steps of a body graph carrying state. Control flow, not a kernel kind. | oracle (the interpreter runs the body) |
//! | `fft`, `ifft` (`Fft`) | Every output of a row reads every input of it; the fast algorithm goes through log N butterfly stages, which no kernel kind expresses. The CPU path is the oracle's direct O(N²) DFT in f64, so a lowering to a contraction against a twiddle-factor constant (the same O(N²) work, through the GEMM, but rounded in the dtype instead of f64) would not be slower in order; not done, and not measured. | oracle (direct DFT in f64) |
//!
//! # Opaque only under a condition ([`OPAQUE_IF`])
//!
//! | op | when | why | CPU kernel |
//! |---|---|---|---|
//! | `attention` | dtype f64; f16/bf16 too on a backend that does not ask for `attention_in_f32`; every dtype on a backend that does not keep `attention` whole | Only f32 attention becomes a fused `Attention` kernel (`classify`), and `decompose` has no lowering of the forward op. f16/bf16 attention becomes casts to f32 around an f32 `attention` (`decompose::ATTENTION_IN_F32`, which the CPU asks for; exact operands, one rounding of the result), so it runs the fused kernel; f64 has no lossless f32 form. | oracle: `opaque.rs` has no attention path (the fused kernel in `attention/` takes f32 only) |
//! | `cast` | from or to a complex dtype (c64, c128) | Fused kernels have no complex arithmetic (`ew_supported`). | oracle |
//! | `eq`, `ne` | complex operands (ordered comparisons reject complex) | As for `cast`. | oracle |
//! | `where` | complex branches | As for `cast`. | oracle |
//!
//! # Never opaque, although `classify` could say so
//!
//! - `decompose` always lowers `linear` (`FusedMatMulBiasAct`), `cross_entropy` (the CPU
//!   does not keep it), `softmax`/`log_softmax` over an axis other than the last, and
//!   `attention_vjp` of f64 (f16/bf16 `attention_vjp` becomes casts around the fused f32
//!   backward: `decompose::ATTENTION_VJP_WHOLE_IN_F32`, which the CPU asks for; on a
//!   backend without that request, f16/bf16 are lowered too). That lowering packs dq,
//!   dk, dv with a `concat` (opaque, unless narrows read the pieces) and copies
//!   grouped-query heads with a `gather` (opaque).
//! - `simplify` removes a reduction over no axes (the identity), the one case in which
//!   `classify` would send a real-dtype `Reduce` to `Opaque`.
//! - Shape inference rejects the other dtype cases `classify` leaves opaque: activations
//!   on bool, complex or (except `neg abs relu sign round floor ceil`) integers, binary
//!   ops and reductions on complex, arithmetic on bool, `atan2` on integers, argmax and
//!   argmin on bool or complex, matmul on complex.
//! - `argmax`/`argmin` are fused reductions since commit b220c3d.

/// The ops (by [`rlx_ir::Op::name`]) that the CPU pipeline always compiles to an opaque
/// kernel, whatever their dtypes and attributes (see the module docs for why).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const OPAQUE_OPS: &[&str] = &[
    "solve",
    "rope",
    "concat",
    "pad",
    "gather",
    "scatter_add",
    "synth_matmul",
    "spline_activation",
    "scaled_quant_scale",
    "scaled_quantize",
    "scaled_matmul",
    "cumsum",
    "conv2d",
    "max_pool2d",
    "mean_pool2d",
    "sum_pool2d",
    "pool2d_grad",
    "conv2d_grad_input",
    "conv2d_grad_weight",
    "softmax_cross_entropy_with_logits",
    "scan",
    "fft",
    "ifft",
];

/// Ops (by [`rlx_ir::Op::name`]) that the CPU pipeline compiles to an opaque kernel only
/// under a condition on their dtypes, with that condition.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const OPAQUE_IF: &[(&str, &str)] = &[
    ("attention", "dtype f64 (f16/bf16 run in f32)"),
    ("cast", "from or to a complex dtype"),
    ("eq", "complex operands"),
    ("ne", "complex operands"),
    ("where", "complex branches"),
];

#[cfg(test)]
mod tests {
    use super::{OPAQUE_IF, OPAQUE_OPS};
    use crate::program::KernelKind;
    use crate::{CompileOptions, compile};
    use rlx_ir::{
        Activation, BinaryOp, CmpOp, DType, FftAlgo, FftNorm, Graph, MaskKind, Op, ReduceOp,
        RopeStyle, ScaleLayout, ScaledFormat, Shape, SynthKind, TensorData, infer_shape,
    };
    use std::collections::BTreeSet;

    /// The CPU backend's options (`rlx_cpu::compile_options()` without environment
    /// switches): rlx-cpu depends on this crate, so the test cannot call it.
    fn cpu_options() -> CompileOptions {
        CompileOptions {
            keep_whole: [
                "softmax",
                "log_softmax",
                "layer_norm",
                "rms_norm",
                "attention",
                "attention_vjp",
                "attention_in_f32",
                "attention_vjp_whole_in_f32",
            ]
            .map(String::from)
            .to_vec(),
            multi_store: true,
            row_groups: true,
            ..Default::default()
        }
    }

    /// What the CPU pipeline must make of a sample.
    enum Want {
        /// One opaque kernel running the op whole, and nothing else.
        Opaque,
        /// Kernels with exactly these labels (`Kernel::label`), none opaque.
        Kernels(&'static [&'static str]),
        /// Lowered by `decompose`; opaque kernels of exactly these ops remain.
        LoweredLeaving(&'static [&'static str]),
    }

    /// One graph: inputs of these shapes, the op over them as the only output (for a
    /// leaf op, the leaf itself, of the one shape given).
    struct Sample {
        op: Op,
        ins: Vec<Shape>,
        want: Want,
    }

    fn sh(dims: &[usize], dt: DType) -> Shape {
        Shape::new(dims, dt)
    }

    fn f(dims: &[usize]) -> Shape {
        sh(dims, DType::F32)
    }

    fn s(op: Op, ins: Vec<Shape>, want: Want) -> Sample {
        Sample { op, ins, want }
    }

    fn fwd(num_heads: usize, head_dim: usize, mask_kind: MaskKind) -> Op {
        Op::Attention {
            num_heads,
            head_dim,
            v_head_dim: None,
            mask_kind,
            score_scale: None,
            attn_logit_softcap: None,
        }
    }

    fn vjp(num_heads: usize, head_dim: usize, mask_kind: MaskKind) -> Op {
        Op::AttentionVjp {
            num_heads,
            head_dim,
            v_head_dim: None,
            mask_kind,
            score_scale: None,
            attn_logit_softcap: None,
        }
    }

    /// `carry · bcast_0 + sin(x_0)` over f32 `[3]`.
    fn scan_body() -> Graph {
        let mut b = Graph::new("step");
        let carry = b.input("carry", f(&[3]));
        let w = b.input("bcast_0", f(&[3]));
        let x = b.input("x_0", f(&[3]));
        let cw = b.add_op(Op::Binary(BinaryOp::Mul), vec![carry, w]).unwrap();
        let sx = b.add_op(Op::Activation(Activation::Sin), vec![x]).unwrap();
        let next = b.add_op(Op::Binary(BinaryOp::Add), vec![cw, sx]).unwrap();
        b.set_outputs(vec![next]);
        b
    }

    fn window(kernel: usize, stride: usize, pad: usize) -> [Vec<usize>; 4] {
        [vec![kernel; 2], vec![stride; 2], vec![pad; 2], vec![1; 2]]
    }

    /// At least one sample per `Op` variant, and one per condition of [`OPAQUE_IF`] on
    /// each side of it.
    fn samples() -> Vec<Sample> {
        use Want::{Kernels, LoweredLeaving, Opaque};
        let ew: &[&str] = &["elementwise"];
        let c64 = |d: &[usize]| sh(d, DType::C64);
        let fmt = ScaledFormat::F8E4M3;
        let layout = ScaleLayout::PerTensor;
        let quant_scale = Op::ScaledQuantScale {
            format: fmt,
            scale_layout: layout,
        };
        let scales = infer_shape(&quant_scale, &[&f(&[2, 4])]).unwrap();
        let [kernel_size, stride, padding, dilation] = window(2, 1, 1);
        let conv_grad_ins = vec![f(&[1, 2, 3, 3]), f(&[2, 2, 2, 2]), f(&[1, 2, 4, 4])];
        let qkv = |dt: DType, n: usize| vec![sh(&[1, 3, 2, 2], dt); n];
        let mut v = vec![
            // Leaves, elementwise ops and views.
            s(
                Op::Input { name: "x".into() },
                vec![f(&[2, 3])],
                Kernels(ew),
            ),
            s(
                Op::Param { name: "p".into() },
                vec![f(&[2, 3])],
                Kernels(ew),
            ),
            s(Op::Constant { data: vec![] }, vec![f(&[3])], Kernels(ew)),
            s(
                Op::Activation(Activation::Exp),
                vec![f(&[2, 3])],
                Kernels(ew),
            ),
            s(Op::Cast { to: DType::F64 }, vec![f(&[2, 3])], Kernels(ew)),
            s(Op::Cast { to: DType::C64 }, vec![f(&[2, 3])], Opaque),
            s(Op::Cast { to: DType::F32 }, vec![c64(&[2, 3])], Opaque),
            s(Op::StopGradient, vec![f(&[2, 3])], Kernels(ew)),
            s(Op::Binary(BinaryOp::Add), vec![f(&[2, 3]); 2], Kernels(ew)),
            s(Op::Compare(CmpOp::Lt), vec![f(&[2, 3]); 2], Kernels(ew)),
            s(Op::Compare(CmpOp::Eq), vec![f(&[2, 3]); 2], Kernels(ew)),
            s(Op::Compare(CmpOp::Ne), vec![f(&[2, 3]); 2], Kernels(ew)),
            s(Op::Compare(CmpOp::Eq), vec![c64(&[2, 3]); 2], Opaque),
            s(Op::Compare(CmpOp::Ne), vec![c64(&[2, 3]); 2], Opaque),
            s(
                Op::Where,
                vec![sh(&[2, 3], DType::Bool), f(&[2, 3]), f(&[2, 3])],
                Kernels(ew),
            ),
            s(
                Op::Where,
                vec![sh(&[2, 3], DType::Bool), c64(&[2, 3]), c64(&[2, 3])],
                Opaque,
            ),
            s(
                Op::RoundToFormat {
                    exp_bits: 4,
                    man_bits: 3,
                    max_normal: 448.0,
                },
                vec![f(&[2, 3])],
                Kernels(ew),
            ),
            s(
                Op::Reshape {
                    new_shape: vec![3, 2],
                },
                vec![f(&[2, 3])],
                Kernels(ew),
            ),
            s(
                Op::Transpose { perm: vec![1, 0] },
                vec![f(&[2, 3])],
                Kernels(ew),
            ),
            s(
                Op::Narrow {
                    axis: 1,
                    start: 1,
                    len: 2,
                },
                vec![f(&[2, 3])],
                Kernels(ew),
            ),
            s(
                Op::Expand {
                    target_shape: vec![2, 3],
                },
                vec![f(&[1, 3])],
                Kernels(ew),
            ),
            s(Op::BroadcastLike, vec![f(&[3]), f(&[2, 3])], Kernels(ew)),
            // Cores.
            s(
                Op::Reduce {
                    op: ReduceOp::Sum,
                    axes: vec![1],
                    keep_dim: false,
                },
                vec![f(&[2, 3])],
                Kernels(&["reduce_sum"]),
            ),
            s(
                Op::ArgMax {
                    axis: 1,
                    keep_dim: false,
                },
                vec![f(&[2, 3])],
                Kernels(&["reduce_argmax"]),
            ),
            s(
                Op::ArgMin {
                    axis: 0,
                    keep_dim: true,
                },
                vec![sh(&[2, 3], DType::I32)],
                Kernels(&["reduce_argmin"]),
            ),
            s(
                Op::MatMul,
                vec![f(&[2, 3]), f(&[3, 4])],
                Kernels(&["matmul"]),
            ),
            s(
                Op::Softmax { axis: -1 },
                vec![f(&[2, 3])],
                Kernels(&["softmax"]),
            ),
            s(
                Op::LogSoftmax { axis: -1 },
                vec![f(&[2, 3])],
                Kernels(&["log_softmax"]),
            ),
            s(
                Op::LayerNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![f(&[2, 4]), f(&[4]), f(&[4])],
                Kernels(&["layer_norm"]),
            ),
            s(
                Op::RmsNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![f(&[2, 4]), f(&[4]), f(&[4])],
                Kernels(&["rms_norm"]),
            ),
            s(
                fwd(2, 2, MaskKind::Causal),
                qkv(DType::F32, 3),
                Kernels(&["attention"]),
            ),
            s(
                vjp(2, 2, MaskKind::Causal),
                qkv(DType::F32, 4),
                Kernels(&["attention_vjp"]),
            ),
            // Lowered by decompose.
            s(
                Op::Softmax { axis: 0 },
                vec![f(&[2, 3])],
                Kernels(&["reduce_max", "reduce_sum", "elementwise"]),
            ),
            s(
                Op::FusedMatMulBiasAct {
                    activation: Some(Activation::Relu),
                },
                vec![f(&[2, 3]), f(&[3, 4]), f(&[4])],
                Kernels(&["matmul"]),
            ),
            s(
                Op::SoftmaxCrossEntropy,
                vec![f(&[2, 3]); 2],
                Kernels(&["row_group"]),
            ),
            s(
                vjp(2, 2, MaskKind::Causal),
                qkv(DType::F64, 4),
                LoweredLeaving(&["concat"]),
            ),
            // Through f32 (`attention_vjp_whole_in_f32`): casts up, the fused backward,
            // one rounding of the packed gradients.
            s(
                vjp(2, 2, MaskKind::Causal),
                qkv(DType::BF16, 4),
                Kernels(&["attention_vjp", "elementwise"]),
            ),
            s(
                vjp(2, 2, MaskKind::Causal),
                qkv(DType::F16, 4),
                Kernels(&["attention_vjp", "elementwise"]),
            ),
            // Through f32 (`attention_in_f32`): casts up, the fused kernel, one rounding.
            s(
                fwd(2, 2, MaskKind::Causal),
                qkv(DType::F16, 3),
                Kernels(&["attention", "elementwise"]),
            ),
            s(
                fwd(2, 2, MaskKind::Causal),
                qkv(DType::BF16, 3),
                Kernels(&["attention", "elementwise"]),
            ),
            // Opaque.
            s(Op::DenseSolve, vec![f(&[3, 3]), f(&[3, 2])], Opaque),
            s(
                Op::Rope {
                    head_dim: 4,
                    n_rot: 4,
                    style: RopeStyle::NeoX,
                },
                vec![f(&[1, 3, 8]), f(&[3, 2]), f(&[3, 2])],
                Opaque,
            ),
            s(Op::Concat { axis: 0 }, vec![f(&[2, 3]); 2], Opaque),
            s(
                Op::Gather { axis: 0 },
                vec![f(&[4, 3]), sh(&[2], DType::I64)],
                Opaque,
            ),
            s(
                Op::ScatterAdd { axis: 0 },
                vec![f(&[4, 2]), sh(&[3], DType::I64), f(&[3, 2])],
                Opaque,
            ),
            s(
                Op::SynthMatMul {
                    kind: SynthKind::Codebook {
                        entry_dim: 2,
                        num_entries: 4,
                    },
                },
                vec![f(&[2, 4]), sh(&[3, 2], DType::U8), f(&[4, 2])],
                Opaque,
            ),
            s(
                Op::SplineActivation {
                    num_basis: 4,
                    grid_min: -1.0,
                    grid_max: 1.0,
                },
                vec![f(&[2, 3]), f(&[3, 4])],
                Opaque,
            ),
            s(quant_scale, vec![f(&[2, 4])], Opaque),
            s(
                Op::ScaledQuantize {
                    format: fmt,
                    scale_layout: layout,
                },
                vec![f(&[2, 4]), scales.clone()],
                Opaque,
            ),
            s(
                Op::ScaledMatMul {
                    lhs_format: fmt,
                    rhs_format: fmt,
                    scale_layout: layout,
                    has_bias: false,
                },
                vec![
                    sh(&[2, 4], DType::U8),
                    sh(&[3, 4], DType::U8),
                    scales.clone(),
                    scales,
                ],
                Opaque,
            ),
            s(
                Op::Cumsum {
                    axis: -1,
                    exclusive: false,
                },
                vec![f(&[2, 3])],
                Opaque,
            ),
            s(
                Op::Conv {
                    kernel_size: kernel_size.clone(),
                    stride: stride.clone(),
                    padding: padding.clone(),
                    dilation: dilation.clone(),
                    groups: 1,
                },
                vec![f(&[1, 2, 4, 4]), f(&[3, 2, 2, 2])],
                Opaque,
            ),
            s(
                Op::ConvGradInput {
                    kernel_size: kernel_size.clone(),
                    stride: stride.clone(),
                    padding: padding.clone(),
                    dilation: dilation.clone(),
                    groups: 1,
                },
                conv_grad_ins.clone(),
                Opaque,
            ),
            s(
                Op::ConvGradWeight {
                    kernel_size,
                    stride,
                    padding,
                    dilation,
                    groups: 1,
                },
                conv_grad_ins,
                Opaque,
            ),
            s(
                Op::SoftmaxCrossEntropyWithLogits,
                vec![f(&[2, 3]), sh(&[2], DType::I64)],
                Opaque,
            ),
            s(
                Op::Scan {
                    body: Box::new(scan_body()),
                    length: 4,
                    save_trajectory: false,
                    num_bcast: 1,
                    num_xs: 1,
                    num_checkpoints: 0,
                },
                vec![f(&[3]), f(&[3]), f(&[4, 3])],
                Opaque,
            ),
            s(
                Op::Pad {
                    axis: 0,
                    before: 1,
                    after: 2,
                    value: 0.5,
                },
                vec![f(&[2, 2])],
                Opaque,
            ),
        ];
        for inverse in [false, true] {
            let op = Op::Fft {
                inverse,
                norm: FftNorm::Backward,
                algo: FftAlgo::Native,
            };
            v.push(s(op, vec![f(&[2, 8])], Opaque));
        }
        for kind in [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum] {
            let [kernel_size, stride, padding, _] = window(2, 2, 0);
            let pool = Op::Pool {
                kind,
                kernel_size: kernel_size.clone(),
                stride: stride.clone(),
                padding: padding.clone(),
            };
            v.push(s(pool, vec![f(&[1, 2, 4, 4])], Opaque));
            let grad = Op::PoolGrad {
                kind,
                kernel_size,
                stride,
                padding,
            };
            v.push(s(grad, vec![f(&[1, 2, 4, 4]), f(&[1, 2, 2, 2])], Opaque));
        }
        v.push(s(fwd(2, 2, MaskKind::Causal), qkv(DType::F64, 3), Opaque));
        v
    }

    /// The sample as a graph: named inputs, the op as the one output.
    fn graph(sm: &Sample) -> Graph {
        let mut g = Graph::new(sm.op.name());
        let y = match &sm.op {
            Op::Input { name } => g.input(name.clone(), sm.ins[0].clone()),
            Op::Param { name } => g.param(name.clone(), sm.ins[0].clone()),
            Op::Constant { .. } => {
                let dims = sm.ins[0].static_dims().unwrap();
                let vals: Vec<f64> = (0..dims.iter().product()).map(|i| i as f64).collect();
                let d = TensorData::from_f64_as(sm.ins[0].dtype(), &dims, &vals);
                let shape = d.shape();
                g.add_node(Op::Constant { data: d.bytes }, vec![], shape)
            }
            op => {
                let ins = (sm.ins.iter().enumerate())
                    .map(|(i, sh)| g.input(format!("x{i}"), sh.clone()))
                    .collect();
                g.add_op(op.clone(), ins)
                    .unwrap_or_else(|e| panic!("sample {}: {e}", op.name()))
            }
        };
        g.set_outputs(vec![y]);
        g
    }

    fn describe(sm: &Sample) -> String {
        let ins: Vec<String> = sm.ins.iter().map(|s| s.to_string()).collect();
        format!("{} over [{}]", sm.op.name(), ins.join(", "))
    }

    #[test]
    fn exactly_the_listed_ops_compile_to_opaque_kernels_in_the_cpu_pipeline() {
        let opts = cpu_options();
        let conditional: BTreeSet<&str> = OPAQUE_IF.iter().map(|(n, _)| *n).collect();
        let mut failures = Vec::new();
        for sm in samples() {
            let name = sm.op.name();
            let p = compile(&graph(&sm), &opts)
                .unwrap_or_else(|e| panic!("{}: compile failed: {e}", describe(&sm)));
            let opaque: Vec<String> = (p.kernels.iter())
                .filter_map(|k| match &k.kind {
                    KernelKind::Opaque { op, .. } => Some(op.name()),
                    _ => None,
                })
                .collect();
            let labels: BTreeSet<String> = p.kernels.iter().map(|k| k.label()).collect();
            let listed = OPAQUE_OPS.contains(&name.as_str());
            let ok = match &sm.want {
                Want::Opaque => {
                    p.kernels.len() == 1
                        && opaque == [name.clone()]
                        && (listed || conditional.contains(name.as_str()))
                }
                Want::Kernels(want) => {
                    opaque.is_empty()
                        && !listed
                        && labels == want.iter().map(|l| l.to_string()).collect()
                }
                Want::LoweredLeaving(want) => {
                    let got: BTreeSet<&str> = opaque.iter().map(String::as_str).collect();
                    !listed && got == want.iter().copied().collect()
                }
            };
            if !ok {
                failures.push(format!(
                    "{}: kernels {:?} (listed as always opaque: {listed})",
                    describe(&sm),
                    p.kernels.iter().map(|k| k.label()).collect::<Vec<_>>()
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "the opaque-op table of fuse/opaque_ops.rs no longer matches the pipeline; \
             update the table, OPAQUE_OPS/OPAQUE_IF and the samples together:\n{}",
            failures.join("\n")
        );
    }

    #[test]
    fn samples_cover_every_op_variant_and_both_sides_of_every_condition() {
        let all = samples();
        let variants: BTreeSet<&str> = all.iter().map(|s| s.op.variant_name()).collect();
        let missing: Vec<&str> = (Op::VARIANT_NAMES.iter().copied())
            .filter(|v| !variants.contains(v))
            .collect();
        assert!(missing.is_empty(), "no sample for {missing:?}");
        let opaque_samples: BTreeSet<String> = (all.iter())
            .filter(|s| matches!(s.want, Want::Opaque))
            .map(|s| s.op.name())
            .collect();
        let other_samples: BTreeSet<String> = (all.iter())
            .filter(|s| !matches!(s.want, Want::Opaque))
            .map(|s| s.op.name())
            .collect();
        for name in OPAQUE_OPS {
            assert!(
                opaque_samples.contains(*name),
                "OPAQUE_OPS lists {name}, but no sample compiles it"
            );
        }
        for (name, when) in OPAQUE_IF {
            assert!(
                opaque_samples.contains(*name) && other_samples.contains(*name),
                "{name} is opaque only when {when}: it needs a sample on each side"
            );
            assert!(!OPAQUE_OPS.contains(name), "{name} is in both lists");
        }
    }
}
