//! The Graph API, its `Display` listing, and every failure mode of `Graph::verify`.

use rlx_ir::op::ReduceOp;
use rlx_ir::{Activation, BinaryOp, DType, Dim, Graph, IrError, NodeId, Op, Shape};

fn f32s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::F32)
}

/// `x: [2, 3]`, `w: [3]`, a scalar constant 1.0, `y = x · w`, `z = sum(y, axis 1) · 1.0`.
fn sample() -> (Graph, [NodeId; 6]) {
    let mut g = Graph::new("demo");
    let x = g.input("x", f32s(&[2, 3]));
    let w = g.param("w", f32s(&[3]));
    let c = g.add_node(
        Op::Constant {
            data: 1.0f32.to_le_bytes().to_vec(),
        },
        vec![],
        f32s(&[]),
    );
    let y = g.add_op(Op::Binary(BinaryOp::Mul), vec![x, w]).unwrap();
    let r = g
        .add_op(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dim: false,
            },
            vec![y],
        )
        .unwrap();
    let z = g.add_op(Op::Binary(BinaryOp::Mul), vec![r, c]).unwrap();
    g.set_outputs(vec![z]);
    (g, [x, w, c, y, r, z])
}

/// Assert `verify` fails with `op`, at `node` (if given), mentioning every needle.
#[track_caller]
fn verify_fails(g: &Graph, op: &str, node: Option<NodeId>, needles: &[&str]) -> IrError {
    let e = g.verify().expect_err("verify should fail");
    assert_eq!(e.op, op, "{e}");
    assert_eq!(e.node, node, "{e}");
    for n in needles {
        assert!(e.to_string().contains(n), "expected `{n}` in: {e}");
    }
    e
}

#[test]
fn node_ids_are_dense_insertion_indices_with_inferred_shapes() {
    let (g, ids) = sample();
    assert_eq!(g.len(), 6);
    assert!(!g.is_empty());
    assert!(Graph::new("empty").is_empty());
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(id.index(), i);
        assert_eq!(g.node(*id).id, *id);
        assert_eq!(g.nodes()[i].id, *id);
    }
    assert_eq!(g.shape(ids[3]), &f32s(&[2, 3]));
    assert_eq!(g.shape(ids[4]), &f32s(&[2]));
    assert_eq!(g.node(ids[3]).inputs, vec![ids[0], ids[1]]);
    assert_eq!(g.get(NodeId(6)), None);
    assert_eq!(NodeId(7).to_string(), "%7");
}

#[test]
fn add_op_rejects_foreign_ids_and_bad_operands_without_appending() {
    let (mut g, [x, ..]) = sample();
    let e = g
        .add_op(Op::StopGradient, vec![NodeId(9)])
        .expect_err("foreign id");
    assert_eq!(e.op, "stop_gradient");
    assert!(
        e.message.contains("%9") && e.message.contains("`demo`") && e.message.contains("6 nodes"),
        "{e}"
    );
    let e = g.add_op(Op::MatMul, vec![x, x]).expect_err("[2,3]·[2,3]");
    assert_eq!(e.op, "matmul");
    assert!(e.message.contains("[2, 3] f32"), "{e}");
    assert_eq!(g.len(), 6, "failed add_op must not append");
}

#[test]
#[should_panic(expected = "does not exist")]
fn node_panics_with_a_clear_message_for_a_foreign_id() {
    let (g, _) = sample();
    g.node(NodeId(40));
}

#[test]
fn users_lists_each_reader_once_and_use_count_counts_slots_and_outputs() {
    let mut g = Graph::new("uses");
    let x = g.input("x", f32s(&[2]));
    let sq = g.add_op(Op::Binary(BinaryOp::Mul), vec![x, x]).unwrap();
    let r = g.add_op(Op::Activation(Activation::Relu), vec![x]).unwrap();
    let s = g.add_op(Op::Binary(BinaryOp::Add), vec![sq, r]).unwrap();
    g.set_outputs(vec![s, x]);
    assert_eq!(g.users(x), vec![sq, r]);
    assert_eq!(
        g.use_count(x),
        2 + 1 + 1,
        "two slots of sq, one of r, one output"
    );
    assert_eq!(g.users(sq), vec![s]);
    assert_eq!(g.use_count(sq), 1);
    assert_eq!(g.users(s), vec![]);
    assert_eq!(g.use_count(s), 1);
}

