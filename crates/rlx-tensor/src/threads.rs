//! The CPU backend's thread count.
