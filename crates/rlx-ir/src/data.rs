//! Host-side tensor data: a dtype, concrete dims, and little-endian bytes.

use crate::interp::{float_to_int, int_for_float, round_float, wrap_int};
use crate::{DType, IrError, IrResult, Shape};
use half::{bf16, f16};

/// A concrete tensor on the host: row-major, little-endian, in its dtype's own width.
///
/// This is what the oracle interpreter and every backend exchange with the host.
///
/// ```
/// use rlx_ir::{DType, TensorData};
/// let t = TensorData::from_f64_as(DType::BF16, &[2], &[1.0, 1.0 + 1.0 / 512.0]);
/// assert_eq!(t.bytes.len(), 4);
/// assert_eq!(t.to_f64_vec(), vec![1.0, 1.0]); // 1 + 2⁻⁹ rounds to even in bf16
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TensorData {
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl TensorData {
    /// Wrap raw bytes, checking their length against `dims` and `dtype`.
    pub fn new(dtype: DType, dims: &[usize], bytes: Vec<u8>) -> IrResult<TensorData> {
        let Some(want) = crate::checked_bytes(dims.iter().copied(), dtype) else {
            return Err(IrError::new(
                "tensor_data",
                format!(
                    "dims {dims:?} {dtype} are too large: the byte size exceeds {} bytes",
                    crate::MAX_TENSOR_BYTES
                ),
            ));
        };
        let n = want / dtype.size_bytes().max(1);
        if want != bytes.len() {
            return Err(IrError::new(
                "tensor_data",
                format!(
                    "{} bytes do not fit {dims:?} {dtype} ({} elements × {} bytes = {})",
                    bytes.len(),
                    n,
                    dtype.size_bytes(),
                    n * dtype.size_bytes()
                ),
            ));
        }
        Ok(TensorData {
            dtype,
            dims: dims.to_vec(),
            bytes,
        })
    }

    /// All-zero data. Panics (with [`TensorData::try_zeros`]'s message) when the
    /// size is too large or cannot be allocated.
    #[track_caller]
    pub fn zeros(dtype: DType, dims: &[usize]) -> TensorData {
        TensorData::try_zeros(dtype, dims).unwrap_or_else(|e| panic!("{e}"))
    }

    /// All-zero data, or an error naming the dims and the bytes when the size
    /// overflows or the allocation fails (never an abort).
    pub fn try_zeros(dtype: DType, dims: &[usize]) -> IrResult<TensorData> {
        let bytes = crate::checked_bytes(dims.iter().copied(), dtype).ok_or_else(|| {
            IrError::new(
                "tensor_data",
                format!(
                    "dims {dims:?} {dtype} are too large: the byte size exceeds {} bytes",
                    crate::MAX_TENSOR_BYTES
                ),
            )
        })?;
        Ok(TensorData {
            dtype,
            dims: dims.to_vec(),
            bytes: try_alloc_zeroed(bytes, &format!("{dims:?} {dtype}"))?,
        })
    }

    /// Element count (saturating; data that exists never gets near it).
    pub fn numel(&self) -> usize {
        self.dims.iter().fold(1usize, |a, &n| a.saturating_mul(n))
    }

    /// The static [`Shape`] of this data.
    pub fn shape(&self) -> Shape {
        Shape::new(&self.dims, self.dtype)
    }

    /// F32 data. Panics when `values.len()` does not match `dims`.
    #[track_caller]
    pub fn from_f32(dims: &[usize], values: &[f32]) -> TensorData {
        check_len(dims, values.len());
        TensorData {
            dtype: DType::F32,
            dims: dims.to_vec(),
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// F64 data.
    #[track_caller]
    pub fn from_f64(dims: &[usize], values: &[f64]) -> TensorData {
        check_len(dims, values.len());
        TensorData {
            dtype: DType::F64,
            dims: dims.to_vec(),
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// I64 data.
    #[track_caller]
    pub fn from_i64(dims: &[usize], values: &[i64]) -> TensorData {
        check_len(dims, values.len());
        TensorData {
            dtype: DType::I64,
            dims: dims.to_vec(),
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// Bool data (one byte per element).
    #[track_caller]
    pub fn from_bool(dims: &[usize], values: &[bool]) -> TensorData {
        check_len(dims, values.len());
        TensorData {
            dtype: DType::Bool,
            dims: dims.to_vec(),
            bytes: values.iter().map(|&v| v as u8).collect(),
        }
    }

    /// Encode real values into any real dtype: floats round to nearest even,
    /// integers truncate toward zero and saturate (NaN → 0), bool is `v != 0`.
    /// For complex dtypes `values` holds interleaved (re, im) pairs.
    #[track_caller]
    pub fn from_f64_as(dtype: DType, dims: &[usize], values: &[f64]) -> TensorData {
        let n = crate::checked_elements(dims).unwrap_or_else(|| {
            panic!("TensorData::from_f64_as: dims {dims:?} have more elements than usize holds")
        });
        let per = if dtype.is_complex() { 2 } else { 1 };
        assert_eq!(
            n * per,
            values.len(),
            "TensorData::from_f64_as: {} values for {dims:?} {dtype} (needs {})",
            values.len(),
            n * per
        );
        let mut bytes = Vec::with_capacity(n * dtype.size_bytes());
        for &v in values {
            encode_f64(dtype, v, &mut bytes);
        }
        TensorData {
            dtype,
            dims: dims.to_vec(),
            bytes,
        }
    }

    /// Encode integer values into any dtype as the oracle's cast does: integer dtypes
    /// wrap (two's complement, [`wrap_int`]), bool is `v != 0`, floats (and the real
    /// part of complex values) are the integer rounded once to nearest even
    /// ([`int_for_float`]).
    #[track_caller]
    pub fn from_i64_as(dtype: DType, dims: &[usize], values: &[i64]) -> TensorData {
        if dtype.is_float() || dtype.is_complex() {
            let f = values.iter().map(|&v| int_for_float(v, dtype));
            return if dtype.is_complex() {
                let pairs: Vec<f64> = f.flat_map(|v| [v, 0.0]).collect();
                TensorData::from_f64_as(dtype, dims, &pairs)
            } else {
                TensorData::from_f64_as(dtype, dims, &f.collect::<Vec<f64>>())
            };
        }
        check_len(dims, values.len());
        let mut bytes = Vec::with_capacity(values.len() * dtype.size_bytes());
        for &v in values {
            push_int(dtype, wrap_int(v, dtype), &mut bytes);
        }
        TensorData {
            dtype,
            dims: dims.to_vec(),
            bytes,
        }
    }

    /// Decode every element to f64 (complex: interleaved (re, im) pairs; bool: 0/1).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        let w = if self.dtype.is_complex() {
            self.dtype.size_bytes() / 2
        } else {
            self.dtype.size_bytes()
        };
        self.bytes
            .chunks_exact(w)
            .map(|c| decode_f64(self.dtype, c))
            .collect()
    }

    /// Decode every element to f32 (through f64).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match self.dtype {
            DType::F32 => self
                .bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            // bf16 is the top half of an f32: widening is a shift (exact), in one pass
            // instead of through an f64 vector (a 1024² bf16 result took longer to read
            // back than its matmul took to compute).
            DType::BF16 => self
                .bytes
                .chunks_exact(2)
                .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
                .collect(),
            // f16 → f32 is exact; `half`'s slice conversion uses F16C where present.
            DType::F16 => {
                use half::slice::HalfFloatSliceExt;
                let h: Vec<f16> = self
                    .bytes
                    .chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]))
                    .collect();
                let mut out = vec![0f32; h.len()];
                h.convert_to_f32_slice(&mut out);
                out
            }
            _ => self.to_f64_vec().into_iter().map(|v| v as f32).collect(),
        }
    }

    /// Decode every element to i64 (exact for integer dtypes; floats truncate).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        let w = self.dtype.size_bytes();
        match self.dtype {
            DType::I64 => self
                .bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            d if d.is_int() || d == DType::Bool => self
                .bytes
                .chunks_exact(w)
                .map(|c| decode_f64(d, c) as i64)
                .collect(),
            _ => self.to_f64_vec().into_iter().map(|v| v as i64).collect(),
        }
    }

    /// Decode every element to bool (`true` iff non-zero).
    pub fn to_bool_vec(&self) -> Vec<bool> {
        let w = self.dtype.size_bytes();
        self.bytes
            .chunks_exact(w)
            .map(|c| c.iter().any(|&b| b != 0) && decode_f64(self.dtype, c) != 0.0)
            .collect()
    }
}

