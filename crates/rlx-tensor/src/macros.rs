//! The `shape!` macro and its hidden helpers.

/// Build a [`Shape`](crate::Shape). Default dtype is F32.
///
/// Grammar: `shape![d, d, …]` or `shape![DTYPE; d, d, …]`, where `DTYPE` is a bare
/// [`DType`](crate::DType) variant (`F32`, `BF16`, `I64`, `Bool`, …) and each `d` is
/// - `?` — the dynamic dim `Dim::Dynamic(0)` (every bare `?` is the same symbol),
/// - `?N` with an integer literal — `Dim::Dynamic(N)`,
/// - any `usize` expression — a static dim (`4`, `n`, `w / 2`, `cfg.width * 2`).
///
/// A trailing comma is allowed; at least one dim is required.
///
/// ```
/// use rlx_tensor::{shape, DType, Dim, Shape};
/// assert_eq!(shape![2, 3], Shape::new(&[2, 3], DType::F32));
/// let w = 8;
/// let s = shape![BF16; ?, ?1, w / 2,];
/// assert_eq!(s.dims(), &[Dim::Dynamic(0), Dim::Dynamic(1), Dim::Static(4)]);
/// assert_eq!(s.dtype(), DType::BF16);
/// ```
#[macro_export]
macro_rules! shape {
    ($dtype:ident ; $($dims:tt)+) => {
        $crate::Shape::from_dims(&$crate::__shape_dims!([] $($dims)+), $crate::DType::$dtype)
    };
    ($($dims:tt)+) => {
        $crate::Shape::from_dims(&$crate::__shape_dims!([] $($dims)+), $crate::DType::F32)
    };
}

/// Hidden helper of [`shape!`]: turns a comma-separated dim list into an array of
/// [`Dim`](crate::Dim)s, one [`__dim!`](crate::__dim) per entry.
#[doc(hidden)]
#[macro_export]
macro_rules! __shape_dims {
    ([$($acc:expr),*]) => {
        [$($acc),*]
    };
    ([$($acc:expr),*] ? $sym:literal $(, $($rest:tt)*)?) => {
        $crate::__shape_dims!([$($acc,)* $crate::__dim!(? $sym)] $($($rest)*)?)
    };
    ([$($acc:expr),*] ? $(, $($rest:tt)*)?) => {
        $crate::__shape_dims!([$($acc,)* $crate::__dim!(?)] $($($rest)*)?)
    };
    ([$($acc:expr),*] $dim:expr $(, $($rest:tt)*)?) => {
        $crate::__shape_dims!([$($acc,)* $crate::__dim!($dim)] $($($rest)*)?)
    };
}

/// Hidden helper of [`shape!`]: one dim token group to a [`Dim`](crate::Dim).
#[doc(hidden)]
#[macro_export]
macro_rules! __dim {
    (?) => {
        $crate::Dim::Dynamic(0)
    };
    (? $sym:literal) => {
        $crate::Dim::Dynamic($sym)
    };
    ($dim:expr) => {
        $crate::Dim::Static($dim)
    };
}
