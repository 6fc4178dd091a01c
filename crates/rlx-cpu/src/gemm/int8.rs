//! int8 GEMM for quantized inference: `C (+)= A·B` with i8 `A` (m×k) and `B` (k×n), i32
//! `C`, exact (two's-complement wrapping on overflow, like the hardware's dword adds).
//!
//! | path | needs | how |
//! |---|---|---|
//! | [`I8Path::Amx`] | AMX-TILE + AMX-INT8, Linux | `tdpbssd`: 16×16 i32 tile += 16×64 i8 tile · 64×16 i8 tile |
//! | [`I8Path::Avx512Vnni`] | AVX512_VNNI | `vpdpbusd` on B biased to unsigned bytes, the bias's share (128·row sums of A) subtracted (`int8_vnni.rs`) |
//! | [`I8Path::Avx512`] | AVX-512 F/BW | operands widened to i16 while packing, `vpmaddwd` + `vpaddd` |
//! | [`I8Path::Portable`] | nothing | i32 loops over the strided views |
//!
//! The default is the first available path in that order; `RLX_GEMM_I8` (`amx`,
//! `avx512vnni`, `avx512`, `portable`) forces one for testing and benchmarking (an unknown
//! or unavailable value is reported once on stderr and the default used). Every path gives the same bits: integer
//! sums are exact, and wrapping sums do not depend on their order. An i8 matmul stored as
//! i8 (the IR's `MatMul` on `I8`) wraps the i32 sum to 8 bits, as the oracle's i64 sum does.
//!
//! AMX packing: A as `[16-row strip][64-sum chunk][16][64]`, B in the quad layout
//! `[16-column strip][sum quad][16 columns][4]` (one 1 KiB tile per 16 quads), so the
//! shared AMX tile loop (`gemm/amx.rs`) runs unchanged with `tdpbssd`.

use super::checks::{self, or_panic};
use super::{GemmError, MatMut, MatRef};
use std::sync::OnceLock;

/// Which unit computes an int8 product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum I8Path {
    /// Intel AMX tiles (`tdpbssd`).
    Amx,
    /// AVX512_VNNI `vpdpbusd` (four byte products per 32-bit lane) with B biased to
    /// unsigned bytes.
    Avx512Vnni,
    /// AVX-512 `vpmaddwd` over operands widened to i16.
    Avx512,
    /// Plain i32 loops (any CPU).
    Portable,
}

impl I8Path {
    /// Every path, in the order the default tries them.
    pub const ALL: [I8Path; 4] = [
        I8Path::Amx,
        I8Path::Avx512Vnni,
        I8Path::Avx512,
        I8Path::Portable,
    ];

    /// The name used by `RLX_GEMM_I8`.
    pub fn name(self) -> &'static str {
        match self {
            I8Path::Amx => "amx",
            I8Path::Avx512Vnni => "avx512vnni",
            I8Path::Avx512 => "avx512",
            I8Path::Portable => "portable",
        }
    }

    /// The path named `s`.
    pub fn parse(s: &str) -> Option<I8Path> {
        I8Path::ALL.into_iter().find(|p| p.name() == s.trim())
    }

    /// Whether this path runs on this CPU and OS.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                I8Path::Amx => super::amx::int8_available() && super::avx512::avx512bw(),
                I8Path::Avx512Vnni => super::int8_vnni::available(),
                I8Path::Avx512 => super::avx512::avx512bw(),
                I8Path::Portable => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == I8Path::Portable
        }
    }

    /// The environment's choice (`RLX_GEMM_I8`) if available, else the first available
    /// path of [`I8Path::ALL`]. Decided once per process.
    pub fn default_path() -> I8Path {
        static PATH: OnceLock<I8Path> = OnceLock::new();
        *PATH.get_or_init(|| {
            let best = I8Path::ALL
                .into_iter()
                .find(|p| p.available())
                .unwrap_or(I8Path::Portable);
            match std::env::var("RLX_GEMM_I8") {
                Err(_) => best,
                Ok(v) => match I8Path::parse(&v) {
                    Some(p) if p.available() => p,
                    _ => {
                        tracing::warn!(
                            target: "rlx::gemm",
                            "RLX_GEMM_I8={v} is not an available int8 GEMM path here \
                             (amx, avx512vnni, avx512, portable); using {}",
                            best.name()
                        );
                        best
                    }
                },
            }
        })
    }
}

