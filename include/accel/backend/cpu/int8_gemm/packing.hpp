// The packed layout of B that every tier of gemm_u8s8 reads (backend/cpu/int8_gemm.hpp): panels of
// u8s8_panel columns of 16-bit pairs, so that one multiply-add of a pair of A's elements by a pair
// of B's gives two products' exact sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace accel::backend::cpu::detail {

/// Columns per packed panel of B: four AVX2 registers of eight 32-bit sums.
inline constexpr std::int64_t u8s8_panel = 32;

/// B [k, n] as panels of u8s8_panel columns, each [ceil(k / 2)][u8s8_panel][2] int16 pairs,
/// zero-padded past k and n.
inline std::vector<std::int16_t> pack_s8_pairs(std::int64_t k, std::int64_t n, const std::int8_t* b) {
  const std::int64_t pairs = (k + 1) / 2, panels = (n + u8s8_panel - 1) / u8s8_panel;
  std::vector<std::int16_t> packed(static_cast<std::size_t>(panels * pairs * u8s8_panel * 2), 0);
  for (std::int64_t q = 0; q < k; ++q) {
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t panel = j / u8s8_panel, col = j % u8s8_panel;
      packed[static_cast<std::size_t>(((panel * pairs + q / 2) * u8s8_panel + col) * 2 + q % 2)] = b[q * n + j];
    }
  }
  return packed;
}

}  // namespace accel::backend::cpu::detail
