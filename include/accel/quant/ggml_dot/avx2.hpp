// The AVX2 ggml dot products (x86-64-v3), one block at a time as ggml's AVX2 code computes them:
// VPMADDUBSW multiplies unsigned weight codes by signed activation bytes into 16-bit pairs,
// VPMADDWD adds the pairs (or weighs them by a group's scale) into 32-bit lanes. No pair can
// saturate: the codes are at most 15 (Q4_0, Q4_K) or 63 (Q6_K), and Q8_0 goes through the sign
// trick (|w| times x carrying w's sign), at most 128 x 127 per product. The offsets (Q4_0's 8,
// Q4_K's mins, Q6_K's 32) are taken out once per block through the activation's block sums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/ggml_dot/activation.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::quant {

namespace detail {

ACCEL_TARGET_AVX2 inline float hsum8_avx2(__m256 v) noexcept {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// Sums of u[i] x s[i] over each four bytes into eight int32 lanes (u unsigned, s signed; no pair
/// of products may pass 32767).
ACCEL_TARGET_AVX2 inline __m256i dot_u8s8_avx2(__m256i u, __m256i s) noexcept {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/// Sixteen packed bytes as 32 nibble codes (0..15): the low nibbles, then the high ones.
ACCEL_TARGET_AVX2 inline __m256i nibbles_avx2(const std::byte* q) noexcept {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

ACCEL_TARGET_AVX2 inline __m256i load32_avx2(const void* p) noexcept {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

/// A block's f16 scale by F16C (io::f16_scale's value: the conversion is exact).
ACCEL_TARGET_AVX2 inline float scale_at(const std::byte* p) noexcept {
  std::uint16_t d;
  std::memcpy(&d, p, 2);
  return _cvtsh_ss(d);
}

/// Q8_0 block b's integer products with the activation's, as eight int32 lanes (the sign trick:
/// |w| times x carrying w's sign).
ACCEL_TARGET_AVX2 inline __m256i q8_0_block_avx2(const std::byte* p, const ActivationRow& x, std::size_t b) noexcept {
  const __m256i qw = load32_avx2(p + 2), qx = load32_avx2(x.q8_0[b].qs);
  return dot_u8s8_avx2(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw));
}

/// Q4_0 block b's codes (value + 8) times the activation's, as eight int32 lanes.
ACCEL_TARGET_AVX2 inline __m256i q4_0_block_avx2(const std::byte* p, const ActivationRow& x, std::size_t b) noexcept {
  return dot_u8s8_avx2(nibbles_avx2(p + 2), load32_avx2(x.q8_0[b].qs));
}

}  // namespace detail

ACCEL_TARGET_AVX2 inline float dot_q8_0(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  // Two blocks a step into two accumulators: one FMA chain would wait on its own latency.
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const std::size_t blocks = n / 32;
  constexpr std::size_t bytes = sizeof(io::block_q8_0);
  std::size_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const std::byte* p = w + b * bytes;
    const __m256i s0 = detail::q8_0_block_avx2(p, x, b), s1 = detail::q8_0_block_avx2(p + bytes, x, b + 1);
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(detail::scale_at(p) * x.q8_0_scales[b]), _mm256_cvtepi32_ps(s0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(detail::scale_at(p + bytes) * x.q8_0_scales[b + 1]), _mm256_cvtepi32_ps(s1), acc1);
  }
  if (b < blocks) {
    const std::byte* p = w + b * bytes;
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(detail::scale_at(p) * x.q8_0_scales[b]),
                           _mm256_cvtepi32_ps(detail::q8_0_block_avx2(p, x, b)), acc0);
  }
  return detail::hsum8_avx2(_mm256_add_ps(acc0, acc1));
}

ACCEL_TARGET_AVX2 inline float dot_q4_0(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  // The codes are value + 8: the products of the codes, less 8 x each block's activation sum
  // (scaled the same), which one scalar FMA per block carries.
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float offset = 0;
  const std::size_t blocks = n / 32;
  constexpr std::size_t bytes = sizeof(io::block_q4_0);
  std::size_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const std::byte* p = w + b * bytes;
    const __m256i s0 = detail::q4_0_block_avx2(p, x, b), s1 = detail::q4_0_block_avx2(p + bytes, x, b + 1);
    const float d0 = detail::scale_at(p) * x.q8_0_scales[b], d1 = detail::scale_at(p + bytes) * x.q8_0_scales[b + 1];
    offset += d0 * static_cast<float>(x.q8_0_sums[b]) + d1 * static_cast<float>(x.q8_0_sums[b + 1]);
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(s0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(s1), acc1);
  }
  if (b < blocks) {
    const std::byte* p = w + b * bytes;
    const float d = detail::scale_at(p) * x.q8_0_scales[b];
    offset += d * static_cast<float>(x.q8_0_sums[b]);
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(detail::q4_0_block_avx2(p, x, b)), acc0);
  }
  return detail::hsum8_avx2(_mm256_add_ps(acc0, acc1)) - 8.0f * offset;
}

