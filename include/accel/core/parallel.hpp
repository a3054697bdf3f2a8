// parallel_for(n, grain, f): calls f(begin, end) over disjoint chunks of [0, n) on the CPU
// threads (OpenMP when the program is built with it, which accel::accel arranges), serially when
// n is small enough that threads would cost more than they save.
#pragma once

#include <algorithm>
#include <cstddef>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace accel {

/// Threads the CPU kernels use.
inline int num_threads() noexcept {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/// Runs f(begin, end) on chunks of at least `grain` items; f must not throw.
template <class F>
void parallel_for(std::size_t n, std::size_t grain, F&& f) {
  if (n == 0) return;
  const std::size_t max_chunks = std::max<std::size_t>(1, n / std::max<std::size_t>(grain, 1));
  const auto threads = static_cast<std::size_t>(num_threads());
  const std::size_t chunks = std::min(max_chunks, threads);
#if defined(_OPENMP)
  if (chunks > 1 && !omp_in_parallel()) {
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
    for (std::ptrdiff_t c = 0; c < static_cast<std::ptrdiff_t>(chunks); ++c) {
      const std::size_t b = n * static_cast<std::size_t>(c) / chunks;
      const std::size_t e = n * static_cast<std::size_t>(c + 1) / chunks;
      f(b, e);
    }
    return;
  }
#endif
  (void)chunks;
  f(std::size_t{0}, n);
}

}  // namespace accel
