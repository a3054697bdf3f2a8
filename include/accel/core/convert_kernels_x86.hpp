// x86 conversion kernels: AVX2 (8 lanes) and AVX-512 (16 lanes) loops around the lane code of
// core/convert_lanes.hpp, with the hardware conversions where they give the same bits.
//
//   widen(requires_arch<avx2 | avx512>, src, dst, n)      T -> f32; f16 through VCVTPH2PS
//   narrow(requires_arch<avx2 | avx512>, src, dst, n)     f32 -> T; f16 through VCVTPS2PH
//   narrow(requires_arch<avx512_bf16>, src, bf16*, n)     VCVTNEPS2BF16, subnormals fixed up
//
// Each function carries its ISA's target attribute (core/simd_arch.hpp), so it compiles in a
// translation unit built for baseline x86-64 and runs only where simd::dispatch chose its tag.
// Outputs of at least streaming_store_bytes are written with streaming stores from a 64-byte
// boundary on, as large memcpy does: fetching destination lines first would double the traffic.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "accel/core/convert_lanes.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's own _mm512_cvtps_ph
#endif

namespace accel::detail {

inline constexpr std::size_t streaming_store_bytes = std::size_t{1} << 20;

/// Where a widening loop's vector part starts and ends, and whether it streams: when it does,
/// the scalar head runs until dst + head is 64-byte aligned.
struct widen_plan {
  std::size_t head = 0, end = 0;
  bool stream = false;
};

inline widen_plan plan_widen(const float* dst, std::size_t n, std::size_t lanes) noexcept {
  widen_plan p;
  p.stream = n * sizeof(float) >= streaming_store_bytes;
  if (p.stream) {
    const std::size_t misaligned = (reinterpret_cast<std::uintptr_t>(dst) & 63u) / sizeof(float);
    p.head = misaligned ? std::min(n, 16 - misaligned) : 0;
  }
  p.end = p.head + (n - p.head) / lanes * lanes;
  return p;
}

template <class T>
void widen_scalar(const T* src, float* dst, std::size_t begin, std::size_t end) noexcept {
  for (std::size_t i = begin; i < end; ++i) dst[i] = small_lanes<T>::widen_one(src[i]);
}

// ---- one register: the only code that differs between the ISAs ---------------------------------

template <class T>
ACCEL_TARGET_AVX2 ACCEL_LANES __m256i widen_x(simd::requires_arch<simd::avx2>, const T* src) noexcept {
  const auto* p = reinterpret_cast<const __m128i*>(src);
  auto v = (typename lanes<8>::i32)(sizeof(T) == 1 ? _mm256_cvtepu8_epi32(_mm_loadl_epi64(p))
                                                   : _mm256_cvtepu16_epi32(_mm_loadu_si128(p)));
  small_lanes<T>::widen(v);
  return (__m256i)v;
}
ACCEL_TARGET_AVX2 ACCEL_LANES __m256i widen_x(simd::requires_arch<simd::avx2>, const half* src) noexcept {
  return _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
}
template <class T>
ACCEL_TARGET_AVX512 ACCEL_LANES __m512i widen_x(simd::requires_arch<simd::avx512>, const T* src) noexcept {
  __m512i codes;
  if constexpr (sizeof(T) == 1) {
    codes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  } else {
    codes = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  }
  auto v = (typename lanes<16>::i32)codes;
  small_lanes<T>::widen(v);
  return (__m512i)v;
}
ACCEL_TARGET_AVX512 ACCEL_LANES __m512i widen_x(simd::requires_arch<simd::avx512>, const half* src) noexcept {
  return _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))));
}

ACCEL_TARGET_AVX2 ACCEL_LANES void store_x(float* dst, __m256i v, bool stream) noexcept {
  if (stream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), v);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), v);
  }
}
ACCEL_TARGET_AVX512 ACCEL_LANES void store_x(float* dst, __m512i v, bool stream) noexcept {
  if (stream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), v);
  } else {
    _mm512_storeu_si512(dst, v);
  }
}

template <class T>
ACCEL_TARGET_AVX2 ACCEL_LANES void narrow_x(simd::requires_arch<simd::avx2>, const float* src, T* dst) noexcept {
  auto v = (typename lanes<8>::i32)_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  small_lanes<T>::narrow(v);
  const __m256i codes = (__m256i)v;  // each lane < 2^16: the unsigned packs keep it
  const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
  if constexpr (sizeof(T) == 1) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(words, words));
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), words);
  }
}
ACCEL_TARGET_AVX2 ACCEL_LANES void narrow_x(simd::requires_arch<simd::avx2>, const float* src, half* dst) noexcept {
  const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), h);
}
template <class T>
ACCEL_TARGET_AVX512 ACCEL_LANES void narrow_x(simd::requires_arch<simd::avx512>, const float* src, T* dst) noexcept {
  auto v = (typename lanes<16>::i32)_mm512_loadu_si512(src);
  small_lanes<T>::narrow(v);
  if constexpr (sizeof(T) == 1) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi32_epi8((__m512i)v));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16((__m512i)v));
  }
}
ACCEL_TARGET_AVX512 ACCEL_LANES void narrow_x(simd::requires_arch<simd::avx512>, const float* src, half* dst) noexcept {
  const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h);
}

