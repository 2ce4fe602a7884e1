#!/usr/bin/env bash
# The whole test suite: format, lints, unit/integration/doc tests (which
# also build and load the C vendor and compile the C headers), and the CLI
# end to end. This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's heading shows the time since the start (m:ss), so a slow CI
# run tells where its minutes went.
step() { printf '\n==> [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

step "toolchain and system tools"
./scripts/setup.sh

step "NVIDIA wheels for the CUDA vendor's tests (.venv; a no-op when present)"
./scripts/cuda-env.sh

step "PyTorch from PyPI for the TCPStore interop tests (.venv-torch; a no-op when present)"
./scripts/torch-env.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo build (the vendor plugins' .so files included)"
cargo build --workspace --locked

step "cargo test (unit, integration, C vendor and header, doc tests)"
cargo test --workspace --locked

step "C API: scripts/install.sh into a scratch prefix, build and run the example with pkg-config"
tmp="$(mktemp -d)"
DIPU_PROFILE=dev DIPU_NO_BUILD=1 ./scripts/install.sh "$tmp"
cc -std=c11 -Wall -Wextra -Werror ffi/tests/c/example.c \
  $(PKG_CONFIG_PATH="$tmp/lib/pkgconfig" pkg-config --cflags --libs dipu_runtime) \
  -Wl,-rpath,"$tmp/lib" -o "$tmp/example"
"$tmp/example"
rm -rf "$tmp"

step "loom models (separate target dir, preemption bound 2)"
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 \
  cargo test --release --locked --target-dir target/loom -p dipu-stream -p dipu-generator -p dipu-allocator -p dipu-comm --lib loom

step "dipu selftest: built-in host vendor, then the host vendor as a plugin"
./target/debug/dipu selftest
./target/debug/dipu selftest --vendor ./target/debug/libdipu_vendor_host.so

step "dipu selftest: the CUDA vendor on the .venv wheels (without a GPU: the device-free check)"
DIPU_CUDA_HOME="$PWD/.venv" ./target/debug/dipu selftest --vendor cuda | tail -n 1

step "all checks passed"
