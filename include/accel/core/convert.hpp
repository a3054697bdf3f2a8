// convert_value<To>(from) and convert_elements(...): element conversion between every pair of
// dtypes, exact where the target can hold the value and round-to-nearest-even otherwise.
//
// Float to integer saturates and maps NaN to 0 (C++ leaves that undefined; torch is
// platform-dependent). Integer to integer wraps, as torch does. Anything to bool is `!= 0`.
// The hot pairs (f32 <-> f16 / bf16 / f8 e4m3fn / f8 e5m2) run the best kernels this CPU has,
// chosen at run time (core/convert_kernels.hpp), so a program built without -march flags uses
// AVX-512 where the CPU has it. Every kernel gives core/float_types.hpp's bits, the same
// rounding the CUDA conversion kernels compile; an f16 NaN widens quietened, as F16C does.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "accel/core/convert_kernels.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/parallel.hpp"

namespace accel {

namespace detail {
template <class T>
inline constexpr bool is_small_float_v =
    std::is_same_v<T, half> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float8_e4m3fn> ||
    std::is_same_v<T, float8_e5m2>;

template <class To, class From>
To saturate_float_to_int(From f) noexcept {
  if (f != f) return To(0);
  constexpr auto lo = static_cast<long double>(std::numeric_limits<To>::min());
  constexpr auto hi = static_cast<long double>(std::numeric_limits<To>::max());
  const auto t = std::trunc(static_cast<long double>(f));
  if (t <= lo) return std::numeric_limits<To>::min();
  if (t >= hi) return std::numeric_limits<To>::max();
  return static_cast<To>(t);
}
}  // namespace detail

/// Converts one element between any two tensor element types (see the header comment).
template <Element To, Element From>
constexpr To convert_value(From v) noexcept {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (detail::is_small_float_v<From>) {
      return static_cast<float>(v) != 0.0f;
    } else {
      return v != From(0);
    }
  } else if constexpr (detail::is_small_float_v<From>) {
    return convert_value<To>(static_cast<float>(v));
  } else if constexpr (detail::is_small_float_v<To>) {
    if constexpr (std::is_same_v<From, double> || std::is_same_v<From, std::int64_t> ||
                  std::is_same_v<From, std::int32_t>) {
      return To(static_cast<double>(v));
    } else {
      return To(static_cast<float>(v));
    }
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    return detail::saturate_float_to_int<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

namespace detail {

/// The hot pairs through this CPU's kernels; op kernels call these on rows.
inline void f16_to_f32(const half* src, float* dst, std::size_t n) noexcept {
  convert_kernels().widen<half>()(src, dst, n);
}
inline void bf16_to_f32(const bfloat16* src, float* dst, std::size_t n) noexcept {
  convert_kernels().widen<bfloat16>()(src, dst, n);
}
inline void f32_to_f16(const float* src, half* dst, std::size_t n) noexcept {
  convert_kernels().narrow<half>()(src, dst, n);
}
inline void f32_to_bf16(const float* src, bfloat16* dst, std::size_t n) noexcept {
  convert_kernels().narrow<bfloat16>()(src, dst, n);
}

template <class To, class From>
void convert_span(const From* src, To* dst, std::size_t n) noexcept {
  if constexpr (std::is_same_v<To, From>) {
    std::memcpy(dst, src, n * sizeof(To));
  } else if constexpr (is_small_float_v<From> && std::is_same_v<To, float>) {
    convert_kernels().widen<From>()(src, dst, n);
  } else if constexpr (std::is_same_v<From, float> && is_small_float_v<To>) {
    convert_kernels().narrow<To>()(src, dst, n);
  } else if constexpr (is_small_float_v<From> && is_small_float_v<To>) {
    // Through f32 in blocks: exact, since every small format embeds in f32.
    constexpr std::size_t block = 256;
    float tmp[block];
    for (std::size_t i = 0; i < n; i += block) {
      const std::size_t m = std::min(block, n - i);
      convert_span<float>(src + i, tmp, m);
      convert_span<To>(tmp, dst + i, m);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = convert_value<To>(src[i]);
  }
}

}  // namespace detail

/// Converts `n` contiguous elements of `src_dtype` at `src` into `dst_dtype` at `dst` (host
/// memory, non-overlapping). Large spans are split across the CPU threads.
inline void convert_elements(DType src_dtype, const void* src, DType dst_dtype, void* dst,
                             std::size_t n) {
  visit_dtype(src_dtype, [&](auto st) {
    using S = typename decltype(st)::type;
    visit_dtype(dst_dtype, [&](auto dt) {
      using D = typename decltype(dt)::type;
      const auto* s = static_cast<const S*>(src);
      auto* d = static_cast<D*>(dst);
      parallel_for(n, std::size_t{1} << 16, [&](std::size_t b, std::size_t e) {
        detail::convert_span<D>(s + b, d + b, e - b);
      });
    });
  });
}

}  // namespace accel
