// ggml's reference quantizers from float32 rows to blocks (what llama-quantize does for these
// types without an importance matrix), for weights and for the activations of quant/kernels/ggml_dot.hpp.
//
//   quantize_row_q8_0(x, y, n)    per 32: d = max|x| / 127 (f16), q = round(x / d)
//   quantize_row_q4_0(x, y, n)    per 32: d = m / -8 for the signed value m of largest magnitude,
//                                 q = min(15, trunc(x / d + 8.5))
//   quantize_row_q5_0(x, y, n)    per 32: d = m / -16, q = min(31, trunc(x / d + 16.5))
//   quantize_row_q4_1(x, y, n)    per 32: min and d = (max - min) / 15 (f16 both),
//                                 q = min(15, trunc((x - min) / d + 0.5))
//   quantize_row_q5_1(x, y, n)    the same with d = (max - min) / 31, q up to 31
//   quantize_row_iq4_nl(x, y, n)  per 32: codes into IQ4_NL's 16-value book, the best of 16
//                                 x^2-weighted least-squares scales
//   quantize_row_iq4_xs(x, y, n)  per 256: IQ4_NL's fit for each 32, the 8 scales coded in 6 bits
//                                 (signed) against an f16 super-scale
//   quantize_row_q4_k / q5_k / q6_k / q8_k   the super-blocks of 256 (quant/formats/ggml_quantize_k.hpp)
//   quantize_rows(type, x, out, n) one of the weight types above by its GgmlType
//   can_quantize_to(type)          whether quantize_rows knows `type`
//   quantizable_type_names()       those types' names, for messages
//
// n must be a multiple of the block size; rounding is ggml's (roundf: half away from zero, or
// truncation after adding a half, for the 32-blocks; nearest_int: half to even, for the K-quants
// and the IQ4 scales). Each gives llama-quantize's bytes without an importance matrix; Q5_0, Q5_1,
// Q8_0 and IQ4_NL are its fallbacks for Q4_K, Q5_K, Q6_K and IQ4_XS rows that are not whole
// super-blocks. IQ4_NL is what llama-quantize writes (ggml's quantize_iq4_nl, 7 trial scales each
// side of the first), not ggml's quantize_row_iq4_nl_ref, which tries none.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "accel/core/errors.hpp"
#include "accel/core/float_types.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/io/ggml_types.hpp"
#include "accel/quant/formats/ggml_quantize_k.hpp"

namespace accel::quant {

using io::GgmlType;

namespace detail {

/// Codes of a Q4_0 / Q5_0 block of 32 (half = 8 / 16): the signed value m of largest magnitude maps
/// to code 0 at d = m / -half, q = min(2 half - 1, trunc(x / d + half + 0.5)). Returns d.
template <int Half>
ACCEL_GGML_STRICT_FP inline float codes_signed_32(const float* x, std::uint8_t* L) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  const float d = signed_absmax(x, 32) / -static_cast<float>(Half);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) {
    L[j] = static_cast<std::uint8_t>(std::min(2 * Half - 1, static_cast<int>(x[j] * id + (Half + 0.5f))));
  }
  return d;
}

/// Codes of a Q4_1 / Q5_1 block of 32 (codes 0..nmax): min and d = (max - min) / nmax as f16 bits,
/// q = min(nmax, trunc((x - min) / d + 0.5)).
ACCEL_GGML_STRICT_FP inline void codes_min_32(const float* x, int nmax, std::uint16_t& d_bits, std::uint16_t& m_bits,
                                              std::uint8_t* L) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  const float d = (hi - lo) / static_cast<float>(nmax);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  d_bits = half(d).bits;
  m_bits = half(lo).bits;
  for (int j = 0; j < 32; ++j) L[j] = static_cast<std::uint8_t>(std::min(nmax, static_cast<int>((x[j] - lo) * id + 0.5f)));
}

