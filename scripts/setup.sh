#!/usr/bin/env bash
# Checks (and where possible installs) what the build and tests need:
# the Rust toolchain with rustfmt and clippy, and a C/C++ compiler for the
# C vendor and header tests, and cmake, valgrind and pkg-config for the C
# API tests, Debian's chromium (headless) for the `dipu memviz` page tests,
# and PoCL with the OpenCL ICD loader and headers for the OpenCL vendor's
# tests, all of them through one apt-get run.
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
# `--build` checks only what compiling needs (Rust, a C/C++ compiler);
# `--tests` only the tools the tests use; no argument, both. What is missing
# is installed with one apt-get update and one install (each update reads
# every package list again: seconds apiece).
part=${1:-all}
missing=()
if [ "$part" != --tests ]; then
  need cc && need c++ || missing+=(build-essential)
fi
if [ "$part" != --build ]; then
  # cmake, valgrind and pkg-config: the C API tests (cargo test -p dipu-ffi);
  # chromium: the dipu memviz page tests (cargo test -p dipu-cli --test memviz).
  for tool in cmake valgrind pkg-config chromium; do
    need "$tool" || missing+=("$tool")
  done
  # The OpenCL vendor's tests (cargo test -p dipu-vendor-opencl, dipu
  # selftest --vendor opencl): PoCL (an OpenCL driver on the CPU), the ICD
  # loader and its development link, the Khronos headers of the binding
  # check, and clinfo to diagnose. The plugin itself builds without them.
  [ -f /etc/OpenCL/vendors/pocl.icd ] || missing+=(pocl-opencl-icd)
  libs=$(ldconfig -p 2>/dev/null || true)
  grep -q 'libOpenCL\.so\.1 ' <<<"$libs" || missing+=(ocl-icd-libopencl1)
  grep -q 'libOpenCL\.so ' <<<"$libs" || missing+=(ocl-icd-opencl-dev)
  [ -f /usr/include/CL/cl.h ] || missing+=(opencl-headers)
  need clinfo || missing+=(clinfo)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if need apt-get && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  else
    echo "setup: missing ${missing[*]}: install them (Debian: apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi
echo "setup: $(cargo --version), $(cc --version | head -n1)"
