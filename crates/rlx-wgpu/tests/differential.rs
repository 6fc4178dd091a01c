//! The differential suite on the wgpu backend: the random graphs of [`rlx_testkit`]
//! (elementwise chains, broadcasts, views, reductions, matmuls, row ops, casts and
//! opaque ops over f32/f16/bf16/f64/integer dtypes) and random attention graphs,
//! compiled for `Device::Gpu` and compared with the oracle. Kernels the GPU does not
//! run (f64, i64, opaque ops) fall back to the host; the suite also counts how many
//! kernels really ran on the GPU so a silent all-host run cannot pass.
//!
//! On a machine without any wgpu adapter every test prints why it skipped.

mod support;

use rlx_testkit::{Rng, build_attention_graph, build_random_graph};
use std::sync::atomic::{AtomicUsize, Ordering};

static GPU_KERNELS: AtomicUsize = AtomicUsize::new(0);
static ALL_KERNELS: AtomicUsize = AtomicUsize::new(0);

fn run_seed(seed: u64, large: bool) {
    let mut rng = Rng::new(if large {
        seed ^ 0x9e37_79b9_7f4a_7c15
    } else {
        seed
    });
    let (g, args) = build_random_graph(&mut rng, large);
    let placement = support::check(&g, &args);
    GPU_KERNELS.fetch_add(placement.iter().filter(|&&p| p).count(), Ordering::Relaxed);
    ALL_KERNELS.fetch_add(placement.len(), Ordering::Relaxed);
}

/// Deterministic seeds (a fixed list keeps CI time bounded and failures replayable:
/// `RLX_SEED=<n> cargo test -p rlx-wgpu --test differential replay -- --ignored`).
fn seeds(n: u64, salt: u64) -> impl Iterator<Item = u64> {
    (0..n).map(move |i| (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt)
}

#[test]
fn random_graphs_match_the_oracle_on_the_gpu() {
    if !support::gpu_or_skip("random_graphs_match_the_oracle_on_the_gpu") {
        return;
    }
    let n = std::env::var("RLX_WGPU_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    for s in seeds(n, 0x5eed) {
        run_seed(s, false);
    }
    let (gpu, all) = (
        GPU_KERNELS.load(Ordering::Relaxed),
        ALL_KERNELS.load(Ordering::Relaxed),
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "wgpu differential suite on {}: {gpu} of {all} kernels ran on the GPU (the rest: f64/i64 data, gather, ...)",
        rlx_wgpu::adapter_info(rlx_runtime::Device::Gpu).unwrap_or_default()
    );
    assert!(gpu * 3 >= all, "only {gpu} of {all} kernels ran on the GPU");
}

#[test]
fn random_graphs_with_large_dims_match_the_oracle_on_the_gpu() {
    if !support::gpu_or_skip("random_graphs_with_large_dims_match_the_oracle_on_the_gpu") {
        return;
    }
    let n = std::env::var("RLX_WGPU_CASES")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(150, |v| v / 4);
    for s in seeds(n, 0x1a7e) {
        run_seed(s, true);
    }
}

#[test]
fn random_attention_graphs_match_the_oracle_on_the_gpu() {
    if !support::gpu_or_skip("random_attention_graphs_match_the_oracle_on_the_gpu") {
        return;
    }
    let mut on_gpu = 0;
    for s in seeds(40, 0xa77e) {
        let mut rng = Rng::new(s);
        let (g, args) = build_attention_graph(&mut rng);
        let placement = support::check(&g, &args);
        on_gpu += placement.iter().filter(|&&p| p).count();
    }
    assert!(on_gpu >= 40, "attention kernels did not run on the GPU");
}

/// Replays one seed (set `RLX_SEED`, optionally `RLX_LARGE=1`).
#[test]
#[ignore]
fn replay() {
    let seed: u64 = std::env::var("RLX_SEED")
        .expect("set RLX_SEED")
        .parse()
        .unwrap();
    let large = std::env::var("RLX_LARGE").is_ok_and(|v| v == "1");
    let mut rng = Rng::new(if large {
        seed ^ 0x9e37_79b9_7f4a_7c15
    } else {
        seed
    });
    let (g, args) = build_random_graph(&mut rng, large);
    eprintln!("{g}");
    let placement = support::check(&g, &args);
    eprintln!("placement {placement:?}");
}
