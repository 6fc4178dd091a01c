//! The expression grammar: a Pratt parser over syn's `ParseStream`.
//!
//! Binding powers, loosest to tightest: comparisons < `+ -` < `* / % @` < `**`
//! (right-associative) < prefix `-` < postfix `.method(…)`. Prefix minus binding
//! tighter than `**` is deliberate (API.md §7.3): `-x ** 2` is `(-x) ** 2`.

use crate::ast::{BinOp, CallArg, Expr, IndexExpr};
use proc_macro2::{Spacing, Span, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::{Error, Ident, Result, Token};

/// Parse one expression (stops before `;`, `,`, `for`, a closing delimiter or any
/// token that cannot continue an expression).
pub fn parse_expr(input: ParseStream) -> Result<Expr> {
    parse_bp(input, 0)
}

/// Parse a whole token stream as exactly one expression.
pub fn parse_expr_tokens(tokens: TokenStream) -> Result<Expr> {
    let parser = |input: ParseStream| {
        let e = parse_expr(input)?;
        if !input.is_empty() {
            return Err(input.error("unexpected token after the expression"));
        }
        Ok(e)
    };
    parser.parse2(tokens)
}

fn parse_bp(input: ParseStream, min_bp: u8) -> Result<Expr> {
    let mut lhs = parse_unary(input)?;
    while let Some((op, span, n)) = peek_binop(input) {
        let (l, r) = op.binding_power();
        if l < min_bp {
            break;
        }
        skip_puncts(input, n)?;
        if input.is_empty() {
            return Err(Error::new(
                span,
                format!("expected an operand after `{}`", op.symbol()),
            ));
        }
        let rhs = parse_bp(input, r)?;
        lhs = Expr::Binary {
            op,
            span,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        };
    }
    Ok(lhs)
}

/// The binary operator at the cursor: (op, span of its first char, punct count).
fn peek_binop(input: ParseStream) -> Option<(BinOp, Span, usize)> {
    let cursor = input.cursor();
    let (p1, rest) = cursor.punct()?;
    let next = rest.punct().map(|(p, _)| p.as_char());
    let joint = p1.spacing() == Spacing::Joint;
    let followed_by = |c: char| joint && next == Some(c);
    let op = match p1.as_char() {
        // `* *` with any spacing: the DSL has no dereference, and token streams built
        // by other macros do not always mark the first `*` as joint.
        '*' if next == Some('*') => return Some((BinOp::Pow, p1.span(), 2)),
        '*' if followed_by('=') => return None,
        '*' => BinOp::Mul,
        '=' if followed_by('=') => return Some((BinOp::Eq, p1.span(), 2)),
        '!' if followed_by('=') => return Some((BinOp::Ne, p1.span(), 2)),
        '<' if followed_by('=') => return Some((BinOp::Le, p1.span(), 2)),
        '>' if followed_by('=') => return Some((BinOp::Ge, p1.span(), 2)),
        '<' if followed_by('<') => return None,
        '>' if followed_by('>') => return None,
        '<' => BinOp::Lt,
        '>' => BinOp::Gt,
        '+' | '-' | '/' | '%' if followed_by('=') => return None,
        '-' if followed_by('>') => return None,
        '+' => BinOp::Add,
        '-' => BinOp::Sub,
        '/' => BinOp::Div,
        '%' => BinOp::Rem,
        '@' => BinOp::MatMul,
        _ => return None,
    };
    Some((op, p1.span(), 1))
}

fn skip_puncts(input: ParseStream, n: usize) -> Result<()> {
    input.step(|cursor| {
        let mut c = *cursor;
        for _ in 0..n {
            match c.punct() {
                Some((_, rest)) => c = rest,
                None => return Err(cursor.error("expected an operator")),
            }
        }
        Ok(((), c))
    })
}

fn parse_unary(input: ParseStream) -> Result<Expr> {
    if input.peek(Token![-]) && peek_binop(input).map(|(_, _, n)| n) == Some(1) {
        let minus: Token![-] = input.parse()?;
        if input.is_empty() {
            return Err(Error::new(minus.span, "expected an operand after `-`"));
        }
        let expr = parse_unary(input)?;
        return Ok(Expr::Neg {
            op: minus.span,
            expr: Box::new(expr),
        });
    }
    parse_postfix(input)
}

fn parse_postfix(input: ParseStream) -> Result<Expr> {
    let mut expr = parse_atom(input)?;
    while input.peek(Token![.]) && !input.peek(Token![..]) {
        input.parse::<Token![.]>()?;
        if !(input.peek(Ident::peek_any)) {
            return Err(input.error("expected a method name after `.`"));
        }
        let name = input.call(Ident::parse_any)?;
        if !input.peek(syn::token::Paren) {
            return Err(Error::new(
                name.span(),
                format!(
                    "field access on a non-collection: `.{name}` needs a `bind` collection element \
                     like `layers[0].{name}`; to call a method write `.{name}(…)`"
                ),
            ));
        }
        let content;
        syn::parenthesized!(content in input);
        let args = split_commas(content.parse::<TokenStream>()?)
            .into_iter()
            .map(|(ts, _)| ts)
            .collect();
        expr = Expr::Method {
            recv: Box::new(expr),
            name,
            args,
        };
    }
    Ok(expr)
}

fn parse_atom(input: ParseStream) -> Result<Expr> {
    if input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in input);
        if content.is_empty() {
            return Err(content.error("expected an expression inside `( )`"));
        }
        let e = parse_expr(&content)?;
        if !content.is_empty() {
            return Err(content.error("unexpected token in parenthesized expression"));
        }
        return Ok(e);
    }
    if input.peek(syn::Lit) {
        let lit: syn::Lit = input.parse()?;
        return match lit {
            syn::Lit::Int(_) | syn::Lit::Float(_) => Ok(Expr::Lit(lit)),
            other => Err(Error::new(
                other.span(),
                "expected a tensor expression or a numeric literal",
            )),
        };
    }
    if input.peek(Ident) {
        let name: Ident = input.parse()?;
        if input.peek(syn::token::Paren) {
            let content;
            syn::parenthesized!(content in input);
            let args = parse_call_args(content.parse::<TokenStream>()?)?;
            return Ok(Expr::Call { name, args });
        }
        if input.peek(syn::token::Bracket) {
            return parse_index(input, name).map(Expr::Index);
        }
        return Ok(Expr::Ident(name));
    }
    if input.is_empty() {
        return Err(input.error("expected an expression"));
    }
    Err(input.error("expected an expression (a binding, a literal, a call or `( … )`)"))
}

