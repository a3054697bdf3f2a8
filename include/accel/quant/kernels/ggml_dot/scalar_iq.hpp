// The portable dot products of the non-linear and ternary types: IQ4_NL (its partner Q8_0),
// IQ4_XS and TQ2_0 (Q8_K). Their codes are looked up, not scaled: IQ4_NL's and IQ4_XS's nibbles
// index a 16-entry signed code book (io::iq4nl_value), TQ2_0's bit pairs are 0..3 for -1..2, the
// offset 1 leaving through the activation's block sum. The vector tiers are tested against these
// (ggml_dot/avx2_iq.hpp, ggml_dot/neon_iq.hpp); the NEON ones keep their float expressions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"

namespace accel::quant {

namespace detail {

/// IQ4_NL's / IQ4_XS's code book as one 16-byte array, from io::iq4nl_value: the vector kernels
/// load it whole into a table-lookup register.
alignas(16) inline constexpr std::array<std::int8_t, 16> iq4nl_book = [] {
  std::array<std::int8_t, 16> book{};
  for (unsigned i = 0; i < 16; ++i) book[i] = io::iq4nl_value(i);
  return book;
}();

/// The sum of a Q8_K block's 256 ints (its sixteen partial sums).
inline int q8_k_block_sum(const io::block_q8_k& a) noexcept {
  int s = 0;
  for (int g = 0; g < 16; ++g) s += a.bsums[g];
  return s;
}

}  // namespace detail

inline float dot_iq4_nl(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const auto blk = detail::load_block<io::block_iq4_nl>(w + b * sizeof(io::block_iq4_nl));
    const std::int8_t* a = x.q8_0[b].qs;
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      s += detail::iq4nl_book[blk.qs[j] & 0x0F] * a[j] + detail::iq4nl_book[blk.qs[j] >> 4] * a[j + 16];
    }
    acc += io::f16_scale(blk.d) * x.q8_0_scales[b] * static_cast<float>(s);
  }
  return acc;
}

inline float dot_iq4_xs(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto blk = detail::load_block<io::block_iq4_xs>(w + b * sizeof(io::block_iq4_xs));
    const auto& a = x.q8_k[b];
    int sumi = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const std::uint8_t* q = blk.qs + 16 * ib;
      const std::int8_t* ax = a.qs + 32 * ib;
      int s = 0;
      for (int j = 0; j < 16; ++j) s += detail::iq4nl_book[q[j] & 0x0F] * ax[j] + detail::iq4nl_book[q[j] >> 4] * ax[j + 16];
      sumi += (io::iq4_xs_scale(blk.scales_l, blk.scales_h, ib) - 32) * s;
    }
    acc += io::f16_scale(blk.d) * a.d * static_cast<float>(sumi);
  }
  return acc;
}

inline float dot_tq2_0(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // Byte m of 32-byte chunk c holds elements 128c + 32l + m in its bit pairs l = 0..3.
  float acc = 0;
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto blk = detail::load_block<io::block_tq2_0>(w + b * sizeof(io::block_tq2_0));
    const auto& a = x.q8_k[b];
    int s = 0;
    for (int c = 0; c < 2; ++c) {
      for (int l = 0; l < 4; ++l) {
        for (int m = 0; m < 32; ++m) s += ((blk.qs[32 * c + m] >> (2 * l)) & 3) * a.qs[128 * c + 32 * l + m];
      }
    }
    s -= detail::q8_k_block_sum(a);
    acc += io::f16_scale(blk.d) * a.d * static_cast<float>(s);
  }
  return acc;
}

}  // namespace accel::quant
