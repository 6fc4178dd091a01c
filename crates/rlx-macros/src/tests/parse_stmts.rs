//! Statement parsing: declarations, consts, bind, let, fn, repeat, scan, tap/out.

use crate::ast::*;
use crate::parse::parse_program;
use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::Parser;

fn prog(ts: TokenStream) -> Program {
    match parse_program.parse2(ts) {
        Ok(p) => p,
        Err(e) => panic!("parse failed: {e}"),
    }
}

fn perr(ts: TokenStream) -> String {
    match parse_program.parse2(ts) {
        Ok(p) => panic!("expected an error, parsed {} statements", p.stmts.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn graph_name_is_optional_and_first() {
    let p = prog(quote!(graph "net"; input x: [2];));
    assert_eq!(p.name.unwrap().value(), "net");
    assert!(prog(quote!(input x: [2];)).name.is_none());
    let e = perr(quote!(input x: [2]; graph "late";));
    assert_eq!(e, "`graph \"name\";` must be the first statement");
}

#[test]
fn declarations_keep_dims_verbatim_and_note_literal_shapes() {
    let p = prog(quote! {
        input x: [?, 128];
        param w: [BF16; 4, 8];
        param f[3] @ "layers.{i}.w": [n, 4];
    });
    let Stmt::Decl(x) = &p.stmts[0] else { panic!() };
    assert_eq!(x.kind, DeclKind::Input);
    assert_eq!(x.dims.to_string(), "? , 128");
    assert_eq!(x.static_dims, None);
    let Stmt::Decl(w) = &p.stmts[1] else { panic!() };
    assert_eq!(w.static_dims, Some(vec![4, 8]));
    let Stmt::Decl(f) = &p.stmts[2] else { panic!() };
    assert_eq!(f.family.map(|(n, _)| n), Some(3));
    assert_eq!(f.ir_name.as_ref().unwrap().value(), "layers.{i}.w");
    assert_eq!(f.static_dims, None);
}

#[test]
fn family_size_must_be_a_positive_literal() {
    assert!(perr(quote!(param w[n]: [2];)).starts_with("a family size must be an integer literal"));
    assert!(perr(quote!(param w[0]: [2];)).starts_with("a family size must be an integer literal"));
}

#[test]
fn const_scalars_and_nested_arrays() {
    let p = prog(quote! {
        const a = -1.5: F64;
        const b = 2;
        const t = [[1, -2, 3.5], [4, 5, 6]]: F32;
    });
    let Stmt::Const(a) = &p.stmts[0] else {
        panic!()
    };
    assert!(matches!(&a.value, ConstValue::Scalar(ts) if ts.to_string() == "- 1.5"));
    assert_eq!(a.dtype.as_ref().unwrap().to_string(), "F64");
    let Stmt::Const(b) = &p.stmts[1] else {
        panic!()
    };
    assert!(b.dtype.is_none());
    let Stmt::Const(t) = &p.stmts[2] else {
        panic!()
    };
    let ConstValue::Array { data, dims } = &t.value else {
        panic!()
    };
    assert_eq!(dims, &vec![2, 3]);
    let flat: Vec<String> = data.iter().map(|d| d.to_string()).collect();
    assert_eq!(flat, ["1", "- 2", "3.5", "4", "5", "6"]);
}

#[test]
fn ragged_empty_and_non_literal_arrays_are_rejected() {
    let ragged = "ragged array `const` — every row must have the same shape";
    assert_eq!(perr(quote!(const t = [[1, 2], [3]];)), ragged);
    assert_eq!(perr(quote!(const t = [[1, 2], 3];)), ragged);
    assert_eq!(perr(quote!(const t = [[[1], [2]], [[3], [4, 5]]];)), ragged);
    assert!(perr(quote!(const t = [];)).starts_with("empty array `const`"));
    assert!(perr(quote!(const t = [[]];)).starts_with("empty array `const`"));
    assert!(perr(quote!(const t = [1, x];)).starts_with("non-literal array entry"));
    assert!(perr(quote!(const t = [1, "a"];)).starts_with("non-literal array entry"));
    assert!(perr(quote!(const t = x;)).starts_with("a `const` value must be a numeric literal"));
}

#[test]
fn bind_tensors_and_collections() {
    let p = prog(quote!(bind a, cb[], layers[];));
    let Stmt::Bind(items) = &p.stmts[0] else {
        panic!()
    };
    let got: Vec<(String, bool)> = items
        .iter()
        .map(|i| (i.name.to_string(), i.collection))
        .collect();
    assert_eq!(
        got,
        [
            ("a".into(), false),
            ("cb".into(), true),
            ("layers".into(), true)
        ]
    );
    assert!(perr(quote!(bind cb[0];)).starts_with("`bind cb[]` needs empty brackets"));
}

#[test]
fn let_and_tuple_let() {
    let p = prog(quote!(let y = x; let (a, b) = split(x, 1, 2);));
    assert!(matches!(&p.stmts[0], Stmt::Let { name, .. } if name == "y"));
    let Stmt::LetTuple { names, .. } = &p.stmts[1] else {
        panic!()
    };
    assert_eq!(names.len(), 2);
    assert!(perr(quote!(let y = ;)).contains("expected an expression"));
    assert!(perr(quote!(let y = x)).contains("expected `;`"));
}

#[test]
fn fn_definitions_with_params_and_body() {
    let p = prog(quote!(fn blk(x, w) { let h = x @ w; let o = relu(h); }));
    let Stmt::Fn(f) = &p.stmts[0] else { panic!() };
    assert_eq!(f.params.len(), 2);
    assert_eq!(f.body.len(), 2);
    assert!(perr(quote!(fn f(x, x) { let y = x; })).starts_with("duplicate parameter `x`"));
}

#[test]
fn repeat_kinds() {
    let p = prog(quote! {
        repeat 3 { let h = h; }
        repeat i in 0..4 { let h = h; }
        repeat i in 1..=2 { let h = h; }
        repeat n { let h = h; }
        repeat cfg.layers { let h = h; }
        repeat (n * 2) { let h = h; }
        repeat i in 0..n { let h = h; }
    });
    let kinds: Vec<String> = p
        .stmts
        .iter()
        .map(|s| match s {
            Stmt::Repeat(r) => match &r.kind {
                RepeatKind::Unrolled(n) => format!("unrolled {n}"),
                RepeatKind::UnrolledRange { var, start, end } => format!("{var} {start}..{end}"),
                RepeatKind::Runtime(c) => format!("runtime {c}"),
                RepeatKind::RuntimeRange {
                    var, start, end, ..
                } => {
                    format!("runtime {var} {start}..{end}")
                }
            },
            _ => panic!(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "unrolled 3",
            "i 0..4",
            "i 1..3",
            "runtime n",
            "runtime cfg . layers",
            "runtime (n * 2)",
            "runtime i 0..n"
        ]
    );
}

#[test]
fn repeat_range_needs_both_bounds() {
    let msg = "`repeat i in …` needs a `start..end` range with both bounds";
    assert_eq!(perr(quote!(repeat i in 0.. { let h = h; })), msg);
    assert_eq!(perr(quote!(repeat i in ..3 { let h = h; })), msg);
    assert_eq!(perr(quote!(repeat i in n { let h = h; })), msg);
}

#[test]
fn scan_parses_and_rejects_an_empty_body_at_parse_time() {
    let p = prog(quote!(scan h = x for 8 { let h = tanh(h @ w); }));
    let Stmt::Scan(s) = &p.stmts[0] else { panic!() };
    assert_eq!(s.length, 8);
    assert_eq!(s.carry, "h");
    assert_eq!(
        perr(quote!(scan h = x for 8 {})),
        "scan `h` has an empty body — it must end in a `let` to produce the next carry"
    );
    assert!(
        perr(quote!(scan h = x for n { let h = h; }))
            .starts_with("a scan length must be an integer literal")
    );
}

#[test]
fn tap_out_and_output() {
    let p = prog(quote!(tap a, b; out y; output z, w,;));
    assert!(matches!(&p.stmts[0], Stmt::Tap(n) if n.len() == 2));
    assert!(matches!(&p.stmts[1], Stmt::Out(n) if n.len() == 1));
    assert!(matches!(&p.stmts[2], Stmt::Out(n) if n.len() == 2));
}

#[test]
fn unknown_statement_keyword_lists_the_valid_ones() {
    assert_eq!(
        perr(quote!(inptu x: [2];)),
        "unknown statement `inptu` — expected one of `input, param, const, bind, let, fn, repeat, scan, tap, out`"
    );
    assert!(perr(quote!(42;)).starts_with("expected a statement"));
}
