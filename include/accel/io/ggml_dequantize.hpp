// Dequantization of ggml's tensor types to float32, bit-identical to ggml's own `to_float`.
//
//   dequantize_block(const block_X& b, float* y)           one block, ggml's element order
//   dequantize_group(b, g, y) / ggml_group_size<T>         group g of a block (Q4_K, Q6_K: 32 weights)
//   dequantize_row(t, src, y, n)                           n elements of type t at src
//   dequantize_ggml(t, bytes, shape) -> Tensor             a float32 cpu tensor of `shape`
//   dequantize(const GgufFile& f, name) -> Tensor         a GGUF tensor, in torch order
//
// The block functions are ACCEL_HOST_DEVICE: the CUDA kernels (quant/kernels/cuda/kernels.cuh) decode
// with them, so a GPU gives the same bits. Those of the lattice IQ types (IQ1_S, IQ1_M, IQ2_*,
// IQ3_*) are host only: they read the code-point grids of io/ggml_iq_grids.hpp, host tables.
// Exactness: every block format's value is a product of its f16 scale with small integers, exact
// in float32, followed by at most one rounding (a subtraction of the min, or the last product of
// Q6_K), so the order of operations below is ggml's and no contraction into FMA changes a bit.
// The lattice IQ types' values are exact too: a sub-block scale of at most 16 significant bits
// times a grid coordinate of at most 6 (IQ1: coordinate plus delta, 4), negated or not.
// Plain types convert (F16 / BF16 exactly, F64 and the integers to the nearest float32).
// Large tensors are split across the CPU threads by blocks.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "accel/core/convert.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/io/ggml_iq_grids.hpp"
#include "accel/io/gguf.hpp"

namespace accel::io {

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q4_0& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b.qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
  }
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q4_1& b, float* y) noexcept {
  const float d = f16_scale(b.d), m = f16_scale(b.m);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b.qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(b.qs[j] >> 4) * d + m;
  }
}

namespace detail {
/// The fifth bits of a Q5 block's weights j and j + 16, moved to bit 4.
ACCEL_HOST_DEVICE inline void q5_high_bits(const std::uint8_t* qh4, int j, int& h0, int& h1) noexcept {
  const std::uint32_t qh = static_cast<std::uint32_t>(qh4[0]) | (static_cast<std::uint32_t>(qh4[1]) << 8) |
                           (static_cast<std::uint32_t>(qh4[2]) << 16) | (static_cast<std::uint32_t>(qh4[3]) << 24);
  h0 = static_cast<int>(((qh >> j) << 4) & 0x10);
  h1 = static_cast<int>((qh >> (j + 12)) & 0x10);
}
}  // namespace detail

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q5_0& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int j = 0; j < 16; ++j) {
    int h0, h1;
    detail::q5_high_bits(b.qh, j, h0, h1);
    y[j] = static_cast<float>(((b.qs[j] & 0x0F) | h0) - 16) * d;
    y[j + 16] = static_cast<float>(((b.qs[j] >> 4) | h1) - 16) * d;
  }
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q5_1& b, float* y) noexcept {
  const float d = f16_scale(b.d), m = f16_scale(b.m);
  for (int j = 0; j < 16; ++j) {
    int h0, h1;
    detail::q5_high_bits(b.qh, j, h0, h1);
    y[j] = static_cast<float>((b.qs[j] & 0x0F) | h0) * d + m;
    y[j + 16] = static_cast<float>((b.qs[j] >> 4) | h1) * d + m;
  }
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q8_0& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q8_1& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q2_k& b, float* y) noexcept {
  const float d = f16_scale(b.d), dmin = f16_scale(b.dmin);
  const std::uint8_t* q = b.qs;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const std::uint8_t sc = b.scales[is++];
        const float dl = d * static_cast<float>(sc & 0x0F), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q3_k& b, float* y) noexcept {
  // Sixteen six-bit scales: low 4 bits in bytes 0-7 (two per byte), high 2 bits in bytes 8-11.
  std::int8_t scales[16];
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? (b.scales[i] & 0x0F) : (b.scales[i - 8] >> 4);
    const int high = (b.scales[8 + (i % 4)] >> (2 * (i / 4))) & 3;
    scales[i] = static_cast<std::int8_t>(low | (high << 4));
  }
  const float d = f16_scale(b.d);
  const std::uint8_t* q = b.qs;
  std::uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d * static_cast<float>(scales[is++] - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((b.hmask[l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
      m = static_cast<std::uint8_t>(m << 1);
    }
    q += 32;
  }
}


/// Group g (0..7) of a Q4_K block: weights 32g .. 32g + 31, each d * scale * q - dmin * min.
ACCEL_HOST_DEVICE inline void dequantize_group(const block_q4_k& b, int g, float* y) noexcept {
  const float d = f16_scale(b.d), dmin = f16_scale(b.dmin);
  std::uint8_t sc, mn;
  k4_scale_min(g, b.scales, sc, mn);
  const float dl = d * sc, ml = dmin * mn;
  const std::uint8_t* q = b.qs + 32 * (g / 2);
  const int shift = 4 * (g % 2);
  for (int l = 0; l < 32; l += 4) {
    const std::uint32_t w = load_le32(q + l) >> shift;
    for (int i = 0; i < 4; ++i) y[l + i] = dl * static_cast<float>((w >> (8 * i)) & 0x0F) - ml;
  }
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q4_k& b, float* y) noexcept {
  for (int g = 0; g < 8; ++g) dequantize_group(b, g, y + 32 * g);
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q5_k& b, float* y) noexcept {
  const float d = f16_scale(b.d), dmin = f16_scale(b.dmin);
  const std::uint8_t* ql = b.qs;
  std::uint8_t u1 = 1, u2 = 2;
  for (int g = 0; g < 8; g += 2) {
    std::uint8_t sc, mn;
    k4_scale_min(g, b.scales, sc, mn);
    const float d1 = d * sc, m1 = dmin * mn;
    k4_scale_min(g + 1, b.scales, sc, mn);
    const float d2 = d * sc, m2 = dmin * mn;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0x0F) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32;
    u1 = static_cast<std::uint8_t>(u1 << 2);
    u2 = static_cast<std::uint8_t>(u2 << 2);
  }
}

