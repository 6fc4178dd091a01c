//! libFuzzer target `api`: the fuzzer's bytes drive the same program generator as the
//! `api_fuzz` test (crates/rlx-tensor/tests/api_fuzz/program), so every input decodes
//! to a case of public `try_` calls; any failure the case records (a panic out of a
//! `try_` call, a result the oracle disagrees with, …) is reported as a crash with
//! its reproduction.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The seeded source is the CI test's; this target reads bytes.
#[allow(dead_code)]
#[path = "../../crates/rlx-tensor/tests/api_fuzz/program/mod.rs"]
mod program;

fuzz_target!(|data: &[u8]| {
    let mut src = program::source::Bytes::new(data);
    let mut d = program::source::Draw::new(&mut src);
    let known = std::env::var("RLX_FUZZ_KNOWN").is_ok_and(|v| v == "1");
    let (kind, c) = program::run_case(&mut d, &program::Config::new(known));
    if let Some(f) = c.failures.first() {
        panic!(
            "[{}] {}\nreproduction ({kind:?} case):\n{}",
            f.kind,
            f.message,
            c.repro(f.step, &f.slots)
        );
    }
});