/// A borrowed tensor: dtype, dims and little-endian bytes owned elsewhere.
///
/// Backends receive their arguments as views so large host buffers are never copied
/// just to be passed in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TensorView<'a> {
    pub dtype: DType,
    pub dims: &'a [usize],
    pub bytes: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// Wrap borrowed bytes, checking their length.
    pub fn new(dtype: DType, dims: &'a [usize], bytes: &'a [u8]) -> IrResult<TensorView<'a>> {
        let want = crate::checked_bytes(dims.iter().copied(), dtype);
        if want != Some(bytes.len()) {
            let needed = match want {
                Some(w) => format!("{w} bytes needed"),
                None => "its byte size overflows".to_string(),
            };
            return Err(IrError::new(
                "tensor_view",
                format!(
                    "{} bytes do not fit {dims:?} {dtype} ({needed})",
                    bytes.len()
                ),
            ));
        }
        Ok(TensorView { dtype, dims, bytes })
    }

    /// Element count.
    pub fn numel(&self) -> usize {
        self.dims.iter().fold(1usize, |a, &n| a.saturating_mul(n))
    }

    /// An owned copy.
    pub fn to_owned(&self) -> TensorData {
        TensorData {
            dtype: self.dtype,
            dims: self.dims.to_vec(),
            bytes: self.bytes.to_vec(),
        }
    }
}

