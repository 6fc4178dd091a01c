//! One good and one bad case per `Op` variant, with a coverage check.

use crate::{bad, f32s, ok, sh};
use rlx_ir::op::{FftAlgo, FftNorm, MaskKind, ReduceOp, RopeStyle, SynthKind};
use rlx_ir::{Activation, BinaryOp, CmpOp, DType, Graph, Op, ScaleLayout, ScaledFormat, Shape};
use std::collections::BTreeSet;

const VARIANT_COUNT: usize = Op::VARIANT_NAMES.len();
const LEAVES: [&str; 3] = ["Input", "Param", "Constant"];

fn conv(k: usize, stride: usize, pad: usize) -> Op {
    Op::Conv {
        kernel_size: vec![k, k],
        stride: vec![stride, stride],
        padding: vec![pad, pad],
        dilation: vec![1, 1],
        groups: 1,
    }
}

fn conv_grad(input: bool) -> Op {
    let (kernel_size, stride, padding, dilation) = (vec![3, 3], vec![1, 1], vec![0, 0], vec![1, 1]);
    if input {
        Op::ConvGradInput {
            kernel_size,
            stride,
            padding,
            dilation,
            groups: 1,
        }
    } else {
        Op::ConvGradWeight {
            kernel_size,
            stride,
            padding,
            dilation,
            groups: 1,
        }
    }
}

fn pool(grad: bool) -> Op {
    let (kernel_size, stride, padding) = (vec![2, 2], vec![2, 2], vec![0, 0]);
    if grad {
        Op::PoolGrad {
            kind: ReduceOp::Max,
            kernel_size,
            stride,
            padding,
        }
    } else {
        Op::Pool {
            kind: ReduceOp::Max,
            kernel_size,
            stride,
            padding,
        }
    }
}

fn attention(mask_kind: MaskKind) -> Op {
    Op::Attention {
        num_heads: 4,
        head_dim: 8,
        v_head_dim: None,
        mask_kind,
        score_scale: None,
        attn_logit_softcap: None,
    }
}

fn attention_vjp(mask_kind: MaskKind) -> Op {
    Op::AttentionVjp {
        num_heads: 4,
        head_dim: 8,
        v_head_dim: None,
        mask_kind,
        score_scale: None,
        attn_logit_softcap: None,
    }
}

fn scaled_mm(has_bias: bool) -> Op {
    Op::ScaledMatMul {
        lhs_format: ScaledFormat::F8E4M3,
        rhs_format: ScaledFormat::F8E4M3,
        scale_layout: ScaleLayout::BlockMxE8M0 { block: 32 },
        has_bias,
    }
}

const MX: ScaleLayout = ScaleLayout::BlockMxE8M0 { block: 32 };

fn scan_op(save_trajectory: bool) -> Op {
    Op::Scan {
        body: Box::new(crate::scan::accumulate_body()),
        length: 5,
        save_trajectory,
        num_bcast: 1,
        num_xs: 1,
        num_checkpoints: 0,
    }
}

