// Bit-exact float codecs for CUDA kernels: the rounding rules of core/float_types.hpp as
// __host__ __device__ functions (nvcc only), so a conversion on the GPU gives the very bits the
// host conversion gives.
//
//   codec::encode<F>(float)       round to nearest even onto f16 / bf16 / e4m3fn / e5m2
//   codec::decode<F>(bits)        exact value as f32 (f16 NaNs quietened, as F16C does)
//   codec::narrow_double(double)  f64 -> f32 rounded to odd, so a second rounding is exact
//   codec::f64_to_f32 / f32_to_f64  x86's conversions, NaN payloads included
//
// CUDA's own intrinsics agree with these on every number but not on NaN payloads, and have no
// e4m3fn "overflow to NaN" mode, hence the port.
#pragma once

#include <cstdint>
#include <cstring>

#include "accel/core/float_types.hpp"

namespace accel::cuda::codec {

/// Layout of a small float format (the same parameters as accel::detail::small_float_format).
template <int ExpBits, int ManBits, bool HasInf>
struct Format {
  static constexpr int exp_bits = ExpBits;
  static constexpr int man_bits = ManBits;
  static constexpr bool has_inf = HasInf;
  static constexpr int bias = (1 << (ExpBits - 1)) - 1;
  static constexpr int emin = 1 - bias;
  static constexpr std::uint32_t sign_bit = 1u << (ExpBits + ManBits);
  static constexpr std::uint32_t abs_mask = sign_bit - 1;
  static constexpr std::uint32_t inf_code = ((1u << ExpBits) - 1) << ManBits;
  static constexpr std::uint32_t max_finite = HasInf ? inf_code - 1 : abs_mask - 1;
};

using f16 = Format<5, 10, true>;
using bf16 = Format<8, 7, true>;
using e4m3fn = Format<4, 3, false>;
using e5m2 = Format<5, 2, true>;

template <class Mine, class Core>
constexpr bool same_format = Mine::exp_bits == Core::exp_bits && Mine::man_bits == Core::man_bits &&
                             Mine::has_inf == Core::has_inf && Mine::max_finite == Core::max_finite;
static_assert(same_format<f16, accel::detail::half_format> && same_format<bf16, accel::detail::bf16_format> &&
              same_format<e4m3fn, accel::detail::e4m3fn_format> && same_format<e5m2, accel::detail::e5m2_format>);

__host__ __device__ inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
__host__ __device__ inline float float_of(std::uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
__host__ __device__ inline std::uint64_t bits_of(double d) {
  std::uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}
__host__ __device__ inline double double_of(std::uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/// Round-to-nearest-even of `f` onto format F (sign included); overflow gives infinity, or NaN
/// for formats without one.
template <class F>
__host__ __device__ inline std::uint32_t encode(float f) {
  const std::uint32_t u = bits_of(f);
  const std::uint32_t sign = (u >> 31) ? F::sign_bit : 0u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {  // NaN
    if constexpr (F::has_inf && F::man_bits >= 2) {
      const std::uint32_t payload = (a & 0x7fffffu) >> (23 - F::man_bits);
      return sign | F::inf_code | (1u << (F::man_bits - 1)) | payload;
    } else {
      return sign | F::abs_mask;
    }
  }
  if (a == 0x7f800000u) return sign | (F::has_inf ? F::inf_code : F::abs_mask);
  const std::uint32_t exp_field = a >> 23;
  const std::uint32_t mant = (a & 0x7fffffu) | (exp_field ? 0x800000u : 0u);
  const int e = exp_field ? int(exp_field) - 127 : -126;
  const int target_e = e > F::emin ? e : F::emin;
  const int shift = 23 - F::man_bits + (target_e - e);
  std::uint32_t q;
  if (shift >= 25) {
    q = 0;
  } else if (shift == 0) {
    q = mant;
  } else {
    q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half_ulp = 1u << (shift - 1);
    if (rem > half_ulp || (rem == half_ulp && (q & 1u))) ++q;
  }
  const std::uint32_t code = (std::uint32_t(target_e - F::emin) << F::man_bits) + q;
  if (code > F::max_finite) return sign | (F::has_inf ? F::inf_code : F::abs_mask);
  return sign | code;
}

/// Exact f32 value of code `c` of format F; NaNs keep their payload.
template <class F>
__host__ __device__ inline float decode(std::uint32_t c) {
  const std::uint32_t sign = (c & F::sign_bit) ? 0x80000000u : 0u;
  const std::uint32_t a = c & F::abs_mask;
  if constexpr (F::exp_bits == 8) {
    return float_of(sign | (a << (23 - F::man_bits)));
  } else {
    const std::uint32_t exp_field = a >> F::man_bits;
    const std::uint32_t man = a & ((1u << F::man_bits) - 1u);
    if constexpr (F::has_inf) {
      if (exp_field == (1u << F::exp_bits) - 1u) {
        return float_of(sign | 0x7f800000u | (man << (23 - F::man_bits)));
      }
    } else {
      if (a == F::abs_mask) return float_of(sign | 0x7fc00000u);
    }
    if (exp_field == 0) {
      if (man == 0) return float_of(sign);
      int e = F::emin;
      std::uint32_t m = man;
      while ((m & (1u << F::man_bits)) == 0) {
        m <<= 1;
        --e;
      }
      m &= (1u << F::man_bits) - 1u;
      return float_of(sign | (std::uint32_t(e + 127) << 23) | (m << (23 - F::man_bits)));
    }
    const int e = int(exp_field) - F::bias;
    return float_of(sign | (std::uint32_t(e + 127) << 23) | (man << (23 - F::man_bits)));
  }
}

/// f16 -> f32 as the host converts bulk data (F16C): signalling NaNs come back quiet.
__host__ __device__ inline float decode_f16(std::uint32_t c) {
  const float f = decode<f16>(c);
  return (c & 0x7fffu) > 0x7c00u ? float_of(bits_of(f) | 0x00400000u) : f;
}

/// f64 -> f32 with round to nearest even; a NaN keeps its sign and top payload bits, quietened.
__host__ __device__ inline float f64_to_f32(double d) {
  if (d != d) {
    const std::uint64_t u = bits_of(d);
    const auto sign = static_cast<std::uint32_t>(u >> 63) << 31;
    const auto payload = static_cast<std::uint32_t>((u >> 29) & 0x7fffffu);
    return float_of(sign | 0x7fc00000u | payload);
  }
  return static_cast<float>(d);
}

/// f32 -> f64, exact; a NaN keeps its sign and payload, quietened.
__host__ __device__ inline double f32_to_f64(float f) {
  if (f != f) {
    const std::uint32_t u = bits_of(f);
    const std::uint64_t sign = static_cast<std::uint64_t>(u >> 31) << 63;
    const std::uint64_t payload = static_cast<std::uint64_t>(u & 0x7fffffu) << 29;
    return double_of(sign | 0x7ff8000000000000ull | payload);
  }
  return static_cast<double>(f);
}

/// f64 -> f32 rounded to odd: narrowing the result again to a small format then rounds exactly
/// as a direct f64 rounding would (the host's rule for f64 -> f16 / bf16 / f8).
__host__ __device__ inline float narrow_double(double d) {
  const float f = f64_to_f32(d);
  if (f != f || bits_of(f) == 0x7f800000u || bits_of(f) == 0xff800000u || static_cast<double>(f) == d) return f;
  std::uint32_t u = bits_of(f);
  if (d > 0 ? static_cast<double>(f) > d : static_cast<double>(f) < d) --u;
  return float_of(u | 1u);
}

}  // namespace accel::cuda::codec
