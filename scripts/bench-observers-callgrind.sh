#!/usr/bin/env bash
# The observers' flag with every observer off against a build with it
# compiled out, in instructions (callgrind), not time: deterministic on a
# loaded machine (docs/benchmarks.md, "One observer flag").
#   - dipu_malloc + dipu_free of 4 KiB from C (scripts/alloc_pair.c, cache
#     hits) against libdipu_runtime.so built twice (as bench-observers.sh);
#   - the allocator's own pairs through Runtime (runtime/benches/observers.rs
#     --count): the hit path and the full pair, each against its variant
#     without the observers' test.
# Each figure is (Ir of 2N pairs - Ir of N pairs) / N: the per-pair
# instructions, setup and teardown cancelled. Usage: [N] (default 20000).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-20000}"
target="${CARGO_TARGET_DIR:-target}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }

# Instructions of the main thread in one run of "$@" under callgrind (the
# runtime's background threads are left out: their work follows the clock).
ir() {
  rm -f "$tmp"/cg.out*
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$tmp/cg.out" "$@" \
    >/dev/null 2>"$tmp/cg.err" || { cat "$tmp/cg.err" >&2; exit 1; }
  awk '/^(summary|totals):/ { print $2; exit }' "$tmp/cg.out-01"
}

# Per-pair instructions of "$@" N, from runs of N and 2N pairs.
per_pair() {
  local a b
  a="$(ir "$@" "$n")"
  b="$(ir "$@" "$((2 * n))")"
  echo "$(( (b - a) / n ))"
}

# "name: observers off X Ir, compiled out Y Ir per pair; ratio X/Y".
row() {
  awk -v name="$1" -v x="$2" -v y="$3" \
    'BEGIN { printf "%s: observers off %d Ir, compiled out %d Ir per pair; ratio %.3f\n", name, x, y, x / y }'
}

mkdir -p "$tmp/observed" "$tmp/compiled_out"
cargo build --release -p dipu-ffi
cp "$target/release/libdipu_runtime.so" "$tmp/observed/"
cargo build --release -p dipu-ffi --features dipu-runtime/observers-compiled-out
cp "$target/release/libdipu_runtime.so" "$tmp/compiled_out/"
cc -O2 -std=c11 -Wall -Wextra -Werror -Iinclude scripts/alloc_pair.c \
  -L"$tmp/observed" -ldipu_runtime -o "$tmp/alloc_pair"
x="$(LD_LIBRARY_PATH="$tmp/observed" per_pair "$tmp/alloc_pair")"
y="$(LD_LIBRARY_PATH="$tmp/compiled_out" per_pair "$tmp/alloc_pair")"
row "dipu_malloc+dipu_free 4096 B from C" "$x" "$y"

bench="$(cargo bench -p dipu-runtime --bench observers --no-run --message-format=json 2>/dev/null |
  awk -F'"executable":"' 'NF > 1 { split($2, a, "\""); if (a[1] != "") e = a[1] } END { print e }')"
[ -x "$bench" ] || { echo "no observers bench executable" >&2; exit 1; }
x="$(per_pair "$bench" --count hit)"
y="$(per_pair "$bench" --count hit-compiled-out)"
row "Runtime hit path (allocate_cached + free_cached)" "$x" "$y"
x="$(per_pair "$bench" --count pair)"
y="$(per_pair "$bench" --count pair-compiled-out)"
row "Runtime full pair (allocate_raw + free_raw)" "$x" "$y"
