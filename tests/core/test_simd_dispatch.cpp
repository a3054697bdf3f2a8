// Every conversion kernel table this CPU runs gives float_types.hpp's bits, and the dispatch
// picks the best one (tests/simd_portable repeats this in a build without -march flags).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "accel/core/convert_kernels.hpp"
#include "convert_table_checks.hpp"

using namespace accel;

TEST_CASE("every available ISA's conversion kernels equal the scalar rounding bit for bit") {
  REQUIRE(test::check_every_available_table() >= 1);
}

TEST_CASE("dispatch picks the best ISA of the ladder this CPU runs") {
  std::string best;
  simd::ladder::for_each([&](auto arch) {
    using A = decltype(arch);
    if (best.empty() && A::supported() && A::available()) best = A::name();
  });
  REQUIRE(std::string(detail::convert_kernels().arch) == best);
  // The ladder falls back upward: a tag without its own overload runs its parent's.
  REQUIRE(std::string(simd::dispatch<xsimd::arch_list<simd::scalar>>([](auto a) { return decltype(a)::name(); })) ==
          "scalar");
}

TEST_CASE("ACCEL_CPU_ARCH caps the tiers, and a name that is no tier is a ValueError") {
  using simd::detail::cpu_features;
  const cpu_features machine(nullptr);
  const cpu_features capped_avx2("avx2"), capped_scalar("scalar"), capped_avx512("avx512"),
      capped_vnni("avx512_vnni"), capped_top("avx512_bf16"), empty("");
  CHECK(capped_avx2.avx2 == machine.avx2);
  CHECK_FALSE(capped_avx2.avx512);
  CHECK_FALSE(capped_avx2.avx512_vnni);
  CHECK_FALSE(capped_avx2.avx512_bf16);
  CHECK_FALSE(capped_scalar.avx2);
  CHECK(capped_avx512.avx512 == machine.avx512);
  CHECK_FALSE(capped_avx512.avx512_vnni);
  CHECK(capped_vnni.avx512_vnni == machine.avx512_vnni);
  CHECK_FALSE(capped_vnni.avx512_bf16);
  CHECK(capped_top.avx512_bf16 == machine.avx512_bf16);
  CHECK(empty.avx512_bf16 == machine.avx512_bf16);
  // A cap names one architecture's tier; on the other it admits scalar only (tests/arm runs the
  // AArch64 side under qemu).
#if ACCEL_SIMD_X86
  for (const char* arm : {"neon", "neon_dotprod"}) {
    const cpu_features capped_arm(arm);
    CHECK_FALSE((capped_arm.avx2 || capped_arm.avx512 || capped_arm.avx512_vnni || capped_arm.avx512_bf16));
    CHECK(simd::tier_of(capped_arm) == "scalar");
  }
  CHECK_FALSE((machine.neon || machine.neon_dotprod));
  CHECK_FALSE(simd::neon::available());
#endif
  CHECK_THROWS_WITH(cpu_features("avx3"), Catch::Contains("ACCEL_CPU_ARCH=avx3") &&
                                              Catch::Contains("scalar, avx2, avx512, avx512_vnni, avx512_bf16, neon, neon_dotprod"));
  // This process's own cap (the tier tests of CTest set it): the tier that runs is no higher.
  const std::string_view tier = simd::active_tier();
  const auto rank = [](std::string_view name) { return static_cast<std::ptrdiff_t>(simd::tier_rank(name)); };
  if (const char* cap = std::getenv("ACCEL_CPU_ARCH"); cap && *cap) {
    INFO("ACCEL_CPU_ARCH=" << cap << ", running " << tier);
    CHECK(rank(tier) <= rank(cap));
    CHECK(rank(detail::convert_kernels().arch) <= rank(cap));
  }
  CHECK(rank(tier) < static_cast<std::ptrdiff_t>(std::size(simd::tier_names)));
}

TEST_CASE("cpu_is_intel reads the vendor the kernel reports") {
  // /proc/cpuinfo's vendor_id is CPUID's vendor string as Linux read it.
  std::ifstream info("/proc/cpuinfo");
  std::string line, vendor;
  while (vendor.empty() && std::getline(info, line)) {
    if (line.rfind("vendor_id", 0) == 0) vendor = line.substr(line.find(':') + 2);
  }
#if ACCEL_SIMD_X86
  if (vendor.empty()) {
    WARN("no vendor_id in /proc/cpuinfo: nothing to compare with");
    return;
  }
  CHECK(simd::cpu_is_intel() == (vendor == "GenuineIntel"));
#else
  CHECK_FALSE(simd::cpu_is_intel());
#endif
}