/// Group g (0..7) of a Q6_K block: weights 32g .. 32g + 31. Half g / 4 of the block; its four
/// quarters take the low / high nibbles of ql[0..31] / ql[32..63] and bit pairs 0..3 of qh.
ACCEL_HOST_DEVICE inline void dequantize_group(const block_q6_k& b, int g, float* y) noexcept {
  const float d = f16_scale(b.d);
  const int half = g / 4, part = g % 4;
  const std::uint8_t* ql = b.ql + 64 * half + 32 * (part % 2);
  const std::uint8_t* qh = b.qh + 32 * half;
  const std::int8_t* sc = b.scales + 8 * half + 2 * part;
  const int low_shift = 4 * (part / 2), high_shift = 2 * part;
  for (int l = 0; l < 32; l += 4) {
    const std::uint32_t lo = load_le32(ql + l) >> low_shift, hi = load_le32(qh + l) >> high_shift;
    for (int i = 0; i < 4; ++i) {
      const int q = static_cast<int>(((lo >> (8 * i)) & 0x0F) | (((hi >> (8 * i)) & 3) << 4)) - 32;
      // (d * scale) * q: the scale product is exact, the second product rounds once, as ggml's.
      y[l + i] = d * static_cast<float>(sc[l / 16]) * static_cast<float>(q);
    }
  }
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q6_k& b, float* y) noexcept {
  for (int g = 0; g < 8; ++g) dequantize_group(b, g, y + 32 * g);
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_q8_k& b, float* y) noexcept {
  for (int j = 0; j < 256; ++j) y[j] = b.d * static_cast<float>(b.qs[j]);
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_iq4_nl& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(iq4nl_value(b.qs[j] & 0x0F));
    y[j + 16] = d * static_cast<float>(iq4nl_value(b.qs[j] >> 4));
  }
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_iq4_xs& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  const std::uint8_t* qs = b.qs;
  for (int ib = 0; ib < 8; ++ib) {
    const float dl = d * static_cast<float>(iq4_xs_scale(b.scales_l, b.scales_h, ib) - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(iq4nl_value(qs[j] & 0x0F));
      y[j + 16] = dl * static_cast<float>(iq4nl_value(qs[j] >> 4));
    }
    y += 32;
    qs += 16;
  }
}

