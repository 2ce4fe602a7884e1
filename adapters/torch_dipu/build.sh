#!/usr/bin/env bash
# Builds the torch_dipu adapter in place: libdipu_runtime.so from the
# workspace (cargo, dev profile unless DIPU_BUILD_PROFILE says otherwise) copied
# into the package, then the C++ extension torch_dipu._C against the torch
# of .venv-torch (scripts/torch-env.sh installs it), with ninja and
# MAX_JOBS=2 (override with MAX_JOBS). Prints the python to run it with;
# put adapters/torch_dipu on PYTHONPATH (or cd there) to `import torch_dipu`.
#
# Environment: DIPU_TORCH_PYTHON (default <repo>/.venv-torch/bin/python),
# DIPU_BUILD_PROFILE (dev or release), DIPU_NO_BUILD=1 to skip cargo.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python=${DIPU_TORCH_PYTHON:-$repo/.venv-torch/bin/python}
profile=${DIPU_BUILD_PROFILE:-dev}
dir=debug
[ "$profile" = dev ] || dir=$profile
if [ ! -x "$python" ]; then
  echo "torch_dipu: $python is missing: run scripts/torch-env.sh first" >&2
  exit 1
fi
if [ "${DIPU_NO_BUILD:-0}" != 1 ]; then
  (cd "$repo" && cargo build --locked --profile "$profile" -p dipu-ffi -p dipu-diopi-host >&2)
fi
lib="$repo/target/$dir/libdipu_runtime.so"
[ -f "$lib" ] || { echo "torch_dipu: $lib is missing" >&2; exit 1; }
# Copy only when it changed, so ninja's relink is the only work left.
cmp -s "$lib" "$here/torch_dipu/libdipu_runtime.so" || cp "$lib" "$here/torch_dipu/libdipu_runtime.so"
# The host vendor's DIOPI kernel library goes beside the runtime, where
# dipu_diopi_open(NULL) looks; without it every op falls back to the CPU.
impl="$repo/target/$dir/libdiopi_impl_host.so"
if [ -f "$impl" ]; then
  cmp -s "$impl" "$here/torch_dipu/libdiopi_impl_host.so" || cp "$impl" "$here/torch_dipu/libdiopi_impl_host.so"
else
  echo "torch_dipu: $impl is missing: ops will fall back to the CPU" >&2
  rm -f "$here/torch_dipu/libdiopi_impl_host.so"
fi
cd "$here"
export PATH="$(dirname "$python"):$PATH" MAX_JOBS=${MAX_JOBS:-2}
"$python" setup.py -q build_ext --inplace >&2
echo "$python"
