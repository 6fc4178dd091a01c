//! A fuzzer of the public API that runs in CI: random programs of `try_` calls with
//! random and often invalid shapes, axes, ranges and dtypes, and `Func`s whose dynamic
//! dims are bound at run time to random sizes (0 and too-small ones included).
//!
//! Each case must (1) never let a panic out of a `try_` call, (2) never abort (the
//! sizes stay small, and the dedicated huge-size cases must return `Err` without
//! allocating), and (3) agree with the oracle interpreter `rlx_ir::interp` on every
//! result it evaluates — equal values within the per-dtype tolerance, or an error on
//! both sides.
//!
//! The run is fixed by default (seed [`DEFAULT_SEED`], [`DEFAULT_CASES`] cases):
//! - `RLX_FUZZ_SEED=<u64 or 0x…>` draws another set of cases;
//! - `RLX_FUZZ_CASES=<n>` sets how many;
//! - `RLX_FUZZ_CASE=<case seed>` replays one case (a failure prints its case seed);
//! - `RLX_FUZZ_KNOWN=1` also generates inputs that hit bugs known to be open.
//!
//! The generator lives in `program/`, shared with the `cargo fuzz` target in `fuzz/`.

mod program;

use program::source::{Draw, Seeded, mix};
use program::{Config, Kind, run_case};
use std::collections::BTreeMap;
use std::time::Instant;

/// The run seed when `RLX_FUZZ_SEED` is unset.
const DEFAULT_SEED: u64 = 0x5eed_f022_2026_1201;
/// Cases per run when `RLX_FUZZ_CASES` is unset (split over the shards).
const DEFAULT_CASES: usize = 10_000;
/// The cases are split over this many tests so CI's cores share them.
const SHARDS: usize = 2;
/// Distinct failures printed in full.
const SHOWN: usize = 12;

/// Failures of bugs known to be open, as (failure kind, text in its message, the bug):
/// counted and printed but not fatal (unless `RLX_FUZZ_KNOWN=1`). Remove an entry
/// when its fix lands; the run prints how often each one was seen.
const KNOWN: &[(&str, &str, &str)] = &[(
    "compiled Err, oracle Ok",
    "of an empty axis: max/min have no identity element",
    "softmax/log_softmax over a size-0 axis: the lowered reduce_max fails though the result is empty",
)];

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => v.replace('_', "").parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name} must be a u64 (decimal or 0x…), got `{v}`")))
}

