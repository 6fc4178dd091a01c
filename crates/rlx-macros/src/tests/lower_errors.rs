//! Every diagnostic of API.md §7.4 and the other listed ones, by exact text.

use super::{build_err, expr};
use quote::quote;

#[test]
fn unknown_binding() {
    assert_eq!(
        build_err(quote!(input x: [2, 4]; let y = x @ w;)),
        "unknown binding `w` — declare it with `input`/`param`/`let` first"
    );
}

#[test]
fn unknown_output_binding_even_when_declared_names_exist() {
    assert_eq!(
        build_err(quote!(input x: [2]; let y = relu(x); out z;)),
        "unknown output binding `z`"
    );
}

#[test]
fn matmul_with_a_scalar_operand() {
    let msg = "matmul `@` requires tensor operands, not a scalar";
    assert_eq!(build_err(quote!(input x: [2, 2]; let y = x @ 2.0;)), msg);
    assert_eq!(build_err(quote!(input x: [2, 2]; let y = 2 @ x;)), msg);
    assert_eq!(
        build_err(quote!(input x: [2, 2]; let y = matmul(x, 3);)),
        msg
    );
}

#[test]
fn static_matmul_shape_mismatch() {
    assert_eq!(
        build_err(quote!(input x: [2, 4]; param w: [8, 3]; let y = x @ w;)),
        "matmul shape mismatch: inner dimensions differ (4 ≠ 8) — left is `[…, 4]`, right is `[8, …]`"
    );
    // Known shapes flow through matmul results and elementwise ops.
    assert_eq!(
        build_err(quote! {
            input x: [2, 4]; param a: [4, 6]; param b: [5, 3];
            let y = relu(x @ a) * 2.0 @ b;
        }),
        "matmul shape mismatch: inner dimensions differ (6 ≠ 5) — left is `[…, 6]`, right is `[5, …]`"
    );
}

#[test]
fn unknown_shapes_are_never_flagged() {
    super::build_ok(quote! {
        input x: [?, 4]; param w: [8, 3]; input z: [n, 8];
        let a = x @ w;          // dynamic left
        let b = z @ w;          // runtime dim
        let c = x.t() @ x;      // method result unknown
    });
}

#[test]
fn linear_shape_mismatch() {
    assert_eq!(
        build_err(quote!(input x: [2, 4]; param w: [3, 8]; param b: [3]; let y = linear(x, w, b);)),
        "linear shape mismatch: input's last dim 4 ≠ the weight's in-dim 8 (a `linear` weight is `[out, in]`)"
    );
    assert_eq!(
        build_err(
            quote!(input x: [2, 4]; param w: [3, 8]; param b: [3]; let y = gelu(linear(x, w, b));)
        ),
        "linear shape mismatch: input's last dim 4 ≠ the weight's in-dim 8 (a `linear` weight is `[out, in]`)"
    );
}

#[test]
fn fn_arity() {
    assert_eq!(
        build_err(quote! {
            fn block(x, w) { let h = x @ w; }
            input x: [2, 2];
            let y = block(x);
        }),
        "fn `block` takes 2 argument(s), but 1 were given"
    );
}

#[test]
fn declarations_inside_repeat() {
    let msg = "cannot declare an `input`/`param`/`const` inside `repeat` (its name would collide each iteration) — declare it outside";
    assert_eq!(build_err(quote!(repeat 2 { param w: [2]; })), msg);
    assert_eq!(build_err(quote!(repeat n { input w: [2]; })), msg);
    assert_eq!(
        build_err(quote!(repeat i in 0..2 { const c = 1.0: F32; })),
        msg
    );
}

#[test]
fn bind_inside_repeat() {
    assert_eq!(
        build_err(quote!(input x: [2]; repeat 2 { bind a, b; })),
        "`bind` is not allowed inside `repeat` — adopt outer tensors before the loop"
    );
}

#[test]
fn scan_inside_repeat() {
    assert_eq!(
        build_err(quote!(input x: [2]; repeat 2 { scan h = x for 2 { let h = h; } })),
        "`scan` is not allowed inside `repeat`"
    );
}

