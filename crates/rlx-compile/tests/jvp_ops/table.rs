//! The op table: one or more small graphs per `Op` variant, with input generators
//! that keep each op in its domain (positive logs, invertible solves, valid indices).

use crate::cases::{Case, Check, Gen, In, case};
use rlx_ir::op::{FftAlgo, FftNorm, MaskKind, ReduceOp, RopeStyle, SynthKind};
use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Graph, IrResult, NodeId, Op, ScaleLayout, ScaledFormat,
    Shape,
};

pub fn f(name: &'static str, dims: &[usize]) -> In {
    In {
        name,
        dims: dims.to_vec(),
        dtype: DType::F64,
        source: Gen::Uniform(-1.0, 1.0),
        diff: true,
    }
}

fn with_gen(mut i: In, g: Gen) -> In {
    i.source = g;
    i
}

fn pos(name: &'static str, dims: &[usize]) -> In {
    with_gen(f(name, dims), Gen::Uniform(0.5, 2.0))
}

fn f32in(name: &'static str, dims: &[usize]) -> In {
    In {
        dtype: DType::F32,
        ..f(name, dims)
    }
}

fn ints(name: &'static str, dims: &[usize], n: i64, dtype: DType) -> In {
    In {
        name,
        dims: dims.to_vec(),
        dtype,
        source: Gen::Ints(n),
        diff: false,
    }
}

fn bools(name: &'static str, dims: &[usize]) -> In {
    In {
        name,
        dims: dims.to_vec(),
        dtype: DType::Bool,
        source: Gen::Bools,
        diff: false,
    }
}

fn fixed(name: &'static str, dims: &[usize], vals: &[f64]) -> In {
    with_gen(f(name, dims), Gen::Fixed(vals.to_vec()))
}

fn constant_input(mut i: In) -> In {
    i.diff = false;
    i
}

// ------------------------------------------------------------------ op helpers

fn op(g: &mut Graph, op: Op, ins: &[NodeId]) -> IrResult<NodeId> {
    g.add_op(op, ins.to_vec())
}

fn unary(name: impl Into<String>, o: Op, x: In) -> Case {
    case(name, vec![x], move |g, i| op(g, o.clone(), i))
}

fn nary(name: impl Into<String>, o: Op, ins: Vec<In>) -> Case {
    case(name, ins, move |g, i| op(g, o.clone(), i))
}

fn reduce(r: ReduceOp, axes: &[usize], keep_dim: bool) -> Op {
    Op::Reduce {
        op: r,
        axes: axes.to_vec(),
        keep_dim,
    }
}

fn attention(h: usize, d: usize, mask_kind: MaskKind) -> Op {
    Op::Attention {
        num_heads: h,
        head_dim: d,
        v_head_dim: None,
        mask_kind,
        score_scale: None,
        attn_logit_softcap: None,
    }
}

fn conv(k: &[usize], stride: usize, pad: usize, groups: usize) -> Op {
    let n = k.len();
    Op::Conv {
        kernel_size: k.to_vec(),
        stride: vec![stride; n],
        padding: vec![pad; n],
        dilation: vec![1; n],
        groups,
    }
}

fn pool(kind: ReduceOp, k: usize, stride: usize, pad: usize) -> Op {
    Op::Pool {
        kind,
        kernel_size: vec![k, k],
        stride: vec![stride, stride],
        padding: vec![pad, pad],
    }
}

/// The body `carry·bcast_0 + sin(x_0)` of the scan cases.
fn scan_body(dims: &[usize]) -> Graph {
    let mut b = Graph::new("step");
    let s = Shape::new(dims, DType::F64);
    let carry = b.input("carry", s.clone());
    let w = b.input("bcast_0", s.clone());
    let x = b.input("x_0", s);
    let cw = b.add_op(Op::Binary(BinaryOp::Mul), vec![carry, w]).unwrap();
    let sx = b.add_op(Op::Activation(Activation::Sin), vec![x]).unwrap();
    let next = b.add_op(Op::Binary(BinaryOp::Add), vec![cw, sx]).unwrap();
    b.set_outputs(vec![next]);
    b
}

