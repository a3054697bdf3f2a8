// ggml's reference quantizers for the super-blocks of 256 values (the K-quants), and the arithmetic
// every quantizer of quant/formats/ggml_quantize.hpp shares. Include ggml_quantize.hpp: it lists
// all the quantizers and dispatches on the type.
//
//   quantize_row_q4_k(x, y, n)    per 256: 8 groups of 32 with a weighted least-squares scale and
//                                 min each (searched over 21 candidate scales), both coded in 6 bits
//                                 against f16 super-scales, 4-bit weights
//   quantize_row_q5_k(x, y, n)    the same with 5-bit weights (16 candidate scales)
//   quantize_row_q6_k(x, y, n)    per 256: 16 groups of 16 with a signed scale each (x^2-weighted fit
//                                 over 19 candidates), coded in 8 bits against an f16 super-scale,
//                                 6-bit weights
//   quantize_row_q8_k(x, y, n)    per 256: f32 scale mapping the value of largest magnitude to -127,
//                                 sums of each 16
//
// Rounding is ggml's nearest_int (half to even) throughout, as are the order of every sum and
// product and the 1e-15 threshold below which a group counts as all zeros.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>

#include "accel/core/float_types.hpp"
#include "accel/io/ggml_blocks.hpp"

// ggml compiles these quantizers for baseline x86-64, without FMA: a fused multiply-add would round
// once where ggml rounds twice, and a scale or a code would end one step away. Every product here
// stays rounded on its own, whatever the including program's -march and -ffp-contract.
#if defined(__clang__)
#define ACCEL_GGML_STRICT_FP
#define ACCEL_GGML_STRICT_FP_SCOPE _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define ACCEL_GGML_STRICT_FP __attribute__((optimize("fp-contract=off")))
#define ACCEL_GGML_STRICT_FP_SCOPE
#else
#define ACCEL_GGML_STRICT_FP
#define ACCEL_GGML_STRICT_FP_SCOPE
#endif

namespace accel::quant {

namespace detail {

/// Below this magnitude ggml treats a group as all zeros.
inline constexpr float ggml_group_eps = 1e-15f;

/// The value of largest magnitude among x[0 .. n) (the first, on a tie), as ggml's quantizers
/// find the one that maps to their most negative code; 0 for all zeros.
ACCEL_GGML_STRICT_FP inline float signed_absmax(const float* x, int n) noexcept {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  }
  return max;
}

/// roundf(v) (half away from zero) as an int, for |v| < 2^22, without a library call, so that a
/// block's loop vectorizes: v - trunc(v) is exact at these magnitudes, so the step is too. Every
/// prompt row is quantized so for the integer kernels: std::lround took 6% of a 64-token Q4_0
/// prompt (AVX2 tier, Zen 5).
ACCEL_GGML_STRICT_FP inline int round_half_away(float v) noexcept {
  const int t = static_cast<int>(v);
  const float f = v - static_cast<float>(t);
  return t + (f >= 0.5f ? 1 : 0) - (f <= -0.5f ? 1 : 0);
}

/// ggml's nearest_int: the float's bits after adding 1.5 * 2^23 (half to even, |x| < 2^22).
inline int nearest_int(float x) noexcept {
  const float v = x + 12582912.0f;
  std::int32_t i;
  std::memcpy(&i, &v, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

/// Scale and min (returned negated in `neg_min`) for n values coded 0..nmax, minimising the
/// weighted squared error: a first fit over [min(x, 0), max x], then nstep + 1 candidate scales
/// (rmin + rdelta * i + nmax) / range, each refined by weighted least squares and kept when better.
ACCEL_GGML_STRICT_FP inline float fit_scale_min(int n, int nmax, const float* x, const float* w, std::uint8_t* L, float& neg_min,
                           float rmin, float rdelta, int nstep) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);
  if (hi == lo) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    neg_min = -lo;
    return 0.0f;
  }
  float iscale = nmax / (hi - lo);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<std::uint8_t>(std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax));
    const float diff = scale * L[i] + lo - x[i];
    best += w[i] * (diff * diff);
  }
  std::uint8_t cand[256];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      cand[i] = static_cast<std::uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D <= 0) continue;
    float s = (sum_w * sum_xl - sum_x * sum_l) / D;
    float m = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (m > 0) {
      m = 0;
      s = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = s * cand[i] + m - x[i];
      err += w[i] * (diff * diff);
    }
    if (err < best) {
      std::copy(cand, cand + n, L);
      best = err;
      scale = s;
      lo = m;
    }
  }
  neg_min = -lo;
  return scale;
}

