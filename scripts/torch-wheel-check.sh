#!/usr/bin/env bash
# The pip route of the PyTorch adapter, as a user takes it: builds the
# torch_dipu wheel (`pip wheel --no-build-isolation`) from the tree that
# adapters/torch_dipu/build.sh and cargo already built (no cargo, ninja
# reuses the extension's objects: only the link and the zip are new), makes
# a fresh virtual environment in a temporary directory, installs torch and
# the wheel into it, and runs a smoke test outside the repository with no
# PYTHONPATH: tensors on "dipu" computed by the host vendor's DIOPI kernels
# (DIPU_DUMP_OP_ARGS names the kernel of each op), and `python -m torch_dipu`.
# Fails on a wheel that misses a file the package needs at run time.
#
# torch comes from .venv-torch without a download: the new environment gets
# hard links to the files of torch's installed distribution and of its
# dependencies' (each distribution's RECORD, dist-info included, so pip and
# importlib see them installed), as uv's link mode installs; nothing in the
# new environment points into .venv-torch. Falls back to copying (about
# 4 GB, slow) when the temporary directory is on another file system.
#
# Environment: DIPU_TORCH_PYTHON (default <repo>/.venv-torch/bin/python),
# DIPU_BUILD_PROFILE (the cargo profile already built; default dev, as
# scripts/test.sh builds), DIPU_WHEEL=<path> to check that wheel instead of
# building one, TMPDIR.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python=${DIPU_TORCH_PYTHON:-$repo/.venv-torch/bin/python}
[ -x "$python" ] || { echo "torch-wheel-check: $python is missing: run scripts/torch-env.sh" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/torch-wheel-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS

if [ -n "${DIPU_WHEEL:-}" ]; then
  wheel=$DIPU_WHEEL
else
  # The build directory is shared with build.sh's in-place builds.
  DIPU_NO_BUILD=1 DIPU_BUILD_PROFILE=${DIPU_BUILD_PROFILE:-dev} MAX_JOBS=${MAX_JOBS:-2} \
    flock /tmp/torch_dipu_build.lock "$python" -m pip wheel -q --disable-pip-version-check --no-index --no-deps \
    --no-build-isolation -w "$tmp/dist" "$repo/adapters/torch_dipu"
  wheel=$(echo "$tmp"/dist/torch_dipu-*.whl)
fi
# A wheel with an extension is tagged with its interpreter, ABI and platform.
tag=$("$python" -c 'import sys, sysconfig; v = "cp%d%d" % sys.version_info[:2]; print(f"{v}-{v}-" + sysconfig.get_platform().replace("-", "_").replace(".", "_"))')
case "$(basename "$wheel")" in
  torch_dipu-*-"$tag".whl) ;;
  *) echo "torch-wheel-check: $(basename "$wheel") is not tagged $tag" >&2; exit 1 ;;
esac
echo "torch-wheel-check: $(basename "$wheel"), $(du -m "$wheel" | cut -f1) MiB, built in $((SECONDS - start)) s" >&2

