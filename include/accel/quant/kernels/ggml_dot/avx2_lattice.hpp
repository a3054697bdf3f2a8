// The AVX2 dot products of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S against Q8_K, for R activation rows
// (the one-row kernels are R = 1, so vec_dot and vec_dot_rows give the same bits):
//
//   dot_iq2_xxs_rows_avx2<R>(n, w, x, out)   per group of 32: four 64-bit points
//   dot_iq2_xs_rows_avx2<R>(n, w, x, out)    per group of 32: four 64-bit points
//   dot_iq2_s_rows_avx2<R>(n, w, x, out)     per group of 32: four 64-bit points
//   dot_iq3_xxs_rows_avx2<R>(n, w, x, out)   per group of 32: eight 32-bit points
//   dot_iq3_s_rows_avx2<R>(n, w, x, out)     per group of 32: eight 32-bit points
//
// A group's 32 coordinates (unsigned, at most 43) come from the point tables of
// ggml_dot/scalar_lattice.hpp, one load a point; the signs go onto the activation (VPSIGNB), so
// VPMADDUBSW takes the coordinates as its unsigned operand: at most 2 x 43 x 127 per pair, no
// saturation. A sign byte (IQ2_XS's 7 stored bits and their parity, made in the register; IQ3_S's
// explicit ones) is spread over its eight lanes and tested against a bit mask. The points are read
// by scalar loads at indices made in a register (GCC takes them out by VPEXTRW; forcing them
// through memory cost IQ3_S a third more, store forwarding) (on Zen 3, 4096 x 14336, 2 threads: a
// VPGATHERDD of IQ3_S's points took 8.8-11.0 ms, these loads 6.7-7.6; IQ2_XS's sign words read
// from a table 4.7-5.3 ms, made in the register 3.1-4.4). The group scales (2s + 1) reach the
// 16-bit lanes by one VPSHUFB of the block's scales (IQ2_XS: a group's first scale in the low
// lane, its second in the high; IQ3_S: one for both), and VPMADDWD applies them while widening,
// so a row keeps one integer sum per block, scaled once. Points and signs are made once for the
// R rows. The XXS types keep a group's four 7-bit sign indices and its scale in one word: the
// indices are shifted into four 64-bit lanes and given their parity bit there, the scale goes to
// every lane.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/avx2.hpp"
#include "accel/quant/kernels/ggml_dot/scalar_lattice.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

namespace accel::quant {

namespace detail {

/// A block's packed four-bit scales (`Bytes` of them, low nibble first) as 2s + 1, one byte a
/// scale in sub-block order, in both 128-bit lanes.
template <int Bytes>
ACCEL_TARGET_AVX2 inline __m256i lattice_scales_avx2(const std::byte* scales) noexcept {
  std::uint64_t packed = 0;
  std::memcpy(&packed, scales, Bytes);
  const __m128i s = _mm_cvtsi64_si128(static_cast<long long>(packed)), low4 = _mm_set1_epi8(0x0F);
  const __m128i nibbles = _mm_unpacklo_epi8(_mm_and_si128(s, low4), _mm_and_si128(_mm_srli_epi16(s, 4), low4));
  return _mm256_broadcastsi128_si256(_mm_add_epi8(_mm_add_epi8(nibbles, nibbles), _mm_set1_epi8(1)));
}

/// VPSHUFB selectors that turn `scales` (lattice_scales_avx2) into sixteen 16-bit lanes for group
/// g: scale byte Step g in the low 128 bits, Step g + High in the high; a selector byte with its
/// top bit set gives 0, so each lane's high byte stays clear. In memory, so the shuffle reads its
/// selector as an operand (built in registers, they cost a tenth of a block's instructions).
template <int Step, int High>
inline constexpr auto lattice_scale_pick = [] {
  std::array<std::array<std::int8_t, 32>, 8> out{};
  for (int g = 0; g < 8; ++g) {
    for (int i = 0; i < 32; ++i) out[g][i] = static_cast<std::int8_t>(i % 2 ? -128 : Step * g + (i < 16 ? 0 : High));
  }
  return out;
}();

ACCEL_TARGET_AVX2 inline __m256i pick_scales_avx2(__m256i scales, const std::array<std::int8_t, 32>& select) noexcept {
  return _mm256_shuffle_epi8(scales, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(select.data())));
}

/// Sums of |coordinate| x (signed activation) per group of 32 for R rows (q8[r]: the group's 32
/// activation ints of row r), scaled per 16 lanes and widened into each row's int32 sum.
template <int R>
ACCEL_TARGET_AVX2 inline void lattice_group_avx2(__m256i coords, __m256i signs, __m256i scale, const std::int8_t* const* q8,
                                                 int offset, __m256i* sumi) noexcept {
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m256i a = load32_avx2(q8[r] + offset);
    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(coords, _mm256_sign_epi8(a, signs)), scale));
  }
}