impl TensorData {
    /// Borrow as a [`TensorView`].
    pub fn view(&self) -> TensorView<'_> {
        TensorView {
            dtype: self.dtype,
            dims: &self.dims,
            bytes: &self.bytes,
        }
    }
}

#[track_caller]
/// `bytes` zero bytes, or an error naming `what` and the byte count when the
/// allocator refuses (the process does not abort). `vec![0; n]` would abort.
pub fn try_alloc_zeroed(bytes: usize, what: &str) -> IrResult<Vec<u8>> {
    let mut v: Vec<u8> = Vec::new();
    v.try_reserve_exact(bytes).map_err(|_| {
        IrError::out_of_memory(
            "alloc",
            format!(
                "out of memory: cannot allocate {bytes} bytes ({}) for {what}; use smaller shapes",
                human_bytes(bytes)
            ),
        )
    })?;
    v.resize(bytes, 0);
    Ok(v)
}

/// `1.5 GiB`-style byte count for messages.
pub fn human_bytes(bytes: usize) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn check_len(dims: &[usize], len: usize) {
    let n = crate::checked_elements(dims)
        .unwrap_or_else(|| panic!("TensorData: dims {dims:?} have more elements than usize holds"));
    assert_eq!(
        n, len,
        "TensorData: {len} values do not fit dims {dims:?} ({n} elements)"
    );
}

/// Append `v` encoded as one element (or one complex half) of `dtype`, converted by the
/// oracle's cast rules ([`round_float`], the one-rounding f16/bf16 conversions,
/// [`float_to_int`]).
pub(crate) fn encode_f64(dtype: DType, v: f64, out: &mut Vec<u8>) {
    match dtype {
        DType::F32 | DType::C64 => {
            out.extend_from_slice(&(round_float(v, DType::F32) as f32).to_le_bytes())
        }
        DType::F64 | DType::C128 => out.extend_from_slice(&v.to_le_bytes()),
        DType::F16 => out.extend_from_slice(&crate::f16_from_f64(v).to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&crate::bf16_from_f64(v).to_le_bytes()),
        _ => push_int(dtype, float_to_int(v, dtype), out),
    }
}

