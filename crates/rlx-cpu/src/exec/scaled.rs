//! Native kernels of the scaled low-precision ops (`ScaledQuantScale`,
//! `ScaledQuantize`, `ScaledMatMul`); semantics are the oracle's
//! (`rlx_ir::interp::scaled`).
//!
//! # The matmul
//!
//! `out = A·Bᵀ (+ bias)` with `A = decode(lq)·ls` (`[m, k]`) and `B = decode(rq)·rs`
//! (`[n, k]`). On the portable path (no AVX-512) the operands are never materialized in
//! f32 either (`scaled/panels.rs`): for every block of at most `NC` rows of `B` and every
//! panel of `KC` columns of K, the `NC × KC` panel of `B`
//! is decoded (code table × block scale) into an f32 scratch (≤ 1 MiB) shared by all
//! threads, then tiles of `MC` rows of `A` are decoded panel by panel into a
//! per-thread scratch and multiplied into their `C` tile with the f32 GEMM, `β = 1`
//! after the first panel. Tiles of `C` are spread over the cores; their sizes depend
//! only on the shapes, so results do not depend on the thread count.
//!
//! # Through a bf16 unit
//!
//! Where every decoded element of both operands is a normal bf16 number or zero (checked
//! once per product from the code table and the range of the block scales: MX and NVFP4
//! elements have at most 6 significant bits, bf16 holds 8) and the CPU has a bf16 unit
//! (AMX tiles or `vdpbf16ps`, see [`crate::gemm::lowp::LowpPath`]), the panels are
//! decoded to bf16 instead — the same values — and multiplied by the bf16 GEMM with f32
//! accumulation: the same error bound as below. Products with elements outside that range
//! (tiny or huge block scales) keep an f32 path, so AMX's flushing of bf16 subnormals
//! never changes a result.
//!
//! # Codes read by the f32 kernel's packers
//!
//! Elsewhere on AVX-512 CPUs (Intel without AMX, or elements a bf16 unit cannot hold) the
//! product is one call of rlx's own f32 kernel whose packers read the codes
//! (`scaled/codes.rs`): each run of 16 codes is decoded in registers (fp8 by bit
//! arithmetic, fp4 / fp6 by a table permute), times its block scale, into the packed
//! panels; a transposed B's 16 × 16 tiles and A's 8 × 16 panels are transposed as bytes
//! before they are decoded. No decoded copy of either operand exists. MX fp8 against the
//! f32 matmul of the same shape (paired medians, Emerald Rapids without AMX, 2 threads),
//! before (bf16 panels widened by the same kernel) → after: 64 × 1024 × 1024 1.29 →
//! 1.01×, 256 rows 1.12 → 1.01×, 1024³ 1.06 → 1.02×, 2048³ 1.07 → 0.99×.
//! `RLX_SCALED_PACKED_CODES=0` turns it off.
//!
//! # On the integer unit
//!
//! Where both formats' codes are small integers times a power of two (fp4 E2M1, fp6
//! E2M3) and the CPU has AVX512_VNNI but no AMX, the product runs on `vpdpbusd`
//! instead (`scaled/vnni.rs`): each scale block's sum is exact in i32 and enters the f32
//! accumulator with one rounding. Emerald Rapids without AMX, one thread, 1024³ from
//! codes: MX fp4 5.6–5.9 ms and NVFP4 7.7 ms against 13.1–13.3 ms for the f32 matmul
//! (the bf16 panels: 14–18 ms). `RLX_SCALED_INT=0` turns it off.
//!
//! # Few rows
//!
//! Up to [`few_rows::FEW_ROWS`] rows of A (16 where the integer unit or AMX would take
//! the product, 8 where the packers would read the codes) — a quantized model's decoding
//! step — the packed paths would decode or pack all of B for a handful of uses of each
//! element; `scaled/few_rows.rs` instead
//! reads B's codes where they lie, decodes them in registers and takes every row's dot
//! product with them. 4096² weights from codes, 2 threads, Emerald Rapids, against the
//! f32 product of the same shape (paired medians of alternated calls): 1 row fp8
//! 0.48–0.78× and fp4 0.39–0.63× its time (the packed paths: 3.3× and 1.5×), 8 rows
//! 0.29–0.50×.
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
//! the partial sums are representable (e.g. small integers times powers of two). The
//! paths round differently within that bound (the integer unit once per scale block,
//! the few-rows path once per sum in 32 lane chains then a fixed fold, the GEMMs per
//! their blocking), so a product's last bits depend on which path its shape and the CPU
//! choose; each path is deterministic and independent of the thread count.

