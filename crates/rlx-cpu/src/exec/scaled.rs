//! Native kernels of the scaled low-precision ops (`ScaledQuantScale`,
//! `ScaledQuantize`, `ScaledMatMul`); semantics are the oracle's
//! (`rlx_ir::interp::scaled`).
//!
//! # The matmul
//!
//! `out = A·Bᵀ (+ bias)` with `A = decode(lq)·ls` (`[m, k]`) and `B = decode(rq)·rs`
//! (`[n, k]`). The operands are never materialized in f32: for every block of at most
//! [`NC`] rows of `B` and every panel of [`KC`] columns of K, the `NC × KC` panel of `B`
//! is decoded (code table × block scale) into an f32 scratch (≤ 1 MiB) shared by all
//! threads, then tiles of [`MC`] rows of `A` are decoded panel by panel into a
//! per-thread scratch and multiplied into their `C` tile with the f32 GEMM, `β = 1`
//! after the first panel. Tiles of `C` are spread over the cores; their sizes depend
//! only on the shapes, so results do not depend on the thread count.
//!
//! # Accuracy against the oracle
//!
//! The oracle sums exact f64 products in f64 and rounds once. Here every decoded
//! element is exact in f32 (an fp8/fp6/fp4 value times a power-of-two MX scale, or
//! times an E4M3 NVFP4 scale, has ≤ 8 significant bits) unless it leaves the f32
//! normal range; per-tensor scales are factored out of the sum (`C = ls·rs·Σ codes`)
//! and applied in f64. Products of two decoded elements are exact in f32, so the only
//! difference is the f32 accumulation: `|C − oracle| ≤ (k + 2)·2⁻²⁴·Σₚ|aₚ·bₚ|`
//! (plus the final rounding), and the result is bit-identical to the oracle whenever
//! the partial sums are representable (e.g. small integers times powers of two).

use super::scaled_quant::{clean_upper, decode_scale, quant_scale, quantize};
use faer::linalg::matmul::matmul;
use faer::{Accum, Par};
use rayon::prelude::*;
use rlx_ir::{DType, Op, ScaleLayout, ScaledFormat, TensorData};
use std::cell::RefCell;

/// K columns decoded per panel.
pub(crate) const KC: usize = 256;
/// Rows of `B` per decoded panel (with [`KC`]: a 1 MiB f32 panel).
pub(crate) const NC: usize = 1024;
/// Rows of `A` per task.
pub(crate) const MC: usize = 128;
/// Columns of `C` per task when `A` has too few rows to keep every core busy.
const NT_NARROW: usize = 128;

thread_local! {
    static A_PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `Some(result bytes)` for the scaled ops this module handles; `None` for every other
/// op and for malformed operands (the oracle then runs and reports the problem).
pub(crate) fn eval(op: &Op, ins: &[&TensorData], out_dims: &[usize]) -> Option<Vec<u8>> {
    match op {
        Op::ScaledQuantScale {
            format,
            scale_layout,
        } if ins.len() == 1 => quant_scale(*format, *scale_layout, ins[0]),
        Op::ScaledQuantize {
            format,
            scale_layout,
        } if ins.len() == 2 => quantize(*format, *scale_layout, ins[0], ins[1]),
        Op::ScaledMatMul {
            lhs_format,
            rhs_format,
            scale_layout,
            has_bias,
        } if ins.len() == 4 + *has_bias as usize => {
            let out = scaled_matmul(
                [*lhs_format, *rhs_format],
                *scale_layout,
                [ins[0], ins[1]],
                [ins[2], ins[3]],
                ins.get(4).copied(),
            )?;
            (out_dims == [ins[0].dims[0], ins[1].dims[0]])
                .then(|| out.iter().flat_map(|v| v.to_le_bytes()).collect())
        }
        _ => None,
    }
}

/// One operand: codes `[rows, k]`, the code table, and its scales decoded to f32.
struct Operand<'a> {
    codes: &'a [u8],
    k: usize,
    lut: [f32; 256],
    /// Per-block scales (`rows × k/block`), or `None` for per-tensor (factored out).
    scales: Option<Vec<f32>>,
    block: usize,
}

