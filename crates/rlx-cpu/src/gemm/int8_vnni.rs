//! The AVX512_VNNI int8 micro-kernel: `vpdpbusd` adds, into each 32-bit lane, the four
//! products of an unsigned byte quad with a signed byte quad — 64 multiply-adds per
//! instruction, twice `vpmaddwd` over i16 (which also needs a separate `vpaddd`).
//!
//! Both operands here are signed, so B is stored biased: `b + 128` as an unsigned byte
//! (`b ^ 0x80`). Then `Σ a·(b + 128) = Σ a·b + 128·Σ a`, and the kernel subtracts
//! `128·Σ a` per row. The row sums are taken once per packed A panel (its trailer,
//! [`Kernel::A_TRAILER`]) and subtracted in the panel's first call of each packed block
//! of sums, rather than by one more `vpdpbusd` per sum quad in every call (1 instruction
//! in 17). A's quad is the signed operand, broadcast straight from memory (`{1to16}`), so
//! a product step is one instruction. Every step is exact in wrapping 32-bit arithmetic
//! (a quad's four products sum to at most 4·128·255 < 2³¹ before the accumulating add,
//! which wraps like `vpaddd`), so the result has the same bits as every other int8 path,
//! whichever call subtracts the bias.
//!
//! Packing: A as `[sum quad][MR rows][4]` plus the 16 row sums, B in the AMX kernel's
//! quad layout (strips of 16 columns, `[quad][16][4]`), one strip per micro-kernel panel.
//!
//! Measured (`gemm_lowp`, `torch._int_mm` of torch 2.15 in the same run): on a 2-vCPU
//! AMD EPYC (Zen 4), 1 thread, 256³–2048³, the first version of this kernel ran 347–377
//! GOP/s against torch's 406–426 (0.81–0.93×; the `vpmaddwd` kernel: 0.31–0.35×);
//! `vpdpbusd` peaks at ~420 there. On a 2-vCPU Emerald Rapids without AMX (2026-12-04),
//! where `vpdpbusd` issues two per cycle (737 GOP/s per core measured), the loop in
//! assembly ([`sums_16x16`]), the row sums moved to the packing, one call per tile with row
//! panels outer and B packed along its rows took 1024³ on one thread from 495 to 669
//! GOP/s (2048³ 447 → 650, 256³ 480 → 572). Against `torch._int_mm` (oneDNN), best of
//! three or four alternated runs each: one thread 664 / 603 / 569 against 693 / 658 / 629
//! at 1024³ / 2048³ / 256³ (0.90–0.96×), two threads 1320 / 1292 / 1027 against
//! 1377 / 1326 / 1086 (0.95–0.97×). What is left: packing (5% of a 1024³ product on one
//! thread, 10% at 256³; each thread packs all of B) and the tile — 16 × 16 with A's
//! quads broadcast from memory reached 707 GOP/s with both panels in L1, 12 × 32 and
//! 8 × 48 tiles with register broadcasts 727–730 (in a later, faster phase of the machine
//! all three ran 730–763 with B streamed from L2: within noise of each other).
//!
//! Tried and not kept (same machine, one thread): prefetching B's strip 512–1024 bytes
//! ahead inside the loop (+0–1%, within noise); the driver asking for the next tile's rows
//! of C one call ahead (−3 to −10% at 256³–2048³ and 1024 × 4096 × 1024: C's rows, 4 KiB
//! apart, share L1 sets with the A panel); no C prefetch at all (within noise from 1024³
//! up, −12% at 256³).

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
    // One call per tile and packed block of sums (KC = KS): the 16 KiB A panel stays in
    // L1 while the B strips of the 512 KiB packed block (1024 sums × 512 columns, half of
    // Zen 4's 1 MiB L2) stream past it (rows outer, see `blocking`).
    const KC: usize = 1024;
    const KS: usize = 1024;
    const MC: usize = 144;
    const NC: usize = 512;
    /// The panel's 16 row sums of A, times 128 (i32).
    const A_TRAILER: usize = 64;

    // Row panels outer at 1024³ on one Emerald Rapids core: 619 GOP/s against 517 with
    // B's strips outer (A's panels then stream from L2 through the embedded broadcasts);
    // with KC = 512, 498–547 against 496.
    fn rows_outer(&self) -> bool {
        true
    }

    unsafe fn pack_a(&self, a: Src<i8>, mb: usize, kb: usize, kpad: usize, dst: &mut [i8]) {
        const { assert!(MR == super::bf16_avx512::A_PANEL) };
        let len = Self::a_panel_len(kpad);
        assert!(
            dst.len() >= mb.div_ceil(MR) * len,
            "DpBusd::pack_a: buffer too small"
        );
        for (p, panel) in dst.chunks_exact_mut(len).take(mb.div_ceil(MR)).enumerate() {
            let (quads, trailer) = panel.split_at_mut(MR * kpad);
            // SAFETY: rows 16p .. 16p + rows of the block are readable (forwarded
            // contract); AVX-512 BW and VNNI are present where this kernel runs.
            unsafe {
                let rows = MR.min(mb - MR * p);
                super::bf16_avx512::pack_a_words::<i8, 4>(a.at(MR * p, 0), rows, kb, kpad, quads);
                store_bias(quads, trailer);
            }
        }
    }

    unsafe fn pack_b(&self, b: Src<i8>, kb: usize, nb: usize, kpad: usize, dst: &mut [i8]) {
        // B in the AMX kernel's quad layout (strips of 16 columns), each byte biased
        // (`b ^ 0x80` = `b + 128` unsigned) as it is stored.
        // SAFETY: forwarded contract; AVX-512 BW is present where this kernel runs.
        unsafe { pack_b_quads(b, (kb, nb), kpad, (NR, 0x80), dst) }
    }

    unsafe fn micro(
        &self,
        (k0, kb, kpad): (usize, usize, usize),
        a: *const i8,
        b: *const i8,
        c: CTile<i32>,
    ) {
        // SAFETY: quad k0/4 starts MR·k0 bytes into A's panel and NR·k0 bytes into B's
        // strip, kb more sums follow inside them, and the trailer's 16 i32 follow the
        // panel's MR·kpad bytes (caller, A_TRAILER); AVX512_VNNI is present where this
        // kernel runs.
        unsafe {
            let bias = (k0 == 0).then(|| a.add(MR * kpad) as *const i32);
            micro(
                kb / 4,
                a.add(MR * k0) as *const i32,
                b.add(NR * k0),
                bias,
                c,
            )
        }
    }
}