/// Quantize `x` per tensor in `fmt` (scales computed in-graph): `(codes, scales)`.
fn quantize(g: &mut Graph, x: NodeId, fmt: ScaledFormat) -> IrResult<(NodeId, NodeId)> {
    let layout = ScaleLayout::PerTensor;
    let s = op(
        g,
        Op::ScaledQuantScale {
            format: fmt,
            scale_layout: layout,
        },
        &[x],
    )?;
    let q = op(
        g,
        Op::ScaledQuantize {
            format: fmt,
            scale_layout: layout,
        },
        &[x, s],
    )?;
    Ok((q, s))
}

/// Host dequantization of a per-tensor quantized operand (the STE reference).
fn dequantized(x: &[f64], fmt: ScaledFormat) -> Vec<f64> {
    let absmax = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let s = absmax / fmt.max_finite() as f64;
    let s = if s == 0.0 { 1.0 } else { s as f32 as f64 };
    x.iter()
        .map(|&v| fmt.decode(fmt.encode_f64(v / s)) as f64 * s)
        .collect()
}

// ------------------------------------------------------------------ the table

/// Every case. Each `Op` variant is the output op of at least one case.
pub fn all() -> Vec<Case> {
    let mut v = Vec::new();
    elementwise(&mut v);
    linalg(&mut v);
    nn(&mut v);
    movement(&mut v);
    windowed(&mut v);
    v
}

fn elementwise(v: &mut Vec<Case>) {
    use Activation as A;
    for a in Activation::ALL {
        let x = match a {
            A::Log | A::Sqrt | A::Rsqrt => pos("x", &[2, 3]),
            A::Tan => with_gen(f("x", &[2, 3]), Gen::Uniform(-1.2, 1.2)),
            // Away from the kinks at 0 and ±3, and from integers for the roundings.
            A::Relu | A::Abs | A::Elu | A::Sign => with_gen(f("x", &[2, 3]), Gen::Away(0.1, 2.0)),
            A::HardSwish | A::HardSigmoid => with_gen(f("x", &[2, 3]), Gen::Uniform(-5.0, 5.0)),
            A::Round | A::Floor | A::Ceil => with_gen(
                f("x", &[2, 3]),
                Gen::Fixed(vec![0.2, 1.3, -2.4, 3.7, -0.6, 4.1]),
            ),
            _ => with_gen(f("x", &[2, 3]), Gen::Uniform(-2.0, 2.0)),
        };
        let mut c = unary(format!("activation_{}", a.name()), Op::Activation(a), x);
        if matches!(a, A::Round) {
            c = c.check(Check::Identity);
        }
        v.push(c);
    }
    v.push(unary(
        "activation_relu_int",
        Op::Activation(A::Relu),
        ints("x", &[4], 5, DType::I32),
    ));
    v.push(unary("cast_f32", Op::Cast { to: DType::F32 }, f("x", &[2, 3])).fd(1e-2, 1e-5));
    v.push(
        unary(
            "cast_i32",
            Op::Cast { to: DType::I32 },
            with_gen(f("x", &[3]), Gen::Uniform(-9.0, 9.0)),
        )
        .check(Check::Zero),
    );
    v.push(unary("stop_gradient", Op::StopGradient, f("x", &[3])).check(Check::Zero));
    v.push(
        unary(
            "round_to_format",
            Op::RoundToFormat {
                exp_bits: 4,
                man_bits: 3,
                max_normal: 448.0,
            },
            f("x", &[4]),
        )
        .check(Check::Identity),
    );
    for b in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Atan2,
    ] {
        let rhs = if b == BinaryOp::Div {
            pos("b", &[3])
        } else {
            f("b", &[3])
        };
        v.push(nary(
            format!("binary_{}", b.name()),
            Op::Binary(b),
            vec![f("a", &[2, 3]), rhs],
        ));
    }
    v.push(nary(
        "binary_pow",
        Op::Binary(BinaryOp::Pow),
        vec![pos("a", &[2, 3]), f("b", &[2, 1])],
    ));
    v.push(nary(
        "binary_rem",
        Op::Binary(BinaryOp::Mod),
        vec![
            with_gen(f("a", &[2, 3]), Gen::Uniform(-5.0, 5.0)),
            with_gen(f("b", &[3]), Gen::Uniform(0.7, 1.3)),
        ],
    ));
    v.push(nary(
        "binary_mul_by_int",
        Op::Binary(BinaryOp::Mul),
        vec![f("a", &[2, 3]), ints("b", &[3], 4, DType::I32)],
    ));
    for b in [
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
        BinaryOp::Shl,
        BinaryOp::Shr,
    ] {
        v.push(
            nary(
                format!("binary_{}", b.name()),
                Op::Binary(b),
                vec![
                    ints("a", &[2, 3], 16, DType::I32),
                    ints("b", &[3], 3, DType::I32),
                ],
            )
            .check(Check::Zero),
        );
    }
    v.push(
        nary(
            "compare_lt",
            Op::Compare(CmpOp::Lt),
            vec![f("a", &[2, 3]), f("b", &[3])],
        )
        .check(Check::Zero),
    );
    v.push(nary(
        "where",
        Op::Where,
        vec![bools("m", &[2, 1]), f("t", &[2, 3]), f("f", &[3])],
    ));
}

