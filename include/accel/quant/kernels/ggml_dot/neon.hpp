// The NEON ggml dot products (AArch64) of every type with integer kernels, one block at a time, in
// two tiers that differ only in the int8 step (quant/kernels/int8_dot_neon.hpp): `neon_dotprod` takes
// sixteen byte products a step with SDOT, plain `neon` with SMULL and SADALP. Weight codes become
// small non-negative bytes in registers (nibbles; Q5's and Q3_K's extra bit by a per-lane bit test;
// Q6_K's six bits by shift-and-insert; Q2_K's and Q3_K's bit pairs by shifts), so one signed step
// serves every type; the offsets (Q4_0's 8, Q5_0's 16, Q3_K's 4, Q6_K's 32, the K types' mins, Q4_1's
// and Q5_1's m) are taken out through the activation's block sums, as the scalar kernel does.
//
// The types share their loops: detail::neon_dot32_blocks runs the 32-element types,
// neon_super_blocks the K types, summing groups of 32 (neon_eight_groups) or 16
// (neon_sixteen_groups); each type supplies, as always-inlined lambdas, how its codes come out of
// its bytes and its scales. ACCEL_GGML_DOT_NEON_TIERS writes a type's two entry points,
// dot_<type>(requires_arch<neon>, ...) and dot_<type>(requires_arch<neon_dotprod>, ...).
//
// Each block's integer sum is exact, and the float sums run block by block in the scalar kernel's
// order and expressions: built with -ffp-contract=off both tiers return the scalar kernel's bits
// (tests/arm checks it under qemu); under GCC's default contraction a compiler may fuse a * b + c
// in one kernel and not the other, a rounding apart per block. ggml's NEON code keeps float lanes
// across blocks instead; that order may be faster on a wide core, and is not measured here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/scalar.hpp"
#include "accel/quant/kernels/int8_dot_neon.hpp"

#if ACCEL_SIMD_ARM
#include <arm_neon.h>

namespace accel::quant {

namespace detail {

/// The f16 scale at p as float (io::f16_scale's value).
inline float neon_scale_at(const std::byte* p) noexcept {
  std::uint16_t d;
  std::memcpy(&d, p, 2);
  return io::f16_scale(d);
}

inline int8x16_t neon_s8(const void* p) noexcept { return vld1q_s8(static_cast<const std::int8_t*>(p)); }
inline int8x16_t neon_low_nibbles(uint8x16_t q) noexcept { return vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))); }
inline int8x16_t neon_high_nibbles(uint8x16_t q) noexcept { return vreinterpretq_s8_u8(vshrq_n_u8(q, 4)); }

/// Sixteen packed bytes as 32 nibble codes (0..15): the low nibbles (elements 0-15), the high ones (16-31).
[[gnu::always_inline]] inline std::array<int8x16_t, 2> neon_nibbles(const std::byte* qs) noexcept {
  const uint8x16_t q = vld1q_u8(reinterpret_cast<const std::uint8_t*>(qs));
  return {neon_low_nibbles(q), neon_high_nibbles(q)};
}

/// The four bit pairs (0..3) of sixteen bytes, the lowest first.
[[gnu::always_inline]] inline std::array<uint8x16_t, 4> neon_bit_pairs(uint8x16_t q) noexcept {
  const uint8x16_t three = vdupq_n_u8(3);
  return {vandq_u8(q, three), vandq_u8(vshrq_n_u8(q, 2), three), vandq_u8(vshrq_n_u8(q, 4), three), vshrq_n_u8(q, 6)};
}

/// Sixteen lanes of `value` where bit `bit` of the byte in `h` is set, else 0.
inline uint8x16_t neon_bit_as(uint8x16_t h, int bit, std::uint8_t value) noexcept {
  return vandq_u8(vtstq_u8(h, vdupq_n_u8(static_cast<std::uint8_t>(1u << bit))), vdupq_n_u8(value));
}