#[cfg(target_arch = "x86_64")]
mod codes;
mod few_rows;
mod panels;
#[cfg(test)]
mod test_data;
mod vnni;

use super::scaled_lut::lut_registers_available;
#[cfg(target_arch = "x86_64")]
use super::scaled_lut::{decode_lut64_bf16, decode_lut256_bf16};
use super::scaled_quant::{
    clean_upper, decode_scale, quant_scale, quant_scale_into, quantize, quantize_into,
};
use crate::gemm::lowp::{LowpPath, bf16};
use panels::{accumulate, accumulate_bf16, bf16_gemm_path};
use rayon::prelude::*;
use rlx_ir::{DType, Op, ScaleLayout, ScaledFormat, TensorData, TensorView};

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
            if out_dims != [ins[0].dims[0], ins[1].dims[0]] {
                return None;
            }
            let (m, n) = (ins[0].dims[0], ins[1].dims[0]);
            // The product is computed in the output bytes themselves where they are
            // aligned for f32 (a separate f32 result and its byte copy cost ~10% of a
            // 1024² product).
            let mut bytes = vec![0u8; m * n * 4];
            let v: Vec<TensorView<'_>> = ins.iter().map(|t| t.view()).collect();
            let formats = [*lhs_format, *rhs_format];
            if cfg!(target_endian = "little")
                && let Some(c) = as_f32_mut(&mut bytes)
            {
                scaled_matmul(
                    formats,
                    *scale_layout,
                    [v[0], v[1]],
                    [v[2], v[3]],
                    v.get(4).copied(),
                    c,
                )?;
                return Some(bytes);
            }
            let mut c = vec![0f32; m * n];
            scaled_matmul(
                formats,
                *scale_layout,
                [v[0], v[1]],
                [v[2], v[3]],
                v.get(4).copied(),
                &mut c,
            )?;
            Some(f32_bytes(&c))
        }
        _ => None,
    }
}

/// The scaled ops on operands read where they lie, the result written into `out` (the
/// result's bytes, zeroed or not): the executor's path for dense operands, without the
/// copies of [`eval`]. `None`, having written nothing, for every other op, for malformed
/// operands, or when `out` is not the result's size (or, for the matmul, not aligned for
/// f32): the caller then takes the materializing path.
pub(crate) fn eval_into(
    op: &Op,
    ins: &[TensorView<'_>],
    out_dims: &[usize],
    out: &mut [u8],
) -> Option<()> {
    match op {
        Op::ScaledQuantScale {
            format,
            scale_layout,
        } if ins.len() == 1 => quant_scale_into(*format, *scale_layout, ins[0], out),
        Op::ScaledQuantize {
            format,
            scale_layout,
        } if ins.len() == 2 => quantize_into(*format, *scale_layout, ins[0], ins[1], out),
        Op::ScaledMatMul {
            lhs_format,
            rhs_format,
            scale_layout,
            has_bias,
        } if ins.len() == 4 + *has_bias as usize && cfg!(target_endian = "little") => {
            let (m, n) = (ins[0].dims.first()?, ins[1].dims.first()?);
            if out_dims != [*m, *n] || out.len() != m * n * 4 {
                return None;
            }
            let c = as_f32_mut(out)?;
            scaled_matmul(
                [*lhs_format, *rhs_format],
                *scale_layout,
                [ins[0], ins[1]],
                [ins[2], ins[3]],
                ins.get(4).copied(),
                c,
            )
        }
        _ => None,
    }
}

/// `bytes` as f32s, when they are aligned for f32 (every bit pattern is a valid f32).
fn as_f32_mut(bytes: &mut [u8]) -> Option<&mut [f32]> {
    // SAFETY: every bit pattern is a valid f32; align_to_mut only hands out the aligned
    // middle.
    let (pre, mid, post) = unsafe { bytes.align_to_mut::<f32>() };
    (pre.is_empty() && post.is_empty()).then_some(mid)
}

/// The little-endian bytes of `v` (a byte-wise `flat_map` collect of a 1024² result
/// took longer than the bf16 product itself).
fn f32_bytes(v: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; v.len() * 4];
    for (o, x) in out.chunks_exact_mut(4).zip(v) {
        o.copy_from_slice(&x.to_le_bytes());
    }
    out
}

