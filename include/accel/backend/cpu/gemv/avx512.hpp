// The AVX-512 GEMVs. `avx512`: weight rows widened to f32 sixteen at a time (f16 by VCVTPH2PS,
// bf16 by a zero-extend and a shift) into f32 FMAs, tails by masked loads. `avx512_bf16`: bf16
// weights by VDPBF16PS on bf16 pairs, x rounded to bf16 once per call (it is a bf16 activation
// in a bf16 model, so nothing is lost there); f32 and f16 as `avx512`. One activation row
// (decoding) reads the weight rows one after another, four chunks in flight: four interleaved row
// streams, each a few KB long, read about a quarter slower on Zen 4. Two or three rows meet four
// weight rows a step, four rows five, their accumulators in registers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <cstring>
#include <vector>

#include "accel/backend/cpu/gemv/problem.hpp"
#include "accel/core/convert.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/simd_arch.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

ACCEL_SIMD_QUIET_BEGIN  // core/simd_arch.hpp: GCC 12's false uninitialized warnings

namespace accel::backend::cpu::detail {

/// How far ahead of its loads each weight stream is prefetched: on an Intel Xeon with the weights
/// in its L3 (4096 x 14336 bf16, 2 threads) 4 KB took one row from 2.7-3.2 ms to 2.4-2.7 ms.
inline constexpr std::ptrdiff_t gemv_prefetch_bytes = 4096;

/// Weight rows of f32 / f16 / bf16: sixteen elements widened into a register, whole or masked.
struct avx512_f32_row {
  static constexpr std::size_t bytes = 4;
  ACCEL_TARGET_AVX512 static __m512 load16(const std::byte* r, std::int64_t at, __mmask16 m) noexcept {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(r) + at);
  }
};
struct avx512_f16_row {
  static constexpr std::size_t bytes = 2;
  ACCEL_TARGET_AVX512 static __m512 load16(const std::byte* r, std::int64_t at, __mmask16 m) noexcept {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, r + 2 * at));
  }
};
struct avx512_bf16_row {
  static constexpr std::size_t bytes = 2;
  ACCEL_TARGET_AVX512 static __m512 load16(const std::byte* r, std::int64_t at, __mmask16 m) noexcept {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r + 2 * at)), 16));
  }
};

/// The sums of the sixteen lanes of a0, a1, a2 and a3, in lanes 0-3: four dot products finished
/// with a quarter of the shuffles four reductions take (with 2048-element chunks, reducing each
/// of a tile's 16 sums alone cost about a tenth of its time).
ACCEL_TARGET_AVX512 inline __m128 sum4_avx512(__m512 a0, __m512 a1, __m512 a2, __m512 a3) noexcept {
  const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, 0x44), _mm512_shuffle_ps(s01, s23, 0xEE));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/// Where a product's sums go: the first chunk of k writes them (with the bias), later ones add.
struct tile_store {
  const float* bias;
  bool accumulate;
  ACCEL_TARGET_AVX512 void four(float* o, std::size_t col, __m128 v) const noexcept {
    if (accumulate) {
      v = _mm_add_ps(v, _mm_loadu_ps(o));
    } else if (bias) {
      v = _mm_add_ps(v, _mm_loadu_ps(bias + col));
    }
    _mm_storeu_ps(o, v);
  }
  void one(float* o, std::size_t col, float v) const noexcept { *o = accumulate ? *o + v : v + (bias ? bias[col] : 0.0f); }
};