"$python" -m venv --without-pip "$tmp/venv"
venv_python="$tmp/venv/bin/python"
site=$("$venv_python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
# torch, numpy and the closure of their requirements, linked from .venv-torch.
"$python" - "$site" <<'PY'
import errno, os, shutil, sys
from importlib import metadata
from importlib.util import cache_from_source
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

site = sys.argv[1]
# numpy: torch_dipu requires it (the tolerance policy op_tools compares with).
todo, done, absent, files, copied = ["torch", "numpy"], set(), set(), 0, 0
while todo:
    name = canonicalize_name(todo.pop())
    if name in done or name in absent:
        continue
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        # torch-env.sh leaves out torch's GPU-only requirements (triton, ...),
        # and installs the libraries of cuda-toolkit's extras as the NVIDIA
        # wheels (nvidia-cuda-runtime, nvidia-cublas, ...) it pins.
        absent.add(name)
        if name == "cuda-toolkit":
            todo += [d.metadata["Name"] for d in metadata.distributions()
                     if canonicalize_name(d.metadata["Name"]).startswith("nvidia-")]
        continue
    done.add(name)
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            todo.append(req.name)
    for rel in dist.files:
        if rel.parts[0] == "..":  # console scripts in bin/: not needed
            continue
        src, dst = str(dist.locate_file(rel)), os.path.join(site, *rel.parts)
        pairs = [(src, dst)]
        # The bytecode torch-env.sh compiled (no RECORD lists it): a link
        # shares the source's time stamp, so the .pyc stays valid.
        if src.endswith(".py") and os.path.exists(cache_from_source(src)):
            pairs.append((cache_from_source(src), cache_from_source(dst)))
        for a, b in pairs:
            os.makedirs(os.path.dirname(b), exist_ok=True)
            try:
                os.link(a, b)
            except OSError as e:
                if e.errno != errno.EXDEV:
                    raise
                shutil.copy2(a, b)
                copied += 1
            files += 1
print(f"torch-wheel-check: torch into a fresh venv: {len(done)} distributions, {files} files"
      + (f" ({copied} copied)" if copied else " (hard links)")
      + f"; not in .venv-torch: {', '.join(sorted(absent)) or 'none'}", file=sys.stderr)
PY
"$python" -m pip --python "$venv_python" install -q --disable-pip-version-check --root-user-action=ignore \
  --no-index --no-deps "$wheel"

# The smoke test, from a directory outside the repository.
mkdir "$tmp/run"
cd "$tmp/run"
cat >script.py <<'PY'
import sys
import torch
assert "torch_dipu" in sys.modules, "python -m torch_dipu imports torch_dipu first"
x = torch.arange(4.0, device=sys.argv[1]) + 1
print("script:", x.sum().item(), x.device)
PY
cat >smoke.py <<'PY'
import os, sys
import torch, torch_dipu

pkg = os.path.dirname(torch_dipu.__file__)
for mod in (torch, torch_dipu):
    assert mod.__file__.startswith(sys.prefix + os.sep), (mod.__file__, sys.prefix)
# The runtime loaded is the package's copy (the extension's $ORIGIN rpath),
# and it opened the DIOPI kernels beside itself.
maps = open("/proc/self/maps").read()
assert os.path.join(pkg, "libdipu_runtime.so") in maps, "libdipu_runtime.so is not the package's"
path, error = torch_dipu._C._diopi_library()
assert path == os.path.join(pkg, "libdiopi_impl_host.so"), (path, error)
y = torch.ones(3, device="dipu") * 2
z = torch.nn.functional.relu(torch.tensor([-1.0, 3.0], device="dipu"))
torch.dipu.synchronize()
assert y.device.type == "dipu" and y.cpu().tolist() == [2.0, 2.0, 2.0], y
assert z.cpu().tolist() == [0.0, 3.0], z
print("smoke:", y.cpu().tolist(), torch.dipu.get_device_name(), torch_dipu.__version__)
PY
env -u PYTHONPATH DIPU_DUMP_OP_ARGS=1 "$venv_python" smoke.py 2>err.txt || { cat err.txt >&2; exit 1; }
# Each op on dipu names the DIOPI function that ran it, or dipu_fallback.
grep -qx '\[mul.out\]: diopiMulScalar' err.txt || { echo "torch-wheel-check: mul did not run on DIOPI:" >&2; cat err.txt >&2; exit 1; }
if grep -q 'dipu_fallback' err.txt; then
  echo "torch-wheel-check: an op fell back to the CPU:" >&2; cat err.txt >&2; exit 1
fi
# The op tools ship in the wheel under both names, with the tolerance
# policy's helper (torch_dipu.tolerance, from adapters/dipu_tolerance.py).
cat >tools.py <<'PY'
import os, sys
import torch, op_tools, torch_dipu
import torch_dipu.op_tools
from torch_dipu import tolerance
assert torch_dipu.op_tools is op_tools and op_tools.__file__.startswith(sys.prefix + os.sep)
assert tolerance.tolerance("float32") == (1e-5, 1.3e-6)
with op_tools.OpAutoCompare() as ac:
    (torch.ones(3, device="dipu") * 2).sum()
assert ac.results and all(r["allclose"] is True for r in ac.results), ac.results
print("op_tools:", len(ac.results), "results match")
PY
env -u PYTHONPATH "$venv_python" tools.py >tools.txt 2>&1 || { cat tools.txt >&2; exit 1; }
tail -1 tools.txt
out=$(env -u PYTHONPATH "$venv_python" -m torch_dipu script.py dipu)
echo "$out"
[ "$out" = "script: 10.0 dipu:0" ] || { echo "torch-wheel-check: python -m torch_dipu printed '$out'" >&2; exit 1; }
echo "torch-wheel-check: the wheel works in a fresh venv ($((SECONDS - start)) s)" >&2
