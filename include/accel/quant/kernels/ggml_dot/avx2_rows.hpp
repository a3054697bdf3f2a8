// The AVX2 ggml kernels for several rows at once (a prompt's rows against a weight matrix):
//
//   dot_x8_avx2<R, Q4>(n, source, x, out, stride)  eight Q8_0 / Q4_0 weight rows in the lanes of
//                                                 one register, R activation rows; the blocks from
//                                                 GGUF's layout (x8_transposed), transposed before
//                                                 (x8_expanded) or repacked Q4_0 / Q8_0 (x8_repacked)
//   dot_q4_k_rows_avx2<R>(n, w, x, out)                       one Q4_K weight row, R activation rows
//   dot_q6_k_rows_avx2<R>(n, w, x, out)                       one Q6_K weight row, R activation rows
//
// Why rows in lanes for Q8_0 / Q4_0: a block of 32 codes is only two instructions of products, so
// the one-row kernel spends most of its time on the scale, the conversion and the horizontal sum,
// again for every activation row. With one weight row per 32-bit lane (eight 4-byte groups of
// eight rows, transposed in registers as ggml_dot_x16.hpp does for sixteen), a broadcast activation
// word advances eight dot products at once, the scales of eight rows are one vector, and no lane
// crosses another. AVX2 has no VPDPBUSD: VPMADDUBSW then VPMADDWD by ones take its place. Q4_0's
// codes (0..15) against activation bytes (|x| <= 127) give 16-bit pair sums of at most 3810, so
// the eight groups of a block add up in 16 bits (30480) before one VPMADDWD; Q8_0 goes through the
// sign trick (|w| times x carrying w's sign, pairs up to 32512) and widens every group.
//
// The K types keep their rows in GGUF's layout and decode each super-block once for up to four
// activation rows (the codes, the scales and the mins), where the one-row kernel decoded it again
// for every row. dot_q4_k / dot_q6_k on AVX2 (ggml_dot/avx2.hpp) are these with one row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::quant::detail {

ACCEL_TARGET_AVX2 inline __m256i load32_avx2(const void* p) noexcept {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

/// A block's f16 scale by F16C (io::f16_scale's value: the conversion is exact).
ACCEL_TARGET_AVX2 inline float scale_at(const void* p) noexcept {
  std::uint16_t d;
  std::memcpy(&d, p, 2);
  return _cvtsh_ss(d);
}

/// Words j = 0..3 of the 16 bytes at p + i * stride for rows i = 0..7: out[j], lane i.
ACCEL_TARGET_AVX2 inline void transpose_x8(const std::byte* p, std::size_t stride, __m256i out[4]) noexcept {
  __m256i z[4];  // z[a], 128-bit lane l: row a + 4l
#pragma GCC unroll 4
  for (std::size_t a = 0; a < 4; ++a) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + a * stride));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + (a + 4) * stride));
    z[a] = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
  }
  const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}

/// The 4 bytes at p in every 32-bit lane, by one broadcast from memory (a copy through a
/// general register, as std::memcpy into an int led GCC to, costs a shift and a register move
/// per word).
ACCEL_TARGET_AVX2 inline __m256i broadcast_word_avx2(const void* p) noexcept {
  return _mm256_broadcastd_epi32(_mm_loadu_si32(p));
}

/// The f16 scales at p + i * stride (i = 0..7) as eight floats.
ACCEL_TARGET_AVX2 inline __m256 scales_x8(const std::byte* p, std::size_t stride) noexcept {
  std::int16_t d[8];
#pragma GCC unroll 8
  for (std::size_t i = 0; i < 8; ++i) std::memcpy(&d[i], p + i * stride, 2);
  return _mm256_cvtph_ps(_mm_setr_epi16(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]));
}

/// One block (32 elements) of eight Q8_0 / Q4_0 rows, rows in lanes: the eight scales and q[j],
/// elements 4j..4j+3 of each row (Q4_0: codes 0..15; Q8_0: the signed codes). Aligned
/// explicitly, as x16_block is (ggml_dot_x16.hpp): a baseline translation unit's buffers of them
/// would be 16-byte aligned.
struct alignas(32) x8_block {
  __m256 dw;
  __m256i q[8];
};

/// Block b of the eight rows at w (row i at w + i * row_bytes), transposed.
template <bool Q4>
ACCEL_TARGET_AVX2 inline void decode_x8(const std::byte* w, std::size_t row_bytes, std::size_t b, x8_block& k) noexcept {
  constexpr std::size_t block = Q4 ? sizeof(io::block_q4_0) : sizeof(io::block_q8_0);
  const std::byte* p = w + b * block;
  // The next eight rows, into L2: eight short streams are more than the prefetchers follow.
  if (b % 2 == 0) {
#pragma GCC unroll 8
    for (std::size_t i = 0; i < 8; ++i) _mm_prefetch(reinterpret_cast<const char*>(p + (8 + i) * row_bytes), _MM_HINT_T1);
  }
  k.dw = scales_x8(p, row_bytes);
  if constexpr (Q4) {
    // Byte j holds element j (low nibble) and element j + 16 (high nibble).
    const __m256i low = _mm256_set1_epi8(0x0F);
    transpose_x8(p + 2, row_bytes, k.q);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      k.q[j + 4] = _mm256_and_si256(_mm256_srli_epi16(k.q[j], 4), low);
      k.q[j] = _mm256_and_si256(k.q[j], low);
    }
  } else {
    transpose_x8(p + 2, row_bytes, k.q);
    transpose_x8(p + 18, row_bytes, k.q + 4);
  }
}