namespace detail {
/// Ternary digit n of byte q: TQ1_0 stores five base-3 digits as the fraction q / 256 (rounded up),
/// so multiplying by 3^n (mod 256) brings digit n to the top and * 3 >> 8 reads it.
ACCEL_HOST_DEVICE inline float ternary_digit(std::uint8_t q, int n, float d) noexcept {
  constexpr std::uint8_t pow3[5] = {1, 3, 9, 27, 81};
  const auto shifted = static_cast<std::uint8_t>(q * pow3[n]);
  const int digit = (static_cast<std::uint16_t>(shifted) * 3) >> 8;
  return static_cast<float>(digit - 1) * d;
}
}  // namespace detail

ACCEL_HOST_DEVICE inline void dequantize_block(const block_tq1_0& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 32; ++m) *y++ = detail::ternary_digit(b.qs[m], n, d);
  }
  for (int n = 0; n < 5; ++n) {
    for (int m = 32; m < 48; ++m) *y++ = detail::ternary_digit(b.qs[m], n, d);
  }
  for (int n = 0; n < 4; ++n) {
    for (int j = 0; j < 4; ++j) *y++ = detail::ternary_digit(b.qh[j], n, d);
  }
}

ACCEL_HOST_DEVICE inline void dequantize_block(const block_tq2_0& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int j = 0; j < 64; j += 32) {
    for (int l = 0; l < 4; ++l) {
      for (int m = 0; m < 32; ++m) *y++ = static_cast<float>(((b.qs[j + m] >> (2 * l)) & 3) - 1) * d;
    }
  }
}

namespace detail {
/// Coordinate j of grid point p, `Bits` bits a coordinate (io/ggml_iq_grids.hpp's packing).
template <int Bits>
constexpr unsigned iq_code(std::uint16_t p, int j) noexcept {
  return (p >> (Bits * j)) & ((1u << Bits) - 1u);
}

/// The N weights of grid point p: db * coordinate, negated where sign bit j of `signs` is set.
/// ggml multiplies by (bit ? -1.f : 1.f), which GCC compiles to a negation, NaNs included (a
/// product by -1 would keep a NaN's sign); flipping the sign bit is that negation without the
/// branch, which random signs mispredict (the IQ2 / IQ3 types decoded three times slower).
template <int Bits, int N, class Book>
inline void iq_put_signed(float db, std::uint16_t p, const Book& book, unsigned signs, float* y) noexcept {
  for (int j = 0; j < N; ++j) {
    const float v = db * static_cast<float>(book[iq_code<Bits>(p, j)]);
    y[j] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) ^ (((signs >> j) & 1u) << 31));
  }
}

/// The 8 weights of IQ1 grid point p: dl * (coordinate + delta), as ggml.
inline void iq1_put(float dl, std::uint16_t p, float delta, float* y) noexcept {
  for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(ggml_iq::iq1_book[iq_code<2>(p, j)]) + delta);
}
}  // namespace detail

inline void dequantize_block(const block_iq2_xxs& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const std::uint8_t* idx = b.qs + 8 * ib;
    const std::uint32_t aux = load_le32(idx + 4);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l) {
      detail::iq_put_signed<2, 8>(db, ggml_iq::iq2xxs_grid[idx[l]], ggml_iq::iq2_book, iq2_signs(aux >> (7 * l)),
                                  y + 8 * l);
    }
  }
}

inline void dequantize_block(const block_iq2_xs& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const float db[2] = {d * (0.5f + static_cast<float>(b.scales[ib] & 0x0F)) * 0.25f,
                         d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const std::uint16_t q = b.qs[4 * ib + l];
      detail::iq_put_signed<2, 8>(db[l / 2], ggml_iq::iq2xs_grid[q & 511], ggml_iq::iq2_book, iq2_signs(q >> 9),
                                  y + 8 * l);
    }
  }
}