/// `128 · Σ a` for each of a packed panel's 16 rows, from its quads (`[quad][16 rows][4]`
/// bytes): one `vpdpbusd` of all-ones bytes with each quad's vector, stored as 16 i32
/// (64 bytes) in `trailer`.
///
/// # Safety
/// AVX-512 F/BW and AVX512_VNNI present.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn store_bias(quads: &[i8], trailer: &mut [i8]) {
    assert!(quads.len().is_multiple_of(64) && trailer.len() >= 64);
    let ones = _mm512_set1_epi8(1);
    let mut sums = _mm512_setzero_si512();
    for q in quads.chunks_exact(64) {
        // SAFETY: `q` holds 64 bytes.
        let v = unsafe { _mm512_loadu_si512(q.as_ptr() as *const __m512i) };
        sums = _mm512_dpbusd_epi32(sums, ones, v);
    }
    // SAFETY: `trailer` holds at least 64 bytes.
    unsafe {
        _mm512_storeu_si512(
            trailer.as_mut_ptr() as *mut __m512i,
            _mm512_slli_epi32::<7>(sums),
        )
    };
}

/// `C[16 × 16] (+)= A·B` over `kq` sum quads: A's quads at `a` (16 words per quad), B's
/// biased strip at `b` (64 bytes per quad); with `bias` (the panel's row sums of A times
/// 128, 16 i32), each row's bias is subtracted too.
///
/// # Safety
/// As [`Kernel::micro`]; `bias`, when given, addresses 16 readable i32 (any alignment: a
/// test packs into a byte `Vec`); AVX-512 F/BW and AVX512_VNNI present.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn micro(kq: usize, a: *const i32, b: *const i8, bias: Option<*const i32>, c: CTile<i32>) {
    let mut acc = [_mm512_setzero_si512(); MR];
    // SAFETY: the caller guarantees 16 × 16 i32 tiles at c.inp (readable, unless null) and
    // c.out (writable) with their row strides, MR·kq words of A, 64·kq bytes of B and the
    // 16 bias words.
    unsafe {
        if !c.inp.is_null() {
            for (r, row) in acc.iter_mut().enumerate() {
                *row = _mm512_loadu_si512(c.inp.offset(r as isize * c.ld_in) as *const __m512i);
            }
        }
        if let Some(bias) = bias {
            for (r, row) in acc.iter_mut().enumerate() {
                *row = _mm512_sub_epi32(*row, _mm512_set1_epi32(bias.add(r).read_unaligned()));
            }
        }
        if kq > 0 {
            sums_16x16(kq, a, b, &mut acc);
        }
        for (r, row) in acc.iter().enumerate() {
            let cr = c.out.offset(r as isize * c.ld_out) as *mut __m512i;
            _mm512_storeu_si512(cr, *row);
        }
    }
}