/// R weight rows from j against M activation rows (xs elements of X apart: f32, or the weight's
/// dtype when GemvProblem::x_exact) over k elements, U chunks of sixteen in flight. The loops
/// unroll by 8, past every M, R and U used: partly unrolled, GCC kept the accumulators in memory
/// (five weight rows then ran at half speed). `Prefetch`: each weight row's lines
/// gemv_prefetch_bytes ahead of every step (the one-row decode tiles on Intel, avx512_blocks).
template <class W, int M, int R, int U, class X = avx512_f32_row, bool Prefetch = false>
ACCEL_TARGET_AVX512 inline void gemv_tile_avx512(const std::byte* x, std::int64_t xs, std::int64_t k, const std::byte* w,
                                                 std::size_t row_bytes, std::size_t j, std::int64_t n, tile_store store,
                                                 float* out) noexcept {
  const std::byte* rows[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) rows[r] = w + (j + static_cast<std::size_t>(r)) * row_bytes;
  __m512 acc[M][R][U];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) acc[i][r][u] = _mm512_setzero_ps();
    }
  }
  const auto all = static_cast<__mmask16>(0xFFFF);
  std::int64_t kk = 0;
  for (; kk + 16 * U <= k; kk += 16 * U) {
    if constexpr (Prefetch) prefetch_rows(rows, W::bytes * static_cast<std::size_t>(kk), gemv_prefetch_bytes, 16 * U * W::bytes);
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      __m512 wv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) wv[r] = W::load16(rows[r], kk + 16 * u, all);
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) {
        const __m512 xv = X::load16(x + X::bytes * static_cast<std::size_t>(i * xs), kk + 16 * u, all);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[i][r][u] = _mm512_fmadd_ps(xv, wv[r], acc[i][r][u]);
      }
    }
  }
  for (; kk < k; kk += 16) {
    const auto mask = static_cast<__mmask16>(k - kk >= 16 ? 0xFFFF : (1u << (k - kk)) - 1);
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = W::load16(rows[r], kk, mask);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512 xv = X::load16(x + X::bytes * static_cast<std::size_t>(i * xs), kk, mask);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[i][r][0] = _mm512_fmadd_ps(xv, wv[r], acc[i][r][0]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    __m512 a[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      a[r] = acc[i][r][0];
#pragma GCC unroll 8
      for (int u = 1; u < U; ++u) a[r] = _mm512_add_ps(a[r], acc[i][r][u]);
    }
    float* o = out + i * n + static_cast<std::int64_t>(j);
    int r = 0;
    if constexpr (R >= 4) {
      store.four(o, j, sum4_avx512(a[0], a[1], a[2], a[3]));
      r = 4;
    }
#pragma GCC unroll 8
    for (; r < R; ++r) store.one(o + r, j + static_cast<std::size_t>(r), _mm512_reduce_add_ps(a[r]));
  }
}

/// Tiles of M activation rows (values of X) against weight rows [j0, j1) (gemv_by_rows).
/// `Prefetch`: the one-row tiles (decode) prefetch their weights (gemv_tile_avx512).
template <class W, class X = avx512_f32_row, bool Prefetch = false>
struct avx512_blocks {
  template <int M>
  ACCEL_TARGET_AVX512 static void block(const std::byte* x, std::int64_t k, const std::byte* w, std::size_t row_bytes,
                                        std::size_t j0, std::size_t j1, std::int64_t n, const float* bias, float* out) noexcept {
    chunk<M>(x, k, k, w, row_bytes, j0, j1, n, {bias, false}, out);
  }
  /// block over k elements of x rows xs apart (a chunk of a prompt's k, or all of it).
  template <int M>
  ACCEL_TARGET_AVX512 static void chunk(const std::byte* x, std::int64_t xs, std::int64_t k, const std::byte* w,
                                        std::size_t row_bytes, std::size_t j0, std::size_t j1, std::int64_t n,
                                        tile_store store, float* out) noexcept {
    std::size_t j = j0;
    if constexpr (M == 1) {
      for (; j < j1; ++j) gemv_tile_avx512<W, 1, 1, 4, X, Prefetch>(x, xs, k, w, row_bytes, j, n, store, out);
    } else {
      // Full tiles of four activation rows meet five weight rows (20 accumulators of the 32
      // registers): 64 x 2048 x 5632 f16 ran 206 GFLOPS against 177 with four (Zen 4, 2 threads).
      if constexpr (M == 4) {
        for (; j + 5 <= j1; j += 5) gemv_tile_avx512<W, M, 5, 1, X>(x, xs, k, w, row_bytes, j, n, store, out);
      }
      for (; j + 4 <= j1; j += 4) gemv_tile_avx512<W, M, 4, 1, X>(x, xs, k, w, row_bytes, j, n, store, out);
      for (; j < j1; ++j) gemv_tile_avx512<W, M, 1, 1, X>(x, xs, k, w, row_bytes, j, n, store, out);
    }
  }
};

