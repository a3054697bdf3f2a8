#!/usr/bin/env bash
# Configures the build tree (default: build/) once; later calls reuse it. Extra arguments go to
# cmake. ACCEL_BUILD_DIR picks another tree (the sanitizer run uses build-asan/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ACCEL_BUILD_DIR:-$root/build}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${ACCEL_BUILD_TYPE:-RelWithDebInfo}" \
  "${launcher[@]}" "$@" >/dev/null
echo "$build"
