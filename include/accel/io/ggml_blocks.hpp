// ggml's quantized blocks as plain structs, each checked against io/ggml_types.hpp's byte size.
//
//   block_q4_0 ... block_q8_k, block_iq4_nl, block_iq4_xs, block_tq1_0, block_tq2_0
//   ggml_block_t<GgmlType::q4_k>      the struct of a type (compile-time lookup)
//   with_ggml_block(t, f)             f(integral_constant<GgmlType, t>) for a type with a struct
//   f16_scale(bits)                   a block's f16 scale as float (exact)
//   k4_scale_min(j, scales, sc, mn)   group j's six-bit scale and min of a Q4_K / Q5_K block
//   k4_scales_mins(scales, sc, mn)    all eight of each at once, four per 32-bit word
//   iq4nl_value(i)                    IQ4_NL's / IQ4_XS's code book
//   iq4_xs_scale(l, h, ib)            sub-block ib's six-bit scale of an IQ4_XS block
//   iq4_xs_scales(l, h)               all eight at once, a byte each in one word
//   load_le32(p)                      four bytes as a little-endian word (one load where it can be)
//
// Field order and widths are the file format: every struct is standard layout and unpadded, so
// its size is the block's size in the file. Readers copy a block out of the mapped bytes into the
// struct (a memcpy the compiler folds into loads) rather than casting the pointer: a file with
// "general.alignment" 1 may start a tensor at an odd address.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "accel/core/float_types.hpp"
#include "accel/core/host_device.hpp"
#include "accel/io/ggml_types.hpp"

