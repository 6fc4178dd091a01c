//! Batching rules of the element-wise ops: the batch axis broadcasts like any other.

use super::{BVal, Batcher};
use crate::build::Build;
use rlx_ir::{IrResult, Node, Op};

pub(super) fn rule(bt: &mut Batcher, node: &Node, ins: &[BVal]) -> IrResult<BVal> {
    match &node.op {
        Op::Activation(_) | Op::Cast { .. } | Op::StopGradient | Op::RoundToFormat { .. } => {
            Ok(BVal::batched(bt.e.op(node.op.clone(), vec![ins[0].id])?))
        }
        Op::Binary(_) | Op::Compare(_) | Op::Where => {
            // Right-aligned broadcasting lines the batch axis up once every batched
            // operand has the result's per-example rank (unit axes after the batch).
            let rank = node.shape.rank();
            let mut args = Vec::with_capacity(ins.len());
            for &v in ins {
                args.push(bt.align(v, rank)?);
            }
            Ok(BVal::batched(bt.e.op(node.op.clone(), args)?))
        }
        other => unreachable!("vmap elementwise::rule got {}", other.name()),
    }
}
