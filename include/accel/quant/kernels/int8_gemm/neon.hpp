// The NEON int8 product of LLM.int8() (AArch64), in two tiers that differ only in the int8 step
// (quant/kernels/int8_dot_neon.hpp): `neon_dotprod` by SDOT, plain `neon` by SMULL and SADALP. Both take
// signed codes as they are, -128 included on both sides, and sum exactly, so they give the scalar
// kernel's integers. Groups of up to four activation rows meet two weight rows a step, whose 4 x 2
// sums stay in registers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "accel/core/simd_arch.hpp"
#include "accel/quant/kernels/int8_dot_neon.hpp"
#include "accel/quant/kernels/int8_gemm/scalar.hpp"

#if ACCEL_SIMD_ARM
#include <arm_neon.h>

namespace accel::quant {
namespace detail {

/// Columns [r0, r1) of C for NT activation rows `a` (rows k apart), R weight rows a step.
template <class Dot, int NT, int R>
[[gnu::always_inline]] inline void int8_tile_neon(const std::int8_t* a, const std::int8_t* b, std::size_t k,
                                                  std::size_t out, std::size_t r0, std::size_t r1,
                                                  std::int32_t* c) noexcept {
  const std::size_t kfull = k / 16 * 16;
  std::size_t r = r0;
  for (; r + R <= r1; r += R) {
    int32x4_t acc[NT][R];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 2
      for (int q = 0; q < R; ++q) acc[t][q] = vdupq_n_s32(0);
    }
    for (std::size_t j = 0; j < kfull; j += 16) {
      int8x16_t bv[R];
#pragma GCC unroll 2
      for (int q = 0; q < R; ++q) bv[q] = vld1q_s8(b + (r + static_cast<std::size_t>(q)) * k + j);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const int8x16_t av = vld1q_s8(a + static_cast<std::size_t>(t) * k + j);
#pragma GCC unroll 2
        for (int q = 0; q < R; ++q) acc[t][q] = Dot::dot(acc[t][q], av, bv[q]);
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 2
      for (int q = 0; q < R; ++q) {
        const std::size_t col = r + static_cast<std::size_t>(q);
        std::int32_t sum = vaddvq_s32(acc[t][q]);
        for (std::size_t j = kfull; j < k; ++j) {
          sum += static_cast<std::int32_t>(a[static_cast<std::size_t>(t) * k + j]) * b[col * k + j];
        }
        c[static_cast<std::size_t>(t) * out + col] = sum;
      }
    }
  }
  if constexpr (R > 1) {
    if (r < r1) int8_tile_neon<Dot, NT, 1>(a, b, k, out, r, r1, c);
  }
}

/// The groups of up to four activation rows, each against every weight row of [r0, r1).
template <class Dot>
[[gnu::always_inline]] inline void int8_matmul_neon(const std::int8_t* a, std::size_t rows, const std::int8_t* b,
                                                    std::size_t k, std::size_t out, std::size_t r0, std::size_t r1,
                                                    std::int32_t* c) noexcept {
  for (std::size_t t0 = 0; t0 < rows; t0 += 4) {
    const std::int8_t* at = a + t0 * k;
    std::int32_t* ct = c + t0 * out;
    switch (std::min<std::size_t>(4, rows - t0)) {
      case 1: int8_tile_neon<Dot, 1, 2>(at, b, k, out, r0, r1, ct); break;
      case 2: int8_tile_neon<Dot, 2, 2>(at, b, k, out, r0, r1, ct); break;
      case 3: int8_tile_neon<Dot, 3, 2>(at, b, k, out, r0, r1, ct); break;
      default: int8_tile_neon<Dot, 4, 2>(at, b, k, out, r0, r1, ct); break;
    }
  }
}

}  // namespace detail

ACCEL_TARGET_NEON inline void int8_linear_matmul(simd::requires_arch<simd::neon>, const std::int8_t* a, std::size_t rows,
                                                 const std::int8_t* b, std::size_t k, std::size_t out, std::size_t r0,
                                                 std::size_t r1, std::int32_t* c) noexcept {
  detail::int8_matmul_neon<detail::neon_smull>(a, rows, b, k, out, r0, r1, c);
}

ACCEL_TARGET_NEON_DOTPROD inline void int8_linear_matmul(simd::requires_arch<simd::neon_dotprod>, const std::int8_t* a,
                                                         std::size_t rows, const std::int8_t* b, std::size_t k,
                                                         std::size_t out, std::size_t r0, std::size_t r1,
                                                         std::int32_t* c) noexcept {
  detail::int8_matmul_neon<detail::neon_sdot>(a, rows, b, k, out, r0, r1, c);
}

}  // namespace accel::quant

#endif