fn linalg(v: &mut Vec<Case>) {
    v.push(nary(
        "matmul",
        Op::MatMul,
        vec![f("a", &[2, 3]), f("b", &[3, 4])],
    ));
    v.push(nary(
        "matmul_batch_broadcast",
        Op::MatMul,
        vec![f("a", &[2, 2, 3]), f("b", &[3, 2])],
    ));
    for act in [None, Some(Activation::Gelu), Some(Activation::Tanh)] {
        v.push(nary(
            format!("linear_{}", act.map_or("none", |a| a.name())),
            Op::FusedMatMulBiasAct { activation: act },
            vec![f("x", &[2, 3]), f("w", &[3, 4]), f("bias", &[4])],
        ));
    }
    v.push(nary(
        "linear_vector_x",
        Op::FusedMatMulBiasAct {
            activation: Some(Activation::Silu),
        },
        vec![f("x", &[3]), f("w", &[3, 4]), f("bias", &[4])],
    ));
    v.push(nary(
        "solve_matrix",
        Op::DenseSolve,
        vec![with_gen(f("a", &[3, 3]), Gen::Invertible), f("b", &[3, 2])],
    ));
    v.push(nary(
        "solve_vector",
        Op::DenseSolve,
        vec![with_gen(f("a", &[3, 3]), Gen::Invertible), f("b", &[3])],
    ));
    v.push(nary(
        "synth_matmul",
        Op::SynthMatMul {
            kind: SynthKind::Codebook {
                entry_dim: 2,
                num_entries: 4,
            },
        },
        vec![
            f("x", &[2, 4]),
            ints("idx", &[3, 2], 4, DType::U8),
            f("codebook", &[4, 2]),
        ],
    ));
    let fmt = ScaledFormat::F8E4M3;
    v.push(
        case(
            "scaled_quant_scale",
            vec![f32in("x", &[2, 4])],
            move |g, i| {
                op(
                    g,
                    Op::ScaledQuantScale {
                        format: fmt,
                        scale_layout: ScaleLayout::PerTensor,
                    },
                    i,
                )
            },
        )
        .check(Check::Zero),
    );
    v.push(
        case(
            "scaled_quant_scale_mx",
            vec![f32in("x", &[2, 32])],
            move |g, i| {
                op(
                    g,
                    Op::ScaledQuantScale {
                        format: fmt,
                        scale_layout: ScaleLayout::mx(),
                    },
                    i,
                )
            },
        )
        .check(Check::Zero),
    );
    v.push(
        case("scaled_quantize", vec![f32in("x", &[2, 4])], move |g, i| {
            Ok(quantize(g, i[0], fmt)?.0)
        })
        .check(Check::Zero),
    );
    v.push(
        case(
            "scaled_matmul_ste",
            vec![
                f32in("x", &[2, 4]),
                f32in("w", &[3, 4]),
                f32in("bias", &[3]),
            ],
            move |g, i| {
                let (xq, xs) = quantize(g, i[0], fmt)?;
                let (wq, ws) = quantize(g, i[1], fmt)?;
                op(
                    g,
                    Op::ScaledMatMul {
                        lhs_format: fmt,
                        rhs_format: fmt,
                        scale_layout: ScaleLayout::PerTensor,
                        has_bias: true,
                    },
                    &[xq, wq, xs, ws, i[2]],
                )
            },
        )
        .check(Check::Custom(Box::new(move |ins, tans| {
            // tx·deq(w)ᵀ + deq(x)·twᵀ + tbias
            let x = dequantized(&ins[0].to_f64_vec(), fmt);
            let w = dequantized(&ins[1].to_f64_vec(), fmt);
            let (tx, tw, tb) = (
                tans[0].to_f64_vec(),
                tans[1].to_f64_vec(),
                tans[2].to_f64_vec(),
            );
            let mut out = vec![0.0; 6];
            for i in 0..2 {
                for j in 0..3 {
                    let mut s = tb[j];
                    for k in 0..4 {
                        s += tx[i * 4 + k] * w[j * 4 + k] + x[i * 4 + k] * tw[j * 4 + k];
                    }
                    out[i * 3 + j] = s;
                }
            }
            out
        }))),
    );
}

