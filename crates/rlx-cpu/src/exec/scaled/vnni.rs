//! The scaled matmul on the integer dot-product unit (AVX512_VNNI `vpdpbusd`), for
//! formats whose every code is a small integer times one power of two.
//!
//! An fp4 E2M1 value times 2 is an integer in `[-12, 12]`, an fp6 E2M3 value times 8 one
//! in `[-60, 60]`: both fit a signed byte exactly. Within a scale block (MX: 32 sums,
//! NVFP4: 16) the products of such bytes sum exactly in i32, so a block costs one
//! `vpdpbusd` per four sums of sixteen outputs — 64 multiply-adds an instruction against
//! an f32 FMA's 16, at the same issue rate — and then one conversion to f32 (exact: the
//! block's sum is below 2²⁴), one multiply of the two operands' block scales (exact:
//! E8M0 and E4M3 scales have at most 4 significant bits) and one fused multiply-add into
//! the f32 accumulator, the only rounding per block. Formats with wider integers (fp6
//! E3M2, fp8) take the f32 kernel reading their codes (`codes.rs`).
//!
//! `vpdpbusd` multiplies unsigned bytes by signed ones: B's bytes are stored with 128
//! added (`x ^ 0x80`), and each block's i32 sums start from `−128 · Σ a` over the block's
//! sums of A's row, computed while A is packed, so the bias cancels exactly.
//!
//! # Accuracy against the oracle
//!
//! Every block's contribution `sa·sb·Σ aₚbₚ` is exact before its one rounding into the
//! f32 accumulator, so the error is at most `⌈k / block⌉ · 2⁻²⁴ · Σₚ|aₚ·bₚ|` — within
//! the bound `scaled.rs` states for its f32 and bf16 paths (which round once per sum),
//! and bit-identical to the oracle wherever the partial sums are representable. The plan
//! ([`plan`]) refuses operands whose block-scale products would leave the f32 normal
//! range or need more than 24 significant bits; those keep the other paths.
//!
//! # Layout and blocking
//!
//! A is packed in panels of [`MR`] rows and B in strips of [`NR`] columns, each as
//! `[block][quad of sums][row or column][4 bytes]`, padded with zeros to whole quads per
//! block; per panel and block, the rows' start sums and scales (`sa · 2⁻ˢʰⁱᶠᵗ`), per strip
//! and block the columns' scales. The micro-kernel keeps a `4 × 48` tile in 12 i32 and 12
//! f32 registers. K is walked in chunks of whole blocks of about [`KC_BYTES`] sums, so
//! that a strip's chunk (24 KiB) stays in L1 while the panels of up to [`MC`] rows stream
//! past it from L2; C is overwritten by the first chunk and added to by the others.
//! Threads take pieces of rows × strips whose bounds depend only on the shapes, so the
//! result does not depend on the thread count.

use super::{CPtr, Operand};
use rayon::prelude::*;
use std::cell::RefCell;
use std::sync::OnceLock;

/// Rows of A per packed panel (the micro-kernel's tile height).
pub(super) const MR: usize = 4;
/// Vectors of 16 columns per tile.
const NV: usize = 3;
/// Columns of B per packed strip (the tile width).
pub(super) const NR: usize = 16 * NV;
/// Sums per K chunk (rounded to whole blocks): `NR · KC_BYTES` bytes of a strip stay in L1.
const KC_BYTES: usize = 512;
/// Rows of A per piece of work: `MC · KC_BYTES` bytes of panels stay in L2.
const MC: usize = 1024;
/// The block of sums used for per-tensor scales (no blocks of their own): its sums stay
/// below 2²⁴ for any bytes (`256 · 127² < 2²⁴`).
const PER_TENSOR_BLOCK: usize = 256;

thread_local! {
    /// The packed operands, kept between calls on the calling thread (fresh buffers cost
    /// their page faults on every call).
    static PACKED: RefCell<(Packed, Packed)> = RefCell::new(Default::default());
}

/// Whether this CPU runs the kernel (AVX-512 F/BW and AVX512_VNNI) and `RLX_SCALED_INT`
/// does not turn it off (`0`). Decided once per process.
pub(super) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let off = std::env::var("RLX_SCALED_INT").is_ok_and(|v| v.trim() == "0");
        !off && available()
    })
}

