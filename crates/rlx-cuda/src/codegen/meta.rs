//! Run-time integers of a kernel (sizes, strides, offsets, launch choices) and the
//! buffers it touches.
//!
//! A generated kernel never bakes in a value that depends on a dynamic dim: such values
//! are slots of the kernel's parameter block (`p.m[i]`), filled per call from the
//! binding of the dynamic dims. For static programs the same values are printed as
//! literals, so the compiler folds index arithmetic (divisions by constants).

use rlx_compile::program::{BufId, Kernel, Program, bind_load};
use rlx_ir::{Dim, DimBinding};

/// Where a run-time integer comes from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MSrc {
    /// A dim (static or bound per call).
    Dim(Dim),
    /// The element offset of the strided form of kernel load `l`.
    LoadOff(usize),
    /// The stride of kernel load `.0` along axis `.1` of its view.
    LoadStride(usize, usize),
}

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

/// Evaluate `s` for kernel `k` under `binding` (`bd`: the bound buffer dims).
pub(crate) fn eval(
    _p: &Program,
    k: &Kernel,
    bd: &[Vec<usize>],
    binding: &DimBinding,
    s: &MSrc,
) -> Result<i64, String> {
    Ok(match s {
        MSrc::Dim(d) => d
            .resolve(binding)
            .ok_or_else(|| format!("dynamic dim {d:?} is not bound by the arguments"))?
            as i64,
        MSrc::LoadOff(l) | MSrc::LoadStride(l, _) => {
            let load = &k.loads[*l];
            let st = bind_load(&bd[load.buf], &load.steps, binding).ok_or_else(|| {
                format!(
                    "internal: view of buffer {} has no strided form under this binding",
                    load.buf
                )
            })?;
            match s {
                MSrc::LoadOff(_) => st.offset as i64,
                MSrc::LoadStride(_, a) => st.strides[*a] as i64,
                _ => unreachable!(),
            }
        }
    })
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
