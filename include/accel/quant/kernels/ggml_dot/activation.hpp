// A row of activations quantized for the ggml dot products (quant/kernels/ggml_dot.hpp), once per row:
// the weight type's partner (Q8_0 for the 32-element types, Q8_K for the K types), each block's
// integer sum, and the arrangements the AVX-512 kernels load whole.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/formats/ggml_quantize.hpp"

namespace accel::quant {

using io::GgmlType;


/// One activation row quantized for type `t`'s dot product, with the sum of each Q8_0 block's
/// ints (the offset corrections of Q4_0 and Q5_0, and the min terms of Q4_1 and Q5_1).
struct ActivationRow {
  std::vector<io::block_q8_0> q8_0;
  std::vector<std::int32_t> q8_0_sums;
  std::vector<float> q8_0_scales;  ///< each block's f16 scale as float, decoded once per row
  std::vector<io::block_q8_k> q8_k;
  // Q4_K: per super-block,
  std::vector<std::int16_t> q8_k_group_sums;  ///< each 32-element group's sum (8)
  std::vector<std::int8_t> q8_k_lanes;        ///< the 256 ints, groups in the order 0, 2, 1, 3, 4, 6, 5, 7
  // IQ4_XS, in q8_k_lanes: per pair of 32-element groups 2p, 2p + 1, elements 0-15 of each, then
  // 16-31 of each (the order one 32-byte load of the pair's codes gives its low and high nibbles).
  std::vector<float> q8_k_scale2;             ///< the scale, twice
  // The AVX-512 Q4_0 kernel takes four blocks a step, in the order the weights' codes come out of
  // one 512-bit register (detail::q4_0_group); per group of four blocks:
  std::vector<std::int8_t> group_lanes;    ///< elements 0-15 of each block, then 16-31 of each
  std::vector<std::int32_t> group_offset;  ///< int32 lane 4i: -8 x block i's sum (the codes are value + 8)
  std::vector<float> group_scale;          ///< float lanes 4i .. 4i + 3: block i's scale
};

/// True when `t` has integer kernels here (others are computed from dequantized rows).
constexpr bool has_quantized_dot(GgmlType t) noexcept {
  switch (t) {
    case GgmlType::q8_0: case GgmlType::q4_0: case GgmlType::q4_1: case GgmlType::q5_0: case GgmlType::q5_1:
    case GgmlType::q2_k: case GgmlType::q3_k: case GgmlType::q4_k: case GgmlType::q5_k: case GgmlType::q6_k:
    case GgmlType::iq4_nl: case GgmlType::iq4_xs: case GgmlType::tq2_0: case GgmlType::iq2_xxs: case GgmlType::iq2_xs:
    case GgmlType::iq2_s: case GgmlType::iq3_xxs: case GgmlType::iq3_s:
      return true;
    default: return false;
  }
}

/// True when `t`'s activation partner is Q8_K (the 256-element K types, IQ4_XS, TQ2_0, the lattice types); Q8_0
/// otherwise (IQ4_NL's too). ggml pairs Q4_1 and Q5_1 with Q8_1, whose extra field is d times the
/// block's sum: here the sums (q8_0_sums) and scales (q8_0_scales) of the Q8_0 row give the same
/// term unrounded.
constexpr bool activation_is_q8_k(GgmlType t) noexcept {
  return t == GgmlType::q2_k || t == GgmlType::q3_k || t == GgmlType::q4_k || t == GgmlType::q5_k || t == GgmlType::q6_k ||
         t == GgmlType::iq4_xs || t == GgmlType::tq2_0 || t == GgmlType::iq2_xxs || t == GgmlType::iq2_xs ||
         t == GgmlType::iq2_s || t == GgmlType::iq3_xxs || t == GgmlType::iq3_s;
}

/// Quantizes `x` (n floats) into `row` for type `t`'s kernel.
inline void quantize_activation(GgmlType t, const float* x, std::size_t n, ActivationRow& row) {
  if (activation_is_q8_k(t)) {
    row.q8_k.resize(n / 256);
    quantize_row_q8_k(x, row.q8_k.data(), n);
    if (t == GgmlType::iq4_xs) {
      const std::size_t blocks = n / 256;
      row.q8_k_lanes.resize(blocks * 256);
      for (std::size_t b = 0; b < blocks; ++b) {
        for (std::size_t i = 0; i < 16; ++i) {
          // Piece i (16 ints) of the arrangement: half (i / 2) % 2 of group 2 (i / 4) + i % 2.
          const std::size_t group = 2 * (i / 4) + i % 2, half = (i / 2) % 2;
          std::memcpy(&row.q8_k_lanes[256 * b + 16 * i], row.q8_k[b].qs + 32 * group + 16 * half, 16);
        }
      }
    }
    if (t == GgmlType::q4_k) {
      // The order one 512-bit register of a block's codes gives: low nibbles of bytes 0-63 (groups 0
      // and 2), then their high nibbles (1 and 3), and the same for bytes 64-127.
      constexpr std::size_t order[8] = {0, 2, 1, 3, 4, 6, 5, 7};
      const std::size_t blocks = n / 256;
      row.q8_k_group_sums.resize(blocks * 8);
      row.q8_k_lanes.resize(blocks * 256);
      row.q8_k_scale2.resize(blocks * 2);
      for (std::size_t b = 0; b < blocks; ++b) {
        for (std::size_t g = 0; g < 8; ++g) {
          row.q8_k_group_sums[8 * b + g] = static_cast<std::int16_t>(row.q8_k[b].bsums[2 * g] + row.q8_k[b].bsums[2 * g + 1]);
          std::memcpy(&row.q8_k_lanes[256 * b + 32 * g], row.q8_k[b].qs + 32 * order[g], 32);
        }
        row.q8_k_scale2[2 * b] = row.q8_k_scale2[2 * b + 1] = row.q8_k[b].d;
      }
    }
    return;
  }
  row.q8_0.resize(n / 32);
  row.q8_0_sums.resize(n / 32);
  row.q8_0_scales.resize(n / 32);
  quantize_row_q8_0(x, row.q8_0.data(), n);
  for (std::size_t b = 0; b < n / 32; ++b) {
    int s = 0;
    for (int j = 0; j < 32; ++j) s += row.q8_0[b].qs[j];
    row.q8_0_sums[b] = s;
    row.q8_0_scales[b] = io::f16_scale(row.q8_0[b].d);
  }
  if (t != GgmlType::q4_0) return;
  const std::size_t groups = n / 128;
  row.group_lanes.resize(groups * 128);
  row.group_offset.assign(groups * 16, 0);
  row.group_scale.resize(groups * 16);
  for (std::size_t g = 0; g < groups; ++g) {
    for (std::size_t i = 0; i < 4; ++i) {
      const std::size_t b = 4 * g + i;
      std::memcpy(&row.group_lanes[128 * g + 16 * i], row.q8_0[b].qs, 16);
      std::memcpy(&row.group_lanes[128 * g + 64 + 16 * i], row.q8_0[b].qs + 16, 16);
      row.group_offset[16 * g + 4 * i] = -8 * row.q8_0_sums[b];
      for (std::size_t l = 0; l < 4; ++l) row.group_scale[16 * g + 4 * i + l] = row.q8_0_scales[b];
    }
  }
}

namespace detail {
template <class B>
B load_block(const std::byte* p) noexcept {
  B b;
  std::memcpy(&b, p, sizeof(B));
  return b;
}
}  // namespace detail

namespace detail {
/// Prefetches `Lines` cache lines 4 KB past `p`: the next rows' weights, for the one-row kernels
/// that stream a matrix from L3 or DRAM, where the hardware prefetchers alone keep too few lines
/// in flight (AVX-512 Q4_K, 4096 x 14336, 2 threads, an Intel Xeon: 0.85 -> 0.70-0.81 ms; Q4_0,
/// 2048 x 5632 streamed from DRAM, 2 threads, Zen 4: 23 -> 27 GB/s; AVX2 IQ4_XS, 2048 x 135168
/// from DRAM, 2 threads, an Intel Xeon (Sapphire Rapids): 9-10 -> 13-17 GB/s, the other AVX2
/// kernels as ggml_dot/avx2.hpp lists; AVX-512 Q8_0 on that Xeon 12-14 -> 20-23 GB/s, where Zen 4
/// had measured it no faster). The NEON kernels take none (ARM speed is not measured here).
template <int Lines>
inline void prefetch_ahead(const void* p) noexcept {
#pragma GCC unroll 16
  for (int line = 0; line < Lines; ++line) __builtin_prefetch(static_cast<const char*>(p) + 4096 + 64 * line, 0, 3);
}
}  // namespace detail

namespace detail {
/// Rows of `x` in groups of Max (then one group of the rest) through kernel(integral_constant<R>,
/// rows, out); row i's results start at out + i * stride.
template <int Max, class Kernel>
inline void in_groups(const Kernel& kernel, const ActivationRow* const* x, std::size_t count, float* out,
                      std::size_t stride = 1) {
  std::size_t i = 0;
  for (; i + Max <= count; i += Max) kernel(std::integral_constant<int, Max>{}, x + i, out + i * stride);
  const std::size_t rest = count - i;
  [&]<int... K>(std::integer_sequence<int, K...>) {
    ((rest == K + 1 ? kernel(std::integral_constant<int, K + 1>{}, x + i, out + i * stride) : void()), ...);
  }(std::make_integer_sequence<int, Max - 1>{});
}
}  // namespace detail

namespace detail {
/// A multi-row kernel (out-of-line, one tier's target) with one activation row: the one-row dot
/// product of that tier, so the two give the same bits.
template <auto Kernel>
inline float one_row(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float out;
  const ActivationRow* xs = &x;
  Kernel(n, w, &xs, &out);
  return out;
}
}  // namespace detail

}  // namespace accel::quant
