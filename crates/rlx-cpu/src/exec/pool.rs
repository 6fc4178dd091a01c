//! Pooling (`Op::Pool`: max, mean, sum) and its gradient (`Op::PoolGrad`) for f32, any
//! number of spatial axes, with the oracle's semantics and bits:
//!
//! - geometry: output size `⌊(size + 2·pad − kernel) / stride⌋ + 1` (no ceil mode),
//!   `pad ≤ kernel/2`, so every window holds at least one input element unless a
//!   spatial axis is empty (then max gives -inf, mean and sum an empty sum);
//! - padded taps are left out of a window; mean divides by the full window size (the
//!   padding counts as zeros);
//! - max picks the first maximal element in row-major window order, a NaN counting as
//!   larger than every number (so the first NaN of a window wins and propagates);
//! - sums run in f64 in row-major window order, like the oracle's, and round to f32 once;
//!   the gradients accumulate each input element's terms in f64 in output order (the
//!   mean's term being `g / window_size`) and round once.
//!
//! So the results equal the oracle's bit for bit. Channel planes are independent (a
//! window never leaves its plane) and run one after another: rayon over the planes
//! (same bits) measured 3x slower with two threads than this loop on the shared
//! 2-vCPU VM of 2026-12-03 (LeNet 2x2 max pool, 64x32x28x28: 30 vs 10 ms, three
//! interleaved rounds, before the window table), though faster with one pool thread;
//! not kept until measured on a quiet machine.

use super::conv::{f32s, unravel};
use rlx_ir::interp::pool_geometry;
use rlx_ir::{DType, Op, ReduceOp, TensorData};

/// Most window offsets [`PoolGeom::table`] precomputes (16 MiB).
const TABLE_MAX: usize = 1 << 21;

/// Concrete sizes of one pooling: the oracle's [`Geom`](rlx_ir::interp::PoolGeom), so
/// the kernels accept exactly the geometry the oracle accepts.
struct PoolGeom(rlx_ir::interp::PoolGeom);

impl std::ops::Deref for PoolGeom {
    type Target = rlx_ir::interp::PoolGeom;
    fn deref(&self) -> &rlx_ir::interp::PoolGeom {
        &self.0
    }
}

impl PoolGeom {
    /// The geometry of pooling `op` over `x` dims, or `None` where the oracle reports an
    /// error (it then runs and names the problem).
    fn new(op: &Op, x: &[usize], k: &[usize], stride: &[usize], pad: &[usize]) -> Option<PoolGeom> {
        pool_geometry(op, x, k, stride, pad).ok().map(PoolGeom)
    }

    /// Channel planes (images × channels).
    fn planes(&self) -> usize {
        self.n * self.c
    }

    fn isz(&self) -> usize {
        self.in_sp.iter().product()
    }

    fn osz(&self) -> usize {
        self.out_sp.iter().product()
    }

    /// Calls `f(o, window)` for every output position `o` of one plane (row-major),
    /// `window` listing the in-plane offsets of the input elements it covers in
    /// row-major window order (padded taps left out, so never empty).
    fn for_each_window(&self, mut f: impl FnMut(usize, &[usize])) {
        let sr = self.k.len();
        let mut oidx = vec![0usize; sr];
        let (mut lo, mut hi) = (vec![0usize; sr], vec![0usize; sr]);
        let mut at = vec![0usize; sr];
        let mut window = Vec::with_capacity(self.k.iter().product());
        for o in 0..self.osz() {
            unravel(o, &self.out_sp, &mut oidx);
            // With a dilation of 1 the covered input positions of an axis are one range.
            for a in 0..sr {
                let start = (oidx[a] * self.stride[a]) as isize - self.pad[a] as isize;
                let end = start + self.k[a] as isize;
                lo[a] = start.max(0) as usize;
                hi[a] = (end.min(self.in_sp[a] as isize)).max(lo[a] as isize) as usize;
            }
            window.clear();
            if (0..sr).all(|a| lo[a] < hi[a]) {
                at.copy_from_slice(&lo);
                'odometer: loop {
                    let off = at.iter().zip(&self.in_sp).fold(0, |o, (&p, &n)| o * n + p);
                    window.push(off);
                    for a in (0..sr).rev() {
                        at[a] += 1;
                        if at[a] < hi[a] {
                            continue 'odometer;
                        }
                        at[a] = lo[a];
                    }
                    break;
                }
            }
            f(o, &window);
        }
    }

    /// The windows of one plane as a table (`starts[o]..starts[o + 1]` of `offs`), when
    /// it holds at most [`TABLE_MAX`] offsets: every plane has the same windows, so the
    /// walk is done once per op instead of once per plane.
    fn table(&self) -> Option<(Vec<usize>, Vec<usize>)> {
        if self.osz().checked_mul(self.k.iter().product())? > TABLE_MAX {
            return None;
        }
        let mut starts = vec![0];
        let mut offs = Vec::new();
        self.for_each_window(|_, w| {
            offs.extend_from_slice(w);
            starts.push(offs.len());
        });
        Some((starts, offs))
    }

    /// [`Self::for_each_window`], read from `table` when there is one.
    fn each_window(
        &self,
        table: Option<&(Vec<usize>, Vec<usize>)>,
        mut f: impl FnMut(usize, &[usize]),
    ) {
        match table {
            Some((starts, offs)) => {
                for (o, se) in starts.windows(2).enumerate() {
                    f(o, &offs[se[0]..se[1]]);
                }
            }
            None => self.for_each_window(f),
        }
    }
}

