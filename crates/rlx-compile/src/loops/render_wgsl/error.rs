//! [`WgslError`]: why a loop kernel has no WGSL form.

use crate::loops::Fault;
use rlx_ir::DType;
use std::fmt;

/// Why a loop kernel has no WGSL form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WgslError {
    /// The kernel computes in f64 (WGSL has no f64).
    F64 {
        /// The kernel's name.
        kernel: String,
        /// The construct.
        what: String,
    },
    /// The kernel needs integers wider than 32 bits (WGSL has no i64).
    WideInteger {
        /// The kernel's name.
        kernel: String,
        /// The construct.
        what: String,
    },
    /// An index (extent, offset) does not fit WGSL's `u32` index arithmetic.
    IndexRange {
        /// The kernel's name.
        kernel: String,
        /// The index literal.
        value: i64,
    },
    /// The kernel can raise a run-time error and the embedding has no error channel.
    Fault {
        /// The kernel's name.
        kernel: String,
        /// The error.
        fault: Fault,
    },
    /// The kernel stores elements narrower than a word into an arena not declared atomic.
    NarrowStore {
        /// The kernel's name.
        kernel: String,
        /// The dtype stored.
        dtype: DType,
    },
    /// The kernel exchanges values through shuffles ([`crate::loops::Stmt::ShuffleXor`])
    /// in segments of `width` items, and the embedding does not promise subgroups of
    /// exactly that size ([`super::WgslEmbedding::subgroup_size`]).
    Shuffle {
        /// The kernel's name.
        kernel: String,
        /// The shuffle's segment width.
        width: u32,
        /// The adapter's fixed subgroup size the embedding promised, if any.
        subgroup: Option<u32>,
    },
    /// The kernel multiplies f16/bf16 matrix tiles ([`crate::loops::Stmt::TileMma`]):
    /// bf16 has no WGSL type, and the tile statement is a CUDA/HIP lowering choice.
    TileProduct {
        /// The kernel's name.
        kernel: String,
    },
}

impl fmt::Display for WgslError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fix = "the backend must run this kernel another way (its host fallback)";
        match self {
            WgslError::F64 { kernel, what } => {
                write!(
                    f,
                    "WGSL rendering of loop kernel `{kernel}`: {what} needs f64, which WGSL does not have; {fix}"
                )
            }
            WgslError::WideInteger { kernel, what } => write!(
                f,
                "WGSL rendering of loop kernel `{kernel}`: {what} needs integers wider than 32 bits, which WGSL does not have; {fix}"
            ),
            WgslError::IndexRange { kernel, value } => write!(
                f,
                "WGSL rendering of loop kernel `{kernel}`: index {value} does not fit WGSL's 32-bit index arithmetic; {fix}"
            ),
            WgslError::Fault { kernel, fault } => write!(
                f,
                "WGSL rendering of loop kernel `{kernel}`: the kernel can raise `{}` and the shader has no error channel; {fix}",
                fault.message()
            ),
            WgslError::NarrowStore { kernel, dtype } => write!(
                f,
                "WGSL rendering of loop kernel `{kernel}`: it stores {dtype:?} elements (narrower than a word) into an arena not declared atomic; declare the arena `array<atomic<u32>>`"
            ),
            WgslError::TileProduct { kernel } => write!(
                f,
                "WGSL rendering of loop kernel `{kernel}`: it multiplies f16/bf16 matrix tiles (Stmt::TileMma), which WGSL cannot express (no bf16 type, no fixed warps); lower the kernel without tile products for WGSL"
            ),
            WgslError::Shuffle {
                kernel,
                width,
                subgroup,
            } => write!(
                f,
                "WGSL rendering of loop kernel `{kernel}`: it exchanges values through {width}-lane shuffles, and {}; lower the kernel without shuffles, or with LowerOptions::shuffle_width equal to the adapter's fixed subgroup size",
                match subgroup {
                    Some(n) => format!("the adapter's subgroups have {n} lanes"),
                    None =>
                        "no fixed subgroup size was given (WgslEmbedding::subgroup_size)".into(),
                }
            ),
        }
    }
}

impl std::error::Error for WgslError {}