impl<'a> Operand<'a> {
    fn new(
        format: ScaledFormat,
        layout: ScaleLayout,
        q: &'a TensorData,
        s: &TensorData,
    ) -> Option<Operand<'a>> {
        if q.dtype != DType::U8 || q.dims.len() != 2 {
            return None;
        }
        let (rows, k) = (q.dims[0], q.dims[1]);
        let lut = std::array::from_fn(|c| format.decode(c as u8));
        let (scales, block) = match layout.block() {
            None => (None, k.max(1)),
            Some(b) => {
                let b = b as usize;
                if s.dtype != DType::U8 || b == 0 || k % b != 0 || s.numel() != rows * (k / b) {
                    return None;
                }
                // An E8M0 or E4M3 scale is exact in f32 (2^−127 is an f32 subnormal).
                let table: [f32; 256] =
                    std::array::from_fn(|c| decode_scale(layout, c as f64) as f32);
                (
                    Some(s.bytes.iter().map(|&c| table[c as usize]).collect()),
                    b,
                )
            }
        };
        Some(Operand {
            codes: &q.bytes,
            k,
            lut,
            scales,
            block,
        })
    }

    /// Decode rows `r0..r0+rows`, columns `k0..k0+kb` into `dst` (row-major, `kb` wide).
    fn decode(&self, r0: usize, rows: usize, k0: usize, kb: usize, dst: &mut [f32]) {
        let per_row = self.k / self.block;
        for r in 0..rows {
            let src = &self.codes[(r0 + r) * self.k + k0..][..kb];
            let out = &mut dst[r * kb..][..kb];
            match &self.scales {
                None => {
                    for (o, &c) in out.iter_mut().zip(src) {
                        *o = self.lut[c as usize];
                    }
                }
                Some(s) => {
                    let srow = &s[(r0 + r) * per_row..][..per_row];
                    let mut p = 0;
                    while p < kb {
                        let kk = k0 + p;
                        let end = (kk / self.block + 1) * self.block - k0;
                        let end = end.min(kb);
                        let sc = srow[kk / self.block];
                        for (o, &c) in out[p..end].iter_mut().zip(&src[p..end]) {
                            *o = self.lut[c as usize] * sc;
                        }
                        p = end;
                    }
                }
            }
        }
    }

    /// The per-tensor scale (f64), if the layout is per-tensor.
    fn tensor_scale(s: &TensorData, layout: ScaleLayout) -> Option<f64> {
        match layout {
            ScaleLayout::PerTensor if s.numel() == 1 && s.dtype.is_float() => {
                Some(s.to_f64_vec()[0])
            }
            ScaleLayout::PerTensor => None,
            _ => Some(1.0),
        }
    }
}

/// A raw pointer to `C` shared by the tasks (each writes a disjoint tile).
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: a CPtr is C's base in `accumulate`, whose `&mut [f32]` outlives the blocking
// parallel loops; each task writes only its own tile of C (disjoint rows × columns),
// so moving the pointer to another thread creates no overlapping access.
unsafe impl Send for CPtr {}
// SAFETY: as for Send: tasks sharing the pointer write disjoint tiles.
unsafe impl Sync for CPtr {}

