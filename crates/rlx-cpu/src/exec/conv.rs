//! Convolution (`Op::Conv`, any number of spatial axes, groups, stride, padding,
//! dilation) for f32 as im2col + GEMM: per image and group, the receptive fields are
//! unrolled into a column matrix (zeros where the window hangs over the padding) and
//! multiplied by the group's weights with the strided GEMM.

use crate::gemm::{MatMut, MatRef, sgemm};
use rlx_ir::{DType, Op, TensorData};

/// `Some(result bytes)` for an f32 convolution this kernel handles, else `None` (the
/// oracle then runs it and reports any malformed geometry).
pub(crate) fn eval(op: &Op, ins: &[&TensorData], out_dims: &[usize]) -> Option<Vec<u8>> {
    let Op::Conv {
        kernel_size,
        stride,
        padding,
        dilation,
        groups,
    } = op
    else {
        return None;
    };
    if ins.iter().any(|t| t.dtype != DType::F32) || !(ins.len() == 2 || ins.len() == 3) {
        return None;
    }
    let (x, w) = (ins[0], ins[1]);
    let sr = kernel_size.len();
    let g = *groups;
    if sr == 0
        || x.dims.len() != sr + 2
        || w.dims.len() != sr + 2
        || out_dims.len() != sr + 2
        || g == 0
    {
        return None;
    }
    if stride.len() != sr || padding.len() != sr || dilation.len() != sr {
        return None;
    }
    let (n, c_in, c_out) = (x.dims[0], x.dims[1], w.dims[0]);
    if c_in % g != 0
        || c_out % g != 0
        || w.dims[1] != c_in / g
        || out_dims[0] != n
        || out_dims[1] != c_out
    {
        return None;
    }
    if w.dims[2..] != kernel_size[..] {
        return None;
    }
    let in_sp = &x.dims[2..];
    let out_sp = &out_dims[2..];
    for s in 0..sr {
        let span = dilation[s] * (kernel_size[s].max(1) - 1) + 1;
        let padded = in_sp[s] + 2 * padding[s];
        let expect = if padded >= span && stride[s] > 0 {
            (padded - span) / stride[s] + 1
        } else {
            0
        };
        if expect != out_sp[s] {
            return None;
        }
    }
    if let Some(b) = ins.get(2)
        && b.dims != [c_out]
    {
        return None;
    }
    let (cig, cog) = (c_in / g, c_out / g);
    let kprod: usize = kernel_size.iter().product();
    let osz: usize = out_sp.iter().product();
    let isz: usize = in_sp.iter().product();
    let xs = f32s(x);
    let ws = f32s(w);
    let mut y = vec![0f32; n * c_out * osz];
    let rows = cig * kprod;
    let mut cols = vec![0f32; rows * osz];
    let mut kidx = vec![0usize; sr];
    let mut oidx = vec![0usize; sr];
    for ni in 0..n {
        for gi in 0..g {
            // im2col: row (ci, k) holds, per output position, the input value it reads.
            for ci in 0..cig {
                let plane = &xs[((ni * c_in) + gi * cig + ci) * isz..][..isz];
                for k in 0..kprod {
                    unravel(k, kernel_size, &mut kidx);
                    let row = &mut cols[(ci * kprod + k) * osz..][..osz];
                    for (o, slot) in row.iter_mut().enumerate() {
                        unravel(o, out_sp, &mut oidx);
                        let mut off = 0usize;
                        let mut inside = true;
                        for s in 0..sr {
                            let p = (oidx[s] * stride[s] + kidx[s] * dilation[s]) as isize
                                - padding[s] as isize;
                            if p < 0 || p as usize >= in_sp[s] {
                                inside = false;
                                break;
                            }
                            off = off * in_sp[s] + p as usize;
                        }
                        *slot = if inside { plane[off] } else { 0.0 };
                    }
                }
            }
            let a = MatRef {
                data: ws,
                rows: cog,
                cols: rows,
                row_stride: rows as isize,
                col_stride: 1,
                offset: gi * cog * rows,
            };
            let b = MatRef {
                data: &cols,
                rows,
                cols: osz,
                row_stride: osz as isize,
                col_stride: 1,
                offset: 0,
            };
            let out = MatMut {
                data: &mut y,
                rows: cog,
                cols: osz,
                row_stride: osz as isize,
                col_stride: 1,
                offset: (ni * c_out + gi * cog) * osz,
            };
            let threads = if cog * osz * rows > 1 << 18 {
                rayon::current_num_threads()
            } else {
                1
            };
            sgemm(1.0, a, b, 0.0, out, threads);
        }
    }
    if let Some(b) = ins.get(2) {
        let bs = f32s(b);
        for (i, v) in y.iter_mut().enumerate() {
            *v += bs[(i / osz) % c_out];
        }
    }
    Some(y.iter().flat_map(|v| v.to_le_bytes()).collect())
}

fn f32s(t: &TensorData) -> &[f32] {
    // TensorData bytes come from `gather` (a fresh Vec<u8>); read them as f32 when aligned.
    assert!(
        (t.bytes.as_ptr() as usize).is_multiple_of(4),
        "conv operands are 4-byte aligned"
    );
    // SAFETY: the bytes are 4-byte aligned (asserted above), initialized, and `len / 4` f32s
    // fit in them; the slice borrows `t`, so nothing writes them while it lives (every bit
    // pattern is a valid f32).
    unsafe { std::slice::from_raw_parts(t.bytes.as_ptr() as *const f32, t.bytes.len() / 4) }
}

fn unravel(mut flat: usize, dims: &[usize], idx: &mut [usize]) {
    for i in (0..dims.len()).rev() {
        if dims[i] > 0 {
            idx[i] = flat % dims[i];
            flat /= dims[i];
        }
    }
}
