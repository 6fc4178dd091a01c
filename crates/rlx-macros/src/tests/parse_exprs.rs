//! The expression grammar: precedence, associativity, atoms and postfix chains.

use crate::ast::Expr;
use crate::expr::parse_expr_tokens;
use quote::quote;

/// S-expression form of a parsed expression (tests read the tree, not the tokens).
fn sexpr(e: &Expr) -> String {
    match e {
        Expr::Lit(l) => quote!(#l).to_string(),
        Expr::Ident(i) => i.to_string(),
        Expr::Neg { expr, .. } => format!("(neg {})", sexpr(expr)),
        Expr::Binary { op, lhs, rhs, .. } => {
            format!("({} {} {})", op.symbol(), sexpr(lhs), sexpr(rhs))
        }
        Expr::Call { name, args } => {
            let a: Vec<String> = args
                .iter()
                .map(|a| match &a.name {
                    Some(n) => format!("{n}={}", a.tokens),
                    None => a.tokens.to_string(),
                })
                .collect();
            format!("(call {name} [{}])", a.join("; "))
        }
        Expr::Index(ix) => {
            let fields: Vec<String> = ix.fields.iter().map(|f| format!(".{f}")).collect();
            let inner = ix
                .inner
                .as_ref()
                .map(|(t, _)| format!("[{t}]"))
                .unwrap_or_default();
            format!(
                "(index {}[{}]{}{inner})",
                ix.base,
                ix.index,
                fields.concat()
            )
        }
        Expr::Method { recv, name, args } => {
            let a: Vec<String> = args.iter().map(|t| t.to_string()).collect();
            format!("(.{name} {} [{}])", sexpr(recv), a.join("; "))
        }
    }
}

fn p(ts: proc_macro2::TokenStream) -> String {
    sexpr(&parse_expr_tokens(ts).expect("parses"))
}

fn perr(ts: proc_macro2::TokenStream) -> String {
    match parse_expr_tokens(ts) {
        Ok(e) => panic!("expected a parse error, got {}", sexpr(&e)),
        Err(e) => e.to_string(),
    }
}

#[test]
fn matmul_and_mul_share_one_left_assoc_band() {
    assert_eq!(p(quote!(x @ w * s)), "(* (@ x w) s)");
    assert_eq!(p(quote!(x * s @ w)), "(@ (* x s) w)");
    assert_eq!(p(quote!(a / b % c @ d)), "(@ (% (/ a b) c) d)");
}

#[test]
fn additive_binds_looser_than_multiplicative() {
    assert_eq!(p(quote!(x @ w + b * 2)), "(+ (@ x w) (* b 2))");
    assert_eq!(p(quote!(a - b - c)), "(- (- a b) c)");
}

#[test]
fn unary_minus_binds_tighter_than_pow() {
    assert_eq!(p(quote!(-x * *2)), "(** (neg x) 2)");
    assert_eq!(p(quote!(--x)), "(neg (neg x))");
    assert_eq!(p(quote!(a - -b)), "(- a (neg b))");
}

#[test]
fn pow_is_right_associative_and_tighter_than_mul() {
    assert_eq!(p(quote!(a * *b * *c)), "(** a (** b c))");
    assert_eq!(p(quote!(2 * x * *3)), "(* 2 (** x 3))");
    assert_eq!(p(quote!(x * *-1)), "(** x (neg 1))");
}

#[test]
fn comparisons_are_loosest_and_left_assoc() {
    assert_eq!(p(quote!(a + b < c * d)), "(< (+ a b) (* c d))");
    assert_eq!(p(quote!(a < b == c)), "(== (< a b) c)");
    assert_eq!(p(quote!(x >= 0.0)), "(>= x 0.0)");
    assert_eq!(p(quote!(x != y)), "(!= x y)");
    assert_eq!(p(quote!(x <= y)), "(<= x y)");
}

#[test]
fn postfix_methods_bind_tightest() {
    assert_eq!(p(quote!(-x.exp())), "(neg (.exp x []))");
    assert_eq!(
        p(quote!((x @ w).softmax(-1).sum([0], true))),
        "(.sum (.softmax (@ x w) [- 1]) [[0]; true])"
    );
    assert_eq!(p(quote!(x.t())), "(.t x [])");
}

#[test]
fn parentheses_override_precedence() {
    assert_eq!(p(quote!(x @ (w * s))), "(@ x (* w s))");
    assert_eq!(p(quote!(-(x * *2))), "(neg (** x 2))");
}

#[test]
fn calls_keep_raw_and_named_args() {
    assert_eq!(
        p(quote!(block(w: w1, x: h + 1))),
        "(call block [w=w1; x=h + 1])"
    );
    assert_eq!(p(quote!(rope(x, c, s, 64))), "(call rope [x; c; s; 64])");
    assert_eq!(p(quote!(f())), "(call f [])");
    // A path is not a named argument.
    assert_eq!(p(quote!(f(a::b))), "(call f [a :: b])");
}

#[test]
fn index_field_chains_and_inner_index() {
    assert_eq!(
        p(quote!(layers[i].attn.wq[2].t())),
        "(.t (index layers[i].attn.wq[2]) [])"
    );
    assert_eq!(p(quote!(w[0] @ x)), "(@ (index w[0]) x)");
}

#[test]
fn field_access_on_a_plain_name_is_rejected() {
    let e = perr(quote!(x.weight));
    assert!(e.starts_with("field access on a non-collection"), "{e}");
}

#[test]
fn malformed_expressions_are_errors() {
    assert!(perr(quote!(x @)).contains("expected an operand after `@`"));
    assert!(perr(quote!(-)).contains("expected an operand after `-`"));
    assert!(perr(quote!(x y)).contains("unexpected token"));
    assert!(perr(quote!("s")).contains("numeric literal"));
    assert!(perr(quote!(())).contains("expected an expression"));
    assert!(perr(quote!(x[])).contains("empty index"));
    assert!(perr(quote!(f(a,,b))).contains("empty argument"));
}
