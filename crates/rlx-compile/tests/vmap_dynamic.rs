//! `vmap` on graphs with dynamic dims: the batched graph keeps them dynamic, runs for
//! several bindings, and equals a loop of the original — including the paths that
//! cannot fold the batch with a reshape (several dynamic axes) and fall back to
//! expand/transpose plumbing, grouped convolutions or unrolling.

use rlx_compile::vmap::vmap;
use rlx_ir::op::{MaskKind, ReduceOp};
use rlx_ir::{Activation, BinaryOp, DType, Dim, Graph, NodeId, Op, Shape, TensorData, interp};

const B: usize = 2;

fn dyn_shape(dims: &[Dim]) -> Shape {
    Shape::from_dims(dims, DType::F64)
}

fn s(n: usize) -> Dim {
    Dim::Static(n)
}

fn d(sym: u32) -> Dim {
    Dim::Dynamic(sym)
}

/// Deterministic data for `dims`.
fn fill(dims: &[usize], seed: u64) -> Vec<f64> {
    let n: usize = dims.iter().product();
    (0..n)
        .map(|i| (((i as u64 * 2654435761 + seed * 40503) % 1000) as f64 / 500.0) - 1.0)
        .collect()
}

/// Run `vmap(g)` on inputs `(name, per-example dims, batched)` and compare with the loop.
fn check(g: &Graph, inputs: &[(&str, Vec<usize>, bool)]) {
    g.verify().unwrap();
    let ids: Vec<NodeId> = inputs
        .iter()
        .filter(|i| i.2)
        .map(|i| g.input_id(i.0).unwrap())
        .collect();
    let vg = vmap(g, &ids, B).unwrap_or_else(|e| panic!("{e}"));
    vg.verify().unwrap_or_else(|e| panic!("{e}\n{vg}"));
    // Dynamic dims of the original survive.
    for &id in &ids {
        let before = g.shape(id);
        let after = vg.shape(vg.input_id(&g.node(id).name.clone().unwrap()).unwrap());
        assert_eq!(&after.dims()[1..], before.dims());
    }
    let per: Vec<Vec<Vec<f64>>> = inputs
        .iter()
        .enumerate()
        .map(|(k, (_, dims, b))| {
            let n = if *b { B } else { 1 };
            (0..n)
                .map(|e| fill(dims, (k * 10 + e) as u64 + 1))
                .collect()
        })
        .collect();
    let feed: Vec<(&str, TensorData)> = inputs
        .iter()
        .enumerate()
        .map(|(k, (name, dims, b))| {
            if *b {
                let mut bd = vec![B];
                bd.extend_from_slice(dims);
                (*name, TensorData::from_f64(&bd, &per[k].concat()))
            } else {
                (*name, TensorData::from_f64(dims, &per[k][0]))
            }
        })
        .collect();
    let got = interp::run(&vg, &feed).unwrap_or_else(|e| panic!("{e}"));
    for (o, out) in got.iter().enumerate() {
        let mut want = Vec::new();
        for e in 0..B {
            let ex: Vec<(&str, TensorData)> = inputs
                .iter()
                .enumerate()
                .map(|(k, (name, dims, b))| {
                    (
                        *name,
                        TensorData::from_f64(dims, &per[k][if *b { e } else { 0 }]),
                    )
                })
                .collect();
            let y = interp::run(g, &ex).unwrap();
            assert_eq!(out.dims[1..], y[o].dims[..], "output {o}");
            want.extend(y[o].to_f64_vec());
        }
        let gv = out.to_f64_vec();
        for (a, b) in gv.iter().zip(&want) {
            assert!(
                (a - b).abs() < 1e-9 * (1.0 + b.abs()),
                "output {o}: {gv:?} vs {want:?}"
            );
        }
    }
}

fn op(g: &mut Graph, o: Op, ins: &[NodeId]) -> NodeId {
    g.add_op(o, ins.to_vec()).unwrap()
}

