//! The compile-time diagnostics of `rlx!` as a test crate of its own (nothing to use here).
//!
//! `tests/dsl_ui.rs` compiles every `tests/ui/*.rs` with trybuild, which builds the
//! crates under test in a separate target directory with the features of the crate that
//! runs it. From rlx-tensor under `--all-features` that meant rlx-tensor with every
//! device backend (wgpu, CUDA, …) — about three minutes of CI; from this crate it is
//! rlx-tensor with `dsl` alone, all the UI cases need.