/// The frame both kernels share: per 256-element block of type B at w, block(p, q8, sumi) adds
/// each row's integer sums (sumi[r] starts at zero; q8[r] the row's activation ints of the block), and row r's float sum takes d x a.d x sumi
/// (d the block's f16 scale at offset 0, a.d the activation block's); out[r] = factor x the sum.
/// `block` is an always-inlined lambda under the AVX2 target (a lambda does not inherit its
/// enclosing function's target).
template <class B, int R, class Block>
[[gnu::always_inline]] ACCEL_TARGET_AVX2 inline void lattice_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                                     float* out, float factor, Block block) noexcept {
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::size_t b = 0; b < n / 256; ++b) {
    const std::byte* p = w + b * sizeof(B);
    prefetch_ahead<2>(p);  // IQ2_XXS 66 bytes a block, IQ2_XS 74, IQ2_S 82, IQ3_XXS 98, IQ3_S 110
    __m256i sumi[R];
    const std::int8_t* q8[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256(), q8[r] = x[r]->q8_k[b].qs;
    block(p, q8, sumi);
    const float dw = scale_at(p);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[r]->q8_k[b].d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = factor * hsum8_avx2(acc[r]);
}

/// Bit 7 of a sign byte: the parity of its 7 stored bits (io::iq2_signs), looked up by nibble.
ACCEL_TARGET_AVX2 inline __m256i sign_parity_avx2() noexcept {
  return _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, 0, -128, -128, 0, -128, 0, 0, -128,
                          -128, 0, 0, -128, 0, -128, -128, 0);
}

/// The +-1 bytes of an XXS group's 32 elements from its word (sign index l in bits 7l .. 7l + 6
/// covering elements 8l .. 8l + 7).
ACCEL_TARGET_AVX2 inline __m256i xxs_signs_avx2(std::uint32_t word, __m256i parity) noexcept {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits = _mm256_set1_epi64x(0x8040201008040201LL);
  const __m256i stored = _mm256_and_si256(_mm256_srlv_epi64(_mm256_set1_epi64x(static_cast<long long>(word)), _mm256_setr_epi64x(0, 7, 14, 21)),
                                          _mm256_set1_epi64x(127));
  const __m256i sign_byte =
      _mm256_or_si256(stored, _mm256_shuffle_epi8(parity, _mm256_and_si256(_mm256_xor_si256(stored, _mm256_srli_epi64(stored, 4)), low4)));
  const __m256i spread = _mm256_shuffle_epi8(sign_byte, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 0, 0, 0,
                                                                         0, 0, 8, 8, 8, 8, 8, 8, 8, 8));
  return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits), _mm256_set1_epi8(1));
}

template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_iq2_xxs_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                               float* out) noexcept {
  const __m256i parity = sign_parity_avx2();
  const auto block = [&](const std::byte* p, const std::int8_t* const* q8, __m256i* sumi) ACCEL_TARGET_AVX2 __attribute__((always_inline)) {
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq2_xxs, qs));
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const std::uint8_t* i = qs + 8 * g;
      const std::uint32_t word = io::load_le32(qs + xxs_word_at<io::block_iq2_xxs>(g));
      const __m256i coords = _mm256_setr_epi64x(static_cast<long long>(iq2xxs_points[i[0]]), static_cast<long long>(iq2xxs_points[i[1]]),
                                                static_cast<long long>(iq2xxs_points[i[2]]), static_cast<long long>(iq2xxs_points[i[3]]));
      lattice_group_avx2<R>(coords, xxs_signs_avx2(word, parity), _mm256_set1_epi16(static_cast<short>(2 * (word >> 28) + 1)), q8,
                            32 * g, sumi);
    }
  };
  lattice_rows_avx2<io::block_iq2_xxs, R>(n, w, x, out, 0.125f, block);
}

