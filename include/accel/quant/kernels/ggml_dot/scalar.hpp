// The portable ggml dot products: every CPU, and the reference the vector tiers are tested
// against (their integer sums are exact, so they differ only in the order of the float sums).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"

namespace accel::quant {

inline float dot_q8_0(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const auto blk = detail::load_block<io::block_q8_0>(w + b * sizeof(io::block_q8_0));
    int s = 0;
    for (int j = 0; j < 32; ++j) s += blk.qs[j] * x.q8_0[b].qs[j];
    acc += io::f16_scale(blk.d) * io::f16_scale(x.q8_0[b].d) * static_cast<float>(s);
  }
  return acc;
}

inline float dot_q4_0(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const auto blk = detail::load_block<io::block_q4_0>(w + b * sizeof(io::block_q4_0));
    int s = 0;
    for (int j = 0; j < 16; ++j) s += (blk.qs[j] & 0x0F) * x.q8_0[b].qs[j] + (blk.qs[j] >> 4) * x.q8_0[b].qs[j + 16];
    s -= 8 * x.q8_0_sums[b];
    acc += io::f16_scale(blk.d) * io::f16_scale(x.q8_0[b].d) * static_cast<float>(s);
  }
  return acc;
}

inline float dot_q4_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto blk = detail::load_block<io::block_q4_k>(w + b * sizeof(io::block_q4_k));
    const auto& a = x.q8_k[b];
    int sumi = 0, summ = 0;
    for (int g = 0; g < 8; ++g) {
      std::uint8_t sc, mn;
      io::k4_scale_min(g, blk.scales, sc, mn);
      const std::uint8_t* q = blk.qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      int s = 0;
      for (int j = 0; j < 32; ++j) s += ((q[j] >> shift) & 0x0F) * a.qs[32 * g + j];
      sumi += sc * s;
      summ += mn * (a.bsums[2 * g] + a.bsums[2 * g + 1]);
    }
    acc += a.d * (io::f16_scale(blk.d) * static_cast<float>(sumi) - io::f16_scale(blk.dmin) * static_cast<float>(summ));
  }
  return acc;
}

namespace detail {
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
}  // namespace detail

inline float dot_q6_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  std::uint8_t u[256];
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto blk = detail::load_block<io::block_q6_k>(w + b * sizeof(io::block_q6_k));
    const auto& a = x.q8_k[b];
    detail::q6_k_values(blk, u);
    int sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += u[16 * g + j] * a.qs[16 * g + j];
      sumi += blk.scales[g] * (s - 32 * a.bsums[g]);
    }
    acc += a.d * io::f16_scale(blk.d) * static_cast<float>(sumi);
  }
  return acc;
}

// The 32-element types with a min or a fifth bit. Codes are taken unsigned (Q5_0's value + 16);
// the offset and the min meet the activation through its block sum, once per block, as ggml's
// Q8_1 partner carries d x sum for Q4_1 / Q5_1.

inline float dot_q4_1(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const auto blk = detail::load_block<io::block_q4_1>(w + b * sizeof(io::block_q4_1));
    int s = 0;
    for (int j = 0; j < 16; ++j) s += (blk.qs[j] & 0x0F) * x.q8_0[b].qs[j] + (blk.qs[j] >> 4) * x.q8_0[b].qs[j + 16];
    const float dx = x.q8_0_scales[b];
    acc += io::f16_scale(blk.d) * dx * static_cast<float>(s) + io::f16_scale(blk.m) * (dx * static_cast<float>(x.q8_0_sums[b]));
  }
  return acc;
}

namespace detail {
/// The 32 five-bit codes (0..31) of a Q5_0 / Q5_1 block in element order: the low nibbles, then
/// the high ones, bit j of qh above element j.
inline void q5_codes(const std::uint8_t* qh, const std::uint8_t* qs, std::uint8_t* u) noexcept {
  const std::uint32_t h = io::load_le32(qh);
  for (int j = 0; j < 16; ++j) {
    u[j] = static_cast<std::uint8_t>((qs[j] & 0x0F) | (((h >> j) & 1) << 4));
    u[j + 16] = static_cast<std::uint8_t>((qs[j] >> 4) | (((h >> (j + 16)) & 1) << 4));
  }
}
}  // namespace detail

