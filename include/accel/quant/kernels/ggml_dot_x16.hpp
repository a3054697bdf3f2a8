// Sixteen weight rows at a time for Q8_0 and Q4_0 (Q4_K and Q6_K: quant/kernels/ggml_dot/avx512_k_x16.hpp
// on AVX-512 VNNI, ggml_dot/avx2_k_x8.hpp on AVX2): each 512-bit register holds one 4-byte group
// of sixteen rows (lane i = row i), so one VPDPBUSD with the activation's matching 4 bytes
// broadcast advances all sixteen dot products, and the blocks' scales are one vector. On AVX2 the
// sixteen rows are two passes of eight in 256-bit registers (quant/kernels/ggml_dot/avx2_rows.hpp).
//
//   has_dot_x16(arch, t)                               a 16-row kernel for t on arch
//   dot_x16_min_activations(t)                         the batch from which ggml_linear uses it
//   vec_dot_x16(arch, t, n, w, row_bytes, xs, k, out)  rows w, w + row_bytes, ... (16 of them)
//                                                      times k activation rows: out[j * 16 + i]
//
// Why: the one-row kernels of quant/kernels/ggml_dot.hpp spend most of a block on scalar work (the two
// scales, their product, the offset correction) and a horizontal sum, again for every activation
// row; with rows in lanes that work is shared by sixteen rows, no lane crosses another, and a
// transposed block serves up to eight activation rows (more rows than a pass takes share one
// transpose, kept in a thread buffer: x16_block / x8_block). The transpose is the price: for a
// single activation row (decoding) the one-row kernels already stream the weights near DRAM speed and
// this one does not beat them, so ggml_linear takes it from two activation rows on
// (dot_x16_min_activations), where it runs 1.5-2.5x faster (benchmarks/bench_quant_gemv.cpp).
// These kernels read GGUF's layout, transposing each block's words across the rows in registers;
// a Q4_0 or Q8_0 weight kept in a mapped file is instead repacked once when it is loaded (llama.cpp does
// the same), and its product reads the transposed words as they are stored (quant/kernels/ggml_repack.hpp:
// load_x16_q4_0 / load_x16_q8_0 here, load_x8_q4_0 / load_x8_q8_0 in ggml_dot/avx2_rows.hpp).
//
// Q4_0 codes are unsigned nibbles (value - 8) and Q8_0 codes are stored here with their sign bit
// flipped (value + 128), so both are VPDPBUSD's unsigned operand against the signed Q8_0
// activation; the offset comes back out exactly, in integers, from the activation block's sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "accel/core/errors.hpp"

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/io/ggml_types.hpp"
#include "accel/quant/kernels/ggml_dot.hpp"
#include "accel/quant/kernels/ggml_dot/avx2_k_x8.hpp"
#include "accel/quant/kernels/ggml_dot/avx512_k_x16.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>
#endif

