#!/usr/bin/env bash
# Installs NVIDIA's CUDA runtime, NCCL and the CUDA headers from PyPI into
# <repo>/.venv, so the CUDA vendor's tests run without a GPU: they load the
# real libcudart.so.13 and libnccl.so.2, and check the hand-written bindings
# against the real cuda_runtime_api.h, cuda.h and nccl.h (of CUDA 13, and of
# CUDA 12 too).
#
# Idempotent: a .venv that already holds exactly these versions is left
# alone (well under a second). A fresh install takes a few seconds on a fast
# link; NCCL's wheel is the bulk of it (305 MB download, 361 MB installed).
#
# Environment: PYTHON (default python3) is the interpreter that makes the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  nvidia-cuda-runtime==13.5.37 # libcudart.so.13, cuda_runtime_api.h, driver_types.h, cuda.h (2.5 MB)
  nvidia-cuda-crt==13.5.37     # crt/host_defines.h, which the runtime headers include (0.2 MB)
  nvidia-cuda-cccl==13.3.5.0.6 # nv/target, which cuda_fp16.h (included by nccl.h) includes (4.1 MB)
  nvidia-nccl-cu13==2.32.3     # libnccl.so.2, nccl.h (305 MB)
  nvidia-cuda-runtime-cu12==12.8.90 # CUDA 12's cuda_runtime_api.h, driver_types.h, cuda.h (and libcudart.so.12) for the header check against CUDA 12 (1 MB)
)
venv=.venv
stamp="$venv/.dipu-cuda-env"
want="${packages[*]}"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "cuda-env: $venv already has ${packages[*]}"
  exit 0
fi

python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "cuda-env: $python is missing: install Python 3 with venv and pip (apt-get install python3-venv)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
rm -f "$stamp"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps "${packages[@]}"
echo "$want" >"$stamp"
echo "cuda-env: installed ${packages[*]} into $venv"
