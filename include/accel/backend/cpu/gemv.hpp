// gemv_rows: the decode-time product of a few activation rows with a weight matrix read once.
//
//   gemv_rows(x, m, k, w, wdtype, w_row_bytes, n, bias, out)
//     out[i, j] = sum_k x[i, k] * w[j, k] (+ bias[j]),  i < m, j < n
//
// Decoding one token streams every weight from memory once, so the kernel's job is to keep up
// with DRAM: each weight row is loaded once, in its own dtype, and dotted with every x row in
// registers (no f32 copy of a half-precision weight). bf16 weights use AVX512-BF16's dot product
// of bf16 pairs (x is rounded to bf16 first: it is a bf16 activation in a bf16 model, so nothing
// is lost there); f16 weights are widened 16 at a time with F16C and multiplied in f32; f32 uses
// FMAs. Four weight rows are in flight at once so the loads of four streams overlap. More than
// gemv_max_rows activation rows go in tiles of that many, each tile meeting a block of weight rows
// (about 256 KiB) in turn: the first reads it from memory, the others from the cache. Machines
// without AVX-512 take the portable path (a row converted into a cache-resident buffer, then
// xsimd dot products), which is what the ops layer used before this kernel.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "accel/backend/cpu/kernels.hpp"
#include "accel/core/convert.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/parallel.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace accel::backend::cpu {

/// The most activation rows a kernel keeps in registers (a tile of gemv_rows).
inline constexpr std::int64_t gemv_max_rows = 4;

namespace detail {

/// Runs f(begin, end) over blocks of about `grain` rows of [0, n), handed out to the threads as
/// they finish: two threads streaming from DRAM rarely get equal bandwidth, and a static split
/// leaves the faster one waiting at the barrier.
template <class F>
void gemv_blocks(std::size_t n, std::size_t grain, F&& f) {
#if defined(_OPENMP)
  const std::size_t blocks = (n + grain - 1) / std::max<std::size_t>(grain, 1);
  if (blocks > 1 && num_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(blocks); ++i) {
      const std::size_t b = static_cast<std::size_t>(i) * grain;
      f(b, std::min(n, b + grain));
    }
    return;
  }
#endif
  f(std::size_t{0}, n);
}

/// Portable path: one weight row converted to f32 in `buf`, then dotted with each x row.
inline void gemv_portable(const float* x, std::int64_t m, std::int64_t k, const std::byte* w, DType wd,
                          std::size_t row_bytes, std::size_t j0, std::size_t j1, std::int64_t n, const float* bias,
                          float* out, float* buf) {
  for (std::size_t j = j0; j < j1; ++j) {
    const std::byte* row = w + j * row_bytes;
    const float* wr = reinterpret_cast<const float*>(row);
    if (wd == DType::bf16) {
      accel::detail::bf16_to_f32(reinterpret_cast<const bfloat16*>(row), buf, static_cast<std::size_t>(k));
      wr = buf;
    } else if (wd == DType::f16) {
      accel::detail::f16_to_f32(reinterpret_cast<const half*>(row), buf, static_cast<std::size_t>(k));
      wr = buf;
    }
    const float b = bias ? bias[j] : 0.0f;
    for (std::int64_t i = 0; i < m; ++i) out[i * n + static_cast<std::int64_t>(j)] = dot(x + i * k, wr, static_cast<std::size_t>(k)) + b;
  }
}

#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512BW__)
inline constexpr bool gemv_has_bf16_kernel = true;
/// How far ahead of its loads each weight stream is prefetched.
inline constexpr std::ptrdiff_t gemv_prefetch_bytes = 4096;

