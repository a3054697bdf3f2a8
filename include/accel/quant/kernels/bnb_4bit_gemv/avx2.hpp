// The AVX2 bitsandbytes 4-bit products. AVX2's permute takes eight entries, so a code looks up the
// 16-entry code book in both halves (VPERMPS twice) and its bit 3 picks one (VBLENDVPS). Eight
// packed bytes widen once to eight lanes whose high and low nibbles are the even and odd elements
// of sixteen weights, against activations split the same way once per call; each block's products
// are summed unscaled and its absmax applied once, as the AVX-512 kernel does.
//
// That lookup is bound by the shuffle ports (4-5 per sixteen weights, 8 GB/s of packed weights
// with one activation row on Zen 4, 2 threads), so blocks of at least 64 take the 16-bit integer
// form (int16_codes.hpp) instead: a byte shuffle per plane looks up 32 codes at once, VPMADDWD
// multiplies them with the activation codes, and each 64-element run is converted to float once.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "accel/backend/cpu/gemv/avx2.hpp"
#include "accel/core/simd_arch.hpp"
#include "accel/quant/kernels/activation_rows.hpp"
#include "accel/quant/kernels/bnb_4bit_gemv/int16_codes.hpp"
#include "accel/quant/kernels/bnb_4bit_gemv/scalar.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::quant {
namespace detail {

/// The code book entry of each lane's index (its low four bits; higher bits are ignored).
ACCEL_TARGET_AVX2 inline __m256 lut16_avx2(__m256i idx, __m256 low8, __m256 high8) noexcept {
  const __m256 a = _mm256_permutevar8x32_ps(low8, idx), b = _mm256_permutevar8x32_ps(high8, idx);
  return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

/// `n` floats (a multiple of 16) of activation rows rearranged: in each run of 16, the 8 even
/// elements, then the 8 odd ones (a packed byte holds an even element's code in its high nibble).
ACCEL_TARGET_AVX2 inline void split_even_odd_avx2(const float* x, std::size_t n, float* xs) noexcept {
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (std::size_t i = 0; i < n; i += 16) {
    // Each half: its evens in the low 128 bits, its odds in the high ones.
    const __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + i), even);
    const __m256 b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + i + 8), even);
    _mm256_storeu_ps(xs + i, _mm256_permute2f128_ps(a, b, 0x20));
    _mm256_storeu_ps(xs + i + 8, _mm256_permute2f128_ps(a, b, 0x31));
  }
}

/// Output rows [r0, r1) for NT activation rows split by split_even_odd_avx2, `in` a multiple of 16
/// and blocks of at least 16 (a step never leaves its block): each step decodes sixteen weights of
/// one row once for all NT activation rows; two sums per activation row per block (even, odd).
template <int NT>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void gemv_4bit_avx2(const float* x, const std::uint8_t* w, const float* absmax,
                                                        const float* lut, int shift, std::size_t in, std::size_t out,
                                                        std::size_t r0, std::size_t r1, float* y) noexcept {
  const __m256 low8 = _mm256_loadu_ps(lut), high8 = _mm256_loadu_ps(lut + 8);
  const std::size_t bs = std::size_t{1} << shift;
  for (std::size_t r = r0; r < r1; ++r) {
    __m256 acc[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    const std::size_t base = r * in;
    for (std::size_t k = 0; k < in;) {
      const std::size_t i = base + k;
      const std::size_t end = std::min(in, k + bs - (i & (bs - 1)));
      __m256 even[NT], odd[NT];
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) even[t] = odd[t] = _mm256_setzero_ps();
      for (; k < end; k += 16) {
        const __m256i codes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + (base + k) / 2)));
        const __m256 we = lut16_avx2(_mm256_srli_epi32(codes, 4), low8, high8);
        const __m256 wo = lut16_avx2(codes, low8, high8);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          even[t] = _mm256_fmadd_ps(we, _mm256_loadu_ps(x + t * in + k), even[t]);
          odd[t] = _mm256_fmadd_ps(wo, _mm256_loadu_ps(x + t * in + k + 8), odd[t]);
        }
      }
      const __m256 scale = _mm256_set1_ps(absmax[i >> shift]);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) acc[t] = _mm256_fmadd_ps(_mm256_add_ps(even[t], odd[t]), scale, acc[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      y[t * out + r] = backend::cpu::detail::hsum8(acc[t]);
    }
  }
}

