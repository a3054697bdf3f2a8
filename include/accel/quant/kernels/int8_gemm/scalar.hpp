// The portable int8 product of LLM.int8(): every CPU, and the reference of the vector tiers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "accel/core/simd_arch.hpp"

namespace accel::quant {

/// Output columns [r0, r1) of C (rows x out, int32) = A (rows x k) B^T (B: out x k), int8 codes.
inline void int8_linear_matmul(simd::requires_arch<simd::scalar>, const std::int8_t* a, std::size_t rows,
                               const std::int8_t* b, std::size_t k, std::size_t out, std::size_t r0, std::size_t r1,
                               std::int32_t* c) noexcept {
  for (std::size_t r = r0; r < r1; ++r) {
    const std::int8_t* br = b + r * k;
    for (std::size_t t = 0; t < rows; ++t) {
      const std::int8_t* at = a + t * k;
      std::int32_t s = 0;
      for (std::size_t j = 0; j < k; ++j) s += static_cast<std::int32_t>(at[j]) * br[j];
      c[t * out + r] = s;
    }
  }
}

}  // namespace accel::quant