/// Whether this CPU has the instructions the kernel needs.
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A format's codes as signed bytes: code `c` decodes to `bytes[c] · unit`.
#[derive(Clone)]
pub(super) struct IntCodes {
    bytes: [i8; 256],
    /// `2⁻ˢʰⁱᶠᵗ`, a power of two.
    unit: f32,
    /// The largest `|bytes[c]|`.
    max: i32,
}

/// The table of `lut` as bytes times the smallest power of two that makes every entry an
/// integer of magnitude at most 127; `None` if there is none (a non-finite entry, or
/// values too wide, as fp8's).
pub(super) fn int_codes(lut: &[f32; 256]) -> Option<IntCodes> {
    (0..=7).find_map(|shift| {
        let up = (1u32 << shift) as f32;
        let mut bytes = [0i8; 256];
        let mut max = 0;
        for (b, &v) in bytes.iter_mut().zip(lut) {
            let x = v * up;
            if !x.is_finite() || x.fract() != 0.0 || x.abs() > 127.0 {
                return None;
            }
            *b = x as i8;
            max = max.max((x as i32).abs());
        }
        Some(IntCodes {
            bytes,
            unit: 1.0 / up,
            max,
        })
    })
}

/// How a product runs on the kernel: both operands' byte tables and the block of sums.
pub(super) struct IntPlan {
    a: IntCodes,
    b: IntCodes,
    /// Sums per block (the layout's block, or [`PER_TENSOR_BLOCK`]).
    block: usize,
}

impl IntPlan {
    /// Quads of sums per block (a partial quad padded with zeros).
    fn quads(&self) -> usize {
        self.block.div_ceil(4)
    }
}

/// The plan for `A·Bᵀ` if the kernel runs here (see [`enabled`]) and computes it exactly
/// up to one rounding per block: both formats are byte-exact ([`int_codes`]), a block's
/// sum stays below 2²⁴, and every product of an A and a B block scale (times the tables'
/// units) is a normal f32 with at most 24 significant bits and room for a block's sum.
pub(super) fn plan(a: &Operand<'_>, b: &Operand<'_>) -> Option<IntPlan> {
    if !enabled() {
        return None;
    }
    plan_here(a, b)
}

/// [`plan`] without the CPU check (the tests compare the plan on any machine).
pub(super) fn plan_here(a: &Operand<'_>, b: &Operand<'_>) -> Option<IntPlan> {
    let (ca, cb) = (int_codes(&a.lut)?, int_codes(&b.lut)?);
    let block = match (&a.scales, &b.scales) {
        (None, None) => PER_TENSOR_BLOCK,
        (Some(_), Some(_)) if a.block == b.block => a.block,
        _ => return None,
    };
    let quads = block.div_ceil(4) as u64;
    if 4 * quads * (ca.max as u64) * (cb.max as u64) >= 1 << 24 {
        return None;
    }
    let (ra, rb) = (scale_range(a, ca.unit)?, scale_range(b, cb.unit)?);
    if ra.bits + rb.bits > 24 {
        return None;
    }
    if let (Some((lo_a, hi_a)), Some((lo_b, hi_b))) = (ra.nonzero, rb.nonzero) {
        let (lo, hi) = (lo_a as f64 * lo_b as f64, hi_a as f64 * hi_b as f64);
        // A block's sum is below 2²⁴: 2¹⁰⁰ leaves the accumulator 2⁴ of headroom.
        if lo < f32::MIN_POSITIVE as f64 || hi > 2f64.powi(100) {
            return None;
        }
    }
    Some(IntPlan {
        a: ca,
        b: cb,
        block,
    })
}

/// The scales an operand's blocks multiply its bytes by.
struct ScaleRange {
    /// Smallest and largest nonzero magnitude; `None` if every scale is zero.
    nonzero: Option<(f32, f32)>,
    /// The most significant bits of any of them.
    bits: u32,
}