/// Signed scale for n values coded -nmax..nmax-1 (stored in L offset by nmax), weighting each value
/// by x^2: the value of largest magnitude maps to -nmax, then 18 candidate scales
/// -(nmax + 0.1 i) / max (i = -9..9, not 0) replace the least-squares scale when they fit better.
/// 0 (all codes 0) for a group of zeros.
ACCEL_GGML_STRICT_FP inline float fit_scale_signed(int n, int nmax, const float* x, std::uint8_t* L) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < ggml_group_eps) {
    std::fill(L, L + n, std::uint8_t{0});
    return 0.0f;
  }
  float iscale = -nmax / max;
  float sum_lx = 0, sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<std::uint8_t>(l + nmax);
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * l;
    sum_l2 += w * l * l;
  }
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  std::uint8_t cand[256];
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sum_lx = sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      cand[i] = static_cast<std::uint8_t>(l + nmax);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * l;
      sum_l2 += w * l * l;
    }
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      std::copy(cand, cand + n, L);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

/// What Q4_K and Q5_K share for one block of 256 (codes 0..nmax): per group of 32 a scale and min
/// fitted with weights sqrt(mean x^2) + |x|, both coded in 6 bits into `scales` (packed as
/// k4_scale_min reads them) against the f16 super-scales d and dmin, then every code again from the
/// coded scale and min. L gets the 256 codes.
ACCEL_GGML_STRICT_FP inline void fit_k_scales_mins(const float* x, int nmax, float rmin, int nstep, std::uint16_t& d,
                                                   std::uint16_t& dmin, std::uint8_t* scales, std::uint8_t* L) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  float w[32], mins[8], sc[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
    const float av = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = av + std::fabs(xj[l]);
    sc[j] = fit_scale_min(32, nmax, xj, w, L + 32 * j, mins[j], rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, sc[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::fill(scales, scales + 12, std::uint8_t{0});
  for (int j = 0; j < 8; ++j) {
    const auto ls = static_cast<std::uint8_t>(std::min(63, nearest_int(inv_scale * sc[j]) & 0xFF));
    const auto lm = static_cast<std::uint8_t>(std::min(63, nearest_int(inv_min * mins[j]) & 0xFF));
    if (j < 4) {
      scales[j] = ls;
      scales[j + 4] = lm;
    } else {
      scales[j + 4] = static_cast<std::uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales[j - 4] |= static_cast<std::uint8_t>((ls >> 4) << 6);
      scales[j] |= static_cast<std::uint8_t>((lm >> 4) << 6);
    }
  }
  d = half(max_scale / 63.0f).bits;
  dmin = half(max_min / 63.0f).bits;
  for (int j = 0; j < 8; ++j) {
    std::uint8_t s, m;
    io::k4_scale_min(j, scales, s, m);
    const float dj = io::f16_scale(d) * s;
    if (dj == 0) continue;
    const float dm = io::f16_scale(dmin) * m;
    for (int i = 0; i < 32; ++i) {
      L[32 * j + i] = static_cast<std::uint8_t>(std::clamp(nearest_int((x[32 * j + i] + dm) / dj), 0, nmax));
    }
  }
}

}  // namespace detail

/// ggml's quantize_row_q4_K_ref (see the header comment).
ACCEL_GGML_STRICT_FP inline void quantize_row_q4_k(const float* x, io::block_q4_k* y, std::size_t n) noexcept {
  for (std::size_t b = 0; b < n / 256; ++b, x += 256) {
    std::uint8_t L[256];
    detail::fit_k_scales_mins(x, 15, -1.0f, 20, y[b].d, y[b].dmin, y[b].scales, L);
    std::uint8_t* q = y[b].qs;
    for (int j = 0; j < 256; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

/// ggml's quantize_row_q5_K_ref: Q4_K's fit with codes 0..31; the low nibbles as Q4_K's, the fifth
/// bits of weights 64k + l and 64k + 32 + l in bits 2k and 2k + 1 of qh[l].
ACCEL_GGML_STRICT_FP inline void quantize_row_q5_k(const float* x, io::block_q5_k* y, std::size_t n) noexcept {
  for (std::size_t b = 0; b < n / 256; ++b, x += 256) {
    std::uint8_t L[256];
    detail::fit_k_scales_mins(x, 31, -0.5f, 15, y[b].d, y[b].dmin, y[b].scales, L);
    std::fill(std::begin(y[b].qh), std::end(y[b].qh), std::uint8_t{0});
    std::uint8_t* q = y[b].qs;
    for (int j = 0, k = 0; j < 256; j += 64, ++k, q += 32) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[j + l], hi = L[j + l + 32];
        q[l] = static_cast<std::uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        y[b].qh[l] |= static_cast<std::uint8_t>(((lo >> 4) << (2 * k)) | ((hi >> 4) << (2 * k + 1)));
      }
    }
  }
}

/// ggml's quantize_row_q6_K_ref (see the header comment). Codes are x / (d * scale) + 32, 0..63:
/// the low nibbles of weights 128h + l and 128h + 64 + l share ql[64h + l], those of 128h + 32 + l and
/// 128h + 96 + l share ql[64h + 32 + l]; the four high bit pairs go to qh[32h + l].
ACCEL_GGML_STRICT_FP inline void quantize_row_q6_k(const float* x, io::block_q6_k* y, std::size_t n) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  for (std::size_t b = 0; b < n / 256; ++b, x += 256) {
    std::uint8_t L[256];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int g = 0; g < 16; ++g) {
      scales[g] = detail::fit_scale_signed(16, 32, x + 16 * g, L + 16 * g);
      if (std::fabs(scales[g]) > max_abs_scale) max_abs_scale = std::fabs(scales[g]), max_scale = scales[g];
    }
    io::block_q6_k& o = y[b];
    if (max_abs_scale < detail::ggml_group_eps) {
      o = {};
      continue;
    }
    const float iscale = -128.0f / max_scale;
    o.d = half(1 / iscale).bits;
    for (int g = 0; g < 16; ++g) o.scales[g] = static_cast<std::int8_t>(std::min(127, detail::nearest_int(iscale * scales[g])));
    for (int g = 0; g < 16; ++g) {
      const float d = io::f16_scale(o.d) * o.scales[g];
      if (d == 0) continue;
      for (int i = 0; i < 16; ++i) {
        L[16 * g + i] = static_cast<std::uint8_t>(std::clamp(detail::nearest_int(x[16 * g + i] / d), -32, 31) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t* q = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        o.ql[64 * h + l] = static_cast<std::uint8_t>((q[l] & 0xF) | ((q[l + 64] & 0xF) << 4));
        o.ql[64 * h + l + 32] = static_cast<std::uint8_t>((q[l + 32] & 0xF) | ((q[l + 96] & 0xF) << 4));
        o.qh[32 * h + l] = static_cast<std::uint8_t>((q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) |
                                                     ((q[l + 96] >> 4) << 6));
      }
    }
  }
}

/// ggml's quantize_row_q8_K: per 256 values the signed value of largest magnitude maps to -127.
ACCEL_GGML_STRICT_FP inline void quantize_row_q8_k(const float* x, io::block_q8_k* y, std::size_t n) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  for (std::size_t b = 0; b < n / 256; ++b, x += 256) {
    const float max = detail::signed_absmax(x, 256);
    if (max == 0) {
      y[b] = {};
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < 256; ++j) {
      y[b].qs[j] = static_cast<std::int8_t>(std::min(127, detail::round_half_away(iscale * x[j])));
    }
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += y[b].qs[16 * g + j];
      y[b].bsums[g] = static_cast<std::int16_t>(s);
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace accel::quant
