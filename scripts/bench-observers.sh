#!/usr/bin/env bash
# The cost of the observers' flag when every observer is off, against a
# build with it compiled out (docs/benchmarks.md, "One observer flag"):
# dipu_malloc + dipu_free from C (two builds of libdipu_runtime.so in one
# process), then the allocator's own pairs through Runtime (one build).
# The same in instructions (deterministic): scripts/bench-observers-callgrind.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cargo build --release -p dipu-ffi
cp "$target/release/libdipu_runtime.so" "$tmp/observed.so"
cargo build --release -p dipu-ffi --features dipu-runtime/observers-compiled-out
cp "$target/release/libdipu_runtime.so" "$tmp/compiled_out.so"
cc -O2 -std=c11 -Wall -Wextra -Werror -Iinclude scripts/observers_pair.c -ldl -o "$tmp/observers_pair"
"$tmp/observers_pair" "$tmp/observed.so" "$tmp/compiled_out.so" "$@"
cargo bench -p dipu-runtime --bench observers
