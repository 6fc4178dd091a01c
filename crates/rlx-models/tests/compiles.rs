//! Generation compiles its two graphs once, when the model loads (each is a `Model`
//! compiled in `CausalLm::load`); no step compiles a graph again, through the cache or
//! otherwise. Nor does the CPU backend compile machine code again when a decode step
//! binds a new cache length: its compiled programs share their JIT code across bindings
//! of the dynamic dims.

use rlx_models::{CausalLm, GenerateOptions};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Mutex;

/// The counters read here are process-wide: the tests run one at a time, so that one
/// test's model loading does not count as another's per-token compiles.
static ONE: Mutex<()> = Mutex::new(());

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn generate(lm: &mut CausalLm, n: usize) -> Vec<u32> {
    let opts = GenerateOptions {
        eos_token_ids: Some(Vec::new()),
        ..GenerateOptions::greedy(n)
    };
    lm.generate(&[0, 53, 259, 222, 82], &opts, |_| ControlFlow::Continue(()))
        .unwrap()
        .tokens
}

#[test]
fn generating_compiles_no_graph_per_token() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    rlx_tensor::clear_cache();
    let mut lm = CausalLm::load(fixture("llama_gqa"), None).unwrap();
    let before = rlx_tensor::cache_compile_count();
    let a = generate(&mut lm, 24);
    assert_eq!(a.len(), 24);
    assert_eq!(
        rlx_tensor::cache_compile_count(),
        before,
        "a generation step compiled a graph: {:?}",
        rlx_tensor::cache_last_miss()
    );
    // The same model generates again, identically, with nothing compiled.
    assert_eq!(generate(&mut lm, 24), a);
    assert_eq!(rlx_tensor::cache_compile_count(), before);
}

/// A decode step binds a new cache length every token; the elementwise tile programs of
/// the decode graph were compiled to machine code by the first steps and are reused for
/// every later length (before the fix: 5 compiles per token for this model). Without
/// AVX-512 (or with `RLX_JIT=0`) nothing is compiled and the count stays 0.
#[test]
fn decoding_compiles_no_machine_code_per_token() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let start = rlx_cpu::jit_compiled_count();
    let mut lm = CausalLm::load(fixture("llama_gqa"), None).unwrap();
    generate(&mut lm, 4);
    let before = rlx_cpu::jit_compiled_count();
    let jit = std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("fma")
        && std::env::var_os("RLX_JIT").is_none_or(|v| v != "0");
    if jit {
        // The count is live: the warm-up compiled the model's kernels.
        assert!(before > start, "the first steps compiled machine code");
    }
    generate(&mut lm, 24);
    let after = rlx_cpu::jit_compiled_count();
    assert_eq!(
        after,
        before,
        "{} machine-code compiles in 20 new decode steps",
        after - before
    );
}

/// The two compiled programs' reports: prefill first (the prompt's causal attention),
/// decode second (attention over the cache, the `slot` write); no timings unless the
/// process runs with `RLX_PROFILE=1`.
#[test]
fn explain_and_profiles_report_the_prefill_and_decode_programs() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let mut lm = CausalLm::load(fixture("llama_gqa"), None).unwrap();
    generate(&mut lm, 3);
    let (prefill, decode) = lm.explain();
    assert!(prefill.contains("llama_prefill"), "{prefill}");
    assert!(decode.contains("llama_decode"), "{decode}");
    for text in [&prefill, &decode] {
        assert!(
            text.contains("attention") && text.contains("rms_norm"),
            "{text}"
        );
    }
    let (p, d) = lm.profiles();
    if std::env::var_os("RLX_PROFILE").is_none() {
        assert!(p.is_none() && d.is_none(), "timed without RLX_PROFILE");
    } else {
        assert_eq!(p.expect("a prefill profile").runs, 1);
        assert_eq!(d.expect("a decode profile").runs, 2);
    }
}