/// The range of `op`'s block scales ([`super::Scales::possible`]) times `unit` (just
/// `unit` for per-tensor scales); `None` if one is not finite or a nonzero one is not a
/// normal f32. (For a positive float the integer order of the bits is the numeric order.)
fn scale_range(op: &Operand<'_>, unit: f32) -> Option<ScaleRange> {
    let (mut lo, mut hi, mut mantissas) = (u32::MAX, 0u32, 0u32);
    let mut take = |s: f32| {
        let m = s.to_bits() & 0x7fff_ffff;
        lo = lo.min(if m == 0 { u32::MAX } else { m });
        hi = hi.max(m);
        mantissas |= m;
    };
    match &op.scales {
        None => take(1.0),
        Some(s) => s.possible().iter().for_each(|&v| take(v)),
    }
    if hi >= f32::INFINITY.to_bits() {
        return None;
    }
    if hi == 0 {
        return Some(ScaleRange {
            nonzero: None,
            bits: 0,
        });
    }
    let (lo, hi) = (f32::from_bits(lo) * unit, f32::from_bits(hi) * unit);
    if !lo.is_normal() || !hi.is_normal() {
        return None;
    }
    // Scaling by the power of two `unit` keeps normal numbers' mantissas.
    let implicit = (mantissas & 0x7f_ffff) | 0x80_0000;
    Some(ScaleRange {
        nonzero: Some((lo, hi)),
        bits: 24 - implicit.trailing_zeros(),
    })
}

/// An operand packed for the kernel: groups (panels of A, strips of B) of `[block][quad]
/// [row][4 bytes]`, and per group and block each row's start sum (A) and scale.
#[derive(Default)]
struct Packed {
    bytes: Vec<u8>,
    start: Vec<i32>,
    scale: Vec<f32>,
}

/// The geometry of a packing: `groups` of `width` rows, `blocks` blocks of `quads` quads.
#[derive(Clone, Copy)]
struct Geometry {
    width: usize,
    groups: usize,
    blocks: usize,
    quads: usize,
}

impl Geometry {
    /// Bytes of one group's block.
    fn block_bytes(self) -> usize {
        self.quads * self.width * 4
    }
    /// Bytes of one group.
    fn group_bytes(self) -> usize {
        self.blocks * self.block_bytes()
    }
}

impl Packed {
    /// Pack rows `0..rows` of `op` in groups of `g.width` with the byte table `codes`;
    /// `biased` adds 128 to every byte (B), else the start sums are computed (A);
    /// `vector` packs rows with [`pack_rows_vector`] (where [`vector_packing`] holds).
    #[allow(clippy::too_many_arguments)]
    fn pack(
        &mut self,
        op: &Operand<'_>,
        codes: &IntCodes,
        rows: usize,
        g: Geometry,
        block: usize,
        biased: bool,
        vector: bool,
    ) {
        let per_group = g.group_bytes();
        let meta = g.blocks * g.width;
        resize(&mut self.bytes, g.groups * per_group);
        resize(&mut self.start, g.groups * meta);
        resize(&mut self.scale, g.groups * meta);
        let bytes = &mut self.bytes[..g.groups * per_group];
        let start = &mut self.start[..g.groups * meta];
        let scale = &mut self.scale[..g.groups * meta];
        bytes
            .par_chunks_mut(per_group)
            .zip(start.par_chunks_mut(meta))
            .zip(scale.par_chunks_mut(meta))
            .enumerate()
            .for_each(|(gi, ((bytes, start), scale))| {
                let r0 = gi * g.width;
                let valid = g.width.min(rows - r0);
                pack_group(
                    op, codes, r0, valid, g, block, biased, vector, bytes, start, scale,
                );
            });
    }
}

/// `v` grown to at least `len` elements (contents left as they are: packing overwrites).
fn resize<T: Default + Clone>(v: &mut Vec<T>, len: usize) {
    if v.len() < len {
        v.resize(len, T::default());
    }
}