/// Block b of eight rows against R activation rows, into acc[r] (lane i: weight row i).
template <int R, bool Q4>
ACCEL_TARGET_AVX2 inline void accumulate_x8(const x8_block& k, std::size_t b, const ActivationRow* const* x,
                                            __m256 (&acc)[R]) noexcept {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i mag[8];  // Q8_0: |w|, the signs going onto the activation
  if constexpr (!Q4) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) mag[j] = _mm256_sign_epi8(k.q[j], k.q[j]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const std::int8_t* xq = x[r]->q8_0[b].qs;
    __m256i s;
    if constexpr (Q4) {
      __m256i pairs = _mm256_maddubs_epi16(k.q[0], broadcast_word_avx2(xq));
#pragma GCC unroll 8
      for (int j = 1; j < 8; ++j) pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(k.q[j], broadcast_word_avx2(xq + 4 * j)));
      s = _mm256_add_epi32(_mm256_madd_epi16(pairs, ones), _mm256_set1_epi32(-8 * x[r]->q8_0_sums[b]));
    } else {
      s = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m256i xs = _mm256_sign_epi8(broadcast_word_avx2(xq + 4 * j), k.q[j]);
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(mag[j], xs), ones));
      }
    }
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(k.dw, _mm256_set1_ps(x[r]->q8_0_scales[b])), acc[r]);
  }
}

template <bool Q4>
ACCEL_TARGET_AVX2 inline void pack_x8_q8_q4_avx2(std::size_t n, const std::byte* w, std::size_t row_bytes,
                                                 x8_block* blocks) noexcept {
  for (std::size_t b = 0; b < n / 32; ++b) decode_x8<Q4>(w, row_bytes, b, blocks[b]);
}

/// Block b of eight Q4_0 rows as repack_ggml stores it (quant/kernels/ggml_repack.hpp: the eight scales,
/// then the codes already transposed): two loads and a nibble split where decode_x8 transposes.
ACCEL_TARGET_AVX2 inline void load_x8_q4_0(const std::byte* p, x8_block& k) noexcept {
  k.dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i low = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i v = load32_avx2(p + 16 + 32 * j);
    k.q[j] = _mm256_and_si256(v, low);
    k.q[j + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
  }
}

/// Block b of eight Q8_0 rows as repack_ggml stores it: the eight scales, then eight words of the
/// codes already transposed, each one load.
ACCEL_TARGET_AVX2 inline void load_x8_q8_0(const std::byte* p, x8_block& k) noexcept {
  k.dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) k.q[j] = load32_avx2(p + 16 + 32 * j);
}

/// Where dot_x8_avx2 gets block b of its eight rows: transposed from GGUF's layout as it is read
/// (rows at w, w + row_bytes, ...), from blocks transposed beforehand (pack_x8_q8_q4_avx2), or
/// from an eight-row group of repacked Q4_0 or Q8_0 (one stream of n / 32 x 144 or 272 bytes).
template <bool Q4>
struct x8_transposed {
  const std::byte* w;
  std::size_t row_bytes;
  ACCEL_TARGET_AVX2 const x8_block& operator()(std::size_t b, x8_block& k) const noexcept {
    decode_x8<Q4>(w, row_bytes, b, k);
    return k;
  }
};
struct x8_expanded {
  const x8_block* blocks;
  const x8_block& operator()(std::size_t b, x8_block&) const noexcept { return blocks[b]; }
};
/// `Prefetch`: the group's stream 4 KB ahead (detail::prefetch_ahead, a block's 144 or 272 bytes
/// a step), which ggml_repack.hpp's repacked_dot asks for on Intel CPUs.
template <bool Q4, bool Prefetch = false>
struct x8_repacked {
  static constexpr std::size_t bytes = 8 * (Q4 ? sizeof(io::block_q4_0) : sizeof(io::block_q8_0));
  const std::byte* group;
  ACCEL_TARGET_AVX2 const x8_block& operator()(std::size_t b, x8_block& k) const noexcept {
    if constexpr (Prefetch) prefetch_ahead<(bytes + 63) / 64>(group + bytes * b);
    if constexpr (Q4) load_x8_q4_0(group + bytes * b, k);
    else load_x8_q8_0(group + bytes * b, k);
    return k;
  }
};

