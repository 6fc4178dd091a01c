//! Batching rules of the contractions.

use super::{BVal, Batcher, unroll, via_decomposition};
use crate::build::Build;
use rlx_ir::{Activation, CmpOp, DType, Dim, IrResult, Node, Op, ReduceOp, ScaleLayout, Shape};

pub(super) fn rule(
    bt: &mut Batcher,
    node: &Node,
    ins: &[BVal],
    shapes: &[Shape],
) -> IrResult<BVal> {
    match &node.op {
        Op::MatMul => {
            // The batch axis is one more matmul batch axis.
            let rank = node.shape.rank();
            let a = bt.align(ins[0], rank)?;
            let b = bt.align(ins[1], rank)?;
            Ok(BVal::batched(bt.e.matmul(a, b)?))
        }
        Op::FusedMatMulBiasAct { activation } => {
            if !ins[1].batched && !ins[2].batched {
                // x: [B, .., K] is just more leading axes.
                let ids = ins.iter().map(|v| v.id).collect();
                return Ok(BVal::batched(bt.e.op(node.op.clone(), ids)?));
            }
            // Batched weights: act(x·w + bias) from primitives, each batched by its rule.
            let act = *activation;
            via_decomposition(bt, ins, shapes, |e, a| {
                let (x, w, bias) = (a[0], a[1], a[2]);
                let vector = e.rank(x) == 1;
                let x2 = if vector { e.unsqueeze(x, 0)? } else { x };
                let mut y = e.matmul(x2, w)?;
                if vector {
                    y = e.squeeze(y, 0)?;
                }
                let y = e.add(y, bias)?;
                match act {
                    Some(act) => e.act(act, y),
                    None => Ok(y),
                }
            })
        }
        Op::DenseSolve => {
            // Batch axes of a and b must match exactly: give both the batch.
            let a = bt.batch(ins[0])?;
            let b = bt.batch(ins[1])?;
            Ok(BVal::batched(bt.e.op(Op::DenseSolve, vec![a, b])?))
        }
        Op::SynthMatMul { .. } if !ins[1].batched && !ins[2].batched => Ok(BVal::batched(
            bt.e.op(node.op.clone(), vec![ins[0].id, ins[1].id, ins[2].id])?,
        )),
        Op::ScaledQuantScale { scale_layout, .. } | Op::ScaledQuantize { scale_layout, .. }
            if *scale_layout != ScaleLayout::PerTensor =>
        {
            // Block scales are per row of the K axis: more leading axes are more rows.
            let mut args = Vec::with_capacity(ins.len());
            for &v in ins {
                args.push(bt.batch(v)?);
            }
            Ok(BVal::batched(bt.e.op(node.op.clone(), args)?))
        }
        Op::ScaledQuantScale { format, .. } => {
            // Per-tensor: s = absmax(finite x)/max_finite in f64, stored as f32, and 1
            // where that is 0 — a reduction over each example's axes.
            let max = format.max_finite() as f64;
            via_decomposition(bt, ins, shapes, |e, a| {
                let x = e.cast(a[0], DType::F64)?;
                let ax = e.act(Activation::Abs, x)?;
                let finite = e.cmp_scalar(CmpOp::Lt, ax, f64::INFINITY)?;
                let ax = e.keep_where(finite, ax)?;
                let r = e.rank(ax);
                let m = e.reduce(ReduceOp::Max, ax, (0..r).collect(), false)?;
                let s = e.scale(m, 1.0 / max)?;
                let s = e.cast(s, DType::F32)?;
                let zero = e.cmp_scalar(CmpOp::Eq, s, 0.0)?;
                let one = e.scalar(1.0, DType::F32);
                let s = e.select(zero, one, s)?;
                e.reshape_to(s, &[Dim::Static(1)])
            })
        }
        // Per-tensor quantization, 2-D-only scaled matmul, batched codebooks: per example.
        Op::SynthMatMul { .. } | Op::ScaledQuantize { .. } | Op::ScaledMatMul { .. } => {
            unroll(bt, &node.op, ins)
        }
        other => unreachable!("vmap linalg::rule got {}", other.name()),
    }
}
