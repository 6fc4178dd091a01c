//! The conventions Rust users expect (issue #20), in one test binary so CI links it once:
//! conversions and reshape targets, error kinds, formatting, typed host data, initializers
//! and the host RNG, `s!` with Rust ranges, and tensors crossing threads.

mod conversions;
mod errors;
mod format;
mod host_data;
mod init;
mod slicing_ranges;
mod threads;
