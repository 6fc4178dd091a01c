//! (cases follow)