namespace accel::quant {

/// Weight rows per call of vec_dot_x16, and activation rows per pass over them.
inline constexpr std::size_t dot_x16_rows = 16;
inline constexpr int dot_x16_activations = 8;

/// The batch from which ggml_linear prefers vec_dot_x16 to the one-row kernels for type t. The
/// K-quant kernels unpack each super-block into a buffer first, which pays from five activation rows
/// on, when the one-row kernels would decode each block twice (Sapphire Rapids, 4096 x 4096, 2
/// threads: Q4_K 0.76x / 0.88x the one-row kernels' speed at 2 / 4 rows, 1.55x at 8, 3.0x at 64).
constexpr std::size_t dot_x16_min_activations(GgmlType t) noexcept {
  return t == GgmlType::q4_k || t == GgmlType::q6_k ? 5 : 2;
}

template <class Arch>
constexpr bool has_dot_x16(const Arch&, GgmlType t) noexcept {
#if ACCEL_SIMD_X86
  if constexpr (std::is_base_of_v<simd::avx512_vnni, Arch>) {
    return t == GgmlType::q8_0 || t == GgmlType::q4_0 || t == GgmlType::q4_k || t == GgmlType::q6_k;
  }
  if constexpr (std::is_base_of_v<simd::avx2, Arch>) {
    return t == GgmlType::q8_0 || t == GgmlType::q4_0 || t == GgmlType::q4_k || t == GgmlType::q6_k;
  }
#endif
  (void)t;
  return false;
}

#if ACCEL_SIMD_X86
ACCEL_SIMD_QUIET_BEGIN  // core/simd_arch.hpp: GCC 12's false uninitialized warnings
namespace detail {

/// One block (32 elements) of sixteen Q8_0 / Q4_0 rows, rows in lanes: the sixteen scales and
/// q[j], elements 4j..4j+3 of each row as unsigned bytes (Q4_0's codes, Q8_0's plus 128).
/// Aligned explicitly: a translation unit built without AVX-512 gives __m512 members only its
/// own widest alignment, so its std::vector of blocks would hand the kernels' aligned stores
/// memory they fault on.
struct alignas(64) x16_block {
  __m512 dw;
  __m512i q[8];
};

/// Block b of the sixteen rows at w (row i at w + i * row_bytes), transposed.
template <bool Q4>
ACCEL_TARGET_AVX512_VNNI inline void decode_x16(const std::byte* w, std::size_t row_bytes, std::size_t b,
                                                x16_block& k) noexcept {
  constexpr std::size_t block = Q4 ? sizeof(io::block_q4_0) : sizeof(io::block_q8_0);
  const std::byte* p = w + b * block;
  // The next sixteen rows, into L2: sixteen short streams at once are more than the hardware
  // prefetchers follow (rows of 1-2 KiB streamed from DRAM ran at half speed without this).
  if (b % 2 == 0) {
#pragma GCC unroll 16
    for (std::size_t i = 0; i < 16; ++i) _mm_prefetch(reinterpret_cast<const char*>(p + (16 + i) * row_bytes), _MM_HINT_T1);
  }
  __m512i head[4];  // head[0]: each row's first word, its scale in the low half
  transpose_x16(p, row_bytes, head);
  k.dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head[0]));
  if constexpr (Q4) {
    // Byte j holds element j (low nibble) and element j + 16 (high nibble).
    const __m512i low = _mm512_set1_epi8(0x0F);
    transpose_x16(p + 2, row_bytes, k.q);
#pragma GCC unroll 8
    for (int j = 0; j < 4; ++j) {
      k.q[j + 4] = _mm512_and_si512(_mm512_srli_epi16(k.q[j], 4), low);
      k.q[j] = _mm512_and_si512(k.q[j], low);
    }
  } else {
    const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
    transpose_x16(p + 2, row_bytes, k.q);
    transpose_x16(p + 18, row_bytes, k.q + 4);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) k.q[j] = _mm512_xor_si512(k.q[j], sign);
  }
}

/// Block b of sixteen rows against R activation rows, into acc[r] (lane i: weight row i). Each
/// weight register is read once for the R rows (read again per row, the block's loads were as
/// many as its VPDPBUSDs).
template <int R, bool Q4>
ACCEL_TARGET_AVX512_VNNI inline void accumulate_x16(const x16_block& k, std::size_t b, const ActivationRow* const* x,
                                                    __m512 (&acc)[R]) noexcept {
  constexpr int offset = Q4 ? 8 : 128;
  __m512i s[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) s[r] = _mm512_set1_epi32(-offset * x[r]->q8_0_sums[b]);
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    const __m512i q = k.q[j];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) s[r] = _mm512_dpbusd_epi32(s[r], q, _mm512_broadcastd_epi32(_mm_loadu_si32(x[r]->q8_0[b].qs + 4 * j)));
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r]), _mm512_mul_ps(k.dw, _mm512_set1_ps(x[r]->q8_0_scales[b])), acc[r]);
  }
}

template <bool Q4>
ACCEL_TARGET_AVX512_VNNI inline void pack_x16_q8_q4(std::size_t n, const std::byte* w, std::size_t row_bytes,
                                                    x16_block* blocks) noexcept {
  for (std::size_t b = 0; b < n / 32; ++b) decode_x16<Q4>(w, row_bytes, b, blocks[b]);
}

/// Block b of sixteen Q4_0 rows repacked (quant/kernels/ggml_repack.hpp): two eight-row groups, `lo`
/// rows 0-7 and `hi` rows 8-15, each register the two halves' stored words side by side.
ACCEL_TARGET_AVX512_VNNI inline void load_x16_q4_0(const std::byte* lo, const std::byte* hi, x16_block& k) noexcept {
  k.dw = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
                                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1));
  const __m512i low = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + 16 + 32 * j))),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi + 16 + 32 * j)), 1);
    k.q[j] = _mm512_and_si512(v, low);
    k.q[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
  }
}

