// The AVX2 ggml dot products (x86-64-v3), one block at a time as ggml's AVX2 code computes them:
// VPMADDUBSW multiplies unsigned weight codes by signed activation bytes into 16-bit pairs,
// VPMADDWD adds the pairs (or weighs them by a group's scale) into 32-bit lanes. No pair can
// saturate: the codes are at most 15 (Q4_0, Q4_1, Q4_K), 31 (Q5_0, Q5_1, Q5_K) or 63 (Q6_K), and
// Q8_0 goes through the sign trick (|w| times x carrying w's sign), at most 128 x 127 per product.
// The offsets (Q4_0's 8, Q5_0's 16, Q3_K's 4, Q6_K's 32) and the mins (Q4_1, Q5_1, the K types)
// are taken out once per block through the activation's block sums. Every one-row and multi-row
// kernel prefetches its weights 4 KB ahead (detail::prefetch_ahead): decode streams each matrix
// once from DRAM, and the hardware prefetchers alone kept too few lines in flight (2 threads,
// 2048 x 135168 from DRAM, an Intel Xeon (Sapphire Rapids) capped at AVX2: Q8_0 12 -> 20-23 GB/s,
// Q4_0 10-11 -> 18-19, Q4_K 10-12 -> 14-24, Q6_K 10-12 -> 19-23, Q5_K 6-11 -> 21, Q3_K 9-11 -> 18,
// Q2_K 9-10 -> 14, Q4_1 / Q5_0 / Q5_1 8-11 -> 11-14). Q4_K and Q6_K are the one-row
// case of the multi-row kernels (ggml_dot/avx2_rows.hpp), Q4_1, Q5_0 and Q5_1 of
// detail::dot32_rows_avx2 below; Q2_K, Q3_K and Q5_K are in ggml_dot/avx2_k.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/avx2_k.hpp"
#include "accel/quant/kernels/ggml_dot/avx2_rows.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::quant {

namespace detail {

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

/// Bit i of the word at p as byte i's bit 4 (0 or 16): the fifth bits of a Q5_0 / Q5_1 block's
/// codes, in the order nibbles_avx2 gives the low four. Each byte takes its word's byte i / 8 (a
/// shuffle within each 128-bit lane of the broadcast word) and tests its own bit in it.
ACCEL_TARGET_AVX2 inline __m256i fifth_bits_avx2(const std::byte* p) noexcept {
  std::int32_t h;
  std::memcpy(&h, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(h), _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                                                                        0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

/// The 32 unsigned codes of a block of the 32-element type T at p (Q4_1: 0..15; Q5_0, Q5_1:
/// 0..31), element order.
template <GgmlType T>
ACCEL_TARGET_AVX2 inline __m256i codes32_avx2(const std::byte* p) noexcept {
  using B = io::ggml_block_t<T>;
  if constexpr (T == GgmlType::q4_1) {
    return nibbles_avx2(p + offsetof(B, qs));
  } else {
    return _mm256_or_si256(nibbles_avx2(p + offsetof(B, qs)), fifth_bits_avx2(p + offsetof(B, qh)));
  }
}

/// Q4_1, Q5_0 and Q5_1 for R activation rows, as Q4_0: two blocks a step into two accumulators
/// per row, the codes' products scaled by d_w d_x; the rest of each block's value meets the
/// activation's block sum s in one scalar term: Q5_0's -16 d_w d_x s, Q4_1's / Q5_1's m_w d_x s
/// (ggml's Q8_1 partner holds d_x s). Each block's codes and scales are decoded once for the R
/// rows; the one-row kernel is R = 1, so every R gives vec_dot's bits.
template <GgmlType T, int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot32_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                         float* out) noexcept {
  using B = io::ggml_block_t<T>;
  constexpr bool has_min = T != GgmlType::q5_0;
  __m256 acc0[R], acc1[R];
  float offset[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps(), offset[r] = 0;
  const std::size_t blocks = n / 32;
  std::size_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const std::byte* p = w + b * sizeof(B);
    const std::byte* q = p + sizeof(B);
    prefetch_ahead<1>(p);
    const __m256i u0 = codes32_avx2<T>(p), u1 = codes32_avx2<T>(q);
    const float dw0 = scale_at(p), dw1 = scale_at(q);
    float mw0 = 0, mw1 = 0;
    if constexpr (has_min) mw0 = scale_at(p + offsetof(B, m)), mw1 = scale_at(q + offsetof(B, m));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const ActivationRow& a = *x[r];
      const __m256i s0 = dot_u8s8_avx2(u0, load32_avx2(a.q8_0[b].qs));
      const __m256i s1 = dot_u8s8_avx2(u1, load32_avx2(a.q8_0[b + 1].qs));
      const float dx0 = a.q8_0_scales[b], dx1 = a.q8_0_scales[b + 1];
      const float d0 = dw0 * dx0, d1 = dw1 * dx1;
      if constexpr (has_min) {
        offset[r] += mw0 * (dx0 * static_cast<float>(a.q8_0_sums[b])) + mw1 * (dx1 * static_cast<float>(a.q8_0_sums[b + 1]));
      } else {
        offset[r] += d0 * static_cast<float>(a.q8_0_sums[b]) + d1 * static_cast<float>(a.q8_0_sums[b + 1]);
      }
      acc0[r] = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(s0), acc0[r]);
      acc1[r] = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(s1), acc1[r]);
    }
  }
  if (b < blocks) {
    const std::byte* p = w + b * sizeof(B);
    const __m256i u = codes32_avx2<T>(p);
    const float dw = scale_at(p);
    float mw = 0;
    if constexpr (has_min) mw = scale_at(p + offsetof(B, m));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const ActivationRow& a = *x[r];
      const float dx = a.q8_0_scales[b], d = dw * dx;
      if constexpr (has_min) offset[r] += mw * (dx * static_cast<float>(a.q8_0_sums[b]));
      else offset[r] += d * static_cast<float>(a.q8_0_sums[b]);
      acc0[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(dot_u8s8_avx2(u, load32_avx2(a.q8_0[b].qs))), acc0[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const float dots = hsum8_avx2(_mm256_add_ps(acc0[r], acc1[r]));
    out[r] = has_min ? dots + offset[r] : dots - 16.0f * offset[r];
  }
}

template <GgmlType T>
ACCEL_TARGET_AVX2 inline float dot32_avx2(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return one_row<dot32_rows_avx2<T, 1>>(n, w, x);
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
    detail::prefetch_ahead<2>(p);
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
    detail::prefetch_ahead<1>(p);
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

ACCEL_TARGET_AVX2 inline float dot_q4_1(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot32_avx2<GgmlType::q4_1>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_q5_0(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot32_avx2<GgmlType::q5_0>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_q5_1(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::dot32_avx2<GgmlType::q5_1>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_q4_k(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_q4_k_rows_avx2<1>>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_q6_k(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_q6_k_rows_avx2<1>>(n, w, x);
}

}  // namespace accel::quant

#endif
