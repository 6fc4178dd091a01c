//! Unit tests of the parser and the lowering, run on `proc_macro2` token streams
//! directly (no rustc expansion involved).

mod lower_errors;
mod lower_output;
mod parse_exprs;
mod parse_stmts;
mod robust;

use proc_macro2::TokenStream;
use quote::quote;

/// Expand an `rlx!` body; the generated code as a whitespace-normalised string.
pub fn build(body: TokenStream) -> Result<String, String> {
    crate::expand_build(quote!((::rlx_tensor) #body))
        .map(|ts| ts.to_string())
        .map_err(|e| e.to_string())
}

/// Expand an `rlx!` body that must fail; its diagnostic.
#[track_caller]
pub fn build_err(body: TokenStream) -> String {
    match build(body) {
        Ok(code) => panic!("expected a diagnostic, got code:\n{code}"),
        Err(e) => e,
    }
}

/// Expand an `rlx!` body that must succeed.
#[track_caller]
pub fn build_ok(body: TokenStream) -> String {
    match build(body) {
        Ok(code) => code,
        Err(e) => panic!("expected code, got diagnostic: {e}"),
    }
}

/// Expand an `rlx_expr!` body.
pub fn expr(body: TokenStream) -> Result<String, String> {
    crate::expand_expr(quote!((::rlx_tensor) #body))
        .map(|ts| ts.to_string())
        .map_err(|e| e.to_string())
}

/// Number of non-overlapping occurrences of `needle` in `hay`.
pub fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}
