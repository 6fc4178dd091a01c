//! The op cases of the dtype matrix: one per op (and per activation, binary op,
//! comparison, reduction and cast target), each with operands whose dtype is the one
//! under test (`In::D`) or fixed (indices, masks, codes).

use super::rng::Rng;
use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, FftAlgo, FftNorm, Graph, IrResult, MaskKind, Op, ReduceOp,
    RopeStyle, ScaleLayout, ScaledFormat, Shape, SynthKind, TensorData,
};

/// Data generator for one operand: `(dtype under test, rng) → data`.
pub type Gen = Box<dyn Fn(DType, &mut Rng) -> TensorData>;

/// One operand of a case.
pub enum In {
    /// An input of the dtype under test, random data.
    D(Vec<usize>),
    /// A param of the dtype under test, random data.
    P(Vec<usize>),
    /// A constant node (baked into the graph) of the dtype under test.
    C(Vec<usize>),
    /// An input of a fixed dtype, random data.
    T(Vec<usize>, DType),
    /// An input with generated data (its dtype is the data's).
    G(Gen),
}

/// One row of the matrix.
pub struct Case {
    pub label: String,
    /// The op for a dtype (`Err` when the op itself cannot be formed, e.g. a scan body).
    pub op: Box<dyn Fn(DType) -> IrResult<Op>>,
    pub ins: Vec<In>,
    /// Multiplier of the per-dtype tolerance (long sums, solves).
    pub tol: f64,
}

fn case(label: impl Into<String>, op: Op, ins: Vec<In>) -> Case {
    Case {
        label: label.into(),
        op: Box::new(move |_| Ok(op.clone())),
        ins,
        tol: 1.0,
    }
}

fn d(dims: &[usize]) -> In {
    In::D(dims.to_vec())
}

fn t(dims: &[usize], dt: DType) -> In {
    In::T(dims.to_vec(), dt)
}

fn g(f: impl Fn(DType, &mut Rng) -> TensorData + 'static) -> In {
    In::G(Box::new(f))
}

/// Random data for `dims` in `dt`: floats in [-2, 2], integers in [-20, 20] ([0, 40]
/// unsigned), bools, complex pairs.
pub fn random(rng: &mut Rng, dims: &[usize], dt: DType) -> TensorData {
    let n: usize = dims.iter().product();
    if dt == DType::Bool {
        let v: Vec<bool> = (0..n).map(|_| rng.below(2) == 1).collect();
        TensorData::from_bool(dims, &v)
    } else if dt.is_int() {
        let lo = if dt.is_unsigned() { 0 } else { -20 };
        let v: Vec<i64> = (0..n).map(|_| lo + rng.below(41) as i64).collect();
        TensorData::from_i64_as(dt, dims, &v)
    } else {
        let per = if dt.is_complex() { 2 } else { 1 };
        let v: Vec<f64> = (0..n * per).map(|_| rng.uniform() * 4.0 - 2.0).collect();
        TensorData::from_f64_as(dt, dims, &v)
    }
}

/// Integers in `lo..=hi` encoded in `dt` (for divisors, shift amounts, exponents, labels).
fn ints_in(dims: &[usize], lo: i64, hi: i64) -> Gen {
    let dims = dims.to_vec();
    Box::new(move |dt, rng| {
        let n: usize = dims.iter().product();
        let v: Vec<i64> = (0..n)
            .map(|_| lo + rng.below((hi - lo + 1) as usize) as i64)
            .collect();
        TensorData::from_i64_as(dt, &dims, &v)
    })
}

/// Non-zero values in `dt` (divisors): ±(1..=7) for numbers, `true` for bool.
fn nonzero(dims: &[usize]) -> Gen {
    let dims = dims.to_vec();
    Box::new(move |dt, rng| {
        let n: usize = dims.iter().product();
        let v: Vec<i64> = (0..n)
            .map(|_| {
                let m = 1 + rng.below(7) as i64;
                if dt.is_unsigned() || rng.below(2) == 0 {
                    m
                } else {
                    -m
                }
            })
            .collect();
        TensorData::from_i64_as(dt, &dims, &v)
    })
}

