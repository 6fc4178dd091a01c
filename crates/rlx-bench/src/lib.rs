//! The reusable parts of `rlx-bench`: W11's GPT model ([`gpt`]) and the deterministic
//! inputs ([`inputs`]) shared by the benchmark binary, its examples and other crates' tests.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod gpt;
pub mod inputs;
