#!/usr/bin/env bash
# Installs PyTorch from PyPI into <repo>/.venv-torch (a venv of its own, apart
# from the CUDA wheels of .venv), for the TCPStore interop tests
# (comm/tests/store_torch_interop.rs), which run torch's TCPStore server and
# client against ours, and for the torch_dipu adapter's build and tests.
# Prints the venv's python, which those tests use unless DIPU_TORCH_PYTHON
# names another.
#
# PyPI's Linux torch wheel is a CUDA build: it imports only when the CUDA
# libraries it links (cuBLAS, cuDNN, NCCL, ...) are installed, even to use the
# CPU. So this installs torch with --no-deps and, pinned, exactly the NVIDIA
# wheels that satisfy its libraries' links, plus the pure-Python packages
# `import torch` needs. Left out of torch's own dependencies: triton,
# cuda-bindings, cuSOLVER and NVTX (not needed to import torch or use
# torch.distributed on the CPU). About 2.5 GB to download, 4 GB installed;
# no GPU is needed or used.
#
# Idempotent: a .venv-torch that already holds exactly these versions is left
# alone (well under a second). The venv ignores itself in git
# (.venv-torch/.gitignore).
#
# Environment: PYTHON (default python3) is the interpreter that makes the
# venv (3.10 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."

torch=torch==2.15.0
packages=(
  # The libraries torch 2.15.0's CUDA build links, at the versions it pins.
  nvidia-cuda-runtime==13.2.86 # libcudart
  nvidia-cuda-cupti==13.2.86   # libcupti
  nvidia-cuda-nvrtc==13.2.86   # libnvrtc
  nvidia-cublas==13.4.1.3      # libcublas, libcublasLt
  nvidia-cudnn-cu13==9.26.0.51 # libcudnn
  nvidia-cufft==12.2.0.57      # libcufft
  nvidia-cufile==1.17.1.22     # libcufile
  nvidia-cusparse==12.7.10.12  # libcusparse
  nvidia-cusparselt-cu13==0.8.1
  nvidia-nccl-cu13==2.30.7
  nvidia-nvshmem-cu13==3.7.2
  nvidia-nvjitlink==13.5.37 # needed by libcusparse
  # What `import torch` needs from Python.
  filelock==4.2.11
  typing-extensions==4.16.0
  sympy==1.14.0
  mpmath==1.3.0
  networkx==3.6.1
  jinja2==3.1.6
  markupsafe==3.0.4
  fsspec==2026.9.0
  # Building and testing the torch_dipu adapter (adapters/torch_dipu):
  # torch.utils.cpp_extension with ninja, pytest, and what
  # torch.testing._internal's device-generic tests import.
  setuptools==84.2.1
  ninja==1.13.2
  numpy==2.4.6 # the newest for Python 3.11
  expecttest==0.3.0
  pytest==9.2.0
  pluggy==1.7.0
  iniconfig==2.3.1
  packaging==26.3
  pygments==2.21.0
)
venv=.venv-torch
stamp="$venv/.dipu-torch-env"
want="$torch ${packages[*]} +bytecode"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "torch-env: $venv already has $torch" >&2
  echo "$PWD/$venv/bin/python"
  exit 0
fi

python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "torch-env: $python is missing: install Python 3 with venv and pip (apt-get install python3-venv)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
echo '*' >"$venv/.gitignore"
rm -f "$stamp"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps --no-warn-conflicts)
"${pip[@]}" "${packages[@]}"
"${pip[@]}" "$torch"
# Bytecode for every module, compiled here once on every core: pip's own pass
# is off (--no-compile: one process), and where PYTHONDONTWRITEBYTECODE is set
# (it is on this project's machines), each of the suite's Python processes
# would otherwise compile what it imports from source again (`import torch`:
# 5.6 s of CPU so, 2.6 s with bytecode; `import paddle`: 5.4 s, 1.5 s).
# (torch's testing/_internal/py312_intrinsics.py is Python 3.12 syntax,
# imported only there.)
"$venv/bin/python" -m compileall -q -j 0 -x 'py312_intrinsics\.py$' "$venv"/lib/python3*/site-packages >/dev/null
# The proof that it worked: torch imports and has the TCPStore.
"$venv/bin/python" -W ignore -c 'import torch, torch.distributed as d; assert d.is_available(); d.TCPStore; print(torch.__version__)' >&2
echo "$want" >"$stamp"
echo "torch-env: installed $torch into $venv" >&2
echo "$PWD/$venv/bin/python"
