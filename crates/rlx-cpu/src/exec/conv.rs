//! Convolution (`Op::Conv`, any number of spatial axes, groups, stride, padding,
//! dilation) for f32 as im2col + GEMM: per image and group, the receptive fields are
//! unrolled into a column matrix (zeros where the window hangs over the padding) and
//! multiplied by the group's weights with the strided GEMM.
//!
//! [`Geom`] (the geometry checks, the tap walk, im2col) is shared with the two
//! gradients in `conv_grad.rs`.

use crate::gemm::{MatMut, MatRef, sgemm};
use rlx_ir::interp::{ConvGeom, conv_geometry};
use rlx_ir::{DType, Op, TensorData};

/// Concrete sizes of one convolution: the oracle's [`ConvGeom`] (so the kernels accept
/// exactly the geometry the oracle accepts), with the tap table the kernels share.
pub(super) struct Geom {
    geom: ConvGeom,
    /// Row `tap` (`osz()` entries): the in-plane input position each output position
    /// reads at that kernel tap, [`PADDING`] where the tap falls in the padding. Every
    /// image, group and channel reads the same positions, so im2col and col2im look
    /// them up instead of walking the window per plane.
    taps: Vec<usize>,
}

/// A [`Geom::tap_row`] entry whose tap lies in the zero padding.
pub(super) const PADDING: usize = usize::MAX;

impl std::ops::Deref for Geom {
    type Target = ConvGeom;
    fn deref(&self) -> &ConvGeom {
        &self.geom
    }
}

impl Geom {
    /// The geometry of convolution `op` of `x` dims by `w` dims, or `None` where the
    /// oracle reports an error (it then runs and names the problem).
    pub(super) fn new(op: &Op, x: &[usize], w: &[usize]) -> Option<Geom> {
        let geom = conv_geometry(op, x, w, &op.conv_attrs()?).ok()?;
        let mut taps = Vec::new();
        for tap in 0..geom.k.iter().product() {
            push_tap_row(&geom, tap, &mut taps);
        }
        Some(Geom { geom, taps })
    }

    /// The input position each output position reads at kernel tap `tap` (row-major in
    /// one channel plane), [`PADDING`] in the padding.
    pub(super) fn tap_row(&self, tap: usize) -> &[usize] {
        &self.taps[tap * self.osz()..][..self.osz()]
    }

    /// Input channels per group.
    pub(super) fn cig(&self) -> usize {
        self.c_in / self.groups
    }

    /// Output channels per group.
    pub(super) fn cog(&self) -> usize {
        self.c_out / self.groups
    }

    /// Taps of one kernel window.
    pub(super) fn kprod(&self) -> usize {
        self.k.iter().product()
    }

    /// Output positions of one image and channel.
    pub(super) fn osz(&self) -> usize {
        self.out_sp.iter().product()
    }

    /// Input positions of one image and channel.
    pub(super) fn isz(&self) -> usize {
        self.in_sp.iter().product()
    }

    /// Rows of a group's column matrix (`C_in/groups · taps`).
    pub(super) fn rows(&self) -> usize {
        self.cig() * self.kprod()
    }

    /// im2col of one image and group: `planes` holds the group's `C_in/groups` input
    /// planes; row `(ci, tap)` of `cols` (`rows() × osz()`) receives, per output
    /// position, the input value that tap reads (zero in the padding).
    pub(super) fn im2col(&self, planes: &[f32], cols: &mut [f32]) {
        let (isz, osz, kprod) = (self.isz(), self.osz(), self.kprod());
        for ci in 0..self.cig() {
            let plane = &planes[ci * isz..][..isz];
            for k in 0..kprod {
                let row = &mut cols[(ci * kprod + k) * osz..][..osz];
                for (r, &i) in row.iter_mut().zip(self.tap_row(k)) {
                    *r = if i == PADDING { 0.0 } else { plane[i] };
                }
            }
        }
    }
}

