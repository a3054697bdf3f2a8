// The AVX2 int8 product of LLM.int8(): both operands widened to 16 bits and multiplied by
// VPMADDWD, which adds each pair of products into a 32-bit lane exactly, so any int8 codes work,
// -128 included on both sides (VPMADDUBSW's sign trick would saturate on -128 x -128). The
// activation rows are widened once per call; each step widens two weight rows once for up to four
// activation rows, whose 4 x 2 sums stay in registers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "accel/core/simd_arch.hpp"
#include "accel/quant/kernels/activation_rows.hpp"
#include "accel/quant/kernels/int8_gemm/scalar.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::quant {
namespace detail {

/// Columns [r0, r1) of C for NT activation rows `a16` (int16, rows k apart), R weight rows a step.
template <int NT, int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void int8_tile_avx2(const std::int16_t* a16, const std::int8_t* b, std::size_t k,
                                                        std::size_t out, std::size_t r0, std::size_t r1,
                                                        std::int32_t* c) noexcept {
  const std::size_t kfull = k / 16 * 16;
  std::size_t r = r0;
  for (; r + R <= r1; r += R) {
    __m256i acc[NT][R];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 2
      for (int q = 0; q < R; ++q) acc[t][q] = _mm256_setzero_si256();
    }
    for (std::size_t j = 0; j < kfull; j += 16) {
      __m256i bv[R];
#pragma GCC unroll 2
      for (int q = 0; q < R; ++q) {
        const std::int8_t* row = b + (r + static_cast<std::size_t>(q)) * k + j;
        bv[q] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
      }
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a16 + static_cast<std::size_t>(t) * k + j));
#pragma GCC unroll 2
        for (int q = 0; q < R; ++q) acc[t][q] = _mm256_add_epi32(acc[t][q], _mm256_madd_epi16(av, bv[q]));
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 2
      for (int q = 0; q < R; ++q) {
        const std::size_t col = r + static_cast<std::size_t>(q);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc[t][q]), _mm256_extracti128_si256(acc[t][q], 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
        std::int32_t sum = _mm_cvtsi128_si32(s);
        for (std::size_t j = kfull; j < k; ++j) sum += a16[static_cast<std::size_t>(t) * k + j] * b[col * k + j];
        c[static_cast<std::size_t>(t) * out + col] = sum;
      }
    }
  }
  if constexpr (R > 1) {
    if (r < r1) int8_tile_avx2<NT, 1>(a16, b, k, out, r, r1, c);
  }
}

}  // namespace detail

/// AVX2: the activation codes widened once (this thread's buffer), groups of up to four rows
/// against two weight rows a step (detail::int8_tile_avx2); one row (decoding) against one weight
/// row at a time, a single stream from DRAM: 19-31 GB/s where two side by side ran 15-18 (5632 x
/// 2048, 2048 x 5632, 4096 x 4096, Zen 4 capped at AVX2, 2 threads).
ACCEL_TARGET_AVX2 inline void int8_linear_matmul(simd::requires_arch<simd::avx2>, const std::int8_t* a, std::size_t rows,
                                                 const std::int8_t* b, std::size_t k, std::size_t out, std::size_t r0,
                                                 std::size_t r1, std::int32_t* c) {
  std::int16_t* a16 = detail::activation_buffer<std::int16_t>(rows * k);
  for (std::size_t i = 0; i < rows * k; ++i) a16[i] = a[i];
  for (std::size_t t0 = 0; t0 < rows; t0 += 4) {
    const std::int16_t* at = a16 + t0 * k;
    std::int32_t* ct = c + t0 * out;
    switch (std::min<std::size_t>(4, rows - t0)) {
      case 1: detail::int8_tile_avx2<1, 1>(at, b, k, out, r0, r1, ct); break;
      case 2: detail::int8_tile_avx2<2, 2>(at, b, k, out, r0, r1, ct); break;
      case 3: detail::int8_tile_avx2<3, 2>(at, b, k, out, r0, r1, ct); break;
      default: detail::int8_tile_avx2<4, 2>(at, b, k, out, r0, r1, ct); break;
    }
  }
}

}  // namespace accel::quant

#endif
