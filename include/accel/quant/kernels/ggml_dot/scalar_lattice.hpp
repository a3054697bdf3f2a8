// The portable dot products of the lattice types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S against
// Q8_K, and the tables every tier reads:
//
//   iq2xxs_points[256]    IQ2_XXS's grid points, coordinate j in byte j (8, 25 or 43)
//   iq2xs_points[512]     IQ2_XS's, the same book
//   iq2s_points[1024]     IQ2_S's, the same book
//   iq3xxs_points[256]    IQ3_XXS's, coordinate j in byte j (4, 12, .., 62)
//   iq3s_points[512]      IQ3_S's, coordinate j in byte j (1, 3, .., 15)
//   iq2_sign_bytes[128]   a 7-bit sign index's eight signs as bytes, 0x01 or 0xFF (-1)
//   dot_iq2_xxs, dot_iq2_xs, dot_iq2_s, dot_iq3_xxs, dot_iq3_s (scalar, n, w, x)
//
// A weight is its point's coordinate times a sub-block scale, signed, so a block's dot product
// is exact in integers, as ggml computes it: IQ2_XS and IQ2_S scale every 16 weights by 2s + 1
// and the whole by d / 8 (IQ2_S with 10-bit indices and explicit sign bytes, as IQ3_S), IQ2_XXS every 32 by 2s + 1 and the whole by d / 8, IQ3_XXS every 32 by 2s + 1
// and the whole by d / 4, IQ3_S every 32 by 2s + 1 and the whole by d. The XXS types keep each
// group's four sign indices (7 bits each) and its scale (the top 4 bits) in one 32-bit word.
// The points are io/ggml_iq_grids.hpp's
// (books and grids as the dequantizer reads them) expanded at compile time into one load a point.
// The vector tiers (ggml_dot/avx2_lattice.hpp, ggml_dot/neon_lattice.hpp) are tested against these.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/io/ggml_iq_grids.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/scalar.hpp"

