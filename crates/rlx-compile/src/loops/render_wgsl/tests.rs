//! Rendered shaders parse and validate with naga (the WGSL front end wgpu uses), and
//! what WGSL cannot express is a named refusal.

use super::carrier::{ceil32, floor32};
use super::*;
use crate::loops::{Builder, KernelBuf, lower_kernel};
use crate::program::Program;
use crate::{CompileOptions, compile};
use rlx_ir::{Activation, BinaryOp, CmpOp, Dim, Graph, NodeId, Op, Shape};

fn op(g: &mut Graph, o: Op, inputs: Vec<NodeId>) -> NodeId {
    g.add_op(o, inputs).unwrap_or_else(|e| panic!("{e}"))
}

fn compiled(g: &Graph) -> Program {
    compile(g, &CompileOptions::default()).unwrap_or_else(|e| panic!("compile: {e}"))
}

/// Parse and validate `src` as naga does for wgpu; panics with the shader on failure.
fn validate(src: &str, what: &str) {
    let module = naga::front::wgsl::parse_str(src).unwrap_or_else(|e| {
        panic!(
            "{what}: WGSL does not parse: {}\n{src}",
            e.emit_to_string(src)
        )
    });
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{what}: WGSL does not validate: {e:?}\n{src}"));
}

/// Every kernel of `g`'s program rendered and validated; returns the shaders.
fn shaders_of(g: &Graph, what: &str) -> Vec<String> {
    let p = compiled(g);
    (0..p.kernels.len())
        .map(|k| {
            let lk = lower_kernel(&p, k).unwrap_or_else(|e| panic!("{what}: {e}"));
            let src = render_wgsl(&lk).unwrap_or_else(|e| panic!("{what}: {e}"));
            validate(&src, what);
            src
        })
        .collect()
}

/// `y = f(x…)` over inputs of `dt` and shape `[n]`.
fn unary_graph(o: Op, dt: DType) -> Graph {
    let mut g = Graph::new("u");
    let x = g.input("x", Shape::new(&[7], dt));
    let y = op(&mut g, o, vec![x]);
    g.set_outputs(vec![y]);
    g
}

fn binary_graph(o: Op, dt: DType) -> Graph {
    let mut g = Graph::new("b");
    let a = g.input("a", Shape::new(&[3, 5], dt));
    let b = g.input("b", Shape::new(&[5], dt));
    let y = op(&mut g, o, vec![a, b]);
    g.set_outputs(vec![y]);
    g
}

#[test]
fn every_activation_in_f32_f16_and_bf16_renders_to_valid_wgsl() {
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for a in Activation::ALL {
            let src = shaders_of(
                &unary_graph(Op::Activation(a), dt),
                &format!("{a:?} {dt:?}"),
            );
            if dt == DType::F16 {
                // Every f16 op re-rounds, and the store narrows to the packed half word.
                assert!(src[0].contains("rf16("), "{a:?}: {}", src[0]);
                assert!(src[0].contains("st16_("), "{a:?}: {}", src[0]);
            }
        }
    }
}

#[test]
fn integer_activations_render_in_i32_with_their_wrap() {
    for dt in [DType::I32, DType::I16, DType::I8, DType::U8] {
        for a in [
            Activation::Neg,
            Activation::Abs,
            Activation::Relu,
            Activation::Sign,
        ] {
            let src = shaders_of(
                &unary_graph(Op::Activation(a), dt),
                &format!("{a:?} {dt:?}"),
            );
            if dt == DType::I8 {
                assert!(src[0].contains("<< 24u) >> 24u)"), "{a:?}: {}", src[0]);
            }
        }
    }
}

