#!/usr/bin/env bash
# Installs the Debian packages accel builds and tests with, if any is missing (idempotent:
# nothing is downloaded when everything is present). The CUDA toolkit is used when the machine
# has one (/usr/local/cuda); it is optional.
set -euo pipefail
# oneDNN's CMake package looks for OpenCL (its GPU runtime), hence the OpenCL packages.
packages=(
  cmake ninja-build g++ ccache python3
  libboost1.81-dev nlohmann-json3-dev libxsimd-dev libdnnl-dev libssl-dev
  catch2 libbenchmark-dev libopenmpi-dev openmpi-bin
  ocl-icd-opencl-dev opencl-c-headers
)
if [[ "${ACCEL_FUZZ:-0}" == 1 ]]; then packages+=(clang libclang-rt-14-dev); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "accel: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
