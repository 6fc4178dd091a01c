//! `decompose`: high-level ops → primitives, unless the backend implements the op
//! whole (it says so in [`crate::CompileOptions::keep_whole`]).
//!
//! - `linear` (`FusedMatMulBiasAct`) always becomes `matmul + bias (+ activation)`:
//!   fusion puts the bias and activation back into the contraction's epilogue.
//! - `softmax`/`log_softmax` become max-shifted reductions (always, when the axis is
//!   not the last one: kept row ops work on the last axis).
//! - `layer_norm`/`rms_norm` become mean/variance reductions and elementwise math.
//! - `cross_entropy` (dense targets) becomes `logsumexp − Σ t·l`.
//! - `attention_vjp` (the fused attention backward) becomes the batched matmuls,
//!   softmax and reductions of this module's `attention` lowering, unless the backend
//!   keeps it whole for f32; the narrows that unpack its result read the pieces directly.
//!   For f16/bf16 the lowering computes in the dtype itself, unless `keep_whole` holds
//!   [`ATTENTION_VJP_IN_F32`] (the CUDA/HIP backend): then in f32, each gradient rounded
//!   once. A backend that keeps `attention_vjp` whole for f32 and holds
//!   [`ATTENTION_VJP_WHOLE_IN_F32`] (the CPU) gets f16/bf16 `attention_vjp` as casts
//!   around the kept f32 op instead: no lowering, the packed result rounded once.
//! - `attention` (the forward op) is never lowered; for f16/bf16 it is rewritten
//!   through f32 when `keep_whole` holds [`ATTENTION_IN_F32`] (the CPU, whose fused
//!   attention kernel takes f32 only).
//!
//! Everything else stays as it is (the backend runs it as an opaque kernel).

pub(crate) mod attention;

use crate::jvp::emit::Emitter;
use crate::rebuild::Rebuild;
use rlx_ir::{
    Activation, BinaryOp, DType, Graph, IrResult, MaskKind, NodeId, Op, ReduceOp, TensorData,
    norm_axis,
};
use std::collections::HashMap;

/// A [`crate::CompileOptions::keep_whole`] entry (no op has this name) asking for f16 and
/// bf16 `attention_vjp` to be lowered through f32: operands cast up, the f32 backward,
/// gradients cast back (more accurate than the backward in the narrow dtype, at twice
/// the bytes for its `[B, H, Sq, Sk]` intermediates).
pub const ATTENTION_VJP_IN_F32: &str = "attention_vjp_in_f32";

/// A [`crate::CompileOptions::keep_whole`] entry (no op has this name) asking for f16 and
/// bf16 `attention` (the forward op) to run in f32: q, k, v and an additive bias of
/// f16/bf16 are cast to f32 (exact), the same `attention` computes in f32, and its result
/// is cast back to the dtype, rounded once. Against the oracle (f64 work, one rounding)
/// that differs by at most one ulp of the dtype, in the elements whose f32 result lands
/// next to a rounding boundary; only an element that is the small remainder of
/// cancelling `p·v` terms may be further off in its own ulps (f32's absolute error, a
/// few f32 ulps of the row's scale, can exceed the dtype's ulp at a tiny value). A custom
/// mask stays as it is (it only selects keys, read as `≥ 0.5` in any real dtype); f64
/// attention stays as it is (no lossless f32 form).
///
/// Gradients are unaffected: reverse mode (`autodiff::grad_graph`) and forward mode run
/// on the graph as traced, before `compile` decomposes it, so the backward of a bf16
/// attention is its `attention_vjp` in bf16 (see [`ATTENTION_VJP_IN_F32`] for that).
pub const ATTENTION_IN_F32: &str = "attention_in_f32";

