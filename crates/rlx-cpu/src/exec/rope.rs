//! Rotary position embedding (`Op::Rope`) read and written in place.
//!
//! The oracle rotates every pair in f64 and rounds once to the result's dtype; this
//! kernel does the same arithmetic (`a·c − b·s`, `a·s + b·c` in f64, then one rounding
//! with the conversion the oracle uses), so its bits are the oracle's, without the
//! oracle's materialized f64 copies of `x` and the tables (≈ 1 ms per bf16 rope of a
//! 128 × 768 prefill, 24 of them per Llama-100M prompt). Rows (one position of one head)
//! are independent and spread over the pool.

use super::operand::Operand;
use super::par::{SendPtr, chunks, par_for};
use half::{bf16, f16};
use rlx_ir::{DType, RopeStyle};

/// Element access for the float dtypes a rope can hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Elem {
    F32,
    F64,
    F16,
    Bf16,
}

impl Elem {
    fn of(d: DType) -> Option<Elem> {
        Some(match d {
            DType::F32 => Elem::F32,
            DType::F64 => Elem::F64,
            DType::F16 => Elem::F16,
            DType::BF16 => Elem::Bf16,
            _ => return None,
        })
    }

    /// Bytes per element.
    fn width(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::F64 => 8,
            Elem::F16 | Elem::Bf16 => 2,
        }
    }

    /// # Safety
    /// `p` points at element `i` of a buffer of this dtype.
    #[inline(always)]
    unsafe fn load(self, p: *const u8, i: usize) -> f64 {
        // SAFETY: caller; unaligned reads because arena offsets are only byte-aligned
        // to the element size of the buffer's own dtype.
        unsafe {
            match self {
                Elem::F32 => (p as *const f32).add(i).read_unaligned() as f64,
                Elem::F64 => (p as *const f64).add(i).read_unaligned(),
                Elem::F16 => f16::from_bits((p as *const u16).add(i).read_unaligned()).to_f64(),
                Elem::Bf16 => bf16::from_bits((p as *const u16).add(i).read_unaligned()).to_f64(),
            }
        }
    }

    /// Rounds `v` once to this dtype (the oracle's `TensorData::from_f64_as` rule).
    ///
    /// # Safety
    /// `p` points at element `i` of a writable buffer of this dtype.
    #[inline(always)]
    unsafe fn store(self, p: *mut u8, i: usize, v: f64) {
        // SAFETY: caller.
        unsafe {
            match self {
                Elem::F32 => (p as *mut f32).add(i).write_unaligned(v as f32),
                Elem::F64 => (p as *mut f64).add(i).write_unaligned(v),
                Elem::F16 => (p as *mut u16)
                    .add(i)
                    .write_unaligned(rlx_ir::f16_from_f64(v).to_bits()),
                Elem::Bf16 => (p as *mut u16)
                    .add(i)
                    .write_unaligned(rlx_ir::bf16_from_f64(v).to_bits()),
            }
        }
    }
}

/// The rope's geometry, checked against the operands at bind time.
pub(crate) struct RopePlan {
    rows: usize,
    seq: usize,
    heads: usize,
    head_dim: usize,
    half: usize,
    style: RopeStyle,
    cos_stride: usize,
    sin_stride: usize,
    x: (Elem, usize),
    cos: (Elem, usize),
    sin: (Elem, usize),
    out: Elem,
}

impl RopePlan {
    /// `None` when the operands are not dense or their dims are not the ones the oracle
    /// accepts (the generic path then reports the oracle's error).
    pub(crate) fn new(
        inputs: &[Operand],
        head_dim: usize,
        n_rot: usize,
        style: RopeStyle,
        out_dtype: DType,
        out_dims: &[usize],
    ) -> Option<RopePlan> {
        let [x, cos, sin] = inputs else { return None };
        if n_rot == 0 || !n_rot.is_multiple_of(2) || n_rot > head_dim || x.dims != out_dims {
            return None;
        }
        let (batch, seq, heads) = match x.dims[..] {
            [b, s, hidden] if head_dim > 0 && hidden % head_dim == 0 => (b, s, hidden / head_dim),
            [b, s, h, d] if d == head_dim => (b, s, h),
            _ => return None,
        };
        let half = n_rot / 2;
        let stride = |t: &Operand| match t.dims[..] {
            [len] if len >= seq * half => Some(half),
            [rows, w] if rows >= seq && w >= half => Some(w),
            _ => None,
        };
        let operand = |t: &Operand| Some((Elem::of(t.dtype)?, t.dense_offset()?));
        Some(RopePlan {
            rows: batch * seq * heads,
            seq,
            heads,
            head_dim,
            half,
            style,
            cos_stride: stride(cos)?,
            sin_stride: stride(sin)?,
            x: operand(x)?,
            cos: operand(cos)?,
            sin: operand(sin)?,
            out: Elem::of(out_dtype)?,
        })
    }

