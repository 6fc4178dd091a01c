//! Statement parsing for `rlx!` bodies (the expression grammar is in `expr.rs`).
//!
//! The parser is purely syntactic, except for the one check API.md §7.4 places at
//! parse time (an empty `scan` body). Everything about bindings, contexts and shapes
//! is checked during lowering.

use crate::ast::*;
use crate::expr::{parse_expr, split_commas};
use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Error, Ident, LitInt, LitStr, Result, Token};

const KEYWORDS: &str = "`input, param, const, bind, let, fn, repeat, scan, tap, out`";

/// Parse a whole `rlx!` body.
pub fn parse_program(input: ParseStream) -> Result<Program> {
    let mut name = None;
    if is_keyword(input, "graph") {
        input.call(Ident::parse_any)?;
        let lit: LitStr = input
            .parse()
            .map_err(|e| Error::new(e.span(), "expected the graph name: `graph \"name\";`"))?;
        input.parse::<Token![;]>()?;
        name = Some(lit);
    }
    let stmts = parse_stmts(input)?;
    Ok(Program { name, stmts })
}

/// Statements until the end of `input`.
pub fn parse_stmts(input: ParseStream) -> Result<Vec<Stmt>> {
    let mut stmts = Vec::new();
    while !input.is_empty() {
        // Stray semicolons (e.g. after a `repeat { … };`) are harmless.
        if input.peek(Token![;]) {
            input.parse::<Token![;]>()?;
            continue;
        }
        stmts.push(parse_stmt(input)?);
    }
    Ok(stmts)
}

fn is_keyword(input: ParseStream, kw: &str) -> bool {
    input.cursor().ident().is_some_and(|(id, _)| id == kw)
}

fn parse_stmt(input: ParseStream) -> Result<Stmt> {
    let Some((kw, _)) = input.cursor().ident() else {
        return Err(input.error(format!("expected a statement: one of {KEYWORDS}")));
    };
    match kw.to_string().as_str() {
        "input" => parse_decl(input, DeclKind::Input),
        "param" => parse_decl(input, DeclKind::Param),
        "const" => parse_const(input),
        "bind" => parse_bind(input),
        "let" => parse_let(input),
        "fn" => parse_fn(input),
        "repeat" => parse_repeat(input),
        "scan" => parse_scan(input),
        "tap" => {
            input.call(Ident::parse_any)?;
            Ok(Stmt::Tap(parse_name_list(input, "tap")?))
        }
        "out" | "output" => {
            input.call(Ident::parse_any)?;
            Ok(Stmt::Out(parse_name_list(input, "out")?))
        }
        "graph" => Err(Error::new(
            kw.span(),
            "`graph \"name\";` must be the first statement",
        )),
        other => Err(Error::new(
            kw.span(),
            format!("unknown statement `{other}` — expected one of {KEYWORDS}"),
        )),
    }
}

fn parse_name_list(input: ParseStream, what: &str) -> Result<Vec<Ident>> {
    let mut names = Vec::new();
    loop {
        if !input.peek(Ident) {
            return Err(input.error(format!("expected a binding name in `{what}`")));
        }
        names.push(input.parse::<Ident>()?);
        if input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
            if input.peek(Token![;]) {
                break;
            }
            continue;
        }
        break;
    }
    input.parse::<Token![;]>()?;
    Ok(names)
}

fn parse_decl(input: ParseStream, kind: DeclKind) -> Result<Stmt> {
    input.call(Ident::parse_any)?;
    let name: Ident = input.parse()?;
    let family = if input.peek(syn::token::Bracket) {
        let content;
        let b = syn::bracketed!(content in input);
        let span = b.span.join();
        let n = match content.parse::<LitInt>() {
            Ok(lit) if content.is_empty() => lit.base10_parse::<usize>().ok(),
            _ => None,
        };
        match n {
            Some(n) if (1..=4096).contains(&n) => Some((n, span)),
            _ => {
                return Err(Error::new(
                    span,
                    "a family size must be an integer literal from 1 to 4096, like `w[3]`",
                ));
            }
        }
    } else {
        None
    };
    let ir_name = if input.peek(Token![@]) {
        input.parse::<Token![@]>()?;
        Some(input.parse::<LitStr>().map_err(|e| {
            Error::new(
                e.span(),
                "expected the IR name as a string: `@ \"layers.{i}.weight\"`",
            )
        })?)
    } else {
        None
    };
    input.parse::<Token![:]>()?;
    if !input.peek(syn::token::Bracket) {
        return Err(input.error("expected the shape in brackets, like `[2, 4]`"));
    }
    let content;
    syn::bracketed!(content in input);
    let dims: TokenStream = content.parse()?;
    input.parse::<Token![;]>()?;
    let static_dims = static_dims(&dims);
    Ok(Stmt::Decl(Decl {
        kind,
        name,
        family,
        ir_name,
        dims,
        static_dims,
    }))
}

