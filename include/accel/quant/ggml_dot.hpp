// Dot products of ggml-quantized weight rows with quantized activations, as ggml computes them:
// the activation row is quantized once to the weight type's partner (Q8_0 for Q8_0 / Q4_0, Q8_K
// for the K types) and each block's integer dot product is scaled by the two scales.
//
//   ActivationRow                           a quantized row and the per-block sums of its ints
//   has_quantized_dot(t)                    Q8_0, Q4_0, Q4_K, Q6_K have integer kernels
//   vec_dot(arch, t, n, w_row, x)           one weight row (n elements) times one activation row
//   vec_dot_rows(arch, t, n, w_row, xs, k, out)  one weight row times k activation rows
//   vec_dot_tile(arch, t, n, w, row_bytes, x, out)  dot_tile_rows weight rows times one activation row
//
// Kernels are overloads on the simd tags (core/simd_arch.hpp): portable C++ for every CPU, and
// AVX-512 VNNI (VPDPBUSD: unsigned x signed bytes into int32) where the CPU has it. Integer sums
// are exact, so the two give the same result up to the order of the float accumulation. Weight
// rows are read through memcpy-free unaligned loads: GGUF promises only a tensor's alignment.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/ggml_quantize.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>
#endif

namespace accel::quant {

using io::GgmlType;

/// The kernel tags quantized dot products dispatch over, best first.
using quant_ladder = xsimd::arch_list<simd::avx512_vnni, simd::scalar>;

/// One activation row quantized for type `t`'s dot product, with the sum of each Q8_0 block's
/// ints (the Q4_0 kernel's offset correction).
struct ActivationRow {
  std::vector<io::block_q8_0> q8_0;
  std::vector<std::int32_t> q8_0_sums;
  std::vector<float> q8_0_scales;  ///< each block's f16 scale as float, decoded once per row
  std::vector<io::block_q8_k> q8_k;
  // Q4_K: per super-block,
  std::vector<std::int16_t> q8_k_group_sums;  ///< each 32-element group's sum (8)
  std::vector<std::int8_t> q8_k_lanes;        ///< the 256 ints, groups in the order 0, 2, 1, 3, 4, 6, 5, 7
  std::vector<float> q8_k_scale2;             ///< the scale, twice
  // The AVX-512 Q4_0 kernel takes four blocks a step, in the order the weights' codes come out of
  // one 512-bit register (detail::q4_0_group); per group of four blocks:
  std::vector<std::int8_t> group_lanes;    ///< elements 0-15 of each block, then 16-31 of each
  std::vector<std::int32_t> group_offset;  ///< int32 lane 4i: -8 x block i's sum (the codes are value + 8)
  std::vector<float> group_scale;          ///< float lanes 4i .. 4i + 3: block i's scale
};

/// True when `t` has integer kernels here (others are computed from dequantized rows).
constexpr bool has_quantized_dot(GgmlType t) noexcept {
  return t == GgmlType::q8_0 || t == GgmlType::q4_0 || t == GgmlType::q4_k || t == GgmlType::q6_k;
}

/// Quantizes `x` (n floats) into `row` for type `t`'s kernel.
inline void quantize_activation(GgmlType t, const float* x, std::size_t n, ActivationRow& row) {
  if (t == GgmlType::q4_k || t == GgmlType::q6_k) {
    row.q8_k.resize(n / 256);
    quantize_row_q8_k(x, row.q8_k.data(), n);
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

// ---- portable kernels ------------------------------------------------------------------------

inline float dot_q8_0(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const auto blk = detail::load_block<io::block_q8_0>(w + b * sizeof(io::block_q8_0));
    int s = 0;
    for (int j = 0; j < 32; ++j) s += blk.qs[j] * x.q8_0[b].qs[j];
    acc += io::f16_scale(blk.d) * io::f16_scale(x.q8_0[b].d) * static_cast<float>(s);
  }
  return acc;
}

inline float dot_q4_0(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const auto blk = detail::load_block<io::block_q4_0>(w + b * sizeof(io::block_q4_0));
    int s = 0;
    for (int j = 0; j < 16; ++j) s += (blk.qs[j] & 0x0F) * x.q8_0[b].qs[j] + (blk.qs[j] >> 4) * x.q8_0[b].qs[j + 16];
    s -= 8 * x.q8_0_sums[b];
    acc += io::f16_scale(blk.d) * io::f16_scale(x.q8_0[b].d) * static_cast<float>(s);
  }
  return acc;
}

inline float dot_q4_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto blk = detail::load_block<io::block_q4_k>(w + b * sizeof(io::block_q4_k));
    const auto& a = x.q8_k[b];
    int sumi = 0, summ = 0;
    for (int g = 0; g < 8; ++g) {
      std::uint8_t sc, mn;
      io::k4_scale_min(g, blk.scales, sc, mn);
      const std::uint8_t* q = blk.qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      int s = 0;
      for (int j = 0; j < 32; ++j) s += ((q[j] >> shift) & 0x0F) * a.qs[32 * g + j];
      sumi += sc * s;
      summ += mn * (a.bsums[2 * g] + a.bsums[2 * g + 1]);
    }
    acc += a.d * (io::f16_scale(blk.d) * static_cast<float>(sumi) - io::f16_scale(blk.dmin) * static_cast<float>(summ));
  }
  return acc;
}

