#!/usr/bin/env bash
# Installs what is missing, builds the `accel` CLI and runs `accel run` on its built-in default
# model (written into $XDG_CACHE_HOME/accel, else ~/.cache/accel, on first use): part of the model
# on the CPU and the rest on disk, the plan, the text, the figures, then a check of the tokens
# against an unrestricted run. Extra arguments go to `accel run` (`--help` lists them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
build=$("$root/scripts/configure.sh" -DACCEL_BUILD_TESTS=OFF -DACCEL_BUILD_BENCHMARKS=OFF)
cmake --build "$build" --target accel_cli
"$build/tools/accel" run "$@"
