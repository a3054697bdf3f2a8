// Built without -march flags (tests/simd_portable/tests.cmake): the dispatch picks the best ISA
// this CPU has, as the compiler's own CPU check sees it, and every table it can run gives the
// scalar rounding's bits.
#include <catch2/catch.hpp>

#include <string>

#include "accel/core/convert.hpp"
#include "convert_table_checks.hpp"

#if defined(__AVX__) || defined(__AVX2__) || defined(__AVX512F__)
#error "this test must be compiled for baseline x86-64: it proves the dispatch, not the -march flags"
#endif

using namespace accel;

namespace {

// The ladder's answer from the compiler runtime's CPU check (libgcc / compiler-rt), not ours.
std::string expected_arch() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (avx512 && __builtin_cpu_supports("avx512bf16")) return "avx512_bf16";
  if (avx512) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
#endif
  return "scalar";
}

}  // namespace

TEST_CASE("a baseline build dispatches to the CPU's best conversion kernels") {
  const std::string chosen = detail::convert_kernels().arch;
  WARN("conversion kernels: " << chosen);
  REQUIRE(chosen == expected_arch());
}

TEST_CASE("a baseline build's conversion kernels give the scalar rounding's bits") {
  REQUIRE(test::check_every_available_table() >= 1);
  test::check_convert_table(detail::convert_kernels());
}