namespace detail {
/// The 6-bit values (0..63) of a Q6_K block in element order.
inline void q6_k_values(const io::block_q6_k& b, std::uint8_t* u) noexcept {
  for (int n = 0; n < 2; ++n) {
    const std::uint8_t* ql = b.ql + 64 * n;
    const std::uint8_t* qh = b.qh + 32 * n;
    for (int l = 0; l < 32; ++l) {
      u[128 * n + l] = static_cast<std::uint8_t>((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
      u[128 * n + l + 32] = static_cast<std::uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
      u[128 * n + l + 64] = static_cast<std::uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      u[128 * n + l + 96] = static_cast<std::uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}
}  // namespace detail

inline float dot_q6_k(simd::requires_arch<simd::scalar>, std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float acc = 0;
  std::uint8_t u[256];
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto blk = detail::load_block<io::block_q6_k>(w + b * sizeof(io::block_q6_k));
    const auto& a = x.q8_k[b];
    detail::q6_k_values(blk, u);
    int sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += u[16 * g + j] * a.qs[16 * g + j];
      sumi += blk.scales[g] * (s - 32 * a.bsums[g]);
    }
    acc += a.d * io::f16_scale(blk.d) * static_cast<float>(sumi);
  }
  return acc;
}

// ---- AVX-512 VNNI kernels ----------------------------------------------------------------------
#if ACCEL_SIMD_X86

namespace detail {
ACCEL_TARGET_AVX512_VNNI inline float hsum(__m256 v) noexcept {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
/// The halves split with a vector shuffle: GCC 12's _mm512_reduce_add_ps and extract intrinsics
/// warn here that the header's own placeholder operand is uninitialized.
ACCEL_TARGET_AVX512_VNNI inline float hsum(__m512 v) noexcept {
  const __m256 lo = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 hi = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  return hsum(_mm256_add_ps(lo, hi));
}
/// The two nibbles of 16 bytes as 32 bytes: low nibbles first (elements 0..15), then high.
ACCEL_TARGET_AVX512_VNNI inline __m256i nibbles(const std::uint8_t* q) noexcept {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}
}  // namespace detail

namespace detail {

/// Four consecutive Q4_0 blocks decoded for VPDPBUSD: `low` holds each block's elements 0-15
/// (block i in bytes 16i ..), `high` its elements 16-31, `scale` block i's scale in float lanes
/// 4i .. 4i + 3. The 18-byte blocks put every scale and code at an even offset, so two word
/// permutes (AVX512-BW) gather them from the group's 72 bytes.
struct q4_0_group {
  __m512i low, high;
  __m512 scale;
};

ACCEL_TARGET_AVX512_VNNI inline q4_0_group decode_q4_0_group(const std::byte* p) noexcept {
  static_assert(sizeof(io::block_q4_0) == 18);  // 9 words: the scale, then 8 words of codes
  // Block i's codes are words 9i + 1 .. 9i + 8; words 32-35 are `tail`'s first four.
  alignas(64) static constexpr short codes_at[32] = {1,  2,  3,  4,  5,  6,  7,  8,  10, 11, 12, 13, 14, 15, 16, 17,
                                                     19, 20, 21, 22, 23, 24, 25, 26, 28, 29, 30, 31, 32, 33, 34, 35};
  alignas(64) static constexpr short scales_at[32] = {0, 9, 18, 27};  // block i's scale is word 9i
  const __m512i head = _mm512_loadu_si512(p);  // bytes 0-63
  // Bytes 64-71 (block 3's last codes) alone: a 64-byte load would read past the row.
  const __m512i tail = _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 64)));
  const __m512i codes = _mm512_permutex2var_epi16(head, _mm512_load_si512(codes_at), tail);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m128 scales = _mm_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(_mm512_load_si512(scales_at), head)));
  const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  return {_mm512_and_si512(codes, nibble), _mm512_and_si512(_mm512_srli_epi16(codes, 4), nibble),
          _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(scales))};
}

