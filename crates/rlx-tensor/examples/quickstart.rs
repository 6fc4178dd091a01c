//! The seed document's examples, runnable: `cargo run -p rlx-tensor --features eval --example quickstart`.

use rlx_tensor::{Device, Func, Tensor, ax, cache_stats, graph, rg, s, shape};

fn main() {
    // NumPy-style: build from host data, combine lazily, read back.
    let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    let b = Tensor::ones([3]);
    let c = (&a + &b).relu(); // graphs auto-merge, nothing runs yet
    println!("(a + b).relu()          = {:?}", c.to_vec());
    println!("pinned to the CPU       = {:?}", c.on(Device::Cpu).to_vec());
    println!("{c}");

    // A traced function of named inputs and params, with a dynamic batch axis.
    let f = Func::new("affine", |s| {
        let x = s.input("x", shape![?, 2]);
        let w = s.param("w", shape![2, 1]);
        x.matmul(&w).relu()
    })
    .with_param("w", vec![1.0, -1.0]);
    println!(
        "f(batch of 2)           = {:?}",
        f.run(&[("x", &[3.0, 1.0, 1.0, 3.0])])
    );
    println!(
        "f(batch of 3)           = {:?}",
        f.run(&[("x", &[5.0, 1.0, 1.0, 5.0, 2.0, 0.0])])
    );

    // Static and dynamic graphs with slicing.
    let g = graph("mlp", |g| {
        let x = g.input("x", shape![2, 4]);
        let w = g.param("w", shape![4, 3]);
        x.matmul(&w).gelu()
    });
    let g2 = graph("batched", |g| {
        let x = g.input("x", shape![?, 128]);
        x.slice(s![ax(), rg(0, 64)])
    });
    println!(
        "graph `{}`: {} nodes; graph `{}`: {} nodes",
        g.name,
        g.len(),
        g2.name,
        g2.len()
    );
    let (hits, misses) = cache_stats();
    println!("compile cache: {hits} hits, {misses} misses");
}
