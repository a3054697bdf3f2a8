// Sixteen Q4_K or Q6_K weight rows at a time on AVX-512 VNNI, rows in lanes, for prompts: the
// K-quant form of quant/kernels/ggml_dot_x16.hpp's Q8_0 / Q4_0 kernels.
//
// A super-block of sixteen rows is unpacked once per call, into the calling thread's buffer:
// its 256 codes as unsigned bytes, four elements of one row in each 32-bit lane (64 registers),
// each group's scale per row (Q4_K: 8 groups of 32 elements, Q6_K: 16 of 16) and the per-row
// offsets that come out through the activation's sums of 16 elements (Q4_K: its mins, against
// dmin; Q6_K: 32 x its scales, the codes being value + 32). Every pass of up to eight activation
// rows then reads that buffer: one VPDPBUSD with four activation bytes broadcast advances sixteen
// weight rows, the group's sum times the row's scale (VPMULLD) joins the block's integer sum, and
// one VPDPWSSD per pair of 16-element sums takes the offsets out. Integer sums are exact: each
// product differs from vec_dot's only in the order of the float accumulation.
//
// Why: the one-row kernels (avx512_vnni.hpp) decode a K-quant super-block again for every group of
// four activation rows and reduce each product horizontally; a 64-token prompt decoded each block
// sixteen times, and Q4_K_M prompts ran at 0.44x llama.cpp on a Sapphire Rapids Xeon.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/avx512_vnni.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

ACCEL_SIMD_QUIET_BEGIN  // core/simd_arch.hpp: GCC 12's false uninitialized warnings
namespace accel::quant::detail {

/// One super-block (256 elements) of sixteen Q4_K / Q6_K rows, rows in lanes. Aligned explicitly,
/// as x16_block is (a translation unit built without AVX-512 would under-align its vectors).
struct alignas(64) k16_block {
  __m512 d;           ///< lane i: row i's d
  __m512 dmin;        ///< Q4_K: row i's dmin; Q6_K: d again
  __m512i scale[16];  ///< scale[g], lane i: group g's scale in row i (Q4_K uses 8)
  __m512i offset[8];  ///< offset[k], lane i: int16 pair, the factors of the activation's sums 2k, 2k + 1
  __m512i q[64];      ///< q[k], lane i: elements 4k .. 4k + 3 of row i, unsigned
};

/// The next sixteen rows' block b, into L2: sixteen short streams at once are more than the
/// hardware prefetchers follow.
template <std::size_t Block>
ACCEL_TARGET_AVX512_VNNI inline void prefetch_k16(const std::byte* p, std::size_t row_bytes) noexcept {
#pragma GCC unroll 16
  for (std::size_t i = 16; i < 32; ++i) {
    for (std::size_t at = 0; at < Block; at += 64) _mm_prefetch(reinterpret_cast<const char*>(p + i * row_bytes + at), _MM_HINT_T1);
  }
}

/// Super-block b of the sixteen Q4_K rows at w (row i at w + i * row_bytes), unpacked.
ACCEL_TARGET_AVX512_VNNI inline void pack_k16_q4_k(const std::byte* w, std::size_t row_bytes, std::size_t b,
                                                   k16_block& k) noexcept {
  const std::byte* p = w + b * sizeof(io::block_q4_k);
  prefetch_k16<sizeof(io::block_q4_k)>(p, row_bytes);
  // Each row's first 16 bytes, transposed: word 0 is [d, dmin], words 1-3 the twelve bytes of
  // six-bit scales and mins, unpacked per lane as io::k4_scales_mins unpacks one word.
  __m512i head[4];
  transpose_x16(p, row_bytes, head);
  k.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head[0]));
  k.dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head[0], 16)));
  const __m512i low6 = _mm512_set1_epi8(0x3f), low4 = _mm512_set1_epi8(0x0f), low2 = _mm512_set1_epi8(0x03);
  const __m512i q0 = head[1], q1 = head[2], q2 = head[3];
  const __m512i scales[2] = {
      _mm512_and_si512(q0, low6),
      _mm512_or_si512(_mm512_and_si512(q2, low4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(q0, 6), low2), 4))};
  const __m512i mins[2] = {
      _mm512_and_si512(q1, low6),
      _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(q2, 4), low4),
                      _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(q1, 6), low2), 4))};
  const __m512i byte = _mm512_set1_epi32(0xFF);
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    k.scale[g] = _mm512_and_si512(_mm512_srli_epi32(scales[g / 4], 8 * (g % 4)), byte);
    // Group g is the activation's sums 2g and 2g + 1: both against -min, as a pair of int16.
    const __m512i m = _mm512_and_si512(_mm512_srli_epi32(mins[g / 4], 8 * (g % 4)), byte);
    k.offset[g] = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_or_si512(m, _mm512_slli_epi32(m, 16)));
  }
  // Bytes 32c + 16h .. + 15 of qs: low nibbles are group 2c's elements 16h .. 16h + 15, high
  // nibbles group 2c + 1's.
  const __m512i low = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 8
  for (int c = 0; c < 4; ++c) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i t[4];
      transpose_x16(p + offsetof(io::block_q4_k, qs) + 32 * c + 16 * h, row_bytes, t);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        k.q[16 * c + 4 * h + j] = _mm512_and_si512(t[j], low);
        k.q[16 * c + 8 + 4 * h + j] = _mm512_and_si512(_mm512_srli_epi16(t[j], 4), low);
      }
    }
  }
}

