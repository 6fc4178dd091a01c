#!/usr/bin/env bash
# AddressSanitizer run of the unsafe-heavy code: the CPU executor's tests (`-p rlx-cpu`)
# and rlx-tensor's tests on the CPU runtime (features eval, autodiff, optim, dsl), on the
# nightly toolchain, twice: with the JIT on (the default; it runs where the CPU has
# AVX-512F) and with `RLX_JIT=0` (every tile through the interpreter and intrinsics).
# Exits non-zero when a test fails or ASan reports anything: ASan (and LeakSanitizer at
# exit) abort the test binary with a non-zero status, which cargo reports as a failure.
#
#   scripts/asan.sh            both JIT settings
#   scripts/asan.sh jit        only the JIT-on run
#   scripts/asan.sh nojit      only the RLX_JIT=0 run
#
# Environment: CARGO_TARGET_DIR (default target-asan: sanitized artefacts cannot share
# the normal target dir's), RLX_ASAN_JOBS (cargo -j), ASAN_OPTIONS (see below).
#
# Both crates build in one cargo invocation, so their dependencies are compiled once with
# one feature set. Left out: doctests (they would need a sanitized std) and rlx-tensor's
# `dsl_ui` (trybuild compares rustc diagnostics with stable's snapshots; nightly words them
# differently, and a compile-fail test runs no unsafe code).
#
# Leak detection stays on: the tested crates leak nothing on purpose (no Box::leak or
# mem::forget; JIT code pages are unmapped on drop).
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(pwd)/target-asan}"
export CARGO_TERM_COLOR=never
export CARGO_INCREMENTAL=0
export RUSTFLAGS="-Zsanitizer=address"
export RUSTDOCFLAGS="-Zsanitizer=address"
# Stop at the first report; also catch use of a returned stack frame's memory (pointers
# into local arrays are common in the SIMD code). allocator_may_return_null: a request
# beyond ASan's limit (hostile sizes, e.g. the API fuzzer's) returns null as the system
# allocator does, so the crates' try_reserve paths report an error; ASan's default is to
# abort, which would hide those paths rather than find a memory error.
export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_stack_use_after_return=1:allocator_may_return_null=1}"
TARGET=x86_64-unknown-linux-gnu
JOBS=()
[ -n "${RLX_ASAN_JOBS:-}" ] && JOBS=(-j "$RLX_ASAN_JOBS")

START=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - START ))s] $*"; }

# Every integration test target of both crates (tests/<name>.rs, tests/<name>/main.rs),
# less rlx-tensor's dsl_ui.
TESTS=()
for f in crates/rlx-cpu/tests/*.rs crates/rlx-cpu/tests/*/main.rs \
  crates/rlx-tensor/tests/*.rs crates/rlx-tensor/tests/*/main.rs; do
  [ -e "$f" ] || continue
  case "$f" in
    */main.rs) name=$(basename "$(dirname "$f")") ;;
    *) name=$(basename "$f" .rs) ;;
  esac
  [ "$name" = dsl_ui ] && continue
  TESTS+=(--test "$name")
done

run() { # $1: label, $2: the JIT setting (1 or 0)
  local label=$1 jit=$2
  local tests=("${TESTS[@]}")
  # rlx-cpu's `jit` suite asserts that kernels were compiled to machine code (on an
  # AVX-512 CPU): it only means something with the JIT on.
  if [ "$jit" = 0 ]; then
    tests=()
    for ((i = 0; i < ${#TESTS[@]}; i += 2)); do
      [ "${TESTS[i + 1]}" = jit ] || tests+=(--test "${TESTS[i + 1]}")
    done
  fi
  stamp "rlx-cpu and rlx-tensor tests under ASan ($label)"
  # --no-fail-fast: every test binary runs, so one run shows every report.
  RLX_JIT=$jit cargo +nightly test "${JOBS[@]}" --no-fail-fast --target "$TARGET" \
    -p rlx-cpu -p rlx-tensor \
    --features rlx-tensor/eval,rlx-tensor/autodiff,rlx-tensor/optim,rlx-tensor/dsl \
    --lib "${tests[@]}"
}

STATUS=0
MODE="${1:-both}"
if [ "$MODE" = both ] || [ "$MODE" = jit ]; then
  run "JIT on" 1 || STATUS=1
fi
if [ "$MODE" = both ] || [ "$MODE" = nojit ]; then
  run "RLX_JIT=0" 0 || STATUS=1
fi
stamp "done, status $STATUS: $(( $(date +%s) - START ))s in all"
exit "$STATUS"