#[test]
fn dynamic_rows_stay_dynamic_through_matmul_softmax_and_reductions() {
    let mut g = Graph::new("f");
    let x = g.input("x", dyn_shape(&[d(0), s(3)]));
    let w = g.input("w", dyn_shape(&[s(3), s(2)]));
    let y = op(&mut g, Op::MatMul, &[x, w]);
    let p = op(&mut g, Op::Softmax { axis: -1 }, &[y]);
    let r = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Max,
            axes: vec![0],
            keep_dim: false,
        },
        &[p],
    );
    let flat = op(
        &mut g,
        Op::Reshape {
            new_shape: vec![-1, 2, 1],
        },
        &[p],
    );
    g.set_outputs(vec![r, flat]);
    for rows in [1, 4] {
        check(&g, &[("x", vec![rows, 3], true), ("w", vec![3, 2], false)]);
        check(&g, &[("x", vec![rows, 3], false), ("w", vec![3, 2], true)]);
    }
}

#[test]
fn unit_axes_are_inserted_without_reshapes_when_two_axes_are_dynamic() {
    // y [?0, ?1] batched broadcasts against x [?2, ?0, ?1]: the batched y needs a unit
    // axis after the batch, which a reshape cannot give with two dynamic axes.
    let mut g = Graph::new("f");
    let x = g.input("x", dyn_shape(&[d(2), d(0), d(1)]));
    let y = g.input("y", dyn_shape(&[d(0), d(1)]));
    let z = op(&mut g, Op::Binary(BinaryOp::Mul), &[x, y]);
    let t = op(&mut g, Op::Activation(Activation::Tanh), &[z]);
    g.set_outputs(vec![t]);
    check(&g, &[("x", vec![2, 3, 2], false), ("y", vec![3, 2], true)]);
}

fn attn_graph(dims: &[Dim]) -> Graph {
    let mut g = Graph::new("attn");
    let q = g.input("q", dyn_shape(dims));
    let k = g.input("k", dyn_shape(dims));
    let v = g.input("v", dyn_shape(dims));
    let o = op(
        &mut g,
        Op::Attention {
            num_heads: 2,
            head_dim: 2,
            v_head_dim: None,
            mask_kind: MaskKind::Causal,
            score_scale: None,
            attn_logit_softcap: None,
        },
        &[q, k, v],
    );
    g.set_outputs(vec![o]);
    g
}

#[test]
fn attention_with_a_dynamic_sequence_folds_the_batch() {
    let g = attn_graph(&[s(1), d(0), s(2), s(2)]);
    for seq in [2, 3] {
        let dims = vec![1, seq, 2, 2];
        check(
            &g,
            &[
                ("q", dims.clone(), true),
                ("k", dims.clone(), false),
                ("v", dims, true),
            ],
        );
    }
}

fn count(g: &Graph, name: &str) -> usize {
    g.nodes().iter().filter(|n| n.op.name() == name).count()
}