/// A Q5_0 / Q5_1 block's 32 five-bit codes (0..31) as two registers (elements 0-15, 16-31): the
/// nibbles of qs, and bit j of the word qh above element j. Byte i of qh spreads over eight lanes,
/// each lane testing its own bit.
inline std::array<int8x16_t, 2> neon_q5_codes(const std::byte* qh, const std::byte* qs) noexcept {
  std::uint8_t h[4];
  std::memcpy(h, qh, 4);
  const uint8x16_t bits = vcombine_u8(vcreate_u8(0x8040201008040201ull), vcreate_u8(0x8040201008040201ull));
  const uint8x16_t h01 = vcombine_u8(vdup_n_u8(h[0]), vdup_n_u8(h[1])), h23 = vcombine_u8(vdup_n_u8(h[2]), vdup_n_u8(h[3]));
  const uint8x16_t fifth = vdupq_n_u8(0x10);
  const uint8x16_t q = vld1q_u8(reinterpret_cast<const std::uint8_t*>(qs));
  return {vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), vandq_u8(vtstq_u8(h01, bits), fifth))),
          vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(vtstq_u8(h23, bits), fifth)))};
}

// The loops every type shares take the type's part as a functor: a lambda marked always_inline
// (GCC's and Clang's spelling after the parameters; [[gnu::always_inline]] there would name the
// type), so each kernel compiles to the loop it would be written out as.

/// 32 codes (elements 0-15 in lo, 16-31 in hi) times 32 activation bytes, in four int32 lanes.
template <class Dot>
[[gnu::always_inline]] inline int32x4_t neon_dot32(int8x16_t lo, int8x16_t hi, const std::int8_t* a) noexcept {
  return Dot::dot(Dot::dot(vdupq_n_s32(0), lo, neon_s8(a)), hi, neon_s8(a + 16));
}

/// The 32-element types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) block by block against the Q8_0
/// row: codes(p) gives the block at p's 32 codes as two registers (elements 0-15, 16-31). Codes
/// stored as value + Offset (Q4_0's 8, Q5_0's 16) lose Offset x the activation block's sum from the
/// integer sum; a block with a min m (Q4_1, Q5_1) adds m x that sum in float instead, in the
/// scalar kernel's expression.
template <class Block, int Offset, class Dot, class Codes>
[[gnu::always_inline]] inline float neon_dot32_blocks(std::size_t n, const std::byte* w, const ActivationRow& x,
                                                      Codes codes) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 32; ++b) {
    const std::byte* p = w + b * sizeof(Block);
    const auto [lo, hi] = codes(p);
    const int s = vaddvq_s32(neon_dot32<Dot>(lo, hi, x.q8_0[b].qs));
    const float d = neon_scale_at(p + offsetof(Block, d)), dx = x.q8_0_scales[b];
    if constexpr (requires { &Block::m; }) {
      static_assert(Offset == 0, "a block with a min stores its codes as they are");
      acc += d * dx * static_cast<float>(s) +
             neon_scale_at(p + offsetof(Block, m)) * (dx * static_cast<float>(x.q8_0_sums[b]));
    } else {
      acc += d * dx * static_cast<float>(s - Offset * x.q8_0_sums[b]);
    }
  }
  return acc;
}

/// The super-block types (256 elements, against a Q8_K block) block by block: term(p, a) gives the
/// float term of the block at p with its activation block a, added in order as the scalar kernel
/// adds it.
template <class Block, class Term>
[[gnu::always_inline]] inline float neon_super_blocks(std::size_t n, const std::byte* w, const ActivationRow& x,
                                                      Term term) noexcept {
  float acc = 0;
  for (std::size_t b = 0; b < n / 256; ++b) acc += term(w + b * sizeof(Block), x.q8_k[b]);
  return acc;
}