#[test]
fn lookups_by_name_distinguish_inputs_params_and_named_nodes() {
    let mut g = Graph::new("names");
    let a = g.input("a", f32s(&[1]));
    let w = g.param("w", f32s(&[1]));
    let b = g.input("b", f32s(&[1]));
    let v = g.param("v", f32s(&[1]));
    let named = g.append_node(
        Op::Binary(BinaryOp::Add),
        vec![a, w],
        f32s(&[1]),
        Some("sum".into()),
    );
    assert_eq!(g.input_id("a"), Some(a));
    assert_eq!(g.input_id("w"), None, "w is a param, not an input");
    assert_eq!(g.param_id("w"), Some(w));
    assert_eq!(g.param_id("a"), None);
    assert_eq!(g.node_id_by_name("sum"), Some(named));
    assert_eq!(
        g.node_id_by_name("b"),
        Some(b),
        "inputs are named after themselves"
    );
    assert_eq!(g.node_id_by_name("nope"), None);
    assert_eq!(g.input_names(), vec!["a", "b"]);
    assert_eq!(g.param_names(), vec!["w", "v"]);
    assert_eq!(g.node(v).name.as_deref(), Some("v"));
    assert_eq!(g.node(named).origin, None);
}

#[test]
fn set_origin_records_the_user_code_location() {
    let (mut g, [x, ..]) = sample();
    let here = rlx_ir::NodeOrigin::caller();
    g.set_origin(x, here);
    assert_eq!(g.node(x).origin, Some(here));
    assert!(here.to_string().starts_with(file!()), "{here}");
}

#[test]
fn graph_equality_compares_name_length_and_outputs_only() {
    let (g, _) = sample();
    let (h, _) = sample();
    assert_eq!(g, h);
    // same name, length and outputs but different ops and shapes: still equal
    let mut other = Graph::new("demo");
    for i in 0..6 {
        other.input(format!("i{i}"), f32s(&[i]));
    }
    other.set_outputs(vec![NodeId(5)]);
    assert_eq!(g, other);
    let mut renamed = h.clone();
    renamed.name = "other".into();
    assert_ne!(g, renamed);
    let mut reoutput = h.clone();
    reoutput.set_outputs(vec![NodeId(4)]);
    assert_ne!(g, reoutput);
    let mut longer = h.clone();
    longer.input("extra", f32s(&[]));
    assert_ne!(g, longer);
}

#[test]
fn display_lists_nodes_attributes_shapes_names_and_outputs() {
    let (g, _) = sample();
    let expected = "\
graph demo {
  %0 = input() : [2, 3] f32  // x
  %1 = param() : [3] f32  // w
  %2 = constant() {bytes=[0, 0, 128, 63]} : [] f32
  %3 = mul(%0, %1) : [2, 3] f32
  %4 = reduce_sum(%3) {op: Sum, axes: [1], keep_dim: false} : [2] f32
  %5 = mul(%4, %2) : [2] f32
  return %5
}";
    assert_eq!(g.to_string(), expected);
}

#[test]
fn display_shows_dynamic_dims_big_constants_casts_and_scans() {
    let mut g = Graph::new("misc");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(4)], DType::F32),
    );
    let c = g.add_op(Op::Cast { to: DType::BF16 }, vec![x]).unwrap();
    let big = g.add_node(Op::Constant { data: vec![0; 32] }, vec![], f32s(&[8]));
    let body = scan_body();
    let init = g.input("init", f32s(&[3]));
    let s = g
        .add_op(
            Op::Scan {
                body: Box::new(body),
                length: 4,
                save_trajectory: false,
                num_bcast: 0,
                num_xs: 0,
                num_checkpoints: 0,
            },
            vec![init],
        )
        .unwrap();
    g.set_outputs(vec![c, big, s]);
    let text = g.to_string();
    assert!(
        text.contains("%0 = input() : [?0, 4] f32  // x\n"),
        "{text}"
    );
    assert!(
        text.contains("%1 = cast(%0) {to: BF16} : [?0, 4] bf16\n"),
        "{text}"
    );
    assert!(
        text.contains("%2 = constant() {32 bytes} : [8] f32\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "%4 = scan(%3) {length=4, save_trajectory=false, num_bcast=0, num_xs=0, num_checkpoints=0, body=`double` (2 nodes)} : [3] f32\n"
        ),
        "{text}"
    );
    assert!(text.ends_with("  return %1, %2, %4\n}"), "{text}");
}

