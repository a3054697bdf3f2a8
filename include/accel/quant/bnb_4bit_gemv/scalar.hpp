// The portable bitsandbytes 4-bit product: every CPU, and the reference of the vector tiers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "accel/core/simd_arch.hpp"

namespace accel::quant {

/// Output rows [r0, r1) of y = x W^T for `rows` activation rows x (float32, row stride `in`), W
/// packed 4-bit [out, in] with float32 `absmax` per block of `bs` (a power of two). Each weight is
/// decode[q] * absmax as dequantize_4bit computes it; products are summed in float32.
inline void gemv_4bit_rows(simd::requires_arch<simd::scalar>, const float* x, std::size_t rows, const std::uint8_t* w,
                           const float* absmax, const float* lut, std::size_t bs, std::size_t in, std::size_t out,
                           std::size_t r0, std::size_t r1, float* y) noexcept {
  for (std::size_t r = r0; r < r1; ++r) {
    for (std::size_t t = 0; t < rows; ++t) {
      const float* xt = x + t * in;
      float acc = 0.0f;
      for (std::size_t k = 0; k < in; ++k) {
        const std::size_t i = r * in + k;
        const std::uint8_t b = w[i / 2];
        acc += lut[i % 2 == 0 ? b >> 4 : b & 0x0F] * absmax[i / bs] * xt[k];
      }
      y[t * out + r] = acc;
    }
  }
}

}  // namespace accel::quant
