//! Oracle semantics of convolution and pooling and their gradients, for any number of
//! spatial axes (1, 2 and 3 are the common cases).
//!
//! Layout is `[N, C, spatial…]`, weights `[C_out, C_in/groups, kernel…]`, row-major.
//! Output position `o` on a spatial axis reads input position `o·stride − pad + k·dil`
//! for kernel tap `k`; positions outside the input are zero padding (conv), ignored
//! (max pool) or counted as zeros (mean pool: the divisor is the full window).
//!
//! Conv and its two gradients all walk the *same* list of (x, w, y) index triples
//! ([`for_each_tap`]), so the gradients are the exact adjoints of the forward op by
//! construction; likewise pool and pool-grad share [`for_each_window`].

use super::index::ravel;
use crate::{ConvAttrs, IrError, IrResult, Op, ReduceOp, Shape, TensorData, box_indices};

pub(super) fn eval(op: &Op, inputs: &[&TensorData], out: &Shape) -> IrResult<TensorData> {
    let dims = out
        .static_dims()
        .ok_or_else(|| err(op, format!("result type {out} is not concrete")))?;
    let vals = match op {
        Op::Conv { .. } => {
            if inputs.len() != 2 && inputs.len() != 3 {
                return Err(err(
                    op,
                    format!(
                        "takes [x, w] or [x, w, bias], got {} operands",
                        inputs.len()
                    ),
                ));
            }
            let p = op.conv_attrs().expect("a convolution op");
            let g = conv_geometry(op, &inputs[0].dims, &inputs[1].dims, &p)?;
            conv_forward(op, &g, inputs)?
        }
        Op::ConvGradInput { .. } | Op::ConvGradWeight { .. } => {
            arity(op, inputs, 3)?;
            let p = op.conv_attrs().expect("a convolution op");
            let g = conv_geometry(op, &inputs[0].dims, &inputs[1].dims, &p)?;
            let gy = inputs[2];
            if gy.dims != g.out_dims() {
                return Err(err(
                    op,
                    format!(
                        "grad_out has dims {:?} but the convolution produces {:?}",
                        gy.dims,
                        g.out_dims()
                    ),
                ));
            }
            let gy = gy.to_f64_vec();
            if matches!(op, Op::ConvGradInput { .. }) {
                // dL/dx[xi] = Σ over taps reading xi of grad_out[yi]·w[wi]; x is read for its dims only.
                let w = inputs[1].to_f64_vec();
                let mut dx = vec![0.0; inputs[0].numel()];
                for_each_tap(&g, |xi, wi, yi| dx[xi] += gy[yi] * w[wi]);
                dx
            } else {
                // dL/dw[wi] = Σ over taps using wi of grad_out[yi]·x[xi].
                let x = inputs[0].to_f64_vec();
                let mut dw = vec![0.0; inputs[1].numel()];
                for_each_tap(&g, |xi, wi, yi| dw[wi] += gy[yi] * x[xi]);
                dw
            }
        }
        Op::Pool {
            kind,
            kernel_size,
            stride,
            padding,
        } => {
            arity(op, inputs, 1)?;
            let g = pool_geometry(op, &inputs[0].dims, kernel_size, stride, padding)?;
            pool_forward(op, &g, *kind, inputs[0])?
        }
        Op::PoolGrad {
            kind,
            kernel_size,
            stride,
            padding,
        } => {
            arity(op, inputs, 2)?;
            let g = pool_geometry(op, &inputs[0].dims, kernel_size, stride, padding)?;
            if inputs[1].dims != g.out_dims() {
                return Err(err(
                    op,
                    format!(
                        "grad_out has dims {:?} but the pool produces {:?}",
                        inputs[1].dims,
                        g.out_dims()
                    ),
                ));
            }
            pool_backward(op, &g, *kind, inputs[0], inputs[1])?
        }
        other => {
            return Err(err(
                other,
                "is not a conv/pool op; the interpreter routed it to the wrong module".to_string(),
            ));
        }
    };
    if vals.len() != dims.iter().product::<usize>() {
        return Err(err(
            op,
            format!(
                "computed {} values but the result type is {out}; the operand dims disagree with the inferred type",
                vals.len()
            ),
        ));
    }
    Ok(TensorData::from_f64_as(out.dtype(), &dims, &vals))
}

fn err(op: &Op, message: String) -> IrError {
    IrError::new(op.name(), message)
}

