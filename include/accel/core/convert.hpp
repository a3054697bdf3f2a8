// convert_value<To>(from) and convert_elements(...): element conversion between every pair of
// dtypes, exact where the target can hold the value and round-to-nearest-even otherwise.
//
// Float to integer saturates and maps NaN to 0 (C++ leaves that undefined; torch is
// platform-dependent). Integer to integer wraps, as torch does. Anything to bool is `!= 0`.
// The hot pairs (f16/bf16 <-> f32) run vectorized: F16C / AVX2 / AVX-512 when the build
// enables them, a scalar loop otherwise. The scalar rounding onto the small formats is
// core/float_types.hpp's, the same code the CUDA conversion kernels compile.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

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

// ---- vectorized hot pairs --------------------------------------------------------------------

// Outputs past this many bytes bypass the caches (streaming stores), as large memcpy does: the
// destination is written once and not read back soon, so fetching its lines first only doubles
// the memory traffic.
inline constexpr std::size_t streaming_store_bytes = std::size_t{1} << 20;

#if defined(__AVX512F__)
using f32x_t = __m512;
inline constexpr std::size_t f32x_lanes = 16;
inline void store_f32x(float* dst, f32x_t v, bool stream) noexcept {
  if (stream) {
    _mm512_stream_ps(dst, v);
  } else {
    _mm512_storeu_ps(dst, v);
  }
}
#endif

/// Runs the scalar `tail(i)` until dst is 64-byte aligned (when streaming), then `body(i)` per
/// vector of `lanes`, then `tail` again; returns after fencing streamed stores.
template <std::size_t Lanes, class Body, class Tail>
inline void vector_loop(float* dst, std::size_t n, bool stream, Body&& body, Tail&& tail) noexcept {
  std::size_t i = 0;
  if (stream) {
    while (i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 63u) != 0) tail(i++);
  }
  for (; i + Lanes <= n; i += Lanes) body(i);
  for (; i < n; ++i) tail(i);
#if defined(__SSE2__)
  if (stream) _mm_sfence();
#endif
}

inline void f16_to_f32(const half* src, float* dst, std::size_t n) noexcept {
  [[maybe_unused]] const bool stream = n * sizeof(float) >= streaming_store_bytes;
#if defined(__AVX512F__)
  vector_loop<16>(dst, n, stream,
      [&](std::size_t i) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
        store_f32x(dst + i, _mm512_cvtph_ps(h), stream);
      },
      [&](std::size_t i) { dst[i] = static_cast<float>(src[i]); });
#elif defined(__F16C__)
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
#else
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
#endif
}

inline void f32_to_f16(const float* src, half* dst, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i] = half(src[i]);
}

inline void bf16_to_f32(const bfloat16* src, float* dst, std::size_t n) noexcept {
  [[maybe_unused]] const bool stream = n * sizeof(float) >= streaming_store_bytes;
#if defined(__AVX512F__)
  vector_loop<16>(dst, n, stream,
      [&](std::size_t i) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
        store_f32x(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)), stream);
      },
      [&](std::size_t i) { dst[i] = static_cast<float>(src[i]); });
#elif defined(__AVX2__)
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), w);
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
#else
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
#endif
}

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
inline void f8_to_f32(const T* src, float* dst, std::size_t n) noexcept {
  const auto& table = f8_table<T>();
  for (std::size_t i = 0; i < n; ++i) dst[i] = table[src[i].bits];
}

inline void f32_to_bf16(const float* src, bfloat16* dst, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__AVX2__)
  // Round to nearest even: add 0x7fff + lsb, then take the high half; NaNs are quietened with
  // their payload kept, exactly as the scalar path does.
  const __m256i lsb_mask = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), lsb_mask);
    const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(u, quiet), is_nan);
    const __m256i hi = _mm256_srli_epi32(r, 16);
    // Pack 8 x u32 (each < 2^16) into 8 x u16 in order.
    const __m256i packed = _mm256_packus_epi32(hi, hi);
    const __m256i ordered = _mm256_permute4x64_epi64(packed, 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(ordered));
  }
#endif
  for (; i < n; ++i) dst[i] = bfloat16(src[i]);
}

template <class To, class From>
void convert_span(const From* src, To* dst, std::size_t n) noexcept {
  if constexpr (std::is_same_v<To, From>) {
    std::memcpy(dst, src, n * sizeof(To));
  } else if constexpr (std::is_same_v<From, half> && std::is_same_v<To, float>) {
    f16_to_f32(src, dst, n);
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, half>) {
    f32_to_f16(src, dst, n);
  } else if constexpr (std::is_same_v<From, bfloat16> && std::is_same_v<To, float>) {
    bf16_to_f32(src, dst, n);
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, bfloat16>) {
    f32_to_bf16(src, dst, n);
  } else if constexpr ((std::is_same_v<From, float8_e4m3fn> || std::is_same_v<From, float8_e5m2>) &&
                       std::is_same_v<To, float>) {
    f8_to_f32(src, dst, n);
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