#[test]
fn every_binary_op_on_floats_and_the_integer_closed_ones_render_to_valid_wgsl() {
    let float_ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
        BinaryOp::Mod,
        BinaryOp::Atan2,
    ];
    for dt in [DType::F32, DType::BF16] {
        for b in float_ops {
            shaders_of(&binary_graph(Op::Binary(b), dt), &format!("{b:?} {dt:?}"));
        }
        for c in [
            CmpOp::Eq,
            CmpOp::Ne,
            CmpOp::Lt,
            CmpOp::Le,
            CmpOp::Gt,
            CmpOp::Ge,
        ] {
            let src = shaders_of(&binary_graph(Op::Compare(c), dt), &format!("{c:?}"));
            // NaN-safe comparisons: the builtins may assume no NaN.
            assert!(
                src[0].contains("fcmp") || src[0].contains("feq_"),
                "{}",
                src[0]
            );
        }
    }
    for dt in [DType::I32, DType::I16, DType::I8, DType::U8] {
        for b in [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Max,
            BinaryOp::Min,
            BinaryOp::BitAnd,
            BinaryOp::BitOr,
            BinaryOp::BitXor,
            // Square-and-multiply over the exponent's bits: `>>` by up to 62.
            BinaryOp::Pow,
        ] {
            let src = shaders_of(&binary_graph(Op::Binary(b), dt), &format!("{b:?} {dt:?}"));
            if b == BinaryOp::Pow {
                assert!(src[0].contains("min(u32("), "{}", src[0]);
            }
        }
        for c in [CmpOp::Eq, CmpOp::Lt, CmpOp::Ge] {
            shaders_of(&binary_graph(Op::Compare(c), dt), &format!("{c:?} {dt:?}"));
        }
    }
    for b in [
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
        BinaryOp::Max,
    ] {
        shaders_of(
            &binary_graph(Op::Binary(b), DType::Bool),
            &format!("{b:?} bool"),
        );
    }
    let mut g = Graph::new("where");
    let c = g.input("c", Shape::new(&[4], DType::Bool));
    let a = g.input("a", Shape::new(&[4], DType::F16));
    let b = g.input("b", Shape::new(&[4], DType::F16));
    let y = op(&mut g, Op::Where, vec![c, a, b]);
    g.set_outputs(vec![y]);
    shaders_of(&g, "where");
}

#[test]
fn casts_between_every_wgsl_dtype_render_to_valid_wgsl() {
    let dts = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];
    for from in dts {
        for to in dts {
            let src = shaders_of(
                &unary_graph(Op::Cast { to }, from),
                &format!("{from:?} → {to:?}"),
            );
            if from == DType::F32 && to == DType::I32 {
                // The upper clamp bound 2³¹ − 1 is not an f32: compared against 2³¹,
                // converted as the exact integer literal.
                let two31 = format!("fle_({:?}f, ", 2147483648.0f32);
                assert!(src[0].contains(&two31), "{}", src[0]);
                assert!(src[0].contains("2147483647i"), "{}", src[0]);
            }
            if from == DType::I32 && to == DType::F16 {
                // One rounding of the integer to 11 bits, then to the f16 grid.
                assert!(src[0].contains("int_round_("), "{}", src[0]);
            }
        }
    }
}

#[test]
fn view_chains_and_dynamic_dims_render_to_valid_wgsl_with_dims_as_parameters() {
    let mut g = Graph::new("views");
    let a = g.input("a", Shape::new(&[4, 6], DType::F32));
    let b = g.input("b", Shape::new(&[3, 10], DType::F16));
    let bias = g.input("bias", Shape::new(&[8], DType::F32));
    let at = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![a]);
    let ar = op(
        &mut g,
        Op::Reshape {
            new_shape: vec![3, 8],
        },
        vec![at],
    );
    let bn = op(
        &mut g,
        Op::Narrow {
            axis: 1,
            start: 1,
            len: 8,
        },
        vec![b],
    );
    let bf = op(&mut g, Op::Cast { to: DType::F32 }, vec![bn]);
    let m = op(&mut g, Op::Binary(BinaryOp::Mul), vec![ar, bf]);
    let s = op(&mut g, Op::Binary(BinaryOp::Add), vec![m, bias]);
    let yt = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![s]);
    let z = op(&mut g, Op::Activation(Activation::Exp), vec![yt]);
    g.set_outputs(vec![z]);
    let src = shaders_of(&g, "views");
    assert!(src.iter().any(|s| s.contains("ld16_(")), "{src:?}");

    let mut g = Graph::new("dyn");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(5)], DType::F32),
    );
    let sc = g.input("s", Shape::new(&[1, 5], DType::F32));
    let m = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, sc]);
    let t = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![m]);
    let e = op(&mut g, Op::Activation(Activation::Tanh), vec![t]);
    g.set_outputs(vec![e]);
    let p = compiled(&g);
    let lk = lower_kernel(&p, p.kernels.len() - 1).expect("lowered");
    let src = render_wgsl(&lk).expect("rendered");
    validate(&src, "dyn");
    // Buffer bases first, then the dims, four to a vec4.
    let nb = lk.bufs.len();
    let slot = |i: usize| format!("P.v[{}].{}", i / 4, ["x", "y", "z", "w"][i % 4]);
    assert!(src.contains(&slot(nb)), "{src}");
}