/// Output rows [r0, r1) for NT activation rows split by split_even_odd_avx2, then quantized by
/// quantize_activation_runs (`xq`, `scales`), `in` a multiple of 64 and blocks of at least 64. Per
/// step sixteen packed bytes go to both lanes, the first keeping the high nibbles (the even
/// elements), the second the low ones; the byte-plane unpacks then yield elements 0-14 even, 1-15
/// odd, 16-30 even, 17-31 odd: the split order. 32 codes decode once for all NT rows; a run's
/// integer sums go to float once, times the block's absmax and the run's scale.
template <int NT>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void gemv_4bit_int16_avx2(const std::int16_t* xq, const float* scales,
                                                              const std::uint8_t* w, const float* absmax,
                                                              const Int16CodeBook& book, int shift, std::size_t in,
                                                              std::size_t out, std::size_t r0, std::size_t r1,
                                                              float* y) noexcept {
  const __m256i low = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(book.low)));
  const __m256i high = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(book.high)));
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i lanes = _mm256_setr_epi32(4, 4, 4, 4, 0, 0, 0, 0);
  const std::size_t runs = in / int16_run;
  for (std::size_t r = r0; r < r1; ++r) {
    __m256 acc[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    const std::uint8_t* row = w + r * in / 2;
    for (std::size_t c = 0; c < runs; ++c) {
      __m256i sum[NT];
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) sum[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
      for (std::size_t s = 0; s < 2; ++s) {
        const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c * 32 + s * 16)));
        const __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(raw, lanes), nibble);
        const __m256i lo = _mm256_shuffle_epi8(low, codes), hi = _mm256_shuffle_epi8(high, codes);
        const __m256i wa = _mm256_unpacklo_epi8(lo, hi), wb = _mm256_unpackhi_epi8(lo, hi);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const std::int16_t* xt = xq + static_cast<std::size_t>(t) * in + c * int16_run + s * 32;
          const __m256i pa = _mm256_madd_epi16(wa, _mm256_load_si256(reinterpret_cast<const __m256i*>(xt)));
          const __m256i pb = _mm256_madd_epi16(wb, _mm256_load_si256(reinterpret_cast<const __m256i*>(xt + 16)));
          sum[t] = _mm256_add_epi32(sum[t], _mm256_add_epi32(pa, pb));
        }
      }
      const float a = absmax[(r * in + c * int16_run) >> shift];
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_set1_ps(a * scales[static_cast<std::size_t>(t) * runs + c]), acc[t]);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      y[static_cast<std::size_t>(t) * out + r] = backend::cpu::detail::hsum8(acc[t]);
    }
  }
}

}  // namespace detail

/// AVX2: with `in` a multiple of 64 and blocks of at least 64, the 16-bit integer form
/// (gemv_4bit_int16_avx2, groups of up to four rows). Otherwise, with `in` a multiple of 16 and
/// blocks of at least 16, the activations split into even and odd elements (this thread's
/// buffer), groups of up to four rows per pass over the weight rows (their 2 x 4 block sums, 4
/// totals and the two decoded registers fit the sixteen registers); otherwise the scalar kernel.
ACCEL_TARGET_AVX2 inline void gemv_4bit_rows(simd::requires_arch<simd::avx2>, const float* x, std::size_t rows,
                                             const std::uint8_t* w, const float* absmax, const float* lut,
                                             std::size_t bs, std::size_t in, std::size_t out, std::size_t r0,
                                             std::size_t r1, float* y) {
  if (in % 16 != 0 || bs < 16) return gemv_4bit_rows(simd::scalar{}, x, rows, w, absmax, lut, bs, in, out, r0, r1, y);
  const int shift = std::countr_zero(bs);
  if (in % detail::int16_run == 0 && bs >= detail::int16_run) {
    const detail::Int16CodeBook book(lut);
    float* split = detail::activation_buffer<float>(rows * in + rows * in / detail::int16_run);
    float* scales = split + rows * in;
    std::int16_t* xq = detail::activation_buffer<std::int16_t>(rows * in);
    detail::split_even_odd_avx2(x, rows * in, split);
    detail::quantize_activation_runs(split, rows, in, book, xq, scales);
    for (std::size_t t0 = 0; t0 < rows; t0 += 4) {
      const std::int16_t* xs = xq + t0 * in;
      const float* ss = scales + t0 * (in / detail::int16_run);
      float* ys = y + t0 * out;
      switch (std::min<std::size_t>(4, rows - t0)) {
        case 1: detail::gemv_4bit_int16_avx2<1>(xs, ss, w, absmax, book, shift, in, out, r0, r1, ys); break;
        case 2: detail::gemv_4bit_int16_avx2<2>(xs, ss, w, absmax, book, shift, in, out, r0, r1, ys); break;
        case 3: detail::gemv_4bit_int16_avx2<3>(xs, ss, w, absmax, book, shift, in, out, r0, r1, ys); break;
        default: detail::gemv_4bit_int16_avx2<4>(xs, ss, w, absmax, book, shift, in, out, r0, r1, ys); break;
      }
    }
    return;
  }
  float* split = detail::activation_buffer<float>(rows * in);
  detail::split_even_odd_avx2(x, rows * in, split);
  for (std::size_t t0 = 0; t0 < rows; t0 += 4) {
    const float* xs = split + t0 * in;
    float* ys = y + t0 * out;
    switch (std::min<std::size_t>(4, rows - t0)) {
      case 1: detail::gemv_4bit_avx2<1>(xs, w, absmax, lut, shift, in, out, r0, r1, ys); break;
      case 2: detail::gemv_4bit_avx2<2>(xs, w, absmax, lut, shift, in, out, r0, r1, ys); break;
      case 3: detail::gemv_4bit_avx2<3>(xs, w, absmax, lut, shift, in, out, r0, r1, ys); break;
      default: detail::gemv_4bit_avx2<4>(xs, w, absmax, lut, shift, in, out, r0, r1, ys); break;
    }
  }
}

}  // namespace accel::quant

#endif