/// Block b of sixteen Q8_0 rows repacked: as load_x16_q4_0, the codes' sign bits flipped as
/// decode_x16 flips them.
ACCEL_TARGET_AVX512_VNNI inline void load_x16_q8_0(const std::byte* lo, const std::byte* hi, x16_block& k) noexcept {
  k.dw = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
                                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1));
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + 16 + 32 * j))),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi + 16 + 32 * j)), 1);
    k.q[j] = _mm512_xor_si512(v, sign);
  }
}

/// Where dot_x16 gets block b of its sixteen rows: transposed from GGUF's layout as it is read
/// (rows at w, w + row_bytes, ...), or from blocks transposed beforehand (pack_x16_q8_q4, or
/// load_x16_q4_0 / load_x16_q8_0 from repacked Q4_0 / Q8_0).
template <bool Q4>
struct x16_transposed {
  const std::byte* w;
  std::size_t row_bytes;
  ACCEL_TARGET_AVX512_VNNI const x16_block& operator()(std::size_t b, x16_block& k) const noexcept {
    decode_x16<Q4>(w, row_bytes, b, k);
    return k;
  }
};
struct x16_expanded {
  const x16_block* blocks;
  const x16_block& operator()(std::size_t b, x16_block&) const noexcept { return blocks[b]; }
};

/// R activation rows against sixteen Q8_0 (Q4 false) or Q4_0 weight rows whose blocks `source`
/// gives: out[16 * r + i] = row i times activation r.
template <int R, bool Q4, class Source>
ACCEL_TARGET_AVX512_VNNI inline void dot_x16(std::size_t n, Source source, const ActivationRow* const* x,
                                             float* out) noexcept {
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < n / 32; ++b) {
    x16_block scratch;
    accumulate_x16<R, Q4>(source(b, scratch), b, x, acc);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + 16 * r, acc[r]);
}

}  // namespace detail
ACCEL_SIMD_QUIET_END
#endif

