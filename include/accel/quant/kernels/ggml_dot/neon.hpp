// The NEON ggml dot products (AArch64) of every type with integer kernels, one block at a time, in
// two tiers that differ only in the int8 step (quant/kernels/int8_dot_neon.hpp): `neon_dotprod` takes
// sixteen byte products a step with SDOT, plain `neon` with SMULL and SADALP. Weight codes become
// small non-negative bytes in registers (nibbles; Q5's and Q3_K's extra bit by a per-lane bit test;
// Q6_K's six bits by shift-and-insert; Q2_K's and Q3_K's bit pairs by shifts), so one signed step
// serves every type; the offsets (Q4_0's 8, Q5_0's 16, Q3_K's 4, Q6_K's 32, the K types' mins, Q4_1's
// and Q5_1's m) are taken out through the activation's block sums, as the scalar kernel does.
//
// Each block's integer sum is exact, and the float sums run block by block in the scalar kernel's
// order and expressions: built with -ffp-contract=off both tiers return the scalar kernel's bits
// (tests/arm checks it under qemu); under GCC's default contraction a compiler may fuse a * b + c
// in one kernel and not the other, a rounding apart per block. ggml's NEON code keeps float lanes
// across blocks instead; that order may be faster on a wide core, and is not measured here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/scalar.hpp"
#include "accel/quant/kernels/int8_dot_neon.hpp"

#if ACCEL_SIMD_ARM
#include <arm_neon.h>

namespace accel::quant {

namespace detail {

/// The f16 scale at p as float (io::f16_scale's value).
inline float neon_scale_at(const std::byte* p) noexcept {
  std::uint16_t d;
  std::memcpy(&d, p, 2);
  return io::f16_scale(d);
}

inline int8x16_t neon_s8(const void* p) noexcept { return vld1q_s8(static_cast<const std::int8_t*>(p)); }
inline int8x16_t neon_low_nibbles(uint8x16_t q) noexcept { return vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))); }
inline int8x16_t neon_high_nibbles(uint8x16_t q) noexcept { return vreinterpretq_s8_u8(vshrq_n_u8(q, 4)); }