/// `(op, inputs, expected)` for every non-leaf variant.
fn good_cases() -> Vec<(Op, Vec<Shape>, Shape)> {
    let u8s = |d: &[usize]| sh(d, DType::U8);
    vec![
        (
            Op::Activation(Activation::Gelu),
            vec![f32s(&[2, 3])],
            f32s(&[2, 3]),
        ),
        (
            Op::Cast { to: DType::I32 },
            vec![f32s(&[2])],
            sh(&[2], DType::I32),
        ),
        (Op::StopGradient, vec![f32s(&[])], f32s(&[])),
        (
            Op::Binary(BinaryOp::Add),
            vec![f32s(&[4, 1]), f32s(&[3])],
            f32s(&[4, 3]),
        ),
        (
            Op::Compare(CmpOp::Lt),
            vec![f32s(&[2, 1]), f32s(&[1, 3])],
            sh(&[2, 3], DType::Bool),
        ),
        (
            Op::Where,
            vec![sh(&[2, 1], DType::Bool), f32s(&[3]), f32s(&[])],
            f32s(&[2, 3]),
        ),
        (
            Op::MatMul,
            vec![f32s(&[2, 3]), f32s(&[3, 4])],
            f32s(&[2, 4]),
        ),
        (
            Op::DenseSolve,
            vec![f32s(&[3, 3]), f32s(&[3, 2])],
            f32s(&[3, 2]),
        ),
        (
            Op::LayerNorm {
                axis: -1,
                eps: 1e-5,
            },
            vec![f32s(&[2, 5]), f32s(&[5]), f32s(&[5])],
            f32s(&[2, 5]),
        ),
        (
            Op::RmsNorm { axis: 1, eps: 1e-6 },
            vec![f32s(&[2, 5]), f32s(&[5]), f32s(&[5])],
            f32s(&[2, 5]),
        ),
        (
            attention_vjp(MaskKind::Causal),
            vec![
                f32s(&[2, 5, 4, 8]),
                f32s(&[2, 7, 4, 8]),
                f32s(&[2, 7, 4, 8]),
                f32s(&[2, 5, 4, 8]),
            ],
            f32s(&[2 * (5 * 32 + 7 * 32 + 7 * 32)]),
        ),
        (
            attention(MaskKind::Causal),
            vec![
                f32s(&[2, 5, 4, 8]),
                f32s(&[2, 7, 4, 8]),
                f32s(&[2, 7, 4, 8]),
            ],
            f32s(&[2, 5, 4, 8]),
        ),
        (
            Op::Rope {
                head_dim: 8,
                n_rot: 8,
                style: RopeStyle::NeoX,
            },
            vec![f32s(&[1, 6, 16]), f32s(&[6, 4]), f32s(&[6, 4])],
            f32s(&[1, 6, 16]),
        ),
        (
            Op::Reshape {
                new_shape: vec![6, -1],
            },
            vec![f32s(&[2, 3, 4])],
            f32s(&[6, 4]),
        ),
        (
            Op::Transpose {
                perm: vec![2, 0, 1],
            },
            vec![f32s(&[2, 3, 4])],
            f32s(&[4, 2, 3]),
        ),
        (
            Op::Narrow {
                axis: 0,
                start: 1,
                len: 3,
            },
            vec![f32s(&[5, 2])],
            f32s(&[3, 2]),
        ),
        (
            Op::Concat { axis: 0 },
            vec![f32s(&[2, 3]), f32s(&[4, 3])],
            f32s(&[6, 3]),
        ),
        (
            Op::Expand {
                target_shape: vec![2, 3, 4],
            },
            vec![f32s(&[3, 1])],
            f32s(&[2, 3, 4]),
        ),
        (
            Op::BroadcastLike,
            vec![f32s(&[3, 1]), sh(&[2, 3, 4], DType::Bool)],
            f32s(&[2, 3, 4]),
        ),
        (
            Op::Gather { axis: 0 },
            vec![f32s(&[10, 4]), sh(&[3, 5], DType::I64)],
            f32s(&[3, 5, 4]),
        ),
        (
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![0, 2],
                keep_dim: false,
            },
            vec![f32s(&[2, 3, 4])],
            f32s(&[3]),
        ),
        (
            Op::SynthMatMul {
                kind: SynthKind::Codebook {
                    entry_dim: 4,
                    num_entries: 16,
                },
            },
            vec![f32s(&[4, 8]), u8s(&[6, 2]), f32s(&[16, 4])],
            f32s(&[4, 6]),
        ),
        (
            Op::SplineActivation {
                num_basis: 8,
                grid_min: -2.0,
                grid_max: 2.0,
            },
            vec![f32s(&[2, 3]), f32s(&[3, 8])],
            f32s(&[2, 3]),
        ),
        (
            scaled_mm(false),
            vec![u8s(&[4, 64]), u8s(&[8, 64]), u8s(&[4, 2]), u8s(&[8, 2])],
            f32s(&[4, 8]),
        ),
        (
            Op::ScaledQuantize {
                format: ScaledFormat::F8E4M3,
                scale_layout: MX,
            },
            vec![f32s(&[4, 64]), u8s(&[4, 2])],
            u8s(&[4, 64]),
        ),
        (
            Op::ScaledQuantScale {
                format: ScaledFormat::F8E4M3,
                scale_layout: MX,
            },
            vec![f32s(&[4, 64])],
            u8s(&[4, 2]),
        ),
        (
            Op::Cumsum {
                axis: -1,
                exclusive: true,
            },
            vec![f32s(&[2, 3])],
            f32s(&[2, 3]),
        ),
        (
            Op::ArgMax {
                axis: 1,
                keep_dim: false,
            },
            vec![f32s(&[2, 3])],
            f32s(&[2]),
        ),
        (
            Op::ArgMin {
                axis: 0,
                keep_dim: true,
            },
            vec![f32s(&[2, 3])],
            f32s(&[1, 3]),
        ),
        (Op::Softmax { axis: -1 }, vec![f32s(&[2, 3])], f32s(&[2, 3])),
        (
            conv(3, 1, 1),
            vec![f32s(&[1, 3, 8, 8]), f32s(&[16, 3, 3, 3])],
            f32s(&[1, 16, 8, 8]),
        ),
        (pool(false), vec![f32s(&[1, 3, 8, 8])], f32s(&[1, 3, 4, 4])),
        (
            Op::SoftmaxCrossEntropy,
            vec![f32s(&[4, 10]), f32s(&[4, 10])],
            f32s(&[4]),
        ),
        (
            Op::SoftmaxCrossEntropyWithLogits,
            vec![f32s(&[4, 10]), f32s(&[4])],
            f32s(&[4]),
        ),
        (
            Op::FusedMatMulBiasAct {
                activation: Some(Activation::Relu),
            },
            vec![f32s(&[8, 3]), f32s(&[3, 5]), f32s(&[5])],
            f32s(&[8, 5]),
        ),
        (
            scan_op(true),
            vec![f32s(&[3]), f32s(&[3]), f32s(&[5, 3])],
            f32s(&[5, 3]),
        ),
        (
            Op::Fft {
                inverse: false,
                norm: FftNorm::Backward,
                algo: FftAlgo::Native,
            },
            vec![f32s(&[4, 8])],
            f32s(&[4, 8]),
        ),
        (
            Op::LogSoftmax { axis: 0 },
            vec![f32s(&[2, 3])],
            f32s(&[2, 3]),
        ),
        (
            Op::ScatterAdd { axis: 0 },
            vec![f32s(&[10, 4]), sh(&[3], DType::I64), f32s(&[3, 4])],
            f32s(&[10, 4]),
        ),
        (
            Op::Pad {
                axis: 1,
                before: 1,
                after: 2,
                value: 0.0,
            },
            vec![f32s(&[2, 3])],
            f32s(&[2, 6]),
        ),
        (
            pool(true),
            vec![f32s(&[1, 3, 8, 8]), f32s(&[1, 3, 4, 4])],
            f32s(&[1, 3, 8, 8]),
        ),
        (
            conv_grad(true),
            vec![
                f32s(&[1, 3, 8, 8]),
                f32s(&[16, 3, 3, 3]),
                f32s(&[1, 16, 6, 6]),
            ],
            f32s(&[1, 3, 8, 8]),
        ),
        (
            conv_grad(false),
            vec![
                f32s(&[1, 3, 8, 8]),
                f32s(&[16, 3, 3, 3]),
                f32s(&[1, 16, 6, 6]),
            ],
            f32s(&[16, 3, 3, 3]),
        ),
        (
            Op::RoundToFormat {
                exp_bits: 4,
                man_bits: 3,
                max_normal: 448.0,
            },
            vec![f32s(&[3])],
            f32s(&[3]),
        ),
    ]
}

