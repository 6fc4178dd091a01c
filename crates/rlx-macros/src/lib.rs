//! # rlx-macros
//!
//! The proc macros behind `rlx_tensor::rlx!` and `rlx_tensor::rlx_expr!`. Use them
//! through those wrappers (feature `dsl` of rlx-tensor); the wrappers pass the
//! `rlx_tensor` crate path as the first token group so the expansion names
//! `$crate::GraphScope`, `$crate::shape!`, … without the user importing anything.
//!
//! An `rlx!` body is parsed into an AST with spans (`ast`, `parse`, `expr`), then
//! lowered in one pass (`lower`): bindings are resolved, call sugar is expanded, user
//! fns are inlined with renamed locals, literal repeats are unrolled, runtime repeats
//! become `for` loops with loop-carried cells, and scan bodies capture outer tensors
//! as broadcasts. Every mistake becomes a `compile_error!` at the span of the token
//! at fault; the macro never panics on malformed input.

mod ast;
mod expr;
mod lower;
mod parse;

#[cfg(test)]
mod tests;

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use syn::parse::Parser;
use syn::{Error, Result};

/// Expansion of `rlx! { … }` (call it through `rlx_tensor::rlx!`).
#[doc(hidden)]
#[proc_macro]
pub fn __rlx_build(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    finish(expand_build(input.into()))
}

/// Expansion of `rlx_expr!(…)` (call it through `rlx_tensor::rlx_expr!`).
#[doc(hidden)]
#[proc_macro]
pub fn __rlx_expr(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    finish(expand_expr(input.into()))
}

fn finish(r: Result<TokenStream>) -> proc_macro::TokenStream {
    match r {
        Ok(ts) => ts.into(),
        // Parenthesised so the error stands in expression position and no follow-up
        // "expected Graph, found ()" error is reported.
        Err(e) => {
            let err = e.to_compile_error();
            quote::quote!((#err)).into()
        }
    }
}

/// Split `(crate path) body…`.
fn split_krate(input: TokenStream) -> Result<(TokenStream, TokenStream)> {
    let mut it = input.into_iter();
    match it.next() {
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis => {
            Ok((g.stream(), it.collect()))
        }
        other => Err(Error::new(
            other.map_or_else(proc_macro2::Span::call_site, |t| t.span()),
            "use `rlx_tensor::rlx!` / `rlx_tensor::rlx_expr!`; the `__rlx_*` macros are their internals",
        )),
    }
}

/// `rlx!` body → a block expression of type `Graph`.
pub(crate) fn expand_build(input: TokenStream) -> Result<TokenStream> {
    let (krate, body) = split_krate(input)?;
    let program = parse::parse_program.parse2(body)?;
    lower::build(krate, &program)
}

/// `rlx_expr!` body → a block expression of type `Tensor`.
pub(crate) fn expand_expr(input: TokenStream) -> Result<TokenStream> {
    let (krate, body) = split_krate(input)?;
    if body.is_empty() {
        return Err(Error::new(
            proc_macro2::Span::call_site(),
            "`rlx_expr!` needs one expression, like `rlx_expr!(gelu(linear(h, w, b)))`",
        ));
    }
    let e = expr::parse_expr_tokens(body)?;
    lower::expr_macro(krate, &e)
}
