#!/usr/bin/env bash
# The picture of docs/observability.md: the resnet18 allocation trace
# (allocator/traces/resnet18.trace, the one in ../shared/traces/) replayed
# with the memory history on (`dipu memviz --replay`, BF, short stacks),
# its page drawn by headless Chromium (scripts/setup.sh installs Debian's
# chromium) into docs/images/resnet18-memory.png.
#
# Usage: scripts/memviz-picture.sh [OUT.png]. CARGO_TARGET_DIR is honoured.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/images/resnet18-memory.png}
case $out in /*) ;; *) out=$PWD/$out ;; esac
command -v chromium >/dev/null || { echo "memviz-picture: chromium is missing: run scripts/setup.sh" >&2; exit 1; }
cargo build --locked --release -p dipu-cli >&2
dipu="${CARGO_TARGET_DIR:-target}/release/dipu"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$dipu" memviz --replay allocator/traces/resnet18.trace --algo BF --stacks \
  -o "$work/resnet18.html" --pickle "$work/resnet18.pickle"
chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run \
  --user-data-dir="$work/profile" --window-size=1240,1180 \
  --screenshot="$out" "file://$work/resnet18.html" 2>/dev/null
echo "memviz-picture: $out"
