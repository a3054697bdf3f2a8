// The AVX-512 VNNI ggml dot products: VPDPBUSD (unsigned x signed bytes into int32) over
// weights read four blocks (Q4_0, Q8_0) or a super-block (Q4_K, Q6_K) a step, against the
// activation arrangements of ggml_dot/activation.hpp; several weight and activation rows at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/scalar.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>
#endif

namespace accel::quant {

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
struct alignas(64) q4_0_group {
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

/// Words j = 0..3 of the 16 bytes at p + i * stride for rows i = 0..15: out[j], lane i. Four
/// 128-bit loads per register and a 4 x 4 transpose inside each 128-bit lane (a gather does the
/// same in one instruction but takes several times longer on AMD's cores).
ACCEL_TARGET_AVX512_VNNI inline void transpose_x16(const std::byte* p, std::size_t stride, __m512i out[4]) noexcept {
  const auto row = [&](std::size_t i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i * stride)); };
  __m512i z[4];  // z[a], 128-bit lane l: row a + 4l
  for (std::size_t a = 0; a < 4; ++a) {
    __m512i v = _mm512_castsi128_si512(row(a));
    v = _mm512_inserti32x4(v, row(a + 4), 1);
    v = _mm512_inserti32x4(v, row(a + 8), 2);
    z[a] = _mm512_inserti32x4(v, row(a + 12), 3);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

/// One weight row against up to four activation rows, each weight block decoded once for all the
/// activation rows (a small batch then costs one decode per block instead of one per row). Every
/// activation row gets the same operations in the same order whatever R is, so each product comes
/// out bit for bit as the single-row kernels dot_q8_0 / dot_q4_0 (this with R = 1) give it.
///
/// One weight row at a time, not several advancing together: eight (or even two) rows read block
/// by block were 1.5-1.7x slower streaming from DRAM (Zen 4, 2048 x 2048 and 2048 x 5632, 2
/// threads: Q4_0 12-16 vs 20-23 GB/s, Q8_0 17-20 vs 28-34 GB/s), whatever was prefetched, although
/// 1.1-1.25x faster with the matrix in L3. The loop over R is unrolled and the kernel kept out of
/// line on purpose: inlined into the dispatching lambdas, GCC 12 kept the accumulators in memory,
/// and a batch of two cost three and a half single rows instead of under two.
template <int R, bool Q4>
[[gnu::noinline]] ACCEL_TARGET_AVX512_VNNI void dot_q8_q4_rows(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                    float* out) noexcept {
  __m256 acc[R];
  __m512 acc4[R];  // Q4_0's four-block steps
  const std::int8_t* xq[R];
  const std::int32_t* xsum[R];
  const float* xd[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    xq[r] = x[r]->q8_0.data()->qs;
    xsum[r] = x[r]->q8_0_sums.data();
    xd[r] = x[r]->q8_0_scales.data();
  }
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a) acc[a] = _mm256_setzero_ps(), acc4[a] = _mm512_setzero_ps();
  constexpr std::size_t block = Q4 ? sizeof(io::block_q4_0) : sizeof(io::block_q8_0);
  std::size_t b = 0;
  if constexpr (Q4) {
    // Four blocks (72 bytes) a step: one conversion and one FMA per row for all four, where a
    // block at a time spent those on each (a third of the instructions). Q8_0 gained nothing
    // this way: its 34-byte blocks already stream as fast as the caches deliver them.
    for (; b + 4 <= n / 32; b += 4) {
      const std::size_t g = b / 4;
      prefetch_ahead<2>(w + b * block);  // 72 bytes a step
      const q4_0_group grp = decode_q4_0_group(w + b * block);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const std::int8_t* lanes = x[r]->group_lanes.data() + 128 * g;
        __m512i dot = _mm512_loadu_si512(x[r]->group_offset.data() + 16 * g);
        dot = _mm512_dpbusd_epi32(dot, grp.low, _mm512_loadu_si512(lanes));
        dot = _mm512_dpbusd_epi32(dot, grp.high, _mm512_loadu_si512(lanes + 64));
        const __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_loadu_ps(x[r]->group_scale.data() + 16 * g));
        acc4[r] = _mm512_fmadd_ps(scaled, grp.scale, acc4[r]);
      }
    }
  }
  for (; b < n / 32; ++b) {
    const std::byte* p = w + b * block;
    // Q8_0's stream, 4 KB ahead: 12-14 -> 20-23 GB/s from DRAM on an Intel Xeon (Sapphire Rapids,
    // 2 threads), where on Zen 4 it had measured no faster.
    if constexpr (!Q4) prefetch_ahead<1>(p);
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
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * xd[r][b]), acc[r]);
    }
  }
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a) out[a] = hsum(acc[a]) + hsum(acc4[a]);
}

ACCEL_SIMD_QUIET_BEGIN  // core/simd_arch.hpp: GCC 12's false uninitialized warnings
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

ACCEL_SIMD_QUIET_END

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

}  // namespace accel::quant