/// One group: rows `r0..r0 + valid` of `op` (the others, up to `g.width`, zero).
#[allow(clippy::too_many_arguments)]
fn pack_group(
    op: &Operand<'_>,
    codes: &IntCodes,
    r0: usize,
    valid: usize,
    g: Geometry,
    block: usize,
    biased: bool,
    vector: bool,
    bytes: &mut [u8],
    start: &mut [i32],
    scale: &mut [f32],
) {
    let flip = if biased { 0x80 } else { 0 };
    start.fill(0);
    scale.fill(0.0);
    let k = op.k;
    let per_row = op.scales.as_ref().map(|_| k / op.block);
    if valid < g.width || !vector {
        bytes.fill(flip);
    }
    let mut set = |r: usize, blk: usize, sum: i32| {
        let m = blk * g.width + r;
        start[m] = -128 * sum;
        scale[m] = match (&op.scales, per_row) {
            (Some(s), Some(pr)) => s.get((r0 + r) * pr + blk) * codes.unit,
            _ => codes.unit,
        };
    };
    if !vector {
        let mut sums = vec![0i32; g.blocks];
        for r in 0..valid {
            sums.fill(0);
            let src = &op.codes[(r0 + r) * k..][..k];
            pack_row_scalar(src, codes, g, block, r, flip, bytes, &mut sums);
            for (blk, &sum) in sums.iter().enumerate() {
                set(r, blk, sum);
            }
        }
        return;
    }
    ROWS.with(|buf| {
        let mut buf = buf.borrow_mut();
        for r4 in (0..valid).step_by(4) {
            let count = (valid - r4).min(4);
            let rows: [&[u8]; 4] =
                std::array::from_fn(|i| &op.codes[(r0 + r4 + i.min(count - 1)) * k..][..k]);
            // SAFETY: `vector_packing` checked the instructions, the table size and the
            // whole quads; the group's width is a multiple of 4 (MR, NR).
            let stride =
                unsafe { pack_rows_vector(rows, count, codes, g, r4, flip, &mut buf, bytes) };
            for i in 0..count {
                let quad_sums = &buf.1[i * stride / 4..][..g.blocks * g.quads];
                for (blk, q) in quad_sums.chunks(g.quads).enumerate() {
                    set(r4 + i, blk, q.iter().sum());
                }
            }
        }
    });
}