/// The dims when they are all integer literals (an optional `DTYPE;` prefix allowed).
fn static_dims(dims: &TokenStream) -> Option<Vec<u64>> {
    let mut trees: Vec<TokenTree> = dims.clone().into_iter().collect();
    if let (Some(TokenTree::Ident(_)), Some(TokenTree::Punct(p))) = (trees.first(), trees.get(1))
        && p.as_char() == ';'
    {
        trees.drain(..2);
    }
    let mut out = Vec::new();
    for (piece, _) in split_commas(trees.into_iter().collect()) {
        let mut it = piece.into_iter();
        match (it.next(), it.next()) {
            (Some(TokenTree::Literal(l)), None) => {
                let lit: LitInt = syn::parse2(TokenTree::Literal(l).into()).ok()?;
                out.push(lit.base10_parse::<u64>().ok()?);
            }
            _ => return None,
        }
    }
    if out.is_empty() { None } else { Some(out) }
}

fn parse_const(input: ParseStream) -> Result<Stmt> {
    input.parse::<Token![const]>()?;
    let name: Ident = input.parse()?;
    input.parse::<Token![=]>()?;
    let value = if input.peek(syn::token::Bracket) {
        let TokenTree::Group(g) = input.parse::<TokenTree>()? else {
            return Err(input.error("expected `[`"));
        };
        let node = parse_array(g.stream(), g.span())?;
        let mut dims = Vec::new();
        array_shape(&node, &mut dims)?;
        let mut data = Vec::new();
        flatten(&node, &mut data);
        ConstValue::Array { data, dims }
    } else {
        ConstValue::Scalar(parse_number(input)?)
    };
    let dtype = if input.peek(Token![:]) {
        input.parse::<Token![:]>()?;
        Some(input.parse::<Ident>().map_err(|e| {
            Error::new(
                e.span(),
                "expected a dtype name such as `F32`, `I64` or `BF16`",
            )
        })?)
    } else {
        None
    };
    input.parse::<Token![;]>()?;
    Ok(Stmt::Const(Const { name, value, dtype }))
}