fn nn(v: &mut Vec<Case>) {
    v.push(unary("softmax", Op::Softmax { axis: -1 }, f("x", &[2, 4])));
    v.push(unary(
        "softmax_axis0",
        Op::Softmax { axis: 0 },
        f("x", &[3, 2]),
    ));
    v.push(unary(
        "log_softmax",
        Op::LogSoftmax { axis: 1 },
        f("x", &[2, 4]),
    ));
    v.push(nary(
        "layer_norm",
        Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        },
        vec![f("x", &[2, 5]), f("g", &[5]), f("b", &[5])],
    ));
    v.push(nary(
        "rms_norm",
        Op::RmsNorm { axis: 1, eps: 1e-6 },
        vec![f("x", &[2, 5]), f("g", &[5]), f("b", &[1])],
    ));
    v.push(nary(
        "cross_entropy",
        Op::SoftmaxCrossEntropy,
        vec![f("l", &[3, 4]), pos("t", &[3, 4])],
    ));
    v.push(nary(
        "cross_entropy_labels",
        Op::SoftmaxCrossEntropyWithLogits,
        vec![
            f("l", &[3, 4]),
            In {
                dtype: DType::F64,
                ..ints("y", &[3], 4, DType::F64)
            },
        ],
    ));
    let attn = |name: &str, o: Op, ins: Vec<In>| nary(name, o, ins);
    let qkv = |s: &[usize]| vec![f("q", s), f("k", s), f("v", s)];
    v.push(attn(
        "attention",
        attention(2, 4, MaskKind::None),
        qkv(&[1, 3, 2, 4]),
    ));
    v.push(attn(
        "attention_causal",
        attention(2, 4, MaskKind::Causal),
        qkv(&[2, 3, 2, 4]),
    ));
    v.push(attn(
        "attention_window",
        attention(2, 2, MaskKind::SlidingWindow(1)),
        qkv(&[1, 4, 4]),
    ));
    let mut custom = qkv(&[2, 3, 2, 2]);
    custom.push(constant_input(fixed(
        "mask",
        &[2, 3],
        &[1.0, 0.0, 1.0, 1.0, 1.0, 0.0],
    )));
    v.push(attn(
        "attention_custom",
        attention(2, 2, MaskKind::Custom),
        custom,
    ));
    let mut bias = qkv(&[1, 3, 2, 2]);
    bias.push(f("bias", &[2, 3, 3]));
    v.push(attn(
        "attention_bias",
        attention(2, 2, MaskKind::Bias),
        bias,
    ));
    v.push(attn(
        "attention_gqa_softcap",
        Op::Attention {
            num_heads: 4,
            head_dim: 2,
            v_head_dim: Some(3),
            mask_kind: MaskKind::Causal,
            score_scale: Some(0.7),
            attn_logit_softcap: Some(2.0),
        },
        vec![
            f("q", &[1, 3, 4, 2]),
            f("k", &[1, 3, 2, 2]),
            f("v", &[1, 3, 2, 3]),
        ],
    ));
    // The fused backward, differentiated through its primitive form (second
    // derivatives of attention): every operand, the cotangent included, gets a tangent.
    v.push(attn(
        "attention_vjp_causal",
        Op::AttentionVjp {
            num_heads: 2,
            head_dim: 2,
            v_head_dim: None,
            mask_kind: MaskKind::Causal,
            score_scale: None,
            attn_logit_softcap: None,
        },
        vec![
            f("q", &[1, 3, 2, 2]),
            f("k", &[1, 3, 2, 2]),
            f("v", &[1, 3, 2, 2]),
            f("g", &[1, 3, 2, 2]),
        ],
    ));
    v.push(attn(
        "attention_vjp_gqa_bias_softcap",
        Op::AttentionVjp {
            num_heads: 2,
            head_dim: 2,
            v_head_dim: Some(3),
            mask_kind: MaskKind::Bias,
            score_scale: Some(0.8),
            attn_logit_softcap: Some(1.5),
        },
        vec![
            f("q", &[1, 2, 4]),
            f("k", &[1, 3, 2]),
            f("v", &[1, 3, 3]),
            f("bias", &[2, 2, 3]),
            f("g", &[1, 2, 6]),
        ],
    ));
    let rope = |head_dim, n_rot, style| Op::Rope {
        head_dim,
        n_rot,
        style,
    };
    v.push(nary(
        "rope",
        rope(4, 4, RopeStyle::NeoX),
        vec![f("x", &[1, 3, 8]), f("cos", &[3, 2]), f("sin", &[3, 2])],
    ));
    v.push(nary(
        "rope_gptj_partial",
        rope(4, 2, RopeStyle::GptJ),
        vec![f("x", &[2, 3, 2, 4]), f("cos", &[3]), f("sin", &[3])],
    ));
    v.push(nary(
        "spline",
        Op::SplineActivation {
            num_basis: 4,
            grid_min: -1.0,
            grid_max: 1.0,
        },
        vec![f("x", &[2, 3]), f("coeff", &[3, 4])],
    ));
}