/// An operand's block scales: one code per block (`rows × k/block`), read through the
/// layout's table where they lie (decoding them into a vector of f32 cost a 2–4 MiB
/// allocation, its page faults and a pass, per call, at 4096²).
struct Scales<'a> {
    codes: &'a [u8],
    /// The scale of each code (an E8M0 or E4M3 scale is exact in f32: 2^−127 is an f32
    /// subnormal).
    table: [f32; 256],
    /// The smallest and largest code present (`None` for no scales), found once: the
    /// checks of every path read [`Scales::possible`].
    present: Option<(u8, u8)>,
}

impl Scales<'_> {
    /// Scale number `i` (row-major over `rows × k/block`).
    #[inline(always)]
    fn get(&self, i: usize) -> f32 {
        self.table[self.codes[i] as usize]
    }

    /// The scales the codes from the smallest present to the largest present decode to:
    /// a superset of the scales present (exactly them where the table is monotonic, as
    /// E8M0's and positive E4M3's are). The range comes from two vectorized passes over the
    /// bytes, once per operand (a pass over each decoded scale, per check, cost ~0.5 ms at
    /// 4096²).
    fn possible(&self) -> &[f32] {
        match self.present {
            Some((lo, hi)) => &self.table[lo as usize..=hi as usize],
            None => &[],
        }
    }
}

/// One operand: codes `[rows, k]`, the code table, and its block scales.
struct Operand<'a> {
    codes: &'a [u8],
    k: usize,
    lut: [f32; 256],
    /// Codes the table distinguishes (`2^bits` of the format): `lut[c]` depends only on
    /// `c % codes`, as the format's decoding ignores the bits above its width.
    codes_used: usize,
    /// Whether [`decode_lut64_bf16`] serves this operand: at most 64 codes and AVX-512
    /// F/BW (decided once here, not per decoded block).
    lut_in_registers: bool,
    /// The table as bf16 bits, when every entry is exact in bf16 (the low 16 bits of its
    /// f32 are zero) and [`decode_lut256_bf16`] can run (AVX-512 F/BW, wider than 6 bits):
    /// fp8 codes are then looked up 32 at a time in registers instead of one by one.
    lut_bf16: Option<Box<[u16; 256]>>,
    /// Per-block scales (`rows × k/block`), or `None` for per-tensor (factored out).
    scales: Option<Scales<'a>>,
    block: usize,
}