/// Several tiles of f32 x rows (a prompt) against weights of W: each block of weight rows meets
/// every tile one chunk of k at a time.
template <class W>
void gemv_prompt_avx512(const GemvProblem& p) {
  const std::int64_t kc = prompt_chunk_elements(p.k);
  const auto* x = reinterpret_cast<const std::byte*>(p.x);
  // Blocks of whole groups of five weight rows (four-row tiles) and of four (shorter tiles): 128
  // rows ended in three single-row tiles, 2.7% of a 64-token F16 prompt.
  gemv_prompt_tiles(p, kc, static_cast<std::size_t>(kc) * W::bytes, 20,
                    [&](std::int64_t i, std::int64_t rows, std::int64_t k0, std::int64_t len, std::size_t j0,
                        std::size_t j1, bool accumulate) {
    const std::byte* xt = x + sizeof(float) * static_cast<std::size_t>(i * p.k + k0);
    const std::byte* wt = p.w + W::bytes * static_cast<std::size_t>(k0);
    const tile_store store{p.bias, accumulate};
    float* out = p.out + i * p.n;
    switch (rows) {
      case 1: avx512_blocks<W>::template chunk<1>(xt, p.k, len, wt, p.row_bytes, j0, j1, p.n, store, out); break;
      case 2: avx512_blocks<W>::template chunk<2>(xt, p.k, len, wt, p.row_bytes, j0, j1, p.n, store, out); break;
      case 3: avx512_blocks<W>::template chunk<3>(xt, p.k, len, wt, p.row_bytes, j0, j1, p.n, store, out); break;
      default: avx512_blocks<W>::template chunk<4>(xt, p.k, len, wt, p.row_bytes, j0, j1, p.n, store, out); break;
    }
  });
}

/// gemv of `p` for weights of `wd` (f32, f16 or bf16). One activation row of the weight's dtype
/// (p.x_exact, problem.hpp) is read narrowed; a tile of several stays in f32, whose four rows the
/// 32 registers leave room for (64 x 2048 x 5632 f16: 200 GFLOPS with x in f32, 183 narrowed, Zen
/// 4, 2 threads).
inline void gemv(simd::requires_arch<simd::avx512>, DType wd, const GemvProblem& p) {
  if (p.m > gemv_max_rows) {
    if (wd == DType::bf16) return gemv_prompt_avx512<avx512_bf16_row>(gemv_f32_x(p, wd));
    if (wd == DType::f16) return gemv_prompt_avx512<avx512_f16_row>(gemv_f32_x(p, wd));
    return gemv_prompt_avx512<avx512_f32_row>(p);
  }
  const bool narrow = (p.x_exact || p.x_half) && p.m == 1 && wd != DType::f32;
  if (wd == DType::bf16) {
    if (narrow) return gemv_by_rows<avx512_blocks<avx512_bf16_row, avx512_bf16_row>>(p, gemv_narrowed_x(p, wd), 2);
    return gemv_by_rows<avx512_blocks<avx512_bf16_row>>(gemv_f32_x(p, wd));
  }
  if (wd == DType::f16) {
    // A decode's f16 rows from DRAM: prefetched 4 KB ahead on Intel (a Sapphire Rapids Xeon, 2048
    // x 135168, 2 threads: 14.8-17.2 -> 21.4-22.3 GB/s), left to the hardware prefetchers on AMD,
    // where the same prefetch made the bf16 rows 6-8% slower (Zen 4, gemv_bf16_block).
    const auto rows = [&](auto prefetch) {
      constexpr bool P = decltype(prefetch)::value;
      if (narrow) return gemv_by_rows<avx512_blocks<avx512_f16_row, avx512_f16_row, P>>(p, gemv_narrowed_x(p, wd), 2);
      return gemv_by_rows<avx512_blocks<avx512_f16_row, avx512_f32_row, P>>(gemv_f32_x(p, wd));
    };
    return simd::cpu_is_intel() ? rows(std::true_type{}) : rows(std::false_type{});
  }
  gemv_by_rows<avx512_blocks<avx512_f32_row>>(p);
}

