// The AVX-512 VNNI int8 product of LLM.int8(): VPDPBUSD on activation codes stored unsigned.
#pragma once

#include <cstddef>
#include <cstdint>

#include "accel/core/simd_arch.hpp"
#include "accel/quant/kernels/activation_rows.hpp"
#include "accel/quant/kernels/int8_gemm/scalar.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::quant {

namespace detail {
/// One 64-byte step of int8_tile: plain loads for a whole step, a masked one for the tail (masked
/// byte loads ran the one-row product at 13-18 GB/s on Zen 5, plain ones at about twice that).
template <int NT, int R, bool Tail>
[[gnu::always_inline]] ACCEL_TARGET_AVX512_VNNI inline void int8_step(const std::uint8_t* au, const std::int8_t* b,
                                                                      std::size_t k, std::size_t r, std::size_t j,
                                                                      __mmask64 m, __m512i (&acc)[NT][R],
                                                                      __m512i (&sum)[R]) noexcept {
  auto load = [m](const void* p) ACCEL_TARGET_AVX512_VNNI {
    if constexpr (Tail) return _mm512_maskz_loadu_epi8(m, p);
    else return _mm512_loadu_si512(p);
  };
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i bv[R];
#pragma GCC unroll 4
  for (int q = 0; q < R; ++q) {
    bv[q] = load(b + (r + static_cast<std::size_t>(q)) * k + j);
    sum[q] = _mm512_dpbusd_epi32(sum[q], ones, bv[q]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    const __m512i av = load(au + static_cast<std::size_t>(t) * k + j);
#pragma GCC unroll 4
    for (int q = 0; q < R; ++q) acc[t][q] = _mm512_dpbusd_epi32(acc[t][q], av, bv[q]);
  }
}

/// Columns [r0, r1) of C for NT activation rows `au` stored as unsigned codes (a + 128), R weight
/// rows a step: VPDPBUSD multiplies unsigned by signed bytes, so sum((a + 128) b) - 128 sum(b) is
/// the product, with sum(b) taken by one more VPDPBUSD against ones per weight step (shared by
/// the activation rows). The R weight rows meet each activation load.
template <int NT, int R>
[[gnu::noinline]] ACCEL_TARGET_AVX512_VNNI void int8_tile(const std::uint8_t* au, const std::int8_t* b, std::size_t k,
                                                          std::size_t out, std::size_t r0, std::size_t r1,
                                                          std::int32_t* c) noexcept {
  std::size_t r = r0;
  for (; r + R <= r1; r += R) {
    __m512i acc[NT][R], sum[R];
#pragma GCC unroll 4
    for (int q = 0; q < R; ++q) {
      sum[q] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) acc[t][q] = _mm512_setzero_si512();
    }
    std::size_t j = 0;
    for (; j + 64 <= k; j += 64) int8_step<NT, R, false>(au, b, k, r, j, 0, acc, sum);
    if (j < k) int8_step<NT, R, true>(au, b, k, r, j, (__mmask64{1} << (k - j)) - 1, acc, sum);
#pragma GCC unroll 4
    for (int q = 0; q < R; ++q) {
      const std::int32_t shift = 128 * _mm512_reduce_add_epi32(sum[q]);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        c[static_cast<std::size_t>(t) * out + r + static_cast<std::size_t>(q)] = _mm512_reduce_add_epi32(acc[t][q]) - shift;
      }
    }
  }
  if constexpr (R > 1) {
    if (r < r1) int8_tile<NT, 1>(au, b, k, out, r, r1, c);
  }
}
}  // namespace detail

/// AVX-512 VNNI: the activation codes are stored once as unsigned (a + 128, in a buffer of this
/// thread's) and groups of up to eight rows meet four weight rows a step (detail::int8_tile). One
/// row (decoding) reads one weight row at a time: one stream from DRAM ran 24-27 GB/s where four
/// side by side ran 13-23 (m x k = 5632 x 2048, 2048 x 5632, 4096 x 4096, Zen 4, 2 threads).
/// Against a kernel that took each weight's sign onto every activation load (abs, a sign mask and
/// a masked subtract per step) with one weight row at a time, m = 4096, k = 4096 / 14336, 2
/// threads: one row 580 / 2132 -> 394 / 1437 us, 16 rows 3595 / 14870 -> 2145 / 7283 us. Any int8
/// codes work, -128 included on both sides.
ACCEL_TARGET_AVX512_VNNI inline void int8_linear_matmul(simd::requires_arch<simd::avx512_vnni>, const std::int8_t* a,
                                                        std::size_t rows, const std::int8_t* b, std::size_t k,
                                                        std::size_t out, std::size_t r0, std::size_t r1,
                                                        std::int32_t* c) {
  std::uint8_t* au = detail::activation_buffer<std::uint8_t>(rows * k);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  std::size_t i = 0;
  for (; i + 64 <= rows * k; i += 64) {
    _mm512_storeu_si512(au + i, _mm512_xor_si512(_mm512_loadu_si512(a + i), flip));
  }
  for (; i < rows * k; ++i) au[i] = static_cast<std::uint8_t>(a[i]) ^ 0x80u;
  if (rows == 1) return detail::int8_tile<1, 1>(au, b, k, out, r0, r1, c);
  detail::for_row_groups(rows, [&](std::size_t t0, auto nt) {
    detail::int8_tile<decltype(nt)::value, 4>(au + t0 * k, b, k, out, r0, r1, c + t0 * out);
  });
}

}  // namespace accel::quant

#endif