inline float dot_q5_0(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  std::uint8_t u[32];
  for (std::size_t b = 0; b < n / 32; ++b) {
    const auto blk = detail::load_block<io::block_q5_0>(w + b * sizeof(io::block_q5_0));
    detail::q5_codes(blk.qh, blk.qs, u);
    int s = 0;
    for (int j = 0; j < 32; ++j) s += u[j] * x.q8_0[b].qs[j];
    s -= 16 * x.q8_0_sums[b];
    acc += io::f16_scale(blk.d) * x.q8_0_scales[b] * static_cast<float>(s);
  }
  return acc;
}

inline float dot_q5_1(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  std::uint8_t u[32];
  for (std::size_t b = 0; b < n / 32; ++b) {
    const auto blk = detail::load_block<io::block_q5_1>(w + b * sizeof(io::block_q5_1));
    detail::q5_codes(blk.qh, blk.qs, u);
    int s = 0;
    for (int j = 0; j < 32; ++j) s += u[j] * x.q8_0[b].qs[j];
    const float dx = x.q8_0_scales[b];
    acc += io::f16_scale(blk.d) * dx * static_cast<float>(s) + io::f16_scale(blk.m) * (dx * static_cast<float>(x.q8_0_sums[b]));
  }
  return acc;
}

// The K types of 16-element groups (Q2_K, Q3_K) share Q6_K's code layout: 32-byte chunk c holds
// elements 128c .. 128c + 127, bit pair j of byte l (l < 32) being element 128c + 32j + l, so
// group g (16 elements) starts at byte 32 (g / 8) + 16 (g % 2) with shift 2 ((g % 8) / 2).

inline float dot_q2_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto blk = detail::load_block<io::block_q2_k>(w + b * sizeof(io::block_q2_k));
    const auto& a = x.q8_k[b];
    int sumi = 0, summ = 0;
    for (int g = 0; g < 16; ++g) {
      const std::uint8_t* q = blk.qs + 32 * (g / 8) + 16 * (g % 2);
      const int shift = 2 * ((g % 8) / 2);
      int s = 0;
      for (int l = 0; l < 16; ++l) s += ((q[l] >> shift) & 3) * a.qs[16 * g + l];
      sumi += (blk.scales[g] & 0x0F) * s;
      summ += (blk.scales[g] >> 4) * a.bsums[g];
    }
    acc += a.d * (io::f16_scale(blk.d) * static_cast<float>(sumi) - io::f16_scale(blk.dmin) * static_cast<float>(summ));
  }
  return acc;
}

namespace detail {
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

inline float dot_q3_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // A code is its two low bits plus 4 x its hmask bit (0..7), the value less 4: the offset leaves
  // through the activation's 16-element sums, as Q6_K's 32 does.
  float acc = 0;
  std::int8_t sc[16];
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto blk = detail::load_block<io::block_q3_k>(w + b * sizeof(io::block_q3_k));
    const auto& a = x.q8_k[b];
    detail::q3_k_scales(blk.scales, sc);
    int sumi = 0;
    for (int g = 0; g < 16; ++g) {
      const std::uint8_t* q = blk.qs + 32 * (g / 8) + 16 * (g % 2);
      const std::uint8_t* h = blk.hmask + 16 * (g % 2);
      const int shift = 2 * ((g % 8) / 2), bit = g / 2;
      int s = 0;
      for (int l = 0; l < 16; ++l) s += (((q[l] >> shift) & 3) | (((h[l] >> bit) & 1) << 2)) * a.qs[16 * g + l];
      sumi += sc[g] * (s - 4 * a.bsums[g]);
    }
    acc += a.d * io::f16_scale(blk.d) * static_cast<float>(sumi);
  }
  return acc;
}

inline float dot_q5_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // Q4_K with a fifth bit per code: bit g of qh[j] above element 32g + j.
  float acc = 0;
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto blk = detail::load_block<io::block_q5_k>(w + b * sizeof(io::block_q5_k));
    const auto& a = x.q8_k[b];
    std::uint8_t sc[8], mn[8];
    io::k4_scales_mins(blk.scales, sc, mn);
    int sumi = 0, summ = 0;
    for (int g = 0; g < 8; ++g) {
      const std::uint8_t* q = blk.qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      int s = 0;
      for (int j = 0; j < 32; ++j) s += (((q[j] >> shift) & 0x0F) | (((blk.qh[j] >> g) & 1) << 4)) * a.qs[32 * g + j];
      sumi += sc[g] * s;
      summ += mn[g] * (a.bsums[2 * g] + a.bsums[2 * g + 1]);
    }
    acc += a.d * (io::f16_scale(blk.d) * static_cast<float>(sumi) - io::f16_scale(blk.dmin) * static_cast<float>(summ));
  }
  return acc;
}

}  // namespace accel::quant