fn arity(op: &Op, inputs: &[&TensorData], n: usize) -> IrResult<()> {
    if inputs.len() != n {
        return Err(err(op, format!("takes {n} operands, got {}", inputs.len())));
    }
    Ok(())
}

/// Input position read by output position `o` at kernel tap `k` on every spatial axis,
/// or `None` when it falls in the padding.
fn input_pos(
    o: &[usize],
    k: &[usize],
    stride: &[usize],
    pad: &[usize],
    dil: &[usize],
    size: &[usize],
) -> Option<Vec<usize>> {
    (0..o.len())
        .map(|a| {
            let p = (o[a] * stride[a] + k[a] * dil[a]) as isize - pad[a] as isize;
            (p >= 0 && (p as usize) < size[a]).then_some(p as usize)
        })
        .collect()
}

/// Output size of one spatial axis, or `None` when the dilated window does not fit.
fn out_size(n: usize, k: usize, s: usize, p: usize, d: usize) -> Option<usize> {
    let span = d * (k.max(1) - 1) + 1;
    (n + 2 * p >= span && s > 0 && k > 0).then(|| (n + 2 * p - span) / s + 1)
}

/// Concrete sizes of one convolution (`Op::Conv` and its two gradients), as the oracle
/// checks them ([`conv_geometry`]). Backends with their own convolution kernels take
/// the geometry from here, so they accept exactly what the oracle accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvGeom {
    /// Images.
    pub n: usize,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Channel groups (both channel counts are multiples of it).
    pub groups: usize,
    /// Input extent of each spatial axis.
    pub in_sp: Vec<usize>,
    /// Kernel extent of each spatial axis.
    pub k: Vec<usize>,
    /// Output extent of each spatial axis.
    pub out_sp: Vec<usize>,
    /// Stride of each spatial axis (≥ 1).
    pub stride: Vec<usize>,
    /// Zero padding on both sides of each spatial axis.
    pub pad: Vec<usize>,
    /// Dilation of each spatial axis (≥ 1).
    pub dil: Vec<usize>,
}

impl ConvGeom {
    /// `[N, C_out, out…]`.
    pub fn out_dims(&self) -> Vec<usize> {
        let mut d = vec![self.n, self.c_out];
        d.extend_from_slice(&self.out_sp);
        d
    }
}

/// The geometry of convolution `op` (attributes `p`) of an input of dims `x` by weights of
/// dims `w`, or the error that names what does not fit: x must be `[N, C, spatial…]`,
/// w `[C_out, C/groups, kernel…]` with one stride/padding/dilation entry per spatial axis
/// (stride and dilation ≥ 1) and every padded spatial axis at least the dilated kernel.
pub fn conv_geometry(op: &Op, x: &[usize], w: &[usize], p: &ConvAttrs<'_>) -> IrResult<ConvGeom> {
    let sr = p.kernel_size.len();
    let fits = sr >= 1
        && p.stride.len() == sr
        && p.padding.len() == sr
        && p.dilation.len() == sr
        && x.len() == sr + 2
        && w.len() == sr + 2
        && w[2..] == *p.kernel_size
        && p.groups > 0
        && !p.stride.contains(&0)
        && !p.dilation.contains(&0)
        && x[1].is_multiple_of(p.groups)
        && w[0].is_multiple_of(p.groups)
        && w[1] * p.groups == x[1];
    if !fits {
        return Err(err(
            op,
            format!(
                "x {x:?} must be [N, C, spatial…] (at least one spatial axis) and w {w:?} [C_out, C/groups, kernel…] with kernel_size {:?}, one stride/padding/dilation entry per spatial axis (got {:?}/{:?}/{:?}, stride and dilation ≥ 1) and C, C_out divisible by groups {}",
                p.kernel_size, p.stride, p.padding, p.dilation, p.groups
            ),
        ));
    }
    let mut out_sp = Vec::with_capacity(sr);
    for a in 0..sr {
        let o = out_size(
            x[2 + a],
            p.kernel_size[a],
            p.stride[a],
            p.padding[a],
            p.dilation[a],
        )
        .ok_or_else(|| {
            err(
                op,
                format!(
                    "spatial axis {a} of x {x:?} (padding {}) is smaller than the dilated kernel",
                    p.padding[a]
                ),
            )
        })?;
        out_sp.push(o);
    }
    Ok(ConvGeom {
        n: x[0],
        c_in: x[1],
        c_out: w[0],
        groups: p.groups,
        in_sp: x[2..].to_vec(),
        k: p.kernel_size.to_vec(),
        out_sp,
        stride: p.stride.to_vec(),
        pad: p.padding.to_vec(),
        dil: p.dilation.to_vec(),
    })
}