/// A diagonally dominant `n × n` matrix (well conditioned in every float dtype;
/// complex dtypes get a random imaginary part too).
fn dominant(n: usize) -> Gen {
    Box::new(move |dt, rng| {
        let per = if dt.is_complex() { 2 } else { 1 };
        let v: Vec<f64> = (0..n * n * per)
            .map(|i| {
                let off = rng.uniform() - 0.5;
                let e = i / per;
                if i % per == 0 && e / n == e % n {
                    4.0 + off
                } else {
                    off
                }
            })
            .collect();
        TensorData::from_f64_as(dt, &[n, n], &v)
    })
}

fn fixed(data: TensorData) -> Gen {
    Box::new(move |_, _| data.clone())
}

const MX: ScaleLayout = ScaleLayout::BlockMxE8M0 { block: 32 };

fn attention(mask_kind: MaskKind) -> Op {
    Op::Attention {
        num_heads: 2,
        head_dim: 4,
        v_head_dim: None,
        mask_kind,
        score_scale: None,
        attn_logit_softcap: None,
    }
}

fn conv_geom() -> (Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>) {
    (vec![3, 3], vec![1, 1], vec![1, 1], vec![1, 1])
}

/// `carry + bcast_0 · x_0` over `[3]` values of `dt` (an error naming the body's op
/// for dtypes it cannot multiply).
fn scan_body(dt: DType) -> IrResult<Graph> {
    let mut b = Graph::new("acc");
    let s = Shape::new(&[3], dt);
    let carry = b.input("carry", s.clone());
    let w = b.input("bcast_0", s.clone());
    let x = b.input("x_0", s);
    let wx = b.add_op(Op::Binary(BinaryOp::Mul), vec![w, x])?;
    let next = b.add_op(Op::Binary(BinaryOp::Add), vec![carry, wx])?;
    b.set_outputs(vec![next]);
    Ok(b)
}

/// Every binary op, by an exhaustive match (a new variant must be added here).
pub fn all_binary() -> Vec<BinaryOp> {
    let all = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
        BinaryOp::Mod,
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
        BinaryOp::Shl,
        BinaryOp::Shr,
        BinaryOp::Atan2,
    ];
    for b in all {
        match b {
            BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::Div
            | BinaryOp::Max
            | BinaryOp::Min
            | BinaryOp::Pow
            | BinaryOp::Mod
            | BinaryOp::BitAnd
            | BinaryOp::BitOr
            | BinaryOp::BitXor
            | BinaryOp::Shl
            | BinaryOp::Shr
            | BinaryOp::Atan2 => {}
        }
    }
    all.to_vec()
}

/// Every comparison (exhaustive match as in [`all_binary`]).
pub fn all_cmp() -> Vec<CmpOp> {
    let all = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];
    for c in all {
        match c {
            CmpOp::Eq | CmpOp::Ne | CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge => {}
        }
    }
    all.to_vec()
}

/// Every reduction kind (exhaustive match as in [`all_binary`]).
pub fn all_reduce() -> Vec<ReduceOp> {
    let all = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ];
    for r in all {
        match r {
            ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Max | ReduceOp::Min | ReduceOp::Prod => {}
        }
    }
    all.to_vec()
}