ACCEL_TARGET_AVX2 inline float dot_q4_k(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q4_k);
    const auto* blk = reinterpret_cast<const std::uint8_t*>(p);
    const io::block_q8_k& a = x.q8_k[b];
    std::uint8_t sc[8], mn[8];
    io::k4_scales_mins(blk + 4, sc, mn);
    __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      // 32 bytes: group 2c in the low nibbles, group 2c + 1 in the high ones.
      const __m256i q = detail::load32_avx2(blk + 16 + 32 * c);
      const __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      const __m256i pl = _mm256_maddubs_epi16(lo, detail::load32_avx2(a.qs + 64 * c));
      const __m256i ph = _mm256_maddubs_epi16(hi, detail::load32_avx2(a.qs + 64 * c + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(pl, _mm256_set1_epi16(sc[2 * c])));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(ph, _mm256_set1_epi16(sc[2 * c + 1])));
    }
    int summ = 0;
    for (int g = 0; g < 8; ++g) summ += mn[g] * (a.bsums[2 * g] + a.bsums[2 * g + 1]);
    const float d = a.d * detail::scale_at(p), dmin = a.d * detail::scale_at(p + 2);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    mins += dmin * static_cast<float>(summ);
  }
  return detail::hsum8_avx2(acc) - mins;
}

ACCEL_TARGET_AVX2 inline float dot_q6_k(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0;
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto* blk = reinterpret_cast<const std::uint8_t*>(w + b * sizeof(io::block_q6_k));
    const std::uint8_t* ql = blk;
    const std::uint8_t* qh = blk + 128;
    const auto* scales = reinterpret_cast<const std::int8_t*>(blk + 192);
    const io::block_q8_k& a = x.q8_k[b];
    __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      // Four runs of 32 six-bit values: low or high nibbles of ql, two bits of qh each, placed at
      // bits 4 and 5 (16-bit shifts are safe: the mask drops what crosses a byte).
      const __m256i q1 = detail::load32_avx2(ql + 64 * half), q2 = detail::load32_avx2(ql + 64 * half + 32);
      const __m256i h = detail::load32_avx2(qh + 32 * half);
      __m256i u[4];
      u[0] = _mm256_or_si256(_mm256_and_si256(q1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45));
      u[1] = _mm256_or_si256(_mm256_and_si256(q2, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45));
      u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), low4), _mm256_and_si256(h, bits45));
      u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q2, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45));
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const int e = 128 * half + 32 * i, g = e / 16;
        const __m256i prod = _mm256_maddubs_epi16(u[i], detail::load32_avx2(a.qs + e));
        const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(scales[g + 1]), _mm_set1_epi16(scales[g]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, scale));
      }
    }
    int offset = 0;  // the codes are value + 32
    for (int g = 0; g < 16; ++g) offset += scales[g] * a.bsums[g];
    const float d = a.d * detail::scale_at(reinterpret_cast<const std::byte*>(blk + 208));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    offsets += d * static_cast<float>(32 * offset);
  }
  return detail::hsum8_avx2(acc) - offsets;
}

}  // namespace accel::quant

#endif
