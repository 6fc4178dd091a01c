#!/usr/bin/env bash
# The CUDA backend's device check, in one go (sized for well under 8 minutes on one GPU):
#   1. builds rlx-cuda's GPU test suites and benchmark, and rlx-tensor with `eval-cuda`;
#   2. NVRTC compiles every kernel kind with the machine's own NVRTC;
#   3. the differential suite on Device::Cuda (random graphs, attention, BLAS routes,
#      dynamic dims, device errors, fp8 scaled matmuls, large kernels) against the oracle;
#   4. benchmark rows W1, W4 (f32/bf16), W5, W6, W7 as JSON lines.
#
#   scripts/gpu-check.sh              build here (needs cargo) and run
#   scripts/gpu-check.sh --prebuild   only build the binaries into .gpu-bin/ (stripped), so
#                                     a GPU machine without cargo can run them: carry
#                                     .gpu-bin and run the script there; it uses them
#                                     (`echo /.gpu-bin/ >> .git/info/exclude` first, so the
#                                     folder is ignored and can be carried)
#
# Environment: RLX_GPU_CASES (random graphs per property, default 64), RLX_CUDA_TF32=1
# (allow TF32 for f32 GEMMs in the benchmark), RLX_GPU_BIN (prebuilt binaries' folder).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN="${RLX_GPU_BIN:-$ROOT/.gpu-bin}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target-gpu-check}"
# `release` on the GPU machine; `dev` builds faster where only the plumbing is checked.
PROFILE="${RLX_GPU_PROFILE:-release}"
PDIR=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
LOG="${TMPDIR:-/tmp}/rlx-gpu-check"
mkdir -p "$LOG"
export CARGO_TERM_COLOR=never
START=$(date +%s)
stage() { echo; echo "== [$(( $(date +%s) - START ))s] $*"; }
FAILED=()

# Copy the test binary named $1 (cargo's JSON messages on stdin) to $BIN/$1.
collect() {
  local name=$1 path
  path=$(grep -o "\"executable\":\"[^\"]*/$name-[^\"]*\"" | tail -1 | sed 's/.*"executable":"\(.*\)"/\1/')
  if [ -n "$path" ]; then
    cp "$path" "$BIN/$name" && strip "$BIN/$name" 2>/dev/null || true
  else
    echo "no binary for $name"; return 1
  fi
}

build() {
  mkdir -p "$BIN"
  stage "building rlx-cuda tests and benchmark (release)"
  cargo test --profile "$PROFILE" -p rlx-cuda --test gpu --test nvrtc_ptx --no-run --message-format=json \
    2>"$LOG/build.err" >"$LOG/build.json" || { tail -40 "$LOG/build.err"; return 1; }
  collect gpu <"$LOG/build.json" && collect nvrtc_ptx <"$LOG/build.json" || return 1
  cargo build --profile "$PROFILE" -p rlx-cuda --example gpu_bench 2>>"$LOG/build.err" \
    || { tail -40 "$LOG/build.err"; return 1; }
  cp "$CARGO_TARGET_DIR/$PDIR/examples/gpu_bench" "$BIN/gpu_bench" && strip "$BIN/gpu_bench" 2>/dev/null
  stage "building rlx-tensor with eval-cuda"
  cargo build --profile "$PROFILE" -p rlx-tensor --features eval-cuda 2>&1 | tail -3
}

if [ "${1:-}" = "--prebuild" ]; then
  build || exit 1
  ls -la "$BIN"
  exit 0
fi

stage "machine"
nvidia-smi -L 2>/dev/null || echo "nvidia-smi not found"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null || true

# Where pip-installed CUDA libraries live (the loader searches nvidia/*/lib under these).
if command -v python3 >/dev/null 2>&1; then
  export RLX_PYTHON_PATH="$(python3 -c 'import site,sys; print(":".join(site.getsitepackages()+sys.path[1:]))' 2>/dev/null || true)"
fi

if command -v cargo >/dev/null 2>&1; then
  build || FAILED+=("build")
elif [ -x "$BIN/gpu" ]; then
  echo "no cargo here: using the prebuilt binaries in $BIN"
else
  echo "no cargo and no prebuilt binaries in $BIN: run 'scripts/gpu-check.sh --prebuild' where cargo is, and carry .gpu-bin"
  exit 1
fi

stage "NVRTC: every kernel kind compiles for sm_80 and sm_90 with this machine's NVRTC"
"$BIN/nvrtc_ptx" --test-threads=8 2>&1 | grep -E "^test |test result|skipping|panicked|error" || FAILED+=("nvrtc")

stage "differential suite on Device::Cuda (RLX_GPU_CASES=${RLX_GPU_CASES:-64})"
if "$BIN/gpu" --test-threads=8 --nocapture 2>&1 | tee "$LOG/gpu-tests.log" | grep -E "^test |test result|skipping|panicked|CUDA unavailable"; then
  grep -q "test result: ok" "$LOG/gpu-tests.log" || FAILED+=("gpu tests")
else
  FAILED+=("gpu tests")
fi
grep -A30 "panicked" "$LOG/gpu-tests.log" | head -80
if nvidia-smi -L >/dev/null 2>&1 && grep -q "skipping: no usable CUDA device" "$LOG/gpu-tests.log"; then
  echo "a GPU is present but the backend did not find it (see the reason above)"
  FAILED+=("device not found")
fi

stage "benchmark rows (median_s: full call with copies; kernel_s: kernels alone)"
timeout 240 "$BIN/gpu_bench" || FAILED+=("bench")

stage "done"
if [ ${#FAILED[@]} -eq 0 ]; then
  echo "gpu-check: all stages passed in $(( $(date +%s) - START ))s"
else
  echo "gpu-check: FAILED stages: ${FAILED[*]} ($(( $(date +%s) - START ))s)"
  exit 1
fi
