//! The examples of the seed document (`spec/seed-rlx_tensor-docs.txt`) that need only
//! the graph builder and `eval`, written exactly as the document writes them.

use rlx_ir::Op;
use rlx_tensor::{Dim, Shape};

#[test]
// The seed writes `(&x.matmul(&w)).gelu()`; keep it verbatim.
#[allow(clippy::needless_borrow)]
fn seed_graph_examples_build_as_written() {
    use rlx_tensor::{ax, graph, rg, s, shape};

    // static shape
    let g = graph("mlp", |g| {
        let x = g.input("x", shape![2, 4]);
        let w = g.param("w", shape![4, 3]);
        (&x.matmul(&w)).gelu()
    });

    // dynamic batch + window slice (no copy in IR)
    let g2 = graph("batched", |g| {
        let x = g.input("x", shape![?, 128]);
        x.slice(s![ax(), rg(0, 64)])
    });

    assert_eq!(g.name, "mlp");
    assert_eq!(g.outputs.len(), 1);
    let out = g.node(g.outputs[0]);
    assert!(matches!(
        out.op,
        Op::Activation(rlx_tensor::Activation::Gelu)
    ));
    assert_eq!(out.shape, Shape::new(&[2, 3], rlx_tensor::DType::F32));
    assert!(matches!(g.node(out.inputs[0]).op, Op::MatMul));
    assert!(g.input_id("x").is_some() && g.param_id("w").is_some());

    let out2 = g2.node(g2.outputs[0]);
    assert_eq!(
        out2.op,
        Op::Narrow {
            axis: 1,
            start: 0,
            len: 64
        }
    );
    assert_eq!(out2.shape.dims(), &[Dim::Dynamic(0), Dim::Static(64)]);
    // The slice is the only op between the input and the output: no copy.
    assert_eq!(g2.node(out2.inputs[0]).op, Op::Input { name: "x".into() });
}

#[cfg(feature = "eval")]
#[test]
fn seed_eval_example_reads_values_back() {
    use rlx_tensor::Tensor; // requires feature = "eval"

    let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    let b = Tensor::ones([3]);
    let c = (&a + &b).relu(); // graphs auto-merge, nothing runs yet
    assert_eq!(c.to_vec(), vec![2.0, 3.0, 4.0]); // auto-selects fastest backend
}

#[cfg(feature = "eval")]
#[test]
fn seed_dynamic_slice_graph_runs_at_any_batch_size() {
    use rlx_tensor::{ax, graph, rg, s, shape};
    let g2 = graph("batched", |g| {
        let x = g.input("x", shape![?, 128]);
        x.slice(s![ax(), rg(0, 64)])
    });
    for batch in [1usize, 3] {
        let data: Vec<f32> = (0..batch * 128).map(|v| v as f32).collect();
        let x = rlx_ir::TensorData::from_f32(&[batch, 128], &data);
        let out = rlx_ir::interp::run(&g2, &[("x", x)]).unwrap().remove(0);
        assert_eq!(out.dims, vec![batch, 64]);
        let want: Vec<f32> = (0..batch)
            .flat_map(|r| (0..64).map(move |c| (r * 128 + c) as f32))
            .collect();
        assert_eq!(out.to_f32_vec(), want);
    }
}
