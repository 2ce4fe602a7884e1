#!/usr/bin/env bash
# Makes <repo>/.venv-paddle: PaddlePaddle 3.3.1 (PyPI's CPU wheel) and pytest,
# for the paddle_dipu CustomDevice plugin (adapters/paddle_dipu), then builds
# and installs that plugin's package (paddle-dipu) into it, so that
# `.venv-paddle/bin/python -c 'import paddle'` lists the `dipu` device with no
# other setting. Prints the venv's python.
#
# Idempotent: a .venv-paddle that already holds exactly these versions is
# left alone (well under a second); the plugin step is then cargo's and the
# compiler's no-op check. The venv ignores itself in git (.venv-paddle/.gitignore).
#
# Environment: PYTHON (default python3.11, else python3) makes the venv
# (Python 3.11: the wheel is cp311); PADDLE_ENV_NO_PLUGIN=1 installs only the
# wheels (scripts/test.sh runs that part in the background while cargo
# builds, and installs the plugin afterwards); DIPU_NO_BUILD and
# DIPU_BUILD_PROFILE pass on to adapters/paddle_dipu/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

paddle=paddlepaddle==3.3.1
packages=(
  # What paddlepaddle 3.3.1 requires, at the versions resolved on 2026-11-26
  # (installed first, so that installing paddle finds them satisfied).
  numpy==2.4.6
  protobuf==7.36.2
  pillow==13.0.0
  networkx==3.6.1
  opt-einsum==3.3.0
  typing-extensions==4.16.0
  safetensors==0.8.0
  httpx==0.28.1
  httpcore==1.0.9
  h11==0.16.0
  anyio==4.16.0
  certifi==2026.10.19.post1
  idna==3.20
  # The tests.
  pytest==9.2.0
  pluggy==1.7.0
  iniconfig==2.3.1
  packaging==26.3
  pygments==2.21.0
  setuptools==84.2.1
)
venv=.venv-paddle
stamp="$venv/.dipu-paddle-env"
want="$paddle ${packages[*]} +bytecode"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "paddle-env: $venv already has $paddle" >&2
else
  python=${PYTHON:-}
  if [ -z "$python" ]; then
    python=python3.11
    command -v "$python" >/dev/null 2>&1 || python=python3
  fi
  if ! command -v "$python" >/dev/null 2>&1; then
    echo "paddle-env: $python is missing: install Python 3.11 with venv and pip" >&2
    exit 1
  fi
  case "$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" in
    3.11) ;;
    *) echo "paddle-env: $python is not Python 3.11 (the $paddle wheel used here is cp311): set PYTHON" >&2; exit 1 ;;
  esac
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
  fi
  echo '*' >"$venv/.gitignore"
  rm -f "$stamp"
  pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile --no-warn-conflicts)
  "${pip[@]}" "${packages[@]}"
  # Any requirement not pinned above is resolved here.
  "${pip[@]}" "$paddle"
  # Bytecode for every module, compiled here once on every core: pip's own
  # pass is off (--no-compile: one process), and where PYTHONDONTWRITEBYTECODE
  # is set (it is on this project's machines), each of the suite's Python
  # processes would otherwise compile what it imports from source again
  # (`import torch`: 5.6 s of CPU so, 2.6 s with bytecode; `import paddle`:
  # 5.4 s, 1.5 s).
  "$venv/bin/python" -m compileall -q -j 0 "$venv"/lib/python3*/site-packages >/dev/null
  # The proof that it worked: paddle imports with no plugin directory.
  CUSTOM_DEVICE_ROOT= "$venv/bin/python" -W ignore -c 'import paddle; print(paddle.__version__)' >&2
  echo "$want" >"$stamp"
  echo "paddle-env: installed $paddle into $venv" >&2
fi

if [ "${PADDLE_ENV_NO_PLUGIN:-0}" != 1 ]; then
  ./adapters/paddle_dipu/build.sh >/dev/null
fi
echo "$PWD/$venv/bin/python"
