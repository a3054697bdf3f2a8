#!/usr/bin/env bash
# The CPU kernels' AArch64 tiers (NEON, NEON with the dot product), built with Debian's cross
# compiler and run under qemu-user: tests/arm/kernel_tiers.cpp checks every kernel family at every
# tier the emulated CPU has against the scalar kernels. It needs no oneDNN, only the header-only
# libraries (xsimd, Catch2, nlohmann-json, Boost), which Debian's cross compiler finds in
# /usr/include after its own target's headers. qemu proves correctness only: ARM speed is not
# measured anywhere.
#
#   bash scripts/run-arm-tests.sh    installs what is missing (apt-get, as root or through sudo),
#                                    builds build-arm/kernel_tiers, runs it four times:
#
#   -cpu max                          ARMv8.x with the dot product: neon_dotprod, and neon below it
#   -cpu max, ACCEL_CPU_ARCH=neon     the cap: neon only
#   -cpu cortex-a57                   ARMv8.0 without the dot product: HWCAP says neon
#   -cpu max, ACCEL_CPU_ARCH=scalar   the portable kernels alone
#
# ACCEL_TEST_EXPECT_TIER tells the program which tier each run must dispatch to.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

packages=(g++-aarch64-linux-gnu qemu-user libxsimd-dev catch2 nlohmann-json3-dev libboost1.81-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null; then
      echo "run-arm-tests: missing ${missing[*]}; as root: apt-get install ${missing[*]}" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  echo "== installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

out=build-arm
mkdir -p "$out"
cxx=aarch64-linux-gnu-g++
# -ffp-contract=off: the NEON ggml dot products scale each block's exact integer sum with the
# scalar kernel's float operations in its order, which the test checks bit for bit; GCC's default
# (fast) may fuse a * b + c into one rounding in one kernel and not in the other.
flags=(-std=c++20 -O2 -ffp-contract=off -fopenmp -Wall -Wextra -Wno-psabi -Iinclude -Itests/core)

echo "== building $out/kernel_tiers ($($cxx -dumpfullversion), -O2, static) at $((SECONDS - start)) s"
# Catch2's runner and the tests take about as long: they compile side by side.
$cxx "${flags[@]}" -c tests/catch_main.cpp -o "$out/catch_main.o" &
runner=$!
$cxx "${flags[@]}" -c tests/arm/kernel_tiers.cpp -o "$out/kernel_tiers.o"
wait "$runner"
# -w: libgomp's static archive warns about dlopen, which these tests never reach.
$cxx -static -fopenmp -Wl,-w "$out/catch_main.o" "$out/kernel_tiers.o" -o "$out/kernel_tiers"

run() {  # run <qemu cpu> <ACCEL_CPU_ARCH or ""> <expected tier>
  echo "== qemu-aarch64 -cpu $1${2:+, ACCEL_CPU_ARCH=$2}: expect $3 (at $((SECONDS - start)) s)"
  env OMP_NUM_THREADS=2 ACCEL_CPU_ARCH="$2" ACCEL_TEST_EXPECT_TIER="$3" qemu-aarch64 -cpu "$1" "$out/kernel_tiers"
}
run max "" neon_dotprod
run max neon neon
run cortex-a57 "" neon
run max scalar scalar
echo "== ARM kernel tiers: all runs passed in $((SECONDS - start)) s"