thread_local! {
    /// Four rows' bytes (padded to whole vectors) and quad sums, for [`pack_rows_vector`].
    static ROWS: RefCell<(Vec<u8>, Vec<i32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Whether [`pack_rows_vector`] packs `op`'s rows: AVX512_VBMI present (besides the
/// kernel's instructions), a table of at most 64 codes, and blocks of whole quads (so
/// that a row's blocks lie back to back in the padded row).
fn vector_packing(op: &Operand<'_>, block: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static VBMI: OnceLock<bool> = OnceLock::new();
        *VBMI.get_or_init(|| available() && is_x86_feature_detected!("avx512vbmi"))
            && op.codes_used <= 64
            && block.is_multiple_of(4)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (op, block);
        false
    }
}

/// Row `r` of a group from its codes `src`, one byte at a time, adding each block's
/// bytes into `sums` (one per block).
#[allow(clippy::too_many_arguments)]
fn pack_row_scalar(
    src: &[u8],
    codes: &IntCodes,
    g: Geometry,
    block: usize,
    r: usize,
    flip: u8,
    bytes: &mut [u8],
    sums: &mut [i32],
) {
    for (blk, sum) in sums.iter_mut().enumerate() {
        let k0 = blk * block;
        let run = &src[k0..(k0 + block).min(src.len())];
        let out = &mut bytes[blk * g.block_bytes()..][..g.block_bytes()];
        for (q, quad) in run.chunks(4).enumerate() {
            let at = (q * g.width + r) * 4;
            for (o, &c) in out[at..at + quad.len()].iter_mut().zip(quad) {
                let v = codes.bytes[c as usize];
                *sum += v as i32;
                *o = v as u8 ^ flip;
            }
        }
    }
}

/// Rows `r4..r4 + count` of a group (`count ≤ 4`; `rows` holds their codes, then
/// repeats the last) in two steps: each row's codes looked up 64 at a time in the table
/// held in a register (`vpermb`), with the quads' sums from `vpdpbusd` against ones,
/// into `buf` (rows `stride` bytes apart, the rows past `count` as padding); then the
/// four rows' quads interleaved 16 at a time (`vpunpck` of dwords and qwords) and stored
/// 16 bytes (a quad of the four rows) at a time. Returns `stride`.
///
/// # Safety
/// AVX-512 F/BW, AVX512_VNNI and AVX512_VBMI present; `codes.bytes[c]` depends only on
/// `c % 64`; the group's blocks are whole quads; `g.width` and `r4` multiples of 4.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_rows_vector(
    rows: [&[u8]; 4],
    count: usize,
    codes: &IntCodes,
    g: Geometry,
    r4: usize,
    flip: u8,
    buf: &mut (Vec<u8>, Vec<i32>),
    bytes: &mut [u8],
) -> usize {
    use std::arch::x86_64::*;
    assert!(g.width.is_multiple_of(4) && r4.is_multiple_of(4) && r4 + 4 <= g.width);
    let quads = g.blocks * g.quads;
    let stride = (quads * 4).next_multiple_of(64);
    assert!(bytes.len() >= quads * g.width * 4);
    let (rbuf, sums) = buf;
    resize(rbuf, 4 * stride);
    resize(sums, stride);
    let mut table = [0u8; 64];
    for (t, &b) in table.iter_mut().zip(&codes.bytes) {
        *t = b as u8;
    }
    // SAFETY: loads stay inside each row's codes (masked) and the 64-byte table; stores
    // inside the buffers (4 rows of `stride` bytes, `stride` quad sums) and, below,
    // inside the group's bytes (asserted).
    unsafe {
        let table = _mm512_loadu_si512(table.as_ptr() as *const __m512i);
        let ones = _mm512_set1_epi8(1);
        let flip = _mm512_set1_epi8(flip as i8);
        for (i, src) in rows.iter().enumerate() {
            for at in (0..stride).step_by(64) {
                let take = if i < count {
                    src.len().saturating_sub(at).min(64)
                } else {
                    0
                };
                let mask: __mmask64 = if take == 64 { !0 } else { (1u64 << take) - 1 };
                let c =
                    _mm512_maskz_loadu_epi8(mask, src.as_ptr().add(at.min(src.len())) as *const i8);
                // Codes past the row's end (and padding rows) read as 0 here and are
                // zeroed after the lookup.
                let v = _mm512_maskz_mov_epi8(mask, _mm512_permutexvar_epi8(c, table));
                let q = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, v);
                _mm512_storeu_si512(
                    sums.as_mut_ptr().add((i * stride + at) / 4) as *mut __m512i,
                    q,
                );
                _mm512_storeu_si512(
                    rbuf.as_mut_ptr().add(i * stride + at) as *mut __m512i,
                    _mm512_xor_si512(v, flip),
                );
            }
        }
        let mut quartet = [0u8; 256];
        for c in (0..quads).step_by(16) {
            let row = |i: usize| {
                _mm512_loadu_si512(rbuf.as_ptr().add(i * stride + 4 * c) as *const __m512i)
            };
            let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
            // Per 128-bit lane L: t0 = (row 0, row 1) of quads 4L, 4L+1; t1 of 4L+2, 4L+3.
            let t0 = _mm512_unpacklo_epi32(r0, r1);
            let t1 = _mm512_unpackhi_epi32(r0, r1);
            let t2 = _mm512_unpacklo_epi32(r2, r3);
            let t3 = _mm512_unpackhi_epi32(r2, r3);
            // u_j's lane L: quad 4L + j of the four rows.
            let u = [
                _mm512_unpacklo_epi64(t0, t2),
                _mm512_unpackhi_epi64(t0, t2),
                _mm512_unpacklo_epi64(t1, t3),
                _mm512_unpackhi_epi64(t1, t3),
            ];
            for (j, v) in u.iter().enumerate() {
                _mm512_storeu_si512(quartet.as_mut_ptr().add(64 * j) as *mut __m512i, *v);
            }
            for lane in 0..4 {
                for (j, _) in u.iter().enumerate() {
                    let quad = c + 4 * lane + j;
                    if quad < quads {
                        let at = (quad * g.width + r4) * 4;
                        bytes[at..at + 16].copy_from_slice(&quartet[64 * j + 16 * lane..][..16]);
                    }
                }
            }
        }
    }
    stride
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_rows_vector(
    _: [&[u8]; 4],
    _: usize,
    _: &IntCodes,
    _: Geometry,
    _: usize,
    _: u8,
    _: &mut (Vec<u8>, Vec<i32>),
    _: &mut [u8],
) -> usize {
    unreachable!("vector packing is chosen only on x86_64");
}

/// `C = A·Bᵀ` (overwriting `c`, `[m, n]` row-major) by the plan `p`; `m, n, k > 0`.
pub(super) fn accumulate(
    p: &IntPlan,
    a: &Operand<'_>,
    b: &Operand<'_>,
    mnk: (usize, usize, usize),
    c: &mut [f32],
) {
    accumulate_packing(p, a, b, mnk, c, true);
}