#[test]
fn attention_and_rope_with_a_dynamic_batch_fold_the_batch_into_the_heads() {
    // Grouped-query (4 query heads, 2 kv heads), causal, rank-4 layout, dynamic b.
    let mut g = Graph::new("gqa");
    let q = g.input("q", dyn_shape(&[d(0), s(3), s(4), s(2)]));
    let k = g.input("k", dyn_shape(&[d(0), s(3), s(2), s(2)]));
    let v = g.input("v", dyn_shape(&[d(0), s(3), s(2), s(2)]));
    let cos = g.input("cos", dyn_shape(&[s(3), s(1)]));
    let sin = g.input("sin", dyn_shape(&[s(3), s(1)]));
    let rope = Op::Rope {
        head_dim: 2,
        n_rot: 2,
        style: rlx_ir::RopeStyle::NeoX,
    };
    let qr = op(&mut g, rope.clone(), &[q, cos, sin]);
    let kr = op(&mut g, rope, &[k, cos, sin]);
    let o = op(
        &mut g,
        Op::Attention {
            num_heads: 4,
            head_dim: 2,
            v_head_dim: None,
            mask_kind: MaskKind::Causal,
            score_scale: None,
            attn_logit_softcap: None,
        },
        &[qr, kr, v],
    );
    g.set_outputs(vec![o]);
    let ids = [g.input_id("q").unwrap(), g.input_id("v").unwrap()];
    let vg = vmap(&g, &ids, B).unwrap();
    assert_eq!(count(&vg, "attention"), 1, "not unrolled:\n{vg}");
    assert_eq!(count(&vg, "rope"), 2, "not unrolled:\n{vg}");
    for b in [1, 2] {
        check(
            &g,
            &[
                ("q", vec![b, 3, 4, 2], true),
                ("k", vec![b, 3, 2, 2], false),
                ("v", vec![b, 3, 2, 2], true),
                ("cos", vec![3, 1], false),
                ("sin", vec![3, 1], false),
            ],
        );
    }
    // Rank-3 layout with a sliding window.
    let mut g = Graph::new("window");
    let dims = [d(0), s(4), s(4)];
    let q = g.input("q", dyn_shape(&dims));
    let k = g.input("k", dyn_shape(&dims));
    let o = op(
        &mut g,
        Op::Attention {
            num_heads: 2,
            head_dim: 2,
            v_head_dim: None,
            mask_kind: MaskKind::SlidingWindow(1),
            score_scale: Some(0.5),
            attn_logit_softcap: None,
        },
        &[q, k, k],
    );
    g.set_outputs(vec![o]);
    check(
        &g,
        &[("q", vec![3, 4, 4], true), ("k", vec![3, 4, 4], false)],
    );
}

#[test]
fn attention_with_dynamic_batch_and_sequence_is_unrolled() {
    let g = attn_graph(&[d(1), d(0), s(4)]);
    let ids: Vec<NodeId> = (0..3).map(|i| NodeId(i as u32)).collect();
    assert_eq!(count(&vmap(&g, &ids, B).unwrap(), "attention"), B);
    let dims = vec![2, 3, 4];
    check(
        &g,
        &[
            ("q", dims.clone(), true),
            ("k", dims.clone(), true),
            ("v", dims, true),
        ],
    );
}

#[test]
fn conv_with_a_dynamic_batch_uses_grouped_channels() {
    let mut g = Graph::new("conv");
    let x = g.input("x", dyn_shape(&[d(0), s(2), s(4), s(4)]));
    let w = g.input("w", dyn_shape(&[s(3), s(2), s(3), s(3)]));
    let y = op(
        &mut g,
        Op::Conv {
            kernel_size: vec![3, 3],
            stride: vec![1, 1],
            padding: vec![1, 1],
            dilation: vec![1, 1],
            groups: 1,
        },
        &[x, w],
    );
    let p = op(
        &mut g,
        Op::Pool {
            kind: ReduceOp::Max,
            kernel_size: vec![2, 2],
            stride: vec![2, 2],
            padding: vec![0, 0],
        },
        &[y],
    );
    g.set_outputs(vec![p]);
    check(
        &g,
        &[
            ("x", vec![3, 2, 4, 4], true),
            ("w", vec![3, 2, 3, 3], false),
        ],
    );
    check(
        &g,
        &[("x", vec![1, 2, 4, 4], true), ("w", vec![3, 2, 3, 3], true)],
    );
}

#[test]
fn gather_with_batched_table_and_indices_over_a_dynamic_row_axis() {
    let mut g = Graph::new("gather");
    let t = g.input("t", dyn_shape(&[s(4), d(0)]));
    let i = g.input("i", Shape::new(&[3], DType::I64));
    let y = op(&mut g, Op::Gather { axis: 0 }, &[t, i]);
    g.set_outputs(vec![y]);
    // Indices must be valid (negative ones count from the end): built by hand.
    let ids = vec![g.input_id("t").unwrap(), g.input_id("i").unwrap()];
    let vg = vmap(&g, &ids, B).unwrap();
    let table: Vec<f64> = fill(&[B, 4, 5], 3);
    let idx = TensorData::from_i64(&[B, 3], &[3, 0, -1, 1, 1, 2]);
    let out = interp::run(
        &vg,
        &[("t", TensorData::from_f64(&[B, 4, 5], &table)), ("i", idx)],
    )
    .unwrap()[0]
        .to_f64_vec();
    let rows = [[3usize, 0, 3], [1, 1, 2]];
    let mut want = Vec::new();
    for (b, r) in rows.iter().enumerate() {
        for &row in r {
            want.extend_from_slice(&table[(b * 4 + row) * 5..(b * 4 + row + 1) * 5]);
        }
    }
    assert_eq!(out, want);
}

