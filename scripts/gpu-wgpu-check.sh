#!/usr/bin/env bash
# Runs the wgpu backend's tests on the best wgpu adapter of this machine — a real GPU
# when one is present (Vulkan, Metal or DX12), else Mesa's software Vulkan driver —
# with a larger random-graph sample than CI, then the rlx-tensor GPU tests and the
# wgpu-vs-CPU benchmark table. Prints which adapter ran.
#
#   scripts/gpu-wgpu-check.sh            # 3000 random graphs
#   RLX_WGPU_CASES=600 scripts/gpu-wgpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/xdg-runtime-$(id -u)}"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
export RLX_WGPU_CASES="${RLX_WGPU_CASES:-3000}"

echo "== wgpu differential suite and per-op tests ($RLX_WGPU_CASES random graphs)"
cargo test --release -p rlx-wgpu

echo "== rlx-tensor end to end on Device::Gpu"
cargo test --release -p rlx-tensor --features eval-gpu,optim --test gpu

echo "== benchmark (end-to-end run time, wgpu vs the CPU backend)"
cargo run --release -p rlx-wgpu --example bench