impl CPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// `A·Bᵀ (+ bias)` as f32 `[m, n]` (see the module docs).
fn scaled_matmul(
    formats: [ScaledFormat; 2],
    layout: ScaleLayout,
    q: [&TensorData; 2],
    s: [&TensorData; 2],
    bias: Option<&TensorData>,
) -> Option<Vec<f32>> {
    let a = Operand::new(formats[0], layout, q[0], s[0])?;
    let b = Operand::new(formats[1], layout, q[1], s[1])?;
    let (m, n, k) = (q[0].dims[0], q[1].dims[0], a.k);
    if b.k != k {
        return None;
    }
    let sa = Operand::tensor_scale(s[0], layout)?;
    let sb = Operand::tensor_scale(s[1], layout)?;
    let bias = match bias {
        Some(t) if t.dtype.is_float() && t.dims == [n] => Some(t.to_f64_vec()),
        Some(_) => return None,
        None => None,
    };
    let mut c = vec![0f32; m * n];
    if m > 0 && n > 0 && k > 0 {
        accumulate(&a, &b, m, n, k, &mut c);
    }
    // Per-tensor scales and the bias are applied in f64 (as the oracle adds the bias to
    // its f64 sum), then rounded once.
    let sab = sa * sb;
    if sab != 1.0 || bias.is_some() {
        c.par_chunks_mut(n.max(1)).for_each(|row| {
            clean_upper();
            for (j, v) in row.iter_mut().enumerate() {
                let x = *v as f64 * sab;
                *v = bias.as_ref().map_or(x, |b| x + b[j]) as f32;
            }
        });
    }
    Some(c)
}

/// `C = A·Bᵀ` in f32, panel by panel.
fn accumulate(a: &Operand<'_>, b: &Operand<'_>, m: usize, n: usize, k: usize, c: &mut [f32]) {
    let m_tiles = m.div_ceil(MC);
    let mut b_panel = vec![0f32; NC.min(n) * KC.min(k)];
    let cp = CPtr(c.as_mut_ptr());
    for n0 in (0..n).step_by(NC) {
        let nb = NC.min(n - n0);
        // Few rows of A: split C's columns too, so every core gets work.
        let nt = if m_tiles >= 4 { nb } else { NT_NARROW.min(nb) };
        let n_tiles = nb.div_ceil(nt);
        for k0 in (0..k).step_by(KC) {
            let kb = KC.min(k - k0);
            let bp = &mut b_panel[..nb * kb];
            bp.par_chunks_mut(16 * kb)
                .enumerate()
                .for_each(|(i, rows)| {
                    clean_upper();
                    b.decode(n0 + 16 * i, rows.len() / kb, k0, kb, rows)
                });
            let bp = &*bp;
            (0..m_tiles * n_tiles).into_par_iter().for_each(|t| {
                let (mt, ntile) = (t / n_tiles, t % n_tiles);
                let (i0, j0) = (mt * MC, ntile * nt);
                let (mb, nw) = (MC.min(m - i0), nt.min(nb - j0));
                clean_upper();
                A_PANEL.with(|ap| {
                    let mut ap = ap.borrow_mut();
                    if ap.len() < mb * kb {
                        ap.resize(MC * KC, 0.0);
                    }
                    a.decode(i0, mb, k0, kb, &mut ap[..mb * kb]);
                    // SAFETY: the A and B views lie inside their scratch panels; the C
                    // view is this task's tile (rows i0..i0+mb, columns n0+j0..+nw of
                    // the m × n row-major C), disjoint from every other task's tile.
                    unsafe {
                        let am = faer::MatRef::from_raw_parts(ap.as_ptr(), mb, kb, kb as isize, 1);
                        let bm = faer::MatRef::from_raw_parts(
                            bp.as_ptr().add(j0 * kb),
                            kb,
                            nw,
                            1,
                            kb as isize,
                        );
                        let cm = faer::MatMut::from_raw_parts_mut(
                            cp.get().add(i0 * n + n0 + j0),
                            mb,
                            nw,
                            n as isize,
                            1,
                        );
                        let accum = if k0 == 0 { Accum::Replace } else { Accum::Add };
                        matmul(cm, accum, am, bm, 1.0f32, Par::Seq);
                    }
                    clean_upper();
                });
            });
        }
    }
}
