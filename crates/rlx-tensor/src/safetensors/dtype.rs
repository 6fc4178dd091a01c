//! The element types a safetensors file can name, and conversion of stored bytes to an
//! rlx [`DType`].

use crate::{Error, Result};
use rlx_ir::{DType, ScaledFormat, TensorData};
use safetensors::tensor::Dtype as StDtype;
use std::fmt;

/// The element type of a stored tensor, as the safetensors header names it.
///
/// Every name the format defines is here, including those rlx has no [`DType`] for
/// (the fp8 kinds, `U16`, `U64`, the sub-byte MX kinds): [`StoredDType::to_dtype`] says
/// whether a type maps to one, and [`SafeTensors::load`](super::SafeTensors::load)
/// converts the float ones (fp8 included) to any float `DType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoredDType {
    /// `BOOL`: one byte per element, non-zero is true.
    Bool,
    /// `U8`.
    U8,
    /// `I8`.
    I8,
    /// `U16`.
    U16,
    /// `I16`.
    I16,
    /// `U32`.
    U32,
    /// `I32`.
    I32,
    /// `U64`.
    U64,
    /// `I64`.
    I64,
    /// `F16` (IEEE half).
    F16,
    /// `BF16` (bfloat16).
    BF16,
    /// `F32`.
    F32,
    /// `F64`.
    F64,
    /// `C64`: complex with f32 parts.
    C64,
    /// `F8_E4M3` (`torch.float8_e4m3fn`: bias 7, max 448, no infinities).
    F8E4M3,
    /// `F8_E5M2` (`torch.float8_e5m2`: bias 15, IEEE infinities and NaNs).
    F8E5M2,
    /// `F8_E4M3FNUZ` (bias 8, max 240).
    F8E4M3Fnuz,
    /// `F8_E5M2FNUZ` (bias 16).
    F8E5M2Fnuz,
    /// `F8_E8M0`: an MX scale (a power of two); not loadable as values.
    F8E8M0,
    /// `F6_E2M3`: packed 6-bit MX values; not loadable.
    F6E2M3,
    /// `F6_E3M2`: packed 6-bit MX values; not loadable.
    F6E3M2,
    /// `F4`: packed 4-bit MX values; not loadable.
    F4,
    /// A type named by a newer version of the format than this build reads; not loadable.
    Unknown,
}

impl StoredDType {
    pub(crate) fn from_st(d: StDtype) -> StoredDType {
        match d {
            StDtype::BOOL => StoredDType::Bool,
            StDtype::U8 => StoredDType::U8,
            StDtype::I8 => StoredDType::I8,
            StDtype::U16 => StoredDType::U16,
            StDtype::I16 => StoredDType::I16,
            StDtype::U32 => StoredDType::U32,
            StDtype::I32 => StoredDType::I32,
            StDtype::U64 => StoredDType::U64,
            StDtype::I64 => StoredDType::I64,
            StDtype::F16 => StoredDType::F16,
            StDtype::BF16 => StoredDType::BF16,
            StDtype::F32 => StoredDType::F32,
            StDtype::F64 => StoredDType::F64,
            StDtype::C64 => StoredDType::C64,
            StDtype::F8_E4M3 => StoredDType::F8E4M3,
            StDtype::F8_E5M2 => StoredDType::F8E5M2,
            StDtype::F8_E4M3FNUZ => StoredDType::F8E4M3Fnuz,
            StDtype::F8_E5M2FNUZ => StoredDType::F8E5M2Fnuz,
            StDtype::F8_E8M0 => StoredDType::F8E8M0,
            StDtype::F6_E2M3 => StoredDType::F6E2M3,
            StDtype::F6_E3M2 => StoredDType::F6E3M2,
            StDtype::F4 => StoredDType::F4,
            // The enum is non-exhaustive upstream; a newer format version's type.
            _ => StoredDType::Unknown,
        }
    }

    /// The rlx dtype with the same bytes, if there is one (`F8E4M3` and the other kinds
    /// rlx does not store natively have none; they still load *converted* to a float).
    pub fn to_dtype(self) -> Option<DType> {
        Some(match self {
            StoredDType::Bool => DType::Bool,
            StoredDType::U8 => DType::U8,
            StoredDType::I8 => DType::I8,
            StoredDType::I16 => DType::I16,
            StoredDType::U32 => DType::U32,
            StoredDType::I32 => DType::I32,
            StoredDType::I64 => DType::I64,
            StoredDType::F16 => DType::F16,
            StoredDType::BF16 => DType::BF16,
            StoredDType::F32 => DType::F32,
            StoredDType::F64 => DType::F64,
            StoredDType::C64 => DType::C64,
            _ => return None,
        })
    }

