//! The two convolution gradients (`Op::ConvGradInput`, `Op::ConvGradWeight`) for f32,
//! over exactly the geometry of [`super::conv::Geom`] (any number of spatial axes,
//! stride, padding, dilation, groups), as GEMMs around the forward's im2col:
//!
//! - input gradient, per image and group: `cols = W_gᵀ · dY_g`, then col2im adds each
//!   column entry into the input position its tap read (padding taps dropped), rows in
//!   (channel, tap) order and positions ascending — a fixed order, so the result does
//!   not depend on the thread count (nor does the GEMM's);
//! - weight gradient, per group: `dW_g = Σ_images dY_g · im2col(x)ᵀ`, the images
//!   accumulated in order by the GEMM's `beta = 1` within at most eight fixed image
//!   ranges, whose partial sums are then added in order (the ranges run in parallel).
//!
//! Both sum in f32 (the oracle sums in f64): the error is that of a GEMM with
//! `C_out/groups` (input) or `images · out positions` (weight) terms per element.

use super::conv::{Geom, PADDING, f32s, gemm_threads};
use crate::gemm::{MatMut, MatRef, sgemm};
use rayon::prelude::*;
use rlx_ir::{DType, Op, TensorData};

/// `Some(result bytes)` for an f32 convolution gradient this kernel handles, else `None`
/// (the oracle then runs it and reports any malformed geometry).
pub(crate) fn eval(op: &Op, ins: &[&TensorData], out_dims: &[usize]) -> Option<Vec<u8>> {
    let input = match op {
        Op::ConvGradInput { .. } => true,
        Op::ConvGradWeight { .. } => false,
        _ => return None,
    };
    if ins.len() != 3 || ins.iter().any(|t| t.dtype != DType::F32) {
        return None;
    }
    let (x, w, gy) = (ins[0], ins[1], ins[2]);
    let geo = Geom::new(op, &x.dims, &w.dims)?;
    let want = if input { &x.dims } else { &w.dims };
    if gy.dims != geo.out_dims() || out_dims != &want[..] {
        return None;
    }
    if geo.rows() == 0 || geo.cog() == 0 {
        // No product terms: the gradient is zero (and the GEMM views would be degenerate).
        let n: usize = out_dims.iter().product();
        return Some(vec![0u8; n * 4]);
    }
    let out = if input {
        grad_input(&geo, f32s(w), f32s(gy))
    } else {
        grad_weight(&geo, f32s(x), f32s(gy))
    };
    Some(out.iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// `dx = col2im(Wᵀ · dY)` per image and group. Images are independent (each writes
/// only its own slab of `dx`): with at least as many images as threads they run in
/// parallel with a one-thread GEMM each, else one after another with the GEMM's threads;
/// the GEMM's result does not depend on its thread count, so neither does `dx`.
/// Group `gi` of image `ni`'s output gradient: its `[c_out / groups, output positions]`
/// rows of `gy`.
fn gy_block<'a>(geo: &Geom, gy: &'a [f32], ni: usize, gi: usize) -> MatRef<'a, f32> {
    let (cog, osz) = (geo.cog(), geo.osz());
    MatRef {
        data: gy,
        rows: cog,
        cols: osz,
        row_stride: osz as isize,
        col_stride: 1,
        offset: (ni * geo.c_out + gi * cog) * osz,
    }
}

fn grad_input(geo: &Geom, ws: &[f32], gy: &[f32]) -> Vec<f32> {
    let (osz, isz, rows, cog) = (geo.osz(), geo.isz(), geo.rows(), geo.cog());
    let slab = geo.c_in * isz;
    let mut dx = vec![0f32; geo.n * slab];
    if slab == 0 {
        return dx;
    }
    let threads = rayon::current_num_threads();
    if geo.n >= threads && threads > 1 {
        dx.par_chunks_mut(slab).enumerate().for_each_init(
            || vec![0f32; rows * osz],
            |cols, (ni, dxi)| image_grad_input(geo, ws, gy, ni, dxi, cols, 1),
        );
    } else {
        let mut cols = vec![0f32; rows * osz];
        let t = gemm_threads(rows, osz, cog);
        for (ni, dxi) in dx.chunks_mut(slab).enumerate() {
            image_grad_input(geo, ws, gy, ni, dxi, &mut cols, t);
        }
    }
    dx
}