/// M (2-4) activation rows against weight rows four at a time, from j while four remain; returns
/// where it stopped. M is a template argument so that the 4 x M accumulators live in registers
/// (with a runtime row count GCC kept them in memory: 16 rows of 4096 x 4096, four tiles, took
/// 3.9 ms against 3.5 ms so, on an Intel Xeon, 2 threads). Keeping a tile's chunk of the weight
/// and activations in L1 (columns in chunks of 512, partial sums parked between chunks) measured
/// no faster (3.6 ms): the dot-product instruction is the bound, not the cache.
template <int M>
std::size_t gemv_bf16_rows4(const std::uint16_t* xb, std::int64_t kpad, std::int64_t kfull, __mmask32 tail_mask,
                            const std::byte* w, std::size_t row_bytes, std::size_t j, std::size_t j1, std::int64_t n,
                            const float* bias, float* out) {
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
    auto step = [&](__m512i w0, __m512i w1, __m512i w2, __m512i w3, std::int64_t at) {
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) {
        const auto xv = (__m512bh)_mm512_loadu_si512(xb + i * kpad + at);
        acc[i][0] = _mm512_dpbf16_ps(acc[i][0], xv, (__m512bh)w0);
        acc[i][1] = _mm512_dpbf16_ps(acc[i][1], xv, (__m512bh)w1);
        acc[i][2] = _mm512_dpbf16_ps(acc[i][2], xv, (__m512bh)w2);
        acc[i][3] = _mm512_dpbf16_ps(acc[i][3], xv, (__m512bh)w3);
      }
    };
    std::int64_t kk = 0;
    for (; kk < kfull; kk += 32) {
      // Each of the four streams is prefetched a little ahead of its loads.
      _mm_prefetch(reinterpret_cast<const char*>(r0 + kk) + gemv_prefetch_bytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(r1 + kk) + gemv_prefetch_bytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(r2 + kk) + gemv_prefetch_bytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(r3 + kk) + gemv_prefetch_bytes, _MM_HINT_T0);
      step(_mm512_loadu_si512(r0 + kk), _mm512_loadu_si512(r1 + kk), _mm512_loadu_si512(r2 + kk),
           _mm512_loadu_si512(r3 + kk), kk);
    }
    if (tail_mask) {
      step(_mm512_maskz_loadu_epi16(tail_mask, r0 + kk), _mm512_maskz_loadu_epi16(tail_mask, r1 + kk),
           _mm512_maskz_loadu_epi16(tail_mask, r2 + kk), _mm512_maskz_loadu_epi16(tail_mask, r3 + kk), kk);
    }
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
      for (int c = 0; c < 4; ++c) {
        const std::size_t col = j + static_cast<std::size_t>(c);
        out[i * n + static_cast<std::int64_t>(col)] = _mm512_reduce_add_ps(acc[i][c]) + (bias ? bias[col] : 0.0f);
      }
    }
  }
  return j;
}

/// bf16 weights: rows [j0, j1), m <= gemv_max_rows x rows given as bf16 pairs (k rounded up to 32,
/// zero padded).
inline void gemv_bf16(const std::uint16_t* xb, std::int64_t m, std::int64_t k, const std::byte* w, std::size_t row_bytes,
                      std::size_t j0, std::size_t j1, std::int64_t n, const float* bias, float* out) {
  const std::int64_t kfull = k / 32 * 32;
  const auto tail_mask = static_cast<__mmask32>(k - kfull == 0 ? 0 : (std::uint64_t{1} << (k - kfull)) - 1);
  const std::int64_t kpad = (k + 31) / 32 * 32;
  std::size_t j = j0;
  auto row_ptr = [&](std::size_t r) { return reinterpret_cast<const std::uint16_t*>(w + r * row_bytes); };
  if (m == 1) {
    // One activation row (decoding): the weights are read row after row, one sequential stream
    // per thread; four interleaved row streams, as below, each a few KB long, read about a quarter
    // slower on Zen 4. The stream is prefetched 4 KB ahead: on an Intel Xeon with the weights in
    // its L3 (4096 x 14336, 2 threads) that took 2.7-3.2 ms to 2.4-2.7 ms (not measured on Zen 4).
    for (; j < j1; ++j) {
      const std::uint16_t* r = row_ptr(j);
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      std::int64_t kk = 0;
      for (; kk + 128 <= kfull; kk += 128) {
        const char* ahead = reinterpret_cast<const char*>(r + kk) + gemv_prefetch_bytes;
#pragma GCC unroll 4
        for (int line = 0; line < 4; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
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
      out[j] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))) + (bias ? bias[j] : 0.0f);
    }
    return;
  }
  switch (m) {
    case 2: j = gemv_bf16_rows4<2>(xb, kpad, kfull, tail_mask, w, row_bytes, j, j1, n, bias, out); break;
    case 3: j = gemv_bf16_rows4<3>(xb, kpad, kfull, tail_mask, w, row_bytes, j, j1, n, bias, out); break;
    default: j = gemv_bf16_rows4<4>(xb, kpad, kfull, tail_mask, w, row_bytes, j, j1, n, bias, out); break;
  }
  for (; j < j1; ++j) {
    const std::uint16_t* r = row_ptr(j);
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
      out[i * n + static_cast<std::int64_t>(j)] = _mm512_reduce_add_ps(acc) + (bias ? bias[j] : 0.0f);
    }
  }
}
#else
inline constexpr bool gemv_has_bf16_kernel = false;
#endif

#if defined(__AVX512F__)
inline constexpr bool gemv_has_f16_kernel = true;