/// A [`crate::CompileOptions::keep_whole`] entry (no op has this name) for a backend that
/// keeps `attention_vjp` whole in f32 only (the CPU's fused backward kernel takes f32
/// operands): f16 and bf16 `attention_vjp` becomes casts of q, k, v, the cotangent and
/// an additive bias of f16/bf16 to f32 (exact), the same `attention_vjp` in f32, and one
/// cast of its packed result (dq, dk, dv one after the other) back to the dtype, so each
/// gradient element is rounded once, as the oracle (f64 work) rounds it. A custom mask
/// keeps its dtype (it only selects keys); the narrows that unpack the result read the
/// cast packed vector, as they read the op's own.
///
/// It takes effect only where `attention_vjp` itself is in `keep_whole` (otherwise the
/// f32 op would be lowered anyway: [`ATTENTION_VJP_IN_F32`] asks for that lowering in
/// f32); without either entry f16/bf16 `attention_vjp` is lowered in the dtype itself,
/// rounding every intermediate matmul, softmax and reduction. A separate entry from
/// [`ATTENTION_VJP_IN_F32`] so that the backends lowering the op (CUDA, wgpu) are
/// unaffected, and a backend that stops keeping the op whole (the CPU's
/// `RLX_CPU_ATTENTION_VJP=decomposed`) gets the dtype's lowering as before.
pub const ATTENTION_VJP_WHOLE_IN_F32: &str = "attention_vjp_whole_in_f32";

/// Lower the ops of `g` that the backend does not keep whole.
pub fn decompose(g: &Graph, keep_whole: &[String]) -> IrResult<Graph> {
    let keeps = |op: &Op| keep_whole.iter().any(|k| *k == op.name());
    let widen_vjp = keep_whole.iter().any(|k| k == ATTENTION_VJP_IN_F32);
    let widen_attention = keep_whole.iter().any(|k| k == ATTENTION_IN_F32);
    let vjp_whole_in_f32 = keep_whole.iter().any(|k| k == ATTENTION_VJP_WHOLE_IN_F32);
    let mut rb = Rebuild::new(g);
    // Lowered `attention_vjp` results → their three `[B, n]` pieces.
    let mut pieces: HashMap<NodeId, [NodeId; 3]> = HashMap::new();
    for node in g.nodes() {
        let ins: Vec<NodeId> = node.inputs.iter().map(|&i| rb.map(i)).collect();
        let rank = node.shape.rank();
        let out = match &node.op {
            Op::FusedMatMulBiasAct { activation } => Some(linear(
                &mut rb.g,
                ins.clone(),
                *activation,
                node.shape.dtype(),
            )?),
            Op::Softmax { axis } | Op::LogSoftmax { axis } => {
                let ax = norm_axis(&node.op.name(), *axis as i64, rank)?;
                if keeps(&node.op) && ax + 1 == rank {
                    None
                } else {
                    let log = matches!(node.op, Op::LogSoftmax { .. });
                    Some(softmax(&mut rb.g, ins[0], ax, log)?)
                }
            }
            Op::LayerNorm { eps, .. } if !keeps(&node.op) => {
                Some(norm(&mut rb.g, &ins, rank - 1, *eps, false)?)
            }
            Op::RmsNorm { eps, .. } if !keeps(&node.op) => {
                Some(norm(&mut rb.g, &ins, rank - 1, *eps, true)?)
            }
            Op::SoftmaxCrossEntropy if !keeps(&node.op) => {
                Some(cross_entropy(&mut rb.g, ins[0], ins[1])?)
            }
            Op::AttentionVjp { .. }
                if vjp_whole_in_f32 && keeps(&node.op) && is_half(node.shape.dtype()) =>
            {
                Some(attention_in_f32(
                    &mut rb.g,
                    &node.op,
                    &ins,
                    node.shape.dtype(),
                )?)
            }
            Op::AttentionVjp { .. } if !(keeps(&node.op) && node.shape.dtype() == DType::F32) => {
                let mut em = Emitter::new(&mut rb.g, "decompose");
                let widen = widen_vjp && is_half(node.shape.dtype());
                let (packed, parts) = attention::lower_vjp_with(&mut em, &node.op, &ins, widen)?;
                pieces.insert(packed, parts);
                Some(packed)
            }
            Op::Attention { .. } if widen_attention && is_half(node.shape.dtype()) => Some(
                attention_in_f32(&mut rb.g, &node.op, &ins, node.shape.dtype())?,
            ),
            Op::Narrow {
                axis: 0,
                start,
                len,
            } if pieces.contains_key(&ins[0]) => piece_of(&rb.g, &pieces[&ins[0]], *start, *len),
            _ => None,
        };
        let id = match out {
            Some(id) => {
                if node.name.is_some() {
                    rb.g.node_mut(id).name = node.name.clone();
                }
                id
            }
            None => {
                let id =
                    rb.g.append_node(node.op.clone(), ins, node.shape.clone(), node.name.clone());
                if let Some(o) = node.origin {
                    rb.g.set_origin(id, o);
                }
                id
            }
        };
        rb.set(node.id, id);
    }
    Ok(rb.finish())
}

