// The portable ggml dot products: every CPU, and the reference the vector tiers are tested
// against (their integer sums are exact, so they differ only in the order of the float sums).
// Each kernel names how a block's codes and scales are read; one walk over the blocks
// (detail::sum_blocks) and, within a block, one exact integer sum per form serve them all: the
// 32-element types' (detail::dot_32) and the K types' groups, with an offset (detail::k_term) or
// a min (detail::k_min_term).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"

namespace accel::quant {

namespace detail {

/// The float sum of term(block b, b) over the n / K blocks of type B at w, in block order: every
/// scalar kernel's accumulation, which the vector tiers' float expressions follow block by block.
template <class B, std::size_t K, class Term>
inline float sum_blocks(std::size_t n, const std::byte* w, Term term) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / K; ++b) acc += term(load_block<B>(w + b * sizeof(B)), b);
  return acc;
}

/// The codes of elements j and j + 16 of a 32-element block with four-bit codes, byte j's low and
/// high nibbles, each through `value` (the identity, or a code book).
template <class Value = std::identity>
inline std::pair<int, int> nibble_codes(const std::uint8_t* qs, int j, Value value = {}) noexcept {
  return {value(qs[j] & 0x0F), value(qs[j] >> 4)};
}

/// The five-bit codes (0..31) of elements j and j + 16 of a Q5_0 / Q5_1 block: the nibbles, bit j
/// of qh above element j.
template <class B>
inline std::pair<int, int> q5_codes(const B& blk, int j) noexcept {
  const std::uint32_t h = io::load_le32(blk.qh);
  const auto [lo, hi] = nibble_codes(blk.qs, j);
  return {lo | static_cast<int>(((h >> j) & 1) << 4), hi | static_cast<int>(((h >> (j + 16)) & 1) << 4)};
}

// The 32-element types meet their Q8_0 partner block by block. Codes with an offset are taken
// unsigned (Q4_0's value + 8, Q5_0's + 16); the offset and the min (Q4_1, Q5_1) meet the
// activation through its block sum, once per block, as ggml's Q8_1 partner carries d x sum for
// Q4_1 / Q5_1.

/// A row of 32-element blocks B against its Q8_0 partner: block b's exact dot s of its codes with
/// the activation (codes(blk, j) gives those of elements j and j + 16, which every such type packs
/// in one byte), then d dx (s - offset x the block sum), or for a type with a min (B::m)
/// d dx s + m (dx x the block sum).
template <class B, int offset = 0, class Codes>
inline float dot_32(std::size_t n, const std::byte* w, const ActivationRow& x, Codes codes) noexcept {
  return sum_blocks<B, 32>(n, w, [&](const B& blk, std::size_t b) {
    const std::int8_t* a = x.q8_0[b].qs;
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      const auto [lo, hi] = codes(blk, j);
      s += lo * a[j] + hi * a[j + 16];
    }
    const float dx = x.q8_0_scales[b];
    if constexpr (requires { B::m; }) {
      static_assert(offset == 0, "a type with a min has no offset");
      return io::f16_scale(blk.d) * dx * static_cast<float>(s) +
             io::f16_scale(blk.m) * (dx * static_cast<float>(x.q8_0_sums[b]));
    } else {
      if constexpr (offset != 0) s -= offset * x.q8_0_sums[b];
      return io::f16_scale(blk.d) * dx * static_cast<float>(s);
    }
  });
}

/// A Q8_K super-block's groups of G elements (256 / G of them), in order: group g's exact dot s
/// of code(g, l) (element l's code) with the activation's ints, and asum, the sum of those ints
/// (from the block's 16-element sums), go to fold(g, s, asum).
template <int G, class Code, class Fold>
inline void k_groups(const io::block_q8_k& a, Code code, Fold fold) noexcept {
  for (int g = 0; g < 256 / G; ++g) {
    int s = 0, asum = 0;
    for (int l = 0; l < G; ++l) s += code(g, l) * a.qs[G * g + l];
    for (int k = 0; k < G / 16; ++k) asum += a.bsums[G / 16 * g + k];
    fold(g, s, asum);
  }
}

