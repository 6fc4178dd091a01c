//! The `rlx!` DSL and `rlx_expr!` (feature `dsl`): graph structure built by the macro,
//! compared with the same graph built through the Tensor API, and (feature `eval`)
//! values computed by running it.
#![cfg(feature = "dsl")]

#[cfg(feature = "eval")]
#[path = "dsl/exec.rs"]
mod exec;

use rlx_ir::op::{BinaryOp, CmpOp};
use rlx_ir::{Graph, Op};
use rlx_tensor::{Activation, DType, GraphScope, Tensor, graph, graph_with, rlx, rlx_expr, shape};

/// Op names of every node, in order.
fn ops(g: &Graph) -> Vec<String> {
    g.nodes().iter().map(|n| n.op.name()).collect()
}

fn count(g: &Graph, name: &str) -> usize {
    ops(g).iter().filter(|n| *n == name).count()
}

/// Node-by-node equality of op, inputs and type, plus equal outputs.
#[track_caller]
fn assert_same_graph(a: &Graph, b: &Graph) {
    assert_eq!(a.len(), b.len(), "node counts differ:\n{a}\nvs\n{b}");
    for (x, y) in a.nodes().iter().zip(b.nodes()) {
        assert_eq!(x.op, y.op, "node {} differs:\n{a}\nvs\n{b}", x.id);
        assert_eq!(
            x.inputs, y.inputs,
            "node {} inputs differ:\n{a}\nvs\n{b}",
            x.id
        );
        assert_eq!(
            x.shape, y.shape,
            "node {} type differs:\n{a}\nvs\n{b}",
            x.id
        );
    }
    assert_eq!(a.outputs, b.outputs, "outputs differ:\n{a}\nvs\n{b}");
}

/// The f32 payload of a constant node.
fn const_f32(g: &Graph, i: usize) -> Vec<f32> {
    match &g.nodes()[i].op {
        Op::Constant { data } => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        other => panic!("node {i} is {other:?}, not a constant"),
    }
}

fn constants(g: &Graph) -> Vec<usize> {
    g.nodes()
        .iter()
        .filter(|n| matches!(n.op, Op::Constant { .. }))
        .map(|n| n.id.index())
        .collect()
}

#[test]
fn mlp_matches_the_tensor_api_graph() {
    let g = rlx! {
        graph "mlp";
        input x: [2, 4];
        param w1: [4, 8];
        param b1: [8];
        param w2: [8, 3];
        let h = relu(x @ w1 + b1);
        let y = h @ w2;
    };
    assert_eq!(g.name, "mlp");
    assert_eq!(
        ops(&g),
        [
            "input", "param", "param", "param", "matmul", "add", "relu", "matmul"
        ]
    );
    let api = graph("mlp", |s| {
        let x = s.input("x", shape![2, 4]);
        let w1 = s.param("w1", shape![4, 8]);
        let b1 = s.param("b1", shape![8]);
        let w2 = s.param("w2", shape![8, 3]);
        (&x.matmul(&w1) + &b1).relu().matmul(&w2)
    });
    assert_same_graph(&g, &api);
}

#[test]
fn default_name_and_last_let_output() {
    let g = rlx! { input x: [3]; let a = exp(x); let b = a * a; };
    assert_eq!(g.name, "rlx_graph");
    assert_eq!(g.outputs.len(), 1);
    assert_eq!(g.node(g.outputs[0]).op, Op::Binary(BinaryOp::Mul));
}

#[test]
fn matmul_and_mul_share_a_band_so_scaling_applies_after_the_matmul() {
    let g = rlx! { input x: [2, 2]; param w: [2, 2]; input s: [2, 2]; let y = x @ w * s; };
    let out = g.node(g.outputs[0]);
    assert_eq!(out.op, Op::Binary(BinaryOp::Mul));
    assert_eq!(g.node(out.inputs[0]).op, Op::MatMul);
    assert_eq!(out.inputs[1], g.input_id("s").unwrap());
}

