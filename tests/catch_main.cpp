// The one translation unit that compiles Catch2's runner.
//
// A tier run (tests/CMakeLists.txt: ACCEL_TEST_TIER and ACCEL_CPU_ARCH name the same tier) on a CPU
// that lacks the tier, or whose best tier it is, would repeat another run: it exits 77, which CTest
// reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "accel/core/simd_arch.hpp"

int main(int argc, char** argv) {
  if (const char* tier = std::getenv("ACCEL_TEST_TIER"); tier && *tier) {
    const std::string running(accel::simd::active_tier());
    if (running != tier) {
      std::printf("tier %s: this CPU's best under the cap is %s; skipped\n", tier, running.c_str());
      return 77;
    }
    if (accel::simd::tier_of(accel::simd::detail::cpu_features(nullptr)) == running) {
      std::printf("tier %s: this CPU's best, which the uncapped run tests; skipped\n", tier);
      return 77;
    }
    std::printf("tier %s\n", tier);
  }
  return Catch::Session().run(argc, argv);
}