/// `[-]LITERAL` as a Rust expression of the number.
fn parse_number(input: ParseStream) -> Result<TokenStream> {
    let neg = if input.peek(Token![-]) {
        Some(input.parse::<Token![-]>()?)
    } else {
        None
    };
    let lit: syn::Lit = input.parse().map_err(|e| {
        Error::new(
            e.span(),
            "a `const` value must be a numeric literal (optionally negated) or a nested array of them",
        )
    })?;
    match lit {
        syn::Lit::Int(_) | syn::Lit::Float(_) => Ok(quote::quote!(#neg #lit)),
        other => Err(Error::new(
            other.span(),
            "a `const` value must be a numeric literal (optionally negated) or a nested array of them",
        )),
    }
}

/// A nested numeric array literal.
enum ArrayNode {
    Num(TokenStream, Span),
    List(Vec<ArrayNode>, Span),
}

impl ArrayNode {
    fn span(&self) -> Span {
        match self {
            ArrayNode::Num(_, s) | ArrayNode::List(_, s) => *s,
        }
    }
}

fn parse_array(tokens: TokenStream, span: Span) -> Result<ArrayNode> {
    let pieces = split_commas(tokens);
    if pieces.is_empty() {
        return Err(Error::new(
            span,
            "empty array `const` — an array needs at least one value",
        ));
    }
    let mut items = Vec::with_capacity(pieces.len());
    for (piece, pspan) in pieces {
        let trees: Vec<TokenTree> = piece.into_iter().collect();
        let item = match trees.as_slice() {
            [TokenTree::Group(g)] if g.delimiter() == Delimiter::Bracket => {
                parse_array(g.stream(), g.span())?
            }
            [TokenTree::Literal(_)] | [TokenTree::Punct(_), TokenTree::Literal(_)] => {
                let ts: TokenStream = trees.iter().cloned().collect();
                let ok = match &trees[..] {
                    [TokenTree::Punct(p), TokenTree::Literal(l)] => {
                        p.as_char() == '-' && is_number(l)
                    }
                    [TokenTree::Literal(l)] => is_number(l),
                    _ => false,
                };
                if !ok {
                    return Err(non_literal(pspan));
                }
                ArrayNode::Num(ts, pspan)
            }
            _ => return Err(non_literal(pspan)),
        };
        items.push(item);
    }
    Ok(ArrayNode::List(items, span))
}

fn non_literal(span: Span) -> Error {
    Error::new(
        span,
        "non-literal array entry — a `const` array holds numeric literals (optionally negated) only",
    )
}

fn is_number(l: &proc_macro2::Literal) -> bool {
    matches!(
        syn::parse2::<syn::Lit>(TokenTree::Literal(l.clone()).into()),
        Ok(syn::Lit::Int(_) | syn::Lit::Float(_))
    )
}

/// The shape of `node`, checking that rows are not ragged.
fn array_shape(node: &ArrayNode, dims: &mut Vec<usize>) -> Result<()> {
    let ArrayNode::List(items, _) = node else {
        return Ok(());
    };
    dims.push(items.len());
    let mut first = Vec::new();
    array_shape(&items[0], &mut first)?;
    let first_is_list = matches!(items[0], ArrayNode::List(..));
    for item in &items[1..] {
        let mut d = Vec::new();
        array_shape(item, &mut d)?;
        if d != first || matches!(item, ArrayNode::List(..)) != first_is_list {
            return Err(Error::new(
                item.span(),
                "ragged array `const` — every row must have the same shape",
            ));
        }
    }
    dims.extend(first);
    Ok(())
}

fn flatten(node: &ArrayNode, out: &mut Vec<TokenStream>) {
    match node {
        ArrayNode::Num(ts, _) => out.push(ts.clone()),
        ArrayNode::List(items, _) => items.iter().for_each(|i| flatten(i, out)),
    }
}

fn parse_bind(input: ParseStream) -> Result<Stmt> {
    input.call(Ident::parse_any)?;
    let mut items = Vec::new();
    loop {
        if !input.peek(Ident) {
            return Err(input.error("expected a name to bind (an outer Rust variable)"));
        }
        let name: Ident = input.parse()?;
        let collection = if input.peek(syn::token::Bracket) {
            let content;
            let b = syn::bracketed!(content in input);
            if !content.is_empty() {
                return Err(Error::new(
                    b.span.join(),
                    format!(
                        "`bind {name}[]` needs empty brackets — a collection is indexed where it \
                         is used (`{name}[0]`), not where it is bound"
                    ),
                ));
            }
            true
        } else {
            false
        };
        items.push(BindItem { name, collection });
        if input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
            if input.peek(Token![;]) {
                break;
            }
            continue;
        }
        break;
    }
    input.parse::<Token![;]>()?;
    Ok(Stmt::Bind(items))
}

fn parse_let(input: ParseStream) -> Result<Stmt> {
    input.parse::<Token![let]>()?;
    if input.peek(syn::token::Paren) {
        let content;
        let p = syn::parenthesized!(content in input);
        let names = content.parse_terminated(Ident::parse, Token![,])?;
        if names.is_empty() {
            return Err(Error::new(
                p.span.join(),
                "a tuple `let` needs at least one name: `let (a, b) = split(x, 1, 2);`",
            ));
        }
        input.parse::<Token![=]>()?;
        let expr = parse_expr(input)?;
        input.parse::<Token![;]>()?;
        return Ok(Stmt::LetTuple {
            paren: p.span.join(),
            names: names.into_iter().collect(),
            expr,
        });
    }
    let name: Ident = input.parse()?;
    input.parse::<Token![=]>()?;
    if input.peek(Token![;]) {
        return Err(input.error("expected an expression after `=`"));
    }
    let expr = parse_expr(input)?;
    input.parse::<Token![;]>()?;
    Ok(Stmt::Let { name, expr })
}

fn parse_fn(input: ParseStream) -> Result<Stmt> {
    input.parse::<Token![fn]>()?;
    let name: Ident = input.parse()?;
    let content;
    syn::parenthesized!(content in input);
    let params: Vec<Ident> = content
        .parse_terminated(Ident::parse, Token![,])?
        .into_iter()
        .collect();
    for (i, p) in params.iter().enumerate() {
        if params[..i].iter().any(|q| q == p) {
            return Err(Error::new(
                p.span(),
                format!("duplicate parameter `{p}` in fn `{name}`"),
            ));
        }
    }
    let body;
    syn::braced!(body in input);
    let stmts = parse_stmts(&body)?;
    Ok(Stmt::Fn(FnDef {
        name,
        params,
        body: stmts,
    }))
}

const RANGE_MSG: &str = "`repeat i in …` needs a `start..end` range with both bounds";

fn parse_repeat(input: ParseStream) -> Result<Stmt> {
    let keyword = input.call(Ident::parse_any)?.span();
    let kind = if input.peek(Ident) && input.peek2(Token![in]) {
        let var: Ident = input.parse()?;
        input.parse::<Token![in]>()?;
        let range = syn::Expr::parse_without_eager_brace(input)
            .map_err(|e| Error::new(e.span(), RANGE_MSG))?;
        let syn::Expr::Range(r) = &range else {
            return Err(Error::new_spanned(&range, RANGE_MSG));
        };
        let (Some(start), Some(end)) = (&r.start, &r.end) else {
            return Err(Error::new_spanned(&range, RANGE_MSG));
        };
        let inclusive = matches!(r.limits, syn::RangeLimits::Closed(_));
        match (lit_u64(start), lit_u64(end)) {
            (Some(s), Some(e)) => {
                let end = if inclusive { e.saturating_add(1) } else { e };
                RepeatKind::UnrolledRange { var, start: s, end }
            }
            _ => RepeatKind::RuntimeRange {
                var,
                start: quote::quote!(#start),
                end: quote::quote!(#end),
                inclusive,
            },
        }
    } else {
        if input.peek(syn::token::Brace) {
            return Err(input.error(
                "`repeat` needs a count: `repeat 3 { … }`, `repeat n { … }` or `repeat i in 0..3 { … }`",
            ));
        }
        let count = syn::Expr::parse_without_eager_brace(input)?;
        match lit_u64(&count) {
            Some(n) => RepeatKind::Unrolled(n),
            None => RepeatKind::Runtime(quote::quote!(#count)),
        }
    };
    if !input.peek(syn::token::Brace) {
        return Err(input.error("expected the `repeat` body in braces"));
    }
    let content;
    syn::braced!(content in input);
    let body = parse_stmts(&content)?;
    Ok(Stmt::Repeat(Repeat {
        keyword,
        kind,
        body,
    }))
}

fn lit_u64(e: &syn::Expr) -> Option<u64> {
    match e {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        }) => i.base10_parse().ok(),
        syn::Expr::Paren(p) => lit_u64(&p.expr),
        _ => None,
    }
}

fn parse_scan(input: ParseStream) -> Result<Stmt> {
    input.call(Ident::parse_any)?;
    let carry: Ident = input.parse()?;
    input.parse::<Token![=]>()?;
    let init = parse_expr(input)?;
    input.parse::<Token![for]>()?;
    let length = match input.parse::<LitInt>() {
        Ok(l) => l
            .base10_parse::<u32>()
            .map_err(|_| Error::new(l.span(), "a scan length must fit in u32"))?,
        Err(e) => {
            return Err(Error::new(
                e.span(),
                "a scan length must be an integer literal: `scan h = x for 8 { … }`",
            ));
        }
    };
    if !input.peek(syn::token::Brace) {
        return Err(input.error("expected the `scan` body in braces"));
    }
    let content;
    syn::braced!(content in input);
    let body = parse_stmts(&content)?;
    if body.is_empty() {
        return Err(Error::new(
            carry.span(),
            format!(
                "scan `{carry}` has an empty body — it must end in a `let` to produce the next carry"
            ),
        ));
    }
    Ok(Stmt::Scan(Scan {
        carry,
        init,
        length,
        body,
    }))
}
