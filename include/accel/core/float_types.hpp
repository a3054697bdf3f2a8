// Storage-only floating types: half (IEEE binary16), bfloat16, float8_e4m3fn, float8_e5m2.
//
// Each is a trivially copyable wrapper around its bit pattern. Conversions to float are exact;
// conversions from float round to nearest, ties to even, with torch's overflow rules:
// half / bfloat16 / e5m2 overflow to infinity, e4m3fn (no infinity) overflows to NaN.
// NaN payloads survive half and bfloat16 round trips (quietened), as F16C hardware does.
//
// This is the one definition of the rounding: every function here is constexpr and
// ACCEL_HOST_DEVICE, so the host's scalar conversions (core/convert.hpp) and the CUDA kernels
// (backend/cuda/kernels.cuh) compile the same code and produce the same bits.
//
//   encode_from_float<F>(f) / decode_to_float<F>(c)   f32 <-> small format F, exact / RNE
//   narrow_double(d)                                  f64 -> f32 rounded to odd (no double rounding)
//   f64_to_f32(d) / f32_to_f64(f)                     x86's conversions, NaN payloads included
//   decode_f16_quiet(c)                               f16 -> f32 as F16C's bulk conversion
//
// The last three spell out what the host's hardware does in one instruction (cvtsd2ss, cvtss2sd,
// vcvtph2ps), for the GPU, whose own conversions drop NaN payloads; host code keeps the
// instruction.
#pragma once

#include <cstdint>

#include "accel/core/host_device.hpp"

namespace accel {

namespace detail {

/// std::bit_cast for host and device code (nvcc rejects the library one in kernels).
template <class To, class From>
ACCEL_HOST_DEVICE constexpr To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From));
  return __builtin_bit_cast(To, from);
}

/// Bit layout of a small binary floating format; `inf` false means the all-ones exponent is
/// finite except for the single NaN mantissa (the "fn" formats).
template <int ExpBits, int ManBits, bool HasInf>
struct small_float_format {
  static constexpr int exp_bits = ExpBits;
  static constexpr int man_bits = ManBits;
  static constexpr bool has_inf = HasInf;
  static constexpr int bias = (1 << (ExpBits - 1)) - 1;
  static constexpr int emin = 1 - bias;  // unbiased exponent of the smallest normal
  static constexpr std::uint32_t sign_bit = 1u << (ExpBits + ManBits);
  static constexpr std::uint32_t abs_mask = sign_bit - 1;
  static constexpr std::uint32_t inf_code = ((1u << ExpBits) - 1) << ManBits;
  // Largest finite magnitude code: below inf for IEEE-like formats, one below all-ones for fn.
  static constexpr std::uint32_t max_finite = HasInf ? inf_code - 1 : abs_mask - 1;
};

using half_format = small_float_format<5, 10, true>;
using bf16_format = small_float_format<8, 7, true>;
using e4m3fn_format = small_float_format<4, 3, false>;
using e5m2_format = small_float_format<5, 2, true>;

/// Round-to-nearest-even of an f32 onto format F; returns the code (sign included).
template <class F>
ACCEL_HOST_DEVICE constexpr std::uint32_t encode_from_float(float f) noexcept {
  const std::uint32_t u = bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 31) ? F::sign_bit : 0u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {  // NaN
    if constexpr (F::has_inf && F::man_bits >= 2) {
      const std::uint32_t payload = (a & 0x7fffffu) >> (23 - F::man_bits);
      const std::uint32_t quiet = 1u << (F::man_bits - 1);
      return sign | F::inf_code | quiet | payload;
    } else {
      return sign | F::abs_mask;  // canonical NaN (torch's choice for the f8 formats)
    }
  }
  if (a == 0x7f800000u) return sign | (F::has_inf ? F::inf_code : F::abs_mask);
  const std::uint32_t exp_field = a >> 23;
  const std::uint32_t mant = (a & 0x7fffffu) | (exp_field ? 0x800000u : 0u);
  const int e = exp_field ? int(exp_field) - 127 : -126;  // value = mant * 2^(e - 23)
  const int target_e = e > F::emin ? e : F::emin;
  const int shift = 23 - F::man_bits + (target_e - e);
  std::uint32_t q;
  if (shift >= 25) {
    q = 0;  // below half of the smallest subnormal
  } else if (shift == 0) {
    q = mant;
  } else {
    q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half_ulp = 1u << (shift - 1);
    if (rem > half_ulp || (rem == half_ulp && (q & 1u))) ++q;
  }
  // Subnormals (target_e == emin, q < 2^M) and carries into the next binade both fall out of
  // this one formula.
  const std::uint32_t code = (std::uint32_t(target_e - F::emin) << F::man_bits) + q;
  if (code > F::max_finite) return sign | (F::has_inf ? F::inf_code : F::abs_mask);
  return sign | code;
}