#[test]
fn f64_kernels_are_refused_by_name() {
    let g = unary_graph(Op::Activation(Activation::Exp), DType::F64);
    let p = compiled(&g);
    let lk = lower_kernel(&p, 0).expect("lowered");
    let e = render_wgsl(&lk).unwrap_err();
    assert!(matches!(e, WgslError::F64 { .. }), "{e:?}");
    assert!(e.to_string().contains("f64"), "{e}");
    // f64 arithmetic in an f32 kernel (not a carried f32 value): refused too.
    let three = Ex::Convert(Ty::F64, Box::new(Ex::Lit(Lit::I64(3))));
    let sum = Ex::Bin(Bin::Add, Box::new(three), Box::new(Ex::Lit(Lit::F64(0.5))));
    let mut k = int_kernel(vec![], vec![], Ex::Convert(Ty::F32, Box::new(sum)));
    k.bufs[0].dtype = DType::F32;
    let e = render_wgsl(&k).unwrap_err();
    assert!(matches!(e, WgslError::F64 { .. }), "{e:?}");
}

#[test]
fn round_to_format_of_f32_data_renders_in_f32() {
    for (e, m, max) in [
        (4, 3, 448.0),
        (5, 2, 57344.0),
        (2, 1, 6.0),
        (8, 7, 3.3895314e38),
    ] {
        for dt in [DType::F32, DType::F16] {
            let mut g = Graph::new("fmt");
            let a = g.input("a", Shape::new(&[4], dt));
            let r = op(
                &mut g,
                Op::RoundToFormat {
                    exp_bits: e,
                    man_bits: m,
                    max_normal: max,
                },
                vec![a],
            );
            g.set_outputs(vec![r]);
            let src = shaders_of(&g, &format!("e{e}m{m} {dt:?}"));
            assert!(src[0].contains(&format!("{m}i, ")), "{}", src[0]);
        }
    }
}

#[test]
fn integer_float_comparisons_render_exactly_without_f64() {
    // The lowering compares across classes in f64; WGSL orders the i32 against the f32
    // with `icmpf_` (never rounding the integer), in either operand order.
    for (l, r) in [(DType::I32, DType::F32), (DType::F16, DType::I8)] {
        for c in [
            CmpOp::Lt,
            CmpOp::Le,
            CmpOp::Eq,
            CmpOp::Ne,
            CmpOp::Gt,
            CmpOp::Ge,
        ] {
            let mut g = Graph::new("mixed");
            let a = g.input("a", Shape::new(&[4], l));
            let b = g.input("b", Shape::new(&[4], r));
            let y = op(&mut g, Op::Compare(c), vec![a, b]);
            g.set_outputs(vec![y]);
            let src = shaders_of(&g, &format!("{l:?} {c:?} {r:?}"));
            assert!(src[0].contains("icmpf_("), "{}", src[0]);
        }
    }
}