/// 32 codes of 4 bits: weight j's in the low nibble of qs[j], weight 16 + j's in the high one.
inline void pack_nibbles_32(const std::uint8_t* L, std::uint8_t* qs) noexcept {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<std::uint8_t>((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
}

/// 32 codes of 5 bits: the low four as pack_nibbles_32, the fifth of weight j in bit j of qh
/// (little-endian 32 bits).
inline void pack_q5_32(const std::uint8_t* L, std::uint8_t* qs, std::uint8_t* qh) noexcept {
  pack_nibbles_32(L, qs);
  std::uint32_t h = 0;
  for (int j = 0; j < 32; ++j) h |= static_cast<std::uint32_t>((L[j] >> 4) & 1) << j;
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<std::uint8_t>(h >> (8 * k));
}

/// The entry of IQ4_NL's code book nearest v (ties to the larger, as ggml's best_index_int8).
ACCEL_GGML_STRICT_FP inline std::uint8_t iq4nl_index(float v) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  if (v <= io::iq4nl_value(0)) return 0;
  if (v >= io::iq4nl_value(15)) return 15;
  unsigned lo = 0, hi = 15;
  while (hi - lo > 1) {
    const unsigned mid = (lo + hi) / 2;
    if (v < io::iq4nl_value(mid)) hi = mid;
    else lo = mid;
  }
  return static_cast<std::uint8_t>(v - io::iq4nl_value(hi - 1) < io::iq4nl_value(hi) - v ? hi - 1 : hi);
}

/// The x^2-weighted sums of q x and q^2 over 32 values, q the book entry nearest id * x.
ACCEL_GGML_STRICT_FP inline void iq4_sums(const float* x, float id, float& sum_qx, float& sum_q2) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  sum_qx = sum_q2 = 0;
  for (int j = 0; j < 32; ++j) {
    const float q = io::iq4nl_value(iq4nl_index(id * x[j]));
    const float w = x[j] * x[j];
    sum_qx += w * q * x[j];
    sum_q2 += w * q * q;
  }
}

/// IQ4_NL's scale for 32 values: the least-squares scale of the codes at d = m / 127 (m the signed
/// value of largest magnitude), replaced by that of a trial scale (i - 127) / m, i = -7..7, when it
/// fits better. 0 for a group of zeros.
ACCEL_GGML_STRICT_FP inline float fit_iq4_scale(const float* x) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  const float max = signed_absmax(x, 32);
  if (std::fabs(max) < ggml_group_eps) return 0.0f;
  constexpr int first = io::iq4nl_value(0);
  float sum_qx, sum_q2;
  iq4_sums(x, 1 / (-max / first), sum_qx, sum_q2);
  float scale = sum_qx / sum_q2, best = scale * sum_qx;
  for (int i = -7; i <= 7; ++i) {
    iq4_sums(x, static_cast<float>(i + first) / max, sum_qx, sum_q2);
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
      scale = sum_qx / sum_q2;
      best = scale * sum_qx;
    }
  }
  return scale;
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
  for (std::size_t b = 0; b < n / 32; ++b, x += 32) {
    std::uint8_t L[32];
    y[b].d = half(detail::codes_signed_32<8>(x, L)).bits;
    detail::pack_nibbles_32(L, y[b].qs);
  }
}

ACCEL_GGML_STRICT_FP inline void quantize_row_q5_0(const float* x, io::block_q5_0* y, std::size_t n) noexcept {
  for (std::size_t b = 0; b < n / 32; ++b, x += 32) {
    std::uint8_t L[32];
    y[b].d = half(detail::codes_signed_32<16>(x, L)).bits;
    detail::pack_q5_32(L, y[b].qs, y[b].qh);
  }
}

ACCEL_GGML_STRICT_FP inline void quantize_row_q4_1(const float* x, io::block_q4_1* y, std::size_t n) noexcept {
  for (std::size_t b = 0; b < n / 32; ++b, x += 32) {
    std::uint8_t L[32];
    detail::codes_min_32(x, 15, y[b].d, y[b].m, L);
    detail::pack_nibbles_32(L, y[b].qs);
  }
}

ACCEL_GGML_STRICT_FP inline void quantize_row_q5_1(const float* x, io::block_q5_1* y, std::size_t n) noexcept {
  for (std::size_t b = 0; b < n / 32; ++b, x += 32) {
    std::uint8_t L[32];
    detail::codes_min_32(x, 31, y[b].d, y[b].m, L);
    detail::pack_q5_32(L, y[b].qs, y[b].qh);
  }
}

/// llama-quantize's IQ4_NL (see the header comment): the fitted scale as f16, codes at its inverse.
ACCEL_GGML_STRICT_FP inline void quantize_row_iq4_nl(const float* x, io::block_iq4_nl* y, std::size_t n) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  for (std::size_t b = 0; b < n / 32; ++b, x += 32) {
    const float d = detail::fit_iq4_scale(x);
    const float id = d != 0 ? 1 / d : 0.0f;
    std::uint8_t L[32];
    for (int j = 0; j < 32; ++j) L[j] = detail::iq4nl_index(id * x[j]);
    y[b].d = half(d).bits;
    detail::pack_nibbles_32(L, y[b].qs);
  }
}