/// `acc[r] += Σ_q A[q][r] · B[q]` over `kq >= 1` sum quads, in assembly that addresses
/// each panel through its own register. The compiled loop indexed both panels off one
/// register (`[a + i]`, both advance 64 bytes a quad), and Intel cores split an
/// instruction with an indexed memory operand and a separate destination into two
/// micro-ops: one Emerald Rapids core (737 GOP/s `vpdpbusd` peak) ran this loop at
/// 709 GOP/s with base addressing against 602 indexed, and the kernel in a 1024³ product
/// went from 565 to 619.
///
/// # Safety
/// `a` must hold `16 · kq` words and `b` `64 · kq` bytes; `kq >= 1`; AVX512_VNNI present.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn sums_16x16(kq: usize, a: *const i32, b: *const i8, acc: &mut [__m512i; MR]) {
    debug_assert!(kq >= 1);
    // SAFETY: the loop reads kq·64 bytes of A's panel and of B's strip, inside the panels
    // (caller); it writes only the listed registers and no memory.
    unsafe {
        std::arch::asm!(
            "2:",
            "vmovdqu64 {bv}, zmmword ptr [{bp}]",
            "vpdpbusd {c0}, {bv}, dword ptr [{ap}]{{1to16}}",
            "vpdpbusd {c1}, {bv}, dword ptr [{ap} + 4]{{1to16}}",
            "vpdpbusd {c2}, {bv}, dword ptr [{ap} + 8]{{1to16}}",
            "vpdpbusd {c3}, {bv}, dword ptr [{ap} + 12]{{1to16}}",
            "vpdpbusd {c4}, {bv}, dword ptr [{ap} + 16]{{1to16}}",
            "vpdpbusd {c5}, {bv}, dword ptr [{ap} + 20]{{1to16}}",
            "vpdpbusd {c6}, {bv}, dword ptr [{ap} + 24]{{1to16}}",
            "vpdpbusd {c7}, {bv}, dword ptr [{ap} + 28]{{1to16}}",
            "vpdpbusd {c8}, {bv}, dword ptr [{ap} + 32]{{1to16}}",
            "vpdpbusd {c9}, {bv}, dword ptr [{ap} + 36]{{1to16}}",
            "vpdpbusd {c10}, {bv}, dword ptr [{ap} + 40]{{1to16}}",
            "vpdpbusd {c11}, {bv}, dword ptr [{ap} + 44]{{1to16}}",
            "vpdpbusd {c12}, {bv}, dword ptr [{ap} + 48]{{1to16}}",
            "vpdpbusd {c13}, {bv}, dword ptr [{ap} + 52]{{1to16}}",
            "vpdpbusd {c14}, {bv}, dword ptr [{ap} + 56]{{1to16}}",
            "vpdpbusd {c15}, {bv}, dword ptr [{ap} + 60]{{1to16}}",
            "add {ap}, 64",
            "add {bp}, 64",
            "dec {k}",
            "jnz 2b",
            ap = inout(reg) a => _,
            bp = inout(reg) b => _,
            k = inout(reg) kq => _,
            bv = out(zmm_reg) _,
            c0 = inout(zmm_reg) acc[0],
            c1 = inout(zmm_reg) acc[1],
            c2 = inout(zmm_reg) acc[2],
            c3 = inout(zmm_reg) acc[3],
            c4 = inout(zmm_reg) acc[4],
            c5 = inout(zmm_reg) acc[5],
            c6 = inout(zmm_reg) acc[6],
            c7 = inout(zmm_reg) acc[7],
            c8 = inout(zmm_reg) acc[8],
            c9 = inout(zmm_reg) acc[9],
            c10 = inout(zmm_reg) acc[10],
            c11 = inout(zmm_reg) acc[11],
            c12 = inout(zmm_reg) acc[12],
            c13 = inout(zmm_reg) acc[13],
            c14 = inout(zmm_reg) acc[14],
            c15 = inout(zmm_reg) acc[15],
            options(nostack, readonly),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bias (128 · Σa per row) comes from the panel's trailer and is subtracted in the
    /// call that starts at sum 0 only: a tile computed in two calls split at any quad, the
    /// second continuing from the first's partial sums, equals the exact product, and so
    /// does one call over all sums.
    #[test]
    fn a_tile_split_across_calls_subtracts_the_bias_once() {
        if !available() {
            eprintln!("skipped: AVX512_VNNI is not available here");
            return;
        }
        let (k, kpad) = (37, 40);
        let a: Vec<i8> = (0..16 * k).map(|i| (i * 37 % 256) as u8 as i8).collect();
        let b: Vec<i8> = (0..k * 16).map(|i| (i * 101 % 256) as u8 as i8).collect();
        let want: Vec<i32> = (0..256)
            .map(|e| {
                let (i, j) = (e / 16, e % 16);
                (0..k)
                    .map(|p| a[i * k + p] as i32 * b[p * 16 + j] as i32)
                    .sum()
            })
            .collect();
        let mut ap = vec![0i8; DpBusd::a_panel_len(kpad)];
        let mut bp = vec![0i8; 16 * kpad];
        let src = |v: &[i8], rs: isize| Src {
            ptr: v.as_ptr(),
            rs,
            cs: 1,
        };
        let tile = |inp: *const i32, out: *mut i32| CTile {
            inp,
            ld_in: 16,
            out,
            ld_out: 16,
            pf_rows: 0,
            b_streamed: false,
        };
        // SAFETY: the buffers hold a panel of 16 rows and a strip of 16 columns over kpad
        // sums (plus the trailer); the tiles are 16 × 16; VNNI checked above.
        unsafe {
            DpBusd.pack_a(src(&a, k as isize), 16, k, kpad, &mut ap);
            DpBusd.pack_b(src(&b, 16), k, 16, kpad, &mut bp);
            for split in [0, 4, 20, 36] {
                let (mut part, mut c) = (vec![0i32; 256], vec![0i32; 256]);
                if split > 0 {
                    let t = tile(std::ptr::null(), part.as_mut_ptr());
                    DpBusd.micro((0, split, kpad), ap.as_ptr(), bp.as_ptr(), t);
                }
                let inp = if split > 0 {
                    part.as_ptr()
                } else {
                    std::ptr::null()
                };
                let t = tile(inp, c.as_mut_ptr());
                DpBusd.micro((split, kpad - split, kpad), ap.as_ptr(), bp.as_ptr(), t);
                assert_eq!(c, want, "split at sum {split}");
            }
        }
    }
}
