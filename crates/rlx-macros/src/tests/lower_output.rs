//! What the lowering emits: the builder calls of API.md §7.2/§7.3 (compared with
//! whitespace removed).

use super::{build_ok, count, expr};
use quote::quote;

fn code(body: proc_macro2::TokenStream) -> String {
    build_ok(body).replace(' ', "")
}

#[test]
fn declarations_use_shape_and_ir_names() {
    let c = code(quote! {
        graph "net";
        input x: [?, 4];
        param w @ "dense.weight": [F16; 4, 2];
        input s: [];
        let y = x @ w;
    });
    assert!(c.contains("::rlx_tensor::GraphScope::new(\"net\")"), "{c}");
    assert!(c.contains(".input(\"x\",::rlx_tensor::shape![?,4])"), "{c}");
    assert!(
        c.contains(".param(\"dense.weight\",::rlx_tensor::shape![F16;4,2])"),
        "{c}"
    );
    assert!(
        c.contains(".input(\"s\",::rlx_tensor::Shape::scalar(::rlx_tensor::DType::F32))"),
        "{c}"
    );
    assert!(c.contains("letw="), "binding keeps the DSL name: {c}");
}

#[test]
fn default_graph_name() {
    assert!(
        code(quote!(input x: [2]; let y = relu(x);)).contains("GraphScope::new(\"rlx_graph\")")
    );
}

#[test]
fn families_expand_to_indexed_bindings_and_templated_names() {
    let c = code(quote! {
        param w[3]: [2, 2];
        param v[2] @ "layers.{i}.weight": [2, 2];
        input x: [2, 2];
        let y = x @ w[0] @ w[2] @ v[1];
    });
    for n in ["w_0", "w_1", "w_2"] {
        assert!(
            c.contains(&format!("let{n}=__rlx_scope.param(\"{n}\"")),
            "{c}"
        );
    }
    assert!(
        c.contains("letv_0=__rlx_scope.param(\"layers.0.weight\""),
        "{c}"
    );
    assert!(
        c.contains("letv_1=__rlx_scope.param(\"layers.1.weight\""),
        "{c}"
    );
    assert!(c.contains("x.matmul(&w_0)"), "{c}");
}

#[test]
fn operators_lower_to_tensor_ops_and_scalars_to_f64() {
    let c = code(quote! {
        input x: [2]; input y: [2];
        let a = x + y;
        let b = x * 2;
        let c = 1.5 - x;
        let d = x % 3.0;
        let e = x ** 2;
        let f = 2.0 ** x;
        let g = x @ y;
    });
    assert!(c.contains("leta=&x+&y;"), "{c}");
    assert!(c.contains("letb=&x*((2)asf64);"), "{c}");
    assert!(c.contains("letc=((1.5)asf64)-&x;"), "{c}");
    assert!(c.contains("letd=x.rem(((3.0)asf64));"), "{c}");
    assert!(c.contains("lete=x.pow(((2)asf64));"), "{c}");
    assert!(
        c.contains("letf=::rlx_tensor::__rlx_support::scalar_like(((2.0)asf64),&x).pow(&x);"),
        "{c}"
    );
    assert!(c.contains("letg=x.matmul(&y);"), "{c}");
}

#[test]
fn scalar_subexpressions_fold_into_one_operand() {
    let c = code(quote!(input x: [2]; let y = x * (2.0 * 3.0 - 1);));
    assert!(
        c.contains("lety=&x*((((2.0)asf64)*((3.0)asf64))-((1)asf64));"),
        "{c}"
    );
    assert!(
        !c.contains("__rlx_scope.constant"),
        "no constant node emitted by the macro: {c}"
    );
}

#[test]
fn operator_results_keep_their_grouping() {
    let c = code(
        quote!(input a: [2]; input b: [2]; let y = (a + b) * (a - b) / -(a * 2); let z = (a + b).exp();),
    );
    assert!(
        c.contains("lety=((&a+&b)*(&a-&b))/::core::ops::Neg::neg((&a*((2)asf64)));"),
        "{c}"
    );
    assert!(c.contains("letz=(&a+&b).exp();"), "{c}");
}

#[test]
fn unary_minus_needs_no_neg_import() {
    let c = code(quote!(input x: [2]; let y = -x ** 2; let z = -(2.0) * x;));
    assert!(
        c.contains("lety=::core::ops::Neg::neg(&x).pow(((2)asf64));"),
        "{c}"
    );
    assert!(c.contains("letz=(-((2.0)asf64))*&x;"), "{c}");
}

#[test]
fn comparisons_put_the_tensor_first() {
    let c = code(quote! {
        input x: [2]; input y: [2];
        let a = x > y; let b = 0.0 < x; let c = 1 >= x; let d = x == 2; let e = 3 != x;
    });
    assert!(c.contains("leta=x.gt(&y);"), "{c}");
    assert!(c.contains("letb=x.gt(((0.0)asf64));"), "{c}");
    assert!(c.contains("letc=x.le(((1)asf64));"), "{c}");
    assert!(c.contains("letd=x.eq(((2)asf64));"), "{c}");
    assert!(c.contains("lete=x.ne(((3)asf64));"), "{c}");
}