#[test]
fn scan_with_empty_body() {
    assert_eq!(
        build_err(quote!(input x: [2]; scan h = x for 2 { })),
        "scan `h` has an empty body — it must end in a `let` to produce the next carry"
    );
}

#[test]
fn out_tap_fn_inside_repeat() {
    assert!(
        build_err(quote!(input x: [2]; repeat 2 { out x; }))
            .starts_with("`out` is not allowed inside `repeat`")
    );
    assert!(
        build_err(quote!(input x: [2]; repeat 2 { tap x; }))
            .starts_with("`tap` is not allowed inside `repeat`")
    );
    assert!(
        build_err(quote!(input x: [2]; repeat 2 { fn f(a) { let b = a; } }))
            .starts_with("`fn` is not allowed inside `repeat`")
    );
}

#[test]
fn fn_definition_errors() {
    assert!(
        build_err(
            quote!(fn f(x) { let y = x; } fn f(x) { let z = x; } input x: [2]; let y = f(x);)
        )
        .starts_with("duplicate fn `f`")
    );
    assert!(
        build_err(
            quote!(fn f(x) { fn g(y) { let z = y; } let y = x; } input x: [2]; let y = f(x);)
        )
        .starts_with("nested fn `g`")
    );
    assert!(
        build_err(quote!(fn f(x) { } input x: [2]; let y = f(x);))
            .starts_with("fn `f` has an empty body")
    );
    assert!(
        build_err(quote!(fn f(x) { input z: [2]; let y = x; } input x: [2]; let y = f(x);))
            .starts_with("only `let`, `let (…)` and `repeat` are allowed in a `fn` body")
    );
    assert!(
        build_err(
            quote!(fn f(x) { let y = g(x); } fn g(x) { let y = f(x); } input x: [2]; let y = f(x);)
        )
        .starts_with("recursive fn `f`")
    );
}