// ---- AVX512-BF16: bf16 pairs ----------------------------------------------------------------------

/// The bf16 dot-product step: four weight rows' 32 elements at `at` against M activation rows.
template <int M>
ACCEL_TARGET_AVX512_BF16 inline void dpbf16_step(__m512 (&acc)[M][4], const std::uint16_t* xb, std::int64_t kpad,
                                                 std::int64_t at, __m512i w0, __m512i w1, __m512i w2,
                                                 __m512i w3) noexcept {
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
    const auto xv = (__m512bh)_mm512_loadu_si512(xb + i * kpad + at);
    acc[i][0] = _mm512_dpbf16_ps(acc[i][0], xv, (__m512bh)w0);
    acc[i][1] = _mm512_dpbf16_ps(acc[i][1], xv, (__m512bh)w1);
    acc[i][2] = _mm512_dpbf16_ps(acc[i][2], xv, (__m512bh)w2);
    acc[i][3] = _mm512_dpbf16_ps(acc[i][3], xv, (__m512bh)w3);
  }
}

/// M (2-4) activation rows against weight rows four at a time, from j while four remain; returns
/// where it stopped. M is a template argument so that the 4 x M accumulators live in registers
/// (with a run-time row count GCC kept them in memory: 16 rows of 4096 x 4096, four tiles, took
/// 3.9 ms against 3.5 ms so, on an Intel Xeon, 2 threads). Keeping a tile's chunk of the weight
/// and activations in L1 (columns in chunks of 512, partial sums parked between chunks) measured
/// no faster (3.6 ms): the dot-product instruction is the bound, not the cache. `Prefetch`: each
/// weight stream is prefetched gemv_prefetch_bytes ahead, for rows read from memory once; a
/// prompt's chunks of k (read by every tile from the cache) go without: 4 KB ahead lands in the
/// next chunk, and 64 rows of 5632 x 2048 ran 380-410 GFLOPS with it, 575 without (Zen 5).
template <int M, bool Prefetch>
ACCEL_TARGET_AVX512_BF16 inline std::size_t gemv_bf16_rows4(const std::uint16_t* xb, std::int64_t kpad,
                                                            std::int64_t kfull, __mmask32 tail_mask, const std::byte* w,
                                                            std::size_t row_bytes, std::size_t j, std::size_t j1,
                                                            std::int64_t n, tile_store store, float* out) noexcept {
  for (; j + 4 <= j1; j += 4) {
    const auto* r0 = reinterpret_cast<const std::uint16_t*>(w + j * row_bytes);
    const auto* r1 = reinterpret_cast<const std::uint16_t*>(w + (j + 1) * row_bytes);
    const auto* r2 = reinterpret_cast<const std::uint16_t*>(w + (j + 2) * row_bytes);
    const auto* r3 = reinterpret_cast<const std::uint16_t*>(w + (j + 3) * row_bytes);
    __m512 acc[M][4];
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
      for (auto& a : acc[i]) a = _mm512_setzero_ps();
    }
    std::int64_t kk = 0;
    for (; kk < kfull; kk += 32) {
      if constexpr (Prefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(r0 + kk) + gemv_prefetch_bytes, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(r1 + kk) + gemv_prefetch_bytes, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(r2 + kk) + gemv_prefetch_bytes, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(r3 + kk) + gemv_prefetch_bytes, _MM_HINT_T0);
      }
      dpbf16_step<M>(acc, xb, kpad, kk, _mm512_loadu_si512(r0 + kk), _mm512_loadu_si512(r1 + kk),
                     _mm512_loadu_si512(r2 + kk), _mm512_loadu_si512(r3 + kk));
    }
    if (tail_mask) {
      dpbf16_step<M>(acc, xb, kpad, kk, _mm512_maskz_loadu_epi16(tail_mask, r0 + kk),
                     _mm512_maskz_loadu_epi16(tail_mask, r1 + kk), _mm512_maskz_loadu_epi16(tail_mask, r2 + kk),
                     _mm512_maskz_loadu_epi16(tail_mask, r3 + kk));
    }
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
      store.four(out + i * n + static_cast<std::int64_t>(j), j, sum4_avx512(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
    }
  }
  return j;
}