/// Up to four activation rows against W consecutive weight rows (`row_bytes` apart), each weight
/// block decoded once for all the activation rows (a small batch then costs one decode per block
/// instead of one per row). Result (weight row i, activation row r) is out[i * R + r], and every
/// weight row gets the same operations in the same order whatever W and R are, so a tile gives
/// each single product bit for bit. The single-row kernels dot_q8_0 / dot_q4_0 are this with one
/// row of each.
///
/// The loops over W and R are unrolled and the kernels kept out of line on purpose: inlined into
/// the dispatching lambdas, GCC 12 kept the accumulators in memory, and a batch of two cost three
/// and a half single rows instead of under two.
template <int R, bool Q4, int W = 1>
[[gnu::noinline]] ACCEL_TARGET_AVX512_VNNI void dot_q8_q4_rows(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                    float* out, std::size_t row_bytes = 0) noexcept {
  __m256 acc[W * R];
  __m512 acc4[W * R];  // Q4_0's four-block steps
  const std::int8_t* xq[R];
  const std::int32_t* xsum[R];
  const float* xd[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    xq[r] = x[r]->q8_0.data()->qs;
    xsum[r] = x[r]->q8_0_sums.data();
    xd[r] = x[r]->q8_0_scales.data();
  }
#pragma GCC unroll 32
  for (int a = 0; a < W * R; ++a) acc[a] = _mm256_setzero_ps(), acc4[a] = _mm512_setzero_ps();
  constexpr std::size_t block = Q4 ? sizeof(io::block_q4_0) : sizeof(io::block_q8_0);
  std::size_t b = 0;
  if constexpr (Q4) {
    // Four blocks (72 bytes) a step: one conversion and one FMA per row for all four, where a
    // block at a time spent those on each (a third of the instructions). Q8_0 gained nothing
    // this way: its 34-byte blocks already stream as fast as the caches deliver them.
    for (; b + 4 <= n / 32; b += 4) {
      const std::size_t g = b / 4;
#pragma GCC unroll 8
      for (int i = 0; i < W; ++i) {
        const q4_0_group grp = decode_q4_0_group(w + i * row_bytes + b * block);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const std::int8_t* lanes = x[r]->group_lanes.data() + 128 * g;
          __m512i dot = _mm512_loadu_si512(x[r]->group_offset.data() + 16 * g);
          dot = _mm512_dpbusd_epi32(dot, grp.low, _mm512_loadu_si512(lanes));
          dot = _mm512_dpbusd_epi32(dot, grp.high, _mm512_loadu_si512(lanes + 64));
          const __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_loadu_ps(x[r]->group_scale.data() + 16 * g));
          acc4[i * R + r] = _mm512_fmadd_ps(scaled, grp.scale, acc4[i * R + r]);
        }
      }
    }
  }
  for (; b < n / 32; ++b) {
#pragma GCC unroll 8
    for (int i = 0; i < W; ++i) {
      const std::byte* p = w + i * row_bytes + b * block;
      std::uint16_t d;
      std::memcpy(&d, p, 2);
      const float dw = _cvtsh_ss(d);
      __m256i q;
      if constexpr (Q4) {
        q = nibbles(reinterpret_cast<const std::uint8_t*>(p + 2));
      } else {
        q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      }
      const __m256i uq = Q4 ? q : _mm256_sign_epi8(q, q);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[r] + b * sizeof(io::block_q8_0)));
        // Q4_0's codes are value + 8: the offset comes out in integers, from lane 0's start.
        const __m256i start = Q4 ? _mm256_castsi128_si256(_mm_cvtsi32_si128(-8 * xsum[r][b])) : _mm256_setzero_si256();
        const __m256i dot = _mm256_dpbusd_epi32(start, uq, Q4 ? qx : _mm256_sign_epi8(qx, q));
        acc[i * R + r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * xd[r][b]), acc[i * R + r]);
      }
    }
  }
