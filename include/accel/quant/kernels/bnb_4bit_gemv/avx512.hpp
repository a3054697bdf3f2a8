// The AVX-512 bitsandbytes 4-bit products: sixteen codes index the code book by one permute
// (VPERMPS over a 16-entry table), against activations split into even and odd elements.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "accel/core/simd_arch.hpp"
#include "accel/quant/kernels/activation_rows.hpp"
#include "accel/quant/kernels/bnb_4bit_gemv/avx2.hpp"
#include "accel/quant/kernels/bnb_4bit_gemv/scalar.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::quant {

namespace detail {
/// Sixteen weights from byte `i / 2` on: each code's decode value (a table permute) times its
/// block's absmax, in element order.
ACCEL_TARGET_AVX512 inline __m512 decode_16_weights(const std::uint8_t* w, std::size_t i, __m512 table, float scale) noexcept {
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + i / 2));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
  const __m128i lo = _mm_and_si128(raw, low);
  const __m512i idx = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(hi, lo));
  return _mm512_mul_ps(_mm512_permutexvar_ps(idx, table), _mm512_set1_ps(scale));
}

/// Output rows [r0, r1) for NT activation rows at x. Two accumulators per activation row, fed by
/// alternate 16-weight steps: with one, a single activation row (decoding) waited on the FMA's
/// latency every step and ran at 6 GB/s of packed weights. Out of line with its loops unrolled, so
/// that the accumulators stay in registers.
template <int NT>
[[gnu::noinline]] ACCEL_TARGET_AVX512 void gemv_4bit_rows_x(const float* x, const std::uint8_t* w, const float* absmax,
                                                            const float* lut, int shift, std::size_t in,
                                                            std::size_t out, std::size_t r0, std::size_t r1,
                                                            float* y) noexcept {
  const __m512 table = _mm512_loadu_ps(lut);
  for (std::size_t r = r0; r < r1; ++r) {
    __m512 acc0[NT], acc1[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
    const std::size_t base = r * in;
    std::size_t k = 0;
    for (; k + 32 <= in; k += 32) {
      const std::size_t i = base + k;
      const __m512 w0 = decode_16_weights(w, i, table, absmax[i >> shift]);
      const __m512 w1 = decode_16_weights(w, i + 16, table, absmax[(i + 16) >> shift]);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        acc0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * in + k), acc0[t]);
        acc1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + t * in + k + 16), acc1[t]);
      }
    }
    if (k < in) {
      const __m512 w0 = decode_16_weights(w, base + k, table, absmax[(base + k) >> shift]);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) acc0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * in + k), acc0[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) y[t * out + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
  }
}

/// `n` floats (a multiple of 32) of activation rows rearranged for gemv_4bit_pairs and
/// gemv_4bit_tile: in each run of 32, the 16 even elements, then the 16 odd ones (a packed byte
/// holds an even element's code in its high nibble and the next one's in its low).
ACCEL_TARGET_AVX512 inline void split_even_odd(const float* x, std::size_t n, float* xs) noexcept {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (std::size_t i = 0; i < n; i += 32) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    _mm512_storeu_ps(xs + i, _mm512_permutex2var_ps(a, even, b));
    _mm512_storeu_ps(xs + i + 16, _mm512_permutex2var_ps(a, odd, b));
  }
}

/// Output rows [r0, r1) for one activation row split by split_even_odd (decoding), `in` a multiple
/// of 32, blocks of at least 32: sixteen bytes widen once to sixteen lanes whose high and low
/// nibbles index the table (the permute reads an index's low four bits, so the low nibble needs no
/// mask): three shuffle-port instructions per 32 weights where gemv_4bit_rows_x takes six. Each
/// block's products are summed unscaled in two short chains and its absmax applied once. Several
/// activation rows take gemv_4bit_tile: one row at a time they would be bound by reading the
/// activations once per weight row.
[[gnu::noinline]] ACCEL_TARGET_AVX512 inline void gemv_4bit_pairs(const float* x, const std::uint8_t* w,
                                                                  const float* absmax, const float* lut, int shift,
                                                                  std::size_t in, std::size_t r0, std::size_t r1,
                                                                  float* y) noexcept {
  const __m512 table = _mm512_loadu_ps(lut);
  const std::size_t bs = std::size_t{1} << shift;
  for (std::size_t r = r0; r < r1; ++r) {
    __m512 acc = _mm512_setzero_ps();
    const std::size_t base = r * in;
    for (std::size_t k = 0; k < in;) {
      const std::size_t i = base + k;
      const std::size_t end = std::min(in, k + bs - (i & (bs - 1)));
      __m512 hi = _mm512_setzero_ps(), lo = _mm512_setzero_ps();
      for (; k < end; k += 32) {
        const __m512i codes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + (base + k) / 2)));
        hi = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), table), _mm512_loadu_ps(x + k), hi);
        lo = _mm512_fmadd_ps(_mm512_permutexvar_ps(codes, table), _mm512_loadu_ps(x + k + 16), lo);
      }
      acc = _mm512_fmadd_ps(_mm512_add_ps(hi, lo), _mm512_set1_ps(absmax[i >> shift]), acc);
    }
    y[r] = _mm512_reduce_add_ps(acc);
  }
}