/// One bf16 activation row against weight rows [j0, j1), 128 elements a step in four
/// accumulators; `Prefetch`: each row's stream gemv_prefetch_bytes ahead (four lines a step).
template <bool Prefetch>
ACCEL_TARGET_AVX512_BF16 inline void gemv_bf16_one(const std::uint16_t* xb, std::int64_t kfull, __mmask32 tail_mask,
                                                   const std::byte* w, std::size_t row_bytes, std::size_t j,
                                                   std::size_t j1, tile_store store, float* out) noexcept {
  for (; j < j1; ++j) {
    const auto* r = reinterpret_cast<const std::uint16_t*>(w + j * row_bytes);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    std::int64_t kk = 0;
    for (; kk + 128 <= kfull; kk += 128) {
      if constexpr (Prefetch) {
#pragma GCC unroll 4
        for (int l = 0; l < 4; ++l) _mm_prefetch(reinterpret_cast<const char*>(r + kk) + gemv_prefetch_bytes + 64 * l, _MM_HINT_T0);
      }
      a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(xb + kk), (__m512bh)_mm512_loadu_si512(r + kk));
      a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(xb + kk + 32), (__m512bh)_mm512_loadu_si512(r + kk + 32));
      a2 = _mm512_dpbf16_ps(a2, (__m512bh)_mm512_loadu_si512(xb + kk + 64), (__m512bh)_mm512_loadu_si512(r + kk + 64));
      a3 = _mm512_dpbf16_ps(a3, (__m512bh)_mm512_loadu_si512(xb + kk + 96), (__m512bh)_mm512_loadu_si512(r + kk + 96));
    }
    for (; kk < kfull; kk += 32) {
      a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(xb + kk), (__m512bh)_mm512_loadu_si512(r + kk));
    }
    if (tail_mask) {
      a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(xb + kk), (__m512bh)_mm512_maskz_loadu_epi16(tail_mask, r + kk));
    }
    store.one(out + j, j, _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))));
  }
}