    /// Rotates every row of `x` into `dst`.
    ///
    /// # Safety
    /// `bases` are the kernel's bound buffers (`bufs` their indices for x, cos, sin);
    /// `dst` holds the result (`rows · head_dim` elements of the output dtype) and is none
    /// of the operands' buffers.
    pub(crate) unsafe fn run(&self, bufs: [usize; 3], bases: &[*mut u8], dst: *mut u8) {
        let at = |(e, off): (Elem, usize), buf: usize| {
            // SAFETY: `off` is the operand's dense offset inside its bound buffer.
            SendPtr(unsafe { bases[buf].add(off * e.width()) })
        };
        let ptrs = Ptrs {
            x: at(self.x, bufs[0]),
            cos: at(self.cos, bufs[1]),
            sin: at(self.sin, bufs[2]),
            out: SendPtr(dst),
        };
        #[cfg(target_arch = "x86_64")]
        let vector = self.style == RopeStyle::NeoX
            && simd::usable(self.x.0, self.cos.0, self.sin.0, self.out);
        #[cfg(not(target_arch = "x86_64"))]
        let vector = false;
        // A few hundred rows per task: each row is head_dim elements.
        let per = (16384 / self.head_dim.max(1)).max(1);
        let tasks = chunks(self.rows, per);
        // The closure cannot fail: par_for's error is always Ok here.
        let _ = par_for(tasks, |t| {
            let (lo, hi) = (t * per, ((t + 1) * per).min(self.rows));
            for row in lo..hi {
                // Rows are ordered (batch, position, head).
                let s = (row / self.heads) % self.seq;
                // SAFETY: `row < rows` and every index below stays in `row`'s head_dim
                // elements of x / out or in the tables' `seq` rows (checked in new).
                unsafe { self.rotate_row(row, s, ptrs, vector) };
            }
            Ok(())
        });
    }

