//! Tile values and element conversions shared by the tile interpreter.
//!
//! Every expression value is evaluated in one of three compute types: `F32`
//! (f32/f16/bf16 data), `F64` and `I64` (every integer type and bool). A tile value is
//! either a vector of `n` elements (in a register or read in place from a buffer) or
//! one scalar broadcast over the tile.

use half::{bf16, f16};
use rlx_ir::DType;

/// Compute type of a tile value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    F32,
    F64,
    I64,
}

impl Ty {
    /// The compute type of values of `dt` (`None` for complex).
    pub(crate) fn of(dt: DType) -> Option<Ty> {
        Some(match rlx_compile::program::compute_class(dt)? {
            DType::F32 => Ty::F32,
            DType::F64 => Ty::F64,
            _ => Ty::I64,
        })
    }

    /// Bytes per element of this compute type.
    pub(crate) fn size(self) -> usize {
        match self {
            Ty::F32 => 4,
            Ty::F64 | Ty::I64 => 8,
        }
    }
}

/// A tile value: a vector at a pointer (f32/f64/i64 elements by its type) or a
/// scalar's bits (`f32::to_bits`, `f64::to_bits`, `i64 as u64`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum TileValue {
    Vector(*const u8),
    Scalar(u64),
}

/// Conversion between a compute element and its scalar bits.
pub(crate) trait Elem: Copy + Default + Send + Sync + 'static {
    fn to_bits(self) -> u64;
    fn from_bits(b: u64) -> Self;
}

impl Elem for f32 {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        f32::to_bits(self) as u64
    }
    #[inline(always)]
    fn from_bits(b: u64) -> Self {
        f32::from_bits(b as u32)
    }
}

impl Elem for f64 {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        f64::to_bits(self)
    }
    #[inline(always)]
    fn from_bits(b: u64) -> Self {
        f64::from_bits(b)
    }
}

impl Elem for i64 {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        self as u64
    }
    #[inline(always)]
    fn from_bits(b: u64) -> Self {
        b as i64
    }
}

/// `n` elements at `p` as a slice.
///
/// # Safety
/// `p` must point to `n` initialized, aligned elements of `T` that are not written
/// while the slice lives.
#[inline(always)]
pub(crate) unsafe fn sl<'a, T>(p: *const u8, n: usize) -> &'a [T] {
    // SAFETY: the caller guarantees `n` initialized, aligned `T`s at `p`, unwritten while the
    // returned slice lives (this function's contract).
    unsafe { std::slice::from_raw_parts(p as *const T, n) }
}

/// `n` elements at `p` as a mutable slice.
///
/// # Safety
/// `p` must point to `n` aligned elements of `T` that nothing else reads or writes
/// while the slice lives.
#[inline(always)]
pub(crate) unsafe fn slm<'a, T>(p: *mut u8, n: usize) -> &'a mut [T] {
    // SAFETY: the caller guarantees `n` aligned `T`s at `p` that nobody else accesses while the
    // returned slice lives (this function's contract).
    unsafe { std::slice::from_raw_parts_mut(p as *mut T, n) }
}

/// Round an f32 compute value to the precision of `dt` (f16/bf16; identity for f32).
#[inline(always)]
pub(crate) fn round_f32(dt: DType, v: f32) -> f32 {
    match dt {
        DType::F16 => f16::from_f32(v).to_f32(),
        DType::BF16 => bf16::from_f32(v).to_f32(),
        _ => v,
    }
}

