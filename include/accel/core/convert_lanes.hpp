// The ISA-independent half of the conversion kernels: core/float_types.hpp's rounding written
// for W lanes at once, and the scalar kernels every CPU runs.
//
//   lanes<W>::i32 / u32 / f32                       GCC / Clang vector types of W 32-bit lanes
//   round_to_bf16(v) / round_to_f8<F>(v)            f32 bits -> codes in place, nearest even
//   widen_f8<F>(v)                                  8-bit codes -> f32 bits in place, exact
//   small_lanes<T>                                  one format's scalar and lane conversions
//   widen / narrow (requires_arch<simd::scalar>)    the portable kernels
//
// Lane code has no target attribute: it is always inlined, and takes the ISA of the kernel that
// calls it (core/convert_kernels_x86.hpp), so one definition serves AVX2 and AVX-512. It works
// on 32-bit lanes only; the kernels widen and narrow the codes with the ISA's own instructions
// (GCC 12 splits __builtin_convertvector between 8- and 32-bit lanes into scalar moves).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "accel/core/float_types.hpp"
#include "accel/core/simd_arch.hpp"

/// Lane code: inlined into the ISA-targeted kernel, so it is compiled for that kernel's ISA.
#define ACCEL_LANES __attribute__((always_inline)) inline

// Lane functions work in place on references: GCC warns (-Wpsabi, at the end of the translation
// unit, where no pragma reaches) about every vector passed by value outside the ISA that owns it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace accel::detail {

/// W lanes of each element width.
template <std::size_t W>
struct lanes {
  typedef std::int32_t i32 __attribute__((vector_size(4 * W)));
  typedef std::uint32_t u32 __attribute__((vector_size(4 * W)));
  typedef float f32 __attribute__((vector_size(4 * W)));
};

/// f32 bits -> bf16 codes (low halves), encode_from_float<bf16_format> per lane: add just
/// under half an ulp plus the kept lowest bit, which also carries into infinity; NaNs are
/// quietened with their payload.
template <class I>
ACCEL_LANES void round_to_bf16(I& v) noexcept {
  using U = typename lanes<sizeof(I) / 4>::u32;
  const U w = (U)v;
  const U rounded = (w + 0x7fffu + ((w >> 16) & 1u)) >> 16;
  const U quiet = (w | 0x00400000u) >> 16;
  v = (v & 0x7fffffff) > 0x7f800000 ? (I)quiet : (I)rounded;
}

/// f32 bits -> codes of the 8-bit format F, encode_from_float<F> per lane: the mantissa (with
/// its implicit bit) shifts right by 23 - M in F's normal range, by more below it, and rounds
/// to nearest even at that position; a carry moves into the next binade by itself.
template <class F, class I>
ACCEL_LANES void round_to_f8(I& v) noexcept {
  constexpr int emin_biased = F::emin + 127;  // F's smallest normal, as an f32 exponent field
  constexpr int overflow = F::has_inf ? int(F::inf_code) : int(F::abs_mask);
  const I zero{}, one = zero + 1;
  const I a = v & 0x7fffffff;
  const I field = a >> 23;
  const I mant = (a & 0x7fffff) | (field != 0 ? zero + 0x800000 : zero);
  const I e = field > 1 ? field : one;  // f32 subnormals share the smallest normal's scale
  const I target = e > emin_biased ? e : zero + emin_biased;
  I shift = target - e + (23 - F::man_bits);
  shift = shift < 31 ? shift : zero + 31;  // from 25 on, everything rounds to zero anyway
  const I q = (mant + ((one << (shift - 1)) - 1) + ((mant >> shift) & 1)) >> shift;
  I code = ((target - emin_biased) << F::man_bits) + q;
  code = code > int(F::max_finite) ? zero + overflow : code;  // inf and NaN land here too
  if constexpr (F::has_inf) {  // NaN keeps its top payload bits, quietened
    constexpr int quiet_nan = int(F::inf_code) | (1 << (F::man_bits - 1));
    code = a > 0x7f800000 ? ((a & 0x7fffff) >> (23 - F::man_bits)) | quiet_nan : code;
  }
  v = code | ((v >> 24) & 0x80);
}

/// Codes of the 8-bit format F -> f32 bits, decode_to_float<F> per lane. Subnormals are scaled
/// in floating point, where both factors and the product are normal, so FTZ / DAZ cannot
/// touch them.
template <class F, class I>
ACCEL_LANES void widen_f8(I& v) noexcept {
  using FV = typename lanes<sizeof(I) / 4>::f32;
  constexpr float sub_scale = bit_cast<float>(std::uint32_t(127 + F::emin - F::man_bits) << 23);
  constexpr int top = (1 << F::exp_bits) - 1;
  const I zero{};
  const I a = v & int(F::abs_mask);
  const I field = a >> F::man_bits;
  const FV sub = __builtin_convertvector(a & ((1 << F::man_bits) - 1), FV) * sub_scale;
  I bits = field == 0 ? (I)sub : (a << (23 - F::man_bits)) + ((127 - F::bias) << 23);
  if constexpr (F::has_inf) {
    bits = field == top ? (a << (23 - F::man_bits)) | 0x7f800000 : bits;
  } else {
    bits = a == int(F::abs_mask) ? zero + 0x7fc00000 : bits;
  }
  v = bits | ((v & 0x80) << 24);
}

/// One small format's conversions: a scalar one (float_types.hpp's) and a W-lane one.
template <class T>
struct small_lanes {
  static float widen_one(T v) noexcept { return static_cast<float>(v); }

  /// Codes (zero-extended to 32 bits) -> f32 bit patterns, in place (bf16 and the f8 formats).
  template <class I>
  ACCEL_LANES static void widen(I& v) noexcept {
    if constexpr (sizeof(T) == 2) {
      v <<= 16;
    } else {
      widen_f8<typename T::format>(v);
    }
  }

  /// f32 bit patterns -> codes in the low bits, in place (bf16 and the f8 formats).
  template <class I>
  ACCEL_LANES static void narrow(I& v) noexcept {
    if constexpr (sizeof(T) == 2) {
      round_to_bf16(v);
    } else {
      round_to_f8<typename T::format>(v);
    }
  }
};

/// f16 widens as the hardware does (F16C quietens signalling NaNs), on every ISA alike.
template <>
inline float small_lanes<half>::widen_one(half v) noexcept {
  return decode_f16_quiet(v.bits);
}

// ---- scalar: every CPU --------------------------------------------------------------------------

/// f8 -> f32 through a 256-entry table: the decode has a loop for subnormals, the table none.
template <class T>
inline const std::array<float, 256>& f8_table() noexcept {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (unsigned c = 0; c < 256; ++c) t[c] = static_cast<float>(T::from_bits(static_cast<std::uint8_t>(c)));
    return t;
  }();
  return table;
}

template <class T>
void widen(simd::requires_arch<simd::scalar>, const T* src, float* dst, std::size_t n) noexcept {
  if constexpr (sizeof(T) == 1) {
    const auto& table = f8_table<T>();
    for (std::size_t i = 0; i < n; ++i) dst[i] = table[src[i].bits];
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = small_lanes<T>::widen_one(src[i]);
  }
}

template <class T>
void narrow(simd::requires_arch<simd::scalar>, const float* src, T* dst, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = T(src[i]);
}

}  // namespace accel::detail

#pragma GCC diagnostic pop
