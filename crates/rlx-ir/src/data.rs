//! Host-side tensor data: a dtype, concrete dims, and little-endian bytes.

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

    /// Encode integer values into any dtype: integer dtypes wrap (two's complement),
    /// floats convert, bool is `v != 0`.
    #[track_caller]
    pub fn from_i64_as(dtype: DType, dims: &[usize], values: &[i64]) -> TensorData {
        if !dtype.is_int() {
            let f: Vec<f64> = values.iter().map(|&v| v as f64).collect();
            return if dtype.is_complex() {
                let pairs: Vec<f64> = f.iter().flat_map(|&v| [v, 0.0]).collect();
                TensorData::from_f64_as(dtype, dims, &pairs)
            } else {
                TensorData::from_f64_as(dtype, dims, &f)
            };
        }
        check_len(dims, values.len());
        let mut bytes = Vec::with_capacity(values.len() * dtype.size_bytes());
        for &v in values {
            match dtype {
                DType::I8 => bytes.push(v as i8 as u8),
                DType::U8 => bytes.push(v as u8),
                DType::I16 => bytes.extend_from_slice(&(v as i16).to_le_bytes()),
                DType::I32 => bytes.extend_from_slice(&(v as i32).to_le_bytes()),
                DType::U32 => bytes.extend_from_slice(&(v as u32).to_le_bytes()),
                DType::I64 => bytes.extend_from_slice(&v.to_le_bytes()),
                _ => unreachable!(),
            }
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

/// Append `v` encoded as one element (or one complex half) of `dtype`.
pub(crate) fn encode_f64(dtype: DType, v: f64, out: &mut Vec<u8>) {
    match dtype {
        DType::F32 | DType::C64 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DType::F64 | DType::C128 => out.extend_from_slice(&v.to_le_bytes()),
        DType::F16 => out.extend_from_slice(&crate::f16_from_f64(v).to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&crate::bf16_from_f64(v).to_le_bytes()),
        DType::I8 => out.push((v as i8) as u8),
        DType::U8 => out.push(v as u8),
        DType::I16 => out.extend_from_slice(&(v as i16).to_le_bytes()),
        DType::I32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        DType::U32 => out.extend_from_slice(&(v as u32).to_le_bytes()),
        DType::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
        DType::Bool => out.push((v != 0.0) as u8),
    }
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
    fn new_rejects_wrong_byte_count() {
        let err = TensorData::new(DType::F32, &[2, 2], vec![0; 15]).unwrap_err();
        assert!(err.to_string().contains("15 bytes"), "{err}");
    }
}
