// The AVX2 GEMV (x86-64-v3: AVX2, FMA, F16C): weight rows widened to f32 eight at a time in
// registers (f16 by F16C, bf16 by a zero-extend and a shift, which is exact) and multiplied into
// f32 accumulators by FMAs; x stays f32. One activation row (decoding) reads the weight rows one
// after another, four chunks in flight, prefetched 2 KB ahead; two or three rows meet two weight
// rows a step and four rows three, so that the accumulators, the weight chunks and one x chunk fit
// the sixteen registers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/backend/cpu/gemv/problem.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/simd_arch.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::backend::cpu::detail {

/// Weight rows of f32 / f16 / bf16: eight elements widened into a register, and one element for
/// the tail.
struct avx2_f32_row {
  static constexpr std::size_t bytes = 4;
  ACCEL_TARGET_AVX2 static __m256 load8(const std::byte* r, std::int64_t at) noexcept {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(r) + at);
  }
  static float at(const std::byte* r, std::int64_t t) noexcept {
    float v;
    std::memcpy(&v, r + 4 * t, 4);
    return v;
  }
};
struct avx2_f16_row {
  static constexpr std::size_t bytes = 2;
  ACCEL_TARGET_AVX2 static __m256 load8(const std::byte* r, std::int64_t at) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * at)));
  }
  static float at(const std::byte* r, std::int64_t t) noexcept {
    std::uint16_t b;
    std::memcpy(&b, r + 2 * t, 2);
    return static_cast<float>(half::from_bits(b));
  }
};
struct avx2_bf16_row {
  static constexpr std::size_t bytes = 2;
  ACCEL_TARGET_AVX2 static __m256 load8(const std::byte* r, std::int64_t at) noexcept {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * at)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static float at(const std::byte* r, std::int64_t t) noexcept {
    std::uint16_t b;
    std::memcpy(&b, r + 2 * t, 2);
    return static_cast<float>(bfloat16::from_bits(b));
  }
};

ACCEL_TARGET_AVX2 inline float hsum8(__m256 v) noexcept {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// How far ahead of its loads a one-row tile (decoding) prefetches its weight row: the hardware
/// prefetcher alone left two threads of a Zen 3 at 19-21 GB/s on bf16 and f16 rows of the 483M
/// model's shapes, 2 KB ahead they read 22-25 (bf16) and 21-23 (f16); 1.5 and 3 KB did no better.
inline constexpr std::ptrdiff_t avx2_prefetch_bytes = 2048;

/// R weight rows from j against M activation rows (k elements of X apart: f32, or the weight's
/// dtype when GemvProblem::x_exact), U chunks of eight in flight per pair: out[i * n + j + r].
/// `Prefetch`: each weight row's lines avx2_prefetch_bytes ahead of every step.
template <class W, int M, int R, int U, class X = avx2_f32_row, bool Prefetch = false>
ACCEL_TARGET_AVX2 inline void gemv_tile_avx2(const std::byte* x, std::int64_t k, const std::byte* w, std::size_t row_bytes,
                                             std::size_t j, std::int64_t n, const float* bias, float* out) noexcept {
  const std::byte* rows[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) rows[r] = w + (j + static_cast<std::size_t>(r)) * row_bytes;
  __m256 acc[M][R][U];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) acc[i][r][u] = _mm256_setzero_ps();
    }
  }
  std::int64_t kk = 0;
  for (; kk + 8 * U <= k; kk += 8 * U) {
    if constexpr (Prefetch) prefetch_rows(rows, W::bytes * static_cast<std::size_t>(kk), avx2_prefetch_bytes, 8 * U * W::bytes);
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      __m256 wv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) wv[r] = W::load8(rows[r], kk + 8 * u);
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) {
        const __m256 xv = X::load8(x + X::bytes * static_cast<std::size_t>(i * k), kk + 8 * u);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[i][r][u] = _mm256_fmadd_ps(xv, wv[r], acc[i][r][u]);
      }
    }
  }
  for (; kk + 8 <= k; kk += 8) {
    __m256 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = W::load8(rows[r], kk);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m256 xv = X::load8(x + X::bytes * static_cast<std::size_t>(i * k), kk);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[i][r][0] = _mm256_fmadd_ps(xv, wv[r], acc[i][r][0]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m256 a = acc[i][r][0];
#pragma GCC unroll 8
      for (int u = 1; u < U; ++u) a = _mm256_add_ps(a, acc[i][r][u]);
      float s = hsum8(a);
      for (std::int64_t t = kk; t < k; ++t) s += X::at(x + X::bytes * static_cast<std::size_t>(i * k), t) * W::at(rows[r], t);
      const std::size_t col = j + static_cast<std::size_t>(r);
      out[i * n + static_cast<std::int64_t>(col)] = s + (bias ? bias[col] : 0.0f);
    }
  }
}

