//! The AVX-512 f32 FMA micro-kernel and its packing for bf16 / f16 products whose
//! operands are widened to f32 while they are packed, on the shared low-precision driver
//! (`lowp_drive.rs`). Since issue #17 the [`LowpPath::Avx512F32`] path runs on the own f32
//! kernel instead (`f32_avx512::sgemm_half`: the operands widened straight into its packed
//! layouts, then its blocking, threads and assembly micro-kernels); this kernel stays
//! behind the measurement switch `RLX_GEMM_WIDEN=fma32` (f16 on one thread of the 2-vCPU
//! Sapphire Rapids VM: 1024³ 175 GFLOP/s against 188 on the f32 kernel, 2048³ 166 against
//! 186; see `lowp.rs`).
//!
//! [`LowpPath::Avx512F32`]: super::lowp::LowpPath::Avx512F32
//!
//! One kernel type, [`Fma32`], is generic over the operands' storage ([`Widen`]): half
//! elements are converted exactly. The
//! widening is the f16 path's arithmetic: AVX512_FP16 would accumulate in f16 (11-bit
//! significand), far from the f32 accumulation the oracle's tolerance allows, and
//! converting f16 to bf16 would drop 3 bits of every input. Converting in the packing step
//! reads each operand once, panel by panel, instead of first copying both whole tensors.
//!
//! The tile of C is 12 × 32 (24 zmm accumulators, 2 B vectors per sum, A's elements
//! broadcast from memory into the multiply-adds): 24 FMAs per 2 loads + 12 broadcasts
//! keeps both FMA ports busy on Sapphire Rapids. Blocking (see [`Kernel`] for the loop
//! order): packed B is at most `KS × NC` = 1024 × 512 f32 (2 MiB, the L2 of one core),
//! packed A `MC × KS` = 144 × 1024 f32 (576 KiB); one micro-kernel call runs `KC` = 256
//! sums, so its B panel (32 KiB) stays in the 48 KiB L1 while the A panels stream past.
//!
//! Summation order: each C element is `((c₀ + a₀b₀) + a₁b₁) + …` in k order, one fused
//! multiply-add per term (one rounding each), restarted from the stored partial sum
//! every `KC` sums — the same sequence on every thread count and block split.

use super::lowp_drive::{CTile, Half, Kernel, Src};
use std::arch::x86_64::*;

/// How an operand's elements become f32 in the packed panels.
pub(crate) trait Widen: Copy + Send + Sync {
    /// The stored element type.
    type E: Copy;
    /// The f32 value of one element (exact).
    fn get(self, e: Self::E) -> f32;
    /// `out[0..16] = f32 of src[0..n]`, zeros past `n` (`n <= 16`).
    ///
    /// # Safety
    /// `src` readable for `n` elements, `out` writable for 16 f32; AVX-512 F/BW present.
    unsafe fn widen(self, src: *const Self::E, n: usize, out: *mut f32);
}

impl Widen for Half {
    type E = u16;
    #[inline(always)]
    fn get(self, e: u16) -> f32 {
        self.to_f32(e)
    }
    #[inline(always)]
    unsafe fn widen(self, src: *const u16, n: usize, out: *mut f32) {
        // SAFETY: forwarded contract.
        unsafe { widen_half(self, src, n, out) }
    }
}

/// `n <= 16` half elements converted to f32, the rest of the 16 zeroed.
///
/// # Safety
/// As [`Widen::widen`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn widen_half(kind: Half, src: *const u16, n: usize, out: *mut f32) {
    // SAFETY: lanes below n are readable (caller); masked-off lanes are not accessed; the
    // 16 f32 stored are writable (caller).
    unsafe {
        let h = if n == 16 {
            _mm256_loadu_si256(src as *const __m256i)
        } else {
            _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(
                mask16(n) as u32,
                src as *const i16,
            ))
        };
        let v = match kind {
            Half::F16 => _mm512_cvtph_ps(h),
            Half::Bf16 => _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)),
        };
        _mm512_storeu_ps(out, v);
    }
}

/// The mask of the low `n <= 16` lanes.
#[inline(always)]
fn mask16(n: usize) -> u16 {
    if n >= 16 { u16::MAX } else { (1u16 << n) - 1 }
}

/// The f32-FMA micro-kernel over operands stored as `W`, computing `MR × 16·NV` tiles of C
/// (`MR · NV` zmm accumulators, at most 28 of the 32 registers); construct only with
/// AVX-512 F/BW.
pub(crate) struct Fma32<W, const MR: usize, const NV: usize> {
    src: W,
}