/// [`accumulate`], its rows packed one byte at a time unless `vector` (and
/// [`vector_packing`]).
fn accumulate_packing(
    p: &IntPlan,
    a: &Operand<'_>,
    b: &Operand<'_>,
    (m, n, k): (usize, usize, usize),
    c: &mut [f32],
    vector: bool,
) {
    assert!(m > 0 && n > 0 && k > 0 && c.len() == m * n && a.k == k && b.k == k);
    let blocks = k.div_ceil(p.block);
    let quads = p.quads();
    let ga = Geometry {
        width: MR,
        groups: m.div_ceil(MR),
        blocks,
        quads,
    };
    let gb = Geometry {
        width: NR,
        groups: n.div_ceil(NR),
        blocks,
        quads,
    };
    let mut run = |packs: &mut (Packed, Packed)| {
        let (pa, pb) = packs;
        pa.pack(
            a,
            &p.a,
            m,
            ga,
            p.block,
            false,
            vector && vector_packing(a, p.block),
        );
        pb.pack(
            b,
            &p.b,
            n,
            gb,
            p.block,
            true,
            vector && vector_packing(b, p.block),
        );
        multiply(pa, pb, ga, gb, (m, n), c);
    };
    PACKED.with(|cell| match cell.try_borrow_mut() {
        Ok(mut packs) => run(&mut packs),
        // A thread that re-enters here (work stolen while it waits) packs afresh.
        Err(_) => run(&mut Default::default()),
    });
}

/// The tiles of C from the packed operands, in pieces over the threads.
fn multiply(
    pa: &Packed,
    pb: &Packed,
    ga: Geometry,
    gb: Geometry,
    (m, n): (usize, usize),
    c: &mut [f32],
) {
    let blocks_per_chunk = (KC_BYTES / (4 * ga.quads)).max(1);
    let (row_pieces, col_pieces) = pieces(ga.groups, gb.groups, rayon::current_num_threads());
    let cp = CPtr(c.as_mut_ptr());
    (0..row_pieces * col_pieces)
        .into_par_iter()
        .for_each(|piece| {
            let (rp, sp) = (piece / col_pieces, piece % col_pieces);
            let panels = rp * ga.groups / row_pieces..(rp + 1) * ga.groups / row_pieces;
            let strips = sp * gb.groups / col_pieces..(sp + 1) * gb.groups / col_pieces;
            for b0 in (0..ga.blocks).step_by(blocks_per_chunk) {
                let nb = blocks_per_chunk.min(ga.blocks - b0);
                for s in strips.clone() {
                    for pnl in panels.clone() {
                        let (i0, j0) = (pnl * MR, s * NR);
                        let tile = Tile {
                            a: &pa.bytes[pnl * ga.group_bytes() + b0 * ga.block_bytes()..]
                                [..nb * ga.block_bytes()],
                            a_start: &pa.start[(pnl * ga.blocks + b0) * MR..][..nb * MR],
                            a_scale: &pa.scale[(pnl * ga.blocks + b0) * MR..][..nb * MR],
                            b: &pb.bytes[s * gb.group_bytes() + b0 * gb.block_bytes()..]
                                [..nb * gb.block_bytes()],
                            b_scale: &pb.scale[(s * gb.blocks + b0) * NR..][..nb * NR],
                            blocks: nb,
                            quads: ga.quads,
                        };
                        let (rows, cols) = (MR.min(m - i0), NR.min(n - j0));
                        // SAFETY: this piece's tiles (rows of its panels × columns of its
                        // strips) lie inside the m × n C and no other piece writes them; the
                        // kernel's instructions are present (the plan checked `enabled`).
                        unsafe { tile.run(cp.get().add(i0 * n + j0), n, rows, cols, b0 > 0) };
                    }
                }
            }
        });
}

/// How many pieces of rows and of columns the threads take: panels of at most [`MC`]
/// rows, and a count of pieces that is a multiple of `threads` where the panels and
/// strips allow (each piece then gets an equal share, to within a panel or a strip).
fn pieces(panels: usize, strips: usize, threads: usize) -> (usize, usize) {
    let t = threads.max(1);
    let rows = panels.div_ceil(MC / MR);
    if rows >= t {
        return (rows.next_multiple_of(t).min(panels), 1);
    }
    let mut cols = t.div_ceil(rows);
    while !(rows * cols).is_multiple_of(t) && cols < strips {
        cols += 1;
    }
    (rows, cols.min(strips))
}

