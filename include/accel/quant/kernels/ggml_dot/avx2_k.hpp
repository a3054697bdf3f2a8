// The AVX2 dot products of Q2_K, Q3_K and Q5_K against Q8_K activations, a super-block at a time:
//
//   dot_q2_k / dot_q3_k / dot_q5_k(requires_arch<avx2>, n, w, x)      one activation row
//   detail::dot_q{2,3,5}_k_rows_avx2<R>(n, w, x, out)                R = 1..4 activation rows
//
// The one-row kernels are R = 1 of the multi-row ones (a super-block decoded once for R rows, as
// ggml_dot/avx2_rows.hpp does for Q4_K / Q6_K), so any R gives vec_dot's bits.
// Each 32-byte load of codes gives 32 elements in the activation's order (Q5_K: a chunk of qs is
// groups 2c and 2c + 1 in its low and high nibbles; Q2_K / Q3_K: bit pair j of chunk c is
// elements 128c + 32j .. + 31, two 16-element groups, one per 128-bit lane), so VPMADDUBSW meets
// one activation load per 32 codes and VPMADDWD weighs the pairs by their group's scale. Bits
// spread across bytes (Q5_K's fifth bits, Q3_K's high bits) are moved into place by 16-bit shifts
// of the whole register, a mask keeping only the bit that belongs to each byte. The mins (Q2_K,
// Q5_K) and Q3_K's offset of 4 meet the activation's 16-element sums in one VPMADDWD per block,
// never the codes. Q3_K's codes are taken as their low bits + 4 x the high bit (0..7, the value
// + 4), as Q6_K's are taken + 32 (ggml_dot/avx2_rows.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/avx2_rows.hpp"
#include "accel/quant/kernels/ggml_dot/scalar.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::quant {

namespace detail {

/// Sixteen 8-bit group scales (signed when Signed) as 16-bit words, the even groups' in the low
/// 128-bit lane and the odd ones' in the high lane: scale_pair_avx2 then takes groups 2k and
/// 2k + 1, the two halves of a 32-code register, with one shuffle.
template <bool Signed>
ACCEL_TARGET_AVX2 inline __m256i scales_even_odd_avx2(__m128i s) noexcept {
  const __m128i split = _mm_shuffle_epi8(s, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  if constexpr (Signed) return _mm256_cvtepi8_epi16(split);
  else return _mm256_cvtepu8_epi16(split);
}

/// Group 2k's scale in every word of the low lane, group 2k + 1's in the high lane.
ACCEL_TARGET_AVX2 inline __m256i scale_pair_avx2(__m256i even_odd, int k) noexcept {
  return _mm256_shuffle_epi8(even_odd, _mm256_set1_epi16(static_cast<short>((2 * k) | ((2 * k + 1) << 8))));
}

/// A Q3_K block's sixteen scales less 32, as signed bytes (detail::q3_k_scales' values) without
/// leaving the vector registers: the scalar word form ends in a 16-byte load of two 8-byte
/// stores, which the store buffer cannot forward. Low nibbles: bytes 0-7 give scales 0-7, their
/// high nibbles 8-15; high bit pairs: scale i takes pair i / 4 of byte 8 + i % 4, so the word of
/// bytes 8-11 is broadcast and each 32-bit lane k shifted down 2k bits.
ACCEL_TARGET_AVX2 inline __m128i q3_k_scales_avx2(const std::uint8_t* p) noexcept {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  std::int32_t hw;
  std::memcpy(&hw, p + 8, 4);
  const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(lo, low4), _mm_and_si128(_mm_srli_epi16(lo, 4), low4));
  const __m128i high = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(hw), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
  return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
}

/// Q2_K for R activation rows. Per super-block the sixteen scales (as pairs) and mins are decoded
/// once, and each register of codes once, meeting the R rows as it is made: one register of
/// codes live at a time, not eight, so R integer sums fit beside it without spilling.
template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_q2_k_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                            float* out) noexcept {
  using B = io::block_q2_k;
  const __m256i three = _mm256_set1_epi8(3);
  const __m128i low4 = _mm_set1_epi8(0x0F);
  __m256 acc[R], accm[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = accm[r] = _mm256_setzero_ps();
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto* blk = reinterpret_cast<const std::uint8_t*>(w + b * sizeof(B));
    prefetch_ahead<(sizeof(B) + 63) / 64>(blk);
    // Scale in the low nibble, min in the high one, per 16-element group.
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + offsetof(B, scales)));
    const __m256i scales = scales_even_odd_avx2<false>(_mm_and_si128(s, low4));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), low4));
    __m256i sumi[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const __m256i q = load32_avx2(blk + offsetof(B, qs) + 32 * c);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const int k = 4 * c + j;
        const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three), scale = scale_pair_avx2(scales, k);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256i prod = _mm256_maddubs_epi16(u, load32_avx2(x[r]->q8_k[b].qs + 32 * k));
          sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(prod, scale));
        }
      }
    }
    const float fd = scale_at(blk + offsetof(B, d)), fmin = scale_at(blk + offsetof(B, dmin));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const io::block_q8_k& a = x[r]->q8_k[b];
      const __m256i summ = _mm256_madd_epi16(load32_avx2(a.bsums), mins);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * fd), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
      accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * fmin), _mm256_cvtepi32_ps(summ), accm[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum8_avx2(_mm256_sub_ps(acc[r], accm[r]));
}