#[test]
fn unary_minus_applies_before_pow_without_a_neg_import() {
    // No `use std::ops::Neg` in this file: the expansion must not need it.
    let g = rlx! { input x: [3]; let y = -x ** 2; };
    let out = g.node(g.outputs[0]);
    assert_eq!(out.op, Op::Binary(BinaryOp::Pow));
    assert_eq!(g.node(out.inputs[0]).op, Op::Activation(Activation::Neg));
    assert!(matches!(g.node(out.inputs[1]).op, Op::Constant { .. }));
}

#[test]
fn pow_is_right_associative() {
    let g = rlx! { input a: [2]; input b: [2]; input c: [2]; let y = a ** b ** c; };
    let out = g.node(g.outputs[0]);
    assert_eq!(out.op, Op::Binary(BinaryOp::Pow));
    assert_eq!(out.inputs[0], g.input_id("a").unwrap());
    let inner = g.node(out.inputs[1]);
    assert_eq!(inner.op, Op::Binary(BinaryOp::Pow));
    assert_eq!(
        inner.inputs,
        vec![g.input_id("b").unwrap(), g.input_id("c").unwrap()]
    );
}

#[test]
fn comparisons_bind_loosest_and_swap_scalar_left() {
    let g = rlx! { input x: [2]; input y: [2]; let m = x + y > x * y; };
    let out = g.node(g.outputs[0]);
    assert_eq!(out.op, Op::Compare(CmpOp::Gt));
    assert_eq!(out.shape.dtype(), DType::Bool);
    assert_eq!(g.node(out.inputs[0]).op, Op::Binary(BinaryOp::Add));
    assert_eq!(g.node(out.inputs[1]).op, Op::Binary(BinaryOp::Mul));

    let g = rlx! { input x: [2]; let m = 0.0 < x; };
    let out = g.node(g.outputs[0]);
    assert_eq!(out.op, Op::Compare(CmpOp::Gt), "0 < x is x > 0");
    assert_eq!(out.inputs[0], g.input_id("x").unwrap());
}

#[test]
fn each_scalar_literal_is_one_rank0_constant() {
    let g = rlx! { input x: [4]; let y = x * 2.0 + 1; };
    let cs = constants(&g);
    assert_eq!(cs.len(), 2);
    for &c in &cs {
        assert_eq!(g.nodes()[c].shape.rank(), 0);
        assert_eq!(g.nodes()[c].shape.dtype(), DType::F32);
    }
    assert_eq!(const_f32(&g, cs[0]), [2.0]);
    assert_eq!(const_f32(&g, cs[1]), [1.0]);

    // Scalar arithmetic folds before it meets a tensor: still one constant.
    let g = rlx! { input x: [4]; let y = x * (2.0 * 3.0 - -1); };
    let cs = constants(&g);
    assert_eq!(cs.len(), 1);
    assert_eq!(const_f32(&g, cs[0]), [7.0]);

    // A scalar on the left of `-` and of `**` also becomes one constant.
    let g = rlx! { input x: [4]; let y = 1 - x; let z = 2 ** y; };
    assert_eq!(constants(&g).len(), 2);
    assert_eq!(count(&g, "sub"), 1);
    assert_eq!(count(&g, "pow"), 1);
}

#[test]
fn families_and_ir_name_templates() {
    let g = rlx! {
        input x: [2, 2];
        param w[3]: [2, 2];
        param v[2] @ "layers.{i}.weight": [2, 2];
        let y = x @ w[0] @ w[1] @ w[2] @ v[0] @ v[1];
    };
    for n in ["w_0", "w_1", "w_2", "layers.0.weight", "layers.1.weight"] {
        assert!(g.param_id(n).is_some(), "missing param {n}:\n{g}");
    }
    assert_eq!(count(&g, "param"), 5);
    assert_eq!(count(&g, "matmul"), 5);
}