template <class Dot>
[[gnu::always_inline]] inline float dot_q8_0_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q8_0);
    const std::byte* q = p + offsetof(io::block_q8_0, qs);
    const std::int8_t* a = x.q8_0[b].qs;
    const int32x4_t s = Dot::dot(Dot::dot(vdupq_n_s32(0), neon_s8(q), neon_s8(a)), neon_s8(q + 16), neon_s8(a + 16));
    acc += neon_scale_at(p) * x.q8_0_scales[b] * static_cast<float>(vaddvq_s32(s));
  }
  return acc;
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q4_0_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // The codes are value + 8: their products, less 8 x the activation block's sum.
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q4_0);
    const uint8x16_t q = vld1q_u8(reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q4_0, qs)));
    const std::int8_t* a = x.q8_0[b].qs;
    const int32x4_t s =
        Dot::dot(Dot::dot(vdupq_n_s32(0), neon_low_nibbles(q), neon_s8(a)), neon_high_nibbles(q), neon_s8(a + 16));
    const int sum = vaddvq_s32(s) - 8 * x.q8_0_sums[b];
    acc += neon_scale_at(p) * x.q8_0_scales[b] * static_cast<float>(sum);
  }
  return acc;
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q4_k_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q4_k);
    const auto& a = x.q8_k[b];
    std::uint8_t sc[8], mn[8];
    io::k4_scales_mins(reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q4_k, scales)), sc, mn);
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q4_k, qs));
    // 32 bytes hold groups 2c (low nibbles) and 2c + 1 (high nibbles); each group's lanes are
    // weighed by its scale before the one horizontal sum.
    int32x4_t sums = vdupq_n_s32(0);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const uint8x16_t q0 = vld1q_u8(qs + 32 * c), q1 = vld1q_u8(qs + 32 * c + 16);
      const std::int8_t* ac = a.qs + 64 * c;
      const int32x4_t lo = Dot::dot(Dot::dot(vdupq_n_s32(0), neon_low_nibbles(q0), neon_s8(ac)), neon_low_nibbles(q1),
                                    neon_s8(ac + 16));
      const int32x4_t hi = Dot::dot(Dot::dot(vdupq_n_s32(0), neon_high_nibbles(q0), neon_s8(ac + 32)),
                                    neon_high_nibbles(q1), neon_s8(ac + 48));
      sums = vmlaq_n_s32(sums, lo, sc[2 * c]);
      sums = vmlaq_n_s32(sums, hi, sc[2 * c + 1]);
    }
    const int sumi = vaddvq_s32(sums);
    int summ = 0;
    for (int g = 0; g < 8; ++g) summ += mn[g] * (a.bsums[2 * g] + a.bsums[2 * g + 1]);
    acc += a.d * (neon_scale_at(p + offsetof(io::block_q4_k, d)) * static_cast<float>(sumi) -
                  neon_scale_at(p + offsetof(io::block_q4_k, dmin)) * static_cast<float>(summ));
  }
  return acc;
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q6_k_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  const uint8x16_t three = vdupq_n_u8(3);
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q6_k);
    const auto& a = x.q8_k[b];
    const auto* ql = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q6_k, ql));
    const auto* qh = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q6_k, qh));
    const auto* scales = reinterpret_cast<const std::int8_t*>(p + offsetof(io::block_q6_k, scales));
    int32x4_t sums = vdupq_n_s32(0);
    // Half h, lanes l = 16i .. 16i + 15 of its 32: the values of elements 128h + 32j + l, j = 0..3,
    // from the low (j = 0, 1) or high (2, 3) nibbles of ql[l] (j even) or ql[l + 32] (j odd) and
    // bits 2j, 2j + 1 of qh[l]: group 8h + 2j + i of sixteen.
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i) {
        const uint8x16_t la = vld1q_u8(ql + 64 * h + 16 * i), lb = vld1q_u8(ql + 64 * h + 32 + 16 * i);
        const uint8x16_t hb = vld1q_u8(qh + 32 * h + 16 * i);
        const uint8x16_t u[4] = {vsliq_n_u8(la, vandq_u8(hb, three), 4),
                                 vsliq_n_u8(lb, vandq_u8(vshrq_n_u8(hb, 2), three), 4),
                                 vsliq_n_u8(vshrq_n_u8(la, 4), vandq_u8(vshrq_n_u8(hb, 4), three), 4),
                                 vsliq_n_u8(vshrq_n_u8(lb, 4), vshrq_n_u8(hb, 6), 4)};
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const int g = 8 * h + 2 * j + i;
          const int32x4_t d = Dot::dot(vdupq_n_s32(0), vreinterpretq_s8_u8(u[j]), neon_s8(a.qs + 16 * g));
          sums = vmlaq_n_s32(sums, d, scales[g]);
        }
      }
    }
    int offset = 0;
    for (int g = 0; g < 16; ++g) offset += scales[g] * a.bsums[g];
    const int sumi = vaddvq_s32(sums) - 32 * offset;
    acc += a.d * neon_scale_at(p + offsetof(io::block_q6_k, d)) * static_cast<float>(sumi);
  }
  return acc;
}


template <class Dot>
[[gnu::always_inline]] inline float dot_q4_1_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // The codes times the activation, and the block's min times its sum.
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q4_1);
    const uint8x16_t q = vld1q_u8(reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q4_1, qs)));
    const std::int8_t* a = x.q8_0[b].qs;
    const int32x4_t s =
        Dot::dot(Dot::dot(vdupq_n_s32(0), neon_low_nibbles(q), neon_s8(a)), neon_high_nibbles(q), neon_s8(a + 16));
    const float dx = x.q8_0_scales[b];
    acc += neon_scale_at(p + offsetof(io::block_q4_1, d)) * dx * static_cast<float>(vaddvq_s32(s)) +
           neon_scale_at(p + offsetof(io::block_q4_1, m)) * (dx * static_cast<float>(x.q8_0_sums[b]));
  }
  return acc;
}