/// R activation rows against eight Q8_0 (Q4 false) or Q4_0 weight rows whose blocks `source`
/// gives: out[r * stride + i] = row i times activation r (stride >= 8).
template <int R, bool Q4, class Source>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_x8_avx2(std::size_t n, Source source, const ActivationRow* const* x,
                                                     float* out, std::size_t stride) noexcept {
  __m256 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::size_t b = 0; b < n / 32; ++b) {
    x8_block scratch;
    accumulate_x8<R, Q4>(source(b, scratch), b, x, acc);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * stride, acc[r]);
}

ACCEL_TARGET_AVX2 inline float hsum8_avx2(__m256 v) noexcept {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// Q4_K for R activation rows. Per super-block: the 256 codes as eight registers (32-byte chunk c:
/// group 2c in the low nibbles, 2c + 1 in the high ones), the eight scales as 16-bit vectors and
/// the mins as one (each beside both 16-element sums of its group); per row, VPMADDUBSW against
/// the activation and VPMADDWD by the group's scale, and one VPMADDWD of the mins against the
/// activation's sums (a scalar loop over the groups cost as much as the codes' products).
template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_q4_k_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                            float* out) noexcept {
  __m256 acc[R], accm[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), accm[r] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(io::block_q4_k);
    prefetch_ahead<3>(p);
    const auto* blk = reinterpret_cast<const std::uint8_t*>(p);
    std::uint8_t sc[8], mn[8];
    io::k4_scales_mins(blk + 4, sc, mn);
    __m256i u[8], scale[8];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * c));
      u[2 * c] = _mm256_and_si256(q, low4);
      u[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) scale[g] = _mm256_set1_epi16(sc[g]);
    std::int64_t mn8;
    std::memcpy(&mn8, mn, 8);
    const __m128i m = _mm_cvtsi64_si128(mn8);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));  // lane i: min of group i / 2
    const float fd = scale_at(p), fmin = scale_at(p + 2);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const io::block_q8_k& a = x[r]->q8_k[b];
      __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m256i prod = _mm256_maddubs_epi16(u[g], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + 32 * g)));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, scale[g]));
      }
      const __m256i summ = _mm256_madd_epi16(load32_avx2(a.bsums), mins);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * fd), _mm256_cvtepi32_ps(sumi), acc[r]);
      accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * fmin), _mm256_cvtepi32_ps(summ), accm[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum8_avx2(_mm256_sub_ps(acc[r], accm[r]));
}

/// Q6_K for R activation rows. Per super-block: the 256 six-bit codes (value + 32) as eight
/// registers (the low or high nibbles of `ql`, two bits of `qh` placed at bits 4 and 5; 16-bit
/// shifts are safe, the mask drops what crosses a byte) and the sixteen groups' scales; per row,
/// VPMADDUBSW and VPMADDWD by the scales, and the offset (32 x the scales against the
/// activation's sixteen-element sums) in the same integer sum.
template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_q6_k_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                            float* out) noexcept {
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  for (std::size_t b = 0; b < n / 256; ++b) {
    const auto* blk = reinterpret_cast<const std::uint8_t*>(w + b * sizeof(io::block_q6_k));
    prefetch_ahead<4>(blk);
    const std::uint8_t* ql = blk;
    const std::uint8_t* qh = blk + 128;
    const auto* scales = reinterpret_cast<const std::int8_t*>(blk + 192);
    __m256i u[8], scale[8];
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * half));
      const __m256i q2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * half + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 32 * half));
      __m256i* v = u + 4 * half;
      v[0] = _mm256_or_si256(_mm256_and_si256(q1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45));
      v[1] = _mm256_or_si256(_mm256_and_si256(q2, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45));
      v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), low4), _mm256_and_si256(h, bits45));
      v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q2, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45));
    }
    // The sixteen scales as 16-bit values, each 128-bit half of them in both halves of a register;
    // scale[k] is group 2k's in the low half and 2k + 1's in the high one, one byte shuffle each
    // (broadcasting each from memory took three operations).
    const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
    const __m256i s_lo = _mm256_permute2x128_si256(s16, s16, 0x00), s_hi = _mm256_permute2x128_si256(s16, s16, 0x11);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const int e = (2 * k) % 8;
      const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (e + 1))),
                                            _mm_set1_epi16(static_cast<short>(0x0100 + 0x0202 * e)));
      scale[k] = _mm256_shuffle_epi8(k < 4 ? s_lo : s_hi, pick);
    }
    const __m256i offset_scale = _mm256_mullo_epi16(s16, _mm256_set1_epi16(-32));
    const float fd = scale_at(blk + 208);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const io::block_q8_k& a = x[r]->q8_k[b];
      __m256i sumi = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums)), offset_scale);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i prod = _mm256_maddubs_epi16(u[k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + 32 * k)));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, scale[k]));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * fd), _mm256_cvtepi32_ps(sumi), acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum8_avx2(acc[r]);
}

}  // namespace accel::quant::detail

#endif
