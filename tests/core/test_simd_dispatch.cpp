// Every conversion kernel table this CPU runs gives float_types.hpp's bits, and the dispatch
// picks the best one (tests/simd_portable repeats this in a build without -march flags).
#include <catch2/catch.hpp>

#include <string>

#include "accel/core/convert_kernels.hpp"
#include "convert_table_checks.hpp"

using namespace accel;

TEST_CASE("every available ISA's conversion kernels equal the scalar rounding bit for bit") {
  REQUIRE(test::check_every_available_table() >= 1);
}

TEST_CASE("dispatch picks the best ISA of the ladder this CPU runs") {
  std::string best;
  simd::x86_ladder::for_each([&](auto arch) {
    using A = decltype(arch);
    if (best.empty() && A::supported() && A::available()) best = A::name();
  });
  REQUIRE(std::string(detail::convert_kernels().arch) == best);
  // The ladder falls back upward: a tag without its own overload runs its parent's.
  REQUIRE(std::string(simd::dispatch<xsimd::arch_list<simd::scalar>>([](auto a) { return decltype(a)::name(); })) ==
          "scalar");
}