#[test]
fn i64_and_u32_kernels_and_faulting_kernels_are_refused_by_name() {
    for dt in [DType::I64, DType::U32] {
        let g = binary_graph(Op::Binary(BinaryOp::Add), dt);
        let p = compiled(&g);
        let lk = lower_kernel(&p, 0).expect("lowered");
        let e = render_wgsl(&lk).unwrap_err();
        assert!(matches!(e, WgslError::WideInteger { .. }), "{dt:?}: {e:?}");
        assert!(e.to_string().contains("32 bits"), "{e}");
    }
    // Integer division raises on a zero divisor: no error channel, no shader.
    let g = binary_graph(Op::Binary(BinaryOp::Div), DType::I32);
    let p = compiled(&g);
    let lk = lower_kernel(&p, 0).expect("lowered");
    let e = render_wgsl(&lk).unwrap_err();
    assert!(
        matches!(
            e,
            WgslError::Fault {
                fault: Fault::IntegerDivisionByZero,
                ..
            }
        ),
        "{e:?}"
    );
    // With an error channel it renders (and validates).
    let base = |i: usize| format!("{i}u");
    let dim = |_: u32| "1u".to_string();
    let fail = |f: Fault| format!("E[0] = {}u;", f.code());
    let mut h = WgslHelpers::new(false);
    let body = render_wgsl_loop(
        &lk,
        &WgslEmbedding {
            base: &base,
            dim: &dim,
            fail: Some(&fail),
            var_prefix: "v",
            subgroup_size: None,
        },
        &mut h,
    )
    .expect("rendered with an error channel");
    let src = format!(
        "@group(0) @binding(0) var<storage, read_write> A: array<u32>;\n\
         @group(0) @binding(1) var<storage, read_write> E: array<u32>;\n{}\
         @compute @workgroup_size(64)\nfn main(@builtin(workgroup_id) wid: vec3<u32>, \
         @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{\n{body}}}\n",
        h.source()
    );
    validate(&src, "div with an error channel");
}

/// A one-statement kernel storing `value` into an i32 buffer.
fn int_kernel(vars: Vec<Ty>, mut pre: Vec<Stmt>, value: Ex) -> LoopKernel {
    pre.push(Stmt::Store {
        buf: 0,
        index: Ex::Item,
        value,
    });
    LoopKernel {
        name: "t".into(),
        bufs: vec![KernelBuf {
            buf: 0,
            dtype: DType::I32,
            access: Access::Write,
        }],
        dims: vec![],
        items: Ex::Lit(Lit::Index(4)),
        group: None,
        shared: vec![],
        vars,
        body: pre,
    }
}

#[test]
fn integer_ops_needing_exact_values_refuse_operands_that_may_exceed_32_bits() {
    let i = |v: i64| Ex::Lit(Lit::I64(v));
    let item = Ex::Convert(Ty::I64, Box::new(Ex::Item));
    // (item · 2³⁰) < 5: the product is not wrapped, so its i64 value may exceed i32.
    let wide = Ex::Bin(Bin::Mul, Box::new(item.clone()), Box::new(i(1 << 30)));
    let cmp = Ex::Bin(Bin::Lt, Box::new(wide.clone()), Box::new(i(5)));
    let k = int_kernel(
        vec![],
        vec![],
        Ex::Select(Box::new(cmp), Box::new(i(1)), Box::new(i(0))),
    );
    let e = render_wgsl(&k).unwrap_err();
    assert!(matches!(e, WgslError::WideInteger { .. }), "{e:?}");
    // Wrapped to i32 first, the same comparison is exact in i32.
    let wrapped = Ex::Un(Un::Wrap(DType::I32), Box::new(wide.clone()));
    let cmp = Ex::Bin(Bin::Lt, Box::new(wrapped), Box::new(i(5)));
    let k = int_kernel(
        vec![],
        vec![],
        Ex::Select(Box::new(cmp), Box::new(i(1)), Box::new(i(0))),
    );
    validate(&render_wgsl(&k).expect("wrapped operand"), "wrapped");
    // Stored directly, only the low 32 bits matter: accepted.
    let k = int_kernel(vec![], vec![], wide.clone());
    validate(&render_wgsl(&k).expect("store keeps low bits"), "store");
    // A variable that is later assigned a wide value does not fit either.
    let mut b = Builder::default();
    let v = b.var(Ty::I64);
    b.push(Stmt::Let {
        var: v,
        value: i(1),
    });
    b.push(Stmt::Assign {
        var: v,
        value: wide,
    });
    let k = int_kernel(
        b.vars,
        b.body,
        Ex::Bin(Bin::Div, Box::new(Ex::Var(v)), Box::new(i(3))),
    );
    let e = render_wgsl(&k).unwrap_err();
    assert!(e.to_string().contains("Div"), "{e}");
}