#[test]
fn builtin_call_sugar() {
    let c = code(quote! {
        input x: [2, 4]; param w: [3, 4]; param b: [3]; input ids: [5]; input m: [2, 4];
        input cs: [2, 2]; input sn: [2, 2];
        let l1 = linear(x, w, b);
        let l2 = gelu(linear(x, w, b));
        let l3 = silu(linear(x, w, b));
        let e = embed(x, ids);
        let s = select(m, x, 0.0);
        let c = clamp(x, -1, 1.5);
        let mx = maximum(x, 0.0);
        let mn = minimum(0.0, x);
        let r = rope(x, cs, sn, 64);
        let (p, q) = split(x, 1, 2);
        let mu = mean(x);
        let su = sum(x);
        let t = mm_t(x, w);
        let ce = cross_entropy(x, m);
        let sce = softmax_cross_entropy(x, ids);
        let sm = exp(x);
    });
    assert!(
        c.contains("letl1=x.linear_act(&w,&b,::core::option::Option::None);"),
        "{c}"
    );
    assert!(c.contains("letl2=x.linear_act(&w,&b,::core::option::Option::Some(::rlx_tensor::Activation::Gelu));"), "{c}");
    assert!(c.contains("Some(::rlx_tensor::Activation::Silu)"), "{c}");
    assert!(c.contains("lete=x.gather(&ids,0);"), "{c}");
    assert!(c.contains("lets=m.where_(&x,((0.0)asf64));"), "{c}");
    assert!(
        c.contains("letc=x.clamp((-((1)asf64)),((1.5)asf64));"),
        "{c}"
    );
    assert!(c.contains("letmx=x.maximum(((0.0)asf64));"), "{c}");
    assert!(
        c.contains("letmn=::rlx_tensor::__rlx_support::scalar_like(((0.0)asf64),&x).minimum(&x);"),
        "{c}"
    );
    assert!(c.contains("letr=x.rope(&cs,&sn,64);"), "{c}");
    assert!(c.contains("=x.chunk(1,2);"), "{c}");
    assert!(c.contains("letp=__rlx_tuple_"), "{c}");
    assert!(c.contains("[0usize].clone();"), "{c}");
    assert!(c.contains("letmu=x.mean_all();"), "{c}");
    assert!(c.contains("letsu=x.sum_all();"), "{c}");
    assert!(c.contains("lett=x.matmul_t(&w);"), "{c}");
    assert!(c.contains("letce=x.cross_entropy(&m);"), "{c}");
    assert!(
        c.contains("letsce=x.softmax_cross_entropy_with_logits(&ids);"),
        "{c}"
    );
    assert!(c.contains("letsm=x.exp();"), "{c}");
    assert_eq!(
        count(&c, ".gelu()"),
        0,
        "activation folded into linear_act: {c}"
    );
}

#[test]
fn method_arguments_borrow_bindings_and_pass_values() {
    let c = code(quote! {
        input x: [2, 4]; param g: [4]; param b: [4];
        let y = x.layer_norm(g, b, ~eps).softmax(-1).sum([0], true).cast(DType::F16);
        let z = y.reshape((dims)).linear_act(&g, &b, None);
    });
    assert!(
        c.contains("x.layer_norm(&g,&b,eps).softmax(-1).sum([0],true).cast(DType::F16)"),
        "{c}"
    );
    assert!(
        c.contains("y.reshape((dims)).linear_act(&g,&b,None)"),
        "{c}"
    );
}

#[test]
fn user_fns_inline_with_renamed_locals_and_named_args() {
    let c = code(quote! {
        fn blk(x, w) { let h = x @ w; let h = relu(h); }
        input a: [2, 2]; param p: [2, 2];
        let y = blk(a, p);
        let z = blk(w: p, x: y);
    });
    // Each call gets its own renamed local, reused when the body rebinds it.
    assert_eq!(count(&c, "a.matmul(&p)"), 1, "{c}");
    assert_eq!(count(&c, "y.matmul(&p)"), 1, "{c}");
    assert!(
        c.contains(
            "let__rlx_h_1=a.matmul(&p);let__rlx_h_1=__rlx_h_1.relu();lety=__rlx_h_1.clone();"
        ),
        "{c}"
    );
    assert!(
        c.contains(
            "let__rlx_h_3=y.matmul(&p);let__rlx_h_3=__rlx_h_3.relu();letz=__rlx_h_3.clone();"
        ),
        "{c}"
    );
}

