//! Graph-building cost: nanoseconds per recorded op for a long chain of ops on one
//! graph and for combining tensors of many small graphs (adoption). Run in release:
//! `cargo run --release -p rlx-tensor --example graph_build_cost`.

use rlx_tensor::Tensor;
use std::time::Instant;

/// Best of `reps` runs of `f`, in ns per op (`ops` ops per run).
fn best_ns_per_op(reps: usize, ops: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos() as f64 / ops as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    const N: usize = 10_000;
    let chain = best_ns_per_op(7, N, || {
        let mut x = Tensor::ones([16]);
        for i in 0..N {
            x = if i % 2 == 0 { x.relu() } else { &x + &x };
        }
        std::hint::black_box(x.id());
    });
    let adopt = best_ns_per_op(7, N, || {
        let mut x = Tensor::ones([16]);
        for _ in 0..N {
            x = &x + &Tensor::ones([16]);
        }
        std::hint::black_box(x.id());
    });
    let inspect = best_ns_per_op(7, N, || {
        let x = Tensor::ones([16]).relu();
        let mut s = 0usize;
        for _ in 0..N {
            s += x.rank();
        }
        std::hint::black_box(s);
    });
    println!("chain (relu / add, one graph): {chain:.1} ns/op");
    println!("adopt (add of a fresh constant graph): {adopt:.1} ns/op");
    println!("inspect (rank): {inspect:.1} ns/op");
}