/// Whether `dt` is one of the 16-bit floats the attention rewrites widen.
fn is_half(dt: DType) -> bool {
    matches!(dt, DType::F16 | DType::BF16)
}

/// `attention` over f16/bf16 operands as `cast(attention(cast q, cast k, cast v[, extra]))`
/// in f32 ([`ATTENTION_IN_F32`]): a bias of f16/bf16 widens too, a custom mask does not.
/// The same for `attention_vjp` ([`ATTENTION_VJP_WHOLE_IN_F32`]), whose cotangent comes
/// last and widens (the mask or bias is operand 3 in both ops); the one cast back
/// rounds its packed result.
fn attention_in_f32(g: &mut Graph, op: &Op, ins: &[NodeId], out: DType) -> IrResult<NodeId> {
    let custom = matches!(
        op.attention_attrs().map(|a| a.mask_kind),
        Some(MaskKind::Custom)
    );
    let mut wide = Vec::with_capacity(ins.len());
    for (i, &x) in ins.iter().enumerate() {
        wide.push(if is_half(g.shape(x).dtype()) && !(custom && i == 3) {
            g.add_op(Op::Cast { to: DType::F32 }, vec![x])?
        } else {
            x
        });
    }
    let y = g.add_op(op.clone(), wide)?;
    g.add_op(Op::Cast { to: out }, vec![y])
}

/// The piece of a lowered `attention_vjp` that a narrow of `start..start + len` reads
/// whole, if any.
fn piece_of(g: &Graph, parts: &[NodeId; 3], start: usize, len: usize) -> Option<NodeId> {
    let mut at = 0;
    for &p in parts {
        let n = g.shape(p).dims()[0].as_static()?;
        if at == start && n == len {
            return Some(p);
        }
        at += n;
    }
    None
}

fn bin(g: &mut Graph, b: BinaryOp, x: NodeId, y: NodeId) -> IrResult<NodeId> {
    g.add_op(Op::Binary(b), vec![x, y])
}

fn act(g: &mut Graph, a: Activation, x: NodeId) -> IrResult<NodeId> {
    g.add_op(Op::Activation(a), vec![x])
}

fn reduce(g: &mut Graph, op: ReduceOp, x: NodeId, axis: usize, keep_dim: bool) -> IrResult<NodeId> {
    g.add_op(
        Op::Reduce {
            op,
            axes: vec![axis],
            keep_dim,
        },
        vec![x],
    )
}

/// A scalar constant of `like`'s dtype.
fn scalar_like(g: &mut Graph, like: NodeId, v: f64) -> NodeId {
    let d = TensorData::from_f64_as(g.shape(like).dtype(), &[], &[v]);
    {
        let s = d.shape();
        g.add_node(Op::Constant { data: d.bytes }, vec![], s)
    }
}

/// `act(x·w + bias)`; a vector `x` is viewed as one row.
fn linear(
    g: &mut Graph,
    ins: Vec<NodeId>,
    activation: Option<Activation>,
    out: DType,
) -> IrResult<NodeId> {
    // `linear` on integers narrower than i64 is computed in i64 and wrapped once on
    // store (the oracle's rule): run the pieces in i64 and cast back at the end, since
    // per-node wrapping would wrap the product before the bias and the activation.
    if out.is_int() && out != DType::I64 {
        let wide = ins
            .iter()
            .map(|&i| g.add_op(Op::Cast { to: DType::I64 }, vec![i]))
            .collect::<IrResult<Vec<_>>>()?;
        let y = linear(g, wide, activation, DType::I64)?;
        return g.add_op(Op::Cast { to: out }, vec![y]);
    }
    let (x, w, bias) = (ins[0], ins[1], ins[2]);
    let vector = g.shape(x).rank() == 1;
    let x2 = if vector {
        g.add_op(
            Op::Reshape {
                new_shape: vec![1, -1],
            },
            vec![x],
        )?
    } else {
        x
    };
    let mut y = g.add_op(Op::MatMul, vec![x2, w])?;
    if vector {
        y = g.add_op(
            Op::Reshape {
                new_shape: vec![-1],
            },
            vec![y],
        )?;
    }
    y = bin(g, BinaryOp::Add, y, bias)?;
    if let Some(a) = activation {
        y = act(g, a, y)?;
    }
    Ok(y)
}