/// Tiles of M activation rows (values of X) against weight rows [j0, j1) (gemv_by_rows).
template <class W, class X = avx2_f32_row>
struct avx2_blocks {
  /// Full tiles take three weight rows, shorter ones two: blocks of a multiple of six end without
  /// a one-row tile (it ran at a third of the rate: 64 rows per block left one in each, 4% of a
  /// 64-token F16 prompt on Zen 5 capped at AVX2).
  static constexpr std::size_t rows_multiple = 6;
  template <int M>
  ACCEL_TARGET_AVX2 static void block(const std::byte* x, std::int64_t k, const std::byte* w, std::size_t row_bytes,
                                      std::size_t j0, std::size_t j1, std::int64_t n, const float* bias, float* out) noexcept {
    std::size_t j = j0;
    if constexpr (M == 1) {
      for (; j < j1; ++j) gemv_tile_avx2<W, 1, 1, 4, X, true>(x, k, w, row_bytes, j, n, bias, out);
    } else {
      // Full tiles of four activation rows meet three weight rows: 12 accumulators, three weight
      // chunks and one x chunk fill the sixteen registers (64 x 2048 x 5632 f16: 150 GFLOPS
      // against 139 with two, Zen 4 capped at AVX2, 2 threads).
      if constexpr (M == 4) {
        for (; j + 3 <= j1; j += 3) gemv_tile_avx2<W, M, 3, 1, X>(x, k, w, row_bytes, j, n, bias, out);
      }
      for (; j + 2 <= j1; j += 2) gemv_tile_avx2<W, M, 2, 1, X>(x, k, w, row_bytes, j, n, bias, out);
      if (j < j1) gemv_tile_avx2<W, M, 1, 1, X>(x, k, w, row_bytes, j, n, bias, out);
    }
  }
};

/// gemv of `p` for weights of `wd` (f32, f16 or bf16). When p.x_exact (problem.hpp) x is read
/// narrowed: f16 at any row count, bf16 for one row only (widening bf16 takes two operations
/// where F16C takes one, and a tile of rows is bound by them: GemvKernels::half_tiles_exact).
inline void gemv(simd::requires_arch<simd::avx2>, DType wd, const GemvProblem& p) {
  const bool exact = p.x_exact || p.x_half;
  if (wd == DType::bf16) {
    if (exact && p.m == 1) return gemv_by_rows<avx2_blocks<avx2_bf16_row, avx2_bf16_row>>(p, gemv_narrowed_x(p, wd), 2);
    return gemv_by_rows<avx2_blocks<avx2_bf16_row>>(gemv_f32_x(p, wd));
  }
  if (wd == DType::f16) {
    if (exact) return gemv_by_rows<avx2_blocks<avx2_f16_row, avx2_f16_row>>(p, gemv_narrowed_x(p, wd), 2);
    return gemv_by_rows<avx2_blocks<avx2_f16_row>>(gemv_f32_x(p, wd));
  }
  gemv_by_rows<avx2_blocks<avx2_f32_row>>(p);
}

}  // namespace accel::backend::cpu::detail

#endif
