#!/usr/bin/env bash
# Builds the torch_dipu adapter in place, for its developers and tests:
# libdipu_runtime.so and libdiopi_impl_host.so from the workspace (cargo, dev
# profile unless DIPU_BUILD_PROFILE says otherwise) copied into the package,
# then the C++ extension torch_dipu._C against the torch of .venv-torch
# (scripts/torch-env.sh installs it), with ninja and MAX_JOBS=2 (override
# with MAX_JOBS). Prints the python to run it with; put adapters/torch_dipu
# on PYTHONPATH (or cd there) to `import torch_dipu`. To install the package
# instead: `pip install --no-build-isolation ./adapters/torch_dipu`
# (docs/torch.md).
#
# Environment: DIPU_TORCH_PYTHON (default <repo>/.venv-torch/bin/python),
# DIPU_BUILD_PROFILE (dev or release), DIPU_NO_BUILD=1 to skip cargo.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python=${DIPU_TORCH_PYTHON:-$repo/.venv-torch/bin/python}
profile=${DIPU_BUILD_PROFILE:-dev}
if [ ! -x "$python" ]; then
  echo "torch_dipu: $python is missing: run scripts/torch-env.sh first" >&2
  exit 1
fi
if [ "${DIPU_NO_BUILD:-0}" != 1 ]; then
  (cd "$repo" && cargo build --locked --profile "$profile" -p dipu-ffi -p dipu-diopi-host >&2)
fi
cd "$here"
export PATH="$(dirname "$python"):$PATH" MAX_JOBS=${MAX_JOBS:-2}
# setup.py copies target/<profile>/libdipu_runtime.so and
# libdiopi_impl_host.so into the package (cargo ran above).
DIPU_BUILD_PROFILE=$profile DIPU_NO_BUILD=1 "$python" setup.py -q build_ext --inplace >&2
echo "$python"