#[test]
fn input_families_and_renamed_inputs() {
    let g = rlx! {
        input t[2] @ "tok{i}": [3];
        input q @ "query": [3];
        let y = t[0] + t[1] + q;
    };
    assert_eq!(g.input_names(), ["tok0", "tok1", "query"]);
}

#[test]
fn dims_forward_to_shape_macro() {
    let n = 5usize;
    let g = rlx! { input x: [?, n * 2]; input i: [I64; 3]; let y = relu(x); out y, i; };
    let x = g.node(g.input_id("x").unwrap());
    assert!(!x.shape.is_static());
    assert_eq!(x.shape.dims()[1], rlx_tensor::Dim::Static(10));
    assert_eq!(g.node(g.input_id("i").unwrap()).shape.dtype(), DType::I64);
}

#[test]
fn fns_inline_with_positional_and_named_arguments() {
    let g = rlx! {
        fn block(x, w, b) { let h = x @ w; let h = relu(h + b); }
        input x: [2, 4];
        param w1: [4, 4]; param b1: [4];
        param w2: [4, 4]; param b2: [4];
        let h = block(x, w1, b1);
        let y = block(b: b2, x: h, w: w2);
    };
    let api = graph("rlx_graph", |s| {
        let x = s.input("x", shape![2, 4]);
        let w1 = s.param("w1", shape![4, 4]);
        let b1 = s.param("b1", shape![4]);
        let w2 = s.param("w2", shape![4, 4]);
        let b2 = s.param("b2", shape![4]);
        let h = (&x.matmul(&w1) + &b1).relu();
        (&h.matmul(&w2) + &b2).relu()
    });
    assert_same_graph(&g, &api);
}

#[test]
fn fns_may_be_defined_after_use_and_call_each_other() {
    let g = rlx! {
        input x: [3];
        let y = outer(x);
        fn outer(a) { let b = inner(a) * 2; }
        fn inner(a) { let b = exp(a); }
    };
    assert_eq!(ops(&g), ["input", "exp", "constant", "mul"]);
}

#[test]
fn fn_scalar_parameters_substitute_into_raw_method_args() {
    let g = rlx! {
        fn norm(x, g, b, e) { let y = x.layer_norm(g, b, ~e); }
        input x: [2, 4]; param g: [4]; param b: [4];
        let y = norm(x, g, b, 0.25);
    };
    let out = g.node(g.outputs[0]);
    assert!(
        matches!(out.op, Op::LayerNorm { eps, .. } if eps == 0.25),
        "{g}"
    );
}

#[test]
fn unrolled_repeat_threads_state_by_shadowing() {
    let g = rlx! {
        input x: [2, 2]; param w: [2, 2];
        repeat 3 { let x = relu(x @ w); }
    };
    assert_eq!(count(&g, "matmul"), 3);
    assert_eq!(count(&g, "relu"), 3);
    assert_eq!(g.node(g.outputs[0]).op, Op::Activation(Activation::Relu));
}

#[test]
fn indexed_repeat_drives_families() {
    let g = rlx! {
        input x: [2, 2];
        param w[3] @ "l.{i}.w": [2, 2];
        param b[3] @ "l.{i}.b": [2];
        repeat i in 0..3 { let x = linear(x, w[i], b[i]); }
    };
    let api = graph("rlx_graph", |s| {
        let mut x = s.input("x", shape![2, 2]);
        let ws: Vec<Tensor> = (0..3)
            .map(|i| s.param(format!("l.{i}.w"), shape![2, 2]))
            .collect();
        let bs: Vec<Tensor> = (0..3)
            .map(|i| s.param(format!("l.{i}.b"), shape![2]))
            .collect();
        for i in 0..3 {
            x = x.linear(&ws[i], &bs[i]);
        }
        x
    });
    assert_same_graph(&g, &api);
}