/// A super-block whose groups have signed scales, scale(g), and codes `offset` above their values:
/// a.d d x the sum over groups of scale(g) (s - offset asum), the offset leaving through the
/// activation's sums.
template <int G, int offset, class B, class Code, class Scale>
inline float k_term(const B& blk, const io::block_q8_k& a, Code code, Scale scale) noexcept {
  int sumi = 0;
  k_groups<G>(a, code, [&](int g, int s, int asum) { sumi += scale(g) * (s - offset * asum); });
  return a.d * io::f16_scale(blk.d) * static_cast<float>(sumi);
}

/// A super-block whose groups have an unsigned scale and a min, scale_min(g) = {sc, mn} (Q2_K,
/// Q4_K, Q5_K): a.d (d x the sum of sc s, less dmin x the sum of mn asum).
template <int G, class B, class Code, class ScaleMin>
inline float k_min_term(const B& blk, const io::block_q8_k& a, Code code, ScaleMin scale_min) noexcept {
  int sumi = 0, summ = 0;
  k_groups<G>(a, code, [&](int g, int s, int asum) {
    const auto [sc, mn] = scale_min(g);
    sumi += sc * s;
    summ += mn * asum;
  });
  return a.d * (io::f16_scale(blk.d) * static_cast<float>(sumi) - io::f16_scale(blk.dmin) * static_cast<float>(summ));
}

/// Q4_K, and Q5_K (B with qh): eight groups of 32, group g in the nibbles of bytes 32 (g / 2) ..
/// 32 (g / 2) + 31, low for even g; Q5_K's fifth bit of element 32g + j is bit g of qh[j].
template <class B>
inline float dot_k4(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return sum_blocks<B, 256>(n, w, [&](const B& blk, std::size_t b) {
    std::uint8_t sc[8], mn[8];
    io::k4_scales_mins(blk.scales, sc, mn);
    const auto code = [&](int g, int j) {
      const int low = (blk.qs[32 * (g / 2) + j] >> (4 * (g % 2))) & 0x0F;
      if constexpr (requires { B::qh; }) return low | (((blk.qh[j] >> g) & 1) << 4);
      else return low;
    };
    return k_min_term<32>(blk, x.q8_k[b], code, [&](int g) { return std::pair<int, int>(sc[g], mn[g]); });
  });
}

// The K types of 16-element groups (Q2_K, Q3_K, and TQ2_0 in ggml_dot/scalar_iq.hpp) share
// Q6_K's code layout: 32-byte chunk c holds elements 128c .. 128c + 127, bit pair j of byte l
// (l < 32) being element 128c + 32j + l, so group g (16 elements) starts at byte
// 32 (g / 8) + 16 (g % 2) with shift 2 ((g % 8) / 2).

/// Element l's bit pair (0..3) of 16-element group g in that layout.
inline int k2_code(const std::uint8_t* qs, int g, int l) noexcept {
  return (qs[32 * (g / 8) + 16 * (g % 2) + l] >> (2 * ((g % 8) / 2))) & 3;
}