#[test]
fn fn_params_bound_to_expressions_and_scalars() {
    let c = code(quote! {
        fn scale(x, s) { let y = x * s; let z = y.pow_scalar(~s); }
        input a: [2];
        let out = scale(a + a, 3.0);
    });
    assert!(c.contains("let__rlx_x_1=&a+&a;"), "{c}");
    assert!(c.contains("=&__rlx_x_1*(((3.0)asf64));"), "{c}");
    assert!(
        c.contains(".pow_scalar((3.0))"),
        "raw args see the scalar param: {c}"
    );
}

#[test]
fn user_fn_shadows_builtin_sugar() {
    let c = code(quote! {
        fn relu(x) { let y = x * 2; }
        input a: [2];
        let b = relu(a);
    });
    assert!(!c.contains(".relu()"), "{c}");
}

#[test]
fn unrolled_repeat_substitutes_the_index() {
    let c = code(quote! {
        param w[3]: [2, 2]; input x: [2, 2]; bind layers[];
        repeat i in 0..3 { let x = relu(x @ w[i]) + layers[i].b; }
    });
    for i in 0..3 {
        assert!(c.contains(&format!("x.matmul(&w_{i})")), "{c}");
        assert!(c.contains(&format!("&layers[{i}].b")), "{c}");
    }
    assert!(!c.contains("for"), "unrolled: {c}");
}

#[test]
fn runtime_repeat_carries_rebound_bindings() {
    let c = code(quote! {
        input x: [2, 2]; param w: [2, 2];
        repeat n { let t = x @ w; let x = relu(t); }
    });
    assert!(c.contains("for_in0..(n){"), "{c}");
    assert!(c.contains("letmut__rlx_cell_x_"), "{c}");
    let tail = c.split("for_in").nth(1).unwrap();
    assert!(
        tail.contains("letx=__rlx_cell_x_"),
        "re-exposed after the loop: {c}"
    );
    // The default output is the loop-carried binding.
    assert!(c.ends_with("__rlx_support::own(&__rlx_scope,&x)];__rlx_scope.set_outputs(__rlx_outputs);__rlx_scope.finish()};__rlx_graph}"), "{c}");
}

#[test]
fn runtime_indexed_repeat_indexes_collections() {
    let c = code(quote! {
        input x: [2, 2]; bind layers[];
        repeat i in 0..n_layers { let x = x @ layers[i].w; }
    });
    assert!(c.contains("foriin(0)..(n_layers){"), "{c}");
    assert!(c.contains("x.matmul(&layers[i].w)"), "{c}");
}

#[test]
fn scan_captures_free_bindings_in_first_seen_order() {
    let c = code(quote! {
        input x: [2, 4]; param w: [4, 4]; param b: [4]; bind layers[];
        scan h = x for 5 { let h = tanh(h @ w + b) + layers[0].g; let h = h * b; }
    });
    assert!(
        c.contains("leth=__rlx_scope.scan_block(&x,&[&w,&b,&(layers[0].g)],5u32,"),
        "{c}"
    );
    assert!(
        c.contains(
            "letw=__rlx_bcasts[0usize].clone();letb=__rlx_bcasts[1usize].clone();let__rlx_bcast_"
        ),
        "{c}"
    );
}

#[test]
fn taps_and_outs_order_the_outputs() {
    let c = code(quote! {
        input x: [2];
        let a = relu(x);
        tap a;
        let b = exp(a);
        out b, later;
        let later = b + a;
    });
    assert!(c.contains("let__rlx_tap_1=a.clone();"), "{c}");
    assert!(c.contains("[::rlx_tensor::__rlx_support::own(&__rlx_scope,&b),::rlx_tensor::__rlx_support::own(&__rlx_scope,&later),::rlx_tensor::__rlx_support::own(&__rlx_scope,&__rlx_tap_1)]"), "{c}");
}

#[test]
fn const_scalars_and_arrays() {
    let c = code(quote! {
        const s = -2.5: F64;
        const t = [[1, 2], [3, -4]]: I64;
        let y = t * s;
    });
    assert!(
        c.contains("lets=__rlx_scope.constant((-2.5)asf64,::rlx_tensor::DType::F64);"),
        "{c}"
    );
    assert!(c.contains("lett=__rlx_scope.constant_nd(::std::vec![(1)asf64,(2)asf64,(3)asf64,(-4)asf64],::std::vec![2usize,2usize],::rlx_tensor::DType::I64,);"), "{c}");
}

#[test]
fn rlx_expr_treats_identifiers_as_rust_variables() {
    let c = expr(quote!(gelu(linear(h, w, b)) + layers[i].b * 2))
        .unwrap()
        .replace(' ', "");
    assert!(
        c.contains(
            "h.linear_act(&w,&b,::core::option::Option::Some(::rlx_tensor::Activation::Gelu))"
        ),
        "{c}"
    );
    assert!(c.contains("+(&layers[i].b*((2)asf64))"), "{c}");
    let c = expr(quote!(x.layer_norm(g, b, ~eps)))
        .unwrap()
        .replace(' ', "");
    assert!(c.contains("x.layer_norm(&g,&b,eps)"), "{c}");
}