/// `(op, inputs, needles)` for every variant: the error must contain each needle.
fn bad_cases() -> Vec<(Op, Vec<Shape>, Vec<&'static str>)> {
    let u8s = |d: &[usize]| sh(d, DType::U8);
    vec![
        (Op::Input { name: "x".into() }, vec![], vec!["Graph::input"]),
        (Op::Param { name: "w".into() }, vec![], vec!["Graph::param"]),
        (
            Op::Constant { data: vec![0; 4] },
            vec![],
            vec!["Graph::add_node"],
        ),
        (
            Op::Activation(Activation::Exp),
            vec![sh(&[3], DType::I32)],
            vec!["[3] i32", "cast"],
        ),
        (
            Op::Cast { to: DType::F16 },
            vec![f32s(&[2]), f32s(&[2])],
            vec!["takes 1 input", "[2] f32"],
        ),
        (Op::StopGradient, vec![], vec!["takes 1 input(s)", "got 0"]),
        (
            Op::Binary(BinaryOp::Mul),
            vec![f32s(&[2, 3]), f32s(&[4, 3])],
            vec!["[2, 3] f32", "[4, 3] f32", "or is 1"],
        ),
        (
            Op::Compare(CmpOp::Ge),
            vec![f32s(&[2]), f32s(&[3])],
            vec!["[2] f32", "[3] f32"],
        ),
        (
            Op::Where,
            vec![sh(&[3], DType::Bool), f32s(&[3]), sh(&[3], DType::F64)],
            vec!["[3] f32", "[3] f64", "cast"],
        ),
        (
            Op::MatMul,
            vec![f32s(&[2, 3]), f32s(&[4, 5])],
            vec!["3 ≠ 4", "[2, 3] f32", "[4, 5] f32"],
        ),
        (
            Op::DenseSolve,
            vec![f32s(&[3, 4]), f32s(&[3])],
            vec!["square", "[3, 4] f32"],
        ),
        (
            Op::LayerNorm { axis: 0, eps: 1e-5 },
            vec![f32s(&[2, 5]), f32s(&[5]), f32s(&[5])],
            vec!["axis 0", "[2, 5] f32", "transpose"],
        ),
        (
            Op::RmsNorm {
                axis: -1,
                eps: 1e-6,
            },
            vec![f32s(&[2, 5]), f32s(&[4]), f32s(&[5])],
            vec!["gamma", "[4] f32", "[5]"],
        ),
        (
            attention_vjp(MaskKind::None),
            vec![
                f32s(&[2, 5, 4, 8]),
                f32s(&[2, 7, 4, 8]),
                f32s(&[2, 7, 4, 8]),
                f32s(&[2, 7, 4, 8]),
            ],
            vec!["cotangent g is [2, 7, 4, 8] f32", "[2, 5, 4, 8] f32"],
        ),
        (
            attention(MaskKind::None),
            vec![
                f32s(&[2, 5, 3, 8]),
                f32s(&[2, 7, 4, 8]),
                f32s(&[2, 7, 4, 8]),
            ],
            vec!["[2, 5, 3, 8] f32", "3 heads", "num_heads is 4"],
        ),
        (
            Op::Rope {
                head_dim: 8,
                n_rot: 8,
                style: RopeStyle::GptJ,
            },
            vec![f32s(&[1, 6, 16]), f32s(&[5, 4]), f32s(&[5, 4])],
            vec!["[5, 4] f32", "5 rows", "6 positions"],
        ),
        (
            Op::Reshape {
                new_shape: vec![4, 2],
            },
            vec![f32s(&[2, 3])],
            vec!["[2, 3] f32", "6 elements", "8 elements"],
        ),
        (
            Op::Transpose { perm: vec![0, 0] },
            vec![f32s(&[2, 3])],
            vec!["[0, 0]", "[2, 3] f32", "exactly once"],
        ),
        (
            Op::Narrow {
                axis: 0,
                start: 3,
                len: 3,
            },
            vec![f32s(&[5, 2])],
            vec!["[5, 2] f32", "size 5"],
        ),
        (
            Op::Concat { axis: 0 },
            vec![f32s(&[2, 3]), f32s(&[2, 4])],
            vec!["[2, 4] f32", "[2, 3] f32", "axis 1 differs"],
        ),
        (
            Op::Expand {
                target_shape: vec![3, 4],
            },
            vec![f32s(&[3, 2])],
            vec!["[3, 2] f32", "neither 4 nor 1"],
        ),
        (
            Op::BroadcastLike,
            vec![f32s(&[3, 2]), f32s(&[3, 4])],
            vec!["[3, 2] f32", "[3, 4] f32", "equal like's or be 1"],
        ),
        (
            Op::Gather { axis: 0 },
            vec![f32s(&[10, 4]), sh(&[3], DType::Bool)],
            vec!["[3] bool", "integers"],
        ),
        (
            Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![3],
                keep_dim: false,
            },
            vec![f32s(&[2, 3, 4])],
            vec!["axis 3", "[2, 3, 4] f32", "0..3"],
        ),
        (
            Op::SynthMatMul {
                kind: SynthKind::Codebook {
                    entry_dim: 4,
                    num_entries: 16,
                },
            },
            vec![f32s(&[4, 8]), f32s(&[6, 2]), f32s(&[16, 4])],
            vec!["u8", "[6, 2] f32"],
        ),
        (
            Op::SplineActivation {
                num_basis: 8,
                grid_min: -2.0,
                grid_max: 2.0,
            },
            vec![f32s(&[2, 3]), f32s(&[3, 7])],
            vec!["[3, 8]", "[3, 7] f32"],
        ),
        (
            scaled_mm(false),
            vec![u8s(&[4, 64]), u8s(&[8, 32]), u8s(&[4, 2]), u8s(&[8, 1])],
            vec!["[4, 64] u8", "[8, 32] u8", "inner"],
        ),
        (
            Op::ScaledQuantize {
                format: ScaledFormat::F8E4M3,
                scale_layout: MX,
            },
            vec![f32s(&[4, 64]), u8s(&[4, 4])],
            vec!["[4, 2] u8", "[4, 4] u8"],
        ),
        (
            Op::ScaledQuantScale {
                format: ScaledFormat::F8E4M3,
                scale_layout: MX,
            },
            vec![f32s(&[4, 40])],
            vec!["[4, 40] f32", "multiple of the block 32"],
        ),
        (
            Op::Cumsum {
                axis: -3,
                exclusive: false,
            },
            vec![f32s(&[2, 3])],
            vec!["axis -3", "-2..2"],
        ),
        (
            Op::ArgMax {
                axis: 1,
                keep_dim: false,
            },
            vec![f32s(&[2, 0])],
            vec!["[2, 0] f32", "empty"],
        ),
        (
            Op::ArgMin {
                axis: 0,
                keep_dim: false,
            },
            vec![sh(&[2], DType::Bool)],
            vec!["[2] bool"],
        ),
        (
            Op::Softmax { axis: 0 },
            vec![sh(&[2], DType::I32)],
            vec!["[2] i32", "floating-point"],
        ),
        (
            conv(3, 1, 1),
            vec![f32s(&[1, 3, 8, 8]), f32s(&[16, 4, 3, 3])],
            vec!["[16, 4, 3, 3] f32", "groups = 1"],
        ),
        (
            pool(false),
            vec![f32s(&[1, 3, 1, 8])],
            vec!["size 1", "window 2", "[1, 3, 1, 8] f32"],
        ),
        (
            Op::SoftmaxCrossEntropy,
            vec![f32s(&[4, 10]), f32s(&[4, 9])],
            vec!["[4, 10] f32", "[4, 9] f32"],
        ),
        (
            Op::SoftmaxCrossEntropyWithLogits,
            vec![f32s(&[4, 10]), f32s(&[10])],
            vec!["[10] f32", "[4, 10] f32", "must be [4]"],
        ),
        (
            Op::FusedMatMulBiasAct { activation: None },
            vec![f32s(&[8, 3]), f32s(&[3, 5]), f32s(&[3])],
            vec!["[5]", "[3] f32", "bias"],
        ),
        (
            scan_op(false),
            vec![f32s(&[3]), f32s(&[3]), f32s(&[4, 3])],
            vec!["[4, 3] f32", "scan length 5"],
        ),
        (
            Op::Fft {
                inverse: true,
                norm: FftNorm::Ortho,
                algo: FftAlgo::Dft,
            },
            vec![f32s(&[4, 7])],
            vec!["[4, 7] f32", "even"],
        ),
        (
            Op::LogSoftmax { axis: 2 },
            vec![f32s(&[2, 3])],
            vec!["axis 2", "rank-2"],
        ),
        (
            Op::ScatterAdd { axis: 0 },
            vec![f32s(&[10, 4]), sh(&[3], DType::I64), f32s(&[3, 5])],
            vec!["[3, 5] f32", "[3, 4] f32"],
        ),
        (
            Op::Pad {
                axis: 2,
                before: 1,
                after: 1,
                value: 0.0,
            },
            vec![f32s(&[2, 3])],
            vec!["axis 2", "[2, 3] f32"],
        ),
        (
            pool(true),
            vec![f32s(&[1, 3, 8, 8]), f32s(&[1, 3, 8, 8])],
            vec!["grad_out is [1, 3, 8, 8] f32", "[1, 3, 4, 4] f32"],
        ),
        (
            conv_grad(true),
            vec![
                f32s(&[1, 3, 8, 8]),
                f32s(&[16, 3, 3, 3]),
                f32s(&[1, 16, 8, 8]),
            ],
            vec!["[1, 16, 8, 8] f32", "[1, 16, 6, 6] f32"],
        ),
        (
            conv_grad(false),
            vec![
                f32s(&[1, 3, 8, 8]),
                f32s(&[16, 3, 2, 2]),
                f32s(&[1, 16, 6, 6]),
            ],
            vec!["[16, 3, 2, 2] f32", "kernel_size [3, 3]"],
        ),
        (
            Op::RoundToFormat {
                exp_bits: 4,
                man_bits: 3,
                max_normal: 448.0,
            },
            vec![sh(&[3], DType::I32)],
            vec!["[3] i32", "floating-point"],
        ),
    ]
}