#[test]
fn runtime_repeat_runs_the_body_n_times_and_zero_times() {
    let build = |n: usize| {
        rlx! {
            input x: [2, 2]; param w: [2, 2];
            repeat n { let t = x @ w; let x = tanh(t); }
        }
    };
    let g0 = build(0);
    assert_eq!(count(&g0, "matmul"), 0);
    assert_eq!(
        g0.outputs,
        vec![g0.input_id("x").unwrap()],
        "zero iterations leave x"
    );
    let g3 = build(3);
    assert_eq!(count(&g3, "matmul"), 3);
    assert_eq!(count(&g3, "tanh"), 3);
    assert_eq!(g3.node(g3.outputs[0]).op, Op::Activation(Activation::Tanh));
}

#[test]
fn runtime_repeat_with_index_walks_a_collection() {
    struct Layer {
        w: Tensor,
        b: Tensor,
    }
    let layers: Vec<Layer> = (0..4)
        .map(|i| Layer {
            w: Tensor::full([3, 3], 0.1 * i as f32),
            b: Tensor::full([3], i as f32),
        })
        .collect();
    let n = 2usize;
    let g = rlx! {
        bind layers[];
        input x: [1, 3];
        repeat i in 1..(n + 1) { let x = linear(x, layers[i].w, layers[i].b); }
        out x;
    };
    assert_eq!(count(&g, "linear"), 2, "{g}");
    assert_eq!(count(&g, "constant"), 4);
}

#[test]
fn scan_emits_one_op_with_broadcasts_in_first_seen_order() {
    let g = rlx! {
        input x: [2, 4];
        param w: [4, 4];
        param b: [4];
        scan h = x for 5 { let t = tanh(h @ w + b); let h = t * b; }
    };
    assert_eq!(count(&g, "scan"), 1);
    assert_eq!(count(&g, "tanh"), 0, "body ops stay in the body graph");
    assert_eq!(count(&g, "matmul"), 0);
    let out = g.node(g.outputs[0]);
    let Op::Scan {
        body,
        length,
        num_bcast,
        ..
    } = &out.op
    else {
        panic!("output is not a scan:\n{g}");
    };
    assert_eq!(*length, 5);
    assert_eq!(*num_bcast, 2);
    assert_eq!(
        out.inputs,
        vec![
            g.input_id("x").unwrap(),
            g.param_id("w").unwrap(),
            g.param_id("b").unwrap()
        ]
    );
    assert_eq!(count(body, "tanh"), 1);
    assert_eq!(count(body, "matmul"), 1);
    assert_eq!(body.input_names(), ["carry", "bcast_0", "bcast_1"]);
}

#[test]
fn taps_follow_the_outputs_and_out_may_name_later_bindings() {
    let g = rlx! {
        input x: [3];
        let a = relu(x);
        tap a;
        out c, b;
        let b = exp(a);
        let c = b + a;
    };
    assert_eq!(g.outputs.len(), 3);
    assert_eq!(g.node(g.outputs[0]).op, Op::Binary(BinaryOp::Add));
    assert_eq!(g.node(g.outputs[1]).op, Op::Activation(Activation::Exp));
    assert_eq!(g.node(g.outputs[2]).op, Op::Activation(Activation::Relu));
}

#[test]
fn output_keyword_and_family_outputs() {
    let g = rlx! { param w[2]: [2]; output w; };
    assert_eq!(
        g.outputs,
        vec![g.param_id("w_0").unwrap(), g.param_id("w_1").unwrap()]
    );
}

#[test]
fn const_scalar_is_exactly_one_constant() {
    let g = rlx! { const c = -0.5: F32; input x: [3]; let y = x * c; };
    let cs = constants(&g);
    assert_eq!(cs.len(), 1);
    assert_eq!(g.nodes()[cs[0]].shape.rank(), 0);
    assert_eq!(const_f32(&g, cs[0]), [-0.5]);
    assert_eq!(count(&g, "mul"), 1);
}