/// Element-wise cases: every activation, binary op, comparison and cast target.
fn elementwise() -> Vec<Case> {
    let mut v = Vec::new();
    for a in Activation::ALL {
        v.push(case(a.name(), Op::Activation(a), vec![d(&[4, 6])]));
    }
    for b in all_binary() {
        // Operands chosen so integer ops succeed (non-zero divisors, in-range shifts,
        // small exponents); the failing integer cases have rows of their own below.
        let rhs = match b {
            BinaryOp::Div | BinaryOp::Mod => g(nonzero(&[6])),
            BinaryOp::Shl | BinaryOp::Shr => g(ints_in(&[6], 0, 7)),
            BinaryOp::Pow => g(ints_in(&[6], 0, 4)),
            _ => d(&[6]),
        };
        v.push(case(b.name(), Op::Binary(b), vec![d(&[4, 6]), rhs]));
    }
    v.push(case(
        "div_by_zero",
        Op::Binary(BinaryOp::Div),
        vec![d(&[3]), g(ints_in(&[3], 0, 0))],
    ));
    v.push(case(
        "rem_by_zero",
        Op::Binary(BinaryOp::Mod),
        vec![d(&[3]), g(ints_in(&[3], 0, 0))],
    ));
    v.push(case(
        "shl_negative",
        Op::Binary(BinaryOp::Shl),
        vec![d(&[3]), g(ints_in(&[3], -2, -1))],
    ));
    v.push(case(
        "pow_random_exponents",
        Op::Binary(BinaryOp::Pow),
        vec![d(&[4, 6]), d(&[4, 6])],
    ));
    v.push(case(
        "add_f32_rhs",
        Op::Binary(BinaryOp::Add),
        vec![d(&[4, 6]), t(&[6], DType::F32)],
    ));
    v.push(case(
        "mul_i32_rhs",
        Op::Binary(BinaryOp::Mul),
        vec![d(&[4, 6]), t(&[6], DType::I32)],
    ));
    v.push(case(
        "add_param_const",
        Op::Binary(BinaryOp::Add),
        vec![In::P(vec![4, 6]), In::C(vec![6])],
    ));
    for c in all_cmp() {
        v.push(case(c.name(), Op::Compare(c), vec![d(&[4, 6]), d(&[4, 1])]));
    }
    v.push(case(
        "lt_vs_f64",
        Op::Compare(CmpOp::Lt),
        vec![d(&[4, 6]), t(&[6], DType::F64)],
    ));
    v.push(case(
        "where",
        Op::Where,
        vec![t(&[4, 1], DType::Bool), d(&[4, 6]), d(&[6])],
    ));
    v.push(case(
        "where_mask",
        Op::Where,
        vec![d(&[4, 6]), t(&[6], DType::F32), t(&[4, 6], DType::F32)],
    ));
    for to in DType::ALL {
        v.push(case(
            format!("cast_to_{to}"),
            Op::Cast { to },
            vec![d(&[4, 6])],
        ));
    }
    v.push(case("stop_gradient", Op::StopGradient, vec![d(&[4, 6])]));
    v.push(case(
        "round_to_format",
        Op::RoundToFormat {
            exp_bits: 4,
            man_bits: 3,
            max_normal: 448.0,
        },
        vec![d(&[4, 6])],
    ));
    v
}

/// Reductions, scans along an axis, arg-reductions.
fn reductions() -> Vec<Case> {
    let mut v = Vec::new();
    for r in all_reduce() {
        v.push(case(
            format!("reduce_{}", r.name()),
            Op::Reduce {
                op: r,
                axes: vec![1],
                keep_dim: false,
            },
            vec![d(&[3, 5, 4])],
        ));
    }
    v.push(case(
        "reduce_sum_all",
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![0, 1, 2],
            keep_dim: true,
        },
        vec![d(&[3, 5, 4])],
    ));
    v.push(case(
        "cumsum",
        Op::Cumsum {
            axis: -1,
            exclusive: true,
        },
        vec![d(&[3, 7])],
    ));
    v.push(case(
        "argmax",
        Op::ArgMax {
            axis: 1,
            keep_dim: false,
        },
        vec![d(&[3, 7])],
    ));
    v.push(case(
        "argmin",
        Op::ArgMin {
            axis: 0,
            keep_dim: true,
        },
        vec![d(&[3, 7])],
    ));
    v
}

/// Views, copies and index ops.
fn movement() -> Vec<Case> {
    vec![
        case(
            "reshape",
            Op::Reshape {
                new_shape: vec![6, -1],
            },
            vec![d(&[2, 3, 4])],
        ),
        case(
            "transpose",
            Op::Transpose {
                perm: vec![2, 0, 1],
            },
            vec![d(&[2, 3, 4])],
        ),
        case(
            "narrow",
            Op::Narrow {
                axis: 0,
                start: 1,
                len: 3,
            },
            vec![d(&[5, 2])],
        ),
        case(
            "concat",
            Op::Concat { axis: 0 },
            vec![d(&[2, 3]), d(&[4, 3])],
        ),
        case(
            "broadcast_to",
            Op::Expand {
                target_shape: vec![2, 3, 4],
            },
            vec![d(&[3, 1])],
        ),
        case(
            "broadcast_like",
            Op::BroadcastLike,
            vec![d(&[3, 1]), t(&[2, 3, 4], DType::Bool)],
        ),
        case(
            "pad",
            Op::Pad {
                axis: 1,
                before: 1,
                after: 2,
                value: 3.0,
            },
            vec![d(&[2, 3])],
        ),
        case(
            "gather",
            Op::Gather { axis: 0 },
            vec![
                d(&[10, 4]),
                g(ints_in(&[3, 5], 0, 9).then_dtype(DType::I64)),
            ],
        ),
        case(
            "gather_index_dtype",
            Op::Gather { axis: 1 },
            vec![t(&[3, 6], DType::F32), g(ints_in(&[4], 0, 5))],
        ),
        case(
            "scatter_add",
            Op::ScatterAdd { axis: 0 },
            vec![
                d(&[10, 4]),
                g(fixed(TensorData::from_i64(&[3], &[7, 0, 7]))),
                d(&[3, 4]),
            ],
        ),
    ]
}