/// One image's input gradient into its slab `dxi` (`C_in` planes), `cols` a
/// `rows() × osz()` scratch.
fn image_grad_input(
    geo: &Geom,
    ws: &[f32],
    gy: &[f32],
    ni: usize,
    dxi: &mut [f32],
    cols: &mut [f32],
    threads: usize,
) {
    let (cig, cog, osz, isz, rows, kprod) = (
        geo.cig(),
        geo.cog(),
        geo.osz(),
        geo.isz(),
        geo.rows(),
        geo.kprod(),
    );
    for gi in 0..geo.groups {
        // W_g is [cog, rows] row-major; its transpose is read with swapped strides.
        let a = MatRef {
            data: ws,
            rows,
            cols: cog,
            row_stride: 1,
            col_stride: rows as isize,
            offset: gi * cog * rows,
        };
        let b = gy_block(geo, gy, ni, gi);
        let c = MatMut::row_major(cols, rows, osz);
        sgemm(1.0, a, b, 0.0, c, threads);
        // col2im: scatter-add each row back into the input plane its channel reads.
        for ci in 0..cig {
            let plane = &mut dxi[(gi * cig + ci) * isz..][..isz];
            for k in 0..kprod {
                let row = &cols[(ci * kprod + k) * osz..][..osz];
                for (&v, &i) in row.iter().zip(geo.tap_row(k)) {
                    if i != PADDING {
                        plane[i] += v;
                    }
                }
            }
        }
    }
}

/// Image ranges of the weight gradient summed separately (then added in order): a
/// fixed count, so the result is the same for every thread count.
const WEIGHT_PARTS: usize = 8;

/// `dW_g = Σ_images dY_g · im2col(x)ᵀ` per group. The images are cut into at most
/// [`WEIGHT_PARTS`] consecutive ranges; each range accumulates its images in order
/// (GEMM `beta = 1`) into a partial sum, the ranges run in parallel (one-thread GEMMs)
/// when there are several threads, and the partial sums are added in range order.
fn grad_weight(geo: &Geom, xs: &[f32], gy: &[f32]) -> Vec<f32> {
    let (osz, rows, cog) = (geo.osz(), geo.rows(), geo.cog());
    let size = geo.c_out * rows;
    let parts = geo.n.clamp(1, WEIGHT_PARTS);
    let range = |p: usize| p * geo.n / parts..(p + 1) * geo.n / parts;
    let mut partial = vec![0f32; parts * size];
    let threads = rayon::current_num_threads();
    if parts > 1 && threads > 1 {
        partial.par_chunks_mut(size).enumerate().for_each_init(
            || vec![0f32; rows * osz],
            |cols, (p, dw)| images_grad_weight(geo, xs, gy, range(p), dw, cols, 1),
        );
    } else {
        let mut cols = vec![0f32; rows * osz];
        let t = gemm_threads(cog, rows, osz);
        for (p, dw) in partial.chunks_mut(size).enumerate() {
            images_grad_weight(geo, xs, gy, range(p), dw, &mut cols, t);
        }
    }
    let (dw, rest) = partial.split_at_mut(size);
    for part in rest.chunks(size) {
        for (d, v) in dw.iter_mut().zip(part) {
            *d += v;
        }
    }
    partial.truncate(size);
    partial
}

/// The weight gradient of the images `images` into `dw` (`C_out × rows()`, overwritten
/// by the first image), `cols` a `rows() × osz()` scratch.
fn images_grad_weight(
    geo: &Geom,
    xs: &[f32],
    gy: &[f32],
    images: std::ops::Range<usize>,
    dw: &mut [f32],
    cols: &mut [f32],
    threads: usize,
) {
    let (cig, cog, osz, isz, rows) = (geo.cig(), geo.cog(), geo.osz(), geo.isz(), geo.rows());
    let first = images.start;
    for ni in images {
        for gi in 0..geo.groups {
            geo.im2col(&xs[(ni * geo.c_in + gi * cig) * isz..][..cig * isz], cols);
            let a = gy_block(geo, gy, ni, gi);
            let b = MatRef::row_major(cols, rows, osz).t();
            let c = MatMut {
                data: &mut *dw,
                rows: cog,
                cols: rows,
                row_stride: rows as isize,
                col_stride: 1,
                offset: gi * cog * rows,
            };
            let beta = if ni == first { 0.0 } else { 1.0 };
            sgemm(1.0, a, b, beta, c, threads);
        }
    }
}