template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_iq3_xxs_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                               float* out) noexcept {
  const __m256i parity = sign_parity_avx2();
  const auto block = [&](const std::byte* p, const std::int8_t* const* q8, __m256i* sumi) ACCEL_TARGET_AVX2 __attribute__((always_inline)) {
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq3_xxs, qs));
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const std::uint8_t* i = qs + 8 * g;
      const std::uint32_t word = io::load_le32(qs + xxs_word_at<io::block_iq3_xxs>(g));
      const __m256i coords = _mm256_setr_epi32(static_cast<int>(iq3xxs_points[i[0]]), static_cast<int>(iq3xxs_points[i[1]]),
                                               static_cast<int>(iq3xxs_points[i[2]]), static_cast<int>(iq3xxs_points[i[3]]),
                                               static_cast<int>(iq3xxs_points[i[4]]), static_cast<int>(iq3xxs_points[i[5]]),
                                               static_cast<int>(iq3xxs_points[i[6]]), static_cast<int>(iq3xxs_points[i[7]]));
      lattice_group_avx2<R>(coords, xxs_signs_avx2(word, parity), _mm256_set1_epi16(static_cast<short>(2 * (word >> 28) + 1)), q8,
                            32 * g, sumi);
    }
  };
  lattice_rows_avx2<io::block_iq3_xxs, R>(n, w, x, out, 0.25f, block);
}

template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_iq2_xs_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                              float* out) noexcept {
  const __m256i parity = sign_parity_avx2();
  const __m256i bits = _mm256_set1_epi64x(0x8040201008040201LL), one = _mm256_set1_epi8(1), low4 = _mm256_set1_epi8(0x0F);
  const auto block = [&](const std::byte* p, const std::int8_t* const* q8, __m256i* sumi) ACCEL_TARGET_AVX2 __attribute__((always_inline)) {
    const __m256i scales = lattice_scales_avx2<8>(p + offsetof(io::block_iq2_xs, scales));
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      // Sixteen points (groups 4 half .. 4 half + 3): their indices, and their sign bytes in the
      // low byte of each 16-bit lane.
      const __m256i q = load32_avx2(p + offsetof(io::block_iq2_xs, qs) + 32 * half);
      alignas(32) std::uint16_t index[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(index), _mm256_and_si256(q, _mm256_set1_epi16(511)));
      const __m256i stored = _mm256_srli_epi16(q, 9);
      const __m256i sign_bytes =
          _mm256_or_si256(stored, _mm256_shuffle_epi8(parity, _mm256_and_si256(_mm256_xor_si256(stored, _mm256_srli_epi16(stored, 4)), low4)));
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const std::uint16_t* i = index + 4 * k;
        const __m256i coords = _mm256_setr_epi64x(static_cast<long long>(iq2xs_points[i[0]]), static_cast<long long>(iq2xs_points[i[1]]),
                                                  static_cast<long long>(iq2xs_points[i[2]]), static_cast<long long>(iq2xs_points[i[3]]));
        // Point j's sign byte (byte 2j of its 128-bit lane) over its eight lanes.
        const __m256i lane = k < 2 ? _mm256_permute2x128_si256(sign_bytes, sign_bytes, 0x00)
                                   : _mm256_permute2x128_si256(sign_bytes, sign_bytes, 0x11);
        const char o = static_cast<char>(8 * (k % 2));
        const __m256i spread = _mm256_setr_epi8(o, o, o, o, o, o, o, o, o + 2, o + 2, o + 2, o + 2, o + 2, o + 2, o + 2, o + 2, o + 4, o + 4,
                                                o + 4, o + 4, o + 4, o + 4, o + 4, o + 4, o + 6, o + 6, o + 6, o + 6, o + 6, o + 6, o + 6, o + 6);
        const __m256i signs = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(lane, spread), bits), bits), one);
        const int g = 4 * half + k;
        lattice_group_avx2<R>(coords, signs, pick_scales_avx2(scales, lattice_scale_pick<2, 1>[g]), q8, 32 * g, sumi);
      }
    }
  };
  lattice_rows_avx2<io::block_iq2_xs, R>(n, w, x, out, 0.125f, block);
}

