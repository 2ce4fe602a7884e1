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

# The Python environments download ~2.8 GB: they install in the background
# while Rust compiles, and the tests wait for them.
step "in the background: NVIDIA wheels for the CUDA vendor's tests (.venv) and PyTorch for the TCPStore interop tests (.venv-torch)"
pylogs="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$pylogs"' EXIT
./scripts/cuda-env.sh >"$pylogs/cuda-env.log" 2>&1 &
cuda_env=$!
./scripts/torch-env.sh >"$pylogs/torch-env.log" 2>&1 &
torch_env=$!

# Waits for background job $1 and shows its log $2; a failed job fails the run.
finish() {
  local status=0
  wait "$1" || status=$?
  cat "$2"
  if [ "$status" != 0 ]; then
    echo "$(basename "$2" .log) failed (exit $status)" >&2
    exit "$status"
  fi
}

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo build (the vendor plugins' .so files included)"
cargo build --workspace --locked

step "waiting for the Python environments"
finish "$cuda_env" "$pylogs/cuda-env.log"
finish "$torch_env" "$pylogs/torch-env.log"

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
  cargo test --profile loom --locked --target-dir target/loom -p dipu-stream -p dipu-generator -p dipu-allocator -p dipu-comm --lib loom

step "dipu selftest: built-in host vendor, then the host vendor as a plugin"
./target/debug/dipu selftest
./target/debug/dipu selftest --vendor ./target/debug/libdipu_vendor_host.so

step "dipu selftest: the CUDA vendor on the .venv wheels (without a GPU: the device-free check)"
DIPU_CUDA_HOME="$PWD/.venv" ./target/debug/dipu selftest --vendor cuda | tail -n 1

step "torch_dipu: build the adapter, then torch.distributed's dicl backend on 2 ranks (pytest)"
# Every collective over file:// (env:// and tcp:// too), a HashStore, DDP
# under torchrun against one CPU process, and the faults. ~1-3 min.
DIPU_NO_BUILD=1 MAX_JOBS=2 ./adapters/torch_dipu/build.sh >/dev/null
DIPU_HOST_DEVICES=2 PYTHONPATH=adapters/torch_dipu ./.venv-torch/bin/python -m pytest -q -p no:cacheprovider \
  adapters/torch_dipu/tests/test_distributed.py

step "all checks passed"