    /// # Safety
    /// As [`RopePlan::run`], for one row `row` at position `s`; `vector` only when
    /// [`simd::usable`] holds.
    #[inline(always)]
    unsafe fn rotate_row(&self, row: usize, s: usize, p: Ptrs, vector: bool) {
        let at = Row {
            base: row * self.head_dim,
            cos: s * self.cos_stride,
            sin: s * self.sin_stride,
        };
        let mut i = 0;
        #[cfg(target_arch = "x86_64")]
        if vector {
            while i + 8 <= self.half {
                let lanes = simd::Lanes {
                    x: p.x.get(),
                    a: at.base + i,
                    b: at.base + i + self.half,
                    cos: p.cos.get(),
                    c: at.cos + i,
                    sin: p.sin.get(),
                    t: at.sin + i,
                };
                let elems = (self.x.0, self.cos.0, self.sin.0);
                // SAFETY: AVX-512 F present (vector); the group stays below `half` and so
                // inside the row and the tables' row `s` (caller).
                if !unsafe { simd::rotate8(lanes, elems, self.out, p.out.get()) } {
                    // A lane outside bf16's normal range: the exact scalar rule.
                    // SAFETY: as above.
                    unsafe { self.rotate_pairs(at, i..i + 8, p) };
                }
                i += 8;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = vector;
        // SAFETY: caller (indices inside this row and the tables' row `s`).
        unsafe {
            self.rotate_pairs(at, i..self.half, p);
            // Dimensions past n_rot pass through (rounded to the output dtype once).
            for i in 2 * self.half..self.head_dim {
                let v = self.x.0.load(p.x.get(), at.base + i);
                self.out.store(p.out.get(), at.base + i, v);
            }
        }
    }

    /// The oracle's arithmetic for pairs `range` of one row, one at a time.
    ///
    /// # Safety
    /// As [`RopePlan::rotate_row`]; `range` inside `0..half`.
    #[inline(always)]
    unsafe fn rotate_pairs(&self, at: Row, range: std::ops::Range<usize>, p: Ptrs) {
        let (xe, ce, se) = (self.x.0, self.cos.0, self.sin.0);
        let (x, out) = (p.x.get(), p.out.get());
        for i in range {
            // SAFETY: caller.
            unsafe {
                let c = ce.load(p.cos.get(), at.cos + i);
                let t = se.load(p.sin.get(), at.sin + i);
                let (ia, ib) = match self.style {
                    RopeStyle::NeoX => (at.base + i, at.base + i + self.half),
                    RopeStyle::GptJ => (at.base + 2 * i, at.base + 2 * i + 1),
                };
                let (a, b) = (xe.load(x, ia), xe.load(x, ib));
                self.out.store(out, ia, a * c - b * t);
                self.out.store(out, ib, b * c + a * t);
            }
        }
    }
}

/// Where the operands' first elements and the result's lie (shared by the row tasks).
#[derive(Clone, Copy)]
struct Ptrs {
    x: SendPtr<u8>,
    cos: SendPtr<u8>,
    sin: SendPtr<u8>,
    out: SendPtr<u8>,
}

/// Element offsets of one row: its first element in x / out, its table rows' starts.
#[derive(Clone, Copy)]
struct Row {
    base: usize,
    cos: usize,
    sin: usize,
}

/// Eight rotate-half pairs at a time in f64 (AVX-512 F), rounded to f32 or bf16 with the
/// oracle's conversions, so the bits are the scalar rule's.
#[cfg(target_arch = "x86_64")]
mod simd {
    use super::Elem;
    use std::arch::x86_64::*;

    /// Whether the vector path serves these dtypes on this CPU (f32 or bf16 everywhere).
    pub(super) fn usable(x: Elem, c: Elem, s: Elem, out: Elem) -> bool {
        let ok = |e: Elem| matches!(e, Elem::F32 | Elem::Bf16);
        ok(x) && ok(c) && ok(s) && ok(out) && std::arch::is_x86_feature_detected!("avx512f")
    }

    /// Element offsets of eight pairs: `x[a..a+8]` pairs with `x[b..b+8]`, rotated by
    /// `cos[c..c+8]`, `sin[t..t+8]`.
    pub(super) struct Lanes {
        pub(super) x: *mut u8,
        pub(super) a: usize,
        pub(super) b: usize,
        pub(super) cos: *mut u8,
        pub(super) c: usize,
        pub(super) sin: *mut u8,
        pub(super) t: usize,
    }

    /// Eight f32 or bf16 elements from element `i` on, widened exactly to f64.
    #[target_feature(enable = "avx512f")]
    unsafe fn load8(e: Elem, p: *const u8, i: usize) -> __m512d {
        // SAFETY: caller (8 elements of `e` from `i`); unaligned loads.
        unsafe {
            let f = match e {
                Elem::Bf16 => {
                    let h = _mm_loadu_si128((p as *const u16).add(i) as *const __m128i);
                    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
                }
                _ => _mm256_loadu_ps((p as *const f32).add(i)),
            };
            _mm512_cvtps_pd(f)
        }
    }

    /// The oracle's f64 → bf16 rule ([`rlx_ir::bf16_from_f64`]): the f64, its exponent
    /// rebiased, rounded once at bit 45 to nearest with ties to even (every lower bit
    /// counts). `None` when a lane is not a normal bf16 after rebiasing (then the scalar
    /// conversion decides); f64 zeros and subnormals give signed zero as there.
    #[target_feature(enable = "avx512f")]
    fn bf16_bits(v: __m512d) -> Option<__m128i> {
        let bits = _mm512_castpd_si512(v);
        let sign = _mm512_and_si512(_mm512_srli_epi64::<48>(bits), _mm512_set1_epi64(0x8000));
        let exp = _mm512_and_si512(_mm512_srli_epi64::<52>(bits), _mm512_set1_epi64(0x7ff));
        // Rebiased exponent in 1..=254 (f64 exponent 897..=1150): a normal bf16.
        let normal = _mm512_cmpge_epu64_mask(exp, _mm512_set1_epi64(897))
            & _mm512_cmple_epu64_mask(exp, _mm512_set1_epi64(1150));
        let zero = _mm512_cmpeq_epu64_mask(exp, _mm512_setzero_si512());
        if normal | zero != 0xff {
            return None;
        }
        // |v| with bf16's exponent in the f64's exponent field: bits 45.. are the bf16.
        let mag = _mm512_sub_epi64(
            _mm512_and_si512(bits, _mm512_set1_epi64(i64::MAX)),
            _mm512_set1_epi64(896 << 52),
        );
        // Adding 2^44 − 1 plus the kept lsb carries into bit 45 exactly when the 45 bits
        // below are above half, or half with an odd lsb; a carry out of the mantissa
        // lands in the exponent (254 + 1 is ∞, the correct overflow).
        let lsb = _mm512_and_si512(_mm512_srli_epi64::<45>(mag), _mm512_set1_epi64(1));
        let bias = _mm512_add_epi64(_mm512_set1_epi64((1 << 44) - 1), lsb);
        let rounded = _mm512_srli_epi64::<45>(_mm512_add_epi64(mag, bias));
        let bits = _mm512_or_si512(sign, rounded);
        let bits = _mm512_mask_mov_epi64(bits, zero, sign);
        Some(_mm512_cvtepi64_epi16(bits))
    }

    /// Rotates eight pairs; `false` (nothing stored) when a bf16 result needs the
    /// scalar rule (outside the normal range, NaN or ∞).
    ///
    /// # Safety
    /// AVX-512 F present; the eight elements at each offset of `l` readable, those at
    /// `l.a` and `l.b` of `out` writable.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rotate8(
        l: Lanes,
        (xe, ce, se): (Elem, Elem, Elem),
        oe: Elem,
        out: *mut u8,
    ) -> bool {
        // SAFETY: caller.
        unsafe {
            let (a, b) = (load8(xe, l.x, l.a), load8(xe, l.x, l.b));
            let (c, t) = (load8(ce, l.cos, l.c), load8(se, l.sin, l.t));
            // Separate roundings in the oracle's order (no fused multiply-add).
            let ra = _mm512_sub_pd(_mm512_mul_pd(a, c), _mm512_mul_pd(b, t));
            let rb = _mm512_add_pd(_mm512_mul_pd(b, c), _mm512_mul_pd(a, t));
            if oe == Elem::Bf16 {
                // Both halves convert before either is stored: all or nothing.
                let (Some(ha), Some(hb)) = (bf16_bits(ra), bf16_bits(rb)) else {
                    return false;
                };
                _mm_storeu_si128((out as *mut u16).add(l.a) as *mut __m128i, ha);
                _mm_storeu_si128((out as *mut u16).add(l.b) as *mut __m128i, hb);
            } else {
                // cvtpd_ps rounds to nearest even, as `v as f32` does.
                _mm256_storeu_ps((out as *mut f32).add(l.a), _mm512_cvtpd_ps(ra));
                _mm256_storeu_ps((out as *mut f32).add(l.b), _mm512_cvtpd_ps(rb));
            }
            true
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Eight lanes through `bf16_bits`, or `None` when it leaves them to the scalar
        /// rule.
        fn vector(v: [f64; 8]) -> Option<[u16; 8]> {
            // SAFETY: only called after checking AVX-512 F; the loads and stores are of
            // local arrays of the right sizes.
            unsafe {
                let h = bf16_bits(_mm512_loadu_pd(v.as_ptr()))?;
                let mut out = [0u16; 8];
                _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, h);
                Some(out)
            }
        }

        #[test]
        fn vector_bf16_rounding_is_the_oracles_at_ties_carries_and_overflow() {
            if !std::arch::is_x86_feature_detected!("avx512f") {
                println!("skipped: no AVX-512 F");
                return;
            }
            let p = |e: i32| 2f64.powi(e);
            let mut vals = vec![
                1.0 + p(-8),          // tie: to even (down)
                1.0 + p(-8) + p(-40), // above the tie by a low-word bit: up
                1.0 + p(-8) + p(-52), // by the last f64 bit: up
                1.0 + p(-8) - p(-52), // just below: down
                1.0 + 3.0 * p(-8),    // tie: to even (up)
                -(1.0 + 3.0 * p(-8) - p(-45)),
                2.0 - p(-9),                    // carries into the next binade
                (2.0 - p(-8)) * p(127),         // the overflow tie: +inf
                (2.0 - p(-8)) * p(127) - p(75), // one f64 ulp below: the largest finite
                p(-126),                        // the smallest normal bf16
                0.0,
                -0.0,
                -5e-324, // f64 subnormal: signed zero
            ];
            // Random values, and each moved onto its bf16 tie and one f64 ulp off it.
            let mut s = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..3000 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let v = f64::from_bits((s & 0x800f_ffff_ffff_ffff) | ((1023 - 60 + s % 120) << 52));
                let tie = f64::from_bits(v.to_bits() >> 45 << 45 | 1 << 44);
                vals.extend([
                    v,
                    tie,
                    f64::from_bits(tie.to_bits() + 1),
                    f64::from_bits(tie.to_bits() - 1),
                ]);
            }
            while !vals.len().is_multiple_of(8) {
                vals.push(1.0);
            }
            for lanes in vals.chunks_exact(8) {
                let v: [f64; 8] = lanes.try_into().unwrap();
                let got = vector(v).expect("all lanes normal or zero");
                for (x, g) in v.iter().zip(got) {
                    let want = rlx_ir::bf16_from_f64(*x).to_bits();
                    assert_eq!(g, want, "{x:e} ({:#x})", x.to_bits());
                }
            }
            // Lanes outside bf16's normal range go to the scalar rule.
            assert!(vector([1.0, 1.0, 1.0, p(-127), 1.0, 1.0, 1.0, 1.0]).is_none());
            assert!(vector([f64::NAN, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]).is_none());
            assert!(vector([p(128), 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]).is_none());
        }
    }
}