#pragma GCC unroll 32
  for (int a = 0; a < W * R; ++a) out[a] = hsum(acc[a]) + hsum(acc4[a]);
}

// GCC 12 warns that its own intrinsics' undefined pass-through operands are uninitialized when
// they are inlined into these loops (the register is never read).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/// Four Q4_K super-blocks' first sixteen bytes (d, dmin, then the twelve bytes of six-bit scales
/// and mins in io::k4_scales_mins' packing), one block per 128-bit lane, as per lane: the eight
/// scales, then the eight mins.
ACCEL_TARGET_AVX512_VNNI inline __m512i k4_scales_mins(__m512i head) noexcept {
  // Per lane, bytes 0-3: scales 0-3 (head[4..7] low six bits); 4-7: scales 4-7 (head[12..15] low
  // four, head[4..7] top two); 8-11: mins 0-3 (head[8..11] low six); 12-15: mins 4-7 (head[12..15]
  // high four, head[8..11] top two).
  const __m512i main = _mm512_shuffle_epi8(head, _mm512_broadcast_i32x4(_mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
  const __m512i tops = _mm512_shuffle_epi8(head, _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11)));
  const __m512i low = _mm512_and_si512(main, _mm512_broadcast_i32x4(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0)));
  const __m512i high = _mm512_and_si512(_mm512_srli_epi16(main, 4), _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
  const __m512i top2 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(tops, 6), _mm512_set1_epi8(3)), 4);
  return _mm512_or_si512(_mm512_or_si512(low, high), top2);
}

/// Prefetches `Lines` cache lines 4 KB past `p`: the next rows' weights, for the one-row kernels
/// that stream a matrix from L3 or DRAM (Q4_K, 4096 x 14336, 2 threads, an Intel Xeon: 0.85 ->
/// 0.70-0.81 ms).
template <int Lines>
ACCEL_TARGET_AVX512_VNNI inline void prefetch_ahead(const void* p) noexcept {
#pragma GCC unroll 16
  for (int line = 0; line < Lines; ++line) _mm_prefetch(static_cast<const char*>(p) + 4096 + 64 * line, _MM_HINT_T0);
}

/// 128-bit lane I of `v`, four times (the shuffle's immediate must be a constant expression).
template <int I>
ACCEL_TARGET_AVX512_VNNI inline __m512i lane_x4(__m512i v) noexcept {
  return _mm512_shuffle_i32x4(v, v, I * 0x55);
}

