#!/usr/bin/env bash
# Peer benchmarks for side-by-side comparison with `cargo run --release -p rlx-bench`.
#
# Sets up (once) a Python venv with the peers from PyPI and the C limits probe, then prints
# JSON lines: the machine's limits (STREAM triad, clock, FMA peak) and one record per
# (peer, workload) from shared/bench/peers.py. See crates/rlx-bench/README.md.
#
# Usage: scripts/peers.sh [PEER...] [-- peers.py options]
#   PEER: numpy (default), torch, torch_compile, jax, tinygrad
#   e.g.  scripts/peers.sh numpy jax -- --workloads W1,W4 --repeats 7
# Environment: PEERS_VENV (default /tmp/peers), RLX_SHARED (default: ../shared beside the repo),
#   LIMITS_BIN (default /tmp/limits).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
shared=${RLX_SHARED:-$repo/../shared}
venv=${PEERS_VENV:-/tmp/peers}
limits=${LIMITS_BIN:-/tmp/limits}

peers=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do peers+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#peers[@]} -eq 0 ] && peers=(numpy)

if [ ! -f "$shared/bench/peers.py" ]; then
  echo "peers.sh: $shared/bench/peers.py not found; set RLX_SHARED to the shared/ folder" >&2
  exit 2
fi

# --- venv with the requested peers (PyPI only) -----------------------------------------------
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
need=(numpy scipy threadpoolctl)
for p in "${peers[@]}"; do
  case "$p" in
    numpy) ;;
    torch | torch_compile) need+=(torch) ;;
    jax) need+=("jax[cpu]") ;;
    tinygrad) need+=(tinygrad) ;;
    *) echo "peers.sh: unknown peer '$p' (numpy, torch, torch_compile, jax, tinygrad)" >&2; exit 2 ;;
  esac
done
missing=()
for pkg in "${need[@]}"; do
  mod=${pkg%%\[*}
  "$venv/bin/python" -c "import $mod" 2>/dev/null || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "peers.sh: installing ${missing[*]} into $venv" >&2
  "$venv/bin/pip" install -q "${missing[@]}" >&2
fi

# --- machine limits ----------------------------------------------------------------------------
if [ ! -x "$limits" ] && command -v gcc >/dev/null; then
  gcc -O3 -march=native -fopenmp "$shared/bench/limits.c" -o "$limits"
fi
if [ -x "$limits" ]; then
  "$limits" clock
  OMP_NUM_THREADS=1 "$limits"
  OMP_NUM_THREADS="$(nproc)" "$limits"
else
  echo "peers.sh: no gcc: limits probe skipped" >&2
fi

# --- peers -------------------------------------------------------------------------------------
# The OpenBLAS overrides some setups export would pin a slower kernel; peers.py expects them unset.
for p in "${peers[@]}"; do
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$venv/bin/python" "$shared/bench/peers.py" --peer "$p" "$@"
done
