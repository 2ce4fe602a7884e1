#!/usr/bin/env bash
# The memory checker's guard bytes in instructions (callgrind), not time:
# a 4 KiB BF cache-hit allocate + free pair through Runtime with the
# checker on, 64 guard bytes against none, with guards read in place (the
# host vendor's host-accessible memory) and through vendor copies
# (DIPU_HOST_ACCESSIBLE_MEMORY=0) (docs/benchmarks.md, "Guard bytes").
# Each figure is (Ir of 2N pairs - Ir of N pairs) / N of the main thread.
# Usage: [N [SIZE]] (default 10000 pairs of 4096 bytes).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-10000}"
size="${2:-4096}"
target="${CARGO_TARGET_DIR:-target}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
cargo build -q --release -p dipu-runtime --example guarded_pair
bin="$target/release/examples/guarded_pair"

# Instructions of the main thread in one run of the example.
main_ir() {
    rm -f "$tmp"/cg.*
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$tmp/cg.%p" \
        "$bin" "$@" >/dev/null 2>&1
    awk '/^(summary|totals):/ { print $2; exit }' "$tmp"/cg.*-01
}

for access in 1 0; do
    base=""
    for guard in 0 64; do
        a=$(DIPU_HOST_ACCESSIBLE_MEMORY=$access main_ir "$guard" "$n" "$size")
        b=$(DIPU_HOST_ACCESSIBLE_MEMORY=$access main_ir "$guard" $((2 * n)) "$size")
        per=$(((b - a) / n))
        line="DIPU_HOST_ACCESSIBLE_MEMORY=$access guard $guard: $per instructions a pair"
        if [ -z "$base" ]; then
            base=$per
        else
            line="$line ($(awk -v x="$per" -v y="$base" 'BEGIN { printf "%.2f", x / y }')x)"
        fi
        echo "$line"
    done
done