/// G (1-4) Q4_K super-blocks from `blk0` (block index b0) against R activation rows, added to
/// acc[r]. The blocks' scales, mins and [d, dmin] are unpacked together, one block per 128-bit lane;
/// then per block, two 512-bit loads hold its 256 codes: the low nibbles of bytes 0-63 are groups 0
/// and 2, the high nibbles groups 1 and 3 (q8_k_lanes holds the activation in that order). Per
/// 64 codes: VPMADDUBSW against the activation, VPMADDWD / VPDPWSSD of those 16-bit pair sums with
/// the two groups' scales (VPSHUFB from the unpacked scales). The mins go against the activation's
/// 32-element sums in one VPMADDWD for the G blocks.
template <int R, int G>
ACCEL_TARGET_AVX512_VNNI inline void q4_k_group(const std::uint8_t* blk0, std::size_t b0, const ActivationRow* const* x,
                                                __m512* acc) noexcept {
  constexpr std::size_t B = sizeof(io::block_q4_k);
  __m512i head = _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk0)));
  if constexpr (G > 1) head = _mm512_inserti32x4(head, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk0 + B)), 1);
  if constexpr (G > 2) head = _mm512_inserti32x4(head, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk0 + 2 * B)), 2);
  if constexpr (G > 3) head = _mm512_inserti32x4(head, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk0 + 3 * B)), 3);
  const __m512i sm = k4_scales_mins(head);
  const __m512i mins = _mm512_unpackhi_epi8(sm, _mm512_setzero_si512());  // eight int16 per lane
  // The blocks' [d, dmin] pairs as floats 2i, 2i + 1.
  const __m256 d_dmin = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), head)));
  constexpr auto pairs = static_cast<__mmask8>((1u << (2 * G)) - 1);
  constexpr auto groups = static_cast<__mmask32>((std::uint64_t{1} << (8 * G)) - 1);
  __m512 f[R];  // floats 2i, 2i + 1: block i's d and dmin times row r's activation scale
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    f[r] = _mm512_zextps256_ps512(_mm256_mul_ps(d_dmin, _mm256_maskz_loadu_ps(pairs, x[r]->q8_k_scale2.data() + 2 * b0)));
    const __m512i m = _mm512_madd_epi16(mins, _mm512_maskz_loadu_epi16(groups, x[r]->q8_k_group_sums.data() + 8 * b0));
    const __m512 dmin = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7), f[r]);
    acc[r] = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(m), acc[r]);
  }
  const __m512i low = _mm512_set1_epi8(0x0F);
  // Scale selectors for VPSHUFB: each int16 lane of the first 256 bits takes group a's scale byte
  // (high byte zero), of the last 256 bits group b's.
  const __m512i sel0 = _mm512_setr_epi64(0x8000800080008000ll, 0x8000800080008000ll, 0x8000800080008000ll, 0x8000800080008000ll,
                                         0x8002800280028002ll, 0x8002800280028002ll, 0x8002800280028002ll, 0x8002800280028002ll);
  const __m512i sel1 = _mm512_add_epi16(sel0, _mm512_set1_epi16(1)), sel2 = _mm512_add_epi16(sel0, _mm512_set1_epi16(4));
  const __m512i sel3 = _mm512_add_epi16(sel2, _mm512_set1_epi16(1));
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    const std::uint8_t* qs = blk0 + i * B + 16;
    const __m512i q0 = _mm512_loadu_si512(qs), q1 = _mm512_loadu_si512(qs + 64);
    const __m512i u[4] = {_mm512_and_si512(q0, low), _mm512_and_si512(_mm512_srli_epi16(q0, 4), low), _mm512_and_si512(q1, low),
                          _mm512_and_si512(_mm512_srli_epi16(q1, 4), low)};
    const __m512i own = i == 0 ? lane_x4<0>(sm) : i == 1 ? lane_x4<1>(sm) : i == 2 ? lane_x4<2>(sm) : lane_x4<3>(sm);
    const __m512i scale[4] = {_mm512_shuffle_epi8(own, sel0), _mm512_shuffle_epi8(own, sel1), _mm512_shuffle_epi8(own, sel2),
                              _mm512_shuffle_epi8(own, sel3)};
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::int8_t* xl = x[r]->q8_k_lanes.data() + 256 * (b0 + i);
      __m512i s = _mm512_madd_epi16(_mm512_maddubs_epi16(u[0], _mm512_loadu_si512(xl)), scale[0]);
#pragma GCC unroll 3
      for (int k = 1; k < 4; ++k) s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(u[k], _mm512_loadu_si512(xl + 64 * k)), scale[k]);
      acc[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_set1_epi32(2 * i), f[r]), _mm512_cvtepi32_ps(s), acc[r]);
    }
  }
}

/// Q4_K for up to four activation rows, four super-blocks a step (q4_k_group); dot_q4_k is this
/// with one row. Against ggml's AVX2 kernel with the weights in L2, one thread: 5.5 against
/// 8.4 ns a super-block (the 256-bit kernel this replaced: 8.2).
template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX512_VNNI void dot_q4_k_rows(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                            float* out) noexcept {
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const auto* p = reinterpret_cast<const std::uint8_t*>(w);
  const std::size_t blocks = n / 256;
  std::size_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    prefetch_ahead<9>(p + b * sizeof(io::block_q4_k));  // four blocks: 576 bytes
    q4_k_group<R, 4>(p + b * sizeof(io::block_q4_k), b, x, acc);
  }
  const auto* tail = p + b * sizeof(io::block_q4_k);
  switch (blocks - b) {
    case 3: q4_k_group<R, 3>(tail, b, x, acc); break;
    case 2: q4_k_group<R, 2>(tail, b, x, acc); break;
    case 1: q4_k_group<R, 1>(tail, b, x, acc); break;
    default: break;
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
}

