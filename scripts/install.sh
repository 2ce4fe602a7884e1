#!/usr/bin/env bash
# Installs the dipu-rs C API into PREFIX:
#   PREFIX/lib/libdipu_runtime.so, libdipu_runtime.a, libdipu_vendor_host.so
#   PREFIX/include/dipu_runtime.h, PREFIX/include/diopi/*.h (DIOPI's C API)
#   PREFIX/lib/libdiopi_impl_host.so (the host vendor's DIOPI kernel library)
#   PREFIX/lib/pkgconfig/dipu_runtime.pc
#   PREFIX/lib/cmake/dipu_runtime/dipu_runtimeConfig.cmake (+ ConfigVersion)
#
# Usage: scripts/install.sh PREFIX
# Environment:
#   DIPU_BUILD_PROFILE   cargo profile to build and install (default: release;
#                  "dev" installs target/debug)
#   DIPU_NO_BUILD  set to 1 to install already built files without running
#                  cargo (the tests do this: cargo test holds the build lock)
#   CARGO_TARGET_DIR  as for cargo (default: target)
#   DIPU_LIB_DIR   the directory holding the built libraries (default:
#                  $CARGO_TARGET_DIR/<profile directory>)
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 PREFIX" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="$1"
profile="${DIPU_BUILD_PROFILE:-release}"
case "$profile" in
  dev | debug) profile=dev; outdir=debug ;;
  *) outdir="$profile" ;;
esac
target_dir="${CARGO_TARGET_DIR:-$root/target}"
libdir="${DIPU_LIB_DIR:-$target_dir/$outdir}"

if [ "${DIPU_NO_BUILD:-0}" != 1 ]; then
  (cd "$root" && cargo build --locked --profile "$profile" -p dipu-ffi -p dipu-vendor-host -p dipu-diopi-host)
fi
for f in libdipu_runtime.so libdipu_runtime.a; do
  if [ ! -f "$libdir/$f" ]; then
    echo "install: $libdir/$f is missing: build with cargo build --profile $profile -p dipu-ffi" >&2
    exit 1
  fi
done
version="$(sed -n 's/^#define DIPU_RUNTIME_VERSION "\(.*\)"$/\1/p' "$root/include/dipu_runtime.h")"
if [ -z "$version" ]; then
  echo "install: no DIPU_RUNTIME_VERSION in include/dipu_runtime.h" >&2
  exit 1
fi

mkdir -p "$prefix/lib/pkgconfig" "$prefix/lib/cmake/dipu_runtime" "$prefix/include"
prefix="$(cd "$prefix" && pwd)"
install -m 0755 "$libdir/libdipu_runtime.so" "$prefix/lib/libdipu_runtime.so"
install -m 0644 "$libdir/libdipu_runtime.a" "$prefix/lib/libdipu_runtime.a"
if [ -f "$libdir/libdipu_vendor_host.so" ]; then
  install -m 0755 "$libdir/libdipu_vendor_host.so" "$prefix/lib/libdipu_vendor_host.so"
else
  echo "install: note: $libdir/libdipu_vendor_host.so not built; the built-in host vendor still works" >&2
fi
install -m 0644 "$root/include/dipu_runtime.h" "$prefix/include/dipu_runtime.h"
mkdir -p "$prefix/include/diopi"
install -m 0644 "$root"/include/diopi/*.h "$prefix/include/diopi/"
# The host vendor's kernel library beside libdipu_runtime.so, where the
# default search of dipu_diopi_open finds it (docs/diopi.md).
if [ -f "$libdir/libdiopi_impl_host.so" ]; then
  install -m 0755 "$libdir/libdiopi_impl_host.so" "$prefix/lib/libdiopi_impl_host.so"
else
  echo "install: note: $libdir/libdiopi_impl_host.so not built; DIOPI ops fall back to the CPU" >&2
fi

cat >"$prefix/lib/pkgconfig/dipu_runtime.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: dipu_runtime
Description: dipu-rs device runtime (C API)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -ldipu_runtime
Libs.private: -lpthread -ldl -lm
PC

cat >"$prefix/lib/cmake/dipu_runtime/dipu_runtimeConfig.cmake" <<'CMAKE'
# dipu_runtime: the dipu-rs device runtime's C API.
# Defines the imported targets dipu_runtime::dipu_runtime (shared) and
# dipu_runtime::dipu_runtime_static.
get_filename_component(_dipu_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET dipu_runtime::dipu_runtime)
  add_library(dipu_runtime::dipu_runtime SHARED IMPORTED)
  set_target_properties(dipu_runtime::dipu_runtime PROPERTIES
    IMPORTED_LOCATION "${_dipu_prefix}/lib/libdipu_runtime.so"
    IMPORTED_SONAME "libdipu_runtime.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_dipu_prefix}/include")
endif()
if(NOT TARGET dipu_runtime::dipu_runtime_static)
  find_package(Threads REQUIRED)
  add_library(dipu_runtime::dipu_runtime_static STATIC IMPORTED)
  set_target_properties(dipu_runtime::dipu_runtime_static PROPERTIES
    IMPORTED_LOCATION "${_dipu_prefix}/lib/libdipu_runtime.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_dipu_prefix}/include"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS};m")
endif()
set(dipu_runtime_INCLUDE_DIRS "${_dipu_prefix}/include")
set(dipu_runtime_LIBRARIES dipu_runtime::dipu_runtime)
unset(_dipu_prefix)
CMAKE

cat >"$prefix/lib/cmake/dipu_runtime/dipu_runtimeConfigVersion.cmake" <<CMAKE
# Compatible with a requested version of the same major, not newer.
set(PACKAGE_VERSION "$version")
string(REGEX MATCH "^[0-9]+" _dipu_major "\${PACKAGE_VERSION}")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(NOT "\${PACKAGE_FIND_VERSION_MAJOR}" STREQUAL "" AND NOT PACKAGE_FIND_VERSION_MAJOR EQUAL _dipu_major)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
unset(_dipu_major)
CMAKE

echo "install: dipu_runtime $version installed into $prefix"
