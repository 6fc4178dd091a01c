//! The scaled matmul's panel paths (see `scaled.rs`): both operands decoded block by
//! block into bf16 panels for a bf16 unit's GEMM ([`accumulate_bf16`]), or into f32
//! panels for faer's ([`accumulate`], the portable path).

use super::{CPtr, Operand};
use crate::exec::scaled_quant::clean_upper;
use crate::gemm::lowp::{LowpPath, bf16, gemm_half_with};
use crate::gemm::{MatMut, MatRef};
use faer::linalg::matmul::matmul;
use faer::{Accum, Par};
use rayon::prelude::*;
use std::cell::RefCell;

/// K columns decoded per panel.
const KC: usize = 256;
/// Rows of `B` per decoded panel (with [`KC`]: a 1 MiB f32 panel).
const NC: usize = 1024;
/// Rows of `A` per task.
const MC: usize = 128;
/// Columns of `C` per task when `A` has too few rows to keep every core busy.
const NT_NARROW: usize = 128;

thread_local! {
    static A_PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The bf16 panels of [`accumulate_bf16`], kept between calls on the calling thread.
    static BF16_PANELS: RefCell<Vec<bf16>> = const { RefCell::new(Vec::new()) };
}

/// The bf16 GEMM path the panels go through, if it beats decoding to f32 for faer: a
/// hardware bf16 unit, or rlx's own f32 kernel widening bf16 while it packs
/// (`avx512f32`, the default on Intel CPUs without AMX). Only the cast path (no AVX-512)
/// is left to the f32 panels.
pub(super) fn bf16_gemm_path() -> Option<LowpPath> {
    let p = LowpPath::default_for::<bf16>();
    (p != LowpPath::CastF32).then_some(p)
}

/// Rows of `A` decoded per bf16 block (with [`KC_BF16`]: an 8 MiB panel at most).
const MC_BF16: usize = 2048;
/// K columns per bf16 panel (one panel up to K = 2048: each further panel is one more
/// pass over C, measured ~10% of a 1024² product at 512).
const KC_BF16: usize = 2048;

/// `C = A·Bᵀ` on the bf16 unit `path`: per block of rows of A, columns of B and K, both
/// panels decoded to bf16 in parallel, then one bf16 GEMM on every thread (f32
/// accumulation into C, added after the first K panel).
pub(super) fn accumulate_bf16(
    path: LowpPath,
    a: &Operand<'_>,
    b: &Operand<'_>,
    (m, n, k): (usize, usize, usize),
    c: &mut [f32],
) {
    let kcap = KC_BF16.min(k);
    let (alen, blen) = (MC_BF16.min(m) * kcap, NC.min(n) * kcap);
    // The panels are reused from call to call (a fresh 2 MiB zeroed Vec per panel cost
    // its page faults on every call) and start on a cache line: the bf16 GEMM then reads
    // A's tiles in place rather than packing them (it needs line-aligned rows). A thread
    // that re-enters here (work stolen while it waits) takes fresh panels.
    let mut run = |buf: &mut Vec<bf16>| {
        let need = alen + blen + 32;
        if buf.len() < need {
            *buf = vec![bf16::ZERO; need];
        }
        let off = buf.as_ptr().align_offset(64).min(32);
        let (ap, bp) = buf[off..off + alen + blen].split_at_mut(alen);
        accumulate_bf16_in(path, a, b, (m, n, k), c, ap, bp);
    };
    BF16_PANELS.with(|p| match p.try_borrow_mut() {
        Ok(mut buf) => run(&mut buf),
        Err(_) => run(&mut Vec::new()),
    });
}

/// [`accumulate_bf16`] with its panels `ap` (`MC_BF16.min(m) · KC_BF16.min(k)`) and `bp`
/// (`NC.min(n) · KC_BF16.min(k)`), whose contents it overwrites before reading.
fn accumulate_bf16_in(
    path: LowpPath,
    a: &Operand<'_>,
    b: &Operand<'_>,
    (m, n, k): (usize, usize, usize),
    c: &mut [f32],
    ap: &mut [bf16],
    bp: &mut [bf16],
) {
    let threads = rayon::current_num_threads();
    for n0 in (0..n).step_by(NC) {
        let nb = NC.min(n - n0);
        for m0 in (0..m).step_by(MC_BF16) {
            let mb = MC_BF16.min(m - m0);
            for k0 in (0..k).step_by(KC_BF16) {
                let kb = KC_BF16.min(k - k0);
                let (apk, bpk) = (&mut ap[..mb * kb], &mut bp[..nb * kb]);
                apk.par_chunks_mut(16 * kb)
                    .enumerate()
                    .for_each(|(i, rows)| {
                        a.decode_bf16(m0 + 16 * i, rows.len() / kb, k0, kb, rows)
                    });
                bpk.par_chunks_mut(16 * kb)
                    .enumerate()
                    .for_each(|(i, rows)| {
                        b.decode_bf16(n0 + 16 * i, rows.len() / kb, k0, kb, rows)
                    });
                let am = MatRef::row_major(&*apk, mb, kb);
                // Bᵀ: element (p, j) of the K × nb view is row j, column p of the panel.
                let bm = MatRef {
                    data: &*bpk,
                    rows: kb,
                    cols: nb,
                    row_stride: 1,
                    col_stride: kb as isize,
                    offset: 0,
                };
                let cm = MatMut {
                    data: &mut *c,
                    rows: mb,
                    cols: nb,
                    row_stride: n as isize,
                    col_stride: 1,
                    offset: m0 * n + n0,
                };
                gemm_half_with(path, am, bm, cm, k0 > 0, threads);
            }
        }
    }
}

/// `C = A·Bᵀ` in f32, panel by panel.
pub(super) fn accumulate(
    a: &Operand<'_>,
    b: &Operand<'_>,
    m: usize,
    n: usize,
    k: usize,
    c: &mut [f32],
) {
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
