// The AVX2 dot products of IQ4_NL, IQ4_XS and TQ2_0, for R activation rows (the one-row kernels
// are R = 1, so vec_dot and vec_dot_rows give the same bits):
//
//   dot_iq4_nl_rows_avx2<R>(n, w, x, out)    32-element blocks against Q8_0, two blocks a step
//   dot_iq4_xs_rows_avx2<R>(n, w, x, out)    256-element blocks of eight scaled sub-blocks, against Q8_K
//                                            (its ints rearranged once per row: q8_k_lanes)
//   dot_tq2_0_rows_avx2<R>(n, w, x, out)     256 ternary codes against Q8_K
//
// IQ4's nibbles become their signed values by one VPSHUFB into the code book; VPMADDUBSW wants an
// unsigned operand, so the values enter as |v| and the activation takes v's sign (VPSIGNB), at
// most 127 x 127 per product and 32258 per pair: no saturation. TQ2_0's codes (0..3) are unsigned
// already: eight VPMADDUBSW results add up in 16 bits (at most 8 x 762), the activation's sixteen
// partial sums (the offset of 1) are taken out in the same lanes, and one VPMADDWD widens.
// Weight blocks are read in place: a copy of a block onto the stack (detail::load_block), then
// loaded by 16- and 32-byte loads, stalls on store forwarding and cost a third of IQ4_XS's speed.
// Each step prefetches the lines 4 KB ahead (detail::prefetch_ahead): a decode streams the matrix
// from DRAM, and the hardware prefetchers alone left IQ4_XS at 9-10 GB/s of the 16-21 there are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/avx2.hpp"
#include "accel/quant/kernels/ggml_dot/scalar_iq.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::quant {

namespace detail {

/// The code book in both 128-bit lanes, for VPSHUFB.
ACCEL_TARGET_AVX2 inline __m256i iq4nl_book_avx2() noexcept {
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(iq4nl_book.data())));
}

/// Sums of v[i] x s[i] over each four bytes into eight int32 lanes, v and s signed (v != -128).
ACCEL_TARGET_AVX2 inline __m256i dot_s8s8_avx2(__m256i abs_v, __m256i v, __m256i s) noexcept {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_v, _mm256_sign_epi8(s, v)), _mm256_set1_epi16(1));
}