/// Q3_K for R activation rows, as Q2_K: the codes (low bits + 4 x the high bit) made a register
/// at a time for the R rows, the offset (-4 x each group's scale against the activation's sums)
/// in the same integer sum.
template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_q3_k_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                            float* out) noexcept {
  using B = io::block_q3_k;
  const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto* blk = reinterpret_cast<const std::uint8_t*>(w + b * sizeof(B));
    prefetch_ahead<(sizeof(B) + 63) / 64>(blk);
    const __m128i s = q3_k_scales_avx2(blk + offsetof(B, scales));
    const __m256i scales = scales_even_odd_avx2<true>(s);
    const __m256i offset_scale = _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_cvtepi8_epi16(s)), 2);
    __m256i sumi[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_madd_epi16(load32_avx2(x[r]->q8_k[b].bsums), offset_scale);
    // hmask's bit m (m = 4c + j) is the high bit of elements 32m .. 32m + 31, moved to bit 2 of
    // each byte by one shift of the whole register.
    const __m256i h = load32_avx2(blk + offsetof(B, hmask));
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const __m256i q = load32_avx2(blk + offsetof(B, qs) + 32 * c);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const int k = 4 * c + j;
        const __m256i hk = k <= 2 ? _mm256_slli_epi16(h, 2 - k) : _mm256_srli_epi16(h, k - 2);
        const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three), _mm256_and_si256(hk, four));
        const __m256i scale = scale_pair_avx2(scales, k);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256i prod = _mm256_maddubs_epi16(u, load32_avx2(x[r]->q8_k[b].qs + 32 * k));
          sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(prod, scale));
        }
      }
    }
    const float fd = scale_at(blk + offsetof(B, d));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(x[r]->q8_k[b].d * fd), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum8_avx2(acc[r]);
}

/// Q5_K for R activation rows: the eight scales and the mins decoded once per super-block, each
/// chunk of codes (two groups: nibbles + fifth bits) made once and met by the R rows.
template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_q5_k_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                            float* out) noexcept {
  using B = io::block_q5_k;
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  __m256 acc[R], accm[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = accm[r] = _mm256_setzero_ps();
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto* blk = reinterpret_cast<const std::uint8_t*>(w + b * sizeof(B));
    prefetch_ahead<(sizeof(B) + 63) / 64>(blk);
    std::uint8_t sc[8], mn[8];
    io::k4_scales_mins(blk + offsetof(B, scales), sc, mn);
    __m256i sumi[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
    // qh's bit g is the fifth bit of group g: two groups per chunk, then two bits down.
    __m256i h = load32_avx2(blk + offsetof(B, qh));
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load32_avx2(blk + offsetof(B, qs) + 32 * c);
      const __m256i u0 = _mm256_or_si256(_mm256_and_si256(q, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), bit4));
      const __m256i u1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), _mm256_and_si256(_mm256_slli_epi16(h, 3), bit4));
      h = _mm256_srli_epi16(h, 2);
      const __m256i s0 = _mm256_set1_epi16(sc[2 * c]), s1 = _mm256_set1_epi16(sc[2 * c + 1]);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::int8_t* a = x[r]->q8_k[b].qs + 64 * c;
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(u0, load32_avx2(a)), s0);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(u1, load32_avx2(a + 32)), s1);
        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(p0, p1));
      }
    }
    // Each group's min against its two 16-element activation sums: the mins doubled in place.
    std::int64_t mn8;
    std::memcpy(&mn8, mn, 8);
    const __m128i m = _mm_cvtsi64_si128(mn8);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
    const float fd = scale_at(blk + offsetof(B, d)), fmin = scale_at(blk + offsetof(B, dmin));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const io::block_q8_k& a = x[r]->q8_k[b];
      const __m256i summ = _mm256_madd_epi16(load32_avx2(a.bsums), mins);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * fd), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
      accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * fmin), _mm256_cvtepi32_ps(summ), accm[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum8_avx2(_mm256_sub_ps(acc[r], accm[r]));
}

}  // namespace detail

ACCEL_TARGET_AVX2 inline float dot_q2_k(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_q2_k_rows_avx2<1>>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_q3_k(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_q3_k_rows_avx2<1>>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_q5_k(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                        const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_q5_k_rows_avx2<1>>(n, w, x);
}

}  // namespace accel::quant

#endif