/// Call `f(xi, wi, yi)` for every product term `x[xi]·w[wi]` of output `y[yi]`:
/// `y[n, co, o] = Σ_{ci, k} x[n, group(co)·C_in/g + ci, o·s − p + k·d] · w[co, ci, k]`,
/// skipping taps that read zero padding.
fn for_each_tap(g: &ConvGeom, mut f: impl FnMut(usize, usize, usize)) {
    let cin_g = g.c_in / g.groups;
    let cout_g = g.c_out / g.groups;
    let x_dims: Vec<usize> = [g.n, g.c_in].iter().chain(&g.in_sp).copied().collect();
    let w_dims: Vec<usize> = [g.c_out, cin_g].iter().chain(&g.k).copied().collect();
    let y_dims = g.out_dims();
    let outs = box_indices(&g.out_sp);
    let taps = box_indices(&g.k);
    for n in 0..g.n {
        for co in 0..g.c_out {
            let first_c = (co / cout_g) * cin_g;
            for o in &outs {
                let yi = ravel(&[&[n, co][..], o].concat(), &y_dims);
                for ci in 0..cin_g {
                    for k in &taps {
                        let Some(pos) = input_pos(o, k, &g.stride, &g.pad, &g.dil, &g.in_sp) else {
                            continue;
                        };
                        let xi = ravel(&[&[n, first_c + ci][..], &pos].concat(), &x_dims);
                        let wi = ravel(&[&[co, ci][..], k].concat(), &w_dims);
                        f(xi, wi, yi);
                    }
                }
            }
        }
    }
}

fn conv_forward(op: &Op, g: &ConvGeom, inputs: &[&TensorData]) -> IrResult<Vec<f64>> {
    let x = inputs[0].to_f64_vec();
    let w = inputs[1].to_f64_vec();
    let spatial: usize = g.out_sp.iter().product();
    let mut y = vec![0.0; g.n * g.c_out * spatial];
    if let Some(bias) = inputs.get(2) {
        if bias.dims != [g.c_out] {
            return Err(err(
                op,
                format!("bias must be [C_out] = [{}], got {:?}", g.c_out, bias.dims),
            ));
        }
        let b = bias.to_f64_vec();
        for (i, v) in y.iter_mut().enumerate() {
            *v = b[(i / spatial) % g.c_out];
        }
    }
    for_each_tap(g, |xi, wi, yi| y[yi] += x[xi] * w[wi]);
    Ok(y)
}

/// Concrete sizes of one pooling (`Op::Pool`, `Op::PoolGrad`), as the oracle checks them
/// ([`pool_geometry`]). Backends with their own pooling kernels take the geometry from
/// here, so they accept exactly what the oracle accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolGeom {
    /// Images.
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Input extent of each spatial axis.
    pub in_sp: Vec<usize>,
    /// Window extent of each spatial axis.
    pub k: Vec<usize>,
    /// Output extent of each spatial axis.
    pub out_sp: Vec<usize>,
    /// Stride of each spatial axis (≥ 1).
    pub stride: Vec<usize>,
    /// Padding on both sides of each spatial axis (at most half the window).
    pub pad: Vec<usize>,
}

impl PoolGeom {
    /// `[N, C, out…]`.
    pub fn out_dims(&self) -> Vec<usize> {
        let mut d = vec![self.n, self.c];
        d.extend_from_slice(&self.out_sp);
        d
    }

    fn window_size(&self) -> usize {
        self.k.iter().product()
    }
}