/// Round every f32 of `v` to the precision of `dt` (f16/bf16; nothing for f32), in place,
/// with the bits of [`round_f32`] per element (ties to even; NaN stays NaN). The loop is
/// branch-free for bf16 and goes through `half`'s SIMD slice conversions for f16.
pub(crate) fn round_f32_slice(dt: DType, v: &mut [f32]) {
    match dt {
        #[cfg(target_arch = "x86_64")]
        DType::BF16 if bf16_simd::available() => {
            // SAFETY: AVX-512 F/BW/VL present; `v` holds v.len() f32s.
            unsafe { bf16_simd::round(v.as_mut_ptr(), v.len()) }
        }
        DType::BF16 => {
            for x in v {
                let u = x.to_bits();
                let rounded = (u.wrapping_add(0x7fff + ((u >> 16) & 1))) & 0xffff_0000;
                // NaN keeps its bits (as `bf16::from_f32` keeps it NaN, quieted).
                let nan = (u & 0x7fff_ffff) > 0x7f80_0000;
                *x = f32::from_bits(if nan {
                    (u | 0x0040_0000) & 0xffff_0000
                } else {
                    rounded
                });
            }
        }
        DType::F16 => {
            use half::slice::HalfFloatSliceExt;
            let mut buf = [f16::ZERO; 256];
            for chunk in v.chunks_mut(256) {
                let h = &mut buf[..chunk.len()];
                h.convert_from_f32_slice(chunk);
                h.convert_to_f32_slice(chunk);
            }
        }
        _ => {}
    }
}

/// Widen `n` contiguous f16/bf16 elements at `src` into f32s at `dst`.
///
/// # Safety
/// `src` must hold `n` aligned elements of `dt` (F16 or BF16) and `dst` room for `n` f32s,
/// not overlapping.
pub(crate) unsafe fn widen_halves(dt: DType, src: *const u8, dst: *mut f32, n: usize) {
    use half::slice::HalfFloatSliceExt;
    #[cfg(target_arch = "x86_64")]
    if dt == DType::BF16 && bf16_simd::available() {
        // SAFETY: forwarded contract; AVX-512 F/BW/VL present.
        return unsafe { bf16_simd::widen(src as *const u16, dst, n) };
    }
    // SAFETY: the caller guarantees both ranges and that they do not overlap.
    unsafe {
        let out = std::slice::from_raw_parts_mut(dst, n);
        match dt {
            DType::F16 => {
                std::slice::from_raw_parts(src as *const f16, n).convert_to_f32_slice(out)
            }
            _ => std::slice::from_raw_parts(src as *const bf16, n).convert_to_f32_slice(out),
        }
    }
}

/// Narrow `n` f32s at `src` into contiguous f16/bf16 elements at `dst` (round to nearest
/// even, as [`round_f32`]).
///
/// # Safety
/// `src` must hold `n` f32s and `dst` room for `n` aligned elements of `dt` (F16 or BF16),
/// not overlapping.
pub(crate) unsafe fn narrow_halves(dt: DType, src: *const f32, dst: *mut u8, n: usize) {
    use half::slice::HalfFloatSliceExt;
    #[cfg(target_arch = "x86_64")]
    if dt == DType::BF16 && bf16_simd::available() {
        // SAFETY: forwarded contract; AVX-512 F/BW/VL present.
        return unsafe { bf16_simd::narrow(src, dst as *mut u16, n) };
    }
    // SAFETY: the caller guarantees both ranges and that they do not overlap.
    unsafe {
        let input = std::slice::from_raw_parts(src, n);
        match dt {
            DType::F16 => {
                std::slice::from_raw_parts_mut(dst as *mut f16, n).convert_from_f32_slice(input)
            }
            _ => std::slice::from_raw_parts_mut(dst as *mut bf16, n).convert_from_f32_slice(input),
        }
    }
}

/// bf16 ↔ f32 over slices, 16 lanes at a time on AVX-512 (`half`'s slice conversions are
/// scalar loops for bf16, which the compiler vectorizes only to SSE2: the rounding pass
/// of a bf16 matmul took 7% of an MLP's time that way). Same bits as the scalar rules:
/// widening is a shift; narrowing rounds to nearest, ties to even, and keeps a NaN a NaN
/// (quiet bit set, sign and top payload kept). Narrowing with AVX512_BF16's
/// `vcvtneps2bf16` (vectors holding a subnormal, which it flushes, left to the integer
/// rules) and whole vectors stored unmasked was tried on the Emerald Rapids VM
/// (2026-12-04): the bf16 matmul's rounding pass, which reads C from L3, ran no faster.
#[cfg(target_arch = "x86_64")]
mod bf16_simd {
    use std::arch::x86_64::*;