/// Q6_K for up to four activation rows (dot_q6_k is this with one row), a super-block's 256
/// codes in four 512-bit registers of 64 elements each: the low or high nibbles of 64 bytes of
/// `ql`, and two bits of `qh` shifted into place by a per-half variable shift (the 32 bytes of `qh`
/// one half of the block uses, broadcast to both halves of the register). The codes are unsigned
/// (value + 32): VPMADDUBSW against the activation, VPDPWSSD with the sixteen-element groups'
/// scales (one group per 128-bit lane, VPERMW), and the offset as the scales times -32 against the
/// activation's sixteen-element sums in one more VPDPWSSD. Against ggml's AVX2 kernel with the
/// weights in L2, one thread: 7.6 against 10.8 ns a super-block (the 256-bit kernel this replaced:
/// 11.1).
template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX512_VNNI void dot_q6_k_rows(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                            float* out) noexcept {
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
  // qh's two bits for elements 32j .. 32j + 31 of a 128-element half sit at bit 2j: bytes 0-31 of
  // a register want bits 2j, bytes 32-63 bits 2j + 2, moved to bits 4-5.
  const __m512i up01 = _mm512_setr_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0x0004000400040004ll, 0x0004000400040004ll,
                                         0x0002000200020002ll, 0x0002000200020002ll, 0x0002000200020002ll, 0x0002000200020002ll);
  const __m512i down23 = _mm512_setr_epi64(0, 0, 0, 0, 0x0002000200020002ll, 0x0002000200020002ll, 0x0002000200020002ll,
                                           0x0002000200020002ll);
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto* blk = reinterpret_cast<const std::uint8_t*>(w + b * sizeof(io::block_q6_k));
    prefetch_ahead<4>(blk);
    __m512i u[4];  // u[k]: elements 64k .. 64k + 63
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i l = _mm512_loadu_si512(blk + 64 * h);
      const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
      u[2 * h] = _mm512_ternarylogic_epi32(_mm512_and_si512(l, m4), _mm512_sllv_epi16(hb, up01), top, 0xF8);  // a | (b & c)
      u[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_srlv_epi16(hb, down23), top, 0xF8);
    }
    // Group g's scale in every int16 lane of 128-bit lane g % 4 of scale[g / 4].
    const __m512i sc16 = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192))));
    __m512i scale[4];
    constexpr long long ones = 0x0001000100010001ll;  // a word index in four int16 lanes
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const long long g = 4 * k;
      scale[k] = _mm512_permutexvar_epi16(
          _mm512_setr_epi64(ones * g, ones * g, ones * (g + 1), ones * (g + 1), ones * (g + 2), ones * (g + 2), ones * (g + 3), ones * (g + 3)),
          sc16);
    }
    const __m512i offset_scale = _mm512_mullo_epi16(sc16, _mm512_set1_epi16(-32));
    std::uint16_t d;
    std::memcpy(&d, blk + 208, 2);
    const float fd = _cvtsh_ss(d);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const auto& a = x[r]->q8_k[b];
      __m512i s = _mm512_madd_epi16(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums))), offset_scale);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(u[k], _mm512_loadu_si512(a.qs + 64 * k)), scale[k]);
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a.d * fd), _mm512_cvtepi32_ps(s), acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

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
/// A multi-row kernel with one activation row.
template <auto Kernel>
ACCEL_TARGET_AVX512_VNNI inline float one_row(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  float out;
  const ActivationRow* xs = &x;
  if constexpr (requires { Kernel(n, w, &xs, &out, std::size_t{0}); }) {
    Kernel(n, w, &xs, &out, 0);  // a weight-row tile of one
  } else {
    Kernel(n, w, &xs, &out);
  }
  return out;
}
}  // namespace detail

ACCEL_TARGET_AVX512_VNNI inline float dot_q8_0(simd::requires_arch<simd::avx512_vnni>, std::size_t n, const std::byte* w,
                                               const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_q8_q4_rows<1, false>>(n, w, x);
}

ACCEL_TARGET_AVX512_VNNI inline float dot_q4_0(simd::requires_arch<simd::avx512_vnni>, std::size_t n, const std::byte* w,
                                               const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_q8_q4_rows<1, true>>(n, w, x);
}