/// The geometry of pooling `op` over an input of dims `x`, or the error that names what
/// does not fit: x must be `[N, C, spatial…]` with one kernel_size/stride/padding entry
/// per spatial axis, kernel and stride ≥ 1, padding ≤ kernel/2 and every padded spatial
/// axis at least the window.
pub fn pool_geometry(
    op: &Op,
    x: &[usize],
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
) -> IrResult<PoolGeom> {
    let sr = kernel_size.len();
    if sr == 0 || stride.len() != sr || padding.len() != sr || x.len() != sr + 2 {
        return Err(err(
            op,
            format!(
                "x {x:?} must be [N, C, spatial…] with one kernel_size/stride/padding entry per spatial axis (got {kernel_size:?}/{stride:?}/{padding:?}, at least one spatial axis)"
            ),
        ));
    }
    let mut out_sp = Vec::with_capacity(sr);
    for a in 0..sr {
        let o = out_size(x[2 + a], kernel_size[a], stride[a], padding[a], 1)
            .filter(|_| padding[a] * 2 <= kernel_size[a])
            .ok_or_else(|| {
                err(
                    op,
                    format!(
                        "spatial axis {a} of x {x:?} with kernel {}, stride {}, padding {} gives no valid window (need kernel, stride ≥ 1, padding ≤ kernel/2, size + 2·padding ≥ kernel)",
                        kernel_size[a], stride[a], padding[a]
                    ),
                )
            })?;
        out_sp.push(o);
    }
    Ok(PoolGeom {
        n: x[0],
        c: x[1],
        in_sp: x[2..].to_vec(),
        k: kernel_size.to_vec(),
        out_sp,
        stride: stride.to_vec(),
        pad: padding.to_vec(),
    })
}

/// Call `f(yi, window)` for every output `y[yi]`, where `window` lists the flat input
/// indices inside the window in row-major window order, padded positions left out.
fn for_each_window(g: &PoolGeom, mut f: impl FnMut(usize, &[usize])) {
    let x_dims: Vec<usize> = [g.n, g.c].iter().chain(&g.in_sp).copied().collect();
    let y_dims = g.out_dims();
    let outs = box_indices(&g.out_sp);
    let taps = box_indices(&g.k);
    let ones = vec![1; g.k.len()];
    let mut window = Vec::with_capacity(taps.len());
    for n in 0..g.n {
        for c in 0..g.c {
            for o in &outs {
                window.clear();
                for k in &taps {
                    if let Some(pos) = input_pos(o, k, &g.stride, &g.pad, &ones, &g.in_sp) {
                        window.push(ravel(&[&[n, c][..], &pos].concat(), &x_dims));
                    }
                }
                f(ravel(&[&[n, c][..], o].concat(), &y_dims), &window);
            }
        }
    }
}

/// Position of the window's maximum: the first maximal entry in window order;
/// a `NaN` counts as larger than every number (so max pooling propagates `NaN`).
fn argmax(x: &[f64], window: &[usize]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for &i in window {
        let better = match best {
            None => true,
            Some(b) => !x[b].is_nan() && (x[i].is_nan() || x[i] > x[b]),
        };
        if better {
            best = Some(i);
        }
    }
    best
}

fn unsupported_kind(op: &Op, kind: ReduceOp) -> IrError {
    err(
        op,
        format!("pool kind {kind:?} is not supported; use Max, Mean or Sum"),
    )
}

fn pool_forward(op: &Op, g: &PoolGeom, kind: ReduceOp, x: &TensorData) -> IrResult<Vec<f64>> {
    let xv = x.to_f64_vec();
    let size = g.window_size() as f64;
    let mut y = vec![0.0; g.out_dims().iter().product()];
    match kind {
        ReduceOp::Max => for_each_window(g, |yi, w| {
            // Every window touches the input (padding ≤ kernel/2), so `None` cannot occur.
            y[yi] = argmax(&xv, w).map_or(f64::NEG_INFINITY, |i| xv[i]);
        }),
        ReduceOp::Mean => for_each_window(g, |yi, w| {
            y[yi] = w.iter().map(|&i| xv[i]).sum::<f64>() / size;
        }),
        ReduceOp::Sum => for_each_window(g, |yi, w| {
            y[yi] = w.iter().map(|&i| xv[i]).sum::<f64>();
        }),
        other => return Err(unsupported_kind(op, other)),
    }
    Ok(y)
}

