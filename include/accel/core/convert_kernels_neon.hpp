// AArch64 conversion kernels: NEON loops of eight elements (two registers of four lanes) around the
// lane code of core/convert_lanes.hpp, with the hardware's f16 conversions (FCVTL / FCVTN), which
// give float_types.hpp's bits: round to nearest even under the default FPCR, NaNs quietened with
// their top payload bits, as F16C does.
//
//   widen(requires_arch<neon>, src, dst, n)     T -> f32; f16 through FCVTL
//   narrow(requires_arch<neon>, src, dst, n)    f32 -> T; f16 through FCVTN
//
// Tails run the scalar code. No streaming stores: the x86 kernels use them past 1 MiB, and what
// they would gain on ARM cores (STNP) is not measured.
#pragma once

#include <cstddef>
#include <cstdint>

#include "accel/core/convert_lanes.hpp"

#if ACCEL_SIMD_ARM
#include <arm_neon.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace accel::detail {

// ---- eight elements: the only code that differs from the other ISAs ----------------------------

template <class T>
ACCEL_TARGET_NEON ACCEL_LANES void widen8_neon(const T* src, float* dst) noexcept {
  uint16x8_t codes;
  if constexpr (sizeof(T) == 1) {
    codes = vmovl_u8(vld1_u8(reinterpret_cast<const std::uint8_t*>(src)));
  } else {
    codes = vld1q_u16(reinterpret_cast<const std::uint16_t*>(src));
  }
  auto lo = (typename lanes<4>::i32)vmovl_u16(vget_low_u16(codes));
  auto hi = (typename lanes<4>::i32)vmovl_high_u16(codes);
  small_lanes<T>::widen(lo);
  small_lanes<T>::widen(hi);
  vst1q_f32(dst, (float32x4_t)lo);
  vst1q_f32(dst + 4, (float32x4_t)hi);
}
ACCEL_TARGET_NEON ACCEL_LANES void widen8_neon(const half* src, float* dst) noexcept {
  const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const std::uint16_t*>(src)));
  vst1q_f32(dst, vcvt_f32_f16(vget_low_f16(h)));
  vst1q_f32(dst + 4, vcvt_high_f32_f16(h));
}

template <class T>
ACCEL_TARGET_NEON ACCEL_LANES void narrow8_neon(const float* src, T* dst) noexcept {
  auto lo = (typename lanes<4>::i32)vld1q_f32(src);
  auto hi = (typename lanes<4>::i32)vld1q_f32(src + 4);
  small_lanes<T>::narrow(lo);
  small_lanes<T>::narrow(hi);
  // Each lane < 2^16 (< 2^8 for the 8-bit formats): the narrowing moves keep it.
  const uint16x8_t codes = vcombine_u16(vmovn_u32((uint32x4_t)lo), vmovn_u32((uint32x4_t)hi));
  if constexpr (sizeof(T) == 1) {
    vst1_u8(reinterpret_cast<std::uint8_t*>(dst), vmovn_u16(codes));
  } else {
    vst1q_u16(reinterpret_cast<std::uint16_t*>(dst), codes);
  }
}
ACCEL_TARGET_NEON ACCEL_LANES void narrow8_neon(const float* src, half* dst) noexcept {
  const float16x8_t h = vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(src)), vld1q_f32(src + 4));
  vst1q_u16(reinterpret_cast<std::uint16_t*>(dst), vreinterpretq_u16_f16(h));
}

// ---- the overloads the fallback ladder picks from -----------------------------------------------

template <class T>
ACCEL_TARGET_NEON void widen(simd::requires_arch<simd::neon>, const T* src, float* dst, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) widen8_neon(src + i, dst + i);
  for (; i < n; ++i) dst[i] = small_lanes<T>::widen_one(src[i]);
}

template <class T>
ACCEL_TARGET_NEON void narrow(simd::requires_arch<simd::neon>, const float* src, T* dst, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) narrow8_neon(src + i, dst + i);
  for (; i < n; ++i) dst[i] = T(src[i]);
}

}  // namespace accel::detail

#pragma GCC diagnostic pop

#endif  // ACCEL_SIMD_ARM
