//! Per-call cost of the eager style with new data each call (W8 eager):
//! `Tensor::from_vec → (&a + &b).relu() → to_vec`, on 3 elements.
//!
//! `cargo run --release -p rlx-tensor --features eval --example eager_overhead [calls] [distinct]`
//!
//! By default the data cycle through 7 values (the cache serves them by key); with
//! `distinct` every call has values never seen before, so every read misses by key and
//! reuses the program compiled for the structure (API.md §6.2).
use rlx_tensor::Tensor;
use std::time::Instant;

fn main() {
    let calls: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let distinct = std::env::args().nth(2).is_some_and(|s| s == "distinct");
    let (a, b) = ([1.0f32, -2.0, 3.0], [0.5f32, 0.5, -4.0]);
    let mut sink = 0.0f32;
    for round in 0..5 {
        let t = Instant::now();
        for i in 0..calls {
            // Distinct values stay exact in f32 up to 2^24 calls in all.
            let bump = if distinct {
                (round * calls + i) as f32
            } else {
                (i % 7) as f32
            };
            let ta = Tensor::from_vec(vec![a[0] + bump, a[1], a[2]], [3]);
            let tb = Tensor::from_vec(b.to_vec(), [3]);
            sink += (&ta + &tb).relu().to_vec()[0];
        }
        let per = t.elapsed().as_secs_f64() / calls as f64;
        println!("round {round}: {:.3} µs per call", per * 1e6);
    }
    let (hits, misses) = rlx_tensor::cache_stats();
    println!(
        "compiles: {}, cache hits {hits}, misses {misses} (checksum {sink})",
        rlx_tensor::cache_compile_count()
    );
}