template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_iq2_s_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                             float* out) noexcept {
  // Sign byte l of a group covers its lanes 8l .. 8l + 7, bit j lane 8l + j (as IQ3_S's).
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bits = _mm256_set1_epi64x(0x8040201008040201LL), one = _mm256_set1_epi8(1);
  const auto block = [&](const std::byte* p, const std::int8_t* const* q8, __m256i* sumi) ACCEL_TARGET_AVX2 __attribute__((always_inline)) {
    const __m256i scales = lattice_scales_avx2<8>(p + offsetof(io::block_iq2_s, scales));
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq2_s, qs));
    const auto* qh = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_iq2_s, qh));
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      // Point 4g + k: two high index bits in bits 2k of qh[g].
      const unsigned h = qh[g];
      const __m256i coords = _mm256_setr_epi64x(static_cast<long long>(iq2s_points[qs[4 * g] | ((h << 8) & 0x300)]),
                                                static_cast<long long>(iq2s_points[qs[4 * g + 1] | ((h << 6) & 0x300)]),
                                                static_cast<long long>(iq2s_points[qs[4 * g + 2] | ((h << 4) & 0x300)]),
                                                static_cast<long long>(iq2s_points[qs[4 * g + 3] | ((h << 2) & 0x300)]));
      const __m256i spread_bits = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(io::load_le32(qs + 32 + 4 * g))), spread);
      const __m256i signs = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread_bits, bits), bits), one);
      lattice_group_avx2<R>(coords, signs, pick_scales_avx2(scales, lattice_scale_pick<2, 1>[g]), q8, 32 * g, sumi);
    }
  };
  lattice_rows_avx2<io::block_iq2_s, R>(n, w, x, out, 0.125f, block);
}

template <int R>
[[gnu::noinline]] ACCEL_TARGET_AVX2 void dot_iq3_s_rows_avx2(std::size_t n, const std::byte* w, const ActivationRow* const* x,
                                                             float* out) noexcept {
  // Sign byte l of a group covers its lanes 8l .. 8l + 7, bit j lane 8l + j.
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bits = _mm256_set1_epi64x(0x8040201008040201LL), one = _mm256_set1_epi8(1);
  // The ninth bit of point k's index (of a pair of groups) is bit k of their two qh bytes.
  const __m256i high_bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, -32768);
  const __m256i ninth = _mm256_set1_epi16(256);
  const auto block = [&](const std::byte* p, const std::int8_t* const* q8, __m256i* sumi) ACCEL_TARGET_AVX2 __attribute__((always_inline)) {
    const __m256i scales = lattice_scales_avx2<4>(p + offsetof(io::block_iq3_s, scales));
    const std::byte* qs = p + offsetof(io::block_iq3_s, qs);
    const std::byte* qh = p + offsetof(io::block_iq3_s, qh);
    const std::byte* sg = p + offsetof(io::block_iq3_s, signs);
#pragma GCC unroll 4
    for (int pair = 0; pair < 4; ++pair) {
      // Sixteen 9-bit indices made in a register, each then a scalar load's index.
      std::uint16_t h;
      std::memcpy(&h, qh + 2 * pair, 2);
      const __m256i low = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16 * pair)));
      const __m256i high = _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(static_cast<short>(h)), high_bit), high_bit), ninth);
      alignas(32) std::uint16_t index[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(index), _mm256_or_si256(low, high));
#pragma GCC unroll 2
      for (int e = 0; e < 2; ++e) {
        const int g = 2 * pair + e;
        const std::uint16_t* i = index + 8 * e;
        const __m256i coords = _mm256_setr_epi32(static_cast<int>(iq3s_points[i[0]]), static_cast<int>(iq3s_points[i[1]]),
                                                 static_cast<int>(iq3s_points[i[2]]), static_cast<int>(iq3s_points[i[3]]),
                                                 static_cast<int>(iq3s_points[i[4]]), static_cast<int>(iq3s_points[i[5]]),
                                                 static_cast<int>(iq3s_points[i[6]]), static_cast<int>(iq3s_points[i[7]]));
        std::uint32_t sign_bits;
        std::memcpy(&sign_bits, sg + 4 * g, 4);
        const __m256i spread_bits = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(sign_bits)), spread);
        const __m256i signs = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread_bits, bits), bits), one);
        lattice_group_avx2<R>(coords, signs, pick_scales_avx2(scales, lattice_scale_pick<1, 0>[g]), q8, 32 * g, sumi);
      }
    }
  };
  lattice_rows_avx2<io::block_iq3_s, R>(n, w, x, out, 1.0f, block);
}

}  // namespace detail

ACCEL_TARGET_AVX2 inline float dot_iq2_xxs(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                           const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_iq2_xxs_rows_avx2<1>>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_iq3_xxs(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                           const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_iq3_xxs_rows_avx2<1>>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_iq2_xs(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                          const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_iq2_xs_rows_avx2<1>>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_iq2_s(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                         const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_iq2_s_rows_avx2<1>>(n, w, x);
}

ACCEL_TARGET_AVX2 inline float dot_iq3_s(simd::requires_arch<simd::avx2>, std::size_t n, const std::byte* w,
                                         const ActivationRow& x) noexcept {
  return detail::one_row<detail::dot_iq3_s_rows_avx2<1>>(n, w, x);
}

}  // namespace accel::quant

#endif
