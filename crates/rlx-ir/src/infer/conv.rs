//! Windowed ops over `[N, C, spatial…]`: convolution and pooling, and their gradients.

use super::{arity, err, require_float, require_real, require_same_dtype};
use crate::op::ReduceOp;
use crate::{ConvAttrs, Dim, IrResult, Op, Shape};

pub(super) fn infer(name: &str, op: &Op, inputs: &[&Shape]) -> IrResult<Shape> {
    match op {
        Op::Conv { .. } => {
            if inputs.len() != 2 && inputs.len() != 3 {
                let got: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
                return Err(err(
                    name,
                    format!(
                        "takes [x, w] or [x, w, bias], got {} inputs: [{}]",
                        inputs.len(),
                        got.join("; ")
                    ),
                ));
            }
            let geo = op.conv_attrs().expect("a convolution op");
            let out = conv_shape(name, inputs[0], inputs[1], &geo)?;
            if let Some(b) = inputs.get(2) {
                if b.rank() != 1 || b.dim(0) != inputs[1].dim(0) {
                    return Err(err(
                        name,
                        format!(
                            "bias must be [C_out] = [{}] (axis 0 of the weight {}), got {b}",
                            inputs[1].dim(0),
                            inputs[1]
                        ),
                    ));
                }
                require_same_dtype(name, ("x", inputs[0]), ("bias", b))?;
            }
            Ok(out)
        }
        Op::ConvGradInput { .. } | Op::ConvGradWeight { .. } => {
            arity(name, inputs, 3, "x, w, grad_out")?;
            let geo = op.conv_attrs().expect("a convolution op");
            let out = conv_shape(name, inputs[0], inputs[1], &geo)?;
            let g = inputs[2];
            if out.dims() != g.dims() {
                return Err(err(
                    name,
                    format!(
                        "grad_out is {g} but the convolution of x {} with w {} produces {out}; they must match",
                        inputs[0], inputs[1]
                    ),
                ));
            }
            require_same_dtype(name, ("x", inputs[0]), ("grad_out", g))?;
            Ok(if matches!(op, Op::ConvGradInput { .. }) {
                inputs[0].clone()
            } else {
                inputs[1].clone()
            })
        }
        Op::Pool {
            kind,
            kernel_size,
            stride,
            padding,
        } => {
            arity(name, inputs, 1, "x")?;
            pool_shape(name, inputs[0], *kind, kernel_size, stride, padding)
        }
        Op::PoolGrad {
            kind,
            kernel_size,
            stride,
            padding,
        } => {
            arity(name, inputs, 2, "x, grad_out")?;
            let out = pool_shape(name, inputs[0], *kind, kernel_size, stride, padding)?;
            let g = inputs[1];
            if out.dims() != g.dims() {
                return Err(err(
                    name,
                    format!(
                        "grad_out is {g} but pooling x {} produces {out}; they must match",
                        inputs[0]
                    ),
                ));
            }
            require_same_dtype(name, ("x", inputs[0]), ("grad_out", g))?;
            Ok(inputs[0].clone())
        }
        _ => unreachable!("conv::infer called with {}", op.name()),
    }
}