/// Runs this shard's cases and fails with every distinct failure, its case seed and
/// its reproduction.
fn run_shard(shard: usize) {
    let seed = env_u64("RLX_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let cases = env_u64("RLX_FUZZ_CASES").map_or(DEFAULT_CASES, |n| n as usize);
    let only = env_u64("RLX_FUZZ_CASE");
    if only.is_some() && shard != 0 {
        return;
    }
    let known = std::env::var("RLX_FUZZ_KNOWN").is_ok_and(|v| v == "1");
    let cfg = Config::new(known);
    let start = Instant::now();
    let mut state = seed;
    let mut kinds: BTreeMap<Kind, usize> = BTreeMap::new();
    let (mut oks, mut errs, mut failed_cases) = (0usize, 0usize, 0usize);
    let mut agreed = [0usize; 2];
    // Distinct failures (by kind and the first line of the message) → (count, report).
    let mut seen: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut known_seen: BTreeMap<&str, usize> = BTreeMap::new();
    for i in 0..cases {
        let case_seed = mix(&mut state);
        let case_seed = match only {
            Some(s) => s,
            None if i % SHARDS != shard => continue,
            None => case_seed,
        };
        let mut src = Seeded::new(case_seed);
        let mut d = Draw::new(&mut src);
        let (kind, c) = run_case(&mut d, &cfg);
        *kinds.entry(kind).or_default() += 1;
        oks += c.oks;
        errs += c.errs;
        agreed[0] += c.agreed[0];
        agreed[1] += c.agreed[1];
        if !c.failures.is_empty() {
            failed_cases += 1;
        }
        for f in &c.failures {
            if let Some(k) = KNOWN
                .iter()
                .find(|(kind, text, _)| !known && f.kind == *kind && f.message.contains(text))
            {
                *known_seen.entry(k.2).or_default() += 1;
                continue;
            }
            let head = f.message.lines().next().unwrap_or_default();
            let key = format!("{}: {}", f.kind, strip_numbers(head));
            let entry = seen.entry(key).or_insert_with(|| {
                let report = format!(
                    "[{}] {}\n  replay: RLX_FUZZ_CASE={case_seed:#x} cargo test -p rlx-tensor --all-features --test api_fuzz\n  reproduction ({kind:?} case):\n    {}",
                    f.kind,
                    f.message.replace('\n', "\n    "),
                    c.repro(f.step, &f.slots).replace('\n', "\n    ")
                );
                (0, report)
            });
            entry.0 += 1;
        }
        if only.is_some() {
            break;
        }
    }
    eprintln!(
        "api_fuzz shard {shard}: seed {seed:#x}, cases {kinds:?}, calls Ok {oks} / Err {errs}, \
         evaluations matching the oracle {} (both Err {}), {failed_cases} failing cases, {:.1}s",
        agreed[0],
        agreed[1],
        start.elapsed().as_secs_f64()
    );
    for (bug, n) in &known_seen {
        eprintln!("api_fuzz shard {shard}: known open bug seen {n}×: {bug}");
    }
    if !seen.is_empty() {
        let mut out = format!("{} distinct failures (seed {seed:#x}):\n", seen.len());
        for (n, (count, report)) in seen.values().enumerate() {
            if n < SHOWN {
                out.push_str(&format!("\n#{n} ({count}×) {report}\n"));
            }
        }
        if seen.len() > SHOWN {
            out.push_str("\nothers:\n");
            for (k, (count, _)) in seen.iter().skip(SHOWN) {
                out.push_str(&format!("  ({count}×) {k}\n"));
            }
        }
        panic!("{out}");
    }
}

/// A failure's first line with digits blanked, so the same failure on other sizes
/// counts once.
fn strip_numbers(s: &str) -> String {
    let s: String = s
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    s.chars().take(140).collect()
}

#[test]
fn random_try_programs_never_panic_and_match_the_oracle_shard_0() {
    run_shard(0);
}

#[test]
fn random_try_programs_never_panic_and_match_the_oracle_shard_1() {
    run_shard(1);
}

/// The fuzz target's byte decoding: any input (the empty one, a constant one, a
/// counting one) decodes to a finite case, and these fixed inputs pass.
#[test]
fn fuzzer_byte_inputs_decode_to_passing_cases() {
    use program::source::Bytes;
    let counting: Vec<u8> = (0..=255).collect();
    for input in [&[][..], &[0xff; 64][..], &counting[..], b"rlx api fuzz"] {
        let mut src = Bytes::new(input);
        let mut d = Draw::new(&mut src);
        let (kind, c) = run_case(&mut d, &Config::new(false));
        assert!(
            c.steps.len() <= 64,
            "{kind:?} case of {} steps",
            c.steps.len()
        );
        if let Some(f) = c.failures.first() {
            panic!(
                "input {input:?}: [{}] {}\n{}",
                f.kind,
                f.message,
                c.repro(f.step, &f.slots)
            );
        }
    }
}

/// Found by this fuzzer: `masked_fill` and a scalar `where_` branch on a complex
/// tensor panicked building their fill constant (one value where a complex element
/// needs an (re, im) pair). They now build `value + 0i` and agree with the oracle.
#[cfg(feature = "eval")]
#[test]
fn complex_masked_fill_and_scalar_where_branch_build_their_constants() {
    use rlx_tensor::{DType, Tensor};
    let x = Tensor::from_f64_as([1.0, -2.0, 3.0], [3], DType::F32).cast(DType::C64);
    let mask = Tensor::from_f64_as([1.0, 0.0, 1.0], [3], DType::Bool);
    let filled = x.try_masked_fill(&mask, 9.0).unwrap();
    let chosen = mask.try_where(&x, 0.5).unwrap();
    for (t, want) in [
        (filled, [9.0, 0.0, -2.0, 0.0, 9.0, 0.0]),
        (chosen, [1.0, 0.0, 0.5, 0.0, 3.0, 0.0]),
    ] {
        let got = t.try_to_data().unwrap();
        let oracle = rlx_ir::interp::run(&t.to_graph(), &[]).unwrap();
        assert_eq!(got.dtype, DType::C64);
        assert_eq!(got.to_f64_vec(), want);
        assert_eq!(oracle[0].to_f64_vec(), want);
    }
}
