// CachingAllocator: device memory that is freed goes to a per-device cache and is handed out
// again, instead of back to cudaFree.
//
//   void* p = cache.allocate(index, nbytes, stream);    // the caller has made `index` current
//   cache.deallocate(index, p, stream);                  // kept, with an event on `stream`
//   cache.empty_cache(index);  cache.cached_bytes(index);
//
// Why: cudaFree synchronizes the whole device, so a pipeline that frees a block's buffers while
// the next block computes (offloaded weights brought in per call) would stall on every free.
// Sizes are rounded (512 B steps below 1 MiB, 2 MiB steps above) and a cached block serves a
// request it fits without wasting more than half of it. A block freed while work on it may still
// be queued records an event on the freeing stream; the stream that gets it next waits for that
// event on the GPU (no host wait), so reuse across streams is ordered too. When cudaMalloc fails,
// the device's cache is released and the request tried once more.
//
// The memory counters of core/memory_stats.hpp count live storages; cached bytes are the
// difference between that and what the process holds on the device (cached_bytes()).
#pragma once

#if defined(ACCEL_WITH_CUDA)

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "accel/core/memory_stats.hpp"

namespace accel::cuda {

/// Per-device caches of freed device memory (see the header comment).
class CachingAllocator {
 public:
  /// Requests below this are rounded to small_step, above it to large_step.
  static constexpr std::size_t small_limit = std::size_t{1} << 20;
  static constexpr std::size_t small_step = 512;
  static constexpr std::size_t large_step = std::size_t{2} << 20;

  static std::size_t round(std::size_t nbytes) {
    const std::size_t n = nbytes ? nbytes : 1;
    const std::size_t step = n < small_limit ? small_step : large_step;
    return (n + step - 1) / step * step;
  }

  /// A block of at least `nbytes` on the current device `index`, ordered after the work that
  /// used it last (`stream` waits for it); nullptr when cudaMalloc fails even with the cache
  /// released (the error is left for the caller to read).
  void* allocate(int index, std::size_t nbytes, cudaStream_t stream, cudaError_t* error) {
    const std::size_t size = round(nbytes);
    std::lock_guard lock(mu_);
    auto& free = free_[static_cast<std::size_t>(index)];
    if (auto it = free.lower_bound(size); it != free.end() && it->first <= 2 * size) {
      const Cached c = it->second;
      free.erase(it);
      cached_[static_cast<std::size_t>(index)] -= c.size;
      if (c.freed) {
        (void)cudaStreamWaitEvent(stream, c.freed, 0);
        events_[static_cast<std::size_t>(index)].push_back(c.freed);
      }
      live_.emplace(c.ptr, c.size);
      return c.ptr;
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      release_locked(index);
      e = cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
      if (error) *error = e;
      (void)cudaGetLastError();
      return nullptr;
    }
    live_.emplace(p, size);
    return p;
  }

  /// Puts `p` (from allocate on device `index`) into the cache, after the work queued on `stream`.
  void deallocate(int index, void* p, cudaStream_t stream) noexcept {
    if (!p) return;
    std::lock_guard lock(mu_);
    const auto it = live_.find(p);
    if (it == live_.end()) {
      if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();  // not ours: give it back
      return;
    }
    Cached c{p, it->second, nullptr};
    live_.erase(it);
    auto& spare = events_[static_cast<std::size_t>(index)];
    if (!spare.empty()) {
      c.freed = spare.back();
      spare.pop_back();
    } else if (cudaEventCreateWithFlags(&c.freed, cudaEventDisableTiming) != cudaSuccess) {
      (void)cudaGetLastError();
      c.freed = nullptr;
    }
    if (c.freed && cudaEventRecord(c.freed, stream) != cudaSuccess) {
      // No event (the runtime unloading at exit, say): the block goes back to the driver.
      (void)cudaGetLastError();
      if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
      return;
    }
    free_[static_cast<std::size_t>(index)].emplace(c.size, c);
    cached_[static_cast<std::size_t>(index)] += c.size;
  }

  /// Gives every cached block of device `index` back to the driver (the caller has made it current).
  void empty_cache(int index) {
    std::lock_guard lock(mu_);
    release_locked(index);
  }
  /// Bytes held in the cache of device `index`.
  std::size_t cached_bytes(int index) const {
    std::lock_guard lock(mu_);
    return cached_[static_cast<std::size_t>(index)];
  }

 private:
  struct Cached {
    void* ptr;
    std::size_t size;
    cudaEvent_t freed;  ///< recorded on the stream that freed it
  };

  void release_locked(int index) {
    auto& free = free_[static_cast<std::size_t>(index)];
    for (auto& [size, c] : free) {
      if (c.freed) (void)cudaEventSynchronize(c.freed);
      if (cudaFree(c.ptr) != cudaSuccess) (void)cudaGetLastError();
      if (c.freed) events_[static_cast<std::size_t>(index)].push_back(c.freed);
    }
    free.clear();
    cached_[static_cast<std::size_t>(index)] = 0;
  }

  mutable std::mutex mu_;
  std::array<std::multimap<std::size_t, Cached>, accel::detail::max_cuda_devices> free_{};
  std::array<std::size_t, accel::detail::max_cuda_devices> cached_{};
  std::unordered_map<void*, std::size_t> live_;
  std::array<std::vector<cudaEvent_t>, accel::detail::max_cuda_devices> events_{};  ///< spare events per device
};

}  // namespace accel::cuda

#endif  // ACCEL_WITH_CUDA
