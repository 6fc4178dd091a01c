//! # rlx-compile
//!
//! Graph → graph transforms and the compiler pipeline:
//! - [`autodiff`] — reverse mode (vector-Jacobian products),
//! - [`jvp`] — forward mode (Jacobian-vector products),
//! - [`vmap`] — batching,
//! - [`compile`] — [`simplify`] → [`decompose`] → `fuse` → [`schedule`] →
//!   [`memplan`], producing a backend-neutral [`Program`] (kernels over buffers in one
//!   arena) that backends execute; [`explain()`] describes it.
//!
//! Every transform produces an ordinary [`rlx_ir::Graph`], which the compiler fuses
//! and memory-plans like any other.

pub mod autodiff;
mod build;
pub mod decompose;
mod derivatives;
pub mod explain;
pub mod fuse;
pub mod jvp;
pub mod kinks;
pub mod loops;
pub mod memplan;
mod pipeline;
pub mod program;
mod rebuild;
pub mod schedule;
pub mod simplify;
pub mod vmap;

pub use explain::explain;
pub use pipeline::{CompileOptions, compile};
pub use program::Program;
