#!/usr/bin/env bash
# All-reduce bus bandwidth of dipu's host vendor (`dipu bench comm`) against
# torch.distributed's gloo (scripts/bench_comm_gloo.py), one after the other
# on this machine, same ranks, sizes and method; then the dipu/gloo ratio of
# bus bandwidth per size. Builds `dipu` in release and installs PyTorch into
# .venv-torch (scripts/torch-env.sh, idempotent) first.
#
# Usage: scripts/bench-comm.sh [--ranks N] [--sizes MIB,...] [--iterations N]
# (passed to both benchmarks; defaults: 2 ranks, 1,16,64 MiB, 1 GiB worth of
# all-reduces per round). CARGO_TARGET_DIR is honoured.
#
# Target (the issue): dipu >= 4x gloo's bus bandwidth at 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/bench-setup.sh
source scripts/bench-setup.sh "$@"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo
echo "== dipu: $dipu bench comm $*"
"$dipu" bench comm "$@" | tee "$tmp/dipu"
echo
echo "== gloo: $python scripts/bench_comm_gloo.py $*"
"$python" -W ignore scripts/bench_comm_gloo.py "$@" | tee "$tmp/gloo"

# Rows look like `   64 MiB   16   19.123 ms   3.509   3.509   0.38`:
# field 1 the size in MiB, field 7 the bus bandwidth.
rows() { awk '$2 == "MiB" && NF == 8 { print $1, $7 }' "$1"; }
echo
echo "== dipu / gloo, bus bandwidth"
join <(rows "$tmp/dipu" | sort -k1,1) <(rows "$tmp/gloo" | sort -k1,1) |
  sort -n -k1,1 |
  awk 'BEGIN { printf "%8s %12s %12s %8s\n", "size", "dipu GB/s", "gloo GB/s", "ratio" }
       { r = ($3 > 0) ? $2 / $3 : 0
         printf "%8s %12.3f %12.3f %7.2fx\n", $1 " MiB", $2, $3, r
         if ($1 == 64) { target = 1; met = (r >= 4) } }
       END { if (target) print "target (>= 4x at 64 MiB): " (met ? "met" : "not met") }'