/// `carry + carry`, the simplest well-formed scan body over `[3]` f32.
fn scan_body() -> Graph {
    let mut b = Graph::new("double");
    let c = b.input("carry", f32s(&[3]));
    let y = b.add_op(Op::Binary(BinaryOp::Add), vec![c, c]).unwrap();
    b.set_outputs(vec![y]);
    b
}

fn scan_of(body: Graph) -> Op {
    Op::Scan {
        body: Box::new(body),
        length: 3,
        save_trajectory: true,
        num_bcast: 0,
        num_xs: 0,
        num_checkpoints: 1,
    }
}

#[test]
fn verify_accepts_well_formed_graphs() {
    sample().0.verify().unwrap();
    Graph::new("empty").verify().unwrap();
    // dynamic dims, a scan, and a graph with no outputs yet
    let mut g = Graph::new("ok");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(3), Dim::Static(2)], DType::F16),
    );
    let y = g.add_op(Op::Activation(Activation::Exp), vec![x]).unwrap();
    let init = g.input("init", f32s(&[3]));
    let s = g.add_op(scan_of(scan_body()), vec![init]).unwrap();
    assert_eq!(g.shape(s), &f32s(&[3, 3]));
    g.verify().unwrap();
    g.set_outputs(vec![y, s, y]);
    g.verify().unwrap();
}

#[test]
fn verify_rejects_an_operand_that_does_not_precede_its_user() {
    let mut g = Graph::new("cycle");
    let a = g.input("a", f32s(&[2]));
    // refers to itself
    let b = g.add_node(Op::StopGradient, vec![NodeId(1)], f32s(&[2]));
    g.set_outputs(vec![b]);
    verify_fails(
        &g,
        "stop_gradient",
        Some(b),
        &["operand %1", "precede", "user %1"],
    );
    // refers to a later node
    let mut g = Graph::new("forward");
    let a2 = g.input("a", f32s(&[2]));
    let b2 = g.add_node(Op::Binary(BinaryOp::Add), vec![a2, NodeId(2)], f32s(&[2]));
    g.add_node(Op::StopGradient, vec![a2], f32s(&[2]));
    verify_fails(&g, "add", Some(b2), &["operand %2", "topological"]);
    let _ = a;
}

#[test]
fn verify_rejects_a_wrong_claimed_result_type() {
    let mut g = Graph::new("claims");
    let a = g.input("a", f32s(&[2, 1]));
    let b = g.input("b", f32s(&[3]));
    let c = g.add_node(Op::Binary(BinaryOp::Add), vec![a, b], f32s(&[2, 1]));
    g.set_outputs(vec![c]);
    verify_fails(
        &g,
        "add",
        Some(c),
        &[
            "claims result type [2, 1] f32",
            "give [2, 3] f32",
            "[3] f32",
            "(at node %2)",
        ],
    );
    // the dtype is part of the type
    let mut g = Graph::new("dtype");
    let a = g.input("a", f32s(&[2]));
    let c = g.add_node(Op::Cast { to: DType::I32 }, vec![a], f32s(&[2]));
    verify_fails(&g, "cast", Some(c), &["[2] f32", "[2] i32"]);
}

#[test]
fn verify_reports_shape_errors_of_nodes_built_without_checking() {
    let mut g = Graph::new("unchecked");
    let a = g.input("a", f32s(&[2, 3]));
    let m = g.add_node(Op::MatMul, vec![a, a], f32s(&[2, 3]));
    verify_fails(&g, "matmul", Some(m), &["inner dimensions", "[2, 3] f32"]);
}

#[test]
fn verify_rejects_constant_payloads_that_do_not_fit() {
    let mut g = Graph::new("consts");
    let c = g.add_node(Op::Constant { data: vec![0; 3] }, vec![], f32s(&[1]));
    verify_fails(&g, "constant", Some(c), &["3 bytes", "[1] f32", "needs 4"]);
    let mut g = Graph::new("consts");
    let c = g.add_node(
        Op::Constant { data: vec![0; 12] },
        vec![],
        Shape::new(&[3], DType::F64),
    );
    verify_fails(
        &g,
        "constant",
        Some(c),
        &["12 bytes", "[3] f64", "needs 24"],
    );
    let mut g = Graph::new("consts");
    let c = g.add_node(
        Op::Constant { data: vec![] },
        vec![],
        Shape::from_dims(&[Dim::Dynamic(0)], DType::F32),
    );
    verify_fails(&g, "constant", Some(c), &["static shape", "[?0] f32"]);
    // an empty constant of an empty shape is fine
    let mut g = Graph::new("consts");
    g.add_node(Op::Constant { data: vec![] }, vec![], f32s(&[0, 4]));
    g.verify().unwrap();
}