/// ggml's quantize_iq4_xs without an importance matrix: each group's scale (as IQ4_NL's) coded as
/// l - 32 steps of d = -s / 32 (s the group scale of largest magnitude), codes at d * l; l's low
/// nibbles in scales_l (two per byte), its high bit pairs in scales_h.
ACCEL_GGML_STRICT_FP inline void quantize_row_iq4_xs(const float* x, io::block_iq4_xs* y, std::size_t n) noexcept {
  ACCEL_GGML_STRICT_FP_SCOPE
  for (std::size_t b = 0; b < n / 256; ++b, x += 256) {
    float scales[8];
    float max_scale = 0, amax_scale = 0;
    for (int g = 0; g < 8; ++g) {
      scales[g] = detail::fit_iq4_scale(x + 32 * g);
      if (std::fabs(scales[g]) > amax_scale) amax_scale = std::fabs(scales[g]), max_scale = scales[g];
    }
    io::block_iq4_xs& o = y[b];
    const float d = -max_scale / 32;
    const float id = d != 0 ? 1 / d : 0.0f;
    o.d = half(d).bits;
    o.scales_h = 0;
    std::fill(std::begin(o.scales_l), std::end(o.scales_l), std::uint8_t{0});
    for (int g = 0; g < 8; ++g) {
      const int l = std::clamp(detail::nearest_int(id * scales[g]), -32, 31);
      const float dl = d * l;
      const float idl = dl != 0 ? 1 / dl : 0.0f;
      std::uint8_t L[32];
      for (int j = 0; j < 32; ++j) L[j] = detail::iq4nl_index(idl * x[32 * g + j]);
      detail::pack_nibbles_32(L, o.qs + 16 * g);
      o.scales_l[g / 2] |= static_cast<std::uint8_t>(((l + 32) & 0xF) << (4 * (g % 2)));
      o.scales_h |= static_cast<std::uint16_t>(((l + 32) >> 4) << (2 * g));
    }
  }
}

/// Whether quantize_rows can produce `type` (the weight types with a reference quantizer here).
constexpr bool can_quantize_to(GgmlType type) noexcept {
  switch (type) {
    case GgmlType::q8_0:
    case GgmlType::q4_0:
    case GgmlType::q4_1:
    case GgmlType::q5_0:
    case GgmlType::q5_1:
    case GgmlType::q4_k:
    case GgmlType::q5_k:
    case GgmlType::q6_k:
    case GgmlType::iq4_nl:
    case GgmlType::iq4_xs: return true;
    default: return false;
  }
}

/// The types can_quantize_to accepts, comma-separated, in the type table's order (for messages).
inline std::string quantizable_type_names() {
  std::string s;
  for (const auto& row : io::ggml_type_table) {
    if (can_quantize_to(row.type)) s += (s.empty() ? "" : ", ") + std::string(row.name);
  }
  return s;
}

/// n floats (a multiple of the type's block size) as `type`'s blocks at `out`; ValueError naming
/// the type when it has no quantizer here or n does not fill whole blocks.
inline void quantize_rows(GgmlType type, const float* x, std::byte* out, std::size_t n) {
  const std::size_t block = io::ggml_type_info(type).block_size;
  if (!can_quantize_to(type)) {
    throw ValueError("quantize_rows: no quantizer for " + std::string(io::ggml_type_name(type)) + "; the ones here are " +
                     quantizable_type_names());
  }
  if (n % block != 0) {
    throw ValueError("quantize_rows: " + std::to_string(n) + " values do not fill whole " +
                     std::string(io::ggml_type_name(type)) + " blocks of " + std::to_string(block));
  }
  switch (type) {
    case GgmlType::q8_0: quantize_row_q8_0(x, reinterpret_cast<io::block_q8_0*>(out), n); return;
    case GgmlType::q4_0: quantize_row_q4_0(x, reinterpret_cast<io::block_q4_0*>(out), n); return;
    case GgmlType::q4_1: quantize_row_q4_1(x, reinterpret_cast<io::block_q4_1*>(out), n); return;
    case GgmlType::q5_0: quantize_row_q5_0(x, reinterpret_cast<io::block_q5_0*>(out), n); return;
    case GgmlType::q5_1: quantize_row_q5_1(x, reinterpret_cast<io::block_q5_1*>(out), n); return;
    case GgmlType::q4_k: quantize_row_q4_k(x, reinterpret_cast<io::block_q4_k*>(out), n); return;
    case GgmlType::q5_k: quantize_row_q5_k(x, reinterpret_cast<io::block_q5_k*>(out), n); return;
    case GgmlType::q6_k: quantize_row_q6_k(x, reinterpret_cast<io::block_q6_k*>(out), n); return;
    case GgmlType::iq4_nl: quantize_row_iq4_nl(x, reinterpret_cast<io::block_iq4_nl*>(out), n); return;
    default: quantize_row_iq4_xs(x, reinterpret_cast<io::block_iq4_xs*>(out), n); return;
  }
}

}  // namespace accel::quant