/// Sixteen lanes of 16 where bit `bit` of the byte in `h` is set, else 0.
inline uint8x16_t neon_bit_as(uint8x16_t h, int bit, std::uint8_t value) noexcept {
  return vandq_u8(vtstq_u8(h, vdupq_n_u8(static_cast<std::uint8_t>(1u << bit))), vdupq_n_u8(value));
}

/// A Q5_0 / Q5_1 block's 32 five-bit codes (0..31) as two registers (elements 0-15, 16-31): the
/// nibbles of qs, and bit j of the word qh above element j. Byte i of qh spreads over eight lanes,
/// each lane testing its own bit.
inline void neon_q5_codes(const std::byte* qh, const std::byte* qs, int8x16_t& lo, int8x16_t& hi) noexcept {
  std::uint8_t h[4];
  std::memcpy(h, qh, 4);
  const uint8x16_t bits = vcombine_u8(vcreate_u8(0x8040201008040201ull), vcreate_u8(0x8040201008040201ull));
  const uint8x16_t h01 = vcombine_u8(vdup_n_u8(h[0]), vdup_n_u8(h[1])), h23 = vcombine_u8(vdup_n_u8(h[2]), vdup_n_u8(h[3]));
  const uint8x16_t fifth = vdupq_n_u8(0x10);
  const uint8x16_t q = vld1q_u8(reinterpret_cast<const std::uint8_t*>(qs));
  lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), vandq_u8(vtstq_u8(h01, bits), fifth)));
  hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(vtstq_u8(h23, bits), fifth)));
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q5_0_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // The codes are value + 16: their products, less 16 x the activation block's sum.
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q5_0);
    int8x16_t lo, hi;
    neon_q5_codes(p + offsetof(io::block_q5_0, qh), p + offsetof(io::block_q5_0, qs), lo, hi);
    const std::int8_t* a = x.q8_0[b].qs;
    const int32x4_t s = Dot::dot(Dot::dot(vdupq_n_s32(0), lo, neon_s8(a)), hi, neon_s8(a + 16));
    const int sum = vaddvq_s32(s) - 16 * x.q8_0_sums[b];
    acc += neon_scale_at(p + offsetof(io::block_q5_0, d)) * x.q8_0_scales[b] * static_cast<float>(sum);
  }
  return acc;
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q5_1_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q5_1);
    int8x16_t lo, hi;
    neon_q5_codes(p + offsetof(io::block_q5_1, qh), p + offsetof(io::block_q5_1, qs), lo, hi);
    const std::int8_t* a = x.q8_0[b].qs;
    const int32x4_t s = Dot::dot(Dot::dot(vdupq_n_s32(0), lo, neon_s8(a)), hi, neon_s8(a + 16));
    const float dx = x.q8_0_scales[b];
    acc += neon_scale_at(p + offsetof(io::block_q5_1, d)) * dx * static_cast<float>(vaddvq_s32(s)) +
           neon_scale_at(p + offsetof(io::block_q5_1, m)) * (dx * static_cast<float>(x.q8_0_sums[b]));
  }
  return acc;
}

// Q2_K and Q3_K share Q6_K's layout of sixteen groups of 16: bytes 32c + 16i of qs hold, in their
// bit pair j, the codes of group 8c + 2j + i (scalar.hpp).

template <class Dot>
[[gnu::always_inline]] inline float dot_q2_k_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  const uint8x16_t three = vdupq_n_u8(3);
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q2_k);
    const auto& a = x.q8_k[b];
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q2_k, qs));
    const auto* scales = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q2_k, scales));
    int32x4_t sums = vdupq_n_s32(0);
