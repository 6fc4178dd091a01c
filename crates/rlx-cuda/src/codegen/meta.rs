//! Run-time integers of a kernel (sizes, strides, offsets, launch choices) and the
//! buffers it touches.
//!
//! A generated kernel never bakes in a value that depends on a dynamic dim: such values
//! are slots of the kernel's parameter block (`p.m[i]`), filled per call from the
//! binding of the dynamic dims. For static programs the same values are printed as
//! literals, so the compiler folds index arithmetic (divisions by constants).

use rlx_compile::program::BufId;
use rlx_ir::{Dim, DimBinding};

/// A pointer a kernel receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ptr {
    /// A program buffer.
    Buf(BufId),
    /// Scratch region `i` of this kernel (reduction partials, packed operands, …).
    Scratch(usize),
    /// The run's error word.
    Err,
}

/// The value of run-time dim `d` under `binding`.
pub(crate) fn eval(binding: &DimBinding, d: Dim) -> Result<i64, String> {
    d.resolve(binding)
        .map(|v| v as i64)
        .ok_or_else(|| format!("dynamic dim {d:?} is not bound by the arguments"))
}

/// A literal of the program's index type.
pub(crate) fn lit(v: i64) -> String {
    if (0..1 << 31).contains(&v) {
        format!("{v}")
    } else if v >= 0 {
        format!("{v}ull")
    } else {
        format!("(I)({v}ll)")
    }
}
