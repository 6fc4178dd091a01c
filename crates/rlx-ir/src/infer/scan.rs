//! Structured ops: `scan` (a loop over a body graph) and `fft`.

use super::{arity, err};
use crate::IrError;
use crate::{Dim, Graph, IrResult, Op, Shape};

pub(super) fn infer(name: &str, op: &Op, inputs: &[&Shape]) -> IrResult<Shape> {
    match op {
        Op::Scan {
            body,
            length,
            save_trajectory,
            num_bcast,
            num_xs,
            ..
        } => {
            let (nb, nx) = (*num_bcast as usize, *num_xs as usize);
            arity(
                name,
                inputs,
                1 + nb + nx,
                &format!("init, {nb} bcast(s), {nx} xs"),
            )?;
            let init = inputs[0];
            let bcasts = &inputs[1..1 + nb];
            let xs = &inputs[1 + nb..];
            for (i, x) in xs.iter().enumerate() {
                if x.rank() == 0 || x.dim(0) != Dim::Static(*length as usize) {
                    return Err(err(
                        name,
                        format!(
                            "xs {i} is {x}; its leading axis must be the scan length {length} (one slice per step)"
                        ),
                    ));
                }
            }
            check_body(name, body, init, bcasts, xs)?;
            if *save_trajectory {
                let mut dims = vec![Dim::Static(*length as usize)];
                dims.extend_from_slice(init.dims());
                Ok(init.with_dims(dims))
            } else {
                Ok(init.clone())
            }
        }
        Op::Fft { .. } => {
            arity(name, inputs, 1, "x")?;
            let x = inputs[0];
            if x.rank() == 0 {
                return Err(err(
                    name,
                    format!("needs at least one axis (the transformed one), got the scalar {x}"),
                ));
            }
            if x.dtype().is_float() {
                if let Some(n) = x.dim(x.rank() - 1).as_static().filter(|n| n % 2 != 0) {
                    return Err(err(
                        name,
                        format!(
                            "real input {x} uses the block layout [.., 2N] (N real parts then N imaginary parts), so its last dim must be even, got {n}; append zero imaginary parts"
                        ),
                    ));
                }
            } else if !x.dtype().is_complex() {
                return Err(IrError::dtype(
                    name,
                    format!(
                        "needs a float (block layout) or complex input, got {x}; cast it with .cast(DType::F32)"
                    ),
                ));
            }
            Ok(x.clone())
        }
        _ => unreachable!("scan::infer called with {}", op.name()),
    }
}

/// The body reads inputs named `carry`, `bcast_i` and `x_i` (one slice of xs `i`)
/// and returns exactly one output, the next carry, with the carry's type.
fn check_body(
    name: &str,
    body: &Graph,
    init: &Shape,
    bcasts: &[&Shape],
    xs: &[&Shape],
) -> IrResult<()> {
    let b = &body.name;
    if body.outputs.len() != 1 {
        return Err(err(
            name,
            format!(
                "the body `{b}` must have exactly one output (the next carry {init}), it has {}",
                body.outputs.len()
            ),
        ));
    }
    let Some(out) = body.get(body.outputs[0]) else {
        return Err(err(
            name,
            format!(
                "the body `{b}`'s output {} is not one of its {} nodes",
                body.outputs[0],
                body.len()
            ),
        ));
    };
    if out.shape != *init {
        return Err(err(
            name,
            format!(
                "the body `{b}` returns {} but the carry is {init}; they must match (cast or reshape inside the body)",
                out.shape
            ),
        ));
    }
    for node in body.nodes() {
        match &node.op {
            Op::Param { name: p } => {
                return Err(err(
                    name,
                    format!(
                        "the body `{b}` declares the param `{p}`; a scan body cannot own params, pass the value in as a bcast input instead"
                    ),
                ));
            }
            Op::Input { name: n } => {
                let expected = expected_body_input(n, init, bcasts, xs).ok_or_else(|| {
                    err(
                        name,
                        format!(
                            "the body `{b}` has the input `{n}`, but a scan body may only read `carry`, `bcast_i` and `x_i` (this scan has {} bcast(s) and {} xs, so i < {} and i < {}); rename the input or raise num_bcast/num_xs",
                            bcasts.len(),
                            xs.len(),
                            bcasts.len(),
                            xs.len()
                        ),
                    )
                })?;
                if node.shape != expected {
                    return Err(err(
                        name,
                        format!(
                            "the body `{b}` declares `{n}` as {} but the scan feeds it {expected}",
                            node.shape
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The type the scan binds to the body input called `n`, if that name is one it binds.
fn expected_body_input(n: &str, init: &Shape, bcasts: &[&Shape], xs: &[&Shape]) -> Option<Shape> {
    if n == "carry" {
        return Some(init.clone());
    }
    let index = |prefix: &str| -> Option<usize> {
        let rest = n.strip_prefix(prefix)?;
        // Only canonical decimal indices are bound (`bcast_01` and `bcast_+1` are not `bcast_1`).
        let canonical = !rest.is_empty()
            && rest.bytes().all(|c| c.is_ascii_digit())
            && (rest == "0" || !rest.starts_with('0'));
        canonical.then(|| rest.parse().ok()).flatten()
    };
    if let Some(i) = index("bcast_") {
        return bcasts.get(i).map(|s| (*s).clone());
    }
    if let Some(i) = index("x_") {
        return xs.get(i).map(|s| s.with_dims(s.dims()[1..].to_vec()));
    }
    None
}
