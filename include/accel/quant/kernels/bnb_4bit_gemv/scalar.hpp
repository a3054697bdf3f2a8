// The portable bitsandbytes 4-bit product: every CPU, and the reference of the vector tiers.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "accel/backend/cpu/kernels.hpp"
#include "accel/core/simd_arch.hpp"

namespace accel::quant {

/// Output rows [r0, r1) of y = x W^T for `rows` activation rows x (float32, row stride `in`), W
/// packed 4-bit [out, in] with float32 `absmax` per block of `bs` (a power of two). Each weight is
/// decode[q] * absmax as dequantize_4bit computes it; a weight row is decoded once into a buffer
/// of this thread's and dotted with every activation row by the build-ISA dot product, summed in
/// float32. Summed element by element (one dependent addition and a 64-bit division each), the
/// 483M model decoded at 2.5 tokens/s on Zen 4 capped at this tier; this way 9.7-10.6, level with
/// its bf16 decode there.
inline void gemv_4bit_rows(simd::requires_arch<simd::scalar>, const float* x, std::size_t rows, const std::uint8_t* w,
                           const float* absmax, const float* lut, std::size_t bs, std::size_t in, std::size_t out,
                           std::size_t r0, std::size_t r1, float* y) {
  thread_local std::vector<float> row;
  row.resize(in);
  const int shift = std::countr_zero(bs);  // a division per element cost more than the rest
  for (std::size_t r = r0; r < r1; ++r) {
    std::size_t k = 0;
    // Whole bytes of one block at a time (both nibbles, one absmax), then the odd ends.
    while (k < in) {
      const std::size_t i = r * in + k;
      const float a = absmax[i >> shift];
      const std::size_t end = std::min(in, k + bs - (i & (bs - 1)));
      if ((i & 1) != 0) {
        row[k++] = lut[w[i >> 1] & 0x0F] * a;
        continue;
      }
      const std::uint8_t* bytes = w + (i >> 1);
      const std::size_t pairs = (end - k) / 2;
      for (std::size_t p = 0; p < pairs; ++p) {
        row[k + 2 * p] = lut[bytes[p] >> 4] * a;
        row[k + 2 * p + 1] = lut[bytes[p] & 0x0F] * a;
      }
      k += 2 * pairs;
      if (k < end) row[k++] = lut[bytes[pairs] >> 4] * a;
    }
    for (std::size_t t = 0; t < rows; ++t) y[t * out + r] = backend::cpu::dot(x + t * in, row.data(), in);
  }
}

}  // namespace accel::quant