/// Output rows [r0, r1) for NT activation rows split by split_even_odd, `in` a multiple of 32,
/// blocks of at least 32: R weight rows decode per step (scaled by their absmax) and meet each
/// activation load, so the activations are read once per R weight rows instead of once per row
/// (eight rows of 4096 floats do not fit in L1). Single-threaded, 16 activation rows, m = 4096:
/// R = 4 took 5.3 / 17.0 ms at k = 4096 / 14336, R = 2 10.9 / 25.6, one weight row at a time in
/// element order (gemv_4bit_rows_x) 15.4 / 55.4; R = 4 is best at eight rows even though its 32
/// sums do not all stay in registers.
template <int NT, int R>
[[gnu::noinline]] ACCEL_TARGET_AVX512 void gemv_4bit_tile(const float* x, const std::uint8_t* w, const float* absmax,
                                                          const float* lut, int shift, std::size_t in,
                                                          std::size_t out, std::size_t r0, std::size_t r1,
                                                          float* y) noexcept {
  const __m512 table = _mm512_loadu_ps(lut);
  std::size_t r = r0;
  for (; r + R <= r1; r += R) {
    __m512 acc[NT][R];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 4
      for (int j = 0; j < R; ++j) acc[t][j] = _mm512_setzero_ps();
    }
    for (std::size_t k = 0; k < in; k += 32) {
      __m512 wh[R], wl[R];
#pragma GCC unroll 4
      for (int j = 0; j < R; ++j) {
        const std::size_t i = (r + static_cast<std::size_t>(j)) * in + k;
        const __m512i codes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i / 2)));
        const __m512 scale = _mm512_set1_ps(absmax[i >> shift]);
        wh[j] = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), table), scale);
        wl[j] = _mm512_mul_ps(_mm512_permutexvar_ps(codes, table), scale);
      }
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m512 xe = _mm512_loadu_ps(x + t * in + k), xo = _mm512_loadu_ps(x + t * in + k + 16);
#pragma GCC unroll 4
        for (int j = 0; j < R; ++j) acc[t][j] = _mm512_fmadd_ps(wl[j], xo, _mm512_fmadd_ps(wh[j], xe, acc[t][j]));
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 4
      for (int j = 0; j < R; ++j) y[t * out + r + static_cast<std::size_t>(j)] = _mm512_reduce_add_ps(acc[t][j]);
    }
  }
  if constexpr (R > 1) {
    if (r < r1) gemv_4bit_tile<NT, 1>(x, w, absmax, lut, shift, in, out, r, r1, y);
  }
}

}  // namespace detail

/// AVX-512. With `in` a multiple of 32 and blocks of at least 32, the activations are split into
/// even and odd elements (a buffer of this thread's) and 32 weights decode per step: one row
/// (decoding) in gemv_4bit_pairs, groups of up to eight rows against four weight rows at a time in
/// gemv_4bit_tile. Otherwise, with in % 16 == 0 (a step never leaves its row or its block), 16
/// weights per step in element order shared by up to eight rows; the scalar kernel does the rest.
ACCEL_TARGET_AVX512 inline void gemv_4bit_rows(simd::requires_arch<simd::avx512>, const float* x, std::size_t rows,
                                               const std::uint8_t* w, const float* absmax, const float* lut,
                                               std::size_t bs, std::size_t in, std::size_t out, std::size_t r0,
                                               std::size_t r1, float* y) {
  if (in % 16 != 0) return gemv_4bit_rows(simd::scalar{}, x, rows, w, absmax, lut, bs, in, out, r0, r1, y);
  const int shift = std::countr_zero(bs);
  // One row with blocks of at least 64 goes to the AVX2 tier's 16-bit integer form: on Zen 4 it
  // read 17-18 GB/s of packed weights where gemv_4bit_pairs read 12-19 (m x k = 5632 x 2048, 2048 x
  // 5632, 4096 x 4096, 2 threads); with four rows it lost (7.0 against 7.6 GB/s).
  if (rows == 1 && in % detail::int16_run == 0 && bs >= detail::int16_run) {
    return gemv_4bit_rows(simd::avx2{}, x, rows, w, absmax, lut, bs, in, out, r0, r1, y);
  }
  if (in % 32 == 0 && bs >= 32) {
    float* split = detail::activation_buffer<float>(rows * in);
    detail::split_even_odd(x, rows * in, split);
    if (rows == 1) return detail::gemv_4bit_pairs(split, w, absmax, lut, shift, in, r0, r1, y);
    detail::for_row_groups(rows, [&](std::size_t t0, auto nt) {
      detail::gemv_4bit_tile<decltype(nt)::value, 4>(split + t0 * in, w, absmax, lut, shift, in, out, r0, r1,
                                                     y + t0 * out);
    });
    return;
  }
  detail::for_row_groups(rows, [&](std::size_t t0, auto nt) {
    detail::gemv_4bit_rows_x<decltype(nt)::value>(x + t0 * in, w, absmax, lut, shift, in, out, r0, r1, y + t0 * out);
  });
}

}  // namespace accel::quant

#endif