inline void dequantize_block(const block_iq2_s& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  const std::uint8_t* signs = b.qs + 32;
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const float db[2] = {d * (0.5f + static_cast<float>(b.scales[ib] & 0x0F)) * 0.25f,
                         d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const unsigned idx = b.qs[4 * ib + l] | (((b.qh[ib] >> (2 * l)) & 3u) << 8);
      detail::iq_put_signed<2, 8>(db[l / 2], ggml_iq::iq2s_grid[idx], ggml_iq::iq2_book, signs[4 * ib + l], y + 8 * l);
    }
  }
}

inline void dequantize_block(const block_iq3_xxs& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const std::uint8_t* idx = b.qs + 8 * ib;
    const std::uint32_t aux = load_le32(b.qs + 64 + 4 * ib);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      const unsigned signs = iq2_signs(aux >> (7 * l));
      detail::iq_put_signed<3, 4>(db, ggml_iq::iq3xxs_grid[idx[2 * l]], ggml_iq::iq3xxs_book, signs, y + 8 * l);
      detail::iq_put_signed<3, 4>(db, ggml_iq::iq3xxs_grid[idx[2 * l + 1]], ggml_iq::iq3xxs_book, signs >> 4,
                                  y + 8 * l + 4);
    }
  }
}

inline void dequantize_block(const block_iq3_s& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const float db = d * static_cast<float>(1 + 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0x0F));
    const std::uint8_t* qs = b.qs + 8 * ib;
    const std::uint8_t* signs = b.signs + 4 * ib;
    const unsigned qh = b.qh[ib];
    for (int l = 0; l < 4; ++l) {
      const unsigned i0 = qs[2 * l] | (((qh >> (2 * l)) & 1u) << 8);
      const unsigned i1 = qs[2 * l + 1] | (((qh >> (2 * l + 1)) & 1u) << 8);
      detail::iq_put_signed<3, 4>(db, ggml_iq::iq3s_grid[i0], ggml_iq::iq3s_book, signs[l], y + 8 * l);
      detail::iq_put_signed<3, 4>(db, ggml_iq::iq3s_grid[i1], ggml_iq::iq3s_book, signs[l] >> 4u, y + 8 * l + 4);
    }
  }
}

inline void dequantize_block(const block_iq1_s& b, float* y) noexcept {
  const float d = f16_scale(b.d);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const unsigned qh = b.qh[ib];
    const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7u) + 1);
    const float delta = (qh & 0x8000u) ? -iq1_delta : iq1_delta;
    for (int l = 0; l < 4; ++l) {
      const unsigned idx = b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8);
      detail::iq1_put(dl, ggml_iq::iq1s_grid[idx], delta, y + 8 * l);
    }
  }
}

inline void dequantize_block(const block_iq1_m& b, float* y) noexcept {
  const float d = f16_scale(iq1_m_scale(b.scales));
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const unsigned sc = b.scales[ib / 2] >> (6 * (ib % 2));
    // Two scales a group: the first for its first 16 weights, the second for the last 16.
    const float dl[2] = {d * static_cast<float>(2 * (sc & 7u) + 1), d * static_cast<float>(2 * ((sc >> 3) & 7u) + 1)};
    for (int l = 0; l < 4; ++l) {
      const unsigned h = b.qh[2 * ib + l / 2] >> (4 * (l % 2));
      const unsigned idx = b.qs[4 * ib + l] | ((h & 7u) << 8);
      detail::iq1_put(dl[l / 2], ggml_iq::iq1s_grid[idx], (h & 8u) ? -iq1_delta : iq1_delta, y + 8 * l);
    }
  }
}

/// Weights per group of dequantize_group: 32 for the types whose blocks decode in groups (Q4_K,
/// Q6_K), the whole block for the others (whose dequantize_group is dequantize_block). The GPU's
/// GEMV decodes one group per step, small enough to stay in registers.
template <GgmlType T>
inline constexpr int ggml_group_size =
    (T == GgmlType::q4_k || T == GgmlType::q6_k) ? 32 : static_cast<int>(ggml_type_info(T).block_size);

/// The only group of a block that decodes whole.
template <class B>
ACCEL_HOST_DEVICE inline void dequantize_group(const B& b, int, float* y) noexcept {
  dequantize_block(b, y);
}