namespace accel::io {

/// A block's f16 scale (stored as raw bits) as float: exact.
ACCEL_HOST_DEVICE inline float f16_scale(std::uint16_t bits) noexcept { return accel::detail::decode_to_float<accel::detail::half_format>(bits); }

/// 32 weights: x = (q - 8) * d, q in 0..15; low nibbles hold weights 0..15, high nibbles 16..31.
struct block_q4_0 {
  std::uint16_t d;
  std::uint8_t qs[16];
};
/// 32 weights: x = q * d + m.
struct block_q4_1 {
  std::uint16_t d, m;
  std::uint8_t qs[16];
};
/// 32 weights of 5 bits: the fifth bits of all 32 in qh (bit j for weight j).
struct block_q5_0 {
  std::uint16_t d;
  std::uint8_t qh[4];
  std::uint8_t qs[16];
};
struct block_q5_1 {
  std::uint16_t d, m;
  std::uint8_t qh[4];
  std::uint8_t qs[16];
};
/// 32 weights: x = q * d, q signed 8-bit.
struct block_q8_0 {
  std::uint16_t d;
  std::int8_t qs[32];
};
/// Q8_0 with the block's sum times d (s), for dot products with Q4_1 / Q5_1.
struct block_q8_1 {
  std::uint16_t d, s;
  std::int8_t qs[32];
};
/// 256 weights in 16 groups of 16: 4-bit scale and 4-bit min per group, 2-bit weights.
struct block_q2_k {
  std::uint8_t scales[16];
  std::uint8_t qs[64];
  std::uint16_t d, dmin;
};
/// 256 weights of 3 bits (2 low bits in qs, the high bit in hmask), 16 six-bit scales packed in 12 bytes.
struct block_q3_k {
  std::uint8_t hmask[32];
  std::uint8_t qs[64];
  std::uint8_t scales[12];
  std::uint16_t d;
};
/// 256 weights in 8 groups of 32: six-bit scale and min per group packed in 12 bytes, 4-bit weights.
struct block_q4_k {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[128];
};
struct block_q5_k {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[32];
  std::uint8_t qs[128];
};
/// 256 weights of 6 bits (4 low bits in ql, 2 high in qh), 16 signed 8-bit scales.
struct block_q6_k {
  std::uint8_t ql[128];
  std::uint8_t qh[64];
  std::int8_t scales[16];
  std::uint16_t d;
};
/// The activations' type of the K dot products: f32 scale, 256 int8, sums of each 16.
struct block_q8_k {
  float d;
  std::int8_t qs[256];
  std::int16_t bsums[16];
};
/// 32 weights through a 16-entry non-linear table.
struct block_iq4_nl {
  std::uint16_t d;
  std::uint8_t qs[16];
};
/// 256 weights through the same table, six-bit scales per 32 (low 4 bits in scales_l, high 2 in scales_h).
struct block_iq4_xs {
  std::uint16_t d;
  std::uint16_t scales_h;
  std::uint8_t scales_l[4];
  std::uint8_t qs[128];
};
/// 256 ternary weights, five per byte (base-3 digits as a fixed-point fraction) and four in qh.
struct block_tq1_0 {
  std::uint8_t qs[48];
  std::uint8_t qh[4];
  std::uint16_t d;
};
/// 256 ternary weights, four 2-bit digits per byte.
struct block_tq2_0 {
  std::uint8_t qs[64];
  std::uint16_t d;
};

/// Scale and min of group j (0..7) of a Q4_K / Q5_K block: six bits each, packed in 12 bytes.
ACCEL_HOST_DEVICE inline void k4_scale_min(int j, const std::uint8_t* s, std::uint8_t& sc, std::uint8_t& mn) noexcept {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = static_cast<std::uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    mn = static_cast<std::uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

/// k4_scale_min for j = 0..7 at once, word-parallel (for the CPU kernels' inner loops): the 12
/// bytes as three words, each byte's two high bits moved up in one shift and mask per word.
inline void k4_scales_mins(const std::uint8_t* s, std::uint8_t sc[8], std::uint8_t mn[8]) noexcept {
  static_assert(std::endian::native == std::endian::little, "the words hold bytes 0..3 low to high");
  constexpr std::uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  std::uint32_t q[3];
  std::memcpy(q, s, 12);
  const std::uint32_t scales[2] = {q[0] & low6, (q[2] & low4) | (((q[0] >> 6) & low2) << 4)};
  const std::uint32_t mins[2] = {q[1] & low6, ((q[2] >> 4) & low4) | (((q[1] >> 6) & low2) << 4)};
  std::memcpy(sc, scales, 8);
  std::memcpy(mn, mins, 8);
}

/// Four bytes at p as a little-endian word. On a GPU a 4-byte aligned p is one load (byte loads
/// dominate a decoding kernel otherwise); the host's memcpy is one load wherever p is.
ACCEL_HOST_DEVICE inline std::uint32_t load_le32(const std::uint8_t* p) noexcept {
#if defined(__CUDA_ARCH__)
  if (reinterpret_cast<std::uintptr_t>(p) % 4 == 0) return *reinterpret_cast<const std::uint32_t*>(p);
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
#else
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

/// Entry `i` of IQ4_NL's and IQ4_XS's code book. A local table, not a namespace-scope array:
/// CUDA kernels cannot index a host array, and they share this function.
ACCEL_HOST_DEVICE constexpr std::int8_t iq4nl_value(unsigned i) noexcept {
  constexpr std::int8_t book[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return book[i & 15u];
}

/// The six-bit scale (0..63, the value being this less 32) of sub-block ib (0..7) of an IQ4_XS
/// block: the low four bits in scales_l (two sub-blocks a byte), the high two in scales_h (two
/// bits a sub-block).
ACCEL_HOST_DEVICE inline int iq4_xs_scale(const std::uint8_t* scales_l, std::uint16_t scales_h, int ib) noexcept {
  return ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((scales_h >> (2 * ib)) & 3) << 4);
}

/// iq4_xs_scale for ib = 0..7 at once, sub-block i in byte i of the word (for the CPU kernels): the
/// nibbles and the bit pairs spread a byte apart by shifts and masks (BMI2's PDEP would do it in
/// one instruction, but it is microcoded and slow on AMD before Zen 3).
inline std::uint64_t iq4_xs_scales(const std::uint8_t* scales_l, std::uint16_t scales_h) noexcept {
  std::uint32_t l;
  std::memcpy(&l, scales_l, 4);
  std::uint64_t lo = l, hi = scales_h;
  lo = (lo | (lo << 16)) & 0x0000FFFF0000FFFFull;
  lo = (lo | (lo << 8)) & 0x00FF00FF00FF00FFull;
  lo = (lo | (lo << 4)) & 0x0F0F0F0F0F0F0F0Full;
  hi = (hi | (hi << 24)) & 0x000000FF000000FFull;
  hi = (hi | (hi << 12)) & 0x000F000F000F000Full;
  hi = (hi | (hi << 6)) & 0x0303030303030303ull;
  return lo | (hi << 4);
}

namespace detail {
template <GgmlType T>
struct ggml_block;
template <> struct ggml_block<GgmlType::q4_0> { using type = block_q4_0; };
template <> struct ggml_block<GgmlType::q4_1> { using type = block_q4_1; };
template <> struct ggml_block<GgmlType::q5_0> { using type = block_q5_0; };
template <> struct ggml_block<GgmlType::q5_1> { using type = block_q5_1; };
template <> struct ggml_block<GgmlType::q8_0> { using type = block_q8_0; };
template <> struct ggml_block<GgmlType::q8_1> { using type = block_q8_1; };
template <> struct ggml_block<GgmlType::q2_k> { using type = block_q2_k; };
template <> struct ggml_block<GgmlType::q3_k> { using type = block_q3_k; };
template <> struct ggml_block<GgmlType::q4_k> { using type = block_q4_k; };
template <> struct ggml_block<GgmlType::q5_k> { using type = block_q5_k; };
template <> struct ggml_block<GgmlType::q6_k> { using type = block_q6_k; };
template <> struct ggml_block<GgmlType::q8_k> { using type = block_q8_k; };
template <> struct ggml_block<GgmlType::iq4_nl> { using type = block_iq4_nl; };
template <> struct ggml_block<GgmlType::iq4_xs> { using type = block_iq4_xs; };
template <> struct ggml_block<GgmlType::tq1_0> { using type = block_tq1_0; };
template <> struct ggml_block<GgmlType::tq2_0> { using type = block_tq2_0; };
}  // namespace detail

/// The block struct of `T`.
template <GgmlType T>
using ggml_block_t = typename detail::ggml_block<T>::type;

/// Calls f(std::integral_constant<GgmlType, T>{}) when `t` is a block type with a struct here
/// (every quantized type io decodes), and returns whether it did. The one list of those types: the
/// CPU dequantizer (io/ggml_dequantize.hpp) and the CUDA kernels (quant/kernels/cuda/ggml.cuh) dispatch
/// through it.
template <class F>
bool with_ggml_block(GgmlType t, F&& f) {
  switch (t) {
#define ACCEL_GGML_BLOCK_CASE(T)                       \
  case GgmlType::T:                                    \
    f(std::integral_constant<GgmlType, GgmlType::T>{}); \
    return true;
    ACCEL_GGML_BLOCK_CASE(q4_0)
    ACCEL_GGML_BLOCK_CASE(q4_1)
    ACCEL_GGML_BLOCK_CASE(q5_0)
    ACCEL_GGML_BLOCK_CASE(q5_1)
    ACCEL_GGML_BLOCK_CASE(q8_0)
    ACCEL_GGML_BLOCK_CASE(q8_1)
    ACCEL_GGML_BLOCK_CASE(q2_k)
    ACCEL_GGML_BLOCK_CASE(q3_k)
    ACCEL_GGML_BLOCK_CASE(q4_k)
    ACCEL_GGML_BLOCK_CASE(q5_k)
    ACCEL_GGML_BLOCK_CASE(q6_k)
    ACCEL_GGML_BLOCK_CASE(q8_k)
    ACCEL_GGML_BLOCK_CASE(iq4_nl)
    ACCEL_GGML_BLOCK_CASE(iq4_xs)
    ACCEL_GGML_BLOCK_CASE(tq1_0)
    ACCEL_GGML_BLOCK_CASE(tq2_0)
#undef ACCEL_GGML_BLOCK_CASE
    default: return false;
  }
}

/// True when `Block` is exactly the file's block of `T` (size and alignment a row can promise).
template <GgmlType T>
constexpr bool ggml_block_matches() {
  using B = ggml_block_t<T>;
  return sizeof(B) == ggml_type_info(T).type_size && alignof(B) <= 4;
}
static_assert(ggml_block_matches<GgmlType::q4_0>() && ggml_block_matches<GgmlType::q4_1>() &&
              ggml_block_matches<GgmlType::q5_0>() && ggml_block_matches<GgmlType::q5_1>() &&
              ggml_block_matches<GgmlType::q8_0>() && ggml_block_matches<GgmlType::q8_1>());
static_assert(ggml_block_matches<GgmlType::q2_k>() && ggml_block_matches<GgmlType::q3_k>() &&
              ggml_block_matches<GgmlType::q4_k>() && ggml_block_matches<GgmlType::q5_k>() &&
              ggml_block_matches<GgmlType::q6_k>() && ggml_block_matches<GgmlType::q8_k>());
static_assert(ggml_block_matches<GgmlType::iq4_nl>() && ggml_block_matches<GgmlType::iq4_xs>() &&
              ggml_block_matches<GgmlType::tq1_0>() && ggml_block_matches<GgmlType::tq2_0>());

}  // namespace accel::io
