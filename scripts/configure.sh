#!/usr/bin/env bash
# Configures the build tree (default: build/) once; later calls reuse it. Extra arguments go to
# cmake. ACCEL_BUILD_DIR picks another tree (the sanitizer run uses build-asan/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ACCEL_BUILD_DIR:-$root/build}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
# Line tables only (-g1): backtraces and perf keep file:line, and template-heavy translation units
# compile about a quarter faster than with full debug info. Later -D arguments override these.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${ACCEL_BUILD_TYPE:-RelWithDebInfo}" \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_CUDA_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG -Xcompiler=-g1" \
  "${launcher[@]}" "$@" >/dev/null
echo "$build"
