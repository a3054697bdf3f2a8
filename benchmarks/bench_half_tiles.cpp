// The half-precision prompt tiles (backend/cpu/gemv) of every tier this CPU runs, next to the FMA
// peak of that tier's vector width measured in the same run: 64 activation rows against f16 and
// bf16 weights of the 483M anchor model's shapes, with the weights warm (one matrix, in the
// cache after the first repetition) and cold (a different copy each repetition, from a pool
// larger than the last-level cache, as a model's weights come from DRAM in a forward).
//
//   bench_half_tiles [--rows 64] [--reps 15] [--pool-mib 256]
//
// Prints GFLOPS (medians) and their share of the peak: 256-bit FMAs for avx2, 512-bit for the
// AVX-512 tiers, and for bf16 pairs (VDPBF16PS, two products a lane) the dot-product peak.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "accel/backend/cpu/gemv.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/simd_arch.hpp"

#if ACCEL_SIMD_X86
#include <immintrin.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#if ACCEL_SIMD_X86
// Twelve independent chains per thread: two FMA ports x 4-6 cycles of latency.
ACCEL_TARGET_AVX2 float fma_chains_256(long iters) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.9999f), y = _mm256_set1_ps(0.0001f);
  for (long t = 0; t < iters; ++t) {
#pragma GCC unroll 12
    for (auto& v : a) v = _mm256_fmadd_ps(v, x, y);
  }
  float s = 0;
  for (auto& v : a) s += _mm256_cvtss_f32(v);
  return s;
}
ACCEL_TARGET_AVX512 float fma_chains_512(long iters) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.9999f), y = _mm512_set1_ps(0.0001f);
  for (long t = 0; t < iters; ++t) {
#pragma GCC unroll 12
    for (auto& v : a) v = _mm512_fmadd_ps(v, x, y);
  }
  float s = 0;
  for (auto& v : a) s += _mm512_cvtss_f32(v);
  return s;
}
ACCEL_TARGET_AVX512_BF16 float dpbf16_chains(long iters) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const auto x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3000);
  for (long t = 0; t < iters; ++t) {
#pragma GCC unroll 12
    for (auto& v : a) v = _mm512_dpbf16_ps(v, x, y);
  }
  float s = 0;
  for (auto& v : a) s += _mm512_cvtss_f32(v);
  return s;
}
#endif

/// GFLOPS of `chains(iters)` on every thread at once (flops = 12 chains x `flops_per_op`), the
/// best of five: a peak is what the core can do, so a slow run is the machine's noise.
template <class F>
double peak_gflops(F chains, double flops_per_op) {
  const long iters = 20'000'000;
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    const auto t0 = Clock::now();
    float sink = 0;
#if defined(_OPENMP)
#pragma omp parallel num_threads(accel::num_threads()) reduction(+ : sink)
#endif
    sink += chains(iters);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (sink == 12345.f) std::puts("");  // keeps the chains alive
    best = std::max(best, 12.0 * flops_per_op * static_cast<double>(iters) * accel::num_threads() / s / 1e9);
  }
  return best;
}

struct Shape {
  int n, k;
};

}  // namespace

int main(int argc, char** argv) {
  int rows = 64, reps = 15, pool_mib = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rows") rows = std::atoi(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else if (a == "--pool-mib") pool_mib = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_half_tiles [--rows 64] [--reps 15] [--pool-mib 256]\n");
      return 2;
    }
  }
  using namespace accel;
  std::printf("threads %d, %d activation rows, medians of %d; cold: weights from a %d MiB pool\n", num_threads(), rows,
              reps, pool_mib);
#if ACCEL_SIMD_X86
  const Shape shapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {256, 2048}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::printf("%-12s %-5s %-12s %10s %10s %8s %8s\n", "tier", "dtype", "n x k", "warm", "cold", "peak", "cold/pk");
  backend::cpu::gemv_ladder::for_each([&](auto arch) {
    using A = decltype(arch);
    if constexpr (std::is_same_v<A, simd::scalar> || std::is_same_v<A, simd::neon>) {
      return;
    } else {
      if (!A::available()) return;
      double fma_peak = 0, dp_peak = 0;
      if constexpr (std::is_base_of_v<simd::avx512, A>) {
        fma_peak = peak_gflops(fma_chains_512, 32.0);
      } else {
        fma_peak = peak_gflops(fma_chains_256, 16.0);
      }
      if constexpr (std::is_base_of_v<simd::avx512_bf16, A>) dp_peak = peak_gflops(dpbf16_chains, 64.0);
      for (DType dt : {DType::f16, DType::bf16}) {
        const double peak = dt == DType::bf16 && dp_peak > 0 ? dp_peak : fma_peak;
        for (const Shape s : shapes) {
          std::vector<std::uint16_t> xh(static_cast<std::size_t>(rows) * s.k);
          for (auto& v : xh) v = dt == DType::f16 ? half(u(rng)).bits : bfloat16(u(rng)).bits;
          const std::size_t per = static_cast<std::size_t>(s.n) * s.k;
          const std::size_t copies = std::max<std::size_t>(2, (std::size_t(pool_mib) << 20) / (per * 2));
          std::vector<std::uint16_t> w(per * copies);
          for (auto& v : w) v = dt == DType::f16 ? half(0.1f * u(rng)).bits : bfloat16(0.1f * u(rng)).bits;
          std::vector<float> out(static_cast<std::size_t>(rows) * s.n);
          double rate[2];
          for (int cold = 0; cold < 2; ++cold) {
            std::vector<double> t;
            for (int r = 0; r < reps; ++r) {
              const std::uint16_t* wp = w.data() + (cold ? per * (static_cast<std::size_t>(r) % copies) : 0);
              const auto t0 = Clock::now();
              backend::cpu::gemv_at_half(arch, xh.data(), rows, s.k, wp, dt, static_cast<std::size_t>(s.k) * 2, s.n,
                                         nullptr, out.data());
              t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
            }
            rate[cold] = 2.0 * rows * s.n * s.k / median(t) / 1e9;
          }
          const std::string shape = std::to_string(s.n) + "x" + std::to_string(s.k);
          std::printf("%-12s %-5s %-12s %10.1f %10.1f %8.1f %7.0f%%\n", A::name(), std::string(dtype_name(dt)).c_str(), shape.c_str(), rate[0],
                      rate[1], peak, 100.0 * rate[1] / peak);
        }
      }
    }
  });
#else
  std::printf("no x86 tiers on this CPU: nothing to measure\n");
#endif
  return 0;
}
