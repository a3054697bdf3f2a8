// The CPU threads of the kernels:
//
//   parallel_for(n, grain, f)   f(begin, end) over disjoint chunks of [0, n) on the CPU threads
//                               (OpenMP when the program is built with it, which accel::accel
//                               arranges), serially when n is too small for threads to pay
//   num_threads()               threads a kernel may use (torch.get_num_threads)
//   set_num_threads(n)          the same for this thread's later kernels and oneDNN's (torch.set_num_threads)
//   physical_cores()            cores this machine has, hyper-threads not counted (psutil.cpu_count(logical=False))
//   affinity_cpus()             logical CPUs this process may run on (its affinity mask)
#pragma once

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <sched.h>
#endif

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

/// Threads for the kernels this thread runs from now on (and oneDNN's, which reads OpenMP's
/// setting); at least one.
inline void set_num_threads(int n) noexcept {
#if defined(_OPENMP)
  omp_set_num_threads(std::max(n, 1));
#else
  (void)n;
#endif
}

/// Logical CPUs in this process's affinity mask (what a launcher that binds processes left it),
/// or the machine's when the mask cannot be read.
inline int affinity_cpus() noexcept {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(CPU_COUNT(&set), 1);
#endif
  return std::max(static_cast<int>(std::thread::hardware_concurrency()), 1);
}

/// The machine's cores without their hyper-threads: distinct (package, core) pairs in sysfs, or
/// the logical CPU count where sysfs does not say.
inline int physical_cores() {
  const unsigned logical = std::max(std::thread::hardware_concurrency(), 1u);
  std::set<std::pair<std::string, std::string>> cores;
  for (unsigned cpu = 0; cpu < logical; ++cpu) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream package(dir + "physical_package_id"), core(dir + "core_id");
    std::string p, c;
    if (!(package >> p) || !(core >> c)) return static_cast<int>(logical);
    cores.emplace(std::move(p), std::move(c));
  }
  return std::max(static_cast<int>(cores.size()), 1);
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