#[test]
fn every_non_leaf_variant_infers_its_exact_result_type() {
    let cases = good_cases();
    for (op, inputs, expected) in &cases {
        let refs: Vec<&Shape> = inputs.iter().collect();
        assert_eq!(&ok(op, &refs), expected, "{}", op.name());
    }
    let covered: BTreeSet<_> = cases.iter().map(|(op, _, _)| op.variant_name()).collect();
    assert_eq!(
        covered.len() + LEAVES.len(),
        VARIANT_COUNT,
        "good cases cover {covered:?}"
    );
    assert!(LEAVES.iter().all(|l| !covered.contains(l)));
}

#[test]
fn every_variant_rejects_a_bad_application_naming_op_and_shapes() {
    let cases = bad_cases();
    for (op, inputs, needles) in &cases {
        let refs: Vec<&Shape> = inputs.iter().collect();
        bad(op, &refs, needles);
    }
    let covered: BTreeSet<_> = cases.iter().map(|(op, _, _)| op.variant_name()).collect();
    assert_eq!(covered.len(), VARIANT_COUNT, "bad cases cover {covered:?}");
}

#[test]
fn leaves_keep_their_declared_shape_in_the_graph() {
    let mut g = Graph::new("leaves");
    let x = g.input("x", sh(&[2, 3], DType::BF16));
    let w = g.param("w", f32s(&[3]));
    let c = g.add_node(
        Op::Constant { data: vec![0; 8] },
        vec![],
        sh(&[2], DType::I32),
    );
    assert_eq!(g.shape(x), &sh(&[2, 3], DType::BF16));
    assert_eq!(g.shape(w), &f32s(&[3]));
    assert_eq!(g.shape(c), &sh(&[2], DType::I32));
    g.set_outputs(vec![x, w, c]);
    g.verify().unwrap();
    // add_op has no shape to give a leaf, so it refuses with a pointer to the builders
    let e = g
        .add_op(Op::Input { name: "y".into() }, vec![])
        .unwrap_err();
    assert_eq!(e.op, "input");
    assert!(e.message.contains("Graph::input"), "{e}");
}
