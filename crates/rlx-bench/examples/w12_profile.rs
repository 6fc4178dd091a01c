//! W12 broken down: where the time of a Llama prefill and decode goes.
//!
//! `cargo run --release -p rlx-bench --example w12_profile -- --model DIR [--dtype bf16]
//! [--prompt-len 128] [--gen 32] [--runs 3] [--top 25]`
//!
//! Loads the checkpoint in `DIR` (W12 writes one with `--w12-checkpoint-dir DIR`), runs
//! `--runs` greedy generations with `RLX_PROFILE=1` (set here when unset; the first run is
//! a warm-up whose kernels are timed too), and prints per program (prefill, decode) the
//! time per kernel kind and the slowest `--top` kernels with the ops fused into each.

use rlx_models::{CausalLm, GenerateOptions};
use rlx_tensor::{DType, Profile};
use std::collections::BTreeMap;
use std::ops::ControlFlow;

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn count(args: &[String], name: &str, default: usize) -> usize {
    arg(args, name).map_or(default, |v| v.parse().expect("a count"))
}

fn report(what: &str, p: Option<Profile>, top: usize) {
    let Some(p) = p else {
        println!("{what}: no profile (was RLX_PROFILE=1 set before the first run?)");
        return;
    };
    let runs = p.runs.max(1) as f64;
    println!(
        "\n{what}: {} run(s), {:.2} ms of kernels per run",
        p.runs,
        p.total_s() / runs * 1e3
    );
    let mut kinds: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    for k in &p.kernels {
        let e = kinds.entry(k.kind.as_str()).or_default();
        e.0 += 1;
        e.1 += k.total_s / runs;
    }
    let mut kinds: Vec<_> = kinds.into_iter().collect();
    kinds.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
    for (kind, (n, s)) in kinds {
        println!("  {kind:<14} {n:>4} kernels {:>9.3} ms/run", s * 1e3);
    }
    println!("  slowest kernels (ms/run, fused ops):");
    for k in p.kernels.iter().take(top) {
        let ops = k.ops.join(" ");
        let ops = if ops.len() > 110 { &ops[..110] } else { &ops };
        println!(
            "  #{:<4} {:<12} {:>8.3}  {ops}",
            k.index,
            k.kind,
            k.total_s / runs * 1e3
        );
    }
}

fn main() {
    // SAFETY: set before any thread starts; the CPU backend reads it once per compile.
    if std::env::var_os("RLX_PROFILE").is_none() {
        unsafe { std::env::set_var("RLX_PROFILE", "1") };
    }
    let args: Vec<String> = std::env::args().collect();
    let dir = arg(&args, "--model").expect("--model DIR (a W12 checkpoint directory)");
    let dtype = match arg(&args, "--dtype").unwrap_or("f32") {
        "bf16" => DType::BF16,
        "f32" => DType::F32,
        other => panic!("--dtype {other}: expected f32 or bf16"),
    };
    let (prompt_len, new_tokens) = (count(&args, "--prompt-len", 128), count(&args, "--gen", 32));
    let (runs, top) = (count(&args, "--runs", 3), count(&args, "--top", 25));
    let mut lm = CausalLm::load(dir, Some(dtype)).expect("load the checkpoint");
    let vocab = lm.config().vocab_size;
    let ids: Vec<u32> = (0..prompt_len)
        .map(|i| ((i * 7919 + 13) % vocab) as u32)
        .collect();
    let opts = GenerateOptions {
        eos_token_ids: Some(Vec::new()),
        ..GenerateOptions::greedy(new_tokens)
    };
    for run in 0..runs {
        let g = lm
            .generate(&ids, &opts, |_| ControlFlow::Continue(()))
            .expect("generate");
        println!(
            "run {run}: prefill {:.1} tok/s, decode {:.1} tok/s",
            g.prefill_tokens_per_sec(),
            g.decode_tokens_per_sec()
        );
    }
    let (prefill, decode) = lm.profiles();
    report("prefill", prefill, top);
    report("decode", decode, top);
    if args.iter().any(|a| a == "--explain") {
        println!("\n{}", lm.explain().0);
    }
}