/// `e/Σe` or `d − ln Σe` with `d = x − max x`, `e = exp d` along `axis`.
fn softmax(g: &mut Graph, x: NodeId, axis: usize, log: bool) -> IrResult<NodeId> {
    let m = reduce(g, ReduceOp::Max, x, axis, true)?;
    let d = bin(g, BinaryOp::Sub, x, m)?;
    let e = act(g, Activation::Exp, d)?;
    let s = reduce(g, ReduceOp::Sum, e, axis, true)?;
    if log {
        let l = act(g, Activation::Log, s)?;
        bin(g, BinaryOp::Sub, d, l)
    } else {
        bin(g, BinaryOp::Div, e, s)
    }
}

/// Layer norm `(x − μ)·rsqrt(σ² + eps)·γ + β` or RMS norm `x·rsqrt(mean x² + eps)·γ + β`.
fn norm(g: &mut Graph, ins: &[NodeId], axis: usize, eps: f32, rms: bool) -> IrResult<NodeId> {
    let (x, gamma, beta) = (ins[0], ins[1], ins[2]);
    let centered = if rms {
        x
    } else {
        let mean = reduce(g, ReduceOp::Mean, x, axis, true)?;
        bin(g, BinaryOp::Sub, x, mean)?
    };
    let sq = bin(g, BinaryOp::Mul, centered, centered)?;
    let var = reduce(g, ReduceOp::Mean, sq, axis, true)?;
    let e = scalar_like(g, x, eps as f64);
    let ve = bin(g, BinaryOp::Add, var, e)?;
    let r = act(g, Activation::Rsqrt, ve)?;
    let n = bin(g, BinaryOp::Mul, centered, r)?;
    let scaled = bin(g, BinaryOp::Mul, n, gamma)?;
    bin(g, BinaryOp::Add, scaled, beta)
}

