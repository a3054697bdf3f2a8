// ggml's quantized blocks as plain structs, each checked against io/ggml_types.hpp's byte size.
//
//   block_q4_0 ... block_q8_k, block_iq4_nl, block_iq4_xs, block_tq1_0, block_tq2_0
//   block_iq2_xxs, block_iq2_xs, block_iq2_s, block_iq3_xxs, block_iq3_s, block_iq1_s, block_iq1_m
//   ggml_block_t<GgmlType::q4_k>      the struct of a type (compile-time lookup)
//   with_ggml_block(t, f)             f(integral_constant<GgmlType, t>) for a type with a struct
//   with_ggml_lattice_block(t, f)     the same for the lattice IQ types (host only)
//   f16_scale(bits)                   a block's f16 scale as float (exact)
//   k4_scale_min(j, scales, sc, mn)   group j's six-bit scale and min of a Q4_K / Q5_K block
//   k4_scales_mins(scales, sc, mn)    all eight of each at once, four per 32-bit word
//   iq4nl_value(i)                    IQ4_NL's / IQ4_XS's code book
//   iq4_xs_scale(l, h, ib)            sub-block ib's six-bit scale of an IQ4_XS block
//   iq4_xs_scales(l, h)               all eight at once, a byte each in one word
//   load_le32(p)                      four bytes as a little-endian word (one load where it can be)
//   iq2_signs(i)                      the IQ2 / IQ3 sign byte of 7-bit index i (even parity)
//   iq1_delta                         IQ1_S's / IQ1_M's shift of every grid coordinate
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

// The lattice IQ types: each group of 8 (IQ3: 4) weights is a point of a fixed code-point grid
// (io/ggml_iq_grids.hpp), named by its index, times a sub-block scale, with signs.

/// 256 weights in 8 groups of 32; a group is two little-endian words: four 8-bit indices into
/// iq2xxs_grid (8 weights each), then four 7-bit sign indices (iq2_signs) and a 4-bit scale on top.
struct block_iq2_xxs {
  std::uint16_t d;
  std::uint8_t qs[64];
};
/// 256 weights: 32 points, each a 9-bit index into iq2xs_grid and a 7-bit sign index above it;
/// two 4-bit scales per group of 32 (low nibble for its first 16 weights).
struct block_iq2_xs {
  std::uint16_t d;
  std::uint16_t qs[32];
  std::uint8_t scales[8];
};
/// 256 weights: qs[0..31] the low 8 bits of 32 indices into iq2s_grid, qs[32..63] one explicit
/// sign byte per point, qh two high index bits per point (four points a byte), scales as IQ2_XS.
struct block_iq2_s {
  std::uint16_t d;
  std::uint8_t qs[64];
  std::uint8_t qh[8];
  std::uint8_t scales[8];
};
/// 256 weights: 64 8-bit indices into iq3xxs_grid (4 weights each), then per group of 32 one word
/// of four 7-bit sign indices (iq2_signs) and a 4-bit scale on top.
struct block_iq3_xxs {
  std::uint16_t d;
  std::uint8_t qs[96];
};
/// 256 weights: 64 9-bit indices into iq3s_grid (low 8 bits in qs, the ninth in qh, eight a byte),
/// one explicit sign byte per 8 weights, a 4-bit scale per 32 (low nibble first).
struct block_iq3_s {
  std::uint16_t d;
  std::uint8_t qs[64];
  std::uint8_t qh[8];
  std::uint8_t signs[32];
  std::uint8_t scales[4];
};
/// 256 weights: 32 11-bit indices into iq1s_grid (low 8 bits in qs); per group of 32 one qh word
/// with the four points' high 3 bits, a 3-bit scale (bits 12-14) and the sign of the delta (bit 15).
struct block_iq1_s {
  std::uint16_t d;
  std::uint8_t qs[32];
  std::uint16_t qh[8];
};
/// 256 weights: iq1s_grid indices as IQ1_S's, qh a byte per two points (3 high bits and the
/// delta's sign, a nibble each); scales four words of 3-bit scales per 16 weights, whose top
/// nibbles together are the block's f16 scale (iq1_m_scale).
struct block_iq1_m {
  std::uint8_t qs[32];
  std::uint8_t qh[16];
  std::uint16_t scales[4];
};