impl<'a> Operand<'a> {
    fn new(
        format: ScaledFormat,
        layout: ScaleLayout,
        q: TensorView<'a>,
        s: TensorView<'a>,
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
                if s.dtype != DType::U8
                    || b == 0
                    || k % b != 0
                    || s.dims.iter().product::<usize>() != rows * (k / b)
                {
                    return None;
                }
                let table = std::array::from_fn(|c| decode_scale(layout, c as f64) as f32);
                (
                    Some(Scales {
                        codes: s.bytes,
                        table,
                        present: s
                            .bytes
                            .iter()
                            .copied()
                            .min()
                            .zip(s.bytes.iter().copied().max()),
                    }),
                    b,
                )
            }
        };
        Some(Operand {
            codes: q.bytes,
            k,
            lut,
            codes_used: 1 << format.bit_width(),
            lut_in_registers: format.bit_width() <= 6 && lut_registers_available(),
            lut_bf16: (format.bit_width() > 6
                && lut_registers_available()
                && lut.iter().all(|v: &f32| v.to_bits() & 0xffff == 0))
            .then(|| Box::new(std::array::from_fn(|c| (lut[c].to_bits() >> 16) as u16))),
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
                    let base = (r0 + r) * per_row;
                    let mut p = 0;
                    while p < kb {
                        let kk = k0 + p;
                        let end = (kk / self.block + 1) * self.block - k0;
                        let end = end.min(kb);
                        let sc = s.get(base + kk / self.block);
                        for (o, &c) in out[p..end].iter_mut().zip(&src[p..end]) {
                            *o = self.lut[c as usize] * sc;
                        }
                        p = end;
                    }
                }
            }
        }
    }

    /// The smallest and largest magnitude of a nonzero finite decoded element (over the
    /// code table and the block scales [`Scales::possible`]); `None` if such a scale is
    /// not finite or every code decodes to zero or a non-finite value.
    fn decoded_range(&self) -> Option<(f32, f32)> {
        let mags = self
            .lut
            .iter()
            .map(|v| v.abs())
            .filter(|v| v.is_finite() && *v > 0.0);
        let (lo, hi) = mags.fold((f32::INFINITY, 0f32), |(l, h), v| (l.min(v), h.max(v)));
        if hi == 0.0 {
            return None;
        }
        let Some(sc) = &self.scales else {
            return Some((lo, hi));
        };
        let mut range = (f32::INFINITY, 0f32);
        for &v in sc.possible() {
            if !v.is_finite() {
                return None;
            }
            if v != 0.0 {
                range = (range.0.min(v.abs()), range.1.max(v.abs()));
            }
        }
        // (All-zero scales: every element is zero, any path gives zeros.)
        Some(if range.1 == 0.0 {
            (lo, hi)
        } else {
            (lo * range.0, hi * range.1)
        })
    }

    /// Whether every decoded element is zero, non-finite (kept as is by the bf16
    /// conversion) or a normal bf16 number (so the conversion is exact and no unit flushes
    /// it): the nonzero magnitudes lie in `[2⁻¹²⁶, 2¹²⁷]`.
    fn bf16_exact(&self) -> bool {
        self.decoded_range()
            .is_some_and(|(lo, hi)| lo >= f32::MIN_POSITIVE && hi <= 2f32.powi(127))
    }

    /// Whether the smallest nonzero product of an element of `self` and one of `other`
    /// is a normal f32 (a bf16 unit flushes subnormal products and sums to zero).
    fn tiny_products_ok(&self, other: &Operand<'_>) -> bool {
        match (self.decoded_range(), other.decoded_range()) {
            (Some((a, _)), Some((b, _))) => a as f64 * b as f64 >= f32::MIN_POSITIVE as f64,
            _ => false,
        }
    }

    /// [`Operand::decode`] into bf16 (exact where [`Operand::bf16_exact`] holds: the
    /// low 16 bits of every decoded f32 are zero, so dropping them is the conversion).
    fn decode_bf16(&self, r0: usize, rows: usize, k0: usize, kb: usize, dst: &mut [bf16]) {
        let per_row = self.k / self.block;
        for r in 0..rows {
            let src = &self.codes[(r0 + r) * self.k + k0..][..kb];
            let out = &mut dst[r * kb..][..kb];
            let Some(s) = &self.scales else {
                self.decode_run_bf16(src, 1.0, out);
                continue;
            };
            let base = (r0 + r) * per_row;
            // The scale of sum k0 + q, without a division per run of codes where the block
            // is a power of two (MX: 32, NVFP4: 16).
            let shift = self.block.trailing_zeros();
            let pow2 = self.block.is_power_of_two();
            let scale_at = |q: usize| {
                let kk = k0 + q;
                s.get(base + if pow2 { kk >> shift } else { kk / self.block })
            };
            let mut p = 0;
            #[cfg(target_arch = "x86_64")]
            if let Some(t) = &self.lut_bf16
                && self.block.is_multiple_of(32)
                && k0.is_multiple_of(32)
            {
                // SAFETY: AVX-512 F/BW checked when the table was built; runs of 32 never
                // cross a scale block (block and k0 are multiples of 32).
                p = unsafe { decode_lut256_bf16(t, src, scale_at, out) };
            } else if self.lut_in_registers
                && self.block.is_multiple_of(16)
                && k0.is_multiple_of(16)
            {
                // The whole row in one call (NVFP4's 16-element groups cost a call each
                // otherwise). SAFETY: AVX-512 F/BW and ≤ 64 codes checked at construction;
                // runs of 16 never cross a scale block (block and k0 are multiples of 16).
                p = unsafe { decode_lut64_bf16(&self.lut, self.codes_used, scale_at, src, out) };
            }
            while p < kb {
                let kk = k0 + p;
                let end = ((kk / self.block + 1) * self.block - k0).min(kb);
                let sc = s.get(base + kk / self.block);
                self.decode_run_bf16(&src[p..end], sc, &mut out[p..end]);
                p = end;
            }
        }
    }

    /// `out[i] = bf16(lut[src[i]] · sc)` by truncation (exact where the caller checked
    /// [`Operand::bf16_exact`]). With AVX-512 and a table of at most 64 codes (fp4, fp6 and
    /// narrower), 16 codes at a time are looked up by register permutes; else one by one.
    fn decode_run_bf16(&self, src: &[u8], sc: f32, out: &mut [bf16]) {
        let to_bf16 = |v: f32| bf16::from_bits((v.to_bits() >> 16) as u16);
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if self.lut_in_registers {
            // SAFETY: AVX-512 F/BW and ≤ 64 codes checked at construction; lut[c] depends
            // only on c % codes_used, which the vector lookup applies.
            done = unsafe { decode_lut64_bf16(&self.lut, self.codes_used, |_| sc, src, out) };
        } else if let Some(t) = &self.lut_bf16 {
            // SAFETY: AVX-512 F/BW checked when the table was built.
            done = unsafe { decode_lut256_bf16(t, src, |_| sc, out) };
        }
        for (o, &c) in out[done..].iter_mut().zip(&src[done..]) {
            *o = to_bf16(self.lut[c as usize] * sc);
        }
    }

    /// The per-tensor scale (f64), if the layout is per-tensor.
    fn tensor_scale(s: TensorView<'_>, layout: ScaleLayout) -> Option<f64> {
        match layout {
            ScaleLayout::PerTensor
                if s.dims.iter().product::<usize>() == 1 && s.dtype.is_float() =>
            {
                Some(to_f64_vec(s)[0])
            }
            ScaleLayout::PerTensor => None,
            _ => Some(1.0),
        }
    }
}

