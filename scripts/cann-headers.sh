#!/usr/bin/env bash
# Downloads the CANN headers (ACL runtime and HCCL) the Ascend vendor's
# binding check compiles against, from PyPI's torch-npu wheels, into
# .cann-headers/<version>/ (ignored by git). Nothing else of the wheels is
# kept. The headers are under CANN's own license (use with Huawei processors
# only): never commit them or copy from them.
#
#   scripts/cann-headers.sh            # both versions, skipped when present
#
# Versions: torch-npu 2.14.0 (ACL 1.17, the current API) and 2.1.0.post17
# (the older baseline, without the optional symbols).
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/.cann-headers"
pip=("${PIP:-$PWD/.venv/bin/pip}")
[ -x "${pip[0]}" ] || pip=(python3 -m pip)

fetch() {
  local version="$1" dest="$out/$1"
  if [ -f "$dest/.complete" ]; then
    echo "CANN headers of torch-npu $version: present in $dest"
    return
  fi
  local tmp
  tmp="$(mktemp -d)"
  # The wheel is the same for every Python version as far as headers go:
  # ask for one that exists for both releases (CPython 3.10, x86_64).
  "${pip[@]}" download --quiet --no-deps --only-binary=:all: \
    --python-version 3.10 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 \
    "torch-npu==$version" -d "$tmp"
  local wheel
  wheel="$(ls "$tmp"/torch_npu-*.whl)"
  rm -rf "$dest"
  mkdir -p "$dest"
  # Only the include folder, nothing else of the wheel.
  python3 -m zipfile -l "$wheel" >/dev/null
  python3 - "$wheel" "$dest" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("torch_npu/include/") and n.endswith(".h")]
    for n in names:
        z.extract(n, dest)
print(f"{len(names)} headers from {wheel.rsplit('/', 1)[-1]}")
PY
  touch "$dest/.complete"
  rm -rf "$tmp"
  echo "CANN headers of torch-npu $version: in $dest"
}

fetch 2.14.0
fetch 2.1.0.post17