/// Super-block b of the sixteen Q6_K rows at w, unpacked (element order as detail::q6_k_values).
ACCEL_TARGET_AVX512_VNNI inline void pack_k16_q6_k(const std::byte* w, std::size_t row_bytes, std::size_t b,
                                                   k16_block& k) noexcept {
  const std::byte* p = w + b * sizeof(io::block_q6_k);
  prefetch_k16<sizeof(io::block_q6_k)>(p, row_bytes);
  alignas(32) std::uint16_t d[16];
  for (std::size_t i = 0; i < 16; ++i) std::memcpy(&d[i], p + i * row_bytes + offsetof(io::block_q6_k, d), 2);
  k.d = k.dmin = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d)));
  // The sixteen signed scales as four words a row, each byte sign-extended into its own lane.
  __m512i words[4];
  transpose_x16(p + offsetof(io::block_q6_k, scales), row_bytes, words);
#pragma GCC unroll 16
  for (int g = 0; g < 16; ++g) k.scale[g] = _mm512_srai_epi32(_mm512_slli_epi32(words[g / 4], 24 - 8 * (g % 4)), 24);
  // The codes are value + 32: -32 x the scales of groups 2p and 2p + 1, as a pair of int16.
  const __m512i half = _mm512_set1_epi32(0xFFFF);
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    const __m512i lo = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(k.scale[2 * g], 5));
    const __m512i hi = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(k.scale[2 * g + 1], 5));
    k.offset[g] = _mm512_or_si512(_mm512_and_si512(lo, half), _mm512_slli_epi32(hi, 16));
  }
  // Half h, bytes l0 .. l0 + 15 (l0 = 0, 16) of its ql[0..31], ql[32..63] and qh[0..31]: elements
  // 128h + l, + 32, + 64, + 96 take the low nibble of ql[l], of ql[l + 32], the high nibbles, and
  // bit pairs 0, 1, 2, 3 of qh[l] as their bits 4-5. The 16-bit shifts move bits across bytes only
  // where the 0x30 mask clears them.
  const __m512i low = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
    for (int l0 = 0; l0 < 32; l0 += 16) {
      __m512i a[4], c[4], hb[4];
      transpose_x16(p + offsetof(io::block_q6_k, ql) + 64 * h + l0, row_bytes, a);
      transpose_x16(p + offsetof(io::block_q6_k, ql) + 64 * h + 32 + l0, row_bytes, c);
      transpose_x16(p + offsetof(io::block_q6_k, qh) + 32 * h + l0, row_bytes, hb);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const int at = 32 * h + l0 / 4 + j;
        k.q[at] = _mm512_or_si512(_mm512_and_si512(a[j], low), _mm512_and_si512(_mm512_slli_epi16(hb[j], 4), top));
        k.q[at + 8] = _mm512_or_si512(_mm512_and_si512(c[j], low), _mm512_and_si512(_mm512_slli_epi16(hb[j], 2), top));
        k.q[at + 16] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a[j], 4), low), _mm512_and_si512(hb[j], top));
        k.q[at + 24] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(c[j], 4), low),
                                       _mm512_and_si512(_mm512_srli_epi16(hb[j], 2), top));
      }
    }
  }
}

/// The activation's four bytes at p in every lane.
ACCEL_TARGET_AVX512_VNNI inline __m512i broadcast4(const void* p) noexcept {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

/// R activation rows against sixteen rows of unpacked super-blocks (groups of G elements: 32 for
/// Q4_K, 16 for Q6_K): out[16 * r + i] = row i times activation r. The weight registers are read
/// once per pass for all R rows.
template <int R, int G>
[[gnu::noinline]] ACCEL_TARGET_AVX512_VNNI void dot_k16(std::size_t n, const k16_block* blocks, const ActivationRow* const* x,
                                                        float* out) noexcept {
  constexpr int groups = 256 / G, per_group = G / 4;
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < n / 256; ++b) {
    const k16_block& k = blocks[b];
    __m512i sumi[R], s[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) sumi[r] = _mm512_setzero_si512();
    for (int g = 0; g < groups; ++g) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int j = 0; j < per_group; ++j) {
        const __m512i q = k.q[per_group * g + j];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) s[r] = _mm512_dpbusd_epi32(s[r], q, broadcast4(x[r]->q8_k[b].qs + G * g + 4 * j));
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) sumi[r] = _mm512_add_epi32(sumi[r], _mm512_mullo_epi32(s[r], k.scale[g]));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) s[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[r] = _mm512_dpwssd_epi32(s[r], k.offset[p], broadcast4(x[r]->q8_k[b].bsums + 2 * p));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 dx = _mm512_set1_ps(x[r]->q8_k[b].d);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[r]), _mm512_mul_ps(k.d, dx), acc[r]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r]), _mm512_mul_ps(k.dmin, dx), acc[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + 16 * r, acc[r]);
}

}  // namespace accel::quant::detail
ACCEL_SIMD_QUIET_END

#endif  // ACCEL_SIMD_X86