template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_iq4_nl_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                              float* out) noexcept {
  constexpr std::size_t bytes = sizeof(io::block_iq4_nl);
  const __m256i book = iq4nl_book_avx2();
  __m256 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  const std::size_t blocks = n / 32;
  std::size_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const std::byte* p = w + b * bytes;
    prefetch_ahead<1>(p);  // 36 bytes a step
    const __m256i v0 = _mm256_shuffle_epi8(book, nibbles_avx2(p + 2)), v1 = _mm256_shuffle_epi8(book, nibbles_avx2(p + bytes + 2));
    const __m256i u0 = _mm256_abs_epi8(v0), u1 = _mm256_abs_epi8(v1);
    const float dw0 = scale_at(p), dw1 = scale_at(p + bytes);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const ActivationRow& a = *x[r];
      const __m256i s0 = dot_s8s8_avx2(u0, v0, load32_avx2(a.q8_0[b].qs));
      const __m256i s1 = dot_s8s8_avx2(u1, v1, load32_avx2(a.q8_0[b + 1].qs));
      acc0[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw0 * a.q8_0_scales[b]), _mm256_cvtepi32_ps(s0), acc0[r]);
      acc1[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw1 * a.q8_0_scales[b + 1]), _mm256_cvtepi32_ps(s1), acc1[r]);
    }
  }
  if (b < blocks) {
    const std::byte* p = w + b * bytes;
    const __m256i v = _mm256_shuffle_epi8(book, nibbles_avx2(p + 2)), u = _mm256_abs_epi8(v);
    const float dw = scale_at(p);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const ActivationRow& a = *x[r];
      const __m256i s = dot_s8s8_avx2(u, v, load32_avx2(a.q8_0[b].qs));
      acc0[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.q8_0_scales[b]), _mm256_cvtepi32_ps(s), acc0[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum8_avx2(_mm256_add_ps(acc0[r], acc1[r]));
}

/// Two sub-blocks a step: one 32-byte load holds both sub-blocks' codes, its low nibbles
/// elements 0-15 of each (one per 128-bit lane) and its high nibbles 16-31, against the
/// activation in that order (ActivationRow::q8_k_lanes); the eight scales are made in a word once
/// per block (io::iq4_xs_scales) and each step picks its two by one VPSHUFB, so no scalar work is
/// left per sub-block. The values and scales are made once for the R rows; each row keeps one
/// integer sum per block (VPMADDWD by the scales), scaled once.
template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_iq4_xs_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                              float* out) noexcept {
  const __m256i book = iq4nl_book_avx2(), low4 = _mm256_set1_epi8(0x0F);
  // Step k's scales: 16-bit lane pair 2k (sub-block 2k) in the low 128 bits, 2k + 1 in the high.
  const __m256i pick[4] = {
      _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3),
      _mm256_setr_epi8(4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7),
      _mm256_setr_epi8(8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11,
                       10, 11),
      _mm256_setr_epi8(12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15,
                       14, 15, 14, 15, 14, 15)};
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(io::block_iq4_xs);
    prefetch_ahead<3>(p);  // 136 bytes a block
    std::uint16_t scales_h;
    std::memcpy(&scales_h, p + offsetof(io::block_iq4_xs, scales_h), 2);
    const auto* scales_l = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq4_xs, scales_l));
    const __m128i s8 = _mm_sub_epi8(_mm_cvtsi64_si128(static_cast<long long>(io::iq4_xs_scales(scales_l, scales_h))), _mm_set1_epi8(32));
    const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(s8));
    const std::byte* qs = p + offsetof(io::block_iq4_xs, qs);
    __m256i sumi[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i q = load32_avx2(qs + 32 * k);
      const __m256i v_lo = _mm256_shuffle_epi8(book, _mm256_and_si256(q, low4));
      const __m256i v_hi = _mm256_shuffle_epi8(book, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
      const __m256i u_lo = _mm256_abs_epi8(v_lo), u_hi = _mm256_abs_epi8(v_hi);
      const __m256i scale = _mm256_shuffle_epi8(scales, pick[k]);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::int8_t* xl = x[r]->q8_k_lanes.data() + 256 * b + 64 * k;
        const __m256i p_lo = _mm256_maddubs_epi16(u_lo, _mm256_sign_epi8(load32_avx2(xl), v_lo));
        const __m256i p_hi = _mm256_maddubs_epi16(u_hi, _mm256_sign_epi8(load32_avx2(xl + 32), v_hi));
        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(_mm256_madd_epi16(p_lo, scale), _mm256_madd_epi16(p_hi, scale)));
      }
    }
    const float dw = scale_at(p);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[r]->q8_k[b].d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum8_avx2(acc[r]);
}

template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_tq2_0_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                             float* out) noexcept {
  const __m256i three = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(io::block_tq2_0);
    prefetch_ahead<2>(p);  // 66 bytes a block
    __m256i u[8];  // u[4c + l]: elements 128c + 32l .. + 31
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const __m256i q = load32_avx2(p + 32 * c);
      u[4 * c] = _mm256_and_si256(q, three);
      u[4 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), three);
      u[4 * c + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), three);
      u[4 * c + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), three);
    }
    const float dw = scale_at(p + offsetof(io::block_tq2_0, d));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const io::block_q8_k& a = x[r]->q8_k[b];
      __m256i sum16 = _mm256_sub_epi16(_mm256_setzero_si256(), load32_avx2(a.bsums));
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(u[k], load32_avx2(a.qs + 32 * k)));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), _mm256_cvtepi32_ps(_mm256_madd_epi16(sum16, ones)), acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum8_avx2(acc[r]);
}

}  // namespace detail

ACCEL_TARGET_AVX2 inline float dot_iq4_nl(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                          const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_iq4_nl_rows_avx2<1>>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_iq4_xs(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                          const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_iq4_xs_rows_avx2<1>>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_tq2_0(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                         const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_tq2_0_rows_avx2<1>>(n, w, x);
}

}  // namespace accel::quant

#endif