/// `x: [N, C, s…]`, `w: [C_out, C/groups, k…]` → `[N, C_out, (s + 2p − d(k−1) − 1)/stride + 1 …]`.
fn conv_shape(name: &str, x: &Shape, w: &Shape, g: &ConvAttrs) -> IrResult<Shape> {
    let sr = g.kernel_size.len();
    if sr == 0 || g.stride.len() != sr || g.padding.len() != sr || g.dilation.len() != sr {
        return Err(err(
            name,
            format!(
                "kernel_size {:?}, stride {:?}, padding {:?}, dilation {:?} must all have one entry per spatial axis (x is {x})",
                g.kernel_size, g.stride, g.padding, g.dilation
            ),
        ));
    }
    if g.kernel_size.contains(&0)
        || g.stride.contains(&0)
        || g.dilation.contains(&0)
        || g.groups == 0
    {
        return Err(err(
            name,
            format!(
                "kernel_size {:?}, stride {:?}, dilation {:?} and groups ({}) must all be ≥ 1",
                g.kernel_size, g.stride, g.dilation, g.groups
            ),
        ));
    }
    require_float(name, "x", x)?;
    require_same_dtype(name, ("x", x), ("w", w))?;
    if x.rank() != sr + 2 || w.rank() != sr + 2 {
        return Err(err(
            name,
            format!(
                "for {sr} spatial axes x must be [N, C, spatial×{sr}] and w [C_out, C_in/groups, kernel×{sr}]; got x {x}, w {w}"
            ),
        ));
    }
    if (0..sr).any(|i| w.dim(2 + i) != Dim::Static(g.kernel_size[i])) {
        return Err(err(
            name,
            format!(
                "the weight {w} does not match kernel_size {:?}: its trailing axes must be the kernel",
                g.kernel_size
            ),
        ));
    }
    let (Some(c), Some(cout)) = (x.dim(1).as_static(), w.dim(0).as_static()) else {
        return Err(err(
            name,
            format!("the channel axes of x {x} and w {w} (axes 1 and 0) must be static"),
        ));
    };
    let groups = g.groups;
    if c % groups != 0 || cout % groups != 0 || w.dim(1) != Dim::Static(c / groups) {
        return Err(err(
            name,
            format!(
                "with groups = {groups}, x {x} has {c} channels and w {w} has {cout} output channels: both must be divisible by groups and w must be [C_out, C/groups = {}, ..]",
                c / groups
            ),
        ));
    }
    let mut dims = vec![x.dim(0), Dim::Static(cout)];
    for i in 0..sr {
        let (k, p, s, d) = (g.kernel_size[i], g.padding[i], g.stride[i], g.dilation[i]);
        let Some(n) = x.dim(2 + i).as_static() else {
            return Err(err(
                name,
                format!(
                    "spatial axis {i} of x {x} is dynamic ({}); spatial sizes must be static",
                    x.dim(2 + i)
                ),
            ));
        };
        // u128: none of these products or sums of usizes can overflow it.
        let (n, p, s, d, k) = (n as u128, p as u128, s as u128, d as u128, k as u128);
        let span = d * (k.max(1) - 1) + 1;
        if n + 2 * p < span {
            return Err(err(
                name,
                format!(
                    "spatial axis {i} of x {x} (size {n}, padding {p}) is smaller than the dilated kernel ({span} = {d}·({k}−1)+1); pad more or use a smaller kernel"
                ),
            ));
        }
        dims.push(Dim::Static(spatial_out(
            name,
            x,
            i,
            (n + 2 * p - span) / s.max(1) + 1,
        )?));
    }
    Ok(x.with_dims(dims))
}

fn pool_shape(
    name: &str,
    x: &Shape,
    kind: ReduceOp,
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
) -> IrResult<Shape> {
    if !matches!(kind, ReduceOp::Max | ReduceOp::Mean | ReduceOp::Sum) {
        return Err(err(
            name,
            format!("pool kind {kind:?} is not supported (x is {x}); use Max, Mean or Sum"),
        ));
    }
    let sr = kernel_size.len();
    if sr == 0 || stride.len() != sr || padding.len() != sr {
        return Err(err(
            name,
            format!(
                "kernel_size {kernel_size:?}, stride {stride:?}, padding {padding:?} must all have one entry per spatial axis (x is {x})"
            ),
        ));
    }
    if stride.contains(&0) || kernel_size.contains(&0) {
        return Err(err(
            name,
            format!("kernel_size {kernel_size:?} and stride {stride:?} must be ≥ 1"),
        ));
    }
    if x.rank() != sr + 2 {
        return Err(err(
            name,
            format!("for {sr} spatial axes x must be [N, C, spatial×{sr}], got {x}"),
        ));
    }
    require_real(name, "x", x)?;
    let mut dims = vec![x.dim(0), x.dim(1)];
    for i in 0..sr {
        let (k, p, s) = (kernel_size[i], padding[i], stride[i]);
        let (k, p, s) = (k as u128, p as u128, s as u128);
        if p * 2 > k {
            return Err(err(
                name,
                format!(
                    "padding {p} on spatial axis {i} exceeds half the kernel ({k}) for x {x}; every window must touch the input, so use padding ≤ {}",
                    k / 2
                ),
            ));
        }
        let Some(n) = x.dim(2 + i).as_static() else {
            return Err(err(
                name,
                format!(
                    "spatial axis {i} of x {x} is dynamic ({}); spatial sizes must be static",
                    x.dim(2 + i)
                ),
            ));
        };
        let n = n as u128;
        if n + 2 * p < k {
            return Err(err(
                name,
                format!(
                    "spatial axis {i} of x {x} (size {n}, padding {p}) is smaller than the window {k}"
                ),
            ));
        }
        dims.push(Dim::Static(spatial_out(
            name,
            x,
            i,
            (n + 2 * p - k) / s + 1,
        )?));
    }
    Ok(x.with_dims(dims))
}

/// An output spatial size computed in u128, or an error when it does not fit usize.
fn spatial_out(name: &str, x: &Shape, axis: usize, size: u128) -> IrResult<usize> {
    usize::try_from(size).map_err(|_| {
        err(
            name,
            format!(
                "spatial axis {axis} of x {x} gives an output size of {size}, more than usize holds; use less padding"
            ),
        )
    })
}