/// ggml's ksigns_iq2xs as the rule it tabulates: 7 stored sign bits (bit j set: weight j is
/// negative) and an eighth that makes the number of negative weights even.
ACCEL_HOST_DEVICE constexpr std::uint8_t iq2_signs(unsigned i) noexcept {
  i &= 127u;
  unsigned parity = i ^ (i >> 4);
  parity ^= parity >> 2;
  parity ^= parity >> 1;
  return static_cast<std::uint8_t>(i | ((parity & 1u) << 7));
}

/// IQ1's grid coordinates (-1, 0, 1) are shifted by this, up or down by the group's delta bit.
inline constexpr float iq1_delta = 0.125f;

/// IQ1_M's f16 scale: the top nibbles of its four scale words, low to high.
ACCEL_HOST_DEVICE constexpr std::uint16_t iq1_m_scale(const std::uint16_t* sc) noexcept {
  return static_cast<std::uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) |
                                    (sc[3] & 0xF000));
}

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
template <> struct ggml_block<GgmlType::iq2_xxs> { using type = block_iq2_xxs; };
template <> struct ggml_block<GgmlType::iq2_xs> { using type = block_iq2_xs; };
template <> struct ggml_block<GgmlType::iq2_s> { using type = block_iq2_s; };
template <> struct ggml_block<GgmlType::iq3_xxs> { using type = block_iq3_xxs; };
template <> struct ggml_block<GgmlType::iq3_s> { using type = block_iq3_s; };
template <> struct ggml_block<GgmlType::iq1_s> { using type = block_iq1_s; };
template <> struct ggml_block<GgmlType::iq1_m> { using type = block_iq1_m; };
}  // namespace detail

/// The block struct of `T`.
template <GgmlType T>
using ggml_block_t = typename detail::ggml_block<T>::type;

/// Calls f(std::integral_constant<GgmlType, T>{}) when `t` is a block type with a struct here
/// (every quantized type io decodes but the lattice IQ ones), and returns whether it did. The one
/// list of those types: the CPU dequantizer (io/ggml_dequantize.hpp) and the CUDA kernels
/// (quant/kernels/cuda/ggml.cuh) dispatch through it.
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

/// with_ggml_block for the lattice IQ types. A list apart because the CUDA kernels instantiate
/// every type with_ggml_block lists, and these decode through host tables (io/ggml_iq_grids.hpp).
template <class F>
bool with_ggml_lattice_block(GgmlType t, F&& f) {
  switch (t) {
#define ACCEL_GGML_BLOCK_CASE(T)                       \
  case GgmlType::T:                                    \
    f(std::integral_constant<GgmlType, GgmlType::T>{}); \
    return true;
    ACCEL_GGML_BLOCK_CASE(iq2_xxs)
    ACCEL_GGML_BLOCK_CASE(iq2_xs)
    ACCEL_GGML_BLOCK_CASE(iq2_s)
    ACCEL_GGML_BLOCK_CASE(iq3_xxs)
    ACCEL_GGML_BLOCK_CASE(iq3_s)
    ACCEL_GGML_BLOCK_CASE(iq1_s)
    ACCEL_GGML_BLOCK_CASE(iq1_m)
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
static_assert(ggml_block_matches<GgmlType::iq2_xxs>() && ggml_block_matches<GgmlType::iq2_xs>() &&
              ggml_block_matches<GgmlType::iq2_s>() && ggml_block_matches<GgmlType::iq3_xxs>() &&
              ggml_block_matches<GgmlType::iq3_s>() && ggml_block_matches<GgmlType::iq1_s>() &&
              ggml_block_matches<GgmlType::iq1_m>());
static_assert(std::is_standard_layout_v<block_iq2_xxs> && std::is_standard_layout_v<block_iq2_xs> &&
              std::is_standard_layout_v<block_iq2_s> && std::is_standard_layout_v<block_iq3_xxs> &&
              std::is_standard_layout_v<block_iq3_s> && std::is_standard_layout_v<block_iq1_s> &&
              std::is_standard_layout_v<block_iq1_m>);
static_assert(iq2_signs(0) == 0 && iq2_signs(1) == 129 && iq2_signs(3) == 3 && iq2_signs(127) == 255);

}  // namespace accel::io
