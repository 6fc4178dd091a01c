//! VJPs of [`Op::Attention`] and of its fused backward [`Op::AttentionVjp`].
//!
//! Attention's VJP is one `AttentionVjp` node (q, k, v, the mask or bias, and the
//! output cotangent in; dq, dk, dv packed one after the other out), unpacked by views. A
//! backend with a fused kernel keeps it whole; `decompose` lowers it to primitives for
//! the others. Two cases build the primitive form here directly
//! ([`crate::decompose::attention::grads`], on the forward pass forward mode
//! differentiates): an additive bias that wants its gradient
//! (the fused op returns none), and q/k/v with a dynamic axis (the packed length must
//! be a number).
//!
//! `AttentionVjp`'s own VJP (second derivatives through attention) differentiates its
//! primitive form: the form is appended on identity proxies of the operands and a
//! nested [`super::append_vjp`] sweeps it.

use super::builder::ReverseBuilder;
use crate::build::Build;
use crate::decompose::attention::{Want, attrs_of, grads, lower_vjp, operands, packed_len, unpack};
use rlx_ir::{IrResult, MaskKind, Node, NodeId, Op};

pub(super) fn vjp(rb: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    if matches!(node.op, Op::AttentionVjp { .. }) {
        return vjp_of_vjp(rb, node, g);
    }
    let a = attrs_of(&node.op);
    let ops @ (q, k, v, extra) = operands(a, &node.inputs);
    let want = Want {
        q: rb.wants(node, 0),
        k: rb.wants(node, 1),
        v: rb.wants(node, 2),
        bias: a.mask_kind == MaskKind::Bias && rb.wants(node, 3),
    };
    if !(want.q || want.k || want.v || want.bias) {
        return Ok(());
    }
    let fused = !want.bias
        && [q, k, v].iter().all(|&x| packed_len(rb, x).is_some())
        && rb.shape(g) == node.shape;
    if fused {
        let mut ins = node.inputs.clone();
        ins.push(g);
        let packed = rb.op(a.vjp_op(), ins)?;
        let [dq, dk, dv] = unpack(rb, packed, q, k, v)?;
        for (w, x, gx) in [(want.q, q, dq), (want.k, k, dk), (want.v, v, dv)] {
            if w {
                rb.give(x, gx)?;
            }
        }
        return Ok(());
    }
    let gr = grads(rb, a, ops, g, want)?;
    for (x, gx) in [(q, gr.q), (k, gr.k), (v, gr.v)] {
        if let Some(gx) = gx {
            rb.give(x, gx)?;
        }
    }
    if let (Some(b), Some(gb)) = (extra, gr.bias) {
        rb.give(b, gb)?;
    }
    Ok(())
}

/// The VJP of `AttentionVjp` through its primitive form.
fn vjp_of_vjp(rb: &mut ReverseBuilder, node: &Node, g: NodeId) -> IrResult<()> {
    let want: Vec<bool> = (0..node.inputs.len()).map(|i| rb.wants(node, i)).collect();
    if !want.iter().any(|w| *w) {
        return Ok(());
    }
    // Identity proxies cut the nested sweep at the operands, so a path from one operand
    // to another is counted by the enclosing sweep only.
    let mut proxy = Vec::with_capacity(node.inputs.len());
    for &i in &node.inputs {
        let dt = rb.dtype(i);
        proxy.push(rb.op(Op::Cast { to: dt }, vec![i])?);
    }
    let (packed, _) = lower_vjp(rb, &node.op, &proxy)?;
    let wrt: Vec<NodeId> = proxy
        .iter()
        .zip(&want)
        .filter(|(_, w)| **w)
        .map(|(p, _)| *p)
        .collect();
    let got = super::append_vjp(rb.g, &[packed], &[g], &wrt)?;
    let targets = node.inputs.iter().zip(&want).filter(|(_, w)| **w);
    for ((&input, _), gi) in targets.zip(got) {
        if let Some(gi) = gi {
            rb.give(input, gi)?;
        }
    }
    Ok(())
}
