//! The straight-through derivative of the scaled (quantized) matmul, shared by both
//! modes: `scaled_matmul(lq, rq, ls, rs[, bias]) = deq(lq)·deq(rq)ᵀ + bias`, and when
//! `lq = scaled_quantize(x, ls)` the derivative reaches `x` as if the quantizer were
//! the identity (the scales are constants).

use crate::build::Build;
use rlx_ir::{DType, Graph, IrResult, NodeId, Op, ScaleLayout, ScaledFormat, TensorData};

/// The float operand whose straight-through derivative a scaled_matmul code operand
/// stands for: `x` when `codes` is `scaled_quantize(x, scales)`.
pub(crate) fn ste_source(g: &Graph, codes: NodeId) -> Option<NodeId> {
    let n = g.node(codes);
    match n.op {
        Op::ScaledQuantize { .. } => Some(n.inputs[0]),
        _ => None,
    }
}

/// `decode(codes)·scale` as f32 graph values: lookups into the 256 decoded code
/// values and, for block layouts, the 256 decoded scale codes, expanded over each block.
pub(crate) fn dequantize<B: Build>(
    e: &mut B,
    codes: NodeId,
    scales: NodeId,
    format: ScaledFormat,
    layout: ScaleLayout,
) -> IrResult<NodeId> {
    let table: Vec<f64> = (0..=255u8).map(|c| format.decode(c) as f64).collect();
    let table = e.constant(TensorData::from_f64_as(DType::F32, &[256], &table));
    let vals = e.op(Op::Gather { axis: 0 }, vec![table, codes])?;
    let scale = match layout.block() {
        None => e.cast(scales, DType::F32)?,
        Some(block) => {
            let decoded: Vec<f64> = (0..=255u8)
                .map(|c| match layout {
                    ScaleLayout::Nvfp4 { .. } => ScaledFormat::F8E4M3.decode(c) as f64,
                    _ if c == 255 => f64::NAN,
                    _ => (c as f64 - 127.0).exp2(),
                })
                .collect();
            let st = e.constant(TensorData::from_f64_as(DType::F32, &[256], &decoded));
            let per_block = e.op(Op::Gather { axis: 0 }, vec![st, scales])?;
            // [r, k/b] → [r, k/b, 1] → [r, k/b, b] → [r, k].
            let r = e.rank(per_block);
            let col = e.unsqueeze(per_block, r)?;
            let mut target: Vec<i64> = e
                .dims(per_block)
                .iter()
                .map(|d| d.as_static().map_or(-1, |n| n as i64))
                .collect();
            target.push(block as i64);
            let wide = e.op(
                Op::Expand {
                    target_shape: target,
                },
                vec![col],
            )?;
            let cd = e.dims(codes);
            e.reshape_to(wide, &cd)?
        }
    };
    e.mul(vals, scale)
}