/// Contractions and the fused/high-level nn ops.
fn linalg_nn() -> Vec<Case> {
    let (ks, st, pd, dl) = conv_geom();
    let mut v = vec![
        case("matmul", Op::MatMul, vec![d(&[2, 3, 5]), d(&[5, 4])]),
        case(
            "linear",
            Op::FusedMatMulBiasAct {
                activation: Some(Activation::Relu),
            },
            vec![d(&[6, 5]), d(&[5, 3]), d(&[3])],
        ),
        Case {
            tol: 8.0,
            ..case("solve", Op::DenseSolve, vec![g(dominant(4)), d(&[4, 2])])
        },
        case(
            "layer_norm",
            Op::LayerNorm {
                axis: -1,
                eps: 1e-5,
            },
            vec![d(&[3, 8]), d(&[8]), d(&[8])],
        ),
        case(
            "rms_norm",
            Op::RmsNorm {
                axis: -1,
                eps: 1e-6,
            },
            vec![d(&[3, 8]), d(&[8]), d(&[8])],
        ),
        case("softmax", Op::Softmax { axis: -1 }, vec![d(&[3, 7])]),
        case("log_softmax", Op::LogSoftmax { axis: 0 }, vec![d(&[3, 7])]),
        case(
            "attention",
            attention(MaskKind::Causal),
            vec![d(&[1, 5, 2, 4]), d(&[1, 6, 2, 4]), d(&[1, 6, 2, 4])],
        ),
        case(
            "attention_custom_mask",
            attention(MaskKind::Custom),
            vec![
                d(&[1, 5, 2, 4]),
                d(&[1, 6, 2, 4]),
                d(&[1, 6, 2, 4]),
                t(&[1, 6], DType::Bool),
            ],
        ),
        case(
            "attention_vjp_custom_mask",
            Op::AttentionVjp {
                num_heads: 2,
                head_dim: 4,
                v_head_dim: None,
                mask_kind: MaskKind::Custom,
                score_scale: None,
                attn_logit_softcap: None,
            },
            vec![
                d(&[1, 5, 2, 4]),
                d(&[1, 6, 2, 4]),
                d(&[1, 6, 2, 4]),
                t(&[1, 6], DType::Bool),
                d(&[1, 5, 2, 4]),
            ],
        ),
        case(
            "rope",
            Op::Rope {
                head_dim: 4,
                n_rot: 4,
                style: RopeStyle::NeoX,
            },
            vec![d(&[1, 3, 8]), d(&[3, 2]), d(&[3, 2])],
        ),
        case(
            "cross_entropy",
            Op::SoftmaxCrossEntropy,
            vec![d(&[4, 5]), d(&[4, 5])],
        ),
        case(
            "softmax_cross_entropy_with_logits",
            Op::SoftmaxCrossEntropyWithLogits,
            vec![d(&[4, 5]), g(ints_in(&[4], 0, 4).then_dtype(DType::I64))],
        ),
        case(
            "labels_dtype",
            Op::SoftmaxCrossEntropyWithLogits,
            vec![t(&[4, 5], DType::F32), g(ints_in(&[4], 0, 4))],
        ),
        case(
            "synth_matmul",
            Op::SynthMatMul {
                kind: SynthKind::Codebook {
                    entry_dim: 2,
                    num_entries: 4,
                },
            },
            vec![
                d(&[3, 4]),
                g(ints_in(&[5, 2], 0, 3).then_dtype(DType::U8)),
                d(&[4, 2]),
            ],
        ),
        case(
            "spline_activation",
            Op::SplineActivation {
                num_basis: 6,
                grid_min: -2.0,
                grid_max: 2.0,
            },
            vec![d(&[2, 3]), d(&[3, 6])],
        ),
        case(
            "conv2d",
            Op::Conv {
                kernel_size: ks.clone(),
                stride: st.clone(),
                padding: pd.clone(),
                dilation: dl.clone(),
                groups: 1,
            },
            vec![d(&[1, 2, 5, 5]), d(&[3, 2, 3, 3]), d(&[3])],
        ),
        case(
            "conv2d_grad_input",
            Op::ConvGradInput {
                kernel_size: ks.clone(),
                stride: st.clone(),
                padding: pd.clone(),
                dilation: dl.clone(),
                groups: 1,
            },
            vec![d(&[1, 2, 5, 5]), d(&[3, 2, 3, 3]), d(&[1, 3, 5, 5])],
        ),
        case(
            "conv2d_grad_weight",
            Op::ConvGradWeight {
                kernel_size: ks,
                stride: st,
                padding: pd,
                dilation: dl,
                groups: 1,
            },
            vec![d(&[1, 2, 5, 5]), d(&[3, 2, 3, 3]), d(&[1, 3, 5, 5])],
        ),
    ];
    for kind in [ReduceOp::Max, ReduceOp::Mean] {
        let (kernel_size, stride, padding) = (vec![2, 2], vec![2, 2], vec![0, 0]);
        v.push(case(
            format!("{}_pool2d", kind.name()),
            Op::Pool {
                kind,
                kernel_size: kernel_size.clone(),
                stride: stride.clone(),
                padding: padding.clone(),
            },
            vec![d(&[1, 2, 4, 4])],
        ));
        v.push(case(
            format!("{}_pool2d_grad", kind.name()),
            Op::PoolGrad {
                kind,
                kernel_size,
                stride,
                padding,
            },
            vec![d(&[1, 2, 4, 4]), d(&[1, 2, 2, 2])],
        ));
    }
    v
}

