// --tier for a benchmark program: caps the library's CPU dispatch (and, through its engine,
// oneDNN's) at one tier, as ACCEL_CPU_ARCH does, so one machine measures every tier it has. It must
// run before anything dispatches: the cap is read once.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "accel/core/simd_arch.hpp"

namespace accel_bench {

/// Sets ACCEL_CPU_ARCH to `tier` (empty: leaves it as it is) and returns the tier that will run:
/// lower than asked where the CPU lacks it. Exits 2 on a name that is no tier.
inline std::string apply_cpu_tier(const std::string& tier) {
  if (!tier.empty()) ::setenv("ACCEL_CPU_ARCH", tier.c_str(), 1);
  try {
    const std::string running(accel::simd::active_tier());
    if (!tier.empty() && running != tier) {
      std::fprintf(stderr, "note: --tier %s: this CPU's best under that cap is %s\n", tier.c_str(), running.c_str());
    }
    return running;
  } catch (const accel::Error& e) {
    std::fprintf(stderr, "--tier: %s\n", e.what());
    std::exit(2);
  }
}

}  // namespace accel_bench