namespace accel::quant {

namespace detail {

/// A grid's points with each coordinate's book value in its own byte, least significant first.
template <class Word, int Bits, std::size_t N, class Book>
constexpr std::array<Word, N> lattice_points(const std::array<std::uint16_t, N>& grid, const Book& book) noexcept {
  std::array<Word, N> out{};
  for (std::size_t p = 0; p < N; ++p) {
    for (unsigned j = 0; j < sizeof(Word); ++j) out[p] |= Word{book[io::detail::iq_code<Bits>(grid[p], static_cast<int>(j))]} << (8 * j);
  }
  return out;
}

alignas(64) inline constexpr auto iq2xxs_points = lattice_points<std::uint64_t, 2>(io::ggml_iq::iq2xxs_grid, io::ggml_iq::iq2_book);
alignas(64) inline constexpr auto iq2xs_points = lattice_points<std::uint64_t, 2>(io::ggml_iq::iq2xs_grid, io::ggml_iq::iq2_book);
alignas(64) inline constexpr auto iq2s_points = lattice_points<std::uint64_t, 2>(io::ggml_iq::iq2s_grid, io::ggml_iq::iq2_book);
alignas(64) inline constexpr auto iq3xxs_points = lattice_points<std::uint32_t, 3>(io::ggml_iq::iq3xxs_grid, io::ggml_iq::iq3xxs_book);
alignas(64) inline constexpr auto iq3s_points = lattice_points<std::uint32_t, 3>(io::ggml_iq::iq3s_grid, io::ggml_iq::iq3s_book);

/// The signs of io::iq2_signs(i) as multipliers, byte j 0xFF (-1) where weight j is negative, else 1.
alignas(64) inline constexpr auto iq2_sign_bytes = [] {
  std::array<std::uint64_t, 128> out{};
  for (unsigned i = 0; i < 128; ++i) {
    for (unsigned j = 0; j < 8; ++j) out[i] |= std::uint64_t{((io::iq2_signs(i) >> j) & 1u) ? 0xFFu : 0x01u} << (8 * j);
  }
  return out;
}();

/// Byte j of a point or sign word as a signed value.
template <class Word>
constexpr int lattice_byte(Word w, int j) noexcept {
  return static_cast<std::int8_t>(static_cast<std::uint8_t>(w >> (8 * j)));
}

/// Sub-block g's four-bit scale of a block's packed scales (low nibble first), as 2s + 1.
inline int lattice_scale(const std::uint8_t* scales, int g) noexcept { return 2 * ((scales[g / 2] >> (4 * (g % 2))) & 0x0F) + 1; }

/// Where group g's word of an XXS block lies in its qs: sign index l in bits 7l .. 7l + 6, the
/// scale in bits 28..31 (IQ2_XXS: after the group's four index bytes; IQ3_XXS: after all 64).
template <class B>
constexpr int xxs_word_at(int g) noexcept {
  return std::is_same_v<B, io::block_iq2_xxs> ? 8 * g + 4 : 64 + 4 * g;
}
template <class B>
inline std::uint32_t xxs_group_word(const B& b, int g) noexcept { return io::load_le32(b.qs + xxs_word_at<B>(g)); }

/// A block's signed codes (u) and group scales (2s + 1): group g's points are indexed by bytes
/// 8g .. of qs (IQ2_XXS: four of 8 coordinates, IQ3_XXS: eight of 4), sign index l of its word
/// covering elements 8l .. 8l + 7.
template <class Word, class B>
inline void xxs_codes(const B& blk, const std::array<Word, 256>& points, std::int8_t* u, int* scale) noexcept {
  constexpr int per_point = sizeof(Word);
  for (int g = 0; g < 8; ++g) {
    const std::uint32_t word = xxs_group_word(blk, g);
    scale[g] = 2 * static_cast<int>(word >> 28) + 1;
    for (int e = 0; e < 32; ++e) {
      const Word point = points[blk.qs[8 * g + e / per_point]];
      const std::uint64_t sign = iq2_sign_bytes[(word >> (7 * (e / 8))) & 127];
      u[32 * g + e] = static_cast<std::int8_t>(lattice_byte(point, e % per_point) * lattice_byte(sign, e % 8));
    }
  }
}

}  // namespace detail

inline float dot_iq2_xxs(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return detail::sum_blocks<io::block_iq2_xxs, 256>(n, w, [&](const io::block_iq2_xxs& blk, std::size_t b) {
    std::int8_t u[256];
    int scale[8];
    detail::xxs_codes(blk, detail::iq2xxs_points, u, scale);
    return 0.125f * detail::k_term<32, 0>(blk, x.q8_k[b], [&](int g, int l) { return u[32 * g + l]; },
                                          [&](int g) { return scale[g]; });
  });
}

inline float dot_iq2_s(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return detail::sum_blocks<io::block_iq2_s, 256>(n, w, [&](const io::block_iq2_s& blk, std::size_t b) {
    std::int8_t u[256];
    // Point i: the low 8 index bits in qs[i], two more in bits 2 (i % 4) of qh[i / 4], its signs
    // in qs[32 + i].
    for (int i = 0; i < 32; ++i) {
      const std::uint64_t point = detail::iq2s_points[blk.qs[i] | (((blk.qh[i / 4] >> (2 * (i % 4))) & 3u) << 8)];
      const unsigned signs = blk.qs[32 + i];
      for (int j = 0; j < 8; ++j) {
        const int v = detail::lattice_byte(point, j);
        u[8 * i + j] = static_cast<std::int8_t>((signs >> j) & 1u ? -v : v);
      }
    }
    return 0.125f * detail::k_term<16, 0>(blk, x.q8_k[b], [&](int g, int l) { return u[16 * g + l]; },
                                          [&](int g) { return detail::lattice_scale(blk.scales, g); });
  });
}

inline float dot_iq3_xxs(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return detail::sum_blocks<io::block_iq3_xxs, 256>(n, w, [&](const io::block_iq3_xxs& blk, std::size_t b) {
    std::int8_t u[256];
    int scale[8];
    detail::xxs_codes(blk, detail::iq3xxs_points, u, scale);
    return 0.25f * detail::k_term<32, 0>(blk, x.q8_k[b], [&](int g, int l) { return u[32 * g + l]; },
                                         [&](int g) { return scale[g]; });
  });
}

inline float dot_iq2_xs(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return detail::sum_blocks<io::block_iq2_xs, 256>(n, w, [&](const io::block_iq2_xs& blk, std::size_t b) {
    std::int8_t u[256];
    for (int i = 0; i < 32; ++i) {
      const std::uint64_t point = detail::iq2xs_points[blk.qs[i] & 511], sign = detail::iq2_sign_bytes[blk.qs[i] >> 9];
      for (int j = 0; j < 8; ++j) u[8 * i + j] = static_cast<std::int8_t>(detail::lattice_byte(point, j) * detail::lattice_byte(sign, j));
    }
    return 0.125f * detail::k_term<16, 0>(blk, x.q8_k[b], [&](int g, int l) { return u[16 * g + l]; },
                                          [&](int g) { return detail::lattice_scale(blk.scales, g); });
  });
}

inline float dot_iq3_s(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return detail::sum_blocks<io::block_iq3_s, 256>(n, w, [&](const io::block_iq3_s& blk, std::size_t b) {
    std::int8_t u[256];
    // Point k of group g: a ninth index bit in bit k of qh[g], its signs in nibble k % 2 of
    // signs[4g + k / 2].
    for (int g = 0; g < 8; ++g) {
      for (int k = 0; k < 8; ++k) {
        const std::uint32_t point = detail::iq3s_points[blk.qs[8 * g + k] | (((blk.qh[g] >> k) & 1u) << 8)];
        const unsigned signs = blk.signs[4 * g + k / 2] >> (4 * (k % 2));
        for (int j = 0; j < 4; ++j) {
          const int v = detail::lattice_byte(point, j);
          u[32 * g + 4 * k + j] = static_cast<std::int8_t>((signs >> j) & 1u ? -v : v);
        }
      }
    }
    return detail::k_term<32, 0>(blk, x.q8_k[b], [&](int g, int l) { return u[32 * g + l]; },
                                 [&](int g) { return detail::lattice_scale(blk.scales, g); });
  });
}

}  // namespace accel::quant