ACCEL_TARGET_AVX512_VNNI inline float dot_q4_k(simd::requires_arch<simd::avx512_vnni>, std::size_t n, const std::byte* w,
                                               const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_q4_k_rows<1>>(n, w, x);
}

ACCEL_TARGET_AVX512_VNNI inline float dot_q6_k(simd::requires_arch<simd::avx512_vnni>, std::size_t n, const std::byte* w,
                                               const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_q6_k_rows<1>>(n, w, x);
}

#endif  // ACCEL_SIMD_X86

/// One weight row of `n` elements of type `t` at `w` times the quantized activation `x`, on the
/// kernels of `Arch` (falling back to its parents). `t` must satisfy has_quantized_dot.
template <class Arch>
float vec_dot(const Arch& arch, GgmlType t, std::size_t n, const std::byte* w, const ActivationRow& x) {
  switch (t) {
    case GgmlType::q8_0: return dot_q8_0(arch, n, w, x);
    case GgmlType::q4_0: return dot_q4_0(arch, n, w, x);
    case GgmlType::q4_k: return dot_q4_k(arch, n, w, x);
    case GgmlType::q6_k: return dot_q6_k(arch, n, w, x);
    default: break;
  }
  throw DTypeError("vec_dot: no integer kernel for " + std::string(io::ggml_type_name(t)));
}

/// Weight rows per vec_dot_tile call.
inline constexpr std::size_t dot_tile_rows = 8;

/// `dot_tile_rows` consecutive weight rows (`row_bytes` apart) times one activation row: out[i] =
/// vec_dot(arch, t, n, w + i * row_bytes, x), bit for bit. On VNNI, Q8_0's and Q4_0's eight rows
/// advance together, block by block: a decode step's GEMV then keeps eight weight streams in
/// flight instead of one, and loads the activation once for all eight (4096 x 4096, 2 threads:
/// Q8_0 1.25x, Q4_0 1.1x one row at a time). The K types measured no steadier either way, and
/// keep one row at a time.
template <class Arch>
void vec_dot_tile(const Arch& arch, GgmlType t, std::size_t n, const std::byte* w, std::size_t row_bytes, const ActivationRow& x,
                  float* out) {
  constexpr int W = static_cast<int>(dot_tile_rows);
#if ACCEL_SIMD_X86
  if constexpr (std::is_base_of_v<simd::avx512_vnni, Arch>) {
    const ActivationRow* xs = &x;
    switch (t) {
      case GgmlType::q8_0: return detail::dot_q8_q4_rows<1, false, W>(n, w, &xs, out, row_bytes);
      case GgmlType::q4_0: return detail::dot_q8_q4_rows<1, true, W>(n, w, &xs, out, row_bytes);
      default: break;
    }
  }
#endif
  for (int i = 0; i < W; ++i) out[i] = vec_dot(arch, t, n, w + static_cast<std::size_t>(i) * row_bytes, x);
}

/// One weight row times `count` activation rows (out[i] = vec_dot(arch, t, n, w, *x[i])): on VNNI
/// each block is decoded once for up to four rows at a time; the portable kernels call vec_dot.
template <class Arch>
void vec_dot_rows(const Arch& arch, GgmlType t, std::size_t n, const std::byte* w, const ActivationRow* const* x,
                  std::size_t count, float* out) {
#if ACCEL_SIMD_X86
  if constexpr (std::is_base_of_v<simd::avx512_vnni, Arch>) {
    if (has_quantized_dot(t)) {
      detail::in_groups<4>([&](auto r, const ActivationRow* const* xs, float* o) {
        constexpr int R = decltype(r)::value;
        if (t == GgmlType::q6_k) detail::dot_q6_k_rows<R>(n, w, xs, o);
        else if (t == GgmlType::q4_k) detail::dot_q4_k_rows<R>(n, w, xs, o);
        else if (t == GgmlType::q4_0) detail::dot_q8_q4_rows<R, true>(n, w, xs, o);
        else detail::dot_q8_q4_rows<R, false>(n, w, xs, o);
      }, x, count, out);
      return;
    }
  }
#endif
  for (std::size_t i = 0; i < count; ++i) out[i] = vec_dot(arch, t, n, w, *x[i]);
}

}  // namespace accel::quant
