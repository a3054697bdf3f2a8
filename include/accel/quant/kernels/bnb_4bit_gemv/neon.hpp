// The NEON bitsandbytes 4-bit product (AArch64). TBL looks sixteen codes up in a 16-byte table, so
// the 16-entry float code book is kept as four byte planes (byte b of every entry, one LD4), and
// sixteen weights decode in four TBLs whose bytes two rounds of ZIPs put back together as four
// float registers. Eight packed bytes give sixteen weights: their high nibbles the even elements,
// their low ones the odd, against activations split the same way once per call (runs of sixteen:
// eight even elements, then eight odd, as the AVX2 kernel has them). Each block's products are
// summed unscaled and its absmax applied once, so the sums differ from the scalar kernel's in
// rounding only.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "accel/core/simd_arch.hpp"
#include "accel/quant/kernels/activation_rows.hpp"
#include "accel/quant/kernels/bnb_4bit_gemv/scalar.hpp"

#if ACCEL_SIMD_ARM
#include <arm_neon.h>

namespace accel::quant {
namespace detail {

/// Sixteen codes (each lane's low four bits) looked up in the code book's byte planes `book`:
/// lanes 0-3, 4-7, 8-11 and 12-15 as four float registers.
ACCEL_TARGET_NEON inline void lut16_neon(uint8x16_t idx, const uint8x16x4_t& book, float32x4_t out[4]) noexcept {
  const uint8x16_t b0 = vqtbl1q_u8(book.val[0], idx), b1 = vqtbl1q_u8(book.val[1], idx);
  const uint8x16_t b2 = vqtbl1q_u8(book.val[2], idx), b3 = vqtbl1q_u8(book.val[3], idx);
  // Bytes 0 and 1, and 2 and 3, of each float side by side, then the two halves.
  const uint16x8_t lo01 = vreinterpretq_u16_u8(vzip1q_u8(b0, b1)), hi01 = vreinterpretq_u16_u8(vzip2q_u8(b0, b1));
  const uint16x8_t lo23 = vreinterpretq_u16_u8(vzip1q_u8(b2, b3)), hi23 = vreinterpretq_u16_u8(vzip2q_u8(b2, b3));
  out[0] = vreinterpretq_f32_u16(vzip1q_u16(lo01, lo23));
  out[1] = vreinterpretq_f32_u16(vzip2q_u16(lo01, lo23));
  out[2] = vreinterpretq_f32_u16(vzip1q_u16(hi01, hi23));
  out[3] = vreinterpretq_f32_u16(vzip2q_u16(hi01, hi23));
}

/// `n` floats (a multiple of 16) of activation rows rearranged: in each run of 16, the 8 even
/// elements, then the 8 odd ones (a packed byte holds an even element's code in its high nibble).
ACCEL_TARGET_NEON inline void split_even_odd_neon(const float* x, std::size_t n, float* xs) noexcept {
  for (std::size_t i = 0; i < n; i += 16) {
    const float32x4x2_t a = vld2q_f32(x + i), b = vld2q_f32(x + i + 8);
    vst1q_f32(xs + i, a.val[0]);
    vst1q_f32(xs + i + 4, b.val[0]);
    vst1q_f32(xs + i + 8, a.val[1]);
    vst1q_f32(xs + i + 12, b.val[1]);
  }
}

/// Output rows [r0, r1) for NT activation rows split by split_even_odd_neon, `in` a multiple of 16
/// and blocks of at least 16 (a step never leaves its block): each step decodes sixteen weights of
/// one row once for all NT activation rows; two sums per activation row per block.
template <int NT>
[[gnu::noinline]] ACCEL_TARGET_NEON void gemv_4bit_neon(const float* x, const std::uint8_t* w, const float* absmax,
                                                        const float* lut, int shift, std::size_t in, std::size_t out,
                                                        std::size_t r0, std::size_t r1, float* y) noexcept {
  const uint8x16x4_t book = vld4q_u8(reinterpret_cast<const std::uint8_t*>(lut));
  const uint8x8_t low_nibble = vdup_n_u8(0x0F);
  const std::size_t bs = std::size_t{1} << shift;
  for (std::size_t r = r0; r < r1; ++r) {
    float32x4_t acc[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[t] = vdupq_n_f32(0.0f);
    const std::size_t base = r * in;
    for (std::size_t k = 0; k < in;) {
      const std::size_t i = base + k;
      const std::size_t end = std::min(in, k + bs - (i & (bs - 1)));
      float32x4_t s0[NT], s1[NT];
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) s0[t] = s1[t] = vdupq_n_f32(0.0f);
      for (; k < end; k += 16) {
        const uint8x8_t packed = vld1_u8(w + (base + k) / 2);
        float32x4_t wv[4];
        lut16_neon(vcombine_u8(vshr_n_u8(packed, 4), vand_u8(packed, low_nibble)), book, wv);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
          const float* xt = x + t * in + k;
          s0[t] = vfmaq_f32(s0[t], wv[0], vld1q_f32(xt));
          s1[t] = vfmaq_f32(s1[t], wv[1], vld1q_f32(xt + 4));
          s0[t] = vfmaq_f32(s0[t], wv[2], vld1q_f32(xt + 8));
          s1[t] = vfmaq_f32(s1[t], wv[3], vld1q_f32(xt + 12));
        }
      }
      const float scale = absmax[i >> shift];
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) acc[t] = vfmaq_n_f32(acc[t], vaddq_f32(s0[t], s1[t]), scale);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) y[t * out + r] = vaddvq_f32(acc[t]);
  }
}

}  // namespace detail

/// NEON: with `in` a multiple of 16 and blocks of at least 16, the activations split into even and
/// odd elements (this thread's buffer), groups of up to four rows per pass over the weight rows
/// (their 2 x 4 block sums, 4 totals, the code book and the four decoded registers take 24 of the
/// 32 registers); otherwise the scalar kernel.
ACCEL_TARGET_NEON inline void gemv_4bit_rows(simd::requires_arch<simd::neon>, const float* x, std::size_t rows,
                                             const std::uint8_t* w, const float* absmax, const float* lut,
                                             std::size_t bs, std::size_t in, std::size_t out, std::size_t r0,
                                             std::size_t r1, float* y) {
  if (in % 16 != 0 || bs < 16) return gemv_4bit_rows(simd::scalar{}, x, rows, w, absmax, lut, bs, in, out, r0, r1, y);
  const int shift = std::countr_zero(bs);
  float* split = detail::activation_buffer<float>(rows * in);
  detail::split_even_odd_neon(x, rows * in, split);
  for (std::size_t t0 = 0; t0 < rows; t0 += 4) {
    const float* xs = split + t0 * in;
    float* ys = y + t0 * out;
    switch (std::min<std::size_t>(4, rows - t0)) {
      case 1: detail::gemv_4bit_neon<1>(xs, w, absmax, lut, shift, in, out, r0, r1, ys); break;
      case 2: detail::gemv_4bit_neon<2>(xs, w, absmax, lut, shift, in, out, r0, r1, ys); break;
      case 3: detail::gemv_4bit_neon<3>(xs, w, absmax, lut, shift, in, out, r0, r1, ys); break;
      default: detail::gemv_4bit_neon<4>(xs, w, absmax, lut, shift, in, out, r0, r1, ys); break;
    }
  }
}

}  // namespace accel::quant

#endif