/// `C = A·B` (or `C += A·B` with `accumulate`) with i8 `A` (m×k), `B` (k×n), any strides,
/// i32 `C` (wrapping), on the default path ([`I8Path::default_path`]) and at most
/// `threads` threads of the current rayon pool.
///
/// Panics (naming the shapes or the view) if the shapes do not chain, a view reaches
/// outside its slice, or C's strides make two elements share storage; [`try_gemm_i8`]
/// returns those as a [`GemmError`] instead.
#[track_caller]
pub fn gemm_i8(
    a: MatRef<'_, i8>,
    b: MatRef<'_, i8>,
    c: MatMut<'_, i32>,
    accumulate: bool,
    threads: usize,
) {
    or_panic(try_gemm_i8(a, b, c, accumulate, threads));
}

/// [`gemm_i8`] returning a [`GemmError`] (and writing nothing) where it would panic.
pub fn try_gemm_i8(
    a: MatRef<'_, i8>,
    b: MatRef<'_, i8>,
    c: MatMut<'_, i32>,
    accumulate: bool,
    threads: usize,
) -> Result<(), GemmError> {
    try_gemm_i8_with(I8Path::default_path(), a, b, c, accumulate, threads)
}

/// [`gemm_i8`] on a given path. Panics if the path is not available here;
/// [`try_gemm_i8_with`] returns the error instead.
#[track_caller]
pub fn gemm_i8_with(
    path: I8Path,
    a: MatRef<'_, i8>,
    b: MatRef<'_, i8>,
    c: MatMut<'_, i32>,
    accumulate: bool,
    threads: usize,
) {
    or_panic(try_gemm_i8_with(path, a, b, c, accumulate, threads));
}

/// [`gemm_i8_with`] returning a [`GemmError`] (and writing nothing) where it would panic.
pub fn try_gemm_i8_with(
    path: I8Path,
    a: MatRef<'_, i8>,
    b: MatRef<'_, i8>,
    c: MatMut<'_, i32>,
    accumulate: bool,
    threads: usize,
) -> Result<(), GemmError> {
    let op = "gemm_i8";
    if !path.available() {
        return Err(GemmError::PathUnavailable {
            op,
            path: path.name(),
            operands: "i8",
            needs: "amx needs AMX-INT8 and Linux, avx512vnni needs AVX512_VNNI, avx512 needs \
                    AVX-512 F/BW",
            fix: "use I8Path::default_path or check I8Path::available first",
        });
    }
    checks::views(op, &a, &b, &c)?;
    let (m, n, k) = (c.rows, c.cols, a.cols);
    if m == 0 || n == 0 {
        return Ok(());
    }
    let mut c = c;
    if k == 0 || path == I8Path::Portable {
        portable(&a, &b, &mut c, accumulate);
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the views are in bounds (checked above), C's elements are pairwise distinct
    // and C is an exclusive borrow (so it overlaps neither A nor B); the path is available.
    unsafe {
        kernels::run(path, &a, &b, &mut c, accumulate, threads)
    };
    // Off x86-64 only the portable path is available, which returned above.
    #[cfg(not(target_arch = "x86_64"))]
    let _ = threads;
    Ok(())
}

/// The portable path (and `k = 0`): both operands copied to dense i32 once, then for
/// each row of C, rows of B scaled by A's elements and added (wrapping): contiguous inner
/// loops the compiler vectorizes for whatever SIMD the target has.
fn portable(a: &MatRef<'_, i8>, b: &MatRef<'_, i8>, c: &mut MatMut<'_, i32>, accumulate: bool) {
    let (m, n, k) = (c.rows, c.cols, a.cols);
    let at = super::at;
    let dense = |v: &MatRef<'_, i8>| -> Vec<i32> {
        let mut out = Vec::with_capacity(v.rows * v.cols);
        for i in 0..v.rows {
            for j in 0..v.cols {
                out.push(v.data[at(v.offset, v.row_stride, v.col_stride, i, j)] as i32);
            }
        }
        out
    };
    let (ad, bd) = (dense(a), dense(b));
    let mut row = vec![0i32; n];
    for i in 0..m {
        row.fill(0);
        for (p, &x) in ad[i * k..(i + 1) * k].iter().enumerate() {
            for (r, &y) in row.iter_mut().zip(&bd[p * n..(p + 1) * n]) {
                *r = r.wrapping_add(x.wrapping_mul(y));
            }
        }
        for (j, &r) in row.iter().enumerate() {
            let o = &mut c.data[at(c.offset, c.row_stride, c.col_stride, i, j)];
            *o = if accumulate { o.wrapping_add(r) } else { r };
        }
    }
}