/// The oracle's max rule: the first maximal element in window order, a NaN counting as
/// larger than every number.
fn argmax(x: &[f32], window: &[usize]) -> usize {
    let mut best = window[0];
    for &i in &window[1..] {
        if !x[best].is_nan() && (x[i].is_nan() || x[i] > x[best]) {
            best = i;
        }
    }
    best
}

/// `Some(result bytes)` for an f32 pool or pool gradient this kernel handles, else
/// `None` (the oracle then runs it and reports any malformed geometry or kind).
pub(crate) fn eval(op: &Op, ins: &[&TensorData], out_dims: &[usize]) -> Option<Vec<u8>> {
    let (kind, k, stride, pad, grad) = match op {
        Op::Pool {
            kind,
            kernel_size,
            stride,
            padding,
        } => (*kind, kernel_size, stride, padding, false),
        Op::PoolGrad {
            kind,
            kernel_size,
            stride,
            padding,
        } => (*kind, kernel_size, stride, padding, true),
        _ => return None,
    };
    if !matches!(kind, ReduceOp::Max | ReduceOp::Mean | ReduceOp::Sum)
        || ins.len() != 1 + grad as usize
        || ins.iter().any(|t| t.dtype != DType::F32)
    {
        return None;
    }
    let x = ins[0];
    let geo = PoolGeom::new(op, &x.dims, k, stride, pad)?;
    let mut y_dims = x.dims[..2].to_vec();
    y_dims.extend_from_slice(&geo.out_sp);
    let out = if grad {
        if ins[1].dims != y_dims || out_dims != x.dims {
            return None;
        }
        backward(&geo, kind, f32s(x), f32s(ins[1]))
    } else {
        if out_dims != y_dims {
            return None;
        }
        forward(&geo, kind, f32s(x))
    };
    Some(out.iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// The oracle's rounding of an f64 result to f32 (through f64 and back, so a NaN's
/// payload changes exactly as there).
fn round(v: f64) -> f32 {
    v as f32 as f64 as f32
}

fn forward(geo: &PoolGeom, kind: ReduceOp, xs: &[f32]) -> Vec<f32> {
    let (isz, osz) = (geo.isz(), geo.osz());
    let size = geo.k.iter().product::<usize>() as f64;
    let mut y = vec![0f32; geo.planes() * osz];
    if osz == 0 {
        return y;
    }
    let table = geo.table();
    y.chunks_mut(osz).enumerate().for_each(|(p, yp)| {
        let xp = &xs[p * isz..][..isz];
        geo.each_window(table.as_ref(), |o, w| {
            yp[o] = match kind {
                // A window over padding only (an empty spatial axis) is the oracle's -inf.
                ReduceOp::Max if w.is_empty() => f32::NEG_INFINITY,
                ReduceOp::Max => round(xp[argmax(xp, w)] as f64),
                ReduceOp::Mean => round(w.iter().map(|&i| xp[i] as f64).sum::<f64>() / size),
                _ => round(w.iter().map(|&i| xp[i] as f64).sum::<f64>()),
            };
        });
    });
    y
}

fn backward(geo: &PoolGeom, kind: ReduceOp, xs: &[f32], gy: &[f32]) -> Vec<f32> {
    let (isz, osz) = (geo.isz(), geo.osz());
    let size = geo.k.iter().product::<usize>() as f64;
    let mut dx = vec![0f32; geo.planes() * isz];
    if isz == 0 {
        return dx;
    }
    let table = geo.table();
    dx.chunks_mut(isz).enumerate().for_each(|(p, dxp)| {
        let xp = &xs[p * isz..][..isz];
        let gp = &gy[p * osz..][..osz];
        let mut acc = vec![0f64; isz];
        geo.each_window(table.as_ref(), |o, w| {
            let g = gp[o] as f64;
            match kind {
                ReduceOp::Max => acc[argmax(xp, w)] += g,
                ReduceOp::Mean => w.iter().for_each(|&i| acc[i] += g / size),
                _ => w.iter().for_each(|&i| acc[i] += g),
            }
        });
        for (d, a) in dxp.iter_mut().zip(&acc) {
            *d = round(*a);
        }
    });
    dx
}