/// Appends to `row`, for every output position in row-major order, the input position
/// (row-major in one channel plane) its window reads at the flat kernel tap `tap`, or
/// [`PADDING`] where that tap falls in the padding.
fn push_tap_row(g: &ConvGeom, tap: usize, row: &mut Vec<usize>) {
    let sr = g.k.len();
    let mut kidx = vec![0usize; sr];
    unravel(tap, &g.k, &mut kidx);
    // Per axis, the input coordinate of each output coordinate (PADDING: in the padding).
    let pos: Vec<Vec<usize>> = (0..sr)
        .map(|a| {
            (0..g.out_sp[a])
                .map(|o| {
                    let p = (o * g.stride[a] + kidx[a] * g.dil[a]) as isize - g.pad[a] as isize;
                    if p < 0 || p as usize >= g.in_sp[a] {
                        PADDING
                    } else {
                        p as usize
                    }
                })
                .collect()
        })
        .collect();
    let last = sr - 1;
    let outer: usize = g.out_sp[..last].iter().product();
    let mut oidx = vec![0usize; last];
    for ob in 0..outer {
        unravel(ob, &g.out_sp[..last], &mut oidx);
        let mut off = 0usize;
        let mut inside = true;
        for a in 0..last {
            let p = pos[a][oidx[a]];
            if p == PADDING {
                inside = false;
                break;
            }
            off = off * g.in_sp[a] + p;
        }
        let base = off * g.in_sp[last];
        row.extend(pos[last].iter().map(|&p| {
            if inside && p != PADDING {
                base + p
            } else {
                PADDING
            }
        }));
    }
}

/// Threads for an `m × n × k` product: the pool's for large ones, else one (the GEMM's
/// result is the same for every thread count).
pub(super) fn gemm_threads(m: usize, n: usize, k: usize) -> usize {
    if m * n * k > 1 << 18 {
        rayon::current_num_threads()
    } else {
        1
    }
}

/// `Some(result bytes)` for an f32 convolution this kernel handles, else `None` (the
/// oracle then runs it and reports any malformed geometry).
pub(crate) fn eval(op: &Op, ins: &[&TensorData], out_dims: &[usize]) -> Option<Vec<u8>> {
    if !matches!(op, Op::Conv { .. })
        || ins.iter().any(|t| t.dtype != DType::F32)
        || !(ins.len() == 2 || ins.len() == 3)
    {
        return None;
    }
    let (x, w) = (ins[0], ins[1]);
    let geo = Geom::new(op, &x.dims, &w.dims)?;
    if geo.out_dims() != out_dims {
        return None;
    }
    let (n, c_in, c_out, g) = (geo.n, geo.c_in, geo.c_out, geo.groups);
    if let Some(b) = ins.get(2)
        && b.dims != [c_out]
    {
        return None;
    }
    let (cig, cog, osz, isz, rows) = (geo.cig(), geo.cog(), geo.osz(), geo.isz(), geo.rows());
    let xs = f32s(x);
    let ws = f32s(w);
    let mut y = vec![0f32; n * c_out * osz];
    let mut cols = vec![0f32; rows * osz];
    for ni in 0..n {
        for gi in 0..g {
            geo.im2col(&xs[(ni * c_in + gi * cig) * isz..][..cig * isz], &mut cols);
            let a = MatRef {
                data: ws,
                rows: cog,
                cols: rows,
                row_stride: rows as isize,
                col_stride: 1,
                offset: gi * cog * rows,
            };
            let b = MatRef::row_major(&cols, rows, osz);
            let out = MatMut {
                data: &mut y,
                rows: cog,
                cols: osz,
                row_stride: osz as isize,
                col_stride: 1,
                offset: (ni * c_out + gi * cog) * osz,
            };
            sgemm(1.0, a, b, 0.0, out, gemm_threads(cog, osz, rows));
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

/// The f32 elements of an operand, read in place.
pub(super) fn f32s(t: &TensorData) -> &[f32] {
    // An empty Vec<u8>'s pointer is dangling with alignment 1.
    if t.bytes.is_empty() {
        return &[];
    }
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

/// Row-major coordinates of the flat index `flat` in `dims`.
pub(super) fn unravel(mut flat: usize, dims: &[usize], idx: &mut [usize]) {
    for i in (0..dims.len()).rev() {
        if dims[i] > 0 {
            idx[i] = flat % dims[i];
            flat /= dims[i];
        }
    }
}