/// A raw pointer to `C` shared by the tasks of a product's parallel loop (here and in
/// `vnni.rs` and `few_rows.rs`), each of which writes its own elements.
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: a CPtr is C's base in a product, whose `&mut [f32]` outlives the blocking
// parallel loop; each task writes only its own elements of C (a tile, or its columns),
// so moving the pointer to another thread creates no overlapping access.
unsafe impl Send for CPtr {}
// SAFETY: as for Send: tasks sharing the pointer write disjoint elements.
unsafe impl Sync for CPtr {}

impl CPtr {
    /// The pointer (a method, so that closures capture the `Send` wrapper, not its field).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// `A·Bᵀ (+ bias)` as the little-endian bytes of an f32 `[m, n]` (see the module docs).
fn scaled_matmul(
    formats: [ScaledFormat; 2],
    layout: ScaleLayout,
    q: [TensorView<'_>; 2],
    s: [TensorView<'_>; 2],
    bias: Option<TensorView<'_>>,
    c: &mut [f32],
) -> Option<()> {
    let a = Operand::new(formats[0], layout, q[0], s[0])?;
    let b = Operand::new(formats[1], layout, q[1], s[1])?;
    let (m, n, k) = (q[0].dims[0], q[1].dims[0], a.k);
    if b.k != k || c.len() != m * n {
        return None;
    }
    let sa = Operand::tensor_scale(s[0], layout)?;
    let sb = Operand::tensor_scale(s[1], layout)?;
    let bias = match bias {
        Some(t) if t.dtype.is_float() && t.dims == [n] => Some(to_f64_vec(t)),
        Some(_) => return None,
        None => None,
    };
    // The caller's buffer may hold anything: the products overwrite C on their first K
    // panel, so only an empty K leaves it to be zeroed here.
    if k == 0 {
        c.fill(0.0);
    }
    fill(&a, &b, (m, n, k), sa * sb, bias.as_deref(), c);
    Some(())
}

/// The values of a view as f64 (for the small per-tensor scale and the bias).
fn to_f64_vec(t: TensorView<'_>) -> Vec<f64> {
    TensorData {
        dtype: t.dtype,
        dims: t.dims.to_vec(),
        bytes: t.bytes.to_vec(),
    }
    .to_f64_vec()
}

/// `c = sab · A·Bᵀ (+ bias)` for `c` `[m, n]` (overwritten; zeroed by the caller when
/// `k = 0`).
fn fill(
    a: &Operand<'_>,
    b: &Operand<'_>,
    (m, n, k): (usize, usize, usize),
    sab: f64,
    bias: Option<&[f64]>,
    c: &mut [f32],
) {
    if m > 0 && n > 0 && k > 0 {
        let bf16_path = bf16_gemm_path();
        // AMX's bf16 tiles outrun the integer unit; elsewhere byte-exact formats take it.
        let int_plan = (bf16_path != Some(LowpPath::Amx))
            .then(|| vnni::plan(a, b))
            .flatten();
        let bf16_ok = a.bf16_exact() && b.bf16_exact() && a.tiny_products_ok(b);
        // A bf16 unit (AMX tiles, `vdpbf16ps`) takes what it can hold exactly; else the
        // own f32 kernel decodes the codes while it packs them, where it runs.
        let bf16_unit = bf16_path.filter(|&p| p != LowpPath::Avx512F32 && bf16_ok);
        let packed = int_plan.is_none() && bf16_unit.is_none() && packed_codes_take(a, b, k);
        let few_rows = if int_plan.is_some() || bf16_path == Some(LowpPath::Amx) {
            few_rows::FEW_ROWS_BESIDE_A_UNIT
        } else if packed {
            few_rows::FEW_ROWS_BESIDE_PACKED_CODES
        } else {
            few_rows::FEW_ROWS
        };
        if few_rows::multiply(a, b, (m, n, k), c, few_rows) {
            // A decoding step's few rows: B's codes read once, where they lie.
        } else if let Some(p) = int_plan {
            vnni::accumulate(&p, a, b, (m, n, k), c);
        } else if let Some(path) = bf16_unit {
            accumulate_bf16(path, a, b, (m, n, k), c)
        } else if packed && packed_codes(a, b, (m, n, k), c) {
            // The own f32 kernel read the codes.
        } else {
            match bf16_path {
                Some(path) if bf16_ok => accumulate_bf16(path, a, b, (m, n, k), c),
                _ => accumulate(a, b, m, n, k, c),
            }
        }
    }
    // Per-tensor scales and the bias are applied in f64 (as the oracle adds the bias to
    // its f64 sum), then rounded once.
    if sab != 1.0 || bias.is_some() {
        c.par_chunks_mut(n.max(1)).for_each(|row| {
            clean_upper();
            for (j, v) in row.iter_mut().enumerate() {
                let x = *v as f64 * sab;
                *v = bias.map_or(x, |b| x + b[j]) as f32;
            }
        });
    }
}

/// Whether the own f32 kernel reading the codes (`scaled/codes.rs`) takes a product of
/// these operands over `k` sums.
fn packed_codes_take(a: &Operand<'_>, b: &Operand<'_>, k: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        codes::takes(a, b, k)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, b, k);
        false
    }
}

/// `C = A·Bᵀ` on the own f32 kernel reading the codes, if it takes the product
/// ([`packed_codes_take`]); `false` (having written nothing) leaves it to the others.
fn packed_codes(
    a: &Operand<'_>,
    b: &Operand<'_>,
    mnk: (usize, usize, usize),
    c: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        codes::multiply(a, b, mnk, c)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, b, mnk, c);
        false
    }
}