    /// Bytes per element (`None` for the packed sub-byte kinds).
    pub fn size_bytes(self) -> Option<usize> {
        Some(match self {
            StoredDType::Bool
            | StoredDType::U8
            | StoredDType::I8
            | StoredDType::F8E4M3
            | StoredDType::F8E5M2
            | StoredDType::F8E4M3Fnuz
            | StoredDType::F8E5M2Fnuz
            | StoredDType::F8E8M0 => 1,
            StoredDType::U16 | StoredDType::I16 | StoredDType::F16 | StoredDType::BF16 => 2,
            StoredDType::U32 | StoredDType::I32 | StoredDType::F32 => 4,
            StoredDType::U64 | StoredDType::I64 | StoredDType::F64 | StoredDType::C64 => 8,
            StoredDType::F6E2M3 | StoredDType::F6E3M2 | StoredDType::F4 | StoredDType::Unknown => {
                return None;
            }
        })
    }

    /// Whether the elements are real floating-point values (fp8 included).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            StoredDType::F16
                | StoredDType::BF16
                | StoredDType::F32
                | StoredDType::F64
                | StoredDType::F8E4M3
                | StoredDType::F8E5M2
                | StoredDType::F8E4M3Fnuz
                | StoredDType::F8E5M2Fnuz
        )
    }

    /// Whether the elements are integers (or bool, read as 0/1).
    pub(crate) fn is_integral(self) -> bool {
        matches!(
            self,
            StoredDType::Bool
                | StoredDType::U8
                | StoredDType::I8
                | StoredDType::U16
                | StoredDType::I16
                | StoredDType::U32
                | StoredDType::I32
                | StoredDType::U64
                | StoredDType::I64
        )
    }

    /// The fp8 format of an fp8 kind.
    fn fp8(self) -> Option<ScaledFormat> {
        match self {
            StoredDType::F8E4M3 => Some(ScaledFormat::F8E4M3),
            StoredDType::F8E5M2 => Some(ScaledFormat::F8E5M2),
            StoredDType::F8E4M3Fnuz => Some(ScaledFormat::F8E4M3Fnuz),
            StoredDType::F8E5M2Fnuz => Some(ScaledFormat::F8E5M2Fnuz),
            _ => None,
        }
    }

    /// The header's name for this type (`"BF16"`, `"F8_E4M3"`, …).
    pub fn name(self) -> &'static str {
        match self {
            StoredDType::Bool => "BOOL",
            StoredDType::U8 => "U8",
            StoredDType::I8 => "I8",
            StoredDType::U16 => "U16",
            StoredDType::I16 => "I16",
            StoredDType::U32 => "U32",
            StoredDType::I32 => "I32",
            StoredDType::U64 => "U64",
            StoredDType::I64 => "I64",
            StoredDType::F16 => "F16",
            StoredDType::BF16 => "BF16",
            StoredDType::F32 => "F32",
            StoredDType::F64 => "F64",
            StoredDType::C64 => "C64",
            StoredDType::F8E4M3 => "F8_E4M3",
            StoredDType::F8E5M2 => "F8_E5M2",
            StoredDType::F8E4M3Fnuz => "F8_E4M3FNUZ",
            StoredDType::F8E5M2Fnuz => "F8_E5M2FNUZ",
            StoredDType::F8E8M0 => "F8_E8M0",
            StoredDType::F6E2M3 => "F6_E2M3",
            StoredDType::F6E3M2 => "F6_E3M2",
            StoredDType::F4 => "F4",
            StoredDType::Unknown => "unknown",
        }
    }
}

impl fmt::Display for StoredDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The safetensors type that stores an rlx dtype (every rlx dtype but `C128` has one).
pub(crate) fn st_dtype_of(d: DType) -> Option<StDtype> {
    Some(match d {
        DType::F32 => StDtype::F32,
        DType::F16 => StDtype::F16,
        DType::BF16 => StDtype::BF16,
        DType::F64 => StDtype::F64,
        DType::I8 => StDtype::I8,
        DType::I16 => StDtype::I16,
        DType::I32 => StDtype::I32,
        DType::I64 => StDtype::I64,
        DType::U8 => StDtype::U8,
        DType::U32 => StDtype::U32,
        DType::Bool => StDtype::BOOL,
        DType::C64 => StDtype::C64,
        DType::C128 => return None,
    })
}

