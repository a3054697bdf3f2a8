// The NEON GEMV (AArch64 Advanced SIMD): weight rows widened to f32 four at a time in registers
// (f16 by FCVTL, bf16 by a shift left into the high half, both exact) and multiplied into f32
// accumulators by FMLA; x stays f32. One activation row (decoding) reads the weight rows one after
// another, four chunks in flight; two to four rows meet four weight rows a step: their 4 x 4
// accumulators, four weight chunks and one x chunk use 21 of the 32 registers. The sums run in
// another order than the scalar kernel's (lanes, then a tail), so they agree within rounding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/backend/cpu/gemv/problem.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/simd_arch.hpp"

#if ACCEL_SIMD_ARM
#include <arm_neon.h>

namespace accel::backend::cpu::detail {

/// Weight rows of f32 / f16 / bf16: four elements widened into a register, and one element for
/// the tail.
struct neon_f32_row {
  ACCEL_TARGET_NEON static float32x4_t load4(const std::byte* r, std::int64_t at) noexcept {
    return vld1q_f32(reinterpret_cast<const float*>(r) + at);
  }
  static float at(const std::byte* r, std::int64_t t) noexcept {
    float v;
    std::memcpy(&v, r + 4 * t, 4);
    return v;
  }
};
struct neon_f16_row {
  ACCEL_TARGET_NEON static float32x4_t load4(const std::byte* r, std::int64_t at) noexcept {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const std::uint16_t*>(r + 2 * at))));
  }
  static float at(const std::byte* r, std::int64_t t) noexcept {
    std::uint16_t b;
    std::memcpy(&b, r + 2 * t, 2);
    return static_cast<float>(half::from_bits(b));
  }
};
struct neon_bf16_row {
  ACCEL_TARGET_NEON static float32x4_t load4(const std::byte* r, std::int64_t at) noexcept {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const std::uint16_t*>(r + 2 * at)), 16));
  }
  static float at(const std::byte* r, std::int64_t t) noexcept {
    std::uint16_t b;
    std::memcpy(&b, r + 2 * t, 2);
    return static_cast<float>(bfloat16::from_bits(b));
  }
};

/// R weight rows from j against M activation rows (k apart), U chunks of four in flight per pair:
/// out[i * n + j + r].
template <class W, int M, int R, int U>
ACCEL_TARGET_NEON inline void gemv_tile_neon(const float* x, std::int64_t k, const std::byte* w, std::size_t row_bytes,
                                             std::size_t j, std::int64_t n, const float* bias, float* out) noexcept {
  const std::byte* rows[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) rows[r] = w + (j + static_cast<std::size_t>(r)) * row_bytes;
  float32x4_t acc[M][R][U];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) acc[i][r][u] = vdupq_n_f32(0.0f);
    }
  }
  std::int64_t kk = 0;
  for (; kk + 4 * U <= k; kk += 4 * U) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      float32x4_t wv[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) wv[r] = W::load4(rows[r], kk + 4 * u);
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) {
        const float32x4_t xv = vld1q_f32(x + i * k + kk + 4 * u);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[i][r][u] = vfmaq_f32(acc[i][r][u], xv, wv[r]);
      }
    }
  }
  for (; kk + 4 <= k; kk += 4) {
    float32x4_t wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = W::load4(rows[r], kk);
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
      const float32x4_t xv = vld1q_f32(x + i * k + kk);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[i][r][0] = vfmaq_f32(acc[i][r][0], xv, wv[r]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float32x4_t a = acc[i][r][0];
#pragma GCC unroll 4
      for (int u = 1; u < U; ++u) a = vaddq_f32(a, acc[i][r][u]);
      float s = vaddvq_f32(a);
      for (std::int64_t t = kk; t < k; ++t) s += x[i * k + t] * W::at(rows[r], t);
      const std::size_t col = j + static_cast<std::size_t>(r);
      out[i * n + static_cast<std::int64_t>(col)] = s + (bias ? bias[col] : 0.0f);
    }
  }
}

/// Tiles of M activation rows against weight rows [j0, j1) (gemv_by_rows).
template <class W>
struct neon_blocks {
  template <int M>
  ACCEL_TARGET_NEON static void block(const std::byte* xb, std::int64_t k, const std::byte* w, std::size_t row_bytes,
                                      std::size_t j0, std::size_t j1, std::int64_t n, const float* bias, float* out) noexcept {
    const auto* x = reinterpret_cast<const float*>(xb);  // NEON reads x in f32 (x_exact or not)
    std::size_t j = j0;
    if constexpr (M == 1) {
      for (; j < j1; ++j) gemv_tile_neon<W, 1, 1, 4>(x, k, w, row_bytes, j, n, bias, out);
    } else {
      for (; j + 4 <= j1; j += 4) gemv_tile_neon<W, M, 4, 1>(x, k, w, row_bytes, j, n, bias, out);
      for (; j < j1; ++j) gemv_tile_neon<W, M, 1, 1>(x, k, w, row_bytes, j, n, bias, out);
    }
  }
};

/// gemv of `p` for weights of `wd` (f32, f16 or bf16).
inline void gemv(simd::requires_arch<simd::neon>, DType wd, const GemvProblem& problem) {
  const GemvProblem p = gemv_f32_x(problem, wd);
  if (wd == DType::bf16) return gemv_by_rows<neon_blocks<neon_bf16_row>>(p);
  if (wd == DType::f16) return gemv_by_rows<neon_blocks<neon_f16_row>>(p);
  gemv_by_rows<neon_blocks<neon_f32_row>>(p);
}

}  // namespace accel::backend::cpu::detail

#endif