    /// Whether the CPU has what these loops use (decided once by std's feature cache).
    #[inline]
    pub(super) fn available() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
    }

    /// Per 32-bit lane: the bf16 bits (low half) of the f32 bits `x`.
    #[inline(always)]
    fn bf16_bits(x: __m512i) -> __m512i {
        // SAFETY: register-only integer ops; callers enable AVX-512 F.
        unsafe {
            let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(x), _mm512_set1_epi32(1));
            let bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
            let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(x, bias));
            let magnitude = _mm512_and_si512(x, _mm512_set1_epi32(0x7fff_ffff));
            let nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7f80_0000));
            let quiet = _mm512_srli_epi32::<16>(_mm512_or_si512(x, _mm512_set1_epi32(0x0040_0000)));
            _mm512_mask_blend_epi32(nan, rounded, quiet)
        }
    }

    /// The lane mask of the first `n` (< 16) lanes, or all 16.
    #[inline(always)]
    fn lanes(n: usize) -> u16 {
        if n >= 16 { u16::MAX } else { (1u16 << n) - 1 }
    }

    /// `dst[i]` = the bf16 bits of `src[i]` for `i < n`.
    ///
    /// # Safety
    /// `src` readable and `dst` writable for `n` elements; AVX-512 F/BW/VL present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn narrow(src: *const f32, dst: *mut u16, n: usize) {
        for i in (0..n).step_by(16) {
            let k = lanes(n - i);
            // SAFETY: lanes i .. i + 16 masked to those below n (caller's ranges).
            unsafe {
                let x = _mm512_maskz_loadu_epi32(k, src.add(i) as *const i32);
                _mm512_mask_cvtepi32_storeu_epi16(dst.add(i) as *mut i16, k, bf16_bits(x));
            }
        }
    }

    /// `dst[i]` = the f32 value of the bf16 bits `src[i]` for `i < n`.
    ///
    /// # Safety
    /// As [`narrow`], the other way.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn widen(src: *const u16, dst: *mut f32, n: usize) {
        for i in (0..n).step_by(16) {
            let k = lanes(n - i);
            // SAFETY: lanes i .. i + 16 masked to those below n (caller's ranges).
            unsafe {
                let h = _mm256_maskz_loadu_epi16(k, src.add(i) as *const i16);
                let x = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h));
                _mm512_mask_storeu_epi32(dst.add(i) as *mut i32, k, x);
            }
        }
    }

    /// `v[i]` rounded to bf16 precision in place, for `i < n`.
    ///
    /// # Safety
    /// `v` readable and writable for `n` f32s; AVX-512 F/BW/VL present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn round(v: *mut f32, n: usize) {
        for i in (0..n).step_by(16) {
            let k = lanes(n - i);
            // SAFETY: lanes i .. i + 16 masked to those below n (caller's range).
            unsafe {
                let p = v.add(i) as *mut i32;
                let x = _mm512_maskz_loadu_epi32(k, p);
                _mm512_mask_storeu_epi32(p, k, _mm512_slli_epi32::<16>(bf16_bits(x)));
            }
        }
    }
}

/// Read element `i` of a `dt` buffer at `p` as compute bits of `Ty::of(dt)`.
///
/// # Safety
/// `p` must hold at least `i + 1` initialized elements of `dt` and be aligned for `dt`
/// (every buffer the executor hands out is: see `CpuExecutable::run_with_donated`).
#[inline(always)]
pub(crate) unsafe fn read_bits(dt: DType, p: *const u8, i: usize) -> u64 {
    // SAFETY: the caller guarantees `p` holds element `i` of `dt`, aligned for `dt`; each arm
    // reads exactly one element of `dt`'s own width at index `i` (bool is read as its u8 byte,
    // so no invalid-bool value is ever produced).
    unsafe {
        match dt {
            DType::F32 => *(p as *const u32).add(i) as u64,
            DType::F16 => f16::from_bits(*(p as *const u16).add(i)).to_f32().to_bits() as u64,
            DType::BF16 => bf16::from_bits(*(p as *const u16).add(i))
                .to_f32()
                .to_bits() as u64,
            DType::F64 | DType::I64 => *(p as *const u64).add(i),
            DType::I8 => *(p as *const i8).add(i) as i64 as u64,
            DType::U8 | DType::Bool => *p.add(i) as u64,
            DType::I16 => *(p as *const i16).add(i) as i64 as u64,
            DType::I32 => *(p as *const i32).add(i) as i64 as u64,
            DType::U32 => *(p as *const u32).add(i) as u64,
            DType::C64 | DType::C128 => unreachable!("complex values are not evaluated by tiles"),
        }
    }
}