fn parse_index(input: ParseStream, base: Ident) -> Result<IndexExpr> {
    let (index, index_span) = bracket_contents(input)?;
    let mut fields = Vec::new();
    while input.peek(Token![.]) && !input.peek(Token![..]) && input.peek2(Ident::peek_any) {
        // `.name(` is a method call, handled by the postfix loop.
        let fork = input.fork();
        fork.parse::<Token![.]>()?;
        fork.call(Ident::parse_any)?;
        if fork.peek(syn::token::Paren) {
            break;
        }
        input.parse::<Token![.]>()?;
        fields.push(input.call(Ident::parse_any)?);
    }
    let inner = if input.peek(syn::token::Bracket) {
        Some(bracket_contents(input)?)
    } else {
        None
    };
    Ok(IndexExpr {
        base,
        index,
        index_span,
        fields,
        inner,
    })
}

fn bracket_contents(input: ParseStream) -> Result<(TokenStream, Span)> {
    let content;
    let bracket = syn::bracketed!(content in input);
    let ts: TokenStream = content.parse()?;
    let span = bracket.span.join();
    if ts.is_empty() {
        return Err(Error::new(
            span,
            "empty index: write `name[0]` or `name[i]`",
        ));
    }
    Ok((ts, span))
}

/// Split a token stream at top-level commas (a trailing comma is allowed). Each piece
/// comes with the span of its first token.
pub fn split_commas(tokens: TokenStream) -> Vec<(TokenStream, Span)> {
    let mut out = Vec::new();
    let mut cur: Vec<TokenTree> = Vec::new();
    for tt in tokens {
        if let TokenTree::Punct(p) = &tt
            && p.as_char() == ','
        {
            let span = cur.first().map_or(p.span(), TokenTree::span);
            out.push((cur.drain(..).collect(), span));
            continue;
        }
        cur.push(tt);
    }
    if !cur.is_empty() {
        let span = cur[0].span();
        out.push((cur.into_iter().collect(), span));
    }
    out
}

/// Call arguments: DSL expressions or raw tokens, optionally `name: value`.
fn parse_call_args(tokens: TokenStream) -> Result<Vec<CallArg>> {
    let mut args = Vec::new();
    for (ts, span) in split_commas(tokens) {
        if ts.is_empty() {
            return Err(Error::new(span, "empty argument"));
        }
        let trees: Vec<TokenTree> = ts.clone().into_iter().collect();
        let named = match (trees.first(), trees.get(1), trees.get(2)) {
            (Some(TokenTree::Ident(_)), Some(TokenTree::Punct(colon)), third) => {
                colon.as_char() == ':'
                    && colon.spacing() == Spacing::Alone
                    && !matches!(third, Some(TokenTree::Punct(p)) if p.as_char() == ':')
            }
            _ => false,
        };
        if named {
            let TokenTree::Ident(name) = trees[0].clone() else {
                continue;
            };
            let rest: TokenStream = trees[2..].iter().cloned().collect();
            if rest.is_empty() {
                return Err(Error::new(
                    name.span(),
                    format!("named argument `{name}:` has no value"),
                ));
            }
            args.push(CallArg {
                name: Some(name.clone()),
                tokens: rest,
                span: name.span(),
            });
        } else {
            args.push(CallArg {
                name: None,
                tokens: ts,
                span,
            });
        }
    }
    Ok(args)
}