/// Exact value of code `c` in format F as an f32.
template <class F>
ACCEL_HOST_DEVICE constexpr float decode_to_float(std::uint32_t c) noexcept {
  const std::uint32_t sign = (c & F::sign_bit) ? 0x80000000u : 0u;
  const std::uint32_t a = c & F::abs_mask;
  if constexpr (F::exp_bits == 8) {
    return bit_cast<float>(sign | (a << (23 - F::man_bits)));  // f32's own layout, truncated
  }
  const std::uint32_t exp_field = a >> F::man_bits;
  const std::uint32_t man = a & ((1u << F::man_bits) - 1u);
  if constexpr (F::has_inf) {
    if (exp_field == (1u << F::exp_bits) - 1u) {
      return bit_cast<float>(sign | 0x7f800000u | (man << (23 - F::man_bits)));
    }
  } else {
    if (a == F::abs_mask) return bit_cast<float>(sign | 0x7fc00000u);
  }
  if (exp_field == 0) {
    if (man == 0) return bit_cast<float>(sign);
    // Normalise the subnormal: with fewer than 8 exponent bits it is an f32 normal.
    int e = F::emin;
    std::uint32_t m = man;
    while ((m & (1u << F::man_bits)) == 0) {
      m <<= 1;
      --e;
    }
    m &= (1u << F::man_bits) - 1u;
    return bit_cast<float>(sign | (std::uint32_t(e + 127) << 23) | (m << (23 - F::man_bits)));
  }
  const int e = int(exp_field) - F::bias;
  return bit_cast<float>(sign | (std::uint32_t(e + 127) << 23) | (man << (23 - F::man_bits)));
}

/// f64 -> f32 rounded to odd: f64 -> small format must not round twice, so the sticky bit is
/// kept and the second rounding sees the same tie information as a direct rounding would.
ACCEL_HOST_DEVICE constexpr float narrow_double(double d) noexcept {
  const float f = static_cast<float>(d);
  const std::uint32_t u = bit_cast<std::uint32_t>(f);
  if (f != f || (u & 0x7fffffffu) == 0x7f800000u || static_cast<double>(f) == d) return f;
  // Truncate toward zero, then force the last bit to 1 (round to odd).
  const std::uint32_t t = (d > 0 ? static_cast<double>(f) > d : static_cast<double>(f) < d) ? u - 1 : u;
  return bit_cast<float>(t | 1u);
}

/// f64 -> f32 with round to nearest even; a NaN keeps its sign and top payload bits, quietened
/// (what x86 does; a GPU's own conversion returns the canonical NaN).
ACCEL_HOST_DEVICE constexpr float f64_to_f32(double d) noexcept {
  if (d != d) {
    const std::uint64_t u = bit_cast<std::uint64_t>(d);
    const auto sign = static_cast<std::uint32_t>(u >> 63) << 31;
    const auto payload = static_cast<std::uint32_t>((u >> 29) & 0x7fffffu);
    return bit_cast<float>(sign | 0x7fc00000u | payload);
  }
  return static_cast<float>(d);
}

/// f32 -> f64, exact; a NaN keeps its sign and payload, quietened (x86's rule).
ACCEL_HOST_DEVICE constexpr double f32_to_f64(float f) noexcept {
  if (f != f) {
    const std::uint32_t u = bit_cast<std::uint32_t>(f);
    const std::uint64_t sign = static_cast<std::uint64_t>(u >> 31) << 63;
    const std::uint64_t payload = static_cast<std::uint64_t>(u & 0x7fffffu) << 29;
    return bit_cast<double>(sign | 0x7ff8000000000000ull | payload);
  }
  return static_cast<double>(f);
}

/// f16 code -> f32 as the bulk conversion does it (F16C): signalling NaNs come back quiet.
ACCEL_HOST_DEVICE constexpr float decode_f16_quiet(std::uint32_t c) noexcept {
  const float f = decode_to_float<half_format>(c);
  return (c & 0x7fffu) > 0x7c00u ? bit_cast<float>(bit_cast<std::uint32_t>(f) | 0x00400000u) : f;
}

template <class Self, class Bits, class Format>
struct small_float {
  using bits_type = Bits;
  using format = Format;
  Bits bits = 0;

  small_float() = default;
  ACCEL_HOST_DEVICE constexpr explicit small_float(float f) noexcept
      : bits(static_cast<Bits>(encode_from_float<Format>(f))) {}
  ACCEL_HOST_DEVICE constexpr explicit small_float(double d) noexcept : small_float(narrow_double(d)) {}

  ACCEL_HOST_DEVICE static constexpr Self from_bits(Bits b) noexcept {
    Self s;
    s.bits = b;
    return s;
  }
  ACCEL_HOST_DEVICE constexpr operator float() const noexcept { return decode_to_float<Format>(bits); }

  ACCEL_HOST_DEVICE friend constexpr bool operator==(Self a, Self b) noexcept { return float(a) == float(b); }
};

}  // namespace detail

/// IEEE 754 binary16 (torch.float16).
struct half : detail::small_float<half, std::uint16_t, detail::half_format> {
  using small_float::small_float;
};
/// bfloat16 (torch.bfloat16): the upper half of an f32.
struct bfloat16 : detail::small_float<bfloat16, std::uint16_t, detail::bf16_format> {
  using small_float::small_float;
};
/// OCP FP8 E4M3 without infinities (torch.float8_e4m3fn); max 448, overflow gives NaN.
struct float8_e4m3fn : detail::small_float<float8_e4m3fn, std::uint8_t, detail::e4m3fn_format> {
  using small_float::small_float;
};
/// OCP FP8 E5M2 (torch.float8_e5m2); max 57344, overflow gives infinity.
struct float8_e5m2 : detail::small_float<float8_e5m2, std::uint8_t, detail::e5m2_format> {
  using small_float::small_float;
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);
static_assert(sizeof(float8_e4m3fn) == 1 && sizeof(float8_e5m2) == 1);

}  // namespace accel