/// A vector of `n` elements reserved fallibly: the sizes come from a file, so a
/// request the allocator refuses is an error, never an abort.
fn reserve<T>(what: &str, n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::out_of_memory(format!(
            "{what}: out of memory: cannot allocate {} for {n} converted values",
            rlx_ir::human_bytes(n.saturating_mul(std::mem::size_of::<T>()))
        ))
    })?;
    Ok(v)
}

/// Stored float bytes as f32 values (exact for every stored float kind but F64).
pub(crate) fn floats_to_f32(what: &str, st: StoredDType, b: &[u8]) -> Result<Vec<f32>> {
    let w = st.size_bytes().unwrap_or(1);
    let mut out = reserve::<f32>(what, b.len() / w)?;
    match st {
        StoredDType::F32 => out.extend(
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        StoredDType::BF16 => out.extend(
            b.chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        StoredDType::F16 => out.extend(
            b.chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        StoredDType::F64 => {
            out.extend(b.chunks_exact(8).map(|c| {
                f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
            }))
        }
        _ => {
            let Some(fmt) = st.fp8() else {
                unreachable!("floats_to_f32 is called for float kinds only")
            };
            // 256 codes: decode each once.
            let table: Vec<f32> = (0..=255u8).map(|c| fmt.decode(c)).collect();
            out.extend(b.iter().map(|&c| table[c as usize]));
        }
    }
    Ok(out)
}

/// Stored integer (or bool) bytes as i128 values (every stored integer fits).
fn ints(what: &str, st: StoredDType, b: &[u8]) -> Result<Vec<i128>> {
    let w = st.size_bytes().unwrap_or(1);
    let mut out = reserve::<i128>(what, b.len() / w)?;
    out.extend(b.chunks_exact(w).map(|c| match st {
        StoredDType::Bool => (c[0] != 0) as i128,
        StoredDType::U8 => c[0] as i128,
        StoredDType::I8 => c[0] as i8 as i128,
        StoredDType::U16 => u16::from_le_bytes([c[0], c[1]]) as i128,
        StoredDType::I16 => i16::from_le_bytes([c[0], c[1]]) as i128,
        StoredDType::U32 => u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i128,
        StoredDType::I32 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i128,
        StoredDType::U64 => u64::from_le_bytes(c.try_into().expect("8 bytes")) as i128,
        StoredDType::I64 => i64::from_le_bytes(c.try_into().expect("8 bytes")) as i128,
        _ => unreachable!("ints is called for integer kinds only"),
    }));
    Ok(out)
}

/// The range an rlx integer dtype holds.
fn int_range(d: DType) -> (i128, i128) {
    match d {
        DType::Bool => (0, 1),
        DType::U8 => (0, u8::MAX as i128),
        DType::I8 => (i8::MIN as i128, i8::MAX as i128),
        DType::I16 => (i16::MIN as i128, i16::MAX as i128),
        DType::U32 => (0, u32::MAX as i128),
        DType::I32 => (i32::MIN as i128, i32::MAX as i128),
        DType::I64 => (i64::MIN as i128, i64::MAX as i128),
        _ => unreachable!("int_range is called for integer dtypes only"),
    }
}

/// The stored bytes `b` of tensor `name` (`st`, `dims`) converted to `to`.
///
/// Floats convert to any float dtype (rounding to nearest even when narrowing);
/// integers convert to integer dtypes that hold every value, or to floats; same-type
/// loads copy the bytes. Floats never convert to integers (that would truncate
/// silently) and the packed MX kinds do not load.
pub(crate) fn convert(
    name: &str,
    st: StoredDType,
    dims: &[usize],
    b: &[u8],
    to: DType,
) -> Result<TensorData> {
    let what = format!("safetensors load of `{name}`");
    if st.to_dtype() == Some(to) {
        let mut bytes = reserve::<u8>(&what, b.len())?;
        bytes.extend_from_slice(b);
        return Ok(TensorData {
            dtype: to,
            dims: dims.to_vec(),
            bytes,
        });
    }
    let refuse = |why: &str| {
        Error::dtype(format!(
            "{what}: the tensor is stored as {st} and cannot be loaded as {to}: {why}"
        ))
    };
    let n = b.len() / st.size_bytes().unwrap_or(1).max(1);
    if st.is_float() {
        if !to.is_float() {
            return Err(refuse(
                "floats load only as float dtypes (F32, F16, BF16, F64); converting to an integer would truncate silently",
            ));
        }
        if st == StoredDType::F64 || to == DType::F64 {
            // Through f64 so that F64 → F16/BF16 rounds once and anything → F64 is exact.
            let vals: Vec<f64> = if st == StoredDType::F64 {
                b.chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect()
            } else {
                floats_to_f32(&what, st, b)?
                    .into_iter()
                    .map(f64::from)
                    .collect()
            };
            return Ok(TensorData::from_f64_as(to, dims, &vals));
        }
        let vals = floats_to_f32(&what, st, b)?;
        let out_bytes = n
            .checked_mul(to.size_bytes())
            .ok_or_else(|| refuse("its converted size overflows usize"))?;
        let mut bytes = reserve::<u8>(&what, out_bytes)?;
        match to {
            DType::F32 => vals
                .iter()
                .for_each(|v| bytes.extend_from_slice(&v.to_le_bytes())),
            DType::BF16 => vals
                .iter()
                .for_each(|&v| bytes.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes())),
            DType::F16 => vals
                .iter()
                .for_each(|&v| bytes.extend_from_slice(&half::f16::from_f32(v).to_le_bytes())),
            _ => unreachable!("to is a float dtype other than F64"),
        }
        return Ok(TensorData {
            dtype: to,
            dims: dims.to_vec(),
            bytes,
        });
    }
    if st.is_integral() {
        if to.is_complex() {
            return Err(refuse("integers do not load as complex values"));
        }
        let vals = ints(&what, st, b)?;
        if to.is_float() {
            let f: Vec<f64> = vals.iter().map(|&v| v as f64).collect();
            return Ok(TensorData::from_f64_as(to, dims, &f));
        }
        let (lo, hi) = int_range(to);
        if let Some((i, v)) = vals.iter().enumerate().find(|(_, v)| **v < lo || **v > hi) {
            return Err(refuse(&format!(
                "element {i} is {v}, outside {to}'s range {lo}..={hi}; load it as a wider integer type"
            )));
        }
        let i64s: Vec<i64> = vals.iter().map(|&v| v as i64).collect();
        let t = if to == DType::Bool {
            let bools: Vec<bool> = i64s.iter().map(|&v| v != 0).collect();
            TensorData::from_bool(dims, &bools)
        } else {
            TensorData::from_i64_as(to, dims, &i64s)
        };
        return Ok(t);
    }
    Err(refuse(match st {
        StoredDType::C64 => "complex values load only as C64",
        StoredDType::Unknown => "this build does not know the type; a newer rlx may",
        _ => "rlx has no conversion for this packed MX type; unpack it with its scales first",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_codes_decode_to_their_values() {
        // e4m3fn: 0x38 = 2^0 · 1.0 = 1, 0x7e = 448 (max), 0xb8 = −1; e5m2: 0x3c = 1.
        let v = floats_to_f32("t", StoredDType::F8E4M3, &[0x38, 0x7e, 0xb8, 0x00]).unwrap();
        assert_eq!(v, [1.0, 448.0, -1.0, 0.0]);
        let v = floats_to_f32("t", StoredDType::F8E5M2, &[0x3c, 0x40]).unwrap();
        assert_eq!(v, [1.0, 2.0]);
    }

    #[test]
    fn bf16_to_f32_is_exact_and_f32_to_bf16_rounds_to_nearest_even() {
        let one = half::bf16::from_f32(1.0).to_le_bytes();
        let d = convert("x", StoredDType::BF16, &[1], &one, DType::F32).unwrap();
        assert_eq!(d.to_f32_vec(), [1.0]);
        // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even → 1.0.
        let x = (1.0f32 + 2f32.powi(-8)).to_le_bytes();
        let d = convert("x", StoredDType::F32, &[1], &x, DType::BF16).unwrap();
        assert_eq!(d.to_f32_vec(), [1.0]);
    }

    #[test]
    fn integers_check_their_range_and_floats_never_become_integers() {
        let b: Vec<u8> = [300i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let e = convert("ids", StoredDType::I64, &[2], &b, DType::U8).unwrap_err();
        assert!(e.to_string().contains("element 0 is 300"), "{e}");
        let d = convert("ids", StoredDType::I64, &[2], &b, DType::I32).unwrap();
        assert_eq!(d.to_i64_vec(), [300, -1]);
        let e = convert("w", StoredDType::F32, &[1], &[0; 4], DType::I32).unwrap_err();
        assert!(e.to_string().contains("floats load only as float"), "{e}");
    }
}