/// One micro-kernel call's operands: a panel's and a strip's bytes and block data over
/// `blocks` blocks of `quads` quads.
struct Tile<'p> {
    a: &'p [u8],
    a_start: &'p [i32],
    a_scale: &'p [f32],
    b: &'p [u8],
    b_scale: &'p [f32],
    blocks: usize,
    quads: usize,
}

impl Tile<'_> {
    /// `C[rows × cols] (+)= tile` at `c` with row stride `ldc` (continuing C's sums when
    /// `add`).
    ///
    /// # Safety
    /// `c` must address `rows ≤ MR` rows of `cols ≤ NR` writable f32 with stride `ldc`;
    /// AVX-512 F/BW and AVX512_VNNI present.
    unsafe fn run(&self, c: *mut f32, ldc: usize, rows: usize, cols: usize, add: bool) {
        assert!(
            self.a.len() >= self.blocks * self.quads * MR * 4
                && self.b.len() >= self.blocks * self.quads * NR * 4
                && self.a_start.len() >= self.blocks * MR
                && self.a_scale.len() >= self.blocks * MR
                && self.b_scale.len() >= self.blocks * NR
                && rows <= MR
                && cols <= NR
        );
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the slices hold what the kernel reads (asserted); the caller vouches for
        // C and the CPU.
        unsafe {
            kernel(self, c, ldc, rows, cols, add)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (c, ldc, rows, cols, add);
            unreachable!("the VNNI kernel is planned only on x86_64");
        }
    }
}

/// The `MR × NR` micro-kernel: per block, i32 sums from the panel's start sums by
/// `vpdpbusd` over the block's quads, then `acc += f32(sum) · (sa · sb)`.
///
/// # Safety
/// As [`Tile::run`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn kernel(t: &Tile<'_>, c: *mut f32, ldc: usize, rows: usize, cols: usize, add: bool) {
    use std::arch::x86_64::*;
    let mask = |v: usize| -> __mmask16 {
        let lanes = cols.saturating_sub(16 * v).min(16);
        if lanes == 16 { !0 } else { (1 << lanes) - 1 }
    };
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    let (qa, qb) = (MR * 4, NR * 4);
    // SAFETY: every offset below stays inside the slices (`Tile::run`'s assertion) or
    // the caller's C tile (masked to its rows and columns).
    unsafe {
        // A later K chunk continues C's chain of fused multiply-adds, so the sums do not
        // depend on where the chunks end.
        if add {
            for (r, row) in acc.iter_mut().enumerate().take(rows) {
                for (v, x) in row.iter_mut().enumerate() {
                    *x = _mm512_maskz_loadu_ps(mask(v), c.add(r * ldc + 16 * v));
                }
            }
        }
        let (mut ap, mut bp) = (t.a.as_ptr(), t.b.as_ptr());
        for blk in 0..t.blocks {
            let mut sums = [[_mm512_setzero_si512(); NV]; MR];
            for (r, row) in sums.iter_mut().enumerate() {
                let s = _mm512_set1_epi32(*t.a_start.get_unchecked(blk * MR + r));
                *row = [s; NV];
            }
            for _ in 0..t.quads {
                let bv: [__m512i; NV] =
                    std::array::from_fn(|v| _mm512_loadu_si512(bp.add(64 * v) as *const __m512i));
                for (r, row) in sums.iter_mut().enumerate() {
                    let av = _mm512_set1_epi32((ap.add(4 * r) as *const i32).read_unaligned());
                    for (s, b) in row.iter_mut().zip(&bv) {
                        *s = _mm512_dpbusd_epi32(*s, *b, av);
                    }
                }
                ap = ap.add(qa);
                bp = bp.add(qb);
            }
            let sb: [__m512; NV] =
                std::array::from_fn(|v| _mm512_loadu_ps(t.b_scale.as_ptr().add(blk * NR + 16 * v)));
            for (r, (row, sums)) in acc.iter_mut().zip(&sums).enumerate() {
                let sa = _mm512_set1_ps(*t.a_scale.get_unchecked(blk * MR + r));
                for v in 0..NV {
                    let s = _mm512_mul_ps(sb[v], sa);
                    row[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[v]), s, row[v]);
                }
            }
        }
        for (r, row) in acc.iter().enumerate().take(rows) {
            for (v, &x) in row.iter().enumerate().take(cols.div_ceil(16)) {
                _mm512_mask_storeu_ps(c.add(r * ldc + 16 * v), mask(v), x);
            }
        }
    }
}

#[cfg(test)]
mod tests;
