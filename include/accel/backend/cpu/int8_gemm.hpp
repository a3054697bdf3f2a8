// An exact u8 x s8 -> s32 GEMM for the CPUs where oneDNN's is not (no VNNI: VPMADDUBSW adds two
// products into a saturating 16-bit lane, so a row of 255s against 127s comes back short).
//
//   gemm_u8s8(m, k, n, a, b, c)     c[m, n] = a[m, k] (u8, row-major) x b[k, n] (s8, row-major)
//
// Both operands are widened to 16 bits before they are multiplied: B is packed once per call into
// panels of 32 columns holding the pairs (b[2p][j], b[2p + 1][j]), and VPMADDWD multiplies each
// pair by the matching pair of a row of A and adds the two products into a 32-bit lane, exactly.
// Sums wrap modulo 2^32 as int32 arithmetic does (only past k = 65,793 can they overflow).
// The scalar overload is the reference; the AVX2 one runs on every AVX2 CPU (and under AVX-512
// without VNNI, where oneDNN's kernels are the inexact ones), the NEON one (int8_gemm/neon.hpp) on
// AArch64.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "accel/backend/cpu/int8_gemm/neon.hpp"
#include "accel/backend/cpu/int8_gemm/packing.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/simd_arch.hpp"

namespace accel::backend::cpu {

namespace detail {

/// One row of A against one packed panel: `cols` (<= u8s8_panel) sums into c.
inline void u8s8_panel_row(simd::requires_arch<simd::scalar>, const std::uint8_t* a, std::int64_t k,
                           const std::int16_t* panel, std::int64_t cols, std::int32_t* c) {
  for (std::int64_t j = 0; j < cols; ++j) {
    std::uint32_t sum = 0;  // wraps as the vector lanes do, without signed overflow
    for (std::int64_t q = 0; q < k; ++q) {
      sum += static_cast<std::uint32_t>(static_cast<std::int32_t>(a[q]) * panel[((q / 2) * u8s8_panel + j) * 2 + q % 2]);
    }
    c[j] = static_cast<std::int32_t>(sum);
  }
}

#if ACCEL_SIMD_X86
ACCEL_TARGET_AVX2 inline void u8s8_panel_row(simd::requires_arch<simd::avx2>, const std::uint8_t* a, std::int64_t k,
                                             const std::int16_t* panel, std::int64_t cols, std::int32_t* c) {
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  const std::int64_t pairs = (k + 1) / 2;
  for (std::int64_t p = 0; p < pairs; ++p) {
    const std::int32_t lo = a[2 * p], hi = 2 * p + 1 < k ? a[2 * p + 1] : 0;
    const __m256i ap = _mm256_set1_epi32(lo | (hi << 16));
    const auto* bp = reinterpret_cast<const __m256i*>(panel + p * u8s8_panel * 2);
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(ap, _mm256_loadu_si256(bp + r)));
  }
  alignas(32) std::int32_t sums[u8s8_panel];
  for (int r = 0; r < 4; ++r) _mm256_store_si256(reinterpret_cast<__m256i*>(sums) + r, acc[r]);
  for (std::int64_t j = 0; j < cols; ++j) c[j] = sums[j];
}
#endif

}  // namespace detail

/// The tiers gemm_u8s8 has kernels for, best first (each CPU finds its own architecture's).
using u8s8_ladder = xsimd::arch_list<simd::neon, simd::avx2, simd::scalar>;

/// c[m, n] = a[m, k] x b[k, n] with u8 a, s8 b and exact 32-bit sums, with the kernel of tier
/// `arch` (the caller checked that this CPU runs it); rows and panels are split over the
/// library's threads.
template <class Arch>
void gemm_u8s8(Arch arch, std::int64_t m, std::int64_t k, std::int64_t n, const std::uint8_t* a, const std::int8_t* b,
               std::int32_t* c) {
  if (m <= 0 || n <= 0) return;
  const std::vector<std::int16_t> packed = detail::pack_s8_pairs(k, n, b);
  const std::int64_t panels = (n + detail::u8s8_panel - 1) / detail::u8s8_panel, pairs = (k + 1) / 2;
  // Panel-major: each panel stays in the cache while every row of A meets it.
  parallel_for(static_cast<std::size_t>(panels * m), 16, [&](std::size_t begin, std::size_t end) {
    for (std::size_t t = begin; t < end; ++t) {
      const auto panel = static_cast<std::int64_t>(t) / m, row = static_cast<std::int64_t>(t) % m;
      const std::int64_t j0 = panel * detail::u8s8_panel;
      detail::u8s8_panel_row(arch, a + row * k, k, packed.data() + panel * pairs * detail::u8s8_panel * 2,
                             std::min(detail::u8s8_panel, n - j0), c + row * n + j0);
    }
  });
}

/// gemm_u8s8 at the best tier this CPU runs (core/simd_arch.hpp, under ACCEL_CPU_ARCH).
inline void gemm_u8s8(std::int64_t m, std::int64_t k, std::int64_t n, const std::uint8_t* a, const std::int8_t* b,
                      std::int32_t* c) {
  simd::dispatch<u8s8_ladder>([&](auto arch) { gemm_u8s8(arch, m, k, n, a, b, c); });
}

}  // namespace accel::backend::cpu