#[test]
fn const_nested_arrays_keep_shape_and_dtype() {
    let g = rlx! {
        const t = [[1, -2, 3.5], [4, 5, 6]]: F32;
        const k = [[[1], [2]], [[3], [4]]]: I64;
        out t, k;
    };
    let t = g.node(g.outputs[0]);
    assert_eq!(
        t.shape.dims(),
        &[rlx_tensor::Dim::Static(2), rlx_tensor::Dim::Static(3)]
    );
    assert_eq!(
        const_f32(&g, g.outputs[0].index()),
        [1.0, -2.0, 3.5, 4.0, 5.0, 6.0]
    );
    let k = g.node(g.outputs[1]);
    assert_eq!(k.shape.dtype(), DType::I64);
    assert_eq!(k.shape.rank(), 3);
}

#[test]
fn bind_adopts_outer_tensors_into_the_graph() {
    let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    let g = rlx! { bind a; input x: [3]; let y = a * x + x; };
    assert_eq!(g.outputs.len(), 1);
    // The output id is valid in the finished graph and its cone reaches x and a's data.
    let out = g.node(g.outputs[0]);
    assert_eq!(out.op, Op::Binary(BinaryOp::Add));
    assert_eq!(count(&g, "input"), 1, "x is not duplicated:\n{g}");
    assert_eq!(constants(&g).len(), 1);
}

#[test]
fn bind_collections_of_tensors_slices_and_structs() {
    let cb: Vec<Tensor> = vec![Tensor::ones([2]), Tensor::full([2], 2.0)];
    let sl: &[Tensor] = &cb;
    struct Attn {
        g: Tensor,
        b: Tensor,
    }
    struct Layer {
        attn: Attn,
        scales: Vec<Tensor>,
    }
    #[allow(clippy::useless_vec)] // a `Vec` of structs is the case under test
    let layers = vec![Layer {
        attn: Attn {
            g: Tensor::ones([2]),
            b: Tensor::zeros([2]),
        },
        scales: vec![Tensor::full([2], 3.0)],
    }];
    let g = rlx! {
        bind cb[], sl[], layers[];
        input x: [2];
        let y = x * cb[1] + sl[0];
        let z = y.layer_norm(layers[0].attn.g, layers[0].attn.b, ~1e-5) * layers[0].scales[0];
    };
    assert_eq!(count(&g, "layer_norm"), 1);
    assert_eq!(constants(&g).len(), 5, "{g}");
}

#[test]
fn tuple_let_splits_into_chunks() {
    let g = rlx! {
        input x: [2, 4];
        let (a, b) = split(x, 1, 2);
        let y = a - b;
    };
    assert_eq!(count(&g, "narrow"), 2);
    let out = g.node(g.outputs[0]);
    assert_eq!(
        out.shape.dims(),
        &[rlx_tensor::Dim::Static(2), rlx_tensor::Dim::Static(2)]
    );
    // The default output is the last `let`; without it, the last tuple element.
    let g = rlx! { input x: [4]; let (a, b) = split(x, 0, 2); };
    let out = g.node(g.outputs[0]);
    assert!(matches!(out.op, Op::Narrow { start: 2, .. }), "{g}");
}

#[test]
fn linear_with_a_wrapping_activation_fuses() {
    let g = rlx! {
        input x: [2, 4]; param w: [3, 4]; param b: [3];
        let y = gelu(linear(x, w, b));
    };
    assert_eq!(count(&g, "gelu"), 0);
    let out = g.node(g.outputs[0]);
    assert_eq!(
        out.op,
        Op::FusedMatMulBiasAct {
            activation: Some(Activation::Gelu)
        }
    );
}

