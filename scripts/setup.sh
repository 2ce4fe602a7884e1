#!/usr/bin/env bash
# Checks (and where possible installs) what the build and tests need:
# the Rust toolchain with rustfmt and clippy, and a C/C++ compiler for the
# C vendor and header tests, and cmake, valgrind and pkg-config for the C
# API tests, and Debian's chromium (headless) for the `dipu memviz` page tests.
set -euo pipefail

need() { command -v "$1" >/dev/null 2>&1; }

if ! need cargo; then
  echo "setup: cargo is missing: install Rust from https://rustup.rs" >&2
  exit 1
fi
if need rustup; then
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
if ! need cc || ! need c++; then
  if need apt-get && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential
  else
    echo "setup: a C and C++ compiler (cc, c++) are needed: install build-essential" >&2
    exit 1
  fi
fi
for tool in cmake valgrind pkg-config; do
  if ! need "$tool"; then
    if need apt-get && [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool"
    else
      echo "setup: $tool is needed by the C API tests (cargo test -p dipu-ffi): apt-get install $tool" >&2
      exit 1
    fi
  fi
done
if ! need chromium; then
  if need apt-get && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
  else
    echo "setup: chromium is needed by the dipu memviz page tests (cargo test -p dipu-cli --test memviz): apt-get install chromium" >&2
    exit 1
  fi
fi
echo "setup: $(cargo --version), $(cc --version | head -n1)"
