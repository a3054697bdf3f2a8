// The 16-bit integer form of the bitsandbytes 4-bit product, for tiers whose float table lookup
// is bound by shuffles (AVX2 looks a code up by two 8-entry permutes and a blend): the code book as
// 15-bit fixed point, split into low and high bytes for a byte shuffle (PSHUFB), and activation
// rows as 14-bit integers with one scale per run of 64 elements. The product of each run is then
// exact in 32-bit integers and converted once.
//
//   Int16CodeBook book(lut)                      lut[i] * book.scale rounded, |lut| <= 1 x 16384
//   quantize_activation_runs(x, rows, in, book, q, scales)   x in the tier's order
//
// Error: a weight's code is off by at most 2^-15 of its block's absmax, an activation by at most
// 2^-14 of its run's largest magnitude; each product is off by less than 1e-4 of
// |absmax| x max|x over the run|. bitsandbytes rounds both to bfloat16 (2^-9 of each value).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace accel::quant::detail {

/// Elements per activation scale: one 64-element run of a block of at least 64.
inline constexpr std::size_t int16_run = 64;
/// The largest activation code: four products of 14-bit activations and 15-bit codes, summed per
/// 32-bit lane, stay below 2^31.
inline constexpr float int16_activation_max = 8191.0f;

/// The 16-entry code book as 16-bit integers (lut[i] * scale, rounded), in byte planes.
struct Int16CodeBook {
  alignas(16) std::uint8_t low[16] = {};
  alignas(16) std::uint8_t high[16] = {};
  float scale = 16384.0f;  ///< codes per unit: 16384 / max |lut|
  explicit Int16CodeBook(const float* lut) {
    float peak = 0.0f;
    for (int i = 0; i < 16; ++i) peak = std::max(peak, std::fabs(lut[i]));
    scale = peak > 0.0f ? 16384.0f / peak : 1.0f;
    for (int i = 0; i < 16; ++i) {
      const auto v = static_cast<std::int16_t>(std::lrint(lut[i] * scale));
      low[i] = static_cast<std::uint8_t>(static_cast<std::uint16_t>(v) & 0xFF);
      high[i] = static_cast<std::uint8_t>(static_cast<std::uint16_t>(v) >> 8);
    }
  }
};

/// Rows of `in` floats (a multiple of int16_run), already in the order in which the tier decodes
/// weights, as 14-bit codes: each run of 64 scaled by its largest magnitude, rounded half away
/// from zero, and scales[row * runs + run] = the value of one code divided by book.scale, so that
/// a run's integer sum times it is the float product. Loops the compiler vectorizes (lrint costs
/// a call per element: 3 ns).
inline void quantize_activation_runs(const float* x, std::size_t rows, std::size_t in, const Int16CodeBook& book,
                                     std::int16_t* q, float* scales) noexcept {
  const std::size_t runs = in / int16_run;
  for (std::size_t t = 0; t < rows; ++t) {
    for (std::size_t c = 0; c < runs; ++c) {
      const float* xr = x + t * in + c * int16_run;
      std::int16_t* qr = q + t * in + c * int16_run;
      float peak = 0.0f;
      for (std::size_t i = 0; i < int16_run; ++i) peak = std::max(peak, std::fabs(xr[i]));
      const float inv = peak > 0.0f ? int16_activation_max / peak : 0.0f;
      for (std::size_t i = 0; i < int16_run; ++i) {
        const float v = xr[i] * inv;
        qr[i] = static_cast<std::int16_t>(static_cast<std::int32_t>(v + (v < 0.0f ? -0.5f : 0.5f)));
      }
      scales[t * runs + c] = peak / int16_activation_max / book.scale;
    }
  }
}

}  // namespace accel::quant::detail