namespace detail {

template <GgmlType T>
void dequantize_blocks(const std::byte* src, float* y, std::size_t nblocks) {
  using B = ggml_block_t<T>;
  constexpr std::size_t qk = ggml_type_info(T).block_size;
  // Blocks are copied out of the (possibly unaligned) source before they are read.
  parallel_for(nblocks, std::size_t{1} << 12, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      B blk;
      std::memcpy(&blk, src + i * sizeof(B), sizeof(B));
      dequantize_block(blk, y + i * qk);
    }
  });
}

template <class T>
void convert_plain(const std::byte* src, float* y, std::size_t n) {
  // The source may be unaligned for T (a GGUF alignment below the element size): copy through T.
  if (reinterpret_cast<std::uintptr_t>(src) % alignof(T) == 0) {
    convert_elements(dtype_of<T>, src, DType::f32, y, n);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    convert_elements(dtype_of<T>, &v, DType::f32, y + i, 1);
  }
}

}  // namespace detail

/// Converts `n` elements of type `t` stored at `src` to float32 at `y`. `n` must be a whole number
/// of blocks (ShapeError otherwise); the caller guarantees `src` holds ggml_row_nbytes(t, n) bytes.
inline void dequantize_row(GgmlType t, const std::byte* src, float* y, std::size_t n) {
  const auto& info = ggml_type_info(t);
  (void)ggml_row_nbytes(t, n);
  const std::size_t nb = n / info.block_size;
  const auto blocks = [&](auto type) { detail::dequantize_blocks<decltype(type)::value>(src, y, nb); };
  if (with_ggml_block(t, blocks)) return;
  // Not in with_ggml_block's list: the CUDA kernels instantiate that, and these read host tables.
  if (with_ggml_lattice_block(t, blocks)) return;
  switch (t) {
    case GgmlType::f32: detail::convert_plain<float>(src, y, n); return;
    case GgmlType::f16: detail::convert_plain<half>(src, y, n); return;
    case GgmlType::bf16: detail::convert_plain<bfloat16>(src, y, n); return;
    case GgmlType::f64: detail::convert_plain<double>(src, y, n); return;
    case GgmlType::i8: detail::convert_plain<std::int8_t>(src, y, n); return;
    case GgmlType::i16: detail::convert_plain<std::int16_t>(src, y, n); return;
    case GgmlType::i32: detail::convert_plain<std::int32_t>(src, y, n); return;
    case GgmlType::i64: detail::convert_plain<std::int64_t>(src, y, n); return;
    default: break;
  }
  throw DTypeError("dequantizing " + std::string(info.name) + " is not supported");
}

/// The float32 cpu tensor of `shape` whose elements are stored as type `t` in `bytes`, rows along
/// the last dimension of `shape`. ShapeError when `bytes` is not exactly that many elements of `t`.
inline Tensor dequantize_ggml(GgmlType t, ByteSpan bytes, const Shape& shape) {
  const auto numel = static_cast<std::size_t>(shape.numel());
  const std::size_t ne0 = shape.size() ? static_cast<std::size_t>(shape[shape.size() - 1]) : 1;
  const std::size_t rows = ne0 == 0 ? 0 : numel / ne0;
  const std::size_t want = ggml_row_nbytes(t, ne0) * rows;
  if (bytes.size() != want) {
    throw ShapeError(std::string(ggml_type_name(t)) + " tensor of shape " + shape.str() + " takes " +
                     std::to_string(want) + " bytes, not " + std::to_string(bytes.size()));
  }
  Tensor out = Tensor::empty(shape, DType::f32, Device::cpu());
  // An empty tensor of a type that does not dequantize is still refused, as the header says.
  if (numel || !ggml_type_info(t).dequantizable) dequantize_row(t, bytes.data(), static_cast<float*>(out.data_ptr()), numel);
  return out;
}

/// Tensor `name` of a GGUF file as float32, in torch order (ne reversed); names the file and the
/// tensor when its type does not dequantize.
inline Tensor dequantize(const GgufFile& f, std::string_view name) {
  const auto& info = f.info(name);
  try {
    return dequantize_ggml(info.type, f.bytes(info), info.shape());
  } catch (const DTypeError& e) {
    throw DTypeError("GGUF file '" + f.path() + "', tensor '" + info.name + "': " + e.what());
  }
}

}  // namespace accel::io