/// VCVTNEPS2BF16 rounds as encode_from_float does (NaNs quietened alike) except that it
/// flushes f32 subnormals to zero; a register holding one takes the integer rounding instead.
ACCEL_TARGET_AVX512_BF16 ACCEL_LANES void narrow_x(simd::requires_arch<simd::avx512_bf16>, const float* src,
                                                   bfloat16* dst) noexcept {
  const __m512 f = _mm512_loadu_ps(src);
  const __m512i u = _mm512_castps_si512(f);
  if (_mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)) & _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff)))
      [[unlikely]] {
    narrow_x(simd::avx512{}, src, dst);
  } else {
    const __m256bh h = _mm512_cvtneps_pbh(f);
    std::memcpy(static_cast<void*>(dst), &h, sizeof h);
  }
}

// ---- the loops: whole registers, compiled once per ISA -----------------------------------------

template <class T>
ACCEL_TARGET_AVX2 void widen_body(simd::avx2 a, const T* src, float* dst, std::size_t n, bool stream) noexcept {
  for (std::size_t i = 0; i < n; i += 8) store_x(dst + i, widen_x(a, src + i), stream);
}
template <class T>
ACCEL_TARGET_AVX512 void widen_body(simd::avx512 a, const T* src, float* dst, std::size_t n, bool stream) noexcept {
  for (std::size_t i = 0; i < n; i += 16) store_x(dst + i, widen_x(a, src + i), stream);
}

template <class T>
ACCEL_TARGET_AVX2 void narrow_body(simd::avx2 a, const float* src, T* dst, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; i += 8) narrow_x(a, src + i, dst + i);
}
template <class T>
ACCEL_TARGET_AVX512 void narrow_body(simd::avx512 a, const float* src, T* dst, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; i += 16) narrow_x(a, src + i, dst + i);
}
template <class T>
ACCEL_TARGET_AVX512_BF16 void narrow_body(simd::avx512_bf16 a, const float* src, T* dst, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; i += 16) narrow_x(a, src + i, dst + i);
}

/// Scalar head (up to the streaming alignment), Arch's loop over whole registers, scalar tail.
template <class Arch, class T>
void widen_span(const T* src, float* dst, std::size_t n) noexcept {
  const widen_plan p = plan_widen(dst, n, Arch::alignment() / sizeof(float));
  widen_scalar(src, dst, 0, p.head);
  widen_body(Arch{}, src + p.head, dst + p.head, p.end - p.head, p.stream);
  widen_scalar(src, dst, p.end, n);
  if (p.stream) _mm_sfence();
}

template <class Arch, class T>
void narrow_span(const float* src, T* dst, std::size_t n) noexcept {
  const std::size_t end = n / (Arch::alignment() / sizeof(float)) * (Arch::alignment() / sizeof(float));
  narrow_body(Arch{}, src, dst, end);
  for (std::size_t i = end; i < n; ++i) dst[i] = T(src[i]);
}

// ---- the overloads the fallback ladder picks from -----------------------------------------------

template <class T>
void widen(simd::requires_arch<simd::avx2>, const T* src, float* dst, std::size_t n) noexcept {
  widen_span<simd::avx2>(src, dst, n);
}
template <class T>
void widen(simd::requires_arch<simd::avx512>, const T* src, float* dst, std::size_t n) noexcept {
  widen_span<simd::avx512>(src, dst, n);
}
template <class T>
void narrow(simd::requires_arch<simd::avx2>, const float* src, T* dst, std::size_t n) noexcept {
  narrow_span<simd::avx2>(src, dst, n);
}
template <class T>
void narrow(simd::requires_arch<simd::avx512>, const float* src, T* dst, std::size_t n) noexcept {
  narrow_span<simd::avx512>(src, dst, n);
}
inline void narrow(simd::requires_arch<simd::avx512_bf16>, const float* src, bfloat16* dst, std::size_t n) noexcept {
  narrow_span<simd::avx512_bf16>(src, dst, n);
}

}  // namespace accel::detail

#pragma GCC diagnostic pop

#endif  // ACCEL_SIMD_X86
