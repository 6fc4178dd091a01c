//! Batching rules of the contractions.

use super::{BVal, Batcher, unroll, via_decomposition};
use rlx_ir::{IrResult, Node, Op, ScaleLayout, Shape};

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
        // Per-tensor scales, 2-D-only scaled matmul, batched codebooks: per example.
        Op::SynthMatMul { .. }
        | Op::ScaledQuantScale { .. }
        | Op::ScaledQuantize { .. }
        | Op::ScaledMatMul { .. } => unroll(bt, &node.op, ins),
        other => unreachable!("vmap linalg::rule got {}", other.name()),
    }
}
