// The NEON dot products of IQ4_NL, IQ4_XS and TQ2_0 in the two tiers of ggml_dot/neon.hpp (SDOT
// or SMULL + SADALP): IQ4's nibbles become their signed values by one TBL into the code book, so
// the signed step takes them as they are; TQ2_0's bit pairs (0..3) by shifts and a mask, the offset
// of 1 taken out through the activation's block sum. Block by block in the scalar kernels' float
// expressions (ggml_dot/scalar_iq.hpp), so both tiers give their bits under -ffp-contract=off. The
// loops and the entry points are neon.hpp's: IQ4_NL runs as a 32-element type, IQ4_XS in eight
// groups of 32.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/neon.hpp"
#include "accel/quant/kernels/ggml_dot/scalar_iq.hpp"
#include "accel/quant/kernels/int8_dot_neon.hpp"

#if ACCEL_SIMD_ARM
#include <arm_neon.h>

namespace accel::quant {

namespace detail {

/// Sixteen packed bytes' values through the code book: the low nibbles' (elements 0-15), the high
/// nibbles' (16-31).
[[gnu::always_inline]] inline std::array<int8x16_t, 2> neon_iq4_values(int8x16_t book, const std::byte* q) noexcept {
  const uint8x16_t b = vld1q_u8(reinterpret_cast<const std::uint8_t*>(q));
  return {vqtbl1q_s8(book, vandq_u8(b, vdupq_n_u8(0x0F))), vqtbl1q_s8(book, vshrq_n_u8(b, 4))};
}

template <class Dot>
[[gnu::always_inline]] inline float dot_iq4_nl_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const int8x16_t book = vld1q_s8(iq4nl_book.data());
  const auto codes = [book](const std::byte* p) __attribute__((always_inline)) {
    return neon_iq4_values(book, p + offsetof(io::block_iq4_nl, qs));
  };
  return neon_dot32_blocks<io::block_iq4_nl, 0, Dot>(n, w, x, codes);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_iq4_xs_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const int8x16_t book = vld1q_s8(iq4nl_book.data());
  const auto term = [book](const std::byte* p, const io::block_q8_k& a) __attribute__((always_inline)) {
    std::uint16_t scales_h;
    std::memcpy(&scales_h, p + offsetof(io::block_iq4_xs, scales_h), 2);
    const auto* scales_l = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq4_xs, scales_l));
    // Group g: bytes 16g .. 16g + 15 of qs, elements 0-15 in the low nibbles, 16-31 in the high.
    const std::byte* qs = p + offsetof(io::block_iq4_xs, qs);
    const auto codes = [&](int c) __attribute__((always_inline)) {
      const auto [l0, h0] = neon_iq4_values(book, qs + 32 * c);
      const auto [l1, h1] = neon_iq4_values(book, qs + 32 * c + 16);
      return std::array{l0, h0, l1, h1};
    };
    const auto scale = [&](int g) __attribute__((always_inline)) {
      return io::iq4_xs_scale(scales_l, scales_h, g) - 32;
    };
    const int sumi = neon_eight_groups<Dot>(a.qs, codes, scale);
    return neon_scale_at(p + offsetof(io::block_iq4_xs, d)) * a.d * static_cast<float>(sumi);
  };
  return neon_super_blocks<io::block_iq4_xs>(n, w, x, term);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_tq2_0_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const auto term = [](const std::byte* p, const io::block_q8_k& a) __attribute__((always_inline)) {
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_tq2_0, qs));
    int32x4_t sums = vdupq_n_s32(0);
    // Lanes i = 0..15 of byte half h of chunk c: elements 128c + 32l + 16h + i in bit pair l.
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const int c = k / 2, h = k % 2;
      const std::array<uint8x16_t, 4> u = neon_bit_pairs(vld1q_u8(qs + 32 * c + 16 * h));
      const std::int8_t* ax = a.qs + 128 * c + 16 * h;
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) sums = Dot::dot(sums, vreinterpretq_s8_u8(u[l]), neon_s8(ax + 32 * l));
    }
    const int s = vaddvq_s32(sums) - q8_k_block_sum(a);
    return neon_scale_at(p + offsetof(io::block_tq2_0, d)) * a.d * static_cast<float>(s);
  };
  return neon_super_blocks<io::block_tq2_0>(n, w, x, term);
}

}  // namespace detail

ACCEL_GGML_DOT_NEON_TIERS(iq4_nl)
ACCEL_GGML_DOT_NEON_TIERS(iq4_xs)
ACCEL_GGML_DOT_NEON_TIERS(tq2_0)

}  // namespace accel::quant

#endif
