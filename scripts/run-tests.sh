#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs the whole test suite.
#   scripts/run-tests.sh              the suite (CUDA tests skip without a GPU)
#   scripts/run-tests.sh --sanitize   the suite under AddressSanitizer + UBSan (build-asan/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
# Each layer's tests compile as one translation unit: a clean build in about half the time.
extra=(-DACCEL_UNITY_TESTS=ON)
# The benchmarks are compile-checked by the tests (tests/headers/check_compiles.py), not built:
# ACCEL_BUILD_BENCHMARKS=ON builds them too; `cmake --build build --target bench_gemm` builds one.
extra+=("-DACCEL_BUILD_BENCHMARKS=${ACCEL_BUILD_BENCHMARKS:-OFF}")
if [[ "${1:-}" == "--sanitize" ]]; then
  export ACCEL_BUILD_DIR=${ACCEL_BUILD_DIR:-$root/build-asan}
  # -O0 with line tables: sanitizer reports keep file:line, and the build takes half the time of
  # -O1 (a sixth of -O2 -g); the tests run on tiny models, so the slower code costs little. At -O0
  # GCC flags the intrinsics headers' own `__Y = __Y` placeholders as uninitialized: those warnings
  # are off here (the -O2 tree keeps them).
  # Built for x86-64-v3 (AVX2, no AVX-512) on every machine: an intrinsic outside its target
  # attribute fails to compile here even where -march=native would hide it, and the tier tests
  # (ACCEL_CPU_ARCH=avx2, ...) run the AVX2 kernels and oneDNN's AVX2 code in this tree too.
  # The examples are left to the plain suite: instrumented, each took 1-3 minutes to compile on a
  # 2-core Zen 3 (a third of this tree), and the library code they run is the tests' too.
  extra+=(-DACCEL_SANITIZE=ON -DACCEL_MARCH=x86-64-v3 -DACCEL_WITH_CUDA=OFF -DACCEL_BUILD_BENCHMARKS=OFF
          -DACCEL_BUILD_EXAMPLES=OFF
          "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O0 -g1 -Wno-uninitialized")
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
build=$("$root/scripts/configure.sh" -DACCEL_BUILD_TESTS=ON "${extra[@]}")
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure -j "$(nproc)"
