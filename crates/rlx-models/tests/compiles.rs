//! Generation compiles its two graphs once, when the model loads (each is a `Model`
//! compiled in `CausalLm::load`); no step compiles a graph again, through the cache or
//! otherwise. What the CPU backend does per new binding of the dynamic dims is checked
//! separately (see the ignored test).

use rlx_models::{CausalLm, GenerateOptions};
use std::ops::ControlFlow;
use std::path::PathBuf;

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

/// Fails today: rlx-cpu keeps a kernel's machine code in the plan bound for one binding
/// of the dynamic dims, and a decode step binds a new cache length every token, so its
/// elementwise tile programs are compiled to machine code again each token (5 per token
/// for this model). Run with `--ignored` to check a fix.
#[test]
#[ignore = "rlx-cpu JIT-compiles elementwise kernels again for every new cache length"]
fn decoding_compiles_no_machine_code_per_token() {
    let mut lm = CausalLm::load(fixture("llama_gqa"), None).unwrap();
    generate(&mut lm, 4);
    let before = rlx_cpu::jit_compiled_count();
    generate(&mut lm, 24);
    let after = rlx_cpu::jit_compiled_count();
    assert_eq!(
        after,
        before,
        "{} machine-code compiles in 20 new decode steps",
        after - before
    );
}