/// The x86-64 kernels and the parallel driver call.
#[cfg(target_arch = "x86_64")]
mod kernels {
    use super::super::int8_pack::pack_b_quads;
    use super::super::lowp_drive::{CTile, Dst, Job, Kernel, Src};
    use super::{I8Path, MatMut, MatRef};
    use std::arch::x86_64::*;

    /// Run the product on `path` (any but Portable) over the rayon pool.
    ///
    /// # Safety
    /// The views must be in bounds of their slices, C's elements pairwise distinct and
    /// not overlapping A or B, the path available; `m, n, k > 0`.
    pub(super) unsafe fn run(
        path: I8Path,
        a: &MatRef<'_, i8>,
        b: &MatRef<'_, i8>,
        c: &mut MatMut<'_, i32>,
        accumulate: bool,
        threads: usize,
    ) {
        let (m, n, k) = (c.rows, c.cols, a.cols);
        // SAFETY: each view is in bounds of its slice (caller), so its (0, 0) element is
        // inside it.
        let (pa, pb, pc) = unsafe {
            (
                a.data.as_ptr().add(a.offset),
                b.data.as_ptr().add(b.offset),
                c.data.as_mut_ptr().add(c.offset),
            )
        };
        let job = Job {
            a: Src {
                ptr: pa,
                rs: a.row_stride,
                cs: a.col_stride,
            },
            b: Src {
                ptr: pb,
                rs: b.row_stride,
                cs: b.col_stride,
            },
            c: Dst {
                ptr: pc,
                rs: c.row_stride,
                cs: c.col_stride,
            },
            mnk: (m, n, k),
            accumulate,
            threads: threads.min((m * n * k / (1 << 21)).max(1)).max(1),
        };
        // SAFETY: the caller's contract is Job::run's; each kernel runs only on its path.
        unsafe {
            match path {
                I8Path::Amx => job.run(&AmxI8),
                I8Path::Avx512Vnni => job.run(&super::super::int8_vnni::DpBusd),
                I8Path::Avx512 => job.run(&Madd16),
                I8Path::Portable => unreachable!("the portable path runs without kernels"),
            }
        }
    }

    /// Sums per AMX int8 tile (64 bytes per tile row).
    const CHUNK: usize = 64;

    /// The AMX-INT8 micro-kernel (used only when [`I8Path::Amx`] is available).
    struct AmxI8;

    impl Kernel for AmxI8 {
        type E = i8;
        type P = i8;
        type C = i32;
        const MR: usize = 32;
        const NR: usize = 32;
        const KU: usize = CHUNK;
        // The bf16 kernel's blocking (same tile loop), with twice the sums per byte.
        const KC: usize = 4096;
        const KS: usize = 4096;
        const MC: usize = 128;
        const NC: usize = 512;
        // C's rows prefetched for writing inside the tile loop (as the bf16 kernel does).
        const PREFETCHES_C: bool = true;

        unsafe fn pack_a(&self, a: Src<i8>, mb: usize, kb: usize, kpad: usize, dst: &mut [i8]) {
            // SAFETY: forwarded contract; AVX-512 BW is present where this kernel runs.
            unsafe { pack_a_rows(a, mb, kb, kpad, dst) }
        }

        unsafe fn pack_b(&self, b: Src<i8>, kb: usize, nb: usize, kpad: usize, dst: &mut [i8]) {
            // SAFETY: forwarded contract; AVX-512 BW is present where this kernel runs.
            unsafe { pack_b_quads(b, (kb, nb), kpad, (32, 0), dst) }
        }