/// bf16 weights: rows [j0, j1) over k elements from w (a chunk of each row), against m <=
/// gemv_max_rows x rows given as bf16 pairs `kpad` apart (zero padded past the row's end, so a
/// tail step may read whole 32-element steps of x). `Chunk`: w is a chunk of k that every tile of
/// a prompt reads from the cache, so the tiles prefetch nothing (gemv_bf16_rows4).
template <bool Chunk>
ACCEL_TARGET_AVX512_BF16 inline void gemv_bf16_block(const std::uint16_t* xb, std::int64_t kpad, std::int64_t m,
                                                     std::int64_t k, const std::byte* w, std::size_t row_bytes,
                                                     std::size_t j0, std::size_t j1, std::int64_t n, tile_store store,
                                                     float* out) noexcept {
  const std::int64_t kfull = k / 32 * 32;
  const auto tail_mask = static_cast<__mmask32>(k - kfull == 0 ? 0 : (std::uint64_t{1} << (k - kfull)) - 1);
  std::size_t j = j0;
  if (m == 1) {
    // One activation row: the weights row after row, one sequential stream per thread. On AMD left
    // to the hardware prefetchers: prefetching 4 KB ahead, as the tiles below do, made 2048 x 5632
    // and 5632 x 2048 streamed from DRAM 6-8% slower on Zen 4 (39.2 against 42.2 GB/s, 2 threads).
    // Intel's leave the stream below the DRAM's speed, as with the f16 rows (avx512_blocks).
    if (!Chunk && simd::cpu_is_intel()) gemv_bf16_one<true>(xb, kfull, tail_mask, w, row_bytes, j0, j1, store, out);
    else gemv_bf16_one<false>(xb, kfull, tail_mask, w, row_bytes, j0, j1, store, out);
    return;
  }
  switch (m) {
    case 2: j = gemv_bf16_rows4<2, !Chunk>(xb, kpad, kfull, tail_mask, w, row_bytes, j, j1, n, store, out); break;
    case 3: j = gemv_bf16_rows4<3, !Chunk>(xb, kpad, kfull, tail_mask, w, row_bytes, j, j1, n, store, out); break;
    default: j = gemv_bf16_rows4<4, !Chunk>(xb, kpad, kfull, tail_mask, w, row_bytes, j, j1, n, store, out); break;
  }
  for (; j < j1; ++j) {
    const auto* r = reinterpret_cast<const std::uint16_t*>(w + j * row_bytes);
    for (std::int64_t i = 0; i < m; ++i) {
      __m512 acc = _mm512_setzero_ps();
      std::int64_t kk = 0;
      for (; kk < kfull; kk += 32) {
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(xb + i * kpad + kk), (__m512bh)_mm512_loadu_si512(r + kk));
      }
      if (tail_mask) {
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(xb + i * kpad + kk),
                               (__m512bh)_mm512_maskz_loadu_epi16(tail_mask, r + kk));
      }
      store.one(out + i * n + static_cast<std::int64_t>(j), j, _mm512_reduce_add_ps(acc));
    }
  }
}

/// gemv of `p` for weights of `wd`: bf16 by bf16 pairs, the rest as `avx512`.
inline void gemv(simd::requires_arch<simd::avx512_bf16>, DType wd, const GemvProblem& p) {
  if (wd != DType::bf16) return gemv(simd::avx512{}, wd, p);
  const std::int64_t kpad = (p.k + 31) / 32 * 32;
  // x as bf16, zero padded to whole 32-element steps (exact for bf16 activations).
  struct pairs_tag;
  std::uint16_t* const xb = aligned_scratch<std::uint16_t, pairs_tag>(static_cast<std::size_t>(p.m * kpad));
  std::fill_n(xb, static_cast<std::size_t>(p.m * kpad), std::uint16_t{0});
  for (std::int64_t i = 0; i < p.m; ++i) {
    if (p.x_half) {
      std::memcpy(xb + i * kpad, p.x_half + i * p.k, static_cast<std::size_t>(p.k) * 2);
    } else {
      accel::detail::f32_to_bf16(p.x + i * p.k, reinterpret_cast<bfloat16*>(xb + i * kpad),
                                 static_cast<std::size_t>(p.k));
    }
  }
  const std::uint16_t* xbp = xb;
  if (p.m <= gemv_max_rows) {
    gemv_tiles(p, kpad, [&](std::int64_t x0, std::int64_t rows, std::size_t j0, std::size_t j1, float* out) {
      gemv_bf16_block<false>(xbp + x0, kpad, rows, p.k, p.w, p.row_bytes, j0, j1, p.n, {p.bias, false}, out);
    });
    return;
  }
  // Several tiles (a prompt): each block of weight rows meets every tile one chunk of k at a time.
  const std::int64_t kc = prompt_chunk_elements(p.k);
  gemv_prompt_tiles(p, kc, static_cast<std::size_t>(kc) * 2, 4,
                    [&](std::int64_t i, std::int64_t rows, std::int64_t k0, std::int64_t len, std::size_t j0,
                        std::size_t j1, bool accumulate) {
    gemv_bf16_block<true>(xbp + i * kpad + k0, kpad, rows, len, p.w + 2 * k0, p.row_bytes, j0, j1, p.n,
                          {p.bias, accumulate}, p.out + i * p.n);
  });
}

}  // namespace accel::backend::cpu::detail

ACCEL_SIMD_QUIET_END

#endif