/// Eight groups of 32 (Q4_K, Q5_K, IQ4_XS) times a Q8_K block's 256 ints, each group's lanes
/// weighed by its scale before the one horizontal sum: codes(c) gives groups 2c and 2c + 1
/// (elements 0-15, 16-31 of the one, then of the other), scale(g) group g's scale.
template <class Dot, class Codes, class Scale>
[[gnu::always_inline]] inline int neon_eight_groups(const std::int8_t* a, Codes codes, Scale scale) noexcept {
  int32x4_t sums = vdupq_n_s32(0);
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const std::array<int8x16_t, 4> q = codes(c);
    sums = vmlaq_n_s32(sums, neon_dot32<Dot>(q[0], q[1], a + 64 * c), scale(2 * c));
    sums = vmlaq_n_s32(sums, neon_dot32<Dot>(q[2], q[3], a + 64 * c + 32), scale(2 * c + 1));
  }
  return vaddvq_s32(sums);
}

/// Sixteen groups of 16 (Q6_K, Q2_K, Q3_K) times a Q8_K block's 256 ints, each group's lanes
/// weighed by its scale before the one horizontal sum. The three share a layout (scalar.hpp):
/// lanes 16i .. 16i + 15 of chunk c (of two, 128 elements each) hold in their part j = 0..3 the
/// codes of group 8c + 2j + i; codes(c, i) gives those four registers, scale(g) group g's scale.
template <class Dot, class Codes, class Scale>
[[gnu::always_inline]] inline int neon_sixteen_groups(const std::int8_t* a, Codes codes, Scale scale) noexcept {
  int32x4_t sums = vdupq_n_s32(0);
#pragma GCC unroll 2
  for (int c = 0; c < 2; ++c) {
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i) {
      const std::array<uint8x16_t, 4> u = codes(c, i);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const int g = 8 * c + 2 * j + i;
        const int32x4_t d = Dot::dot(vdupq_n_s32(0), vreinterpretq_s8_u8(u[j]), neon_s8(a + 16 * g));
        sums = vmlaq_n_s32(sums, d, scale(g));
      }
    }
  }
  return vaddvq_s32(sums);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q8_0_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return neon_dot32_blocks<io::block_q8_0, 0, Dot>(n, w, x, [](const std::byte* p) __attribute__((always_inline)) {
    const std::byte* q = p + offsetof(io::block_q8_0, qs);
    return std::array{neon_s8(q), neon_s8(q + 16)};
  });
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q4_0_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return neon_dot32_blocks<io::block_q4_0, 8, Dot>(n, w, x, [](const std::byte* p) __attribute__((always_inline)) {
    return neon_nibbles(p + offsetof(io::block_q4_0, qs));
  });
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q4_1_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return neon_dot32_blocks<io::block_q4_1, 0, Dot>(n, w, x, [](const std::byte* p) __attribute__((always_inline)) {
    return neon_nibbles(p + offsetof(io::block_q4_1, qs));
  });
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q5_0_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return neon_dot32_blocks<io::block_q5_0, 16, Dot>(n, w, x, [](const std::byte* p) __attribute__((always_inline)) {
    return neon_q5_codes(p + offsetof(io::block_q5_0, qh), p + offsetof(io::block_q5_0, qs));
  });
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q5_1_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return neon_dot32_blocks<io::block_q5_1, 0, Dot>(n, w, x, [](const std::byte* p) __attribute__((always_inline)) {
    return neon_q5_codes(p + offsetof(io::block_q5_1, qh), p + offsetof(io::block_q5_1, qs));
  });
}

