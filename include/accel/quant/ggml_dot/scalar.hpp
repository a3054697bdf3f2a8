// The portable ggml dot products: every CPU, and the reference the vector tiers are tested
// against (their integer sums are exact, so they differ only in the order of the float sums).
#pragma once

#include <cstddef>
#include <cstdint>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/ggml_dot/activation.hpp"

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

}  // namespace accel::quant
