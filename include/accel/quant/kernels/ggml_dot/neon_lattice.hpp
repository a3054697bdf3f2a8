// The NEON dot products of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S in the two tiers of ggml_dot/neon.hpp
// (SDOT or SMULL + SADALP). Sixteen weights a step: points from the tables of
// ggml_dot/scalar_lattice.hpp (two 64-bit IQ2 points, four 32-bit IQ3 points), signed in the
// register (IQ2_XXS, IQ2_XS and IQ3_XXS by the sign table's bytes, a multiply by +-1; IQ3_S by
// testing each lane's bit of its sign bytes and negating), then one signed step against the
// activation, weighed by the group's scale. Block by
// block in the scalar kernels' float expressions, so both tiers give their bits under
// -ffp-contract=off.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/neon.hpp"
#include "accel/quant/kernels/ggml_dot/scalar_lattice.hpp"
#include "accel/quant/kernels/int8_dot_neon.hpp"

#if ACCEL_SIMD_ARM
#include <arm_neon.h>

namespace accel::quant {

namespace detail {

/// Two 64-bit table words as one register, the first in the low half.
inline int8x16_t neon_two_words(std::uint64_t lo, std::uint64_t hi) noexcept {
  return vreinterpretq_s8_u64(vcombine_u64(vcreate_u64(lo), vcreate_u64(hi)));
}

/// The IQ2_XS / IQ2_S super-block: sixteen steps of two points, step h's signed codes from
/// `codes(h)` against elements 16h .. 16h + 15, weighed by scale h (one per 16 weights).
template <class Dot, class Codes>
[[gnu::always_inline]] inline int32x4_t iq2_steps_neon(const std::byte* scales_at, const io::block_q8_k& a, Codes codes) noexcept {
  const auto* scales = reinterpret_cast<const std::uint8_t*>(scales_at);
  int32x4_t sums = vdupq_n_s32(0);
#pragma GCC unroll 4
  for (int h = 0; h < 16; ++h) {
    const int32x4_t s = Dot::dot(vdupq_n_s32(0), codes(h), neon_s8(a.qs + 16 * h));
    sums = vmlaq_n_s32(sums, s, lattice_scale(scales, h));
  }
  return sums;
}

template <class Dot>
[[gnu::always_inline]] inline float dot_iq2_xs_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const auto term = [](const std::byte* p, const io::block_q8_k& a) __attribute__((always_inline)) {
    std::uint16_t q[32];
    std::memcpy(q, p + offsetof(io::block_iq2_xs, qs), sizeof q);
    const int32x4_t sums = iq2_steps_neon<Dot>(p + offsetof(io::block_iq2_xs, scales), a, [&](int h) __attribute__((always_inline)) {
      const int8x16_t coords = neon_two_words(iq2xs_points[q[2 * h] & 511], iq2xs_points[q[2 * h + 1] & 511]);
      return vmulq_s8(coords, neon_two_words(iq2_sign_bytes[q[2 * h] >> 9], iq2_sign_bytes[q[2 * h + 1] >> 9]));
    });
    return 0.125f * (neon_scale_at(p + offsetof(io::block_iq2_xs, d)) * a.d * static_cast<float>(vaddvq_s32(sums)));
  };
  return neon_super_blocks<io::block_iq2_xs>(n, w, x, term);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_iq2_s_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const auto term = [](const std::byte* p, const io::block_q8_k& a) __attribute__((always_inline)) {
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq2_s, qs));
    const auto* qh = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq2_s, qh));
    const uint8x16_t bits = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ULL));
    // Point i: the low 8 index bits in qs[i], two more in bits 2 (i % 4) of qh[i / 4], its signs in qs[32 + i].
    const auto index = [&](int i) { return qs[i] | (((qh[i / 4] >> (2 * (i % 4))) & 3u) << 8); };
    const int32x4_t sums = iq2_steps_neon<Dot>(p + offsetof(io::block_iq2_s, scales), a, [&](int h) __attribute__((always_inline)) {
      const int8x16_t coords = neon_two_words(iq2s_points[index(2 * h)], iq2s_points[index(2 * h + 1)]);
      const uint8x16_t spread = vcombine_u8(vdup_n_u8(qs[32 + 2 * h]), vdup_n_u8(qs[32 + 2 * h + 1]));
      const int8x16_t negative = vreinterpretq_s8_u8(vtstq_u8(spread, bits));
      return vsubq_s8(veorq_s8(coords, negative), negative);
    });
    return 0.125f * (neon_scale_at(p + offsetof(io::block_iq2_s, d)) * a.d * static_cast<float>(vaddvq_s32(sums)));
  };
  return neon_super_blocks<io::block_iq2_s>(n, w, x, term);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_iq3_s_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const auto term = [](const std::byte* p, const io::block_q8_k& a) __attribute__((always_inline)) {
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq3_s, qs));
    const auto* qh = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq3_s, qh));
    const auto* sg = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq3_s, signs));
    const auto* scales = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq3_s, scales));
    const uint8x16_t bits = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ULL));
    int32x4_t sums = vdupq_n_s32(0);