/// dL/dx of a pool: Max routes each window's gradient to its [`argmax`], Mean spreads
/// `g / window_size` (padding included in the size), Sum spreads `g`; overlapping
/// windows accumulate.
fn pool_backward(
    op: &Op,
    g: &PoolGeom,
    kind: ReduceOp,
    x: &TensorData,
    grad_out: &TensorData,
) -> IrResult<Vec<f64>> {
    let xv = x.to_f64_vec();
    let gy = grad_out.to_f64_vec();
    let size = g.window_size() as f64;
    let mut dx = vec![0.0; xv.len()];
    match kind {
        ReduceOp::Max => for_each_window(g, |yi, w| {
            if let Some(i) = argmax(&xv, w) {
                dx[i] += gy[yi];
            }
        }),
        ReduceOp::Mean => for_each_window(g, |yi, w| {
            for &i in w {
                dx[i] += gy[yi] / size;
            }
        }),
        ReduceOp::Sum => for_each_window(g, |yi, w| {
            for &i in w {
                dx[i] += gy[yi];
            }
        }),
        other => return Err(unsupported_kind(op, other)),
    }
    Ok(dx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(stride: usize, groups: usize) -> Op {
        Op::Conv {
            kernel_size: vec![3, 3],
            stride: vec![stride, stride],
            padding: vec![1, 1],
            dilation: vec![1, 1],
            groups,
        }
    }

    fn conv_err(op: &Op, x: &[usize], w: &[usize]) -> String {
        let p = op.conv_attrs().expect("a conv op");
        conv_geometry(op, x, w, &p)
            .expect_err("an invalid geometry")
            .to_string()
    }

    #[test]
    fn conv_geometry_gives_the_output_size_and_rejects_what_does_not_fit() {
        let op = conv(2, 2);
        let p = op.conv_attrs().unwrap();
        let g = conv_geometry(&op, &[3, 4, 9, 8], &[6, 2, 3, 3], &p).unwrap();
        // (9 + 2 - 3) / 2 + 1 = 5, (8 + 2 - 3) / 2 + 1 = 4.
        assert_eq!(g.out_dims(), vec![3, 6, 5, 4]);
        // Channels not divisible by the groups, w's channel count, a wrong rank.
        for (x, w) in [
            (&[3, 5, 9, 8][..], &[6, 2, 3, 3][..]),
            (&[3, 4, 9, 8], &[6, 4, 3, 3]),
            (&[3, 4, 9], &[6, 2, 3, 3]),
            (&[3, 4, 9, 8], &[6, 2, 3, 2]),
        ] {
            assert!(
                conv_err(&op, x, w).contains("divisible by groups"),
                "{x:?} {w:?}"
            );
        }
        // Zero stride, zero groups.
        assert!(conv_err(&conv(0, 1), &[1, 1, 5, 5], &[1, 1, 3, 3]).contains("stride"));
        assert!(conv_err(&conv(1, 0), &[1, 1, 5, 5], &[1, 1, 3, 3]).contains("groups"));
        // A spatial axis smaller than the kernel even with its padding.
        let small = conv_err(&conv(1, 1), &[1, 1, 5, 0], &[1, 1, 3, 3]);
        assert!(small.contains("spatial axis 1"), "{small}");
    }

    #[test]
    fn pool_geometry_gives_the_output_size_and_rejects_what_does_not_fit() {
        let op = Op::Pool {
            kind: ReduceOp::Max,
            kernel_size: vec![2, 3],
            stride: vec![2, 1],
            padding: vec![1, 1],
        };
        let g = pool_geometry(&op, &[2, 3, 7, 5], &[2, 3], &[2, 1], &[1, 1]).unwrap();
        // (7 + 2 - 2) / 2 + 1 = 4, (5 + 2 - 3) / 1 + 1 = 5.
        assert_eq!(g.out_dims(), vec![2, 3, 4, 5]);
        let bad = |x: &[usize], k: &[usize], s: &[usize], p: &[usize]| {
            pool_geometry(&op, x, k, s, p)
                .expect_err("an invalid geometry")
                .to_string()
        };
        // One entry per spatial axis, at least one spatial axis.
        assert!(bad(&[2, 3, 7], &[2, 3], &[2, 1], &[1, 1]).contains("spatial"));
        assert!(bad(&[2, 3], &[], &[], &[]).contains("at least one spatial axis"));
        // Padding over half the window, zero stride, a window larger than the axis.
        for (k, s, p) in [
            ([2, 3], [2, 1], [2, 1]),
            ([2, 3], [0, 1], [1, 1]),
            ([9, 3], [1, 1], [0, 0]),
        ] {
            assert!(
                bad(&[2, 3, 7, 5], &k, &s, &p).contains("gives no valid window"),
                "{k:?} {s:?} {p:?}"
            );
        }
    }
}