/// Q4_K, and Q5_K: Q4_K with a fifth bit per code (a block with qh), bit g of qh[j] above element
/// 32g + j.
template <class Block, class Dot>
[[gnu::always_inline]] inline float dot_k4_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const auto term = [](const std::byte* p, const io::block_q8_k& a) __attribute__((always_inline)) {
    std::uint8_t sc[8], mn[8];
    io::k4_scales_mins(reinterpret_cast<const std::uint8_t*>(p + offsetof(Block, scales)), sc, mn);
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(Block, qs));
    uint8x16_t h[2] = {};
    if constexpr (requires { &Block::qh; }) {
      const auto* qh = reinterpret_cast<const std::uint8_t*>(p + offsetof(Block, qh));
      h[0] = vld1q_u8(qh);
      h[1] = vld1q_u8(qh + 16);
    }
    // 32 bytes hold groups 2c (low nibbles) and 2c + 1 (high nibbles).
    const auto codes = [&](int c) __attribute__((always_inline)) {
      const uint8x16_t q0 = vld1q_u8(qs + 32 * c), q1 = vld1q_u8(qs + 32 * c + 16);
      std::array<int8x16_t, 4> u = {neon_low_nibbles(q0), neon_low_nibbles(q1), neon_high_nibbles(q0),
                                    neon_high_nibbles(q1)};
      if constexpr (requires { &Block::qh; }) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k)
          u[k] = vorrq_s8(u[k], vreinterpretq_s8_u8(neon_bit_as(h[k % 2], 2 * c + k / 2, 0x10)));
      }
      return u;
    };
    const int sumi = neon_eight_groups<Dot>(a.qs, codes, [&](int g) __attribute__((always_inline)) { return sc[g]; });
    int summ = 0;
    for (int g = 0; g < 8; ++g) summ += mn[g] * (a.bsums[2 * g] + a.bsums[2 * g + 1]);
    return a.d * (neon_scale_at(p + offsetof(Block, d)) * static_cast<float>(sumi) -
                  neon_scale_at(p + offsetof(Block, dmin)) * static_cast<float>(summ));
  };
  return neon_super_blocks<Block>(n, w, x, term);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q4_k_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return dot_k4_neon<io::block_q4_k, Dot>(n, w, x);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q5_k_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  return dot_k4_neon<io::block_q5_k, Dot>(n, w, x);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q6_k_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const auto term = [](const std::byte* p, const io::block_q8_k& a) __attribute__((always_inline)) {
    const auto* ql = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q6_k, ql));
    const auto* qh = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q6_k, qh));
    const auto* scales = reinterpret_cast<const std::int8_t*>(p + offsetof(io::block_q6_k, scales));
    // Half c, lanes l = 16i .. 16i + 15 of its 32: the values of elements 128c + 32j + l, j = 0..3,
    // from the low (j = 0, 1) or high (2, 3) nibbles of ql[l] (j even) or ql[l + 32] (j odd) and
    // bit pair j of qh[l].
    const auto codes = [&](int c, int i) __attribute__((always_inline)) {
      const uint8x16_t la = vld1q_u8(ql + 64 * c + 16 * i), lb = vld1q_u8(ql + 64 * c + 32 + 16 * i);
      const std::array<uint8x16_t, 4> hb = neon_bit_pairs(vld1q_u8(qh + 32 * c + 16 * i));
      return std::array{vsliq_n_u8(la, hb[0], 4), vsliq_n_u8(lb, hb[1], 4), vsliq_n_u8(vshrq_n_u8(la, 4), hb[2], 4),
                        vsliq_n_u8(vshrq_n_u8(lb, 4), hb[3], 4)};
    };
    const auto scale = [&](int g) __attribute__((always_inline)) { return scales[g]; };
    const int sumi = neon_sixteen_groups<Dot>(a.qs, codes, scale);
    int offset = 0;
    for (int g = 0; g < 16; ++g) offset += scales[g] * a.bsums[g];
    return a.d * neon_scale_at(p + offsetof(io::block_q6_k, d)) * static_cast<float>(sumi - 32 * offset);
  };
  return neon_super_blocks<io::block_q6_k>(n, w, x, term);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q2_k_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  const auto term = [](const std::byte* p, const io::block_q8_k& a) __attribute__((always_inline)) {
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q2_k, qs));
    const auto* scales = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q2_k, scales));
    const auto codes = [&](int c, int i) __attribute__((always_inline)) {
      return neon_bit_pairs(vld1q_u8(qs + 32 * c + 16 * i));
    };
    const auto scale = [&](int g) __attribute__((always_inline)) { return scales[g] & 0x0F; };
    const int sumi = neon_sixteen_groups<Dot>(a.qs, codes, scale);
    int summ = 0;
    for (int g = 0; g < 16; ++g) summ += (scales[g] >> 4) * a.bsums[g];
    return a.d * (neon_scale_at(p + offsetof(io::block_q2_k, d)) * static_cast<float>(sumi) -
                  neon_scale_at(p + offsetof(io::block_q2_k, dmin)) * static_cast<float>(summ));
  };
  return neon_super_blocks<io::block_q2_k>(n, w, x, term);
}

