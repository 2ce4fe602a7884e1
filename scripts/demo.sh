#!/usr/bin/env bash
# The main job on the embedded host vendor: build dipu, describe the
# vendor and its devices, and run the conformance suite against it, built
# in and loaded as a plugin.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
cargo build --release --locked -p dipu-cli -p dipu-vendor-host
./target/release/dipu info
./target/release/dipu selftest
./target/release/dipu selftest --vendor ./target/release/libdipu_vendor_host.so
