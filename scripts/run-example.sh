#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main example on its built-in default model.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
build=$("$root/scripts/configure.sh" -DACCEL_BUILD_TESTS=OFF -DACCEL_BUILD_BENCHMARKS=OFF)
cmake --build "$build" --target big_model_inference
"$build/examples/big_model_inference" "$@"