impl<W: Widen, const MR: usize, const NV: usize> Fma32<W, MR, NV> {
    /// The kernel for operands stored as `src`, if the CPU has AVX-512 F/BW.
    pub(crate) fn new(src: W) -> Option<Fma32<W, MR, NV>> {
        const { assert!(MR * NV <= 28 && MR <= 16 && NV >= 1) };
        super::bf16_avx512::avx512bw().then_some(Fma32 { src })
    }
}

impl<W: Widen, const MR: usize, const NV: usize> Kernel for Fma32<W, MR, NV> {
    type E = W::E;
    type P = f32;
    type C = f32;
    const MR: usize = MR;
    const NR: usize = 16 * NV;
    const KU: usize = 1;
    // One B micro-panel (KC × NR f32) is 32 KiB, inside the 48 KiB L1 beside an A panel;
    // 12 × 32 at KC 256 was within noise of 192/1024/384/1536 and 48/1024/256/1024
    // (gemm_lowp --cpu-time). Packed B is KS × NC f32 (2 MiB), kept per thread.
    const KC: usize = 512 / NV;
    const KS: usize = 1024;
    const MC: usize = 144 / MR * MR;
    const NC: usize = 512 / (16 * NV) * (16 * NV);

    unsafe fn pack_a(&self, a: Src<W::E>, mb: usize, kb: usize, kpad: usize, dst: &mut [f32]) {
        // SAFETY: forwarded contract; Fma32 exists only with AVX-512 F/BW.
        unsafe { pack_a::<W, MR>(self.src, a, mb, kb, kpad, dst) }
    }

    unsafe fn pack_b(&self, b: Src<W::E>, kb: usize, nb: usize, kpad: usize, dst: &mut [f32]) {
        // SAFETY: forwarded contract; Fma32 exists only with AVX-512 F/BW.
        unsafe { pack_b::<W, NV>(self.src, b, kb, nb, kpad, dst) }
    }

    unsafe fn micro(
        &self,
        (k0, kb, _): (usize, usize, usize),
        a: *const f32,
        b: *const f32,
        c: CTile,
    ) {
        // SAFETY: forwarded contract (sum k0 of each panel starts MR·k0 / NR·k0 elements in
        // and kb more sums follow inside it); Fma32 exists only with AVX-512 F/BW.
        unsafe { fma_micro::<MR, NV>(kb, a.add(k0 * MR), b.add(k0 * 16 * NV), c) }
    }
}

/// Pack rows `0..mb`, sums `0..kb` of `a` into `MR`-row panels, each `[kb sums][MR rows]`
/// (zero rows past `mb`).
///
/// # Safety
/// The `mb × kb` block of `a` must be readable; AVX-512 F/BW present.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack_a<W: Widen, const MR: usize>(
    src: W,
    a: Src<W::E>,
    mb: usize,
    kb: usize,
    kpad: usize,
    dst: &mut [f32],
) {
    let panels = mb.div_ceil(MR);
    assert!(
        dst.len() >= panels * MR * kpad,
        "Fma32 pack_a: buffer too small"
    );
    let mut wide = [0f32; 16];
    for (panel, out) in dst.chunks_exact_mut(kpad * MR).take(panels).enumerate() {
        let i0 = panel * MR;
        let h = MR.min(mb - i0);
        if a.rs == 1 {
            // A's columns contiguous (a transposed operand): each sum's MR rows are
            // one run of memory.
            for (p, o) in out.chunks_exact_mut(MR).take(kb).enumerate() {
                // SAFETY: rows i0..i0 + h < mb of sum p < kb are contiguous elements of
                // the block; `wide` holds 16 f32; AVX-512 F/BW present (Fma32::new).
                unsafe { src.widen(a.at(i0, p).ptr, h, wide.as_mut_ptr()) };
                o.copy_from_slice(&wide[..MR]);
            }
            continue;
        }
        // A full panel of contiguous rows: 16 sums of its rows widened, transposed in
        // registers and stored a sum (MR f32) at a time; element by element the scatter
        // took ~10% of a 1024³ f16 product on one thread.
        let mut p_done = 0;
        if a.cs == 1 && h == MR {
            let mut rows = [[0f32; 16]; 16];
            while p_done + 16 <= kb {
                for (r, row) in rows.iter_mut().take(MR).enumerate() {
                    // SAFETY: sums p_done..+16 <= kb of row i0 + r < mb are contiguous
                    // elements of the block; `row` holds 16 f32; AVX-512 F/BW present.
                    unsafe { src.widen(a.at(i0 + r, p_done).ptr, 16, row.as_mut_ptr()) };
                }
                // SAFETY: `rows` holds 16 × 16 f32 (rows past MR unused: their lanes are
                // masked off below); each store writes MR f32 of sum p_done + q < kb, inside
                // the panel's kpad · MR.
                unsafe {
                    let mut v = [_mm512_setzero_ps(); 16];
                    for (x, row) in v.iter_mut().zip(&rows) {
                        *x = _mm512_loadu_ps(row.as_ptr());
                    }
                    super::f32_avx512::transpose16(&mut v);
                    for (q, x) in v.iter().enumerate() {
                        let o = out.as_mut_ptr().add((p_done + q) * MR);
                        _mm512_mask_storeu_ps(o, mask16(MR), *x);
                    }
                }
                p_done += 16;
            }
        }
        for r in 0..MR {
            let mut p = p_done;
            if r < h && a.cs == 1 {
                // A contiguous row: widen 16 sums at a time, then scatter to the panel.
                while p + 16 <= kb {
                    // SAFETY: sums p..p+16 <= kb of row i0 + r < mb are contiguous
                    // elements of the block; AVX-512 F/BW present (Fma32::new).
                    unsafe { src.widen(a.at(i0 + r, p).ptr, 16, wide.as_mut_ptr()) };
                    for (t, &v) in wide.iter().enumerate() {
                        out[(p + t) * MR + r] = v;
                    }
                    p += 16;
                }
            }
            for p in p..kb {
                out[p * MR + r] = if r < h {
                    // SAFETY: guarded to i0 + r < mb, p < kb: inside the block.
                    src.get(unsafe { a.get(i0 + r, p) })
                } else {
                    0.0
                };
            }
        }
    }
}