/// Write compute bits `v` (of `Ty::of(dt)`) as element `i` of a `dt` buffer at `p`,
/// rounding (f16/bf16) or wrapping (integers) as the dtype requires.
///
/// # Safety
/// `p` must hold at least `i + 1` elements of `dt`, be aligned for `dt` and not be
/// accessed by anyone else at element `i` meanwhile.
#[inline(always)]
pub(crate) unsafe fn write_bits(dt: DType, p: *mut u8, i: usize, v: u64) {
    // SAFETY: the caller guarantees `p` holds element `i` of `dt`, aligned, and exclusive to
    // this write; each arm writes exactly one element of `dt`'s own width at index `i`.
    unsafe {
        match dt {
            DType::F32 => *(p as *mut u32).add(i) = v as u32,
            DType::F16 => {
                *(p as *mut u16).add(i) = f16::from_f32(f32::from_bits(v as u32)).to_bits()
            }
            DType::BF16 => {
                *(p as *mut u16).add(i) = bf16::from_f32(f32::from_bits(v as u32)).to_bits()
            }
            DType::F64 | DType::I64 => *(p as *mut u64).add(i) = v,
            DType::I8 | DType::U8 => *p.add(i) = v as u8,
            DType::Bool => *p.add(i) = (v != 0) as u8,
            DType::I16 => *(p as *mut u16).add(i) = v as u16,
            DType::I32 | DType::U32 => *(p as *mut u32).add(i) = v as u32,
            DType::C64 | DType::C128 => unreachable!("complex values are not evaluated by tiles"),
        }
    }
}

