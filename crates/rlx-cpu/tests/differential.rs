//! Differential tests: random graphs (elementwise chains, broadcasts, views,
//! reductions, matmuls, row ops, casts and opaque ops over several dtypes), compiled
//! for the CPU and run, against the oracle interpreter. Tolerances are per dtype.
//!
//! Each proptest case is a seed; the graph built from it is printed on failure. The
//! case seeds are fixed unless `RLX_DIFF_SEED=random` (see `rlx_testkit::proptest_seed`).

mod common;

use common::{Rng, build_random_graph, check_against_oracle};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, failure_persistence: None, rng_seed: rlx_testkit::proptest_seed(), ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_match_the_oracle(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let (g, args) = build_random_graph(&mut rng, false);
        check_against_oracle(&g, &args);
    }

    #[test]
    fn random_graphs_with_large_dims_match_the_oracle(seed in any::<u64>()) {
        let mut rng = Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15);
        let (g, args) = build_random_graph(&mut rng, true);
        check_against_oracle(&g, &args);
    }
}

/// Replays one seed with full output (set `RLX_SEED`, optionally `RLX_LARGE=1`).
#[test]
#[ignore]
fn replay_seed() {
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
    common::print_both(&g, &args);
    check_against_oracle(&g, &args);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, failure_persistence: None, rng_seed: rlx_testkit::proptest_seed(), ..ProptestConfig::default() })]

    #[test]
    fn convolutions_match_the_oracle(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let (g, args) = common::build_conv_graph(&mut rng);
        check_against_oracle(&g, &args);
    }

    #[test]
    fn fused_attention_matches_the_oracle(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let (g, args) = common::build_attention_graph(&mut rng);
        check_against_oracle(&g, &args);
    }
}
