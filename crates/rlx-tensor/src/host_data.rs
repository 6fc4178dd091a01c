//! Typed host data in and out: [`HostData`] borrows a flat slice of any element type the
//! runtime takes from the host, [`HostElement`] names those element types, and
//! [`TensorDataExt`] reads results back in their own type.
//!
//! The `&[(&str, &[f32])]` methods (`Func::run`, `Jitted::run`) stay as they are; the
//! typed twins (`run_host`, `try_run_host`) take `&[(&str, HostData<'_>)]` and return
//! every output as [`TensorData`] in the dtype the graph computes.

use crate::{Error, Result};
use half::{bf16, f16};
use rlx_ir::DType;
use std::borrow::Cow;

/// Typed data with dims (the outputs of `run_host` and `run_data`), re-exported from
/// `rlx_ir` so that user code can name it without depending on that crate.
pub use rlx_ir::TensorData;

/// A borrowed flat slice of host values with its element type: one input of
/// [`Func::run_host`](crate::Func::run_host) or [`Jitted::run_host`](crate::Jitted::run_host).
///
/// The dims come from the input's declared shape (dynamic dims are bound from the
/// length, as for `run`); the element type must be the declared dtype exactly — data is
/// never converted silently, and a mismatch is an error naming the input, both dtypes
/// and the fix. On little-endian hosts the slice is passed to the backend in place.
///
/// Build one with `From` from a slice, a `&Vec` or a `&[T; N]` of `f32`, `f64`,
/// [`half::f16`], [`half::bf16`], `i64`, `i32` or `u8`:
///
/// ```
/// use rlx_tensor::{DType, Func, HostData, TensorDataExt, shape};
/// // Token ids as i64 into an embedding lookup.
/// let f = Func::new("embed", |s| {
///     let table = s.param("table", shape![3, 2]);
///     let ids = s.input_dyn("ids", &[rlx_tensor::Dim::Dynamic(0)], DType::I64);
///     table.gather(&ids, 0)
/// })
/// .with_param("table", vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
/// let ids: Vec<i64> = vec![2, 0];
/// let out = f.run_host(&[("ids", HostData::from(&ids))]);
/// assert_eq!(out[0].dims, vec![2, 2]);
/// assert_eq!(out[0].to_vec_of::<f32>(), vec![2.0, 2.5, 0.0, 0.5]);
/// assert_eq!(HostData::from(&ids).dtype(), DType::I64);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HostData<'a> {
    /// 32-bit floats ([`DType::F32`]).
    F32(&'a [f32]),
    /// 64-bit floats ([`DType::F64`]).
    F64(&'a [f64]),
    /// IEEE half floats ([`DType::F16`]).
    F16(&'a [f16]),
    /// bfloat16 ([`DType::BF16`]).
    BF16(&'a [bf16]),
    /// 64-bit signed integers ([`DType::I64`]), e.g. token ids.
    I64(&'a [i64]),
    /// 32-bit signed integers ([`DType::I32`]).
    I32(&'a [i32]),
    /// Bytes ([`DType::U8`]).
    U8(&'a [u8]),
}

impl<'a> HostData<'a> {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            HostData::F32(_) => DType::F32,
            HostData::F64(_) => DType::F64,
            HostData::F16(_) => DType::F16,
            HostData::BF16(_) => DType::BF16,
            HostData::I64(_) => DType::I64,
            HostData::I32(_) => DType::I32,
            HostData::U8(_) => DType::U8,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(d) => d.len(),
            HostData::F64(d) => d.len(),
            HostData::F16(d) => d.len(),
            HostData::BF16(d) => d.len(),
            HostData::I64(d) => d.len(),
            HostData::I32(d) => d.len(),
            HostData::U8(d) => d.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as little-endian bytes (the runtime's layout): borrowed on
    /// little-endian hosts, encoded once on big-endian ones.
    pub(crate) fn le_bytes(&self) -> Cow<'a, [u8]> {
        match *self {
            HostData::F32(d) => le_bytes_of(d),
            HostData::F64(d) => le_bytes_of(d),
            HostData::F16(d) => le_bytes_of(d),
            HostData::BF16(d) => le_bytes_of(d),
            HostData::I64(d) => le_bytes_of(d),
            HostData::I32(d) => le_bytes_of(d),
            HostData::U8(d) => Cow::Borrowed(d),
        }
    }

    /// The values as [`TensorData`] with `dims` (one copy). Errors when the element
    /// count is not the product of `dims`.
    pub fn to_tensor_data(&self, dims: &[usize]) -> Result<TensorData> {
        let need = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if need != Some(self.len()) {
            return Err(Error::shape(format!(
                "HostData::to_tensor_data: {} {} values do not fill dims {dims:?}; pass dims \
                 whose product is {}",
                self.len(),
                self.dtype(),
                self.len()
            )));
        }
        Ok(TensorData {
            dtype: self.dtype(),
            dims: dims.to_vec(),
            bytes: self.le_bytes().into_owned(),
        })
    }
}

/// The bytes of `d` in little-endian order.
fn le_bytes_of<T: HostElement>(d: &[T]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        // SAFETY: `d` is a live, initialized slice borrowed for the returned lifetime;
        // every `HostElement` is a plain number type without padding (f32, f64, f16,
        // bf16, i64, i32, u8), so its `size_of_val(d)` bytes are initialized, and u8 has
        // alignment 1. On this little-endian host they are the little-endian encoding.
        Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(d.as_ptr() as *const u8, std::mem::size_of_val(d))
        })
    } else {
        Cow::Owned(d.iter().flat_map(|v| v.to_le_vec()).collect())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// An element type that host data can hold: `f32`, `f64`, [`half::f16`],
/// [`half::bf16`], `i64`, `i32` and `u8` (sealed: the runtime's dtypes decide the set).
pub trait HostElement: Copy + sealed::Sealed + 'static {
    /// The matching runtime dtype.
    const DTYPE: DType;
    /// Wrap a slice of this type.
    fn host_data(values: &[Self]) -> HostData<'_>;
    /// Decode one value from its little-endian bytes (`size_of::<Self>()` of them).
    fn from_le_slice(bytes: &[u8]) -> Self;
    /// The little-endian bytes of one value.
    fn to_le_vec(self) -> Vec<u8>;
}

macro_rules! host_element {
    ($t:ty, $variant:ident) => {
        impl sealed::Sealed for $t {}
        impl HostElement for $t {
            const DTYPE: DType = DType::$variant;
            fn host_data(values: &[Self]) -> HostData<'_> {
                HostData::$variant(values)
            }
            fn from_le_slice(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("one element's bytes"))
            }
            fn to_le_vec(self) -> Vec<u8> {
                self.to_le_bytes().to_vec()
            }
        }
    };
}
host_element!(f32, F32);
host_element!(f64, F64);
host_element!(f16, F16);
host_element!(bf16, BF16);
host_element!(i64, I64);
host_element!(i32, I32);
host_element!(u8, U8);

impl<'a, T: HostElement> From<&'a [T]> for HostData<'a> {
    fn from(values: &'a [T]) -> HostData<'a> {
        T::host_data(values)
    }
}

impl<'a, T: HostElement> From<&'a Vec<T>> for HostData<'a> {
    fn from(values: &'a Vec<T>) -> HostData<'a> {
        T::host_data(values)
    }
}

impl<'a, T: HostElement, const N: usize> From<&'a [T; N]> for HostData<'a> {
    fn from(values: &'a [T; N]) -> HostData<'a> {
        T::host_data(values)
    }
}

/// Typed readers for [`TensorData`] (the outputs of `run_host` and `run_data`), next to
/// the converting readers it has itself (`to_f32_vec`, `to_f64_vec`, `to_i64_vec`).
///
/// ```
/// use rlx_tensor::TensorDataExt;
/// use rlx_tensor::TensorData;
/// let d = TensorData::from_i64(&[3], &[7, -1, 2]);
/// assert_eq!(d.to_vec_of::<i64>(), vec![7, -1, 2]);
/// let err = d.try_to_vec_of::<f32>().unwrap_err();
/// assert!(err.to_string().contains("holds i64"), "{err}");
/// ```
pub trait TensorDataExt {
    /// The values as `T`, which must be the data's dtype exactly (no conversion).
    fn try_to_vec_of<T: HostElement>(&self) -> Result<Vec<T>>;

    /// [`TensorDataExt::try_to_vec_of`] that panics with the error's message.
    #[track_caller]
    fn to_vec_of<T: HostElement>(&self) -> Vec<T> {
        self.try_to_vec_of().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Borrow the values as [`HostData`] for another run when the bytes are suitably
    /// aligned for the dtype (`None` otherwise; then read with `try_to_vec_of`).
    fn as_host_data(&self) -> Option<HostData<'_>>;
}

impl TensorDataExt for TensorData {
    fn try_to_vec_of<T: HostElement>(&self) -> Result<Vec<T>> {
        if self.dtype != T::DTYPE {
            return Err(dtype_error(format!(
                "TensorData::to_vec_of::<{}>: the data holds {} ({:?}); read it as {} \
                 (to_vec_of::<{}>) or convert with to_f32_vec / to_f64_vec / to_i64_vec",
                rust_type_of(T::DTYPE),
                self.dtype,
                self.dims,
                rust_type_of(self.dtype),
                rust_type_of(self.dtype),
            )));
        }
        let size = std::mem::size_of::<T>();
        if !self.bytes.len().is_multiple_of(size) {
            return Err(Error::shape(format!(
                "TensorData::to_vec_of::<{}>: {} bytes are not a whole number of {size}-byte \
                 elements; the data is malformed (build it with TensorData::from_*)",
                rust_type_of(T::DTYPE),
                self.bytes.len()
            )));
        }
        Ok(self
            .bytes
            .chunks_exact(size)
            .map(T::from_le_slice)
            .collect())
    }

    fn as_host_data(&self) -> Option<HostData<'_>> {
        fn cast<T: HostElement>(bytes: &[u8]) -> Option<&[T]> {
            let size = std::mem::size_of::<T>();
            if !cfg!(target_endian = "little")
                || !bytes.len().is_multiple_of(size)
                || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
            {
                return None;
            }
            // SAFETY: the pointer is aligned for T and the length a whole number of Ts
            // (checked above); every bit pattern is a valid value of these number types,
            // and on a little-endian host the runtime's little-endian bytes are T's layout.
            Some(unsafe {
                std::slice::from_raw_parts(bytes.as_ptr() as *const T, bytes.len() / size)
            })
        }
        let b = self.bytes.as_slice();
        Some(match self.dtype {
            DType::F32 => HostData::F32(cast(b)?),
            DType::F64 => HostData::F64(cast(b)?),
            DType::F16 => HostData::F16(cast(b)?),
            DType::BF16 => HostData::BF16(cast(b)?),
            DType::I64 => HostData::I64(cast(b)?),
            DType::I32 => HostData::I32(cast(b)?),
            DType::U8 => HostData::U8(b),
            _ => return None,
        })
    }
}

/// The Rust element type that holds `dtype` in host data (for messages).
pub(crate) fn rust_type_of(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "half::f16",
        DType::BF16 => "half::bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::U8 => "u8",
        DType::I8 => "i8 (not a HostData type; use run_data)",
        DType::I16 => "i16 (not a HostData type; use run_data)",
        DType::U32 => "u32 (not a HostData type; use run_data)",
        DType::Bool => "bool (not a HostData type; use run_data)",
        _ => "its element type (not a HostData type; use run_data)",
    }
}

/// The [`HostData`] variant that holds `dtype` (for messages).
pub(crate) fn variant_of(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "F32",
        DType::F64 => "F64",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I64 => "I64",
        DType::I32 => "I32",
        DType::U8 => "U8",
        _ => "none",
    }
}

/// A dtype-mismatch error.
pub(crate) fn dtype_error(message: String) -> Error {
    Error::dtype(message)
}