/// Convert compute bits of dtype `from` to compute bits of dtype `to`: the oracle's
/// `Cast`, through its element rules (`rlx_ir::interp::{round_float, float_to_int,
/// int_for_float, wrap_int}`). f32 → f32-class keeps [`round_f32`] (the same rounding
/// from an exact f32, without the f64 detour).
#[inline]
pub(crate) fn cast_bits(from: DType, to: DType, v: u64) -> u64 {
    use rlx_ir::interp::{float_to_int, int_for_float, round_float, wrap_int};
    let fty = Ty::of(from).expect("real");
    let tty = Ty::of(to).expect("real");
    let float = |x: f64| match tty {
        Ty::F32 => (round_float(x, to) as f32).to_bits() as u64,
        _ => round_float(x, to).to_bits(),
    };
    match (fty, tty) {
        (Ty::F32, Ty::F32) => round_f32(to, f32::from_bits(v as u32)).to_bits() as u64,
        (Ty::F32, Ty::F64) => (f32::from_bits(v as u32) as f64).to_bits(),
        (Ty::F64, Ty::F32 | Ty::F64) => float(f64::from_bits(v)),
        (Ty::F32, Ty::I64) => float_to_int(f32::from_bits(v as u32) as f64, to) as u64,
        (Ty::F64, Ty::I64) => float_to_int(f64::from_bits(v), to) as u64,
        (Ty::I64, Ty::F32 | Ty::F64) => float(int_for_float(v as i64, to)),
        (Ty::I64, Ty::I64) => wrap_int(v as i64, to) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::TensorData;

    /// Every real source value of `dt` worth casting: zeros of both signs, halves and ties,
    /// the integer dtypes' range edges and one past them, f16/bf16/f32 overflow and
    /// underflow, ±inf, NaN, and i64 values beyond 2⁵³ (where an f64 detour rounds twice).
    fn cast_sources(dt: DType) -> TensorData {
        let p = |e: i32| 2f64.powi(e);
        let f: Vec<f64> = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            1.5,
            2.5,
            -2.5,
            0.999,
            -0.999,
            127.0,
            127.9,
            128.0,
            -128.0,
            -128.9,
            -129.0,
            255.0,
            255.9,
            256.0,
            32767.0,
            32768.0,
            -32769.0,
            65504.0,
            65519.0,
            65520.0,
            p(31) - 1.0,
            p(31),
            -p(31) - 1.0,
            p(32),
            p(32) - 0.5,
            p(53) + 2.0,
            p(63),
            -p(63),
            p(64),
            1e10,
            -1e10,
            3.4e38,
            3.5e38,
            -3.5e38,
            1e300,
            1e-8,
            6e-8,
            1e-40,
            -1e-45,
            1.0 + p(-8),
            1.0 + p(-9),
            1.0 + p(-9) + p(-30),
            1.0 + p(-11),
            1.0 + p(-24),
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
        ];
        if dt.is_float() {
            return TensorData::from_f64_as(dt, &[f.len()], &f);
        }
        let mut i: Vec<i64> = f
            .iter()
            .filter(|x| x.is_finite())
            .map(|&x| x as i64)
            .collect();
        let big: i64 = (1 << 60) + (1 << 36) + 1;
        i.extend([
            i64::MAX,
            i64::MIN,
            big,
            -big,
            (1 << 53) + 1,
            (1 << 24) + 1,
            (1 << 24) + 3,
            2049,
            2051,
            257,
            -1,
        ]);
        if dt == DType::Bool {
            let b: Vec<bool> = i.iter().map(|&v| v & 1 == 1).collect();
            return TensorData::from_bool(&[b.len()], &b);
        }
        TensorData::from_i64_as(dt, &[i.len()], &i)
    }

    #[test]
    fn scalar_casts_give_the_oracle_bits_for_every_real_dtype_pair() {
        let real: Vec<DType> = DType::ALL.into_iter().filter(|d| !d.is_complex()).collect();
        for &from in &real {
            let x = cast_sources(from);
            let n = x.dims[0];
            let w = from.size_bytes();
            // An 8-aligned copy of the source elements.
            let mut src = vec![0u64; n];
            // SAFETY: `src` holds n·8 ≥ n·w bytes; x.bytes holds n·w bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(x.bytes.as_ptr(), src.as_mut_ptr() as *mut u8, n * w)
            };
            for &to in &real {
                let want = rlx_ir::interp::eval_op(
                    &rlx_ir::Op::Cast { to },
                    &[&x],
                    &rlx_ir::Shape::new(&[n], to),
                )
                .unwrap();
                let mut out = vec![0u64; n];
                for i in 0..n {
                    // SAFETY: both buffers hold n elements of their dtype, 8-aligned.
                    unsafe {
                        let b = read_bits(from, src.as_ptr() as *const u8, i);
                        write_bits(to, out.as_mut_ptr() as *mut u8, i, cast_bits(from, to, b));
                    }
                }
                let tw = to.size_bytes();
                // SAFETY: `out` holds n·8 ≥ n·tw bytes.
                let got = unsafe { std::slice::from_raw_parts(out.as_ptr() as *const u8, n * tw) };
                for i in 0..n {
                    assert_eq!(
                        &got[i * tw..(i + 1) * tw],
                        &want.bytes[i * tw..(i + 1) * tw],
                        "cast {from} -> {to} of element {i} ({:?})",
                        &x.bytes[i * w..(i + 1) * w]
                    );
                }
            }
        }
    }

    #[test]
    fn reads_and_writes_round_trip_every_real_dtype() {
        for dt in DType::ALL {
            if dt.is_complex() {
                continue;
            }
            let mut buf = vec![0u64; 2];
            let p = buf.as_mut_ptr() as *mut u8;
            let v = match Ty::of(dt).unwrap() {
                Ty::F32 => 3.0f32.to_bits() as u64,
                Ty::F64 => 3.0f64.to_bits(),
                Ty::I64 => {
                    if dt == DType::Bool {
                        1
                    } else {
                        3
                    }
                }
            };
            // SAFETY: `buf` is two u64s (16 bytes, 8-aligned) and index 1 of any real dtype (at
            // most 8 bytes wide) lies inside it.
            unsafe {
                write_bits(dt, p, 1, v);
                assert_eq!(read_bits(dt, p, 1), v, "{dt}");
            }
        }
    }

    #[test]
    fn slice_rounding_and_half_conversions_give_the_per_element_bits() {
        // Every sign/exponent with low-mantissa patterns around the rounding point,
        // specials (±0, ±inf, NaNs), and a pseudo-random spread.
        let mut xs: Vec<f32> = Vec::new();
        for hi in 0..512u32 {
            for lo in [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1000, 0xf000] {
                xs.push(f32::from_bits((hi << 23) | lo));
                xs.push(f32::from_bits((hi << 23) | (1 << 13) | lo));
            }
        }
        xs.extend([
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xffc1_2345),
        ]);
        let mut s = 0x9e37_79b9u32;
        for _ in 0..20_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            xs.push(f32::from_bits(s));
        }
        // Every tail length of the 16-lane loops, from every start offset mod 16, over
        // NaNs, infinities, the largest finite value (rounds to ∞) and ties.
        let mut mixed: Vec<f32> = [0x7fc0_0001u32, 0xffc1_2345, 0x7f80_0001, 0x7f80_0000]
            .into_iter()
            .chain([
                0xff80_0000,
                0x7f7f_ffff,
                0x3f80_8000,
                0x3f81_8000,
                0x8000_0000,
            ])
            .map(f32::from_bits)
            .collect();
        mixed.extend(&xs[4096..4150]);
        for start in 0..16 {
            for len in 0..40 {
                let part = &mixed[start..start + len];
                let mut v = part.to_vec();
                round_f32_slice(DType::BF16, &mut v);
                let mut halves = vec![0xdeadu16; len + 1];
                let mut back = vec![-7.0f32; len + 1];
                // SAFETY: both buffers hold len + 1 elements and do not overlap.
                unsafe {
                    narrow_halves(
                        DType::BF16,
                        part.as_ptr(),
                        halves.as_mut_ptr() as *mut u8,
                        len,
                    );
                    widen_halves(
                        DType::BF16,
                        halves.as_ptr() as *const u8,
                        back.as_mut_ptr(),
                        len,
                    );
                }
                assert_eq!(
                    (halves[len], back[len]),
                    (0xdead, -7.0),
                    "wrote past {len} elements"
                );
                for i in 0..len {
                    let want = round_f32(DType::BF16, part[i]).to_bits();
                    assert_eq!(
                        v[i].to_bits(),
                        want,
                        "round, start {start} len {len} element {i}"
                    );
                    assert_eq!(
                        back[i].to_bits(),
                        want,
                        "narrow+widen, start {start} len {len}"
                    );
                }
            }
        }
        for dt in [DType::F16, DType::BF16] {
            let mut v = xs.clone();
            round_f32_slice(dt, &mut v);
            for (i, (&x, &r)) in xs.iter().zip(&v).enumerate() {
                let want = round_f32(dt, x);
                assert!(
                    r.to_bits() == want.to_bits() || (r.is_nan() && want.is_nan()),
                    "{dt:?} element {i}: {x:e} ({:#x}) rounded to {r:e}, want {want:e}",
                    x.to_bits()
                );
            }
            // Narrow then widen: the per-element write/read bits.
            let mut halves = vec![0u16; xs.len()];
            let mut back = vec![0f32; xs.len()];
            // SAFETY: both buffers hold xs.len() elements and do not overlap.
            unsafe {
                narrow_halves(dt, xs.as_ptr(), halves.as_mut_ptr() as *mut u8, xs.len());
                widen_halves(
                    dt,
                    halves.as_ptr() as *const u8,
                    back.as_mut_ptr(),
                    xs.len(),
                );
            }
            for (i, &x) in xs.iter().enumerate() {
                let mut one = [0u16];
                // SAFETY: a one-element buffer of dt.
                let bits = unsafe {
                    write_bits(dt, one.as_mut_ptr() as *mut u8, 0, x.to_bits() as u64);
                    read_bits(dt, one.as_ptr() as *const u8, 0)
                };
                assert_eq!(halves[i], one[0], "{dt:?} element {i}: {x:e}");
                assert_eq!(back[i].to_bits(), bits as u32, "{dt:?} element {i}");
            }
        }
    }
}