/// Pack sums `0..kb`, columns `0..nb` of `b` into `NR`-column strips, each
/// `[kb sums][NR columns]` (zero columns past `nb`).
///
/// # Safety
/// The `kb × nb` block of `b` must be readable; AVX-512 F/BW present.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack_b<W: Widen, const NV: usize>(
    src: W,
    b: Src<W::E>,
    kb: usize,
    nb: usize,
    kpad: usize,
    dst: &mut [f32],
) {
    let nr = 16 * NV;
    let strips = nb.div_ceil(nr);
    assert!(
        dst.len() >= strips * nr * kpad,
        "Fma32 pack_b: buffer too small"
    );
    for (t, strip) in dst.chunks_exact_mut(kpad * nr).take(strips).enumerate() {
        let j0 = t * nr;
        let w = nr.min(nb - j0);
        if b.cs == 1 {
            // B's rows contiguous: each sum's columns are one or two runs of memory.
            for (p, out) in strip.chunks_exact_mut(nr).take(kb).enumerate() {
                for (g, o) in out.chunks_exact_mut(16).enumerate() {
                    let n = w.saturating_sub(16 * g).min(16);
                    if n == 0 {
                        o.fill(0.0);
                        continue;
                    }
                    // SAFETY: columns j0 + 16g .. + n <= nb of row p < kb are
                    // contiguous elements of the block; `o` holds 16 f32; AVX-512 F/BW
                    // present (Fma32::new).
                    unsafe { src.widen(b.at(p, j0 + 16 * g).ptr, n, o.as_mut_ptr()) };
                }
            }
            continue;
        }
        // Columns contiguous (a transposed weight) or general strides: walk each column
        // down its sums, which reads memory in order.
        for n in 0..nr {
            for p in 0..kb {
                strip[p * nr + n] = if n < w {
                    // SAFETY: guarded to p < kb, j0 + n < nb: inside the block.
                    src.get(unsafe { b.get(p, j0 + n) })
                } else {
                    0.0
                };
            }
        }
    }
}

/// `C[MR × 16·NV] (+)= A·B` over `kc` sums with f32 FMA.
///
/// # Safety
/// As [`Kernel::micro`]; the CPU has AVX-512 F.
#[target_feature(enable = "avx512f")]
unsafe fn fma_micro<const MR: usize, const NV: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: CTile,
) {
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    // SAFETY: the caller guarantees MR × 16·NV f32 tiles at c.inp (readable, unless null)
    // and c.out (writable) with their row strides, MR·kc elements in A's panel and
    // 16·NV·kc in B's.
    unsafe {
        if !c.inp.is_null() {
            for (r, row) in acc.iter_mut().enumerate() {
                let cr = c.inp.offset(r as isize * c.ld_in);
                for (v, x) in row.iter_mut().enumerate() {
                    *x = _mm512_loadu_ps(cr.add(16 * v));
                }
            }
        }
        for p in 0..kc {
            let bp = b.add(p * 16 * NV);
            let mut bv = [_mm512_setzero_ps(); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(bp.add(16 * v));
            }
            let ap = a.add(p * MR);
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add(r));
                for (x, &bx) in row.iter_mut().zip(&bv) {
                    *x = _mm512_fmadd_ps(av, bx, *x);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            let cr = c.out.offset(r as isize * c.ld_out);
            for (v, x) in row.iter().enumerate() {
                _mm512_storeu_ps(cr.add(16 * v), *x);
            }
        }
    }
}