/// `logsumexp(l) − Σ t·l` over the last axis.
fn cross_entropy(g: &mut Graph, l: NodeId, t: NodeId) -> IrResult<NodeId> {
    let ax = g.shape(l).rank() - 1;
    let mk = reduce(g, ReduceOp::Max, l, ax, true)?;
    let d = bin(g, BinaryOp::Sub, l, mk)?;
    let e = act(g, Activation::Exp, d)?;
    let s = reduce(g, ReduceOp::Sum, e, ax, false)?;
    let ls = act(g, Activation::Log, s)?;
    // The row maxima without the class axis: a view of `mk` when the dims are static
    // (a second max pass otherwise).
    let m = match g.shape(l).static_dims() {
        Some(d) => {
            let new_shape = d[..ax].iter().map(|&x| x as i64).collect();
            g.add_op(Op::Reshape { new_shape }, vec![mk])?
        }
        None => reduce(g, ReduceOp::Max, l, ax, false)?,
    };
    let lse = bin(g, BinaryOp::Add, ls, m)?;
    let tl = bin(g, BinaryOp::Mul, t, l)?;
    let dot = reduce(g, ReduceOp::Sum, tl, ax, false)?;
    bin(g, BinaryOp::Sub, lse, dot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{DType, MaskKind, Shape, interp};

    fn close(a: &[f64], b: &[f64], tol: f64) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
        }
    }

    fn check(op: Op, shapes: &[&[usize]], keep: &[&str]) {
        let mut g = Graph::new("d");
        let mut ins = vec![];
        let mut data = vec![];
        for (i, s) in shapes.iter().enumerate() {
            let name = format!("x{i}");
            ins.push(g.input(name.clone(), Shape::new(s, DType::F64)));
            let n: usize = s.iter().product();
            let v: Vec<f64> = (0..n)
                .map(|k| ((k * 7 + i * 3) % 11) as f64 / 5.0 - 1.0)
                .collect();
            data.push((name, TensorData::from_f64(s, &v)));
        }
        let y = g.add_op(op, ins).unwrap();
        g.set_outputs(vec![y]);
        let keep: Vec<String> = keep.iter().map(|s| s.to_string()).collect();
        let d = decompose(&g, &keep).unwrap();
        let named: Vec<(&str, TensorData)> =
            data.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        let want = interp::run(&g, &named).unwrap()[0].to_f64_vec();
        let got = interp::run(&d, &named).unwrap()[0].to_f64_vec();
        close(&got, &want, 1e-12);
    }

    #[test]
    fn decompositions_compute_what_the_oracle_op_computes() {
        check(Op::Softmax { axis: 0 }, &[&[3, 4]], &[]);
        check(Op::LogSoftmax { axis: -1 }, &[&[3, 4]], &[]);
        check(
            Op::LayerNorm {
                axis: -1,
                eps: 1e-5,
            },
            &[&[3, 4], &[4], &[4]],
            &[],
        );
        check(
            Op::RmsNorm {
                axis: -1,
                eps: 1e-5,
            },
            &[&[2, 5], &[5], &[5]],
            &[],
        );
        check(Op::SoftmaxCrossEntropy, &[&[3, 4], &[3, 4]], &[]);
        check(
            Op::FusedMatMulBiasAct {
                activation: Some(Activation::Tanh),
            },
            &[&[2, 3], &[3, 4], &[4]],
            &[],
        );
        check(
            Op::FusedMatMulBiasAct { activation: None },
            &[&[2, 2, 3], &[3, 4], &[4]],
            &[],
        );
    }

    #[test]
    fn attention_vjp_lowers_to_what_the_oracle_op_computes() {
        let vjp = |mask_kind, v_head_dim| Op::AttentionVjp {
            num_heads: 2,
            head_dim: 2,
            v_head_dim,
            mask_kind,
            score_scale: None,
            attn_logit_softcap: Some(1.5),
        };
        let (q, k) = (&[2, 3, 2, 2][..], &[2, 4, 1, 2][..]);
        check(vjp(MaskKind::Causal, None), &[q, k, k, q], &[]);
        check(
            vjp(MaskKind::Bias, Some(3)),
            &[&[1, 3, 4], &[1, 2, 4], &[1, 2, 6], &[2, 3, 2], &[1, 3, 6]],
            &[],
        );
        // Kept whole only for f32: this f64 graph is lowered even when kept.
        check(vjp(MaskKind::None, None), &[q, k, k, q], &["attention_vjp"]);
    }

    /// The worst error, in units of the f16 ulp at the oracle's value (at least at 1/64),
    /// of `attention_vjp` over f16 operands lowered with `keep` against the oracle op.
    fn f16_vjp_error(mask_kind: MaskKind, shapes: &[&[usize]], keep: &[&str]) -> (f64, bool) {
        let op = Op::AttentionVjp {
            num_heads: 2,
            head_dim: 8,
            v_head_dim: None,
            mask_kind,
            score_scale: None,
            attn_logit_softcap: None,
        };
        let mut g = Graph::new("d");
        let mut ins = vec![];
        let mut data = vec![];
        for (i, s) in shapes.iter().enumerate() {
            let name = format!("x{i}");
            ins.push(g.input(name.clone(), Shape::new(s, DType::F16)));
            let n: usize = s.iter().product();
            let v: Vec<f64> = (0..n)
                .map(|k| ((k * 37 + i * 11) % 23) as f64 / 6.0 - 1.9)
                .collect();
            data.push((name, TensorData::from_f64_as(DType::F16, s, &v)));
        }
        let y = g.add_op(op, ins).unwrap();
        g.set_outputs(vec![y]);
        let keep: Vec<String> = keep.iter().map(|s| s.to_string()).collect();
        let d = decompose(&g, &keep).unwrap();
        let widened = d
            .nodes()
            .iter()
            .any(|n| n.shape.dtype() == DType::F32 && matches!(n.op, Op::MatMul));
        let named: Vec<(&str, TensorData)> =
            data.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        let want = interp::run(&g, &named).unwrap()[0].to_f64_vec();
        let got = interp::run(&d, &named).unwrap()[0].to_f64_vec();
        let ulp = |w: f64| w.abs().max(1.0 / 64.0) * 2f64.powi(-10);
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs() / ulp(*b))
            .fold(0.0, f64::max);
        (worst, widened)
    }

    #[test]
    fn f16_attention_vjp_in_f32_rounds_each_gradient_once() {
        let (q, k) = (&[2, 5, 16][..], &[2, 5, 8][..]);
        for (mask, shapes) in [
            (MaskKind::Causal, vec![q, k, k, q]),
            (MaskKind::Bias, vec![q, k, k, &[2, 2, 5, 5][..], q]),
        ] {
            let (wide, w) = f16_vjp_error(mask, &shapes, &[ATTENTION_VJP_IN_F32]);
            let (narrow, n) = f16_vjp_error(mask, &shapes, &[]);
            assert!(w && !n, "{mask:?}: only the f32 entry widens the lowering");
            // Rounded once from f32 work: within one ulp of the f64 oracle; the f16
            // lowering rounds p, dp and ds on the way and lands further off.
            assert!(wide <= 1.0, "{mask:?}: {wide} ulp in f32");
            assert!(narrow > wide, "{mask:?}: f16 {narrow} ulp, f32 {wide} ulp");
        }
    }

    /// Operand `i`'s test values: a fixed pattern in [-1.9, 1.9] of `dt`.
    fn pattern(dt: DType, dims: &[usize], i: usize) -> TensorData {
        let n: usize = dims.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|k| ((k * 37 + i * 11) % 23) as f64 / 6.0 - 1.9)
            .collect();
        TensorData::from_f64_as(dt, dims, &v)
    }

    /// One ulp of bf16 (f16 otherwise) at `w`, taken at no less than 1/64 (values that
    /// cancel to near zero are held to the ulp at that floor).
    fn half_ulp(dt: DType, w: f64) -> f64 {
        let bits = if dt == DType::BF16 { 7 } else { 10 };
        w.abs().max(1.0 / 64.0) * 2f64.powi(-bits)
    }

    /// `attention` of `dt` over q, k, v (and a mask or bias of `extra`), decomposed with
    /// [`ATTENTION_IN_F32`]: the rewritten graph, and its worst error against the oracle op
    /// in ulps of `dt` (at the oracle's value).
    fn attention_in_f32_error(dt: DType, mask_kind: MaskKind, extra: DType) -> (Graph, f64) {
        let op = Op::Attention {
            num_heads: 4,
            head_dim: 6,
            v_head_dim: None,
            mask_kind,
            score_scale: None,
            attn_logit_softcap: Some(3.0),
        };
        let shapes: Vec<(&[usize], DType)> = vec![
            (&[2, 5, 4, 6], dt),
            (&[2, 7, 2, 6], dt),
            (&[2, 7, 2, 6], dt),
            (
                if mask_kind == MaskKind::Custom {
                    &[2, 7]
                } else {
                    &[4, 5, 7]
                },
                extra,
            ),
        ];
        let n_in = if mask_kind == MaskKind::Causal { 3 } else { 4 };
        let mut g = Graph::new("d");
        let mut ins = vec![];
        let mut data = vec![];
        for (i, &(s, t)) in shapes[..n_in].iter().enumerate() {
            let name = format!("x{i}");
            ins.push(g.input(name.clone(), Shape::new(s, t)));
            data.push((name, pattern(t, s, i)));
        }
        let y = g.add_op(op, ins).unwrap();
        g.set_outputs(vec![y]);
        let d = decompose(&g, &[ATTENTION_IN_F32.to_string()]).unwrap();
        let named: Vec<(&str, TensorData)> =
            data.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        let want = interp::run(&g, &named).unwrap()[0].clone();
        let got = interp::run(&d, &named).unwrap()[0].clone();
        assert_eq!(got.dtype, dt, "{d}");
        let worst = (got.to_f64_vec().iter())
            .zip(&want.to_f64_vec())
            .map(|(a, b)| (a - b).abs() / half_ulp(dt, *b))
            .fold(0.0, f64::max);
        (d, worst)
    }

    #[test]
    fn half_attention_in_f32_casts_q_k_v_and_a_bias_and_rounds_once() {
        for dt in [DType::BF16, DType::F16] {
            for (mask, extra) in [
                (MaskKind::Causal, dt),
                (MaskKind::Bias, dt),
                (MaskKind::Bias, DType::F32),
                (MaskKind::Custom, DType::BF16),
            ] {
                let (d, worst) = attention_in_f32_error(dt, mask, extra);
                assert!(worst <= 1.0, "{dt:?} {mask:?}: {worst} ulp\n{d}");
                let attn: Vec<_> = (d.nodes().iter())
                    .filter(|n| matches!(n.op, Op::Attention { .. }))
                    .collect();
                assert_eq!(attn.len(), 1, "{d}");
                assert_eq!(attn[0].shape.dtype(), DType::F32, "{d}");
                let ins: Vec<DType> = (attn[0].inputs.iter())
                    .map(|&i| d.shape(i).dtype())
                    .collect();
                // A custom mask only selects keys: it keeps its dtype.
                let mut want = vec![DType::F32; 3];
                match mask {
                    MaskKind::Custom => want.push(extra),
                    MaskKind::Bias => want.push(DType::F32),
                    _ => {}
                }
                assert_eq!(ins, want, "{dt:?} {mask:?}\n{d}");
                let casts = (d.nodes().iter())
                    .filter(|n| matches!(n.op, Op::Cast { .. }))
                    .count();
                let widened = 3 + usize::from(mask == MaskKind::Bias && extra == dt);
                assert_eq!(casts, widened + 1, "{dt:?} {mask:?}\n{d}");
            }
        }
        // f64 has no lossless f32 form; without the entry nothing changes.
        let (d, worst) = attention_in_f32_error(DType::F64, MaskKind::Causal, DType::F64);
        assert!(worst == 0.0 && d.nodes().iter().all(|n| !matches!(n.op, Op::Cast { .. })));
        let mut g = Graph::new("d");
        let x = g.input("x", Shape::new(&[1, 3, 2, 4], DType::BF16));
        let op = Op::Attention {
            num_heads: 2,
            head_dim: 4,
            v_head_dim: None,
            mask_kind: MaskKind::Causal,
            score_scale: None,
            attn_logit_softcap: None,
        };
        let y = g.add_op(op, vec![x, x, x]).unwrap();
        g.set_outputs(vec![y]);
        let kept = decompose(&g, &["attention".to_string()]).unwrap();
        assert!(
            kept.nodes()
                .iter()
                .all(|n| !matches!(n.op, Op::Cast { .. }))
        );
    }

    /// bf16/f16 `attention_vjp` under [`ATTENTION_VJP_WHOLE_IN_F32`] becomes one f32 op
    /// between casts, and the narrow that unpacks dk still reads it (within one ulp of
    /// the oracle op); without `attention_vjp` kept whole the entry changes nothing.
    #[test]
    fn half_attention_vjp_kept_whole_runs_in_f32_and_its_narrows_still_unpack_it() {
        let whole = ["attention_vjp", ATTENTION_VJP_WHOLE_IN_F32].map(String::from);
        for dt in [DType::BF16, DType::F16] {
            for mask in [MaskKind::Causal, MaskKind::Bias, MaskKind::Custom] {
                let mut g = Graph::new("d");
                let mut dims: Vec<(&str, Vec<usize>)> = vec![
                    ("q", vec![2, 5, 4, 6]),
                    ("k", vec![2, 7, 2, 6]),
                    ("v", vec![2, 7, 2, 6]),
                ];
                match mask {
                    MaskKind::Custom => dims.push(("m", vec![2, 7])),
                    MaskKind::Bias => dims.push(("m", vec![4, 5, 7])),
                    _ => {}
                }
                dims.push(("g", vec![2, 5, 4, 6]));
                let mut ins = vec![];
                let mut data = vec![];
                for (i, (name, s)) in dims.iter().enumerate() {
                    ins.push(g.input(*name, Shape::new(s, dt)));
                    data.push((*name, pattern(dt, s, i)));
                }
                let op = Op::AttentionVjp {
                    num_heads: 4,
                    head_dim: 6,
                    v_head_dim: None,
                    mask_kind: mask,
                    score_scale: None,
                    attn_logit_softcap: Some(3.0),
                };
                let packed = g.add_op(op, ins).unwrap();
                let narrow = Op::Narrow {
                    axis: 0,
                    start: 240,
                    len: 168,
                };
                let dk = g.add_op(narrow, vec![packed]).unwrap();
                g.set_outputs(vec![packed, dk]);
                let d = decompose(&g, &whole).unwrap();
                let vjp: Vec<_> = (d.nodes().iter())
                    .filter(|n| matches!(n.op, Op::AttentionVjp { .. }))
                    .collect();
                assert_eq!(vjp.len(), 1, "{d}");
                assert_eq!(vjp[0].shape.dtype(), DType::F32, "{d}");
                let got: Vec<DType> = (vjp[0].inputs.iter())
                    .map(|&i| d.shape(i).dtype())
                    .collect();
                let mut want = vec![DType::F32; dims.len()];
                if mask == MaskKind::Custom {
                    want[3] = dt;
                }
                assert_eq!(got, want, "{dt:?} {mask:?}\n{d}");
                let oracle = interp::run(&g, &data).unwrap();
                let ours = interp::run(&d, &data).unwrap();
                for (a, b) in ours.iter().zip(&oracle) {
                    assert_eq!((a.dtype, &a.dims), (b.dtype, &b.dims), "{d}");
                    for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
                        let ulp = half_ulp(dt, y);
                        assert!((x - y).abs() <= ulp, "{dt:?} {mask:?}: {x} vs {y}");
                    }
                }
                // Not kept whole: the entry changes nothing (the op is lowered in `dt`).
                let lowered = decompose(&g, &[]).unwrap();
                let also = decompose(&g, &[ATTENTION_VJP_WHOLE_IN_F32.to_string()]).unwrap();
                assert_eq!(lowered.to_string(), also.to_string());
                assert!(!(lowered.nodes().iter()).any(|n| n.shape.dtype() == DType::F32));
            }
        }
    }

    #[test]
    fn narrows_of_a_lowered_attention_vjp_read_its_pieces() {
        let mut g = Graph::new("d");
        let s = |d: &[usize]| Shape::new(d, DType::F32);
        let ins: Vec<NodeId> = ["q", "k", "v", "g"]
            .iter()
            .map(|n| g.input(*n, s(&[2, 3, 8])))
            .collect();
        let op = Op::AttentionVjp {
            num_heads: 2,
            head_dim: 4,
            v_head_dim: None,
            mask_kind: MaskKind::Causal,
            score_scale: None,
            attn_logit_softcap: None,
        };
        let packed = g.add_op(op, ins).unwrap();
        let dk = g
            .add_op(
                Op::Narrow {
                    axis: 0,
                    start: 48,
                    len: 48,
                },
                vec![packed],
            )
            .unwrap();
        g.set_outputs(vec![dk]);
        let d = crate::simplify::simplify(&decompose(&g, &[]).unwrap());
        assert!(
            d.nodes()
                .iter()
                .all(|n| !matches!(n.op, Op::Concat { .. } | Op::Narrow { .. })),
            "the narrow reads the dk piece, so the concatenation is dead: {d}"
        );
        let kept = decompose(&g, &["attention_vjp".to_string()]).unwrap();
        assert!(
            kept.nodes()
                .iter()
                .any(|n| matches!(n.op, Op::AttentionVjp { .. })),
            "{kept}"
        );
    }

    #[test]
    fn kept_ops_stay_whole_on_the_last_axis_only() {
        let mut g = Graph::new("d");
        let x = g.input("x", Shape::new(&[2, 3], DType::F32));
        let a = g.add_op(Op::Softmax { axis: -1 }, vec![x]).unwrap();
        let b = g.add_op(Op::Softmax { axis: 0 }, vec![a]).unwrap();
        g.set_outputs(vec![b]);
        let d = decompose(&g, &["softmax".to_string()]).unwrap();
        let kept = d
            .nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::Softmax { .. }))
            .count();
        assert_eq!(kept, 1, "{d}");
    }
}