#[test]
fn builtin_sugar_lowers_to_the_documented_methods() {
    let g = rlx! {
        input x: [2, 3]; input y: [2, 3]; input ids: [I64; 4]; param tbl: [5, 3];
        let a = maximum(x, 0.0) + minimum(x, y) + atan2(x, y) + rem(x, 2) + pow(x, y);
        let c = clamp(a, -1, 1);
        let s = where_(x > y, x, 0.0) + select(x < y, 1.0, y);
        let e = embed(tbl, ids);
        let m = mean(x) + sum(y);
        let t = mm_t(x, y);
        let k = x % y;
        out c, s, e, m, t, k;
    };
    for (op, n) in [
        ("maximum", 2),
        ("minimum", 2),
        ("atan2", 1),
        ("rem", 2),
        ("pow", 1),
        ("where", 2),
        ("gather", 1),
        ("reduce_mean", 1),
        ("reduce_sum", 1),
        ("matmul", 1),
        ("transpose", 1),
    ] {
        assert_eq!(count(&g, op), n, "{op} in\n{g}");
    }
}

#[test]
fn method_escape_hatch_borrows_bindings_and_passes_values() {
    let heads = 2usize;
    let g = rlx! {
        input q: [1, 4, 8]; input k: [1, 4, 8]; input v: [1, 4, 8];
        let a = q.attention(k, v, ~heads, 4, MaskKind::Causal);
        let s = a.softmax(-1).sum([0], true).cast(DType::F16);
    };
    assert!(matches!(
        g.node(g.input_id("q").unwrap()).op,
        Op::Input { .. }
    ));
    assert_eq!(count(&g, "attention"), 1);
    assert_eq!(g.node(g.outputs[0]).shape.dtype(), DType::F16);
}

#[test]
fn rlx_expr_builds_in_the_variables_graph() {
    let (g, ()) = graph_with("deep", |s: &mut GraphScope| {
        let mut h = s.input("x", shape![2, 4]);
        for i in 0..3 {
            let w = s.param(format!("w{i}"), shape![4, 4]);
            let b = s.param(format!("b{i}"), shape![4]);
            h = rlx_expr!(gelu(linear(h, w, b)) * 0.5 - h);
        }
        let n = rlx_expr!(h.softmax(-1));
        s.set_outputs([&n]);
    });
    assert_eq!(count(&g, "linear"), 3);
    assert_eq!(count(&g, "gelu"), 0);
    assert_eq!(count(&g, "softmax"), 1);
    assert_eq!(g.outputs.len(), 1);
}

#[test]
fn rlx_expr_indexes_rust_collections_and_negates() {
    let ws = [Tensor::ones([2]), Tensor::full([2], 2.0)];
    let x = Tensor::from_vec(vec![1.0, -1.0], [2]);
    let i = 1;
    let y = rlx_expr!(-(x * ws[i]) + ws[0]);
    let g = y.to_graph();
    assert_eq!(count(&g, "neg"), 1);
    assert_eq!(count(&g, "mul"), 1);
    assert_eq!(count(&g, "add"), 1);
}

#[test]
fn fns_and_runtime_repeats_nest_both_ways() {
    let build = |n: usize| {
        rlx! {
            fn deepen(h, w) { let h = h @ w; repeat n { let h = tanh(h @ w); } }
            input x: [2, 2];
            param w: [2, 2];
            repeat n { let x = deepen(x, w) + x; }
        }
    };
    // n outer iterations, each with 1 + n matmuls.
    assert_eq!(count(&build(0), "matmul"), 0);
    assert_eq!(count(&build(2), "matmul"), 2 * 3);
    assert_eq!(count(&build(2), "tanh"), 2 * 2);
    assert_eq!(count(&build(3), "add"), 3);
}

#[test]
fn scan_bodies_capture_through_inlined_fns() {
    let g = rlx! {
        fn cell(h) { let o = tanh(h @ w) * s; }
        input x: [1, 3];
        param w: [3, 3];
        param s: [3];
        scan h = x for 2 { let h = cell(h); }
    };
    let out = g.node(g.outputs[0]);
    let Op::Scan {
        body, num_bcast, ..
    } = &out.op
    else {
        panic!("{g}");
    };
    assert_eq!(*num_bcast, 2);
    assert_eq!(out.inputs[1], g.param_id("w").unwrap());
    assert_eq!(out.inputs[2], g.param_id("s").unwrap());
    assert_eq!(count(body, "tanh"), 1);
}