#pragma GCC unroll 2
    for (int g = 0; g < 8; ++g) {
      int32x4_t s = vdupq_n_s32(0);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {  // points 4h .. 4h + 3 of group g, sign bytes 2h, 2h + 1
        std::uint32_t pt[4];
        for (int k = 0; k < 4; ++k) {
          const int i = 4 * h + k;
          pt[k] = iq3s_points[qs[8 * g + i] | (((qh[g] >> i) & 1u) << 8)];
        }
        const int8x16_t coords = vreinterpretq_s8_u32(vld1q_u32(pt));
        const uint8x16_t spread = vcombine_u8(vdup_n_u8(sg[4 * g + 2 * h]), vdup_n_u8(sg[4 * g + 2 * h + 1]));
        const int8x16_t negative = vreinterpretq_s8_u8(vtstq_u8(spread, bits));
        const int8x16_t v = vsubq_s8(veorq_s8(coords, negative), negative);
        s = Dot::dot(s, v, neon_s8(a.qs + 32 * g + 16 * h));
      }
      sums = vmlaq_n_s32(sums, s, lattice_scale(scales, g));
    }
    return neon_scale_at(p + offsetof(io::block_iq3_s, d)) * a.d * static_cast<float>(vaddvq_s32(sums));
  };
  return neon_super_blocks<io::block_iq3_s>(n, w, x, term);
}

/// IQ2_XXS (Points iq2xxs_points, two points a step) or IQ3_XXS (iq3xxs_points, four): group g's
/// word (sign indices and scale) read once, then two steps of sixteen.
template <class Dot, class B, class Word>
[[gnu::always_inline]] inline float dot_xxs_neon(std::size_t n, const std::byte* w, const ActivationRow& x,
                                                 const std::array<Word, 256>& points, float factor) noexcept {
  const auto term = [&](const std::byte* p, const io::block_q8_k& a) __attribute__((always_inline)) {
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(B, qs));
    constexpr int per_step = 16 / sizeof(Word);
    int32x4_t sums = vdupq_n_s32(0);
#pragma GCC unroll 2
    for (int g = 0; g < 8; ++g) {
      const std::uint32_t word = io::load_le32(qs + xxs_word_at<B>(g));
      int32x4_t s = vdupq_n_s32(0);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        Word pt[per_step];
        for (int k = 0; k < per_step; ++k) pt[k] = points[qs[8 * g + per_step * h + k]];
        int8x16_t coords;
        std::memcpy(&coords, pt, 16);
        const int8x16_t signs = neon_two_words(iq2_sign_bytes[(word >> (14 * h)) & 127], iq2_sign_bytes[(word >> (14 * h + 7)) & 127]);
        s = Dot::dot(s, vmulq_s8(coords, signs), neon_s8(a.qs + 32 * g + 16 * h));
      }
      sums = vmlaq_n_s32(sums, s, 2 * static_cast<int>(word >> 28) + 1);
    }
    return factor * (neon_scale_at(p + offsetof(B, d)) * a.d * static_cast<float>(vaddvq_s32(sums)));
  };
  return neon_super_blocks<B>(n, w, x, term);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_iq2_xxs_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return dot_xxs_neon<Dot, io::block_iq2_xxs>(n, w, x, iq2xxs_points, 0.125f);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_iq3_xxs_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return dot_xxs_neon<Dot, io::block_iq3_xxs>(n, w, x, iq3xxs_points, 0.25f);
}

}  // namespace detail

ACCEL_GGML_DOT_NEON_TIERS(iq2_xxs)
ACCEL_GGML_DOT_NEON_TIERS(iq3_xxs)
ACCEL_GGML_DOT_NEON_TIERS(iq2_xs)
ACCEL_GGML_DOT_NEON_TIERS(iq2_s)
ACCEL_GGML_DOT_NEON_TIERS(iq3_s)

}  // namespace accel::quant

#endif