#[test]
fn verify_rejects_leaves_with_operands() {
    let mut g = Graph::new("leafy");
    let a = g.input("a", f32s(&[1]));
    let p = g.add_node(Op::Param { name: "p".into() }, vec![a], f32s(&[1]));
    verify_fails(&g, "param", Some(p), &["no operands", "%0"]);
}

#[test]
fn verify_rejects_duplicate_input_and_param_names() {
    let mut g = Graph::new("dups");
    g.input("x", f32s(&[1]));
    let second = g.input("x", f32s(&[2]));
    verify_fails(
        &g,
        "input",
        Some(second),
        &["`x`", "earlier input", "unique"],
    );
    let mut g = Graph::new("dups");
    g.param("w", f32s(&[1]));
    g.input("x", f32s(&[1]));
    let second = g.param("w", f32s(&[1]));
    verify_fails(&g, "param", Some(second), &["`w`", "earlier param"]);
    // inputs and params are bound from one namespace
    let mut g = Graph::new("dups");
    g.input("x", f32s(&[1]));
    let clash = g.param("x", f32s(&[1]));
    verify_fails(&g, "param", Some(clash), &["`x`", "earlier input"]);
}

#[test]
fn verify_rejects_output_ids_outside_the_graph() {
    let (mut g, _) = sample();
    g.set_outputs(vec![NodeId(5), NodeId(6)]);
    verify_fails(&g, "verify", None, &["output %6", "`demo`", "6 nodes"]);
}

#[test]
fn verify_rejects_misnumbered_nodes() {
    let (mut g, [x, ..]) = sample();
    g.node_mut(x).id = NodeId(3);
    verify_fails(&g, "verify", None, &["position 0", "%3"]);
}

#[test]
fn verify_rejects_malformed_scan_bodies() {
    // the body itself does not verify
    let mut body = Graph::new("broken");
    let c = body.input("carry", f32s(&[3]));
    let y = body.add_node(Op::Activation(Activation::Exp), vec![c], f32s(&[4]));
    body.set_outputs(vec![y]);
    let mut g = Graph::new("outer");
    let init = g.input("init", f32s(&[3]));
    let s = g.add_node(scan_of(body), vec![init], f32s(&[3, 3]));
    verify_fails(
        &g,
        "scan",
        Some(s),
        &["body `broken`", "exp", "claims result type [4] f32"],
    );
    // the body verifies but returns the wrong type
    let mut body = Graph::new("widen");
    let c = body.input("carry", f32s(&[3]));
    let y = body.add_op(Op::Cast { to: DType::F64 }, vec![c]).unwrap();
    body.set_outputs(vec![y]);
    let mut g = Graph::new("outer");
    let init = g.input("init", f32s(&[3]));
    let s = g.add_node(scan_of(body), vec![init], f32s(&[3, 3]));
    verify_fails(
        &g,
        "scan",
        Some(s),
        &["returns [3] f64", "carry is [3] f32"],
    );
    // the body has no output
    let mut body = Graph::new("silent");
    body.input("carry", f32s(&[3]));
    let mut g = Graph::new("outer");
    let init = g.input("init", f32s(&[3]));
    let s = g.add_node(scan_of(body), vec![init], f32s(&[3, 3]));
    verify_fails(&g, "scan", Some(s), &["exactly one output", "it has 0"]);
    // the body reads an input the scan never binds
    let mut body = Graph::new("stray");
    let c = body.input("carry", f32s(&[3]));
    let z = body.input("state", f32s(&[3]));
    let y = body.add_op(Op::Binary(BinaryOp::Add), vec![c, z]).unwrap();
    body.set_outputs(vec![y]);
    let mut g = Graph::new("outer");
    let init = g.input("init", f32s(&[3]));
    let s = g.add_node(scan_of(body), vec![init], f32s(&[3, 3]));
    verify_fails(&g, "scan", Some(s), &["`state`", "`carry`"]);
}
