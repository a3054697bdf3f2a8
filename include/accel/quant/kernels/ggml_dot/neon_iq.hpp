// The NEON dot products of IQ4_NL, IQ4_XS and TQ2_0 in the two tiers of ggml_dot/neon.hpp (SDOT
// or SMULL + SADALP): IQ4's nibbles become their signed values by one TBL into the code book, so
// the signed step takes them as they are; TQ2_0's bit pairs (0..3) by shifts and a mask, the offset
// of 1 taken out through the activation's block sum. Block by block in the scalar kernels' float
// expressions (ggml_dot/scalar_iq.hpp), so both tiers give their bits under -ffp-contract=off.
#pragma once

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
inline void neon_iq4_values(int8x16_t book, const std::byte* q, int8x16_t& lo, int8x16_t& hi) noexcept {
  const uint8x16_t b = vld1q_u8(reinterpret_cast<const std::uint8_t*>(q));
  lo = vqtbl1q_s8(book, vandq_u8(b, vdupq_n_u8(0x0F)));
  hi = vqtbl1q_s8(book, vshrq_n_u8(b, 4));
}

template <class Dot>
[[gnu::always_inline]] inline float dot_iq4_nl_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const int8x16_t book = vld1q_s8(iq4nl_book.data());
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const std::byte* p = w + b * sizeof(io::block_iq4_nl);
    int8x16_t lo, hi;
    neon_iq4_values(book, p + offsetof(io::block_iq4_nl, qs), lo, hi);
    const std::int8_t* a = x.q8_0[b].qs;
    const int32x4_t s = Dot::dot(Dot::dot(vdupq_n_s32(0), lo, neon_s8(a)), hi, neon_s8(a + 16));
    acc += neon_scale_at(p + offsetof(io::block_iq4_nl, d)) * x.q8_0_scales[b] * static_cast<float>(vaddvq_s32(s));
  }
  return acc;
}

template <class Dot>
[[gnu::always_inline]] inline float dot_iq4_xs_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const int8x16_t book = vld1q_s8(iq4nl_book.data());
  float acc = 0;
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(io::block_iq4_xs);
    const auto& a = x.q8_k[b];
    std::uint16_t scales_h;
    std::memcpy(&scales_h, p + offsetof(io::block_iq4_xs, scales_h), 2);
    const auto* scales_l = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq4_xs, scales_l));
    int32x4_t sums = vdupq_n_s32(0);
#pragma GCC unroll 8
    for (int ib = 0; ib < 8; ++ib) {
      int8x16_t lo, hi;
      neon_iq4_values(book, p + offsetof(io::block_iq4_xs, qs) + 16 * ib, lo, hi);
      const std::int8_t* ax = a.qs + 32 * ib;
      const int32x4_t s = Dot::dot(Dot::dot(vdupq_n_s32(0), lo, neon_s8(ax)), hi, neon_s8(ax + 16));
      sums = vmlaq_n_s32(sums, s, io::iq4_xs_scale(scales_l, scales_h, ib) - 32);
    }
    acc += neon_scale_at(p + offsetof(io::block_iq4_xs, d)) * a.d * static_cast<float>(vaddvq_s32(sums));
  }
  return acc;
}

template <class Dot>
[[gnu::always_inline]] inline float dot_tq2_0_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const uint8x16_t three = vdupq_n_u8(3);
  float acc = 0;
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(io::block_tq2_0);
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_tq2_0, qs));
    const auto& a = x.q8_k[b];
    int32x4_t sums = vdupq_n_s32(0);
    // Lanes i = 0..15 of byte half h of chunk c: elements 128c + 32l + 16h + i in bit pair l.
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const int c = k / 2, h = k % 2;
      const uint8x16_t q = vld1q_u8(qs + 32 * c + 16 * h);
      const std::int8_t* ax = a.qs + 128 * c + 16 * h;
      sums = Dot::dot(sums, vreinterpretq_s8_u8(vandq_u8(q, three)), neon_s8(ax));
      sums = Dot::dot(sums, vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(q, 2), three)), neon_s8(ax + 32));
      sums = Dot::dot(sums, vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(q, 4), three)), neon_s8(ax + 64));
      sums = Dot::dot(sums, vreinterpretq_s8_u8(vshrq_n_u8(q, 6)), neon_s8(ax + 96));
    }
    const int s = vaddvq_s32(sums) - q8_k_block_sum(a);
    acc += neon_scale_at(p + offsetof(io::block_tq2_0, d)) * a.d * static_cast<float>(s);
  }
  return acc;
}

}  // namespace detail

ACCEL_TARGET_NEON inline float dot_iq4_nl(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                          const ActivationRow& x) noexcept {
  return detail::dot_iq4_nl_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_iq4_nl(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                  const ActivationRow& x) noexcept {
  return detail::dot_iq4_nl_neon<detail::neon_sdot>(n, w, x);
}

ACCEL_TARGET_NEON inline float dot_iq4_xs(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                          const ActivationRow& x) noexcept {
  return detail::dot_iq4_xs_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_iq4_xs(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                  const ActivationRow& x) noexcept {
  return detail::dot_iq4_xs_neon<detail::neon_sdot>(n, w, x);
}

ACCEL_TARGET_NEON inline float dot_tq2_0(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                         const ActivationRow& x) noexcept {
  return detail::dot_tq2_0_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_tq2_0(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                 const ActivationRow& x) noexcept {
  return detail::dot_tq2_0_neon<detail::neon_sdot>(n, w, x);
}

}  // namespace accel::quant

#endif