        unsafe fn micro(
            &self,
            (k0, kb, kpad): (usize, usize, usize),
            a: *const i8,
            b: *const i8,
            c: CTile<i32>,
        ) {
            // Chunk k0/64 starts k0·16 bytes into each strip (1 KiB per 64 sums); the second
            // strip of a panel is 16 rows (or columns) · kpad bytes further.
            // SAFETY: each panel holds 32 · kpad bytes and k0 + kb <= kpad (caller); the C tiles
            // and the tile configuration are the caller's contract (Kernel::micro).
            unsafe {
                let (a0, b0) = (a.add(k0 * 16), b.add(k0 * 16));
                let (a1, b1) = (a0.add(16 * kpad), b0.add(16 * kpad));
                use super::super::amx::{ATiles, TileC, TileOp, TileOperands, tile_product};
                tile_product(
                    TileOp {
                        int8: true,
                        stream_b: c.b_streamed,
                    },
                    TileOperands {
                        a: [a0 as *const u8, a1 as *const u8],
                        b: [b0 as *const u8, b1 as *const u8],
                        a_tiles: ATiles::PACKED,
                        chunks: kb / CHUNK,
                    },
                    TileC::of(&c),
                )
            }
        }

        // Row panels outer where a step's B block fits (as the bf16 kernel): a panel's
        // 32 × 1024 A bytes stay in L1 for its calls while B's tiles stream from L2
        // (loaded with the streaming hint, CTile::b_streamed).
        fn rows_outer(&self) -> bool {
            rows_outer_i8()
        }

        fn begin(&self) {
            // SAFETY: AmxI8 runs only where I8Path::Amx is available (tiles permitted).
            unsafe { super::super::amx::load_config() }
        }

        fn end(&self) {
            // SAFETY: as in begin.
            unsafe { super::super::amx::release() }
        }
    }

