// The portable dot products of the non-linear and ternary types: IQ4_NL (its partner Q8_0),
// IQ4_XS and TQ2_0 (Q8_K), through ggml_dot/scalar.hpp's walks. Their codes are looked up, not
// scaled: IQ4_NL's and IQ4_XS's nibbles index a 16-entry signed code book (io::iq4nl_value),
// TQ2_0's bit pairs (laid out as Q2_K's) are 0..3 for -1..2, the offset 1 leaving through the
// activation's sums. The vector tiers are tested against these (ggml_dot/avx2_iq.hpp,
// ggml_dot/neon_iq.hpp); the NEON ones keep their float expressions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/scalar.hpp"

namespace accel::quant {

namespace detail {

/// IQ4_NL's / IQ4_XS's code book as one 16-byte array, from io::iq4nl_value: the vector kernels
/// load it whole into a table-lookup register.
alignas(16) inline constexpr std::array<std::int8_t, 16> iq4nl_book = [] {
  std::array<std::int8_t, 16> book{};
  for (unsigned i = 0; i < 16; ++i) book[i] = io::iq4nl_value(i);
  return book;
}();

/// A nibble's value in that book, as a callable the scalar kernels' code readers inline.
inline constexpr auto iq4nl_lookup = [](int i) noexcept { return int{iq4nl_book[i]}; };

/// The sum of a Q8_K block's 256 ints (its sixteen partial sums): TQ2_0's offset in one term, for
/// the NEON kernel, which sums a block's codes whole.
inline int q8_k_block_sum(const io::block_q8_k& a) noexcept {
  int s = 0;
  for (int g = 0; g < 16; ++g) s += a.bsums[g];
  return s;
}

}  // namespace detail

inline float dot_iq4_nl(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const auto codes = [](const io::block_iq4_nl& blk, int j) { return detail::nibble_codes(blk.qs, j, detail::iq4nl_lookup); };
  return detail::dot_32<io::block_iq4_nl>(n, w, x, codes);
}

inline float dot_iq4_xs(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // Eight groups of 32, each packed as an IQ4_NL block's codes in 16 bytes; six-bit scales less 32.
  return detail::sum_blocks<io::block_iq4_xs, 256>(n, w, [&](const io::block_iq4_xs& blk, std::size_t b) {
    std::int8_t u[256];
    for (int g = 0; g < 8; ++g) {
      for (int j = 0; j < 16; ++j) {
        std::tie(u[32 * g + j], u[32 * g + j + 16]) = detail::nibble_codes(blk.qs + 16 * g, j, detail::iq4nl_lookup);
      }
    }
    return detail::k_term<32, 0>(blk, x.q8_k[b], [&](int g, int l) { return u[32 * g + l]; },
                                 [&](int g) { return io::iq4_xs_scale(blk.scales_l, blk.scales_h, g) - 32; });
  });
}

inline float dot_tq2_0(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // Q2_K's codes with every group's scale 1 and the offset 1.
  return detail::sum_blocks<io::block_tq2_0, 256>(n, w, [&](const io::block_tq2_0& blk, std::size_t b) {
    return detail::k_term<16, 1>(blk, x.q8_k[b], [&](int g, int l) { return detail::k2_code(blk.qs, g, l); },
                                 [](int) { return 1; });
  });
}

}  // namespace accel::quant