#[test]
fn layer_norm_with_batched_gain_over_dynamic_rows() {
    let mut g = Graph::new("ln");
    let x = g.input("x", dyn_shape(&[d(0), s(5)]));
    let gamma = g.input("g", dyn_shape(&[s(5)]));
    let beta = g.input("b", dyn_shape(&[s(5)]));
    let y = op(
        &mut g,
        Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        },
        &[x, gamma, beta],
    );
    g.set_outputs(vec![y]);
    check(
        &g,
        &[
            ("x", vec![3, 5], false),
            ("g", vec![5], true),
            ("b", vec![5], false),
        ],
    );
    check(
        &g,
        &[
            ("x", vec![2, 5], true),
            ("g", vec![5], true),
            ("b", vec![5], true),
        ],
    );
}

#[test]
fn scan_over_a_dynamic_carry_with_batched_slices_batches_the_carry() {
    let mut body = Graph::new("step");
    let c = body.input("carry", dyn_shape(&[d(0)]));
    let x = body.input("x_0", dyn_shape(&[d(0)]));
    let sx = body
        .add_op(Op::Activation(Activation::Sin), vec![x])
        .unwrap();
    let n = body.add_op(Op::Binary(BinaryOp::Add), vec![c, sx]).unwrap();
    body.set_outputs(vec![n]);
    let mut g = Graph::new("scan");
    let init = g.input("init", dyn_shape(&[d(0)]));
    let xs = g.input("xs", dyn_shape(&[s(3), d(0)]));
    let y = op(
        &mut g,
        Op::Scan {
            body: Box::new(body),
            length: 3,
            save_trajectory: true,
            num_bcast: 0,
            num_xs: 1,
            num_checkpoints: 0,
        },
        &[init, xs],
    );
    g.set_outputs(vec![y]);
    check(&g, &[("init", vec![4], false), ("xs", vec![3, 4], true)]);
}

#[test]
fn outputs_that_do_not_depend_on_the_batch_are_broadcast() {
    let mut g = Graph::new("f");
    let x = g.input("x", dyn_shape(&[s(3)]));
    let w = g.input("w", dyn_shape(&[s(3)]));
    let y = op(&mut g, Op::Binary(BinaryOp::Add), &[x, w]);
    let z = op(&mut g, Op::Activation(Activation::Exp), &[w]);
    g.set_outputs(vec![y, z]);
    let vg = vmap(&g, &[x], B).unwrap();
    // The unbatched subgraph (exp of w) stays a plain node on w.
    let exp = vg
        .nodes()
        .iter()
        .find(|n| n.op == Op::Activation(Activation::Exp))
        .unwrap();
    assert_eq!(exp.shape.dims(), &[s(3)]);
    check(&g, &[("x", vec![3], true), ("w", vec![3], false)]);
}

#[test]
fn errors_name_the_problem() {
    let mut g = Graph::new("f");
    let x = g.input("x", dyn_shape(&[s(3)]));
    let w = g.param("w", dyn_shape(&[s(3)]));
    let y = op(&mut g, Op::Binary(BinaryOp::Add), &[x, w]);
    g.set_outputs(vec![y]);
    let e = vmap(&g, &[w], 2).unwrap_err().to_string();
    assert!(
        e.contains("only inputs can be batched") && e.contains("param"),
        "{e}"
    );
    let e = vmap(&g, &[x], 0).unwrap_err().to_string();
    assert!(e.contains("batch_size must be at least 1"), "{e}");
    let e = vmap(&g, &[x, x], 2).unwrap_err().to_string();
    assert!(e.contains("listed twice"), "{e}");
}
