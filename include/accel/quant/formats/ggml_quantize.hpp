// ggml's reference quantizers from float32 rows to blocks (what llama-quantize does for these
// types without an importance matrix), for weights and for the activations of quant/kernels/ggml_dot.hpp.
//
//   quantize_row_q8_0(x, y, n)    per 32: d = max|x| / 127 (f16), q = round(x / d)
//   quantize_row_q4_0(x, y, n)    per 32: d = m / -8 for the signed value m of largest magnitude,
//                                 q = min(15, trunc(x / d + 8.5))
//   quantize_row_q4_k(x, y, n)    per 256: 8 groups of 32 with a weighted least-squares scale and
//                                 min each (searched over 21 candidate scales), both coded in 6 bits
//                                 against f16 super-scales, 4-bit weights
//   quantize_row_q8_k(x, y, n)    per 256: f32 scale mapping that value to -127, sums of each 16
//   quantize_rows(type, x, out, n) one of the weight types above by its GgmlType
//   can_quantize_to(type)          whether quantize_rows knows `type`
//
// n must be a multiple of the block size; rounding is ggml's (roundf: half away from zero, except
// Q4_K's nearest_int: half to even). Q4_K is llama-quantize's choice without an importance matrix.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "accel/core/errors.hpp"
#include "accel/core/float_types.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/io/ggml_types.hpp"

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

using io::GgmlType;

namespace detail {
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
}  // namespace detail

ACCEL_GGML_STRICT_FP inline void quantize_row_q8_0(const float* x, io::block_q8_0* y, std::size_t n) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  for (std::size_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = half(d).bits;
    for (int j = 0; j < 32; ++j) y[b].qs[j] = static_cast<std::int8_t>(detail::round_half_away(x[j] * id));
  }
}

ACCEL_GGML_STRICT_FP inline void quantize_row_q4_0(const float* x, io::block_q4_0* y, std::size_t n) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  for (std::size_t b = 0; b < n / 32; ++b, x += 32) {
    const float d = detail::signed_absmax(x, 32) / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = half(d).bits;
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int hi = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
      y[b].qs[j] = static_cast<std::uint8_t>(lo | (hi << 4));
    }
  }
}

namespace detail {

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

}  // namespace detail

/// ggml's quantize_row_q4_K_ref (see the header comment).
ACCEL_GGML_STRICT_FP inline void quantize_row_q4_k(const float* x, io::block_q4_k* y, std::size_t n) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  for (std::size_t b = 0; b < n / 256; ++b, x += 256) {
    std::uint8_t L[256];
    float w[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      const float* xj = x + 32 * j;
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
      const float av = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) w[l] = av + std::fabs(xj[l]);
      scales[j] = detail::fit_scale_min(32, 15, xj, w, L + 32 * j, mins[j], -1.0f, 0.1f, 20);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    io::block_q4_k& o = y[b];
    std::fill(std::begin(o.scales), std::end(o.scales), std::uint8_t{0});
    for (int j = 0; j < 8; ++j) {
      const auto ls = static_cast<std::uint8_t>(std::min(63, detail::nearest_int(inv_scale * scales[j]) & 0xFF));
      const auto lm = static_cast<std::uint8_t>(std::min(63, detail::nearest_int(inv_min * mins[j]) & 0xFF));
      if (j < 4) {
        o.scales[j] = ls;
        o.scales[j + 4] = lm;
      } else {
        o.scales[j + 4] = static_cast<std::uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        o.scales[j - 4] |= static_cast<std::uint8_t>((ls >> 4) << 6);
        o.scales[j] |= static_cast<std::uint8_t>((lm >> 4) << 6);
      }
    }
    o.d = half(max_scale / 63.0f).bits;
    o.dmin = half(max_min / 63.0f).bits;
    for (int j = 0; j < 8; ++j) {
      std::uint8_t sc, m;
      io::k4_scale_min(j, o.scales, sc, m);
      const float d = io::f16_scale(o.d) * sc;
      if (d == 0) continue;
      const float dm = io::f16_scale(o.dmin) * m;
      for (int i = 0; i < 32; ++i) {
        L[32 * j + i] = static_cast<std::uint8_t>(std::clamp(detail::nearest_int((x[32 * j + i] + dm) / d), 0, 15));
      }
    }
    std::uint8_t* q = o.qs;
    for (int j = 0; j < 256; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 4));
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

/// Whether quantize_rows can produce `type` (the weight types with a reference quantizer here).
constexpr bool can_quantize_to(GgmlType type) noexcept {
  return type == GgmlType::q8_0 || type == GgmlType::q4_0 || type == GgmlType::q4_k;
}

/// n floats (a multiple of the type's block size) as `type`'s blocks at `out`; ValueError naming
/// the type when it has no quantizer here or n does not fill whole blocks.
inline void quantize_rows(GgmlType type, const float* x, std::byte* out, std::size_t n) {
  const std::size_t block = io::ggml_type_info(type).block_size;
  if (!can_quantize_to(type)) {
    throw ValueError("quantize_rows: no quantizer for " + std::string(io::ggml_type_name(type)) +
                     "; the ones here are Q8_0, Q4_0 and Q4_K");
  }
  if (n % block != 0) {
    throw ValueError("quantize_rows: " + std::to_string(n) + " values do not fill whole " +
                     std::string(io::ggml_type_name(type)) + " blocks of " + std::to_string(block));
  }
  switch (type) {
    case GgmlType::q8_0: quantize_row_q8_0(x, reinterpret_cast<io::block_q8_0*>(out), n); return;
    case GgmlType::q4_0: quantize_row_q4_0(x, reinterpret_cast<io::block_q4_0*>(out), n); return;
    default: quantize_row_q4_k(x, reinterpret_cast<io::block_q4_k*>(out), n); return;
  }
}

}  // namespace accel::quant