#[test]
fn index_literals_beyond_u32_are_refused_and_f32_literals_read_back_exactly() {
    let mut k = int_kernel(vec![], vec![], Ex::Lit(Lit::I64(0)));
    k.items = Ex::Lit(Lit::Index(1 << 33));
    assert!(matches!(
        render_wgsl(&k).unwrap_err(),
        WgslError::IndexRange { value, .. } if value == 1 << 33
    ));
    assert_eq!(f32_lit(0.1), "0.1f");
    assert_eq!(f32_lit(-0.0), "bitcast<f32>(0x80000000u)");
    assert_eq!(f32_lit(f32::INFINITY), "bitcast<f32>(0x7f800000u)");
    assert_eq!(floor32(2147483647.0), 2147483520.0);
    assert_eq!(ceil32(2147483647.0), 2147483648.0);
    assert_eq!(floor32(-0.5), -0.5);
}

#[test]
fn reductions_render_work_groups_with_shared_arrays_and_barriers_to_valid_wgsl() {
    use rlx_ir::ReduceOp;
    let ops = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ];
    let dts = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];
    for dt in dts {
        for kind in ops {
            if dt == DType::Bool && !matches!(kind, ReduceOp::Max | ReduceOp::Min) {
                continue;
            }
            // A long row (work-group of 32), a long column (few outputs: work-group) and
            // a short axis (one item per output).
            for (axes, grouped) in [(vec![1], true), (vec![0], true), (vec![2], false)] {
                let mut g = Graph::new("red");
                let x = g.input("x", Shape::new(&[100, 200, 3], dt));
                let r = op(
                    &mut g,
                    Op::Reduce {
                        op: kind,
                        axes: axes.clone(),
                        keep_dim: false,
                    },
                    vec![x],
                );
                g.set_outputs(vec![r]);
                let p = compiled(&g);
                let lk = lower_kernel(&p, 0).unwrap_or_else(|e| panic!("{e}"));
                let what = format!("{kind:?} {dt:?} {axes:?}");
                let src = match render_wgsl(&lk) {
                    Ok(s) => s,
                    // Integer means need exact sums wider than i32: refused by name.
                    Err(e @ WgslError::WideInteger { .. }) if kind == ReduceOp::Mean => {
                        assert!(dt.is_int(), "{what}: {e}");
                        continue;
                    }
                    Err(e) => panic!("{what}: {e}"),
                };
                validate(&src, &what);
                assert_eq!(lk.group.is_some(), grouped, "{what}");
                if grouped {
                    let n = lk.group.unwrap();
                    assert!(src.contains(&format!("@workgroup_size({n})")), "{src}");
                    assert!(src.contains("var<workgroup> vsh0: array<"), "{src}");
                    assert!(src.contains("workgroupBarrier();"), "{src}");
                    assert!(src.contains("if (wg_group >= "), "{src}");
                }
            }
        }
    }
}

#[test]
fn row_ops_over_long_rows_render_work_groups_to_valid_wgsl() {
    let opts = CompileOptions {
        keep_whole: vec!["softmax".into(), "layer_norm".into()],
        ..Default::default()
    };
    for dt in [DType::F32, DType::F16] {
        let mut g = Graph::new("rows");
        let x = g.input("x", Shape::new(&[3, 500], dt));
        let gm = g.input("g", Shape::new(&[500], dt));
        let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![x]);
        let ln = op(
            &mut g,
            Op::LayerNorm {
                axis: -1,
                eps: 1e-5,
            },
            vec![sm, gm, gm],
        );
        g.set_outputs(vec![ln]);
        let p = compile(&g, &opts).unwrap();
        for k in 0..p.kernels.len() {
            let lk = lower_kernel(&p, k).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(lk.group, Some(64), "{}", p.kernels[k].label());
            let src = render_wgsl(&lk).unwrap_or_else(|e| panic!("{e}"));
            validate(&src, &format!("{} {dt:?}", p.kernels[k].label()));
            assert!(src.contains("workgroupBarrier();"), "{src}");
        }
    }
}
