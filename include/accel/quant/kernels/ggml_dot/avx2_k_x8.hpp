// Eight Q4_K or Q6_K weight rows at a time on AVX2, rows in lanes, for prompts: the AVX2 form of
// avx512_k_x16.hpp (sixteen rows, VPDPBUSD), with VPMADDUBSW and VPMADDWD in VPDPBUSD's place.
//
// A super-block of eight rows is unpacked once per call, into the calling thread's buffer: its 256
// codes as unsigned bytes, four elements of one row in each 32-bit lane (64 registers), each
// group's scale per row as a pair of int16 (Q4_K: 8 groups of 32 elements, Q6_K: 16 of 16) and the
// per-row offsets that come out through the activation's sums of 16 elements (Q4_K: its mins,
// against dmin; Q6_K: 32 x its scales, the codes being value + 32). Every pass of up to four
// activation rows then reads that buffer: one VPMADDUBSW with four activation bytes broadcast
// advances eight weight rows by four products; the 16-bit pair sums of a run of them add up in
// 16 bits (Q4_K: codes <= 15 against |x| <= 128, eight words of a 32-element group reach 30720;
// Q6_K: codes <= 63, two words reach 32256), and one VPMADDWD by the group's scale pair widens the
// run into the block's 32-bit sum. Integer sums are exact: each product differs from vec_dot's only
// in the order of the float accumulation.
//
// Why: the AVX2 one-row kernels (avx2_rows.hpp) decode a super-block again for every group of four
// activation rows, pay a VPMADDWD for every 32 products and reduce each row horizontally; Q4_K_M
// prompts ran at 0.9x llama.cpp on a Zen 3 EPYC (2 threads), where Q4_0 with rows in lanes ran
// at 1.27x.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/avx2_rows.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::quant::detail {

/// One super-block (256 elements) of eight Q4_K / Q6_K rows, rows in lanes. Aligned explicitly,
/// as x8_block is.
struct alignas(32) k8_block {
  __m256 d;           ///< lane i: row i's d
  __m256 dmin;        ///< Q4_K: row i's dmin; Q6_K: d again
  __m256i scale[16];  ///< scale[g], lane i: group g's scale in row i, twice as int16 (Q4_K uses 8)
  __m256i offset[8];  ///< offset[k], lane i: int16 pair, the factors of the activation's sums 2k, 2k + 1
  __m256i q[64];      ///< q[k], lane i: elements 4k .. 4k + 3 of row i, unsigned
};

/// The next eight rows' block at p, into L2: eight short streams at once are more than the
/// hardware prefetchers follow.
template <std::size_t Block>
ACCEL_TARGET_AVX2 inline void prefetch_k8(const std::byte* p, std::size_t row_bytes) noexcept {
#pragma GCC unroll 8
  for (std::size_t i = 8; i < 16; ++i) {
    for (std::size_t at = 0; at < Block; at += 64) _mm_prefetch(reinterpret_cast<const char*>(p + i * row_bytes + at), _MM_HINT_T1);
  }
}

/// Lane i's 32-bit value v as the int16 pair (v, v): VPMADDWD's factor for both 16-bit sums.
ACCEL_TARGET_AVX2 inline __m256i pair16(__m256i v) noexcept {
  return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}

/// Super-block b of the eight Q4_K rows at w (row i at w + i * row_bytes), unpacked.
ACCEL_TARGET_AVX2 inline void pack_k8_q4_k(const std::byte* w, std::size_t row_bytes, std::size_t b, k8_block& k) noexcept {
  const std::byte* p = w + b * sizeof(io::block_q4_k);
  prefetch_k8<sizeof(io::block_q4_k)>(p, row_bytes);
  // Each row's first 16 bytes, transposed: word 0 is [d, dmin], words 1-3 the twelve bytes of
  // six-bit scales and mins, unpacked per lane as io::k4_scales_mins unpacks one word.
  __m256i head[4];
  transpose_x8(p, row_bytes, head);
  // d and dmin as eight f16 each: packed to 16 bits within each 128-bit half, then the halves'
  // quarters put in order (d of rows 0-7 low, dmin high).
  const __m256i halves = _mm256_permute4x64_epi64(
      _mm256_packus_epi32(_mm256_and_si256(head[0], _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(head[0], 16)),
      _MM_SHUFFLE(3, 1, 2, 0));
  k.d = _mm256_cvtph_ps(_mm256_castsi256_si128(halves));
  k.dmin = _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1));
  const __m256i low6 = _mm256_set1_epi8(0x3f), low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(0x03);
  const __m256i q0 = head[1], q1 = head[2], q2 = head[3];
  const __m256i scales[2] = {
      _mm256_and_si256(q0, low6),
      _mm256_or_si256(_mm256_and_si256(q2, low4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(q0, 6), low2), 4))};
  const __m256i mins[2] = {
      _mm256_and_si256(q1, low6),
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(q2, 4), low4),
                      _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(q1, 6), low2), 4))};
  const __m256i byte = _mm256_set1_epi32(0xFF);
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    k.scale[g] = pair16(_mm256_and_si256(_mm256_srli_epi32(scales[g / 4], 8 * (g % 4)), byte));
    // Group g is the activation's sums 2g and 2g + 1: both against -min.
    const __m256i m = pair16(_mm256_and_si256(_mm256_srli_epi32(mins[g / 4], 8 * (g % 4)), byte));
    k.offset[g] = _mm256_sub_epi16(_mm256_setzero_si256(), m);
  }
  // Bytes 32c + 16h .. + 15 of qs: low nibbles are group 2c's elements 16h .. 16h + 15, high
  // nibbles group 2c + 1's.
  const __m256i low = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i t[4];
      transpose_x8(p + offsetof(io::block_q4_k, qs) + 32 * c + 16 * h, row_bytes, t);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        k.q[16 * c + 4 * h + j] = _mm256_and_si256(t[j], low);
        k.q[16 * c + 8 + 4 * h + j] = _mm256_and_si256(_mm256_srli_epi16(t[j], 4), low);
      }
    }
  }
}