/// FFT, scan and the scaled (low-precision GEMM) ops.
fn others() -> Vec<Case> {
    let scales = |rows: usize| {
        fixed(TensorData::from_i64_as(
            DType::U8,
            &[rows, 2],
            &[127; 2].repeat(rows),
        ))
    };
    vec![
        case(
            "fft",
            Op::Fft {
                inverse: false,
                norm: FftNorm::Backward,
                algo: FftAlgo::Native,
            },
            vec![d(&[3, 8])],
        ),
        case(
            "ifft_ortho",
            Op::Fft {
                inverse: true,
                norm: FftNorm::Ortho,
                algo: FftAlgo::Dft,
            },
            vec![d(&[2, 6])],
        ),
        Case {
            label: "scan".into(),
            op: Box::new(|dt| {
                Ok(Op::Scan {
                    body: Box::new(scan_body(dt)?),
                    length: 4,
                    save_trajectory: true,
                    num_bcast: 1,
                    num_xs: 1,
                    num_checkpoints: 0,
                })
            }),
            ins: vec![d(&[3]), d(&[3]), d(&[4, 3])],
            tol: 1.0,
        },
        case(
            "scaled_quant_scale",
            Op::ScaledQuantScale {
                format: ScaledFormat::F8E4M3,
                scale_layout: MX,
            },
            vec![d(&[3, 64])],
        ),
        case(
            "scaled_quantize",
            Op::ScaledQuantize {
                format: ScaledFormat::F4E2M1,
                scale_layout: MX,
            },
            vec![d(&[3, 64]), g(scales(3))],
        ),
        case(
            "scaled_matmul_bias",
            Op::ScaledMatMul {
                lhs_format: ScaledFormat::F8E4M3,
                rhs_format: ScaledFormat::F8E5M2,
                scale_layout: MX,
                has_bias: true,
            },
            vec![
                t(&[3, 64], DType::U8),
                t(&[5, 64], DType::U8),
                g(scales(3)),
                g(scales(5)),
                d(&[5]),
            ],
        ),
    ]
}

/// A generator's data re-encoded in a fixed dtype.
trait ThenDtype {
    fn then_dtype(self, dt: DType) -> Gen;
}

impl ThenDtype for Gen {
    fn then_dtype(self, dt: DType) -> Gen {
        Box::new(move |_, rng| self(dt, rng))
    }
}

/// Every case of the matrix.
pub fn all() -> Vec<Case> {
    let mut v = elementwise();
    v.extend(reductions());
    v.extend(movement());
    v.extend(linalg_nn());
    v.extend(others());
    v
}
