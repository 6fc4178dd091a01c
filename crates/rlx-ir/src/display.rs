//! Printing helpers for graph listings.

use crate::Op;

/// The attributes of `op` as a short `key=value` list (empty for attribute-free ops).
pub fn op_attributes(op: &Op) -> String {
    match op {
        Op::Input { .. } | Op::Param { .. } => String::new(),
        Op::Constant { data } => {
            if data.len() <= 16 {
                format!("bytes={data:?}")
            } else {
                format!("{} bytes", data.len())
            }
        }
        Op::Activation(_)
        | Op::StopGradient
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Where
        | Op::MatMul
        | Op::DenseSolve
        | Op::SoftmaxCrossEntropy
        | Op::SoftmaxCrossEntropyWithLogits => String::new(),
        Op::Scan {
            body,
            length,
            save_trajectory,
            num_bcast,
            num_xs,
            num_checkpoints,
        } => format!(
            "length={length}, save_trajectory={save_trajectory}, num_bcast={num_bcast}, num_xs={num_xs}, num_checkpoints={num_checkpoints}, body=`{}` ({} nodes)",
            body.name,
            body.len()
        ),
        other => {
            // `Name { a: 1, b: 2 }` → `a: 1, b: 2`; `Name(x)` → `x`.
            let dbg = format!("{other:?}");
            match (dbg.find(['{', '(']), dbg.rfind(['}', ')'])) {
                (Some(s), Some(e)) if e > s => dbg[s + 1..e].trim().to_string(),
                _ => String::new(),
            }
        }
    }
}
