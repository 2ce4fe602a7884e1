#!/usr/bin/env bash
# Builds the paddle_dipu CustomDevice plugin and installs the paddle-dipu
# package into .venv-paddle (scripts/paddle-env.sh makes it):
#   build/paddle_custom_device/libpaddle-dipu.so  the plugin, compiled against
#       the installed paddle's own device_ext.h and dipu-rs's dipu_runtime.h
#   build/paddle_dipu/libdipu_runtime.so          the workspace's runtime (cargo,
#       dev profile unless DIPU_BUILD_PROFILE says otherwise)
# then `pip install` puts them in site-packages/paddle_custom_device/ (where
# `import paddle` looks) and site-packages/paddle_dipu/. Prints the python.
#
# Environment: DIPU_PADDLE_PYTHON (default <repo>/.venv-paddle/bin/python),
# DIPU_BUILD_PROFILE (dev or release), DIPU_NO_BUILD=1 to skip cargo, CXX.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python=${DIPU_PADDLE_PYTHON:-$repo/.venv-paddle/bin/python}
profile=${DIPU_BUILD_PROFILE:-dev}
dir=debug
[ "$profile" = dev ] || dir=$profile
if [ ! -x "$python" ]; then
  echo "paddle_dipu: $python is missing: run scripts/paddle-env.sh first" >&2
  exit 1
fi
if [ "${DIPU_NO_BUILD:-0}" != 1 ]; then
  (cd "$repo" && cargo build --locked --profile "$profile" -p dipu-ffi >&2)
fi
lib="$repo/target/$dir/libdipu_runtime.so"
[ -f "$lib" ] || { echo "paddle_dipu: $lib is missing" >&2; exit 1; }
# Paddle's include root, asked with no plugin directory so that a broken
# installed plugin cannot stop the build that replaces it.
inc="$(CUSTOM_DEVICE_ROOT= "$python" -W ignore -c 'import paddle.sysconfig as s; print(s.get_include())' 2>/dev/null | tail -n 1)"
header="$inc/paddle/phi/backends/device_ext.h"
[ -f "$header" ] || { echo "paddle_dipu: $header is missing (is paddlepaddle installed?)" >&2; exit 1; }
out="$here/build"
mkdir -p "$out/paddle_custom_device" "$out/paddle_dipu"
cmp -s "$lib" "$out/paddle_dipu/libdipu_runtime.so" || cp "$lib" "$out/paddle_dipu/libdipu_runtime.so"
plugin="$out/paddle_custom_device/libpaddle-dipu.so"
if [ ! -f "$plugin" ] || [ "$here/csrc/plugin.cc" -nt "$plugin" ] || [ "$header" -nt "$plugin" ] ||
  [ "$repo/include/dipu_runtime.h" -nt "$plugin" ]; then
  # -z nodelete: Paddle dlcloses plugins at exit, while dipu-rs's threads
  # may still run; the library stays mapped.
  ${CXX:-g++} -std=c++17 -O2 -g -fPIC -shared -Wall -Wextra -Werror -Wno-unused-parameter \
    -fvisibility=hidden -I "$repo/include" -I "$inc" "$here/csrc/plugin.cc" \
    -L "$out/paddle_dipu" -ldipu_runtime -Wl,-rpath,'$ORIGIN/../paddle_dipu' -Wl,-z,nodelete \
    -Wl,--no-undefined -o "$plugin.tmp"
  mv "$plugin.tmp" "$plugin"
fi
# Reinstall only when an installed library differs from the built one.
site="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if ! cmp -s "$plugin" "$site/paddle_custom_device/libpaddle-dipu.so" ||
  ! cmp -s "$out/paddle_dipu/libdipu_runtime.so" "$site/paddle_dipu/libdipu_runtime.so" ||
  ! cmp -s "$here/paddle_dipu/__init__.py" "$site/paddle_dipu/__init__.py"; then
  "$python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    --force-reinstall "$here" >&2
fi
echo "$python"