    /// Whether [`AmxI8`] walks row panels outer: `RLX_AMX_I8_ROWS=0|1`, a measurement
    /// switch read once (default on).
    fn rows_outer_i8() -> bool {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| std::env::var("RLX_AMX_I8_ROWS").map_or(true, |v| v.trim() != "0"))
    }

    /// Pack rows `0..mb`, sums `0..kb` of `a` as `[16-row strip][64-sum chunk][16][64]` over
    /// `mb` rounded up to 32 rows (zeros past `mb` and `kb`); a row-major chunk row is one
    /// masked 64-byte load.
    ///
    /// # Safety
    /// The `mb × kb` block of `a` must be readable; AVX-512 F/BW present.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn pack_a_rows(a: Src<i8>, mb: usize, kb: usize, kpad: usize, dst: &mut [i8]) {
        let chunks = kpad / CHUNK;
        let rows = mb.next_multiple_of(32);
        assert!(
            dst.len() >= rows * kpad,
            "AMX int8 pack_a: buffer too small"
        );
        for i in 0..rows {
            let (s, r) = (i / 16, i % 16);
            for c in 0..chunks {
                let o = (s * chunks + c) * 1024 + r * CHUNK;
                let row = &mut dst[o..o + CHUNK];
                let k0 = c * CHUNK;
                let len = if i < mb {
                    CHUNK.min(kb.saturating_sub(k0))
                } else {
                    0
                };
                if len == 0 {
                    row.fill(0);
                } else if a.cs == 1 {
                    let mask = if len == CHUNK {
                        u64::MAX
                    } else {
                        (1u64 << len) - 1
                    };
                    // SAFETY: row i < mb, sums k0..k0 + len <= kb are contiguous bytes of the
                    // block; the masked load reads only those; `row` has 64 bytes.
                    unsafe {
                        let v = _mm512_maskz_loadu_epi8(mask, a.at(i, k0).ptr);
                        _mm512_storeu_si512(row.as_mut_ptr() as *mut __m512i, v);
                    }
                } else {
                    for (t, v) in row.iter_mut().enumerate() {
                        *v = if t < len {
                            // SAFETY: (i, k0 + t) is inside the block when t < len.
                            unsafe { a.get(i, k0 + t) }
                        } else {
                            0
                        };
                    }
                }
            }
        }
    }

    /// Rows of C per `vpmaddwd` micro-kernel call.
    const MR16: usize = 12;
    /// Columns of C per call (two vectors of 16 i32).
    const NR16: usize = 32;

    /// The AVX-512 micro-kernel: i8 operands widened to i16 pairs while packing (A:
    /// `[pair][MR][2]`, B: `[pair][NR][2]`), `vpmaddwd` (two i16 products summed into i32:
    /// exact, |a·b| ≤ 2¹⁴) then `vpaddd`.
    struct Madd16;

    impl Kernel for Madd16 {
        type E = i8;
        type P = i16;
        type C = i32;
        const MR: usize = MR16;
        const NR: usize = NR16;
        const KU: usize = 2;
        const KC: usize = 512;
        const KS: usize = 2048;
        const MC: usize = 144;
        const NC: usize = 512;

        unsafe fn pack_a(&self, a: Src<i8>, mb: usize, kb: usize, kpad: usize, dst: &mut [i16]) {
            let rows = mb.next_multiple_of(MR16);
            assert!(dst.len() >= rows * kpad, "int8 pack_a: buffer too small");
            for i in 0..rows {
                let base = (i / MR16) * kpad * MR16 + (i % MR16) * 2;
                for p in 0..kpad / 2 {
                    for e in 0..2 {
                        let kk = 2 * p + e;
                        dst[base + p * MR16 * 2 + e] = if i < mb && kk < kb {
                            // SAFETY: guarded to i < mb, kk < kb: inside the block.
                            unsafe { a.get(i, kk) as i16 }
                        } else {
                            0
                        };
                    }
                }
            }
        }

        unsafe fn pack_b(&self, b: Src<i8>, kb: usize, nb: usize, kpad: usize, dst: &mut [i16]) {
            let cols = nb.next_multiple_of(NR16);
            assert!(dst.len() >= cols * kpad, "int8 pack_b: buffer too small");
            for t in 0..cols / NR16 {
                let j0 = t * NR16;
                for p in 0..kpad / 2 {
                    let out = &mut dst[(t * kpad / 2 + p) * NR16 * 2..][..NR16 * 2];
                    for (n, pair) in out.chunks_exact_mut(2).enumerate() {
                        for (e, v) in pair.iter_mut().enumerate() {
                            let kk = 2 * p + e;
                            *v = if j0 + n < nb && kk < kb {
                                // SAFETY: guarded to kk < kb, j0 + n < nb: inside the block.
                                unsafe { b.get(kk, j0 + n) as i16 }
                            } else {
                                0
                            };
                        }
                    }
                }
            }
        }

        unsafe fn micro(
            &self,
            (k0, kb, _): (usize, usize, usize),
            a: *const i16,
            b: *const i16,
            c: CTile<i32>,
        ) {
            // SAFETY: forwarded contract (pair k0/2 starts MR·k0 / NR·k0 elements into each
            // panel, kb more sums follow inside it); AVX-512 F/BW present (I8Path::Avx512).
            unsafe { madd_micro(kb / 2, a.add(k0 * MR16) as *const i32, b.add(k0 * NR16), c) }
        }
    }

    /// `C[12 × 32] (+)= A·B` over `kp2` sum pairs with `vpmaddwd` + `vpaddd`.
    ///
    /// # Safety
    /// As [`Kernel::micro`]; AVX-512 F/BW present.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn madd_micro(kp2: usize, a: *const i32, b: *const i16, c: CTile<i32>) {
        let mut acc = [[_mm512_setzero_si512(); 2]; MR16];
        // SAFETY: the caller guarantees 12 × 32 i32 tiles at c.inp (readable, unless null) and
        // c.out (writable) with their row strides, MR·kp2 pairs in A's panel and NR·kp2 in B's.
        unsafe {
            if !c.inp.is_null() {
                for (r, row) in acc.iter_mut().enumerate() {
                    let cr = c.inp.offset(r as isize * c.ld_in) as *const __m512i;
                    *row = [_mm512_loadu_si512(cr), _mm512_loadu_si512(cr.add(1))];
                }
            }
            for p in 0..kp2 {
                let bp = b.add(p * 2 * NR16) as *const __m512i;
                let (b0, b1) = (_mm512_loadu_si512(bp), _mm512_loadu_si512(bp.add(1)));
                let ap = a.add(p * MR16);
                for (r, row) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_epi32(*ap.add(r));
                    row[0] = _mm512_add_epi32(row[0], _mm512_madd_epi16(av, b0));
                    row[1] = _mm512_add_epi32(row[1], _mm512_madd_epi16(av, b1));
                }
            }
            for (r, row) in acc.iter().enumerate() {
                let cr = c.out.offset(r as isize * c.ld_out) as *mut __m512i;
                _mm512_storeu_si512(cr, row[0]);
                _mm512_storeu_si512(cr.add(1), row[1]);
            }
        }
    }
}