/// f16 weights widened 16 at a time; x in f32.
inline void gemv_f16(const float* x, std::int64_t m, std::int64_t k, const std::byte* w, std::size_t row_bytes,
                     std::size_t j0, std::size_t j1, std::int64_t n, const float* bias, float* out) {
  const std::int64_t kfull = k / 16 * 16;
  const auto tail_mask = static_cast<__mmask16>(k - kfull == 0 ? 0 : (1u << (k - kfull)) - 1);
  for (std::size_t j = j0; j < j1; j += 2) {
    const bool two = j + 1 < j1;
    const auto* r0 = reinterpret_cast<const std::uint16_t*>(w + j * row_bytes);
    const auto* r1 = reinterpret_cast<const std::uint16_t*>(w + (two ? j + 1 : j) * row_bytes);
    __m512 acc[gemv_max_rows][2];
    for (std::int64_t i = 0; i < m; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    std::int64_t kk = 0;
    for (; kk < kfull; kk += 16) {
      const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + kk)));
      const __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + kk)));
      for (std::int64_t i = 0; i < m; ++i) {
        const __m512 xv = _mm512_loadu_ps(x + i * k + kk);
        acc[i][0] = _mm512_fmadd_ps(xv, w0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(xv, w1, acc[i][1]);
      }
    }
    if (tail_mask) {
      const __m512 w0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask, r0 + kk));
      const __m512 w1 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask, r1 + kk));
      for (std::int64_t i = 0; i < m; ++i) {
        const __m512 xv = _mm512_maskz_loadu_ps(tail_mask, x + i * k + kk);
        acc[i][0] = _mm512_fmadd_ps(xv, w0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(xv, w1, acc[i][1]);
      }
    }
    for (std::int64_t i = 0; i < m; ++i) {
      out[i * n + static_cast<std::int64_t>(j)] = _mm512_reduce_add_ps(acc[i][0]) + (bias ? bias[j] : 0.0f);
      if (two) out[i * n + static_cast<std::int64_t>(j + 1)] = _mm512_reduce_add_ps(acc[i][1]) + (bias ? bias[j + 1] : 0.0f);
    }
  }
}
#else
inline constexpr bool gemv_has_f16_kernel = false;
#endif

}  // namespace detail

/// out[i, j] = x[i, :] . w[j, :] (+ bias[j]) for i < m, j < n; `x` dense f32 [m, k], `w` rows of k
/// elements of `wd` (f32, f16 or bf16) `row_bytes` apart, `out` dense [m, n].
inline void gemv_rows(const float* x, std::int64_t m, std::int64_t k, const void* w, DType wd, std::size_t row_bytes,
                      std::int64_t n, const float* bias, float* out) {
  const auto* wbase = static_cast<const std::byte*>(w);
  // ~256 KiB of weights per block (a multiple of 4 rows): enough to amortise scheduling, small
  // enough that the threads end together.
  const std::size_t grain = std::max<std::size_t>(4, (std::size_t{1} << 18) / std::max<std::size_t>(row_bytes, 1) / 4 * 4);
#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512BW__)
  if (wd == DType::bf16) {
    const std::int64_t kpad = (k + 31) / 32 * 32;
    // x as bf16, zero padded to whole 32-element steps (exact for bf16 activations).
    thread_local std::vector<std::uint16_t> xb;
    xb.assign(static_cast<std::size_t>(m * kpad), 0);
    for (std::int64_t i = 0; i < m; ++i) {
      accel::detail::f32_to_bf16(x + i * k, reinterpret_cast<bfloat16*>(xb.data() + i * kpad), static_cast<std::size_t>(k));
    }
    const std::uint16_t* xbp = xb.data();
    detail::gemv_blocks(static_cast<std::size_t>(n), grain, [&](std::size_t b, std::size_t e) {
      for (std::int64_t i = 0; i < m; i += gemv_max_rows) {
        detail::gemv_bf16(xbp + i * kpad, std::min(gemv_max_rows, m - i), k, wbase, row_bytes, b, e, n, bias, out + i * n);
      }
    });
    return;
  }
#endif
#if defined(__AVX512F__)
  if (wd == DType::f16) {
    detail::gemv_blocks(static_cast<std::size_t>(n), grain, [&](std::size_t b, std::size_t e) {
      for (std::int64_t i = 0; i < m; i += gemv_max_rows) {
        detail::gemv_f16(x + i * k, std::min(gemv_max_rows, m - i), k, wbase, row_bytes, b, e, n, bias, out + i * n);
      }
    });
    return;
  }
#endif
  parallel_for(static_cast<std::size_t>(n), grain, [&](std::size_t b, std::size_t e) {
    thread_local std::vector<float> buf;
    if (buf.size() < static_cast<std::size_t>(k)) buf.resize(static_cast<std::size_t>(k));
    for (std::int64_t i = 0; i < m; i += gemv_max_rows) {
      detail::gemv_portable(x + i * k, std::min(gemv_max_rows, m - i), k, wbase, wd, row_bytes, b, e, n, bias,
                            out + i * n, buf.data());
    }
  });
}

}  // namespace accel::backend::cpu
