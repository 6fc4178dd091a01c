//! Raw Rust arguments of `.method(…)` calls (and the raw arguments of `rope`/`split`):
//! token-level substitution of fn parameters, locals and loop indices, then
//! auto-borrowing of bindings.

use super::env::{Binding, Subst, key};
use super::expr::{at, field_on_non_collection, unknown_binding};
use super::{Lowerer, Mode};
use proc_macro2::{Delimiter, Group, Literal, Spacing, Span, TokenStream, TokenTree};
use quote::quote;
use syn::{Error, Ident, Result};

impl Lowerer<'_> {
    /// A raw value passed by value (`~x`, `(x)`, literals): substitution only.
    pub(super) fn raw_value(&mut self, tokens: &TokenStream) -> TokenStream {
        let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
        match trees.first() {
            Some(TokenTree::Punct(p)) if p.as_char() == '~' => {
                self.rename(trees[1..].iter().cloned().collect())
            }
            _ => self.rename(tokens.clone()),
        }
    }

    /// One method argument: `~expr` and `(expr)` by value; a bare binding → `&binding`;
    /// a collection element chain → `&(chain)`; anything else verbatim.
    pub(super) fn raw_arg(&mut self, tokens: &TokenStream) -> Result<TokenStream> {
        let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
        match trees.as_slice() {
            [TokenTree::Punct(p), ..] if p.as_char() == '~' => {
                if trees.len() == 1 {
                    return Err(Error::new(p.span(), "expected a Rust value after `~`"));
                }
                Ok(self.rename(trees[1..].iter().cloned().collect()))
            }
            [TokenTree::Ident(id)] => self.raw_ident(id),
            _ => {
                if self.mode == Mode::Build
                    && let Some(v) = self.raw_chain(tokens)?
                {
                    return Ok(v);
                }
                Ok(self.rename(tokens.clone()))
            }
        }
    }

    fn raw_ident(&mut self, id: &Ident) -> Result<TokenStream> {
        if self.mode == Mode::Expr {
            return Ok(if passes_verbatim(id) {
                quote!(#id)
            } else {
                quote!(&#id)
            });
        }
        let k = key(id);
        let target = match self.env.subst(&k).cloned() {
            Some(Subst::Binding(b)) => key(&b),
            Some(Subst::Scalar { code, literal }) => {
                return Ok(match literal {
                    Some(l) => quote!((#l)),
                    None => quote!((#code)),
                });
            }
            Some(Subst::Index(i)) => {
                let mut lit = Literal::u64_unsuffixed(i);
                lit.set_span(id.span());
                return Ok(quote!(#lit));
            }
            Some(Subst::RuntimeIndex(v)) => {
                let v = at(&v, id.span());
                return Ok(quote!(#v));
            }
            None => k,
        };
        match self.env.lookup(&target) {
            Some(Binding::Tensor { ident, .. }) => {
                let ident = at(&ident, id.span());
                Ok(quote!(&#ident))
            }
            Some(Binding::Collection { ident }) => {
                let ident = at(&ident, id.span());
                Ok(quote!(&#ident))
            }
            Some(Binding::Family { .. }) => Err(Error::new(
                id.span(),
                format!("`{id}` is a family — pass one element, like `{id}[0]`"),
            )),
            None if passes_verbatim(id) => Ok(quote!(#id)),
            None if self.env.subst(&key(id)).is_some() => Err(unknown_binding(id)),
            None => Err(Error::new(
                id.span(),
                format!(
                    "unknown identifier `{id}` in a method argument — it is not a binding; to pass a Rust value write `({id})` or `~{id}`"
                ),
            )),
        }
    }

    /// `coll[i].field…` / `w[i]` rooted at a collection or family: borrowed.
    fn raw_chain(&mut self, tokens: &TokenStream) -> Result<Option<TokenStream>> {
        let Ok(expr) = syn::parse2::<syn::Expr>(tokens.clone()) else {
            return Ok(None);
        };
        // Walk down to the root, remembering the index applied directly to it.
        let mut cur = &expr;
        let mut first_index: Option<&syn::ExprIndex> = None;
        loop {
            match cur {
                syn::Expr::Index(ix) => {
                    if matches!(&*ix.expr, syn::Expr::Path(_)) {
                        first_index = Some(ix);
                    }
                    cur = &ix.expr;
                }
                syn::Expr::Field(f) => cur = &f.base,
                syn::Expr::Path(_) => break,
                _ => return Ok(None),
            }
        }
        let syn::Expr::Path(p) = cur else {
            return Ok(None);
        };
        let (Some(root), Some(ix)) = (p.path.get_ident(), first_index) else {
            return Ok(None);
        };
        let k = key(root);
        if self.env.subst(&k).is_some() {
            return Ok(None);
        }
        let idx_tokens = {
            let i = &ix.index;
            quote!(#i)
        };
        let idx_span = syn::spanned::Spanned::span(&ix.index);
        match self.env.find(&k).map(|(_, b)| b.clone()) {
            Some(Binding::Collection { ident }) => {
                self.collection_index(&idx_tokens, idx_span)?;
                let renamed = self.rename(tokens.clone());
                let n = self.counter + 1;
                let fresh = || Ident::new(&format!("__rlx_bcast_{n}"), Span::mixed_site());
                let captured = self.env.capture_place(&key(&ident), &renamed, fresh);
                Ok(Some(match captured {
                    Some(inner) => {
                        self.counter += 1;
                        quote!(&#inner)
                    }
                    None => quote!(&(#renamed)),
                }))
            }
            Some(Binding::Family { elems }) => {
                let direct = matches!(&expr, syn::Expr::Index(top) if matches!(&*top.expr, syn::Expr::Path(_)));
                if !direct {
                    return Err(field_on_chain(&expr));
                }
                let i = self.const_index(&idx_tokens, idx_span)?;
                let Some(elem) = usize::try_from(i).ok().and_then(|i| elems.get(i)).cloned() else {
                    return Err(Error::new(
                        idx_span,
                        format!(
                            "family `{root}` has {} element(s); index {i} is out of range",
                            elems.len()
                        ),
                    ));
                };
                match self.env.lookup(&key(&elem)) {
                    Some(Binding::Tensor { ident, .. }) => {
                        let ident = at(&ident, root.span());
                        Ok(Some(quote!(&#ident)))
                    }
                    _ => Err(unknown_binding(&elem)),
                }
            }
            _ => Ok(None),
        }
    }

    /// Token-level substitution of fn parameters/locals and repeat indices. Idents
    /// after `.`/`::`, before `::`/`!`, or used as a struct field label are left alone.
    pub(super) fn rename(&self, tokens: TokenStream) -> TokenStream {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut out = Vec::with_capacity(trees.len());
        for (i, tt) in trees.iter().enumerate() {
            match tt {
                TokenTree::Group(g) => {
                    let mut ng = Group::new(g.delimiter(), self.rename(g.stream()));
                    ng.set_span(g.span());
                    out.push(TokenTree::Group(ng));
                }
                TokenTree::Ident(id) if !is_path_or_member(&trees, i) => {
                    out.extend(self.subst_ident(id));
                }
                other => out.push(other.clone()),
            }
        }
        out.into_iter().collect()
    }

    fn subst_ident(&self, id: &Ident) -> Vec<TokenTree> {
        match self.env.subst(&key(id)) {
            Some(Subst::Binding(b)) => vec![TokenTree::Ident(at(b, id.span()))],
            Some(Subst::Scalar { code, literal }) => {
                let inner = literal.as_ref().unwrap_or(code).clone();
                let mut g = Group::new(Delimiter::Parenthesis, inner);
                g.set_span(id.span());
                vec![TokenTree::Group(g)]
            }
            Some(Subst::Index(i)) => {
                let mut lit = Literal::u64_unsuffixed(*i);
                lit.set_span(id.span());
                vec![TokenTree::Literal(lit)]
            }
            Some(Subst::RuntimeIndex(v)) => vec![TokenTree::Ident(at(v, id.span()))],
            None => vec![TokenTree::Ident(id.clone())],
        }
    }
}

fn field_on_chain(expr: &syn::Expr) -> Error {
    match expr {
        syn::Expr::Field(f) => match &f.member {
            syn::Member::Named(n) => field_on_non_collection(n),
            syn::Member::Unnamed(u) => Error::new(u.span, "field access on a non-collection"),
        },
        other => Error::new(
            syn::spanned::Spanned::span(other),
            "a family element is one tensor; it cannot be indexed again",
        ),
    }
}

/// Identifiers passed through as Rust values even though they are not bindings:
/// keywords (`true`, `self`) and capitalised names (`None`, constants, unit variants).
fn passes_verbatim(id: &Ident) -> bool {
    let s = id.to_string();
    matches!(
        s.as_str(),
        "true" | "false" | "self" | "Self" | "crate" | "super"
    ) || s.starts_with(|c: char| c.is_ascii_uppercase())
}

/// True for an identifier in position `i` that is a path segment after `::`, a member
/// after `.`, a path prefix before `::`, a macro name before `!`, or a field label
/// before a single `:`.
fn is_path_or_member(trees: &[TokenTree], i: usize) -> bool {
    let punct = |j: usize| match trees.get(j) {
        Some(TokenTree::Punct(p)) => Some((p.as_char(), p.spacing())),
        _ => None,
    };
    let prev = if i > 0 { punct(i - 1) } else { None };
    let prev2 = if i > 1 { punct(i - 2) } else { None };
    let next = punct(i + 1);
    let next2 = punct(i + 2);
    let after_dot = matches!(prev, Some(('.', _)));
    let after_colons = matches!((prev2, prev), (Some((':', Spacing::Joint)), Some((':', _))));
    let before_colons =
        matches!(next, Some((':', Spacing::Joint))) && matches!(next2, Some((':', _)));
    let before_bang = matches!(next, Some(('!', _)));
    let field_label = matches!(next, Some((':', Spacing::Alone))) && !after_colons;
    after_dot || after_colons || before_colons || before_bang || field_label
}
