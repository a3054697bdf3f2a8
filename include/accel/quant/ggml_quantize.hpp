// ggml's reference quantizers from float32 rows to blocks (what llama-quantize does for these
// types without an importance matrix), for weights and for the activations of quant/ggml_dot.hpp.
//
//   quantize_row_q8_0(x, y, n)    per 32: d = max|x| / 127 (f16), q = round(x / d)
//   quantize_row_q4_0(x, y, n)    per 32: d = m / -8 for the signed value m of largest magnitude,
//                                 q = min(15, trunc(x / d + 8.5))
//   quantize_row_q8_k(x, y, n)    per 256: f32 scale mapping that value to -127, sums of each 16
//
// n must be a multiple of the block size; rounding is ggml's (roundf: half away from zero).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "accel/core/float_types.hpp"
#include "accel/io/ggml_blocks.hpp"

namespace accel::quant {

using io::GgmlType;

inline void quantize_row_q8_0(const float* x, io::block_q8_0* y, std::size_t n) noexcept {
  for (std::size_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = half(d).bits;
    for (int j = 0; j < 32; ++j) y[b].qs[j] = static_cast<std::int8_t>(std::lround(x[j] * id));
  }
}

inline void quantize_row_q4_0(const float* x, io::block_q4_0* y, std::size_t n) noexcept {
  for (std::size_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
    }
    const float d = max / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = half(d).bits;
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int hi = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
      y[b].qs[j] = static_cast<std::uint8_t>(lo | (hi << 4));
    }
  }
}

/// ggml's quantize_row_q8_K: per 256 values the signed value of largest magnitude maps to -127.
inline void quantize_row_q8_k(const float* x, io::block_q8_k* y, std::size_t n) noexcept {
  for (std::size_t b = 0; b < n / 256; ++b, x += 256) {
    float amax = 0, max = 0;
    for (int j = 0; j < 256; ++j) {
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
    }
    if (amax == 0) {
      y[b] = {};
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < 256; ++j) {
      y[b].qs[j] = static_cast<std::int8_t>(std::min(127L, std::lround(iscale * x[j])));
    }
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += y[b].qs[16 * g + j];
      y[b].bsums[g] = static_cast<std::int16_t>(s);
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace accel::quant