fn movement(v: &mut Vec<Case>) {
    v.push(unary(
        "reshape",
        Op::Reshape {
            new_shape: vec![3, -1],
        },
        f("x", &[2, 3]),
    ));
    v.push(unary(
        "transpose",
        Op::Transpose {
            perm: vec![2, 0, 1],
        },
        f("x", &[2, 3, 2]),
    ));
    v.push(unary(
        "narrow",
        Op::Narrow {
            axis: 1,
            start: 1,
            len: 2,
        },
        f("x", &[2, 4]),
    ));
    v.push(nary(
        "concat",
        Op::Concat { axis: 1 },
        vec![
            f("a", &[2, 1]),
            f("b", &[2, 2]),
            ints("c", &[2, 3], 3, DType::F64),
        ],
    ));
    v.push(unary(
        "expand",
        Op::Expand {
            target_shape: vec![2, 3, -1],
        },
        f("x", &[3, 1]),
    ));
    v.push(unary(
        "pad",
        Op::Pad {
            axis: 0,
            before: 1,
            after: 2,
            value: 0.5,
        },
        f("x", &[2, 2]),
    ));
    v.push(nary(
        "broadcast_like",
        Op::BroadcastLike,
        vec![f("x", &[3]), f("like", &[2, 3])],
    ));
    v.push(nary(
        "gather",
        Op::Gather { axis: 0 },
        vec![f("table", &[4, 3]), ints("idx", &[2], 4, DType::I64)],
    ));
    v.push(nary(
        "gather_axis1",
        Op::Gather { axis: 1 },
        vec![f("table", &[2, 4]), ints("idx", &[3, 2], 4, DType::I32)],
    ));
    v.push(nary(
        "scatter_add",
        Op::ScatterAdd { axis: 0 },
        vec![
            f("base", &[4, 2]),
            ints("idx", &[3], 4, DType::I64),
            f("upd", &[3, 2]),
        ],
    ));
    for (r, axes, keep) in [
        (ReduceOp::Sum, vec![1], false),
        (ReduceOp::Mean, vec![0, 1], true),
        (ReduceOp::Max, vec![0], false),
        (ReduceOp::Min, vec![1], true),
        (ReduceOp::Prod, vec![1], false),
    ] {
        v.push(unary(
            format!("reduce_{}", r.name()),
            reduce(r, &axes, keep),
            f("x", &[2, 3]),
        ));
    }
    v.push(
        unary(
            "reduce_max_ties",
            reduce(ReduceOp::Max, &[1], false),
            fixed("x", &[2, 3], &[1.0, 3.0, 3.0, 2.0, 2.0, 2.0]),
        )
        .check(Check::Custom(Box::new(|_, t| {
            // Ties split the tangent evenly.
            let t = t[0].to_f64_vec();
            vec![(t[1] + t[2]) / 2.0, (t[3] + t[4] + t[5]) / 3.0]
        }))),
    );
    v.push(unary(
        "reduce_prod_with_zero",
        reduce(ReduceOp::Prod, &[1], false),
        fixed("x", &[2, 3], &[2.0, 0.0, 3.0, 0.0, 0.0, 1.5]),
    ));
    v.push(unary(
        "cumsum",
        Op::Cumsum {
            axis: -1,
            exclusive: true,
        },
        f("x", &[2, 3]),
    ));
    v.push(
        unary(
            "argmax",
            Op::ArgMax {
                axis: 1,
                keep_dim: false,
            },
            f("x", &[2, 3]),
        )
        .check(Check::Zero),
    );
    v.push(
        unary(
            "argmin",
            Op::ArgMin {
                axis: 0,
                keep_dim: true,
            },
            f("x", &[2, 3]),
        )
        .check(Check::Zero),
    );
    let body = scan_body(&[3]);
    let scan = move |save| Op::Scan {
        body: Box::new(body.clone()),
        length: 4,
        save_trajectory: save,
        num_bcast: 1,
        num_xs: 1,
        num_checkpoints: 0,
    };
    v.push(nary(
        "scan",
        scan(false),
        vec![f("init", &[3]), f("w", &[3]), f("xs", &[4, 3])],
    ));
    v.push(nary(
        "scan_trajectory",
        scan(true),
        vec![f("init", &[3]), f("w", &[3]), f("xs", &[4, 3])],
    ));
    v.push(unary(
        "fft",
        Op::Fft {
            inverse: false,
            norm: FftNorm::Backward,
            algo: FftAlgo::Native,
        },
        f("x", &[2, 8]),
    ));
}