#[test]
fn named_argument_errors() {
    let pre = quote!(fn blk(x, w) { let h = x @ w; } input a: [2, 2]; param b: [2, 2];);
    assert!(
        build_err(quote!(#pre let y = blk(x: a, b);))
            .starts_with("mixed positional and named arguments in call to fn `blk`")
    );
    assert!(
        build_err(quote!(#pre let y = blk(x: a, v: b);))
            .starts_with("fn `blk` has no parameter `v` (its parameters are: x, w)")
    );
    assert_eq!(
        build_err(quote!(#pre let y = blk(x: a, x: b);)),
        "argument `x` is given twice"
    );
    assert_eq!(
        build_err(quote!(#pre let y = blk(x: a);)),
        "missing argument `w` in call to fn `blk`"
    );
    assert!(
        build_err(quote!(#pre let y = relu(x: a);))
            .starts_with("named arguments are only allowed in calls to a user `fn`")
    );
    assert!(
        build_err(quote!(#pre let y = matmul(a, w: b);))
            .starts_with("named arguments are only allowed in calls to a user `fn`")
    );
}

#[test]
fn matmul_sugar_arity() {
    assert_eq!(
        build_err(quote!(input a: [2, 2]; let y = mm(a);)),
        "`mm` takes exactly 2 arguments, but 1 were given"
    );
    assert_eq!(
        build_err(quote!(input a: [2, 2]; let y = matmul(a, a, a);)),
        "`matmul` takes exactly 2 arguments, but 3 were given"
    );
}

#[test]
fn collection_and_family_index_errors() {
    assert!(
        build_err(quote!(bind cb[]; input x: [2]; let y = x + cb[x @ x];))
            .starts_with("bad collection index")
    );
    assert!(
        build_err(quote!(param w[2]: [2]; input x: [2]; repeat i in 0..n { let x = x + w[i]; }))
            .starts_with("non-constant family index")
    );
    assert!(
        build_err(quote!(param w[2]: [2]; input x: [2]; let y = x + w[2];))
            .starts_with("family `w` has 2 element(s); index 2 is out of range")
    );
    assert!(
        build_err(quote!(input x: [2]; let y = x + cb[0];))
            .starts_with("unknown bind-collection `cb`")
    );
    assert!(
        build_err(quote!(input x: [2]; let y = x[0];))
            .starts_with("`x` is a tensor, not a collection")
    );
    assert!(
        build_err(quote!(param w[2]: [2]; let y = w[0].g;))
            .starts_with("field access on a non-collection")
    );
    assert!(
        build_err(quote!(input x: [2]; let y = x.g;))
            .starts_with("field access on a non-collection")
    );
}

#[test]
fn clamp_bounds_must_be_scalars() {
    assert!(
        build_err(quote!(input x: [2]; let y = clamp(x, x, 1.0);))
            .starts_with("`clamp` bounds must be scalar literals")
    );
}

#[test]
fn unsupported_call_arity() {
    assert!(
        build_err(quote!(input x: [2]; let y = softmax(x, 1);))
            .starts_with("unsupported call `softmax` with 2 arguments")
    );
    assert!(
        build_err(quote!(input x: [2]; let y = relu();))
            .starts_with("unsupported call `relu` with 0 arguments")
    );
}

#[test]
fn scalar_misuse() {
    assert!(
        build_err(quote!(input x: [2]; let two = 1.0 + 1.0;))
            .starts_with("`let two` binds a pure scalar")
    );
    assert_eq!(
        build_err(quote!(input x: [2]; let y = x * (1 < 2);)),
        "comparing two scalars — at least one side of a comparison must be a tensor"
    );
    assert!(
        build_err(quote!(input x: [2]; let y = relu(2.0);))
            .starts_with("`relu` needs a tensor here")
    );
    assert!(
        build_err(quote!(input x: [2]; let y = pow(2.0, 3.0);))
            .starts_with("`pow` needs at least one tensor argument")
    );
}

#[test]
fn unknown_tap_and_missing_output() {
    assert!(
        build_err(quote!(input x: [2]; tap q; let y = relu(x);))
            .starts_with("unknown tap binding `q`")
    );
    assert!(build_err(quote!(input x: [2];)).starts_with("this graph has no output"));
    assert!(build_err(quote!()).starts_with("this graph has no output"));
}

#[test]
fn unknown_bare_identifier_in_a_method_argument() {
    assert_eq!(
        build_err(quote!(input x: [2]; let y = x.layer_norm(g, b, eps);)),
        "unknown identifier `g` in a method argument — it is not a binding; to pass a Rust value write `(g)` or `~g`"
    );
}

#[test]
fn families_and_collections_need_an_index() {
    assert!(
        build_err(quote!(param w[2]: [2]; let y = relu(w);))
            .starts_with("`w` is a family of 2 tensors")
    );
    assert!(
        build_err(quote!(bind cb[]; let y = relu(cb);)).starts_with("`cb` is a `bind` collection")
    );
}

#[test]
fn family_ir_name_needs_the_index_placeholder() {
    assert!(build_err(quote!(param w[2] @ "w": [2]; let y = relu(w[0]);)).contains("has no `{i}`"));
}

#[test]
fn runaway_unrolling_is_a_diagnostic() {
    assert!(
        build_err(quote!(input x: [2]; repeat 1000000000 { let x = x; }))
            .starts_with("`repeat` would unroll")
    );
    assert!(
        build_err(quote!(input x: [2]; repeat 1000 { repeat 1000 { let x = x; } }))
            .starts_with("this `rlx!` expands to more than")
    );
}

#[test]
fn statements_allowed_in_scan_bodies() {
    assert!(
        build_err(quote!(input x: [2]; scan h = x for 2 { repeat 2 { let h = h; } let h = h; }))
            .starts_with("only `let` statements are allowed in a `scan` body")
    );
}

#[test]
fn rlx_expr_rejects_scalars_and_empty_input() {
    assert!(expr(quote!(2.0 * 3.0)).unwrap_err().contains("pure scalar"));
    assert!(expr(quote!()).unwrap_err().contains("needs one expression"));
    assert!(
        expr(quote!(x @ 2))
            .unwrap_err()
            .contains("matmul `@` requires tensor operands")
    );
}