/// The 16 weight rows of type `t` at w, w + row_bytes, ... (n elements each) times `count`
/// activation rows: out[j * 16 + i] = vec_dot(arch, t, n, w + i * row_bytes, *x[j]). Requires
/// has_dot_x16(arch, t); the integer sums are exact, so results match vec_dot up to the order of
/// the float accumulation.
template <class Arch>
void vec_dot_x16(const Arch& arch, GgmlType t, std::size_t n, const std::byte* w, std::size_t row_bytes,
                 const ActivationRow* const* x, std::size_t count, float* out) {
#if ACCEL_SIMD_X86
  if constexpr (std::is_base_of_v<simd::avx512_vnni, Arch>) {
    if (t == GgmlType::q4_k || t == GgmlType::q6_k) {
      // The super-blocks unpacked once, into this thread's buffer (n / 256 x 5.6 KB), for every
      // pass (quant/kernels/ggml_dot/avx512_k_x16.hpp).
      thread_local std::vector<detail::k16_block> blocks;
      if (blocks.size() < n / 256) blocks.resize(n / 256);
      for (std::size_t b = 0; b < n / 256; ++b) {
        if (t == GgmlType::q4_k) detail::pack_k16_q4_k(w, row_bytes, b, blocks[b]);
        else detail::pack_k16_q6_k(w, row_bytes, b, blocks[b]);
      }
      detail::in_groups<dot_x16_activations>([&](auto r, const ActivationRow* const* xs, float* o) {
        constexpr int R = decltype(r)::value;
        if (t == GgmlType::q4_k) detail::dot_k16<R, 32>(n, blocks.data(), xs, o);
        else detail::dot_k16<R, 16>(n, blocks.data(), xs, o);
      }, x, count, out, dot_x16_rows);
      return;
    }
    if (has_dot_x16(arch, t)) {
      // More activation rows than one pass takes: the blocks transposed once, into this thread's
      // buffer (n / 32 x 576 bytes), for every pass.
      const bool q4 = t == GgmlType::q4_0, packed = count > static_cast<std::size_t>(dot_x16_activations);
      thread_local std::vector<detail::x16_block> blocks;
      if (packed) {
        if (blocks.size() < n / 32) blocks.resize(n / 32);
        if (q4) detail::pack_x16_q8_q4<true>(n, w, row_bytes, blocks.data());
        else detail::pack_x16_q8_q4<false>(n, w, row_bytes, blocks.data());
      }
      detail::in_groups<dot_x16_activations>([&](auto r, const ActivationRow* const* xs, float* o) {
        constexpr int R = decltype(r)::value;
        if (packed) {
          if (q4) detail::dot_x16<R, true>(n, detail::x16_expanded{blocks.data()}, xs, o);
          else detail::dot_x16<R, false>(n, detail::x16_expanded{blocks.data()}, xs, o);
        } else {
          if (q4) detail::dot_x16<R, true>(n, detail::x16_transposed<true>{w, row_bytes}, xs, o);
          else detail::dot_x16<R, false>(n, detail::x16_transposed<false>{w, row_bytes}, xs, o);
        }
      }, x, count, out, dot_x16_rows);
      return;
    }
  }
  if constexpr (std::is_base_of_v<simd::avx2, Arch>) {
    if (t == GgmlType::q4_k || t == GgmlType::q6_k) {
      // Two passes of eight rows (quant/kernels/ggml_dot/avx2_k_x8.hpp), each half's super-blocks
      // unpacked once into this thread's buffer (n / 256 x 2.8 KB) for every pass.
      constexpr int per_pass = 4;
      thread_local std::vector<detail::k8_block> blocks;
      if (blocks.size() < n / 256) blocks.resize(n / 256);
      for (std::size_t h = 0; h < 2; ++h) {
        const std::byte* half = w + 8 * h * row_bytes;
        for (std::size_t b = 0; b < n / 256; ++b) {
          if (t == GgmlType::q4_k) detail::pack_k8_q4_k(half, row_bytes, b, blocks[b]);
          else detail::pack_k8_q6_k(half, row_bytes, b, blocks[b]);
        }
        detail::in_groups<per_pass>([&](auto r, const ActivationRow* const* xs, float* o) {
          constexpr int R = decltype(r)::value;
          if (t == GgmlType::q4_k) detail::dot_k8_avx2<R, 32>(n, blocks.data(), xs, o + 8 * h, dot_x16_rows);
          else detail::dot_k8_avx2<R, 16>(n, blocks.data(), xs, o + 8 * h, dot_x16_rows);
        }, x, count, out, dot_x16_rows);
      }
      return;
    }
    if (has_dot_x16(arch, t)) {
      // Two passes of eight rows in the lanes of a 256-bit register (quant/kernels/ggml_dot/avx2_rows.hpp),
      // each half's blocks transposed once when the activation rows take more than one pass.
      constexpr int per_pass = 4;
      const bool q4 = t == GgmlType::q4_0, packed = count > per_pass;
      thread_local std::vector<detail::x8_block> blocks;
      if (packed && blocks.size() < n / 32) blocks.resize(n / 32);
      for (std::size_t h = 0; h < 2; ++h) {
        const std::byte* half = w + 8 * h * row_bytes;
        if (packed) {
          if (q4) detail::pack_x8_q8_q4_avx2<true>(n, half, row_bytes, blocks.data());
          else detail::pack_x8_q8_q4_avx2<false>(n, half, row_bytes, blocks.data());
        }
        detail::in_groups<per_pass>([&](auto r, const ActivationRow* const* xs, float* o) {
          constexpr int R = decltype(r)::value;
          const detail::x8_expanded expanded{blocks.data()};
          if (packed) {
            if (q4) detail::dot_x8_avx2<R, true>(n, expanded, xs, o + 8 * h, dot_x16_rows);
            else detail::dot_x8_avx2<R, false>(n, expanded, xs, o + 8 * h, dot_x16_rows);
          } else {
            if (q4) detail::dot_x8_avx2<R, true>(n, detail::x8_transposed<true>{half, row_bytes}, xs, o + 8 * h, dot_x16_rows);
            else detail::dot_x8_avx2<R, false>(n, detail::x8_transposed<false>{half, row_bytes}, xs, o + 8 * h, dot_x16_rows);
          }
        }, x, count, out, dot_x16_rows);
      }
      return;
    }
  }
#endif
  (void)arch, (void)n, (void)w, (void)row_bytes, (void)x, (void)count, (void)out;
  throw DTypeError("vec_dot_x16: no 16-row kernel for " + std::string(io::ggml_type_name(t)));
}

}  // namespace accel::quant
