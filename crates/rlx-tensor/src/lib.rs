//! # rlx-tensor
//!
//! Symbolic tensors for Rust with NumPy/JAX ergonomics. Every op records a node in a
//! graph; reading a result compiles the whole expression and runs it on the fastest
//! available backend.
//!
//! ```
//! use rlx_tensor::Tensor;
//! # #[cfg(feature = "eval")] {
//! let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
//! let b = Tensor::ones([3]);
//! let c = (&a + &b).relu();        // graphs auto-merge, nothing runs yet
//! assert_eq!(c.to_vec(), vec![2.0, 3.0, 4.0]);
//! # }
//! ```
#![allow(private_bounds, private_interfaces)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "optim")]
mod checkpoint;
mod concat;
#[cfg(feature = "dsl")]
mod dsl;
mod error;
#[cfg(feature = "eval")]
mod eval;
#[cfg(feature = "eval")]
mod exec;
mod format;
mod func;
#[cfg(feature = "eval")]
mod host_data;
pub mod init;
mod logging;
pub mod lowp;
mod macros;
#[cfg(feature = "eval")]
mod model;
#[cfg(feature = "ndarray")]
mod ndarray_interop;
#[cfg(feature = "optim")]
mod qat;
mod rng;
#[cfg(feature = "safetensors")]
pub mod safetensors;
mod scope;
mod slice;
mod tensor;
#[cfg(feature = "eval")]
mod threads;
#[cfg(feature = "optim")]
mod train;
#[cfg(feature = "optim")]
mod train_fused;
#[cfg(feature = "optim")]
mod train_grads;
#[cfg(feature = "autodiff")]
mod transforms;
#[cfg(feature = "autodiff")]
mod transforms_fwd;

pub use concat::{cat, stack, try_cat, try_stack};
#[cfg(feature = "dsl")]
#[doc(hidden)]
pub use dsl::{__rlx_build, __rlx_expr, __rlx_support};
pub use error::{Cause, Error, Result};
pub use func::Func;
#[cfg(feature = "eval")]
pub use func::Jitted;
#[cfg(feature = "eval")]
pub use host_data::*;
pub use logging::*;
#[cfg(feature = "eval")]
pub use model::Model;
pub use rlx_ir::op::{Activation, MaskKind};
pub use rlx_ir::{DType, Dim, Graph, NodeId, ScaleLayout, ScaledFormat, Shape};
#[cfg(feature = "optim")]
pub use rlx_optim::{
    Adam, AdamCoeffs, AdamW, FusedRule, FusedUpdate, Lion, Muon, OptItem, Optimizer, ParamGroup,
    Sgd, Unfused,
};
#[cfg(all(feature = "safetensors", feature = "eval"))]
pub use safetensors::save_safetensors;
#[cfg(feature = "safetensors")]
pub use safetensors::{
    ParamMismatch, SafeTensors, StoredDType, save_safetensors_data,
    save_safetensors_data_with_metadata,
};
pub use scope::{GraphScope, graph, graph_with};
pub use slice::{SliceAxis, SliceSpec, ax, ix, rg, tail};
pub use tensor::{ReshapeTarget, Scalar, Tensor};
#[cfg(feature = "eval")]
pub use threads::*;
#[cfg(feature = "optim")]
pub use train::LrSchedule;

#[cfg(feature = "eval")]
pub use eval::{
    Device, Materialize, available_devices, cache_compile_count, cache_last_miss, cache_stats,
    clear_cache, fastest_device, fastest_device_for, is_available,
};

/// The README's Rust examples, compiled and run as doctests so the front page cannot
/// drift from the code.
#[cfg(all(doctest, feature = "eval"))]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
