//! Compile-time diagnostics of `rlx!` (API.md §7.4 and the other listed ones): each
//! `tests/ui/fail_*.rs` must fail with exactly the message and span in its `.stderr`
//! snapshot; `tests/ui/pass_*.rs` must compile without warnings.

#[test]
fn rlx_diagnostics() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail_*.rs");
    t.pass("tests/ui/pass_*.rs");
}
