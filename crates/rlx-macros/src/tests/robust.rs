//! Robustness: random, truncated and mutated token streams built from DSL fragments
//! must give code or a diagnostic — never a panic.

use proc_macro2::{Group, TokenStream, TokenTree};
use proptest::prelude::*;
use std::str::FromStr;

/// Valid programs covering every statement kind (mutated and truncated below).
const PROGRAMS: &[&str] = &[
    r#"graph "mlp"; input x: [2, 4]; param w1: [4, 8]; param b1: [8]; param w2: [8, 3];
       let h = relu(x @ w1 + b1); let y = -h @ w2 * 2.0 ** 2; out y; tap h;"#,
    r#"fn blk(x, w) { let h = x @ w; let h = gelu(h); }
       input x: [2, 2]; param w[3] @ "layers.{i}.w": [2, 2];
       repeat i in 0..3 { let x = blk(w: w[i], x: x); }"#,
    r#"input x: [?, 4]; bind layers[], a; param g: [4];
       repeat n { let x = x.layer_norm(g, layers[0].b, ~eps) + a; }
       repeat i in 0..m { let x = x @ layers[i].w; }"#,
    r#"const c = [[1, 2], [3, -4]]: F32; const s = -1.5: F64; input x: [2, 2];
       let (p, q) = split(x, 1, 2); let z = where_(p > 0.0, q, -1) % 3;
       scan h = x for 4 { let t = tanh(h @ c + s); let h = clamp(t, -1, 1); }"#,
    r#"input x: [2, 4]; param w: [3, 4]; param b: [3];
       let y = silu(linear(x, w, b)); let e = embed(w, x); let r = rope(x, w, b, 64);
       let m = mean(x) + sum(x); let k = 0.5 < x; let u = maximum(2.0, x);"#,
];

const FRAGMENTS: &[&str] = &[
    "input",
    "param",
    "const",
    "bind",
    "let",
    "fn",
    "repeat",
    "scan",
    "tap",
    "out",
    "output",
    "graph",
    "x",
    "w",
    "h",
    "i",
    "n",
    "cb",
    "layers",
    "blk",
    "relu",
    "linear",
    "matmul",
    "mm",
    "clamp",
    "split",
    "rope",
    "where_",
    "mean",
    "=",
    ";",
    ":",
    ",",
    "@",
    "*",
    "**",
    "+",
    "-",
    "/",
    "%",
    "<",
    "<=",
    "==",
    "!=",
    ">",
    ".",
    "..",
    "..=",
    "~",
    "&",
    "!",
    "#",
    "0",
    "1",
    "3",
    "2.5",
    "-1",
    "1e40",
    "99999999999999999999",
    "\"s\"",
    "\"l.{i}\"",
    "'a'",
    "true",
    "in",
    "for",
    "r#x",
    "[2, 4]",
    "[]",
    "[?]",
    "[F16; 2]",
    "[n]",
    "(x)",
    "()",
    "(x, w)",
    "(w: x)",
    "{ let h = h; }",
    "{}",
    "{ repeat 2 { let h = h; } }",
    "[0]",
    "[i]",
    "[[1], [2, 3]]",
    "relu(x)",
    "linear(x, w, b)",
    "blk(x: h)",
    ".t()",
    ".sum([0], true)",
    ".w",
    "[0].w",
];

fn tokens(src: &str) -> TokenStream {
    TokenStream::from_str(src).expect("fragments are balanced")
}

/// Both entry points; the assertion is simply that neither panics.
fn expand_all(ts: TokenStream) {
    let _ = crate::expand_build(quote::quote!((::rlx_tensor) #ts));
    let _ = crate::expand_expr(quote::quote!((::rlx_tensor) #ts));
}

/// Keep the first `cut` top-level tokens; when the token at `cut` is a group, keep it
/// too with its own contents truncated at `inner` (so cuts land inside bodies).
fn truncate(ts: TokenStream, cut: usize, inner: usize) -> TokenStream {
    let trees: Vec<TokenTree> = ts.into_iter().collect();
    let cut = cut % (trees.len() + 1);
    let mut out: Vec<TokenTree> = trees[..cut].to_vec();
    if let Some(TokenTree::Group(g)) = trees.get(cut) {
        let n = g.stream().into_iter().count();
        let inner_ts = truncate(g.stream(), inner % (n + 1), inner / 7);
        out.push(TokenTree::Group(Group::new(g.delimiter(), inner_ts)));
    }
    out.into_iter().collect()
}

/// Replace, delete or duplicate top-level token `at`.
fn mutate(ts: TokenStream, at: usize, op: u8, frag: &str) -> TokenStream {
    let mut trees: Vec<TokenTree> = ts.into_iter().collect();
    if trees.is_empty() {
        return tokens(frag);
    }
    let at = at % trees.len();
    match op % 3 {
        0 => {
            trees.splice(at..=at, tokens(frag));
        }
        1 => {
            trees.remove(at);
        }
        _ => {
            let t = trees[at].clone();
            trees.insert(at, t);
        }
    }
    trees.into_iter().collect()
}

#[test]
fn the_sample_programs_are_valid() {
    for p in PROGRAMS {
        let ts = tokens(p);
        if let Err(e) = crate::expand_build(quote::quote!((::rlx_tensor) #ts)) {
            panic!("{p}\n→ {e}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn random_fragment_soup_never_panics(picks in prop::collection::vec(0..FRAGMENTS.len(), 0..40)) {
        let src: Vec<&str> = picks.iter().map(|&i| FRAGMENTS[i]).collect();
        expand_all(tokens(&src.join(" ")));
    }

    #[test]
    fn truncated_programs_never_panic(p in 0..PROGRAMS.len(), cut in 0usize..200, inner in 0usize..2000) {
        expand_all(truncate(tokens(PROGRAMS[p]), cut, inner));
    }

    #[test]
    fn mutated_programs_never_panic(
        p in 0..PROGRAMS.len(),
        edits in prop::collection::vec((0usize..200, 0u8..3, 0..FRAGMENTS.len()), 1..4),
    ) {
        let mut ts = tokens(PROGRAMS[p]);
        for (at, op, f) in edits {
            ts = mutate(ts, at, op, FRAGMENTS[f]);
        }
        expand_all(ts);
    }
}
