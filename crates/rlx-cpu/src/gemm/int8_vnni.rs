//! The AVX512_VNNI int8 micro-kernel: `vpdpbusd` adds, into each 32-bit lane, the four
//! products of an unsigned byte quad with a signed byte quad — 64 multiply-adds per
//! instruction, twice `vpmaddwd` over i16 (which also needs a separate `vpaddd`).
//!
//! Both operands here are signed, so B is stored biased: `b + 128` as an unsigned byte
//! (`b ^ 0x80`). Then `Σ a·(b + 128) = Σ a·b + 128·Σ a`, and the kernel subtracts
//! `128·Σ a` per row, the row sums coming from one more `vpdpbusd` per sum quad of A's
//! panel (16 rows' quads, one vector) with all-ones bytes: 17 instructions per 16 product
//! steps. A's quad is the signed operand, broadcast straight from memory (`{1to16}`), so a
//! step is one instruction. Every step is exact in wrapping 32-bit arithmetic (a quad's
//! four products sum to at most 4·128·255 < 2³¹ before the accumulating add, which wraps
//! like `vpaddd`), so the result has the same bits as every other int8 path.
//!
//! Packing: A as `[sum quad][MR rows][4]`, B in the AMX kernel's quad layout (strips of 16
//! columns, `[quad][16][4]`), one strip per micro-kernel panel.
//!
//! Measured on a 2-vCPU AMD EPYC (Zen 4), 1 thread, 256³–2048³, `gemm_lowp` with
//! `torch._int_mm` (torch 2.15) in the same run: 347–377 GOP/s against torch's 406–426
//! (0.81–0.93×; the `vpmaddwd` kernel: 0.31–0.35×); `vpdpbusd` peaks at ~420 there.

use super::int8_pack::pack_b_quads;
use super::lowp_drive::{CTile, Kernel, Src};
use std::arch::x86_64::*;

/// Rows of C per micro-kernel call.
const MR: usize = 16;
/// Columns of C per call (one vector of 16 i32).
const NR: usize = 16;

/// Whether the CPU has `vpdpbusd` on 512-bit vectors (AVX512_VNNI) besides AVX-512 F/BW.
pub(super) fn available() -> bool {
    super::avx512::avx512bw() && is_x86_feature_detected!("avx512vnni")
}

/// The `vpdpbusd` kernel (used only where [`available`]).
pub(super) struct DpBusd;

impl Kernel for DpBusd {
    type E = i8;
    type P = i8;
    type C = i32;
    const MR: usize = MR;
    const NR: usize = NR;
    const KU: usize = 4;
    // A 16 × 512-byte A panel and a 16 × 512-byte B panel (8 KiB each) per call stay in L1;
    // the packed B block (1024 sums × 512 columns, 512 KiB) is half of Zen 4's 1 MiB L2,
    // leaving room for A's block and the partial sums.
    const KC: usize = 512;
    const KS: usize = 1024;
    const MC: usize = 144;
    const NC: usize = 512;

    unsafe fn pack_a(&self, a: Src<i8>, mb: usize, kb: usize, kpad: usize, dst: &mut [i8]) {
        const { assert!(MR == super::bf16_avx512::A_PANEL) };
        // SAFETY: forwarded contract; AVX-512 BW is present where this kernel runs.
        unsafe { super::bf16_avx512::pack_a_words::<i8, 4>(a, mb, kb, kpad, dst) }
    }

    unsafe fn pack_b(&self, b: Src<i8>, kb: usize, nb: usize, kpad: usize, dst: &mut [i8]) {
        // B in the AMX kernel's quad layout (strips of 16 columns), each byte biased
        // (`b ^ 0x80` = `b + 128` unsigned) as it is stored.
        // SAFETY: forwarded contract; AVX-512 BW is present where this kernel runs.
        unsafe { pack_b_quads(b, (kb, nb), kpad, (NR, 0x80), dst) }
    }

    unsafe fn micro(
        &self,
        (k0, kb, _): (usize, usize, usize),
        a: *const i8,
        b: *const i8,
        c: CTile<i32>,
    ) {
        // SAFETY: quad k0/4 starts MR·k0 bytes into A's panel and NR·k0 bytes into B's
        // strip, kb more sums follow inside them (caller); AVX512_VNNI is present where
        // this kernel runs.
        unsafe { micro(kb / 4, a.add(MR * k0) as *const i32, b.add(NR * k0), c) }
    }
}

/// `C[16 × 16] (+)= A·B` over `kq` sum quads: A's quads at `a` (16 words per quad), B's
/// biased strip at `b` (64 bytes per quad). Each product step is one `vpdpbusd` with B's
/// vector and A's quad broadcast from memory; the bias's share, `128·Σ a` per row, comes
/// from one more `vpdpbusd` of A's 16 quads (one vector) with all-ones bytes.
///
/// # Safety
/// As [`Kernel::micro`]; AVX-512 F/BW and AVX512_VNNI present.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn micro(kq: usize, a: *const i32, b: *const i8, c: CTile<i32>) {
    let mut acc = [_mm512_setzero_si512(); MR];
    let mut rowsum = _mm512_setzero_si512();
    let ones = _mm512_set1_epi8(1);
    // SAFETY: the caller guarantees 16 × 16 i32 tiles at c.inp (readable, unless null) and
    // c.out (writable) with their row strides, MR·kq words of A and 64·kq bytes of B.
    unsafe {
        if !c.inp.is_null() {
            for (r, row) in acc.iter_mut().enumerate() {
                *row = _mm512_loadu_si512(c.inp.offset(r as isize * c.ld_in) as *const __m512i);
            }
        }
        for q in 0..kq {
            let bv = _mm512_loadu_si512(b.add(64 * q) as *const __m512i);
            let ap = a.add(q * MR);
            rowsum = _mm512_dpbusd_epi32(rowsum, ones, _mm512_loadu_si512(ap as *const __m512i));
            for (r, row) in acc.iter_mut().enumerate() {
                *row = _mm512_dpbusd_epi32(*row, bv, _mm512_set1_epi32(*ap.add(r)));
            }
        }
        let bias = _mm512_slli_epi32::<7>(rowsum);
        for (r, row) in acc.iter().enumerate() {
            let lane = _mm512_permutexvar_epi32(_mm512_set1_epi32(r as i32), bias);
            let cr = c.out.offset(r as isize * c.ld_out) as *mut __m512i;
            _mm512_storeu_si512(cr, _mm512_sub_epi32(*row, lane));
        }
    }
}