#pragma GCC unroll 4
    for (int c = 0; c < 2; ++c) {
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i) {
        const uint8x16_t q = vld1q_u8(qs + 32 * c + 16 * i);
        const uint8x16_t codes[4] = {vandq_u8(q, three), vandq_u8(vshrq_n_u8(q, 2), three),
                                     vandq_u8(vshrq_n_u8(q, 4), three), vshrq_n_u8(q, 6)};
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const int g = 8 * c + 2 * j + i;
          const int32x4_t d = Dot::dot(vdupq_n_s32(0), vreinterpretq_s8_u8(codes[j]), neon_s8(a.qs + 16 * g));
          sums = vmlaq_n_s32(sums, d, scales[g] & 0x0F);
        }
      }
    }
    const int sumi = vaddvq_s32(sums);
    int summ = 0;
    for (int g = 0; g < 16; ++g) summ += (scales[g] >> 4) * a.bsums[g];
    acc += a.d * (neon_scale_at(p + offsetof(io::block_q2_k, d)) * static_cast<float>(sumi) -
                  neon_scale_at(p + offsetof(io::block_q2_k, dmin)) * static_cast<float>(summ));
  }
  return acc;
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q3_k_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // A code is its two low bits plus 4 x its hmask bit (bit g / 2 of hmask[16 (g % 2) + l] for
  // group g); the value is the code less 4, which leaves through the activation's group sums.
  float acc = 0;
  const uint8x16_t three = vdupq_n_u8(3);
  std::int8_t sc[16];
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q3_k);
    const auto& a = x.q8_k[b];
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q3_k, qs));
    const auto* hmask = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q3_k, hmask));
    detail::q3_k_scales(reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q3_k, scales)), sc);
    const uint8x16_t h[2] = {vld1q_u8(hmask), vld1q_u8(hmask + 16)};
    int32x4_t sums = vdupq_n_s32(0);
#pragma GCC unroll 4
    for (int c = 0; c < 2; ++c) {
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i) {
        const uint8x16_t q = vld1q_u8(qs + 32 * c + 16 * i);
        const uint8x16_t low[4] = {vandq_u8(q, three), vandq_u8(vshrq_n_u8(q, 2), three),
                                   vandq_u8(vshrq_n_u8(q, 4), three), vshrq_n_u8(q, 6)};
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const int g = 8 * c + 2 * j + i;
          const uint8x16_t codes = vorrq_u8(low[j], neon_bit_as(h[i], g / 2, 4));
          const int32x4_t d = Dot::dot(vdupq_n_s32(0), vreinterpretq_s8_u8(codes), neon_s8(a.qs + 16 * g));
          sums = vmlaq_n_s32(sums, d, sc[g]);
        }
      }
    }
    int offset = 0;
    for (int g = 0; g < 16; ++g) offset += sc[g] * a.bsums[g];
    const int sumi = vaddvq_s32(sums) - 4 * offset;
    acc += a.d * neon_scale_at(p + offsetof(io::block_q3_k, d)) * static_cast<float>(sumi);
  }
  return acc;
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q5_k_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // Q4_K with a fifth bit per code: bit g of qh[j] above element 32g + j.
  float acc = 0;
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q5_k);
    const auto& a = x.q8_k[b];
    std::uint8_t sc[8], mn[8];
    io::k4_scales_mins(reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q5_k, scales)), sc, mn);
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q5_k, qs));
    const auto* qh = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q5_k, qh));
    const uint8x16_t h0 = vld1q_u8(qh), h1 = vld1q_u8(qh + 16);
    int32x4_t sums = vdupq_n_s32(0);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const uint8x16_t q0 = vld1q_u8(qs + 32 * c), q1 = vld1q_u8(qs + 32 * c + 16);
      const std::int8_t* ac = a.qs + 64 * c;
      const int gl = 2 * c, gh = 2 * c + 1;
      const int8x16_t l0 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q0, vdupq_n_u8(0x0F)), neon_bit_as(h0, gl, 0x10)));
      const int8x16_t l1 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q1, vdupq_n_u8(0x0F)), neon_bit_as(h1, gl, 0x10)));
      const int8x16_t u0 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q0, 4), neon_bit_as(h0, gh, 0x10)));
      const int8x16_t u1 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q1, 4), neon_bit_as(h1, gh, 0x10)));
      const int32x4_t lo = Dot::dot(Dot::dot(vdupq_n_s32(0), l0, neon_s8(ac)), l1, neon_s8(ac + 16));
      const int32x4_t hi = Dot::dot(Dot::dot(vdupq_n_s32(0), u0, neon_s8(ac + 32)), u1, neon_s8(ac + 48));
      sums = vmlaq_n_s32(sums, lo, sc[gl]);
      sums = vmlaq_n_s32(sums, hi, sc[gh]);
    }
    const int sumi = vaddvq_s32(sums);
    int summ = 0;
    for (int g = 0; g < 8; ++g) summ += mn[g] * (a.bsums[2 * g] + a.bsums[2 * g + 1]);
    acc += a.d * (neon_scale_at(p + offsetof(io::block_q5_k, d)) * static_cast<float>(sumi) -
                  neon_scale_at(p + offsetof(io::block_q5_k, dmin)) * static_cast<float>(summ));
  }
  return acc;
}

}  // namespace detail