/// Super-block b of the eight Q6_K rows at w, unpacked (element order as detail::q6_k_values).
ACCEL_TARGET_AVX2 inline void pack_k8_q6_k(const std::byte* w, std::size_t row_bytes, std::size_t b, k8_block& k) noexcept {
  const std::byte* p = w + b * sizeof(io::block_q6_k);
  prefetch_k8<sizeof(io::block_q6_k)>(p, row_bytes);
  k.d = k.dmin = scales_x8(p + offsetof(io::block_q6_k, d), row_bytes);
  // The sixteen signed scales as four words a row, each byte sign-extended into its own lane.
  __m256i words[4], scale[16];
  transpose_x8(p + offsetof(io::block_q6_k, scales), row_bytes, words);
#pragma GCC unroll 16
  for (int g = 0; g < 16; ++g) {
    scale[g] = _mm256_srai_epi32(_mm256_slli_epi32(words[g / 4], 24 - 8 * (g % 4)), 24);
    k.scale[g] = pair16(scale[g]);
  }
  // The codes are value + 32: -32 x the scales of groups 2p and 2p + 1, as a pair of int16.
  const __m256i half = _mm256_set1_epi32(0xFFFF);
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    const __m256i lo = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(scale[2 * g], 5));
    const __m256i hi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(scale[2 * g + 1], 5));
    k.offset[g] = _mm256_or_si256(_mm256_and_si256(lo, half), _mm256_slli_epi32(hi, 16));
  }
  // Half h, bytes l0 .. l0 + 15 (l0 = 0, 16) of its ql[0..31], ql[32..63] and qh[0..31]: elements
  // 128h + l, + 32, + 64, + 96 take the low nibble of ql[l], of ql[l + 32], the high nibbles, and
  // bit pairs 0, 1, 2, 3 of qh[l] as their bits 4-5. The 16-bit shifts move bits across bytes only
  // where the 0x30 mask clears them.
  const __m256i low = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
    for (int l0 = 0; l0 < 32; l0 += 16) {
      __m256i a[4], c[4], hb[4];
      transpose_x8(p + offsetof(io::block_q6_k, ql) + 64 * h + l0, row_bytes, a);
      transpose_x8(p + offsetof(io::block_q6_k, ql) + 64 * h + 32 + l0, row_bytes, c);
      transpose_x8(p + offsetof(io::block_q6_k, qh) + 32 * h + l0, row_bytes, hb);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const int at = 32 * h + l0 / 4 + j;
        k.q[at] = _mm256_or_si256(_mm256_and_si256(a[j], low), _mm256_and_si256(_mm256_slli_epi16(hb[j], 4), top));
        k.q[at + 8] = _mm256_or_si256(_mm256_and_si256(c[j], low), _mm256_and_si256(_mm256_slli_epi16(hb[j], 2), top));
        k.q[at + 16] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a[j], 4), low), _mm256_and_si256(hb[j], top));
        k.q[at + 24] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c[j], 4), low),
                                       _mm256_and_si256(_mm256_srli_epi16(hb[j], 2), top));
      }
    }
  }
}

/// R activation rows against eight rows of unpacked super-blocks (groups of G elements: 32 for
/// Q4_K, 16 for Q6_K): out[r * stride + i] = row i times activation r. The weight registers are
/// read once per pass for all R rows.
template <int R, int G>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_k8_avx2(std::size_t n, const k8_block* blocks, const ActivationRow* const* x,
                                                     float* out, std::size_t stride) noexcept {
  // Words added in 16 bits before one VPMADDWD widens them (the bounds in the file's comment).
  constexpr int run = G == 32 ? 8 : 2;
  __m256 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::size_t b = 0; b < n / 256; ++b) {
    const k8_block& k = blocks[b];
    __m256i sumi[R], s[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
    for (int c = 0; c < 64 / run; ++c) {
      const __m256i scale = k.scale[4 * run * c / G];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const std::int8_t* xq = x[r]->q8_k[b].qs + 4 * run * c;
        __m256i t = _mm256_maddubs_epi16(k.q[run * c], broadcast_word_avx2(xq));
#pragma GCC unroll 8
        for (int j = 1; j < run; ++j) t = _mm256_add_epi16(t, _mm256_maddubs_epi16(k.q[run * c + j], broadcast_word_avx2(xq + 4 * j)));
        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(t, scale));
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) s[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(k.offset[p], broadcast_word_avx2(x[r]->q8_k[b].bsums + 2 * p)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 dx = _mm256_set1_ps(x[r]->q8_k[b].d);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[r]), _mm256_mul_ps(k.d, dx), acc[r]);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r]), _mm256_mul_ps(k.dmin, dx), acc[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * stride, acc[r]);
}

}  // namespace accel::quant::detail

#endif  // ACCEL_SIMD_X86