/// Append `v`, already in the range of the integer dtype (or bool) `dtype`, in its width:
/// the low bytes of an in-range i64 are its two's-complement encoding in any width.
fn push_int(dtype: DType, v: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(&v.to_le_bytes()[..dtype.size_bytes()]);
}

/// Decode one element (or one complex half) of `dtype` from `c`.
pub(crate) fn decode_f64(dtype: DType, c: &[u8]) -> f64 {
    match dtype {
        DType::F32 | DType::C64 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
        DType::F64 | DType::C128 => f64::from_le_bytes(c.try_into().unwrap()),
        DType::F16 => f16::from_le_bytes(c.try_into().unwrap()).to_f64(),
        DType::BF16 => bf16::from_le_bytes(c.try_into().unwrap()).to_f64(),
        DType::I8 => c[0] as i8 as f64,
        DType::U8 => c[0] as f64,
        DType::I16 => i16::from_le_bytes(c.try_into().unwrap()) as f64,
        DType::I32 => i32::from_le_bytes(c.try_into().unwrap()) as f64,
        DType::U32 => u32::from_le_bytes(c.try_into().unwrap()) as f64,
        DType::I64 => i64::from_le_bytes(c.try_into().unwrap()) as f64,
        DType::Bool => (c[0] != 0) as u8 as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_real_dtype() {
        let vals = [0.0, 1.0, -2.0, 3.0, 100.0];
        for d in DType::ALL {
            if d.is_complex() {
                continue;
            }
            let t = TensorData::from_f64_as(d, &[5], &vals);
            assert_eq!(t.bytes.len(), 5 * d.size_bytes());
            let back = t.to_f64_vec();
            for (a, b) in vals.iter().zip(&back) {
                let expect = match d {
                    DType::Bool => (*a != 0.0) as u8 as f64,
                    DType::U8 | DType::U32 if *a < 0.0 => 0.0,
                    _ => *a,
                };
                assert_eq!(expect, *b, "{d}");
            }
        }
    }

    #[test]
    fn half_floats_read_back_as_f32_exactly_including_specials() {
        let vals = [
            0.0,
            -0.0,
            1.5,
            -3.25,
            65504.0,
            6.0e-8,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1.0e-40,
            3.0e38,
        ];
        for d in [DType::BF16, DType::F16] {
            let t = TensorData::from_f64_as(d, &[vals.len()], &vals);
            let fast = t.to_f32_vec();
            let slow: Vec<f32> = t.to_f64_vec().into_iter().map(|v| v as f32).collect();
            assert_eq!(fast.len(), vals.len());
            for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{d} element {i}: {a} vs {b}");
            }
            let nan = TensorData::from_f64_as(d, &[1], &[f64::NAN]).to_f32_vec();
            assert!(nan[0].is_nan(), "{d}: NaN must stay NaN");
        }
        // bf16 bits 0x3fc0 are 1.5; f16 bits 0x3e00 are 1.5 too.
        let b = TensorData::new(DType::BF16, &[1], vec![0xc0, 0x3f]).unwrap();
        assert_eq!(b.to_f32_vec(), vec![1.5]);
        let h = TensorData::new(DType::F16, &[1], vec![0x00, 0x3e]).unwrap();
        assert_eq!(h.to_f32_vec(), vec![1.5]);
    }

    #[test]
    fn float_to_int_truncates_toward_zero_and_saturates() {
        let t = TensorData::from_f64_as(DType::I8, &[4], &[-2.7, 2.7, 1000.0, f64::NAN]);
        assert_eq!(t.to_i64_vec(), vec![-2, 2, 127, 0]);
    }

    #[test]
    fn integers_wrap_when_encoded_from_i64() {
        let t = TensorData::from_i64_as(DType::U8, &[2], &[256 + 7, -1]);
        assert_eq!(t.to_i64_vec(), vec![7, 255]);
    }

    #[test]
    fn floats_encode_into_every_integer_width_truncated_and_saturated() {
        let vals = [0.0, -1.5, 300.7, -40000.0, 5e9, -5e9, f64::NAN, 1e30];
        let cases: [(DType, [i64; 8]); 7] = [
            (DType::I8, [0, -1, 127, -128, 127, -128, 0, 127]),
            (DType::U8, [0, 0, 255, 0, 255, 0, 0, 255]),
            (DType::I16, [0, -1, 300, -32768, 32767, -32768, 0, 32767]),
            (
                DType::I32,
                [
                    0,
                    -1,
                    300,
                    -40000,
                    i32::MAX as i64,
                    i32::MIN as i64,
                    0,
                    i32::MAX as i64,
                ],
            ),
            (
                DType::U32,
                [0, 0, 300, 0, u32::MAX as i64, 0, 0, u32::MAX as i64],
            ),
            (
                DType::I64,
                [
                    0,
                    -1,
                    300,
                    -40000,
                    5_000_000_000,
                    -5_000_000_000,
                    0,
                    i64::MAX,
                ],
            ),
            // Bool is `v != 0`: NaN is true.
            (DType::Bool, [0, 1, 1, 1, 1, 1, 1, 1]),
        ];
        for (d, want) in cases {
            let t = TensorData::from_f64_as(d, &[8], &vals);
            assert_eq!(t.bytes.len(), 8 * d.size_bytes(), "{d}");
            assert_eq!(t.to_i64_vec(), want, "{d}");
        }
    }

    #[test]
    fn integers_encode_into_every_width_wrapped_and_bool_is_nonzero() {
        let vals = [70_000, -70_000, -1, (1 << 40) + 5, 0];
        let cases: [(DType, [i64; 5]); 5] = [
            (DType::I8, [112, -112, -1, 5, 0]),
            (DType::I16, [4464, -4464, -1, 5, 0]),
            (DType::I32, [70_000, -70_000, -1, 5, 0]),
            (
                DType::U32,
                [70_000, (1 << 32) - 70_000, u32::MAX as i64, 5, 0],
            ),
            (DType::Bool, [1, 1, 1, 1, 0]),
        ];
        for (d, want) in cases {
            let t = TensorData::from_i64_as(d, &[5], &vals);
            assert_eq!(t.bytes.len(), 5 * d.size_bytes(), "{d}");
            assert_eq!(t.to_i64_vec(), want, "{d}");
        }
    }

    #[test]
    fn large_integers_encode_into_floats_with_one_rounding_like_the_cast() {
        // Each lies just above a tie of the target's precision by 1. Past 2^53, going
        // through an f64 first loses the 1 (2^60's f64 ulp is 2^8), leaving the tie,
        // which rounds to even: one ulp low.
        let p = |e: i32| 2f64.powi(e);
        let cases = [
            (DType::F32, (1i64 << 60) + (1 << 36) + 1, p(60) + p(37)),
            (DType::BF16, (1i64 << 60) + (1 << 52) + 1, p(60) + p(53)),
            (DType::F16, -(1i64 << 14) - (1 << 3) - 1, -(p(14) + p(4))),
            (DType::C64, (1i64 << 60) + (1 << 36) + 1, p(60) + p(37)),
        ];
        for (d, v, want) in cases {
            let t = TensorData::from_i64_as(d, &[1], &[v]);
            assert_eq!(t.to_f64_vec()[0], want, "{d} from {v}");
            let mut g = crate::Graph::new("cast");
            let x = g.input("x", Shape::new(&[1], DType::I64));
            let c = g.add_op(crate::Op::Cast { to: d }, vec![x]).unwrap();
            g.set_outputs(vec![c]);
            let cast = crate::interp::run(&g, &[("x", TensorData::from_i64(&[1], &[v]))]);
            assert_eq!(
                t,
                cast.unwrap()[0],
                "{d}: the encoder and Op::Cast differ for {v}"
            );
        }
    }

    #[test]
    fn new_rejects_wrong_byte_count() {
        let err = TensorData::new(DType::F32, &[2, 2], vec![0; 15]).unwrap_err();
        assert!(err.to_string().contains("15 bytes"), "{err}");
    }
}