ACCEL_TARGET_NEON inline float dot_q8_0(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot_q8_0_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_q8_0(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                const ActivationRow& x) noexcept {
  return detail::dot_q8_0_neon<detail::neon_sdot>(n, w, x);
}

ACCEL_TARGET_NEON inline float dot_q4_0(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot_q4_0_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_q4_0(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                const ActivationRow& x) noexcept {
  return detail::dot_q4_0_neon<detail::neon_sdot>(n, w, x);
}

ACCEL_TARGET_NEON inline float dot_q4_k(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot_q4_k_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_q4_k(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                const ActivationRow& x) noexcept {
  return detail::dot_q4_k_neon<detail::neon_sdot>(n, w, x);
}

ACCEL_TARGET_NEON inline float dot_q6_k(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot_q6_k_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_q6_k(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                const ActivationRow& x) noexcept {
  return detail::dot_q6_k_neon<detail::neon_sdot>(n, w, x);
}

ACCEL_TARGET_NEON inline float dot_q4_1(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot_q4_1_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_q4_1(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                const ActivationRow& x) noexcept {
  return detail::dot_q4_1_neon<detail::neon_sdot>(n, w, x);
}

ACCEL_TARGET_NEON inline float dot_q5_0(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot_q5_0_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_q5_0(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                const ActivationRow& x) noexcept {
  return detail::dot_q5_0_neon<detail::neon_sdot>(n, w, x);
}

ACCEL_TARGET_NEON inline float dot_q5_1(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot_q5_1_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_q5_1(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                const ActivationRow& x) noexcept {
  return detail::dot_q5_1_neon<detail::neon_sdot>(n, w, x);
}

ACCEL_TARGET_NEON inline float dot_q2_k(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot_q2_k_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_q2_k(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                const ActivationRow& x) noexcept {
  return detail::dot_q2_k_neon<detail::neon_sdot>(n, w, x);
}

ACCEL_TARGET_NEON inline float dot_q3_k(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot_q3_k_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_q3_k(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                const ActivationRow& x) noexcept {
  return detail::dot_q3_k_neon<detail::neon_sdot>(n, w, x);
}

ACCEL_TARGET_NEON inline float dot_q5_k(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot_q5_k_neon<detail::neon_smull>(n, w, x);
}
ACCEL_TARGET_NEON_DOTPROD inline float dot_q5_k(simd::requires_arch<simd::neon_dotprod>, std::size_t n, const std::byte* w,
                                                const ActivationRow& x) noexcept {
  return detail::dot_q5_k_neon<detail::neon_sdot>(n, w, x);
}

}  // namespace accel::quant

#endif