fn windowed(v: &mut Vec<Case>) {
    v.push(nary(
        "conv2d",
        conv(&[3, 3], 1, 1, 1),
        vec![f("x", &[1, 2, 4, 4]), f("w", &[3, 2, 3, 3])],
    ));
    v.push(nary(
        "conv2d_bias_groups",
        conv(&[2, 2], 2, 0, 2),
        vec![
            f("x", &[2, 4, 4, 4]),
            f("w", &[2, 2, 2, 2]),
            f("bias", &[2]),
        ],
    ));
    v.push(nary(
        "conv1d",
        conv(&[3], 1, 1, 1),
        vec![f("x", &[2, 1, 5]), f("w", &[2, 1, 3])],
    ));
    let grad_op = |input: bool| {
        let (kernel_size, stride, padding, dilation) =
            (vec![2, 2], vec![1, 1], vec![1, 1], vec![1, 1]);
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
    };
    let conv_grad_ins = || {
        vec![
            f("x", &[1, 2, 3, 3]),
            f("w", &[2, 2, 2, 2]),
            f("g", &[1, 2, 4, 4]),
        ]
    };
    v.push(nary("conv_grad_input", grad_op(true), conv_grad_ins()));
    v.push(nary("conv_grad_weight", grad_op(false), conv_grad_ins()));
    for (kind, pad) in [
        (ReduceOp::Max, 1),
        (ReduceOp::Max, 0),
        (ReduceOp::Mean, 1),
        (ReduceOp::Sum, 0),
    ] {
        v.push(unary(
            format!("pool_{}_pad{pad}", kind.name()),
            pool(kind, 2, 2, pad),
            f("x", &[1, 2, 5, 5]),
        ));
    }
    for kind in [ReduceOp::Max, ReduceOp::Mean] {
        let Op::Pool {
            kernel_size,
            stride,
            padding,
            ..
        } = pool(kind, 2, 2, 0)
        else {
            unreachable!()
        };
        v.push(nary(
            format!("pool_grad_{}", kind.name()),
            Op::PoolGrad {
                kind,
                kernel_size,
                stride,
                padding,
            },
            vec![f("x", &[1, 2, 4, 4]), f("g", &[1, 2, 2, 2])],
        ));
    }
}
