//! # rlx-compile
//!
//! Graph → graph transforms and the compiler pipeline:
//! - [`autodiff`]: reverse mode (vector-Jacobian products),
//! - [`jvp`]: forward mode (Jacobian-vector products),
//! - [`vmap`]: batching.
//!
//! Every transform produces an ordinary [`rlx_ir::Graph`], which the compiler fuses
//! and memory-plans like any other.

pub mod autodiff;
pub mod jvp;
pub mod vmap;