template <class Dot>
[[gnu::always_inline]] inline float dot_q3_k_neon(std::size_t n, const std::byte* w, const ActivationRow& x) noexcept {
  // A code is its two low bits plus 4 x its hmask bit (bit g / 2 of hmask[16 (g % 2) + l] for
  // group g); the value is the code less 4, which leaves through the activation's group sums.
  const auto term = [](const std::byte* p, const io::block_q8_k& a) __attribute__((always_inline)) {
    const auto* qs = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q3_k, qs));
    const auto* hmask = reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q3_k, hmask));
    std::int8_t sc[16];
    detail::q3_k_scales(reinterpret_cast<const std::uint8_t*>(p + offsetof(io::block_q3_k, scales)), sc);
    const uint8x16_t h[2] = {vld1q_u8(hmask), vld1q_u8(hmask + 16)};
    const auto codes = [&](int c, int i) __attribute__((always_inline)) {
      std::array<uint8x16_t, 4> u = neon_bit_pairs(vld1q_u8(qs + 32 * c + 16 * i));
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) u[j] = vorrq_u8(u[j], neon_bit_as(h[i], 4 * c + j, 4));  // group 8c + 2j + i
      return u;
    };
    const int sumi = neon_sixteen_groups<Dot>(a.qs, codes, [&](int g) __attribute__((always_inline)) { return sc[g]; });
    int offset = 0;
    for (int g = 0; g < 16; ++g) offset += sc[g] * a.bsums[g];
    return a.d * neon_scale_at(p + offsetof(io::block_q3_k, d)) * static_cast<float>(sumi - 4 * offset);
  };
  return neon_super_blocks<io::block_q3_k>(n, w, x, term);
}

}  // namespace detail

// A kernel's two entry points, one a tier: detail::dot_<type>_neon over each tier's int8 step,
// inside the function that carries the tier's target attribute.
#define ACCEL_GGML_DOT_NEON_TIERS(type)                                                                                \
  ACCEL_TARGET_NEON inline float dot_##type(simd::requires_arch<simd::neon>, std::size_t n, const std::byte* w,        \
                                            const ActivationRow& x) noexcept {                                         \
    return detail::dot_##type##_neon<detail::neon_smull>(n, w, x);                                                     \
  }                                                                                                                    \
  ACCEL_TARGET_NEON_DOTPROD inline float dot_##type(simd::requires_arch<simd::neon_dotprod>, std::size_t n,            \
                                                    const std::byte* w, const ActivationRow& x) noexcept {             \
    return detail::dot_##type##_neon<detail::neon_sdot>(n, w, x);                                                      \
  }

ACCEL_GGML_DOT_NEON_TIERS(q8_0)
ACCEL_GGML_DOT_NEON_TIERS(q4_0)
ACCEL_GGML_DOT_NEON_TIERS(q4_1)
ACCEL_GGML_DOT_NEON_TIERS(q5_0)
ACCEL_GGML_DOT_NEON_TIERS(q5_1)
ACCEL_GGML_DOT_NEON_TIERS(q4_k)
ACCEL_GGML_DOT_NEON_TIERS(q5_k)
ACCEL_GGML_DOT_NEON_TIERS(q6_k)
ACCEL_GGML_DOT_NEON_TIERS(q2_k)
ACCEL_GGML_DOT_NEON_TIERS(q3_k)

}  // namespace accel::quant

#endif