/// The 6-bit values (0..63) of a Q6_K block in element order.
inline void q6_k_values(const io::block_q6_k& b, std::uint8_t* u) noexcept {
  for (int n = 0; n < 2; ++n) {
    const std::uint8_t* ql = b.ql + 64 * n;
    const std::uint8_t* qh = b.qh + 32 * n;
    for (int l = 0; l < 32; ++l) {
      u[128 * n + l] = static_cast<std::uint8_t>((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
      u[128 * n + l + 32] = static_cast<std::uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
      u[128 * n + l + 64] = static_cast<std::uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      u[128 * n + l + 96] = static_cast<std::uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

/// A Q3_K block's sixteen six-bit scales less 32 (-32..31): low nibbles in bytes 0-7 (scales
/// 0-7, then their high nibbles 8-15), the high bit pairs in bytes 8-11 (pair k of byte 8 + i is
/// scale 4k + i), a word of four scales at a time.
inline void q3_k_scales(const std::uint8_t* s, std::int8_t out[16]) noexcept {
  static_assert(std::endian::native == std::endian::little, "the words hold bytes 0..3 low to high");
  constexpr std::uint32_t low4 = 0x0f0f0f0f, low2 = 0x03030303;
  std::uint32_t q[3];
  std::memcpy(q, s, 12);
  const std::uint32_t words[4] = {(q[0] & low4) | ((q[2] & low2) << 4), (q[1] & low4) | (((q[2] >> 2) & low2) << 4),
                                  ((q[0] >> 4) & low4) | (((q[2] >> 4) & low2) << 4),
                                  ((q[1] >> 4) & low4) | (((q[2] >> 6) & low2) << 4)};
  std::uint8_t u[16];
  std::memcpy(u, words, 16);
  for (int i = 0; i < 16; ++i) out[i] = static_cast<std::int8_t>(u[i] - 32);
}

}  // namespace detail

inline float dot_q8_0(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const auto codes = [](const io::block_q8_0& blk, int j) { return std::pair<int, int>(blk.qs[j], blk.qs[j + 16]); };
  return detail::dot_32<io::block_q8_0>(n, w, x, codes);
}

inline float dot_q4_0(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return detail::dot_32<io::block_q4_0, 8>(n, w, x, [](const auto& blk, int j) { return detail::nibble_codes(blk.qs, j); });
}

inline float dot_q4_1(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return detail::dot_32<io::block_q4_1>(n, w, x, [](const auto& blk, int j) { return detail::nibble_codes(blk.qs, j); });
}

inline float dot_q5_0(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return detail::dot_32<io::block_q5_0, 16>(n, w, x, [](const auto& blk, int j) { return detail::q5_codes(blk, j); });
}

inline float dot_q5_1(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return detail::dot_32<io::block_q5_1>(n, w, x, [](const auto& blk, int j) { return detail::q5_codes(blk, j); });
}

inline float dot_q4_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return detail::dot_k4<io::block_q4_k>(n, w, x);
}

inline float dot_q5_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return detail::dot_k4<io::block_q5_k>(n, w, x);
}

inline float dot_q6_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // Values 0..63, 32 above the signed ones: the offset leaves through the activation's sums.
  return detail::sum_blocks<io::block_q6_k, 256>(n, w, [&](const io::block_q6_k& blk, std::size_t b) {
    std::uint8_t u[256];
    detail::q6_k_values(blk, u);
    return detail::k_term<16, 32>(blk, x.q8_k[b], [&](int g, int l) { return u[16 * g + l]; },
                                  [&](int g) { return blk.scales[g]; });
  });
}

inline float dot_q2_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // Each group's four-bit scale in the low nibble of its byte, its min in the high one.
  return detail::sum_blocks<io::block_q2_k, 256>(n, w, [&](const io::block_q2_k& blk, std::size_t b) {
    return detail::k_min_term<16>(blk, x.q8_k[b], [&](int g, int l) { return detail::k2_code(blk.qs, g, l); },
                                  [&](int g) { return std::pair<int, int>(blk.scales[g] & 0x0F, blk.scales[g] >> 4); });
  });
}

inline float dot_q3_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // A code is its two low bits plus 4 x its hmask bit (0..7; bit g / 2 of hmask[16 (g % 2) + l]),
  // the value less 4: the offset leaves through the activation's 16-element sums, as Q6_K's 32 does.
  return detail::sum_blocks<io::block_q3_k, 256>(n, w, [&](const io::block_q3_k& blk, std::size_t b) {
    std::int8_t sc[16];
    detail::q3_k_scales(blk.scales, sc);
    const auto code = [&](int g, int l) {
      return detail::k2_code(blk.qs, g, l) | (((blk.hmask[16 * (g % 2) + l] >> (g / 2)) & 1) << 2);
    };
    return detail::k_term<16, 4>(blk, x.q8_k[b], code, [&](int g) { return sc[g]; });
  });
}

}  // namespace accel::quant
