// The NEON kernel of gemm_u8s8 (AArch64): the packed pairs of B (int8_gemm/packing.hpp) multiplied
// by SMLAL / SMLAL2 against the matching pair of a row of A into 32-bit lanes, each pair's two
// products in neighbouring lanes, which one ADDP per four columns adds at the end. Every product
// (at most 255 x 128) and every sum is taken in 32 bits, wrapping modulo 2^32 as the scalar
// reference does, so the results are the scalar kernel's integers. (SDOT would need A signed, and
// the mixed-sign USDOT belongs to the later int8 matrix-multiply extension.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "accel/backend/cpu/int8_gemm/packing.hpp"
#include "accel/core/simd_arch.hpp"

#if ACCEL_SIMD_ARM
#include <arm_neon.h>

namespace accel::backend::cpu::detail {

/// One row of A against one packed panel: `cols` (<= u8s8_panel) sums into c. Register i of a pair
/// step holds columns 4i .. 4i + 3; its low half meets A's pair in `lo[i]`, its high half in `hi[i]`.
ACCEL_TARGET_NEON inline void u8s8_panel_row(simd::requires_arch<simd::neon>, const std::uint8_t* a, std::int64_t k,
                                             const std::int16_t* panel, std::int64_t cols, std::int32_t* c) {
  static_assert(u8s8_panel == 32, "eight registers of four column pairs");
  int32x4_t lo[8], hi[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) lo[i] = hi[i] = vdupq_n_s32(0);
  const std::int64_t pairs = (k + 1) / 2;
  for (std::int64_t p = 0; p < pairs; ++p) {
    const std::int32_t a0 = a[2 * p], a1 = 2 * p + 1 < k ? a[2 * p + 1] : 0;
    const int16x8_t ap = vreinterpretq_s16_s32(vdupq_n_s32(a0 | (a1 << 16)));
    const std::int16_t* bp = panel + p * u8s8_panel * 2;
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const int16x8_t bv = vld1q_s16(bp + 8 * i);
      lo[i] = vmlal_s16(lo[i], vget_low_s16(bv), vget_low_s16(ap));
      hi[i] = vmlal_high_s16(hi[i], bv, ap);
    }
  }
  alignas(16) std::int32_t sums[u8s8_panel];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) vst1q_s32(sums + 4 * i, vpaddq_s32(lo[i], hi[i]));
  for (std::int64_t j = 0; j < cols; ++j) c[j] = sums[j];
}

}  // namespace accel::backend::cpu::detail

#endif
