#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs the whole test suite.
#   scripts/run-tests.sh              the suite (CUDA tests skip without a GPU)
#   scripts/run-tests.sh --sanitize   the suite under AddressSanitizer + UBSan (build-asan/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
extra=()
if [[ "${1:-}" == "--sanitize" ]]; then
  export ACCEL_BUILD_DIR=${ACCEL_BUILD_DIR:-$root/build-asan}
  extra=(-DACCEL_SANITIZE=ON -DACCEL_WITH_CUDA=OFF -DACCEL_BUILD_BENCHMARKS=OFF)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
build=$("$root/scripts/configure.sh" -DACCEL_BUILD_TESTS=ON "${extra[@]}")
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure -j "$(nproc)"
