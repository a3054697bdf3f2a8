// The int8 dot-product step of the NEON quantized kernels, in the two forms AArch64 CPUs have:
//
//   detail::neon_sdot::dot(acc, a, b)    SDOT (the dot-product extension): four products per int32 lane
//   detail::neon_smull::dot(acc, a, b)   SMULL / SMULL2 into 16-bit products, SADALP adds pairs into int32 lanes
//
// Both add the sixteen products of two int8x16 registers into the four int32 lanes of acc, exactly
// for every int8 (a product is at most 2^14, which a 16-bit lane holds), though spread over the
// lanes differently: only the sum of the lanes is the same. A kernel written once over the step
// (a template, always inlined) becomes each tier's kernel in the entry point that carries its
// target attribute; the step is a plain inline function, which GCC and Clang inline once the
// kernel sits in a caller whose target allows SDOT (an always_inline step would be refused
// inside the generic kernel).
#pragma once

#include "accel/core/simd_arch.hpp"

#if ACCEL_SIMD_ARM
#include <arm_neon.h>

namespace accel::quant::detail {

/// The step of `neon_dotprod`.
struct neon_sdot {
  ACCEL_TARGET_NEON_DOTPROD static int32x4_t dot(int32x4_t acc, int8x16_t a, int8x16_t b) noexcept {
#if defined(__clang__) && !defined(__ARM_FEATURE_DOTPROD)
    // Clang's arm_neon.h (14 at least) declares vdotq_s32 only when the whole translation unit
    // targets the dot product; the instruction itself assembles under this function's attribute.
    __asm__("sdot %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(a), "w"(b));
    return acc;
#else
    return vdotq_s32(acc, a, b);
#endif
  }
};

/// The step of plain `neon` (ARMv8.0: Cortex-A53 / A57 / A72, the Raspberry Pi 3 and 4).
struct neon_smull {
  ACCEL_TARGET_NEON static int32x4_t dot(int32x4_t acc, int8x16_t a, int8x16_t b) noexcept {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
  }
};

}  // namespace accel::quant::detail

#endif
